"""Property tests (hypothesis) for the PLD accountant.

Monotonicity is checked in its certified form: if the true epsilon is monotone in a parameter,
then the upper bound at the larger setting can never be below the lower bound at the smaller one
(the two are computed on different grids, so comparing two upper bounds would test accuracy, not
correctness).
"""

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import epsilon_from_delta_curve, gaussian_delta_exact
from dpplugins.accountants import create

SETTINGS = settings(max_examples=12, deadline=None, derandomize=True)
sigmas = st.floats(0.5, 5.0)
rates = st.floats(1e-3, 1.0)
steps = st.integers(1, 3000)
deltas = st.sampled_from([1e-3, 1e-5, 1e-8])


def bounds(sigma, q, t, delta, **options):
    acc = create("pld", **options)
    acc.step(noise_multiplier=sigma, sample_rate=q, count=t)
    return acc.get_epsilon_bounds(delta)


@SETTINGS
@given(sigmas, rates, steps, deltas)
def test_bounds_are_ordered_finite_and_nonnegative(sigma, q, t, delta):
    b = bounds(sigma, q, t, delta)
    assert math.isfinite(b.upper) and math.isfinite(b.lower)
    assert 0.0 <= b.lower <= b.upper


@SETTINGS
@given(sigmas, rates, steps, st.integers(1, 3000), deltas)
def test_monotone_in_steps(sigma, q, t, extra, delta):
    assert bounds(sigma, q, t + extra, delta).upper >= bounds(sigma, q, t, delta).lower


@SETTINGS
@given(sigmas, st.floats(1.05, 3.0), rates, steps, deltas)
def test_monotone_in_noise(sigma, factor, q, t, delta):
    assert bounds(sigma, q, t, delta).upper >= bounds(sigma * factor, q, t, delta).lower


@SETTINGS
@given(sigmas, st.floats(1e-3, 0.5), st.floats(1.05, 2.0), steps, deltas)
def test_monotone_in_sampling_rate(sigma, q, factor, t, delta):
    assert bounds(sigma, min(1.0, q * factor), t, delta).upper >= bounds(sigma, q, t, delta).lower


@SETTINGS
@given(sigmas, rates, steps)
def test_monotone_in_delta(sigma, q, t):
    assert bounds(sigma, q, t, 1e-6).upper >= bounds(sigma, q, t, 1e-4).lower


@SETTINGS
@given(st.lists(st.tuples(st.floats(0.7, 6.0), st.integers(1, 200)), min_size=1, max_size=4),
       deltas)
def test_heterogeneous_gaussian_history_matches_closed_form(runs, delta):
    """Without subsampling, T_i steps at sigma_i compose to one Gaussian with
    mu = sqrt(sum T_i / sigma_i^2) (Dong, Roth, Su 2022, Cor. 3.3)."""
    acc = create("pld")
    for sigma, t in runs:
        acc.step(noise_multiplier=sigma, sample_rate=1.0, count=t)
    mu = math.sqrt(sum(t / s ** 2 for s, t in runs))
    exact = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)
    b = acc.get_epsilon_bounds(delta)
    assert b.lower <= exact <= b.upper
