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
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dpplugins.amplification import shuffle as _shuffle
from dpplugins.amplification import shuffle_model as _sm
from dpplugins.errors import ParameterError, check_count, check_nonnegative, check_open_unit
from dpplugins.pld import Bounds, PrivacyLossDistribution, certified_bounds

__all__ = ["GroupedKRR", "capped_groups", "epsilon_bounds", "delta_bounds", "upper_blankets", "count_pairs",
           "upper_profile", "round_pld", "lower_round_pld", "grid_step"]

_U = _sm.UNIT_ROUNDOFF

Groups = tuple[tuple[float, int], ...]

#: the most distinct local epsilons of one round (the bounds' work grows with them; rounding
#: each group's epsilon up to one of fewer values gives a larger, still valid, upper bound)
MAX_GROUPS = 64
#: up to this many groups every group is bounded as the differing user's with its own count
#: law; beyond it one blanket serves all (:func:`upper_blankets`)
EXACT_VICTIM_GROUPS = 8


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
    if len(merged) > MAX_GROUPS:
        raise ParameterError(
            "groups", f"{len(merged)} distinct local epsilons", f"at most {MAX_GROUPS}",
            hint="round each group's epsilon up to one of fewer values: the upper bound of "
                 "those groups holds for these users too (the blanket bound grows with every "
                 "epsilon), the lower bound does not")
    total = sum(merged.values())
    if not 2 <= total <= _shuffle.MAX_USERS:
        raise ParameterError(
            "groups", items, f"2 to {_shuffle.MAX_USERS:.0e} users in all (these have "
            f"{total:,})",
            hint="more users cannot increase epsilon (appending fixed users' reports and "
                 "shuffling again is a post-processing), so a bound for fewer users of the "
                 "same groups holds: ask for that" if total > 2 else "")
    k = _shuffle.check_domain_size("k", k, 2)
    return tuple(sorted(merged.items())), k


