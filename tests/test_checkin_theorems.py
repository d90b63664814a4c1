"""Random check-in theorems (Balle et al. 2020) against exact brute force, hand arithmetic and the
stated special cases.

The brute force enumerates tiny protocols completely: every check-in choice, every server
selection and every output of binary randomized response (the local randomizer), for all datasets
that differ in one client, in both directions.  It does not use dpplugins.
"""

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import brentq

from dpplugins.amplification import checkin as C
from dpplugins.errors import ParameterError


# -- exact brute force (independent of dpplugins) -------------------------------------------------
def rr_matrix(eps0, delta0=0.0):
    """Row b = output distribution of binary randomized response on bit b: outputs (0, 1), and
    with delta0 > 0 also (reveal 0, reveal 1), each with probability delta0 -- an
    (eps0, delta0)-DP randomizer."""
    t = math.exp(eps0) / (1.0 + math.exp(eps0))
    base = np.array([[t, 1 - t], [1 - t, t]])
    if delta0 == 0:
        return base
    return np.hstack([(1 - delta0) * base, delta0 * np.eye(2)])


def _product_over_slots(slot_dists):
    """(configs x slots x K) per-slot output distributions -> (configs x K^slots) joint."""
    joint = slot_dists[:, 0, :]
    for i in range(1, slot_dists.shape[1]):
        joint = (joint[:, :, None] * slot_dists[:, i, None, :]).reshape(len(joint), -1)
    return joint


def fixed_window_checkins(n, m, p0):
    """All check-in configurations of A_fix: client j abstains (code m) or picks slot s."""
    configs = np.array(list(itertools.product(range(m + 1), repeat=n)))
    weights = np.prod(np.where(configs == m, 1 - p0, p0 / m), axis=1)
    keep = weights > 0
    members = (configs[keep][:, None, :] == np.arange(m)[None, :, None]).astype(float)
    return members, weights[keep]


def sliding_window_checkins(n, m):
    """All check-ins of A_sldw: client j picks j + offset; the used slots are m-1 .. n-1."""
    offsets = np.array(list(itertools.product(range(m), repeat=n)))
    slots = offsets + np.arange(n)[None, :]
    members = (slots[:, None, :] == np.arange(m - 1, n)[None, :, None]).astype(float)
    return members, np.full(len(offsets), 1.0 / m ** n)


def one_per_slot_release(members, weights, data, dummy, R):
    """Distribution of the released sequence when each slot uses one uniformly chosen member
    (A_fix / A_sldw) and the randomizer on the dummy input in an empty slot."""
    counts = members.sum(axis=2, keepdims=True)
    dist = np.einsum("csn,nk->csk", members, R[np.asarray(data)])
    dist = np.where(counts > 0, dist / np.maximum(counts, 1), R[dummy][None, None, :])
    return weights @ _product_over_slots(dist)


def averaged_release_table(n, m, K):
    """A_avg releases, per slot, the multiset of its members' reports (the average, the count and
    any skipped slot are functions of it).  Returns (ids of the release for every check-in
    configuration x every report vector, report vectors, number of releases, weight)."""
    configs = list(itertools.product(range(m), repeat=n))
    reports = list(itertools.product(range(K), repeat=n))
    ids, table = {}, np.empty((len(configs), len(reports)), dtype=np.int64)
    for a, conf in enumerate(configs):
        for b, rep in enumerate(reports):
            key = tuple(tuple(sorted(rep[j] for j in range(n) if conf[j] == i)) for i in range(m))
            table[a, b] = ids.setdefault(key, len(ids))
    return table, np.array(reports), len(ids), 1.0 / m ** n


def averaged_release(table_info, data, R):
    table, reports, size, weight = table_info
    p_reports = np.prod(R[np.asarray(data)[None, :], reports], axis=1)
    w = np.broadcast_to(weight * p_reports[None, :], table.shape)
    return np.bincount(table.ravel(), weights=w.ravel(), minlength=size)


def hockey_stick_both(P, Q, eps):
    """max(E_{e^eps}(P||Q), E_{e^eps}(Q||P))."""
    g = math.exp(min(eps, 700.0))  # beyond that every finite-loss pair has delta 0
    return max(np.maximum(P - g * Q, 0).sum(), np.maximum(Q - g * P, 0).sum())


def fixed_window_pairs(n, m, p0, R):
    """Neighbouring pairs of A_fix: client 0 holds 0 vs 1, k of the others hold 1 (clients are
    exchangeable), dummy input 0 or 1."""
    members, weights = fixed_window_checkins(n, m, p0)
    pairs = []
    for k in range(n):
        others = [1] * k + [0] * (n - 1 - k)
        for dummy in (0, 1):
            pairs.append((one_per_slot_release(members, weights, [0] + others, dummy, R),
                          one_per_slot_release(members, weights, [1] + others, dummy, R)))
    return pairs


