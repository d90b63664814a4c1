"""k-out-of-t random allocation with Gaussian noise: every example takes part in ``k`` distinct
uniformly random steps of each epoch of ``t`` steps (Feldman & Shenfeld, "Privacy amplification
by random allocation", 2025, arXiv:2502.08202; "Efficient privacy loss accounting for
subsampling and random allocation", 2026, arXiv:2602.17284, which reduce general ``k`` to
``k = 1``).  Certified bounds, add/remove neighbours.

**Upper bound: a random partition into k blocks** (our derivation of the reduction).  Write
``t = k m + r`` (``0 <= r < k``).  Draw a uniformly random ordered partition of the ``t`` steps
into ``r`` blocks of ``m + 1`` and ``k - r`` blocks of ``m`` steps, then one uniform step in each
block.  The law of the resulting ``k``-set is invariant under every permutation of the steps,
and permutations act transitively on ``k``-sets, so it is the uniform ``k``-set: the protocol
is exactly k-out-of-t allocation.  Revealing the partition is a finer observation, so it can
only increase every divergence; given the partition, the example's ``k`` steps are independent
single allocations into the blocks, run *concurrently* (their steps interleave in time).  Each
is random allocation into ``n`` steps under adaptive queries, dominated by the pair of Chua et
al. (AISTATS 2025, arXiv:2412.16802, the pair ``(P_B, Q_B)`` of ABLQ_B for adaptive queries),
and the concurrent composition of f-DP interactive mechanisms is dominated by the composition of
their trade-off functions (Vadhan & Zhang, "Concurrent composition theorems for differential
privacy", STOC 2023, arXiv:2207.08335).  Every partition gives the same block sizes, so the
epoch is dominated by the composition of ``r`` allocations into ``m + 1`` steps and ``k - r``
into ``m`` steps, each certified by :func:`dpplugins.amplification.allocation.random_allocation_pld`
(upper construction only).  ``k = 1`` is random allocation itself; ``k = t`` is ``t`` Gaussian
mechanisms (blocks of one step), exact.

**Lower bound: a dominated post-processing** (our derivation).  A specific adversary (the
example's gradient is ``e_j`` at step ``j``, everybody else's 0) releases exactly ``P = C(t,
k)^-1 sum_A N(1_A, sigma^2 I_t)`` against ``Q = N(0, sigma^2 I_t)``; the sum ``S`` of ``Y_j =
e^(x_j / sigma^2)``, rounded down to the summand grid, is a post-processing, its law under P the
convolution of ``k`` shifted and ``t - k`` plain log-normal summands
(:func:`dpplugins.amplification.allocation.sum_observation_lower_pair`, certified like the ``k =
1`` dominated pair, with the likelihood-ratio band ``[0, (a (R + t h))^k]`` from Maclaurin's
inequality ``e_k(y) / C(t, k) <= (sum y / t)^k``).  It is also intersected with the Gaussian
lower bound: under P the loss is at least the loss of the ``k`` Gaussian coordinates in ``A``
minus ``log C(t, k)``, so ``delta(eps) >= delta_G(eps + n log C(t, k))`` with ``mu^2 = n k /
sigma^2`` over ``n`` epochs (the argument of the ``k = 1`` module, our derivation).  Observing
the sum only loses what the full output says beyond ``S``; the gap to the upper bound is what is
left of both constructions and is reported, never hidden.

**Check-in probability p < 1 with several participations** (our derivation).  The example takes
part in all ``k`` steps or in none, so given the partition the blocks are not independent
mixtures and the reduction above does not give a product; instead the whole epoch is a
mixture.  With the other examples' randomness the same in both worlds, the epoch's output law
with the example is ``P_p = p P_1 + (1 - p) Q`` (``P_1``: it takes part, the p = 1 protocol;
``Q``: it is absent).  For ``x = e^eps >= 1`` and every set ``S``, ``P_p(S) - x Q(S) = p (P_1(S)
- x' Q(S))`` with ``x' = 1 + (x - 1) / p``, and ``Q(S) - x P_p(S) = c (Q(S) - x'' P_1(S))`` with
``c = 1 - x (1 - p)``, ``x'' = x p / c`` (where ``c > 0``; for ``c <= 0`` the divergence is 0).
Taking suprema, exactly (the remove-direction identity is the advanced joint convexity of Balle,
Barthe, Gaboardi 2018, arXiv:1807.01647, Thm 2)::

    H_x(P_p || Q) = p H_x'(P_1 || Q),        H_x(Q || P_p) = c+ H_x''(Q || P_1).

*Upper bound.*  ``U(eps)``, the certified upper bound of the p = 1 epoch (both directions,
above), is evaluated at 401 points ``eps_j`` up to where it is below ``1e-17``; a privacy profile
is convex in ``x = e^eps`` (a supremum of functions affine in ``x``), so between two points the
chord through ``(x_j, U_j)`` bounds it from above, and beyond the last point its value there
does (profiles decrease).  The two identities turn this into a certified profile of the p < 1
epoch for both directions; their maximum is a symmetric profile, and its pessimistic
connect-the-dots PLD (:func:`~dpplugins.pld.PrivacyLossDistribution.from_privacy_profile`,
Doroshenko et al. 2022, arXiv:2207.04380) dominates the epoch in both directions (for ``eps <
0`` through ``H_x(P||Q) = 1 - x + x H_{1/x}(Q||P)``), so epochs compose by FFT.  It is also
capped by the closed form of ``k`` Gaussian steps per epoch (taking part in all ``k`` steps is
the worst case of the mixture).

*Lower bound.*  The sum observation of the adversary above is a post-processing ``T`` of the
epoch; a kernel is linear, so ``T P_p = (1 - p) T Q + p T P_1``: the dominated pair of the p < 1
epoch is the mixture of the two post-processed laws
(:func:`~dpplugins.amplification.allocation.sum_observation_lower_pair` with
``checkin_probability``; its certificate is that of the mixed vector, as for ``k = 1``), and
epochs compose it by FFT like any dominated pair.  Where the summands do not fit and only the
Gaussian lower bound is left, ``P_p >= p P_1`` as measures gives, over ``n`` epochs,
``H_x(P_p^n || Q^n) >= p^n H_{x p^-n}(P_1^n || Q^n)``: its certificate's factor is multiplied
by ``p`` and its shift raised by ``-log p`` per epoch (as for ``k = 1`` in
:mod:`dpplugins.amplification.allocation`, "Check-in probability").  The add direction has no
lower construction here (its lower bound is 0).

Example::

    >>> from dpplugins.amplification.allocation_participations import k_out_of_t_pld
    >>> pld = k_out_of_t_pld(noise_multiplier=1.0, steps_per_epoch=100, participations=2)
    >>> lower, upper = pld.epsilon_for_delta(1e-5)
"""

