"""PNSGD amplification by iteration (dpplugins.amplification.iteration) against independent
references: quadrature of the defining integrals, dp-accounting's Gaussian privacy loss, brute-force
sums over positions and stopping times, and the closed-form limits of the seed's Thms 3-4."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats
from scipy.optimize import brentq

from conftest import hockey_stick_by_quadrature
from dpplugins.amplification.iteration import (PNSGDSetting, delta_fixed_position, delta_online,
                                               delta_randomly_stopped, delta_shuffled,
                                               epsilon_for_delta, gaussian_contraction_coefficient,
                                               gaussian_shuffled_radius_asymptotic,
                                               gaussian_step_divergence, hockey_stick_gaussian,
                                               laplace_contraction_coefficient,
                                               laplace_step_divergence, online_noise_schedule,
                                               privacy_profile, shuffled_limit_constant,
                                               shuffled_limit_delta, shuffled_noise_for_limit)
from dpplugins.errors import ParameterError


# -- independent references (scipy only, no dpplugins code) ------------------------------------
def theta_ref(gamma, r):
    """E_gamma(N(r,1)||N(0,1)) from scipy's normal tails (fine away from the deep tails)."""
    a = np.log(gamma) / r
    return stats.norm.sf(a - r / 2) - gamma * stats.norm.sf(a + r / 2)


def theta_complement_ref(gamma, r):
    """1 - theta as the sum of its two positive parts (accurate when theta is close to 1)."""
    a = np.log(gamma) / r
    return stats.norm.cdf(a - r / 2) + gamma * stats.norm.sf(a + r / 2)


def log_theta_by_quadrature(epsilon, r):
    """log E_gamma(N(r,1)||N(0,1)) by quadrature, rescaled at the crossing point x* so that the
    deep tail is integrated with full relative accuracy: with x = x* + u,
    theta = phi(x* - r) int_0^inf exp(-u^2/2 - (x* - r) u) (1 - e^(-r u)) du."""
    x_star = epsilon / r + r / 2
    s = x_star - r
    f = lambda u: math.exp(-u * u / 2 - s * u) * -math.expm1(-r * u)
    width = 40.0 / max(1.0, s)
    integral = integrate.quad(f, 0.0, width, epsabs=0.0, epsrel=1e-13, limit=200)[0]
    return -s * s / 2 - 0.5 * math.log(2 * math.pi) + math.log(integral)


def laplace_hockey_stick_by_quadrature(shift, scale, epsilon):
    p = lambda x: stats.laplace.pdf(x, loc=shift, scale=scale)
    q = lambda x: stats.laplace.pdf(x, loc=0.0, scale=scale)
    return hockey_stick_by_quadrature(p, q, epsilon, -60 * scale, shift + 60 * scale,
                                      breakpoints=(0.0, shift))


GAMMA_GRID = [1.0, math.exp(0.3), math.exp(1.0), math.exp(3.0), math.exp(8.0)]
R_GRID = [0.05, 0.4, 1.0, 2.5, 6.0]


# -- theta_gamma(r) ----------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", GAMMA_GRID)
@pytest.mark.parametrize("r", R_GRID)
def test_theta_against_quadrature_of_the_gaussian_pair(gamma, r):
    """theta = int (phi(x - r) - gamma phi(x))_+ dx, integrated numerically."""
    exact = hockey_stick_by_quadrature(lambda x: stats.norm.pdf(x, r, 1.0), stats.norm.pdf,
                                       math.log(gamma), -40.0, 40.0,
                                       breakpoints=(math.log(gamma) / r + r / 2,))
    ours = hockey_stick_gaussian(gamma, r)
    assert ours == pytest.approx(exact, rel=1e-8, abs=1e-14)


# (eps, r) pairs from the centre to the deep tail (theta down to ~1e-277, still a normal double)
TAIL_GRID = [(0.0, 0.01), (0.0, 0.3), (0.0, 1.0), (1.0, 0.3), (1.0, 1.0), (1.0, 4.0), (5.0, 0.3),
             (5.0, 1.0), (5.0, 4.0), (20.0, 1.0), (20.0, 4.0), (60.0, 4.0), (60.0, 15.0),
             (150.0, 4.0), (150.0, 15.0)]