def sliding_window_pairs(n, m, R):
    """Neighbouring pairs of A_sldw: every position t of the differing client, every bit
    pattern of the others, dummy input 0 or 1."""
    members, weights = sliding_window_checkins(n, m)
    pairs = []
    for t in range(n):
        for others in itertools.product((0, 1), repeat=n - 1):
            for dummy in (0, 1):
                d0 = list(others[:t]) + [0] + list(others[t:])
                d1 = list(others[:t]) + [1] + list(others[t:])
                pairs.append((one_per_slot_release(members, weights, d0, dummy, R),
                              one_per_slot_release(members, weights, d1, dummy, R)))
    return pairs


def averaged_pairs(n, m, R):
    info = averaged_release_table(n, m, R.shape[1])
    pairs = []
    for k in range(n):
        others = [1] * k + [0] * (n - 1 - k)
        pairs.append((averaged_release(info, [0] + others, R),
                      averaged_release(info, [1] + others, R)))
    return pairs


def exact_delta(pairs, eps):
    return max(hockey_stick_both(P, Q, eps) for P, Q in pairs)


def exact_epsilon(pairs, delta):
    f = lambda e: exact_delta(pairs, e) - delta
    if f(0.0) <= 0:
        return 0.0
    hi = 1.0
    while f(hi) > 0:
        hi *= 2
    return brentq(f, 0.0, hi, xtol=1e-13)


DELTAS = [0.5, 0.2, 0.05, 1e-2, 1e-3, 1e-6]


# -- brute force: the theorems hold on every tiny protocol -----------------------------------------
@pytest.mark.parametrize("n,m", [(1, 1), (2, 1), (2, 2), (3, 2), (4, 3), (5, 4), (2, 4), (3, 4)])
@pytest.mark.parametrize("eps0", [0.2, 1.0, 2.0])
@pytest.mark.parametrize("p0", [0.2, 0.6, 1.0])
def test_fixed_window_theorem_dominates_brute_force(n, m, eps0, p0):
    """Thm 3.2 (pure eps0): eps_thm(delta) >= the exact epsilon at the same delta."""
    pairs = fixed_window_pairs(n, m, p0, rr_matrix(eps0))
    for delta in DELTAS:
        eps, total = C.fixed_window_epsilon(eps0, delta, m, p0)
        assert total == pytest.approx(delta, rel=1e-9)
        assert exact_delta(pairs, eps) <= delta


@pytest.mark.parametrize("n,m", [(1, 1), (2, 1), (2, 2), (3, 2), (4, 3), (5, 3), (5, 4), (4, 4)])
@pytest.mark.parametrize("eps0", [0.2, 1.0, 2.0])
def test_sliding_window_theorem_dominates_brute_force(n, m, eps0):
    """Thm 4.3 (any m in [n])."""
    pairs = sliding_window_pairs(n, m, rr_matrix(eps0))
    for delta in DELTAS:
        eps, _ = C.sliding_window_epsilon(eps0, delta, m)
        assert exact_delta(pairs, eps) <= delta


@pytest.mark.parametrize("n,m", [(1, 1), (2, 1), (2, 2), (3, 2), (4, 3), (5, 4), (3, 4)])
@pytest.mark.parametrize("eps0", [0.05, 0.2, 1.0])
def test_averaged_theorem_dominates_brute_force(n, m, eps0):
    """Thm 4.1: (eps, delta + delta2)-DP.  For n <= 5 its eps1 >= sqrt(1/n) makes the bound loose
    (about 15x the exact epsilon at best), so this catches gross errors only; the restored
    formula is pinned by the hand computation below."""
    pairs = averaged_pairs(n, m, rr_matrix(eps0))
    for delta in [0.3, 1e-2, 1e-4]:
        for delta2 in [0.3, 1e-2, 1e-4]:
            eps, total = C.averaged_epsilon(eps0, delta, delta2, n, m)
            assert total == pytest.approx(delta + delta2, rel=1e-9)
            assert exact_delta(pairs, eps) <= total


@pytest.mark.parametrize("variant,n,m", [("fixed", 3, 2), ("fixed", 4, 4), ("sliding", 4, 2),
                                         ("sliding", 5, 3)])
def test_approximate_dp_statements_dominate_brute_force(variant, n, m):
    """(eps0, delta0) randomizer (randomized response that reveals the bit w.p. delta0) with
    delta0 at the admissible bound for delta1 = 1e-3: (eps', delta + m (e^eps' + 1) delta1)."""
    eps0, p0 = 0.1, 0.5
    delta0 = C.admissible_delta0(eps0, 1e-3)
    R = rr_matrix(eps0, delta0)
    pairs = (fixed_window_pairs(n, m, p0, R) if variant == "fixed"
             else sliding_window_pairs(n, m, R))
    for delta in [0.3, 0.05, 1e-3]:
        if variant == "fixed":
            eps, total = C.fixed_window_epsilon(eps0, delta, m, p0, delta0=delta0)
        else:
            eps, total = C.sliding_window_epsilon(eps0, delta, m, delta0=delta0)
        assert total == pytest.approx(delta + m * (math.exp(eps) + 1) * 1e-3, rel=1e-6)
        assert exact_delta(pairs, eps) <= total


