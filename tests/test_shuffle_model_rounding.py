"""Shuffle-model bounds where the laws' rounding matters (a tiny eps0, where ``e^eps0 - 1``
keeps a relative error of ``u / eps0``, or a large one, where ``1 - e^eps0 / z`` cancels),
against exact enumeration of shuffled k-ary randomized response in 50-digit arithmetic (no
dpplugins code in the references).  Found by a hostile sweep: each case was on the wrong side
of the exact value before."""

import itertools

import mpmath
import pytest

from conftest import hockey_stick_mp, krr_histogram_law_mp
from dpplugins.amplification import shuffle_model as sm
from dpplugins.amplification import shuffle_model_heterogeneous as smh


def _worst_delta(eps0, n, k, eps):
    """Exact delta(eps) of shuffled k-RR, the worst pair of neighbouring datasets of n users."""
    best = mpmath.mpf(0)
    for others in itertools.combinations_with_replacement(range(k), n - 1):
        for a, b in itertools.permutations(range(k), 2):
            p = krr_histogram_law_mp((a,) + others, [eps0] * n, k)
            q = krr_histogram_law_mp((b,) + others, [eps0] * n, k)
            best = max(best, hockey_stick_mp(p, q, eps))
    return best


def _worst_epsilon(eps0, n, k, delta):
    lo, hi = mpmath.mpf(0), mpmath.mpf(eps0)
    if _worst_delta(eps0, n, k, 0) <= delta:
        return lo
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if _worst_delta(eps0, n, k, mid) <= delta else (mid, hi)
    return lo


@pytest.fixture(autouse=True)
def _digits():
    with mpmath.workdps(50):
        yield


def test_delta_upper_at_zero_covers_the_laws_rounding():
    # 1.7129897977262992e-07 where the exact total variation is 1.71298979782e-07
    eps0, n = 1.067324047365665e-06, 4
    exact = _worst_delta(eps0, n, 3, 0)
    assert sm.delta_bounds(("krr", eps0, 3), n, 0.0).upper >= exact


def test_every_candidate_epsilon_carries_the_rounding_margin():
    # the fmt23 candidate was 7.77e-16 where the exact epsilon is 8.0e-16 (2.8 % below)
    eps0, n, delta = 1.5994230214626963e-06, 3, 3.998557549659888e-07
    exact = _worst_epsilon(eps0, n, 2, delta)
    bound = sm.epsilon(("krr", eps0, 2), n, delta)
    assert bound.epsilon >= exact
    assert all(value >= exact for value in bound.candidates.values()), bound.candidates
    low = sm.lower_bound(("krr", eps0, 2), n, delta)
    assert all(value <= exact for value in low.candidates.values()), low.candidates


def test_delta_upper_is_never_zero_below_eps0():
    # the exact delta is about 1e-458, below the float range: 0 is below it, 5e-324 is not
    b = sm.delta_bounds(("general", 0.15575157362415873), 20000, 0.1516165881579582)
    assert b.upper > 0


@pytest.mark.parametrize("groups,eps", [
    ([(18.172061527997943, 3), (0.0056840393734655294, 2)], 14.939298762733912),
    ([(0.05299236143862287, 2), (18.054354392300173, 1)], 15.35335503641316),
    ([(15.311414213112041, 2), (1.2330581256901383, 1)], 14.119670427687225)])
def test_heterogeneous_lower_bound_at_a_large_eps0(groups, eps):
    """The lower bound's pair (the differing user in some group, every other user holding
    a) was a relative 1e-10 above the exact delta: ``1 - e/z`` cancelled."""
    eps0s = [e for e, count in groups for _ in range(count)]
    exact = mpmath.mpf(0)
    for victim in range(len(eps0s)):   # the differing user, every other user at value 0
        order = [eps0s[victim]] + eps0s[:victim] + eps0s[victim + 1:]
        p = krr_histogram_law_mp((0,) + (0,) * (len(order) - 1), order, 2)
        q = krr_histogram_law_mp((1,) + (0,) * (len(order) - 1), order, 2)
        exact = max(exact, hockey_stick_mp(p, q, eps))
    b = smh.delta_bounds(groups, 2, eps)
    assert b.lower <= exact <= b.upper
