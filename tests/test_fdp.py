"""dpplugins.fdp against independent references: closed forms typed here from the papers,
numerical integration (scipy.integrate), brute force over tests, the PLD engine, and the numbers
printed in Bu, Dong, Long, Su (2020).

Papers: DRS = Dong, Roth, Su (2022), "Gaussian differential privacy" (arXiv:1905.02383 numbering);
BDLS = Bu, Dong, Long, Su (2020), "Deep learning with Gaussian differential privacy", HDSR.
"""

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats
from scipy.optimize import brentq

from conftest import (epsilon_from_delta_curve, gaussian_delta_exact, hockey_stick_by_quadrature,
                      rr_composed_delta_exact)
from dpplugins import fdp
from dpplugins.errors import ParameterError
from dpplugins.pld import PrivacyLossDistribution as PLD

ALPHAS = np.linspace(0.0, 1.0, 401)


# -- independent helpers ----------------------------------------------------------------------
def assert_tradeoff_function(alphas, values, tol=1e-9):
    """Non-increasing, convex, within [0, 1 - alpha] (checked here, not with our own method)."""
    alphas, values = np.asarray(alphas), np.asarray(values)
    assert np.all(values >= -tol)
    assert np.all(values <= 1 - alphas + tol)
    assert np.all(np.diff(values) <= tol)
    # convex: each vertex at most tol above the chord of its neighbours
    a0, a1, a2 = alphas[:-2], alphas[1:-1], alphas[2:]
    chord = (values[:-2] * (a2 - a1) + values[2:] * (a1 - a0)) / (a2 - a0)
    assert np.all(values[1:-1] <= chord + tol)


def gaussian_tradeoff_reference(alpha, mu):
    """G_mu by Neyman-Pearson with scipy.stats: reject N(0,1) when x > t, alpha = P(N(0,1) > t),
    type II error = P(N(mu,1) <= t) (DRS Def. 2.6)."""
    t = stats.norm.isf(alpha)
    return stats.norm.cdf(t - mu)


def inverse_by_bisection(f, alpha):
    """f^{-1}(alpha) = inf{t : f(t) <= alpha} for a non-increasing f, by bisection."""
    if f(0.0) <= alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if f(mid) <= alpha:
            hi = mid
        else:
            lo = mid
    return hi


# -- G_mu and Gaussian DP conversions ---------------------------------------------------------
@pytest.mark.parametrize("mu", [0.0, 0.3, 1.0, 4.0])
def test_gaussian_tradeoff_is_the_neyman_pearson_curve(mu):
    inner = ALPHAS[1:-1]
    assert np.allclose(fdp.gaussian_tradeoff(inner, mu), gaussian_tradeoff_reference(inner, mu),
                       rtol=1e-12, atol=1e-15)
    assert fdp.gaussian_tradeoff(0.0, mu) == 1.0 and fdp.gaussian_tradeoff(1.0, mu) == 0.0
    assert fdp.G_mu is fdp.gaussian_tradeoff


@pytest.mark.parametrize("mu", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("eps", [0.0, 0.4, 1.0, 3.0])
def test_gdp_delta_against_quadrature_of_two_gaussians(mu, eps):
    """DRS Cor. 2.13 against int (p - e^eps q)_+ of N(mu,1) and N(0,1) by scipy.integrate.quad."""
    exact = hockey_stick_by_quadrature(lambda x: stats.norm.pdf(x, mu), stats.norm.pdf, eps,
                                       -30, 30 + mu, breakpoints=(eps / mu + mu / 2,))
    assert fdp.gdp_delta_for_epsilon(mu, eps) == pytest.approx(exact, rel=1e-9, abs=1e-14)


@pytest.mark.parametrize("mu,delta", [(0.35, 1e-5), (1.0, 1e-5), (3.0, 1e-10), (50.0, 1e-5),
                                      (200.0, 1e-6)])
def test_gdp_epsilon_for_delta_is_the_root_rounded_up(mu, delta):
    eps = fdp.gdp_epsilon_for_delta(mu, delta)
    reference = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)
    assert eps == pytest.approx(reference, rel=1e-9)
    assert gaussian_delta_exact(eps, mu) <= delta * (1 + 1e-9)
    if mu >= 50:
        assert eps > 500  # Opacus' fixed bracket [0, 500] cannot contain it (Opacus #775)


