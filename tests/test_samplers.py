"""Samplers: the schedules have the distribution the theorems assume (chi-square tests), respect
their caps, use each example at most once per pass, and are reproducible from a seed."""

import math

import numpy as np
import pytest
from scipy import stats

from dpplugins.errors import ParameterError
from dpplugins.samplers import RandomCheckIn, ShuffledEpochs, SlidingWindowCheckIn

P_MIN = 1e-4   # seeds are fixed, so these tests are deterministic; this only sets the strictness


def _passes(sampler, count):
    return [list(sampler) for _ in range(count)]


def _assert_mean_matches(samples, expected, sd_bound=None):
    """|sample mean - expected| <= 5 standard errors."""
    samples = np.asarray(samples, dtype=float)
    sd = samples.std(ddof=1) if sd_bound is None else sd_bound
    assert abs(samples.mean() - expected) <= 5 * sd / math.sqrt(samples.size) + 1e-12


# -- check-in choices are uniform ------------------------------------------------------------------
@pytest.mark.parametrize("p0", [1.0, 0.3])
def test_checkin_slots_are_uniform_and_checkin_rate_is_p0(p0):
    sampler = RandomCheckIn(50, 10, checkin_probability=p0, rng=1)
    draws = np.concatenate([sampler.draw_checkins() for _ in range(400)])
    checked = draws[draws >= 0]
    assert stats.chisquare(np.bincount(checked, minlength=10)).pvalue > P_MIN
    assert stats.binomtest(checked.size, draws.size, p0).pvalue > P_MIN if p0 < 1 else True
    assert draws.min() >= -1 and draws.max() <= 9


def test_averaged_batches_cover_the_checked_in_examples_uniformly_over_slots():
    sampler = RandomCheckIn(40, 8, variant="averaged", rng=2)
    loads = np.zeros(8)
    for batches in _passes(sampler, 300):
        assert sum(len(b) for b in batches) == 40          # p0 = 1: every example is used
        loads += [len(b) for b in batches]
    assert stats.chisquare(loads).pvalue > P_MIN


def test_fixed_variant_picks_uniformly_within_a_slot():
    # one slot, three examples, p0 = 1: the server's choice is uniform over the three
    sampler = RandomCheckIn(3, 1, rng=3)
    picks = [int(batches[0][0]) for batches in _passes(sampler, 3000)]
    assert stats.chisquare(np.bincount(picks, minlength=3)).pvalue > P_MIN


def test_fixed_variant_uses_every_example_equally_often():
    sampler = RandomCheckIn(12, 5, checkin_probability=0.6, rng=4)
    used = np.zeros(12)
    for batches in _passes(sampler, 2000):
        for b in batches:
            used[b] += 1
    assert stats.chisquare(used).pvalue > P_MIN


def test_sliding_window_offsets_are_uniform_over_the_window():
    n, m = 30, 6
    sampler = SlidingWindowCheckIn(n, m, rng=5)
    offsets = np.concatenate([sampler.draw_checkins() - np.arange(n) for _ in range(300)])
    assert offsets.min() >= 0 and offsets.max() <= m - 1
    assert stats.chisquare(np.bincount(offsets, minlength=m)).pvalue > P_MIN


def test_sliding_window_uses_only_examples_whose_window_contains_the_slot():
    n, m = 10, 4
    sampler = SlidingWindowCheckIn(n, m, rng=6)
    for batches in _passes(sampler, 200):
        for step, b in enumerate(batches):
            slot = step + m - 1                      # 0-based time of this step
            for j in b:
                assert j <= slot <= j + m - 1


def test_averaged_overflow_keeps_a_uniform_subset():
    # four examples, one slot, cap 1: the kept example is uniform over the four
    sampler = RandomCheckIn(4, 1, variant="averaged", max_batch_size=1, rng=7)
    kept = []
    for _ in range(2000):
        (batch,) = list(sampler)
        assert batch.size == 1 and sampler.last_pass_overflow == 3
        kept.append(int(batch[0]))
    assert stats.chisquare(np.bincount(kept, minlength=4)).pvalue > P_MIN


