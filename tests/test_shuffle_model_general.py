"""The stronger-clone bound for general eps0-DP randomizers (every user running the same one):
the blanket argument of :mod:`dpplugins.amplification.shuffle_model` ("The general-randomizer
claim"), checked step by step.

Independent checks: the shuffled output's exact law by enumerating histograms (n <= 4) over every
dataset, for k-RR, randomizers whose blanket mass is below ``2/(E+1)``, unary encoding, extreme
points of the LDP polytope and random randomizers; the blanket functional
``(1/n) E[(G_1 + ... + G_n)_+]`` of each randomizer summed exactly over the counts of its
outputs; the spread and the extremes by direct multinomial sums in log space.
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest
from scipy.optimize import nnls

from dpplugins.amplification import shuffle_model as sm
from test_shuffle_model import (blanket_functional as functional, histogram_law, hockey,
                                krr_row)  # brute-force helpers, shared


# -- randomizers (rows: inputs, columns: outputs) ------------------------------------------------
def krr(eps0, k):
    return np.array([krr_row(eps0, k, x) for x in range(k)])


def anti_rr(eps0, k):
    """Output y is e^eps0 times likelier for every input but y: blanket mass
    ``k/(E(k-1)+1)``, below ``2/(E+1)`` from k = 3 on (the other side of the extremes)."""
    e = math.exp(eps0)
    z = e * (k - 1) + 1
    return np.array([[(1.0 if x == y else e) / z for y in range(k)] for x in range(k)])


def unary_encoding(eps0, d):
    h = math.exp(eps0 / 2)
    a, b = h / (h + 1), 1 / (h + 1)
    return np.array([[np.prod([(a if j == x else b) if bit else (1 - (a if j == x else b))
                               for j, bit in enumerate(y)])
                      for y in itertools.product((0, 1), repeat=d)] for x in range(d)])


def extreme_point(eps0, d, k, rng):
    """Columns ``w_y (E if x in S_y else 1)`` with rows summing to 1 (a vertex-like LDP
    randomizer), or None."""
    e = math.exp(eps0)
    for _ in range(50):
        a = np.where(rng.random((d, k)) < rng.random(), e, 1.0)
        w, residual = nnls(a, np.ones(d))
        if residual < 1e-10 and np.count_nonzero(w > 1e-9) >= 2:
            return (a * w)[:, w > 1e-9]
    return None


def random_randomizer(eps0, d, k, rng):
    """Entries within ``e^(eps0/2)`` of each other per column, rows normalised: eps0-DP."""
    a = rng.uniform(1, math.exp(eps0 / 2), (d, k)) * rng.exponential(1.0, k)
    return a / a.sum(axis=1, keepdims=True)


def randomizers(eps0):
    rng = np.random.default_rng(int(eps0 * 1000))
    out = [("krr2", krr(eps0, 2)), ("krr3", krr(eps0, 3)), ("krr4", krr(eps0, 4)),
           ("anti3", anti_rr(eps0, 3)), ("anti4", anti_rr(eps0, 4)),
           ("sue3", unary_encoding(eps0, 3))]
    for i in range(6):
        r = extreme_point(eps0, 3, 4, rng)
        if r is not None:
            out.append((f"extreme{i}", r))
        out.append((f"random{i}", random_randomizer(eps0, 3, 3, rng)))
    for name, r in out:      # every one is eps0-DP
        assert np.log(np.max(r[:, None, :] / r[None, :, :])) <= eps0 + 1e-9, name
    return out


# -- references -------------------------------------------------------------------------------
def worst_shuffled_delta(R, n, eps):
    """max over ordered pairs of distinct inputs and every multiset of the others."""
    best = 0.0
    for i, j in itertools.permutations(range(len(R)), 2):
        for others in itertools.combinations_with_replacement(range(len(R)), n - 1):
            rest = [R[v] for v in others]
            best = max(best, hockey(histogram_law([R[i]] + rest),
                                    histogram_law([R[j]] + rest), eps))
    return best


def spread_functional(eps0, eps, n, gamma, t):
    """The four-class G of step 2: ``w10 = w01 = m - t``, ``w11 = t``, ``w00 = gamma - 2m +
    t``, ``m = (1 - gamma)/(E - 1)``."""
    e, x = math.exp(eps0), math.exp(eps)
    m = (1 - gamma) / (e - 1)
    return functional([e - x, 1 - e * x, e * (1 - x), 1 - x],
                      [m - t, m - t, t, max(gamma - 2 * m + t, 0.0)], n)


def binary_rr_blanket(eps0, eps, n):
    e = math.exp(eps0)
    return spread_functional(eps0, eps, n, 2 / (e + 1), 0.0)


def blanket_of(R, i, j, eps):
    """Values and masses of G for inputs i, j of the randomizer R (step 1)."""
    c = R.min(axis=0)
    return (R[i] - math.exp(eps) * R[j]) / c, c


# -- the checks -----------------------------------------------------------------------------------
@pytest.mark.parametrize("eps0", [1.0, 2.5])
def test_general_bound_is_above_exact_enumeration(eps0):
    """The general upper bound (the stronger clone) over every dataset of every randomizer in
    the list, n <= 4, and the argument's first step (the blanket functional of each randomizer
    is above its exact shuffled delta)."""
    for name, R in randomizers(eps0):
        for n in (2, 3, 4):
            for eps in np.linspace(0, eps0, 5)[:-1]:
                exact = worst_shuffled_delta(R, n, float(eps))
                upper = sm.delta_bounds(("general", eps0), n, float(eps)).upper
                assert exact <= upper + 1e-12, (name, n, eps)
                blanket = max(functional(*blanket_of(R, i, j, float(eps)), n)
                              for i, j in itertools.permutations(range(len(R)), 2))
                assert exact <= blanket + 1e-12, (name, n, eps)
                assert blanket <= binary_rr_blanket(eps0, float(eps), n) + 1e-12, (name, n)


def test_the_pair_used_is_binary_rr_blanket():
    """``_strong_clone`` brackets the direct sum of binary RR's blanket (step 3's end)."""
    for eps0, n in ((1.0, 5), (2.0, 40), (4.0, 25)):
        for eps in (0.05 * eps0, 0.3 * eps0, 0.7 * eps0):
            b = sm._strong_clone(eps0, n).delta(eps)
            direct = binary_rr_blanket(eps0, eps, n)
            assert b.lower <= direct * (1 + 1e-9) and direct <= b.upper * (1 + 1e-9)


@pytest.mark.parametrize("eps0", [1.0, 3.0])
def test_spread_masses_and_extremes(eps0):
    """Step 2: each randomizer's spread masses are ``m - t, m - t, t, gamma - 2m + t`` with
    ``m = (1 - gamma)/(E - 1)``, and its blanket functional is below the spread one.  Step 3:
    over a grid of ``gamma`` in ``[1/E, 1]`` and admissible ``t``, the four-class functional
    is largest at ``gamma = 2/(E+1)``, ``t = 0``."""
    e = math.exp(eps0)
    n = 6
    for name, R in randomizers(eps0):
        c = R.min(axis=0)
        gamma, m = float(c.sum()), (1 - float(c.sum())) / (e - 1)
        a = (R / c - 1) / (e - 1)
        assert np.all(a >= -1e-12) and np.all(a <= 1 + 1e-12)
        for i, j in itertools.permutations(range(len(R)), 2):
            w10, w01 = float(c @ (a[i] * (1 - a[j]))), float(c @ ((1 - a[i]) * a[j]))
            t = float(c @ (a[i] * a[j]))
            assert w10 == pytest.approx(m - t, abs=1e-12)
            assert w01 == pytest.approx(m - t, abs=1e-12)
            for eps in (0.2 * eps0, 0.6 * eps0):
                actual = functional(*blanket_of(R, i, j, eps), n)
                assert actual <= spread_functional(eps0, eps, n, gamma, t) + 1e-12, name
    for eps in (0.1 * eps0, 0.5 * eps0):
        top = binary_rr_blanket(eps0, eps, n)
        for gamma in np.linspace(1 / e, 1.0, 12):
            m = (1 - gamma) / (e - 1)
            t_min = max(0.0, 2 * m - gamma)
            worst_t = spread_functional(eps0, eps, n, gamma, t_min)
            assert worst_t <= top + 1e-12, gamma
            for t in np.linspace(t_min, m, 4)[1:]:
                assert spread_functional(eps0, eps, n, gamma, t) <= worst_t + 1e-12, (gamma, t)


@pytest.mark.parametrize("n", [1000, 20_000])
@pytest.mark.parametrize("eps0", [1.0, 4.0])
def test_general_upper_is_the_stronger_clone_below_fmt21_above_the_lower_bound(eps0, n):
    for delta in (1e-6, 1e-8):
        up = sm.epsilon(("general", eps0), n, delta)
        assert up.method == "fmt23" or up.epsilon == eps0
        assert up.candidates["fmt23"] <= up.candidates["fmt21"]
        assert sm.lower_bound(("general", eps0), n, delta).epsilon <= up.epsilon
        # binary RR is a general randomizer: its exact worst case stays below
        assert sm.epsilon(("binary_rr", eps0), n, delta).epsilon <= up.epsilon * (1 + 1e-9)


# -- extreme local epsilons and deltas (regressions) ------------------------------------------------
def binary_rr_worst_delta_mp(eps0, n, eps):
    """Exact worst-case shuffled binary RR delta in 50-digit arithmetic (float loses about
    ``u / delta`` relative here): the number of 1s, every count j of others holding 1, both
    directions."""
    mp.mp.dps = 50
    e = mp.e ** mp.mpf(eps0)
    a, b, x = e / (e + 1), 1 / (e + 1), mp.e ** mp.mpf(eps)

    def binom(m, p, s):
        return mp.binomial(m, s) * p ** s * (1 - p) ** (m - s) if 0 <= s <= m else mp.mpf(0)
    best = mp.mpf(0)
    for j in range(n):      # j others hold 1 (report 1 w.p. a), n - 1 - j hold 0 (w.p. b)
        w = [sum(binom(j, a, i) * binom(n - 1 - j, b, s - i) for i in range(s + 1))
             for s in range(n + 1)]
        p0 = [b * (w[s - 1] if s else 0) + a * w[s] for s in range(n + 1)]   # holds 0
        p1 = [a * (w[s - 1] if s else 0) + b * w[s] for s in range(n + 1)]   # holds 1
        best = max(best, sum(max(u - x * v, 0) for u, v in zip(p0, p1)),
                   sum(max(v - x * u, 0) for u, v in zip(p0, p1)))
    return float(best)


@pytest.mark.parametrize("eps0", [25.0, 30.0, 36.0, 50.0])
def test_large_local_epsilon_is_never_below_binary_rr(eps0):
    """Binary RR is a general randomizer, so every general bound is above its exact shuffled
    delta.  From eps0 = 25 the clone pairs' closed form lost its positive summand to rounding
    (the certified epsilon fell below binary RR's exact lower bound: 37.3 at eps0 = 50), and
    ``1 - expit(eps0)`` lost its relative accuracy."""
    for n in (2, 3):
        for eps in (eps0 - 1e-3, eps0 - 1e-5):
            exact = binary_rr_worst_delta_mp(eps0, n, eps)
            assert exact > 0
            for pair in (sm._strong_clone(eps0, n), sm._fmt21_clone(eps0, n)):
                assert pair.delta(eps).upper >= exact
            assert sm.delta_bounds(("general", eps0), n, eps).upper >= exact
    for n in (2, 1000):
        low = sm.lower_bound(("binary_rr", eps0), n, 1e-6).epsilon
        assert low > eps0 - 1e-5
        for spec in (("binary_rr", eps0), ("general", eps0)):
            assert low <= sm.epsilon(spec, n, 1e-6).epsilon <= eps0
        krr4 = ("krr", eps0, 4)
        assert sm.lower_bound(krr4, n, 1e-6).epsilon <= sm.epsilon(krr4, n, 1e-6).epsilon


@pytest.mark.parametrize("spec", [("general", 1.0), ("binary_rr", 1.0), ("krr", 1.0, 5),
                                  ("general", 50.0)])
def test_tiny_delta_answers_within_eps0(spec):
    """delta = 1e-300 is below every certified error term: the answer is eps0 (the round is
    eps0-DP), not an OverflowError from a bracket grown past it."""
    for n in (10, 1000):
        up = sm.epsilon(spec, n, 1e-300).epsilon
        low = sm.lower_bound(spec, n, 1e-300).epsilon
        assert 0 <= low <= up <= spec[1]
