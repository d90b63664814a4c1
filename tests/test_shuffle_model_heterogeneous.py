"""Shuffled k-RR with a local epsilon per group of users
(dpplugins.amplification.shuffle_model_heterogeneous).

Independent checks: the shuffled output's exact law enumerated over every dataset and every
choice of the differing user (n <= 5 users, each with its own epsilon); the Poisson-binomial
count law against a plain dynamic programme over the users; the FFT convolution against the
direct one.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dpplugins.amplification import shuffle_model as sm
from dpplugins.amplification import shuffle_model_heterogeneous as het
from dpplugins.errors import ParameterError
from test_shuffle_model import histogram_law, hockey  # brute-force helpers, shared


def krr(eps, k):
    e = math.exp(eps)
    z = e + k - 1
    return [[e / z if y == x else 1 / z for y in range(k)] for x in range(k)]


def worst_delta(eps_of_users, k, eps):
    """max over the differing user, the others' values and both directions (the users' k-RR
    are symmetric under relabelling the values, so the differing user's 0 vs 1 suffices)."""
    best = 0.0
    n = len(eps_of_users)
    for v in range(n):
        own = krr(eps_of_users[v], k)
        others = [i for i in range(n) if i != v]
        for values in itertools.product(range(k), repeat=n - 1):
            rest = [krr(eps_of_users[i], k)[x] for i, x in zip(others, values)]
            p, q = histogram_law([own[0]] + rest), histogram_law([own[1]] + rest)
            best = max(best, hockey(p, q, eps), hockey(q, p, eps))
    return best


CASES = [([(0.5, 2), (2.0, 2)], 2), ([(1.0, 1), (3.0, 3)], 3), ([(0.2, 3), (1.5, 1)], 2),
         ([(0.0, 2), (1.0, 2)], 3), ([(0.3, 1), (1.0, 2), (2.5, 2)], 2)]


@pytest.mark.parametrize("groups,k", CASES)
def test_bounds_bracket_exact_enumeration(groups, k):
    users = [eps for eps, n in groups for _ in range(n)]
    for eps in (0.0, 0.1, 0.3, 0.7, 1.2, 2.0):
        b = het.delta_bounds(groups, k, eps)
        exact = worst_delta(users, k, eps)
        assert b.lower <= exact * (1 + 1e-9) + 1e-15
        assert exact <= b.upper * (1 + 1e-9) + 1e-15
    for delta in (0.3, 0.05, 1e-3):
        b = het.epsilon_bounds(groups, k, delta)
        assert worst_delta(users, k, b.upper) <= delta * (1 + 1e-9)
        if b.lower > 0:
            assert worst_delta(users, k, b.lower) >= delta * (1 - 1e-9)


def test_the_bounds_are_close_to_exact_at_a_few_users():
    """Not only valid: at the check points the gap is small (blanket and counts nearly tight
    on these groups)."""
    groups, k = [(0.2, 3), (1.5, 1)], 2
    users = [eps for eps, n in groups for _ in range(n)]
    b = het.delta_bounds(groups, k, 0.3)
    assert b.upper - b.lower <= 0.05 * worst_delta(users, k, 0.3)


def test_one_epsilon_is_the_homogeneous_bound():
    """Groups of one epsilon are merged and answered by the homogeneous k-RR bounds (never
    looser: its stronger clone and binary RR's exact worst case)."""
    assert het.epsilon_bounds([(1.0, 3000), (1.0, 2000)], 4, 1e-6) \
        == sm.epsilon_bounds(("krr", 1.0, 4), 5000, 1e-6)


def test_poisson_binomial_against_a_dynamic_programme():
    groups = [(7, 0.3), (5, 0.9), (1, 0.5), (11, 0.05)]
    law = sm.CountLaw.poisson_binomial(groups)
    dp = np.array([1.0])
    for trials, prob in groups:
        for _ in range(trials):
            dp = np.concatenate([dp * (1 - prob), [0.0]]) + np.concatenate([[0.0], dp * prob])
    got = np.zeros(len(dp))
    got[law.lo:law.lo + len(law.pmf)] = law.pmf
    np.testing.assert_allclose(got, dp, rtol=1e-12, atol=1e-300)
    assert law.outside <= 1e-20


