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


# -- caches and incremental queries ----------------------------------------------------------------
def test_incremental_queries_match_fresh_accountants_and_state_does_not_grow():
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


# -- the fast numerical paths ----------------------------------------------------------------------
def test_cumulants_are_certified_upper_bounds_against_mpmath():
    """cumulant_at (two tables of exponentials, truncation at e^-700) against mpmath at 50
    digits: K + 2 u M is never below the exact log-moment-generating function, and K is within
    1e-13 of it wherever the truncation cannot matter."""
    mpmath = pytest.importorskip("mpmath")
    from dpplugins.pld.compose import LAMBDA_GRID, cumulant_at
    from dpplugins.pld.grid import GridPMF

    mpmath.mp.dps = 50
    rng = np.random.default_rng(1)
    u = np.finfo(float).eps / 2
    for _ in range(12):
        n = int(rng.integers(1, 2500))
        h = float(10 ** rng.uniform(-4, -1))
        lo = int(rng.integers(-n, n))
        pmf = rng.random(n) ** 3
        pmf[rng.random(n) < 0.2] = 0.0
        if rng.random() < 0.4:  # masses down to 1e-300: products below the normal range
            pmf *= 10.0 ** rng.uniform(-300, 0, size=n)
        pmf[int(rng.integers(n))] += 1e-3
        pmf /= pmf.sum()
        grid = GridPMF(h, lo, pmf, 0.0, 0.0)
        terms = [(mpmath.mpf(float(p)), (lo + i) * mpmath.mpf(h)) for i, p in enumerate(pmf)
                 if p > 0]
        for sign in (1.0, -1.0):
            for index in range(0, 64, 5):
                value, magnitude = cumulant_at(grid, sign, index)
                lam = mpmath.mpf(sign * float(LAMBDA_GRID[index]))
                exact = float(mpmath.log(mpmath.fsum(p * mpmath.exp(lam * s) for p, s in terms)))
                assert exact <= value + 2 * u * magnitude
                spread = float(lam) * (terms[-1][1] - terms[0][1]) * h
                if abs(float(spread)) < 600:  # no term below e^-700 relative to the largest
                    assert value - exact <= 1e-13 * max(abs(exact), 1.0)


def test_cached_spectra_give_the_same_composition_and_stay_bounded():
    from dpplugins.pld import spectra
    from dpplugins.pld.compose import compose_grid_pmfs
    from dpplugins.pld.grid import GridPMF

    rng = np.random.default_rng(3)
    pmf = rng.random(6000)
    pmf /= pmf.sum() * 1.001
    component = GridPMF(1e-3, -3000, pmf, 0.0, 0.0)
    spectra.clear_spectra_cache()
    cold = compose_grid_pmfs([(component, 40)])
    warm = compose_grid_pmfs([(component, 40)])  # every spectral term from the cache
    assert np.array_equal(cold.pmf, warm.pmf) and cold.fp_error == warm.fp_error
    assert spectra._cache_bytes > 0
    # another object with equal masses is not confused with the first (keyed by identity)
    other = GridPMF(1e-3, -3000, pmf * 0.5, 0.0, 0.0)
    halved = compose_grid_pmfs([(other, 1)])
    assert np.isclose(halved.pmf.sum(), 0.5 * pmf.sum(), rtol=1e-9)
    # sizes: fast (factors 2, 3, 5, 7), at least the window and at most 1.2 times it
    for bins in list(range(1, 300)) + [76509, 10 ** 6 + 1]:
        size = spectra.transform_size(bins)
        assert bins <= size <= max(1.2 * bins, 16)
        rest = size if bins > 16 else 1  # (below 16 the window itself)
        for factor in (2, 3, 5, 7):
            while rest % factor == 0:
                rest //= factor
        assert rest == 1
    # bounded: many components never hold more than the cache limit
    for seed in range(40):
        c = GridPMF(1e-3, -3000, np.random.default_rng(seed).random(6000) / 6001, 0.0, 0.0)
        compose_grid_pmfs([(c, 50)])
        assert spectra._cache_bytes <= spectra.SPECTRA_CACHE_BYTES
    spectra.clear_spectra_cache()