def test_averaged_approximate_dp_statement_dominates_brute_force():
    eps0, n, m = 0.01, 3, 2   # 8 eps0 = 0.08 keeps eps' (about 0.5) and so delta' below 1
    delta0 = C.admissible_delta0(eps0, 1e-3)
    pairs = averaged_pairs(n, m, rr_matrix(eps0, delta0))
    eps, total = C.averaged_epsilon(eps0, 0.05, 0.05, n, m, delta0=delta0)
    assert exact_delta(pairs, eps) <= total


@pytest.mark.parametrize("variant", ["fixed", "averaged", "sliding"])
def test_pass_profile_dominates_brute_force_profile(variant):
    """The profile used for composition is above the exact delta(eps) at every eps."""
    n, m, eps0 = 4, 3, 0.7
    R = rr_matrix(eps0)
    p0 = 0.5 if variant == "fixed" else 1.0
    pairs = {"fixed": lambda: fixed_window_pairs(n, m, p0, R),
             "averaged": lambda: averaged_pairs(n, m, R),
             "sliding": lambda: sliding_window_pairs(n, m, R)}[variant]()
    profile = C.pass_privacy_profile(variant, num_clients=n, num_slots=m, checkin_probability=p0,
                                     eps0=eps0)
    grid = np.linspace(0.0, 1.0, 41)
    values = profile(grid)
    for eps, bound in zip(grid, values):
        assert exact_delta(pairs, eps) <= bound + 1e-15


def test_brute_force_catches_a_wrong_exponent():
    """The check has teeth: Thm 3.2 with p0^2 (instead of p0), or with (e^eps0 - 1)^2 (instead
    of e^eps0 - 1), in the leading term is contradicted by the exact epsilon."""
    def mutant(eps0, delta, m, p0, power_p, power_x):
        x = math.expm1(eps0)
        lead = math.sqrt(2 * math.exp(eps0) * math.log(1 / delta) / m)
        return p0 ** power_p * x ** power_x * lead + p0 ** 2 * math.exp(eps0) * x ** 2 / (2 * m)
    violated = {"p0^2": False, "(e^eps0-1)^2": False}
    for n, m, eps0, p0 in [(2, 4, 0.2, 0.2), (3, 4, 0.2, 0.2), (5, 4, 0.2, 0.2)]:
        pairs = fixed_window_pairs(n, m, p0, rr_matrix(eps0))
        for delta in DELTAS:
            if exact_delta(pairs, mutant(eps0, delta, m, p0, 2, 1)) > delta:
                violated["p0^2"] = True
            if exact_delta(pairs, mutant(eps0, delta, m, p0, 1, 2)) > delta:
                violated["(e^eps0-1)^2"] = True
            # the real theorem is never contradicted
            assert exact_delta(pairs, C.fixed_window_epsilon(eps0, delta, m, p0).epsilon) <= delta
    assert all(violated.values()), violated


# -- hand-computed values of the (restored) formulas ----------------------------------------------
def test_fixed_window_hand_value():
    # eps0 = ln 2: e^eps0 = 2, e^eps0 - 1 = 1; p0 = 1/2, m = 8, delta = e^-4: log(1/delta) = 4
    # eps = p0 (e^eps0-1) sqrt(2 e^eps0 log(1/delta)/m) + p0^2 e^eps0 (e^eps0-1)^2/(2m)
    #     = 0.5 * 1 * sqrt(2*2*4/8) + 0.25 * 2 * 1 / 16 = 0.5 * sqrt(2) + 0.03125 = 0.7383567811
    eps, delta = C.fixed_window_epsilon(math.log(2), math.exp(-4), 8, 0.5)
    assert eps == pytest.approx(0.5 * math.sqrt(2) + 0.03125, rel=1e-11)
    assert eps == pytest.approx(0.7383567811, rel=1e-9)
    assert delta == pytest.approx(math.exp(-4), rel=1e-11)


def test_fixed_window_approximate_dp_hand_value():
    # eps0 = ln(2)/8, so 8 eps0 = ln 2 and eps' is the value above (0.7383567811).
    # Admissible delta0 for delta1 = 1e-6:
    #   1 - e^-eps0 = 1 - 2^(-1/8) = 0.0829959568;  e^eps0 = 2^(1/8) = 1.0905077327
    #   e^(-5 eps0) = 2^(-5/8) = 0.6484197773;  ln(1/(1 - 0.6484197773)) = 1.0453173643
    #   ln(2/delta1) = ln(2e6) = 14.5086577385;  14.5086577385 / 1.0453173643 = 13.8796677781
    #   delta0 = 0.0829959568e-6 / (4 * 1.0905077327 * (2 + 13.8796677781)) = 1.1981930e-9
    eps0 = math.log(2) / 8
    delta0 = C.admissible_delta0(eps0, 1e-6)
    assert delta0 == pytest.approx(0.0829959568e-6 / (4 * 1.0905077327 * 15.8796677781), rel=1e-8)
    assert delta0 == pytest.approx(1.1981930e-9, rel=1e-7)
    assert C.delta1_for_delta0(eps0, delta0) == pytest.approx(1e-6, rel=1e-9)
    # delta' = delta + m (e^eps' + 1) delta1 = e^-4 + 8 * (e^0.7383567811 + 1) * 1e-6
    #        = 0.0183156389 + 8 * 3.0924... * 1e-6 = 0.0183403788
    eps, total = C.fixed_window_epsilon(eps0, math.exp(-4), 8, 0.5, delta0=delta0)
    assert eps == pytest.approx(0.7383567811, rel=1e-9)
    assert total == pytest.approx(math.exp(-4) + 8 * (math.exp(0.7383567811) + 1) * 1e-6, rel=1e-8)
    assert total == pytest.approx(0.0183403788, rel=1e-8)


