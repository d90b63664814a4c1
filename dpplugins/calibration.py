"""Noise calibration: the smallest noise multiplier that meets a target epsilon.

``find_noise_multiplier`` works for any registered accountant: it builds fresh accountants from
the registry (never touching a live one) and finds the root of ``log eps(sigma) - log target``
in ``log sigma`` in three stages, from cheap to certified:

1. **Search** on a cheap certified upper bound: the accountant's ``epsilon_upper_fast`` on a grid
   four times coarser where it offers one (a valid upper bound, only looser), else its
   ``epsilon_upper_fast`` or ``get_epsilon``.  The bracket grows from ``sigma = 1`` by steps
   sized from the last value (``eps`` roughly proportional to ``1/sigma``), doubled after each
   step that does not change sign, so huge and tiny targets are bracketed in a few evaluations;
   then Brent's method (Brent 1973, "Algorithms for minimization without derivatives", Ch. 4;
   ``scipy.optimize.brentq``).
2. **Polish** (only after a coarse search): the same on the one-grid bound at the accountant's
   own grid, bracketed from the coarse root by a secant step.
3. **Verify**: the accountant's certified ``get_epsilon`` at the sigma found must be <= target;
   if rounding put it just above, sigma is nudged up until it is.  Where the certificate is
   clearly below the target (more than ``sigma_tolerance``, at most 1 %: near epsilon = 0 one
   grid is loose), the search continues downwards on the certificate itself.

Bounded time: at most 60 bracket steps over ``sigma`` in ``[1e-12, 1e12]`` (a target that is not
reachable there is a :class:`~dpplugins.errors.NumericalError` naming the epsilons seen) and
Brent's iteration limit.
"""

from __future__ import annotations

import inspect
import math
from typing import Any, Callable

from scipy.optimize import brentq

from dpplugins.accountants import create
from dpplugins.accountants.base import check_representable
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_open_unit,
                              check_positive, check_probability)
from dpplugins.events import Event

__all__ = ["find_noise_multiplier"]

#: how much coarser the search grid is than the accountant's own first grid
COARSEN = 4.0
#: range of log(sigma) searched
_LOG_SIGMA_RANGE = (math.log(1e-12), math.log(1e12))
#: a certified epsilon at most this far below the target (relative) is accepted as the search's
#: answer, and never more than ``sigma_tolerance`` below it: ``d log eps / d log sigma`` is
#: about -1 to -2, so sigma is then within ``sigma_tolerance`` of the smallest one that meets
#: the target (a fixed 1 % band returned a sigma 5.5e-4 too high at sigma_tolerance 1e-9, and
#: 0.4 % too high at the default 1e-3 for 10^9 steps; found by a hostile sweep)
_ACCEPT_BELOW_MAX = 1e-2
#: smallest ``sigma_tolerance`` accepted
_MIN_SIGMA_TOLERANCE = 1e-12
#: |log eps - log target| is clamped here (eps = 0 or inf stay usable in Brent's method)
_CLAMP = 1e3


def _epsilon_for(accountant_name: str, options: dict, record, sigma: float, delta: float, *,
                 fast: bool, coarsen: float = 1.0) -> float:
    acc = create(accountant_name, **options)
    record(acc, sigma)
    method = getattr(acc, "epsilon_upper_fast", None) if fast else None
    if method is None:
        return acc.get_epsilon(delta)
    if coarsen != 1.0 and "coarsen" in inspect.signature(method).parameters:
        return method(delta, coarsen=coarsen)
    return method(delta)


def _log_gap(epsilon: float, target: float) -> float:
    if epsilon <= 0:
        return -_CLAMP
    if not math.isfinite(epsilon):
        return _CLAMP
    return float(min(max(math.log(epsilon) - math.log(target), -_CLAMP), _CLAMP))


class _TargetMetEverywhere(Exception):
    """The target holds at the smallest noise multiplier searched."""