@pytest.mark.parametrize("epsilon,r", TAIL_GRID)
def test_theta_tails_have_full_relative_accuracy(epsilon, r):
    reference = log_theta_by_quadrature(epsilon, r)
    ours = hockey_stick_gaussian(math.exp(epsilon), r)
    assert math.log(ours) == pytest.approx(reference, rel=1e-10)


@pytest.mark.anchor
def test_theta_against_dp_accounting_gaussian_privacy_loss():
    """dp-accounting's closed-form Gaussian hockey-stick divergence and its (pessimistic,
    optimistic) Gaussian PLDs bracket theta on a grid of gamma and r."""
    pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pld
    from dp_accounting.pld import privacy_loss_mechanism as plm

    epsilons = np.log(GAMMA_GRID)
    for r in [0.2, 1.0, 3.0]:
        ours = hockey_stick_gaussian(np.exp(epsilons), r)
        closed = plm.GaussianPrivacyLoss(standard_deviation=1.0, sensitivity=r) \
            .get_delta_for_epsilon(epsilons)
        np.testing.assert_allclose(ours, closed, rtol=1e-7, atol=1e-13)
        upper = pld.from_gaussian_mechanism(1.0 / r, pessimistic_estimate=True,
                                            value_discretization_interval=1e-3)
        lower = pld.from_gaussian_mechanism(1.0 / r, pessimistic_estimate=False,
                                            value_discretization_interval=1e-3,
                                            use_connect_dots=False)
        his = np.asarray(upper.get_delta_for_epsilon(list(epsilons)))
        los = np.asarray(lower.get_delta_for_epsilon(list(epsilons)))
        assert np.all(los - 1e-12 <= ours) and np.all(ours <= his + 1e-12)
        assert np.all(his - los <= 3e-2 * ours + 1e-12)


def test_theta_closed_forms_at_special_points():
    r = np.array([0.1, 1.0, 3.0])
    # gamma = 1: total variation of N(r,1), N(0,1) is 2 Phi(r/2) - 1
    np.testing.assert_allclose(hockey_stick_gaussian(1.0, r), 2 * stats.norm.cdf(r / 2) - 1,
                               rtol=1e-13)
    assert hockey_stick_gaussian(0.25, 0.0) == pytest.approx(0.75)  # (1 - gamma)_+
    assert hockey_stick_gaussian(3.0, 0.0) == 0.0
    assert hockey_stick_gaussian(3.0, np.inf) == 1.0
    assert hockey_stick_gaussian(np.inf, 2.0) == 0.0


@settings(max_examples=60, deadline=None)
@given(eps=st.floats(-5, 30), r=st.floats(1e-3, 40), d_eps=st.floats(1e-3, 2),
       d_r=st.floats(1e-3, 2))
def test_theta_is_a_valid_privacy_curve(eps, r, d_eps, d_r):
    g = math.exp(eps)
    value = hockey_stick_gaussian(g, r)
    assert max(0.0, 1 - g) - 1e-15 <= value <= 1.0
    assert hockey_stick_gaussian(g * math.exp(d_eps), r) <= value + 1e-15  # decreasing in gamma
    assert hockey_stick_gaussian(g, r + d_r) >= value - 1e-15  # increasing in r