def test_averaged_hand_value():
    # n = m = 8, delta2 = e^-2: eps1 = sqrt(1/8 + 1/8) + sqrt(2/8) = 0.5 + 0.5 = 1
    # eps0 = ln 2: e^(4 eps0) = 16, e^(2 eps0) = 4, e^eps0 - 1 = 1; delta = e^-2: log(1/delta) = 2
    # eps = 16 * 1 * 1 / 2 + 4 * 1 * 1 * sqrt(2 * 2) = 8 + 8 = 16;  total delta = 2 e^-2
    assert C.averaged_eps1(8, 8, math.exp(-2)) == pytest.approx(1.0, rel=1e-14)
    eps, total = C.averaged_epsilon(math.log(2), math.exp(-2), math.exp(-2), 8, 8)
    assert eps == pytest.approx(16.0, rel=1e-11)
    assert total == pytest.approx(2 * math.exp(-2), rel=1e-11)


def test_sliding_window_hand_value():
    # eps0 = ln 3: e^eps0 = 3, e^eps0 - 1 = 2; m = 12; delta = e^-2
    # eps = 3 * 4 / 24 + 2 * sqrt(2 * 3 * 2 / 12) = 0.5 + 2 * 1 = 2.5
    eps = C.sliding_window_epsilon(math.log(3), math.exp(-2), 12).epsilon
    assert eps == pytest.approx(2.5, rel=1e-11)


def test_heterogeneous_composition_hand_value():
    # a = 2, b = 1/2, k = 4, delta = e^-1:
    # a^2/(2k(1-b)) = 4/4 = 1;  sqrt(2 a^2 log(1/delta)/(k(1-b))) = sqrt(8/2) = 2;  eps = 3
    eps = C.heterogeneous_composition_epsilon(2.0, 0.5, 4, math.exp(-1))
    assert eps == pytest.approx(3.0, rel=1e-11)


def test_fixed_window_is_lemma_a2_with_the_proofs_constants():
    # Proof of Thm A.4: a = p0 (e^eps0 - 1), b = (e^eps0 - 1)/e^eps0, k = m
    for eps0, p0, m, delta in [(0.3, 0.2, 50, 1e-6), (1.5, 1.0, 7, 0.01), (0.01, 0.5, 1000, 1e-9)]:
        a, b = p0 * math.expm1(eps0), -math.expm1(-eps0)
        assert C.fixed_window_epsilon(eps0, delta, m, p0).epsilon == pytest.approx(
            C.heterogeneous_composition_epsilon(a, b, m, delta), rel=1e-12)
        assert C.sliding_window_epsilon(eps0, delta, m).epsilon == pytest.approx(
            C.heterogeneous_composition_epsilon(math.expm1(eps0), b, m, delta), rel=1e-12)


def test_dummy_updates_hand_values():
    # A_fix, n = 2, m = 2, p0 = 1: 4 equally likely check-ins, 2 put both clients in one slot
    # (one empty slot each): E = 2/4 = 0.5 = m (1 - p0/m)^n = 2 * 1/4
    assert C.expected_dummy_updates(2, 2) == pytest.approx(0.5, rel=1e-14)
    # n = 3, m = 2, p0 = 1/2: P(slot empty) = (1 - 1/4)^3 = 0.421875, E = 0.84375
    assert C.expected_dummy_updates(3, 2, 0.5) == pytest.approx(0.84375, rel=1e-14)
    # sliding, n = 3, m = 2: used slots 1, 2 (0-based); slot 1 is empty iff client 0 picks 0 and
    # client 1 picks 2 (prob 1/4); same for slot 2: E = 0.5 = (n - m + 1)(1 - 1/m)^m
    assert C.expected_dummy_updates(3, 2, variant="sliding") == pytest.approx(0.5, rel=1e-14)
    assert C.expected_dummy_updates(5, 1, variant="sliding") == 0.0
    # the paper's bounds: m e^-c with c = p0 n / m; (n - m + 1)/e
    assert C.expected_dummy_updates_bound(100, 10, 0.1) == pytest.approx(10 * math.exp(-1))
    assert C.expected_dummy_updates_bound(30, 10, variant="sliding") == pytest.approx(21 / math.e)
    for n, m, p0 in [(100, 10, 0.1), (1000, 100, 0.3), (50, 50, 1.0)]:
        assert C.expected_dummy_updates(n, m, p0) <= C.expected_dummy_updates_bound(n, m, p0)
    for n, m in [(30, 10), (100, 100), (7, 3)]:
        assert (C.expected_dummy_updates(n, m, variant="sliding")
                <= C.expected_dummy_updates_bound(n, m, variant="sliding"))


