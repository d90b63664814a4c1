"""Amplification by shuffling: the clone pair, the closed forms and the lower bounds against
independent references -- enumeration of the pair from its definition, brute-force shuffled
randomized response on every dataset of n <= 6 users, a direct double sum with
scipy.stats.multinomial, and the numbers published with the FMT21 code."""

import itertools
import math
import time

import numpy as np
import pytest
from scipy import stats
from scipy.special import expit

from conftest import hockey_stick_mp, krr_histogram_law_mp
from dpplugins.amplification import shuffle
from dpplugins.errors import ParameterError


# ---------------------------------------------------------------------------------------------
# independent references (no dpplugins code)
# ---------------------------------------------------------------------------------------------
def hockey_stick(p, q, eps):
    """max over both directions of sum (p - e^eps q)_+ for dicts outcome -> probability."""
    keys = set(p) | set(q)
    one = sum(max(p.get(k, 0.0) - math.exp(eps) * q.get(k, 0.0), 0.0) for k in keys)
    two = sum(max(q.get(k, 0.0) - math.exp(eps) * p.get(k, 0.0), 0.0) for k in keys)
    return max(one, two)


def clone_pair_by_enumeration(eps0, n, c, *, exact=False):
    """FMT21 Thm 3.1 / FMT23 Thm 3.1 from the definition: the differing user reports 0 w.p.
    e^eps0/(e^eps0+1) (1 otherwise; swapped on X1), each other user reports 0 or 1 w.p. c/2 each
    and 2 otherwise; the output is (n0, n1).  In floats, or with ``exact`` in mpmath at the
    caller's precision (``c`` then taken as the exact value of the float given)."""
    if not exact:
        alpha, prod = math.exp(eps0) / (math.exp(eps0) + 1), math.prod
    else:
        import mpmath
        e = mpmath.exp(mpmath.mpf(eps0))
        alpha, c, prod = e / (e + 1), mpmath.mpf(c), mpmath.fprod
    p0, p1 = {}, {}
    for others in itertools.product((0, 1, 2), repeat=n - 1):
        pr = prod(c / 2 if o < 2 else 1 - c for o in others)
        n0, n1 = others.count(0), others.count(1)
        for report, (w0, w1) in ((0, (alpha, 1 - alpha)), (1, (1 - alpha, alpha))):
            key = (n0 + (report == 0), n1 + (report == 1))
            p0[key] = p0.get(key, 0.0) + pr * w0
            p1[key] = p1.get(key, 0.0) + pr * w1
    return p0, p1


def krr_matrix(eps0, k):
    m = np.full((k, k), 1.0 / (math.exp(eps0) + k - 1))
    np.fill_diagonal(m, math.exp(eps0) / (math.exp(eps0) + k - 1))
    return m


_HIST_CACHE = {}


def shuffled_histogram(data, eps0, k):
    """Distribution of the histogram of k-RR reports of ``data`` (the shuffled output)."""
    key = (tuple(sorted(data)), eps0, k)
    if key not in _HIST_CACHE:
        m = krr_matrix(eps0, k)
        dist = {}
        for outs in itertools.product(range(k), repeat=len(data)):
            pr = math.prod(m[x, o] for x, o in zip(data, outs))
            h = tuple(np.bincount(outs, minlength=k))
            dist[h] = dist.get(h, 0.0) + pr
        _HIST_CACHE[key] = dist
    return _HIST_CACHE[key]


def brute_force_pairs(eps0, n, k):
    """Output distributions of shuffled k-RR on every pair of neighbouring datasets of n users."""
    pairs = []
    for others in itertools.combinations_with_replacement(range(k), n - 1):
        for a, b in itertools.permutations(range(k), 2):
            pairs.append((shuffled_histogram((a,) + others, eps0, k),
                          shuffled_histogram((b,) + others, eps0, k)))
    return pairs


def brute_force_epsilon(pairs, delta, hi):
    """Exact epsilon(delta) of the worst pair, by bisection on the exact profile."""
    def worst(eps):
        return max(hockey_stick(p, q, eps) for p, q in pairs)
    if worst(0.0) <= delta:
        return 0.0
    lo = 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if worst(mid) <= delta else (mid, hi)
    return hi


