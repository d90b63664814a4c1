"""Reliability of the PLD accountant at the edges: huge epsilon, deltas below the old
floating-point floor, small epsilons, extreme noise multipliers, mixed histories.

Every check compares with something independent of our PLD code: the closed form of the composed
Gaussian (T Gaussian steps with noise sigma = one with sigma / sqrt(T); Dong, Roth, Su 2022,
Cor. 3.3), dp_accounting's PLD accountant, or an exact long-double convolution of the grid PLD.
"""

import math
import warnings

import numpy as np
import pytest

from conftest import convolution_power, epsilon_from_delta_curve, gaussian_delta_exact
from dpplugins.accountants import create
from dpplugins.errors import ParameterError, check_real
from dpplugins.pld import AccuracyWarning
from dpplugins.pld import PrivacyLossDistribution as PLD
from dpplugins.pld.compose import compose_grid_pmfs

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.pld import pld_privacy_accountant  # noqa: E402


def _pld_accountant(history, **options):
    acc = create("pld", **options)
    for sigma, q, steps in history:
        acc.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    return acc


def _dp_accounting(history, vdi):
    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=vdi)
    for sigma, q, steps in history:
        acc.compose(dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    return acc


def _gaussian_epsilon(mu, delta):
    return epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)


# -- 1. huge epsilon ---------------------------------------------------------------------------
def test_huge_epsilon_is_a_value_and_matches_the_closed_form():
    """sigma = 0.1, 230 steps: epsilon ~ 12146, beyond exp's long-double range (~11356)."""
    acc = _pld_accountant([(0.1, 1.0, 230)])
    mu = math.sqrt(230) / 0.1
    exact_delta = gaussian_delta_exact(12150.0, mu)
    d = acc.get_delta_bounds(12150.0)
    assert d.lower <= exact_delta <= d.upper < 1.0
    assert d.upper - d.lower <= 1e-2 * exact_delta
    exact = _gaussian_epsilon(mu, 1e-5)
    b = acc.get_epsilon_bounds(1e-5)
    assert b.lower <= exact <= b.upper
    assert b.upper - b.lower <= 1e-3 * exact


# -- 2. delta queries ---------------------------------------------------------------------------
def test_get_delta_on_an_ordinary_history_against_dp_accounting():
    acc = _pld_accountant([(1.0, 0.01, 100)])
    b = acc.get_delta_bounds(2.0)
    theirs = _dp_accounting([(1.0, 0.01, 100)], 1e-4).get_delta(2.0)  # pessimistic estimate
    assert b.lower <= theirs * (1 + 1e-9)
    assert abs(b.upper - theirs) <= 1e-3 * theirs
    assert b.upper - b.lower <= 1e-3 * b.upper
    assert acc.get_delta(2.0) == b.upper


@pytest.mark.parametrize("steps,sigma,eps", [(1, 1.0, 8.1656), (1, 1.0, 9.5), (1000, 20.0, 14.0)])
def test_delta_below_the_old_floating_point_floor(steps, sigma, eps):
    """Deltas of 1e-15 .. 1e-20: certified bounds around the closed form, no error."""
    acc = _pld_accountant([(sigma, 1.0, steps)])
    exact = gaussian_delta_exact(eps, math.sqrt(steps) / sigma)
    assert exact < 2e-15
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        b = acc.get_delta_bounds(eps)
    assert b.lower <= exact <= b.upper
    assert b.upper <= exact * 1.01


def test_unreachable_tolerance_returns_certified_bounds_with_a_warning():
    # sample rate 0.5: a PLD query (q = 1 is answered by the exact G_mu closed form, no grid);
    # anchored on dp-accounting at a fine grid (3.958996 at vdi 1e-5)
    history = [(2.0, 0.5, 10)]
    acc = _pld_accountant(history, eps_tolerance=1e-9, memory_limit=1 << 22)
    with pytest.warns(AccuracyWarning, match="eps_tolerance"):
        b = acc.get_epsilon_bounds(1e-5)
    theirs = _dp_accounting(history, 1e-5).get_epsilon(1e-5)
    assert b.lower <= theirs * (1 + 1e-6) and theirs <= b.upper * (1 + 1e-6)
    assert b.upper - b.lower <= 1e-4 * theirs


