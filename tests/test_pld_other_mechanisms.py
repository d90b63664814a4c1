"""The pld accountant beyond the Gaussian: Laplace, Poisson-subsampled Laplace, randomized
response, (epsilon, delta) mechanisms and delta = 0 (events issue, item 7), each against an
independent computation: closed forms, exact enumeration, quadrature, dp_accounting."""

import math

import numpy as np
import pytest
from scipy import integrate, stats

from dpplugins.accountants import create
from dpplugins.events import (EpsilonDeltaEvent, GaussianEvent, LaplaceEvent,
                              PoissonSampledEvent, RandomizedResponseEvent, SelfComposedEvent)
from dpplugins.pld import AccuracyWarning


def pld_with(*events):
    acc = create("pld")
    for event in events:
        acc.compose(event)
    return acc


def test_one_laplace_step_matches_the_closed_form():
    # Laplace with scale b (sensitivity 1): delta(eps) = 1 - exp((eps - 1/b) / 2), eps < 1/b
    b = 0.8
    acc = pld_with(LaplaceEvent(b))
    for eps in (0.0, 0.3, 1.0):
        exact = 1 - math.exp((eps - 1 / b) / 2)
        lower, upper = acc.get_delta_bounds(eps)
        assert lower <= exact <= upper and upper - lower <= 2e-3 * exact
    assert acc.get_epsilon_bounds(0.0).lower <= 1 / b <= acc.get_epsilon_bounds(0.0).upper


def _hockey(p_pdf, q_pdf, eps, lo, hi, points):
    f = lambda x: max(p_pdf(x) - math.exp(eps) * q_pdf(x), 0.0)   # noqa: E731
    return integrate.quad(f, lo, hi, points=points, limit=400, epsabs=1e-13)[0]


def test_one_poisson_subsampled_laplace_step_matches_quadrature():
    b, q = 1.0, 0.3
    lap = lambda m: (lambda x: stats.laplace.pdf(x, loc=m, scale=b))   # noqa: E731
    mix_plus = lambda x: q * lap(1.0)(x) + (1 - q) * lap(0.0)(x)        # noqa: E731
    mix_minus = lambda x: q * lap(-1.0)(x) + (1 - q) * lap(0.0)(x)      # noqa: E731
    acc = pld_with(PoissonSampledEvent(q, LaplaceEvent(b)))
    for eps in (0.05, 0.2, 0.4):
        remove = _hockey(mix_plus, lap(0.0), eps, -40, 40, [-1, 0, 1])
        add = _hockey(lap(0.0), mix_minus, eps, -40, 40, [-1, 0, 1])
        exact = max(remove, add)
        lower, upper = acc.get_delta_bounds(eps)
        assert lower <= exact * (1 + 1e-9) and exact <= upper * (1 + 1e-9)
        assert upper - lower <= 2e-2 * exact   # the lower construction is first order at atoms
    pure = acc.get_epsilon_bounds(0.0)
    assert pure.lower <= math.log1p(q * math.expm1(1 / b)) <= pure.upper


@pytest.mark.parametrize("eps0,steps", [(1.0, 5), (0.5, 12)])
def test_randomized_response_matches_exact_enumeration(eps0, steps):
    p = math.exp(eps0) / (1 + math.exp(eps0))
    k = np.arange(steps + 1)
    P, Q = stats.binom.pmf(k, steps, p), stats.binom.pmf(k, steps, 1 - p)
    acc = create("pld", neighbouring="replace_one")
    acc.compose(SelfComposedEvent(RandomizedResponseEvent(eps0, 2), steps))
    for eps in (0.5, 1.5, 3.0):
        exact = float(np.sum(np.maximum(P - math.exp(eps) * Q, 0.0)))
        lower, upper = acc.get_delta_bounds(eps)
        assert lower <= exact * (1 + 1e-9) + 1e-15 and exact <= upper * (1 + 1e-9) + 1e-15
    pure = acc.get_epsilon_bounds(0.0)
    assert pure.lower <= steps * eps0 <= pure.upper


