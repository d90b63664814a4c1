"""Inputs the validators accept, from a hostile sweep of ``fdp``, the check-in and swap theorems,
PNSGD and calibration: each used to crash, answer NaN, leak a numpy warning or answer a hair
below the exact value; each expected value here is a closed form or a 50-digit mpmath value."""

import math
import warnings

import mpmath as mp
import numpy as np
import pytest

from dpplugins import fdp
from dpplugins.accountants import create
from dpplugins.amplification import checkin, swap
from dpplugins.calibration import find_noise_multiplier
from dpplugins.errors import ParameterError


def _subsampled_gaussian_delta_exact(eps, mu, p):
    """max of H(mix || N) and H(N || mix), mix = p N(mu, 1) + (1 - p) N(0, 1), by the
    likelihood-ratio threshold, at 50 digits (Zhu, Dong, Wang 2022, Thm 11)."""
    mp.mp.dps = 50
    eps, mu, p = mp.mpf(eps), mp.mpf(mu), mp.mpf(p)
    ncdf = lambda x: mp.ncdf(x)  # noqa: E731

    def gauss(e):   # Balle & Wang 2018, Thm 8
        return ncdf(-e / mu + mu / 2) - mp.e ** e * ncdf(-e / mu - mu / 2)
    e1 = mp.log(1 + (mp.e ** eps - 1) / p)
    first = p * gauss(e1)
    second = mp.mpf(0)
    if 1 - mp.e ** -eps < p:
        e2 = -mp.log(1 - (1 - mp.e ** -eps) / p)
        second = p * mp.e ** (eps - e2) * gauss(e2)
    return max(first, second)


@pytest.mark.parametrize("eps,mu,p", [(2.1e-7, 0.277, 7.0e-8), (1e-9, 1.0, 1e-3),
                                      (3e-6, 0.5, 1e-5), (0.5, 1.0, 0.01)])
def test_subsampled_gaussian_profile_is_not_below_the_exact_value(eps, mu, p):
    # 1 - (1 - p) e^-eps cancelled: 1.7552726268e-15 at the first point, exact 1.7552726357e-15
    ours = float(fdp.subsampled_gaussian_delta(eps, mu, p))
    exact = float(_subsampled_gaussian_delta_exact(eps, mu, p))
    assert ours == pytest.approx(exact, rel=1e-10)
    assert ours >= exact * (1 - 1e-11)


@pytest.mark.parametrize("eps,mu,p", [
    (8.054035809991874e-07, 0.0020174615686338123, 1.4119216039330915e-05),
    (5.542937053377287e-06, 0.001680442775070885, 0.00011458536880903671),
    (6.08594461120715e-07, 0.020138279328567224, 6.085941497254237e-07),   # near -log(1 - p)
    (0.0003551523704414771, 0.0240883846029711, 0.00031789340671300244),
    (2.1e-7, 0.277, 7.0e-8), (0.5, 1.0, 0.01), (3.0, 5.0, 0.3), (0.0, 1.0, 1.0),
    (40.0, 30.0, 1e-300), (1e-12, 2.0, 5e-324)])
def test_subsampled_gaussian_upper_profile_is_never_below_the_exact_value(eps, mu, p):
    # the plain closed form was a relative 9.4e-10 below the exact value at the first point
    # (the Gaussian profile's log-space difference cancels at small mu), and the fixed-size-batch
    # PLD took it as an upper bound
    exact = _subsampled_gaussian_delta_exact(eps, mu, p)
    upper = float(fdp.subsampled_gaussian_delta_upper(eps, mu, p))
    assert mp.mpf(upper) >= exact
    assert upper <= exact * (1 + 1e-7) + 1e-300


def test_subsampled_gaussian_upper_profile_sweep_against_50_digits():
    rng = np.random.default_rng(7)
    for _ in range(150):
        mu, p = 10 ** rng.uniform(-3, 1.5), 10 ** rng.uniform(-8, 0)
        eps = [10 ** rng.uniform(-9, 1.5), -math.log1p(-p) * (1 + rng.uniform(-1e-6, 1e-6))]
        upper = fdp.subsampled_gaussian_delta_upper(np.array(eps), mu, p)
        for e, u in zip(eps, upper):
            exact = _subsampled_gaussian_delta_exact(e, mu, p)
            assert mp.mpf(float(u)) >= exact, (e, mu, p)
            assert float(u) <= exact * (1 + 1e-6) + 1e-300, (e, mu, p)


def test_subsampled_gaussian_upper_profile_edges():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = fdp.subsampled_gaussian_delta_upper(np.array([0.0, 800.0, math.inf]), 3.0, 0.5)
    assert got[0] >= float(fdp.subsampled_gaussian_delta(0.0, 3.0, 0.5))
    assert got[1] <= 1e-299 and got[2] <= 1e-299
    assert np.all(fdp.subsampled_gaussian_delta_upper([0.0, 1.0], 0.0, 0.5) == 0.0)
    with pytest.raises(ParameterError, match="epsilon"):
        fdp.subsampled_gaussian_delta_upper(-1.0, 1.0, 0.5)