def test_checkin_probability_for_dummy_fraction():
    # n = 1000, m = 100, target e^-1: p0 = m (1 - e^(-1/n)) = 100 * 9.995001666e-4 = 0.09995001666
    p0 = C.checkin_probability_for_dummy_fraction(1000, 100, math.exp(-1))
    assert p0 == pytest.approx(0.09995001666, rel=1e-9)
    assert C.expected_dummy_updates(1000, 100, p0) / 100 <= math.exp(-1)
    assert (1 - p0 / 100) ** 1000 <= math.exp(-1) * (1 + 1e-12)
    with pytest.raises(ParameterError, match="dummy_fraction"):   # (1 - 1/100)^10 = 0.904 > 0.5
        C.checkin_probability_for_dummy_fraction(10, 100, 0.5)


def test_advanced_composition_hand_value():
    # 0.1 sqrt(2 * 100 * ln(1e5)) + 100 * 0.1 * (e^0.1 - 1) = 4.7985261 + 1.0517092 = 5.8502353
    assert C.advanced_composition_epsilon(0.1, 100, 1e-5) == pytest.approx(5.8502353, rel=1e-7)


# -- special cases stated in the paper -------------------------------------------------------------
@pytest.mark.parametrize("m", [1, 2, 5, 100, 10 ** 6])
def test_fixed_window_special_case_seven_p0_eps0(m):
    """Thm 3.2: for eps0 <= 1 and delta <= 1/100, eps <= 7 p0 eps0 sqrt(log(1/delta)/m)."""
    for eps0 in [1e-3, 0.1, 0.5, 0.9, 1.0]:
        for delta in [1e-2, 1e-3, 1e-8, 1e-15]:
            for p0 in [1e-3, 0.1, 0.5, 1.0]:
                eps = C.fixed_window_epsilon(eps0, delta, m, p0).epsilon
                assert eps <= 7 * p0 * eps0 * math.sqrt(math.log(1 / delta) / m)
            sliding = C.sliding_window_epsilon(eps0, delta, m).epsilon
            assert sliding <= 7 * eps0 * math.sqrt(math.log(1 / delta) / m)


# -- Lemma A.2 and the composition theorems against exact enumeration ------------------------------
def _product_rr_delta(eps_list, eps):
    """Exact delta(eps) of the product of binary randomized responses RR(eps_i) -- the dominating
    pair of adaptively composed eps_i-DP mechanisms (Kairouz, Oh, Viswanath 2015)."""
    eps_arr = np.asarray(eps_list)
    t = np.exp(eps_arr) / (1 + np.exp(eps_arr))
    outcomes = np.array(list(itertools.product((0, 1), repeat=len(eps_arr))))
    P = np.prod(np.where(outcomes == 1, t, 1 - t), axis=1)
    Q = np.prod(np.where(outcomes == 1, 1 - t, t), axis=1)
    return hockey_stick_both(P, Q, eps)


@pytest.mark.parametrize("a,b,k", [(0.5, 0.3, 4), (2.0, 0.5, 8), (1.0, 0.9, 10), (0.2, 0.0, 12)])
def test_lemma_a2_dominates_exact_heterogeneous_composition(a, b, k):
    eps_list = [math.log1p(a / (k - b * i)) for i in range(k)]
    for delta in [0.3, 0.05, 1e-3, 1e-6]:
        eps = C.heterogeneous_composition_epsilon(a, b, k, delta)
        assert _product_rr_delta(eps_list, eps) <= delta


@pytest.mark.parametrize("e,d,k", [(0.5, 0.0, 1), (0.5, 0.01, 3), (1.2, 0.05, 4), (0.1, 1e-3, 5)])
def test_optimal_composition_equals_enumeration(e, d, k):
    """KOV's delta for k (e, d)-DP mechanisms = hockey stick of the k-fold product of the
    four-point pair P = (d, (1-d) e^e/(1+e^e), (1-d)/(1+e^e), 0), Q = its mirror."""
    p = np.array([d, (1 - d) * math.exp(e) / (1 + math.exp(e)), (1 - d) / (1 + math.exp(e)), 0])
    q = p[::-1]
    idx = np.array(list(itertools.product(range(4), repeat=k)))
    P, Q = np.prod(p[idx], axis=1), np.prod(q[idx], axis=1)
    for eps in [0.0, 0.3, e, 1.7, k * e]:
        assert C.optimal_composition_delta(eps, e, d, k) == pytest.approx(
            hockey_stick_both(P, Q, eps), rel=1e-9, abs=1e-15)
    for delta in [0.2, 0.05]:
        eps = C.optimal_composition_epsilon(delta, e, d, k)
        if math.isfinite(eps) and eps > 0:
            assert hockey_stick_both(P, Q, eps) <= delta * (1 + 1e-9)
            assert hockey_stick_both(P, Q, eps * (1 - 1e-6)) > delta * (1 - 1e-9) or eps < 1e-6


