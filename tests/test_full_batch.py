"""Histories whose every step has sample rate 1 are exactly ``G_mu``: the pld and fdp accountants
answer them by the closed form (dpplugins/full_batch.py) at any number of steps, certified
against 40-digit arithmetic (reliability issue: before, 10^6 such steps took 15-25 s per query
on a PLD grid)."""

from __future__ import annotations

import math

import mpmath
import pytest

from dpplugins.accountants import create
from dpplugins.events import (FixedBatchEvent, GaussianEvent, PoissonSampledEvent,
                              SelfComposedEvent)
from test_shuffle_reliability import _gdp_epsilon


def _gdp_delta(mu: float, epsilon: float) -> float:
    """delta(eps) of mu-GDP (Balle & Wang 2018, Thm 8) in 40-digit arithmetic."""
    with mpmath.workdps(40):
        m, e = mpmath.mpf(mu), mpmath.mpf(epsilon)
        return float(mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2))


# (accountant options, event, steps, mu of the composition)
CASES = [
    ("pld", {}, PoissonSampledEvent(1.0, GaussianEvent(0.1291675163770171)), 10**6,
     1000 / 0.1291675163770171),
    ("pld", {}, GaussianEvent(2.0), 100, 10 / 2.0),
    ("pld", {"neighbouring": "replace_one"}, GaussianEvent(4.0), 400, 2 * 20 / 4.0),
    ("fdp", {"neighbouring": "replace_one"}, PoissonSampledEvent(1.0, GaussianEvent(200.0)),
     10**6, 2 * 1000 / 200.0),
    ("fdp", {}, PoissonSampledEvent(1.0, GaussianEvent(3.0)), 10**4, 100 / 3.0),
    ("fdp", {"neighbouring": "replace_one"}, FixedBatchEvent(50, 50, GaussianEvent(1.5)), 900,
     2 * 30 / 1.5),
]


@pytest.mark.parametrize("name,options,event,steps,mu", CASES)
@pytest.mark.parametrize("delta", [1e-15, 1e-5, 0.3])
def test_full_batch_history_is_answered_exactly_and_certified(name, options, event, steps, mu,
                                                              delta, monkeypatch):
    # no grid is built (before: a PLD of 10^6 steps per query)
    from dpplugins.accountants import pld as pld_module
    monkeypatch.setattr(pld_module, "poisson_gaussian_pld",
                        lambda *a, **k: pytest.fail("a PLD was built for a q = 1 history"))
    acc = create(name, **options).compose(SelfComposedEvent(event, steps))
    exact = _gdp_epsilon(mu, delta)
    lower, upper = acc.get_epsilon_bounds(delta)
    assert lower <= exact <= upper
    assert upper - lower <= 1e-7 * upper
    # the delta side, at the certified epsilon and at a point of its own
    assert acc.get_delta(upper) <= delta
    for epsilon in (upper, 0.5 * exact):
        low, up = acc.get_delta_bounds(epsilon)
        true = _gdp_delta(mu, epsilon)
        assert low <= true <= up
        assert up - low <= 1e-6 * up + 1e-300


def test_a_huge_epsilon_keeps_a_positive_upper_bound():
    """The profile at epsilon = 1e300 is positive (if below the float range): the certified upper
    bound is the smallest positive value we report, never 0."""
    acc = create("pld").compose(SelfComposedEvent(GaussianEvent(1.0), 10))
    lower, upper = acc.get_delta_bounds(1e300)
    assert lower == 0.0 and 0.0 < upper <= 1e-299


def test_mixed_sample_rates_still_use_the_pld():
    """One step with q < 1 in the history: the closed form does not apply."""
    acc = create("pld").compose(SelfComposedEvent(GaussianEvent(2.0), 10))
    acc.compose(PoissonSampledEvent(0.5, GaussianEvent(2.0)))
    both = create("pld").compose(SelfComposedEvent(GaussianEvent(2.0), 11))
    assert acc.get_epsilon(1e-5) < both.get_epsilon(1e-5)
    assert math.isfinite(acc.get_epsilon(1e-5))


@pytest.mark.parametrize("name", ["pld", "fdp"])
@pytest.mark.parametrize("sigma", [1.0, 1 / 1.5])
def test_a_trillion_full_batch_steps_is_answered(name, sigma):
    """10^12 full-batch steps: mu = 10^6 / sigma.  The search for epsilon doubled from mu^2/2
    past its cap of 1e12 (1.000000000002e12 at mu = 1e6 (1 + 1e-12), the upper end of the
    accountant's mu) and refused 'no epsilon below 1e12', though the root is 5.00004e11; at
    sigma = 1/1.5 the root is above 1e12.  Both bounds against the 40-digit root."""
    acc = create(name)
    acc.compose(GaussianEvent(sigma), 10**12)
    bounds = acc.get_epsilon_bounds(1e-5)
    exact = _gdp_epsilon(1e6 / sigma, 1e-5)
    assert bounds.lower <= exact <= bounds.upper
    assert bounds.upper - bounds.lower <= 2e-9 * exact


