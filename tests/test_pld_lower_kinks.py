"""The tangent (lower) construction at a kink of the profile inside a grid interval.

A Poisson-subsampled Gaussian with a tiny sample rate ``q`` has almost all its mass at losses
just above ``log(1 - q)``: its privacy profile has a sharp kink at ``x = 1 - q``.  When the kink
lies late in its grid interval, the left tangent reaches 0 at the next grid point; the plain
tangent polygon ended there and certified a lower bound of 0 on every delta (found on sigma =
0.5, q = 1e-5, grid step 1.283e-5).  The lower bound now follows the right tangent on such
intervals.  Checked against the closed-form privacy profile of the pair, written out here
independently of dpplugins: for ``P = (1 - q) N(0, s^2) + q N(1, s^2)`` and ``Q = N(0, s^2)``
the loss ``log(1 - q + q exp((2x - 1) / (2 s^2)))`` is increasing in ``x``, so ``delta(eps) =
P(X > t) - e^eps Q(X > t)`` at its level set ``t`` (Balle & Wang 2018, Thm 5, for the form of
the hockey-stick divergence of a monotone loss), and likewise for the swapped pair.
"""

import math

import pytest
from scipy.stats import norm

import dpplugins.pld.grid as grid
from dpplugins.pld import PrivacyLossDistribution as PLD


def _subsampled_gaussian_delta(eps, sigma, q):
    """max over both orders of the pair; closed form (see the module docstring)."""
    s2 = sigma * sigma
    if math.exp(eps) > 1 - q:
        t = s2 * math.log((math.expm1(eps) + q) / q) + 0.5
        remove = ((1 - q) * norm.sf(t / sigma) + q * norm.sf((t - 1) / sigma)
                  - math.exp(eps) * norm.sf(t / sigma))
    else:
        remove = -math.expm1(eps)
    add = 0.0
    if math.exp(-eps) > 1 - q:
        t = s2 * math.log((math.expm1(-eps) + q) / q) + 0.5
        add = norm.cdf(t / sigma) - math.exp(eps) * ((1 - q) * norm.cdf(t / sigma)
                                                     + q * norm.cdf((t - 1) / sigma))
    return max(remove, add)


@pytest.fixture
def mixed_calls(monkeypatch):
    """How often the right-tangent choice carried a polygon further (the code under test)."""
    calls = []
    original = grid._mixed_tangent_vertices

    def spy(*args):
        result = original(*args)
        calls.append(result is not None)
        return result
    monkeypatch.setattr(grid, "_mixed_tangent_vertices", spy)
    return calls


#: one quick case; the rest (0.5 - 3 s each) in the slow set
CASES = [(0.5, 1e-5, 4e-5)]
MORE = [(0.5, 1e-5, 1.283e-5), (0.5, 1e-5, 2e-5), (1.0, 1e-5, 3e-5), (0.5, 3e-6, 1e-5),
        (1.0, 3e-6, 2e-5), (2.0, 1e-4, 3e-4), (1.0, 1e-4, 1.5e-4)]


def _check(sigma, q, h, mixed_calls):
    pld = PLD.from_poisson_subsampled_gaussian(sigma, q, value_discretization_interval=h)
    for eps in (0.0, 0.5 * q, 0.1, 0.3, 0.5, 1.0, 2.0):
        exact = _subsampled_gaussian_delta(eps, sigma, q)
        if exact < 1e-12:
            continue
        b = pld.delta_for_epsilon(eps)
        assert b.lower <= exact * (1 + 1e-12) and exact <= b.upper * (1 + 1e-9)
        # near the kink the lower bound stays loose (a grid PMF cannot put the kink's loss
        # between grid points, and a post-processing may only round it down); away from it
        # the bound is tight up to rounding (about 1e-15 absolute); it used to be 0 there
        if eps >= 0.1:
            assert b.lower >= 0.99 * exact - 1e-14
    # the lower-bound PMFs are built when a query first needs them
    assert any(mixed_calls), "the plain polygon did not end early: the case tests nothing"


@pytest.mark.parametrize("sigma,q,h", CASES)
def test_lower_bound_at_a_kink_inside_a_grid_interval(sigma, q, h, mixed_calls):
    _check(sigma, q, h, mixed_calls)


@pytest.mark.slow
@pytest.mark.parametrize("sigma,q,h", MORE)
def test_lower_bound_at_a_kink_more_settings(sigma, q, h, mixed_calls):
    _check(sigma, q, h, mixed_calls)


@pytest.mark.slow
def test_composed_lower_bound_on_the_grid_where_it_was_zero(mixed_calls):
    """100 steps on the grid where the lower bound was 0.  Independent checks: the lower bound
    may not exceed the upper one, and the true delta of 100 steps is at least that of one step
    (the composition reveals the step: post-processing), about 1e-12 here against about 1e-10
    for the composition; the old construction's lower bound, 0, failed both."""
    pld = PLD.from_poisson_subsampled_gaussian(0.5, 1e-5, value_discretization_interval=1.283e-5)
    composed = pld.self_compose(100)
    b = composed.delta_for_epsilon(0.91)
    assert 0.99 * b.upper <= b.lower <= b.upper
    assert b.lower >= _subsampled_gaussian_delta(0.91, 0.5, 1e-5) > 0


