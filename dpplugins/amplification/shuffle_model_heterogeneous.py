"""Shuffled k-ary randomized response with a local epsilon per group of users (personalized LDP).

``groups = ((eps_1, n_1), (eps_2, n_2), ...)``: the ``n_g`` users of group g each run
``eps_g``-RR on the same k values (``E_g = e^eps_g``, ``Z_g = E_g + k - 1``; a user reports its
value with probability ``E_g / Z_g`` and each other value with ``1 / Z_g``), then the reports are
shuffled.  Neighbouring datasets differ in one user's value, and that user may be in any group.
Liu, Liu, Xiong, Gu, Chen (2024, "Enhanced privacy bound for shuffle model with personalized
privacy", arXiv:2407.18157) bound general personalized randomizers through clones; for k-RR the
privacy blanket gives a bound that needs no clone argument, and exact datasets give certified
lower bounds.

Upper bound (our derivation; the homogeneous case is the blanket of Balle, Bell, Gascon, Nissim
2019, CRYPTO, arXiv:1903.02837, as computed by
:class:`~dpplugins.amplification.shuffle_model.Blanket`).  A user of group g reports a uniform
value on the k values with probability ``gamma_g = k / Z_g`` and its own value otherwise; the
uniform part is the same law for every group.  Reveal which of the other users drew uniformly and
the values of the rest: their values do not depend on the differing user's, so the view is the
count ``M - 1`` of uniform reports among the others and the multiset of the differing user's
report with ``M - 1`` uniform reports.  ``M - 1`` is a sum of independent ``Bin(n_h, gamma_h)``
over the groups (the differing user's own group has ``n_g - 1`` others), and given ``M = m`` the
view is exactly the homogeneous blanket's pair ``delta_m`` with the differing user's ``eps_g``
(:func:`~dpplugins.amplification.shuffle_model.krr_blanket_laws`).  So ``delta(eps) <= sum_m
P(M = m) delta_m(eps)``, and ``delta_m`` does not increase in m (the Blanket's docstring), which
gives the block sums.  The bound is the largest over the differing user's group, and at most
that group's ``eps_g`` (the release is a post-processing of the user's own eps_g-DP report).

Lower bound (our derivation).  Every other user holds a; the differing user holds a (X0) or b
(X1).  Each report of another user is a Bernoulli event "reports a" (probability ``E_h / Z_h``)
and "reports b" (``1 / Z_h``), independent across users, so the number of reports of a (or of
b) among the others is a sum of binomials over the groups, and the count of a (or b) in the
shuffled output adds the differing user's Bernoulli: ``E_g / Z_g`` vs ``1 / Z_g``.  A count is a
post-processing of the shuffled reports, and its pair is known exactly (to rounding, charged),
so its hockey-stick divergence in either direction is a certified lower bound on the worst case.
The largest over the two counts and the differing user's group is reported.

One group is homogeneous k-RR: :func:`epsilon_bounds` then answers with
:func:`dpplugins.amplification.shuffle_model.epsilon_bounds` (its stronger clone, and binary RR's
exact worst case), which is never looser.  Only one round is accounted here; the ``shuffle``
accountant and the events do not take groups yet.

Example::

    >>> low, up = epsilon_bounds([(1.0, 5000), (4.0, 5000)], 2, 1e-6)
    >>> 0 < low <= up < 4.0
    True
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from dpplugins.amplification import shuffle as _shuffle
from dpplugins.amplification import shuffle_model as _sm
from dpplugins.errors import ParameterError, check_count, check_nonnegative, check_open_unit
from dpplugins.pld import Bounds

__all__ = ["epsilon_bounds", "delta_bounds", "upper_blankets", "count_pairs"]

_U = _sm.UNIT_ROUNDOFF

Groups = tuple[tuple[float, int], ...]


def _check_groups(groups, k) -> tuple[Groups, int]:
    """Groups as ``((eps, n), ...)`` with eps a valid local epsilon and n >= 1 users, at least
    two users and at most ``MAX_USERS`` in all; equal epsilons merged."""
    try:
        items = list(groups)
    except TypeError:
        raise ParameterError("groups", groups, "a sequence of (eps0, users) pairs") from None
    if not items:
        raise ParameterError("groups", groups, "at least one (eps0, users) pair")
    merged: dict[float, int] = {}
    for i, item in enumerate(items):
        try:
            eps, n = item
        except (TypeError, ValueError):
            raise ParameterError(f"groups[{i}]", item, "an (eps0, users) pair") from None
        try:
            eps = _shuffle.check_local_epsilon(eps, 300)
        except ParameterError as error:
            raise ParameterError(f"groups[{i}].eps0", eps, error.valid, error.hint) from None
        n = check_count(f"groups[{i}].users", n, minimum=1)
        merged[eps] = merged.get(eps, 0) + n
    total = sum(merged.values())
    if not 2 <= total <= _shuffle.MAX_USERS:
        raise ParameterError(
            "groups", items, f"groups of {2} to {_shuffle.MAX_USERS:.0e} users in all "
            f"(these have {total:,})",
            hint="more users cannot increase epsilon (appending fixed users' reports and "
                 "shuffling again is a post-processing), so a bound for fewer users of the "
                 "same groups holds: ask for that" if total > 2 else "")
    k = _shuffle.check_domain_size("k", k, 2)
    return tuple(sorted(merged.items())), k


def _others(groups: Groups, victim: int) -> list[tuple[float, int]]:
    """The other users' groups when the differing user is in ``groups[victim]``."""
    return [(eps, n - (i == victim)) for i, (eps, n) in enumerate(groups)
            if n - (i == victim) > 0]


