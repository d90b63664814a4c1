"""Shuffle-model events for the randomizer families (issue 16, item 5, accountant side).

``ShuffleEvent(n, UnaryEncodingEvent | SubsetSelectionEvent | LocalHashingEvent |
BoundedLaplaceEvent)`` accounted by the ``"shuffle"`` accountant.

Independent checks: every family's output law is built here from its definition (every bit
vector, every k-subset, every hash function of a three-value domain, Laplace mass of intervals
from its closed-form CDF), and the shuffled output's exact law is enumerated as the histogram of
the reports for n <= 4; the exact privacy profile is maximised over every dataset of the others
(and both directions).  For Laplace the output is binned first: the binned pair's delta is that of
a post-processing, a lower bound on the pair's true delta (so it must lie below every certified
upper bound), and the bins refine the library's three-category lower-bound partitions (so it must
lie above the library's lower bound).  Two rounds: the exact product of the enumerated pairs.
"""

from __future__ import annotations

import itertools
import json
import math
import pickle

import numpy as np
import pytest

from dpplugins.accountants import UnsupportedEventError, available, create, supporting
from dpplugins.accountants.checkin import composed_local_epsilon
from dpplugins.amplification import shuffle_model_families as fam
from dpplugins.errors import ParameterError
from dpplugins.pld import Bounds
from dpplugins.events import (BoundedLaplaceEvent, ComposedEvent, EpsilonDeltaEvent, LaplaceEvent,
                              LocalHashingEvent, RandomizedResponseEvent, SelfComposedEvent,
                              ShuffleEvent, SubsetSelectionEvent, UnaryEncodingEvent, from_dict)

from test_shuffle_model import histogram_law  # brute-force helper, shared
from test_shuffle_model_families import olh_matrix, subset_matrix, ue_matrix

TOL = 1e-9          # relative float tolerance of the enumerations (sums of < 1e5 products)


# -- brute force, from the definitions ------------------------------------------------------------
def as_arrays(p, q):
    keys = sorted(set(p) | set(q))
    return (np.array([p.get(k, 0.0) for k in keys]), np.array([q.get(k, 0.0) for k in keys]))


def ue_rows(eps0, d, optimized):
    """Unary encoding's output law per input (SUE: a = e^(eps0/2) / (e^(eps0/2) + 1), b = 1 - a;
    OUE: a = 1/2, b = 1 / (e^eps0 + 1))."""
    if optimized:
        a, b = 0.5, 1 / (math.exp(eps0) + 1)
    else:
        a = math.exp(eps0 / 2) / (math.exp(eps0 / 2) + 1)
        b = 1 - a
    return ue_matrix(d, a, b)


def subset_rows(eps0, d, k):
    return subset_matrix(d, k, eps0)


def olh_rows(eps0, d, g):
    """A uniformly random function [d] -> [g] (3-wise independent on d = 3), then g-ary RR."""
    return olh_matrix(d, g, eps0)


#: bin edges for Laplace reports: they contain the cut points 1/2 +- s, s in {0, 1/4, 1/2}, of
#: the library's lower-bound categories, so the bins refine them
LAPLACE_EDGES = [-math.inf, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0,
                 math.inf]
LAPLACE_INPUTS = (1.0, 0.0, 0.5)     # x0 = 1, x1 = 0, a third value


def laplace_cdf(t, x, b):
    if t == -math.inf:
        return 0.0
    if t == math.inf:
        return 1.0
    return 0.5 * math.exp((t - x) / b) if t < x else 1 - 0.5 * math.exp(-(t - x) / b)


def laplace_rows(eps0):
    b = 1 / eps0
    return [[laplace_cdf(hi, x, b) - laplace_cdf(lo, x, b)
             for lo, hi in zip(LAPLACE_EDGES[:-1], LAPLACE_EDGES[1:])] for x in LAPLACE_INPUTS]


def dataset_pairs(rows, n):
    """Every neighbouring pair with the differing user at input 0 vs 1 (the discrete families
    are symmetric under relabelling the inputs, so this is every pair), the others any multiset
    of inputs: ``[(p, q)]`` of histogram laws on a common support."""
    out = []
    for others in itertools.combinations_with_replacement(range(len(rows)), n - 1):
        rest = [rows[v] for v in others]
        out.append(as_arrays(histogram_law([rows[0]] + rest), histogram_law([rows[1]] + rest)))
    return out