from __future__ import annotations

import math
import threading

import numpy as np

from dpplugins.amplification.allocation import (AllocationPLD, _Cert, _EXACT, _Lazy, _NONE,
                                                _gaussian_accounted, _gaussian_grid_fits,
                                                _inv_sq, _log_y_max, default_loss_step,
                                                default_summand_step, random_allocation_pld,
                                                sum_observation_lower_pair)
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_positive,
                              check_probability)
from dpplugins.pld.distribution import (Bounds, PrivacyLossDistribution, bounds_cross,
                                        component_bin_limit)

__all__ = ["BracketedPLD", "participation_blocks", "k_out_of_t_pld", "k_out_of_t_loss_step",
           "checkin_profile_epoch"]


def participation_blocks(steps_per_epoch: int, participations: int) -> tuple[tuple[int, int], ...]:
    """The block sizes of the reduction: ``((m + 1, r), (m, k - r))`` for ``t = k m + r``
    (entries with a zero count left out).

    Example::

        >>> participation_blocks(10, 4)
        ((3, 2), (2, 2))
    """
    t = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    k = check_count("participations", participations, minimum=1)
    if k > t:
        raise ParameterError("participations", k, f"<= steps_per_epoch={t} (distinct steps)")
    m, r = divmod(t, k)
    return tuple((size, count) for size, count in ((m + 1, r), (m, k - r)) if count)


