"""Correctness of the fast paths of the PLD engine: many distinct steps in one composition,
cached and reused compositions (incremental queries), the tail certificate, the exact lattice
grid for randomized response, the closed form for full-batch fixed-size steps, and the grid-size
and count checks.  Every expected value is independent of our code: closed forms (composed
Gaussian, GDP), exact enumeration (binomial), or dp_accounting's PLD (installed as a test
dependency).  No timed assertions."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
from scipy import special, stats

from dpplugins.accountants import create
from dpplugins.errors import ParameterError
from dpplugins.events import (EpsilonDeltaEvent, FixedBatchEvent, GaussianEvent,
                              PoissonSampledEvent, RandomizedResponseEvent, SelfComposedEvent)
from dpplugins.pld import AccuracyWarning, PrivacyLossDistribution

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.pld import pld_privacy_accountant, privacy_loss_mechanism  # noqa: E402


def _gaussian_delta(epsilon: float, mu: float) -> float:
    """delta of mu-GDP (Balle & Wang 2018, Thm 8; Dong, Roth, Su 2022, Cor. 2.13), computed with
    scipy's log_ndtr independently of our code."""
    a = special.log_ndtr(-epsilon / mu + mu / 2)
    b = epsilon + special.log_ndtr(-epsilon / mu - mu / 2)
    return float(np.exp(a) * -np.expm1(b - a))


def _their_epsilon(history, delta, vdi=1e-4):
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=vdi)
    for sigma, q, steps in history:
        acc.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    return acc.get_epsilon(delta)