# ---------------------------------------------------------------------------------------------
# the clone pair
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps0", [0.3, 1.5, 4.0])
@pytest.mark.parametrize("n", [2, 3, 6])
@pytest.mark.parametrize("which", ["fmt21", "fmt23"])
def test_clone_pair_delta_matches_enumeration(eps0, n, which):
    c = math.exp(-eps0) if which == "fmt21" else 2 / (math.exp(eps0) + 1)
    p0, p1 = clone_pair_by_enumeration(eps0, n, c)
    for eps in [0.0, 0.05, 0.4, 1.2, eps0 - 1e-9, eps0]:
        exact = hockey_stick(p0, p1, max(eps, 0.0))
        got = shuffle.clone_pair_delta(eps0, n, c, max(eps, 0.0))
        assert got.lower - 1e-14 <= exact <= got.upper + 1e-14
        assert got.upper - got.lower <= 1e-9 + 1e-6 * exact  # fp allowance of the bound


def test_clone_pair_delta_matches_direct_multinomial_sum():
    """n = 300: sum over every (n0, n1) of the pair written with scipy.stats.multinomial."""
    eps0, n = 1.0, 300
    c = math.exp(-eps0)
    alpha = expit(eps0)
    trials = n - 1
    n0, n1 = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    ok = n0 + n1 <= n
    n0, n1 = n0[ok], n1[ok]

    def others(a, b):
        valid = (a >= 0) & (b >= 0) & (a + b <= trials)
        x = np.stack([np.maximum(a, 0), np.maximum(b, 0), trials - np.maximum(a, 0)
                      - np.maximum(b, 0)], axis=1)
        x[~valid] = [0, 0, trials]
        out = stats.multinomial.pmf(x, trials, [c / 2, c / 2, 1 - c])
        return np.where(valid, out, 0.0)

    zero, one = others(n0 - 1, n1), others(n0, n1 - 1)
    p0 = alpha * zero + (1 - alpha) * one
    p1 = (1 - alpha) * zero + alpha * one
    assert abs(p0.sum() - 1) < 1e-12
    for eps in [0.0, 0.1, 0.3, 0.6]:
        exact = max(np.maximum(p0 - math.exp(eps) * p1, 0).sum(),
                    np.maximum(p1 - math.exp(eps) * p0, 0).sum())
        got = shuffle.clone_pair_delta(eps0, n, c, eps)
        assert got.lower - 1e-13 <= exact <= got.upper + 1e-13
        assert got.upper - got.lower <= 1e-8 * exact


def test_reference_md_pair_with_fmt21_p_would_under_report():
    """REFERENCE.md's generic P_b (the differing user may report 2) with FMT21's p = 1/(2 e^eps0)
    is the flawed FMT23 Lemma 3.5 at p < 1/(e^eps0+1); computed here by a direct multinomial sum
    it falls *below* the exact shuffled-RR lower bound, so it is not a valid upper bound.  FMT21's
    own pair (what we implement) stays above it."""
    from scipy.optimize import brentq

    n, eps0, delta = 500, 2.0, 1e-6
    p, trials, e = math.exp(-eps0) / 2, n - 1, math.exp(eps0)
    n0, n1 = np.meshgrid(np.arange(n + 1), np.arange(n + 1), indexing="ij")
    ok = n0 + n1 <= n
    n0, n1 = n0[ok], n1[ok]

    def others(a, b):
        valid = (a >= 0) & (b >= 0) & (a + b <= trials)
        x = np.stack([np.maximum(a, 0), np.maximum(b, 0), trials - np.maximum(a, 0)
                      - np.maximum(b, 0)], axis=1)
        x[~valid] = [0, 0, trials]
        return np.where(valid, stats.multinomial.pmf(x, trials, [p, p, 1 - 2 * p]), 0.0)

    zero, one, two = others(n0 - 1, n1), others(n0, n1 - 1), others(n0, n1)
    rest = 1 - (e + 1) * p
    p0 = e * p * zero + p * one + rest * two
    p1 = p * zero + e * p * one + rest * two

    def excess(eps):
        x = math.exp(eps)
        return max(np.maximum(p0 - x * p1, 0).sum(), np.maximum(p1 - x * p0, 0).sum()) - delta

    flawed = brentq(excess, 0.0, eps0)
    lower = shuffle.lower_bound(eps0, n, delta).epsilon
    assert flawed < lower <= shuffle.fmt21_epsilon(eps0, n, delta).epsilon


