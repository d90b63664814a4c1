"""The shuffle model with a known randomizer (dpplugins.amplification.shuffle_model).

Exact enumeration over every output and every dataset for n <= 7, the validity verdict on the
variation-ratio pair (a counterexample), exact lower bounds never above the upper bounds, the
binary-RR tightness goal, composition over rounds, and the accountant's ShuffleEvent support.
No published table values are used: we had none we could check against a primary source; the
anchors are the clone-pair code of :mod:`dpplugins.amplification.shuffle` instead.
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict

import mpmath
import numpy as np
import pytest
from scipy import special, stats
from scipy.special import gammaln

from dpplugins.accountants import UnsupportedEventError, create
from dpplugins.amplification import count_pair, krr_third_value
from dpplugins.amplification import shuffle as sh
from dpplugins.amplification import shuffle_model as sm
from dpplugins.amplification import swap
from dpplugins.errors import ParameterError
from dpplugins.events import (EpsilonDeltaEvent, GaussianEvent, LocalHashingEvent,
                              RandomizedResponseEvent, SelfComposedEvent, ShuffleEvent, from_dict)
from dpplugins.samplers import ShuffledEpochs
from conftest import hockey_stick_mp


# -- brute force --------------------------------------------------------------------------------
def histogram_law(rows):
    """Law of the histogram of independent reports, report i ~ rows[i] (a probability vector)."""
    law = {tuple([0] * len(rows[0])): 1.0}
    for row in rows:
        nxt = defaultdict(float)
        for h, pr in law.items():
            for j, pj in enumerate(row):
                if pj:
                    g = list(h)
                    g[j] += 1
                    nxt[tuple(g)] += pr * pj
        law = nxt
    return law


def hockey(p, q, eps):
    x = math.exp(eps)
    return sum(max(p.get(key, 0.0) - x * q.get(key, 0.0), 0.0) for key in set(p) | set(q))


def blanket_functional(values, masses, n):
    """``(1/n) E[(G_1 + ... + G_n)_+]`` for i.i.d. G taking ``values`` w.p. ``masses`` (the
    rest at 0), by summing over every vector of counts (log-space multinomials)."""
    values = np.append(np.asarray(values, float), 0.0)
    masses = np.append(np.asarray(masses, float), 1.0 - float(np.sum(masses)))
    keep = masses > 0
    values, log_m = values[keep], np.log(masses[keep])
    total = 0.0
    for counts in itertools.product(range(n + 1), repeat=len(values) - 1):
        if sum(counts) > n:
            continue
        c = np.append(counts, n - sum(counts))
        s = float(np.dot(c, values))
        if s > 0:
            total += s * math.exp(gammaln(n + 1) - float(np.sum(gammaln(c + 1)))
                                  + float(np.dot(c, log_m)))
    return total / n


def krr_row(eps0, k, value):
    z = math.exp(eps0) + k - 1
    row = [1 / z] * k
    row[value] = math.exp(eps0) / z
    return row


def shuffled_krr_worst(eps0, k, n, eps):
    """Exact max over all neighbouring datasets (differing user 0 vs 1; by symmetry every other
    dataset is a relabelling) and both directions, by enumerating histograms."""
    best = 0.0
    for others in itertools.combinations_with_replacement(range(k), n - 1):
        rest = [krr_row(eps0, k, v) for v in others]
        p = histogram_law([krr_row(eps0, k, 0)] + rest)
        q = histogram_law([krr_row(eps0, k, 1)] + rest)
        best = max(best, hockey(p, q, eps), hockey(q, p, eps))
    return best


def pair_law(n, pi, v0, v1):
    return histogram_law([list(v0)] + [list(pi)] * (n - 1)), \
        histogram_law([list(v1)] + [list(pi)] * (n - 1))


# -- the count-pair engine ----------------------------------------------------------------------
def test_count_pair_matches_enumeration():
    rng = np.random.default_rng(7)
    for trial in range(60):
        n = int(rng.integers(1, 8))
        e = math.exp(rng.uniform(0.1, 4.0))
        k = int(rng.integers(2, 6))
        z = e + k - 1
        kind = trial % 3
        if kind == 0:
            pi, v0, v1 = (e / z, 1 / z, (k - 2) / z), (e / z, 1 / z, (k - 2) / z), \
                (1 / z, e / z, (k - 2) / z)
        elif kind == 1:
            pi, v0, v1 = (1 / z, 1 / z, (e + k - 3) / z), (e / z, 1 / z, (k - 2) / z), \
                (1 / z, e / z, (k - 2) / z)
        else:
            c, a = rng.uniform(0.01, 1.0), e / (e + 1)
            pi, v0, v1 = (c / 2, c / 2, 1 - c), (a, 1 - a, 0.0), (1 - a, a, 0.0)
        pair = sm.CountPair(n, pi, v0, v1)
        p, q = pair_law(n, pi, v0, v1)
        for eps in rng.uniform(0, math.log(e), 4):
            exact = max(hockey(p, q, eps), hockey(q, p, eps))
            bounds = pair.delta(eps)
            assert bounds.lower - 1e-13 <= exact <= bounds.upper + 1e-13


def _count_pair_hockey_by_summation(n, pi, v0, v1, eps):
    """``D_{e^eps}(P0 || P1)`` of a count pair summed term by term: ``P_b(h) = Mult_n(h; pi) / n
    * sum_y v_b(y) h_y / pi_y`` over the counts ``(a, T - a, n - T)`` within 15 standard
    deviations of T's mean and 40 of a's (the rest weighs below 1e-40), every summand a
    non-negative product of scipy's binomial pmfs -- no closed form, no cancellation."""
    x = math.exp(eps)
    pa, pb, pc = pi
    pab = min(pa + pb, 1.0)
    theta = pa / (pa + pb)
    sd_t = math.sqrt(n * pab * (1 - pab))
    ts = np.arange(max(0, int(n * pab - 15 * sd_t)), min(n, int(n * pab + 15 * sd_t)) + 1)
    total = 0.0
    for t, w in zip(ts, stats.binom.pmf(ts, n, pab)):
        sd_a = math.sqrt(t * theta * (1 - theta)) + 1
        a = np.arange(max(0, int(t * theta - 40 * sd_a)), min(t, int(t * theta + 40 * sd_a)) + 1)
        g = [v0[0] * a / pa + v0[1] * (t - a) / pb + (v0[2] * (n - t) / pc if pc else 0.0),
             v1[0] * a / pa + v1[1] * (t - a) / pb + (v1[2] * (n - t) / pc if pc else 0.0)]
        total += w * float(np.sum(stats.binom.pmf(a, t, theta) * np.maximum(g[0] - x * g[1], 0)))
    return total / n


@pytest.mark.parametrize("t", [1, 2, 15, 16, 999, 1000, 12_345, 100_000, 1_506_656, 10**8,
                               10**9])
def test_binomial_pmf_is_within_its_assumed_error(t):
    """The library's binomial pmf (Boost below 1000 trials, Loader's form above: the anchors of
    ``binomial_pmf_rows``, the windows of the count pairs) against mpmath at 40 digits, at the
    ends and from the mean to 9 standard deviations out, for p from 1e-12 to 1 - 1e-9: within
    ``binomial_pmf_error(t)``.  A review found Boost off by 5.8e-11 at t = 1.5e6 (7.5e-9 at
    1e8), above the 1e-12 the shuffle modules assumed."""
    mpmath.mp.dps = 40
    for p in (0.4999990242, 0.500000001, 0.3, 0.01, 1e-6, 1e-12, 0.99, 1 - 1e-9,
              0.2689414213699951):
        mean, sd = t * p, math.sqrt(t * p * (1 - p))
        ks = {int(min(max(round(mean + z * sd), 0), t)) for z in (-9, -6, -2.5, -1, 0, 0.5, 1,
                                                                   3, 6, 9)} | {0, t}
        for k in sorted(ks):
            exact = mpmath.binomial(t, k) * mpmath.mpf(p) ** k * (1 - mpmath.mpf(p)) ** (t - k)
            if exact < mpmath.mpf("1e-280"):
                continue
            ours = float(count_pair.binomial_pmf(np.array([k]), t, p)[0])
            assert abs(mpmath.mpf(ours) / exact - 1) <= count_pair.binomial_pmf_error(t), (p, k)


def test_parameter_drift_bounds_the_pmf_ratio_of_a_rounded_probability():
    """``parameter_drift`` against the exact log-ratio of the two binomial pmfs (mpmath): for a
    probability moved by relative r either way, ``k log(p'/p) + (t - k) log((1 - p')/(1 - p))``
    is linear in k, so its largest size is at k = 0 or k = t."""
    mpmath.mp.dps = 40
    for t, p, r in ((10**6, 0.3, 1e-15), (10**8, 0.999, 4e-15), (1000, 1e-9, 1e-12),
                    (10**4, 0.5, 1e-6)):
        bound = count_pair.parameter_drift(((t, p, r),))
        for sign in (-1, 1):
            q = mpmath.mpf(p) * (1 + sign * mpmath.mpf(r))
            ends = (t * mpmath.log(q / p), t * mpmath.log((1 - q) / (1 - mpmath.mpf(p))))
            assert max(abs(e) for e in ends) <= bound
            assert bound <= 1.01 * max(abs(e) for e in ends) + 1e-300


@pytest.mark.parametrize("p", [0.5, 0.3333, 0.01, 0.97, 1e-4, 0.999999])
def test_binomial_pmf_rows_match_scipy_within_the_returned_bound(p):
    """The recurrence between Boost anchors (``binomial_pmf_rows``) against
    ``scipy.stats.binom.pmf`` (Boost at every point; the pmf itself is checked against mpmath
    above), on windows of rows of up to 5000 trials, near the mode and in the far tails (where
    it falls back to Boost), 0 and the full row included."""
    rng = np.random.default_rng(11)
    t = rng.integers(0, 5000, 300)
    mean = t * p
    lo = np.clip(mean - rng.uniform(0, 60, 300) * np.sqrt(t * p * (1 - p) + 1), 0, t)
    lo = lo.astype(np.int64)
    hi = np.minimum(t, lo + rng.integers(0, 400, 300))
    lo[:3], hi[:3] = 0, t[:3]
    values, bound = count_pair.binomial_pmf_rows(t, lo, hi, p)
    row, k = count_pair.ragged_windows(lo, hi)
    reference = stats.binom.pmf(k, t[row], p)
    assert values.shape == reference.shape and np.all(values >= 0)
    normal = reference > 1e-290
    assert np.all(np.abs(values[normal] / reference[normal] - 1) <= bound + 1e-13)
    assert np.all(values[~normal] <= 1e-280)


