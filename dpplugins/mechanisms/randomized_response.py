"""Binary and k-ary randomized response."""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from dpplugins.errors import check_count, check_nonnegative, check_probability
from dpplugins.mechanisms.discrete import discrete_pair
from dpplugins.mechanisms.types import MechanismPairs


#: beyond this local epsilon the pairs' small masses leave double's normal range (and underflow
#: to 0 beyond about 745): the computed pair still dominates the true one (upper bounds), and
#: lower bounds take the pair at this epsilon0 instead (:func:`lower_bound_epsilon0`)
PAIR_MAX_EPSILON0 = 700.0


def lower_bound_epsilon0(epsilon0: float) -> float:
    """The local epsilon whose randomized-response pair gives the *lower* bounds for
    ``epsilon0``: ``min(epsilon0, PAIR_MAX_EPSILON0)``.

    Valid (our derivation): randomized response at ``eps' <= eps0`` is a post-processing of the
    one at ``eps0`` -- keep the report with probability ``lam``, else report a uniformly random
    bucket.  The result is again k-ary randomized response, whose ratio of the true bucket's
    probability to another's, ``(lam e^eps0 / Z + (1 - lam) / k) / (lam / Z + (1 - lam) / k)``
    with ``Z = e^eps0 + k - 1``, runs continuously from 1 (``lam = 0``) to ``e^eps0``
    (``lam = 1``), so every ``eps'`` is met; and the same channel maps the uniform report of
    the zero-out neighbour to itself.  So both pairs (replace-one and zero-out) at ``eps'`` are
    dominated by those at ``eps0`` (Blackwell), also under composition."""
    return min(float(epsilon0), PAIR_MAX_EPSILON0)


def k_randomized_response(epsilon: float, k: int) -> MechanismPairs:
    """k-ary randomized response with parameter ``epsilon``: report the true value w.p.
    ``e^eps / (e^eps + k - 1)`` and each other value w.p. ``1 / (e^eps + k - 1)`` (Warner 1965;
    Kairouz, Oh, Viswanath 2016).  The worst-case pair differs in the two values that are swapped,
    so the pair is symmetric.

    The ``k - 2`` reports that are neither value have the same probability under both and a
    privacy loss of 0; they are merged into one atom (a post-processing that keeps the privacy
    loss distribution), so the pair has at most three atoms whatever ``k`` (an array of ``k``
    entries made ``k = 1e308`` fail deep in numpy).  Computed in log space; ``epsilon = 0`` is
    the pair ``P = Q`` (a report independent of the value).  Beyond ``epsilon`` of about 745
    the small masses underflow to 0, which makes the pair dominate the true one (infinite
    losses): beyond :data:`PAIR_MAX_EPSILON0` the pairs at that epsilon are attached as
    ``dominated`` (:func:`lower_bound_epsilon0`), for the lower bounds.

    Example::

        >>> pairs = k_randomized_response(1.0, 10**12)
        >>> [round(float(v), 6) for v in pairs.pairs["remove"].p]
        [0.0, 0.0, 1.0]
    """
    eps = check_nonnegative("epsilon", epsilon)
    k = check_count("k", k, minimum=2)
    # log-space normalisation (math.log takes integers of any size) so that a large epsilon
    # or k does not overflow
    log_norm = float(np.logaddexp(eps, math.log(k - 1)))
    top, other = math.exp(eps - log_norm), math.exp(-log_norm)
    rest = [math.exp(math.log(k - 2) - log_norm)] if k > 2 else []
    p = np.array([top, other] + rest)
    q = np.array([other, top] + rest)
    pairs = discrete_pair(p / p.sum(), q / q.sum(), symmetric=True,
                          description=f"{k}-ary randomized response(epsilon={eps:g})")
    if lower_bound_epsilon0(eps) < eps:
        pairs = dataclasses.replace(
            pairs, dominated=k_randomized_response(lower_bound_epsilon0(eps), k))
    return pairs


