"""Random allocation (``balls_and_bins``): queries at extreme values answer cheaply and soundly
(reliability issue 21: slow tiny-delta queries at huge epsilon, and an error about an internal
``value_discretization_interval`` for ``steps_per_epoch = 10**300``).

Independent references (none goes through our grids, FFTs or certificates):
* the Gaussian mechanism in closed form (``conftest.gaussian_delta_exact``, Balle & Wang 2018,
  Thm 8): one epoch of random allocation is a post-processing of one Gaussian step with
  sensitivity 1 (reveal which step holds the example), so ``n`` epochs have
  ``delta(eps) <= delta_G(eps)`` with ``mu^2 = n / sigma^2`` -- a certified answer is never
  looser than that, and an answer at or below it is never an overstatement of privacy *because*
  of that comparison alone; soundness (upper >= truth) is checked against
* exact one-epoch quadrature for ``t = 2`` (``_delta_two_steps`` of
  ``test_allocation_reliability``, adaptive quadrature with a closed-form inner expectation), and
* exact integer arithmetic (``math.comb``) for the binomial coefficients of the k-out-of-t
  lower bound.
No test is timed: the slow path is made to fail (monkeypatched to raise) instead.
"""

import math
import warnings

import mpmath
import pytest
from scipy.optimize import brentq

from conftest import gaussian_delta_exact
from dpplugins.accountants import create
from dpplugins.amplification import allocation
from dpplugins.amplification.allocation import random_allocation_pld
from dpplugins.amplification.allocation_participations import _log_binomial
from dpplugins.errors import NumericalError
from dpplugins.events import GaussianEvent, RandomAllocationEvent
from dpplugins.pld import AccuracyWarning, distribution
from test_allocation_reliability import _delta_two_steps
from conftest import legacy_step  # noqa: E402


def _no_fft(*args, **kwargs):
    raise AssertionError("the FFT composition was called for a query it cannot improve")


def _gaussian_epsilon(mu: float, delta: float) -> float:
    hi = mu * mu / 2 + 40 * mu + 10
    return brentq(lambda e: gaussian_delta_exact(e, mu) - delta, 0.0, hi, xtol=1e-13,
                  rtol=1e-14)


