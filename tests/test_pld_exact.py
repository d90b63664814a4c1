"""The PLD engine against closed forms: lower <= exact <= upper, and the bounds are tight."""

import math

import numpy as np
import pytest
from scipy import stats

from conftest import (epsilon_from_delta_curve, gaussian_delta_exact, hockey_stick_by_quadrature,
                      rr_composed_delta_exact)
from dpplugins.errors import ParameterError
from dpplugins.pld import PrivacyLossDistribution as PLD


@pytest.mark.parametrize("sigma", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("steps", [1, 10, 1000])
def test_composed_gaussian_sandwich(sigma, steps):
    """T-fold Gaussian(sigma) = one Gaussian with sigma / sqrt(T) (Dong, Roth, Su 2022, Cor. 3.3)."""
    pld = PLD.from_gaussian(sigma, value_discretization_interval=2e-3).self_compose(steps)
    mu = np.sqrt(steps) / sigma
    for eps in [0.0, 0.5, 1.0, 2.0, 5.0]:
        exact = gaussian_delta_exact(eps, mu)
        b = pld.delta_for_epsilon(eps)
        assert b.lower <= exact <= b.upper
        assert b.upper - b.lower <= 2e-3 * exact + 1e-11  # relative gap + fp allowance
    for delta in [1e-3, 1e-6, 1e-10]:
        exact_eps = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)
        b = pld.epsilon_for_delta(delta)
        assert b.lower <= exact_eps <= b.upper
        assert b.upper - b.lower <= 5e-3 * exact_eps + 1e-9


@pytest.mark.parametrize("eps0", [0.1, 1.0, 2.5])
@pytest.mark.parametrize("k", [1, 7, 200])
def test_composed_randomized_response_sandwich(eps0, k):
    pld = PLD.from_randomized_response(eps0, value_discretization_interval=1e-3).self_compose(k)
    for eps in [0.0, 0.05, 0.7, 3.0]:
        exact = rr_composed_delta_exact(eps, eps0, k)
        b = pld.delta_for_epsilon(eps)
        assert b.lower - 1e-12 <= exact <= b.upper + 1e-12
        assert b.upper - b.lower <= 0.05 * exact + 1e-9


def test_k_ary_randomized_response_single_step_exact():
    eps0, k = 1.3, 5
    pld = PLD.from_randomized_response(eps0, k=k, value_discretization_interval=1e-3)
    # pair differs in two outcomes: delta(eps) = (e^eps0 - e^eps) / (e^eps0 + k - 1) for eps <= eps0
    for eps in [0.0, 0.5, 1.2]:
        exact = (np.exp(eps0) - np.exp(eps)) / (np.exp(eps0) + k - 1)
        b = pld.delta_for_epsilon(eps)
        assert b.lower - 1e-12 <= exact <= b.upper + 1e-12
        assert b.upper - exact <= 1e-6


def test_laplace_against_quadrature():
    scale = 0.8
    pld = PLD.from_laplace(scale, value_discretization_interval=1e-3)
    p = lambda x: stats.laplace.pdf(x, loc=1.0, scale=scale)
    q = lambda x: stats.laplace.pdf(x, loc=0.0, scale=scale)
    for eps in [0.0, 0.4, 1.0]:
        exact = hockey_stick_by_quadrature(p, q, eps, -40, 40, breakpoints=(0.0, 1.0))
        b = pld.delta_for_epsilon(eps)
        assert b.lower - 1e-10 <= exact <= b.upper + 1e-10
        assert b.upper - b.lower < 2e-3


@pytest.mark.parametrize("q,sigma", [(0.01, 1.0), (0.2, 0.7), (0.5, 2.0)])
def test_subsampled_gaussian_single_step_against_quadrature(q, sigma):
    pld = PLD.from_poisson_subsampled_gaussian(sigma, q, value_discretization_interval=1e-4)
    mix = lambda x: q * stats.norm.pdf(x, 1.0, sigma) + (1 - q) * stats.norm.pdf(x, 0.0, sigma)
    gauss = lambda x: stats.norm.pdf(x, 0.0, sigma)
    for eps in [0.0, 0.01, 0.3]:
        exact = max(hockey_stick_by_quadrature(mix, gauss, eps, -20 * sigma, 20 * sigma),
                    hockey_stick_by_quadrature(gauss, mix, eps, -20 * sigma, 20 * sigma))
        b = pld.delta_for_epsilon(eps)
        assert b.lower - 1e-12 <= exact <= b.upper + 1e-12