def test_epsilon_delta_mechanism_alone_is_its_own_guarantee():
    acc = pld_with(EpsilonDeltaEvent(1.0, 1e-6))
    # its dominating pair has delta(1) = 1e-6 exactly and delta(0) = 1e-6 + tanh(1/2)(1 - 1e-6)
    lower, upper = acc.get_delta_bounds(1.0)
    assert lower <= 1e-6 <= upper and upper <= 1e-6 * (1 + 1e-3) + 1e-12
    assert acc.get_epsilon_bounds(0.0).upper == math.inf
    assert pld_with(EpsilonDeltaEvent(0.5)).get_epsilon_bounds(0.0).lower == pytest.approx(0.5)


def test_delta_zero_for_gaussian_is_infinite_and_for_no_events_is_zero():
    assert create("pld").get_epsilon(0.0) == 0.0
    acc = pld_with(SelfComposedEvent(PoissonSampledEvent(0.01, GaussianEvent(1.0)), 10))
    assert acc.get_epsilon(0.0) == math.inf


@pytest.mark.anchor
def test_laplace_and_rr_against_dp_accounting():
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import pld_privacy_accountant

    cases = [
        (SelfComposedEvent(LaplaceEvent(2.0), 10),
         dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(2.0), 10)),
        (SelfComposedEvent(PoissonSampledEvent(0.2, LaplaceEvent(1.0)), 30),
         dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(
             0.2, dp_accounting.LaplaceDpEvent(1.0)), 30)),
    ]
    for ours, theirs in cases:
        anchor = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
        anchor.compose(theirs)
        lower, upper = pld_with(ours).get_epsilon_bounds(1e-5)
        value = anchor.get_epsilon(1e-5)
        assert lower <= value * (1 + 1e-3) and value <= upper * (1 + 1e-2)
        assert abs(upper - value) <= 1e-2 * value


def test_randomized_response_zero_out_reading_under_add_remove():
    """Add/remove reads RR as zero-out (the example replaced by one with a uniform report):
    exact enumeration of that pair, k = 4, three steps."""
    import itertools
    eps0, k, steps = 1.0, 4, 3
    e = math.exp(eps0)
    p1 = np.array([e, 1, 1, 1]) / (e + k - 1)
    q1 = np.full(k, 1 / k)
    acc = pld_with(SelfComposedEvent(RandomizedResponseEvent(eps0, k), steps))
    P = np.array([np.prod([p1[i] for i in o]) for o in itertools.product(range(k), repeat=steps)])
    Q = np.array([np.prod([q1[i] for i in o]) for o in itertools.product(range(k), repeat=steps)])
    for eps in (0.2, 1.0):
        exact = max(np.sum(np.maximum(P - math.exp(eps) * Q, 0)),
                    np.sum(np.maximum(Q - math.exp(eps) * P, 0)))
        lower, upper = acc.get_delta_bounds(eps)
        assert lower <= exact * (1 + 1e-9) + 1e-15 and exact <= upper * (1 + 1e-9) + 1e-15
    pure = acc.get_epsilon_bounds(0.0)
    worst = steps * max(math.log(k * e / (e + k - 1)), math.log((e + k - 1) / k))
    assert pure.lower <= worst <= pure.upper


def test_randomized_response_zero_out_pure_epsilon_beyond_exp_range():
    """eps0 beyond exp's range (the pair's masses underflow; 2**63 divided by zero): the pure-DP
    epsilon is the add direction's loss log((e^eps0 + k - 1) / k), written out here."""
    for eps0, k, steps in ((800.0, 2, 1), (2.0 ** 63, 4, 3), (40.0, 3, 2)):
        acc = pld_with(SelfComposedEvent(RandomizedResponseEvent(eps0, k), steps))
        exact = steps * (eps0 + math.log1p((k - 1) * math.exp(-eps0)) - math.log(k))
        pure = acc.get_epsilon_bounds(0.0)
        assert pure.lower <= exact <= pure.upper <= exact * (1 + 1e-9)
        bounds = acc.get_epsilon_bounds(1e-5)
        assert 0 <= bounds.lower <= bounds.upper <= pure.upper