@pytest.mark.parametrize("mu", [9.309851312382189e26, 1e75])
def test_gdp_epsilon_for_delta_is_above_the_root_at_a_huge_mu(mu):
    """At a huge mu the root sits where ``-eps/mu + mu/2`` cancels and its rounding (about ``u
    eps/mu``) exceeds it: the answer was 4.999999999999999e149 at ``mu = 1e75``, delta 0.9, where
    the exact profile is 1 (found by a hostile sweep).  Checked against the profile in 200-digit
    arithmetic (mpmath, exact float inputs), not against our own Gaussian code."""
    import mpmath

    delta = 0.9
    eps = fdp.gdp_epsilon_for_delta(mu, delta)
    with mpmath.workdps(200):
        e, m = mpmath.mpf(eps), mpmath.mpf(mu)
        ncdf = lambda x: mpmath.erfc(-x / mpmath.sqrt(2)) / 2  # noqa: E731
        exact = ncdf(-e / m + m / 2) - mpmath.exp(e) * ncdf(-e / m - m / 2)
    assert exact <= delta


def test_equivalent_gdp_mu_inverts_the_profile():
    for mu in [0.2, 1.0, 2.5]:
        eps = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), 1e-6)
        assert fdp.equivalent_gdp_mu(eps, 1e-6) == pytest.approx(mu, rel=1e-8)
    # eps = 0: delta = 2 Phi(mu/2) - 1
    assert fdp.equivalent_gdp_mu(0.0, 0.3) == pytest.approx(2 * stats.norm.ppf(0.65), rel=1e-12)


def test_gdp_composition_closed_form_against_pld_engine():
    """DRS Cor. 3.3, sqrt(sum mu_i^2), against FFT composition of Gaussian PLDs with different
    noise (sensitivity 1, noise sigma_i gives mu_i = 1/sigma_i)."""
    sigmas, counts = [0.8, 2.0, 5.0], [3, 10, 40]
    mu = fdp.gdp_compose([1 / s for s, k in zip(sigmas, counts) for _ in range(k)])
    assert mu == pytest.approx(math.sqrt(sum(k / s ** 2 for s, k in zip(sigmas, counts))))
    total = None
    for s, k in zip(sigmas, counts):
        part = PLD.from_gaussian(s, value_discretization_interval=2e-3).self_compose(k)
        total = part if total is None else total.compose(part)
    for eps in [0.0, 1.0, 3.0, 6.0]:
        lower, upper = total.delta_for_epsilon(eps)
        assert lower <= float(fdp.gdp_delta_for_epsilon(mu, eps)) <= upper


def test_general_composition_through_pld_engine_recovers_gaussian_composition():
    """compose_tradeoffs on sampled G_0.5 curves (4 copies) is a certified lower bound on G_1
    (DRS Cor. 3.3) at every grid point, and close to it."""
    g = fdp.tradeoff_curve(lambda a: fdp.gaussian_tradeoff(a, 0.5))
    composed = fdp.compose_tradeoffs([g], [4], alphas=ALPHAS)
    reference = gaussian_tradeoff_reference(ALPHAS, 1.0)
    assert np.all(composed.values <= reference + 1e-12)
    assert np.max(reference - composed.values) < 1e-4
    assert_tradeoff_function(ALPHAS, composed.values)