class BracketedPLD:
    """Certified bounds from two constructions: the upper bound of ``upper`` and the lower bound
    of ``lower`` (both :class:`~dpplugins.amplification.allocation.AllocationPLD`).  Compose
    componentwise (the upper constructions dominate, the lower ones are dominated, so their
    compositions are too)."""

    def __init__(self, upper: AllocationPLD, lower: AllocationPLD | None) -> None:
        self.upper = upper
        self.lower = lower

    def compose(self, other: "BracketedPLD") -> "BracketedPLD":
        lower = (None if self.lower is None or other.lower is None
                 else self.lower.compose(other.lower))
        if self.lower is self.upper and other.lower is other.upper:
            return BracketedPLD.same(self.upper.compose(other.upper))
        return BracketedPLD(self.upper.compose(other.upper), lower)

    def self_compose(self, count: int) -> "BracketedPLD":
        count = check_count("count", count, minimum=1)
        if self.lower is self.upper:
            return BracketedPLD.same(self.upper.self_compose(count))
        return BracketedPLD(self.upper.self_compose(count),
                            None if self.lower is None else self.lower.self_compose(count))

    @classmethod
    def same(cls, pld: AllocationPLD) -> "BracketedPLD":
        """One construction that brackets by itself (``k = 1``)."""
        return cls(pld, pld)

    def composed_window_bins(self) -> int:
        """The largest FFT window a query composes (both constructions)."""
        parts = [self.upper] + ([self.lower] if self.lower is not None else [])
        return max(part.composed_window_bins() for part in parts)

    def _query(self, name: str, value: float) -> Bounds:
        up = getattr(self.upper, name)(value)
        if self.lower is self.upper:
            return up
        lower = 0.0
        if self.lower is not None:
            try:
                lower = float(getattr(self.lower, name)(value).lower)
            except NumericalError:
                lower = 0.0  # the dominated construction cannot certify here: 0 is a lower bound
        if bounds_cross(lower, up.upper):
            # the dominated construction crossed the certified upper bound, so its value is not
            # a lower bound here (2-out-of-4 at sigma = 0.7: a constant 0.1698 for delta from
            # 0.53 to 0.594, where Monte Carlo puts epsilon below it); 0 is one
            lower = 0.0
        return Bounds(min(lower, up.upper), up.upper)

    def epsilon_for_delta(self, delta: float) -> Bounds:
        """Certified ``[lower, upper]`` on epsilon at ``delta``."""
        return self._query("epsilon_for_delta", delta)

    def delta_for_epsilon(self, epsilon: float) -> Bounds:
        """Certified ``[lower, upper]`` on delta at ``epsilon``."""
        return self._query("delta_for_epsilon", epsilon)

    def upper_floor(self) -> float:
        """The additive error floor of the upper construction's delta bounds
        (:meth:`~dpplugins.amplification.allocation.AllocationPLD.upper_floor`)."""
        return self.upper.upper_floor()

    def slack_at(self, epsilon: float) -> float:
        """The largest additive numerical term of either construction."""
        parts = [self.upper] + ([self.lower] if self.lower is not None else [])
        return max(p.slack_at(epsilon) for p in parts)


