"""The pass cutter (dpplugins.passes) against a brute-force cutter that walks the steps one by
one, and its input checks."""

from __future__ import annotations

import numpy as np
import pytest

from dpplugins.errors import ParameterError
from dpplugins.events import GaussianEvent, RandomAllocationEvent, ShuffledEpochsEvent
from dpplugins.passes import cut_passes


def _step_by_step(runs):
    """Passes as (protocol key, [inner event of each step], complete), one step at a time: a
    pass ends after steps_per_epoch steps or where another protocol's event comes (even one
    run zero times: the module's "anything else starts a new run")."""
    passes, key, current, per = [], None, [], 0
    for event, count in runs:
        if event.protocol_key() != key:
            if current:
                passes.append((key, current, len(current) == per))
            key, current, per = event.protocol_key(), [], event.steps_per_epoch
        for _ in range(event.steps * count):
            if len(current) == per:
                passes.append((key, current, True))
                current = []
            current.append(event.event)
    if current:
        passes.append((key, current, len(current) == per))
    return passes


def _expand(cut):
    out = []
    for p, number in cut:
        steps = [event for event, s in p.segments for _ in range(s)]
        out.extend([(p.protocol.protocol_key(), steps, p.complete)] * number)
    return out


def test_cut_passes_matches_the_step_by_step_cutter():
    rng = np.random.default_rng(3)
    protocols = [lambda inner, s: ShuffledEpochsEvent(20, 5, 1, inner).with_steps(s),
                 lambda inner, s: ShuffledEpochsEvent(21, 7, 1, inner).with_steps(s),
                 lambda inner, s: RandomAllocationEvent(6, 1, inner).with_steps(s)]
    for _ in range(300):
        runs = []
        for _ in range(int(rng.integers(1, 6))):
            make = protocols[int(rng.integers(len(protocols)))]
            inner = GaussianEvent(float(rng.choice([0.8, 1.0, 2.0])))
            runs.append((make(inner, int(rng.integers(1, 15))), int(rng.integers(0, 4))))
        assert _expand(cut_passes(runs)) == _step_by_step(runs)


def test_cut_passes_refuses_a_negative_count():
    step = ShuffledEpochsEvent(20, 5, 1, GaussianEvent(1.0)).with_steps(1)
    with pytest.raises(ParameterError, match="count=-1"):
        cut_passes([(step, -1)])
    assert cut_passes([(step, 0)]) == []


def test_partial_shuffled_epochs_lower_bound_stays_below_the_exact_pair():
    """From an audit of hidden crossings: the Chua et al. pair of a partial epoch certified more
    than the epoch's upper bound (swap, n = 2, half an epoch at sigma = 1, delta = 1e-12: 11.95
    against 7.24).  The pair was right, its tail was not: the mixture's log-CDF was rounded to
    multiples of 1.1e-16 (_log_max_cdf).  The exact value of the pair P = N(2,1)/2 + N(0,1)/2,
    Q = N(1,1)/2 + N(0,1)/2 (others' gradient -1, the record's +1 against 0) is 7.13855 at
    delta = 1e-12 (mpmath, exact CDF differences between the crossings of the loss, and Monte
    Carlo); the same holds for full epochs that hold the record with probability < 1
    (drop_last, n = 10, b = 3, sigma = 1: 14.94 against 7.24; the pair's exact value is
    7.22288)."""
    from fractions import Fraction

    from dpplugins.accountants import create
    low, up = create("swap").compose(
        ShuffledEpochsEvent(2, 1, Fraction(1, 2), GaussianEvent(1.0))).get_epsilon_bounds(1e-12)
    assert 7.0 < low <= 7.13856 <= up
    low, up = create("shuffle").compose(
        ShuffledEpochsEvent(10, 3, 1, GaussianEvent(1.0), True)).get_epsilon_bounds(1e-12)
    assert 7.0 < low <= 7.22288 <= up
    full = create("shuffle").compose(ShuffledEpochsEvent(1000, 10, 3, GaussianEvent(1.0)))
    more = create("shuffle").compose(ShuffledEpochsEvent(1000, 10, Fraction(35, 10),
                                                         GaussianEvent(1.0)))
    assert 0 < full.get_epsilon_bounds(1e-5).lower < more.get_epsilon_bounds(1e-5).lower
