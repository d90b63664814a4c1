"""One monotone inverse: the smallest argument at which a non-increasing bound meets a target.

Every "epsilon for a delta" in the library is the same question: given a certified upper bound
``delta_upper(eps)`` on a privacy profile (non-increasing in ``eps``), find the smallest ``eps``
with ``delta_upper(eps) <= target``.  :func:`smallest_epsilon` answers it once, with guarantees
the callers rely on:

* **certified**: the returned point ``x`` was evaluated and ``delta_upper(x) <= target`` held
  there (or ``x`` is ``0`` after a successful check at ``0``, or ``inf``), so ``x`` is an upper
  bound on the true epsilon whatever the search did -- monotonicity of the profile is only used
  to make the answer *tight*, never to make it *valid*;
* **bounded**: the bracket grows by doubling at most ``max_doublings`` times and the refinement
  runs at most ``max_iterations`` steps; a bracket that cannot be closed below ``epsilon_max``
  answers ``inf`` (always a valid upper bound);
* NaN values count as "above the target" (the conservative side).

The refinement is bisection, or -- when the caller also gives the derivative -- safeguarded
Newton on ``log delta`` inside the bisection bracket (a Newton step that leaves the bracket is
replaced by a bisection step), which converges in a handful of evaluations on smooth profiles
such as the Gaussian mechanism's.

:func:`largest_violating_epsilon` is the mirror image for *lower* bounds: the largest ``eps``
at which a certified lower bound on delta is still above the target, and
:func:`epsilon_lower_from_larger_delta` keeps a lower bound on epsilon where a method certifies
nothing at delta itself (epsilon does not increase with delta).

Example::

    >>> import math
    >>> x = smallest_epsilon(lambda e: math.exp(-e), 1e-3)   # e^-x <= 1e-3 from x = log(1000)
    >>> 0 <= x - math.log(1000) < 1e-8
    True
    >>> math.exp(-x) <= 1e-3
    True
"""

from __future__ import annotations

import math
from typing import Callable

from dpplugins.errors import NumericalError, ParameterError, check_positive

__all__ = ["smallest_epsilon", "largest_violating_epsilon", "epsilon_lower_from_larger_delta",
           "MAX_DOUBLINGS", "MAX_ITERATIONS"]

#: bracket doublings before giving up (2^1100 exceeds the float range from any start >= 1e-300)
MAX_DOUBLINGS = 2100
#: refinement steps (bisection from any bracket to relative 1e-15 takes at most ~1100)
MAX_ITERATIONS = 1200


def _target(target) -> float:
    """The target as a float; ParameterError for NaN or a non-number."""
    try:
        value = float(target)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(target, bool) or math.isnan(value):
        raise ParameterError("target", target, "a number (not NaN)")
    return value


def _at_most(value: float, target: float) -> bool:
    """``value <= target`` with NaN on the unsafe side (False)."""
    return bool(value <= target)