def test_published_fmt21_numbers():
    """apple/ml-shuffling-amplification README: n = 10^5, eps0 = 4, delta = 1e-6 gives eps between
    0.1675385583317841 and 0.172790550755978 (their numerical lower/upper), and 0.5378040242374512
    from the closed form."""
    numeric = shuffle.fmt21_epsilon(4.0, 100_000, 1e-6).epsilon
    assert 0.1675385583317841 <= numeric <= 0.172790550755978
    closed = shuffle.fmt21_closed_form_epsilon(4.0, 100_000, 1e-6).epsilon
    assert closed == pytest.approx(0.5378040242374512, rel=1e-12)


def test_epsilon_is_the_smallest_certified_point():
    eps0, n, delta = 2.0, 50_000, 1e-6
    c = math.exp(-eps0)
    eps = shuffle.fmt21_epsilon(eps0, n, delta).epsilon
    assert shuffle.clone_pair_delta(eps0, n, c, eps).upper <= delta
    assert shuffle.clone_pair_delta(eps0, n, c, eps * (1 - 1e-4)).lower > delta


# ---------------------------------------------------------------------------------------------
# brute force: shuffled randomized response on every dataset of n <= 6 users
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k,n", [(2, 3), (2, 6), (3, 3), (3, 5)])
@pytest.mark.parametrize("eps0", [0.7, 2.0])
def test_brute_force_rr_between_lower_and_upper_bounds(k, n, eps0):
    pairs = brute_force_pairs(eps0, n, k)
    randomizer = "binary_rr" if k == 2 else ("krr", k)
    for delta in [0.2, 0.05]:
        exact = brute_force_epsilon(pairs, delta, eps0)
        uppers = {
            "fmt21": shuffle.fmt21_epsilon(eps0, n, delta).epsilon,
            "fmt23": shuffle.fmt23_epsilon(eps0, n, delta, randomizer=randomizer).epsilon,
            "balle2020": shuffle.balle2020_epsilon(eps0, n, delta).epsilon,
            "best": shuffle.epsilon(eps0, n, delta, randomizer=randomizer).epsilon,
            "best_general": shuffle.epsilon(eps0, n, delta).epsilon,
        }
        for name, upper in uppers.items():
            assert exact <= upper + 1e-9, (name, exact, upper)
        lower = shuffle.rr_lower_bound_epsilon(eps0, n, delta, k=k)
        assert lower <= exact + 1e-9
        assert shuffle.lower_bound(eps0, n, delta).epsilon <= uppers["fmt21"] + 1e-12


@pytest.mark.parametrize("eps0", [0.5, 2.0])
@pytest.mark.parametrize("n", [2, 4, 6])
def test_rr_lower_bound_profiles_equal_brute_force_on_their_datasets(eps0, n):
    for eps in [0.0, 0.2, 1.0]:
        p = shuffled_histogram((1,) + (0,) * (n - 1), eps0, 3)
        q = shuffled_histogram((2,) + (0,) * (n - 1), eps0, 3)
        got = shuffle.shuffled_rr_delta(eps0, n, eps, k=3)
        assert got.lower - 1e-13 <= hockey_stick(p, q, eps) <= got.upper + 1e-13
        for ones in range(n):
            data = (1,) * ones + (0,) * (n - 1 - ones)
            p = shuffled_histogram((0,) + data, eps0, 2)
            q = shuffled_histogram((1,) + data, eps0, 2)
            got = shuffle.shuffled_rr_delta(eps0, n, eps, k=2, others_ones=ones)
            assert got.lower - 1e-13 <= hockey_stick(p, q, eps) <= got.upper + 1e-13


def exact_binary_rr_delta(eps0, n, ones, eps):
    """Shuffled binary RR (count of reported 1s), differing user 0 vs 1, ``ones`` others hold 1:
    full pmfs from scipy.stats.binom and np.convolve, both directions."""
    keep = expit(eps0)
    w = np.convolve(stats.binom.pmf(np.arange(ones + 1), ones, keep),
                    stats.binom.pmf(np.arange(n - ones), n - 1 - ones, 1 - keep))
    w_cur, w_prev = np.append(w, 0.0), np.insert(w, 0, 0.0)
    p = keep * w_cur + (1 - keep) * w_prev
    q = (1 - keep) * w_cur + keep * w_prev
    x = math.exp(eps)
    return max(np.maximum(p - x * q, 0).sum(), np.maximum(q - x * p, 0).sum())