def _quiet(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        return fn(*args)


# -- many distinct steps ---------------------------------------------------------------------------
def test_distinct_gaussian_steps_compose_to_the_closed_form():
    """q = 1: the composition of Gaussian steps is Gaussian with mu = sqrt(sum 1/sigma_i^2)."""
    sigmas = np.linspace(2.0, 6.0, 25)
    acc = create("pld")
    for sigma in sigmas:
        acc.step(noise_multiplier=float(sigma), sample_rate=1.0, count=2)
    mu = math.sqrt(float(np.sum(2.0 / sigmas ** 2)))
    for epsilon in (0.5, 1.0, 3.0):
        lower, upper = acc.get_delta_bounds(epsilon)
        truth = _gaussian_delta(epsilon, mu)
        assert lower <= truth <= upper
        assert upper - lower <= 2e-3 * truth
    lower, upper = acc.get_epsilon_bounds(1e-5)
    assert _gaussian_delta(upper, mu) <= 1e-5 * (1 + 1e-9)
    assert _gaussian_delta(lower, mu) >= 1e-5 * (1 - 1e-9)


def test_distinct_poisson_steps_agree_with_dp_accounting():
    rng = np.random.default_rng(7)
    history = [(float(rng.uniform(0.8, 1.6)), float(rng.uniform(0.005, 0.02)), 10)
               for _ in range(6)]
    acc = create("pld")
    for sigma, q, steps in history:
        acc.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    lower, upper = acc.get_epsilon_bounds(1e-5)
    theirs = _their_epsilon(history, 1e-5)  # pessimistic connect-the-dots on a 1e-4 grid
    assert lower <= theirs * (1 + 1e-6)
    assert abs(upper - theirs) <= 3e-3 * theirs
    assert (upper - lower) <= 2e-3 * upper


def test_sixteen_distinct_poisson_steps_agree_with_dp_accounting():
    """16 distinct settings: as many components as the batched cumulants' threshold, so
    windows, tilts and tail certificates come from CumulantBatch; the steps are built to the
    query's loss-range tail and with mirrored add bins."""
    rng = np.random.default_rng(11)
    history = [(float(rng.uniform(0.7, 2.0)), float(rng.uniform(0.002, 0.05)), 5)
               for _ in range(16)]
    acc = create("pld")
    theirs = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    for sigma, q, steps in history:
        acc.step(noise_multiplier=sigma, sample_rate=q, count=steps)
        theirs.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    for delta in (1e-5, 1e-9):
        lower, upper = acc.get_epsilon_bounds(delta)
        their = theirs.get_epsilon(delta)  # pessimistic connect-the-dots on a 1e-4 grid
        assert lower <= their * (1 + 1e-6)
        assert abs(upper - their) <= 3e-3 * their
        assert (upper - lower) <= 1e-3 * upper


# -- caches and incremental queries ----------------------------------------------------------------
def test_incremental_queries_agree_with_fresh_accountants_and_state_does_not_grow():
    acc = create("pld")
    sizes = []
    for epoch in range(1, 4):
        acc.step(noise_multiplier=1.0, sample_rate=0.01, count=100)
        before = len(json.dumps(acc.state_dict()))
        reused = acc.get_epsilon_bounds(1e-5)
        sizes.append(len(json.dumps(acc.state_dict())) - before)
        fresh = create("pld")
        fresh.step(noise_multiplier=1.0, sample_rate=0.01, count=100 * epoch)
        alone = fresh.get_epsilon_bounds(1e-5)
        # the reused query may start on the previous query's grid: other certified bounds, so
        # the two intervals overlap and each is within the tolerance
        assert reused.lower <= alone.upper and alone.lower <= reused.upper
        assert reused.upper - reused.lower <= 1e-3 * reused.upper
        theirs = _their_epsilon([(1.0, 0.01, 100 * epoch)], 1e-5)
        assert reused.lower <= theirs * (1 + 1e-6) and abs(reused.upper - theirs) <= 2e-3 * theirs
    assert sizes == [0, 0, 0]  # the caches are not part of the state


def test_per_epoch_queries_stay_certified_and_within_tolerance():
    """Thirty epochs with a query after each (the grid of one query is the next one's start):
    every answer brackets dp_accounting's estimate up to its discretisation, meets
    eps_tolerance without a warning, and never decreases (more steps never cost less)."""
    acc = create("pld")
    previous = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        for epoch in range(1, 31):
            acc.step(noise_multiplier=1.1, sample_rate=0.02, count=50)
            bounds = acc.get_epsilon_bounds(1e-6)
            assert bounds.upper - bounds.lower <= 1e-3 * bounds.upper
            assert bounds.upper >= previous
            previous = bounds.lower
            if epoch in (1, 7, 30):
                theirs = _their_epsilon([(1.1, 0.02, 50 * epoch)], 1e-6)
                assert bounds.lower <= theirs * (1 + 1e-6)
                assert abs(bounds.upper - theirs) <= 2e-3 * theirs


def test_a_replaced_history_never_reuses_a_stale_composition():
    acc = create("pld")
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=500)
    first = acc.get_epsilon(1e-5)
    acc.history = [SelfComposedEvent(PoissonSampledEvent(0.02, GaussianEvent(1.0)), 500)]
    fresh = create("pld")
    fresh.step(noise_multiplier=1.0, sample_rate=0.02, count=500)
    assert acc.get_epsilon(1e-5) == fresh.get_epsilon(1e-5) > first


def test_roundtrip_uses_the_composition_that_certified_epsilon():
    """get_delta(get_epsilon(d)) <= d, also where the two queries refine differently."""
    acc = create("pld", neighbouring="replace_one")
    acc.compose(SelfComposedEvent(PoissonSampledEvent(0.002879424611994431,
                                                      GaussianEvent(0.22464199813326696)), 6453))
    d = 1.2169233405718037e-09
    eps = _quiet(acc.get_epsilon, d)
    assert _quiet(acc.get_delta, eps) <= d


def test_pld_cached_delta_bounds_are_the_best_of_the_computed_levels():
    pld = PrivacyLossDistribution.from_gaussian(2.0, value_discretization_interval=1e-3)
    pld = pld.self_compose(10)
    assert pld.cached_delta_bounds(1.0) is None  # nothing composed yet
    bounds = pld.delta_for_epsilon(1.0)
    mu = math.sqrt(10) / 2.0
    cached = pld.cached_delta_bounds(1.0)
    assert cached.lower <= _gaussian_delta(1.0, mu) <= cached.upper
    assert cached.upper <= bounds.upper and cached.lower >= bounds.lower


