"""Random allocation with Laplace noise or randomized response in every step: certified bounds.

**Protocol.**  As in :mod:`dpplugins.amplification.allocation`: every epoch has ``t`` steps; each
example takes part with probability ``p`` (``checkin_probability``) and then in exactly one
uniformly random step; every step runs a base mechanism on its batch, and a step without
examples is run anyway.  Here the base mechanism is not the Gaussian: the Laplace mechanism
(:class:`~dpplugins.events.LaplaceEvent`, L1 sensitivity 1) or randomized response
(:class:`~dpplugins.events.RandomizedResponseEvent`, add/remove read as zero-out, as the ``pld``
accountant reads it).  Neighbouring relation: add/remove one example.

**Dominating pair** (our derivation: Chua et al.'s argument for the Gaussian, arXiv:2412.16802,
with Blackwell's theorem in place of the Gaussian's geometry; Feldman & Shenfeld,
arXiv:2602.17284, state a PLD for allocation applied to any mechanism, whose text we could not
read).  Let ``(P0, Q0)`` be the base mechanism's pair: for every history ``h`` of earlier outputs
and every two batches that differ in the example, ``H_alpha(M_h(with) || M_h(without)) <=
H_alpha(P0 || Q0)`` for *all* ``alpha >= 0`` (Zhu, Dong & Wang, AISTATS 2022,
arXiv:2106.08567, Def. 8).  The library's one-step pairs give this: from ``H_alpha(Q || P) = 1 -
alpha + alpha H_(1/alpha)(P || Q)``, ``alpha < 1`` for the remove direction is ``alpha > 1``
for the add direction, whose pair is ``(Q0, P0)`` (randomized response) or has the same loss
distribution (Laplace: ``x -> 1 - x``).  All orders together are the order of trade-off
functions, so Blackwell's theorem (Dong, Roth & Su, JRSS-B 2022, arXiv:1905.02383, Thm 2.10)
gives a kernel ``K_h`` with ``K_h P0 = M_h(with)`` and ``K_h Q0 = M_h(without)``.  Fix the
adversary's strategy and the other examples' steps (independent of the example's): the kernel
that reads ``y`` in ``Y^t`` and releases ``o_i = K_(o_<i)(y_i)`` step after step maps ``Q0^t``
to the epoch without the example and, for every ``j``, ``P0`` at ``j`` and ``Q0`` elsewhere to
the epoch with the example in step ``j``.  It is one kernel for all ``j``, so it maps

    P = (1/t) sum_j P0^(j) x Q0^(others)        and        Q = Q0^t

to the epoch with and without the example: ``(P, Q)`` dominates the remove direction and ``(Q,
P)`` the add direction.  The check-in probability (``P_p = (1 - p) Q + p P``) and the
composition over epochs are as in :mod:`dpplugins.amplification.allocation` ("Check-in
probability").  The pair is attained (a query that counts the example in one coordinate, on the
dataset of that example alone), so the lower bounds below hold for the worst case.

**Reduction to a sum of summands** (our derivation).  ``dP/dQ(y) = (1/t) sum_j r(y_j)`` with
``r = dP0/dQ0``; under Q the summands ``Y_j = r(y_j)`` are i.i.d. with the law of the base
pair's likelihood ratio under ``Q0`` (``E[Y] = 1``), and under P the summand of the example's
step has the law of ``r`` under ``P0``, ``y Q0-law(dy)``.  This is the structure of the Gaussian
module's reduction with ``a = 1/t`` (there ``Y = e^G``), so its convex-order dominating pair
(:func:`~dpplugins.amplification.allocation.upper_pair_of_summands`: spread every summand to the
ends of its grid cell with at least its mean-preserving weights) and its post-processed dominated
pair (:func:`~dpplugins.amplification.allocation.lower_pair_of_summands`: the sum of the summands
rounded down to the grid) apply unchanged, with their certificates.  What a base mechanism must
supply is the summand law on a uniform grid ``k h``:

* **Laplace** with scale ``b`` (``eps = 1/b``; loss ``(|x| - |x - 1|) / b``): under ``Q0 =
  Lap(0, b)``, ``Y = e^-eps`` with probability 1/2 (``x <= 0``), ``Y = e^eps`` with probability
  ``e^-eps / 2`` (``x >= 1``), and between them ``Y = e^((2x - 1)/b)`` has the density ``c
  y^(-3/2)``, ``c = e^(-eps/2) / 4`` (the change of variables ``x = (b log y + 1) / 2``; total
  mass and ``E[Y] = 1`` are checked in the tests).  On a cell ``[u, v]``, with ``d = sqrt v -
  sqrt u = (v - u) / (sqrt u + sqrt v)``: Q-mass ``2 c d / sqrt(u v)``, P-mass ``2 c d``,
  ``E[Y - u; cell] = 2 c d^2 / sqrt v`` and ``E[v - Y; cell] = 2 c d^2 / sqrt u`` -- sums and
  products of positive terms, without cancellation.  ``chi^2 = E[Y^2] - 1 = (2/3) e^eps + (1/3)
  e^(-2 eps) - 1`` sizes the grid.
* **Randomized response** (zero-out, ``k`` buckets; :func:`~dpplugins.mechanisms.randomized_response.zero_out_rr_pair`):
  two atoms, ``Y = k top`` with Q-mass ``1/k`` and ``Y = k other`` with Q-mass ``(k - 1)/k``.

**Numerics** (our derivation).  The computed atoms ``y`` (and the density's ends) are within
relative ``rho = (eps + 4) u`` of the exact ones (``eps`` the largest loss, ``u`` the unit
round-off; ``exp`` of a rounded argument).  The dominating spread gives an atom the weights of
*every* position in ``[y (1 - rho), y (1 + rho)]``, across a cell edge too (a weight on the
point beyond), and puts the density's uncertain end slivers (mass at most ``rho/2`` times the
end atom's) on the four points around each end as extra mass, which a dominating measure may
have.  The grid's points are ``(k0 + j) h`` with ``k0 h`` just below ``lo (1 - 2 rho)``, the
smallest summand (``k0`` need not be an integer): then the sum is never below ``t`` times it,
as the exact one is, and the add direction's loss stays bounded (a grid from 0 let a coarse
grid put most of a summand at 0 and gave an infinite add-direction epsilon for Laplace
``b = 0.1``, t = 1000).  The dominated pair's post-processing maps every summand above the
highest computed cell into that cell (a function of the output), so the band of the likelihood
ratio on an outcome is widened by ``rho`` relative; the
end cells hold an atom whose mass dominates the sliver, so every cell's mass is within ``r =
32 u + 2 rho + (eps/2 + 2) u`` relative of the exact one.  The FFT sums and their error terms are
the Gaussian module's.

**Several participations** (``k > 1``; :func:`k_out_of_t_mechanism_pld`): the constructions
of :mod:`dpplugins.amplification.allocation_participations`, whose arguments do not use the
Gaussian -- the random partition into ``k`` blocks with concurrent composition (upper), the
mixture identities for ``p < 1`` (upper), the sum observation with ``k`` summands from the
P-law (lower, remove direction) -- with this module's summand laws.

**Where the grid does not fit** (a loss above 550, ``t`` times the grid beyond ``2**50``
indices, or a grid over the memory limit) the epoch is accounted by one step of the base
mechanism, with the lower bound ``p delta_M(eps + log(t/p))`` of the remove direction
(:func:`~dpplugins.amplification.allocation.base_mechanism_parts`), which is also the exact
answer for ``t = 1``, ``p = 1``.

Example::

    >>> from dpplugins.events import LaplaceEvent
    >>> from dpplugins.amplification.allocation_mechanisms import random_allocation_mechanism_pld
    >>> pld = random_allocation_mechanism_pld(LaplaceEvent(2.0), steps_per_epoch=100, epochs=10)
    >>> lower, upper = pld.epsilon_for_delta(1e-5)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from dpplugins import mechanisms
from dpplugins.amplification.allocation import (_ENGINE_LOSS, AllocationPLD, _Lazy,
                                                base_mechanism_parts, lower_pair_of_summands,
                                                parts_of_pairs, upper_pair_of_summands)
from dpplugins.amplification.allocation_participations import (BracketedPLD,
                                                               checkin_profile_epoch,
                                                               dominated_parts, no_lower_parts,
                                                               participation_blocks)
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_open_unit,
                              check_positive, check_probability)
from dpplugins.events import Event, LaplaceEvent, RandomizedResponseEvent
from dpplugins.mechanisms.randomized_response import (zero_out_randomized_response,
                                                      zero_out_rr_pair)
from dpplugins.mechanisms.types import MechanismPairs
from dpplugins.pld.distribution import PrivacyLossDistribution, component_bin_limit

__all__ = ["mechanism_allocation_pairs",
           "random_allocation_mechanism_pld", "mechanism_loss_step", "supported_base",
           "default_mechanism_summand_step", "k_out_of_t_mechanism_pld",
           "mechanism_k_loss_step", "step_max_loss", "step_total_variation"]

_U = float(np.finfo(float).eps) / 2
#: largest base-mechanism loss for which the summand grid is built (the PLD engine's loss grid
#: ends near 600; the Gaussian module's ``_ENGINE_LOSS``)
_MAX_GRID_LOSS = _ENGINE_LOSS
#: largest absolute sum index (t times the grid's last point) kept exact in double
_MAX_INDEX = 2.0 ** 50
#: largest additive error of the summand grid's certificate (:func:`_epoch`); beyond it the
#: epoch is accounted by one step of the base mechanism
_MAX_GRID_SLACK = 1e-3
#: FFT points of the sum that the default summand step aims at (:func:`_default_step`)
_SPAN_BUDGET = 2 ** 21


class _SummandLaw(NamedTuple):
    """The law of ``Y = dP0/dQ0`` under ``Q0`` for a base pair (module docstring): atoms at
    ``atoms`` with Q-masses ``atom_mass``, plus the density ``density * y^(-3/2)`` on ``(lo,
    hi)`` (``density = 0``: atoms only); ``lo``, ``hi`` are the law's support ends.
    ``max_loss`` is the largest ``|log Y|``, ``rho`` the relative accuracy of the computed
    atoms and ends, ``chi2 = E[Y^2] - 1`` (sizing only)."""

    atoms: np.ndarray
    atom_mass: np.ndarray
    density: float
    lo: float
    hi: float
    max_loss: float
    rho: float
    chi2: float


def supported_base(event: Event) -> bool:
    """Whether ``event`` is a base mechanism of this module (Laplace, randomized response)."""
    return isinstance(event, (LaplaceEvent, RandomizedResponseEvent))


def _check_base(event: Event) -> Event:
    if not supported_base(event):
        raise ParameterError("event", type(event).__name__,
                             "LaplaceEvent or RandomizedResponseEvent (Gaussian noise: "
                             "dpplugins.amplification.allocation)")
    return event


def step_max_loss(event: Event) -> float:
    """An upper bound on the largest absolute privacy loss of one step of the base mechanism
    ``event``, in both directions (``inf`` where it is unbounded): ``1 / scale`` for Laplace
    noise (L1 sensitivity 1; Dwork & Roth 2014, Thm 3.6), and for randomized response read as
    zero-out (:func:`~dpplugins.mechanisms.randomized_response.zero_out_rr_pair`) the larger of
    ``log(k e^eps0 / (e^eps0 + k - 1))`` (the true bucket) and ``log((e^eps0 + k - 1) / k)``
    (any other bucket), at most ``eps0``.  Rounded up (relative ``1e-12``, plus ``1e-12``)."""
    event = _check_base(event)
    if isinstance(event, LaplaceEvent):
        loss = 1.0 / event.scale
    else:
        eps0, k = float(event.epsilon0), int(event.num_buckets)
        # log((e^eps0 + k - 1) / k) = eps0 + log1p((k - 1) e^-eps0) - log k, without overflow
        other = eps0 + math.log1p((k - 1) * math.exp(-eps0)) - math.log(k)
        loss = min(max(eps0 - other, other), eps0)
    return loss * (1 + 1e-12) + 1e-12 if math.isfinite(loss) else math.inf


def step_total_variation(event: Event) -> float:
    """An upper bound on the total variation distance (``delta`` at epsilon 0, both directions)
    of one step of the base mechanism ``event``.

    Our derivation (elementary).  Laplace noise of scale ``b``, L1 sensitivity 1, centres 0 and
    1: the densities cross at ``1/2``, so the distance is ``P_0(Y < 1/2) - P_1(Y < 1/2) =
    (1 - e^(-1/(2b))/2) - e^(-1/(2b))/2 = 1 - e^(-1/(2b))``.  Randomized response read as
    zero-out (:func:`~dpplugins.mechanisms.randomized_response.zero_out_rr_pair`,
    ``E = e^eps0``): only the true bucket is more likely under ``P``, by ``E/(E + k - 1) - 1/k =
    (1 - 1/k) (1 - 1/E) / (1 + (k - 1)/E)``, written so that neither a large ``eps0`` nor a
    large ``k`` overflows.  Rounded up (relative ``1e-12``, plus ``1e-300``).

    Example::

        >>> round(step_total_variation(RandomizedResponseEvent(1.0, 2)), 6)  # (e-1)/(2(e+1))
        0.231059
    """
    event = _check_base(event)
    if isinstance(event, LaplaceEvent):
        value = -math.expm1(-0.5 / event.scale)
    else:
        eps0, k = float(event.epsilon0), float(event.num_buckets)
        value = (1.0 - 1.0 / k) * -math.expm1(-eps0) / (1.0 + (k - 1.0) * math.exp(-eps0))
    return min(value * (1 + 1e-12) + 1e-300, 1.0)


def _summand_law(event: Event) -> _SummandLaw:
    """The summand law of one step of ``event`` (module docstring, "Reduction"); raises
    :class:`NumericalError` where the largest loss exceeds what the grid represents."""
    event = _check_base(event)
    if isinstance(event, LaplaceEvent):
        eps = 1.0 / event.scale
        if not eps <= _MAX_GRID_LOSS:
            raise NumericalError(f"Laplace scale {event.scale:g} gives a loss of {eps:g}, too "
                                 "large for the summand grid", "use more noise")
        lo, hi = math.exp(-eps), math.exp(eps)
        chi2 = max((2.0 / 3.0) * math.expm1(eps) + math.expm1(-2.0 * eps) / 3.0, eps * eps / 2)
        return _SummandLaw(np.array([lo, hi]), np.array([0.5, 0.5 * math.exp(-eps)]),
                          0.25 * math.exp(-eps / 2), lo, hi, eps, (eps + 4) * _U, chi2)
    eps0, k = event.epsilon0, event.num_buckets
    if not eps0 <= _MAX_GRID_LOSS:
        raise NumericalError(f"randomized response with epsilon0={eps0:g} is too close to "
                             "no privacy for the summand grid", "use a smaller epsilon0")
    p, q = zero_out_rr_pair(eps0, k)
    atoms = np.array([k * p[1] / (k - 1), k * p[0]])  # k other, k top (ascending)
    mass = np.array([q[1], q[0]])
    chi2 = max(float(np.sum(mass * atoms * atoms)) - 1.0, 1e-300)
    max_loss = max(abs(math.log(atoms[0])), abs(math.log(atoms[1])))
    return _SummandLaw(atoms, mass, 0.0, float(atoms[0]), float(atoms[1]), max_loss,
                      (eps0 + 4) * _U, chi2)


def _sd(law: _SummandLaw) -> float:
    """``sd(Y)``, taken at least half the largest loss (about the loss for small losses, where
    ``chi^2`` can underflow)."""
    return max(math.sqrt(law.chi2), law.max_loss / 2)


def _span(law: _SummandLaw, t: int, h: float) -> float:
    """A rough size of the FFT window of the sum of ``t`` summands on step ``h`` (the whole
    range, or 40 standard deviations of the sum either side plus ten largest summands: the
    heavy tail of a large loss), used only to size grids."""
    return min(t * (law.hi / h + 3.0), (80.0 * math.sqrt(t) * _sd(law) + 10.0 * law.hi) / h)


def _default_step(law: _SummandLaw, t: int, accuracy: float = 1.0) -> float:
    """Grid step: a twentieth of ``sd(Y)``, at most ``t E[Y] / 4000`` (the Gaussian module's
    rule, :func:`~dpplugins.amplification.allocation.default_summand_step`; ``E[Y] = 1``),
    times ``accuracy``; but coarse enough that the sum's FFT window (:func:`_span`) stays
    within ``_SPAN_BUDGET`` points (a large loss per step with few steps per epoch: Laplace
    scale 0.1, t = 104 took 16 s per grid; the window scales like ``1 / h``)."""
    h = accuracy * min(_sd(law) / 20.0, t / 4000.0)
    span = _span(law, t, h)
    return h * max(1.0, span / _SPAN_BUDGET) if math.isfinite(span) else h


def default_mechanism_summand_step(event: Event, steps_per_epoch: int,
                                   accuracy: float = 1.0) -> float | None:
    """The default summand grid step of :func:`mechanism_allocation_pairs` times ``accuracy``
    (``< 1`` refines); ``None`` where no summand grid is built (a loss beyond it)."""
    t = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    accuracy = check_positive("accuracy", accuracy)
    try:
        return _default_step(_summand_law(event), t, accuracy)
    except NumericalError:
        return None


class _Grid(NamedTuple):
    """Points ``(k0 + j) h``, ``j = 0 .. n`` (``k0 >= 0`` real), and the cells between them."""

    h: float
    k0: float
    n: int
    edges: np.ndarray

    def cell_of(self, y: float) -> int:
        """The cell that holds ``y`` (clipped to the grid)."""
        return min(max(math.floor((y - self.edges[0]) / self.h), 0), self.n - 1)


def _grid_size(law: _SummandLaw, h: float) -> tuple[float, int]:
    """``(k0, n)`` of :func:`_grid`; :class:`NumericalError` where they are not finite (a
    step that underflows next to a loss of about 1e-300)."""
    k0 = law.lo * (1 - 4 * law.rho) / h
    span = law.hi * (1 + 2 * law.rho) / h - k0
    if not (math.isfinite(k0) and math.isfinite(span)):
        raise NumericalError(f"a summand grid of step {h:g} for losses up to {law.max_loss:g} "
                             "is not representable", "use less noise")
    return k0, math.ceil(span) + 2


def _grid_fits(law: _SummandLaw, t: int, h: float, memory_limit: int) -> bool:
    """Whether the summand grid, and (by the rough estimate :func:`_span`) its FFT, fit (used
    only to choose a loss step)."""
    try:
        k0, n = _grid_size(law, h)
    except NumericalError:
        return False
    return (n <= memory_limit // (8 * 12) and t * (k0 + n) <= _MAX_INDEX
            and _span(law, t, h) * 120 <= memory_limit)


def _grid(law: _SummandLaw, t: int, h: float, memory_limit: int) -> _Grid:
    """The grid starts just below the lowest atom's uncertainty interval ``lo (1 - 2 rho)`` (so
    the sum of ``t`` summands is at least ``t`` times it, as the exact one is: the add
    direction's loss stays bounded) and reaches two points beyond ``hi (1 + 2 rho)`` (an
    atom's weight across an edge)."""
    k0, n = _grid_size(law, h)
    if n > memory_limit // (8 * 12):
        raise NumericalError(f"the summand grid needs {n:,} cells (memory limit allows "
                             f"{memory_limit // 96:,})", "use a larger summand_step or raise "
                             "memory_limit")
    if t * (k0 + n) > _MAX_INDEX:
        raise NumericalError(f"{t} steps per epoch on a grid of {n:,} cells: the sum "
                             "indices are not exact in double", "use fewer steps per epoch")
    return _Grid(h, k0, n, (k0 + np.arange(n + 1, dtype=float)) * h)


