"""The random-allocation sampler with participations k and check-in probability p: the schedule
has the claimed law (exact counts, chi-square and binomial tests against the uniform law), its
event reports k and p, the balls_and_bins accountant accounts it, and the compare tool shows the
rows beside Poisson at the same expected participation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from dpplugins.accountants import create
from dpplugins.amplification.allocation_participations import k_out_of_t_pld
from dpplugins.errors import ParameterError
from dpplugins.events import RandomAllocationEvent
from dpplugins.samplers.allocation import RandomAllocation
from dpplugins.samplers.checkin import RandomCheckIn, balls_and_bins


def test_every_example_in_k_distinct_steps_uniformly():
    n, t, k, passes = 300, 8, 3, 40
    sampler = balls_and_bins(n, t, rng=11, participations=k)
    assert isinstance(sampler, RandomAllocation) and len(sampler) == t
    pair_counts = np.zeros((t, t))
    for _ in range(passes):
        batches = list(sampler)
        steps_of = [[] for _ in range(n)]
        for j, batch in enumerate(batches):
            assert np.all(np.diff(batch) > 0)          # sorted, no example twice in a step
            for i in batch:
                steps_of[i].append(j)
        assert all(len(s) == k for s in steps_of)      # exactly k distinct steps each
        for s in steps_of:
            for a in s:
                for b in s:
                    if a < b:
                        pair_counts[a, b] += 1
    # every pair of steps equally likely to be shared (a uniform k-set): chi-square
    observed = pair_counts[np.triu_indices(t, 1)]
    assert stats.chisquare(observed).pvalue > 1e-4


@pytest.mark.parametrize("t,k", [(10, 3), (9, 3), (40, 2)])
def test_drawn_again_rows_give_uniform_k_subsets(t, k):
    """Where k^2 <= t a row of k uniform steps with a repeat is drawn again (O(n k) work: the
    k smallest of t uniforms took 14 s for 10^6 examples and 10^3 steps).  Every k-subset of
    the t steps is equally likely: chi-square over all C(t, k) subsets of 200,000 rows."""
    import itertools

    sampler = RandomAllocation(200_000, t, participations=k, rng=7)
    rows = np.sort(sampler.draw_allocation(), axis=1)
    assert np.all(np.diff(rows, axis=1) > 0) and rows.min() >= 0 and rows.max() < t
    index = {c: i for i, c in enumerate(itertools.combinations(range(t), k))}
    counts = np.bincount([index[tuple(r)] for r in rows.tolist()], minlength=len(index))
    assert len(counts) == math.comb(t, k)
    assert stats.chisquare(counts).pvalue > 1e-4


def test_checkin_probability_abstains_binomially():
    n, t, p = 2000, 10, 0.3
    sampler = balls_and_bins(n, t, rng=4, checkin_probability=p)
    used = sum(len(b) for b in sampler)
    # k = 1: one step per example that takes part
    assert stats.binomtest(used, n, p).pvalue > 1e-4
    event = sampler.event(1.2, 3)
    assert isinstance(event, RandomAllocationEvent)
    assert (event.checkin_probability, event.participations, event.steps_per_epoch) == (p, 1, t)


def test_default_is_the_plain_checkin_sampler():
    assert isinstance(balls_and_bins(100, 10, rng=0), RandomCheckIn)


def test_accountant_accounts_the_samplers_event():
    sampler = balls_and_bins(500, 50, rng=0, participations=2)
    acc = create("balls_and_bins", eps_tolerance=0.2)
    acc.compose(sampler.event(1.0, 2))
    got = acc.get_epsilon_bounds(1e-5)
    direct = k_out_of_t_pld(1.0, 50, 2, 2).epsilon_for_delta(1e-5)
    assert got.lower <= direct.upper and direct.lower <= got.upper
    mixed = balls_and_bins(500, 50, participations=2, checkin_probability=0.5).event(1.0, 1)
    assert acc.supports(mixed)   # several participations with p < 1: accounted (mixture)


def test_bad_sampler_parameters():
    with pytest.raises(ParameterError, match="participations"):
        RandomAllocation(10, 4, participations=5)
    with pytest.raises(ParameterError, match="checkin_probability"):
        balls_and_bins(10, 4, checkin_probability=0.0)


def test_compare_rows_beside_poisson_at_the_same_expected_participation():
    from dpplugins.report import TrainingConfig, compare
    config = TrainingConfig(dataset_size=2000, batch_size=None, epochs=1, noise_multiplier=1.0,
                            delta=1e-5, sampler="checkin", num_slots=100,
                            checkin_probability=0.5, participations=1)
    assert math.isclose(config.sample_rate, 0.5 / 100)
    rows = {r.accountant: r for r in compare(config, accountants=["balls_and_bins", "pld"])}
    ours, poisson = rows["balls_and_bins"], rows["pld"]
    assert ours.valid and not poisson.valid
    assert 0 < ours.lower <= ours.epsilon < poisson.epsilon   # allocation beats Poisson here
    with pytest.raises(ParameterError, match="participations"):
        TrainingConfig(dataset_size=2000, batch_size=50, epochs=1, noise_multiplier=1.0,
                       delta=1e-5, sampler="shuffled_epochs", participations=2)
