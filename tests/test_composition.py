"""General composition theorems (dpplugins.composition) and the profile-to-PLD helpers
(dpplugins.profiles), against exact enumeration of product pairs and closed forms."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import norm

from dpplugins import composition
from dpplugins.amplification import checkin
from dpplugins.errors import ParameterError
from dpplugins.profiles import pld_from_profile, profile_grid


def _four_point_pair(e: float, d: float) -> tuple[np.ndarray, np.ndarray]:
    """The dominating pair of an (e, d)-DP mechanism (Kairouz, Oh, Viswanath 2015, Thm 2.1)."""
    x = math.exp(e)
    p = np.array([d, (1 - d) * x / (1 + x), (1 - d) / (1 + x), 0.0])
    return p, p[::-1].copy()


def _enumerated_delta(epsilon: float, e: float, d: float, k: int) -> float:
    """Hockey-stick divergence of the k-fold product of the four-point pair, by enumerating
    every outcome (4^k of them)."""
    p, q = _four_point_pair(e, d)
    total = 0.0
    for outcome in itertools.product(range(4), repeat=k):
        pp = math.prod(p[i] for i in outcome)
        qq = math.prod(q[i] for i in outcome)
        total += max(pp - math.exp(epsilon) * qq, 0.0)
    return total


@pytest.mark.parametrize("e,d,k", [(1.0, 0.0, 1), (0.5, 0.0, 4), (0.3, 1e-3, 3), (1.2, 0.05, 5),
                                   (0.1, 0.0, 6)])
@pytest.mark.parametrize("epsilon", [0.0, 0.2, 0.9, 2.5])
def test_optimal_composition_delta_is_the_enumerated_product(e, d, k, epsilon):
    exact = _enumerated_delta(epsilon, e, d, k)
    got = composition.optimal_composition_delta(epsilon, e, d, k)
    assert exact <= got <= exact * (1 + 1e-9) + 1e-15


@pytest.mark.parametrize("e,d,k,delta", [(0.5, 0.0, 4, 1e-2), (0.3, 1e-3, 3, 5e-2),
                                         (0.1, 0.0, 6, 1e-3)])
def test_optimal_composition_epsilon_is_certified_and_tight(e, d, k, delta):
    eps = composition.optimal_composition_epsilon(delta, e, d, k)
    assert _enumerated_delta(eps, e, d, k) <= delta
    # tight: a relative 1e-6 lower already violates delta (the enumerated curve is continuous)
    if eps > 0:
        assert _enumerated_delta(eps * (1 - 1e-6), e, d, k) > delta * (1 - 1e-9)


def _kov_delta_mpmath(epsilon: float, e: float, k: int):
    """The optimal-composition sum (pure steps) in 40-digit arithmetic, term by term."""
    import mpmath
    with mpmath.workdps(40):
        e_, eps_ = mpmath.mpf(e), mpmath.mpf(epsilon)
        log_norm = k * mpmath.log(1 + mpmath.exp(e_))
        total = mpmath.mpf(0)
        for l in range(k + 1):
            margin = (k - 2 * l) * e_ - eps_
            if margin > 0:
                total += mpmath.exp(mpmath.log(mpmath.binomial(k, l)) + (k - l) * e_ - log_norm) \
                    * -mpmath.expm1(-margin)
        return total


@pytest.mark.parametrize("k,e,epsilon", [(5000, 1.2106722348428598, 4776.378673060615),
                                         (10000, 0.003197085493048723, 0.1653183263426864),
                                         (3000, 0.011421385694352219, 0.4120505984203917),
                                         (20000, 1.0, 10000.0)])
def test_optimal_composition_delta_is_rounded_up_for_many_steps(k, e, epsilon):
    """Thousands of steps: the sum's logarithms (log-gammas of k) carry rounding far above the
    fixed 1e-12 margin the sum had, and it came out below the 40-digit value (by 3.5e-12
    relatively in the first case).  Now every term is raised by its own rounding bound."""
    exact = _kov_delta_mpmath(epsilon, e, k)
    got = composition.optimal_composition_delta(epsilon, e, 0.0, k)
    assert exact <= got <= exact * (1 + 1e-7) + 1e-300


def test_optimal_composition_of_huge_steps_answers_without_overflow():
    """eps0 = 1e300 or 1e308 per step (reachable from the checkin accountant's cap): the sum
    overflowed (RuntimeWarnings, inf - inf) before answering."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert composition.optimal_composition_epsilon(1e-6, 1e308, 0.0, 2) == math.inf
        assert composition.optimal_composition_epsilon(1e-6, 1e300, 0.0, 2) == \
            pytest.approx(2e300, rel=1e-9)
        # one step below its eps0: delta = (e^e0 - e^eps) / (1 + e^e0), which rounds to 1
        assert composition.optimal_composition_delta(1.0, 1e300, 0.0, 1) == 1.0
        assert composition.optimal_composition_delta(3e300, 1e300, 0.0, 2) <= 1e-300
        # more than 40 huge steps: the window's tail had p = 0 and divided by zero
        for e0 in (708.0, 745.0, 800.0, 1e300):
            assert composition.optimal_composition_delta(1.0, e0, 0.0, 100) == 1.0
            assert composition.optimal_composition_epsilon(1e-6, e0, 0.0, 100) >= 100 * e0 * (1 - 1e-9)


def test_optimal_composition_epsilon_ends():
    assert composition.optimal_composition_epsilon(1e-6, 0.0, 0.0, 10) == 0.0
    # k (eps, d) mechanisms cannot reach delta below 1 - (1 - d)^k
    assert composition.optimal_composition_epsilon(1e-6, 0.5, 0.1, 3) == math.inf


@pytest.mark.parametrize("e", [0.01, 0.1, 0.5])
@pytest.mark.parametrize("k", [10, 100, 1000])
def test_optimal_is_never_above_advanced(e, k):
    """The optimal composition theorem is optimal: advanced composition (d = 0, slack delta)
    can never be smaller."""
    delta = 1e-6
    assert composition.optimal_composition_epsilon(delta, e, 0.0, k) <= \
        composition.advanced_composition_epsilon(e, k, delta)
    assert composition.optimal_composition_epsilon(delta, e, 0.0, k) <= k * e * (1 + 1e-12)


@pytest.mark.parametrize("a,k", [(0.5, 10), (2.0, 50), (5.0, 200)])
def test_heterogeneous_lemma_is_not_below_the_optimal_composition(a, k):
    """Lemma A.2 with b = 0 bounds k identical log(1 + a/k)-DP mechanisms; the exact optimum of
    that composition cannot exceed it."""
    delta = 1e-5
    exact = composition.optimal_composition_epsilon(delta, math.log1p(a / k), 0.0, k)
    assert exact <= composition.heterogeneous_composition_epsilon(a, 0.0, k, delta)


def test_old_names_are_the_same_functions():
    for name in ("heterogeneous_composition_epsilon", "optimal_composition_delta",
                 "optimal_composition_epsilon", "advanced_composition_epsilon"):
        assert getattr(checkin, name) is getattr(composition, name)
    assert checkin.profile_grid is profile_grid and checkin.pld_from_profile is pld_from_profile


def test_bad_inputs_name_the_parameter():
    with pytest.raises(ParameterError, match="delta_step"):
        composition.optimal_composition_delta(0.1, 1.0, 1.0, 3)
    with pytest.raises(ParameterError, match="b"):
        composition.heterogeneous_composition_epsilon(1.0, 1.0, 5, 1e-5)
    with pytest.raises(ParameterError, match="k"):
        composition.advanced_composition_epsilon(0.1, 0, 1e-5)


def _kov_delta_exact(epsilon: float, e: float, d: float, k: int):
    """The optimal composition's delta at 60 digits (mpmath), capped at 1."""
    import mpmath
    with mpmath.workdps(60):
        eps_, e_, d_ = mpmath.mpf(epsilon), mpmath.mpf(e), mpmath.mpf(d)
        total = mpmath.mpf(0)
        for l in range(k + 1):
            term = mpmath.exp((k - l) * e_) - mpmath.exp(eps_ + l * e_)
            if term > 0:
                total += mpmath.binomial(k, l) * term
        pure = total / (1 + mpmath.exp(e_)) ** k
        survive = (1 - d_) ** k
        return min(1 - survive + survive * pure, mpmath.mpf(1))


@pytest.mark.parametrize("epsilon,e,d,k", [
    (0.0, 0.0, 1e-17, 1), (0.0, 0.0, 1e-12, 1), (50.0, 1.0, 1e-17, 5),
    (7.4195190180766105e-09, 8.103636273531341e-09, 1e-12, 2),
    (3 * 0.4304256186408452, 0.4304256186408452, 0.0, 3),       # epsilon = fl(3e) < 3e
    (19.160957734438536, 6.3869859114795124, 0.0, 3)])
def test_optimal_composition_delta_keeps_tiny_delta_steps_and_boundary_terms(epsilon, e, d, k):
    """From a hostile sweep: 1 - (1 - d)^k lost d below 1e-16 to cancellation (one step of
    delta 1e-17 answered 1e-300), and at epsilon = fl(k e - 2 l e), a hair below the true value,
    the rounded margin dropped the term (1e-300 where 1.2e-17 is the value)."""
    exact = _kov_delta_exact(epsilon, e, d, k)
    got = composition.optimal_composition_delta(epsilon, e, d, k)
    assert got >= exact and got <= exact * 20 + 1e-299


@pytest.mark.parametrize("delta,e,d,k", [
    (1e-18, 1.0, 1e-17, 5), (1e-18, 0.0, 1e-17, 5), (1e-10, 1.402208688348868e-08, 1e-12, 1),
    (1e-100, 0.4304256186408452, 0.0, 3), (1e-25, 0.4304256186408452, 0.0, 3)])
def test_optimal_composition_epsilon_is_certified_at_tiny_deltas(delta, e, d, k):
    """The epsilon returned has exact delta at most the target (inf only where even k e does
    not reach it: the delta_step part alone is above the target)."""
    got = composition.optimal_composition_epsilon(delta, e, d, k)
    if math.isinf(got):
        assert _kov_delta_exact(k * e * (1 + 1e-12), e, d, k) > delta
    else:
        assert _kov_delta_exact(got, e, d, k) <= delta


def test_optimal_composition_random_cases_against_mpmath():
    """200 random (epsilon, e, d, k) against the 60-digit sum: delta never below it, epsilon's
    exact delta never above the target."""
    rng = np.random.default_rng(11)
    for _ in range(200):
        k = int(rng.choice([1, 2, 3, 5, 10, 50, 300]))
        e = float(rng.choice([0.0, 1e-8, 1e-3, 0.1, 1.0, 5.0, 30.0]) * rng.uniform(0.5, 1.5))
        d = float(rng.choice([0.0, 1e-15, 1e-12, 1e-6, 0.1]))
        if rng.random() < 0.5 and e > 0:
            epsilon = max(0.0, (k - 2 * int(rng.integers(0, k // 2 + 1))) * e)
        else:
            epsilon = float(rng.uniform(0, max(k * e, 1e-9) * 1.1))
        assert composition.optimal_composition_delta(epsilon, e, d, k) >= \
            _kov_delta_exact(epsilon, e, d, k)
        target = float(rng.choice([1e-12, 1e-6, 1e-3, 0.3]))
        x = composition.optimal_composition_epsilon(target, e, d, k)
        if math.isfinite(x):
            assert _kov_delta_exact(x, e, d, k) <= target


@pytest.mark.parametrize("k,e,epsilon", [(10 ** 9, 1e-4, 12.0), (10 ** 9, 1e-3, 600.0),
                                         (10 ** 7, 0.01, 560.0)])
def test_optimal_composition_of_many_steps_in_bounded_memory(k, e, epsilon):
    """k up to 1e9 (a k-long array was 8 GB): only a window of binomial terms is summed and
    the rest charged by Chernoff.  Checked against scipy's binomial pmf (another
    implementation) summed over 80 standard deviations around the mean; ours is above it by
    at most its rounding charge on log C(k, l), about 32 u log(k!) = 7e-5 at k = 1e9."""
    from scipy.stats import binom
    p = 1 / (1 + math.exp(e))
    sd = math.sqrt(k * p * (1 - p))
    l = np.arange(max(0, math.floor(k * p - 80 * sd)), math.ceil(k * p + 80 * sd) + 1)
    loss = (k - 2 * l) * e
    pmf = binom.pmf(l, k, p)

    def reference(eps):
        return float(np.sum(pmf * -np.expm1(np.minimum(eps - loss, 0.0))))
    got = composition.optimal_composition_delta(epsilon, e, 0.0, k)
    assert 1e-4 < reference(epsilon) < 0.5
    assert reference(epsilon) * (1 - 1e-9) <= got <= reference(epsilon) * (1 + 1e-4)
    x = composition.optimal_composition_epsilon(1e-6, e, 0.0, k)
    assert reference(x) <= 1e-6 * (1 + 1e-9) and reference(x * (1 - 1e-3)) > 1e-6


def test_composition_refuses_more_than_2_to_the_53_steps():
    """k = 10^400 raised OverflowError in the closed forms."""
    for call in (lambda k: composition.advanced_composition_epsilon(1.0, k, 0.5),
                 lambda k: composition.heterogeneous_composition_epsilon(1e-300, 0.0, k, 0.5),
                 lambda k: composition.optimal_composition_delta(1.0, 0.1, 0.0, k)):
        with pytest.raises(ParameterError, match=r"2\^53"):
            call(10 ** 400)
        with pytest.raises(ParameterError, match=r"2\^53"):
            call(2 ** 53 + 1)
    assert composition.optimal_composition_delta(1.0, 1e-3, 1e-12, 2 ** 53) == 1.0


# -- profiles -> PLD ------------------------------------------------------------------------------
def _gaussian_profile(mu: float):
    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        return np.minimum(norm.cdf(-eps / mu + mu / 2) - np.exp(eps) * norm.cdf(-eps / mu - mu / 2)
                          + 1e-15, 1.0)
    return profile


@pytest.mark.parametrize("mu,count", [(0.5, 1), (0.5, 8), (1.0, 4)])
def test_pld_from_a_gaussian_profile_bounds_the_composed_gaussian(mu, count):
    """count runs of mu-GDP compose to sqrt(count) mu-GDP (Dong, Roth, Su 2022, Cor. 3.3): the
    dominating PLD of the profile gives an upper bound within a few percent."""
    profile = _gaussian_profile(mu)
    h, eps_max = profile_grid([profile])
    pld = pld_from_profile(profile, h, eps_max).self_compose(count)
    delta = 1e-5
    total = mu * math.sqrt(count)
    exact = brentq(lambda e: norm.cdf(-e / total + total / 2)
                   - math.exp(e) * norm.cdf(-e / total - total / 2) - delta, 0.0, 50.0,
                   xtol=1e-13)
    upper = pld.epsilon_for_delta(delta, lower=False).upper
    assert exact <= upper <= exact * 1.05 + 0.01


@pytest.mark.parametrize("profile,message", [
    (lambda eps: 0.5, "one delta per epsilon"),
    (lambda eps: np.full_like(np.asarray(eps, dtype=float), np.nan), "returned nan"),
    (lambda eps: np.full_like(np.asarray(eps, dtype=float), -0.1), "returned -0.1"),
    (3, "a callable")])
def test_bad_profiles_are_refused_by_name(profile, message):
    """From a hostile sweep: a scalar answer raised TypeError deep inside, NaN a plain
    ValueError, and a negative profile was clipped to 0 and certified epsilon 0."""
    with pytest.raises(ParameterError, match=message):
        profile_grid([profile])
    with pytest.raises(ParameterError, match=message):
        pld_from_profile(profile, 1e-3, 1.0)


def test_profile_grid_needs_a_profile():
    with pytest.raises(ParameterError, match="profiles"):
        profile_grid([])
