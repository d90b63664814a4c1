"""Runs in which every step sees the whole dataset: the composition is exactly ``G_mu``.

When the sample rate is 1 (Poisson sampling with ``q = 1``, or fixed-size batches of the whole
dataset), every DP-SGD step is the Gaussian mechanism: sensitivity ``C`` under add/remove and
``2C`` under replace-one, noise standard deviation ``sigma C``.  Such a step is exactly
``G_{c / sigma}`` with ``c = 1`` (add/remove) or ``c = 2`` (replace-one) (Dong, Roth, Su 2022,
arXiv:1905.02383, Thm 2.7), and ``T_1 + ... + T_k`` steps at noise multipliers
``sigma_1 .. sigma_k`` compose to exactly ``G_mu`` with ``mu = c sqrt(sum_i T_i / sigma_i^2)``
(DRS 2022, Cor. 3.3).  Its privacy profile is ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps
Phi(-eps/mu - mu/2)`` (Balle & Wang 2018, arXiv:1805.06530, Thm 8; DRS 2022, Cor. 2.13): no
PLD and no grid, so any number of steps answers at once.

The PLD and f-DP accountants both answer such histories here (one implementation).

Example::

    >>> mus = full_batch_mu([(2.0, 1.0, 100)], sensitivity_factor=1.0)   # mu = 10 / 2 = 5
    >>> lower, upper = full_batch_epsilon_bounds(mus, 1e-5)
    >>> 0 < upper - lower < 1e-6 * upper
    True
"""

from __future__ import annotations

import math
from typing import Iterable

from dpplugins import fdp
from dpplugins.mechanisms.gaussian import gaussian_delta_upper
from dpplugins.numerics import largest_violating_epsilon
from dpplugins.pld.distribution import Bounds, certified_bounds

#: relative bracket around the summed ``mu`` (far above the rounding of the sum)
_MU_RTOL = 1e-12
#: relative margin in delta for the evaluation error of the profile (see
#: :func:`full_batch_epsilon_bounds`)
_DELTA_RTOL = 1e-8


def full_batch_mu(runs: Iterable[tuple[float, float, int]], *,
                  sensitivity_factor: float) -> tuple[float, float] | None:
    """``(mu_low, mu_high)`` around the exact GDP parameter of ``runs`` when every run has
    sample rate 1, else None.

    ``runs`` are ``(noise_multiplier, sample_rate, steps)``; ``sensitivity_factor`` is ``c``
    of the module docstring (1 for add/remove, 2 for replace-one).  ``mu = c sqrt(sum_i T_i /
    sigma_i^2)`` (DRS 2022, Cor. 3.3), bracketed by a relative ``1e-12``; larger ``mu`` is less
    private, so ``mu_high`` gives upper and ``mu_low`` lower bounds.  None also when ``mu`` is 0,
    infinite or above ``1e150`` (a noise multiplier of 0 is non-private: the caller answers it).
    """
    runs = list(runs)
    if not runs or any(q != 1.0 for _, q, _ in runs):
        return None
    if any(not sigma > 0 for sigma, _, _ in runs):
        return None
    inverses = [(float(t), float(sensitivity_factor) / sigma) for sigma, _, t in runs]
    # scaled by the largest c / sigma, as fdp.gdp_compose: the squares of c / sigma below about
    # 1e-154 were subnormal with a few digits left (sigma = 1e160: mu 5.6e-6 relative below its
    # exact value, outside the 1e-12 bracket), and 0 below about 1e-162
    scale = max(x for _, x in inverses)
    if not 0.0 < scale < math.inf:
        return None
    total = math.fsum(t * (x / scale) * (x / scale) for t, x in inverses)
    mu = scale * math.sqrt(total) if math.isfinite(total) else math.inf
    if not (math.isfinite(mu) and 0.0 < mu < 1e150):
        return None
    return mu * (1 - _MU_RTOL), mu * (1 + _MU_RTOL)


#: below this ``mu`` the lower bounds use :func:`small_mu_delta_lower` (the log-space profile
#: cancels: ``Phi(-eps/mu + mu/2)`` and ``e^eps Phi(-eps/mu - mu/2)`` agree to about ``mu``)
SMALL_MU = 1e-3
_U = 2.0 ** -53