@pytest.mark.parametrize("method", ["pld", "optimal", "advanced"])
def test_repeated_fixed_window_dominates_brute_force(method):
    """Cor. 3.3 on n = 4, m = 2 (p0 = 1/2, 2 runs): the composed bound is >= the exact epsilon of
    two independent runs on the worst brute-force pair (a lower bound on the truth)."""
    n, m, eps0 = 4, 2, 1.0
    pairs = fixed_window_pairs(n, m, m / n, rr_matrix(eps0))
    composed = [(np.outer(P, P).ravel(), np.outer(Q, Q).ravel()) for P, Q in pairs]
    for delta in [0.1, 1e-3]:
        eps = C.repeated_fixed_window_epsilon(eps0, delta, n, m, method=method).epsilon
        assert exact_delta(composed, eps) <= delta


def test_repeated_fixed_window_methods_are_ordered():
    """The PLD of the whole profile is tighter than the optimal composition of one (eps, delta)
    point, which is tighter than advanced composition (the paper's route)."""
    args = (1.0, 1e-6, 10_000, 100)
    pld = C.repeated_fixed_window_epsilon(*args, method="pld").epsilon
    optimal = C.repeated_fixed_window_epsilon(*args, method="optimal").epsilon
    advanced = C.repeated_fixed_window_epsilon(*args, method="advanced").epsilon
    assert pld <= optimal <= advanced
    assert 0.4 < pld < 0.55 and 0.6 < optimal < 0.8 and 0.9 < advanced < 1.05


# -- profiles invert the theorems ------------------------------------------------------------------
def test_profiles_invert_the_theorems_conservatively():
    cases = [
        (C.fixed_window_profile(0.8, 50, 0.3), lambda d: C.fixed_window_epsilon(0.8, d, 50, 0.3)),
        (C.sliding_window_profile(0.4, 20), lambda d: C.sliding_window_epsilon(0.4, d, 20)),
        (C.fixed_window_profile(0.05, 10, 0.5, delta0=1e-9),
         lambda d: C.fixed_window_epsilon(0.05, d, 10, 0.5, delta0=1e-9)),
    ]
    for i, (profile, theorem) in enumerate(cases):
        for delta in [0.4, 1e-3, 1e-8]:
            eps, total = theorem(delta)
            value = float(profile(np.array([eps]))[0])
            assert value == pytest.approx(total, rel=1e-8)
            if i < 2:  # just below the theorem's epsilon the profile is >= the theorem's delta
                assert float(profile(np.array([eps * (1 - 1e-9)]))[0]) >= total
        values = profile(np.linspace(0, 5, 200))
        assert np.all((values >= 0) & (values <= 1))
        if i < 2:  # pure randomizers: exp(-((eps - B)/A)^2) is non-increasing
            assert np.all(np.diff(values) <= 0)
    # averaged: the profile at eps is <= delta + delta2 of any single statement at that eps
    profile = C.averaged_profile(0.3, 1000, 100)
    eps, total = C.averaged_epsilon(0.3, 1e-4, 1e-5, 1000, 100)
    assert float(profile(np.array([eps]))[0]) <= total * (1 + 1e-9)


def test_gaussian_local_delta0_is_the_exact_gaussian_profile():
    from scipy.special import log_ndtr
    for sigma in [0.5, 2.0, 10.0]:
        mu = 2.0 / sigma                                   # replace-one: sensitivity 2C
        for eps in [0.0, 0.3, 2.0]:
            exact = (math.exp(log_ndtr(-eps / mu + mu / 2))
                     - math.exp(eps + log_ndtr(-eps / mu - mu / 2)))
            value = float(C.gaussian_local_delta0(eps, sigma))
            assert exact <= value <= exact * (1 + 1e-8) + 1e-300


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("call,name", [
    (lambda: C.fixed_window_epsilon(0.0, 1e-5, 10, 0.5), "eps0"),
    (lambda: C.fixed_window_epsilon(math.nan, 1e-5, 10, 0.5), "eps0"),
    (lambda: C.fixed_window_epsilon(1.0, 0.0, 10, 0.5), "delta"),
    (lambda: C.fixed_window_epsilon(1.0, 1.0, 10, 0.5), "delta"),
    (lambda: C.fixed_window_epsilon(1.0, 1e-5, 0, 0.5), "num_slots"),
    (lambda: C.fixed_window_epsilon(1.0, 1e-5, 10, 0.0), "checkin_probability"),
    (lambda: C.fixed_window_epsilon(1.0, 1e-5, 10, 1.5), "checkin_probability"),
    (lambda: C.fixed_window_epsilon(1.0, 1e-5, 10, 0.5, delta0=-1e-9), "delta0"),
    (lambda: C.averaged_epsilon(1.0, 1e-5, 0.0, 100, 10), "delta2"),
    (lambda: C.averaged_epsilon(1.0, 0.6, 0.5, 100, 10), "delta2"),
    (lambda: C.averaged_epsilon(1.0, 1e-5, 1e-5, 0, 10), "num_clients"),
    (lambda: C.sliding_window_epsilon(1.0, 1e-5, 0), "window"),
    (lambda: C.heterogeneous_composition_epsilon(1.0, 1.0, 5, 1e-5), "b"),
    (lambda: C.heterogeneous_composition_epsilon(-1.0, 0.5, 5, 1e-5), "a"),
    (lambda: C.repeated_fixed_window_epsilon(1.0, 1e-5, 10, 20), "num_slots"),
    (lambda: C.repeated_fixed_window_epsilon(1.0, 1e-5, 100, 10, method="rdp"), "method"),
    (lambda: C.expected_dummy_updates(0, 10), "num_clients"),
    (lambda: C.expected_dummy_updates(10, 11, variant="sliding"), "num_slots"),
    (lambda: C.expected_dummy_updates(10, 5, 1.2), "checkin_probability"),
    (lambda: C.checkin_probability_for_dummy_fraction(10, 5, 1.0), "dummy_fraction"),
    (lambda: C.pass_privacy_profile("averaged", num_clients=10, num_slots=5,
                                    checkin_probability=0.5, eps0=1.0), "checkin_probability"),
    (lambda: C.pass_privacy_profile("sliding", num_clients=5, num_slots=6, eps0=1.0), "window"),
    (lambda: C.pass_privacy_profile("fixed", num_clients=5, num_slots=2), "eps0"),
    (lambda: C.pass_privacy_profile("swap", num_clients=5, num_slots=2, eps0=1.0), "variant"),
])
def test_bad_input_raises_parameter_error(call, name):
    with pytest.raises(ParameterError, match=name):
        call()