@functools.lru_cache(maxsize=64)
def upper_blankets(groups: Groups, k: int) -> tuple[tuple[float, _sm.Blanket], ...]:
    """``(eps_g, blanket)`` for each group as the differing user's (module docstring): the
    blanket pair of eps_g-RR with the Poisson-binomial count of the others' uniform reports."""
    out = []
    total = sum(n for _, n in groups)
    for victim, (eps, _) in enumerate(groups):
        if eps == 0:
            out.append((eps, None))   # a 0-DP report: delta = 0 at every eps >= 0
            continue
        law = _sm.CountLaw.poisson_binomial(
            [(n, _sm._krr_laws(e, k)[2]) for e, n in _others(groups, victim)])
        gamma = max(float(np.dot(np.arange(law.lo, law.lo + len(law.pmf)), law.pmf))
                    / max(total - 1, 1), 1e-300)
        out.append((eps, _sm.fitted_blanket(eps, total, min(gamma, 1.0),
                                            _sm.krr_blanket_laws(eps, k), count_law=law)))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def count_pairs(groups: Groups, k: int) -> tuple[tuple, ...]:
    """The exact lower-bound pairs (module docstring): ``(eps_g, p0, p1, rel, slack)`` for each
    group as the differing user's and each of the counts of a and of b: ``p0``/``p1`` the
    count's pmfs on a window, each entry within relative ``rel`` (``1e-12`` per group plus
    rounding), and ``slack`` the mass that may be missing or wrong in absolute terms (charged
    ``(1 + e^eps)`` times)."""
    out = []
    for victim, (eps, _) in enumerate(groups):
        if eps == 0:
            continue
        e, z, _ = _sm._krr_laws(eps, k)
        others = _others(groups, victim)
        for own0, own1, rate in ((e / z, 1 / z, lambda ee: _sm._krr_laws(ee, k)[0]
                                  / _sm._krr_laws(ee, k)[1]),
                                 (1 / z, e / z, lambda ee: 1 / _sm._krr_laws(ee, k)[1])):
            law = _sm.CountLaw.poisson_binomial([(n, rate(ee)) for ee, n in others])
            w = np.concatenate([[0.0], law.pmf, [0.0]])
            p0 = own0 * w[:-1] + (1 - own0) * w[1:]
            p1 = own1 * w[:-1] + (1 - own1) * w[1:]
            out.append((eps, p0, p1, law.relative_error + 8 * _U, law.outside))
    return tuple(out)


def _delta_lower(pairs, epsilon: float) -> float:
    """The largest certified lower bound on delta(epsilon) over :func:`count_pairs` (both
    directions): ``sum (p - x q)_+`` of the rounded-down and rounded-up pmfs, less its
    summation rounding and the absolute slack."""
    x = math.exp(min(epsilon, 700.0))
    best = 0.0
    for _, p0, p1, rel, slack in pairs:
        for p, q in ((p0, p1), (p1, p0)):
            with np.errstate(over="ignore"):
                value = float(np.sum(np.maximum(p * (1 - rel) - x * (q * (1 + rel)), 0.0)))
            value = value * (1 - (len(p) + 4) * _U) - (1 + x) * slack
            best = max(best, value)
    return best


def _delta_upper(blankets, epsilon: float) -> float:
    return max((b.delta(epsilon) if b is not None and epsilon < eps else 0.0)
               for eps, b in blankets)


def epsilon_bounds(groups: Sequence[tuple[float, int]], k: int, delta: float) -> Bounds:
    """Certified ``(lower, upper)`` epsilon at ``delta`` of one shuffled round of k-RR whose
    users run different local epsilons (``groups``: ``(eps0, users)`` pairs; module
    docstring).  Upper: the largest over the differing user's group of its blanket bound (at
    most that group's eps0).  Lower: the exact counts of a and of b on the dataset where every
    other user holds a.

    Example::

        >>> b = epsilon_bounds([(0.5, 20_000), (2.0, 20_000)], 4, 1e-6)
        >>> 0 < b.lower <= b.upper < 2.0
        True
    """
    g, k = _check_groups(groups, k)
    delta = check_open_unit("delta", delta)
    if len(g) == 1:
        return _sm.epsilon_bounds(("krr", g[0][0], k), g[0][1], delta)
    blankets = upper_blankets(g, k)
    upper = max((min(b.epsilon(delta), eps) if b is not None else 0.0) for eps, b in blankets)
    pairs = count_pairs(g, k)
    top = max(eps for eps, _ in g)
    lower = _sm._lower_epsilon(lambda e: _delta_lower(pairs, e), delta, top, upper) \
        if upper > 0 else 0.0
    return Bounds(min(lower, upper), upper)


def delta_bounds(groups: Sequence[tuple[float, int]], k: int, epsilon_: float) -> Bounds:
    """Certified ``(lower, upper)`` delta at ``epsilon_`` of one shuffled round of
    heterogeneous k-RR (see :func:`epsilon_bounds`).

    Example::

        >>> b = delta_bounds([(1.0, 1000), (3.0, 10)], 2, 0.5)
        >>> 0 <= b.lower <= b.upper <= 1
        True
    """
    g, k = _check_groups(groups, k)
    eps = check_nonnegative("epsilon", epsilon_)
    if len(g) == 1:
        return _sm.delta_bounds(("krr", g[0][0], k), g[0][1], eps)
    upper = min(_delta_upper(upper_blankets(g, k), eps), 1.0)
    lower = _delta_lower(count_pairs(g, k), eps) if upper > 0 else 0.0
    return Bounds(min(max(lower, 0.0), upper), upper)