def _random_settings(count, seed):
    """Seeded random (sigma, q, h): sigma in [0.2, 50], q in [1e-6, 0.5], h from q / 100 to
    the larger of 30 q and 1e-3 (at most 0.2), log-uniform; settings whose grid needs more than
    300,000 bins are skipped.  Most such grids are coarse enough that the plain polygon ends
    early, so the right-tangent path is exercised on a wide range of profiles."""
    import numpy as np

    from dpplugins.mechanisms import poisson_subsampled_gaussian
    from dpplugins.pld.distribution import component_bins

    rng = np.random.default_rng(seed)
    out = []
    while len(out) < count:
        sigma = float(np.exp(rng.uniform(math.log(0.2), math.log(50))))
        q = float(np.exp(rng.uniform(math.log(1e-6), math.log(0.5))))
        h = min(float(np.exp(rng.uniform(math.log(q / 100), math.log(max(30 * q, 1e-3))))), 0.2)
        if component_bins(poisson_subsampled_gaussian(sigma, q), h) <= 3e5:
            out.append((sigma, q, h))
    return out


@pytest.mark.slow
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_random_settings_keep_both_bounds_on_their_side_of_the_closed_form(mixed_calls):
    """A hostile sweep: 60 seeded random settings, each bound checked at 32 epsilons from 0
    through the kink region (up to 3 q) to 10.  The lower bound may not exceed the closed form
    (relative 1e-12: the closed form's own rounding), the upper bound may not fall below it
    (relative 1e-9), and no query may leak a floating-point warning (a cached composition
    tilted towards another epsilon overflowed here and warned).  1,100 such settings were
    checked the same way when the construction was written, with no violation."""
    import numpy as np

    for sigma, q, h in _random_settings(60, seed=20261203):
        pld = PLD.from_poisson_subsampled_gaussian(sigma, q, value_discretization_interval=h)
        epsilons = list(np.linspace(0.0, 3 * q, 7)) + list(np.geomspace(1e-3, 10.0, 25))
        for eps in epsilons:
            exact = _subsampled_gaussian_delta(float(eps), sigma, q)
            if exact < 1e-300:
                continue
            b = pld.delta_for_epsilon(float(eps))
            assert b.lower <= exact * (1 + 1e-12), (sigma, q, h, eps, b, exact)
            assert exact <= b.upper * (1 + 1e-9), (sigma, q, h, eps, b, exact)
    assert sum(mixed_calls) >= 30, "the sweep did not reach the right-tangent path"


@pytest.mark.parametrize("h", [60.0, 99.0, 120.0, 351.0, 700.0, 701.0, 1000.0, 1e5])
@pytest.mark.parametrize("sigma, q", [(1.0, 0.5), (0.05, 1.0), (0.3, 0.2)])
def test_grid_steps_past_the_exponential_range_give_finite_valid_bounds(h, sigma, q):
    """Grid steps above about 50 put grid points (a multiple of h above the mechanism's largest
    loss, at most 600) where e^(eps + h) exceeds double's range: the tangent construction
    overflowed, and inf * 0 put a NaN and then an infinite mass into the lower PMF (the pld
    accountant coarsens that far for about 10^12 steps).  Now its grid stops below the
    overflow, or it is the identity pair: finite masses, no RuntimeWarning, and both bounds on
    their side of the closed form (one step, and three steps of the Gaussian, q = 1, whose
    composition is the Gaussian of sigma / sqrt(3))."""
    import warnings

    import numpy as np
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        pld = PLD.from_poisson_subsampled_gaussian(sigma, q, value_discretization_interval=h)
        for direction in ("remove", "add"):
            component = pld._directions[direction][0][0]
            assert np.all(np.isfinite(component.lower.pmf))
            assert np.all(np.isfinite(component.upper.pmf))
        for eps in (0.0, 0.5, 1.0, 5.0):
            exact = _subsampled_gaussian_delta(eps, sigma, q)
            bounds = pld.delta_for_epsilon(eps)
            assert bounds.lower <= exact + 1e-12 and exact <= bounds.upper + 1e-12
        if q == 1.0:
            three = pld.self_compose(3).delta_for_epsilon(1.0)
            exact = _subsampled_gaussian_delta(1.0, sigma / math.sqrt(3), 1.0)
            assert three.lower <= exact + 1e-12 and exact <= three.upper + 1e-12