def test_gdp_compose_keeps_tiny_and_huge_mus():
    assert fdp.gdp_compose([1e-200]) == 1e-200   # the square underflowed: mu 0 claimed
    assert fdp.gdp_compose([1e-200, 1e-200]) == pytest.approx(math.sqrt(2) * 1e-200, rel=1e-15)
    assert fdp.gdp_compose([1e154, 1e154]) == pytest.approx(math.sqrt(2) * 1e154, rel=1e-15)
    assert fdp.gdp_compose([3.0, 4.0]) == 5.0


def test_overflowing_inputs_answer_by_their_closed_forms():
    assert fdp.gdp_group_mu(1e-8, 10**400) == math.inf     # mu * group beyond the float range
    a = np.array([0.0, 1e-300, 0.5, 1.0])
    # e^eps alpha = inf for alpha > 0: the trade-off is max(0, e^-eps (1 - delta - alpha)) = 0
    got = fdp.epsilon_delta_tradeoff(a, 1e300, 1e-10)
    assert got[0] == 1 - 1e-10 and np.all(got[1:] == 0.0)
    assert fdp.clt_mu_poisson(1e-300, 1e-300, 0) == 0.0   # no step: 0 * inf was NaN


def test_counts_beyond_the_float_range_are_refused_by_name():
    with pytest.raises(ParameterError, match="num_slots"):
        checkin.fixed_window_epsilon(1.0, 1e-6, 10**400, 0.5)
    with pytest.raises(ParameterError, match="window"):
        checkin.sliding_window_epsilon(1.0, 1e-6, 10**400)
    with pytest.raises(ParameterError, match="'n'|n="):
        swap.epsilon(0.5, 10**400, 1e-6)
    profile = swap.gaussian_profile(300.0, 10**20)
    values = profile(np.array([0.01, 1.0]))
    assert np.asarray(values).dtype == np.float64   # was an object array beyond int64


def test_dummy_fraction_below_rounding_answers():
    # (1 - p/m)^n <= 1e-300 with n = 5, m = 1 needs p >= 1 - 1e-60, which rounds to 1
    # (log1p(-1) raised a math domain error)
    assert checkin.checkin_probability_for_dummy_fraction(5, 1, 1e-300) == 1.0


def test_pnsgd_tiny_noise_leaks_no_overflow_warning():
    acc = create("pnsgd", lipschitz=1.0, diameter=2.0, learning_rate=0.5, dataset_size=10)
    acc.step(noise_multiplier=5e-324, sample_rate=0.1, count=10)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        delta = acc.get_delta(1.0)
    assert delta == 1.0   # A = B = 1 (no amplification at all): the trivial bound


def test_sigma_tolerance_below_double_precision_is_refused():
    with pytest.raises(ParameterError, match="sigma_tolerance"):
        find_noise_multiplier(target_epsilon=1.0, delta=1e-5, sample_rate=0.01, steps=100,
                              sigma_tolerance=1e-300)


def test_tradeoff_from_a_privacy_profile_stays_below_the_exact_lines():
    """The steep line ``1 - delta - e^eps alpha`` cancels near its root: at alpha = 1.06e-15,
    eps = 34.48 the curve was a relative 8.1e-5 above the exact line, i.e. not a lower bound.
    Checked against 50-digit arithmetic over a sweep that aims at that root."""
    mp.mp.dps = 50
    rng = np.random.default_rng(9)
    for _ in range(300):
        eps = float(rng.uniform(0, 60))
        delta = float(10 ** rng.uniform(-300, -1))
        root = float((1 - mp.mpf(delta)) / mp.exp(mp.mpf(eps)))
        alpha = min(root * float(1 - 10 ** rng.uniform(-15, -1)), 1.0)
        curve = fdp.tradeoff_from_privacy_profile(lambda e, d=delta: np.full(np.shape(e), d),
                                                  alphas=[0.0, alpha, 1.0], epsilons=[eps])
        e, d, a = mp.mpf(eps), mp.mpf(delta), mp.mpf(alpha)
        exact = max(0, 1 - d - mp.exp(e) * a, mp.exp(-e) * (1 - d - a))
        assert mp.mpf(float(curve.values[1])) <= exact, (eps, delta, alpha)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        curve = fdp.tradeoff_from_privacy_profile(lambda e: np.full(np.shape(e), 1e-300),
                                                  alphas=[0.0, 0.5, 1.0], epsilons=[0.0, 800.0])
    assert np.all(np.isfinite(curve.values)) and 0.5 - 1e-15 <= curve.values[1] <= 0.5