# -- at most once per pass, caps, sizes ------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda: RandomCheckIn(30, 7, checkin_probability=0.8, rng=8),
    lambda: RandomCheckIn(30, 7, variant="averaged", rng=8),
    lambda: RandomCheckIn(30, 7, variant="averaged", max_batch_size=3, rng=8),
    lambda: SlidingWindowCheckIn(30, 7, rng=8),
    lambda: ShuffledEpochs(30, 7, rng=8),
    lambda: ShuffledEpochs(30, 7, drop_last=True, rng=8),
])
def test_each_example_at_most_once_per_pass_and_batches_respect_the_cap(make):
    sampler = make()
    for batches in _passes(sampler, 200):
        assert len(batches) == len(sampler) == sampler.steps_per_epoch
        for b in batches:
            assert b.dtype == np.int64 and b.ndim == 1
            assert b.size <= sampler.max_batch_size
        flat = np.concatenate(batches)
        assert flat.size == np.unique(flat).size
        assert flat.size == 0 or (flat.min() >= 0 and flat.max() < sampler.num_examples)


def test_dummy_slots_are_empty_int64_arrays():
    sampler = RandomCheckIn(2, 10, rng=9)        # at least 8 of 10 slots are empty
    batches = list(sampler)
    empty = [b for b in batches if b.size == 0]
    assert len(empty) >= 8 and all(b.dtype == np.int64 for b in empty)


@pytest.mark.parametrize("n,m,p0", [(20, 10, 0.5), (10, 10, 1.0), (100, 30, 0.2)])
def test_fixed_dummy_count_matches_expected_dummy_updates(n, m, p0):
    sampler = RandomCheckIn(n, m, checkin_probability=p0, rng=10)
    dummies = [sum(b.size == 0 for b in batches) for batches in _passes(sampler, 3000)]
    _assert_mean_matches(dummies, sampler.expected_dummy_updates())
    sizes = [np.mean([b.size for b in batches]) for batches in _passes(sampler, 3000)]
    _assert_mean_matches(sizes, sampler.expected_batch_size)


@pytest.mark.parametrize("n,m", [(30, 5), (12, 12), (40, 1)])
def test_sliding_dummy_count_matches_expected_dummy_updates(n, m):
    sampler = SlidingWindowCheckIn(n, m, rng=11)
    dummies = [sum(b.size == 0 for b in batches) for batches in _passes(sampler, 3000)]
    if m == 1:   # every slot gets exactly its own example
        assert max(dummies) == 0 and sampler.expected_dummy_updates() == 0
    else:
        _assert_mean_matches(dummies, sampler.expected_dummy_updates())
    assert sampler.expected_dummy_updates() <= (n - m + 1) / math.e


def test_averaged_empty_slots_and_capped_batch_size_match_expectations():
    n, m, cap = 60, 20, 3
    sampler = RandomCheckIn(n, m, variant="averaged", max_batch_size=cap, rng=12)
    runs = _passes(sampler, 3000)
    _assert_mean_matches([sum(b.size == 0 for b in bs) for bs in runs],
                         sampler.expected_dummy_updates())
    _assert_mean_matches([np.mean([b.size for b in bs]) for bs in runs],
                         sampler.expected_batch_size)
    # E[min(L, 3)] with L ~ Binomial(60, 1/20), written out
    pmf = [math.comb(n, k) * (1 / m) ** k * (1 - 1 / m) ** (n - k) for k in range(n + 1)]
    expected = sum(min(load, cap) * p for load, p in enumerate(pmf))
    assert sampler.expected_batch_size == pytest.approx(expected)


def test_shuffled_epochs_is_a_uniform_partition():
    sampler = ShuffledEpochs(10, 4, rng=13)
    assert sampler.steps_per_epoch == 3 and sampler.expected_batch_size == pytest.approx(10 / 3)
    firsts = []
    for batches in _passes(sampler, 3000):
        assert [b.size for b in batches] == [4, 4, 2]
        assert sorted(np.concatenate(batches).tolist()) == list(range(10))
        firsts.append(int(batches[0][0]))
    assert stats.chisquare(np.bincount(firsts, minlength=10)).pvalue > P_MIN
    dropped = ShuffledEpochs(10, 4, drop_last=True, rng=13)
    assert len(dropped) == 2 and dropped.expected_batch_size == 4.0
    assert [b.size for b in dropped] == [4, 4]