def worst_delta(pairs, eps):
    """Largest hockey-stick divergence of the pairs (arrays on a common support), both ways."""
    x = math.exp(eps)
    return max(float(max(np.maximum(p - x * q, 0.0).sum(), np.maximum(q - x * p, 0.0).sum()))
               for p, q in pairs)


def worst_epsilon(pairs, delta):
    """``[lo, hi]`` around the exact worst-case epsilon(delta) (bisection to 1e-10)."""
    lo, hi = 0.0, 60.0
    if worst_delta(pairs, 0.0) <= delta:
        return 0.0, 0.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if worst_delta(pairs, mid) > delta:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return lo, hi


def product(pair_a, pair_b):
    (pa, qa), (pb, qb) = pair_a, pair_b
    return np.outer(pa, pb).ravel(), np.outer(qa, qb).ravel()


# -- the families: event, the library's Family, and the law built here ---------------------------
EPS0 = 1.5
FAMILY_CASES = {
    "sue": (UnaryEncodingEvent(EPS0, 3), fam.unary_encoding(EPS0, 3), ue_rows(EPS0, 3, False),
            4),
    "oue": (UnaryEncodingEvent(EPS0, 3, optimized=True), fam.unary_encoding(EPS0, 3,
                                                                               optimized=True),
            ue_rows(EPS0, 3, True), 4),
    "subset": (SubsetSelectionEvent(EPS0, 4, 2), fam.subset_selection(EPS0, 4, 2),
               subset_rows(EPS0, 4, 2), 4),
    "olh": (LocalHashingEvent(EPS0, 2), fam.local_hashing(EPS0, 2), olh_rows(EPS0, 3, 2), 3),
    "laplace": (BoundedLaplaceEvent(EPS0), fam.laplace_bounded(EPS0), laplace_rows(EPS0), 3),
}
_PAIRS: dict = {}


def pairs_of(key):
    if key not in _PAIRS:
        _, _, rows, n = FAMILY_CASES[key]
        _PAIRS[key] = dataset_pairs(rows, n)
    return _PAIRS[key]


def accountant(*events, **options):
    acc = create("shuffle", **options)
    for event in events:
        acc.compose(event)
    return acc


def leq(a, b):
    """a <= b up to the enumerations' float error."""
    return a <= b * (1 + TOL) + 1e-14


def laplace_pair_monte_carlo(eps0, n, eps, samples=400_000):
    """(mean, standard error) of delta(eps) of the continuous Laplace pair "all at 0" against
    "one at 1" (the likelihood ratio of the shuffled reports is their average ratio): ``(e^eps
    / n) E[(sum (e^-eps - rho(y_i)))_+]``, ``rho(y) = exp(eps0 (|y| - |y - 1|))``, ``y ~ Lap(0,
    1/eps0)``.  The library's Laplace lower bound uses this pair's full statistic, which the
    bins above do not refine, so it is checked against this instead."""
    rng = np.random.default_rng(2024)
    y = rng.laplace(0.0, 1 / eps0, size=(samples, n))
    rho = np.exp(eps0 * (np.abs(y) - np.abs(y - 1.0)))
    values = math.exp(eps) / n * np.maximum(np.sum(math.exp(-eps) - rho, axis=1), 0.0)
    return float(values.mean()), float(values.std() / math.sqrt(samples))


# -- one round ---------------------------------------------------------------------------------
@pytest.mark.parametrize("key", FAMILY_CASES)
def test_one_round_brackets_the_exact_worst_case(key):
    event, _, _, n = FAMILY_CASES[key]
    pairs = pairs_of(key)
    acc = accountant(ShuffleEvent(n, event))
    for eps in (0.0, 0.2, 0.5, 1.0, 1.4):
        exact = worst_delta(pairs, eps)
        lower, upper = acc.get_delta_bounds(eps)
        assert leq(exact, upper), (eps, exact, upper)
        if key == "laplace" and not leq(lower, exact):
            mean, se = laplace_pair_monte_carlo(EPS0, n, eps)
            assert lower <= mean + 5 * se and leq(mean - 5 * se, upper), (eps, lower, mean, se)
        else:
            assert leq(lower, exact), (eps, lower, exact)
    assert acc.get_delta_bounds(EPS0) == (0.0, 0.0)
    for delta in (0.2, 0.05, 0.01):
        lo, hi = worst_epsilon(pairs, delta)
        lower, upper = acc.get_epsilon_bounds(delta)
        assert lo <= upper + 1e-9, (delta, lo, upper)
        if key == "laplace" and lower > hi + 1e-9:
            # certified: the continuous pair's delta at the lower bound is above delta
            mean, se = laplace_pair_monte_carlo(EPS0, n, lower)
            assert mean + 5 * se > delta, (delta, lower, mean, se)
        else:
            assert lower <= hi + 1e-9, (delta, lower, hi)
        assert upper <= EPS0