@pytest.mark.parametrize("n,pi,v0,v1", [
    (7, (0.2, 0.1, 0.7), (0.5, 0.1, 0.4), (0.1, 0.5, 0.4)),
    (40, (0.25, 0.25, 0.5), (0.6, 0.1, 0.3), (0.1, 0.6, 0.3)),
    (300, (0.05, 0.05, 0.9), (0.4, 0.05, 0.55), (0.05, 0.4, 0.55)),
    (60, (0.5, 0.5, 0.0), (0.75, 0.25, 0.0), (0.25, 0.75, 0.0)),
])
def test_count_pair_merged_by_loss_sums_the_enumerated_outcomes(n, pi, v0, v1):
    """``count_pair_loss_binned_pmfs``: the pmfs of a count pair enumerated outcome by outcome
    (the mixture of the differing user's category and scipy's multinomial of the others), merged
    into the same loss cells, agree cell by cell within the returned relative bound, and the
    merged pair's hockey-stick divergence is never above the exact pair's (a post-processing)
    and close to it."""
    h = 0.01
    pair = sm.CountPair(n, pi, v0, v1)
    p0, p1, relative, outside = count_pair.count_pair_loss_binned_pmfs(pair, h)
    cells0, cells1 = defaultdict(float), defaultdict(float)
    exact0, exact1 = [], []
    others = stats.multinomial(n - 1, pi)
    for a in range(n + 1):
        for b in range(n + 1 - a):
            c = n - a - b
            counts = [(a - 1, b, c), (a, b - 1, c), (a, b, c - 1)]
            mass = [others.pmf(x) if min(x) >= 0 else 0.0 for x in counts]
            m0 = sum(v * m for v, m in zip(v0, mass))
            m1 = sum(v * m for v, m in zip(v1, mass))
            exact0.append(m0)
            exact1.append(m1)
            if m0 > 0 and m1 > 0:
                cell = math.floor(math.log(m0 / m1) / h)
                cells0[cell] += m0
                cells1[cell] += m1
    # the last two entries: the outcomes of loss +inf and -inf (none here)
    assert p0[-2] == p1[-2] == p0[-1] == p1[-1] == 0
    keys = np.floor(np.log(p0[:-2] / p1[:-2]) / h).astype(int)
    assert len(set(keys)) == len(keys)
    # the window leaves out at most e^-32 of each law, so a cell may miss that much
    for key, m0, m1 in zip(keys, p0[:-2], p1[:-2]):
        assert abs(m0 - cells0[key]) <= relative * cells0[key] + 1e-13
        assert abs(m1 - cells1[key]) <= relative * cells1[key] + 1e-13
    assert sum(cells0[k] for k in set(cells0) - set(keys)) <= 1e-13
    assert abs(p0.sum() - 1) <= 1e-12 and abs(p1.sum() - 1) <= 1e-12
    # the bound on the mass outside the window, against the enumeration
    exact_outside = sum(cells0[k] for k in set(cells0) - set(keys))
    assert exact_outside <= outside and outside < 1e-12
    for eps in (0.0, 0.1, 0.3, 0.8):
        x = math.exp(eps)
        exact = max(hockey_arrays(exact0, exact1, x), hockey_arrays(exact1, exact0, x))
        merged = max(hockey_arrays(p0, p1, x), hockey_arrays(p1, p0, x))
        assert merged <= exact + 1e-12
        assert merged >= exact - 2 * h * x * max(exact, 1e-3)


def hockey_arrays(p, q, x):
    return float(np.sum(np.maximum(np.asarray(p) - x * np.asarray(q), 0.0)))


@pytest.mark.parametrize("n,pi,v0,v1,epsilons", [
    # FMT21's clone pair of eps0 = 10 (about 9,000 of the 1e8 users in the categories A, B)
    (10**8, "clone", None, None, (0.06, 0.1, 0.12)),
    # binary RR: the others report 1 or 0 with probability 1/2, the differing user holds 1 or 0
    (10**8, (0.5, 0.5, 0.0), (0.75, 0.25, 0.0), (0.25, 0.75, 0.0), (2e-4, 3e-4)),
    (10**7, "clone", None, None, (0.2, 0.3)),
])
def test_count_pair_is_certified_and_narrow_at_large_n(n, pi, v0, v1, epsilons):
    """At n >= 1e7 the count pair's certified interval contains the term-by-term sum and is
    narrow.  Its tail sums were written as ``D T theta P(Bin(T-1) >= J-1) + K P(Bin(T) >= J)``,
    whose two terms cancel by about ``c sqrt(T)``; with the assumed error of Boost's tails
    (1e-12 + 64 u n) the interval was 3e-4 to 5e-4 of the value at n = 1e8 (clone pair), and
    the Laplace family's lower bound at eps0 = 8, n = 1e8, delta = 1e-8 came from a weaker pair
    (0.0038 against an upper bound of 0.0335).  De Moivre's identity leaves a cancellation of
    about ``c^2`` (``_Direction``'s docstring); shuffle.py's own sum of the clone pair had the
    same form and is checked here too."""
    clone = None
    if pi == "clone":
        clone = sh.fmt21_clone_probability(10.0)
        pair = sm.clone_pair(10.0, n, clone)
        pi, v0, v1 = pair.pi, pair.v0, pair.v1
    else:
        pair = sm.CountPair(n, pi, v0, v1)
    for eps in epsilons:
        exact = max(_count_pair_hockey_by_summation(n, pi, v0, v1, eps),
                    _count_pair_hockey_by_summation(n, pi, v1, v0, eps))
        assert 1e-9 < exact
        both = [pair.delta(eps)]
        if clone is not None:  # the clone pair as shuffle.py sums it (its own closed form)
            both.append(sh.clone_pair_delta(10.0, n, clone, eps))
        for bounds in both:
            assert bounds.lower <= exact * (1 + 1e-12) and exact <= bounds.upper * (1 + 1e-12)
            assert bounds.upper - bounds.lower <= 1e-4 * exact


@pytest.mark.parametrize("eps0,n,clone", [(1.0, 1000, "fmt21"), (4.0, 20_000, "fmt23"),
                                          (0.5, 200_000, "fmt23")])
def test_clone_count_pair_agrees_with_the_clone_module(eps0, n, clone):
    c = sh.fmt21_clone_probability(eps0) if clone == "fmt21" else sh.fmt23_clone_probability(eps0)
    ours = sm.clone_pair(eps0, n, c)
    for eps in (0.2 * eps0 / math.sqrt(n / 1000), 0.5 * eps0 / math.sqrt(n / 1000)):
        a, b = ours.delta(eps), sh.clone_pair_delta(eps0, n, c, eps)
        assert a.lower <= b.upper and b.lower <= a.upper
        assert abs(a.upper - b.upper) <= 1e-5 * b.upper + 1e-300


def test_binomial_path_recurrences_are_certified():
    for u0, length, theta, slope, off in ((300_000, 5000, 0.5, 0.5, 300),
                                          (1000, 2000, 0.3, 0.31, -5),
                                          (100, 800, 0.5, 1.3, -60)):
        t = np.arange(length)
        i = np.floor(slope * (u0 + t) + off + np.sqrt(u0 + t) * 0.3).astype(np.int64)
        s, p, es, ep = count_pair._binom_path(u0, i, theta, 1e-12)
        u = u0 + t
        assert np.all(np.abs(s - stats.binom.sf(i - 1, u, theta)) <= es + 1e-300)
        assert np.all(np.abs(p - stats.binom.pmf(i, u, theta)) <= ep + 1e-300)


# -- the validity verdict -------------------------------------------------------------------------
@pytest.mark.parametrize("k,eps0,eps,exact,pair", [(3, 1.0, 0.825, 0.053286, 0.019603),
                                                    (4, 2.0, 1.8, 0.091696, 0.022945)])
def test_variation_ratio_pair_is_not_an_upper_bound_for_krr(k, eps0, eps, exact, pair):
    """Two users, X0 = (a, a), X1 = (b, a): the event 'both report a' alone beats the pair."""
    p = histogram_law([krr_row(eps0, k, 0), krr_row(eps0, k, 0)])
    q = histogram_law([krr_row(eps0, k, 1), krr_row(eps0, k, 0)])
    true = max(hockey(p, q, eps), hockey(q, p, eps))
    vr = sm.variation_ratio_pair(*sm.variation_ratio_parameters(("krr", eps0, k)), 2).delta(eps)
    assert true == pytest.approx(exact, abs=1e-6) and vr.upper == pytest.approx(pair, abs=1e-6)
    assert true > 2 * vr.upper
    # our bounds hold; the blanket is exact here
    assert sm.KRRBlanket(eps0, 2, k).delta(eps) >= true - 1e-12
    assert sm.delta_bounds(("krr", eps0, k), 2, eps).upper >= true - 1e-12


def test_variation_ratio_violation_at_n_100():
    pairs = sm.krr_lower_pairs(2.0, 100, 4)
    vr = sm.variation_ratio_pair(*sm.variation_ratio_parameters(("krr", 2.0, 4)), 100)
    assert pairs["others_at_a"].delta(1.45).lower > 1.5 * vr.delta(1.45).upper


@pytest.mark.parametrize("k", [3, 4, 7])
def test_variation_ratio_pair_for_krr_is_the_others_at_c_lower_pair(k):
    vr = sm.variation_ratio_pair(*sm.variation_ratio_parameters(("krr", 1.5, k)), 500)
    low = sm.krr_lower_pairs(1.5, 500, k)["others_at_c"]
    for eps in (0.05, 0.2, 0.5):
        assert vr.delta(eps).upper == pytest.approx(low.delta(eps).upper, rel=1e-9, abs=1e-300)


def test_general_variation_ratio_parameters_give_the_stronger_clone():
    p, beta, q = sm.variation_ratio_parameters(("general", 2.0))
    assert beta == pytest.approx((p - 1) / (p + 1))
    vr, strong = sm.variation_ratio_pair(p, beta, q, 1000), sm._strong_clone(2.0, 1000)
    for eps in (0.1, 0.3):
        assert vr.delta(eps).upper == pytest.approx(strong.delta(eps).upper, rel=1e-9)
    # ... which general randomizers get here too, certified, by the blanket argument of the
    # module docstring (tests/test_shuffle_model_general.py), below FMT21
    up = sm.epsilon(("general", 2.0), 1000, 1e-6)
    assert up.method == "fmt23" and up.epsilon < up.candidates["fmt21"]
    assert up.epsilon == pytest.approx(vr.epsilon(1e-6, 2.0), rel=1e-3)


# -- exact enumeration for n <= 7 ---------------------------------------------------------------
@pytest.mark.parametrize("eps0", [0.5, 2.0, 4.0])
def test_binary_rr_worst_case_matches_enumeration(eps0):
    for n in range(2, 8):
        wc = sm.BinaryRRWorstCase(eps0, n)
        for eps in np.linspace(0, eps0, 6)[:-1]:
            exact = shuffled_krr_worst(eps0, 2, n, eps)
            bounds, _ = wc.delta(eps)
            assert bounds.lower - 1e-12 <= exact <= bounds.upper + 1e-12