def test_schemes_and_lengths():
    assert RandomCheckIn(10, 4).scheme == "random_checkin" and len(RandomCheckIn(10, 4)) == 4
    assert SlidingWindowCheckIn(10, 4).scheme == "sliding_window"
    assert len(SlidingWindowCheckIn(10, 4)) == 7
    assert ShuffledEpochs(10, 3).scheme == "shuffled_epochs" and len(ShuffledEpochs(10, 3)) == 4


# -- reproducibility -------------------------------------------------------------------------------
@pytest.mark.parametrize("make", [
    lambda rng: RandomCheckIn(25, 6, checkin_probability=0.7, rng=rng),
    lambda rng: RandomCheckIn(25, 6, variant="averaged", max_batch_size=4, rng=rng),
    lambda rng: SlidingWindowCheckIn(25, 6, rng=rng),
    lambda rng: ShuffledEpochs(25, 6, rng=rng),
])
def test_identical_seeds_give_identical_schedules(make):
    def schedule(sampler):
        return [[b.tolist() for b in batches] for batches in _passes(sampler, 5)]
    assert schedule(make(123)) == schedule(make(123))
    assert schedule(make(np.random.default_rng(7))) == schedule(make(np.random.default_rng(7)))
    assert schedule(make(np.random.SeedSequence(9))) == schedule(make(np.random.SeedSequence(9)))
    assert schedule(make(123)) != schedule(make(124))
    first = make(5)
    assert schedule(first) != schedule(first)     # a new pass draws new check-ins


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("call,name", [
    (lambda: RandomCheckIn(0, 5), "num_examples"),
    (lambda: RandomCheckIn(10, 0), "num_slots"),
    (lambda: RandomCheckIn(10, 5, checkin_probability=0.0), "checkin_probability"),
    (lambda: RandomCheckIn(10, 5, checkin_probability=1.5), "checkin_probability"),
    (lambda: RandomCheckIn(10, 5, checkin_probability=math.nan), "checkin_probability"),
    (lambda: RandomCheckIn(10, 5, variant="poisson"), "variant"),
    (lambda: RandomCheckIn(10, 5, variant="averaged", max_batch_size=0), "max_batch_size"),
    (lambda: RandomCheckIn(10, 5, rng="seed"), "rng"),
    (lambda: RandomCheckIn(10, 5, rng=-1), "rng"),
    (lambda: SlidingWindowCheckIn(10, 0), "window"),
    (lambda: SlidingWindowCheckIn(10, 11), "window"),
    (lambda: SlidingWindowCheckIn(0, 1), "num_examples"),
    (lambda: ShuffledEpochs(0, 1), "num_examples"),
    (lambda: ShuffledEpochs(10, 0), "batch_size"),
    (lambda: ShuffledEpochs(10, 11, drop_last=True), "batch_size"),
    (lambda: ShuffledEpochs(10, 2, drop_last="yes"), "drop_last"),
])
def test_bad_input_raises_parameter_error(call, name):
    with pytest.raises(ParameterError, match=name):
        call()


def test_averaged_expected_batch_size_is_a_closed_form_of_two_binomial_tails():
    """``E[min(L, b)]``, ``L ~ Bin(n, p0 / m)``, against the sum over every load (scipy's pmf):
    the property built that pmf over all n + 1 loads (n = 10^8: more than 3 GB; 10^9: a
    MemoryError); it is now ``n p P(Bin(n-1, p) <= b-1) + b P(Bin(n, p) > b)``."""
    for n in (1, 2, 7, 100, 12345):
        for m in (1, 3, 1000):
            for p0 in (1.0, 0.5, 1e-3):
                for cap in (None, 1, 2, 50, 10**6):
                    sampler = RandomCheckIn(n, m, p0, "averaged", cap, rng=0)
                    b = sampler.max_batch_size
                    loads = np.arange(n + 1)
                    brute = float(np.sum(np.minimum(loads, b) * stats.binom.pmf(loads, n, p0 / m)))
                    assert sampler.expected_batch_size == pytest.approx(brute, rel=1e-12, abs=1e-300)
    # large n: the mean when the cap does not bind, the cap when it binds everywhere
    assert RandomCheckIn(10**9, 1000, 1.0, "averaged", rng=0).expected_batch_size == \
        pytest.approx(10**6, rel=1e-12)
    assert RandomCheckIn(10**18, 1000, 0.5, "averaged", 600_000, rng=0).expected_batch_size == \
        pytest.approx(600_000, rel=1e-12)