def test_laplace_replace_one_doubles_the_sensitivity():
    acc = create("pld", neighbouring="replace_one").compose(LaplaceEvent(2.0))
    pure = acc.get_epsilon_bounds(0.0)
    assert pure.lower <= 1.0 <= pure.upper          # 2 / b with b = 2
    # delta(eps) = 1 - exp((eps - 2/b) / 2) for the sensitivity-2 Laplace pair
    lower, upper = acc.get_delta_bounds(0.5)
    assert lower <= 1 - math.exp((0.5 - 1.0) / 2) <= upper


def _hockey_stick(p, q, epsilon):
    return float(np.sum(np.maximum(p - math.exp(epsilon) * q, 0.0)))


def test_asymmetric_privacy_profile_dominates_each_direction_and_beats_their_maximum():
    """``from_privacy_profile(remove, add_delta_for_epsilon=add)``: each direction's PLD is built
    from its own profile (the other mirrored for negative epsilon).  Against exact enumeration of
    three compositions of an asymmetric pair (P = (0.6, 0.4), Q = (0.3, 0.7)): never below the
    exact delta of either direction, and never above the PLD of the two profiles' maximum."""
    import itertools
    from dpplugins.pld import PrivacyLossDistribution as PLD
    p1, q1 = np.array([0.6, 0.4]), np.array([0.3, 0.7])

    def profile(a, b):
        return lambda eps: np.array([_hockey_stick(a, b, float(e)) for e in np.atleast_1d(eps)])
    remove, add = profile(p1, q1), profile(q1, p1)
    both = PLD.from_privacy_profile(remove, add_delta_for_epsilon=add,
                                    value_discretization_interval=1e-3).self_compose(3)
    symmetric = PLD.from_privacy_profile(lambda e: np.maximum(remove(e), add(e)),
                                         value_discretization_interval=1e-3).self_compose(3)
    outcomes = list(itertools.product(range(2), repeat=3))
    p3 = np.array([np.prod([p1[i] for i in o]) for o in outcomes])
    q3 = np.array([np.prod([q1[i] for i in o]) for o in outcomes])
    for epsilon in (0.0, 0.3, 1.0, 2.0):
        exact = max(_hockey_stick(p3, q3, epsilon), _hockey_stick(q3, p3, epsilon))
        upper = both.delta_for_epsilon(epsilon).upper
        assert exact <= upper <= symmetric.delta_for_epsilon(epsilon).upper * (1 + 1e-9) + 1e-13
        assert upper <= exact + 2e-3


def _epsilon_delta_step_delta(eps, epsilon, delta0, k=1):
    """delta(eps) of k steps of the (epsilon, delta0) four-point pair: the optimal composition
    sum (Kairouz, Oh, Viswanath 2015, Thm 3.3), written out here in mpmath at 50 digits."""
    import mpmath
    mpmath.mp.dps = 50
    e, x = mpmath.mpf(epsilon), mpmath.exp(mpmath.mpf(eps))
    total = mpmath.mpf(0)
    for i in range(k + 1):
        term = mpmath.exp((k - i) * e) - x * mpmath.exp(i * e)
        if term > 0:
            total += mpmath.binomial(k, i) * term / (1 + mpmath.exp(e)) ** k
    survive = (1 - mpmath.mpf(delta0)) ** k
    return float(1 - survive + survive * total)