def test_inadmissible_delta0_states_the_bound():
    # eps0 = 0.05 (8 eps0 = 0.4), m = 10: delta0 = 1e-3 needs delta1 near 0.4, so
    # delta' = delta + m (e^eps' + 1) delta1 would exceed 1
    with pytest.raises(ParameterError) as info:
        C.fixed_window_epsilon(0.05, 1e-5, 10, 0.5, delta0=1e-3)
    message = str(info.value)
    assert "delta0=0.001" in message and "admissible bound" in message
    bound = float(message.split("must be <= ")[1].split(" ")[0])
    assert 0 < bound < 1e-3
    # just below the stated bound the theorem applies, and its delta' is below 1
    eps, total = C.fixed_window_epsilon(0.05, 1e-5, 10, 0.5, delta0=bound * 0.999)
    assert total < 1
    # with a large eps0 the theorem's eps' is so large that only delta0 = 0 is admissible
    with pytest.raises(ParameterError, match=r"delta0=1e-12 is invalid: must be <= 0 "):
        C.fixed_window_epsilon(0.5, 1e-5, 10, 0.5, delta0=1e-12)
    with pytest.raises(ParameterError, match="delta0"):
        C.sliding_window_epsilon(2.0, 1e-5, 10, delta0=0.5)


@pytest.mark.parametrize("eps0,delta0", [(6.621077250787868, 4.931860271687064e-25),
                                         (7.353526267589761, 1.0322048951793024e-101),
                                         (5.5, 1e-30), (4.0, 1e-12), (2.5, 1e-9), (6.0, 1e-40)])
def test_delta1_for_delta0_is_admissible_in_exact_arithmetic(eps0, delta0):
    """``k = log(1 / (1 - e^(-5 eps0)))`` was ``-log(-expm1(-5 eps0))``, whose argument is
    within an ulp of 1 for eps0 above about 5: the admissible bound came out up to 0.6 % too
    large and the smallest ``delta1`` too small (the theorem does not admit it).  Reference: the
    hypothesis of Balle et al. 2020, Thm 3.2, in 60-digit arithmetic."""
    import mpmath

    d1 = C.delta1_for_delta0(eps0, delta0)
    with mpmath.workdps(60):
        e, d = mpmath.mpf(eps0), mpmath.mpf(d1)
        k = -mpmath.log(1 - mpmath.exp(-5 * e))
        allowed = -mpmath.expm1(-e) * d / (4 * mpmath.exp(e) * (2 + mpmath.log(2 / d) / k))
    assert allowed >= delta0
    assert C.admissible_delta0(eps0, d1) <= allowed


def _gaussian_profile_mpmath(eps, mu, digits=80):
    """Balle & Wang 2018, Thm 8, in ``digits``-digit arithmetic (mpmath, exact float inputs)."""
    import mpmath

    with mpmath.workdps(digits):
        e, m = mpmath.mpf(eps), mpmath.mpf(mu)
        ncdf = lambda x: mpmath.erfc(-x / mpmath.sqrt(2)) / 2  # noqa: E731
        return ncdf(-e / m + m / 2) - mpmath.exp(e) * ncdf(-e / m - m / 2)


@pytest.mark.parametrize("sigma", [300.0, 1e4, 1e5, 1e10, 1e14, 1e20])
def test_gaussian_local_delta0_is_never_below_the_exact_profile(sigma):
    """The log-space profile times ``1 + 1e-10`` was below the exact delta0 at large noise (its two
    terms cancel for small mu): a relative 1.6e-9 at noise 300, 2.6e-2 at 1e14, and 1e-300 where
    it is 8e-21 at 1e20 (a hostile sweep).  Reference: 80-digit arithmetic, on the eps0 grid of
    the shuffling bound."""
    import mpmath

    eps0 = np.concatenate([np.geomspace(1e-4, 2.0, 64), [0.0]])
    values = C.gaussian_local_delta0(eps0, sigma)
    mu = mpmath.mpf(2) / mpmath.mpf(sigma)
    for e, v in zip(eps0, values):
        assert v >= _gaussian_profile_mpmath(float(e), mu), e