@pytest.mark.parametrize("key", FAMILY_CASES)
def test_one_round_is_the_families_bounds(key):
    event, family, _, _ = FAMILY_CASES[key]
    n = 2000
    acc = accountant(ShuffleEvent(n, event))
    assert acc.get_epsilon_bounds(1e-6) == fam.epsilon_bounds(family, n, 1e-6)
    assert acc.get_delta_bounds(0.3) == fam.delta_bounds(family, n, 0.3)
    assert acc.get_epsilon(1e-6) < EPS0     # amplified
    quiet = accountant(ShuffleEvent(n, event), lower_bound=False)
    assert quiet.get_epsilon_bounds(1e-6) == (0.0, fam.epsilon(family, n, 1e-6).epsilon)


@pytest.mark.parametrize("key", FAMILY_CASES)
def test_pure_dp_is_attained_and_adds_up(key):
    """delta = 0: the enumerated worst privacy loss of one round is eps0 (so shuffling does not
    amplify pure DP), and the accountant reports the sum of the rounds' eps0 as exact."""
    event, _, _, n = FAMILY_CASES[key]
    worst = max(float(np.max(np.log(p[q > 0] / q[q > 0]))) for p, q in pairs_of(key))
    assert worst == pytest.approx(EPS0, rel=1e-9)
    acc = accountant(SelfComposedEvent(ShuffleEvent(n, event), 3))
    assert acc.get_epsilon_bounds(0.0) == pytest.approx((3 * EPS0, 3 * EPS0))
    assert acc.no_amplification_epsilon(1e-6) == pytest.approx(3 * EPS0)
    text = acc.summary(1e-6)
    assert "3 x" in text and "no amplification" in text


# -- several rounds ----------------------------------------------------------------------------
@pytest.mark.parametrize("key", ["sue", "subset", "olh", "laplace"])
def test_two_rounds_dominate_the_exact_product(key):
    event, family, _, n = FAMILY_CASES[key]
    pairs = pairs_of(key)
    products = [product(pair, pair) for pair in pairs]
    acc = accountant(SelfComposedEvent(ShuffleEvent(n, event), 2))
    for eps in (0.5, 1.5, 2.5):
        exact = worst_delta(products, eps)
        lower, upper = acc.get_delta_bounds(eps)
        assert leq(lower, exact) and leq(exact, upper), (eps, lower, exact, upper)
    for delta in (0.1, 0.02):
        lo, hi = worst_epsilon(products, delta)
        lower, upper = acc.get_epsilon_bounds(delta)
        assert lower <= hi + 1e-9 and lo <= upper + 1e-9
        assert upper <= 2 * EPS0
    # the family's composition, capped by the rounds' optimal composition without amplification
    # (tighter for Laplace at n = 3: 2.99850 against 2.99930)
    module = fam.composed_epsilon_bounds(family, n, 2, 1e-3)
    cap = composed_local_epsilon(1e-3, EPS0, 0.0, 2)
    assert acc.get_epsilon_bounds(1e-3) == (min(module.lower, cap), min(module.upper, cap))
    assert acc.get_delta_bounds(1.0) == fam.composed_delta_bounds(family, n, 2, 1.0)
    assert acc.get_delta_bounds(2 * EPS0) == (0.0, 0.0)