# -- 3. and 7. deltas down to 1e-15 -----------------------------------------------------------
@pytest.mark.parametrize("steps,sigma,delta", [(1, 1.0, 1e-15), (2, 1.0, 1e-12), (2, 1.0, 1e-15),
                                               (1000, 20.0, 1e-12), (1000, 20.0, 1e-15),
                                               (100_000, 200.0, 1e-12)])
def test_gaussian_small_delta_against_the_closed_form(steps, sigma, delta):
    acc = _pld_accountant([(sigma, 1.0, steps)])
    exact = _gaussian_epsilon(math.sqrt(steps) / sigma, delta)
    b = acc.get_epsilon_bounds(delta)
    assert b.lower <= exact <= b.upper
    assert b.upper - b.lower <= 1e-3 * exact


def test_subsampled_delta_1e12_against_dp_accounting():
    history = [(2.0, 1e-3, 1000)]
    b = _pld_accountant(history).get_epsilon_bounds(1e-12)
    theirs = _dp_accounting(history, 1e-5).get_epsilon(1e-12)  # pessimistic: 0.110163
    assert b.lower <= theirs * (1 + 1e-9)
    assert abs(b.upper - theirs) <= 1e-3 * theirs
    assert b.upper - b.lower <= 1e-3 * b.upper


def test_fft_error_bound_covers_the_error_measured_in_long_double():
    """The double-precision FFT's certified l1 error bound is at least its actual error, measured
    against the long-double composition (about 2000 times more accurate)."""
    step = PLD.from_poisson_subsampled_gaussian(2.0, 1e-3, value_discretization_interval=4e-5)
    part = step._directions["remove"][0][0].upper
    for count in (10, 1000):
        double = compose_grid_pmfs([(part, count)])
        extended = compose_grid_pmfs([(part, count)], extended=True, extended_inverse=True)
        assert (double.lo, len(double.pmf)) == (extended.lo, len(extended.pmf))
        measured = float(np.sum(np.abs(double.pmf - extended.pmf)))
        assert measured <= double.fp_error - extended.fp_error
        assert extended.fp_error <= 1e-3 * double.fp_error


def _exact_composition(part, count):
    """``count``-fold convolution of a grid PMF by repeated squaring, directly in long double."""
    return convolution_power(part.pmf, part.lo, count, np.longdouble)


def _exact_delta(lo, pmf, h, eps, inf_mass=0.0, count=1):
    """Hockey-stick divergence of the composition: the finite part from the convolved masses
    plus delta(inf) = 1 - (1 - delta_1(inf))^count."""
    s = (lo + np.arange(len(pmf))).astype(np.longdouble) * np.longdouble(h)
    keep = s > eps
    finite = np.sum(pmf[keep] * -np.expm1(np.longdouble(eps) - s[keep]))
    infinite = -np.expm1(count * np.log1p(-np.longdouble(inf_mass)))
    return float(finite + infinite)


@pytest.mark.parametrize("kind", ["upper", "lower"])
def test_tilted_composition_brackets_an_exact_long_double_convolution(kind):
    """The exponentially tilted FFT (used for tiny deltas) against the exact composition of the
    same grid PLD: its certified bounds contain the exact hockey-stick divergence (1e-7 .. 1e-20)
    for any tilt, and near the Chernoff-optimal tilt they are tight."""
    step = PLD.from_poisson_subsampled_gaussian(1.0, 0.05, value_discretization_interval=0.01)
    part = getattr(step._directions["remove"][0][0], kind)
    count = 24
    lo, exact_pmf = _exact_composition(part, count)
    plain = compose_grid_pmfs([(part, count)], extended=True, extended_inverse=True)
    for eps, tilt in [(3.0, 4.6), (6.0, 5.0), (9.0, 5.2)]:
        exact = _exact_delta(lo, exact_pmf, part.h, eps, part.inf_mass, count)
        assert 1e-22 < exact < 1e-6
        for lam in (tilt, 1.0):
            composed = compose_grid_pmfs([(part, count)], tilt=lam)
            assert composed.delta_lower(eps) <= exact <= composed.delta_upper(eps)
        tilted = compose_grid_pmfs([(part, count)], tilt=tilt)
        assert tilted.delta_upper(eps) - tilted.delta_lower(eps) <= 1e-6 * exact
        assert plain.delta_lower(eps) <= exact <= plain.delta_upper(eps)


