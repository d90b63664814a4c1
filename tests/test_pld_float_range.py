"""The PLD engine and the accountants' grid-step option at the edges of the float range: every
such input answers or refuses with a ParameterError or NumericalError, never a bare
OverflowError or an overflow deep in numpy (found by a hostile sweep of the ``swap`` and
``checkin`` accountants)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from dpplugins.accountants import create
from dpplugins.errors import MAX_GRID_STEP, NumericalError, ParameterError
from dpplugins.events import GaussianEvent, PoissonSampledEvent, SwapEvent
from dpplugins.pld.compose import _frequency_zero_error, compose_grid_pmfs
from dpplugins.pld.grid import GridPMF, pessimistic_from_bins


def test_a_tilted_composition_whose_relative_error_overflows_refuses():
    """``exp(rel_sum) - 1`` of a tilted composition raised an OverflowError from
    ``math.expm1`` (10^15 epochs of ``swap`` at sigma = 300); the level is now refused with a
    NumericalError, which the engine's levels catch (they fall back to the untilted
    composition).  Here: a two-atom step composed 10^15 times, tilted by 2000 -- its
    relative-error exponent is about 1336."""
    pmf = np.zeros(1001)
    pmf[0], pmf[-1] = 1e-18, 1.0 - 1e-18
    step = GridPMF(1e-3, -1000, pmf, 0.0, 0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(NumericalError, match="relative error bound"):
            compose_grid_pmfs([(step, 10**15)], tilt=2000.0)
        # below the float range it still composes, and says how loose it is
        fine = compose_grid_pmfs([(step, 10**15)], tilt=1000.0)
    assert 1e290 < fine.rel_error < math.inf


def test_frequency_zero_floor_beyond_the_float_range_is_inf():
    """The frequency-0 floor ``exp(sum k log m) * ratio`` overflowed ``math.exp`` when the
    masses' sum is above 1 and the count large; it is now ``inf`` (a floor that refuses every
    delta), and the ordinary case is unchanged (checked against the closed form: one
    component of total mass m, eta = c u log2(N) m)."""
    heavy = GridPMF(1e-2, 0, np.array([0.6, 0.6]), 0.0, 0.0)   # total mass 1.2
    assert _frequency_zero_error([(heavy, 10**4)], 1e-16, 10.0) == math.inf
    light = GridPMF(1e-2, 0, np.array([0.25, 0.25]), 0.0, 0.0)
    value = _frequency_zero_error([(light, 3)], 1e-16, 10.0)
    from dpplugins.pld.compose import _C_FFT
    eta = _C_FFT * 1e-16 * 10.0 * 0.5
    assert value == pytest.approx((0.5 + eta) ** 3 * 3 * eta / (0.5 + eta), rel=1e-12)


def test_pessimistic_construction_keeps_masses_at_most_one_at_huge_grid_steps():
    """The connect-the-dots construction scales every mass up by ``1 + u (max |eps| + 16)``;
    at a grid step of 1e300 that factor was 1e284 (masses far above 1, and the FFT
    overflowed).  Beyond |eps| = 750, e^eps is 0 or inf in double precision and the rounding
    it covers does not arise, so the factor is capped there: masses stay within the
    construction's relative allowance of the bins' total."""
    from dpplugins.mechanisms.bins import LossBins

    for h in (1e-2, 1.0, 1e3, 1e300):
        # losses in (-2h, -h] (Q only), (-h, 0] (both) and (0, inf) (P only)
        bins = LossBins(h=h, lo=-2, hi=0, p=np.array([0.0, 0.5]), q=np.array([0.5, 0.5]),
                        p_below=0.0, q_below=0.0, p_above=0.5, q_above=0.0, p_inf=0.0)
        pmf = pessimistic_from_bins(bins)
        total = float(np.sum(pmf.pmf)) + pmf.inf_mass
        assert np.all(np.isfinite(pmf.pmf)) and 1.0 <= total <= 1.0 + 1e-9


@pytest.mark.parametrize("name", ["pld", "fdp", "checkin", "shuffle", "swap"])
def test_accountant_grid_step_option_is_at_most_one(name):
    """``value_discretization_interval`` above ``MAX_GRID_STEP`` (1) is refused at creation,
    naming the range; at 1e300 it gave RuntimeWarnings (overflow in numpy) and, for ``swap``,
    an OverflowError relabelled as a size problem."""
    assert MAX_GRID_STEP == 1.0
    for bad in (1.0000001, 5.0, 1e300):
        with pytest.raises(ParameterError, match=r"value_discretization_interval=.* \(0, 1\]"):
            create(name, value_discretization_interval=bad)
    assert create(name, value_discretization_interval=1.0).value_discretization_interval == 1.0


@pytest.mark.slow
def test_swap_with_10_to_the_15_epochs_answers():
    """10^15 epochs of ``swap`` (n = 100, sigma = 300): ``get_delta(1.0)`` raised a
    NumericalError saying a size was beyond the float range (an OverflowError of the tilted
    composition, relabelled).  It now answers; the upper bound is at least the lower one and
    the epsilon at the delta it certifies is consistent with it."""
    acc = create("swap").compose(SwapEvent(100, 10**15, GaussianEvent(300.0)))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        lower, upper = acc.get_delta_bounds(1.0)
        assert 0.0 <= lower <= upper <= 1.0
        eps_lower, eps_upper = acc.get_epsilon_bounds(1e-5)
    assert 0.0 <= eps_lower <= eps_upper < math.inf


def test_poisson_pld_query_stays_finite_at_the_largest_grid_step():
    """The largest accepted grid step still answers (a loose but certified bound), with no
    numpy warning; on randomized response (replace-one) its delta bounds hold the exact
    10-fold composition, enumerated over the binomial count of flipped reports (conftest)."""
    from conftest import rr_composed_delta_exact
    from dpplugins.events import RandomizedResponseEvent

    acc = create("pld", value_discretization_interval=MAX_GRID_STEP)
    acc.compose(PoissonSampledEvent(0.01, GaussianEvent(1.0)), 10)
    rr = create("pld", value_discretization_interval=MAX_GRID_STEP, neighbouring="replace_one")
    rr.compose(RandomizedResponseEvent(0.7, 2), 10)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        lower, upper = acc.get_epsilon_bounds(1e-5)
        for eps in (0.0, 1.0, 3.0, 6.5):
            exact = rr_composed_delta_exact(eps, 0.7, 10)
            bounds = rr.get_delta_bounds(eps)
            assert bounds.lower <= exact <= bounds.upper, (eps, bounds, exact)
    assert 0.0 <= lower <= upper < math.inf


def _subsampled_gaussian_remove_epsilon(q: float, sigma: float, delta: float) -> float:
    """The remove direction's exact epsilon of one Poisson-subsampled Gaussian step (80
    digits): delta(eps) = P(x > x_eps) - e^eps Q(x > x_eps) with the loss threshold x_eps =
    1/2 + sigma^2 log((e^eps - 1 + q) / q), P = (1 - q) N(0, s^2) + q N(1, s^2), Q = N(0, s^2)."""
    import mpmath
    with mpmath.workdps(80):
        q_, s_ = mpmath.mpf(q), mpmath.mpf(sigma)

        def log_delta(eps):
            x = mpmath.mpf(1) / 2 + s_ ** 2 * mpmath.log((mpmath.exp(eps) - 1 + q_) / q_)
            p = (1 - q_) * mpmath.ncdf(-x / s_) + q_ * mpmath.ncdf(-(x - 1) / s_)
            return mpmath.log(p - mpmath.exp(eps) * mpmath.ncdf(-x / s_))
        guess = 1 / (2 * sigma ** 2) + math.sqrt(2 * math.log(1 / delta)) / sigma
        return float(mpmath.findroot(lambda e: log_delta(e) - mpmath.log(delta), guess))


@pytest.mark.parametrize("q,sigma,delta", [(1e-6, 0.05, 1e-100), (1e-6, 0.05, 1e-80),
                                           (0.1, 0.1, 1e-200), (1e-6, 0.3, 1e-300),
                                           (0.01, 1.0, 1e-5)])
def test_crossing_bounds_refuse_instead_of_hiding(q, sigma, delta):
    """From an audit of hidden crossings: one Poisson-subsampled Gaussian step at small noise
    and tiny delta had its lower bound above the upper (sigma = 0.05, q = 1e-6, delta = 1e-100:
    598.45 against 597.82, true 597.80; at 1e-80 the upper 550.5100 was below the true
    550.5112 too); min(lower, upper) reported lower = upper.  Now such a query raises
    NumericalError; every answer brackets the exact value (mpmath; the add direction is below
    the remove direction's here)."""
    exact = _subsampled_gaussian_remove_epsilon(q, sigma, delta)
    for name in ("pld", "fdp"):
        acc = create(name).compose(PoissonSampledEvent(q, GaussianEvent(sigma)))
        try:
            low, up = acc.get_epsilon_bounds(delta)
        except NumericalError:
            assert delta < 1e-50     # only the far tail may refuse
            continue
        assert low <= exact * (1 + 1e-12) and up >= exact * (1 - 1e-12)