def test_binary_rr_delta_search_stops_where_only_numerical_error_is_left():
    """delta(0.1) at n = 1e7, eps0 = 1 is about 1e-27 (the blanket's profile) under the FFT
    convolution's rounding charge of about 1e-11: the singletons' lower bounds are 0 and every
    block stayed open until max_blocks (600 blocks, 2314 cores in one query: 17 s; 78 s at
    n = 1e8).  A block whose own core's certified lower bound is within tolerance is no longer
    split: a few dozen blocks.  Where the bounds are resolved (n = 1e4, delta ~ 2.5e-9) the
    search is unchanged and the answer is above the exact lower pairs (validity at small n:
    test_binary_rr_worst_case_matches_enumeration)."""
    wc = sm.BinaryRRWorstCase(1.0, 10**7)
    bounds, blocks = wc.delta(0.1)
    assert len(blocks) < 200
    assert 0 <= bounds.lower <= bounds.upper <= 1e-10
    wc = sm.BinaryRRWorstCase(1.0, 10**4)
    bounds, _ = wc.delta(0.05)
    assert bounds.upper <= bounds.lower * (1 + wc.tol)
    for pair in sm.krr_lower_pairs(1.0, 10**4, 2).values():
        assert pair.delta(0.05).lower <= bounds.upper


def test_binary_rr_epsilon_at_a_tiny_delta_takes_the_stronger_clone():
    """delta = 1e-15: the FFT-convolved cores of the exact search were at their rounding floor
    (about 1e-11 in double), so the search answered eps0 -- no amplification -- after running
    to max_blocks (7.6 s at n = 1e6; 87 s at n = 1e8).  FMT23's stronger clone (valid for
    binary RR) caps it and stops the search once a dataset is certified above it.  The cores
    are now convolved in long double or directly where the charge matters, which resolves n =
    1e6 (eps0 = 1); at n = 1e7, eps0 = 2 neither is enough (direct convolution is too long),
    and the answer is the stronger clone's: checked against shuffle.fmt23_epsilon (the clone
    pair summed in the other module, with its own certified error terms: that module's
    certified lower delta at ours is not above 1e-15, so ours is not below the pair's true
    epsilon), and above the exact lower pairs."""
    spec, n = ("binary_rr", 2.0), 10**7
    found = sm.epsilon(spec, n, 1e-15)
    reference = sh.fmt23_epsilon(2.0, n, 1e-15, randomizer="binary_rr").epsilon
    assert found.method == "fmt23"
    assert abs(found.epsilon - reference) <= 1e-5 * reference
    clone = sh.fmt23_clone_probability(2.0)
    assert sh.clone_pair_delta(2.0, n, clone, found.epsilon).lower <= 1e-15
    assert sm.lower_bound(spec, n, 1e-15).epsilon <= found.epsilon < 0.01
    spec, n = ("binary_rr", 1.0), 10**6
    resolved = sm.epsilon(spec, n, 1e-15)
    assert resolved.method == "binary_rr_exact"
    assert resolved.epsilon < sh.fmt23_epsilon(1.0, n, 1e-15, randomizer="binary_rr").epsilon
    assert resolved.epsilon <= sm.lower_bound(spec, n, 1e-15).epsilon * 1.01


def _binary_rr_all_zero_epsilon(eps0: float, n: int, delta: float) -> float:
    """Epsilon at ``delta`` of :func:`_all_zero_pair`: both directions, bisection on the
    hockey-stick sum."""
    _, p0, p1 = _all_zero_pair(eps0, n)

    def delta_at(eps):
        x = math.exp(eps)
        return max(np.maximum(p0 - x * p1, 0).sum(), np.maximum(p1 - x * p0, 0).sum())
    lo, hi = 0.0, eps0
    for _ in range(80):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if delta_at(mid) > delta else (lo, mid)
    return hi


@pytest.mark.parametrize("eps0,n,delta", [(2.0, 10**7, 1e-12), (0.5, 10**8, 1e-10)])
def test_binary_rr_at_small_deltas_and_many_users_uses_the_exact_worst_case(eps0, n, delta):
    """The exact search's cores are convolved in long double where the double FFT's charge
    (about 1e-11 at n = 1e7-1e8) would move the answer: at eps0 = 2, n = 1e7, delta = 1e-12
    no block was certified below eps0 and the stronger clone answered (0.00562, a gap of 34 %
    to the lower bound); at n = 1e8, delta = 1e-10 the search ran to its 600 blocks.  Now the
    exact worst case answers within 1 % of the certified lower bound, and the bounds contain
    the epsilon of the dataset "every other user holds 0" (computed here from scipy's binomial
    pmf), which is the worst one found."""
    spec = ("binary_rr", eps0)
    found = sm.epsilon(spec, n, delta)
    lower = sm.lower_bound(spec, n, delta).epsilon
    assert found.method == "binary_rr_exact"
    assert found.epsilon <= found.candidates["fmt23"]
    assert found.epsilon - lower <= 0.01 * found.epsilon
    reference = _binary_rr_all_zero_epsilon(eps0, n, delta)
    assert lower <= reference * (1 + 1e-9) and reference <= found.epsilon


@pytest.mark.parametrize("k", [3, 4])
def test_krr_upper_bounds_dominate_enumeration(k):
    for eps0 in (1.0, 3.0):
        for n in range(2, 6 if k == 4 else 7):
            for eps in np.linspace(0, eps0, 5)[:-1]:
                exact = shuffled_krr_worst(eps0, k, n, eps)
                assert sm.KRRBlanket(eps0, n, k).delta(eps) >= exact - 1e-12
                assert sm._strong_clone(eps0, n).delta(eps).upper >= exact - 1e-12
                low = max(p.delta(eps).lower for p in sm.krr_lower_pairs(eps0, n, k).values())
                assert low <= exact + 1e-12


@pytest.mark.parametrize("eps0", [25.0, 40.0, 50.0])
def test_krr_upper_bounds_dominate_enumeration_at_large_eps0(eps0):
    """Found by a hostile sweep: the stacked blanket estimated its threshold by ``floor(-k/d)``
    without the correction of the count pairs, and dropped the one positive summand once
    ``e^eps`` swamped it: k-RR (k = 3, n = 2, eps0 = 40) certified epsilon 37.02 at delta 1e-3
    and delta(39.999) = 0, where enumeration gives 39.999 and 1e-3 (the same for the families,
    heterogeneous k-RR and composed rounds).  Upper bounds on delta and epsilon against exact
    enumeration over every dataset."""
    for k, n in ((3, 2), (3, 3), (4, 2)):
        spec = ("krr", eps0, k)
        for eps in (eps0 - 5.0, eps0 - 1.0, eps0 - 1e-3):
            exact = shuffled_krr_worst(eps0, k, n, eps)
            assert sm.delta_bounds(spec, n, eps).upper >= exact * (1 - 1e-12), (k, n, eps)
            assert sm.KRRBlanket(eps0, n, k).delta(eps) >= exact * (1 - 1e-12)
            if exact > 1e-300:
                # any eps whose exact delta is above the target is below the certified epsilon
                assert sm.epsilon(spec, n, exact / 2).epsilon >= eps, (k, n, eps)
    # composed rounds: two rounds of the pair X0 = (a, a), X1 = (b, a) put mass (E/Z)^4 -
    # e^eps (E/Z^2)^2 on "every report is a" (E = e^eps0, Z = E + 2), a lower bound on delta
    acc = create("shuffle").compose(ShuffleEvent(2, RandomizedResponseEvent(eps0, 3)), 2)
    big, z = mpmath.e ** eps0, mpmath.e ** eps0 + 2
    for eps in (2 * eps0 - 5.0, 2 * eps0 - 1.0):
        event = float((big / z) ** 4 - mpmath.e ** eps * (big / z ** 2) ** 2)
        assert acc.get_delta_bounds(eps).upper >= event * (1 - 1e-9)


# -- one round: lower <= upper, tightness, the general fallback ---------------------------------
@pytest.mark.parametrize("spec", [("binary_rr", 1.0), ("krr", 1.0, 3), ("krr", 4.0, 8),
                                  ("general", 1.0), ("general", 4.0)])
@pytest.mark.parametrize("n", [50, 3000])
def test_lower_never_above_upper(spec, n):
    for delta in (1e-3, 1e-7):
        up = sm.epsilon(spec, n, delta)
        low = sm.lower_bound(spec, n, delta)
        assert 0 <= low.epsilon <= up.epsilon <= spec[1] + 1e-12
        if spec[0] == "general":
            # every valid general bound is above shuffled 2-RR and 3-RR
            assert sh.lower_bound(spec[1], n, delta).epsilon <= up.epsilon
            assert up.epsilon == pytest.approx(min(up.candidates.values()))


@pytest.mark.parametrize("n", [1000, 10_000])
@pytest.mark.parametrize("eps0", [0.5, 1.0, 2.0, 4.0, 8.0])
@pytest.mark.parametrize("delta", [1e-6, 1e-8])
def test_binary_rr_gap_below_one_percent(n, eps0, delta):
    b = sm.epsilon_bounds(("binary_rr", eps0), n, delta)
    assert b.upper - b.lower <= 0.01 * b.upper
    assert b.upper <= sh.fmt21_epsilon(eps0, n, delta).epsilon * (1 + 1e-9)
    assert b.upper <= sh.fmt23_epsilon(eps0, n, delta).epsilon * (1 + 1e-9)


def test_krr_is_tight_against_wang_et_al_lower_pair():
    for k, eps0 in ((3, 1.0), (10, 2.0)):
        up = sm.epsilon(("krr", eps0, k), 20_000, 1e-6)
        low = sm.lower_bound(("krr", eps0, k), 20_000, 1e-6)
        assert up.method == "krr_blanket"
        assert up.epsilon - low.epsilon <= 0.005 * up.epsilon
        assert up.epsilon < sm._strong_clone(eps0, 20_000).epsilon(1e-6, eps0)


@pytest.mark.parametrize("k,n,eps0", [(4, 3, 1.0), (5, 4, 2.0), (6, 3, 8.0), (4, 5, 0.5)])
def test_krr_third_value_pair_is_the_enumerated_histogram(k, n, eps0):
    """The exact pair of shuffled k-RR with every other user at a third value, from its four
    counts (``krr_third_value``), against the histograms of all k values enumerated report by
    report: its certified lower delta is at most the enumerated divergence and within its error
    charge of it (at these n its window holds every outcome), and above the pooled three-category pair's
    where k > 3 pools something."""
    pair = krr_third_value.KRRThirdValuePair(eps0, n, k)
    rest = [krr_row(eps0, k, 2)] * (n - 1)
    p = histogram_law([krr_row(eps0, k, 0)] + rest)
    q = histogram_law([krr_row(eps0, k, 1)] + rest)
    pooled = sm.krr_lower_pairs(eps0, n, k)["others_at_c"]
    gained = 0.0
    for eps in np.linspace(0, eps0, 9)[:-1]:
        exact = hockey(p, q, eps)
        assert abs(hockey(q, p, eps) - exact) <= 1e-13     # symmetric in a <-> b
        low = pair.delta_lower(eps)
        assert low <= exact and exact - low <= 2 * pair.relative * (1 + math.exp(eps))
        gained = max(gained, low - pooled.delta(eps).upper)
    assert gained > 0


def test_krr_third_value_pair_stays_out_where_its_error_would_not_be_small():
    """A review: k = 1e15 at eps0 = 0.01 made the parameters' rounding bound overflow
    (math.expm1 of a drift above 709: OverflowError from lower_bound, epsilon_bounds,
    delta_bounds and the shuffle accountant).  The pair is left out there; the pooled pairs
    answer, below the upper bound."""
    assert krr_third_value.third_value_pair(0.01, 1000, 10**15) is None
    b = sm.epsilon_bounds(("krr", 0.01, 10**15), 1000, 1e-6)
    assert 0.0 <= b.lower <= b.upper
    d = sm.delta_bounds(("krr", 0.01, 10**15), 1000, 0.001)
    assert 0.0 <= d.lower <= d.upper