# -- A and B: units and the Laplace closed forms ------------------------------------------------
@pytest.mark.parametrize("eps", [0.0, 0.5, 2.0])
def test_gaussian_a_and_b_are_hockey_sticks_of_one_noisy_step(eps):
    """Direct check of the units: the iterate gets N(., (eta sigma)^2); neighbouring records move
    the mean by 2 eta L, two points of K (after an M-Lipschitz gradient step) by M D_K."""
    L, sigma, eta, D, M = 0.7, 1.3, 0.2, 0.5, 0.9
    std = eta * sigma
    a_exact = hockey_stick_by_quadrature(lambda x: stats.norm.pdf(x, 2 * eta * L, std),
                                         lambda x: stats.norm.pdf(x, 0.0, std), eps, -30 * std,
                                         2 * eta * L + 30 * std)
    b_exact = hockey_stick_by_quadrature(lambda x: stats.norm.pdf(x, M * D, std),
                                         lambda x: stats.norm.pdf(x, 0.0, std), eps, -30 * std,
                                         M * D + 30 * std)
    assert gaussian_step_divergence(eps, L, sigma) == pytest.approx(a_exact, rel=1e-7, abs=1e-13)
    assert gaussian_contraction_coefficient(eps, D, eta, sigma, M) == pytest.approx(
        b_exact, rel=1e-7, abs=1e-13)


@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0, 2.5])
def test_laplace_a_and_b_against_direct_integration(eps):
    """Seed eq. 1.5 against the integral of the two Laplace densities of one step
    (iterate noise eta * Laplace(v): shifts 2 eta L and M (b - a))."""
    L, v, eta, length, M = 0.8, 0.6, 0.5, 1.2, 1.0
    a_exact = laplace_hockey_stick_by_quadrature(2 * eta * L, eta * v, eps)
    b_exact = laplace_hockey_stick_by_quadrature(M * length, eta * v, eps)
    assert laplace_step_divergence(eps, L, v) == pytest.approx(a_exact, rel=1e-8, abs=1e-12)
    assert laplace_contraction_coefficient(eps, length, eta, v, M) == pytest.approx(
        b_exact, rel=1e-8, abs=1e-12)


def test_laplace_shuffled_bound_against_integrated_a_and_b():
    """The shuffled Laplace profile equals A (1 - B^n) / (n (1 - B)) with A, B integrated."""
    L, v, eta, length, n = 0.8, 0.6, 0.5, 1.2, 50
    setting = PNSGDSetting(lipschitz=L, diameter=length, learning_rate=eta, noise="laplace")
    eps = np.array([0.0, 0.4, 1.1])
    ours = delta_shuffled(eps, setting, v, n)
    for e, value in zip(eps, ours):
        a = laplace_hockey_stick_by_quadrature(2 * eta * L, eta * v, e)
        b = laplace_hockey_stick_by_quadrature(length, eta * v, e)
        assert value == pytest.approx(a * (1 - b ** n) / (n * (1 - b)), rel=1e-7)


# -- the variants --------------------------------------------------------------------------------
SETTINGS = [
    PNSGDSetting(lipschitz=1.0, diameter=3.0, learning_rate=0.4),
    PNSGDSetting(lipschitz=0.5, diameter=1.0, learning_rate=0.1, contraction=0.8),
    PNSGDSetting(lipschitz=1.0, diameter=2.0, learning_rate=0.5, noise="laplace"),
]


def terms_ref(setting, eps, scales):
    """(A_t, B_t, 1 - B_t) per step from scipy (independent of the module)."""
    g = np.exp(eps)
    scales = np.asarray(scales, dtype=float)
    shift = setting.contraction * setting.diameter / setting.learning_rate
    if setting.noise == "gaussian":
        return (theta_ref(g, 2 * setting.lipschitz / scales), theta_ref(g, shift / scales),
                theta_complement_ref(g, shift / scales))
    a = np.maximum(0.0, 1 - np.exp(eps / 2 - setting.lipschitz / scales))
    comp = np.exp(np.minimum(eps / 2 - shift / (2 * scales), 0.0))
    return a, 1 - comp, comp


