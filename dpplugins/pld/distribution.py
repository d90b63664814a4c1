"""The privacy loss distribution: construction, composition, and certified (eps, delta) bounds.

A :class:`PrivacyLossDistribution` keeps, for each direction of the neighbouring relation
(``"remove"``, ``"add"``; Koskela et al. 2021 Sec. 2 take the maximum over both, as dp_accounting
does), a list of grid PLDs with counts.  Each component has a *pessimistic* grid PLD (a dominating
pair, connect-the-dots) and, where the mechanism is known exactly, an *optimistic* one (a pair
dominated by the mechanism); see :mod:`dpplugins.pld.grid`.  Composition is lazy: ``compose`` and
``self_compose`` only concatenate lists and multiply counts; the FFT runs once, when a bound is
asked for (:mod:`dpplugins.pld.compose`), and its result is cached.

Example::

    >>> from dpplugins.pld import PrivacyLossDistribution
    >>> step = PrivacyLossDistribution.from_poisson_subsampled_gaussian(1.0, 0.01)
    >>> bounds = step.self_compose(1000).epsilon_for_delta(1e-5)
    >>> bounds.lower <= bounds.upper
    True
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import Callable, Mapping, NamedTuple, Sequence

import numpy as np

from dpplugins import mechanisms
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_nonnegative,
                              check_open_unit, check_positive, larger_delta_advice)
from dpplugins.mechanisms.distributions import Laplace
from dpplugins.mechanisms.pairs import MAX_ABS_LOSS, grid_range
from dpplugins.mechanisms.types import MechanismPairs
from dpplugins.pld.compose import (BYTES_PER_WINDOW_BIN, LAMBDA_GRID, ComposedPLD, _CumulantSum,
                                   compose_grid_pmfs, grid_minimum, lambda_index, window_bins)
from dpplugins.pld.grid import (GridPMF, optimistic_from_bins, pessimistic_from_bins,
                                pessimistic_from_profile)

__all__ = ["Bounds", "bounds_cross", "certified_bounds", "PrivacyLossDistribution", "DIRECTIONS",
           "AccuracyWarning",
           "within_window_budget", "FIRST_WINDOW_BINS"]

DIRECTIONS = ("remove", "add")
#: probability left outside the loss range of a single mechanism (goes to delta(inf) or is
#: handled conservatively; affects accuracy only)
SINGLE_TAIL = 1e-24
#: noise multipliers for which the Gaussian grid constructions are computed directly; outside,
#: :meth:`PrivacyLossDistribution.from_poisson_subsampled_gaussian` brackets by dominance
NOISE_RANGE = (1e-100, 1e100)
#: largest share of delta we let the floating-point and truncation terms take before recomputing
#: in extended precision, then tilted towards the query (:func:`compose_grid_pmfs`)
FP_SHARE = 1e-3
_U = np.finfo(float).eps / 2


#: the largest FFT window of an accountant's first grid (:func:`within_window_budget`): about
#: 1-2 s per composition in double, 3-4 s in extended precision, on a loaded 2-core machine
FIRST_WINDOW_BINS = 2 ** 21


def _lower_levels_done(upper: float, lower: float, ideal: float, lower_rtol: float) -> bool:
    """Whether the lower bound's accuracy levels can stop (only when ``lower_rtol > 0``): the
    bound is within ``lower_rtol`` of ``upper`` (relative), or even its error-free value on this
    grid (``ideal``: the window sum alone) is not, while the error terms a costlier level could
    remove (``ideal - lower``) are at most half the gap -- then the grid, not the floating
    point, sets the gap, and only a finer grid narrows it.  Every level is certified, so
    stopping never changes validity."""
    if not lower_rtol > 0:
        return False
    if upper - lower <= lower_rtol * upper:
        return True
    return upper - ideal > lower_rtol * upper and ideal - lower <= 0.5 * (upper - lower)


def grid_noise_multiplier(noise_multiplier: float) -> float:
    """The noise multiplier whose grid the engine builds for ``noise_multiplier``: itself inside
    :data:`NOISE_RANGE`, the nearer end of the range outside it (where
    :meth:`PrivacyLossDistribution.from_poisson_subsampled_gaussian` brackets by dominance).
    Sizing a grid from the noise multiplier itself would fail there: ``sigma = 1e308`` gives a
    loss range of ``0 * inf``.

    Example::

        >>> grid_noise_multiplier(1e300), grid_noise_multiplier(2.0)
        (1e+100, 2.0)
    """
    return min(max(noise_multiplier, NOISE_RANGE[0]), NOISE_RANGE[1])


#: the memory cap of :func:`within_window_budget` is divided by this when a PLD has lower
#: bounds: their composition's window is not estimated before it is needed
#: (:meth:`PrivacyLossDistribution.composed_window_bins`) and can be larger than the upper
#: bound's (1.24 times measured), while the composition refuses a window above the limit
LOWER_WINDOW_MARGIN = 2


def within_window_budget(build: Callable[[float], "PrivacyLossDistribution"], h: float,
                         max_bins: int = FIRST_WINDOW_BINS,
                         snap: Callable[[float], float] = lambda h: h, lower: bool = True,
                         ) -> tuple[float, "PrivacyLossDistribution"]:
    """``(h, build(h))`` for the given grid step, or a coarser one, whose composed FFT window
    (:meth:`PrivacyLossDistribution.composed_window_bins`) has at most ``max_bins`` bins: the
    time of a query grows with its window, and a history with a huge privacy loss (10^6 steps
    at little noise) would otherwise compose tens of millions of bins on the first grid.  The
    window's edges are Chernoff bounds in loss units, so its bins scale like ``1 / h``: the
    step is raised by the excess (``snap`` rounds it, e.g. up to the accountant's ladder), at
    most three times.  Any grid step gives certified bounds; a coarser one is only looser.

    The budget is also at most what a PLD's ``memory_limit`` allows a window
    (``memory_limit // BYTES_PER_WINDOW_BIN``, the limit at which the composition refuses; over
    :data:`LOWER_WINDOW_MARGIN` when the lower bounds are composed too, which ``lower=False``
    says they are not), so a small ``memory_limit`` gives a coarser first grid instead of a
    NumericalError about a grid step the caller never chose (``build`` may return any object
    with ``composed_window_bins``; one without ``memory_limit`` keeps ``max_bins``)."""
    pld = build(h)
    memory_limit = getattr(pld, "memory_limit", None)
    if memory_limit is not None:
        margin = LOWER_WINDOW_MARGIN if lower and getattr(pld, "has_lower_bound", False) else 1
        max_bins = min(max_bins, max(int(memory_limit) // (BYTES_PER_WINDOW_BIN * margin), 1))
    for _ in range(3):
        bins = pld.composed_window_bins()
        if bins <= max_bins:
            break
        coarser = snap(h * 1.05 * bins / max_bins)
        if not coarser > h:
            break
        h = coarser
        pld = build(h)
    return h, pld


class AccuracyWarning(UserWarning):
    """Certified bounds are returned, but their gap is wider than the requested accuracy (for
    example because floating-point or truncation terms, not the grid, limit it)."""


class Bounds(NamedTuple):
    """A certified interval: the true value lies in ``[lower, upper]``."""

    lower: float
    upper: float


def bounds_cross(lower: float, upper: float) -> bool:
    """Whether a certified lower bound is above a certified upper bound by more than rounding
    (relative 1e-6): then one of them is not certified, and the caller must not hide it by
    clipping (``Bounds(min(lower, upper), upper)``).

    Example::

        >>> bounds_cross(1.0 + 1e-9, 1.0), bounds_cross(1.1, 1.0)
        (False, True)
    """
    return lower > upper * (1 + 1e-6) + 1e-300


def certified_bounds(lower: float, upper: float, what: str) -> Bounds:
    """``Bounds(lower, upper)`` of a certified lower and a certified upper bound on one value
    (``what``, e.g. ``"epsilon at delta=1e-05"``): ``lower`` is capped at ``upper`` where the two
    differ by rounding, and a crossing beyond rounding (:func:`bounds_cross`) raises
    :class:`~dpplugins.errors.NumericalError` -- one of the two is then not valid, and clipping
    would report ``lower == upper`` for a value that may be neither (a random-allocation grid
    that lost mass reported 1.39e-4 for both where the truth is 1.71e-4).  Every place that
    pairs two bounds goes through here, so no crossing is hidden.

    Example::

        >>> certified_bounds(1.0 + 1e-9, 1.0, "epsilon")
        Bounds(lower=1.0, upper=1.0)
    """
    if bounds_cross(lower, upper):
        raise NumericalError(
            f"the certified lower bound on {what} ({lower!r}) is above the certified upper bound "
            f"({upper!r}), so one of them is not valid here (a defect: please report it with "
            f"this message)", "ask at another delta or epsilon, or use another accountant")
    return Bounds(min(lower, upper), upper)


class _Component:
    """One mechanism's two grid PMFs: ``upper`` (dominating, for upper bounds) and ``lower``
    (dominated, for lower bounds; ``None`` when only an upper bound on the mechanism is known).

    ``lower`` may be given as a function that builds it, called at the first access: a query
    composes the lower bound of one direction only (the one that decides the upper bound), so
    the other direction's tangent construction is never built.  The bins it needs (P- and
    Q-masses, shared by both directions of a mirrored pair) are kept until then: 1000 distinct
    Poisson-subsampled Gaussian steps hold about 40 % more memory than with both PMFs built."""

    __slots__ = ("upper", "_lower", "_build_lower")

    def __init__(self, upper: GridPMF, lower: "GridPMF | Callable[[], GridPMF] | None") -> None:
        self.upper = upper
        if callable(lower):
            self._lower, self._build_lower = None, lower
        else:
            self._lower, self._build_lower = lower, None

    @property
    def has_lower(self) -> bool:
        """Whether a lower-bound PMF exists (built or not yet built)."""
        return self._lower is not None or self._build_lower is not None

    @property
    def lower(self) -> GridPMF | None:
        if self._lower is None and self._build_lower is not None:
            # a deterministic construction: two threads building it at once get equal values
            self._lower = self._build_lower()
            self._build_lower = None
        return self._lower

    def lower_source(self) -> "GridPMF | Callable[[], GridPMF] | None":
        """``lower`` as given (the PMF, or the function not called yet): to pair it with
        another upper PMF without building it."""
        return self._lower if self._build_lower is None else self._build_lower


#: bytes one grid bin of one component costs while it is constructed (bins, both constructions,
#: long-double suffix sums): the grid-size check divides ``memory_limit`` by it
BYTES_PER_COMPONENT_BIN = 256
#: largest composition count: counts are used as floats (powers, cumulant sums), exact up to 2^53
MAX_COUNT = 2 ** 53


#: bytes one grid bin of one component costs while a PLD holds it, and the bytes of one
#: component's objects besides its arrays (the pair, its distributions, the PMFs' headers).
#: Measured with tracemalloc after queries: a Poisson-subsampled Gaussian step holds 40 bytes a
#: bin with one direction's lower PMF built and 48 with both (the upper and lower PMFs of both
#: directions, 8 bytes each, and the P- and Q-interval masses, 16, kept until the last lower
#: PMF is built), and about 5.7 KB of objects; a Laplace step 16, a subsampled Laplace step 33
HELD_BYTES_PER_COMPONENT_BIN, HELD_BYTES_PER_COMPONENT = 48, 8192


def held_component_bytes(total_span: float, count: int, h: float) -> float:
    """Bytes that ``count`` distinct components hold on grid step ``h`` when their loss ranges
    (each as :func:`component_bins` sizes it: the widest direction) add up to ``total_span``:
    ``span / h + 4`` bins each at :data:`HELD_BYTES_PER_COMPONENT_BIN`, plus
    :data:`HELD_BYTES_PER_COMPONENT` each.  The sum over the components, not the largest: a
    history of 10,000 distinct steps holds 10,000 of them at once (``inf`` when ``h`` is too
    small to count them)."""
    with np.errstate(over="ignore"):
        bins = float(np.float64(total_span) / np.float64(h)) + 4.0 * count
    return bins * HELD_BYTES_PER_COMPONENT_BIN + count * HELD_BYTES_PER_COMPONENT


def finest_held_step(total_span: float, count: int, budget: float) -> float:
    """The smallest grid step at which the components of :func:`held_component_bytes` hold at
    most ``budget`` bytes (0 when they have no loss range; ``inf`` when even their fixed part,
    the objects and four bins each, is above the budget)."""
    room = budget - count * (HELD_BYTES_PER_COMPONENT + 4.0 * HELD_BYTES_PER_COMPONENT_BIN)
    if not room > 0:
        return math.inf
    return total_span * HELD_BYTES_PER_COMPONENT_BIN / room


def component_bin_limit(memory_limit: int) -> int:
    """Grid bins one component may have under ``memory_limit`` bytes
    (``BYTES_PER_COMPONENT_BIN`` a bin, at least 16)."""
    return max(int(memory_limit) // BYTES_PER_COMPONENT_BIN, 16)


#: the largest ``loss_range_tail`` a construction accepts (beyond it the grid would leave out
#: a visible part of the mechanism; the bounds would stay certified but loose)
MAX_LOSS_RANGE_TAIL = 1e-6


def check_loss_range_tail(value) -> float:
    """``value`` as a float in ``(0, MAX_LOSS_RANGE_TAIL]``, or a ParameterError naming
    ``loss_range_tail``."""
    tail = check_positive("loss_range_tail", value)
    if not tail <= MAX_LOSS_RANGE_TAIL:
        raise ParameterError("loss_range_tail", value, f"in (0, {MAX_LOSS_RANGE_TAIL:g}]")
    return tail


def component_bins(pairs: MechanismPairs, h: float, loss_range_tail: float = SINGLE_TAIL
                   ) -> float:
    """Number of grid bins the constructions of ``pairs`` need at grid step ``h`` (largest over
    the directions; a float, ``inf`` when ``h`` is too small to count them), with the loss
    range leaving out ``loss_range_tail`` of each tail (:data:`SINGLE_TAIL` by default)."""
    largest = 0.0
    for pair in pairs.pairs.values():
        low, high = pair.loss_range(loss_range_tail)
        low, high = max(min(low, 0.0), -MAX_ABS_LOSS), min(max(high, 0.0), MAX_ABS_LOSS)
        with np.errstate(over="ignore"):
            largest = max(largest, float(np.float64(high - low) / np.float64(h)) + 4.0)
    return largest


def check_grid_size(pairs: MechanismPairs, h: float, memory_limit: int,
                    loss_range_tail: float = SINGLE_TAIL) -> None:
    """ParameterError naming ``value_discretization_interval`` when one component on grid step
    ``h`` would need more than ``memory_limit`` bytes (``BYTES_PER_COMPONENT_BIN`` per bin)."""
    bins = component_bins(pairs, h, loss_range_tail)
    limit = component_bin_limit(memory_limit)
    if not bins <= limit:
        span = component_bins(pairs, 1.0, loss_range_tail) - 4.0
        raise ParameterError(
            "value_discretization_interval", h,
            f">= {span / limit:.3g} for {pairs.description or 'this mechanism'} (its loss range "
            f"of width {span:.4g} needs {bins:.4g} grid bins at this step; memory_limit="
            f"{int(memory_limit)} bytes allows {limit:,})")


def laplace_top_atom(pair) -> tuple[Fraction, float] | None:
    """``(loss, Q-mass)`` of the atom at the largest privacy loss of a Laplace pair, or None.

    For ``P = Lap(m_P, b)``, ``Q = Lap(m_Q, b)`` with ``m_P > m_Q`` the loss ``log(dP/dQ) = (|x -
    m_Q| - |x - m_P|) / b`` is the constant ``(m_P - m_Q) / b`` on ``x >= m_P`` and smaller
    elsewhere (Dwork & Roth 2014, Thm 3.6; Koskela et al. 2021, Sec. 6), so ``L = (m_P - m_Q) /
    b`` with Q-probability ``e^(-(m_P - m_Q) / b) / 2``.  The loss is returned as an exact
    rational (of the stored floats), the mass rounded down by a relative ``(2 |loss| + 8) u``.
    Read from the pair's two distributions, not from its loss function (our derivation from the
    densities)."""
    P, Q = getattr(pair, "P", None), getattr(pair, "Q", None)
    if not (isinstance(P, Laplace) and isinstance(Q, Laplace)) or P.scale != Q.scale:
        return None
    if not (P.mean > Q.mean and P.scale > 0 and math.isfinite(P.mean - Q.mean)):
        return None
    loss = (Fraction(P.mean) - Fraction(Q.mean)) / Fraction(P.scale)
    # float(loss) is within u |loss| of the rational, exp adds a few u: rounded down by both
    q_mass = 0.5 * math.exp(-float(loss)) * (1 - (2 * abs(float(loss)) + 8) * _U)
    return (loss, q_mass) if q_mass > 0 else None


def atom_grid_step(loss: float, h: float) -> float:
    """The largest float step ``h' <= h`` with ``j h'`` (as computed) at most ``loss`` and within
    a few ulps of it for ``j = ceil(loss / h)``: an atom of the loss at ``loss`` (the top of a
    Laplace mechanism's loss, :func:`laplace_top_atom`) then sits on the top grid point, where
    both constructions are exact for it (:func:`~dpplugins.pld.grid.optimistic_from_bins`,
    ``top_q``).  ``h`` unchanged when ``loss / h`` is above 10^6."""
    exact = Fraction(loss)
    j = max(1, math.ceil(float(exact) / h - 1e-9))
    if j > 10 ** 6:
        return h
    step = float(exact / j)
    for _ in range(64):
        if Fraction(j * step) <= exact:
            return step
        step = math.nextafter(step, 0.0)
    return h


def _top_q(pair, h: float, hi: int) -> float:
    """Certified lower bound on ``Q(L >= eps_hi)`` from a known top atom (0 if none applies):
    the atom counts when its exact loss is at or above the stored grid point ``hi * h``."""
    atom = laplace_top_atom(pair)
    if atom is None:
        return 0.0
    loss, q_mass = atom
    return q_mass if Fraction(float(hi) * h) <= loss else 0.0


def _lower_top(pair, h: float, lo: int, hi: int) -> int:
    """Top grid index for the tangent construction: the largest ``j <= hi`` whose stored grid
    point ``j * h`` is at most the exact loss of a known top atom and within ``1e-9 h`` of it
    (``hi`` when there is none).  The connect-the-dots bins keep ``hi`` (their top bin must hold
    the atom, which the mechanism places with its own rounded loss); the tangent construction
    needs the atom at or above its top point to credit it (:func:`_top_q`).  Both grids have
    the same step, so the compositions are unchanged otherwise."""
    atom = laplace_top_atom(pair)
    if atom is None:
        return hi
    loss = atom[0]
    j = min(hi, math.floor(loss / Fraction(h)))
    while j > lo and Fraction(float(j) * h) > loss:
        j -= 1
    if j >= lo + 2 and loss - Fraction(float(j) * h) <= Fraction(1e-9) * Fraction(h):
        return j
    return hi


def _tangent_construction(pair, bins, h: float, lo: int, hi: int) -> GridPMF:
    """The lower-bound PMF of one direction (:func:`optimistic_from_bins` on the bins up to
    :func:`_lower_top`), built when a query first needs it."""
    top = _lower_top(pair, h, lo, hi)
    lower_bins = bins if top == hi else pair.loss_bins(h, lo, top)
    return optimistic_from_bins(lower_bins, top_q=_top_q(pair, h, top))


def _discretise(pairs: MechanismPairs, h: float, memory_limit: int = 1 << 30,
                loss_range_tail: float = SINGLE_TAIL) -> dict[str, _Component]:
    check_grid_size(pairs, h, memory_limit, loss_range_tail)
    out = {}
    ranges = {direction: grid_range(*pair.loss_range(loss_range_tail), h)
              for direction, pair in pairs.pairs.items()}
    shared = None
    if pairs.mirrored:
        # one set of interval masses for both directions: the remove bins on a grid covering
        # the remove range and the mirror of the add range (LossBins.mirrored)
        (lo_r, hi_r), (lo_a, hi_a) = ranges["remove"], ranges["add"]
        shared = pairs.pairs["remove"].loss_bins(h, min(lo_r, -hi_a), max(hi_r, -lo_a))
    for direction, pair in pairs.pairs.items():
        lo, hi = ranges[direction]
        if shared is None:
            bins = pair.loss_bins(h, lo, hi)
        elif direction == "remove":
            bins = shared.restricted(lo, hi)
        else:
            bins = shared.restricted(-hi, -lo).mirrored()
        out[direction] = _Component(pessimistic_from_bins(bins),
                                    functools.partial(_tangent_construction, pair, bins, h, lo, hi))
    if pairs.symmetric:
        out["add"] = out["remove"]
    if pairs.dominated is not None:
        # lower bounds from the pairs the mechanism dominates (MechanismPairs.dominated)
        lower = _discretise(pairs.dominated, h, memory_limit, loss_range_tail)
        both = {d: _Component(out[d].upper, lower[d].lower_source()) for d in DIRECTIONS}
        if out["add"] is out["remove"] and lower["add"] is lower["remove"]:
            both["add"] = both["remove"]
        out = both
    return out


class PrivacyLossDistribution:
    """Privacy loss distribution of a (composed) mechanism, both directions, both bounds.

    Build one with a ``from_*`` constructor, combine with :meth:`compose` / :meth:`self_compose`,
    query with :meth:`delta_for_epsilon` / :meth:`epsilon_for_delta` (each returns
    :class:`Bounds`).  All components of a composition must share ``value_discretization_interval``.

    Parameters common to the constructors:

    value_discretization_interval
        Grid step ``h`` of the privacy loss.  The bounds are valid for every ``h``; their gap
        shrinks roughly like ``h^2`` (connect-the-dots is exact at grid points).
    tail_mass
        Certified mass allowed outside the FFT window (added to delta in the upper bound).
    memory_limit
        Bytes the FFT window may use; a :class:`NumericalError` says what to change if exceeded.
    """

    def __init__(self, directions: Mapping[str, Sequence[tuple[_Component, int]]], h: float, *,
                 description: str = "", tail_mass: float = 1e-15,
                 memory_limit: int = 1 << 30) -> None:
        self._directions = {d: tuple(directions[d]) for d in DIRECTIONS}
        self.value_discretization_interval = h
        self.description = description
        self.tail_mass = tail_mass
        self.memory_limit = memory_limit
        self._cache: dict[tuple, ComposedPLD] = {}
        #: compositions refused (by memory or range; :meth:`_composed`), by the same keys: the
        #: refusal's ``(what, fix)`` is raised again without rebuilding the tilted components
        #: (the messages only: the error's traceback would keep the refused work's arrays alive)
        self._refused: dict[tuple, tuple[str, str]] = {}
        #: Chernoff bounds computed so far, by (direction, epsilon) (:meth:`_chernoff_delta`)
        self._chernoff: dict[tuple[str, float], float] = {}
        #: after a query: the part of ``upper - lower`` due to error terms that a finer grid
        #: does not shrink (floating point, truncation), in the query's units
        self.last_floor: float = 0.0

    # -- constructors -----------------------------------------------------------------------
    @classmethod
    def from_mechanism(cls, pairs: MechanismPairs, *, value_discretization_interval: float = 1e-4,
                       tail_mass: float = 1e-15, memory_limit: int = 1 << 30,
                       loss_range_tail: float = SINGLE_TAIL) -> "PrivacyLossDistribution":
        """PLD of one mechanism given as worst-case pairs (:mod:`dpplugins.mechanisms`).

        ``loss_range_tail``: the probability of each tail of the mechanism's outputs that its
        grid leaves out (:data:`SINGLE_TAIL`, 1e-24, by default).  Any value gives certified
        bounds: the connect-the-dots construction moves the mass above the grid to loss
        ``+inf`` (about ``loss_range_tail`` per step, added to every delta of the upper bound)
        and the tangent construction leaves it out.  A larger value gives a shorter grid, so
        a faster construction, where the deltas of interest are far above ``steps *
        loss_range_tail``."""
        h = check_positive("value_discretization_interval", value_discretization_interval)
        comps = _discretise(pairs, h, memory_limit, check_loss_range_tail(loss_range_tail))
        return cls({d: ((comps[d], 1),) for d in DIRECTIONS}, h, description=pairs.description,
                   tail_mass=tail_mass, memory_limit=memory_limit)

    @classmethod
    def from_bracketing_pairs(cls, dominating: MechanismPairs, dominated: MechanismPairs, *,
                              value_discretization_interval: float = 1e-4,
                              tail_mass: float = 1e-15, memory_limit: int = 1 << 30,
                              description: str = "") -> "PrivacyLossDistribution":
        """PLD of a mechanism known through two approximations: a pair that *dominates* it (used
        for upper bounds, with connect-the-dots) and a pair it *dominates* (a post-processing of
        it, used for lower bounds, with the tangent construction).

        Dominance must hold for every hockey-stick divergence and be preserved under composition,
        which is the case when one pair is a post-processing of the other (Blackwell; Zhu, Dong,
        Wang 2022, Def. 7 and Thm 10).  Both arguments need the same directions.
        """
        h = check_positive("value_discretization_interval", value_discretization_interval)
        upper = _discretise(dominating, h, memory_limit)
        lower = _discretise(dominated, h, memory_limit)
        comps = {d: _Component(upper[d].upper, lower[d].lower_source()) for d in DIRECTIONS}
        if upper["add"] is upper["remove"] and lower["add"] is lower["remove"]:
            # both pairs symmetric: one component object, so that queries evaluate one
            # direction (:meth:`_directions_to_evaluate`), not the same composition twice
            comps["add"] = comps["remove"]
        return cls({d: ((comps[d], 1),) for d in DIRECTIONS}, h,
                   description=description or dominating.description,
                   tail_mass=tail_mass, memory_limit=memory_limit)

    @classmethod
    def from_gaussian(cls, standard_deviation: float, sensitivity: float = 1.0, **options):
        """Gaussian mechanism (:func:`dpplugins.mechanisms.gaussian`); a noise multiplier
        ``standard_deviation / sensitivity`` outside :data:`NOISE_RANGE` is bracketed by
        dominance, as in :meth:`_bracketed_gaussian` (the Gaussian is the subsampled one at
        ``q = 1``)."""
        s = check_positive("standard_deviation", standard_deviation)
        d = check_positive("sensitivity", sensitivity)
        with np.errstate(over="ignore", under="ignore"):
            ratio = s / d
        if not NOISE_RANGE[0] <= ratio <= NOISE_RANGE[1]:
            return cls._bracketed_gaussian(ratio, 1.0, "add_remove", **options)
        return cls.from_mechanism(mechanisms.gaussian(s, d), **options)

    @classmethod
    def from_laplace(cls, scale: float, sensitivity: float = 1.0, **options):
        """Laplace mechanism (:func:`dpplugins.mechanisms.laplace`)."""
        return cls.from_mechanism(mechanisms.laplace(scale, sensitivity), **options)

    @classmethod
    def from_randomized_response(cls, epsilon: float, k: int = 2, **options):
        """k-ary randomized response (:func:`dpplugins.mechanisms.k_randomized_response`)."""
        return cls.from_mechanism(mechanisms.k_randomized_response(epsilon, k), **options)

    @classmethod
    def from_binomial(cls, trials: int, p: float = 0.5, sensitivity: int = 1, **options):
        """Binomial mechanism (:func:`dpplugins.mechanisms.binomial`)."""
        return cls.from_mechanism(mechanisms.binomial(trials, p, sensitivity), **options)

    @classmethod
    def from_poisson_subsampled_gaussian(cls, noise_multiplier: float, sampling_probability: float,
                                         *, sensitivity: float = 1.0,
                                         neighbouring: str = "add_remove", **options):
        """One DP-SGD step (:func:`dpplugins.mechanisms.poisson_subsampled_gaussian`); the noise
        standard deviation is ``noise_multiplier * sensitivity``."""
        sigma = check_positive("noise_multiplier", noise_multiplier)
        sens = check_positive("sensitivity", sensitivity)
        if NOISE_RANGE[0] <= sigma <= NOISE_RANGE[1]:
            return cls.from_mechanism(mechanisms.poisson_subsampled_gaussian(
                sigma * sens, sampling_probability, sens, neighbouring=neighbouring), **options)
        return cls._bracketed_gaussian(sigma, sampling_probability, neighbouring, **options)

    @classmethod
    def _bracketed_gaussian(cls, sigma: float, sampling_probability: float, neighbouring: str, *,
                            value_discretization_interval: float = 1e-4,
                            tail_mass: float = 1e-15, memory_limit: int = 1 << 30,
                            loss_range_tail: float = SINGLE_TAIL):
        """A noise multiplier outside :data:`NOISE_RANGE`, where the grid constructions would
        overflow, bracketed by dominance (adding independent Gaussian noise is a post-processing,
        so less noise dominates more; our derivation from Balle & Wang 2018, Thm 8):

        * ``sigma > 1e100``: upper bound from ``sigma = 1e100``, lower bound from the mechanism
          without privacy loss (``P = Q``), which every mechanism dominates;
        * ``sigma < 1e-100``: upper bound from the fully revealing mechanism (all P-mass at loss
          ``+inf``: epsilon is ``inf`` for every delta < 1), lower bound from ``sigma = 1e-100``.
        """
        h = check_positive("value_discretization_interval", value_discretization_interval)
        tail = check_loss_range_tail(loss_range_tail)
        if sigma > NOISE_RANGE[1]:
            upper = _discretise(mechanisms.poisson_subsampled_gaussian(
                NOISE_RANGE[1], sampling_probability, 1.0, neighbouring=neighbouring), h,
                loss_range_tail=tail)
            lower = _discretise(mechanisms.discrete_pair([1.0], [1.0], symmetric=True), h)
            comps = {d: _Component(upper[d].upper, lower[d].lower_source()) for d in DIRECTIONS}
        else:
            lower = _discretise(mechanisms.poisson_subsampled_gaussian(
                NOISE_RANGE[0], sampling_probability, 1.0, neighbouring=neighbouring), h,
                loss_range_tail=tail)
            revealing = GridPMF(h, 0, np.zeros(1), 1.0, 0.0)
            comps = {d: _Component(revealing, lower[d].lower_source()) for d in DIRECTIONS}
        return cls({d: ((comps[d], 1),) for d in DIRECTIONS}, h,
                   description=f"Poisson-subsampled Gaussian(sigma={sigma:g}, "
                               f"q={sampling_probability:g}, {neighbouring}), bracketed",
                   tail_mass=tail_mass, memory_limit=memory_limit)

    @classmethod
    def from_pmfs(cls, p, q, *, symmetric: bool = False, **options):
        """Any pair of finite pmfs (:func:`dpplugins.mechanisms.discrete_pair`)."""
        return cls.from_mechanism(mechanisms.discrete_pair(p, q, symmetric=symmetric), **options)

    @classmethod
    def from_privacy_profile(cls, delta_for_epsilon: Callable[[np.ndarray], np.ndarray], *,
                             epsilon_max: float | None = None, symmetric: bool = True,
                             value_discretization_interval: float = 1e-4,
                             profile_step: float | None = None, description: str = "privacy profile",
                             tail_mass: float = 1e-15, memory_limit: int = 1 << 30,
                             add_delta_for_epsilon: Callable[[np.ndarray], np.ndarray] | None = None
                             ) -> "PrivacyLossDistribution":
        """Dominating PLD of a mechanism known through an upper bound ``delta(eps)`` (eps >= 0).

        Pessimistic connect-the-dots (Doroshenko et al. 2022): the result composes by FFT like any
        other PLD, and every epsilon computed from it is an upper bound.  No lower bound exists for
        such a mechanism, so :meth:`epsilon_for_delta` reports ``lower = 0``.

        ``symmetric=True`` means the bound holds in both directions (an (eps, delta)-DP statement);
        then ``delta(eps) = 1 - e^eps + e^eps delta(-eps)`` for negative eps (the identity
        ``E_g(P||Q) = 1 - g + g E_{1/g}(Q||P)``).  Otherwise the profile is used only for the
        remove direction and the add direction is taken as the same bound (which is then an
        assumption the caller makes explicit by passing ``symmetric=False`` only when it holds).
        ``add_delta_for_epsilon``: a separate upper bound for the add direction (``H_x(Q||P)``,
        eps >= 0) of the same pair; the remove PLD then uses it for negative eps in the identity
        above, and the add PLD is built from it with the remove bound mirrored (each direction
        dominated by its own profile instead of both by their maximum; ``symmetric`` is then
        ignored).
        ``epsilon_max`` (default: where the bound falls below 1e-16, at most 400) ends the grid;
        the remaining ``delta(epsilon_max)`` goes to ``delta(inf)``.  ``profile_step`` evaluates
        the profile on a coarser sub-grid to save calls (default: the grid step, or coarser so
        that at most 20,000 points are evaluated); coarser is still valid, only looser.
        """
        h = check_positive("value_discretization_interval", value_discretization_interval)
        if epsilon_max is None:
            epsilon_max = 0.25
            while epsilon_max < 400 and float(np.asarray(delta_for_epsilon(
                    np.array([epsilon_max])))[0]) > 1e-16:
                epsilon_max *= 2
            epsilon_max = min(epsilon_max, 400.0)
        epsilon_max = check_positive("epsilon_max", epsilon_max)
        limit = component_bin_limit(memory_limit)
        with np.errstate(over="ignore"):
            bins = 2.0 * float(np.float64(epsilon_max) / np.float64(h)) + 3.0
        if not bins <= limit:
            raise ParameterError(
                "value_discretization_interval", h,
                f">= {2.0 * epsilon_max / limit:.3g} for a profile up to epsilon_max="
                f"{epsilon_max:g} (it needs {bins:.4g} grid bins at this step; memory_limit="
                f"{int(memory_limit)} bytes allows {limit:,})")
        hi = math.ceil(epsilon_max / h)
        lo = -hi
        stride = (max(1, round(profile_step / h)) if profile_step is not None
                  else max(1, math.ceil((hi - lo + 1) / 20_000)))

        def full_profile(primary, mirror):
            def profile(eps):
                eps = np.asarray(eps, dtype=float)
                out = np.empty_like(eps)
                pos = eps >= 0
                out[pos] = np.asarray(primary(eps[pos]), dtype=float)
                neg = ~pos
                if np.any(neg):
                    mirrored = np.asarray(mirror(-eps[neg]), dtype=float)
                    out[neg] = -np.expm1(eps[neg]) + np.exp(eps[neg]) * np.minimum(mirrored, 1.0)
                return out
            return _Component(pessimistic_from_profile(profile, h, lo, hi, stride), None)

        if add_delta_for_epsilon is None:
            comp = full_profile(delta_for_epsilon, delta_for_epsilon)
            comps = {d: comp for d in DIRECTIONS}
        else:
            comps = {"remove": full_profile(delta_for_epsilon, add_delta_for_epsilon),
                     "add": full_profile(add_delta_for_epsilon, delta_for_epsilon)}
        return cls({d: ((comps[d], 1),) for d in DIRECTIONS}, h, description=description,
                   tail_mass=tail_mass, memory_limit=memory_limit)

    # -- composition ------------------------------------------------------------------------
    def _check_compatible(self, other: "PrivacyLossDistribution", name: str = "other") -> None:
        if not isinstance(other, PrivacyLossDistribution):
            raise ParameterError(name, type(other).__name__, "a PrivacyLossDistribution")
        if other.value_discretization_interval != self.value_discretization_interval:
            raise ParameterError(
                f"{name}.value_discretization_interval", other.value_discretization_interval,
                f"equal to {self.value_discretization_interval} (compose PLDs built on one grid)")

    def compose(self, other: "PrivacyLossDistribution") -> "PrivacyLossDistribution":
        """PLD of running this mechanism and then ``other`` (independent noise, adaptive choice
        allowed: composition theorem of Dong, Roth, Su 2022 Thm 3.2 / Zhu et al. 2022 Thm 10)."""
        self._check_compatible(other)
        return PrivacyLossDistribution.composition([self, other])

    @staticmethod
    def composition(plds: Sequence["PrivacyLossDistribution"]) -> "PrivacyLossDistribution":
        """PLD of running the mechanisms of ``plds`` one after the other (as :meth:`compose`,
        in one pass: composing ``K`` distinct steps costs ``O(K)``, not ``O(K^2)``).

        Example::

            >>> a = PrivacyLossDistribution.from_gaussian(2.0, value_discretization_interval=1e-3)
            >>> b = PrivacyLossDistribution.from_gaussian(3.0, value_discretization_interval=1e-3)
            >>> both = PrivacyLossDistribution.composition([a, b, a])
        """
        plds = list(plds)
        if not plds:
            raise ParameterError("plds", plds, "a non-empty sequence of PrivacyLossDistribution")
        first = plds[0]
        if not isinstance(first, PrivacyLossDistribution):
            raise ParameterError("plds[0]", type(first).__name__, "a PrivacyLossDistribution")
        for i, other in enumerate(plds[1:], start=1):
            first._check_compatible(other, f"plds[{i}]")
        merged = {}
        for d in DIRECTIONS:
            counts: dict[int, list] = {}
            for pld in plds:
                for comp, k in pld._directions[d]:
                    entry = counts.setdefault(id(comp), [comp, 0])
                    entry[1] += k
                    if entry[1] > MAX_COUNT:
                        raise ParameterError("count", entry[1], f"at most 2**53 = {MAX_COUNT:,} "
                                             "compositions of one component (counts are used "
                                             "as floats)")
            merged[d] = tuple((c, k) for c, k in counts.values())
        desc = " + ".join(filter(None, [pld.description for pld in plds]))
        return PrivacyLossDistribution(merged, first.value_discretization_interval,
                                       description=desc,
                                       tail_mass=min(pld.tail_mass for pld in plds),
                                       memory_limit=min(pld.memory_limit for pld in plds))

    def self_compose(self, count: int) -> "PrivacyLossDistribution":
        """PLD of ``count`` adaptive repetitions (one FFT power, not ``count`` convolutions)."""
        count = check_count("count", count, minimum=0)
        largest = max((k for d in DIRECTIONS for _, k in self._directions[d]), default=1)
        if count * largest > MAX_COUNT:
            raise ParameterError("count", count, f"an integer in [0, {MAX_COUNT // largest:,}] "
                                 f"(at most 2**53 = {MAX_COUNT:,} compositions of one "
                                 "component: counts are used as floats)")
        scaled = {d: tuple((c, k * count) for c, k in self._directions[d]) for d in DIRECTIONS}
        return PrivacyLossDistribution(scaled, self.value_discretization_interval,
                                       description=f"{count} x ({self.description})",
                                       tail_mass=self.tail_mass, memory_limit=self.memory_limit)

    # -- queries ----------------------------------------------------------------------------
    def _free_tables(self) -> None:
        """Before a new composition: when the cached compositions' evaluation tables (up to
        ``BYTES_PER_WINDOW_BIN`` a bin with the masses) would not leave room for another window
        within ``memory_limit``, free them (they are rebuilt, identical, if a later evaluation
        needs them), so a query holds one composition's working memory at a time besides the
        cached masses (8 bytes a bin)."""
        held = sum(len(c.pmf) for c in list(self._cache.values()) if c.tables_built())
        if held and held * BYTES_PER_WINDOW_BIN > self.memory_limit // 2:
            for composed in list(self._cache.values()):
                composed.drop_tables()

    def cached_bins(self) -> int:
        """Grid bins held by the compositions computed so far (each costs about 40 bytes: the
        masses and two long-double suffix sums)."""
        return sum(len(c.pmf) for c in list(self._cache.values()))

    def composed_window_bins(self) -> int:
        """Bins of the largest FFT window of the upper-bound compositions a query composes
        (untilted; from the components' cumulants, before any transform): what a grid step
        ``r`` times coarser divides by about ``r``.

        The lower bound's composition (of one direction, the one that decides the upper bound)
        lies on the same grid, but its window is not computed here: that would build the
        lower-bound PMFs of every direction, which a query mostly does not need.  Its window
        can be somewhat larger (measured: 1.24 times for the add direction of a
        Poisson-subsampled Gaussian, the same for the remove direction); see
        :data:`LOWER_WINDOW_MARGIN`."""
        return max(window_bins([(c.upper, k) for c, k in self._directions[d]], self.tail_mass)
                   for d in self._directions_to_evaluate())

    def largest_window(self) -> int:
        """Bins of the largest FFT window composed so far (0 before any query): what a grid
        ``r`` times finer would need about ``r`` times of."""
        return max((len(c.pmf) for c in list(self._cache.values())), default=0)

    @property
    def has_lower_bound(self) -> bool:
        """True when every component is known exactly (so lower bounds are meaningful)."""
        return all(c.has_lower for d in DIRECTIONS for c, _ in self._directions[d])

    def _directions_to_evaluate(self) -> list[str]:
        remove, add = self._directions["remove"], self._directions["add"]
        same = len(remove) == len(add) and all(
            a[0] is b[0] and a[1] == b[1] for a, b in zip(remove, add))
        return ["remove"] if same else list(DIRECTIONS)

    def _composed(self, direction: str, kind: str, extended: bool = False,
                  tilt: float = 0.0, fp_limit: float = math.inf) -> ComposedPLD:
        """The composition of one direction (cached); ``fp_limit``: see
        :func:`~dpplugins.pld.compose.compose_grid_pmfs` (untilted only; nothing is cached when
        it refuses for ``fp_limit``).  A refusal that does not depend on ``fp_limit`` (memory,
        the range of a tilted composition's error terms) is remembered and raised again: a
        profile evaluated at 1,600 epsilons retried a refused tilted composition at each, 0.2 s
        apiece (randomized response with 10^6 buckets, 10-out-of-10 allocation, p = 0.9)."""
        key = (direction, kind, extended) if tilt == 0 else (direction, kind, extended, tilt)
        if key not in self._cache:
            refused = self._refused.get(key)
            if refused is not None:
                raise NumericalError(*refused)
            self._free_tables()
            parts = [(getattr(c, kind), k) for c, k in self._directions[direction]]
            limit = fp_limit if tilt == 0 else math.inf
            try:
                self._cache[key] = compose_grid_pmfs(parts, tail_mass=self.tail_mass,
                                                     memory_limit=self.memory_limit,
                                                     extended=extended, extended_inverse=extended,
                                                     tilt=tilt, fp_limit=limit)
            except NumericalError as error:
                if limit == math.inf:
                    self._refused[key] = (error.what, error.fix)
                raise
        return self._cached(key)

    def _cached(self, key: tuple) -> ComposedPLD:
        """A cached composition; when its evaluation tables were freed, the others' are freed
        first as before a new composition (:meth:`_free_tables`): rebuilding them costs about as
        much memory, and a second query over four cached levels held all four tables at once
        (2.8 GB under the default 1 GiB limit)."""
        composed = self._cache[key]
        if not composed.tables_built():
            self._free_tables()
        return composed

    def _accurate(self, direction: str, kind: str, scale: float,
                  fp_limit: float = math.inf) -> ComposedPLD:
        """Composed PLD whose floating-point error term is small next to ``scale`` (a delta):
        double precision unless its error bound would exceed ``FP_SHARE * scale``, then extended
        precision.  The double-precision bound is dominated by ``count * c u log2(N)`` (the power
        amplifies the forward FFT error), which we check before computing.  ``fp_limit``: a
        composition whose floating-point term certainly exceeds it is not computed (extended
        precision is tried instead of double; :class:`NumericalError` if it exceeds it too)."""
        key = (direction, kind, False)
        if key not in self._cache:
            total = sum(k for _, k in self._directions[direction])
            predicted = total * 10 * np.finfo(float).eps * 24  # c u log2 N with N <= 2^24
            if predicted > FP_SHARE * scale:
                return self._composed(direction, kind, extended=True, fp_limit=fp_limit)
            try:
                composed = self._composed(direction, kind, fp_limit=fp_limit)
            except NumericalError:
                return self._composed(direction, kind, extended=True, fp_limit=fp_limit)
        else:
            composed = self._cached(key)
        if composed.fp_error > FP_SHARE * scale:
            composed = self._composed(direction, kind, extended=True, fp_limit=fp_limit)
        return composed


    def _tilted_levels(self, direction: str, kind: str, tilt_of, refusals: list | None = None):
        """The tilted compositions (double, then extended precision) at ``tilt_of()``, if that
        tilt is positive; stops at the first level that needs more memory than allowed (its
        refusal appended to ``refusals``)."""
        tilt = tilt_of()
        if not tilt > 0:
            return
        for extended in (False, True):
            try:
                yield self._composed(direction, kind, extended, tilt)
            except NumericalError as error:
                if refusals is not None:
                    refusals.append(error)
                return

    def _levels(self, direction: str, kind: str, scale: float, tilt_of,
                fp_limit: float = math.inf):
        """Composed PLDs of increasing accuracy (and cost), lazily: untilted double or extended
        precision (:meth:`_accurate`), then tilted towards the query (``tilt_of()``; see
        :func:`~dpplugins.pld.compose.compose_grid_pmfs`) in double and in extended precision.
        A level that needs more memory than allowed is skipped when an earlier one exists.

        When even the extended-precision untilted composition cannot reach the accuracy, it is
        not computed (the tilted levels come first; the untilted one only if none of them can be
        computed): its floating-point bound is at least ``count * c u_ld log2 N`` at frequency
        0 (:func:`~dpplugins.pld.compose.compose_grid_pmfs`; ``N >= 2^12`` whenever the window
        is truncated), which for ``count = 685,161`` is 4e-12, above ``FP_SHARE`` of a delta of
        1e-9.  Skipping a level that cannot meet the target never changes validity."""
        untilted = lambda: self._accurate(direction, kind, scale, fp_limit)  # noqa: E731
        if self._untilted_cannot_reach(direction, scale):
            yield from self._tilted_first(direction, kind, tilt_of, untilted)
            return
        try:
            first = untilted()
        except NumericalError:
            # above fp_limit (or memory): the tilted levels may still answer; if none can be
            # computed, the untilted one is asked again and raises the reason
            yield from self._tilted_first(direction, kind, tilt_of, untilted)
            return
        yield first
        yield from self._tilted_levels(direction, kind, tilt_of)

    def _untilted_cannot_reach(self, direction: str, scale: float) -> bool:
        """True when even the extended-precision untilted composition's floating-point floor
        (``count c u_ld log2 N`` at frequency 0, ``N >= 2^12``) is above ``FP_SHARE * scale``."""
        total = sum(k for _, k in self._directions[direction])
        u_ld = float(np.finfo(np.longdouble).eps) / 2
        return total * 10 * u_ld * 12 > FP_SHARE * scale

    def _tilted_first(self, direction: str, kind: str, tilt_of, untilted):
        """The tilted levels, and ``untilted()`` only if none of them can be computed; if that
        fails too, its error also names why the tilted level was refused (e.g. its memory)."""
        produced, refusals = False, []
        for composed in self._tilted_levels(direction, kind, tilt_of, refusals):
            produced = True
            yield composed
        if not produced:
            try:
                fallback = untilted()
            except NumericalError as error:
                if not refusals:
                    raise
                raise NumericalError(
                    f"{error.what}; the tilted composition that certifies small deltas was "
                    f"refused too: {refusals[0].what}",
                    f"{error.fix}; or {refusals[0].fix}") from None
            yield fallback

    def _tilt(self, direction: str, kind: str, objective) -> float:
        """``lam`` in ``[1e-3, 1e6]`` approximately minimising ``objective(lam, K(lam))`` (``K``
        the cumulant generating function of the composed finite loss; a log grid, then a bounded
        search).  Any ``lam > 0`` gives certified bounds; a good one makes them tight.  0 when a
        component has no finite part."""
        parts = [(getattr(c, kind), k) for c, k in self._directions[direction]]
        if any(not np.any(c.pmf > 0) for c, _ in parts):
            return 0.0
        cumulants = _CumulantSum(parts)
        # the components' cumulant tables (computed once per component, on LAMBDA_GRID from
        # 1e-5 to 1e6, ratio about 1.5): the best grid tilt, no search per query
        first = int(np.searchsorted(LAMBDA_GRID, 1e-3))

        def value(i: int) -> float:
            lam, k, _ = cumulants.at(1.0, first + i)
            return objective(lam, k)
        best = first + grid_minimum(value, len(LAMBDA_GRID) - first)
        if not value(best - first) < math.inf:  # no usable tilt (-inf is the best one)
            return 0.0
        return float(f"{float(LAMBDA_GRID[best]):.6g}")  # a stable cache key

    def _tilt_for_delta(self, direction: str, kind: str, delta: float) -> float:
        """Tilt for an epsilon query at ``delta``: the Chernoff optimum of
        ``(K(lam) - log delta) / lam`` (its minimiser puts the tilted mean at the Chernoff
        epsilon, just above the answer)."""
        log_delta = math.log(delta)
        return self._tilt(direction, kind, lambda lam, k: (k - log_delta) / lam)

    def _tilt_for_epsilon(self, direction: str, kind: str, epsilon: float) -> float:
        """Tilt for a delta query at ``epsilon``: the minimiser of ``K(lam) - lam epsilon`` (it puts
        the tilted mean at ``epsilon``); 0 when ``epsilon`` is below the mean loss."""
        return self._tilt(direction, kind, lambda lam, k: k - lam * epsilon)

    def delta_for_epsilon(self, epsilon: float, *, lower: bool = True,
                          lower_rtol: float = 0.0, check: bool = True) -> Bounds:
        """Certified bounds on ``delta(epsilon)`` (the max over both directions).

        ``lower=False`` skips the lower bound (``Bounds.lower`` is then 0, and the lower
        compositions already computed are left out too), as in :meth:`epsilon_for_delta`:
        callers that use only the upper bound (a profile evaluated at hundreds of points) pay
        for the upper composition alone.
        ``check=False`` returns the two values without the crossing check of
        :func:`certified_bounds`, for a caller whose pairs bracket the value only up to its own
        certificates (random allocation's dominating and dominated pairs, each exact up to an
        additive term): their raw values may cross within those terms, and the caller checks
        its certified bounds instead.
        ``lower_rtol`` (default 0: every accuracy level the query needs) stops the lower bound's
        accuracy levels (extended precision, tilting) as soon as ``upper - lower <= lower_rtol *
        upper``, or when not even an error-free composition on this grid would meet that and
        the error terms are at most half the gap (:func:`_lower_levels_done`): every level gives
        a certified lower bound, so stopping early keeps it valid and only leaves it less tight.
        The accountants pass their ``eps_tolerance``: a gap they accept needs no costlier level,
        and one that only a finer grid can narrow is narrowed there.
        """
        epsilon = check_nonnegative("epsilon", epsilon)
        lower_rtol = check_nonnegative("lower_rtol", lower_rtol)
        directions = self._directions_to_evaluate()
        found = {directions[0]: self._delta_upper_certified(directions[0], epsilon)}
        for d in directions[1:]:
            # a direction whose Chernoff bound is at most the first one's upper bound cannot
            # raise the maximum: it is not composed
            if not self._chernoff_delta(d, epsilon) <= found[directions[0]][0]:
                found[d] = self._delta_upper_certified(d, epsilon)
        uppers = {d: value for d, (value, _) in found.items()}
        dominant = max(uppers, key=uppers.get)
        low, floor = 0.0, found[dominant][1]
        if lower and self.has_lower_bound:
            # a lower bound for any one direction is a lower bound for the maximum; use the
            # direction that decides the upper bound
            low, lower_floor = self._delta_lower_certified(dominant, epsilon, uppers[dominant],
                                                           lower_rtol)
            floor += lower_floor
        upper = uppers[dominant]
        cached = self.cached_delta_bounds(epsilon, lower=lower, check=check)
        if cached is not None:  # every computed composition certifies: intersect them
            upper, low = min(upper, cached.upper), max(low, cached.lower)
        self.last_floor = floor
        if not check:
            return Bounds(low, upper)
        return certified_bounds(low, upper, f"delta at epsilon={epsilon!r}")

    def cached_delta_bounds(self, epsilon: float, *, lower: bool = True,
                            check: bool = True) -> Bounds | None:
        """Bounds on ``delta(epsilon)`` from the compositions already computed (no new FFT):
        each one certifies its bound at every epsilon, so the best of them is certified too.
        This makes ``delta_for_epsilon(epsilon_for_delta(d).upper).upper <= d``: the composition
        that certified the epsilon is among them.  ``None`` when a direction has none yet.
        ``lower=False`` leaves the lower compositions out (the lower bound is then 0);
        ``check=False`` as in :meth:`delta_for_epsilon`."""
        epsilon = check_nonnegative("epsilon", epsilon)
        want_lower = lower
        uppers, lower = [], 0.0
        for direction in self._directions_to_evaluate():
            values = [c.delta_upper(epsilon) for key, c in list(self._cache.items())
                      if key[0] == direction and key[1] == "upper"]
            # a direction a query left out at this epsilon counts with the Chernoff bound
            # that let it leave the direction out
            chernoff = self._chernoff.get((direction, float(epsilon)))
            if chernoff is not None:
                values.append(chernoff)
            if not values:
                return None
            uppers.append(min(values))
        if want_lower and self.has_lower_bound:
            lower = max((c.delta_lower(epsilon) for key, c in list(self._cache.items())
                         if key[1] == "lower"), default=0.0)
        upper = max(uppers)
        if not check:
            return Bounds(lower, upper)
        return certified_bounds(lower, upper, f"delta at epsilon={epsilon!r}")

    def delta_upper_chernoff(self, epsilon: float) -> float:
        """Certified upper bound on ``delta(epsilon)`` from the components' cumulants alone (no
        FFT; cost linear in the number of distinct components): the larger of the directions'
        bounds (:meth:`_chernoff_delta`).  Loose except far in the tail, where it is the cheap
        certificate of a tiny delta.

        Example::

            >>> pld = PrivacyLossDistribution.from_gaussian(1.0, value_discretization_interval=1e-2)
            >>> bool(pld.self_compose(5).delta_upper_chernoff(40.0) < 1e-20)
            True
        """
        epsilon = check_nonnegative("epsilon", epsilon)
        return max(self._chernoff_delta(d, epsilon) for d in self._directions_to_evaluate())

    def _chernoff_delta(self, direction: str, epsilon: float) -> float:
        """Certified upper bound on one direction's ``delta(epsilon)`` from the cumulants of the
        pessimistic grid PMFs (memoised by direction and epsilon).

        The bound (our derivation).  With ``S`` the composed loss of the grid PMFs, which
        dominate the mechanism, ``delta(eps) = P(S = inf) + E[(1 - e^(eps - S))_+; S < inf]``
        (Koskela et al. 2021, Sec. 2, for the decomposition).  For ``lam > 0`` and every real
        ``t``, ``(1 - e^-t)_+ <= c(lam) e^(lam t)`` with ``c(lam) = max_(t > 0) (1 - e^-t)
        e^(-lam t) = (1 / (1 + lam)) (lam / (1 + lam))^lam`` (the maximum is at ``e^-t = lam /
        (1 + lam)``; the same maximisation gives the RDP-to-DP conversion of Canonne, Kamath,
        Steinke 2020, arXiv:2004.00010, Prop. 12).  So the finite part is at most ``c(lam)
        exp(sum_i k_i K_i(lam) - lam eps)``, ``K_i`` the cumulant generating function of the
        finite part of component ``i``, for every ``lam`` (a grid search picks one).  Rounding:
        the exponent is raised by ``8 u`` times the magnitude of its terms plus ``1e-12`` (the
        sums of logarithms, :class:`~dpplugins.pld.compose.CumulantBatch`, and ``log c``, whose
        two terms are within a few ``u`` of at most ``log(1 + lam) + 1``); the atom at ``+inf``
        composes as ``1 - prod (1 - delta_i(inf))^k_i``, rounded up likewise; and the
        floating-point error of the stored masses (:meth:`_construction_error`) is added.
        Tested against closed forms (composed Gaussian; the add direction of a subsampled
        Gaussian step) and, through the queries that use it, exact enumeration."""
        key = (direction, float(epsilon))
        found = self._chernoff.get(key)
        if found is not None:
            return found
        parts = [(c.upper, k) for c, k in self._directions[direction]]
        inf_mass = self._composed_inf_mass(direction)
        finite = [(c, k) for c, k in parts if np.any(c.pmf > 0)]
        if len(finite) < len(parts):
            value = inf_mass  # a component without finite part: S = inf almost surely
        else:
            cumulants = _CumulantSum(finite)

            def exponent(i: int) -> float:
                # K + log c - lam eps rounded up (8 u of the magnitudes, plus 1e-12); grouped so
                # that an infinite lam eps (epsilon near the float maximum) gives -inf, not
                # inf - inf
                lam, value, magnitude = cumulants.at(1.0, i)
                log_c = -math.log1p(lam) - lam * math.log1p(1.0 / lam)
                rest = (value + log_c + 8 * _U * (magnitude + math.log1p(lam) + 2.0)
                        + 1e-12)
                reduction = lam * epsilon * (1 - 8 * _U)
                if math.isinf(rest) and math.isinf(reduction):
                    return math.inf
                return rest - reduction
            _, mean, variance = cumulants.moments()
            guess = lambda_index((epsilon - mean) / variance) if variance > 0 else None
            best = exponent(grid_minimum(exponent, start=guess))
            tail = math.exp(min(best, 0.0)) if best < 700 else 1.0
            construction = self._construction_error(direction, "upper")
            value = min(1.0, (inf_mass + tail + construction) * (1 + 4 * _U))
        if len(self._chernoff) >= 256:  # a long search at many epsilons: start over
            self._chernoff.clear()
        self._chernoff[key] = value
        return value

    def _composed_inf_mass(self, direction: str) -> float:
        """``delta(inf)`` of the upper-bound composition of ``direction``: ``1 - prod (1 -
        delta_i(inf))^k_i`` over its components, rounded up."""
        parts = [(c.upper, k) for c, k in self._directions[direction]]
        log_survive = math.fsum(k * math.log1p(-min(c.inf_mass, 1.0)) if c.inf_mass < 1
                                else -math.inf for c, k in parts)
        return min(1.0, -math.expm1(log_survive) * (1 + 1e-12) + 1e-300) \
            if log_survive > -math.inf else 1.0

    def delta_at_infinity(self) -> float:
        """The mass the upper bound places at infinite privacy loss (the largest over the
        directions, rounded up): every certified delta is at least this, so no finite epsilon is
        certified for a smaller delta.  It holds the mechanism's own ``delta(inf)`` and whatever
        the construction moved there (the tails beyond a grid or a profile's ``epsilon_max``).

        Example::

            >>> PrivacyLossDistribution.from_randomized_response(1.0).delta_at_infinity() < 1e-299
            True
        """
        return max(self._composed_inf_mass(d) for d in self._directions_to_evaluate())

    def delta_upper_floor(self) -> float:
        """A part of every certified upper bound on delta this PLD returns that no accuracy
        level removes: the construction error of the grid PMFs (:meth:`_construction_error`),
        the smallest over the directions (every answer includes at least one direction's).
        Only a finer grid (or none) changes it; the accountants use it to stop refining."""
        return min(self._construction_error(d, "upper") for d in self._directions_to_evaluate())

    def _construction_error(self, direction: str, kind: str) -> float:
        """``sum count x fp_error`` of the grid PMFs: the part of every composition's additive
        error that no accuracy level (extended precision, tilting) removes.  The levels stop
        once the part they could remove is below ``FP_SHARE`` of the value."""
        return sum(k * getattr(c, kind).fp_error for c, k in self._directions[direction])

    def _delta_upper_certified(self, direction: str, epsilon: float) -> tuple[float, float]:
        """Smallest certified upper bound over the accuracy levels, and its additive error."""
        best, floor = math.inf, 0.0
        fixed = self._construction_error(direction, "upper")
        tilt_of = lambda: self._tilt_for_epsilon(direction, "upper", epsilon)  # noqa: E731
        for composed in self._levels_for_value(direction, "upper", epsilon, tilt_of):
            value = composed.delta_upper(epsilon)
            if value < best:
                best, floor = value, max(value - composed.delta_ideal(epsilon), 0.0)
            if composed.additive_error(epsilon) - fixed <= FP_SHARE * value:
                break
        return best, floor

    def _levels_for_value(self, direction, kind, epsilon, tilt_of):
        """Like :meth:`_levels` with the scale taken from the first (double) value.

        When even the extended-precision untilted composition's floating-point floor (``count
        c u_ld log2 N``, as in :meth:`_levels`) is above ``FP_SHARE`` of the Chernoff bound on
        ``delta(epsilon)`` (:meth:`delta_upper_chernoff`, at least the delta sought), no untilted
        level can reach the accuracy: the tilted levels come first, and the untilted double one
        only if none of them can be computed.  Skipping never changes validity."""
        if self._untilted_cannot_reach(direction, self.delta_upper_chernoff(epsilon)):
            yield from self._tilted_first(direction, kind, tilt_of,
                                          lambda: self._composed(direction, kind))
            return
        first = self._composed(direction, kind)
        yield first
        value = first.delta_upper(epsilon) if kind == "upper" else first.delta_lower(epsilon)
        if first.additive_error(epsilon, kind) - self._construction_error(direction, kind) \
                <= FP_SHARE * max(value, 0.0):
            return
        yield self._composed(direction, kind, extended=True)
        yield from self._tilted_levels(direction, kind, tilt_of)

    def _delta_lower_certified(self, direction: str, epsilon: float, upper: float,
                               lower_rtol: float = 0.0) -> tuple[float, float]:
        """Largest certified lower bound over the accuracy levels, and its additive error; the
        levels stop once that error is below ``FP_SHARE`` of ``upper`` or, with ``lower_rtol >
        0``, when :func:`_lower_levels_done` says so."""
        best, floor = 0.0, 0.0
        fixed = self._construction_error(direction, "lower")
        tilt_of = lambda: self._tilt_for_epsilon(direction, "lower", epsilon)  # noqa: E731
        for composed in self._levels_for_value(direction, "lower", epsilon, tilt_of):
            value = composed.delta_lower(epsilon)
            error = composed.delta_ideal(epsilon) - value
            if value > best or best == 0.0:
                best, floor = max(value, best), max(error, 0.0)
            if composed.additive_error(epsilon, "lower") - fixed <= FP_SHARE * max(upper, 1e-300):
                break
            if best > 0.0 and _lower_levels_done(upper, best, best + floor, lower_rtol):
                break
        return best, floor

    def _delta_upper(self, direction: str, epsilon: float) -> float:
        return self._delta_upper_certified(direction, epsilon)[0]

    def epsilon_for_delta(self, delta: float, *, lower: bool = True,
                          lower_rtol: float = 0.0) -> Bounds:
        """Certified bounds on the smallest epsilon with ``delta(epsilon) <= delta``.

        ``lower=False`` skips the lower bound (half the work; ``Bounds.lower`` is then 0).
        ``lower_rtol`` stops the lower bound's accuracy levels once ``upper - lower <=
        lower_rtol * upper``, as in :meth:`delta_for_epsilon` (still certified).

        Example::

            >>> pld = PrivacyLossDistribution.from_gaussian(1.0, value_discretization_interval=1e-3)
            >>> bounds = pld.self_compose(10).epsilon_for_delta(1e-5, lower_rtol=1e-2)
            >>> bounds.upper - bounds.lower <= 1e-2 * bounds.upper
            True
        """
        delta = check_open_unit("delta", delta)
        lower_rtol = check_nonnegative("lower_rtol", lower_rtol)
        directions = self._directions_to_evaluate()
        first = directions[0]
        found = {first: self._epsilon_upper_certified(first, delta)}
        for d in directions[1:]:
            # a direction whose Chernoff bound at the first one's epsilon is at most delta has
            # its epsilon below that one: it cannot raise the maximum, and is not composed
            # (for Poisson-subsampled Gaussians the add direction, a third of the work)
            if not (math.isfinite(found[first][0])
                    and self._chernoff_delta(d, found[first][0]) <= delta):
                found[d] = self._epsilon_upper_certified(d, delta)
        uppers = {d: value for d, (value, _) in found.items()}
        dominant = max(uppers, key=uppers.get)
        low, floor = 0.0, found[dominant][1]
        if lower and self.has_lower_bound:
            # the lower bound of the direction that decides the upper bound (valid for the max)
            low, lower_floor = self._epsilon_lower_certified(dominant, delta, uppers[dominant],
                                                             lower_rtol)
            floor += lower_floor
        self.last_floor = floor
        if bounds_cross(low, uppers[dominant]):
            # two certified bounds cannot cross beyond rounding: one of them is wrong here, so
            # nothing is certified at this delta (a Poisson-subsampled Gaussian at sigma = 0.05,
            # q = 1e-6, delta = 1e-100 gave lower 598.45, upper 597.82, true 597.80, until the
            # grid stopped trusting subnormal Q-masses: grid._TRUSTED_MASS)
            raise NumericalError(
                f"the PLD grid's lower ({low!r}) and upper ({uppers[dominant]!r}) bounds on "
                f"epsilon cross at delta={delta!r}: this grid cannot certify that delta",
                "ask for a larger delta")
        return Bounds(min(low, uppers[dominant]), uppers[dominant])

    def _epsilon_upper_certified(self, direction: str, delta: float) -> tuple[float, float]:
        """Smallest certified epsilon over the accuracy levels and the part of it due to the
        error terms (``epsilon - epsilon of the window sum alone``)."""
        best, floor, last_error = math.inf, 0.0, None
        parts = self._directions[direction]
        inf_mass = self._composed_inf_mass(direction)
        construction = self._construction_error(direction, "upper")
        if inf_mass < delta:
            # every composition's delta is at least delta(inf) plus the construction error of
            # the grid PMFs (sum of count x error): when that is above delta, no level answers
            if inf_mass + construction > delta:
                total = sum(k for _, k in parts)
                raise NumericalError(
                    f"delta={delta:g} is not above the certified error terms (delta(inf)="
                    f"{inf_mass:.3g}, construction error of the {total:,} composed grid steps="
                    f"{construction:.3g})", larger_delta_advice(inf_mass + construction))
        tilt_of = lambda: self._tilt_for_delta(direction, "upper", delta)  # noqa: E731
        for composed in self._levels(direction, "upper", delta, tilt_of, fp_limit=delta):
            try:
                eps = composed.epsilon_upper(delta)
            except NumericalError as error:
                last_error = error
                continue
            if eps < best or not math.isfinite(best):
                ideal = composed.epsilon_upper_ideal(delta)
                best = eps
                floor = max(eps - ideal, 0.0) if math.isfinite(eps) and math.isfinite(ideal) \
                    else 0.0
            if not math.isfinite(eps) or composed.additive_error(eps) - construction \
                    <= FP_SHARE * delta:
                break
        if best == math.inf and last_error is not None:
            raise NumericalError(
                last_error.what + ", also after tilting the composition towards the query in "
                "extended precision",
                "ask for a larger delta, or a smaller tail_mass when the truncation term "
                "dominates")
        return best, floor

    def _epsilon_lower_certified(self, direction: str, delta: float, upper: float = math.inf,
                                 lower_rtol: float = 0.0) -> tuple[float, float]:
        """Largest certified lower bound on epsilon over the accuracy levels, and the part of
        the gap due to its error terms; the levels stop once the additive error in delta is
        below ``FP_SHARE * delta`` or, with ``lower_rtol > 0``, when :func:`_lower_levels_done`
        says so."""
        best, floor = 0.0, 0.0
        fixed = self._construction_error(direction, "lower")
        tilt_of = lambda: self._tilt_for_delta(direction, "lower", delta)  # noqa: E731
        for composed in self._levels(direction, "lower", delta, tilt_of):
            eps = composed.epsilon_lower(delta)
            if eps >= best:
                ideal = composed.epsilon_lower_ideal(delta)
                best, floor = eps, max(ideal - eps, 0.0)
            if composed.additive_error(eps, "lower") - fixed <= FP_SHARE * delta:
                break
            if best > 0.0 and math.isfinite(upper) and _lower_levels_done(
                    upper, best, best + floor, lower_rtol):
                break
        return best, floor

    def __repr__(self) -> str:
        return (f"PrivacyLossDistribution({self.description!r}, "
                f"h={self.value_discretization_interval:g})")