# -- 4. small epsilon ---------------------------------------------------------------------------
def test_small_epsilon_regime_against_dp_accounting():
    history = [(5.0, 1e-4, 1000)]
    b = _pld_accountant(history).get_epsilon_bounds(1e-5)
    theirs = _dp_accounting(history, 3e-7).get_epsilon(1e-5)  # 0.0011345
    assert b.lower <= theirs * (1 + 1e-9)
    assert abs(b.upper - theirs) <= 1e-3 * theirs
    assert b.upper - b.lower <= 1e-3 * b.upper
    loose = _pld_accountant([(5.0, 1e-4, 100_000)], eps_tolerance=1e-2).get_epsilon_bounds(1e-5)
    assert 0.0164 < loose.lower <= loose.upper < 0.0166


# -- 5. extreme noise multipliers -----------------------------------------------------------------
@pytest.mark.parametrize("q", [0.5, 1.0])
@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_extreme_noise_multipliers_answer(q):
    # (no floating-point warning may leak: sizing the grid of sigma = 1e308 computed 0 * inf)
    # sigma = 1e308: the loss is below 1e-300 everywhere, so delta(0) < 1e-5 and epsilon = 0
    assert _pld_accountant([(1e308, q, 10)]).get_epsilon_bounds(1e-5) == (0.0, 0.0)
    assert _pld_accountant([(1e120, q, 10)]).get_epsilon(1e-5) <= 1e-100
    # sigma -> 0: the remove direction reveals the record with probability q > delta (q < 1),
    # and for q = 1 the loss is ~ 1/(2 sigma^2): epsilon is infinite (or beyond any float)
    assert _pld_accountant([(1e-300, q, 10)]).get_epsilon(1e-5) == math.inf
    assert _pld_accountant([(1e-300, q, 10)]).get_delta(1.0) == 1.0


def test_integers_beyond_the_float_range_are_a_parameter_error():
    with pytest.raises(ParameterError, match="noise_multiplier.*float range"):
        create("pld").step(noise_multiplier=10 ** 400, sample_rate=0.5)
    with pytest.raises(ParameterError, match="x=.*1.798e\\+308"):
        check_real("x", -10 ** 400)


# -- 6. mixed histories ---------------------------------------------------------------------------
def test_a_tiny_sample_rate_does_not_set_the_grid():
    history = [(1.0, 0.5, 1), (1.0, 1e-6, 1)]
    acc = _pld_accountant(history)
    alone = _pld_accountant(history[:1])
    assert acc.initial_grid_step(history) >= 0.5 * alone.initial_grid_step(history[:1])
    b = acc.get_epsilon_bounds(1e-5)
    theirs = _dp_accounting(history, 1e-4).get_epsilon(1e-5)  # 3.533998
    assert b.lower <= theirs * (1 + 1e-9)
    assert abs(b.upper - theirs) <= 1e-3 * theirs


def test_delta_at_the_largest_float_epsilon_is_a_number():
    """get_delta(1e308) on 3 Gaussian steps: delta(eps) -> 0 as eps grows (no mass at infinite
    loss), so the certified bounds are finite and tiny; it raised OverflowError in the
    Chernoff tail's lambda search (found by the long fuzz profile)."""
    from dpplugins.events import GaussianEvent, SelfComposedEvent

    for name in ("pld", "fdp"):
        bounds = create(name).compose(SelfComposedEvent(GaussianEvent(2.0), 3)) \
            .get_delta_bounds(1e308)
        assert 0.0 <= bounds.lower <= bounds.upper <= 1e-20