def _density_cells(law: _SummandLaw, edges: np.ndarray):
    """Per cell, the density part's ``(Q-mass, P-mass, E[Y - e_k; cell], E[e_(k+1) - Y;
    cell])`` on ``[e_k, e_(k+1)]`` cut to ``(lo, hi)`` (module docstring, closed forms)."""
    n = len(edges) - 1
    zeros = np.zeros(n)
    if law.density == 0.0:
        return zeros, zeros, zeros, zeros
    u = np.maximum(edges[:-1], law.lo)
    v = np.minimum(edges[1:], law.hi)
    inside = v > u
    u, v = np.where(inside, u, 1.0), np.where(inside, v, 1.0)
    su, sv = np.sqrt(u), np.sqrt(v)
    d = (v - u) / (su + sv)
    c2 = 2.0 * law.density
    q_mass = np.where(inside, c2 * d / (su * sv), 0.0)
    p_mass = np.where(inside, c2 * d, 0.0)
    above_u = np.where(inside, c2 * d * d / sv, 0.0)   # E[Y - u; cell]
    below_v = np.where(inside, c2 * d * d / su, 0.0)   # E[v - Y; cell]
    lower_edge, upper_edge = edges[:-1], edges[1:]
    # weights relative to the cell's ends: (u - e_k) and (e_(k+1) - v) times the mass
    above = above_u + np.where(inside, (u - lower_edge) * q_mass, 0.0)
    below = below_v + np.where(inside, (upper_edge - v) * q_mass, 0.0)
    return q_mass, p_mass, above, below