def _bracket(gap, start: float) -> tuple[float, float, float, float]:
    """``(lo, hi, g_lo, g_hi)`` with ``g_lo > 0 >= g_hi`` (``lo < hi`` in log sigma);
    :class:`_TargetMetEverywhere` when the target holds down to the smallest sigma searched."""
    x, g = start, gap(start)
    low, high = _LOG_SIGMA_RANGE
    step = None
    seen = [(x, g)]
    for _ in range(60):
        # eps ~ 1/sigma: the root is near x + g; at least 0.05, at most 5 per step, doubled
        # while the sign does not change
        jump = min(max(abs(g), 0.05), 5.0) if step is None else min(2 * step, 20.0)
        step = jump
        x_new = min(max(x + (jump if g > 0 else -jump), low), high)
        g_new = gap(x_new)
        seen.append((x_new, g_new))
        if (g > 0) != (g_new > 0):
            lo, hi = (x, x_new) if g > 0 else (x_new, x)
            return lo, hi, max(g, g_new), min(g, g_new)
        if x_new == low and g_new <= 0:
            raise _TargetMetEverywhere
        if x_new in (low, high):
            break
        x, g = x_new, g_new
    # (exp of a clamped gap overflowed: an OverflowError instead of this message)
    described = ", ".join(f"sigma={math.exp(a):.3g}: eps/target="
                          + ("inf" if b >= _CLAMP else f"{math.exp(b):.3g}")
                          for a, b in seen[-3:])
    raise NumericalError(f"could not bracket a noise multiplier ({described})",
                         "check that the target is reachable for this sample_rate and number "
                         "of steps")


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
    support the event (``UnsupportedEventError`` otherwise, before any search).  The search
    covers ``[1e-12, 1e12]``; when the target holds even at ``1e-12`` (a negligible sample
    rate, say) that is the answer.  It is the smallest noise multiplier at which the
    accountant *certifies* the target: where its certified bound is infinite at every smaller
    one (a target of 1e300 at q = 0.01, 100 steps: the PLD engine's upper bound is inf below
    sigma = 0.0325, where epsilon is already about 4,000), the answer is above the true
    smallest, never below it.

    Example::

        >>> sigma = find_noise_multiplier(target_epsilon=8.0, delta=1e-5, sample_rate=0.01,
        ...                               steps=10_000)
    """
    target = check_positive("target_epsilon", target_epsilon)
    delta = check_open_unit("delta", delta)
    tol = check_positive("sigma_tolerance", sigma_tolerance)
    if tol < _MIN_SIGMA_TOLERANCE:
        # (below double precision the verification's nudges sigma *= 1 + tol / 2 left sigma
        # unchanged: 200 certified evaluations, then "epsilon 1 > 1" at sigma_tolerance=1e-300)
        raise ParameterError("sigma_tolerance", sigma_tolerance,
                             f">= {_MIN_SIGMA_TOLERANCE:g} (a relative accuracy a noise multiplier "
                             "can be stepped by in double precision)")
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
        for name, value in (("sample_rate", sample_rate), ("steps", steps)):
            if value is not None:   # (they were silently ignored, even steps=-3)
                raise ParameterError(name, value, "None when event_for_noise is given (the "
                                     "event describes the run)")

        def record(acc, sigma):
            acc.compose(event_for_noise(sigma))
    record(probe, 1.0)  # refuses an unsupported run now, not after the search
    # and one the composition engines cannot represent (more than 2**53 compositions; the
    # fast path skipped the check and refused with an internal name, count=10^30)
    check_representable(probe.history)

    probe_method = getattr(probe, "epsilon_upper_fast", None)
    coarse = probe_method is not None and "coarsen" in inspect.signature(probe_method).parameters
    memo: dict[tuple[float, float], float] = {}
    refusals: list[NumericalError] = []   # the search's refusals (counted as epsilon = inf)

    def gap_at(log_sigma: float, coarsen: float) -> float:
        key = (log_sigma, coarsen)
        if key not in memo:  # Brent's method re-evaluates its end points
            try:
                epsilon = _epsilon_for(accountant, options, record, math.exp(log_sigma), delta,
                                       fast=True, coarsen=coarsen)
            except NumericalError as error:
                # a refusal in the search counts as epsilon = inf: at too little noise the
                # error terms of some accountants exceed every delta (pnsgd's passes), and the
                # search stopped there (a target of 1e4 was refused while 3 answered); the
                # certified checks of an answer still raise it
                refusals.append(error)
                epsilon = math.inf
            memo[key] = _log_gap(epsilon, target)
        return memo[key]

    def solve(gap, lo: float, hi: float, g_hi: float) -> float:
        """Brent's root, moved to the feasible side (gap <= 0) within ``xtol``."""
        if g_hi >= 0:
            return hi
        x = brentq(gap, lo, hi, xtol=xtol, rtol=1e-12)
        return x if gap(x) <= 0 else min(x + xtol, hi)

    xtol = tol / 4
    accept_below = math.log1p(-min(_ACCEPT_BELOW_MAX, tol))
    search = (lambda x: gap_at(x, COARSEN)) if coarse else (lambda x: gap_at(x, 1.0))
    certified_epsilon: dict[float, float] = {}

    def certified_gap(x: float) -> float:
        if x not in certified_epsilon:
            try:
                certified_epsilon[x] = _epsilon_for(accountant, options, record, math.exp(x),
                                                    delta, fast=False)
            except NumericalError as error:   # not certified there: not an answer
                refusals.append(error)
                certified_epsilon[x] = math.inf
        return _log_gap(certified_epsilon[x], target)

    def verified(x: float) -> float:
        return _verify(x, certified_epsilon.get(x, math.inf),
                       lambda sigma: _epsilon_for(accountant, options, record, sigma, delta,
                                                  fast=False), target, tol)

    try:
        lo, hi, g_lo, g_hi = _bracket(search, 0.0)
    except NumericalError as error:
        if not refusals:
            raise
        raise NumericalError(f"{error.what}; the accountant refused at some noise multipliers: "
                             f"{refusals[-1].what}", refusals[-1].fix) from None
    except _TargetMetEverywhere:
        # even the smallest noise multiplier searched (1e-12) meets the target -- e.g. a
        # sample rate so small that delta(0) <= steps * q is below delta: it is the answer,
        # verified with the certified epsilon (it refused: "could not bracket")
        return verified(_LOG_SIGMA_RANGE[0])
    root = solve(search, lo, hi, g_hi)

    if coarse:
        # polish at the accountant's own grid: the coarse bound is higher, so the fine root is
        # at or below the coarse one; a secant step with the bracket's slope brackets it
        fine = lambda x: gap_at(x, 1.0)  # noqa: E731
        g = fine(root)
        if g != search(root):  # the fine grid is another grid (small sigma: both at _MAX_H)
            # the fine root is near: the first step is the Newton step with the coarse slope
            # near the root (the two grids' bounds differ by an almost constant offset), kept
            # within [xtol, 0.05]; steps double until the sign changes, then Brent's method
            near = sorted((abs(x - root), x, v) for (x, c), v in memo.items() if c == COARSEN)
            (_, xa, ga), (_, xb, gb) = near[0], near[1]
            slope = min((gb - ga) / (xb - xa) if xb != xa else -1.0, -1e-3)
            step = min(max(abs(g / slope), xtol), 0.05)
            # first one certified evaluation at the Newton estimate of the fine root, moved a
            # quarter of the tolerance to the feasible side: accepted when it is feasible and
            # within the certificate's acceptance band below (the same band as after the
            # search), which saves the fine polishing (two or three evaluations; performance
            # issue 19)
            guess = root - min(max((g + xtol * abs(slope) / 4) / slope, -0.05), 0.05)
            guess_gap = certified_gap(guess)
            if accept_below <= guess_gap <= 0:
                return verified(guess)
            direction = -1.0 if g <= 0 else 1.0  # feasible: look for a smaller sigma
            x0, g0 = root, g
            for _ in range(40):
                x1 = min(max(x0 + direction * step, _LOG_SIGMA_RANGE[0]), _LOG_SIGMA_RANGE[1])
                g1 = fine(x1)
                if (g1 > 0) != (g0 > 0):
                    a, b, g_b = (x0, x1, g1) if x1 > x0 else (x1, x0, g0)
                    root = solve(fine, a, b, g_b)
                    break
                if x1 == x0:
                    break
                x0, g0, step = x1, g1, 2 * step
            else:
                root = x0 if g0 <= 0 else root
    g = certified_gap(root)
    if g < accept_below:
        # the certificate (refined grids) is clearly tighter than the search bound here, as
        # near epsilon = 0 where one grid is loose: continue the search on it, downwards.
        # Steps: the bracket's Newton step first (eps ~ 1/sigma: the root is near x + g) when
        # the certificate is positive, else 0.01; then the secant through the last two positive
        # certificates, 10 % past its root (at most 4 times the last step, at least 0.01), or
        # doubling.  (Doubling from 0.01 alone took 14 certified evaluations for q = 1e-6,
        # 10^9 steps, target 0.01, where one grid was 3.6 times the certificate: 156 s.)
        x0, g0 = root, g
        step = min(max(abs(g0), 0.01), 5.0) if g0 > -_CLAMP else 0.01
        for _ in range(40):
            x1 = max(x0 - step, _LOG_SIGMA_RANGE[0])
            g1 = certified_gap(x1)
            if g1 > 0:
                root = solve(certified_gap, x1, x0, g0)
                break
            if x1 == x0:
                break
            if -_CLAMP < g0 < g1:
                secant = g1 * (x1 - x0) / (g1 - g0)   # distance from x1 down to the secant root
                step = max(min(1.1 * secant, 4 * step), 0.01)
            else:
                step = 2 * step
            x0, g0 = x1, g1
    return verified(root)


def _verify(root: float, known: float, epsilon_at, target: float, tol: float) -> float:
    """``exp(root)``, verified with the accountant's full (accuracy-checked) certified epsilon
    (``known``: the one already computed at the root, inf if none), moved up until it holds."""
    sigma = math.exp(root)
    if known <= target:
        return sigma
    refused = 0
    for _ in range(200):
        try:
            eps = epsilon_at(sigma)
        except NumericalError:
            # not certified at this sigma: more noise is tried, but a run of refusals is
            # passed on (each refused query may cost as much as an answered one)
            refused += 1
            if refused >= 3:
                raise
            eps = math.inf
        if eps <= target:
            return sigma
        sigma *= 1 + tol / 2
    raise NumericalError(f"verification of sigma={sigma!r} kept failing (epsilon {eps!r} > "
                         f"target {target!r})", "raise sigma_tolerance or eps_tolerance")