def test_fft_convolution_of_count_laws_is_within_its_bound(monkeypatch):
    groups = [(40_000, 0.3), (30_000, 0.6)]
    direct = sm.CountLaw.poisson_binomial(groups)
    monkeypatch.setattr(sm, "_DIRECT_CONVOLUTION_TERMS", 0)
    fft = sm.CountLaw.poisson_binomial(groups)
    assert fft.lo == direct.lo and len(fft.pmf) == len(direct.pmf)
    error = float(np.sum(np.abs(fft.pmf - direct.pmf)))
    assert error <= fft.outside and fft.outside < 1e-9


@pytest.mark.parametrize("groups,k,delta,what", [
    ([], 2, 1e-6, "groups"), ([(1.0, 0)], 2, 1e-6, "groups[0].users"),
    ([(1.0, 1)], 2, 1e-6, "groups"), ([(-1.0, 5)], 2, 1e-6, "groups[0].eps0"),
    ([(1.0, 10**8), (2.0, 1)], 2, 1e-6, "groups"), ([(1.0, 5), (2.0, 5)], 1, 1e-6, "k"),
    ([(1.0, 5), (2.0, 5)], 2, 0.0, "delta"), ([(1.0, 2, 3)], 2, 1e-6, "groups[0]"),
    ([(float("nan"), 3)], 2, 1e-6, "groups[0].eps0")])
def test_bad_input_names_the_parameter(groups, k, delta, what):
    with pytest.raises(ParameterError) as error:
        het.epsilon_bounds(groups, k, delta)
    assert error.value.name == what


def test_large_groups_answer_with_a_certified_gap():
    """10^8 users in two groups (the FFT convolution path) answer in bounded time with
    ``0 < lower <= upper <`` the largest eps0."""
    b = het.epsilon_bounds([(1.0, 5 * 10**7), (2.0, 5 * 10**7)], 2, 1e-6)
    assert 0 < b.lower <= b.upper < 2.0
    assert b.upper - b.lower <= 0.3 * b.upper


# -- the shuffle accountant's rounds ----------------------------------------------------------------
def test_two_rounds_bracket_the_exact_product_for_every_dataset():
    """Groups (0.5 x 1, 2.0 x 2), binary, two rounds through the accountant: for every
    differing user and dataset the exact divergence of the product of the two histogram laws
    lies below delta at the upper bound, and the worst of them is at least delta at the lower
    bound (the composed lower pair is that of a fixed dataset)."""
    from dpplugins.accountants import create
    from dpplugins.events import (PersonalizedRandomizedResponseEvent, SelfComposedEvent,
                                  ShuffleEvent)

    groups, k, delta = ((0.5, 1), (2.0, 2)), 2, 1e-3
    acc = create("shuffle", value_discretization_interval=1e-3)
    acc.compose(SelfComposedEvent(ShuffleEvent(3, PersonalizedRandomizedResponseEvent(groups)),
                                  2))
    b = acc.get_epsilon_bounds(delta)
    users = [eps for eps, n in groups for _ in range(n)]

    def product_delta(p, q, eps):
        x = math.exp(eps)
        return sum(max(p[h1] * p[h2] - x * q.get(h1, 0) * q.get(h2, 0), 0)
                   for h1 in p for h2 in p)

    worst_at_lower = 0.0
    for v in range(len(users)):
        own = krr(users[v], k)
        others = [i for i in range(len(users)) if i != v]
        for values in itertools.product(range(k), repeat=len(others)):
            rest = [krr(users[i], k)[x] for i, x in zip(others, values)]
            p, q = histogram_law([own[0]] + rest), histogram_law([own[1]] + rest)
            assert max(product_delta(p, q, b.upper), product_delta(q, p, b.upper)) \
                <= delta * (1 + 1e-9)
            worst_at_lower = max(worst_at_lower, product_delta(p, q, b.lower),
                                 product_delta(q, p, b.lower))
    assert 0 < b.lower <= b.upper <= 4.0
    assert worst_at_lower >= delta * (1 - 1e-9)