def _log_binomial(t: int, k: int) -> float:
    """A certified *upper* bound on ``log C(t, k)`` (it shifts the lower bound, so larger is
    safe).  ``lgamma(t + 1) - lgamma(k + 1) - lgamma(t - k + 1)`` cancels catastrophically for
    large ``t`` (at ``t = 10**300`` it returns ``-log k!``, since ``t + 1 == t - k + 1`` in
    double, which made the lower bound invalid; reliability issue 21), so we take the smallest
    of: ``C(t, j) <= t^j / j!`` (``j = min(k, t - k)``), ``C(t, j) <= 2^t``, and, for ``t <
    2**53``, the lgamma difference, each plus a margin of ``64 u`` times the magnitude of its
    terms (CPython's ``lgamma`` is accurate to a few ulps) and ``1e-12``."""
    t, k = int(t), int(k)
    j = min(k, t - k)
    if j <= 0:
        return 0.0
    u = 2.0 ** -53
    log_t, lg_j = math.log(t), math.lgamma(float(j) + 1.0)
    bounds = [float(j) * log_t - lg_j + 64 * u * (float(j) * log_t + lg_j)]
    if t < 2 ** 1000:  # (float(t) overflows beyond)
        bounds.append(float(t) * math.log(2.0) * (1 + 64 * u))
    if t < 2 ** 53:
        terms = (math.lgamma(t + 1.0), lg_j, math.lgamma(float(t - j) + 1.0))
        bounds.append(terms[0] - terms[1] - terms[2] + 64 * u * sum(map(abs, terms)))
    return max(0.0, min(bounds)) + 1e-12


#: summand cells of the lower construction at most (a coarser summand grid is still a
#: post-processing, so still a lower bound): few steps per epoch would otherwise need millions
#: (t = 3, sigma = 1: 2.3 M cells, 7 s; 2^18 cells: 0.7 s, the lower bound 0.09 % lower)
_LOWER_CELLS = 2 ** 18


def _lower_summand_step(sigma: float, t: int, summand_step: float | None) -> float | None:
    """The summand grid step of the lower construction: the given (or default) step, coarser
    where the summands up to their truncation point would need more than ``_LOWER_CELLS``."""
    try:
        cap = math.exp(_log_y_max(sigma, 1e-14, t)) / _LOWER_CELLS
        step = default_summand_step(sigma, t) if summand_step is None else summand_step
    except (ArithmeticError, ValueError, ParameterError):
        return summand_step
    return max(step, cap) if math.isfinite(cap) and cap > step else summand_step


def dominated_parts(pair, description: str, h_loss: float, *, tail_mass: float,
                    memory_limit: int) -> tuple:
    """The parts ``(plds, upper certificates, lower certificates)`` of a dominated construction
    given as one :class:`~dpplugins.amplification.allocation.AllocationPair`: per direction, the
    PLD of the pair in both of the engine's slots.  Only its lower bounds mean anything; the
    upper certificates are exact placeholders (a direction without a lower bound has the lower
    certificate ``_NONE``, whose factor would divide an upper query by zero)."""
    try:
        plds = {d: PrivacyLossDistribution.from_bracketing_pairs(
            pair.direction_pair(d, f"{description} ({d})"),
            pair.direction_pair(d, f"{description} ({d})"),
            value_discretization_interval=h_loss, tail_mass=tail_mass,
            memory_limit=memory_limit) for d in ("remove", "add")}
    except ParameterError as error:
        if error.name != "value_discretization_interval":
            raise
        # the pair's loss range does not fit the memory limit at this loss step (a loss step
        # sized for tiny per-epoch losses, 10^6 steps per epoch): no lower bound, which is
        # valid, instead of an error about a grid step the user never chose
        return no_lower_parts(h_loss, tail_mass=tail_mass, memory_limit=memory_limit)
    return plds, {d: _EXACT for d in ("remove", "add")}, dict(pair.slack)


def no_lower_parts(h_loss: float, *, tail_mass: float, memory_limit: int) -> tuple:
    """The parts of a dominated construction that certifies nothing (a lower bound of 0): a
    one-outcome PLD and no lower certificate."""
    none = PrivacyLossDistribution.from_pmfs([1.0], [1.0], value_discretization_interval=h_loss,
                                             tail_mass=tail_mass, memory_limit=memory_limit)
    return ({"remove": none, "add": none}, {d: _EXACT for d in ("remove", "add")},
            {d: _NONE for d in ("remove", "add")})