def small_mu_delta_lower(epsilon: float, mu: float) -> float:
    """Certified lower bound on ``delta(eps)`` of ``G_mu`` for small ``mu``, without the
    cancellation of the two terms of the profile.

    ``delta = [Phi(a) - Phi(b)] - (e^eps - 1) Phi(b)`` with ``a, b = m +- mu/2``, ``m =
    -eps/mu``.  The first bracket is the integral of ``phi`` over ``[b, a]``; by the midpoint
    rule it is ``mu phi(m) + (mu^3 / 24) phi''(xi)`` for some ``xi`` in ``[b, a]`` (the midpoint
    rule's error term, e.g. Atkinson 1989, "An Introduction to Numerical Analysis", Sec. 5.2),
    and on ``[b, a]``, ``|phi''(x)| = |x^2 - 1| phi(x) <= ((|m| + mu/2)^2 + 1) phi(max(|m| -
    mu/2, 0))`` (our derivation), so the error is relative to ``mu phi(m)``: about ``mu^2 (m^2 +
    1) / 24``.  The terms are formed in logs relative to ``mu phi(m)`` (``e^eps`` alone overflows
    above eps = 709.78); the rounding of ``phi(m)``, ``expm1`` and ``log_ndtr`` is charged at
    ``8 + 2 m^2`` ulps each (their own few ulps, and ``m`` rounded) and each exponential at 4
    ulps per unit of the magnitudes in its exponent (our error model, as in
    :func:`dpplugins.mechanisms.gaussian.gaussian_delta_upper`; 0 misses against 80-digit
    arithmetic at 560 points, mu from 1e-15 to 1e-3 and eps from 1e-12 to 1e4).  At ``mu = 1e-12`` the
    log-space profile was 1.8e-4 relative above the exact value (found by a hostile sweep
    against 60-digit arithmetic); this stays below it."""
    from scipy.special import log_ndtr

    epsilon, mu = float(epsilon), float(mu)
    m = -epsilon / mu
    if not abs(m) < 1e6:
        # 0 is always a lower bound, and at the mu below SMALL_MU this serves the profile is
        # below Phi(m + mu/2) < e^(-4e11), far below every float (beyond |m| of about 1.3e154
        # the terms below raised OverflowError)
        return 0.0
    log_root = 0.5 * math.log(2.0 * math.pi)
    inner = max(abs(m) - mu / 2, 0.0)
    # m = -eps/mu is rounded (relative u), so m^2 / 2 is off by about u m^2 and phi(m), and
    # Phi at m - mu/2, by that relative amount besides their own few ulps
    slack = (8.0 + 2.0 * m * m) * _U
    # in logs, relative to the main term mu phi(m): e^eps overflowed above eps = 709.78 (a
    # hostile sweep: delta at eps = 1000 for mu = 1e-3 raised), and a term that underflowed
    # alone could leave the other standing
    main = math.log(mu) - 0.5 * m * m - log_root
    curvature = (3 * math.log(mu) - math.log(24.0) + math.log((abs(m) + mu / 2) ** 2 + 1.0)
                 - 0.5 * inner * inner - log_root)
    log_expm1 = epsilon + math.log1p(-math.exp(-epsilon)) if epsilon > 1.0 \
        else math.log(math.expm1(epsilon)) if epsilon > 0 else -math.inf
    minus = log_expm1 + float(log_ndtr(m - mu / 2))
    # each exponent is off by a few ulps of the magnitudes summed into it: its exponential by
    # that relative amount
    logs = (8.0 + 4.0 * (abs(main) + abs(curvature) + abs(minus) + abs(log_expm1) + epsilon)) \
        * _U if math.isfinite(minus) else (8.0 + 4.0 * (abs(main) + abs(curvature))) * _U
    bracket = ((1 - slack - logs) - math.exp(min(curvature - main, 700.0)) * (1 + slack + logs)
               - math.exp(min(minus - main, 700.0)) * (1 + slack + logs))
    if not bracket > 0:
        return 0.0
    return math.exp(main) * bracket * (1 - logs)


def full_batch_epsilon_bounds(mus: tuple[float, float], delta: float) -> Bounds:
    """Certified bounds on epsilon(delta) of ``G_mu`` for ``mu`` in ``mus``.

    Upper: :func:`dpplugins.fdp.gdp_epsilon_for_delta` of ``mu_high`` at ``delta (1 - 1e-8)``
    (it inverts the certified upper bound
    :func:`dpplugins.mechanisms.gaussian.gaussian_delta_upper`).  Lower: the same inverse at
    ``mu_low`` and ``delta (1 + 1e-8)``, lowered by a relative ``1e-9``; the margins cover the
    evaluation error of the log-space profile (numerically checked against 60-digit arithmetic:
    at most a relative 2e-10 for mu in [1e-3, 2e4], delta in [1e-30, 0.5]; and at delta 1e-5 for
    mu in [1e4, 1e20] -- 10^12 full-batch steps are mu = 1e6 at sigma 1 -- the upper bound
    within a relative 5e-13 and the lower one within 1.0005e-9 of the root).  Below ``mu =
    SMALL_MU`` the lower bound inverts :func:`small_mu_delta_lower` instead."""
    upper = fdp.gdp_epsilon_for_delta(mus[1], delta * (1 - _DELTA_RTOL))
    if mus[0] < SMALL_MU:
        # the shared bisection keeps its point where the lower bound exceeds delta (0 if none)
        lower = largest_violating_epsilon(lambda e: small_mu_delta_lower(e, mus[0]), delta,
                                          upper, rtol=1e-12, atol=0.0)
        return certified_bounds(lower, upper, f"epsilon at delta={delta!r}")
    lower = fdp.gdp_epsilon_for_delta(mus[0], min(delta * (1 + _DELTA_RTOL), 0.5 + delta / 2))
    return certified_bounds(lower * (1 - 1e-9), upper, f"epsilon at delta={delta!r}")


def full_batch_delta_bounds(mus: tuple[float, float], epsilon: float) -> Bounds:
    """Certified bounds on delta(epsilon) of ``G_mu`` for ``mu`` in ``mus``, with the margin of
    :func:`full_batch_epsilon_bounds` (so that ``delta(epsilon(d)) <= d``); the upper one is
    :func:`~dpplugins.mechanisms.gaussian.gaussian_delta_upper`, which never rounds below
    ``1e-300`` (the profile at a huge ``epsilon`` is positive, if below the float range)."""
    upper = min(1.0, gaussian_delta_upper(float(epsilon), mus[1]) * (1 + _DELTA_RTOL))
    if mus[0] < SMALL_MU:
        lower = small_mu_delta_lower(epsilon, mus[0])
    else:
        lower = max(0.0, float(fdp.gdp_delta_for_epsilon(mus[0], epsilon)) * (1 - _DELTA_RTOL))
    return certified_bounds(lower, upper, f"delta at epsilon={epsilon!r}")