@pytest.mark.parametrize("setting", SETTINGS)
def test_variant_ordering_for_every_epsilon(setting):
    """A B^(n-1) (best position) <= shuffled = randomly stopped (proof) <= A/(n(1-B)) (as stated),
    and shuffled <= A = worst position = online with constant noise."""
    n, scale = 200, 1.5
    eps = np.linspace(0.0, 6.0, 61)
    best = delta_fixed_position(eps, setting, scale, n, position=1)
    worst = delta_fixed_position(eps, setting, scale, n, position=n)
    shuffled = delta_shuffled(eps, setting, scale, n)
    stopped = delta_randomly_stopped(eps, setting, scale, n)
    stated = delta_randomly_stopped(eps, setting, scale, n, as_stated=True)
    online = delta_online(eps, setting, scale, n)
    tol = 1e-14
    assert np.all(best <= shuffled * (1 + tol))
    np.testing.assert_allclose(shuffled, stopped, rtol=1e-12, atol=0)
    assert np.all(shuffled <= stated * (1 + tol))
    assert np.all(shuffled <= worst * (1 + tol))
    np.testing.assert_allclose(online, worst, rtol=1e-12)
    a, b, comp = terms_ref(setting, eps[:, None], [scale])
    a, b, comp = a[:, 0], b[:, 0], comp[:, 0]
    np.testing.assert_allclose(worst, a, rtol=1e-10, atol=1e-300)
    np.testing.assert_allclose(best, a * b ** (n - 1), rtol=1e-9, atol=1e-300)
    with np.errstate(divide="ignore"):  # Laplace: B = 0 (comp = 1) for small eps
        geometric = -np.expm1(n * np.log1p(-comp)) / (n * comp)
    np.testing.assert_allclose(shuffled, a * geometric, rtol=1e-9, atol=1e-300)


@pytest.mark.parametrize("setting", SETTINGS)
def test_per_step_schedules_against_brute_force_sums(setting):
    """Run-length formulas vs. the defining sums over positions i and stopping times T."""
    rng = np.random.default_rng(7)
    n = 14
    counts = np.array([3, 1, 4, 2, 4])
    scales = rng.uniform(0.6, 3.0, size=counts.size)
    per_step = np.repeat(scales, counts)
    for eps in [0.0, 0.7, 2.0]:
        a, b, _ = terms_ref(setting, eps, per_step)
        tail = lambda i, stop: float(np.prod(b[i + 1:stop + 1]))  # prod_{i < t <= stop} B_t
        position = [a[i] * tail(i, n - 1) for i in range(n)]
        stopped = max(sum(a[i] * tail(i, T) for T in range(i, n)) / n for i in range(n))
        kwargs = dict(counts=counts)
        assert delta_shuffled(eps, setting, scales, n, **kwargs) == pytest.approx(
            np.mean(position), rel=1e-11)
        assert delta_randomly_stopped(eps, setting, scales, n, **kwargs) == pytest.approx(
            stopped, rel=1e-11)
        assert delta_online(eps, setting, scales, n, **kwargs) == pytest.approx(
            max(position), rel=1e-11)
        for i in [1, 4, 9, n]:
            assert delta_online(eps, setting, scales, n, position=i, **kwargs) == pytest.approx(
                position[i - 1], rel=1e-11)
        # a partial shuffled pass (first 8 steps of a permutation of all n records)
        partial = [a[i] * tail(i, 7) for i in range(8)]
        assert delta_shuffled(eps, setting, scales[:3], n, counts=[3, 1, 4]) == pytest.approx(
            sum(partial) / n, rel=1e-11)


def test_geometric_sum_is_stable_when_b_is_nearly_one():
    """Huge n with almost no contraction per step: (1 - B^n)/(1 - B) must not cancel."""
    setting = PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=1.0)
    sigma, n, eps = 0.1, 10 ** 12, 0.5
    a = theta_ref(math.exp(eps), 2 / sigma)
    comp = theta_complement_ref(math.exp(eps), 1 / sigma)
    expected = a * -math.expm1(n * math.log1p(-comp)) / (n * comp)
    assert delta_shuffled(eps, setting, sigma, n) == pytest.approx(expected, rel=1e-9)