def _lower_epoch(sigma: float, t: int, k: int, h_loss: float, *, tail_mass: float,
                 memory_limit: int, summand_step: float | None,
                 checkin: float = 1.0) -> AllocationPLD:
    """The dominated construction of one k-out-of-t epoch (module docstring): the PLD of the
    sum-observation pair where the summands fit, the Gaussian lower bound always.  Only its
    lower bounds are used (its upper slots hold the same pair and mean nothing here).  With a
    check-in probability ``p < 1`` the sum-observation pair is that of the mixture ``(1 - p) Q
    + p P`` (a post-processing of the epoch itself, so epochs compose without a factor ``p``
    each); the Gaussian fallback's certificate is weighted by ``p`` and shifted by ``-log p``
    (module docstring, "Check-in probability")."""
    log_c = _log_binomial(t, k)
    mu2 = k * _inv_sq(sigma)
    log_p = math.log(checkin)
    gaussian_only = _gaussian_accounted(sigma, t) or k == t  # (t >= k > 1 here)

    def weighted(certs: dict) -> dict:
        if checkin == 1.0:
            return certs
        c = certs["remove"]
        return {"remove": _Cert(c.log_factor + log_p, c.shift - log_p, c.additive * checkin,
                                c.log_growth), "add": _NONE}
    description = f"{k}-out-of-{t} allocation lower pair, sigma={sigma:g}"

    gaussian_fits = _gaussian_grid_fits(sigma / math.sqrt(k), h_loss, memory_limit)

    def build():
        pair = None
        if not gaussian_only:
            try:
                pair = sum_observation_lower_pair(
                    sigma, t, k, summand_step=_lower_summand_step(sigma, t, summand_step),
                    memory_limit=memory_limit, checkin_probability=checkin)
            except NumericalError:
                # the summands do not fit the memory limit (small noise, many steps): the
                # Gaussian lower bound alone, or none (a lower bound of 0 is certified)
                pair = None
        if pair is None:
            exact = {d: _EXACT for d in ("remove", "add")}
            if not gaussian_fits:
                return no_lower_parts(h_loss, tail_mass=tail_mass, memory_limit=memory_limit)
            one = PrivacyLossDistribution.from_gaussian(
                sigma / math.sqrt(k), value_discretization_interval=h_loss,
                tail_mass=tail_mass, memory_limit=memory_limit)
            return ({"remove": one, "add": one}, exact,
                    weighted({"remove": _Cert(0.0, log_c, 0.0, 0.0), "add": _NONE}))
        return dominated_parts(pair, description, h_loss, tail_mass=tail_mass,
                               memory_limit=memory_limit)

    engine = not gaussian_only or (mu2 / 2 + 10 * math.sqrt(mu2) <= 550.0 and gaussian_fits)
    return AllocationPLD(None, None, None, lazy=_Lazy(build), engine=engine, has_lower=True,
                         gaussian_mu2=mu2, log_t=log_c - log_p, log_weight=log_p,
                         has_upper=False)


#: points at which the p = 1 epoch's certified profile is evaluated for a p < 1 epoch
_PROFILE_POINTS = 401
#: rounds of adaptive refinement of those points, and the points each round adds
_PROFILE_ROUNDS, _PROFILE_ADDED = 3, 400


def _profile_nodes(full, top: float) -> tuple[np.ndarray, np.ndarray]:
    """Nodes in ``[0, top]`` and certified upper bounds ``full(node)`` of a privacy profile,
    for :func:`_chord_profile`: ``_PROFILE_POINTS`` uniform nodes, then ``_PROFILE_ROUNDS``
    rounds that each split the ``_PROFILE_ADDED`` intervals where the chord may be furthest
    above the profile, relative to its value.  The estimate (ours, for placement only) compares
    the chord at the midpoint with the larger of the neighbouring chords extended into the
    interval, a lower bound on a convex function; any nodes give a valid bound.  Returns the
    nodes and the running minimum of the values (a profile decreases, so it is an upper bound
    too)."""
    nodes = np.linspace(0.0, top, _PROFILE_POINTS)
    values = np.array([full(float(e)) for e in nodes])
    for _ in range(_PROFILE_ROUNDS):
        v = np.minimum.accumulate(np.minimum(values, 1.0))
        x = np.exp(nodes)
        slope = np.diff(v) / np.diff(x)
        mid = 0.5 * (nodes[:-1] + nodes[1:])
        xm = np.exp(mid)
        chord = v[:-1] + slope * (xm - x[:-1])
        envelope = np.full(len(mid), -np.inf)
        envelope[1:] = v[1:-1] + slope[:-1] * (xm[1:] - x[1:-1])         # left neighbour
        envelope[:-1] = np.maximum(envelope[:-1], v[1:-1] + slope[1:] * (xm[:-1] - x[1:-1]))
        with np.errstate(divide="ignore", invalid="ignore"):
            excess = np.where(chord > 1e-17, (chord - np.maximum(envelope, 0.0)) / chord, 0.0)
        excess = np.nan_to_num(excess, nan=0.0, posinf=0.0)
        split = np.sort(np.argsort(excess)[::-1][:_PROFILE_ADDED])
        split = split[excess[split] > 1e-6]
        if not len(split):
            break
        added = mid[split]
        nodes = np.concatenate([nodes, added])
        values = np.concatenate([values, [full(float(e)) for e in added]])
        order = np.argsort(nodes)
        nodes, values = nodes[order], values[order]
    return nodes, np.minimum.accumulate(np.minimum(values, 1.0))