@pytest.mark.parametrize("epsilon", [1.0, 30.0, 40.0, 299.0])
def test_epsilon_delta_step_with_a_large_epsilon_matches_the_closed_form(epsilon):
    """The pair's small mass (1 - delta0) / (1 + e^eps) was computed as a difference: at eps =
    30 it kept three digits (its loss was 30.001, and the certified lower bound on epsilon,
    30.00102, was above the true 29.999999), from eps = 37 on it was 0 (a mutually singular
    pair: epsilon [inf, inf] and delta 1 at every epsilon, both lower bounds false).  Closed
    form: delta(eps) = delta0 + a - e^eps b on [0, eps0], so epsilon(delta) = eps0 + log(1 -
    (delta - delta0) / a); three steps against the optimal composition sum."""
    delta0, delta = 1e-9, 1e-6
    acc = pld_with(EpsilonDeltaEvent(epsilon, delta0))
    a = (1 - delta0) / (1 + math.exp(-epsilon))
    exact = epsilon + math.log1p(-(delta - delta0) / a)
    bounds = acc.get_epsilon_bounds(delta)
    assert bounds.lower <= exact * (1 + 1e-12) and exact <= bounds.upper * (1 + 1e-12)
    assert bounds.upper - bounds.lower <= 1e-9 * exact
    at = 0.99 * epsilon
    exact_delta = _epsilon_delta_step_delta(at, epsilon, delta0)
    lower, upper = acc.get_delta_bounds(at)
    assert lower <= exact_delta * (1 + 1e-9) and exact_delta <= upper * (1 + 1e-9)
    three = pld_with(SelfComposedEvent(EpsilonDeltaEvent(epsilon, delta0), 3))
    exact3 = _epsilon_delta_step_delta(2.5 * epsilon, epsilon, delta0, 3)
    lower, upper = three.get_delta_bounds(2.5 * epsilon)
    assert lower <= exact3 * (1 + 1e-9) and exact3 <= upper * (1 + 1e-9)


def test_epsilon_delta_step_beyond_the_representable_range_is_bracketed():
    """eps0 = 800: the pair's small mass (about e^-800) is below double's range.  The upper
    bound is capped by basic composition (Dwork & Roth 2014, Thm 3.16: epsilon(delta) <= eps0
    for delta >= delta0), the lower bound comes from the pair of eps0 = 700, which it
    dominates, cut at the grid's largest loss of 600: both on their side of the closed form."""
    delta0, delta = 1e-9, 1e-6
    acc = pld_with(EpsilonDeltaEvent(800.0, delta0))
    exact = 800.0 + math.log1p(-(delta - delta0) * (1 + math.exp(-800.0)) / (1 - delta0))
    lower, upper = acc.get_epsilon_bounds(delta)
    assert 590.0 <= lower <= exact and exact <= upper <= 800.0 * (1 + 1e-11)
    assert acc.get_epsilon_bounds(1e-12).upper == math.inf  # below delta0: no finite epsilon
    # beyond eps0 the pair's delta is delta0 itself (the atom at +inf); the bracketing pair
    # alone gave 1 there, basic composition caps it -- without a warning about the uncapped
    # bounds [1e-9, 1] (it was issued before the cap)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        lower, upper = acc.get_delta_bounds(900.0)
    assert lower <= delta0 <= upper <= delta0 * (1 + 1e-11)
    with pytest.warns(AccuracyWarning, match=r"\[600, 800\].*capped by basic composition"):
        pld_with(EpsilonDeltaEvent(800.0, delta0)).get_epsilon_bounds(delta)
    two = pld_with(SelfComposedEvent(EpsilonDeltaEvent(800.0, delta0), 2))
    lower, upper = two.get_delta_bounds(1700.0)
    exact2 = delta0 * (2 - delta0)  # 1 - (1 - delta0)^2 without cancellation
    assert lower <= exact2 <= upper <= 2 * delta0 * (1 + 1e-11)


