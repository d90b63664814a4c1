"""Regression tests for the shuffle / swap reliability defects found by the fuzz suite, and for
the composition-count limit of the accountant base class.

Each test failed before its fix (NaN, ZeroDivisionError, TypeError, OverflowError, or minutes of
work).  Upper bounds are checked against the closed-form Gaussian-DP bound evaluated
independently (40-digit arithmetic with mpmath); lower bounds must not exceed it.
"""

from __future__ import annotations

import math
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from dpplugins.accountants import create
from dpplugins.accountants.base import MAX_COMPOSITIONS, compositions
from dpplugins.amplification import shuffle as shuffle_bounds
from dpplugins.errors import NumericalError, ParameterError
from dpplugins.events import GaussianEvent, PNSGDEvent, SelfComposedEvent, SwapEvent
from dpplugins.samplers import ShuffledEpochs, SlidingWindowCheckIn


def _gdp_epsilon(mu: float, delta: float) -> float:
    """epsilon(delta) of mu-GDP (Balle & Wang 2018, Thm 8) in 40-digit arithmetic (mpmath),
    by bisection: independent of the library's log-space evaluation."""
    with mpmath.workdps(40):
        m, target = mpmath.mpf(mu), mpmath.mpf(delta)

        def excess(e):
            return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2) - target
        lo, hi = mpmath.mpf(0), m * m / 2 + m * mpmath.sqrt(2 * mpmath.log(1 / target)) + 1
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if excess(mid) > 0 else (lo, mid)
        return float(hi)


@pytest.mark.parametrize("name", ["shuffle", "swap"])
def test_delta_at_a_huge_epsilon_is_not_nan(name):
    acc = create(name)
    acc.compose(ShuffledEpochs(200, 1 if name == "swap" else 20).event(2.0, 2))
    lower, upper = acc.get_delta_bounds(1e308)
    assert 0.0 <= lower <= upper <= 1e-299
    assert not math.isnan(acc.get_delta(1e308))


@pytest.mark.parametrize("name", ["shuffle", "swap"])
def test_tiny_noise_gives_infinite_upper_and_a_finite_lower_bound(name):
    """sigma = 1e-300: sigma^2 underflows; the closed form must not divide by zero.  The exact
    epsilon is about (1/sigma)^2 / 2 = 5e599, beyond the float range, so inf is the upper
    bound; the lower bound comes from a noisier pair (a post-processing) and is finite."""
    acc = create(name)
    acc.compose(ShuffledEpochs(200, 1 if name == "swap" else 20).event(1e-300, 2))
    lower, upper = acc.get_epsilon_bounds(1e-5)
    assert upper == math.inf
    assert 0.0 < lower < math.inf
    low, up = acc.get_delta_bounds(1.0)
    assert 0.0 <= low <= up == 1.0


def test_small_noise_lower_bound_is_below_the_gaussian_upper_bound():
    """sigma = 0.01 raised ValueError in the lower bound's PLD before (the pair's tails
    underflowed); now it uses sigma = 0.05, a post-processing, and stays below the truth."""
    acc = create("shuffle")
    acc.compose(ShuffledEpochs(200, 20).event(0.01, 2))
    lower, upper = acc.get_epsilon_bounds(1e-5)
    exact_gdp = _gdp_epsilon(math.sqrt(2) / 0.01, 1e-5)   # no amplification: a valid upper bound
    assert upper == pytest.approx(exact_gdp, rel=1e-6)
    assert 0.0 < lower <= exact_gdp


def test_tiny_grid_is_a_parameter_error():
    acc = create("swap", value_discretization_interval=1e-300)
    acc.compose(ShuffledEpochs(50, 1).event(8.0, 1))
    with pytest.raises(ParameterError, match="value_discretization_interval"):
        acc.get_epsilon_bounds(1e-5)


def test_max_statistic_pair_accepts_counts_beyond_int64():
    p, q = shuffle_bounds.max_statistic_pair(2.0, 10**300, 2.0, 1.0)
    assert p.sum() == pytest.approx(1.0) and q.sum() == pytest.approx(1.0)
    assert np.all(np.isfinite(p)) and np.all(np.isfinite(q))
    p, q = shuffle_bounds.max_statistic_pair(1e-300, 10, 2.0, 1.0)
    assert np.all(np.isfinite(p)) and np.all(np.isfinite(q))