# -- the tail certificate --------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [40.0, 200.0])
def test_tail_certificate_is_an_upper_bound(epsilon):
    """Far in the tail, delta is answered by the Chernoff certificate: still above the truth."""
    acc = create("pld")
    acc.step(noise_multiplier=1.0, sample_rate=1.0, count=5)
    lower, upper = _quiet(acc.get_delta_bounds, epsilon)
    truth = _gaussian_delta(epsilon, math.sqrt(5))  # loss N(5/2, 5): 40 is 16.8 std above
    assert lower <= truth <= upper <= 1e-15
    pld = PrivacyLossDistribution.from_gaussian(1.0, value_discretization_interval=1e-2)
    assert pld.self_compose(5).delta_upper_chernoff(epsilon) >= truth


def test_tiny_rate_large_epsilon_answers_with_a_valid_bound():
    acc = create("pld", neighbouring="replace_one")
    acc.compose(SelfComposedEvent(PoissonSampledEvent(1.4e-5, GaussianEvent(1.0)), 1000))
    lower, upper = _quiet(acc.get_delta_bounds, 1000.0)
    # answered by the tail certificate (its validity: the closed-form test above); the lower
    # bound is 0, which is valid
    assert 0.0 == lower <= upper <= 1e-18


# -- exact grids and closed forms ------------------------------------------------------------------
def test_binary_randomized_response_on_its_lattice_matches_the_binomial():
    """Replace-one binary RR: the loss is +-eps0, so T steps give (2J - T) eps0 with J binomial
    (exact enumeration)."""
    eps0, steps = 1.3, 400
    acc = create("pld", neighbouring="replace_one")
    acc.compose(SelfComposedEvent(RandomizedResponseEvent(eps0, 2), steps))
    p = math.exp(eps0) / (1 + math.exp(eps0))
    j = np.arange(steps + 1)
    losses = (2 * j - steps) * eps0
    log_pmf = stats.binom.logpmf(j, steps, p)
    for epsilon in (100.0, 150.0, 200.0):
        mask = losses > epsilon
        truth = float(np.sum(np.exp(log_pmf[mask]) * -np.expm1(epsilon - losses[mask])))
        lower, upper = acc.get_delta_bounds(epsilon)
        assert lower <= truth <= upper
        assert upper - lower <= 1e-6 * truth + 1e-15


def test_full_batch_fixed_size_steps_are_gaussian():
    """n = b: each step is the Gaussian mechanism with sensitivity 2 (replace-one); compared with
    dp_accounting's analytic Gaussian privacy loss for the equivalent single Gaussian."""
    sigma, steps = 0.5, 10 ** 5
    acc = create("fdp", sampling="uniform")
    acc.compose(SelfComposedEvent(FixedBatchEvent(10, 10, GaussianEvent(sigma)), steps))
    equivalent = privacy_loss_mechanism.GaussianPrivacyLoss(
        standard_deviation=sigma / math.sqrt(steps), sensitivity=2.0)
    for delta in (1e-5, 1e-10):
        lower, upper = acc.get_epsilon_bounds(delta)
        theirs = equivalent.get_delta_for_epsilon(upper)
        assert theirs <= delta * (1 + 1e-6)
        assert lower <= upper <= lower * (1 + 1e-6)
    lower, upper = acc.get_delta_bounds(2000.0)
    assert lower <= equivalent.get_delta_for_epsilon(2000.0) * (1 + 1e-6)
    assert upper >= equivalent.get_delta_for_epsilon(2000.0) * (1 - 1e-6)


# -- checks ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("h", [5e-324, 1e-9])
def test_a_grid_too_fine_for_the_memory_limit_is_a_parameter_error(h):
    acc = create("pld", value_discretization_interval=h)
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=10)
    with pytest.raises(ParameterError, match="value_discretization_interval.*>= "):
        acc.get_epsilon_bounds(1e-5)


def test_counts_beyond_two_to_the_53_are_a_parameter_error():
    pld = PrivacyLossDistribution.from_gaussian(1.0, value_discretization_interval=1e-2)
    with pytest.raises(ParameterError, match="count"):
        pld.self_compose(10 ** 308)
    with pytest.raises(ParameterError, match="count"):
        pld.self_compose(2 ** 40).self_compose(2 ** 20)


def test_a_pure_pair_with_a_huge_epsilon_has_a_valid_lower_bound():
    acc = create("pld")
    acc.compose(EpsilonDeltaEvent(1e308, 0.0))
    lower, upper = acc.get_epsilon_bounds(1e-5)
    assert lower <= 1e308 <= upper  # epsilon(delta) <= epsilon(0) = 1e308