def test_binomial_mechanism_against_direct_sum():
    n, shift = 40, 1
    # atoms off the grid: the lower construction is first order in h there, so use a fine grid
    pld = PLD.from_binomial(n, 0.5, shift, value_discretization_interval=1e-4).self_compose(3)
    # direct: three-fold product distribution on small support, enumerated
    support = np.arange(n + shift + 1)
    q1 = stats.binom.pmf(support, n, 0.5)
    p1 = stats.binom.pmf(support - shift, n, 0.5)
    p3 = np.einsum("i,j,k->ijk", p1, p1, p1).ravel()
    q3 = np.einsum("i,j,k->ijk", q1, q1, q1).ravel()
    for eps in [0.0, 0.5, 1.0]:
        exact = max(np.sum(np.maximum(p3 - np.exp(eps) * q3, 0)),
                    np.sum(np.maximum(q3 - np.exp(eps) * p3, 0)))
        b = pld.delta_for_epsilon(eps)
        assert b.lower - 1e-12 <= exact <= b.upper + 1e-12
        assert b.upper - b.lower <= 1e-3 * exact + 1e-9


def test_heterogeneous_composition_equals_parts():
    h = 1e-3
    a = PLD.from_gaussian(2.0, value_discretization_interval=h)
    b = PLD.from_gaussian(3.0, value_discretization_interval=h)
    composed = a.self_compose(3).compose(b.self_compose(5))
    mu = np.sqrt(3 / 4 + 5 / 9)
    for eps in [0.2, 1.0]:
        exact = gaussian_delta_exact(eps, mu)
        bound = composed.delta_for_epsilon(eps)
        assert bound.lower <= exact <= bound.upper
    other = PLD.from_gaussian(1.0, value_discretization_interval=2 * h)
    with pytest.raises(ParameterError, match="value_discretization_interval"):
        a.compose(other)


def test_privacy_profile_pld_is_an_upper_bound():
    """A Gaussian given only through its profile composes to an upper bound of the truth."""
    mu1 = 0.5
    pld = PLD.from_privacy_profile(lambda e: gaussian_delta_exact(np.asarray(e), mu1),
                                   value_discretization_interval=1e-3, profile_step=1e-2)
    composed = pld.self_compose(20)
    mu = mu1 * np.sqrt(20)
    for eps in [0.5, 1.0, 2.0]:
        b = composed.delta_for_epsilon(eps)
        exact = gaussian_delta_exact(eps, mu)
        assert b.lower == 0.0 and not composed.has_lower_bound
        assert exact <= b.upper <= exact * 1.05 + 1e-9


def test_infinite_loss_mass_composes():
    # P has an outcome Q never produces: delta(inf) = 0.1 per step -> 1 - 0.9^3
    pld = PLD.from_pmfs([0.1, 0.45, 0.45], [0.0, 0.5, 0.5], value_discretization_interval=1e-3)
    b = pld.self_compose(3).delta_for_epsilon(50.0)
    assert b.lower <= 1 - 0.9 ** 3 <= b.upper
    assert b.upper - (1 - 0.9 ** 3) < 1e-9


def test_mechanism_without_privacy_gives_infinite_epsilon():
    """delta(inf) >= delta means no finite epsilon exists; we report inf, never a number."""
    pld = PLD.from_privacy_profile(lambda e: np.ones_like(e), epsilon_max=1.0,
                                   value_discretization_interval=1e-3).self_compose(3)
    assert pld.epsilon_for_delta(1e-5).upper == float("inf")
    # almost all mass at +inf (P-outcome that Q never produces): composition keeps it
    almost = PLD.from_pmfs([1e-10, 1 - 1e-10], [1.0, 0.0],
                           value_discretization_interval=1e-3).self_compose(3)
    bounds = almost.delta_for_epsilon(2.0)
    exact = 1 - 1e-30  # 1 - (finite mass)^3
    assert bounds.lower <= exact <= bounds.upper
    assert almost.epsilon_for_delta(1e-5).upper == float("inf")


def _hockey_stick_of_pmf(losses, pmf, inf_mass, xs):
    """``H_x = sum pmf(l) (1 - x e^-l)_+ + inf_mass`` at each ``x``, term by term in mpmath."""
    import mpmath
    mpmath.mp.dps = 40
    atoms = [(mpmath.e ** (-mpmath.mpf(float(l))), mpmath.mpf(float(m)))
             for l, m in zip(losses, pmf) if m > 0]
    return [mpmath.fsum([m * max(0, 1 - mpmath.mpf(float(x)) * r) for r, m in atoms])
            + mpmath.mpf(inf_mass) for x in xs]


