"""Binary and k-ary randomized response."""

from __future__ import annotations

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
