"""Random allocation with check-in probability p < 1 (k = 1, Gaussian noise): certified bounds
against exact quadrature (t <= 3), Monte Carlo with its standard error (t <= 20), the
post-processing comparison with random allocation into floor(t/p) steps, monotonicity in p and
the p -> 1 limit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, special

from dpplugins.amplification.allocation import monte_carlo_delta, random_allocation_pld
from dpplugins.errors import ParameterError


def _positive_part_mean(alpha: float, beta: float, s: float) -> float:
    """``E[(alpha + beta Y)_+]`` for ``Y = e^G``, ``G ~ N(0, s^2)``, in closed form (the
    log-normal's truncated moments: ``E[Y; Y > y] = e^(s^2/2) Phi((s^2 - log y) / s)``)."""
    mean_y = math.exp(s * s / 2)
    if beta > 0:
        if alpha >= 0:
            return alpha + beta * mean_y
        z = math.log(-alpha / beta) / s
        return alpha * special.ndtr(-z) + beta * mean_y * special.ndtr(s - z)
    if alpha <= 0:
        return 0.0
    z = math.log(alpha / -beta) / s
    return alpha * special.ndtr(z) + beta * mean_y * special.ndtr(z - s)


def _exact_delta(sigma: float, t: int, p: float, epsilon: float, direction: str) -> float:
    """Hockey-stick divergence of ``P = (1 - p) Q + p (1/t) sum_j N(e_j, sigma^2 I)`` against
    ``Q = N(0, sigma^2 I)``: ``dP/dQ = (1 - p) + p a sum_j Y_j`` with ``Y_j = e^(x_j/sigma^2)``,
    ``a = e^(-1/(2 sigma^2)) / t``.  The last coordinate is integrated in closed form, the others
    by adaptive quadrature over ``x_j = sigma z_j``."""
    s = 1.0 / sigma
    a = math.exp(-s * s / 2) / t
    g = math.exp(epsilon)

    def inner(others: float) -> float:
        if direction == "remove":   # E_Q[(r - g)_+]
            return _positive_part_mean((1 - p) - g + p * a * others, p * a, s)
        return _positive_part_mean(1 - g * (1 - p) - g * p * a * others, -g * p * a, s)  # add

    def y_of(z):
        return math.exp(s * z)      # x = sigma z, Y = e^(x / sigma^2) = e^(z / sigma)

    phi = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)  # noqa: E731
    opts = dict(epsabs=1e-14, epsrel=1e-11, limit=400)
    if t == 1:
        return inner(0.0)
    if t == 2:
        return integrate.quad(lambda z: phi(z) * inner(y_of(z)), -14, 14, **opts)[0]
    assert t == 3
    return integrate.dblquad(lambda z2, z1: phi(z1) * phi(z2) * inner(y_of(z1) + y_of(z2)),
                             -11, 11, -11, 11, epsabs=1e-13, epsrel=1e-9)[0]


@pytest.mark.parametrize("t", [1, 2, 3])
@pytest.mark.parametrize("p", [0.3, 0.75])
def test_delta_brackets_exact_quadrature(t, p):
    sigma = 1.0
    pld = random_allocation_pld(sigma, t, 1, checkin_probability=p)
    for epsilon in (0.3, 1.5):
        exact = max(_exact_delta(sigma, t, p, epsilon, d) for d in ("remove", "add"))
        bounds = pld.delta_for_epsilon(epsilon)
        tol = 1e-9 * exact + 1e-13   # quadrature error allowance
        assert bounds.lower - tol <= exact <= bounds.upper + tol, (epsilon, bounds, exact)
        assert bounds.upper - bounds.lower <= 2e-3 * exact   # and the bracket is narrow


@pytest.mark.slow
def test_one_step_is_the_poisson_subsampled_gaussian():
    """t = 1 is the Poisson-subsampled Gaussian at rate p: compare with dp_accounting's PLD
    (pessimistic and optimistic), an independent public implementation."""
    dp_accounting = pytest.importorskip("dp_accounting")
    from dp_accounting.pld import privacy_loss_distribution as pld_lib
    sigma, p, epochs, delta = 0.8, 0.4, 5, 1e-5
    ours = random_allocation_pld(sigma, 1, epochs, checkin_probability=p).epsilon_for_delta(delta)
    theirs = []
    for pessimistic in (True, False):
        one = pld_lib.from_gaussian_mechanism(
            sigma, sampling_prob=p, value_discretization_interval=1e-4,
            pessimistic_estimate=pessimistic)
        theirs.append(one.self_compose(epochs).get_epsilon_for_delta(delta))
    assert dp_accounting is not None
    lo, hi = min(theirs), max(theirs)
    assert ours.lower <= hi * (1 + 1e-6) and lo <= ours.upper * (1 + 1e-6), (ours, theirs)
    assert ours.upper - ours.lower <= 0.01 * ours.upper