def _cell_accuracy(law: _SummandLaw) -> float:
    """Relative accuracy of the computed cell masses (module docstring, "Numerics")."""
    return 32 * _U + 2 * law.rho + (law.max_loss / 2 + 2) * _U


def _upper_summand(law: _SummandLaw, grid: _Grid) -> np.ndarray:
    """Upper bounds on the spread weights of the grid's points (module docstring)."""
    edges = grid.edges
    width = edges[1:] - edges[:-1]
    r = _cell_accuracy(law)
    _, _, above, below = _density_cells(law, edges)
    n = len(width)
    points = np.zeros(n + 1)
    points[:-1] += below / width
    points[1:] += above / width
    points *= 1 + 2 * r + 8 * _U
    rho = law.rho
    if law.density > 0.0:
        # the uncertain slivers at the density's ends: at most 2 rho y * c y^(-3/2) (1 + 4 rho),
        # put on the four points around the end as extra mass
        for end in (law.lo, law.hi):
            sliver = 2 * rho * law.density * (end * (1 - 2 * rho)) ** -0.5 * (1 + 8 * rho)
            cell = min(max(grid.cell_of(end), 1), grid.n - 2)
            points[cell - 1:cell + 3] += sliver
    for y, q in zip(law.atoms, law.atom_mass):
        q = q * (1 + 2 * rho + 8 * _U)
        y_lo, y_hi = y * (1 - 2 * rho), y * (1 + 2 * rho)
        c = grid.cell_of(y)
        e_c, e_next, w = edges[c], edges[c + 1], width[c]
        points[c + 1] += q * max(y_hi - e_c, 0.0) / w * (1 + 8 * _U)
        points[c] += q * max(e_next - y_lo, 0.0) / w * (1 + 8 * _U)
        if y_hi > e_next:  # (c + 1 < n: the grid reaches two points beyond hi (1 + 2 rho))
            points[c + 2] += q * (y_hi - e_next) / width[c + 1] * (1 + 8 * _U)
        if y_lo < e_c:  # (c > 0: the grid starts below lo (1 - 2 rho))
            points[c - 1] += q * (e_c - y_lo) / width[c - 1] * (1 + 8 * _U)
    return points * (1 + 4 * _U)