def _chord_profile(nodes: np.ndarray, values: np.ndarray):
    """Upper bound on a privacy profile known at ``nodes`` (increasing, from 0) to be at most
    ``values``: the chord in ``x = e^eps`` between neighbouring nodes (a profile is convex in
    ``x``), and the last value beyond the last node (a profile decreases)."""
    def bound(eps: np.ndarray) -> np.ndarray:
        eps = np.asarray(eps, dtype=float)
        j = np.clip(np.searchsorted(nodes, eps, side="right") - 1, 0, len(nodes) - 2)
        a, b = nodes[j], nodes[j + 1]
        with np.errstate(over="ignore", invalid="ignore"):
            weight = np.clip(np.expm1(eps - a) / np.expm1(b - a), 0.0, 1.0)
        chord = values[j] + weight * (values[j + 1] - values[j])
        return np.where(eps >= nodes[-1], values[-1], np.maximum(chord, values[j + 1]))
    return bound


def _checkin_upper_epoch(sigma: float, t: int, k: int, checkin: float, h_loss: float, *,
                         method: str, geometric_cells: int, tail_mass: float,
                         memory_limit: int) -> AllocationPLD:
    """The dominating construction of one k-out-of-t epoch with check-in probability ``p < 1``
    (module docstring, "Check-in probability"): the p = 1 epoch's certified profile, turned
    into the p < 1 epoch's by the two mixture identities, as a symmetric PLD."""
    return checkin_profile_epoch(
        lambda: k_out_of_t_pld(sigma, t, k, 1, value_discretization_interval=h_loss,
                               method=method, geometric_cells=geometric_cells,
                               tail_mass=tail_mass, memory_limit=memory_limit,
                               lower=False).upper,
        checkin, h_loss, f"{k}-out-of-{t} allocation, p={checkin:g}, sigma={sigma:g}",
        tail_mass=tail_mass, memory_limit=memory_limit, gaussian_mu2=k * _inv_sq(sigma),
        profile_key=("gaussian", float(sigma), int(t), int(k), method, int(geometric_cells),
                     float(tail_mass), int(memory_limit)))


#: certified profiles of ``p = 1`` epochs (:func:`checkin_profile_epoch`), by the caller's key:
#: ``key -> (grid step, nodes, values)``; at most ``_PROFILE_CACHE_SIZE`` entries
_PROFILE_CACHE: dict = {}
_PROFILE_CACHE_SIZE = 32
_PROFILE_CACHE_LOCK = threading.Lock()