def test_round_trip_at_the_pure_dp_epsilon_of_laplace_steps():
    """23 Laplace steps of scale b under replace-one (sensitivity 2) have largest total loss
    46 / b (Dwork & Roth 2014, Thm 3.16), so delta(eps) = 0 for eps >= 46 / b.  get_epsilon at
    delta 4.6e-14 lands within 1e-10 of 46 / b; get_delta there must not exceed that delta (it
    gave 2.2e-12, the grid's floor: found by the long fuzz profile)."""
    from dpplugins.events import LaplaceEvent, SelfComposedEvent

    b, delta = 2.091802476319871, 4.6318683496772706e-14
    acc = create("pld", neighbouring="replace_one").compose(
        SelfComposedEvent(LaplaceEvent(b), 23))
    epsilon = acc.get_epsilon(delta)
    assert abs(epsilon - 46 / b) <= 1e-9 * epsilon
    assert acc.get_delta(epsilon) <= delta
    assert acc.get_delta_bounds(46 / b * (1 + 1e-9)) == (0.0, 0.0)
    # below the largest loss the bounds bracket the exact value: all 23 losses are at their
    # maximum with probability 2**-23 (each Laplace draw on the far side of its centre)
    low = acc.get_delta_bounds(46 / b - 1.0)
    exact_floor = 2.0 ** -23 * -math.expm1(-1.0)
    assert low.upper >= exact_floor


# -- 8. the lower bound's accuracy levels stop once the gap is within the tolerance ---------------
def test_lower_rtol_keeps_the_lower_bound_certified_and_within_the_share():
    """``epsilon_for_delta(lower_rtol=r)`` stops the lower bound's accuracy levels once the gap
    is within ``r``; every level is certified, so the lower bound stays below the closed form of
    the composed Gaussian (Dong, Roth, Su 2022, Cor. 3.3) and within ``r`` of the upper one or
    equal to the bound of all levels."""
    sigma, steps, delta = 1.0, 10, 1e-12
    exact = _gaussian_epsilon(math.sqrt(steps) / sigma, delta)
    pld = PLD.from_gaussian(sigma, value_discretization_interval=1e-3).self_compose(steps)
    every = pld.epsilon_for_delta(delta)
    for rtol in (0.0, 1e-4, 1e-3, 1e-2, 0.5):
        b = pld.epsilon_for_delta(delta, lower_rtol=rtol)
        assert b.lower <= exact <= b.upper
        assert b.upper == every.upper
        assert b.lower <= every.lower
        assert b.upper - b.lower <= max(rtol * b.upper, every.upper - every.lower)
    exact_delta = gaussian_delta_exact(exact, math.sqrt(steps) / sigma)
    d = pld.delta_for_epsilon(exact, lower_rtol=0.5)
    assert d.lower <= exact_delta <= d.upper
    assert d.upper - d.lower <= max(0.5 * d.upper, 0.0)
    with pytest.raises(ParameterError, match="lower_rtol"):
        pld.epsilon_for_delta(delta, lower_rtol=-1.0)


