"""The monotone inverse (dpplugins.numerics) and the Gaussian profile it inverts most often.

Checked against closed forms (e^-x, step functions) and against an independent evaluation of
the Gaussian profile with ``scipy.stats.norm`` and ``scipy.optimize.brentq``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.stats import norm

from dpplugins.errors import NumericalError, ParameterError
from dpplugins.mechanisms.gaussian import (gaussian_delta, gaussian_delta_upper,
                                          gaussian_delta_upper_many, gaussian_epsilon)
from dpplugins.numerics import (MAX_DOUBLINGS, MAX_ITERATIONS, epsilon_lower_from_larger_delta,
                                largest_violating_epsilon, smallest_epsilon)


def _gaussian_delta_reference(eps: float, mu: float) -> float:
    """Balle & Wang 2018 Thm 8 with scipy.stats.norm (another code path than log_ndtr)."""
    return float(norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * norm.cdf(-eps / mu - mu / 2))


# -- smallest_epsilon ------------------------------------------------------------------------------
@pytest.mark.parametrize("target", [0.5, 1e-3, 1e-9, 1e-300])
@pytest.mark.parametrize("newton", [False, True])
def test_exponential_profile_closed_form(target, newton):
    def fn(x):
        return (math.exp(-x), -math.exp(-x)) if newton else math.exp(-x)

    x = smallest_epsilon(fn, target, rtol=1e-10, newton=newton)
    exact = math.log(1 / target)
    assert math.exp(-x) <= target                 # certified: checked at the returned point
    assert exact <= x <= exact * (1 + 1e-9)


@given(st.floats(1e-6, 1e6), st.floats(1e-8, 1e-2))
@example(2.00001, 0.0038996132201873117)
@settings(max_examples=60, deadline=None)
def test_step_profile_is_met_from_above(c, rtol):
    """delta = 1 below c, 0 from c on: the answer is in [c, c / (1 - rtol)] (the bracket
    stops at ``hi - lo <= rtol hi`` with ``lo < c``; ``c (1 + rtol)`` is short by ``c rtol^2``:
    c = 2.00001, rtol = 0.0039 answered 2.0078125, above 2.007809)."""
    x = smallest_epsilon(lambda e: 1.0 if e < c else 0.0, 0.5, rtol=rtol)
    assert c <= x <= c / (1 - rtol)


def test_zero_and_never():
    assert smallest_epsilon(lambda e: 0.0, 1e-5) == 0.0
    assert smallest_epsilon(lambda e: 1.0, 1e-5) == math.inf
    assert smallest_epsilon(lambda e: 1.0, 1e-5, epsilon_max=10.0) == math.inf


def test_nan_counts_as_above_the_target():
    assert smallest_epsilon(lambda e: math.nan, 0.5) == math.inf
    x = smallest_epsilon(lambda e: math.nan if e < 2.0 else 0.0, 0.5, rtol=1e-12)
    assert 2.0 <= x <= 2.0 * (1 + 1e-12)


def test_evaluations_are_bounded():
    calls = []

    def never(e):
        calls.append(e)
        return 1.0
    assert smallest_epsilon(never, 0.5, start=1e-300) == math.inf
    assert len(calls) <= MAX_DOUBLINGS + 2
    calls.clear()
    # a target that no float between two neighbours separates: the bracket closes
    c = 1.0 + 2 ** -40
    x = smallest_epsilon(lambda e: (calls.append(e), 1.0 if e < c else 0.0)[1], 0.5, rtol=1e-300)
    assert x >= c and len(calls) <= MAX_ITERATIONS + MAX_DOUBLINGS + 2


def test_a_given_bracket_that_is_not_one_is_grown():
    x = smallest_epsilon(lambda e: math.exp(-e), 1e-6, hi=1.0)
    assert math.exp(-x) <= 1e-6 and x <= math.log(1e6) * (1 + 1e-8)


def test_bad_target():
    with pytest.raises(ParameterError, match="target"):
        smallest_epsilon(lambda e: 0.0, math.nan)


@pytest.mark.parametrize("offset", [0.0, 0.9, 0.99])
def test_newton_with_a_derivative_off_by_half_converges(offset):
    """An upper bound ``exp(-(e/0.01)^2) + offset * target`` reported with half its true
    derivative (the shuffle blanket's slope is that of the divergence without its error terms):
    Newton on log delta then alternates around the root, and before the safeguard it used all
    1200 iterations and stopped 4e-4 (relative) above it.  Closed form of the root:
    ``0.01 sqrt(log(1 / ((1 - offset) target)))``."""
    target, calls = 1e-15, []

    def pair(e):
        calls.append(e)
        g = math.exp(-(e / 0.01) ** 2)
        return g + offset * target, -e / 0.01 ** 2 * g

    x = smallest_epsilon(pair, target, hi=1.0, guess=0.1, newton=True, rtol=1e-7)
    exact = 0.01 * math.sqrt(math.log(1 / ((1 - offset) * target)))
    assert exact <= x <= exact * (1 + 1e-7)
    assert len(calls) <= 60


def test_largest_violating_starts_from_a_violated_point():
    """``violated=``: the search starts there (fewer evaluations) and gives the same answer."""
    calls = []

    def lower(e):
        calls.append(e)
        return math.exp(-e)
    x = largest_violating_epsilon(lower, 1e-3, 100.0, rtol=1e-10, violated=6.8)
    assert math.exp(-x) > 1e-3 and math.log(1000) * (1 - 1e-9) <= x <= math.log(1000)
    assert min(calls) >= 6.8 and len(calls) < 40
    y = largest_violating_epsilon(lambda e: math.exp(-e), 1e-3, 100.0, rtol=1e-10,
                                  violated=200.0)   # outside [0, hi]: ignored
    assert math.exp(-y) > 1e-3 and y == pytest.approx(x, rel=1e-9)


# -- largest_violating_epsilon (lower bounds) -------------------------------------------------------
@pytest.mark.parametrize("target", [0.5, 1e-3, 1e-12])
def test_largest_violating_is_a_lower_bound(target):
    x = largest_violating_epsilon(lambda e: math.exp(-e), target, 100.0, rtol=1e-10)
    exact = math.log(1 / target)
    assert math.exp(-x) > target
    assert exact * (1 - 1e-9) - 1e-12 <= x <= exact


def test_largest_violating_ends():
    assert largest_violating_epsilon(lambda e: 0.0, 0.5, 10.0) == 0.0
    assert largest_violating_epsilon(lambda e: 1.0, 0.5, 10.0) == 10.0


@pytest.mark.parametrize("target", [0.5, 1e-3, 1e-12])
@pytest.mark.parametrize("start", [None, 0.5])
def test_largest_violating_secant_against_closed_forms(target, start):
    """``secant=True`` on two closed forms (e^-x and e^-(x^2)): the answer is a point seen
    above the target, within rtol of the root, in fewer evaluations than bisection (with or
    without a known violated point, here half the root)."""
    for profile, root in ((lambda e: math.exp(-e), math.log(1 / target)),
                          (lambda e: math.exp(-e * e), math.sqrt(math.log(1 / target)))):
        seen = {}
        counts = []
        violated = None if start is None else start * root
        for secant in (True, False):
            seen.clear()

            def lower(e):
                seen[e] = profile(e)
                return seen[e]
            x = largest_violating_epsilon(lower, target, 100.0, rtol=1e-8, violated=violated,
                                          secant=secant)
            counts.append(len(seen))
            assert (x in seen and seen[x] > target) or x == violated
            assert root * (1 - 2e-8) - 1e-12 <= x <= root
        assert counts[0] < counts[1]


def test_largest_violating_secant_keeps_only_violated_points():
    """A lower bound that is noisy, not monotone, and NaN in places: every answer is a point
    that was evaluated above the target (or 0), whatever the steering did."""
    rng = np.random.default_rng(7)
    for _ in range(200):
        wiggle, holes = rng.uniform(0, 0.5), rng.uniform(0, 0.3)
        seen = {}

        def lower(e, wiggle=wiggle, holes=holes):
            u = math.sin(1e3 * e) ** 2
            value = math.nan if u < holes else math.exp(-e) * (1 + wiggle * math.cos(37 * e))
            seen[e] = value
            return value
        target = 10 ** rng.uniform(-8, -0.5)
        x = largest_violating_epsilon(lower, target, 30.0, rtol=1e-6, secant=True)
        assert x == 0.0 or (x in seen and seen[x] > target)


# -- the Gaussian profile and its inverse ---------------------------------------------------------
@pytest.mark.parametrize("mu", [0.1, 1.0, 3.0, 10.0])
def test_gaussian_delta_matches_scipy_norm(mu):
    for eps in [0.0, 0.5, 2.0, 5.0]:
        ref = _gaussian_delta_reference(eps, mu)
        if ref > 1e-12:
            assert float(gaussian_delta(eps, mu)) == pytest.approx(ref, rel=1e-9)


def test_gaussian_delta_never_nan():
    """Regression: eps = 1e308 gave (-inf) - (-inf) = NaN."""
    values = gaussian_delta(np.array([1e308, math.inf, 1e300, 0.0]), 2.0)
    assert not np.any(np.isnan(values))
    assert values[0] == 0.0 and values[1] == 0.0 and values[2] == 0.0
    assert float(gaussian_delta(3.0, math.inf)) == 1.0
    assert gaussian_delta_upper(1e308, 2.0) == 1e-300


@pytest.mark.parametrize("mu", [0.05, 0.5, 1.0, 4.0, 30.0])
@pytest.mark.parametrize("delta", [1e-2, 1e-5, 1e-10])
def test_gaussian_epsilon_against_brentq(mu, delta):
    eps = gaussian_epsilon(mu, delta)
    assert gaussian_delta_upper(eps, mu) <= delta
    f = lambda e: _gaussian_delta_reference(e, mu) - delta  # noqa: E731
    if f(0.0) <= 0:
        assert eps == 0.0
        return
    hi = mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta)) + 1.0
    exact = brentq(f, 0.0, hi, xtol=1e-14, rtol=1e-14)
    assert exact * (1 - 1e-9) <= eps <= exact * (1 + 1e-9) + 1e-12


def _gaussian_delta_mpmath(eps: float, mu: float):
    """Balle & Wang 2018 Thm 8 in 200-digit arithmetic (mpmath, exact float inputs): enough to
    keep the integer part of ``x^2 / 2`` for arguments up to about 1e75."""
    import mpmath

    with mpmath.workdps(200):
        e, m = mpmath.mpf(eps), mpmath.mpf(mu)
        ncdf = lambda x: mpmath.erfc(-x / mpmath.sqrt(2)) / 2  # noqa: E731
        return ncdf(-e / m + m / 2) - mpmath.exp(e) * ncdf(-e / m - m / 2)


@pytest.mark.parametrize("mu", [1e8, 1e10, 1e12, 1e14, 1e20, 1e75])
@pytest.mark.parametrize("k", [-2.0, -0.5, 0.0, 0.5, 3.0])
def test_gaussian_delta_upper_is_above_the_exact_profile_where_its_argument_cancels(mu, k):
    """Near ``eps = mu^2/2`` the argument ``-eps/mu + mu/2`` of Phi is a near-cancelling sum whose
    rounding (about ``u eps/mu``) is not small against it once mu is large: at ``mu = 1e12, eps =
    5e23`` the upper bound was 0.5000000000005 where the exact profile is 0.5000033466, and at
    ``mu = 1e75`` it was 0.5 where the profile is 1 (a hostile sweep against 60-digit
    arithmetic).  The bound must never be below the exact value, and stays within a relative
    1e-2 of it where ``u mu`` is small."""
    eps = mu * mu / 2 + k * mu
    exact = _gaussian_delta_mpmath(eps, mu)
    upper = gaussian_delta_upper(eps, mu)
    assert upper >= exact
    if mu <= 1e12:
        assert upper <= exact * (1 + 1e-2)


@pytest.mark.parametrize("mu", [0.0, 5e-324, 1e-162, 1e-6, 1 / 300, 0.5, 1.0, 2.0, 30.0, 1e8,
                                1e75, math.inf])
def test_gaussian_delta_upper_many_is_the_one_point_bound_at_every_point(mu):
    """The array form (certified profiles on grids) and the one-point form (root searches)
    evaluate the same bound; they may differ by the last bits of numpy's and libm's exp, far
    inside the relative 1e-12 both add, and each is checked against 200-digit arithmetic above
    and in the shuffle accountant's tests."""
    eps = np.concatenate([[0.0, 5e-324, 1e-300, 1.0, 700.0, 710.0, 1e308, math.inf],
                          np.geomspace(1e-8, 1e4, 40)])
    if 0 < mu < 1e150:
        eps = np.concatenate([eps, mu * mu / 2 * (1 + np.linspace(-1e-6, 1e-6, 5))])
    many = gaussian_delta_upper_many(eps, mu)
    one = np.array([gaussian_delta_upper(float(e), mu) for e in eps])
    np.testing.assert_allclose(many, one, rtol=1e-14, atol=0)
    assert np.all((0 <= many) & (many <= 1))


def test_gaussian_epsilon_extremes():
    assert gaussian_epsilon(0.0, 1e-5) == 0.0
    assert gaussian_epsilon(math.inf, 1e-5) == math.inf
    assert gaussian_epsilon(1e300, 1e-5) == math.inf      # mu^2 / 2 is beyond the float range
    big = gaussian_epsilon(1e100, 1e-5)
    assert 0.5e200 <= big <= 0.5e200 * (1 + 1e-6)          # mu^2/2 + mu sqrt(2 log(1/delta))
    assert gaussian_epsilon(1e-300, 1e-5) == 0.0           # delta(0) ~ 0.4 mu << 1e-5


def test_smallest_epsilon_tries_epsilon_max_itself():
    """Doubling from 4 jumps to 8, past epsilon_max = 7.5: it answered inf although the
    profile (a step at 7) meets the target below epsilon_max."""
    x = smallest_epsilon(lambda e: 1.0 if e < 7.0 else 0.0, 0.5, start=4.0, epsilon_max=7.5,
                         rtol=1e-12)
    assert 7.0 <= x <= 7.0 * (1 + 1e-11)
    assert smallest_epsilon(lambda e: 1.0 if e < 8.0 else 0.0, 0.5, start=4.0,
                            epsilon_max=7.5) == math.inf


# -- epsilon_lower_from_larger_delta --------------------------------------------------------------
@pytest.mark.parametrize("blind_below", [1e-16, 1e-13, 1e-11, 1e-9, 1e-7, 1.0])
def test_lower_from_larger_delta_is_the_smallest_certifying_delta(blind_below):
    """A method exact for delta(eps) = e^-eps (epsilon(d) = log(1/d)) but blind (0) below
    ``blind_below``: the answer is its value at the smallest tried delta it certifies -- what
    trying every delta in increasing order gives -- and a lower bound on log(1/delta); the
    bisection over the three candidates makes two tries whatever the answer."""
    calls = []

    def method(d):
        calls.append(d)
        return math.log(1 / d) if d >= blind_below else 0.0

    delta = 1e-15
    tried = [1e-13 * 100.0 ** i for i in range(3)]
    expected = next(((math.log(1 / d), d) for d in tried if d >= blind_below), (0.0, None))
    low, at = epsilon_lower_from_larger_delta(method, delta, 1e-13)
    assert (low, at) == expected
    assert 0.0 <= low <= math.log(1 / delta)
    assert calls[0] == tried[1] and len(calls) == 2   # the middle first, then one side


@pytest.mark.parametrize("tries", [1, 2, 4, 7])
def test_lower_from_larger_delta_bisects_any_number_of_candidates(tries):
    for blind_index in range(tries + 1):
        calls = []
        tried = [1e-12 * 10.0 ** i for i in range(tries)]
        threshold = tried[blind_index] if blind_index < tries else 1.0

        def method(d):
            calls.append(d)
            return 1.0 / d if d >= threshold else 0.0

        low, at = epsilon_lower_from_larger_delta(method, 1e-14, 1e-12, ratio=10.0,
                                                  tries=tries)
        if blind_index < tries:
            assert (low, at) == (1.0 / tried[blind_index], tried[blind_index])
        else:
            assert (low, at) == (0.0, None)
        assert len(calls) <= math.ceil(math.log2(tries + 1))


def test_lower_from_larger_delta_skips_failures_and_out_of_range():
    def failing(d):
        raise NumericalError("not certified", "a larger delta")
    assert epsilon_lower_from_larger_delta(failing, 1e-12, 1e-10) == (0.0, None)
    # only deltas in (delta, 0.5) are tried: 4e-4 and 4e-2 are, 4 is not
    calls = []
    low, at = epsilon_lower_from_larger_delta(lambda d: calls.append(d) or 1.0, 1e-4, 4e-4)
    assert (low, at) == (1.0, 4e-4) and calls == [4e-4]
    assert epsilon_lower_from_larger_delta(lambda d: 1.0, 0.3, 0.6) == (0.0, None)


def test_secant_steering_is_certified_and_takes_fewer_evaluations():
    """``secant=True``: Newton steered by the last two points' slope of log delta.  The answer
    is a point where the bound was seen at or below the target (validity never rests on the
    steering), within rtol of the root of the closed form e^-(x^2), in fewer evaluations than
    bisection."""
    calls = {"secant": 0, "bisect": 0}

    def counted(kind):
        def fn(x):
            calls[kind] += 1
            return math.exp(-x * x)
        return fn
    root = math.sqrt(math.log(1e6))
    for kind, secant in (("secant", True), ("bisect", False)):
        x = smallest_epsilon(counted(kind), 1e-6, hi=10.0, rtol=1e-6, secant=secant)
        assert math.exp(-x * x) <= 1e-6 and x - root <= 1e-6 * x
    assert calls["secant"] < calls["bisect"]


@pytest.mark.parametrize("search", ["smallest", "largest_violating"])
def test_a_close_bracket_starts_the_secant_where_log_delta_interpolates(search):
    """A bracket from a bound a few per cent above the answer (the shuffle blanket's): the
    first point is where ``log delta`` interpolated between the ends meets the target, not the
    midpoint.  Closed-form roots of three profiles, three targets, brackets 2-10 % wide: every
    answer is within rtol on its side of the root, and the searches took 141 evaluations in
    all (169 starting from the midpoint, the old first point)."""
    profiles = [(lambda e: 0.5 * math.exp(-3 * e), lambda d: math.log(0.5 / d) / 3),
                (lambda e: math.exp(-(e + 1.0) ** 2), lambda d: math.sqrt(-math.log(d)) - 1),
                (lambda e: 0.3 * math.exp(-8 * e * e), lambda d: math.sqrt(math.log(0.3 / d) / 8))]
    evaluations = 0
    for profile, root_of in profiles:
        for target in (1e-3, 1e-6, 1e-10):
            root = root_of(target)
            for factor in (1.02, 1.05, 1.1):
                calls = []

                def counted(e, profile=profile, calls=calls):
                    calls.append(e)
                    return profile(e)
                if search == "smallest":
                    x = smallest_epsilon(counted, target, hi=root * factor, rtol=1e-3,
                                         secant=True)
                    assert profile(x) <= target and x - root <= 1e-3 * x
                else:
                    x = largest_violating_epsilon(counted, target, root * factor, rtol=1e-3,
                                                  secant=True)
                    assert profile(x) > target and root - x <= 1e-3 * root + 1e-12
                evaluations += len(calls)
    assert evaluations <= 145