@pytest.mark.parametrize("name,event", [
    ("shuffle", ShuffledEpochs(10**308, 20).event(2.0, 2)),
    ("swap", SwapEvent(10**400, 1, GaussianEvent(2.0)))])
def test_datasets_beyond_int64_and_the_float_range_are_answered(name, event):
    """10**308 examples raised TypeError (a Python int beyond int64 reached numpy), 10**400
    OverflowError.  A few epochs are answered: the upper bound is the no-amplification Gaussian
    DP bound (amplification needs n as a float), the lower bound at most that."""
    acc = create(name)
    acc.compose(event)
    lower, upper = acc.get_epsilon_bounds(1e-5)
    exact_gdp = _gdp_epsilon(math.sqrt(event.epochs) / 2.0, 1e-5)
    assert upper == pytest.approx(exact_gdp, rel=1e-6) and upper >= exact_gdp * (1 - 1e-9)
    assert 0.0 <= lower <= upper


def test_a_dataset_of_1e18_examples_is_answered():
    acc = create("swap")
    acc.compose(ShuffledEpochs(10**18, 1).event(2.0, 1))
    lower, upper = acc.get_epsilon_bounds(1e-5)
    assert 0.0 <= lower <= upper <= _gdp_epsilon(0.5, 1e-5) * (1 + 1e-6)


def test_long_run_answers_with_certified_bounds():
    """500000 epochs of 2 examples at sigma = 0.3 took minutes (the lower bound's PLD on a fine
    grid); the grid of long runs is now coarser.  Upper: Gaussian DP over the epochs."""
    acc = create("swap")
    acc.compose(ShuffledEpochs(2, 1).event(0.3, 500_000))
    lower, upper = acc.get_epsilon_bounds(1e-5)
    exact_gdp = _gdp_epsilon(math.sqrt(500_000) / 0.3, 1e-5)
    assert upper == pytest.approx(exact_gdp, rel=1e-6) and upper >= exact_gdp * (1 - 1e-9)
    assert 0.5 * upper < lower <= upper


def test_a_ledger_beyond_the_engines_range_records_and_refuses_queries():
    """2**63 compositions of a 100-step PNSGD pass: len() cannot hold it (Python's limit), the
    ledger does (``steps``), and a query says what the engines cannot represent."""
    acc = create("pnsgd")
    acc.compose(PNSGDEvent(100, 1, GaussianEvent(2.0)), 2**63)
    assert acc.steps == 100 * 2**63
    assert compositions(acc.history) == 2**63
    with pytest.raises(NumericalError, match="2\\*\\*53"):
        acc.get_epsilon_bounds(1e-5)
    with pytest.raises(NumericalError, match="2\\*\\*53"):
        acc.get_delta_bounds(1.0)


def test_the_composition_count_counts_passes_not_steps():
    history = [SelfComposedEvent(PNSGDEvent(100, 3, GaussianEvent(2.0)), 5),
               ShuffledEpochs(12, 3).event(1.0, Fraction(3, 2))]
    assert compositions(history) == 5 * 3 + 2
    assert MAX_COMPOSITIONS == 2**53
    acc = create("checkin")
    acc.compose(SlidingWindowCheckIn(40, 10).event(2.0, 2**53 + 1))
    with pytest.raises(NumericalError, match="compositions"):
        acc.get_epsilon_bounds(1e-5)


@pytest.mark.parametrize("rate", [5e-324, 1e-310])
def test_a_subnormal_sample_rate_is_a_parameter_error(rate):
    """Found by the long fuzz profile: 1 / 5e-324 is infinite, and ``round`` of it raised a bare
    OverflowError from ``step`` (shuffle's version-0.1 steps name the epoch by 1 / rate)."""
    acc = create("shuffle", dataset_size=1000, batch_size=10)
    with pytest.raises(ParameterError, match="sample_rate"):
        acc.step(noise_multiplier=2.0, sample_rate=rate, count=20)