def smallest_epsilon(delta_upper: Callable[[float], float], target: float, *,
                     hi: float | None = None, start: float = 1.0, guess: float | None = None,
                     newton: bool = False, secant: bool = False, rtol: float = 1e-9,
                     epsilon_max: float = math.inf, max_doublings: int = MAX_DOUBLINGS,
                     max_iterations: int = MAX_ITERATIONS) -> float:
    """Smallest ``eps >= 0`` (to relative ``rtol``, from above) with ``delta_upper(eps) <=
    target``, for a non-increasing upper bound ``delta_upper`` on a privacy profile.

    Parameters
    ----------
    delta_upper
        ``eps -> float``: a certified upper bound on delta at ``eps`` (already rounded up by
        the caller); only its value at the returned point matters for validity.  With
        ``newton=True`` it returns ``(upper bound, d delta / d eps)`` instead.
    target
        The delta to meet (any float; NaN is refused).
    hi
        A point expected to have ``delta_upper(hi) <= target`` (checked; if it does not, the
        bracket is grown from it).  Without it the bracket is grown from ``start`` by doubling.
    guess
        First point of the Newton iteration (default: the middle of the bracket).
    newton
        The refinement is safeguarded Newton on ``log delta`` (``delta_upper`` also returns
        the derivative, which only steers the search), else bisection.
    secant
        As ``newton`` for a ``delta_upper`` without a derivative: the slope of ``log delta``
        between the last two points evaluated steers it (for bounds that cost an FFT each).
    rtol
        Stop when the bracket ``[lo, hi]`` has ``hi - lo <= rtol * hi``.
    epsilon_max
        Answer ``inf`` when no point up to ``epsilon_max`` meets the target.

    Returns the upper end of the final bracket: a point where ``delta_upper <= target`` was
    observed (``0.0`` if it holds at 0; ``inf`` if no such point was found).

    Example::

        >>> smallest_epsilon(lambda e: 1.0, 0.5)    # a profile that never falls: no epsilon
        inf
        >>> smallest_epsilon(lambda e: 0.0, 0.5)
        0.0
    """
    target = _target(target)
    rtol = check_positive("rtol", rtol)
    if secant and not newton:
        delta_upper, newton = _with_secant_slope(delta_upper), True
    if newton:
        pair = delta_upper

        def delta_upper(eps):
            return pair(eps)[0]
    if _at_most(delta_upper(0.0), target):
        return 0.0
    lo = 0.0
    if hi is not None and not (hi > 0 and _at_most(delta_upper(hi), target)):
        start, hi = (hi if hi > 0 else start), None    # not a bracket: grow one from there
    if hi is None:
        hi = check_positive("start", start)
        doublings = 0
        while not _at_most(delta_upper(hi), target):
            if hi >= epsilon_max:
                return math.inf
            lo = hi
            # the last doubling stops at epsilon_max, which is tried itself (doubling past it
            # answered inf for a root between the last point and epsilon_max: mu-GDP at mu =
            # 1e6 (1 + 1e-12) from mu^2 / 2 reached 1.000000000002e12 > 1e12)
            hi = min(hi * 2.0, epsilon_max)
            doublings += 1
            if not math.isfinite(hi) or doublings > max_doublings:
                return math.inf
    if not newton:
        return _bisect(delta_upper, target, lo, hi, rtol, max_iterations)
    return _newton(pair, target, lo, hi, guess, rtol, max_iterations)


def _with_secant_slope(fn: Callable[[float], float]):
    """``eps -> (fn(eps), slope)``: the derivative of ``fn`` implied by the slope of its log
    between this point and the one evaluated before (NaN for the first point, or where either
    value is not positive and finite: the search then bisects)."""
    last: list[tuple[float, float]] = []
    seen: dict[float, float] = {}

    def pair(eps: float) -> tuple[float, float]:
        value = fn(eps)
        slope = math.nan
        if last:
            x0, v0 = last[-1]
            if x0 != eps and 0 < value < math.inf and 0 < v0 < math.inf:
                slope = value * (math.log(value) - math.log(v0)) / (eps - x0)
        last.append((eps, value))
        seen[eps] = value
        return value, slope
    pair.seen = seen     # every value so far, by point (the first step interpolates them)
    return pair


def _log_interpolated(pair, lo: float, hi: float, target: float) -> float | None:
    """First point of a secant search: where ``log delta`` interpolated linearly between the
    bracket's ends (both evaluated, ``delta(lo) > target >= delta(hi) > 0``) meets ``log
    target``, kept within the middle 90 % of the bracket; None where those values are not
    known.  (The midpoint cost one or two FFT evaluations more: the shuffle blanket's bracket
    often comes from a bound a few per cent above the answer.)"""
    seen = getattr(pair, "seen", None)
    if seen is None or not target > 0:
        return None
    v_lo, v_hi = seen.get(lo), seen.get(hi)
    if v_lo is None or v_hi is None or not 0 < v_hi <= target < v_lo < math.inf:
        return None
    fraction = (math.log(v_lo) - math.log(target)) / (math.log(v_lo) - math.log(v_hi))
    return lo + min(max(fraction, 0.05), 0.95) * (hi - lo)