def test_epsilon_inversions_return_the_verified_crossing_float():
    """The closed-form start of the bisection changes nothing: the upper epsilon is the smallest
    float with delta_upper <= delta (the next float down fails), the lower one the largest with
    delta_lower > delta, and both equal a plain bisection's."""
    pld = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        1.0, 0.02, value_discretization_interval=2e-3).self_compose(500)
    for delta in (1e-3, 1e-5, 1e-7):
        composed = pld._composed("remove", "upper")
        eps = composed.epsilon_upper(delta)
        assert composed.delta_upper(eps) <= delta
        assert composed.delta_upper(float(np.nextafter(eps, 0.0))) > delta
        j = int(np.searchsorted(composed._svals, eps, side="left"))
        plain = composed._bisect(lambda e: composed.delta_upper(e) <= delta,
                                 float(composed._svals[j - 1]), float(composed._svals[j]))
        assert plain == eps
        lower = pld._composed("remove", "lower")
        low = lower.epsilon_lower(delta)
        assert lower.delta_lower(low) > delta
        assert lower.delta_lower(float(np.nextafter(low, math.inf))) <= delta
        assert low <= eps


def test_double_precision_tables_bracket_an_exact_sum():
    """Untilted compositions evaluate delta from double-precision suffix sums: the certified
    bounds bracket the window sum computed exactly (math.fsum of the stored masses)."""
    pld = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        0.8, 0.05, value_discretization_interval=1e-3).self_compose(200)
    composed = pld._composed("remove", "upper")
    s = (composed.lo + np.arange(len(composed.pmf))) * composed.h
    mass = np.maximum(composed.pmf, 0.0)
    for epsilon in (0.0, 0.3, 1.0, 2.5, 4.0):
        keep = s > epsilon
        exact = math.fsum((mass[keep] * -np.expm1(epsilon - s[keep])).tolist())
        assert composed.delta_lower(epsilon) <= exact + composed.inf_mass
        assert composed.delta_upper(epsilon) >= exact + composed.inf_mass
        assert composed.delta_upper(epsilon) - exact <= 1e-9 + composed.additive_error(epsilon)


def test_shared_interval_masses_equal_separate_calls():
    from dpplugins.mechanisms.distributions import Gaussian, Mixture, interval_masses

    a = np.linspace(-8.0, 8.0, 2001)
    b = a + 0.01
    p = Mixture((0.03, 0.97), (Gaussian(1.0, 1.3), Gaussian(0.0, 1.3)))
    q = Gaussian(0.0, 1.3)
    shared = interval_masses((p, q), a, b)
    assert np.array_equal(shared[0], p.interval_mass(a, b))
    assert np.array_equal(shared[1], q.interval_mass(a, b))


def test_lower_convex_hull_matches_an_exact_hull():
    """The vectorised hull (every concave vertex deleted per pass) against Andrew's monotone
    chain in exact integer arithmetic: the same lower hull as a function of x (collinear
    vertices may be kept), on random integer point sets including long concave cascades."""
    from fractions import Fraction

    from dpplugins.pld.grid import lower_convex_hull

    def exact_hull(xs, ys):
        hull = []
        for i in range(len(xs)):
            while len(hull) >= 2:
                a, b = hull[-2], hull[-1]
                if (ys[b] - ys[a]) * (xs[i] - xs[a]) < (ys[i] - ys[a]) * (xs[b] - xs[a]):
                    break
                hull.pop()
            hull.append(i)
        return hull

    def value(xs, ys, hull, t):
        for a, b in zip(hull, hull[1:]):
            if xs[a] <= t <= xs[b]:
                return Fraction(ys[a]) + Fraction(ys[b] - ys[a], xs[b] - xs[a]) * (t - xs[a])
        raise AssertionError

    rng = np.random.default_rng(5)
    for trial in range(60):
        n = int(rng.integers(3, 400))
        xs = np.sort(rng.choice(10 ** 4, size=n, replace=False)).astype(int)
        if trial % 3 == 0:  # a concave arc with noise: removals cascade
            ys = (-(xs - 5000) ** 2 // 5000 + rng.integers(0, 3, n)).astype(int)
        else:
            ys = rng.integers(0, 1000, n).astype(int)
        keep = lower_convex_hull(xs.astype(float), ys.astype(float)).tolist()
        reference = exact_hull(xs.tolist(), ys.tolist())
        assert keep[0] == 0 and keep[-1] == n - 1
        for t in xs.tolist():
            assert value(xs, ys, keep, t) == value(xs, ys, reference, t)