def _lower_cells(law: _SummandLaw, grid: _Grid) -> tuple[np.ndarray, np.ndarray]:
    """Q- and P-masses of the cells of the dominated pair's post-processing: the cell of ``Y``,
    clipped to the cells of the computed ``lo`` and ``hi`` (module docstring, "Numerics")."""
    q_mass, p_mass, _, _ = _density_cells(law, grid.edges)
    q_mass, p_mass = q_mass.copy(), p_mass.copy()
    for y, q in zip(law.atoms, law.atom_mass):
        c = grid.cell_of(y)
        q_mass[c] += q
        p_mass[c] += y * q
    return q_mass, p_mass


def mechanism_allocation_pairs(event: Event, steps_per_epoch: int, *,
                               checkin_probability: float = 1.0,
                               summand_step: float | None = None, tail_mass: float = 1e-24,
                               memory_limit: int = 1 << 30, lower: bool = True):
    """The (dominating, dominated) discrete pairs of one epoch of random allocation with the
    base mechanism ``event`` (:class:`~dpplugins.amplification.allocation.AllocationPair`; the
    dominated one ``None`` for ``lower=False``).  Raises :class:`NumericalError` where the grid
    does not fit (module docstring)."""
    t = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    checkin = check_probability("checkin_probability", checkin_probability)
    tail_mass = check_open_unit("tail_mass", tail_mass)
    law = _summand_law(event)
    h = (_default_step(law, t) if summand_step is None
         else check_positive("summand_step", summand_step))
    grid = _grid(law, t, h, memory_limit)
    what = f"random allocation of {type(event).__name__} with {t} steps per epoch"
    ratio_rel = 8 * _U + law.rho
    upper = upper_pair_of_summands(_upper_summand(law, grid), t, h, grid.k0, 1.0 / t,
                                   ratio_rel, (0.0, 0.0), tail_mass, memory_limit, what,
                                   checkin)
    dominated = None
    if lower:
        plain, special = _lower_cells(law, grid)
        dominated = lower_pair_of_summands(plain, special, _cell_accuracy(law), t, h, grid.k0,
                                           1.0 / t, ratio_rel, tail_mass, memory_limit, what,
                                           checkin)
    return upper, dominated