def capped_groups(groups: Sequence[tuple[float, int]], max_users: int = _shuffle.MAX_USERS
                  ) -> tuple[tuple[float, int], ...]:
    """``groups`` with at most ``max_users`` users in all: each group keeps its share
    (rounded down, at least one user), the remainder goes to the largest groups.  Valid for
    any choice of the users dropped: the release with more users is a post-processing of the
    one with fewer (append the other users' reports -- their values fixed, their randomizers
    public -- and shuffle again; :func:`dpplugins.amplification.shuffle.check_users`), so a
    bound for the kept users holds for all (but a lower bound for them does not).

    Example::

        >>> capped_groups([(1.0, 3 * 10**8), (2.0, 10)], 1000)
        ((1.0, 999), (2.0, 1))
    """
    items = [(eps, int(n)) for eps, n in groups]
    total = sum(n for _, n in items)
    if total <= max_users:
        return tuple(items)
    kept = [max(1, n * max_users // total) for _, n in items]
    order = sorted(range(len(items)), key=lambda i: -items[i][1])
    surplus = sum(kept) - max_users
    for i in order:   # too many (every group kept one): take from the largest groups
        take = min(surplus, kept[i] - 1)
        kept[i] -= take
        surplus -= take
    for i in order:   # too few (rounding down): give to the largest groups
        if surplus >= 0:
            break
        kept[i] += 1
        surplus += 1
    return tuple((eps, n) for (eps, _), n in zip(items, kept))


def _others(groups: Groups, victim: int) -> list[tuple[float, int]]:
    """The other users' groups when the differing user is in ``groups[victim]``."""
    return [(eps, n - (i == victim)) for i, (eps, n) in enumerate(groups)
            if n - (i == victim) > 0]


@functools.lru_cache(maxsize=64)
def upper_blankets(groups: Groups, k: int, max_blocks: int = _sm.MAX_BLANKET_BLOCKS
                   ) -> tuple[tuple[float, _sm.Blanket], ...]:
    """``(eps_g, blanket)`` for each group as the differing user's (module docstring): the
    blanket pair of eps_g-RR with the Poisson-binomial count of the others' uniform reports
    (at most ``max_blocks`` blocks of the count; fewer is valid, only looser).

    With more than :data:`EXACT_VICTIM_GROUPS` groups, one blanket serves every differing user
    (our derivation; one count law instead of one per group, so the work grows linearly in the
    number of groups): give the differing user v a fictitious draw ``B_v ~ Bern(gamma_v)``;
    the others' count is ``T - B_v >= T - 1`` with ``T`` the count over all users, whose law is
    the same for every v, so the others' count is stochastically at least ``(T - 1)^+``, and
    ``delta_m`` does not increase in m.  Then the differing user at the largest eps0 is the
    worst: eps-RR is a mixture of eps_max-RR and a uniform report, so the blanket view (the
    count revealed) at eps is a mixture of the view at eps_max and a data-independent view, a
    post-processing of it.  Valid for every group, looser by about one blanket report."""
    total = sum(n for _, n in groups)
    if len(groups) > EXACT_VICTIM_GROUPS:
        eps = max(e for e, _ in groups)
        law = _sm.CountLaw.poisson_binomial([(n, _sm._krr_laws(e, k)[2]) for e, n in groups])
        # the law of (T - 1)^+: shifted down by one, T = 0 joining T = 1 at 0
        pmf = law.pmf
        if law.lo == 0 and len(pmf) > 1:
            pmf = np.concatenate([[pmf[0] + pmf[1]], pmf[2:]])
        shifted = _sm.CountLaw(max(law.lo - 1, 0), pmf, law.outside,
                               law.relative_error + 2 * _U)
        gamma = max(float(np.dot(np.arange(shifted.lo, shifted.lo + len(pmf)), pmf))
                    / max(total - 1, 1), 1e-300)
        return ((eps, _sm.fitted_blanket(eps, total, min(gamma, 1.0),
                                         _sm.krr_blanket_laws(eps, k), max_blocks,
                                         count_law=shifted)),)
    out = []
    for victim, (eps, _) in enumerate(groups):
        if eps == 0:
            out.append((eps, None))   # a 0-DP report: delta = 0 at every eps >= 0
            continue
        law = _sm.CountLaw.poisson_binomial(
            [(n, _sm._krr_laws(e, k)[2]) for e, n in _others(groups, victim)])
        gamma = max(float(np.dot(np.arange(law.lo, law.lo + len(law.pmf)), law.pmf))
                    / max(total - 1, 1), 1e-300)
        out.append((eps, _sm.fitted_blanket(eps, total, min(gamma, 1.0),
                                            _sm.krr_blanket_laws(eps, k), max_blocks,
                                            count_law=law)))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def count_pairs(groups: Groups, k: int) -> tuple[tuple, ...]:
    """The exact lower-bound pairs (module docstring): ``(eps_g, p0, p1, rel, slack)`` for each
    group as the differing user's and each of the counts of a and of b: ``p0``/``p1`` the
    count's pmfs on a window, each entry within relative ``rel`` (``1e-12`` per group plus
    rounding), and ``slack`` the mass that may be missing or wrong in absolute terms (charged
    ``(1 + e^eps)`` times)."""
    out = []
    # many groups: the differing user at the largest eps0 only (a lower bound may use any)
    victims = range(len(groups)) if len(groups) <= EXACT_VICTIM_GROUPS else \
        [max(range(len(groups)), key=lambda i: groups[i][0])]
    for victim in victims:
        eps = groups[victim][0]
        if eps == 0:
            continue
        e, z, _ = _sm._krr_laws(eps, k)
        others = _others(groups, victim)
        # the differing user's probabilities of reporting the counted value and their
        # complements, each from its own closed form: 1 - e/z by subtraction kept a relative
        # error of u z (7e-9 at eps0 = 18), and the lower bound came out a relative 1e-10
        # above the exact delta
        miss_a, miss_b = (k - 1) / z, (e + k - 2) / z
        for own0, own1, rest0, rest1, rate in (
                (e / z, 1 / z, miss_a, miss_b,
                 lambda ee: _sm._krr_laws(ee, k)[0] / _sm._krr_laws(ee, k)[1]),
                (1 / z, e / z, miss_b, miss_a, lambda ee: 1 / _sm._krr_laws(ee, k)[1])):
            law = _sm.CountLaw.poisson_binomial([(n, rate(ee)) for ee, n in others])
            w = np.concatenate([[0.0], law.pmf, [0.0]])
            p0 = own0 * w[:-1] + rest0 * w[1:]
            p1 = own1 * w[:-1] + rest1 * w[1:]
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
    # (with the rounding margin either way, as shuffle_model.epsilon and lower_bound)
    upper = max((min(_sm.eps_rounding_margin(b.epsilon(delta)), eps) if b is not None else 0.0)
                for eps, b in blankets)
    pairs = count_pairs(g, k)
    top = max(eps for eps, _ in g)
    lower = _sm.eps_less_margin(
        _sm._lower_epsilon(lambda e: _delta_lower(pairs, e), delta, top, upper)) \
        if upper > 0 else 0.0
    return certified_bounds(lower, upper, f"epsilon at delta={delta!r}")


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
    # the upper bound at eps less the rounding margin, the lower one at eps plus it, as
    # shuffle_model.delta_bounds (the rounding of e^eps and of the laws is charged there)
    upper = _delta_upper(upper_blankets(g, k), float(_sm.below_by_margin(eps)))
    upper = _sm.upper_at_zero(upper, eps, max(e for e, _ in g))
    lower = _delta_lower(count_pairs(g, k), eps + _sm.EPS_ROUNDING_MARGIN) if upper > 0 else 0.0
    return certified_bounds(max(lower, 0.0), upper, f"delta at epsilon={eps!r}")


# --------------------------------------------------------------------------------------------
# a round of the shuffle accountant, and its PLDs for composition over rounds
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GroupedKRR:
    """The randomizer of a shuffle-model round whose users run k-RR with a local epsilon per
    group (:class:`~dpplugins.events.PersonalizedRandomizedResponseEvent`); the round's number
    of users is the groups' total.  ``eps0`` is the largest local epsilon: every round is
    eps0-DP (a post-processing of the differing user's own report), which caps compositions."""

    groups: Groups
    k: int = 2

    def __post_init__(self) -> None:
        groups, k = _check_groups(self.groups, self.k)
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "k", k)

    delta0 = 0.0

    @property
    def eps0(self) -> float:
        return max(eps for eps, _ in self.groups)

    @property
    def users(self) -> int:
        return sum(n for _, n in self.groups)

    @property
    def name(self) -> str:
        base = "binary_rr" if self.k == 2 else f"{self.k}-rr"
        return f"{base} per group (" + ", ".join(f"{n} at {eps:g}" for eps, n in self.groups) \
            + ")"


def upper_profile(spec: GroupedKRR):
    """Vectorised certified upper bound on the round's privacy profile (eps >= 0, both
    directions): the largest over the differing user's group of its blanket (48 blocks of the
    count: the profile is evaluated at many points), memoised per eps."""
    blankets = upper_blankets(spec.groups, spec.k, 48)
    memo: dict[float, float] = {}

    def fn(eps):
        eps = np.asarray(eps, dtype=float)
        for e in {float(v) for v in eps.ravel()} - memo.keys():
            # (at e less the rounding margin: shuffle_model.below_by_margin)
            memo[e] = _delta_upper(blankets, float(_sm.below_by_margin(e)))
        return np.array([memo[float(e)] for e in eps.ravel()]).reshape(eps.shape)
    return fn


def grid_step(spec: GroupedKRR) -> float:
    """1/400 of the round's epsilon upper bound at delta = 1e-6, in [1e-6, 1e-2], and no finer
    than :func:`~dpplugins.amplification.shuffle_model.profile_grid_floor`."""
    up = epsilon_bounds(spec.groups, spec.k, 1e-6).upper
    return max(float(np.clip(max(up, 1e-6) / 400, 1e-6, 1e-2)),
               _sm.profile_grid_floor(spec.eps0))


def round_pld(spec: GroupedKRR, h: float) -> PrivacyLossDistribution:
    """Dominating PLD of the round: :func:`upper_profile` by pessimistic connect-the-dots
    (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022, arXiv:2207.04380), sampled at 80
    points up to where the blanket bound falls below 1e-16."""
    blankets = upper_blankets(spec.groups, spec.k, 48)
    top = max((min(b.epsilon(1e-16), eps) if b is not None else 0.0) for eps, b in blankets)
    top = max(top, 1e-6)
    return PrivacyLossDistribution.from_privacy_profile(
        upper_profile(spec), epsilon_max=top, symmetric=True, value_discretization_interval=h,
        profile_step=max(h, top / 80), description=f"shuffle model, {spec.name}")


def lower_round_pld(spec: GroupedKRR, h: float) -> _sm.LowerPLD:
    """PLD of the exact count pair of :func:`count_pairs` with the largest one-round lower
    bound at delta = 1e-6 (any choice is valid), as a
    :class:`~dpplugins.amplification.shuffle_model.LowerPLD` (its ``rho`` bounds the l1 error
    of the pmfs: the relative error and the absolute slack)."""
    best = None
    for eps, p0, p1, rel, slack in count_pairs(spec.groups, spec.k):
        lp = _sm.LowerPLD.of_pmfs(p0, p1, rel, h, f"count pair of {spec.name}, differing user "
                                                  f"at eps0={eps:g}", absolute=slack)
        value = lp.pld.epsilon_for_delta(1e-6).lower
        if best is None or value > best[0]:
            best = (value, lp)
    if best is None:   # every group 0-DP: P = Q, a lower bound of 0
        pld = PrivacyLossDistribution.from_pmfs(np.ones(1), np.ones(1), symmetric=True,
                                                value_discretization_interval=h)
        return _sm.LowerPLD(pld, 0.0, f"{spec.name}: every report independent of the data")
    return best[1]