def test_mixed_rounds_dominate_the_exact_product():
    """SUE then OLH (two families) and SUE then binary RR (a family with randomized response):
    the rounds' PLDs composed; the upper bound dominates every product of enumerated pairs (each
    round on its own datasets, the same differing user and direction)."""
    sue, _, _, _ = FAMILY_CASES["sue"]
    olh, _, _, _ = FAMILY_CASES["olh"]
    n = 3
    sue_pairs = dataset_pairs(ue_rows(EPS0, 3, False), n)
    rr = [[math.exp(1.0) / (math.exp(1.0) + 1), 1 / (math.exp(1.0) + 1)],
          [1 / (math.exp(1.0) + 1), math.exp(1.0) / (math.exp(1.0) + 1)]]
    for second, second_pairs, eps0_2 in ((olh, pairs_of("olh"), EPS0),
                                         (RandomizedResponseEvent(1.0), dataset_pairs(rr, n), 1.0)):
        acc = accountant(ShuffleEvent(n, sue), ShuffleEvent(n, second))
        products = [product(a, b) for a in sue_pairs for b in second_pairs]
        for eps in (0.5, 1.5):
            exact = worst_delta(products, eps)
            lower, upper = acc.get_delta_bounds(eps)
            assert leq(lower, exact) and leq(exact, upper), (eps, lower, exact, upper)
        lo, hi = worst_epsilon(products, 0.05)
        lower, upper = acc.get_epsilon_bounds(0.05)
        assert lower <= hi + 1e-9 and lo <= upper + 1e-9 and upper <= EPS0 + eps0_2
        assert acc.get_epsilon_bounds(0.0) == pytest.approx((EPS0 + eps0_2,) * 2)


@pytest.mark.slow
def test_many_rounds_and_families_at_scale():
    n = 1000
    ue = ShuffleEvent(n, UnaryEncodingEvent(2.0, 16, optimized=True))
    acc = accountant(SelfComposedEvent(ue, 5))
    one = fam.epsilon(fam.unary_encoding(2.0, 16, optimized=True), n, 1e-6).epsilon
    lower, upper = acc.get_epsilon_bounds(1e-6)
    assert one < lower <= upper <= 5 * one and upper < 10.0
    assert acc.get_delta(upper) <= 1e-6 * (1 + 1e-6)
    acc.compose(ShuffleEvent(n, BoundedLaplaceEvent(1.0)))
    acc.compose(ShuffleEvent(n, RandomizedResponseEvent(1.0, 3)))
    lo2, up2 = acc.get_epsilon_bounds(1e-6)
    assert up2 >= upper and 0 < lo2 <= up2 <= 12.0
    assert acc.no_amplification_epsilon(1e-6) == pytest.approx(12.0)


def test_zero_epsilon0_releases_nothing():
    acc = accountant(SelfComposedEvent(ShuffleEvent(50, LocalHashingEvent(0.0, 4)), 3))
    assert acc.get_epsilon_bounds(1e-6) == (0.0, 0.0)
    assert acc.get_epsilon_bounds(0.0) == (0.0, 0.0)


# -- refusals ----------------------------------------------------------------------------------
@pytest.mark.parametrize("make, field", [
    (lambda: UnaryEncodingEvent(-1.0, 3), "UnaryEncodingEvent.epsilon0"),
    (lambda: UnaryEncodingEvent(math.nan, 3), "UnaryEncodingEvent.epsilon0"),
    (lambda: UnaryEncodingEvent(1.0, 1), "UnaryEncodingEvent.num_values"),
    (lambda: UnaryEncodingEvent(1.0, 3.5), "UnaryEncodingEvent.num_values"),
    (lambda: UnaryEncodingEvent(1.0, 3, optimized="yes"), "UnaryEncodingEvent.optimized"),
    (lambda: SubsetSelectionEvent(1.0, 4, 4), "SubsetSelectionEvent.subset_size"),
    (lambda: SubsetSelectionEvent(1.0, 4, 0), "SubsetSelectionEvent.subset_size"),
    (lambda: SubsetSelectionEvent(1.0, 1, 1), "SubsetSelectionEvent.num_values"),
    (lambda: SubsetSelectionEvent(math.inf, 4, 1), "SubsetSelectionEvent.epsilon0"),
    (lambda: LocalHashingEvent(1.0, 1), "LocalHashingEvent.num_buckets"),
    (lambda: LocalHashingEvent(-0.5, 2), "LocalHashingEvent.epsilon0"),
    (lambda: BoundedLaplaceEvent(0.0), "BoundedLaplaceEvent.epsilon0"),
    (lambda: BoundedLaplaceEvent("1"), "BoundedLaplaceEvent.epsilon0"),
])
def test_bad_fields_name_the_field(make, field):
    with pytest.raises(ParameterError) as info:
        make()
    assert info.value.name == field