def _base_pairs(event: Event, checkin: float = 1.0) -> dict[str, MechanismPairs]:
    """One step of the base mechanism on a Poisson subsample at rate ``p = checkin`` (the plain
    step for 1), as one-sided pairs per direction.  For ``t = 1`` this is the epoch exactly (its
    pair ``((1 - p) Q0 + p P0, Q0)`` is the Poisson-subsampled one; Zhu, Dong & Wang 2022,
    arXiv:2106.08567, Thm 11); for ``t > 1`` it dominates the epoch (reveal the step that holds
    the example) and is dominated by the plain step, so the bounds of
    :func:`~dpplugins.amplification.allocation.base_mechanism_parts` hold with it (the lower one
    is only weaker)."""
    if isinstance(event, LaplaceEvent):
        pairs = (mechanisms.laplace(event.scale) if checkin == 1.0
                 else mechanisms.poisson_subsampled_laplace(event.scale, checkin))
    else:  # (beyond epsilon0 = 700 it carries the dominated pairs for the lower bounds)
        pairs = zero_out_randomized_response(event.epsilon0, event.num_buckets, checkin)
    return {d: _one_direction(pairs, d) for d in ("remove", "add")}


def _one_direction(pairs: MechanismPairs, direction: str) -> MechanismPairs:
    """``direction`` of ``pairs`` as a pair of its own (with its dominated pair, if any)."""
    dominated = (None if pairs.dominated is None
                 else _one_direction(pairs.dominated, direction))
    return MechanismPairs({"remove": pairs.pairs["remove" if pairs.symmetric else direction]},
                          True, f"{pairs.description} ({direction})", dominated=dominated)