def randomized_response(epsilon: float) -> MechanismPairs:
    """Binary randomized response (``k = 2`` of :func:`k_randomized_response`)."""
    return k_randomized_response(epsilon, 2)


def zero_out_rr_pair(epsilon0: float, num_buckets: int) -> tuple[list[float], list[float]]:
    """Randomized response under add/remove, read as *zero-out* (dp_accounting's
    REPLACE_SPECIAL): the example is replaced by a special one whose report is uniform.  ``P``:
    the report of the true bucket (``e^eps0 / (e^eps0 + k - 1)`` on it, ``1 / (e^eps0 + k - 1)``
    on each other bucket; Kairouz, Oh, Viswanath 2016 for k > 2), ``Q``: uniform ``1/k``; the
    other buckets are merged (a post-processing that keeps the loss, which is equal on them).

    Beyond ``epsilon0`` of about 745 the mass on the other buckets underflows to 0: the pair
    then dominates the true one (a loss of +inf where the truth is about ``epsilon0 - log k``),
    valid for upper bounds only.

    Example::

        >>> p, q = zero_out_rr_pair(720.0, 2)   # e^-720 is subnormal, not yet 0
        >>> round(math.log(q[1]) - math.log(p[1]) - (720.0 - math.log(2)), 9)  # add direction
        0.0
    """
    k = num_buckets
    # in log space (math.log takes integers of any size): e^eps0 + k - 1 overflowed for
    # k near 1e308, and a shortcut that set the small mass to 0 beyond eps0 = 700 made the
    # pair's add-direction loss infinite where it is about eps0 - log k (valid for upper bounds
    # only; the lower bounds of the pld accountant were then above the truth)
    log_norm = float(np.logaddexp(epsilon0, math.log(k - 1)))
    top = math.exp(epsilon0 - log_norm)
    others = math.exp(math.log(k - 1) - log_norm)
    return [top, others], [1.0 / k, (k - 1) / k]


def zero_out_randomized_response(epsilon0: float, num_buckets: int,
                                 sample_rate: float = 1.0) -> MechanismPairs:
    """Randomized response read as zero-out (:func:`zero_out_rr_pair`) on a Poisson subsample
    of rate ``sample_rate`` (1: the plain step): ``P = (1 - q) Q + q P0`` against the uniform
    ``Q`` (Zhu, Dong & Wang 2022, arXiv:2106.08567, Thm 11, for the subsampled pair), both
    directions.  Beyond :data:`PAIR_MAX_EPSILON0` the pairs at that local epsilon are attached
    as ``dominated`` (:func:`lower_bound_epsilon0`: the same channel that mixes the report with
    a uniform one maps ``Q`` to itself, so the subsampled pair is post-processed too).

    Example::

        >>> pairs = zero_out_randomized_response(800.0, 2)
        >>> [float(v) for v in pairs.pairs["add"].q], pairs.dominated is not None
        ([1.0, 0.0], True)
    """
    epsilon0 = check_nonnegative("epsilon0", epsilon0)
    num_buckets = check_count("num_buckets", num_buckets, minimum=2)
    sample_rate = check_probability("sample_rate", sample_rate)
    p0, q = zero_out_rr_pair(epsilon0, num_buckets)
    p = [(1.0 - sample_rate) * b + sample_rate * a for a, b in zip(p0, q)]
    description = (f"{num_buckets}-ary randomized response(epsilon0={epsilon0:g}) as zero-out"
                   + (f", Poisson subsample q={sample_rate:g}" if sample_rate != 1.0 else ""))
    pairs = discrete_pair(p, q, description=description)
    if lower_bound_epsilon0(epsilon0) < epsilon0:
        pairs = dataclasses.replace(pairs, dominated=zero_out_randomized_response(
            lower_bound_epsilon0(epsilon0), num_buckets, sample_rate))
    return pairs