LOCAL = [UnaryEncodingEvent(1.0, 8), UnaryEncodingEvent(1.0, 8, optimized=True),
         SubsetSelectionEvent(1.0, 8, 3), LocalHashingEvent(1.0, 4), BoundedLaplaceEvent(1.0)]


@pytest.mark.parametrize("event", LOCAL, ids=lambda e: type(e).__name__)
def test_local_randomizer_outside_a_shuffle_is_refused_by_every_accountant(event):
    assert supporting(event) == ()
    for name in available():
        acc = create(name)
        for wrapped in (event, SelfComposedEvent(event, 3), ComposedEvent([event])):
            assert not acc.supports(wrapped), (name, wrapped)
            with pytest.raises(UnsupportedEventError) as info:
                acc.compose(wrapped)
            assert info.value.reason, name
            assert acc.history == []
    # inside the shuffle model: only the shuffle accountant
    assert supporting(ShuffleEvent(1000, event)) == ("shuffle",)


def test_bounded_laplace_is_not_the_central_laplace_event():
    assert not isinstance(BoundedLaplaceEvent(2.0), LaplaceEvent)
    assert BoundedLaplaceEvent(2.0).laplace_scale == 0.5
    assert not create("shuffle").supports(ShuffleEvent(100, LaplaceEvent(0.5)))


@pytest.mark.parametrize("event, field", [
    (ShuffleEvent(10, UnaryEncodingEvent(1.0, 2)), "UnaryEncodingEvent.num_values"),
    (ShuffleEvent(10, SubsetSelectionEvent(1.0, 2, 1)), "SubsetSelectionEvent.num_values"),
    (ShuffleEvent(10, LocalHashingEvent(51.0, 2)), "LocalHashingEvent.epsilon0"),
    (ShuffleEvent(10, BoundedLaplaceEvent(80.0)), "BoundedLaplaceEvent.epsilon0"),
    (ShuffleEvent(1, LocalHashingEvent(1.0, 2)), "ShuffleEvent.num_users"),
])
def test_shuffle_accountant_refuses_what_the_family_bounds_do_not_cover(event, field):
    acc = create("shuffle")
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError) as info:
        acc.compose(event)
    assert field in info.value.reason
    assert acc.history == []


def test_shuffle_model_rounds_and_shuffled_epochs_do_not_mix():
    from dpplugins.samplers import ShuffledEpochs

    acc = accountant(ShuffleEvent(100, SubsetSelectionEvent(1.0, 5, 2)))
    with pytest.raises(UnsupportedEventError):
        acc.compose(ShuffledEpochs(50, 1).event(8.0, 1))
    assert len(acc.history) == 1


def test_theorem_names_the_sources():
    theorem = create("shuffle").theorem
    for source in ("Wang et al. 2017", "Ye & Barg 2018", "Erlingsson", "Lemma 7.3", "FMT21"):
        assert source in theorem


# -- serialisation -----------------------------------------------------------------------------
@pytest.mark.parametrize("event", LOCAL, ids=lambda e: type(e).__name__)
def test_events_round_trip_through_json(event):
    for e in (event, ShuffleEvent(100, event), SelfComposedEvent(ShuffleEvent(100, event), 4)):
        again = from_dict(json.loads(json.dumps(e.to_dict())))
        assert again == e and hash(again) == hash(e)
        assert pickle.loads(pickle.dumps(e)) == e


def test_accountant_state_round_trips():
    acc = accountant(SelfComposedEvent(ShuffleEvent(100, UnaryEncodingEvent(1.0, 8)), 2),
                     ShuffleEvent(100, LocalHashingEvent(1.0, 3)),
                     ShuffleEvent(100, BoundedLaplaceEvent(1.0)))
    bounds = acc.get_epsilon_bounds(1e-6)
    state = json.loads(json.dumps(acc.state_dict()))
    again = create("shuffle")
    again.load_state_dict(state)
    assert again.history == acc.history
    assert again.get_epsilon_bounds(1e-6) == bounds