# -- epsilon for delta -----------------------------------------------------------------------------
@pytest.mark.parametrize("delta", [1e-3, 1e-6, 1e-10])
def test_epsilon_for_delta_is_the_root_rounded_up(delta):
    setting = SETTINGS[0]
    n, sigma = 500, 2.0
    profile = privacy_profile("shuffled", setting, sigma, n)

    def ref(eps):
        a, _, comp = terms_ref(setting, eps, [sigma])
        return float(a[0] * -np.expm1(n * np.log1p(-comp[0])) / (n * comp[0]))

    root = brentq(lambda e: ref(e) - delta, 0.0, 20.0, xtol=1e-14, rtol=1e-14)
    eps = epsilon_for_delta(profile, delta)
    assert eps >= root * (1 - 1e-12)
    assert eps == pytest.approx(root, rel=1e-9)
    assert profile(np.array([eps]))[0] <= delta


def test_epsilon_for_delta_zero_when_profile_already_small():
    setting = SETTINGS[0]
    profile = privacy_profile("shuffled", setting, 50.0, 100)
    assert epsilon_for_delta(profile, 0.5) == 0.0


# -- noise-decay schedules (seed Thms 3-4, online Sec. 6) ------------------------------------------
def test_shuffled_limit_constant_inverts_the_limit():
    for target in [0.9, 0.5, 1e-2, 1e-6]:
        x = shuffled_limit_constant(target)
        assert -math.expm1(-x) / x == pytest.approx(target, rel=1e-12)
        assert shuffled_limit_delta(x) == pytest.approx(target, rel=1e-12)


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_shuffled_schedule_delta_tends_to_the_target(noise):
    """Thms 3-4: with sigma(n) (v(n)) from the helper, delta_n of (3.1) -> (1 - e^-x)/x."""
    setting = PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=0.2, noise=noise)
    eps, target = 1.0, 0.3
    errors = []
    for n in [10 ** 2, 10 ** 3, 10 ** 4, 10 ** 6, 10 ** 9, 10 ** 30, 10 ** 100]:
        scale = shuffled_noise_for_limit(n, setting=setting, epsilon=eps, target_delta=target)
        a, _, comp = terms_ref(setting, eps, [scale])
        delta_n = a[0] * -math.expm1(n * math.log1p(-comp[0])) / (n * comp[0])
        errors.append(abs(delta_n - target))
        assert delta_shuffled(eps, setting, scale, n) == pytest.approx(delta_n, rel=1e-9)
        if noise == "laplace":  # the closed form v(n) = M(b-a) / (2 eta log(n/c))
            c = shuffled_limit_constant(target) * math.exp(-eps / 2)
            assert scale == pytest.approx(1.0 / (2 * 0.2 * math.log(n / c)), rel=1e-12)
    assert all(later < earlier for earlier, later in zip(errors, errors[1:]))
    assert errors[-1] < 1e-5  # A_n -> 1 only as fast as the noise vanishes (~ 1/sqrt(log n))


def test_gaussian_schedule_approaches_its_closed_form_rate():
    """r_n^2 - (8 log n - 4 log log n - 8 log(c sqrt(pi))) -> 0 (slowly, like log log n / log n)."""
    setting = PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=1.0)
    eps, target = 0.5, 0.2
    gaps = []
    for n in [10 ** 3, 10 ** 10, 10 ** 50, 10 ** 150, 10 ** 300]:
        r = 1.0 / shuffled_noise_for_limit(n, setting=setting, epsilon=eps, target_delta=target)
        gaps.append(abs(r ** 2 - gaussian_shuffled_radius_asymptotic(n, epsilon=eps,
                                                                     target_delta=target) ** 2))
    assert all(later < earlier for earlier, later in zip(gaps, gaps[1:]))
    assert gaps[-1] < 0.03


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_online_schedule_delta_tends_to_the_target(noise):
    """Eq. 6.1 with the helper's sigma_t (exponent 2): delta_1(n) = A_1 prod_{t>1} B_t decreases to
    the target as the stream grows."""
    setting = PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=0.3, noise=noise)
    eps, target = 1.0, 0.2
    sigmas = online_noise_schedule(100_000, setting=setting, epsilon=eps, target_delta=target,
                                   exponent=2.0)
    assert np.all(np.diff(sigmas) < 0)  # decaying noise
    a, _, comp = terms_ref(setting, eps, sigmas)
    log_b = np.log1p(-comp)
    values = [a[0] * math.exp(float(np.sum(log_b[1:n]))) for n in [10, 100, 1000, 10 ** 4, 10 ** 5]]
    assert all(later <= earlier for earlier, later in zip(values, values[1:]))
    assert values[-1] >= target * (1 - 1e-9)
    assert values[-1] == pytest.approx(target, rel=1e-4)