@pytest.mark.parametrize("k,n,delta", [(64, 1000, 1e-6), (64, 1000, 1e-8), (16, 10_000, 1e-6),
                                       (16, 10_000, 1e-8), (256, 1000, 1e-8)])
def test_krr_gap_at_large_eps0_is_below_one_percent(k, n, delta):
    """eps0 = 8 and few users: the pooled third-value pair left the widest k-RR gaps against
    the privacy blanket (5.9 % at k = 64, n = 1000, delta = 1e-6; 8.7 % at 1e-8); the exact
    pair with all four counts certifies within 1 % of it (two independent constructions)."""
    b = sm.epsilon_bounds(("krr", 8.0, k), n, delta)
    assert b.upper - b.lower <= 0.01 * b.upper
    low = sm.lower_bound(("krr", 8.0, k), n, delta)
    assert low.method == f"{k}rr_others_at_c_exact"
    d = sm.delta_bounds(("krr", 8.0, k), n, 0.995 * b.lower)
    assert delta < d.lower <= d.upper


def test_delta_bounds_are_consistent_with_epsilon():
    for spec in (("binary_rr", 2.0), ("krr", 2.0, 5), ("general", 2.0)):
        eps = sm.epsilon(spec, 5000, 1e-6).epsilon
        b = sm.delta_bounds(spec, 5000, eps)
        assert b.lower <= b.upper <= 1e-6 * (1 + 1e-6)


def test_approximate_dp_randomizers_use_balle_or_none():
    b = sm.epsilon(("general", 0.5, 1e-12), 100_000, 1e-6)
    assert set(b.candidates) <= {"balle2020", "none"}
    with pytest.raises(ParameterError):
        sm.randomizer(("krr", 1.0, 3, 0.1))


# -- composition --------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", [("binary_rr", 2.0), ("krr", 2.0, 4), ("general", 1.0)])
def test_composition_brackets_and_grows(spec):
    one = sm.epsilon(spec, 2000, 1e-6).epsilon
    b1 = sm.composed_epsilon_bounds([(spec, 2000, 1)], 1e-6)
    b8 = sm.composed_epsilon_bounds([(spec, 2000, 8)], 1e-6)
    assert b1.lower <= one * (1 + 1e-6) and b1.upper >= one * (1 - 1e-6)
    assert 0 < b8.lower <= b8.upper and b8.upper > b1.upper and b8.lower > b1.lower
    assert b8.upper <= 8 * spec[1]
    d = sm.composed_delta_bounds([(spec, 2000, 8)], b8.upper)
    assert d.lower <= d.upper <= 1e-6 * (1 + 1e-6)


def _all_zero_pair(eps0: float, n: int):
    """Shuffled binary RR on the dataset where every other user holds 0 (one of the datasets
    the worst case ranges over), from scipy's binomial pmf: the count of 1s is ``Bin(n - 1,
    beta) + victim``, ``P0(s) = beta W(s - 1) + alpha W(s)``, ``P1`` with alpha and beta
    swapped, on +-40 standard deviations."""
    alpha, beta = 1 / (1 + math.exp(-eps0)), 1 / (1 + math.exp(eps0))
    mean, sd = (n - 1) * beta, math.sqrt((n - 1) * alpha * beta)
    s = np.arange(max(0, int(mean - 40 * sd)), int(mean + 40 * sd) + 2)
    w, w1 = stats.binom.pmf(s, n - 1, beta), stats.binom.pmf(s - 1, n - 1, beta)
    return s, beta * w1 + alpha * w, alpha * w1 + beta * w


def _all_zero_pair_composed(eps0: float, n: int, rounds: int, pessimistic: bool):
    """dp-accounting's PLDs (grid 1e-5) of :func:`_all_zero_pair`, both directions, composed
    ``rounds`` times."""
    pld_module = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    s, p0, p1 = _all_zero_pair(eps0, n)
    keep = (p0 > 0) & (p1 > 0)
    log0 = {int(k): math.log(v) for k, v in zip(s[keep], p0[keep])}
    log1 = {int(k): math.log(v) for k, v in zip(s[keep], p1[keep])}
    return [pld_module.from_two_probability_mass_functions(
        first, second, pessimistic_estimate=pessimistic,
        value_discretization_interval=1e-5).self_compose(rounds)
        for first, second in ((log0, log1), (log1, log0))]


@pytest.mark.slow
def test_binary_rr_delta_in_the_far_tail_is_tight():
    """delta(eps) near 3e-11 at n = 3e5: the double FFT's charge (a few 1e-12 a core) kept the
    upper bound at 4.6e-11, 38 % above the lower one; the cores whose charge matters are now
    convolved in long double (within 2 %).  Reference: the "others hold 0" dataset's delta
    from scipy's pmf, which the bounds contain."""
    eps0, n, eps = 0.1407376687182331, 300_000, 0.0012436820769470187
    b = sm.delta_bounds(("binary_rr", eps0), n, eps)
    _, p0, p1 = _all_zero_pair(eps0, n)
    x = math.exp(eps)
    reference = max(np.maximum(p0 - x * p1, 0).sum(), np.maximum(p1 - x * p0, 0).sum())
    assert b.lower <= reference * (1 + 1e-9) and reference * (1 - 1e-9) <= b.upper
    assert b.upper <= 1.02 * b.lower


def test_composition_of_binary_rr_is_tight():
    b = sm.composed_epsilon_bounds([(("binary_rr", 2.0), 10_000, 10)], 1e-6)
    assert b.upper - b.lower <= 0.02 * b.upper


def test_composed_binary_rr_at_a_small_delta_is_amplified():
    """The one-round profile's cores (n = 1e5) were convolved by FFT in double, whose charge
    (2e-12 a core) floored the profile near 8e-12: 10 rounds at delta = 1e-12 certified only
    the sum of the eps0 (10.0).  In long double the floor is about 4e-15.  Reference: the pair
    "every other user holds 0" (one of the datasets the worst case ranges over) composed 10
    times by dp-accounting's PLD (optimistic estimate, both directions) -- our upper bound is
    at least its epsilon and within 3 % of it; our lower bound is at most its pessimistic
    estimate."""
    eps0, n, delta = 1.0, 10**5, 1e-12
    b = sm.composed_epsilon_bounds([(("binary_rr", eps0), n, 10)], delta)

    def reference(pessimistic):
        return max(c.get_epsilon_for_delta(delta)
                   for c in _all_zero_pair_composed(eps0, n, 10, pessimistic))
    optimistic = reference(False)
    assert optimistic <= b.upper <= 1.03 * optimistic
    assert 0.97 * optimistic <= b.lower <= reference(True)


