"""Noise calibration: the smallest noise multiplier that meets a target epsilon.

``find_noise_multiplier`` works for any registered accountant: it builds a fresh accountant from
the registry (never touching a live one), brackets the root of ``eps(sigma) - target`` by widening
geometrically, and runs Brent's method (Brent 1973, "Algorithms for minimization without
derivatives", Ch. 4; ``scipy.optimize.brentq``).  The returned sigma is then *verified*: the
accountant's certified epsilon at that sigma must be <= target; if rounding put it just above, the
sigma is nudged up until it is.
"""

from __future__ import annotations

import math
from typing import Any, Callable

from scipy.optimize import brentq

from dpplugins.accountants import create
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_open_unit,
                              check_positive, check_probability)
from dpplugins.events import Event

__all__ = ["find_noise_multiplier"]


def _epsilon_for(accountant_name: str, options: dict, record, sigma: float, delta: float, *,
                 fast: bool) -> float:
    acc = create(accountant_name, **options)
    record(acc, sigma)
    if fast and hasattr(acc, "epsilon_upper_fast"):
        return acc.epsilon_upper_fast(delta)
    return acc.get_epsilon(delta)


def find_noise_multiplier(*, target_epsilon: float, delta: float,
                          sample_rate: float | None = None, steps: int | None = None,
                          accountant: str = "pld", sigma_tolerance: float = 1e-3,
                          event_for_noise: Callable[[float], Event] | None = None,
                          **options: Any) -> float:
    """Smallest noise multiplier (to relative ``sigma_tolerance``) with certified eps <= target.

    The training run is either ``event_for_noise(sigma)`` (an event of :mod:`dpplugins.events`,
    e.g. ``lambda s: sampler.event(s, epochs=3)``) or ``steps`` steps of
    ``accountant.step(noise_multiplier=sigma, sample_rate=sample_rate)``.  ``options`` are passed
    to the accountant's constructor (``dpplugins.accountants.create``).  The accountant must
    support the event (``UnsupportedEventError`` otherwise, before any search).

    Example::

        >>> sigma = find_noise_multiplier(target_epsilon=8.0, delta=1e-5, sample_rate=0.01,
        ...                               steps=10_000)
    """
    target = check_positive("target_epsilon", target_epsilon)
    delta = check_open_unit("delta", delta)
    tol = check_positive("sigma_tolerance", sigma_tolerance)
    probe = create(accountant, **options)  # fails early on an unknown name or bad options
    if event_for_noise is None:
        q = check_probability("sample_rate", sample_rate)
        steps = check_count("steps", steps, minimum=1)

        def record(acc, sigma):
            acc.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    else:
        if not callable(event_for_noise):
            raise ParameterError("event_for_noise", event_for_noise,
                                 "a function noise_multiplier -> event")

        def record(acc, sigma):
            acc.compose(event_for_noise(sigma))
    record(probe, 1.0)  # refuses an unsupported run now, not after the search

    def gap(log_sigma: float) -> float:
        return _epsilon_for(accountant, options, record, math.exp(log_sigma), delta,
                            fast=True) - target

    # widen the bracket geometrically until eps(lo) > target >= eps(hi)
    lo, hi = math.log(0.5), math.log(2.0)
    g_lo, g_hi = gap(lo), gap(hi)
    for _ in range(60):
        if g_lo > 0:
            break
        lo, hi, g_hi = lo - 1.0, lo, g_lo
        g_lo = gap(lo)
    for _ in range(60):
        if g_hi <= 0:
            break
        lo, hi, g_lo = hi, hi + 1.0, g_hi
        g_hi = gap(hi)
    if not (g_lo > 0 >= g_hi):
        raise NumericalError(
            f"could not bracket a noise multiplier for target_epsilon={target:g} "
            f"(epsilon at sigma={math.exp(lo):.3g} is {g_lo + target:.4g}, "
            f"at sigma={math.exp(hi):.3g} is {g_hi + target:.4g})",
            "check that the target is reachable for this sample_rate and number of steps")
    log_sigma = brentq(gap, lo, hi, xtol=tol / 4, rtol=1e-12) if g_hi < 0 else hi
    sigma = math.exp(log_sigma)
    # verify with the accountant's full (accuracy-checked) certified epsilon; move up if needed
    for _ in range(200):
        eps = _epsilon_for(accountant, options, record, sigma, delta, fast=False)
        if eps <= target:
            return sigma
        sigma *= 1 + tol / 2
    raise NumericalError(f"verification of sigma={sigma:.6g} kept failing (epsilon {eps:.6g} > "
                         f"{target:g})", "raise sigma_tolerance or eps_tolerance")