def _monte_carlo(sigma, t, p, epsilon, epochs, n, seed):
    """Plain Monte Carlo of the remove direction, written out here: ``E_P[(1 - e^(eps - L))_+]``
    with the example present in an epoch with probability p, in a uniform step (by symmetry,
    step 0)."""
    rng = np.random.default_rng(seed)
    s = 1.0 / sigma
    loss = np.zeros(n)
    for _ in range(epochs):
        g = rng.normal(0.0, s, size=(n, t))
        g[:, 0] += s * s * (rng.random(n) < p)
        ratio = (1 - p) + p * np.exp(special.logsumexp(g, axis=1) - s * s / 2 - math.log(t))
        loss += np.log(ratio)
    value = -np.expm1(np.minimum(epsilon - loss, 0.0))
    return float(value.mean()), float(value.std(ddof=1) / math.sqrt(n))


@pytest.mark.parametrize("t,p,epochs", [(20, 0.5, 1), (8, 0.3, 3)])
def test_monte_carlo_within_standard_errors(t, p, epochs):
    sigma, epsilon = 0.7, 0.8
    estimate, se = _monte_carlo(sigma, t, p, epsilon, epochs, 200_000, seed=1)
    pld = random_allocation_pld(sigma, t, epochs, checkin_probability=p)
    remove = pld._delta("remove", epsilon)   # the direction the Monte Carlo estimates
    assert se > 0 and estimate > 10 * se    # a meaningful estimate
    assert remove.lower - 5 * se <= estimate <= remove.upper + 5 * se, (remove, estimate, se)
    # the library's own importance-sampling estimator agrees too
    ours = monte_carlo_delta(sigma, t, epsilon, epochs=epochs, samples=100_000, seed=2,
                             checkin_probability=p)
    assert abs(ours.estimate - estimate) <= 5 * math.hypot(se, ours.standard_error)


@pytest.mark.parametrize("t,p", [(100, 0.5), (37, 0.3), (1000, 0.5)])
def test_never_above_allocation_into_t_over_p_steps(t, p):
    """Check-in with probability p is a post-processing of random allocation into floor(t/p)
    steps of which the first t are released (module docstring)."""
    delta = 1e-5
    ours = random_allocation_pld(1.0, t, 3, checkin_probability=p).epsilon_for_delta(delta)
    big = random_allocation_pld(1.0, math.floor(t / p), 3).epsilon_for_delta(delta)
    assert ours.lower <= big.upper          # certified: no tolerance
    assert ours.upper <= big.upper * (1 + 2e-3)
    assert ours.upper < big.lower or math.floor(t / p) * p != t  # strictly more private


def test_monotone_in_p():
    delta, t = 1e-5, 50
    bounds = [random_allocation_pld(1.2, t, 4, checkin_probability=p).epsilon_for_delta(delta)
              for p in (0.1, 0.25, 0.5, 0.8, 1.0)]
    for small, large in zip(bounds, bounds[1:]):
        assert small.lower <= large.upper
        assert small.upper <= large.upper * (1 + 1e-3)
        assert small.upper < large.lower   # these are far apart: strictly increasing


@pytest.mark.parametrize("t", [1, 10, 200])
def test_p_to_one_matches_random_allocation(t):
    """p = 1 - 1e-12 runs the mixing code; its bounds must overlap today's p = 1 numbers."""
    delta = 1e-6
    near = random_allocation_pld(1.0, t, 2, checkin_probability=1 - 1e-12).epsilon_for_delta(delta)
    one = random_allocation_pld(1.0, t, 2).epsilon_for_delta(delta)
    assert near.lower <= one.upper and one.lower <= near.upper * (1 + 1e-9)
    assert abs(near.upper - one.upper) <= 2e-3 * one.upper


def _gaussian_delta(mu: float, epsilon: float) -> float:
    """Balle & Wang 2018, Thm 8: ``Phi(mu/2 - eps/mu) - e^eps Phi(-mu/2 - eps/mu)``."""
    return (special.ndtr(mu / 2 - epsilon / mu)
            - math.exp(epsilon + special.log_ndtr(-mu / 2 - epsilon / mu)))


def test_small_noise_fallback_lower_bound_is_weighted():
    """Where the summands overflow, the epoch is bracketed by the Gaussian.  The truth is at most
    ``p delta_G(eps')`` with ``e^eps' = (e^eps - 1 + p) / p`` (``H`` of the mixture is ``p H`` at
    eps'; the allocation pair is a post-processing of the Gaussian), so the lower bound must be
    below it, and the upper bound at most ``delta_G(eps)``."""
    sigma, p, t, epsilon = 0.04, 0.5, 5, 250.0
    b = random_allocation_pld(sigma, t, 1, checkin_probability=p).delta_for_epsilon(epsilon)
    eps_mix = epsilon + math.log1p((p - 1) * math.exp(-epsilon)) - math.log(p)
    truth_max = p * _gaussian_delta(1 / sigma, eps_mix)
    assert 0.0 < b.lower <= truth_max
    assert b.upper <= _gaussian_delta(1 / sigma, epsilon) * (1 + 1e-6)   # Mills-ratio margin


def test_bad_checkin_probability():
    for bad in (0.0, -0.1, 1.5, float("nan")):
        with pytest.raises(ParameterError, match="checkin_probability"):
            random_allocation_pld(1.0, 10, 1, checkin_probability=bad)
    with pytest.raises(ParameterError, match="tilt"):
        monte_carlo_delta(1.0, 10, 1.0, tilt=1.0, checkin_probability=0.5)