@pytest.mark.parametrize("name,options,event,factor", [
    ("fdp", {}, PoissonSampledEvent(1.0, GaussianEvent(1.0)), 1.0),
    ("pld", {}, PoissonSampledEvent(1.0, GaussianEvent(1.0)), 1.0),
    ("fdp", {"neighbouring": "replace_one"}, FixedBatchEvent(10, 10, GaussianEvent(1.0)), 2.0),
])
@pytest.mark.parametrize("sigma", [1e4, 1e8, 1e12, 1e13])
def test_tiny_mu_lower_bounds_are_below_the_exact_values(name, options, event, factor, sigma):
    """mu = 1e-12: the log-space profile subtracts two terms that agree to about mu, and the
    certified lower bounds came out above the exact values (found by a hostile sweep against
    60-digit arithmetic: +8.6e-7 relative at sigma = 1e8, +8.3 % at 1e13).  Below mu = 1e-3
    the lower bounds now come from the midpoint rule with its error term."""
    from dataclasses import replace

    acc = create(name, **options).compose(replace(event, event=GaussianEvent(sigma)))
    mu = factor / sigma
    total_variation = _gdp_delta(mu, 0.0)
    for fraction in (0.5, 1e-3, 1e-12):
        delta = fraction * total_variation
        exact = _gdp_epsilon(mu, delta)
        lower, upper = acc.get_epsilon_bounds(delta)
        assert lower <= exact <= upper
        assert exact - lower <= 1e-4 * exact       # and still tight
    for epsilon in (0.0, 0.5 * exact, exact):
        low, up = acc.get_delta_bounds(epsilon)
        true = _gdp_delta(mu, epsilon)
        assert low <= true <= up
        assert true - low <= 1e-5 * true


@pytest.mark.parametrize("name", ["pld", "fdp"])
@pytest.mark.parametrize("sigma,count", [(1000.0, 1), (2000.0, 1), (1e6, 10**6)])
def test_tiny_mu_delta_at_epsilon_beyond_the_exponential_range(name, sigma, count):
    """delta at eps >= 710 with mu below 1e-3: e^eps overflowed in the midpoint-rule lower
    bound and a raw OverflowError came out as a NumericalError about the history's size (a
    hostile sweep).  The exact delta (60 digits) is far below any double; the bounds bracket
    it, and the smaller epsilons around the cut agree with it too."""
    acc = create(name).compose(PoissonSampledEvent(1.0, GaussianEvent(sigma)), count)
    mu = math.sqrt(count) / sigma
    for epsilon in (3 * mu, 0.5, 709.0, 710.0, 1000.0, 1e6):
        low, up = acc.get_delta_bounds(epsilon)
        true = _gdp_delta(mu, epsilon)
        assert 0.0 <= low <= true <= up
        if epsilon > 1:
            assert up <= 1e-200
        else:
            assert true - low <= 1e-3 * true


@pytest.mark.parametrize("sigma", [7.7e158, 3e159, 1e160, 1e200, 1e300])
def test_full_batch_mu_brackets_the_exact_mu_at_a_huge_noise(sigma):
    """c / sigma below about 1e-154 has a subnormal square: the sum of squares kept a few digits
    (sigma = 1e160: mu 5.6e-6 relative below its exact value, outside the 1e-12 bracket) and
    was 0 below 1e-162.  Reference: the GDP composition (DRS 2022, Cor. 3.3) in 50 digits."""
    from dpplugins.full_batch import full_batch_mu

    runs = [(sigma, 1.0, 1), (3 * sigma, 1.0, 5)]
    low, high = full_batch_mu(runs, sensitivity_factor=2.0)
    with mpmath.workdps(50):
        s = mpmath.mpf(sigma)
        exact = 2 * mpmath.sqrt(1 / s ** 2 + 5 / (3 * s) ** 2)
    assert low <= exact <= high


@pytest.mark.parametrize("name", ["pld", "fdp"])
@pytest.mark.parametrize("sigma,epsilon", [(1e160, 1.0), (1e150, 1e10), (1e300, 1.0),
                                           (1e300, 0.0)])
def test_huge_noise_full_batch_queries_answer_with_positive_upper_bounds(name, sigma, epsilon):
    """A NumericalError about the history's size came out of the midpoint-rule lower bound
    (OverflowError beyond |eps / mu| of about 1.3e154), and at sigma = 1e300 the upper delta was
    0 where the exact one is positive (mu underflowed to 0).  Reference: mu-GDP in 60 digits."""
    acc = create(name).compose(PoissonSampledEvent(1.0, GaussianEvent(sigma)))
    low, up = acc.get_delta_bounds(epsilon)
    with mpmath.workdps(60):
        m, e = 1 / mpmath.mpf(sigma), mpmath.mpf(epsilon)
        x = e / m - m / 2
        if x > 40:   # exact in (0, Phi(-x)], below e^(-800) (and mpmath's ncdf overflows)
            assert low == 0.0 and up >= 1e-300
            return
        if e == 0:   # 2 Phi(m/2) - 1, without the cancellation of the two terms
            exact = mpmath.erf(m / (2 * mpmath.sqrt(2)))
        else:
            exact = mpmath.ncdf(-x) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)
    assert 0.0 <= low <= exact <= up
    assert up > 0.0