@pytest.mark.parametrize("n,eps0", [(2000, 1.0), (2000, 4.0), (20_000, 2.0)])
def test_binary_rr_at_the_upper_bounds_meets_delta(n, eps0):
    """Binary RR is in FMT23's class: at its epsilon the exact shuffled-RR delta must be <= delta,
    and the bound is within 40% of the exact binary-RR epsilon (FMT23, Fig. 1: close to it)."""
    from scipy.optimize import brentq

    delta = 1e-6
    datasets = (0, (n - 1) // 2)
    for name, eps in [("fmt23", shuffle.fmt23_epsilon(eps0, n, delta).epsilon),
                      ("fmt21", shuffle.fmt21_epsilon(eps0, n, delta).epsilon)]:
        for ones in datasets:
            assert exact_binary_rr_delta(eps0, n, ones, eps) <= delta * (1 + 1e-9), name
    exact = brentq(lambda e: max(exact_binary_rr_delta(eps0, n, o, e) for o in datasets) - delta,
                   0.0, eps0)
    assert exact <= shuffle.fmt23_epsilon(eps0, n, delta).epsilon <= 1.4 * exact
    assert shuffle.rr_lower_bound_epsilon(eps0, n, delta, k=2) == pytest.approx(exact, rel=1e-5)


# ---------------------------------------------------------------------------------------------
# orderings among the bounds at realistic sizes
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [10_000, 100_000, 1_000_000])
@pytest.mark.parametrize("eps0", [0.5, 1.0, 2.0, 3.0])
def test_numerical_bounds_below_closed_forms_and_fmt23_below_fmt21(n, eps0):
    delta = 1e-6
    fmt21 = shuffle.fmt21_epsilon(eps0, n, delta).epsilon
    fmt23 = shuffle.fmt23_epsilon(eps0, n, delta, randomizer="binary_rr").epsilon
    assert fmt23 <= fmt21
    assert fmt21 <= shuffle.balle2020_epsilon(eps0, n, delta).epsilon
    try:
        closed = shuffle.fmt21_closed_form_epsilon(eps0, n, delta).epsilon
    except ParameterError:
        closed = None
    if closed is not None:
        assert fmt21 <= closed
    best = shuffle.epsilon(eps0, n, delta)
    assert best.epsilon == min(best.candidates.values())
    assert best.epsilon <= fmt21


@pytest.mark.parametrize("n,eps0", [(10_000, 1.0), (100_000, 3.0), (100_000, 6.0)])
def test_rr_lower_bounds_below_restricted_class_upper_bound(n, eps0):
    delta = 1e-6
    lower = shuffle.lower_bound(eps0, n, delta)
    assert 0 < lower.epsilon <= shuffle.fmt23_epsilon(eps0, n, delta, randomizer=("krr", 3)).epsilon
    assert lower.epsilon <= shuffle.fmt23_epsilon(eps0, n, delta, randomizer="binary_rr").epsilon


def test_closed_form_refuses_outside_its_validity_condition():
    n, delta = 10_000, 1e-6
    limit = math.log(n / (16 * math.log(4 / delta)))
    shuffle.fmt21_closed_form_epsilon(limit - 0.01, n, delta)
    with pytest.raises(ParameterError, match="eps0"):
        shuffle.fmt21_closed_form_epsilon(limit + 0.01, n, delta)
    best = shuffle.epsilon(limit + 0.5, n, delta)
    assert "fmt21_closed_form" not in best.candidates and best.method == "fmt21"


def test_large_n_is_fast():
    start = time.perf_counter()
    for eps0 in (0.5, 8.0):
        shuffle._clone_pair.cache_clear()
        shuffle.fmt21_epsilon(eps0, 1_000_000, 1e-6)
    assert time.perf_counter() - start < 4.0  # the benchmark target is 1 s per point