@pytest.mark.parametrize("sigma, steps, epsilon", [
    (200.0, 861074, 1000.0),                                  # was 10.9 s
    (55.59774048858646, 1_000_000, 306.02080357969237),       # was 12.7 s (20 s timeout)
    (55.59774048858646, 1_000_000, 200.0),                    # was 23 s under load
])
def test_tiny_delta_at_huge_epsilon_needs_no_fft(monkeypatch, sigma, steps, epsilon):
    """Where the closed-form Gaussian bound is below the construction's additive error terms,
    the PLD engine cannot improve either bound (AllocationPLD._engine_cannot_improve), so the
    FFT composition must not run (it is made to raise).  Reference: random allocation into
    ``t = 2`` steps with ``steps / 2`` epochs is never worse than the Gaussian mechanism with
    ``mu^2 = epochs / sigma^2`` (one Gaussian step per epoch, no amplification; module
    docstring), so the certified upper bound must not exceed that Gaussian's exact delta by more
    than the rounding-up of a certified closed form (the Mills-ratio bound of
    allocation._gaussian_delta_upper is ~3e-6 relative above it here; 1e-4 allowed) and the
    1e-300 floor of representable answers."""
    monkeypatch.setattr(distribution, "compose_grid_pmfs", _no_fft)
    acc = create("balls_and_bins")
    acc.compose(legacy_step(acc, sigma, 0.5), steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the AccuracyWarning of the (0, tiny) gap
        bounds = acc.get_delta_bounds(epsilon)
    mu = math.sqrt((steps / 2) / sigma ** 2)
    reference = float(gaussian_delta_exact(epsilon, mu))
    assert 0.0 <= bounds.lower <= bounds.upper
    assert bounds.upper <= reference * (1 + 1e-4) + 1e-300
    # (not a trivial 1.0: the answer is tiny, as the Gaussian reference says)
    assert bounds.upper < 1e-20


@pytest.mark.parametrize("sigma, epsilon", [(1.0, 2.0), (2.0, 1.5), (2.0, 4.0), (5.0, 1.0)])
def test_chernoff_cheap_bound_is_sound_against_quadrature(sigma, epsilon):
    """The new cheap certificate (Chernoff bound of the composed PLD plus the certificates'
    additive terms, AllocationPLD._chernoff_upper) is an upper bound on the exact one-epoch
    delta of t = 2, computed by adaptive quadrature (independent of our grids)."""
    pld = random_allocation_pld(sigma, 2, 1)
    exact = _delta_two_steps(sigma, epsilon)
    assert pld._chernoff_upper(epsilon) >= exact * (1 - 1e-9)
    # and the full query, which now intersects with it, is still above the exact value
    assert pld.delta_for_epsilon(epsilon).upper >= exact * (1 - 1e-9)
    assert pld.delta_for_epsilon(epsilon).lower <= exact * (1 + 1e-9)


@pytest.mark.parametrize("steps_per_epoch", [10 ** 300, 10 ** 20, 2 ** 53 + 1])
def test_huge_steps_per_epoch_answers(steps_per_epoch):
    """t = 10**300 raised a ParameterError about value_discretization_interval (a grid step the
    user never set), 10**20 an OverflowError turned NumericalError, 2**53 + 1 scipy's
    ValueError.  Such an epoch is accounted by the Gaussian mechanism (a certified upper bound:
    an epoch is a post-processing of one Gaussian step).  Reference: the Gaussian mechanism's
    exact epsilon at mu = 1 (brentq on the closed form); the answer must not exceed it by more
    than a certified closed form rounds up (the Mills-ratio bound is ~6e-4 relative above the
    exact value at mu = 1; 1e-3 allowed)."""
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(steps_per_epoch, 1, GaussianEvent(1.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bounds = acc.get_epsilon_bounds(1e-5)
        delta = acc.get_delta_bounds(1.0)
    reference = _gaussian_epsilon(1.0, 1e-5)
    assert 0.0 <= bounds.lower <= bounds.upper <= reference * (1 + 1e-3)
    assert 0.0 <= delta.lower <= delta.upper <= float(gaussian_delta_exact(1.0, 1.0)) * (1 + 1e-3)


def test_huge_steps_per_epoch_with_participations_lower_bound_is_zero():
    """k = 2 of t = 10**300: the lower bound is the Gaussian one (mu^2 = 2) shifted by
    log C(t, 2) ~ 1380.9 (exact integer arithmetic), far more than that Gaussian's epsilon
    (about 6.6), so the certified lower bound must be 0.  Before the fix the lgamma difference
    cancelled to -log 2 and the 'lower bound' was 6.57, above the true epsilon (which is tiny:
    each step holds the example with probability 2e-300)."""
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(10 ** 300, 1, GaussianEvent(1.0), participations=2))
    assert math.log(math.comb(10 ** 300, 2)) > _gaussian_epsilon(math.sqrt(2.0), 1e-5) + 1000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bounds = acc.get_epsilon_bounds(1e-5)
    assert bounds.lower == 0.0
    assert bounds.upper <= _gaussian_epsilon(math.sqrt(2.0), 1e-5) * (1 + 1e-3)


@pytest.mark.parametrize("t, k", [(10, 3), (100, 50), (10 ** 6, 2), (10 ** 6, 500_000),
                                  (10 ** 15, 7), (2 ** 53 + 5, 3), (10 ** 300, 2),
                                  (10 ** 300, 10 ** 299), (7, 7), (7, 1)])
def test_log_binomial_is_a_tight_upper_bound(t, k):
    """_log_binomial shifts a lower bound, so it must be >= log C(t, k) (exact: math.comb on
    Python integers, math.log of a big int is correctly rounded to ~1 ulp; for C(10^6, 5 10^5),
    whose exact integer took 8 s, mpmath's log-binomial at 40 digits)."""
    if k >= 1000 and t < 10 ** 7:
        with mpmath.workdps(40):
            exact = float(mpmath.log(mpmath.binomial(t, k)))
    else:
        exact = math.log(math.comb(t, k)) if (t < 10 ** 7 or k < 10) else None
    value = _log_binomial(t, k)
    if exact is None:  # C(t, k) <= 2^t and >= (t/k)^k
        assert k * math.log(t / k) <= value <= t * math.log(2) * (1 + 1e-12)
    else:
        assert exact * (1 - 1e-15) <= value <= exact + 1e-6 * max(1.0, exact)


def test_mixed_history_with_a_gaussian_accounted_epoch_answers():
    """A huge-t epoch (Gaussian-accounted) composed with a large-noise epoch, whose default
    loss step is far finer than the Gaussian PLD grid allows: the composition falls back to the
    closed-form Gaussian bounds instead of an error about value_discretization_interval.
    Reference: the composed Gaussian mechanism, mu^2 = 1 + 1e-12 (one epoch of each)."""
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(10 ** 300, 1, GaussianEvent(1.0)))
    acc.compose(RandomAllocationEvent(2, 1, GaussianEvent(1e6)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bounds = acc.get_epsilon_bounds(1e-5)
    assert 0.0 <= bounds.lower <= bounds.upper <= _gaussian_epsilon(1.0, 1e-5) * (1 + 1e-3)


def test_fft_size_refuses_with_numerical_error():
    """A window beyond 2**62 points made scipy's next_fast_len overflow (OverflowError /
    ValueError); it is now the NumericalError naming the memory limit and the fix."""
    for span in (10 ** 20, 2 ** 62 + 1):
        with pytest.raises(NumericalError, match="memory_limit"):
            allocation._fft_size(span, 1 << 30, "random allocation at steps_per_epoch=10**20")


@pytest.mark.slow
def test_relative_error_above_one_gives_no_lower_pair_not_a_domain_error():
    """sigma = 0.3, t = 10**12 (geometric route): the accumulated relative error of the
    dominated pair's masses reaches 1, and _finish_lower took log(1 - rho) (math domain error,
    a bare ValueError).  Now no lower pair is handed on.  Reference: the Gaussian mechanism's
    exact epsilon at mu = 1 / 0.3 (an epoch is a post-processing of it); the certified upper
    bound must not exceed it beyond a closed form's rounding-up (1e-3 relative)."""
    bounds = random_allocation_pld(0.3, 10 ** 12).epsilon_for_delta(1e-5)
    assert 0.0 <= bounds.lower <= bounds.upper <= _gaussian_epsilon(1 / 0.3, 1e-5) * (1 + 1e-3)


def test_delta_near_the_error_terms_is_not_refined(monkeypatch):
    """delta(100) for sigma 55.6, t = 2, 10^6 steps: the first grid's upper bound is within 25 %
    of the construction's additive error terms and its lower bound is 0, so no finer grid is
    composed (it cost 7 s for a 12 % smaller bound; the whole query took 11-20 s).  Checked by
    counting the compositions; soundness against the exact Gaussian of one step per epoch
    (module docstring): the answer may not be looser than a certified bound rounds it up."""
    from dpplugins.accountants import balls_and_bins as module
    cls = type(create("balls_and_bins"))
    levels = []
    original = cls._composed

    def counted(self, epochs, h_loss, level, *args, **kwargs):
        levels.append(level)
        return original(self, epochs, h_loss, level, *args, **kwargs)
    monkeypatch.setattr(cls, "_composed", counted)
    sigma, steps = 55.59774048858646, 1_000_000
    acc = create("balls_and_bins")
    acc.compose(legacy_step(acc, sigma, 0.5), steps)
    with pytest.warns(module.AccuracyWarning, match="error terms"):
        lower, upper = acc.get_delta_bounds(100.0)
    assert levels == [0]
    exact = gaussian_delta_exact(100.0, math.sqrt(steps / 2) / sigma)
    assert lower == 0.0 < upper <= max(exact * (1 + 1e-4), 1e-300)


def _count_epoch_pair_builds(monkeypatch) -> list:
    """The arguments of every call of ``allocation_pairs`` (one per built epoch engine)."""
    calls = []
    original = allocation.allocation_pairs

    def counted(*args, **kwargs):
        calls.append(args)
        return original(*args, **kwargs)
    monkeypatch.setattr(allocation, "allocation_pairs", counted)
    return calls


def test_an_engine_that_does_not_fit_leaves_the_cheap_bounds_and_is_built_once(monkeypatch):
    """Found by the long fuzz profile (t = 104665, sigma 0.65, delta 1e-15: over 10 s, then a
    NumericalError): the cheap certificates answered, the accuracy loop then built the FFT
    engine for its diagnostics, the summand FFT did not fit the memory limit, and every level
    retried the build (seconds each).  Now the build is tried once and the cheap certified
    bounds are the answer; they are at most the composed Gaussian closed form (random
    allocation is a post-processing of one Gaussian step per epoch; Balle & Wang 2018, Thm 8)."""
    from dpplugins.samplers import balls_and_bins
    calls = _count_epoch_pair_builds(monkeypatch)
    acc = create("balls_and_bins", memory_limit=1 << 20)
    acc.compose(balls_and_bins(10_000, 1000).event(0.65, epochs=3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bounds = acc.get_epsilon_bounds(1e-10)
    mu = math.sqrt(3) / 0.65
    gaussian = brentq(lambda e: gaussian_delta_exact(e, mu) - 1e-10, 0.0, 200.0, xtol=1e-12)
    assert 0.0 <= bounds.lower <= bounds.upper <= gaussian * (1 + 1e-4)
    assert len(calls) == 1


@pytest.mark.slow
def test_a_delta_below_the_engines_slack_is_not_refined(monkeypatch):
    """Found by the long fuzz profile (t = 2914, 3 steps, delta 5e-15: 16.5 s, timeout): the
    engine's certified numerical slack was 2.5e4 times delta, so no grid could certify
    anything there, yet a second, finer grid was built.  One build now; the answer is the
    cheap Gaussian bound, at most the closed form of one Gaussian step (Balle & Wang 2018,
    Thm 8; the partial epoch is charged as a full one)."""
    from fractions import Fraction
    from dpplugins.events import GaussianEvent, RandomAllocationEvent
    calls = _count_epoch_pair_builds(monkeypatch)
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(300, Fraction(3, 300), GaussianEvent(0.72)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bounds = acc.get_epsilon_bounds(5e-15)
    gaussian = brentq(lambda e: gaussian_delta_exact(e, 1 / 0.72) - 5e-15, 0.0, 200.0,
                      xtol=1e-12)
    assert 0.0 <= bounds.lower <= bounds.upper <= gaussian * (1 + 1e-4)
    assert len(calls) == 1


def test_delta_below_the_engines_slack_keeps_a_lower_bound_from_a_larger_delta():
    """10,000 steps per epoch, 100 epochs, sigma 0.6: at delta = 1e-12 the engine's certified
    floating-point slack (about 1e-12) swamps delta, and the lower bound was 0 (epsilon is 3.93
    at 1e-10).  epsilon(delta) does not increase with delta, so the lower bound certified at a
    larger delta holds: it is now about 4.37, below the upper bound and below the closed-form
    Gaussian epsilon of the same 100 steps without amplification (an independent upper bound
    on the truth: each epoch is a post-processing of one Gaussian step)."""
    event = RandomAllocationEvent(10_000, 100, GaussianEvent(0.6))
    for delta in (1e-12, 1e-14):
        acc = create("balls_and_bins").compose(event)
        with pytest.warns(AccuracyWarning, match="certified at delta="):
            bounds = acc.get_epsilon_bounds(delta)
        assert 4.0 < bounds.lower <= bounds.upper
        assert bounds.lower <= _gaussian_epsilon(math.sqrt(100) / 0.6, delta)