# -- randomized response at extreme epsilon0 and number of buckets ------------------------------
def _rr_exact_delta(eps0, k, neighbouring, steps, eps):
    """delta(eps) of ``steps`` randomized-response steps, the larger direction, by enumerating
    how many steps fall on each outcome (multinomial counts), every probability in log space
    with mpmath at 60 digits -- no grid, no double-precision underflow.  Replace-one: outcomes
    (the first value, the second, the k - 2 others) with P proportional to (e^eps0, 1, k - 2)
    and Q to (1, e^eps0, k - 2); add/remove (zero-out): P = (e^eps0, k - 1) / (e^eps0 + k - 1)
    against the uniform Q = (1, k - 1) / k, and its mirror."""
    import itertools

    import mpmath as mp
    mp.mp.dps = 60
    e0 = mp.mpf(eps0)
    z = mp.log(mp.e ** e0 + k - 1)
    if neighbouring == "replace_one":
        atoms = [(e0 - z, -z), (-z, e0 - z)] + ([(mp.log(k - 2) - z,) * 2] if k > 2 else [])
        directions = [atoms]
    else:
        p = [e0 - z, mp.log(k - 1) - z]
        q = [-mp.log(k), mp.log(k - 1) - mp.log(k)]
        directions = [list(zip(p, q)), list(zip(q, p))]
    best = mp.mpf(0)
    for atoms in directions:
        total = mp.mpf(0)
        for counts in itertools.product(range(steps + 1), repeat=len(atoms)):
            if sum(counts) != steps:
                continue
            log_multi = mp.log(mp.factorial(steps)) - sum(mp.log(mp.factorial(c)) for c in counts)
            lp = log_multi + sum(c * a for c, (a, _) in zip(counts, atoms))
            lq = log_multi + sum(c * b for c, (_, b) in zip(counts, atoms))
            total += max(mp.exp(lp) - mp.exp(eps + lq), 0)
        best = max(best, total)
    return float(best)


@pytest.mark.parametrize("neighbouring", ["replace_one", "add_remove"])
@pytest.mark.parametrize("eps0", [0.0, 1.0, 650.0, 700.5, 709.0, 750.0, 1000.0])
@pytest.mark.parametrize("k", [2, 3, 10**6, int(1.7e308)], ids=["2", "3", "1e6", "1.7e308"])
def test_randomized_response_bounds_hold_at_extreme_parameters(neighbouring, eps0, k):
    """Three steps of k-ary randomized response against exact enumeration in log space.

    Found by the fuzz tests and this check (pre-existing): the pair's small mass was set to 0
    beyond eps0 = 700 (add/remove) or underflowed beyond about 745 (replace-one), so a finite
    loss became infinite; the dominating side stays valid, but the lower bounds claimed delta =
    0.875 where it is 0.118 (add/remove, eps0 = 709, eps = 3 eps0 - 5) and 1 where it is 0.39
    (replace-one, eps0 = 750).  k = 1.7e308 overflowed e^eps0 + k - 1 (a pair with no mass), and
    k = 1e308 asked numpy for an array of 1e308 entries."""
    steps = 3
    acc = create("pld", neighbouring=neighbouring).compose(
        SelfComposedEvent(RandomizedResponseEvent(eps0, k), steps))
    for eps in sorted({0.5 * eps0, steps * eps0 - 5, steps * eps0 - 0.5, 0.25, 1.0}):
        if eps < 0:
            continue
        exact = _rr_exact_delta(eps0, k, neighbouring, steps, eps)
        lower, upper = acc.get_delta_bounds(eps)
        # (the reference holds 60 digits: 1e-12 is only the rounding of the comparison)
        assert 0.0 <= lower <= exact * (1 + 1e-12) + 1e-300, eps
        assert exact <= upper * (1 + 1e-12) + 1e-300, eps
    for delta in (1e-5, 0.05):
        lower, upper = acc.get_epsilon_bounds(delta)
        assert 0.0 <= lower <= upper
        # epsilon(delta) is the smallest eps with delta(eps) <= delta
        assert _rr_exact_delta(eps0, k, neighbouring, steps, upper) <= delta * (1 + 1e-12)
        if lower > 0:
            assert _rr_exact_delta(eps0, k, neighbouring, steps, lower) >= delta * (1 - 1e-12)