def _base_plds(event: Event, checkin: float, h_loss: float, tail_mass: float,
               memory_limit: int) -> dict:
    """The PLDs per direction of :func:`_base_pairs`; a clear :class:`NumericalError` where the
    step's own loss range does not fit the PLD grid (a loss of hundreds)."""
    try:
        return {d: PrivacyLossDistribution.from_mechanism(
            pair, value_discretization_interval=h_loss, tail_mass=tail_mass,
            memory_limit=memory_limit) for d, pair in _base_pairs(event, checkin).items()}
    except (ParameterError, NumericalError) as error:
        raise NumericalError(
            f"one step of {event} does not fit the PLD grid at loss step {h_loss:g} ({error})",
            "use more noise (a smaller loss per step)") from None


def mechanism_loss_step(event: Event, steps_per_epoch: int,
                        checkin_probability: float = 1.0, memory_limit: int = 1 << 30) -> float:
    """Default PLD loss step: a 200th of ``min(max loss, p sqrt(chi^2 / t))`` (the chi-square
    scale of :func:`~dpplugins.amplification.allocation.epoch_loss_scale`) within ``[1e-13,
    1e-3]``, and a 2000th within ``[1e-13, 1e-4]`` for randomized response (atoms only); 1e-2
    for a loss beyond the grid; the step of ``t = 1`` where the summand grid does not fit (the
    epoch is then accounted by one step of the base mechanism).  Finer than the Gaussian's
    40th: these epochs' losses are mostly or only atoms (sums of the summand law's atoms),
    which the PLD grid rounds to first order, where a continuous loss is rounded to second
    order.  Numerically checked: randomized response, t = 10, 3 epochs, the delta(1) gap is
    7.6 % at a 40th and 0.35 % at a 200th; eps0 = 0.5, k = 4, t = 3, 3 epochs: 4.5 % at a
    200th and 0.23 % at a 4000th, in 0.09 s."""
    t = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    p = check_probability("checkin_probability", checkin_probability)
    try:
        law = _summand_law(event)
    except NumericalError:
        return 1e-2
    if not _grid_fits(law, t, _default_step(law, t), memory_limit):
        t, p = 1, 1.0  # the epoch is accounted by one step of the base mechanism
    scale = min(law.max_loss, p * math.sqrt(law.chi2 / t))
    if law.density == 0.0:  # atoms only (randomized response): every loss is an atom
        step = max(min(scale / 2000.0, 1e-4), 1e-13)
    else:
        step = max(min(scale / 200.0, 1e-3), 1e-13)
    # no finer than one step of the base mechanism fits the memory limit (its losses span at
    # most twice the largest one, plus the grid's spare points): randomized response with
    # epsilon0 from about 420 to 550 asked for 1e-4 and was refused ("use more noise")
    return max(step, (2 * law.max_loss + 1) / component_bin_limit(memory_limit))