def test_events_round_trip_and_other_accountants_refuse():
    from dpplugins.accountants import UnsupportedEventError, available, create
    from dpplugins.events import PersonalizedRandomizedResponseEvent, ShuffleEvent, from_dict

    event = ShuffleEvent(30, PersonalizedRandomizedResponseEvent(((1.0, 10), (3.0, 20)), 4))
    assert from_dict(event.to_dict()) == event
    with pytest.raises(ParameterError) as error:
        ShuffleEvent(31, PersonalizedRandomizedResponseEvent(((1.0, 10), (3.0, 20))))
    assert error.value.name == "ShuffleEvent.num_users"
    for name in available():
        if name == "shuffle":
            continue
        with pytest.raises(UnsupportedEventError):
            create(name).compose(event)
    b = create("shuffle").compose(event).get_epsilon_bounds(1e-6)
    assert b == het.epsilon_bounds(((1.0, 10), (3.0, 20)), 4, 1e-6)


def test_more_than_the_users_bounds_take_are_accounted_as_that_many():
    """2 x 10^400 users: the round is accounted as 10^8 of them (a post-processing argument,
    ``capped_groups``), upper bound only."""
    from dpplugins.accountants import create
    from dpplugins.events import PersonalizedRandomizedResponseEvent, ShuffleEvent

    groups = ((1.0, 10**400), (2.0, 10**400))
    acc = create("shuffle").compose(ShuffleEvent(2 * 10**400,
                                                 PersonalizedRandomizedResponseEvent(groups)))
    b = acc.get_epsilon_bounds(1e-6)
    kept = het.capped_groups(groups)
    assert kept == ((1.0, 5 * 10**7), (2.0, 5 * 10**7))
    assert b.lower == 0 and b.upper == het.epsilon_bounds(kept, 2, 1e-6).upper


def test_many_groups_share_one_blanket_and_still_bracket_enumeration():
    """Nine users with nine local epsilons (more groups than EXACT_VICTIM_GROUPS): one blanket,
    with the count of all users less one and the differing user at the largest epsilon, serves
    every group; the bounds still bracket the exact worst case (every differing user, every
    dataset, enumerated)."""
    groups = [(0.2 + 0.3 * i, 1) for i in range(9)]
    assert len(groups) > het.EXACT_VICTIM_GROUPS
    users = [eps for eps, _ in groups]
    for eps in (0.0, 0.3, 1.0, 2.0):
        b = het.delta_bounds(groups, 2, eps)
        exact = worst_delta(users, 2, eps)
        assert b.lower <= exact * (1 + 1e-9) + 1e-15 <= b.upper * (1 + 1e-9) + 2e-15
    b = het.epsilon_bounds(groups, 2, 0.05)
    assert worst_delta(users, 2, b.upper) <= 0.05 * (1 + 1e-9)
    assert b.lower == 0 or worst_delta(users, 2, b.lower) >= 0.05 * (1 - 1e-9)


def test_more_than_64_distinct_epsilons_are_refused_with_the_way_out():
    groups = [(0.5 + 0.01 * i, 10) for i in range(het.MAX_GROUPS + 1)]
    with pytest.raises(ParameterError) as error:
        het.epsilon_bounds(groups, 2, 1e-6)
    assert error.value.name == "groups" and "round each group's epsilon up" in str(error.value)
    # equal epsilons are one group
    same = [(0.5, 10)] * (het.MAX_GROUPS + 1) + [(1.0, 3)]
    assert het.epsilon_bounds(same, 2, 1e-6).upper > 0