def _bisect(fn, target, lo, hi, rtol, max_iterations) -> float:
    for _ in range(max_iterations):
        if hi - lo <= rtol * hi:
            break
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:      # no float strictly inside: the bracket is closed
            break
        if _at_most(fn(mid), target):
            hi = mid
        else:
            lo = mid
    return hi


def _newton(pair, target, lo, hi, guess, rtol, max_iterations) -> float:
    """Safeguarded Newton on ``log delta`` keeping ``pair(lo)[0] > target >= pair(hi)[0]``."""
    def fn(eps):
        return pair(eps)[0]
    if not target > 0:
        return _bisect(fn, target, lo, hi, rtol, max_iterations)
    return _newton_bracket(pair, target, lo, hi, guess, rtol, 0.0, max_iterations,
                           lambda value: _at_most(value, target))[1]


def _newton_bracket(pair, target, lo, hi, guess, rtol, atol, max_iterations,
                    meets: Callable[[float], bool]) -> tuple[float, float]:
    """The bracket ``(lo, hi)`` of safeguarded Newton on ``log delta`` (``target > 0``):
    every point evaluated goes to ``hi`` where ``meets(value)``, else to ``lo``, so the ends
    keep whatever the caller's predicate certifies; stops at ``hi - lo <= rtol hi + atol``."""
    def fn(eps):
        return pair(eps)[0]
    log_target = math.log(target)
    if guess is None:
        x = _log_interpolated(pair, lo, hi, target)
        x = 0.5 * (lo + hi) if x is None else x
    else:
        x = min(max(guess, lo + 1e-3 * (hi - lo)), lo + 0.5 * (hi - lo))
    steps = [math.inf, math.inf]
    for _ in range(max_iterations):
        value, d = pair(x)
        if meets(value):
            hi = x
        else:
            lo = x
        if hi - lo <= rtol * hi + atol:
            break
        step = None
        if value > 0 and d < 0 and math.isfinite(value):
            step = x - (math.log(value) - log_target) * value / d
        # bisect when Newton leaves the bracket, and when its step is not below half the one
        # before last (as in "rtsafe", Press et al., Numerical Recipes, Sec. 9.4): a profile
        # like exp(-c eps^2) makes Newton on log delta alternate around the root, shrinking the
        # bracket by a few percent per step (the shuffle blanket at n = 1e9, delta = 1e-15 took
        # 585 steps and 127 s)
        slow = step is not None and abs(step - x) > 0.5 * steps[-2]
        steps.append(abs(step - x) if step is not None else hi - lo)
        if step is not None and not slow and abs(step - x) < 0.25 * rtol * hi:
            # converged (x itself, now an end of the bracket, may be the root): probe just
            # above and just below to close the bracket
            for probe in (step * (1 + 0.5 * rtol), step * (1 - 0.5 * rtol)):
                if lo < probe < hi:
                    if meets(fn(probe)):
                        hi = probe
                    else:
                        lo = probe
            if hi - lo <= rtol * hi + atol:
                break
            step = 0.5 * (lo + hi)
        elif step is None or not lo < step < hi or slow:
            step = 0.5 * (lo + hi)
        if not lo < step < hi:
            break
        x = step
    return lo, hi