def test_online_schedule_exponent_one_has_no_positive_limit():
    setting = PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=0.3)
    with pytest.raises(ParameterError, match="exponent"):
        online_noise_schedule(10, setting=setting, epsilon=1.0, target_delta=0.2, exponent=1.0)


def test_online_schedule_reports_unreachable_target_for_late_positions():
    setting = PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=0.3)
    with pytest.raises(ParameterError, match="target_delta"):
        online_noise_schedule(10, setting=setting, epsilon=1.0, target_delta=1e-12,
                              exponent=2.0, position=50)


# -- bad input -------------------------------------------------------------------------------------
S = SETTINGS[0]


@pytest.mark.parametrize("call,name", [
    (lambda: hockey_stick_gaussian(0.0, 1.0), "gamma"),
    (lambda: hockey_stick_gaussian(math.nan, 1.0), "gamma"),
    (lambda: hockey_stick_gaussian(2.0, -1.0), "r"),
    (lambda: gaussian_step_divergence(-0.1, 1.0, 1.0), "epsilon"),
    (lambda: gaussian_step_divergence(0.1, 0.0, 1.0), "lipschitz"),
    (lambda: gaussian_step_divergence(0.1, 1.0, 0.0), "sigma"),
    (lambda: gaussian_contraction_coefficient(0.1, -1.0, 1.0, 1.0), "diameter"),
    (lambda: laplace_contraction_coefficient(0.1, 1.0, math.inf, 1.0), "learning_rate"),
    (lambda: PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=1.0, noise="cauchy"),
     "noise"),
    (lambda: PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=1.0, contraction=0.0),
     "contraction"),
    (lambda: delta_shuffled(1.0, S, 1.0, 0), "dataset_size"),
    (lambda: delta_shuffled(1.0, S, [1.0, 2.0], 10, counts=[6, 6]), "counts"),
    (lambda: delta_shuffled(1.0, S, [1.0, 2.0], 10, counts=[6]), "counts"),
    (lambda: delta_randomly_stopped(1.0, S, 1.0, 10, counts=[5]), "counts"),
    (lambda: delta_fixed_position(1.0, S, 1.0, 10, position=11), "position"),
    (lambda: privacy_profile("sorted", S, 1.0, 10), "variant"),
    (lambda: privacy_profile("fixed_position", S, 1.0, 10), "position"),
    (lambda: epsilon_for_delta(privacy_profile("shuffled", S, 1.0, 10), 1.0), "delta"),
    (lambda: shuffled_noise_for_limit(2, setting=S, epsilon=1.0, target_delta=0.01),
     "dataset_size"),
    (lambda: shuffled_noise_for_limit(100, setting=S, epsilon=1.0, target_delta=1.0),
     "target_delta"),
])
def test_bad_input_names_the_parameter(call, name):
    with pytest.raises(ParameterError, match=name):
        call()


# -- the profiles are never below their exact values (floating point rounded outward) -----------
def _exact_per_position(noise, eps, L, D, eta, scales, counts):
    """A_i prod_{t>i} B_t for every position i, in 60-digit mpmath (independent of our code)."""
    import mpmath as mp
    mp.mp.dps = 60

    def theta(r):
        a = mp.mpf(eps) / r
        return mp.ncdf(r / 2 - a) - mp.e ** mp.mpf(eps) * mp.ncdf(-a - r / 2)

    def laplace(shift):
        return max(mp.mpf(0), -mp.expm1(mp.mpf(eps) / 2 - shift / 2))

    a_t, b_t = [], []
    for scale, count in zip(scales, counts):
        s = mp.mpf(float(scale))
        rule = theta if noise == "gaussian" else laplace
        a_t += [rule(2 * mp.mpf(L) / s)] * int(count)
        b_t += [rule(mp.mpf(D) / (mp.mpf(eta) * s))] * int(count)
    later, out = mp.mpf(1), []
    for i in range(len(a_t) - 1, -1, -1):
        out.append(a_t[i] * later)
        later *= b_t[i]
    return out[::-1]