def _epoch(event: Event, t: int, h_loss: float, *, checkin: float, summand_step,
           tail_mass: float, memory_limit: int, lower: bool) -> AllocationPLD:
    description = f"random allocation of {event}, {t} steps/epoch, p={checkin:g}"

    def base():
        """One (subsampled) base step (the PLD engine's lower bounds are valid for every loss;
        beyond its grid, about 600, they are loose)."""
        plds, upper, lower_certs = base_mechanism_parts(
            _base_plds(event, checkin, h_loss, tail_mass, memory_limit), t, checkin)
        if t == 1:  # exactly the base mechanism on a Poisson subsample at rate p
            lower_certs = dict(upper)
        return plds, upper, lower_certs

    def build():
        if t == 1:
            return base()
        try:
            upper, dominated = mechanism_allocation_pairs(
                event, t, checkin_probability=checkin, summand_step=summand_step,
                memory_limit=memory_limit, lower=lower)
            if max(cert.extra() for cert in upper.slack.values()) > _MAX_GRID_SLACK:
                # a grid coarsened to the FFT budget until its additive error is of the order
                # of delta itself (Laplace scale 0.03, t = 2: 6.8, every delta bound 1 and
                # every epsilon query refused): one step of the base mechanism is better
                return base()
            return parts_of_pairs(upper, dominated, description, h_loss,
                                  tail_mass=tail_mass, memory_limit=memory_limit)
        except NumericalError:  # the grid does not fit: one step of the subsampled mechanism
            pass
        except ParameterError as error:  # the pairs' loss range does not fit the PLD grid
            if error.name != "value_discretization_interval":
                raise
        return base()
    log_p = math.log(checkin)
    return AllocationPLD(None, None, None, lazy=_Lazy(build), engine=True, has_lower=lower,
                         gaussian_mu2=None, log_t=math.log(t) - log_p, log_weight=log_p)


def _steps(value_discretization_interval: float | None, summand_step: float | None,
           default) -> float:
    """The PLD loss step (``default()`` where not given), after checking both grid steps."""
    if summand_step is not None:
        check_positive("summand_step", summand_step)
    if value_discretization_interval is None:
        return default()
    return check_positive("value_discretization_interval", value_discretization_interval)


def random_allocation_mechanism_pld(event: Event, steps_per_epoch: int, epochs: int = 1, *,
                                    checkin_probability: float = 1.0,
                                    value_discretization_interval: float | None = None,
                                    summand_step: float | None = None,
                                    tail_mass: float = 1e-15, memory_limit: int = 1 << 30,
                                    lower: bool = True) -> AllocationPLD:
    """Certified PLD of ``epochs`` epochs of random allocation whose steps run the base
    mechanism ``event`` (:class:`~dpplugins.events.LaplaceEvent` or
    :class:`~dpplugins.events.RandomizedResponseEvent`), add/remove neighbours, each example
    taking part in an epoch with probability ``checkin_probability`` (module docstring).

    Returns an :class:`~dpplugins.amplification.allocation.AllocationPLD`:
    ``delta_for_epsilon(eps)`` and ``epsilon_for_delta(delta)`` give certified
    :class:`~dpplugins.pld.Bounds`.  ``value_discretization_interval`` is the PLD's loss step
    (default :func:`mechanism_loss_step`), ``summand_step`` the summand grid's (default a
    twentieth of the summand's standard deviation); ``lower=False`` builds only what the upper
    bound needs."""
    _check_base(event)
    t = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    checkin = check_probability("checkin_probability", checkin_probability)
    epochs = check_count("epochs", epochs, minimum=1)
    h_loss = _steps(value_discretization_interval, summand_step,
                    lambda: mechanism_loss_step(event, t, checkin, memory_limit))
    one = _epoch(event, t, h_loss, checkin=checkin, summand_step=summand_step,
                 tail_mass=tail_mass, memory_limit=memory_limit, lower=lower)
    return one.self_compose(epochs)


