"""Binary and k-ary randomized response."""

from __future__ import annotations

import math

import numpy as np

from dpplugins.errors import check_count, check_positive
from dpplugins.mechanisms.discrete import discrete_pair
from dpplugins.mechanisms.types import MechanismPairs


def k_randomized_response(epsilon: float, k: int) -> MechanismPairs:
    """k-ary randomized response with parameter ``epsilon``: report the true value w.p.
    ``e^eps / (e^eps + k - 1)`` and each other value w.p. ``1 / (e^eps + k - 1)`` (Warner 1965;
    Kairouz, Oh, Viswanath 2016).  The worst-case pair differs in the two values that are swapped,
    so the pair is symmetric.
    """
    eps = check_positive("epsilon", epsilon)
    k = check_count("k", k, minimum=2)
    # log-space normalisation so that large epsilon does not overflow
    log_norm = np.logaddexp(eps, np.log(k - 1.0))
    p = np.full(k, np.exp(-log_norm))
    q = p.copy()
    p[0] = q[1] = np.exp(eps - log_norm)
    p[1] = q[0] = np.exp(-log_norm)
    return discrete_pair(p / p.sum(), q / q.sum(), symmetric=True,
                         description=f"{k}-ary randomized response(epsilon={eps:g})")


def randomized_response(epsilon: float) -> MechanismPairs:
    """Binary randomized response (``k = 2`` of :func:`k_randomized_response`)."""
    return k_randomized_response(epsilon, 2)


def zero_out_rr_pair(epsilon0: float, num_buckets: int) -> tuple[list[float], list[float]]:
    """Randomized response under add/remove, read as *zero-out* (dp_accounting's
    REPLACE_SPECIAL): the example is replaced by a special one whose report is uniform.  ``P``:
    the report of the true bucket (``e^eps0 / (e^eps0 + k - 1)`` on it, ``1 / (e^eps0 + k - 1)``
    on each other bucket; Kairouz, Oh, Viswanath 2016 for k > 2), ``Q``: uniform ``1/k``; the
    other buckets are merged (a post-processing that keeps the loss, which is equal on them)."""
    k = num_buckets
    if epsilon0 > 700:
        top, other = 1.0, 0.0
    else:
        e = math.exp(epsilon0)
        top, other = e / (e + k - 1), 1.0 / (e + k - 1)
    return [top, (k - 1) * other], [1.0 / k, (k - 1) / k]