def _full_epoch_profile(full_epoch, h_loss: float, key) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and certified upper bounds of the profile of the ``p = 1`` epoch ``full_epoch()``
    (:func:`_profile_nodes`), reused from a grid at least as fine when ``key`` names the same
    epoch: the values bound the epoch's true profile whatever grid certified them, so any
    coarser grid may use them.  The window budget of the accountants builds a coarser grid
    when the first one's FFT window is too large, and each build certified the profile anew
    (randomized response with 5 * 10^5 buckets, two participations: 4.4 s of 12.7 s)."""
    if key is not None:
        with _PROFILE_CACHE_LOCK:
            cached = _PROFILE_CACHE.get(key)
        if cached is not None and cached[0] <= h_loss:
            return cached[1], cached[2]
    one = full_epoch()

    def full(e: float) -> float:
        return float(one.delta_for_epsilon(e).upper)
    # the nodes reach where the profile is below 1e-17, or stops falling (a certified
    # floor: a pure-DP epoch's upper bound is its numerical slack beyond its largest loss),
    # and at most 512 (e^eps of the nodes stays finite; 4096 overflowed into NaN chords)
    top, value = 1.0, full(1.0)
    while value > 1e-17 and top < 2.0 ** 9:
        after = full(2.0 * top)
        if after >= value:
            break
        top, value = 2.0 * top, after
    nodes, values = _profile_nodes(full, top)
    if key is not None:
        with _PROFILE_CACHE_LOCK:
            if len(_PROFILE_CACHE) >= _PROFILE_CACHE_SIZE:
                _PROFILE_CACHE.pop(next(iter(_PROFILE_CACHE)))
            _PROFILE_CACHE[key] = (h_loss, nodes, values)
    return nodes, values


def checkin_profile_epoch(full_epoch, checkin: float, h_loss: float, description: str, *,
                          tail_mass: float, memory_limit: int,
                          gaussian_mu2: float | None, profile_key=None) -> AllocationPLD:
    """The dominating construction of an epoch with check-in probability ``p < 1`` from the
    ``p = 1`` epoch's (``full_epoch()``, an :class:`AllocationPLD` whose upper bounds certify
    both directions): its profile at adaptive nodes, turned into the ``p < 1`` epoch's by the
    two mixture identities (module docstring, "Check-in probability"), as a PLD.  The identities
    hold for any mechanism, so any base mechanism's epoch can be passed; ``gaussian_mu2`` is
    that of the cap by ``k`` Gaussian steps (``None`` for another base mechanism).
    ``profile_key``: a hashable name of the ``p = 1`` epoch (everything ``full_epoch`` depends
    on except the grid step), under which its certified profile is reused on coarser grids
    (:func:`_full_epoch_profile`); ``None`` never reuses."""
    p = float(checkin)

    def build():
        nodes, values = _full_epoch_profile(full_epoch, h_loss, profile_key)
        bound = _chord_profile(nodes, values)
        log_1mp = math.log1p(-p)

        def remove_profile(eps):
            eps = np.asarray(eps, dtype=float)
            return np.minimum(p * bound(np.log1p(np.expm1(eps) / p)), 1.0)

        def add_profile(eps):
            eps = np.asarray(eps, dtype=float)
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                c = -np.expm1(eps + log_1mp)            # 1 - e^eps (1 - p)
                inner = eps + math.log(p) - np.log(np.where(c > 0, c, 1.0))
            return np.minimum(np.where(c > 0, c * bound(np.maximum(inner, 0.0)), 0.0), 1.0)

        def profile(eps):
            return np.maximum(remove_profile(eps), add_profile(eps))
        # the grid ends where the profile is below 1e-16 (at most 400), or earlier where the
        # memory limit ends it: what lies beyond goes to delta(inf), which is valid (looser)
        eps_max = 0.25
        while eps_max < 400 and float(profile(np.array([eps_max]))[0]) > 1e-16:
            eps_max *= 2
        room = (component_bin_limit(memory_limit) - 3) * h_loss / 2
        pld = PrivacyLossDistribution.from_privacy_profile(
            remove_profile, add_delta_for_epsilon=add_profile, value_discretization_interval=h_loss,
            epsilon_max=min(eps_max, 400.0, room), description=description,
            tail_mass=tail_mass, memory_limit=memory_limit)
        exact = {d: _EXACT for d in ("remove", "add")}
        return ({"remove": pld, "add": pld}, exact, {d: _NONE for d in ("remove", "add")})
    # a profile grid of more than 2^20 bins below eps = 0.25 (huge noise: a tiny loss step) is
    # not worth building: the closed form of k Gaussian steps answers such epochs (without
    # one, for another base mechanism, it is built anyway)
    engine = gaussian_mu2 is None or 0.5 / h_loss + 3 <= 2 ** 20
    return AllocationPLD(None, None, None, lazy=_Lazy(build), engine=engine, has_lower=False,
                         gaussian_mu2=gaussian_mu2)


def k_out_of_t_loss_step(noise_multiplier: float, steps_per_epoch: int,
                         participations: int) -> float:
    """Default PLD loss step: the finest of the blocks' default steps
    (:func:`dpplugins.amplification.allocation.default_loss_step`)."""
    return min(default_loss_step(noise_multiplier, size)
               for size, _ in participation_blocks(steps_per_epoch, participations))


def k_out_of_t_pld(noise_multiplier: float, steps_per_epoch: int, participations: int,
                   epochs: int = 1, *, value_discretization_interval: float | None = None,
                   method: str = "auto", summand_step: float | None = None,
                   geometric_cells: int = 2000, tail_mass: float = 1e-15,
                   memory_limit: int = 1 << 30, lower: bool = True,
                   checkin_probability: float = 1.0) -> BracketedPLD:
    """Certified bounds for ``epochs`` epochs of k-out-of-t random allocation with Gaussian
    noise (module docstring), add/remove neighbours, each example taking part in an epoch with
    probability ``checkin_probability``.  ``participations = 1`` is
    :func:`~dpplugins.amplification.allocation.random_allocation_pld`.  ``lower=False`` builds
    only the upper construction (lower bounds 0).  ``method``, ``summand_step`` (used by the
    dominated construction) and ``geometric_cells`` go to the blocks' accounting.

    Example::

        >>> pld = k_out_of_t_pld(1.0, 10, 10)     # k = t: ten Gaussian mechanisms, exact
        >>> b = pld.epsilon_for_delta(1e-5)
        >>> (b.upper - b.lower) / b.upper < 1e-3
        True
    """
    sigma = check_positive("noise_multiplier", noise_multiplier)
    blocks = participation_blocks(steps_per_epoch, participations)
    t, k = int(steps_per_epoch), int(participations)
    epochs = check_count("epochs", epochs, minimum=1)
    h_loss = (k_out_of_t_loss_step(sigma, t, k) if value_discretization_interval is None
              else check_positive("value_discretization_interval", value_discretization_interval))
    options = dict(value_discretization_interval=h_loss, method=method,
                   geometric_cells=geometric_cells, tail_mass=tail_mass,
                   memory_limit=memory_limit)
    p = check_probability("checkin_probability", checkin_probability)
    if k == 1:
        return BracketedPLD.same(random_allocation_pld(sigma, t, epochs, lower=lower,
                                                       summand_step=summand_step,
                                                       checkin_probability=p, **options))
    if p < 1.0:
        upper = _checkin_upper_epoch(sigma, t, k, p, h_loss, method=method,
                                     geometric_cells=geometric_cells, tail_mass=tail_mass,
                                     memory_limit=memory_limit)
        dominated = (_lower_epoch(sigma, t, k, h_loss, tail_mass=tail_mass,
                                  memory_limit=memory_limit, summand_step=summand_step,
                                  checkin=p) if lower else None)
        return BracketedPLD(upper, dominated).self_compose(epochs)
    if k == t:  # one step per block: the reduction is an equality (t Gaussian mechanisms)
        one = random_allocation_pld(sigma, 1, 1, lower=lower, **options).self_compose(k)
        return BracketedPLD.same(one.self_compose(epochs))
    upper = None
    for size, count in blocks:
        part = random_allocation_pld(sigma, size, 1, lower=False, **options).self_compose(count)
        upper = part if upper is None else upper.compose(part)
    dominated = (_lower_epoch(sigma, t, k, h_loss, tail_mass=tail_mass,
                              memory_limit=memory_limit, summand_step=summand_step)
                 if lower else None)
    return BracketedPLD(upper, dominated).self_compose(epochs)