def test_dp_accounting_view_round_trips():
    pytest.importorskip("dp_accounting")
    from dp_accounting import dp_event as dpe

    from dpplugins.integrations.dp_accounting_events import to_dp_event, to_event

    for event in LOCAL:
        ours = ShuffleEvent(100, event)
        theirs = to_dp_event(ours)
        assert to_event(theirs) == ours
        assert dpe.DpEvent.from_named_tuple(theirs.to_named_tuple()) == theirs


def test_rounds_of_more_than_max_users_are_accounted_as_max_users():
    """n = 9e15 users exhausted the machine's memory (one count window of 1.2e9 entries); the
    accountant now accounts such a round as one of MAX_USERS users (more users cannot increase
    epsilon: test_shuffle_model.test_more_users_never_increase_the_exact_delta), with lower
    bound 0 (a lower bound for fewer users is not one for more)."""
    from dpplugins.amplification.shuffle import MAX_USERS

    inner = EpsilonDeltaEvent(1.0, 1e-12)   # Balle et al. 2020: cheap at any n
    big, ref = create("shuffle"), create("shuffle", lower_bound=False)   # (its upper bounds)
    big.compose(ShuffleEvent(9 * 10**15, inner))
    ref.compose(ShuffleEvent(MAX_USERS, inner))
    for delta in (1e-6, 1e-3):
        assert big.get_epsilon_bounds(delta) == (0.0, ref.get_epsilon(delta))
    for eps in (0.01, 0.5):
        # (the randomizer may publish its input with probability delta0, at any n)
        assert big.get_delta_bounds(eps) == (1e-12, ref.get_delta_bounds(eps).upper)
    assert "accounted as 1e+08" in big.summary(1e-6)
    assert "accounted as" not in ref.summary(1e-6)


def test_one_user_round_beside_a_family_round_answers():
    """A family round composed with a one-user round: where the composed lower bound certified
    nothing, the fallback asked each round for its one-round lower bound, and the one-user
    round raised 'n=1 is invalid: must be an integer >= 2' on a valid query (delta 0.5).  It
    now contributes nothing to the fallback.  Checked against the history's own delta(0):
    epsilon(delta) is 0 exactly when delta >= delta(0)."""
    acc = create("shuffle")
    acc.compose(ShuffleEvent(1000, UnaryEncodingEvent(1.0, 8)))
    acc.compose(ShuffleEvent(1, RandomizedResponseEvent(1.0, 2)))
    at_zero = acc.get_delta_bounds(0.0)
    for delta in (0.5, 0.9):
        assert delta > at_zero.upper and acc.get_epsilon_bounds(delta) == (0.0, 0.0)
    lower, upper = acc.get_epsilon_bounds(0.4 * at_zero.lower)
    assert 0 < upper and 0 <= lower <= upper


@pytest.mark.parametrize("wide", [UnaryEncodingEvent(20.0, 41), RandomizedResponseEvent(20.0, 41)])
def test_rounds_of_very_different_eps0_compose_on_a_grid_that_fits(wide):
    """eps0 = 20 beside eps0 = 1e-4 (found by the mixed fuzz family): the composition took the
    narrow round's grid step (1e-6), on which the wide round's profile needs 4e7 bins, and
    raised "value_discretization_interval=1e-06 is invalid" -- an option nobody had set.  The
    step is now floored where the widest round has 2^18 bins.  Checked against basic
    composition (Dwork & Roth Thm 3.16: epsilon <= 20 + 1e-4 at every delta) and the wide
    round's own exact lower bound (a post-processing of the composition)."""
    acc = create("shuffle")
    acc.compose(ShuffleEvent(11, wide))
    acc.compose(ShuffleEvent(1, RandomizedResponseEvent(1e-4, 2)))
    alone = create("shuffle").compose(ShuffleEvent(11, wide))
    for delta in (3.7e-6, 0.5):
        lower, upper = acc.get_epsilon_bounds(delta)
        assert alone.get_epsilon_bounds(delta).lower * (1 - 1e-9) <= upper
        assert 0 <= lower <= upper <= (20 + 1e-4) * (1 + 1e-9)
    lower, upper = acc.get_delta_bounds(19.5)
    assert 0 <= lower <= upper <= 1


