"""Group privacy of approximate DP: user-level epsilon from an example-level privacy curve.

:func:`group_privacy_epsilon` turns a mechanism's example-level ``epsilon_for_delta`` into an
epsilon for datasets that differ in up to ``k`` examples (one user's), by Vadhan's conversion, as
TF-Privacy 0.9.0 does for its user-level statement.  Pure numerics (numpy/scipy), no framework
import.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import numpy as np
from scipy.special import logsumexp

from dpplugins.errors import NumericalError, check_count, check_open_unit, check_positive

__all__ = ["group_privacy_epsilon"]

#: smallest example-level delta tried by :func:`group_privacy_epsilon`
_LOG_DELTA_MIN = math.log(1e-300)


def _log_group_factor(epsilon: float, group_size: int) -> float:
    """``log sum_{i<k} e^(i eps) = log((e^(k eps) - 1) / (e^eps - 1))`` (``log k`` at 0)."""
    if math.isinf(epsilon):
        return math.inf
    if group_size <= 64:
        return float(logsumexp(epsilon * np.arange(group_size)))
    # closed form (np.arange(group_size) allocated 8 bytes per group member: 10^9 examples per
    # user raised MemoryError); rounded up by a relative 1e-12, far above its rounding error
    if epsilon == 0.0:
        value = math.log(group_size)
    else:
        x = group_size * epsilon          # log(e^x - 1) - log(e^eps - 1), each in log space
        value = (x + math.log(-math.expm1(-x))) - (epsilon + math.log(-math.expm1(-epsilon)))
    return value + 1e-12 * max(1.0, abs(value))


def group_privacy_epsilon(epsilon_for_delta: Callable[[float], float], group_size: int,
                          delta: float, *, tolerance: float = 1e-10) -> float:
    """Epsilon at ``delta`` for groups of ``group_size`` examples (user-level DP), from a
    mechanism's example-level ``epsilon_for_delta(delta')`` (upper bounds).

    Group privacy of approximate DP (Vadhan 2017, "The Complexity of Differential Privacy",
    Lemma 2.2, in the tighter form its proof gives, as TF-Privacy uses it): an
    ``(eps, delta')``-DP mechanism is ``(k eps, delta' (e^(k eps) - 1) / (e^eps - 1))``-DP for
    datasets differing in ``k`` examples (``<= k e^((k-1) eps) delta'``, the lemma's statement).
    The proof only chains ``k`` neighbouring datasets, so it holds for any mechanism and
    neighbouring relation, with or without subsampling -- unlike scaling the Gaussian
    sensitivity by ``k``, which is not valid under subsampling.

    Search (TF-Privacy 0.9.0's ``_compute_dp_sgd_user_privacy``): bracket the example-level
    ``delta'`` in log space by steps of a factor 10, then bisect to ``tolerance`` in
    ``log delta'``.  The returned value is ``k * epsilon_for_delta(delta')`` at a ``delta'`` whose
    user-level delta was *evaluated* to be ``<= delta`` (a valid bound even if the search misses
    the optimum), rounded up by one ulp.  Returns ``inf`` when no ``delta' >= 1e-300`` works
    (TF-Privacy also reports ``inf`` then).  ``group_size = 1`` returns
    ``epsilon_for_delta(delta)``.

    Example (the Gaussian mechanism with mu = 0.5, epsilon in closed form)::

        >>> from dpplugins.accountants.shuffle import gaussian_epsilon
        >>> eps = group_privacy_epsilon(lambda d: gaussian_epsilon(0.5, d), 2, 1e-5)
        >>> round(eps, 3)
        4.52
    """
    k = check_count("group_size", group_size, minimum=1)
    delta = check_open_unit("delta", delta)
    tolerance = check_positive("tolerance", tolerance)
    if k == 1:
        return float(epsilon_for_delta(delta))
    target = math.log(delta)

    @functools.lru_cache(maxsize=None)
    def epsilon_at(log_delta: float) -> float:
        try:
            value = float(epsilon_for_delta(math.exp(log_delta)))
        except NumericalError as error:
            raise NumericalError(
                f"group privacy for {k} examples per user needs the example-level epsilon at "
                f"delta = {math.exp(log_delta):.3g}, which could not be certified ({error.what})",
                error.fix) from None
        if math.isnan(value) or value < 0:
            raise NumericalError(f"example-level epsilon {value} at delta = "
                                 f"{math.exp(log_delta):.3g}", "check epsilon_for_delta")
        return value

    def gap(log_delta: float) -> float:
        return log_delta + _log_group_factor(epsilon_at(log_delta), k) - target

    infeasible = target                       # gap = log(sum_i e^(i eps)) >= log k > 0
    feasible = target - math.log(10.0)
    value = gap(feasible)
    while value > 0:
        if not math.isfinite(value) or feasible - value - math.log(10.0) < _LOG_DELTA_MIN:
            return math.inf
        # eps(delta') does not increase with delta', so gap(x - gap(x)) >= 0: the boundary
        # lies below x - gap(x) (TF-Privacy's bracketing step)
        infeasible = feasible - value
        feasible = infeasible - math.log(10.0)
        value = gap(feasible)
    while infeasible - feasible > tolerance:
        middle = 0.5 * (feasible + infeasible)
        if not feasible < middle < infeasible:
            break                   # adjacent floats: a tolerance below their spacing hung here
        if gap(middle) <= 0:
            feasible = middle
        else:
            infeasible = middle
    return math.nextafter(k * epsilon_at(feasible), math.inf)