# ---------------------------------------------------------------------------------------------
# the pair as a PLD
# ---------------------------------------------------------------------------------------------
def test_pld_from_pmfs_sandwiches_exact_delta_and_composes():
    eps0, n = 1.5, 4
    c = math.exp(-eps0)
    pld = shuffle.dominating_pair_pld(eps0, n, value_discretization_interval=1e-4)
    p0, p1 = clone_pair_by_enumeration(eps0, n, c)
    for eps in [0.0, 0.3, 1.0]:
        b = pld.delta_for_epsilon(eps)
        assert b.lower - 1e-12 <= hockey_stick(p0, p1, eps) <= b.upper + 1e-12
    # three independent runs: the product pair, enumerated
    p3, q3 = {}, {}
    for (x, px), (y, py), (z, pz) in itertools.product(p0.items(), repeat=3):
        p3[(x, y, z)] = px * py * pz
    for (x, qx), (y, qy), (z, qz) in itertools.product(p1.items(), repeat=3):
        q3[(x, y, z)] = qx * qy * qz
    composed = pld.self_compose(3)
    for eps in [0.2, 1.0, 2.5]:
        b = composed.delta_for_epsilon(eps)
        assert b.lower - 1e-12 <= hockey_stick(p3, q3, eps) <= b.upper + 1e-12
        assert b.upper - b.lower < 1e-3


def test_pld_from_profile_route_is_an_upper_bound():
    eps0, n = 2.0, 200_000
    c = math.exp(-eps0)
    pld = shuffle.dominating_pair_pld(eps0, n, max_support=1000)
    assert not pld.has_lower_bound
    for eps in [0.01, 0.02, 0.04]:
        exact = shuffle.clone_pair_delta(eps0, n, c, eps)
        b = pld.delta_for_epsilon(eps)
        assert exact.upper <= b.upper <= exact.upper * 1.01 + 1e-15


# ---------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,name", [
    (dict(eps0=-0.1, n=100, delta=1e-6), "eps0"),
    (dict(eps0=math.nan, n=100, delta=1e-6), "eps0"),
    (dict(eps0=1.0, n=1, delta=1e-6), "n"),
    (dict(eps0=1.0, n=10.5, delta=1e-6), "n"),
    (dict(eps0=1.0, n=100, delta=0.0), "delta"),
    (dict(eps0=1.0, n=100, delta=1.0), "delta"),
    (dict(eps0=1.0, n=100, delta=1e-6, randomizer="gaussian"), "randomizer"),
    (dict(eps0=1.0, n=100, delta=1e-6, randomizer=("krr", 1)), "randomizer"),
    (dict(eps0=1.0, n=100, delta=1e-6, method="fmt23"), "randomizer"),
    (dict(eps0=1.0, n=100, delta=1e-6, randomizer="binary_rr", delta0=1e-9), "delta0"),
    (dict(eps0=1.0, n=100, delta=1e-6, method="fmt21", delta0=1e-9), "method"),
    (dict(eps0=1.0, n=100, delta=1e-6, delta0=-1e-9), "delta0"),
    (dict(eps0=1.0, n=100, delta=1e-6, method="magic"), "method"),
])
def test_bad_input_raises_parameter_error(kwargs, name):
    with pytest.raises(ParameterError, match=name):
        shuffle.epsilon(**kwargs)


def test_fmt23_refuses_general_randomizers_everywhere():
    with pytest.raises(ParameterError, match="randomizer"):
        shuffle.fmt23_epsilon(1.0, 100, 1e-6, randomizer="general")
    with pytest.raises(ParameterError, match="randomizer"):
        shuffle.dominating_pair_pld(1.0, 100, method="fmt23")


def test_approximate_dp_randomizers_use_only_balle_or_no_amplification():
    res = shuffle.epsilon(0.05, 10**7, 1e-6, delta0=1e-20)
    assert set(res.candidates) <= {"balle2020", "none"}
    assert res.epsilon <= 0.05


