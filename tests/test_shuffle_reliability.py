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


@pytest.mark.parametrize("name", ["shuffle", "swap"])
@pytest.mark.parametrize("sigma", [0.05, 0.06])
def test_one_step_per_epoch_at_tiny_noise_has_its_lower_bound_below_the_exact_value(name, sigma):
    """A batch of the whole dataset (one step per epoch; swap: one example) is exactly the
    Gaussian mechanism, G_{2/sigma} under replace-one.  Found by a hostile sweep: at sigma =
    0.05 the lower-bound pair's bins of privacy loss above 709 had q = 0 (underflow), the PLD
    read them as infinite loss and the certified lower bound came out 5e-11 to 2e-9 relative
    above the exact epsilon (and equal to the upper bound for longer epochs, where the pair
    certifies about log(T) less).  Those bins are now merged (a post-processing)."""
    n = 1 if name == "swap" else 10
    acc = create(name, neighbouring="replace_one").compose(
        ShuffledEpochs(n, n).event(sigma, epochs=1))
    for delta in (1e-5, 1e-10, 1e-15):
        exact = _gdp_epsilon(2 / sigma, delta)
        lower, upper = acc.get_epsilon_bounds(delta)
        assert 0.0 < lower <= exact <= upper, (delta, lower, exact, upper)
    for epsilon in (500.0, 800.0):
        low, up = acc.get_delta_bounds(epsilon)
        with mpmath.workdps(50):
            m, e = mpmath.mpf(2 / sigma), mpmath.mpf(epsilon)
            true = float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))
        assert low <= true <= up, (epsilon, low, true, up)


def test_merged_pair_has_represented_bins_and_probability_sums():
    """The pair at sigma 0.05, 10^4 steps: every bin has both masses above 1e-290 (so no bin is
    read as infinite loss), the sums stay 1 within 1e-280, and merging never lowers the
    pair's largest finite privacy loss below the merged bins' target."""
    p, q = shuffle_bounds.max_statistic_pair(0.05, 10_000, 2.0, 0.0)
    assert np.all(np.minimum(p, q) >= shuffle_bounds.REPRESENTED_MASS)
    assert abs(p.sum() - 1) < 1e-12 and abs(q.sum() - 1) < 1e-12
    assert np.max(np.log(p / q)) < 700


def test_a_noise_schedule_per_epoch_builds_a_bounded_number_of_lower_bound_pairs(monkeypatch):
    """A noise multiplier that changes every epoch built one lower-bound pair (up to 200,000
    bins) per epoch: 1,000 epochs took 13-27 s and 1.2 GB per query (hostile sweep).  Beyond 32
    distinct epochs the pairs' noise is rounded up to a ladder of 64 steps per doubling (more
    noise: a post-processing, still a lower bound)."""
    from dpplugins.accountants import shuffle as shuffle_accountant

    built = []
    real = shuffle_bounds.max_statistic_pair

    def counting(sigma, *args, **kwargs):
        built.append(sigma)
        return real(sigma, *args, **kwargs)
    monkeypatch.setattr(shuffle_bounds, "max_statistic_pair", counting)
    sampler = ShuffledEpochs(6_000, 256)
    acc = create("shuffle")
    sigmas = [1.0 + 0.01 * e for e in range(100)]     # 1.0 .. 1.99: one doubling
    for sigma in sigmas:
        acc.compose(sampler.event(sigma, epochs=1))
    lower, upper = acc.get_epsilon_bounds(1e-5)
    distinct = set(built)
    assert len(distinct) <= shuffle_accountant.LOWER_BOUND_LADDER + 1
    assert all(shuffle_accountant.lower_bound_noise(s, True) in distinct for s in sigmas)
    # no amplification (one Gaussian release per example and epoch) is exact for the upper
    # bound of batches this large, and no lower bound may exceed it
    exact = _gdp_epsilon(math.sqrt(sum(1 / s ** 2 for s in sigmas)), 1e-5)
    assert upper == pytest.approx(exact, rel=1e-6)
    assert 0.0 < lower <= exact


@pytest.mark.parametrize("name", ["shuffle", "swap"])
def test_no_amplification_epsilon_and_summary_answer_or_refuse_every_delta(name):
    """(hostile sweep) delta = 0 raised ZeroDivisionError in ``summary`` and
    ``no_amplification_epsilon``, delta = 2 or -1e-5 a math domain error, NaN a ParameterError
    about an internal ``target``."""
    acc = create(name).compose(ShuffledEpochs(100, 10 if name == "shuffle" else 1).event(1.0, 1))
    assert acc.no_amplification_epsilon(0.0) == math.inf     # a Gaussian has no pure-DP epsilon
    assert "no amplification: inf" in acc.summary(0.0)
    for bad in (2.0, -1e-5, float("nan"), 1.0):
        with pytest.raises(ParameterError, match="delta"):
            acc.no_amplification_epsilon(bad)
        with pytest.raises(ParameterError, match="delta"):
            acc.summary(bad)


@pytest.mark.parametrize("sigma", [5e307, 1e308])
def test_the_largest_noise_multipliers_answer(sigma):
    """(hostile sweep) sigma = 5e307 raised a ParameterError about an empty internal array (the
    lower-bound pair's bin edges overflowed); epsilon is 0 within the float range."""
    acc = create("shuffle").compose(ShuffledEpochs(100, 10).event(sigma, epochs=1))
    assert acc.get_epsilon_bounds(1e-5) == (0.0, 0.0)


def test_numpy_booleans_are_flags_everywhere():
    """``lower_bound=np.bool_(True)`` was refused with "lower_bound=True is invalid: must be True
    or False" while ``ShuffledEpochs(drop_last=np.bool_(True))`` was accepted."""
    assert create("shuffle", lower_bound=np.bool_(True)).lower_bound is True
    assert ShuffledEpochs(100, 10, drop_last=np.bool_(True)).drop_last is True
    for bad in (1, "yes", None):
        with pytest.raises(ParameterError, match="True or False"):
            create("shuffle", lower_bound=bad)


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