@pytest.mark.parametrize("eps0,slots,p0", [(10.898455897945873, 10, 1.0), (10.0, 1, 1.0),
                                           (9.0, 100, 0.5), (6.0, 1, 1.0), (1.0, 100, 1.0)])
def test_fixed_and_sliding_profiles_are_never_below_the_exact_formula(eps0, slots, p0):
    """``exp(-((eps - B) / A)^2)`` cancels in ``eps - B`` when ``B / A`` (about ``e^(3 eps0 / 2)``)
    is large, and the rounding of ``B`` moved the profile below the exact value of the formula:
    a relative 4e-9 at eps0 = 10.9, m = 10 (a hostile sweep).  Reference: Thm 3.2 / 4.3 in
    80-digit arithmetic (mpmath, exact float inputs)."""
    import mpmath

    for profile, w in [(C.fixed_window_profile(eps0, slots, p0), p0),
                       (C.sliding_window_profile(eps0, slots), 1.0)]:
        with mpmath.workdps(80):
            e0, m, p = mpmath.mpf(eps0), mpmath.mpf(slots), mpmath.mpf(w)
            x = mpmath.expm1(e0)
            a = p * x * mpmath.sqrt(2 * mpmath.exp(e0) / m)
            b = p * p * mpmath.exp(e0) * x * x / (2 * m)
            for z in [0.5, 1.0, 2.0, 3.0, 4.0, 5.0]:
                eps = float(b + a * z)
                exact = mpmath.exp(-((eps - b) / a) ** 2)
                assert profile(np.array([eps]))[0] >= exact, (w, z, eps)


def test_admissible_delta0_at_a_subnormal_eps0_is_a_number():
    """eps0 = 5e-324 (valid: > 0): e^(-5 eps0) rounds to 1, and log1p(-1) raised a math domain
    error from supports().  Reference: the hypothesis of Balle et al. 2020, Thm 3.2, in 50-digit
    arithmetic."""
    import mpmath
    from dpplugins.accountants import create
    from dpplugins.events import EpsilonDeltaEvent, RandomCheckInEvent
    with mpmath.workdps(50):
        e, d1 = mpmath.mpf(5e-324), mpmath.mpf(1e-3)
        k = -mpmath.log(-mpmath.expm1(-5 * e))
        exact = float(-mpmath.expm1(-e) * d1
                      / (4 * mpmath.exp(e) * (2 + mpmath.log(2 / d1) / k)))
    assert C.admissible_delta0(5e-324, 1e-3) == pytest.approx(exact, rel=1e-9, abs=0.0)
    event = RandomCheckInEvent(200, EpsilonDeltaEvent(5e-324, 1e-9), "fixed", 20, None, 0.5)
    assert isinstance(create("checkin").supports(event), bool)


@pytest.mark.parametrize("eps0", [1e-300, 1e-160])
def test_fixed_window_profile_at_a_tiny_eps0_has_no_overflow(eps0):
    """eps0 = 1e-300: Thm 3.2's A = p0 (e^eps0 - 1) sqrt(2 e^eps0 / m) is about 1e-300, so
    ((eps - B) / A)^2 overflowed (a RuntimeWarning from the checkin accountant's epsilon query).
    exp(-inf) = 0 is the exact value: the profile is 1 up to B and 0 beyond it (B ~ A^2)."""
    import warnings

    from dpplugins.accountants import create
    from dpplugins.events import EpsilonDeltaEvent, RandomCheckInEvent
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        profile = C.fixed_window_profile(eps0, 10, 1.0)
        values = profile(np.array([0.0, 1e-6, 0.5, 3.0]))
        bounds = create("checkin").compose(
            RandomCheckInEvent(100, EpsilonDeltaEvent(eps0, 0.0), num_slots=10)
        ).get_epsilon_bounds(1e-6)
    assert values[0] == 1.0 and np.all(values[1:] == 0.0)
    assert 0.0 <= bounds.lower <= bounds.upper < 1e-3


def test_fixed_window_profile_with_slots_beyond_int64():
    """1e308 slots (a Python int beyond int64, found by the fuzz tests): the (eps0, delta0)
    profile's term ``m (e^eps + 1) delta1`` made a numpy object array, and ``np.minimum``
    raised a casting error.  The profile is that of the same theorem with ``m`` as a float:
    checked against the closed form written out here (``delta + m (e^eps + 1) delta1`` is above
    1 at every eps for such m, so the profile is 1)."""
    from dpplugins.accountants import create
    from dpplugins.events import EpsilonDeltaEvent, RandomCheckInEvent
    slots = int(1e308)
    values = C.fixed_window_profile(1.0, slots, 0.5, delta0=1e-9)(np.array([0.0, 1.0, 10.0]))
    assert np.all(values == 1.0)
    bounds = create("checkin").compose(
        RandomCheckInEvent(200, EpsilonDeltaEvent(1.0, 1e-9), "fixed", slots, None, 0.5)
    ).get_epsilon_bounds(1e-5)
    # no amplification is certified: the (1, 1e-9) step itself, epsilon just below 1
    assert 0.0 <= bounds.lower <= bounds.upper <= 1.0