# first three: a subnormal 1 - B (1e-12 below), theta as a near-cancelling difference of two tail
# masses (7e-12 below), eps = 0 (3e-14 below); the last a Laplace exponent eps/2 - L/v exactly
# -2e-18 that rounds to 0 (A was 0)
OUTWARD_CASES = [
    ("gaussian", 0.0, 0.25593052723355925, 3.880597775679756, 0.10816048773412662,
     [0.47458799691613424], [129]),
    ("gaussian", 0.21149735019758117, 0.5480356647659526, 1.2741572245398474,
     0.15411623940103203, [62.4292637947708], [400]),
    ("gaussian", 0.0, 0.9995203193841143, 0.7086915421096945, 0.17395098970283307,
     [59.28604351638901], [300]),
    ("laplace", 0.18098541408979257, 1.6452134544805177, 1.0, 0.5, [18.180619280891612], [50]),
]


@pytest.mark.parametrize("noise,eps,L,D,eta,scales,counts", OUTWARD_CASES)
def test_profiles_are_never_below_the_exact_product_formulas(noise, eps, L, D, eta, scales,
                                                             counts):
    import mpmath as mp
    setting = PNSGDSetting(lipschitz=L, diameter=D, learning_rate=eta, noise=noise)
    n = int(sum(counts))
    per_position = _exact_per_position(noise, eps, L, D, eta, scales, counts)
    exact = {"shuffled": mp.fsum(per_position) / n, "online": max(per_position),
             "fixed_position": per_position[0]}
    for variant, value in exact.items():
        extra = {"position": 1} if variant == "fixed_position" else {}
        ours = privacy_profile(variant, setting, np.array(scales), n, counts=counts, **extra)(
            np.array([eps]))[0]
        assert mp.mpf(float(ours)) >= min(value, 1), variant
        assert float(ours) <= float(value) * (1 + 1e-9) + 1e-12, variant   # and still tight


def test_profiles_are_never_below_exact_values_on_a_random_sweep():
    """Random settings, noise schedules and epsilons (eps = 0 included), every variant against
    the 60-digit product formulas; an evaluation that rounds down anywhere fails here."""
    import mpmath as mp
    rng = np.random.default_rng(20261207)
    for _ in range(60):
        noise = str(rng.choice(["gaussian", "laplace"]))
        eps = float(rng.choice([0.0, 10 ** rng.uniform(-6, 2.5)]))
        L, D = float(10 ** rng.uniform(-1, 1)), float(10 ** rng.uniform(-1, 1))
        eta = float(10 ** rng.uniform(-2, 0))
        counts = [int(c) for c in rng.integers(1, 30, size=int(rng.integers(1, 4)))]
        scales = 10 ** rng.uniform(-2, 2, size=len(counts))
        setting = PNSGDSetting(lipschitz=L, diameter=D, learning_rate=eta, noise=noise)
        n = sum(counts)
        per_position = _exact_per_position(noise, eps, L, D, eta, scales, counts)
        exact = {"shuffled": mp.fsum(per_position) / n, "online": max(per_position),
                 "fixed_position": per_position[0]}
        for variant, value in exact.items():
            extra = {"position": 1} if variant == "fixed_position" else {}
            ours = privacy_profile(variant, setting, scales, n, counts=counts, **extra)(
                np.array([eps]))[0]
            assert mp.mpf(float(ours)) >= min(value, 1), (variant, noise, eps, L, D, eta,
                                                          list(scales), counts)