def largest_violating_epsilon(delta_lower: Callable[[float], float], target: float, hi: float,
                              *, rtol: float = 1e-7, atol: float = 1e-12,
                              max_iterations: int = MAX_ITERATIONS,
                              violated: float | None = None, secant: bool = False) -> float:
    """Largest ``eps`` in ``[0, hi]`` (to ``rtol * eps + atol``, from below) at which a
    certified *lower* bound on delta is still above ``target``: a certified lower bound on
    epsilon(target).  ``0`` if the bound is already at most ``target`` at 0; ``hi`` if it is
    still above the target at ``hi``.  ``violated``: a point in ``[0, hi]`` already seen with
    ``delta_lower > target`` (the search then starts from it, not from 0).  ``secant``: the
    slope of ``log delta_lower`` between the last two points evaluated steers a safeguarded
    Newton search (as in :func:`smallest_epsilon`; for bounds that cost an FFT each), else
    bisection.

    The returned point was evaluated with ``delta_lower > target`` (or is 0), so the true
    profile exceeds the target there and epsilon(target) is at least that point.

    Example::

        >>> import math
        >>> x = largest_violating_epsilon(lambda e: math.exp(-e), 1e-3, 100.0)
        >>> math.exp(-x) > 1e-3 and math.log(1000) - x < 1e-5
        True
    """
    target = _target(target)
    pair = _with_secant_slope(delta_lower) if secant else None
    value_at = delta_lower if pair is None else (lambda eps: pair(eps)[0])  # (seeds the secant)
    if violated is None or not 0.0 < violated < hi:
        if not value_at(0.0) > target:
            return 0.0
        violated = 0.0
    if value_at(hi) > target:
        return hi
    lo = violated
    if pair is not None and target > 0:
        # NaN and values at the target go to hi: lo only ever holds a violated point
        return _newton_bracket(pair, target, lo, hi, None, rtol, atol, max_iterations,
                               lambda value: not value > target)[0]
    for _ in range(max_iterations):
        mid = 0.5 * (lo + hi)
        if delta_lower(mid) > target:
            lo = mid
        else:
            hi = mid
        if hi - lo <= rtol * hi + atol:
            break
    return lo


def epsilon_lower_from_larger_delta(epsilon_lower_at: Callable[[float], float], delta: float,
                                    first: float, *, ratio: float = 100.0, tries: int = 3
                                    ) -> tuple[float, float | None]:
    """A certified lower bound on ``epsilon(delta)`` from lower bounds at larger deltas, for
    where a method certifies nothing at ``delta`` itself (its error terms swamp it): a
    positive ``epsilon_lower_at(d)`` for some ``d`` among ``first, first ratio, ...`` (``tries``
    values in ``(delta, 0.5)``; the smallest such ``d`` when a method that certifies at one
    ``d`` does at every larger one), and that ``d``; ``(0.0, None)`` if none is found.

    Valid because ``epsilon(delta) = min{eps : delta(eps) <= delta}`` does not increase with
    ``delta`` (the privacy profile ``delta(eps)`` does not increase with ``eps``), so for
    ``delta <= d`` it is at least ``epsilon(d)``, hence at least any lower bound of that.  Our
    derivation (one line).  A :class:`~dpplugins.errors.NumericalError` at some ``d`` skips it.

    The deltas are searched by bisection for the smallest one that certifies something: a
    method that certifies nothing at some ``d`` is not expected to certify anything at smaller
    ones (its error terms weigh more there), and each try can cost as much as the query itself,
    so three candidates cost two tries, not up to three.  (Which deltas are tried is a matter
    of cost only; any answer is a certified lower bound.)

    Example::

        >>> import math
        >>> def exact(d):                  # epsilon(delta) = log(1 / delta) for delta(eps) = e^-eps
        ...     return math.log(1 / d) if d > 1e-12 else 0.0   # a method blind below 1e-12
        >>> low, at = epsilon_lower_from_larger_delta(exact, 1e-15, 1e-13)
        >>> round(at, 20), low <= math.log(1e15)
        (1e-11, True)
        >>> tried = []
        >>> epsilon_lower_from_larger_delta(lambda d: tried.append(d) or 0.0, 1e-15, 1e-13)
        (0.0, None)
        >>> len(tried)                     # two of the three candidates
        2
    """
    candidates = [first * ratio ** i for i in range(tries)]
    candidates = [d for d in candidates if delta < d < 0.5]
    best: tuple[float, float | None] = (0.0, None)
    low, high = 0, len(candidates) - 1
    while low <= high:
        middle = (low + high) // 2
        try:
            value = float(epsilon_lower_at(candidates[middle]))
        except NumericalError:
            value = 0.0
        if value > 0:
            best, high = (value, candidates[middle]), middle - 1
        else:
            low = middle + 1
    return best