def test_a_round_of_more_than_max_users_leaves_the_other_rounds_lower_bounds():
    """A round of more than MAX_USERS users is accounted as MAX_USERS users for the upper
    bound; its own lower-bound datasets are not valid for more users.  The whole history's
    lower bound was then 0 (found by the long fuzz tests: a unary-encoding round of 2^63 users
    beside a one-user randomized-response round, [0, 1.00006] at delta = 1e-5).  It now comes
    from the other rounds (dropping a round's reports is a post-processing): here the one-user
    round, binary RR at eps0 = 1, whose exact profile is (e - e^eps) / (e + 1) -- the closed
    form the bounds are checked against (the lower bound at most it, the upper at least it)."""
    from dpplugins.amplification.shuffle import MAX_USERS

    acc = create("shuffle")
    acc.compose(ShuffleEvent(9 * 10**15, EpsilonDeltaEvent(1.0, 0.0)))
    acc.compose(ShuffleEvent(1, RandomizedResponseEvent(1.0, 2)))
    for delta in (1e-6, 1e-3):
        exact = math.log(math.e - delta * (1 + math.e))    # epsilon of the one-user round
        lower, upper = acc.get_epsilon_bounds(delta)
        assert exact * (1 - 1e-9) <= lower <= exact * (1 + 1e-12) <= upper
    for eps in (0.5, 0.9):
        exact = (math.e - math.exp(eps)) / (math.e + 1)
        lower, upper = acc.get_delta_bounds(eps)
        assert exact * (1 - 1e-9) <= lower <= exact * (1 + 1e-12) <= upper
    assert "lower bound from the other rounds" in acc.summary(1e-6)
    # the rounds of more than MAX_USERS users alone still certify no lower bound on epsilon; an
    # (eps0, delta0) randomizer's delta0 is one on delta at any number of users
    alone = create("shuffle").compose(ShuffleEvent(MAX_USERS + 1, EpsilonDeltaEvent(1.0, 1e-12)))
    assert alone.get_epsilon_bounds(1e-6).lower == 0.0
    assert alone.get_delta_bounds(0.5).lower == 1e-12


def test_many_approximate_rounds_publish_with_the_composed_probability():
    """10^5 rounds of an (eps0, delta0 = 1e-9) randomizer publish the differing user's input in
    some round with probability 1 - (1 - 1e-9)^(10^5), about 1e-4 (a certified lower bound on
    delta at every epsilon), so epsilon(1e-6) is inf.  The query refused (it asked for 10^7 grid
    bins) because only the largest delta0 (1e-9) was taken as that probability.  The delta
    query's lower bound is at least that probability; since the direct function answers where
    the composition is out of reach, it is the composed binary-RR pair's (the general class
    holds binary RR at eps0), about 1: the mean privacy loss of 10^5 such rounds is about 54."""
    acc = create("shuffle").compose(ShuffleEvent(1000, EpsilonDeltaEvent(1.0, 1e-9)), 10**5)
    assert acc.get_epsilon_bounds(1e-6) == Bounds(math.inf, math.inf)
    published = -math.expm1(10**5 * math.log1p(-1e-9))
    b = acc.get_delta_bounds(0.5)
    assert published * (1 - 1e-9) <= b.lower <= b.upper
    # one round of the same randomizer: delta0 itself
    one = create("shuffle").compose(ShuffleEvent(1000, EpsilonDeltaEvent(1.0, 1e-9)))
    assert 1e-9 * (1 - 1e-9) <= one.get_delta_bounds(0.5).lower <= 1e-9


def test_a_delta_query_the_composition_cannot_hold_answers_without_amplification():
    """10^15 rounds of binary randomized response (eps0 = 1): the epsilon query fell back to
    the composition without amplification, the delta query raised (3e11 grid bins).  It now
    answers with the optimal/basic composition's delta: 1 at epsilon 0.5 (nothing better is
    certified), 0 at epsilon >= 10^15 (pure eps0-DP rounds)."""
    acc = create("shuffle").compose(ShuffleEvent(10**4, RandomizedResponseEvent(1.0)), 10**15)
    b = acc.get_delta_bounds(0.5)
    assert b.upper == 1.0 and 0.0 <= b.lower <= b.upper
    assert acc.get_delta_bounds(2e15) == Bounds(0.0, 0.0)
    assert "steps" in repr(create("shuffle").compose(
        ShuffleEvent(10**4, RandomizedResponseEvent(1.0)), 2**63))   # (len() overflowed)