@pytest.mark.parametrize("mu", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("grid", [np.linspace(0, 1, 11), None])
def test_lower_bound_of_a_sampled_curve_is_below_the_function_everywhere(mu, grid):
    """Linear interpolation of samples of a convex f lies above f; lower_bound() must not."""
    fine = np.union1d(np.linspace(0, 1, 100_001), np.logspace(-14, -1, 500))
    curve = fdp.tradeoff_curve(lambda a: fdp.gaussian_tradeoff(a, mu), grid)
    below = curve.lower_bound()
    reference = gaussian_tradeoff_reference(fine, mu)
    assert np.all(below(fine) <= reference + 1e-12)
    assert np.max(curve(fine) - reference) > 0  # interpolation alone would not be a bound
    assert_tradeoff_function(below.alphas, below.values)
    if grid is None:  # the default grid is fine enough for the bound to be tight
        assert np.max(reference - below(fine)) < 3e-3


@pytest.mark.parametrize("eps0,k", [(0.5, 5), (1.0, 20)])
def test_tradeoff_to_pld_composes_randomized_response_exactly(eps0, k):
    """f_{eps0,0} is randomized response; its k-fold composition has the binomial closed form."""
    kink = 1 / (1 + math.exp(eps0))
    alphas = np.union1d(ALPHAS, [kink, 1 - kink])
    curve = fdp.TradeoffCurve(alphas, fdp.epsilon_delta_tradeoff(alphas, eps0, 0.0))
    pld = fdp.tradeoff_to_pld(curve, value_discretization_interval=1e-3).self_compose(k)
    for eps in [0.0, 0.5, 2.0]:
        exact = rr_composed_delta_exact(eps, eps0, k)
        lower, upper = pld.delta_for_epsilon(eps)
        assert upper >= exact - 1e-12
        assert upper - exact <= 2e-3 * exact + 1e-9


# -- (eps, delta) trade-off and profiles ------------------------------------------------------
@pytest.mark.parametrize("eps,delta", [(0.0, 0.1), (0.7, 0.0), (1.5, 0.05)])
def test_epsilon_delta_tradeoff_against_brute_force_over_all_tests(eps, delta):
    """f_{eps,delta} is the trade-off of the four-point pair of Kairouz, Oh, Viswanath (2017);
    enumerate all 16 deterministic tests and take the lower convex hull (randomised tests)."""
    e = math.exp(eps)
    p = np.array([delta, (1 - delta) * e / (1 + e), (1 - delta) / (1 + e), 0.0])
    q = np.array([0.0, (1 - delta) / (1 + e), (1 - delta) * e / (1 + e), delta])
    points = []
    for reject in itertools.product([0, 1], repeat=4):
        phi = np.array(reject)
        # null q, alternative p (the pair is symmetric, so the orientation does not matter)
        points.append((float(phi @ q), 1.0 - float(phi @ p)))
    points = np.array(sorted(set(points)))

    def hull_at(alpha):
        # minimum over segments between any two achievable points containing alpha
        best = 1.0
        for (a1, b1), (a2, b2) in itertools.combinations(points, 2):
            lo_a, hi_a = min(a1, a2), max(a1, a2)
            if lo_a <= alpha <= hi_a:
                value = b1 if hi_a == lo_a else b1 + (b2 - b1) * (alpha - a1) / (a2 - a1)
                best = min(best, value)
        return best

    for alpha in np.linspace(0, 1, 41):
        assert fdp.epsilon_delta_tradeoff(alpha, eps, delta) == pytest.approx(hull_at(alpha),
                                                                             abs=1e-12)


def test_tradeoff_from_privacy_profile_is_a_lower_bound_and_tight_for_gdp():
    curve = fdp.tradeoff_from_privacy_profile(lambda e: fdp.gdp_delta_for_epsilon(1.0, e),
                                              alphas=ALPHAS)
    reference = gaussian_tradeoff_reference(ALPHAS, 1.0)
    assert np.all(curve.values <= reference + 1e-12)
    assert np.max(reference - curve.values) < 1e-4
    assert_tradeoff_function(ALPHAS, curve.values)


def test_tradeoff_from_pld_never_exceeds_the_true_curve():
    pld = PLD.from_gaussian(2.0, value_discretization_interval=1e-3)
    curve = fdp.tradeoff_from_pld(pld, ALPHAS)
    reference = gaussian_tradeoff_reference(ALPHAS, 0.5)
    assert np.all(curve.values <= reference + 1e-12)
    assert np.max(reference - curve.values) < 1e-4


def test_piecewise_linear_profile_is_the_conjugate():
    """TradeoffCurve.privacy_profile = sup_alpha(1 - f - e^eps alpha) (DRS Prop. 2.12), checked
    against the closed form for G_1 on a fine grid."""
    curve = fdp.tradeoff_curve(lambda a: fdp.gaussian_tradeoff(a, 1.0),
                               alphas=np.linspace(0, 1, 20001))
    for eps in [0.0, 0.5, 2.0]:
        assert curve.privacy_profile(eps)[0] == pytest.approx(gaussian_delta_exact(eps, 1.0),
                                                              abs=1e-6)


# -- properties of trade-off curves (hypothesis) ---------------------------------------------
@settings(max_examples=25, deadline=None)
@given(mu=st.floats(0.0, 6.0), p=st.floats(0.001, 1.0), g=st.integers(1, 4),
       eps=st.floats(0.0, 5.0), delta=st.floats(0.0, 0.5))
def test_all_constructions_are_tradeoff_functions(mu, p, g, eps, delta):
    assert_tradeoff_function(ALPHAS, fdp.gaussian_tradeoff(ALPHAS, mu))
    assert_tradeoff_function(ALPHAS, fdp.epsilon_delta_tradeoff(ALPHAS, eps, delta))
    sub = fdp.subsampled_tradeoff(lambda a: fdp.gaussian_tradeoff(a, mu), p, alphas=ALPHAS)
    assert_tradeoff_function(sub.alphas, sub.values)
    group = fdp.group_tradeoff(lambda a: fdp.gaussian_tradeoff(a, mu), g, alphas=ALPHAS)
    assert_tradeoff_function(ALPHAS, group.values, tol=1e-7)


# -- subsampling ---------------------------------------------------------------------------------
@pytest.mark.parametrize("sigma,p", [(1.0, 0.1), (0.5, 0.02), (2.0, 0.5)])
def test_subsampled_gaussian_tradeoff_is_symmetric(sigma, p):
    """C_p(G_{1/sigma}) = its own inverse (DRS Sec. 4.1); inverse computed here by bisection."""
    c = fdp.subsampled_tradeoff(lambda a: fdp.gaussian_tradeoff(a, 1 / sigma), p)
    for alpha in np.linspace(0.0, 1.0, 51):
        assert c(alpha) == pytest.approx(inverse_by_bisection(c, alpha), abs=1e-6)


@pytest.mark.parametrize("mu,p", [(1.0, 0.1), (3.0, 0.05)])
def test_subsampled_tradeoff_matches_drs_piecewise_form(mu, p):
    """For symmetric f, C_p(f) is f_p on [0, x*], the line x* + f_p(x*) - alpha on
    [x*, f_p(x*)], and f_p^{-1} after, where f_p'(x*) = -1 (DRS Sec. 4.1).  For G_mu the
    tangency is at the likelihood-ratio threshold t = mu/2, so x* = Phi(-mu/2)."""
    def f_p(a):
        return p * gaussian_tradeoff_reference(a, mu) + (1 - p) * (1 - a)

    x_star = stats.norm.cdf(-mu / 2)
    y_star = f_p(x_star)

    def drs(alpha):
        if alpha <= x_star:
            return f_p(alpha)
        if alpha <= y_star:
            return x_star + y_star - alpha
        return brentq(lambda t: f_p(t) - alpha, 0.0, x_star) if alpha < 1 else 0.0

    c = fdp.subsampled_tradeoff(lambda a: fdp.gaussian_tradeoff(a, mu), p)
    for alpha in np.linspace(1e-6, 1.0, 200):
        assert c(alpha) == pytest.approx(drs(alpha), abs=2e-5)


@pytest.mark.parametrize("mu,p", [(2.0, 0.1), (0.5, 0.3), (1.0, 1.0)])
def test_subsampled_gaussian_profile_against_quadrature(mu, p):
    """Profile of C_p(G_mu) = max of both hockey-sticks of p N(mu,1) + (1-p) N(0,1) vs N(0,1)."""
    mix = lambda x: p * stats.norm.pdf(x, mu) + (1 - p) * stats.norm.pdf(x)
    c = fdp.subsampled_tradeoff(lambda a: fdp.gaussian_tradeoff(a, mu), p)  # log-spaced near 0
    for eps in [0.0, 0.05, 0.3, 1.0, 3.0]:
        # the integrands have one kink each, where the likelihood ratio
        # 1 - p + p e^(mu x - mu^2/2) equals e^eps or e^-eps; tell quad where
        kinks = [(math.log((r - 1 + p) / p) + mu * mu / 2) / mu
                 for r in (math.exp(eps), math.exp(-eps)) if r - 1 + p > 0]
        exact = max(hockey_stick_by_quadrature(mix, stats.norm.pdf, eps, -30, 30 + mu, kinks),
                    hockey_stick_by_quadrature(stats.norm.pdf, mix, eps, -30, 30 + mu, kinks))
        assert float(fdp.subsampled_gaussian_delta(eps, mu, p)) == pytest.approx(
            exact, rel=1e-8, abs=1e-14)
        # the numerical double conjugate has the same profile (DRS Prop. 2.12)
        assert c.privacy_profile(eps)[0] == pytest.approx(exact, abs=2e-4)


def test_subsampled_profile_is_vectorised_and_zero_for_mu_zero():
    eps = np.array([0.0, 0.1, 50.0, 800.0])
    values = fdp.subsampled_gaussian_delta(eps, 1.0, 0.3)
    assert values.shape == eps.shape and np.all(values >= 0) and values[-1] == 0.0
    assert np.all(fdp.subsampled_gaussian_delta(eps, 0.0, 0.3) == 0.0)


# -- group privacy -------------------------------------------------------------------------------
@pytest.mark.parametrize("mu,g", [(0.5, 1), (0.5, 3), (1.2, 4)])
def test_group_privacy_of_gaussian_is_g_mu(mu, g):
    """1 - (1 - G_mu)^{o g} = G_{g mu} (DRS Thm 2.14)."""
    curve = fdp.group_tradeoff(lambda a: fdp.gaussian_tradeoff(a, mu), g, alphas=ALPHAS)
    assert np.allclose(curve.values, gaussian_tradeoff_reference(ALPHAS, g * mu), atol=1e-12)
    assert fdp.gdp_group_mu(mu, g) == pytest.approx(g * mu)


def test_group_privacy_of_a_curve_object():
    g1 = fdp.tradeoff_curve(lambda a: fdp.gaussian_tradeoff(a, 0.4),
                            alphas=np.linspace(0, 1, 20001))
    curve = fdp.group_tradeoff(g1, 2, alphas=ALPHAS)
    assert np.max(np.abs(curve.values - gaussian_tradeoff_reference(ALPHAS, 0.8))) < 1e-4


# -- central limit theorem -----------------------------------------------------------------------
def opacus_mu_poisson(sigma, q, steps):
    """Opacus' GaussianAccountant (analysis/gdp.py), re-typed from BDLS (Poisson CLT):
    mu = q sqrt(T) sqrt(e^(1/sigma^2) - 1)."""
    return math.sqrt(math.exp(sigma ** -2) - 1) * math.sqrt(steps) * q


def opacus_mu_uniform(sigma, q, steps):
    """Opacus' compute_mu_uniform, re-typed from DRS Cor. 5.4:
    mu = sqrt(2) q sqrt(T) sqrt(e^(1/sigma^2) Phi(1.5/sigma) + 3 Phi(-0.5/sigma) - 2)."""
    inner = (math.exp(sigma ** -2) * stats.norm.cdf(1.5 / sigma)
             + 3 * stats.norm.cdf(-0.5 / sigma) - 2)
    return math.sqrt(2) * q * math.sqrt(steps) * math.sqrt(inner)


@pytest.mark.parametrize("sigma,q,steps", [(1.1, 256 / 60000, 4688), (0.7, 0.01, 10_000),
                                           (3.0, 0.1, 50)])
def test_clt_mu_against_opacus_formulas(sigma, q, steps):
    assert fdp.clt_mu_poisson(sigma, q, steps) == pytest.approx(
        opacus_mu_poisson(sigma, q, steps), rel=1e-12)
    # fixed-size batches, replace-one: sensitivity 2C, so Opacus' formula at sigma / 2
    assert fdp.clt_mu_uniform(sigma, q, steps) == pytest.approx(
        opacus_mu_uniform(sigma / 2, q, steps), rel=1e-12)


def _clt_mu_by_quadrature(kl_integrand, kappa2_integrand, lo, steps):
    """DRS Thm 3.5: mu = 2K / s with K = T kl and s^2 = T (kappa_2 - kl^2) (the Berry-Esseen
    form, DRS Thm 3.4), kl and kappa_2 integrated numerically."""
    kl = integrate.quad(kl_integrand, lo, 40, limit=400, epsabs=0, epsrel=1e-8)[0]
    k2 = integrate.quad(kappa2_integrand, lo, 40, limit=400, epsabs=0, epsrel=1e-8)[0]
    return 2 * steps * kl / math.sqrt(steps * (k2 - kl * kl))


@pytest.mark.parametrize("sigma", [0.7, 1.0, 2.5])
def test_clt_mu_poisson_rederived_from_drs_functionals(sigma):
    """BDLS Poisson formula re-derived: for f = T(N(0,1), q N(m,1) + (1-q) N(0,1)), m = 1/sigma,
    kl = E[-log r] and kappa_2 = E[log^2 r] under N(0,1), r(x) = 1 - q + q e^(m x - m^2/2);
    the CLT mu matches q sqrt(T (e^(1/sigma^2) - 1)) up to a relative O(q) term (about
    q e^(2/sigma^2); we take q = 1e-5)."""
    q, steps, m = 1e-5, 10_000, 1 / sigma
    log_r = lambda x: np.log1p(q * np.expm1(m * x - m * m / 2))
    mu = _clt_mu_by_quadrature(lambda x: -log_r(x) * stats.norm.pdf(x),
                               lambda x: log_r(x) ** 2 * stats.norm.pdf(x), -40, steps)
    assert fdp.clt_mu_poisson(sigma, q, steps) == pytest.approx(mu, rel=1e-3)


@pytest.mark.parametrize("sigma", [1.4, 2.0, 5.0])
def test_clt_mu_uniform_rederived_from_drs_functionals(sigma):
    """DRS Cor. 5.4 re-derived for C_q(G_m), m = 2/sigma (sensitivity 2C): C_q(f) follows f_q up
    to the threshold t = m/2, a slope -1 segment, then f_q^{-1}; so kl = int_{t >= m/2}
    (r - 1) log r dPhi and kappa_2 = int_{t >= m/2} (1 + r) log^2 r dPhi (q = 1e-5, so the
    relative O(q) term is small)."""
    q, steps, m = 1e-5, 10_000, 2 / sigma
    log_r = lambda x: np.log1p(q * np.expm1(m * x - m * m / 2))
    r = lambda x: np.exp(log_r(x))
    mu = _clt_mu_by_quadrature(lambda x: (r(x) - 1) * log_r(x) * stats.norm.pdf(x),
                               lambda x: (1 + r(x)) * log_r(x) ** 2 * stats.norm.pdf(x),
                               m / 2, steps)
    assert fdp.clt_mu_uniform(sigma, q, steps) == pytest.approx(mu, rel=1e-3)


def test_clt_mu_poisson_replace_one_rederived():
    """Replace-one Poisson pair P = q N(1) + (1-q) N(0), Q = q N(-1) + (1-q) N(0) (noise sigma):
    the CLT mu from the functionals of T(P, Q) matches q sqrt(2T (e^(1/s^2) - e^(-1/s^2)))."""
    sigma, q, steps = 1.2, 1e-5, 10_000
    a = 1 / sigma ** 2
    dens = lambda x, c: stats.norm.pdf(x, c, sigma)
    p_ = lambda x: q * dens(x, 1.0) + (1 - q) * dens(x, 0.0)
    log_qp = lambda x: (np.log1p(q * np.expm1(-a * x - a / 2))
                        - np.log1p(q * np.expm1(a * x - a / 2)))
    mu = _clt_mu_by_quadrature(lambda x: -log_qp(x) * p_(x), lambda x: log_qp(x) ** 2 * p_(x),
                               -40, steps)
    assert fdp.clt_mu_poisson(sigma, q, steps, neighbouring="replace_one") == pytest.approx(
        mu, rel=1e-3)


@pytest.mark.parametrize("sigma,epochs,mu_printed,eps_printed", [(1.06, 20, 0.35, 1.34),
                                                                  (0.638, 70, 1.78, 8.68)])
def test_bdls_published_mnist_numbers(sigma, epochs, mu_printed, eps_printed):
    """BDLS Fig. 4 (MNIST, p = 256/60000, delta = 1e-5): sigma~ = 1.06 for 20 epochs gives
    mu_CLT = 0.35 and (1.34, 1e-5)-DP; sigma~ = 0.638 for 70 epochs gives mu_CLT = 1.78 and
    (8.68, 1e-5)-DP.  sigma~ is printed to 3 digits, so the printed results must lie between
    the values at sigma~ +- 0.0005 (widened by the 2-digit rounding of the results)."""
    p = 256 / 60000
    steps = epochs / p  # BDLS use T = E n / m
    mus = [fdp.clt_mu_poisson(s, p, steps) for s in (sigma + 5e-4, sigma - 5e-4)]
    epss = [fdp.gdp_epsilon_for_delta(m, 1e-5) for m in mus]
    assert mus[0] - 0.005 <= mu_printed <= mus[1] + 0.005
    assert epss[0] - 0.005 <= eps_printed <= epss[1] + 0.005
    assert fdp.clt_mu_poisson(sigma, p, steps) == pytest.approx(mu_printed, abs=0.005)


def test_clt_history_adds_in_quadrature():
    history = [(1.0, 0.01, 1000), (2.0, 0.02, 500)]
    expected = math.hypot(opacus_mu_poisson(1.0, 0.01, 1000), opacus_mu_poisson(2.0, 0.02, 500))
    assert fdp.clt_mu_from_history(history) == pytest.approx(expected, rel=1e-12)


# -- curve objects ----------------------------------------------------------------------------
def test_inverse_of_an_asymmetric_curve():
    """f = T(P, Q) for P = (0.5, 0.5), Q = (0.1, 0.9): reject outcome 2 first.  f(a) = 1 - 1.8 a
    on [0, 0.5], 0.2 (1 - a) after; f^{-1} = T(Q, P) by bisection."""
    alphas = np.array([0.0, 0.5, 1.0])
    curve = fdp.TradeoffCurve(alphas, np.array([1.0, 0.1, 0.0]))
    inv = curve.inverse()
    for a in np.linspace(0, 1, 21):
        assert inv(a) == pytest.approx(inverse_by_bisection(curve, a), abs=1e-9)
    assert curve.symmetry_gap() > 0.1


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("call,name", [
    (lambda: fdp.gaussian_tradeoff(0.5, -0.1), "mu"),
    (lambda: fdp.gaussian_tradeoff(1.5, 1.0), "alpha"),
    (lambda: fdp.gaussian_tradeoff(-0.1, 1.0), "alpha"),
    (lambda: fdp.gaussian_tradeoff(np.array([0.2, np.nan]), 1.0), "alpha"),
    (lambda: fdp.gaussian_tradeoff(0.5, math.nan), "mu"),
    (lambda: fdp.epsilon_delta_tradeoff(0.5, -1.0, 0.1), "epsilon"),
    (lambda: fdp.epsilon_delta_tradeoff(0.5, 1.0, 1.5), "delta"),
    (lambda: fdp.gdp_delta_for_epsilon(-1.0, 1.0), "mu"),
    (lambda: fdp.gdp_delta_for_epsilon(1.0, -1.0), "epsilon"),
    (lambda: fdp.gdp_epsilon_for_delta(1.0, 0.0), "delta"),
    (lambda: fdp.gdp_epsilon_for_delta(1.0, 1.0), "delta"),
    (lambda: fdp.gdp_epsilon_for_delta(math.inf, 1e-5), "mu"),
    (lambda: fdp.gdp_compose([1.0, -2.0]), "mus"),
    (lambda: fdp.gdp_group_mu(1.0, 0), "group_size"),
    (lambda: fdp.group_tradeoff(lambda a: 1 - a, 0), "group_size"),
    (lambda: fdp.group_tradeoff(lambda a: 1 - a, 1.5), "group_size"),
    (lambda: fdp.subsampled_tradeoff(lambda a: 1 - a, 0.0), "p"),
    (lambda: fdp.subsampled_tradeoff(lambda a: 1 - a, 1.2), "p"),
    (lambda: fdp.subsampled_gaussian_delta(0.1, 1.0, 0.0), "p"),
    (lambda: fdp.clt_mu_poisson(0.0, 0.1, 10), "noise_multiplier"),
    (lambda: fdp.clt_mu_poisson(1.0, 1.1, 10), "sample_rate"),
    (lambda: fdp.clt_mu_poisson(1.0, 0.1, -1), "steps"),
    (lambda: fdp.clt_mu_poisson(1.0, 0.1, 10, neighbouring="swap"), "neighbouring"),
    (lambda: fdp.clt_mu_uniform(-1.0, 0.1, 10), "noise_multiplier"),
    (lambda: fdp.clt_mu_from_history([(1.0, 0.1, 10)], sampling="shuffle"), "sampling"),
    (lambda: fdp.TradeoffCurve(np.array([0.0, 0.5]), np.array([1.0, 0.5])), "alphas"),
    (lambda: fdp.TradeoffCurve(np.array([0.0, 1.0]), np.array([1.0, 0.5])), "values"),
    (lambda: fdp.compose_tradeoffs([]), "fs"),
    (lambda: fdp.compose_tradeoffs([lambda a: 1 - a], [0]), "counts"),
    (lambda: fdp.equivalent_gdp_mu(1.0, 0.0), "delta"),
])
def test_bad_inputs_raise_parameter_error(call, name):
    with pytest.raises(ParameterError, match=name) as info:
        call()
    assert info.value.name.startswith(name)