# -- several participations ------------------------------------------------------------------
def _sum_observation_epoch(event: Event, t: int, k: int, h_loss: float, *, checkin: float,
                           summand_step: float | None, tail_mass: float,
                           memory_limit: int) -> AllocationPLD:
    """The dominated construction of one k-out-of-t epoch: the law of the summands' sum
    rounded down to the grid, ``k`` of them from the P-law
    (:mod:`~dpplugins.amplification.allocation_participations`, "Lower bound", whose argument
    -- a post-processing, with the likelihood-ratio band ``[0, (a (R + t h))^k]`` from
    Maclaurin's inequality -- holds for any positive summands).  Only its lower bounds mean
    anything, and only for the remove direction; where the summand grid does not fit, none
    (0 is a certified lower bound)."""
    description = f"{k}-out-of-{t} allocation lower pair of {event}"

    def build():
        try:
            law = _summand_law(event)
            h = _default_step(law, t) if summand_step is None else summand_step
            grid = _grid(law, t, h, memory_limit)
            plain, special = _lower_cells(law, grid)
            pair = lower_pair_of_summands(
                plain, special, _cell_accuracy(law), t, h, grid.k0, 1.0 / t, 8 * _U + law.rho,
                1e-24, memory_limit, f"{description}", checkin, k)
        except NumericalError:
            return no_lower_parts(h_loss, tail_mass=tail_mass, memory_limit=memory_limit)
        return dominated_parts(pair, description, h_loss, tail_mass=tail_mass,
                               memory_limit=memory_limit)
    return AllocationPLD(None, None, None, lazy=_Lazy(build), engine=True, has_lower=True,
                         gaussian_mu2=None, has_upper=False)


def mechanism_k_loss_step(event: Event, steps_per_epoch: int, participations: int,
                          memory_limit: int = 1 << 30) -> float:
    """Default PLD loss step of k-out-of-t allocation: the finest of the blocks' default steps
    (:func:`mechanism_loss_step`)."""
    return min(mechanism_loss_step(event, size, 1.0, memory_limit)
               for size, _ in participation_blocks(steps_per_epoch, participations))


def k_out_of_t_mechanism_pld(event: Event, steps_per_epoch: int, participations: int,
                             epochs: int = 1, *, checkin_probability: float = 1.0,
                             value_discretization_interval: float | None = None,
                             summand_step: float | None = None, tail_mass: float = 1e-15,
                             memory_limit: int = 1 << 30, lower: bool = True) -> BracketedPLD:
    """Certified bounds for ``epochs`` epochs of k-out-of-t random allocation (every example in
    ``participations = k`` distinct uniformly random steps of each epoch, all of them with
    probability ``checkin_probability``, none otherwise) whose steps run ``event`` (Laplace or
    randomized response); add/remove neighbours.

    The constructions are those of :mod:`dpplugins.amplification.allocation_participations`,
    whose arguments do not use the Gaussian (our derivation): the upper bound composes the
    allocations into the blocks of a random partition (:func:`participation_blocks`; the
    concurrent composition theorem of Vadhan & Zhang, STOC 2023, arXiv:2207.08335, for f-DP
    interactive mechanisms), each by :func:`random_allocation_mechanism_pld`; with ``p < 1``
    the ``p = 1`` epoch's profile goes through the mixture identities
    (:func:`~dpplugins.amplification.allocation_participations.checkin_profile_epoch`); the
    lower bound is the sum observation with ``k`` summands from the P-law, remove direction
    only.  ``k = 1`` is :func:`random_allocation_mechanism_pld`; ``k = t`` (and ``p = 1``) is
    ``t`` steps of the base mechanism, exact.

    Example::

        >>> from dpplugins.events import LaplaceEvent
        >>> pld = k_out_of_t_mechanism_pld(LaplaceEvent(2.0), 100, 4, epochs=5)
        >>> lower, upper = pld.epsilon_for_delta(1e-5)
    """
    _check_base(event)
    blocks = participation_blocks(steps_per_epoch, participations)
    t, k = int(steps_per_epoch), int(participations)
    epochs = check_count("epochs", epochs, minimum=1)
    p = check_probability("checkin_probability", checkin_probability)
    h_loss = _steps(value_discretization_interval, summand_step,
                    lambda: mechanism_k_loss_step(event, t, k, memory_limit))
    options = dict(value_discretization_interval=h_loss, tail_mass=tail_mass,
                   memory_limit=memory_limit)
    if k == 1:
        return BracketedPLD.same(random_allocation_mechanism_pld(
            event, t, epochs, checkin_probability=p, summand_step=summand_step, lower=lower,
            **options))
    if k == t and p == 1.0:  # blocks of one step: t steps of the base mechanism, exact
        one = random_allocation_mechanism_pld(event, 1, 1, lower=lower, **options)
        return BracketedPLD.same(one.self_compose(k * epochs))

    def full_upper() -> AllocationPLD:
        total = None
        for size, count in blocks:
            part = random_allocation_mechanism_pld(event, size, 1, lower=False,
                                                   **options).self_compose(count)
            total = part if total is None else total.compose(part)
        return total
    if p < 1.0:
        upper = checkin_profile_epoch(
            full_upper, p, h_loss, f"{k}-out-of-{t} allocation of {event}, p={p:g}",
            tail_mass=tail_mass, memory_limit=memory_limit, gaussian_mu2=None,
            profile_key=("mechanism", event, t, k, float(tail_mass), int(memory_limit)))
    else:
        upper = full_upper()
    dominated = (_sum_observation_epoch(event, t, k, h_loss, checkin=p,
                                        summand_step=summand_step, tail_mass=tail_mass,
                                        memory_limit=memory_limit) if lower else None)
    return BracketedPLD(upper, dominated).self_compose(epochs)