def test_a_tiny_sample_rate_and_tiny_delta_answer_within_the_tolerance():
    """sigma = 0.5, q = 1e-5, 100 steps, delta = 1e-10 took 24-29 s: the lower bound kept
    going through tilted compositions of 11 million bins on a grid where the gap was already
    within the tolerance (its additive error, 1.7e-13, was above 1e-3 delta).  The levels now
    stop at ``eps_tolerance`` (or where only a finer grid helps).  The bounds bracket
    dp_accounting's pessimistic PLD (an upper bound on the true epsilon), within the
    tolerance."""
    history = [(0.5, 1e-5, 100)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        b = _pld_accountant(history).get_epsilon_bounds(1e-10)
    theirs = _dp_accounting(history, 1e-4).get_epsilon(1e-10)  # 0.910013 (1e-5: 0.910047, 12 s)
    assert b.lower <= theirs * (1 + 1e-9)
    assert abs(b.upper - theirs) <= 1e-3 * theirs
    assert b.upper - b.lower <= 1e-3 * b.upper


# -- a small memory_limit: a coarser first grid, not a refusal -----------------------------------
def _rdp_epsilon(sigma, q, steps, delta):
    """dp_accounting's RDP accountant: an independent upper bound on epsilon."""
    import dp_accounting
    from dp_accounting.rdp import rdp_privacy_accountant
    acc = rdp_privacy_accountant.RdpAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("memory_limit,cap", [(2**22, 8.5), (2**24, 8.1)])
def test_a_small_memory_limit_coarsens_the_first_grid_instead_of_refusing(memory_limit, cap):
    """10^6 steps at q = 0.5, sigma 300: with memory_limit 4 or 16 MiB the first grid's window
    (about 650,000 bins) did not fit, and get_epsilon and epsilon_upper_fast raised 'use a
    coarser value_discretization_interval', a grid step the user never chose.  The window
    budget now respects the memory limit: the bounds are looser, still certified (they contain
    those of the default limit, and the lower one is below dp_accounting's RDP bound).  At
    4 MiB the windows hold 32,768 bins (128 bytes each): [0, 8.39] against [8.001, 8.004] at
    the default limit (the lower bound's window does not fit); at 16 MiB [7.92, 8.02]."""
    sigma, q, steps, delta = 300.0, 0.5, 10**6, 1e-5
    small = create("pld", memory_limit=memory_limit)
    small.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    default = create("pld")
    default.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        bounds = small.get_epsilon_bounds(delta)
        fast = small.epsilon_upper_fast(delta)
        reference = default.get_epsilon_bounds(delta)
    assert bounds.lower <= reference.lower <= reference.upper <= bounds.upper < cap
    assert reference.lower <= fast < cap
    assert bounds.lower <= _rdp_epsilon(sigma, q, steps, delta)


@pytest.mark.slow
def test_epsilon_upper_fast_answers_a_billion_steps():
    """10^9 steps at q = 0.5, sigma 8300 (what calibrating target 8 visits): the one-grid bound
    needed 33 million window bins at the accountant's own grid and raised NumericalError,
    which stopped find_noise_multiplier after minutes.  It now coarsens within the budget: a
    valid upper bound, at least the certified lower bound of the full query."""
    acc = create("pld")
    acc.step(noise_multiplier=8300.0, sample_rate=0.5, count=10**9)
    fast = acc.epsilon_upper_fast(1e-5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        bounds = acc.get_epsilon_bounds(1e-5)
    assert bounds.lower <= fast < 1.05 * bounds.upper


def _one_step_exact_epsilon(sigma, q, delta):
    """Exact epsilon(delta) of one Poisson-subsampled Gaussian step (add/remove), from the
    closed form of its remove direction with scipy's ndtr (the add direction's loss is at most
    -log(1 - q), below the answers checked here, so its delta is 0 there):
    delta(eps) = q S(x - 1/sigma) - (e^eps - 1 + q) S(x), S the standard normal survival
    function, x = sigma log((e^eps - 1 + q) / q) + 1 / (2 sigma)."""
    from scipy.optimize import brentq
    from scipy.special import log_ndtr

    def log_delta(eps):     # in log space: log(q S(x - 1/sigma)) + log1p(-ratio)
        c = math.expm1(eps) + q
        x = sigma * math.log(c / q) + 1 / (2 * sigma)
        first = math.log(q) + log_ndtr(-(x - 1 / sigma))
        return first + math.log1p(-math.exp(math.log(c) + log_ndtr(-x) - first))
    return brentq(lambda e: log_delta(e) - math.log(delta), 0.1, 200.0, xtol=1e-12)


@pytest.mark.parametrize("delta", [1e-30, 1e-60])
def test_a_delta_far_below_the_old_loss_range_floor_is_certified(delta):
    """The steps' grids left out 1e-24 of each tail at least, which moved about 3e-25 to loss
    +inf after 10^4 steps of q = 0.01, sigma = 1: every delta below that had the upper bound
    inf.  The range now reaches 1e-300.  One step brackets its exact epsilon; 10^4 steps give
    a certified gap within the tolerance, below dp_accounting's RDP epsilon (an independent
    upper bound on the truth: the lower bound must not exceed it)."""
    one = create("pld")
    one.step(noise_multiplier=1.0, sample_rate=0.01)
    bounds = one.get_epsilon_bounds(delta)
    exact = _one_step_exact_epsilon(1.0, 0.01, delta)
    assert bounds.lower <= exact * (1 + 1e-9) and exact <= bounds.upper * (1 + 1e-9)
    assert bounds.upper <= exact * 1.01
    many = create("pld")
    many.step(noise_multiplier=1.0, sample_rate=0.01, count=10_000)
    bounds = many.get_epsilon_bounds(delta)
    assert math.isfinite(bounds.upper) and bounds.upper - bounds.lower <= 1e-3 * bounds.upper
    assert bounds.lower <= _rdp_epsilon(1.0, 0.01, 10_000, delta)