@pytest.mark.parametrize("eps0,n", [(0.5, 5), (2.0, 6), (1.0, 7)])
def test_clone_pair_rdp_matches_enumeration(eps0, n):
    """Renyi divergence of the enumerated pair (both directions) <= ours, and ours is tight."""
    c = shuffle.fmt21_clone_probability(eps0)
    p0, p1 = clone_pair_by_enumeration(eps0, n, c)
    orders = np.array([1.5, 2.0, 8.0])
    keys = sorted(set(p0) | set(p1))
    a = np.array([p0.get(k, 0.0) for k in keys])
    b = np.array([p1.get(k, 0.0) for k in keys])
    exact = [max(np.log(np.sum(a ** o * b ** (1 - o))) / (o - 1),
                 np.log(np.sum(b ** o * a ** (1 - o))) / (o - 1)) for o in orders]
    ours = shuffle.clone_pair_rdp(eps0, n, orders)
    assert np.all(ours >= np.array(exact) - 1e-12)
    assert np.all(ours <= np.array(exact) + 1e-9)


@pytest.mark.parametrize("eps0,n", [(1.0, 7), (3.0, 6)])
def test_clone_pair_rdp_at_large_orders_is_finite_and_above_the_exact_value(eps0, n):
    """Orders above 710 / eps0: the outside term e^(eps0 (a - 1)) overflowed to inf with a
    RuntimeWarning; the value is now at most eps0 (the pair is eps0-DP) and, with each term
    raised by its rounding bound, never below the exact Renyi divergence of the enumerated
    pair (summed in 50-digit arithmetic)."""
    import warnings
    import mpmath
    c = shuffle.fmt21_clone_probability(eps0)
    p0, p1 = clone_pair_by_enumeration(eps0, n, c)
    keys = sorted(set(p0) | set(p1))
    orders = [16.0, 1000.0, 20000.0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = shuffle.clone_pair_rdp(eps0, n, orders)
    with mpmath.workdps(50):
        for order, value in zip(orders, ours):
            exact = max(mpmath.log(sum(mpmath.mpf(x.get(k, 0.0)) ** order
                                       * mpmath.mpf(y.get(k, 0.0)) ** (1 - order)
                                       for k in keys if x.get(k, 0.0) > 0)) / (order - 1)
                        for x, y in ((p0, p1), (p1, p0)))
            assert float(exact) <= value <= eps0


def test_clone_pair_rdp_large_n_decreases_and_bad_orders_rejected():
    small = shuffle.clone_pair_rdp(1.0, 10_000, [2.0])[0]
    large = shuffle.clone_pair_rdp(1.0, 100_000, [2.0])[0]
    assert 0 < large < small < 1.0  # the pure-DP RDP bound at order 2 is at most eps0
    with pytest.raises(ParameterError, match="orders"):
        shuffle.clone_pair_rdp(1.0, 100, [1.0])


@pytest.mark.parametrize("eps0", [25.0, 36.0, 50.0])
@pytest.mark.parametrize("n", [10, 1000])
def test_clone_pair_at_large_eps0_stays_above_shuffled_binary_rr(eps0, n):
    """The clone pair is evaluated by the count-pair engine, whose threshold handling was
    written for large eps0 (at eps0 = 25 a summand of relative size 1e-17 decides the sign):
    FMT21's and FMT23's epsilons stay above the exact lower bound of shuffled binary randomized
    response (an eps0-DP randomizer; checked against brute force above), and at eps0 itself,
    or at eps0 = 0, delta is exactly 0 (the pair is eps0-DP)."""
    for delta in (1e-6, 1e-12):
        lower = shuffle.rr_lower_bound_epsilon(eps0, n, delta)
        assert shuffle.fmt21_epsilon(eps0, n, delta).epsilon >= lower * (1 - 1e-12)
        assert shuffle.fmt23_epsilon(eps0, n, delta).epsilon >= lower * (1 - 1e-12)
    c = shuffle.fmt21_clone_probability(eps0)
    assert shuffle.clone_pair_delta(eps0, n, c, eps0) == (0.0, 0.0)
    assert shuffle.clone_pair_delta(0.0, n, 1.0, 0.1) == (0.0, 0.0)
    assert shuffle.clone_pair_epsilon(0.0, n, 1.0, 1e-6) == 0.0


# ---------------------------------------------------------------------------------------------
# tiny eps0: the laws' rounding against 50-digit enumeration
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("eps0,n,eps", [
    (1.8893068134791176e-08, 3, 1.2750980381398842e-08),   # upper 2.3e-8 relative below
    (2.3099579911062236e-08, 3, 3.0726371040256024e-09),   # lower above
    (2.4783897485110614e-08, 4, 2.4783897485110548e-08),   # lower 2e-18 where exact is 8e-25
    (0.011605433079746534, 3, 0.01160543307974652),        # upper 0 where exact is 5e-19
    (1.8893068134791176e-08, 3, 0.0), (1e-3, 4, 1e-4), (0.5, 3, 0.1)])
def test_shuffled_ternary_rr_brackets_the_exact_value_at_a_tiny_eps0(eps0, n, eps):
    """Shuffled 3-RR, the differing user a vs b, the others at c, enumerated at 50 digits."""
    import mpmath
    with mpmath.workdps(50):
        p = krr_histogram_law_mp((0,) + (2,) * (n - 1), [eps0] * n, 3)
        q = krr_histogram_law_mp((1,) + (2,) * (n - 1), [eps0] * n, 3)
        exact = hockey_stick_mp(p, q, eps)
    got = shuffle.shuffled_rr_delta(eps0, n, eps, k=3)
    assert got.lower <= exact <= got.upper, (got, exact)


@pytest.mark.parametrize("eps0,n", [(1.0420989503736077e-09, 2), (1e-6, 3),
                                    (4.154323803980885e-05, 2), (0.3, 4)])
def test_clone_pair_total_variation_is_bracketed_at_a_tiny_eps0(eps0, n):
    """At eps = 0 no rounding margin can be taken off the evaluation point: the clone pair's
    upper bound was a relative 9.5e-8 below the exact total variation at eps0 = 1e-9, and the
    FMT21 epsilon was 0 where it is 7e-17."""
    import mpmath
    c = shuffle.fmt21_clone_probability(eps0)
    with mpmath.workdps(50):
        p0, p1 = clone_pair_by_enumeration(eps0, n, c, exact=True)
        exact = hockey_stick_mp(p0, p1, 0.0)
    got = shuffle.clone_pair_delta(eps0, n, c, 0.0)
    assert got.lower <= exact <= got.upper, (got, exact)
    assert float(shuffle.clone_pair_profile(eps0, n, c)(np.array([0.0]))[0]) >= exact
    if eps0 == 1.0420989503736077e-09:
        # delta just below the total variation: epsilon is positive
        assert shuffle.fmt21_epsilon(eps0, n, 2.6052472e-10).epsilon > 0


def test_fmt21_closed_form_is_never_below_its_formula_and_refuses_at_its_limit():
    """The closed form in 50-digit arithmetic (the formula of the docstring): the float one was
    a few ulps below it at 381 of 748 sampled points, and eps0 a few ulps above the exact limit
    ``log(n / (16 log(4/delta)))`` was admitted."""
    import mpmath
    with mpmath.workdps(50):
        _check_fmt21_closed_form_against_mpmath(mpmath)


def _check_fmt21_closed_form_against_mpmath(mpmath):
    rng = np.random.default_rng(5)
    for _ in range(300):
        n = int(10 ** rng.uniform(3, 8))
        delta = float(10 ** rng.uniform(-12, -3))
        limit = mpmath.log(n / (16 * mpmath.log(4 / mpmath.mpf(delta))))
        if limit <= 0:
            continue
        eps0 = float(limit) * float(rng.uniform(0.01, 0.999))
        e0, d = mpmath.mpf(eps0), mpmath.mpf(delta)
        a = 8 * mpmath.sqrt(mpmath.exp(e0) * mpmath.log(4 / d) / n) + 8 * mpmath.exp(e0) / n
        e = mpmath.log(1 + a)
        exact = mpmath.log(1 + (1 - mpmath.exp(-e0)) / (1 + mpmath.exp(-e0 - e)) * a)
        got = shuffle.fmt21_closed_form_epsilon(eps0, n, delta).epsilon
        assert exact <= got <= exact * (1 + 1e-11)
    eps0, n, delta = 0.7691341123148706, 991, 1.369712670807575e-12
    assert mpmath.log(n / (16 * mpmath.log(4 / mpmath.mpf(delta)))) < eps0
    with pytest.raises(ParameterError, match="eps0"):
        shuffle.fmt21_closed_form_epsilon(eps0, n, delta)