@pytest.mark.parametrize("eps0", [650.0, 750.0, 1000.0])
@pytest.mark.parametrize("k", [2, 3])
def test_randomized_response_pld_is_certified_at_a_huge_local_epsilon(eps0, k):
    """The PLD engine's own constructor (not only the accountant): the pair's small masses
    underflow beyond about 745, and PrivacyLossDistribution.from_randomized_response(750) had
    the lower bound 0.99999999999999 on delta(749) where it is 1 - 1/e = 0.632.  The mechanism
    object now carries the pairs it dominates for the lower bounds; checked against the
    log-space enumeration (replace-one, two steps)."""
    from dpplugins.pld import PrivacyLossDistribution
    pld = PrivacyLossDistribution.from_randomized_response(
        eps0, k=k, value_discretization_interval=1e-2).self_compose(2)
    for eps in (1.0, eps0 - 1.0, 2 * eps0 - 1.0):
        exact = _rr_exact_delta(eps0, k, "replace_one", 2, eps)
        lower, upper = pld.delta_for_epsilon(eps)
        assert lower <= exact * (1 + 1e-12) and exact <= upper * (1 + 1e-12), (eps, exact)


@pytest.mark.parametrize("args,name", [((-1.0, 2), "epsilon0"), ((1.0, 1), "num_buckets"),
                                       ((1.0, 2, 1.5), "sample_rate"),
                                       ((float("nan"), 2), "epsilon0")])
def test_zero_out_randomized_response_bad_input(args, name):
    from dpplugins.errors import ParameterError
    from dpplugins.mechanisms.randomized_response import zero_out_randomized_response
    with pytest.raises(ParameterError, match=name):
        zero_out_randomized_response(*args)


def test_symmetric_profile_nodes_ask_each_absolute_epsilon_once_and_stay_valid():
    """With a coarse ``profile_step``, the negative-epsilon nodes of a symmetric profile are
    the mirrors of the positive ones (multiples of the stride, 0 among them), so a memoised
    profile is evaluated at about half as many points (the nodes used to run from ``-hi`` in
    strides, between the mirrored positive ones: a shuffled round's profile at 10^8 users was
    evaluated at 155 points, not about 80).  The PLD stays an upper bound: against exact
    enumeration of three compositions of randomized response (eps0 = 1, the symmetric pair
    P = (e, 1)/(1 + e))."""
    import itertools
    from dpplugins.pld import PrivacyLossDistribution as PLD
    e0 = 1.0
    p1 = np.array([math.exp(e0), 1.0]) / (1 + math.exp(e0))
    q1 = p1[::-1].copy()
    asked: list[float] = []

    def profile(eps):
        eps = np.atleast_1d(np.asarray(eps, dtype=float))
        asked.extend(float(e) for e in eps)
        return np.array([_hockey_stick(p1, q1, float(e)) for e in eps])

    pld = PLD.from_privacy_profile(profile, epsilon_max=1.5, value_discretization_interval=1e-3,
                                   profile_step=0.07)
    # 0.07 / 1e-3 = 70 grid steps per node: 0, 0.07, ..., 1.47 and the end 1.5, mirrored
    distinct = {round(abs(e), 12) for e in asked}
    assert len(distinct) == 23 and len(asked) == 2 * 23 - 1
    three = pld.self_compose(3)
    outcomes = list(itertools.product(range(2), repeat=3))
    p3 = np.array([np.prod([p1[i] for i in o]) for o in outcomes])
    q3 = np.array([np.prod([q1[i] for i in o]) for o in outcomes])
    for epsilon in (0.0, 0.5, 1.0, 2.0, 2.9):
        exact = _hockey_stick(p3, q3, epsilon)
        upper = three.delta_for_epsilon(epsilon).upper
        assert exact <= upper <= exact + 0.05