@pytest.mark.parametrize("eps0,others", [(1.0, 10**5), (4.0, 10**4), (0.5, 10**8), (8.0, 10**6)])
def test_binary_like_window_entries_are_within_their_relative_bound_of_the_exact_law(eps0,
                                                                                    others):
    """The lower-bound pair's stored masses against the exact law in 40-digit arithmetic (exact
    alpha and beta from eps0, the binomial pmf from log-gamma): every entry checked, at the
    window's edges too, is within the relative bound the composition's correction uses, and
    the mass off the window is at most the bound returned."""
    beta, alpha = float(special.expit(-eps0)), float(special.expit(eps0))
    p0, p1, relative, outside = sm._binary_like_window(others, beta, beta, alpha,
                                                       4 * np.finfo(float).eps / 2)
    assert outside is not None and relative < 1e-6
    lo = sm.binomial_window(others, beta, log_cut=-50.0)[0]
    with mpmath.workdps(40):
        e = mpmath.exp(mpmath.mpf(eps0))
        b, a = 1 / (1 + e), e / (1 + e)

        def pmf(k):
            if k < 0 or k > others:
                return mpmath.mpf(0)
            return mpmath.exp(mpmath.loggamma(others + 1) - mpmath.loggamma(k + 1)
                              - mpmath.loggamma(others - k + 1) + k * mpmath.log(b)
                              + (others - k) * mpmath.log(1 - b))
        picks = sorted(set([0, 1, 2, len(p0) // 3, len(p0) // 2, len(p0) - 2, len(p0) - 1]))
        for i in picks:
            s_ = lo + i
            for stored, v in ((p0[i], b), (p1[i], a)):
                exact = v * pmf(s_ - 1) + (1 - v) * pmf(s_)
                assert abs(mpmath.mpf(float(stored)) - exact) <= relative * exact
        total = sum(mpmath.mpf(float(x)) for x in p0)
    assert float(1 - total) <= outside + relative


def test_binary_rr_composed_lower_bound_takes_the_relative_correction():
    """The composed lower bound charged the stored pairs' error as an absolute ``count rho (1 +
    e^eps)`` in delta (9e-11 for 10 rounds at n = 1e5): at delta = 1e-10 it was 2.6 % below the
    upper bound, and at 1e-12 it was the epsilon at about 9e-11.  The relative correction
    (``RelativeCorrection``) shifts epsilon by about 1e-10 instead.  Reference: the same
    dataset pair composed by dp-accounting (pessimistic estimate, both directions), which our
    lower bound may not exceed; the delta query's lower bound is checked the same way."""
    eps0, n, rounds = 1.0, 10**5, 10
    composed = _all_zero_pair_composed(eps0, n, rounds, True)
    spec = [(("binary_rr", eps0), n, rounds)]
    b = sm.composed_epsilon_bounds(spec, 1e-10)
    assert b.upper - b.lower <= 0.01 * b.upper
    assert b.lower <= max(c.get_epsilon_for_delta(1e-10) for c in composed)
    d = sm.composed_delta_bounds(spec, 0.05)
    assert d.lower <= max(c.get_delta_for_epsilon(0.05) for c in composed)
    assert d.upper - d.lower <= 0.15 * d.upper


# -- the accountant -----------------------------------------------------------------------------
def test_accountant_supports_shuffle_events_and_refuses_the_rest():
    acc = create("shuffle")
    assert acc.supports(ShuffleEvent(1000, RandomizedResponseEvent(1.0, 2)))
    assert acc.supports(ShuffleEvent(1000, EpsilonDeltaEvent(1.0, 1e-9)))
    assert not acc.supports(ShuffleEvent(1000, GaussianEvent(1.0)))
    assert not acc.supports(ShuffleEvent(1000, EpsilonDeltaEvent(1.0, 1.0)))
    acc.compose(ShuffleEvent(1000, RandomizedResponseEvent(1.0, 3)))
    before = acc.state_dict()
    with pytest.raises(UnsupportedEventError, match="ShuffleEvent"):
        acc.compose(ShuffledEpochs(50, 1).event(8.0, 1))
    assert acc.state_dict() == before
    epochs = create("shuffle")
    epochs.compose(ShuffledEpochs(50, 1).event(8.0, 1))
    with pytest.raises(UnsupportedEventError):
        epochs.compose(ShuffleEvent(1000, RandomizedResponseEvent(1.0, 3)))


def test_accountant_one_round_and_rounds():
    acc = create("shuffle")
    event = ShuffleEvent(5000, RandomizedResponseEvent(2.0, 2))
    acc.compose(event)
    assert acc.get_epsilon_bounds(1e-6) == sm.epsilon_bounds(("binary_rr", 2.0), 5000, 1e-6)
    assert acc.get_delta(acc.get_epsilon(1e-6)) <= 1e-6 * (1 + 1e-6)
    assert acc.get_epsilon_bounds(0.0) == (2.0, 2.0)
    one = acc.get_epsilon(1e-6)
    acc.compose(event, 4)
    assert acc.history == [SelfComposedEvent(event, 5)] and len(acc) == 5
    lower, upper = acc.get_epsilon_bounds(1e-6)
    assert one < lower <= upper < 5 * 2.0
    assert acc.get_delta(upper) <= 1e-6 * (1 + 1e-6)
    state = json.loads(json.dumps(acc.state_dict()))
    again = create("shuffle")
    again.load_state_dict(state)
    assert [from_dict(e) for e in state["events"]] == acc.history
    assert again.get_epsilon(1e-6) == upper


def test_accountant_general_and_heterogeneous_rounds():
    acc = create("shuffle", neighbouring="replace_one")
    acc.compose(SelfComposedEvent(ShuffleEvent(2000, EpsilonDeltaEvent(1.0, 0.0)), 3))
    acc.compose(ShuffleEvent(3000, RandomizedResponseEvent(1.0, 4)))
    lower, upper = acc.get_epsilon_bounds(1e-6)
    assert 0 < lower <= upper <= 4.0
    single = create("shuffle")
    single.compose(ShuffleEvent(1, RandomizedResponseEvent(1.0, 3)))
    lo, up = single.get_epsilon_bounds(1e-6)
    assert lo <= up <= 1.0 and up > 0.99


# -- FFT convolution in the binary-RR cores -------------------------------------------------------
def test_fft_convolution_error_bound_holds_against_direct_summation():
    for n1, n2, p in ((200_000, 300_000, 0.3), (3_000_000, 1_000_000, 0.12)):
        lo1, hi1, _ = sm.binomial_window(n1, p, log_cut=-50.0)
        lo2, hi2, _ = sm.binomial_window(n2, 1 - p, log_cut=-50.0)
        a = stats.binom.pmf(np.arange(lo1, hi1 + 1), n1, p)
        b = stats.binom.pmf(np.arange(lo2, hi2 + 1), n2, 1 - p)
        c, err = sm._fft_convolve(a, b)
        direct = np.convolve(a, b)          # non-negative terms: relative error <= len * u
        slack = (min(len(a), len(b)) + 2) * np.finfo(float).eps * direct.sum()
        assert len(c) == len(direct) and np.all(c >= 0)
        assert np.abs(c - direct).sum() <= err + slack
        assert err < 1e-10


def test_fft_core_brackets_the_direct_core(monkeypatch):
    eps0, n = 1.0, 2_000_000
    fft_core = sm._BinaryCore(eps0, 300_000, n - 300_001)
    extended = sm._BinaryCore(eps0, 300_000, n - 300_001, convolution="extended")
    direct = sm._BinaryCore(eps0, 300_000, n - 300_001, convolution="direct")
    assert fft_core.fft_error > 0 and direct.fft_error == 0
    if np.finfo(np.longdouble).eps < 1e-18:
        assert 0 < extended.fft_error <= 1e-3 * fft_core.fft_error
    monkeypatch.setattr(sm, "_FFT_MIN_LENGTH", 10 ** 9)
    unforced = sm._BinaryCore(eps0, 300_000, n - 300_001)
    assert unforced.fft_error == 0 and np.array_equal(unforced.p0, direct.p0)
    for eps in (0.002, 0.004, 0.006):
        b = direct.delta(eps)
        for core in (fft_core, extended):
            a = core.delta(eps)
            assert a.lower <= b.upper and b.lower <= a.upper
            assert a.upper <= b.upper + 1e-10


@pytest.mark.skipif(np.finfo(np.longdouble).eps >= 1e-18, reason="long double is double here")
def test_extended_fft_convolution_error_bound_holds_against_long_double_summation():
    """The long-double FFT convolution's l1 bound holds against direct summation in long double
    (whose own error is at most ``(L + 2) u_ld`` of the sum, L terms per entry) and is about
    2000 times below the double one's.  Its measured error is that of rounding the exact
    result to double (4.2e-17 here), where the double FFT's is 7 times more, so a transform
    that silently ran in double would fail here."""
    for n1, n2, p in ((200_000, 300_000, 0.3), (3_000_000, 1_000_000, 0.12)):
        lo1, hi1, _ = sm.binomial_window(n1, p, log_cut=-50.0)
        lo2, hi2, _ = sm.binomial_window(n2, 1 - p, log_cut=-50.0)
        a = stats.binom.pmf(np.arange(lo1, hi1 + 1), n1, p)
        b = stats.binom.pmf(np.arange(lo2, hi2 + 1), n2, 1 - p)
        c, err = sm._fft_convolve(a, b, extended=True)
        c_double, err_double = sm._fft_convolve(a, b)
        direct = np.convolve(a.astype(np.longdouble), b.astype(np.longdouble))
        u_ld = float(np.finfo(np.longdouble).eps) / 2
        slack = (min(len(a), len(b)) + 2) * u_ld * float(direct.sum())
        assert len(c) == len(direct) and np.all(c >= 0) and c.dtype == np.float64
        assert float(np.abs(c.astype(np.longdouble) - direct).sum()) <= err + slack
        assert err <= 1e-3 * err_double
        floor = float(np.abs(direct.astype(float).astype(np.longdouble) - direct).sum())
        measured = float(np.abs(c.astype(np.longdouble) - direct).sum())
        assert measured <= 2 * floor < float(np.abs(c_double.astype(np.longdouble) - direct).sum())


def test_binary_rr_at_large_n_uses_the_exact_worst_case():
    b = sm.epsilon_bounds(("binary_rr", 4.0), 30_000_000, 1e-8)
    assert sm.epsilon(("binary_rr", 4.0), 30_000_000, 1e-8).method == "binary_rr_exact"
    assert b.upper - b.lower <= 0.01 * b.upper
    assert b.upper <= sh.fmt23_epsilon(4.0, 30_000_000, 1e-8).epsilon * (1 + 1e-9)


# -- queries below what the amplified bounds certify (session 18's hostile pass) ------------------
def _raw_or_krr_row(eps0, delta0, value, k=3):
    """An (eps0, delta0)-DP randomizer on k values: its input tagged "raw" (outputs k..2k-1)
    with probability delta0, else k-ary randomized response (outputs 0..k-1)."""
    row = [(1 - delta0) * p for p in krr_row(eps0, k, value)] + [0.0] * k
    row[k + value] = delta0
    return row


def test_epsilon_below_delta0_is_infinite_not_an_error():
    """delta < delta0: a ParameterError blaming delta0 came back (n >= 2, one round).  An
    (eps0, delta0)-DP randomizer may publish its input with probability delta0; enumerated for
    n = 2 its shuffled reports have delta(50) >= delta0, so no finite epsilon exists at a smaller
    delta: inf is the answer, and a certified lower bound too."""
    eps0, delta0 = 10.0, 0.01
    for x, y in itertools.permutations(range(3), 2):   # the randomizer is (eps0, delta0)-DP
        p, q = _raw_or_krr_row(eps0, delta0, x), _raw_or_krr_row(eps0, delta0, y)
        assert sum(max(a - math.exp(eps0) * b, 0.0) for a, b in zip(p, q)) <= delta0 * (1 + 1e-12)
    law0 = histogram_law([_raw_or_krr_row(eps0, delta0, 0), _raw_or_krr_row(eps0, delta0, 2)])
    law1 = histogram_law([_raw_or_krr_row(eps0, delta0, 1), _raw_or_krr_row(eps0, delta0, 2)])
    assert hockey(law0, law1, 50.0) >= delta0 * (1 - 1e-12)
    # ... so inf is also a certified lower bound, and delta >= delta0 at every epsilon
    for n, rounds in ((1, 1), (2, 1), (7, 1), (1000, 1), (1000, 3)):
        acc = create("shuffle")
        acc.compose(SelfComposedEvent(ShuffleEvent(n, EpsilonDeltaEvent(eps0, delta0)), rounds))
        for delta in (1e-15, 1e-10, 0.999 * delta0):
            assert acc.get_epsilon_bounds(delta) == (math.inf, math.inf)
        assert acc.get_epsilon(0.5) <= rounds * eps0 * (1 + 1e-12)
        for eps in (0.0, 1.0, 1000.0):
            lower, upper = acc.get_delta_bounds(eps)
            assert delta0 <= lower <= upper
        assert create("shuffle", lower_bound=False).compose(acc.history[0]).get_epsilon_bounds(
            1e-10) == (0.0, math.inf)
    res = sh.epsilon(eps0, 2, 1e-10, delta0=delta0)
    assert res.epsilon == math.inf and res.method == "none"
    assert sm.lower_bound(("general", eps0, delta0), 2, 1e-10).epsilon == math.inf


def test_a_zero_epsilon_randomizer_with_delta0_is_not_free():
    """eps0 = 0 with delta0 > 0: the upper bound took the eps0 = 0 shortcut of a pure randomizer
    and answered 0 where the lower bound was inf (the CLI refused its own crossing).  A (0,
    delta0)-DP randomizer may publish its input with probability delta0 (uniform otherwise);
    enumerated for n = 2, its shuffled reports have delta(50) >= delta0, so below delta0 the
    answer is inf, and at or above it 0 (each round is (0, delta0)-DP, no amplification)."""
    delta0 = 0.01
    for x, y in itertools.permutations(range(3), 2):   # the randomizer is (0, delta0)-DP
        p, q = _raw_or_krr_row(0.0, delta0, x), _raw_or_krr_row(0.0, delta0, y)
        assert sum(max(a - b, 0.0) for a, b in zip(p, q)) <= delta0 * (1 + 1e-12)
    law0 = histogram_law([_raw_or_krr_row(0.0, delta0, 0), _raw_or_krr_row(0.0, delta0, 2)])
    law1 = histogram_law([_raw_or_krr_row(0.0, delta0, 1), _raw_or_krr_row(0.0, delta0, 2)])
    assert hockey(law0, law1, 50.0) >= delta0 * (1 - 1e-12)
    spec = ("general", 0.0, delta0)
    for n in (2, 100, 10**6):
        for delta in (1e-12, 0.5 * delta0):
            assert sm.epsilon(spec, n, delta).epsilon == math.inf
            assert sm.lower_bound(spec, n, delta).epsilon == math.inf
            assert sh.epsilon(0.0, n, delta, delta0=delta0).epsilon == math.inf
        assert sm.epsilon(spec, n, delta0).epsilon == 0.0
        assert sm.delta_bounds(spec, n, 1.0).lower >= delta0
        with pytest.raises(ParameterError, match="delta0"):   # Thm 5.1 needs eps0 > 0 here
            swap.epsilon(0.0, n, 0.5, delta0=delta0)
    acc = create("shuffle").compose(ShuffleEvent(100, EpsilonDeltaEvent(0.0, delta0)))
    assert acc.get_epsilon_bounds(1e-6) == (math.inf, math.inf)


def _kov_delta(eps, eps0, k):
    """Kairouz-Oh-Viswanath (2015, arXiv:1311.0776) Thm 3.3 for k pure eps0-DP steps, with
    mpmath at 50 digits: sum_i C(k, i) (e^((k-i) eps0) - e^(eps + i eps0))_+ / (1 + e^eps0)^k."""
    mpmath.mp.dps = 50
    e0, e = mpmath.mpf(eps0), mpmath.mpf(eps)
    total = mpmath.fsum(mpmath.binomial(k, i) * max(mpmath.exp((k - i) * e0)
                                                    - mpmath.exp(e + i * e0), 0)
                        for i in range(k + 1))
    return total / (1 + mpmath.exp(e0)) ** k


@pytest.mark.parametrize("n,eps0,rounds", [(1, 1e-3, 1), (1000, 1.0, 1000), (2, 0.5, 300)])
def test_delta_below_the_composition_error_falls_back_to_optimal_composition(n, eps0, rounds):
    """delta = 1e-15 sits below the composed grid's construction error (7.1e-15 a round): the
    accountant raised NumericalError although eps0-DP rounds are certified without amplification.
    The answer is now the optimal composition of the rounds -- checked against Kairouz, Oh,
    Viswanath's sum in 50-digit arithmetic: delta at the answer is <= 1e-15, and just below it
    (relative 1e-6) it is not."""
    acc = create("shuffle")
    acc.compose(SelfComposedEvent(ShuffleEvent(n, RandomizedResponseEvent(eps0, 2)), rounds))
    lower, upper = acc.get_epsilon_bounds(1e-15)
    assert 0 <= lower <= upper <= rounds * eps0
    assert _kov_delta(upper, eps0, rounds) <= 1e-15
    assert _kov_delta(upper * (1 - 1e-6), eps0, rounds) > 1e-15
    if n >= 2:
        # the lower bound is one round's (a post-processing of the composition; it was 0): at
        # it, the exact shuffled delta of one round (enumerated for n = 2) still exceeds delta
        assert lower > 0
        if n == 2:
            assert shuffled_krr_worst(eps0, 2, n, lower) > 1e-15


# -- more users than the bounds are computed for ---------------------------------------------------
@pytest.mark.parametrize("k,m,eps", [(2, 2, 0.3), (3, 2, 0.5), (3, 3, 0.2), (2, 4, 0.1)])
def test_more_users_never_increase_the_exact_delta(k, m, eps):
    """The argument behind MAX_USERS (``shuffle.check_users``): an n-user round is a
    post-processing of an m-user one (m < n), so the exact worst-case delta of shuffled k-RR
    (enumerated over every dataset) does not increase with the number of users."""
    for n in range(m + 1, m + 3):
        assert shuffled_krr_worst(1.5, k, n, eps) <= shuffled_krr_worst(1.5, k, m, eps) * (1 + 1e-12)


def test_more_than_max_users_is_refused_by_the_bounds_with_the_way_out():
    """n = 10**16 asked numpy for 9 GiB (and the machine's memory without a limit); the bounds
    now refuse n above MAX_USERS at once, naming the bound that holds instead."""
    from dpplugins.amplification import shuffle_model_families as fam

    big = 10**16
    calls = [lambda: sh.epsilon(1.0, big, 1e-6), lambda: sm.epsilon(("krr", 1.0, 2), big, 1e-6),
             lambda: sm.delta_bounds(("krr", 1.0, 5), big, 0.1),
             lambda: sm.Round(("krr", 1.0, 2), big, 3),
             lambda: fam.epsilon(fam.unary_encoding(1.0, 8), big, 1e-6),
             lambda: fam.composed_delta_bounds(fam.local_hashing(1.0, 4), big, 2, 0.1)]
    for call in calls:
        with pytest.raises(ParameterError, match=r"n=10000000000000000 .*1e\+08.*valid for any"):
            call()
    assert sh.check_users(sh.MAX_USERS) == sh.MAX_USERS


@pytest.mark.parametrize("k", [10**400, 2**53 + 1])
def test_huge_domains_are_refused_not_overflowed(k):
    """10**400 buckets overflowed a float deep in the bounds (an OverflowError from supports());
    the number of values is now checked against 2**53 (double precision)."""
    from dpplugins.amplification import shuffle_model_families as fam

    for call in (lambda: sm.randomizer(("krr", 1.0, k)), lambda: fam.local_hashing(1.0, k),
                 lambda: fam.unary_encoding(1.0, k), lambda: fam.subset_selection(1.0, k, 2)):
        with pytest.raises(ParameterError, match=r"2\*\*53"):
            call()
    acc = create("shuffle")
    for event in (ShuffleEvent(100, RandomizedResponseEvent(1.0, k)),
                  ShuffleEvent(100, LocalHashingEvent(1.0, k))):
        assert not acc.supports(event)
        with pytest.raises(UnsupportedEventError, match="2\\*\\*53"):
            acc.compose(event)


def test_smallest_bound_never_drops_the_winner_at_a_probe_and_stays_above_the_minimum():
    """``smallest_bound`` evaluates every bound at probe points only, and between two probes
    the bounds that won at one of them; against the brute-force minimum of all bounds at every
    point: equal at the probes, never below it anywhere (each bound is an upper bound, so a
    dropped one may only loosen), and equal everywhere when the winners at the probes are the
    winners between them."""
    eps = np.linspace(0.0, 1.0, 81)
    calls = []

    def counted(fn, name):
        def bound(e):
            calls.append(name)
            return fn(e)
        return bound

    bounds = [counted(lambda e: math.exp(-3 * e), "a"),     # smallest for e > 0.5
              counted(lambda e: 0.6 * math.exp(-2 * e), "b"),  # smallest for e < 0.51
              counted(lambda e: 0.9, "c")]                   # never the smallest
    brute = np.array([min(b(e) for b in bounds) for e in eps])
    calls.clear()
    got = sm.smallest_bound(bounds, eps)
    assert np.all(got >= brute)
    np.testing.assert_allclose(got, brute, rtol=0, atol=0)
    # c at the 8 probes only; a and b at the probes and between the probes where they won
    # (the probes at ranks 34 and 46 enclose the crossing at 0.51, where both are evaluated):
    # 8 + 42 calls each, where every probe's winner used to be evaluated at all 81 points
    assert calls.count("c") == 8 and calls.count("a") == 50 and calls.count("b") == 50
    # a bound that wins only between two probes is dropped there: looser, never below
    dip = [lambda e: 1.0, lambda e: 0.5 if abs(e - 0.075) < 0.005 else 2.0]  # eps[6] only
    got = sm.smallest_bound(dip, eps)
    brute = np.array([min(b(e) for b in dip) for e in eps])
    assert np.all(got >= brute) and got[6] == 1.0 > brute[6]
    # few points or one bound: every bound everywhere
    np.testing.assert_array_equal(sm.smallest_bound(dip, eps[:16]),
                                  [min(b(e) for b in dip) for e in eps[:16]])


@pytest.mark.slow
def test_composed_krr_lower_bound_is_at_least_one_rounds():
    """16-RR, eps0 = 2, n = 1e6: the two-dimensional "others at c" pair has 2.8e7 outcomes;
    its one-dimensional count of b, composed before, gave 0.00389 for one round against the
    round's own certified 0.00556 (gap 30 %), and 10 rounds were [0.0215, 0.0296] at 4-RR.
    Merged by privacy loss, the whole pair composes.  One round is a post-processing of any
    composition, so the composed lower bound is at least the round's; and the mixed history
    with a one-user round keeps it as well (the one-user round has no pair).  Ten rounds: the
    composed exact pair and the composed blanket profile (independent constructions) within
    1 %."""
    spec, n = ("krr", 2.0, 16), 10**6
    one = sm.krr_lower_pairs(2.0, n, 16)["others_at_c"].epsilon_lower(1e-6, 2.0)
    b = sm.composed_epsilon_bounds([(spec, n, 1)], 1e-6)
    assert one <= b.lower <= b.upper <= 1.01 * one
    ten = sm.composed_epsilon_bounds([(spec, n, 10)], 1e-6)
    assert 2.5 * one < ten.lower <= ten.upper <= 1.01 * ten.lower
    mixed = sm.composed_epsilon_bounds([(spec, n, 1), (("binary_rr", 0.01), 1, 1)], 1e-6)
    assert one <= mixed.lower <= mixed.upper
    d = sm.composed_delta_bounds([(spec, n, 1)], 0.8 * one)
    exact = sm.krr_lower_pairs(2.0, n, 16)["others_at_c"].delta(0.8 * one).lower
    assert exact <= d.lower <= d.upper


def test_lower_pair_charge_covers_the_error_of_the_appended_atom():
    """``LowerPLD.of_pmfs`` appends an atom ``1 - sum`` for the mass outside the window, so an
    error of relative ``r`` in every entry appears twice in the l1 distance (entries and atom).
    Entries of Bin(200, 0.3) on a window, all too large by the allowed relative 1e-9: the l1
    distance of the pair's pmfs (as built) to the exact pmfs with the exact outside mass is
    about 2e-9, and ``rho`` must cover it (it was 1e-9)."""
    k = np.arange(40, 81)
    exact = stats.binom.pmf(k, 200, 0.3)
    outside = 1.0 - float(exact.sum())
    rel = 1e-9
    lp = sm.LowerPLD.of_pmfs(exact * (1 + rel), exact * (1 + rel), rel, 1e-3, "test")
    built = np.concatenate([exact * (1 + rel), [max(0.0, 1 - float(np.sum(exact * (1 + rel))))]])
    built = built / built.sum()
    truth = np.concatenate([exact, [outside]])
    distance = float(np.sum(np.abs(built - truth)))
    assert distance > 1.5 * rel          # the atom's share is real
    assert distance <= lp.rho


# -- the binary-RR core's bounds at many epsilons (the composed rounds' profile) ----------------
def _core_delta_exact(eps0, n_alpha, n_beta, n_fair, epsilon):
    """max over both directions of sum (p0 - e^eps p1)_+ for the core's pair, with 50 digits:
    W = Bin(n_alpha, alpha) * Bin(n_beta, beta) * Bin(n_fair, 1/2) convolved exactly, p0(s) =
    beta W(s-1) + alpha W(s), p1(s) = alpha W(s-1) + beta W(s) (the construction of the
    module docstring, written out independently)."""
    mpmath.mp.dps = 50
    alpha = mpmath.e ** eps0 / (1 + mpmath.e ** eps0)
    beta = 1 - alpha

    def binomial(n, p):
        return [mpmath.binomial(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)]

    w = [mpmath.mpf(1)]
    for n, p in ((n_alpha, alpha), (n_beta, beta), (n_fair, mpmath.mpf(1) / 2)):
        b = binomial(n, p)
        w = [sum(w[i] * b[s - i] for i in range(len(w)) if 0 <= s - i < len(b))
             for s in range(len(w) + len(b) - 1)]
    w = [mpmath.mpf(0)] + w + [mpmath.mpf(0)]
    p0 = [beta * w[s - 1] + alpha * w[s] for s in range(1, len(w))]
    p1 = [alpha * w[s - 1] + beta * w[s] for s in range(1, len(w))]
    x = mpmath.e ** mpmath.mpf(epsilon)
    return max(sum(max(a - x * b, 0) for a, b in zip(p, q)) for p, q in ((p0, p1), (p1, p0)))


@pytest.mark.parametrize("eps0,counts", [(0.5, (6, 9, 0)), (1.0, (3, 12, 4)), (2.0, (20, 5, 7)),
                                         (0.05, (30, 30, 10))])
def test_binary_core_bounds_at_many_epsilons_contain_the_exact_divergence(eps0, counts):
    core = sm._BinaryCore(eps0, *counts)
    eps = np.linspace(0.0, 1.05 * eps0, 23)
    many = core.delta_upper_many(eps)
    for e, upper in zip(eps, many):
        exact = float(_core_delta_exact(eps0, *counts, e))
        assert exact <= upper <= exact + 1e-10  # the pmfs carry a relative 1e-12 each
        # at least the single-epsilon bound of evaluate(), less its rounding terms' difference
        assert upper >= core.delta(float(e)).upper - 1e-15


def test_one_user_round_delta_lower_bound_is_at_most_the_exact_profile():
    """n = 1 is the randomizer itself: delta(eps) = (e^eps0 - e^eps)_+ / (e^eps0 + k - 1)
    exactly (mpmath, 40 digits).  The lower bound was the upper bound's value, rounded up by
    1e-12 relative: binary RR at eps0 = 1, eps = 0.5 gave 0.2876491366452556 against the exact
    0.2876491366449679."""
    with mpmath.workdps(40):
        for eps0 in (0.01, 0.5, 1.0, 5.0, 20.0, 50.0, 100.0):
            for k in (2, 3, 10, 1000):
                for eps in (0.0, 1e-3, 0.3 * eps0, 0.9 * eps0, eps0 * (1 - 1e-9)):
                    bounds = sm.delta_bounds(("krr", eps0, k), 1, eps)
                    top = mpmath.exp(mpmath.mpf(eps0))
                    exact = max((top - mpmath.exp(mpmath.mpf(eps))) / (top + k - 1), 0)
                    assert bounds.lower <= exact <= bounds.upper, (eps0, k, eps, bounds)
                    assert bounds.upper - bounds.lower <= 1e-11 * bounds.upper


def test_bad_input_of_the_shuffle_model_functions_is_a_parameter_error():
    """Found by a hostile sweep: an IndexError, a TypeError, a ZeroDivisionError, a KeyError,
    and a clone probability of 2 (a law of -1) accepted."""
    with pytest.raises(ParameterError, match=r"rounds\[0\]"):
        sm.composed_epsilon_bounds([(("binary_rr", 1.0), 100)], 1e-6)
    with pytest.raises(ParameterError, match="rounds=5"):
        sm.composed_epsilon_bounds(5, 1e-6)
    for c in (0.0, 2.0, math.nan):
        with pytest.raises(ParameterError, match="clone_probability"):
            count_pair.clone_pair(1.0, 100, c)
    with pytest.raises(ParameterError, match="epsilon=nan"):
        sm.upper_profile(("binary_rr", 1.0), 2)(float("nan"))


# -- double-precision limits (a helper's sweep against exact enumeration) -------------------------
def _krr_two_users_delta(eps0, k, eps):
    """Exact worst delta(eps) of shuffled k-RR with n = 2 (mpmath, 60 digits): the other user
    at x0, x1 or a third value, both directions; the multisets of two reports enumerated by
    type (x0, x1, the third value o, the w = k - 3 or k - 2 other values)."""
    import mpmath as mp

    mp.mp.dps = 60
    E = mp.e ** mp.mpf(eps0)
    Z = E + k - 1
    ee = mp.e ** mp.mpf(eps)
    best = mp.mpf(0)
    for o in ("x0", "x1") + (("o",) if k >= 3 else ()):
        labels = ["x0", "x1"] + (["o"] if o == "o" else [])
        nw = k - len(labels)

        def r(y, v):
            return (E if y == v else 1) / Z

        types = []
        full = labels + ["w"]
        for i, a in enumerate(full):
            for b in full[i:]:
                count = mp.mpf(nw) if "w" in (a, b) else mp.mpf(1)
                types.append(((a, b), count))
        types.append((("w", "w2"), mp.mpf(nw) * (nw - 1) / 2))

        def prob(v, pair):
            a, b = pair
            a = "w" if a == "w2" else a
            b = "w" if b == "w2" else b
            if pair[0] == pair[1]:
                return r(a, v) * r(a, o)
            return r(a, v) * r(b, o) + r(b, v) * r(a, o)

        for first, second in (("x0", "x1"), ("x1", "x0")):
            total = mp.mpf(0)
            for pair, count in types:
                if count > 0:
                    total += count * max(prob(first, pair) - ee * prob(second, pair), 0)
            best = max(best, total)
    return best


def test_the_two_user_enumeration_against_brute_force():
    import itertools

    import mpmath as mp

    mp.mp.dps = 60
    eps0, k, eps = 1.0, 5, 0.5
    E, Z = mp.e ** eps0, mp.e ** eps0 + k - 1
    best = 0
    for o in range(k):
        p0, p1 = defaultdict(lambda: mp.mpf(0)), defaultdict(lambda: mp.mpf(0))
        for y1, y2 in itertools.product(range(k), repeat=2):
            t = tuple(sorted((y1, y2)))
            p0[t] += (E if y1 == 0 else 1) / Z * (E if y2 == o else 1) / Z
            p1[t] += (E if y1 == 1 else 1) / Z * (E if y2 == o else 1) / Z
        for a, b in ((p0, p1), (p1, p0)):
            best = max(best, sum(max(a[t] - mp.e ** eps * b[t], 0) for t in a))
    assert abs(_krr_two_users_delta(eps0, k, eps) - best) < 1e-40


@pytest.mark.parametrize("eps0,k,delta", [(1.0, 2 ** 53, 1e-32), (0.5, 2 ** 53, 1e-34),
                                          (1.0, 10 ** 15, 1e-32)])
def test_a_blanket_outside_mass_below_rounding_keeps_its_digits(eps0, k, delta):
    # 1 - gamma of the k-RR blanket is (e^eps0 - 1) / Z, 1.9e-16 at k = 2^53: by subtraction
    # it kept no digit and the upper bound came out below the exact epsilon (0.6455 against
    # 0.88369 at eps0 = 1) and below the lower bound
    up = sm.epsilon(("krr", eps0, k), 2, delta).epsilon
    assert _krr_two_users_delta(eps0, k, up) <= delta
    assert sm.lower_bound(("krr", eps0, k), 2, delta).epsilon <= up
    # the same randomizer as the family subset selection with k = 1 (its relaxed, four-class
    # and lattice blankets)
    from dpplugins.amplification import shuffle_model_families as fam

    family = fam.subset_selection(eps0, k, 1)
    up_family = fam.epsilon(family, 2, delta).epsilon
    assert _krr_two_users_delta(eps0, k, up_family) <= delta
    assert fam.lower_bound(family, 2, delta).epsilon <= up_family
    b = sm.delta_bounds(("krr", eps0, k), 2, 0.6455236938373144 * eps0)
    assert b.lower <= _krr_two_users_delta(eps0, k, 0.6455236938373144 * eps0) <= b.upper


@pytest.mark.parametrize("eps0,delta", [(1e-12, 1e-20), (1e-8, 1e-15), (1e-10, 1e-30)])
def test_tiny_local_epsilons_are_not_below_the_exact_value(eps0, delta):
    # exp(eps) in double resolves eps only to about u absolutely: at eps0 = 1e-12 every bound
    # computed delta = 0 a few u below eps0, where the exact delta is 1e-18 (binary RR, n = 2:
    # 9.99978e-13 with the exact delta 550 times the target there); the margin of 64 u covers it
    for spec in (("binary_rr", eps0), ("krr", eps0, 3), ("general", eps0)):
        k = 3 if spec[0] == "krr" else 2
        up = sm.epsilon(spec, 2, delta).epsilon
        assert _krr_two_users_delta(eps0, k, up) <= delta, spec
        assert sm.lower_bound(spec, 2, delta).epsilon <= up
    # the clone bounds of dpplugins.amplification.shuffle (FMT21, FMT23) directly
    from dpplugins.amplification import shuffle

    for bound in (shuffle.epsilon(eps0, 2, delta), shuffle.fmt21_epsilon(eps0, 2, delta),
                  shuffle.fmt23_epsilon(eps0, 2, delta)):
        assert _krr_two_users_delta(eps0, 2, bound.epsilon) <= delta, bound
    assert shuffle.lower_bound(eps0, 2, delta).epsilon <= shuffle.epsilon(eps0, 2, delta).epsilon
    # d-ary randomized response as the family subset selection with k = 1
    from dpplugins.amplification import shuffle_model_families as fam

    up = fam.epsilon(fam.subset_selection(eps0, 3, 1), 2, delta).epsilon
    assert _krr_two_users_delta(eps0, 3, up) <= delta


def _binary_rr_rounds_delta(eps0, n, rounds, eps, others_at):
    """Exact delta(eps) of ``rounds`` adaptive rounds of shuffled binary RR on the same datasets
    (mpmath, 60 digits): ``n - 1`` users at the value 0 (``others_at == 0``) or 1, the differing
    user at 0 or 1; the count of reported ones per round, the rounds' product law enumerated;
    the larger of the two directions."""
    import mpmath as mp

    mp.mp.dps = 60
    E = mp.e ** mp.mpf(eps0)
    keep = E / (E + 1)
    one = {0: 1 - keep, 1: keep}   # P(report 1 | value)

    def law(x):
        pmf = [mp.mpf(1)]
        for v in [x] + [others_at] * (n - 1):
            p = one[v]
            pmf = [(pmf[c] if c < len(pmf) else 0) * (1 - p) + (pmf[c - 1] * p if c else 0)
                   for c in range(len(pmf) + 1)]
        return pmf

    P, Q = law(0), law(1)
    ee = mp.e ** mp.mpf(eps)
    best = mp.mpf(0)
    for A, B in ((P, Q), (Q, P)):
        total = mp.mpf(0)
        for t in itertools.product(range(n + 1), repeat=rounds):
            a, b = mp.fprod(A[i] for i in t), mp.fprod(B[i] for i in t)
            total += max(a - ee * b, 0)
        best = max(best, total)
    return best


@pytest.mark.parametrize("eps0,delta", [(1e-12, 1e-13), (1e-8, 1e-10), (1.0, 1e-6)])
def test_composed_rounds_at_tiny_local_epsilons_bracket_the_exact_product(eps0, delta):
    # the composed rounds' laws are built from exp(eps0) in double precision too, like the
    # one-round bounds that needed the rounding margin: against the exact product law of 2 and
    # 3 rounds (n = 2, 3, every dataset), the upper bound is never below it and the lower bound
    # (of the pair with the others at 0) never above it
    for n, rounds in ((2, 2), (3, 3)):
        b = sm.composed_epsilon_bounds([(("binary_rr", eps0), n, rounds)], delta)
        worst_at_upper = max(_binary_rr_rounds_delta(eps0, n, rounds, b.upper, o) for o in (0, 1))
        assert worst_at_upper <= delta, (n, rounds, b)
        if b.lower > 0:
            assert _binary_rr_rounds_delta(eps0, n, rounds, b.lower, 0) >= delta, (n, rounds, b)
        d = sm.composed_delta_bounds([(("binary_rr", eps0), n, rounds)], 0.5 * b.upper)
        exact = max(_binary_rr_rounds_delta(eps0, n, rounds, 0.5 * b.upper, o) for o in (0, 1))
        assert d.lower <= exact <= d.upper, (n, rounds, d, float(exact))


def test_composed_rounds_below_the_composition_floor_answer_with_the_eps0_sum():
    """Found by a hostile sweep: at delta = 1e-15, below what the composed PLD of two rounds of
    binary RR (or of grouped k-RR) can certify, the direct functions raised NumericalError
    where the accountant answered; pure rounds now answer with basic composition's sum of the
    eps0 (Dwork & Roth 2014, Thm 3.16), exactly 6 here.  A round with delta0 > 0 has no such
    answer and still raises."""
    from dpplugins.amplification import shuffle_model_families as fam
    from dpplugins.amplification import shuffle_model_heterogeneous as het
    from dpplugins.errors import NumericalError

    direct = sm.composed_epsilon_bounds([(("binary_rr", 3.0), 150, 2)], 1e-15)
    assert direct.upper == 6.0 and 5.9 < direct.lower <= direct.upper
    grouped = het.GroupedKRR(((1.0, 100), (3.0, 50)), 2)
    bounds = fam.composed_rounds_epsilon_bounds([(grouped, 150, 2)], 1e-15)
    assert bounds.upper == 6.0 and 0 < bounds.lower <= bounds.upper
    with pytest.raises(NumericalError):
        sm.composed_epsilon_bounds([(("general", 3.0, 1e-17), 150, 2)], 1e-15)
    # at exactly the sum delta is 0; just below it, positive
    assert sm.composed_delta_bounds([(("binary_rr", 3.0), 150, 2)], 6.0).upper == 0.0
    assert sm.composed_delta_bounds([(("binary_rr", 3.0), 150, 2)], 5.999).upper > 0.0


def test_composed_rounds_at_huge_counts_answer():
    """Found by a hostile sweep: 10^13 rounds of binary RR raised OverflowError from the lower
    bound's relative correction (its scale e^(count log up) past the floats); the correction
    now certifies 0 there and the bounds are the one-round lower bound and the eps0 sum."""
    rounds = [(("binary_rr", 1.0), 10 ** 6, 10 ** 13)]
    bounds = sm.composed_epsilon_bounds(rounds, 1e-6)
    one_round = sm.fixed_dataset_epsilon_lower(sm.randomizer(("binary_rr", 1.0)), 10 ** 6, 1e-6)
    assert bounds.upper == 1e13 and one_round <= bounds.lower <= bounds.upper
    acc = create("shuffle")
    acc.compose(ShuffleEvent(10 ** 6, RandomizedResponseEvent(1.0, 2)), 10 ** 13)
    assert acc.get_epsilon_bounds(1e-6).upper == 1e13
    # delta 0 of pure rounds at eps0 = 0: bounds (0, 0), not a negative zero
    acc = create("shuffle")
    acc.compose(ShuffleEvent(100, RandomizedResponseEvent(0.0, 2)), 3)
    assert math.copysign(1.0, acc.get_epsilon_bounds(0.0).lower) == 1.0


def test_basic_composition_epsilon_is_the_exact_sum_rounded_up():
    """The smallest float at or above the exact rational sum of count x eps0 (summing the
    products in floats rounds some sums down: 2 x 0.3 + 1.7 is 2.3 in floats, 1.1e-16 below
    the sum of the doubles 0.3 and 1.7)."""
    from fractions import Fraction

    rng = np.random.default_rng(11)
    r = lambda e: sm.Randomizer("krr", e, 2)
    cases = [[(r(0.3), 2), (r(1.7), 1)], [(r(3.0), 10 ** 9)], [(r(1e-12), 2)]]
    cases += [[(r(float(e)), int(c)) for e, c in zip(rng.uniform(0, 5, 3),
                                                       rng.integers(1, 10 ** 6, 3))]
              for _ in range(200)]
    for terms in cases:
        exact = sum(Fraction(c) * Fraction(spec.eps0) for spec, c in terms)
        got = sm.basic_composition_epsilon(terms)
        assert Fraction(got) >= exact and Fraction(math.nextafter(got, 0.0)) < exact, terms
    assert sm.basic_composition_epsilon([(r(3.0), 10 ** 9)]) == 3e9
    assert sm.basic_composition_epsilon([(r(1.0), -10 ** 400)]) == -math.inf
    # the accountant's pure-DP bounds (delta 0: lower = upper = the sum) contain the exact sum
    acc = create("shuffle")
    acc.compose(ShuffleEvent(150, RandomizedResponseEvent(0.3, 2)), 2)
    acc.compose(ShuffleEvent(150, RandomizedResponseEvent(1.7, 2)))
    pure = acc.get_epsilon_bounds(0.0)
    assert Fraction(pure.lower) <= 2 * Fraction(0.3) + Fraction(1.7) <= Fraction(pure.upper)
    assert sm.pure_composition_epsilon([(r(1.0), 1), (sm.randomizer(("general", 1.0, 1e-9)),
                                                      1)]) is None


def test_binary_rr_total_variation_at_many_users_is_tight():
    """Found by a hostile sweep: binary RR, eps0 = 20, n = 1e8, delta at epsilon 0 (the total
    variation) was [0.81374, 0.82242]: the worst datasets lie in a flat stretch that the search
    left in blocks of 10^4, and the lower bound came from the first singletons.  The middles of
    the highest blocks are now lower bounds too.  Reference: with the victim's report added to
    the others' count S (others holding 1 report 1 w.p. 1 - p, others holding 0 w.p. p), the
    two laws differ by ``(1 - 2p) (S(c) - S(c - 1))``, so delta(0) = (1 - 2p)/2 sum_c |S(c) -
    S(c - 1)|, computed from scipy's binomial pmfs at j = (n - 1)/2 others holding 1, where the
    mode of S is highest (both flip counts have the same mean)."""
    n, eps0 = 10 ** 8, 20.0
    p = 1 / (1 + math.exp(eps0))
    j = (n - 1) // 2
    k = np.arange(60)
    ones_kept = stats.binom.pmf(k, j, p)                 # others holding 1 that flip to 0
    zeros_flipped = stats.binom.pmf(k, n - 1 - j, p)     # others holding 0 that flip to 1
    s = np.convolve(ones_kept[::-1], zeros_flipped)      # S - j + 59, on 0..118
    exact = (1 - 2 * p) / 2 * np.sum(np.abs(np.diff(np.concatenate([[0.0], s, [0.0]]))))
    bounds = sm.delta_bounds(("binary_rr", eps0), n, 0.0)
    assert bounds.lower <= exact * (1 + 1e-9) and exact <= bounds.upper
    assert bounds.upper - bounds.lower <= 1e-3 * bounds.upper, bounds


def _binary_rr_rounds_exact_mp(n, eps0, rounds):
    """The "others hold 0" pair of ``rounds`` rounds of shuffled binary RR, exactly (40 digits):
    the law of the counts of 1s per round, the differing user holding 0 (X0) or 1 (X1)."""
    with mpmath.workdps(40):
        p = 1 / (1 + mpmath.exp(mpmath.mpf(eps0)))
        others = [mpmath.binomial(n - 1, c) * p ** c * (1 - p) ** (n - 1 - c) for c in range(n)]
        laws = []
        for victim in (p, 1 - p):          # P(victim reports 1) on X0, X1
            one = [others[c] * (1 - victim) + (others[c - 1] * victim if c else 0)
                   for c in range(n)] + [others[n - 1] * victim]
            law = {(): mpmath.mpf(1)}
            for _ in range(rounds):
                law = {key + (c,): pr * one[c] for key, pr in law.items() for c in range(n + 1)}
            laws.append(law)
        return laws


@pytest.mark.parametrize("eps0", [5.0, 20.0, 50.0])
def test_composed_binary_rr_at_a_large_local_epsilon_has_a_near_tight_lower_bound(eps0):
    """Composed rounds at eps0 in the tens: the composed pairs' PLD certified nothing and the
    one-round fixed datasets little (eps0 = 50, 2 rounds, n = 5: lower 0 against an upper of
    100).  The event "every report is 0" on the "others hold 0" datasets certifies ``K + log(1
    - delta/P0)``.  Checked against the exact pair (40 digits): the lower bound is below its
    epsilon and delta, and within 1e-6 of the upper bound."""
    n, rounds, delta = 5, 2, 1e-6
    p0, p1 = _binary_rr_rounds_exact_mp(n, eps0, rounds)
    exact_delta = lambda eps: hockey_stick_mp(p0, p1, eps)
    with mpmath.workdps(40):
        lo, hi = mpmath.mpf(0), mpmath.mpf(rounds * eps0)     # exact epsilon at delta: bisect
        for _ in range(120):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if exact_delta(mid) > delta else (lo, mid)
    bounds = sm.composed_epsilon_bounds([(("binary_rr", eps0), n, rounds)], delta)
    assert bounds.lower <= float(hi) <= bounds.upper
    if eps0 >= 20:
        assert bounds.upper - bounds.lower < 1e-6, bounds
    eps = rounds * eps0 - 0.5
    low = sm.composed_delta_bounds([(("binary_rr", eps0), n, rounds)], eps).lower
    assert 0.3 < low <= float(exact_delta(eps))


def test_composed_delta_out_of_the_compositions_reach_answers():
    """delta queries of 2^53 or 10^9 rounds: the composed PLD needs 3e13 grid bins, and the
    direct functions refused (NumericalError) where the accountant answered; they now answer
    with upper 1 and their lower bounds.  The event lower bound stays below the exact value of
    its event, ``P0 (1 - e^(eps - K))`` with ``P0 = (E/(E+1))^(2 rounds)`` (mpmath)."""
    from dpplugins.amplification import shuffle_model_families as fam

    assert sm.composed_delta_bounds([(("binary_rr", 2.0), 2, 2 ** 53)], 5.0).upper == 1.0
    rounds, eps = [(("binary_rr", 50.0), 2, 10 ** 9)], 1e10
    with mpmath.workdps(40):
        e = mpmath.exp(50)
        event = (e / (e + 1)) ** (2 * 10 ** 9) * (1 - mpmath.exp(eps - 50 * 10 ** 9))
    for bounds in (sm.composed_delta_bounds(rounds, eps),
                   fam.composed_rounds_delta_bounds(rounds, eps)):
        assert bounds.upper == 1.0 and 0.999 < bounds.lower <= float(event)