def test_moving_the_left_tail_up_dominates_at_every_epsilon():
    """``_raise_left_tail`` moves the leading atoms of total mass at most ``mass`` to the first
    atom after them: every hockey-stick divergence (negative epsilon included) is at least the
    original one (exact sums in mpmath), unchanged at epsilon above the new first atom, and the
    mass is kept (rounded up, never down)."""
    from dpplugins.pld.grid import _raise_left_tail
    rng = np.random.default_rng(7)
    h = 0.01
    for _ in range(20):
        pmf = np.zeros(200)
        pmf[rng.choice(200, 30, replace=False)] = rng.exponential(size=30)
        pmf[:100] *= 1e-16  # a left tail at round-off level, as the hull of a profile leaves
        pmf /= pmf.sum()
        losses = (np.arange(200) - 100) * h
        moved = _raise_left_tail(pmf.copy(), 64 * np.finfo(float).eps / 2)
        first = int(np.flatnonzero(moved)[0])
        assert first >= int(np.flatnonzero(pmf)[0])
        assert math.fsum(moved.tolist()) >= math.fsum(pmf.tolist())
        xs = np.exp(np.linspace(-3.0, 1.2, 43))
        before = _hockey_stick_of_pmf(losses, pmf, 0.0, xs)
        after = _hockey_stick_of_pmf(losses, moved, 0.0, xs)
        for x, b, a in zip(xs, before, after):
            assert a >= b
            if np.log(x) >= losses[first]:
                assert abs(a - b) <= 1e-18
        assert np.array_equal(moved[first + 1:], pmf[first + 1:])


def test_a_profile_epoch_of_randomized_response_has_no_round_off_atoms_far_to_the_left():
    """Randomized response with 10^6 buckets, 2-out-of-10 allocation, check-in 0.5: the hull
    of its profile left atoms of about 1e-17 down to loss -4.6 (the pair's own atoms begin at
    log(1 - p) = -0.69), which set a FFT window that no coarser grid brought within the budget.
    Now both directions start at -0.7 or above, and the epoch's certified upper bounds are
    still above its exact profile, both directions, enumerated over the 2^10 reports
    (``allocation_rr_laws``)."""
    import mpmath
    from conftest import allocation_rr_laws
    from dpplugins.amplification.allocation_mechanisms import k_out_of_t_mechanism_pld
    from dpplugins.events import RandomizedResponseEvent
    h = 2.2e-6
    epoch = k_out_of_t_mechanism_pld(RandomizedResponseEvent(1.0, 10**6), 10, 2, 1,
                                     checkin_probability=0.5, value_discretization_interval=h,
                                     lower=False).upper
    for direction, pld in epoch.plds.items():
        pmf = pld._directions[direction][0][0].upper
        assert (pmf.lo * h) >= -0.7, (direction, pmf.lo * h)
    p_law, q_law = allocation_rr_laws(1.0, 10**6, 10, 2, 0.5)
    for eps in (0.0, 1e-4, 1e-3, 0.05, 0.3, 0.9):
        x = mpmath.e ** eps
        exact = max(mpmath.fsum(max(a - x * b, 0) for a, b in zip(p_law, q_law)),
                    mpmath.fsum(max(b - x * a, 0) for a, b in zip(p_law, q_law)))
        assert float(exact) <= epoch.delta_for_epsilon(eps).upper


@pytest.mark.parametrize("eps", [0.0, 0.5, 2.0])
def test_delta_for_epsilon_without_the_lower_bound(eps):
    """``delta_for_epsilon(eps, lower=False)``: lower bound 0, the same upper bound as with the
    lower bound (a fresh PLD each, so no cached composition is shared), above the closed form
    of 10 composed Gaussian steps."""
    def composed():
        return PLD.from_gaussian(2.0, value_discretization_interval=1e-3).self_compose(10)
    without, with_lower = composed().delta_for_epsilon(eps, lower=False), \
        composed().delta_for_epsilon(eps)
    exact = gaussian_delta_exact(eps, np.sqrt(10) / 2.0)
    assert without.lower == 0.0 < with_lower.lower <= exact <= without.upper
    assert without.upper == with_lower.upper