@pytest.mark.parametrize("eps0", [650.0, 690.0, 700.0])
@pytest.mark.parametrize("k", [2, 5])
@pytest.mark.parametrize("h", [1e-3, 1e-2, 0.05])
def test_lower_construction_never_holds_more_than_all_the_mass(eps0, k, h):
    """A profile's value at ``x = 0`` is the total P-mass, at most 1, so the tangent
    construction's P-masses (plus its mass at +inf) must sum to at most 1 -- checked by the
    definition, no reference needed.  Randomized response read as zero-out at eps0 = 650-700,
    add direction: an atom at -log 2 just below a grid point and the other beyond the grid (a
    loss of eps0 - log k); its polygon rose again after the atom, the hull's rising end was
    dropped while the flat end kept the higher value, and the construction held a P-mass of up
    to 1.022 (h = 0.05).  Composed twice, the lower bound on delta(0.3) was then above the
    exact 1 - 1/k^2 (a certified lower bound above the truth)."""
    from dpplugins import mechanisms
    from dpplugins.mechanisms.randomized_response import zero_out_rr_pair
    pair = mechanisms.discrete_pair(*zero_out_rr_pair(eps0, k))
    pld = PLD.from_mechanism(pair, value_discretization_interval=h)
    lower = pld._directions["add"][0][0].lower
    assert float(sum(lower.pmf)) + lower.inf_mass <= 1 + 1e-12
    # two compositions, add direction: the reports of the k - 1 other buckets (P-mass
    # (k-1)/k each time, loss about eps0 - log k) give delta(0.3) = 1 - 1/k^2 up to e^-600
    bounds = pld.self_compose(2).delta_for_epsilon(0.3)
    assert bounds.lower <= 1 - 1 / k ** 2 <= bounds.upper


@pytest.mark.parametrize("h", [1e-3, 1e-2, 0.05, 0.3])
def test_lower_construction_of_subsampled_laplace_holds_at_most_all_the_mass(h):
    """The same check for Laplace noise of scale 1/650 on a Poisson subsample of rate 0.9
    (remove direction, losses up to about 650, beyond the grid): the old hull held a P-mass of
    up to 1.022 (h = 0.3)."""
    from dpplugins import mechanisms
    pld = PLD.from_mechanism(mechanisms.poisson_subsampled_laplace(1 / 650, 0.9, 1.0),
                             value_discretization_interval=h)
    for direction in ("remove", "add"):
        lower = pld._directions[direction][0][0].lower
        assert float(sum(lower.pmf)) + lower.inf_mass <= 1 + 1e-12


def _epsilon_delta_exact(eps, delta, steps, at):
    """delta(at) of ``steps`` compositions of the (eps, delta) pair ``P = (delta, a, b, 0)``,
    ``Q = (0, b, a, delta)`` (``a = (1 - delta)/(1 + e^-eps)``, ``b = a e^-eps``), by
    enumerating the outcome sequences (mpmath, 40 digits)."""
    import itertools

    import mpmath as mp
    mp.mp.dps = 40
    t = mp.e ** (-mp.mpf(eps))
    a = (1 - mp.mpf(delta)) / (1 + t)
    b = a * t
    p, q = [mp.mpf(delta), a, b, mp.mpf(0)], [mp.mpf(0), b, a, mp.mpf(delta)]
    total = mp.mpf(0)
    for outcome in itertools.product(range(4), repeat=steps):
        value = mp.fprod(p[i] for i in outcome) - mp.e ** mp.mpf(at) * mp.fprod(q[i] for i in outcome)
        total += max(value, 0)
    return float(total)


@pytest.mark.parametrize("eps,delta", [(0.5, 0.05), (2.0, 1e-3), (1.0, 0.3)])
@pytest.mark.parametrize("h", [1e-3, 0.1])
def test_lower_construction_leaves_out_the_q_mass_at_minus_infinity(eps, delta, h):
    """An (eps, delta) pair has Q-mass delta where P vanishes (loss -inf).  The construction put
    it at the first grid point, where its gap term made a P-mass of ``x_0 delta`` that does not
    exist (total 1.030 at eps = 0.5, delta = 0.05), and four compositions had lower bounds above
    the exact delta (then capped at the upper bound).  Checked against the definition (total
    P-mass at most 1) and exact enumeration."""
    from dpplugins import mechanisms
    t = math.exp(-eps)
    a, b = (1 - delta) / (1 + t), (1 - delta) * t / (1 + t)
    pair = mechanisms.discrete_pair([delta, a, b, 0.0], [0.0, b, a, delta], symmetric=True)
    pld = PLD.from_mechanism(pair, value_discretization_interval=h)
    lower = pld._directions["remove"][0][0].lower
    assert float(sum(lower.pmf)) + lower.inf_mass <= 1 + 1e-12
    composed = pld.self_compose(4)
    for at in (0.0, eps / 2, eps, 2 * eps):
        bounds = composed.delta_for_epsilon(at)
        exact = _epsilon_delta_exact(eps, delta, 4, at)
        assert bounds.lower <= exact * (1 + 1e-13) and exact <= bounds.upper * (1 + 1e-13)
