"""The PLD accountant (registry name ``"pld"``): DP-SGD with Poisson sampling, certified bounds."""

from __future__ import annotations

import functools
import math
import threading
import warnings
from collections import OrderedDict
from typing import ClassVar

import numpy as np

from dpplugins.accountants.base import Accountant, private_leaves
from dpplugins.errors import (MAX_GRID_STEP, NumericalError, ParameterError, check_count,
                              check_grid_step, check_positive)
from dpplugins import mechanisms
from dpplugins.events import (EpsilonDeltaEvent, Event, GaussianEvent, LaplaceEvent,
                              PoissonSampledEvent, RandomizedResponseEvent)
from dpplugins.full_batch import full_batch_delta_bounds, full_batch_epsilon_bounds, full_batch_mu
from dpplugins.mechanisms.pairs import DiscretePair
from dpplugins.mechanisms.randomized_response import zero_out_randomized_response, zero_out_rr_pair
from dpplugins.pld import AccuracyWarning, Bounds, PrivacyLossDistribution, certified_bounds
from dpplugins.pld.compose import window_limit
from dpplugins.pld.distribution import (FIRST_WINDOW_BINS, LOWER_WINDOW_MARGIN, NOISE_RANGE,
                                        SINGLE_TAIL, atom_grid_step, component_bin_limit,
                                        component_bins, finest_held_step,
                                        grid_noise_multiplier, held_component_bytes,
                                        laplace_top_atom, within_window_budget)

__all__ = ["PLDAccountant", "poisson_gaussian_pld", "loss_scale", "poisson_gaussian_runs",
           "is_poisson_gaussian", "epsilon_delta_pair", "epsilon_delta_pairs", "zero_out_rr_pair",
           "loss_range_tail_for"]

_MIN_H, _MAX_H = 1e-6, 2e-2
#: smallest grid step the refinement may reach (below _MIN_H: the memory limit is the real stop)
_REFINE_MIN_H = 1e-9
#: grid bins of one component on the first grid (the step is raised to stay below) and the most a
#: refinement may use: each bin of a component costs a few microseconds to construct, so these
#: bound the time of a query (a finer grid is only tried while it fits)
_FIRST_GRID_BINS, _MAX_REFINE_BINS = 2 ** 17, 2 ** 20
#: largest FFT window a refinement may compose (the memory limit may be lower, see
#: :func:`~dpplugins.pld.compose.window_limit`):
#: about 3 s per composition in extended precision on a loaded 2-core machine
_MAX_REFINE_WINDOW = 2 ** 22
#: bins of one component for the cheap tail certificate (:meth:`PLDAccountant._tail_delta`)
_COARSE_BINS = 4096
#: a delta whose cheap certificate is below this share of ``tail_mass`` is answered by it
_TAIL_SHARE = 1e-3
#: the tail certificate is tried for histories with at most this many distinct steps
_TAIL_MAX_DISTINCT = 16
#: the largest FFT window a refinement of a non-Gaussian history may move to (the work budget of
#: one query: a composition costs about 1 s per 2^21 bins on a loaded 2-core machine, and a
#: query composes upper and lower bounds, each tilted where delta is small)
_GENERIC_WINDOW_BUDGET = 2 ** 21
#: after the target is met, one more grid (a half to a tenth of the step) is composed for the
#: upper bound when its window stays within this many bins (about 100 MiB, 1-2 s): the upper
#: bound stays as tight as the refinements a loose lower bound used to force
_BONUS_WINDOW = 2 ** 22
#: composed PLDs kept per accountant (by history and grid step), reused by later queries: at
#: most this many, holding at most _PLD_CACHE_BINS grid bins -- their compositions' (about 40
#: bytes each) and their distinct components' (:func:`_component_bins`: 8 bytes a PMF bin, up
#: to 24 with the interval masses held for a lower PMF not built yet) -- so about 160 MiB at
#: most; a larger PLD is used for its query and not kept
_PLD_CACHE_SIZE, _PLD_CACHE_BINS = 8, 2 ** 22
#: the share of ``memory_limit`` that the grids of one query's distinct steps may hold
#: (:func:`~dpplugins.pld.distribution.held_component_bytes`); the rest is for the FFT window
_COMPONENT_SHARE = 0.5
#: a query starts on the grid that met the tolerance for the same settings at the previous query
#: when that grid is finer than its own first grid by at most _STICKY_FINER (the previous query's
#: first grid was too coarse, and this one's is about the same), or coarser by at most
#: _STICKY_COARSER (four ladder steps) with the gap predicted there within _STICKY_GAP of the
#: tolerance: the per-step PLDs are then cached, and a history that grows by an epoch neither
#: builds new ones nor repeats a grid that is bound to fail
_STICKY_FINER, _STICKY_COARSER, _STICKY_GAP = 8.0, 2.0 * (1 + 1e-9), 0.8
#: the settings whose last good grid is remembered (the most recent ones)
_STICKY_GRID_SETTINGS = 16
#: an epsilon query at ``delta`` after ``T`` steps builds its steps' grids leaving out
#: ``loss_range_tail_for(delta, T)`` of each tail: together they add at most this share of
#: ``delta`` to the upper bound's delta (see :func:`loss_range_tail_for`)
_LOSS_RANGE_SHARE = 1e-4
#: the largest loss-range tail an epsilon query uses (a grid to about 6.4 standard deviations)
_LOSS_RANGE_TAIL_MAX = 1e-10
#: the smallest (a grid to about 37 standard deviations)
_LOSS_RANGE_TAIL_MIN = 1e-300


def loss_range_tail_for(delta: float, steps: int) -> float:
    """The probability of each tail of one step's outputs that the grid of an epsilon query at
    ``delta`` after ``steps`` steps leaves out: ``_LOSS_RANGE_SHARE * delta / steps`` rounded
    down to a power of 10, within ``[1e-300, 1e-10]`` (the lower end was ``SINGLE_TAIL =
    1e-24``: 10^4 steps at q = 0.01, sigma = 1 then moved about 3e-25 to ``+inf`` and every
    delta below it had the upper bound inf; delta = 1e-30 now gives [17.630, 17.636]).

    Why it is safe and what it costs (our derivation).  Each step's connect-the-dots
    construction moves the P-mass above its grid to loss ``+inf``; that mass is at most the
    left-out tail (:meth:`~dpplugins.mechanisms.pairs.MonotoneLossPair.loss_range`), so the
    composition's mass at ``+inf`` grows by at most ``steps * tail <= 1e-4 delta``, and the
    certified epsilon by about the change of epsilon(delta) when delta drops by that share --
    negligible next to ``eps_tolerance``.  The tangent construction leaves that mass out,
    which only lowers the lower bound, by as little.  A power of 10 keeps the grid, and with it
    the cached per-step PLDs, the same over epochs of one run.  Example::

        >>> loss_range_tail_for(1e-5, 10_000)
        1e-13
    """
    if not (delta > 0 and steps > 0):
        return SINGLE_TAIL
    target = _LOSS_RANGE_SHARE * delta / steps
    if not target > _LOSS_RANGE_TAIL_MIN:
        return _LOSS_RANGE_TAIL_MIN
    tail = 10.0 ** math.floor(math.log10(target))
    if tail > target:  # log10 rounded up across a power of 10
        tail /= 10.0
    return float(min(max(tail, _LOSS_RANGE_TAIL_MIN), _LOSS_RANGE_TAIL_MAX))


#: the first grid's relative gap at a 40th of the loss scale, ``_GAP_AT_40 (T / 10^4) ^
#: _GAP_STEPS_EXPONENT / 1600`` after ``T`` steps (measured; :meth:`PLDAccountant.initial_grid_step`),
#: and the share of ``eps_tolerance`` the first grid aims at
_GAP_AT_40, _GAP_STEPS_EXPONENT, _FIRST_GRID_GAP = 0.55, 0.1, 0.6
#: the first grid aims at no smaller a relative gap than this (refinement goes further)
_FIRST_GRID_MIN_TOLERANCE = 1e-4


def _ladder_up(h: float) -> float:
    """``h`` rounded up (coarser) to a power of ``2^(1/4)``, the grid ladder of the accountant."""
    return 2.0 ** (math.ceil(4.0 * math.log2(h)) / 4.0)


def _ladder_down(h: float) -> float:
    """``h`` rounded down (finer) to a power of ``2^(1/4)``."""
    return 2.0 ** (math.floor(4.0 * math.log2(h)) / 4.0)


def loss_scale(noise_multiplier: float, sample_rate: float) -> float:
    """Standard deviation of one step's privacy loss (remove direction), used to size the grid.

    For the Poisson-subsampled Gaussian it is about ``q sqrt(e^(1/sigma^2) - 1)`` when ``q`` is
    small (the chi-square divergence of the mixture; Mironov, Talwar, Zhang 2019, Sec. 3) and
    ``1/sigma`` without subsampling (the Gaussian PLD is ``N(1/(2 sigma^2), 1/sigma^2)``).
    Defined for every float ``sigma``: 0 when ``1/sigma^2`` underflows (no privacy loss to
    resolve), ``inf`` for ``sigma = 0`` or when ``1/sigma`` overflows.
    """
    if not noise_multiplier > 0:
        return math.inf
    if 1e-150 < noise_multiplier < 1e150:
        chi2 = math.expm1(min(1.0 / noise_multiplier ** 2, 700.0))
        return min(1.0 / noise_multiplier, sample_rate * math.sqrt(chi2))
    inverse = 1.0 / noise_multiplier  # inf for subnormal sigma; 1/sigma^2 under- or overflows
    chi2 = math.expm1(min(inverse * inverse, 700.0))
    return min(inverse, sample_rate * math.sqrt(chi2))


def is_poisson_gaussian(event: Event) -> bool:
    """A Gaussian step, plain or on a Poisson subsample."""
    return isinstance(event, GaussianEvent) or (
        isinstance(event, PoissonSampledEvent) and isinstance(event.event, GaussianEvent))


def poisson_gaussian_runs(history) -> list[tuple[float, float, int]]:
    """The ``(noise_multiplier, sample_rate, steps)`` runs of a history of (Poisson-subsampled)
    Gaussian events, in order (a plain Gaussian is sample rate 1; no-ops are dropped)."""
    runs: list[tuple[float, float, int]] = []
    for leaf, count in private_leaves(history):
        if isinstance(leaf, GaussianEvent):
            sigma, q = leaf.noise_multiplier, 1.0
        else:
            sigma, q = leaf.event.noise_multiplier, leaf.sample_rate
        if runs and runs[-1][:2] == (sigma, q):
            runs[-1] = (sigma, q, runs[-1][2] + count)
        else:
            runs.append((sigma, q, count))
    return runs


#: the largest epsilon whose (epsilon, delta) pair is represented as it is: beyond it the small
#: mass ``(1-delta) / (1+e^eps)`` leaves double's normal range
EPSILON_DELTA_PAIR_MAX = 700.0


def epsilon_delta_pair(epsilon: float, delta: float) -> tuple[list[float], list[float]]:
    """The dominating pair of every (epsilon, delta)-DP mechanism (Kairouz, Oh, Viswanath 2015,
    Thm 2.1 / Murtagh & Vadhan 2016): four outcomes with
    ``P = (delta, (1-delta) e^eps / (1+e^eps), (1-delta) / (1+e^eps), 0)`` and ``Q`` its mirror.

    Both masses are computed from ``t = e^-eps``, each to a few ``u`` relative.  (The small one
    was ``(1-delta) - `` the large one: at eps = 30 it kept three digits, so the pair's loss was
    30.001, not 30, and its lower bounds were above the true epsilon; from eps = 37 on it was 0,
    a mutually singular pair whose delta is 1 at every epsilon.)  Beyond
    :data:`EPSILON_DELTA_PAIR_MAX` the small mass is below double's normal range: use
    :func:`epsilon_delta_pairs` (a bracketing).

    Example::

        >>> p, q = epsilon_delta_pair(40.0, 1e-9)
        >>> round(math.log(p[1] / p[2]), 12)
        40.0
    """
    t = math.exp(-epsilon)
    a = (1 - delta) / (1 + t)
    b = (1 - delta) * t / (1 + t)
    return [delta, a, b, 0.0], [0.0, b, a, delta]


def epsilon_delta_pairs(epsilon: float, delta: float):
    """``(dominating, dominated)`` mechanism pairs of an (epsilon, delta)-DP step: the pair of
    :func:`epsilon_delta_pair` for both up to :data:`EPSILON_DELTA_PAIR_MAX`; beyond it the
    dominating pair has its small mass at 0 (loss +inf where P has mass ``a``: the pair of
    epsilon = inf, which dominates every pair) and the dominated one is the pair of epsilon =
    700: that pair is (700, delta)-DP, hence (epsilon, delta)-DP, and every (epsilon, delta)-DP
    pair is dominated by the (epsilon, delta) pair (Kairouz, Oh, Viswanath 2015, Thm 2.1)."""
    if epsilon <= EPSILON_DELTA_PAIR_MAX:
        pair = mechanisms.discrete_pair(*epsilon_delta_pair(epsilon, delta), symmetric=True)
        return pair, pair
    dominating = mechanisms.discrete_pair([delta, 1 - delta, 0.0, 0.0],
                                          [0.0, 0.0, 1 - delta, delta], symmetric=True)
    dominated = mechanisms.discrete_pair(*epsilon_delta_pair(EPSILON_DELTA_PAIR_MAX, delta),
                                         symmetric=True)
    return dominating, dominated


def poisson_gaussian_pld(history, h: float, *, neighbouring: str = "add_remove",
                         tail_mass: float = 1e-15, memory_limit: int = 1 << 30,
                         loss_range_tail: float = SINGLE_TAIL) -> PrivacyLossDistribution:
    """PLD of a run-length history of Poisson-subsampled Gaussian steps on grid step ``h``.

    Identical ``(sigma, q)`` runs share one component, so the FFT work grows with the number of
    distinct settings, not with the number of steps.  ``loss_range_tail``: see
    :meth:`~dpplugins.pld.PrivacyLossDistribution.from_mechanism`.
    """
    counts: dict[tuple[float, float], int] = {}
    for sigma, q, steps in history:
        counts[(sigma, q)] = counts.get((sigma, q), 0) + steps
    return PrivacyLossDistribution.composition([
        poisson_gaussian_step(sigma, q, h, neighbouring=neighbouring, tail_mass=tail_mass,
                              memory_limit=memory_limit,
                              loss_range_tail=loss_range_tail).self_compose(steps)
        for (sigma, q), steps in counts.items()])


#: per-step PLDs by (sigma, q, neighbouring, h, tail_mass, memory_limit, loss_range_tail), least
#: recently used last; bounded by the number of grid bins they hold (``_STEP_CACHE_BINS``)
_STEP_CACHE: "OrderedDict[tuple, tuple[PrivacyLossDistribution, int]]" = OrderedDict()
#: about 16 bytes a bin (two masses), so at most about 128 MiB
_STEP_CACHE_BINS = 2 ** 23
_STEP_CACHE_LOCK = threading.Lock()
#: grid bins the cache holds (kept with it, so an insertion costs no pass over the cache)
_step_cache_bins = 0


def poisson_gaussian_step(sigma: float, q: float, h: float, *, neighbouring: str = "add_remove",
                          tail_mass: float = 1e-15, memory_limit: int = 1 << 30,
                          loss_range_tail: float = SINGLE_TAIL) -> PrivacyLossDistribution:
    """PLD of one Poisson-subsampled Gaussian step on grid step ``h``, cached by its parameters
    (the same step in a later query, or in another accountant, is not discretised again).  The
    cache is process-wide, holds at most ``_STEP_CACHE_BINS`` grid bins and is keyed by every
    parameter of the construction, so a different step can never reuse a value.

    Example::

        >>> step = poisson_gaussian_step(1.0, 0.01, 1e-3)
        >>> step is poisson_gaussian_step(1.0, 0.01, 1e-3)
        True
    """
    key = (float(sigma), float(q), neighbouring, float(h), float(tail_mass), int(memory_limit),
           float(loss_range_tail))
    with _STEP_CACHE_LOCK:
        found = _STEP_CACHE.get(key)
        if found is not None:
            _STEP_CACHE.move_to_end(key)
            return found[0]
    step = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        sigma, q, neighbouring=neighbouring, value_discretization_interval=h,
        tail_mass=tail_mass, memory_limit=memory_limit, loss_range_tail=loss_range_tail)
    # a lower-bound PMF not built yet counts as one as long as the upper one (its bins are
    # held until it is built, and it lies on the same grid)
    size = sum(len(c.upper.pmf) * (2 if c.has_lower else 1)
               for d in ("remove", "add") for c, _ in step._directions[d])
    global _step_cache_bins
    with _STEP_CACHE_LOCK:
        old = _STEP_CACHE.pop(key, None)
        if old is not None:
            _step_cache_bins -= old[1]
        _STEP_CACHE[key] = (step, size)
        _step_cache_bins += size
        while _step_cache_bins > _STEP_CACHE_BINS and len(_STEP_CACHE) > 1:
            _, (_, n) = _STEP_CACHE.popitem(last=False)
            _step_cache_bins -= n
    return step


def clear_step_cache() -> None:
    """Empty the process-wide cache of per-step PLDs (benchmarks use it to start cold)."""
    global _step_cache_bins
    with _STEP_CACHE_LOCK:
        _STEP_CACHE.clear()
        _step_cache_bins = 0


#: what the basic-composition cap of :meth:`PLDAccountant._basic_composition` is (the warning
#: of :meth:`~dpplugins.accountants.base.Accountant._capped` says it)
_BASIC_CAP = "the upper one is capped by basic composition (a step the grid cannot represent)"


def _component_bins(plds) -> int:
    """Grid bins of the distinct components (each object once, by identity) that the PLDs
    ``plds`` hold: the upper and lower PMFs of both directions, a lower PMF not built yet
    counted as long as the upper one (the interval masses it is built from are held until
    then).  A composed PLD keeps its components alive: 2,000 distinct steps queried at six
    deltas held 4.3 GB in the composed PLDs an accountant kept, whose compositions alone were
    within the cache's bound."""
    seen: set[int] = set()
    total = 0
    for pld in plds:
        for direction in pld._directions.values():
            for component, _ in direction:
                if id(component) in seen:
                    continue
                seen.add(id(component))
                upper = len(component.upper.pmf)
                lower = component.lower_source()
                total += upper + (len(lower.pmf) if hasattr(lower, "pmf")
                                  else upper if lower is not None else 0)
    return total


@functools.lru_cache(maxsize=2 ** 16)
def _loss_span(sigma: float, q: float, neighbouring: str, loss_range_tail: float) -> float:
    """Width of the loss range of one Poisson-subsampled Gaussian step's grid (its widest
    direction, as :func:`~dpplugins.pld.distribution.component_bins` sizes it; 0 where that
    cannot be computed, as :meth:`PLDAccountant._grid_bins` skips it): its grid on step ``h``
    has ``span / h + 4`` bins.  Cached, so that a query over 10,000 distinct steps sizes its
    grids once."""
    try:
        pairs = mechanisms.poisson_subsampled_gaussian(grid_noise_multiplier(sigma), q,
                                                       neighbouring=neighbouring)
        return max(component_bins(pairs, 1.0, loss_range_tail) - 4.0, 0.0)
    except (ArithmeticError, ValueError):
        return 0.0


def _with_gap(bounds: Bounds) -> tuple[Bounds, float]:
    """The bounds and their relative gap ``(upper - lower) / upper``."""
    return bounds, (bounds.upper - bounds.lower) / bounds.upper if bounds.upper > 0 else 0.0


class PLDAccountant(Accountant):
    """Privacy loss distribution accountant with certified lower and upper bounds.

    Each step is the Poisson-subsampled Gaussian mechanism (sampling rate ``q``, noise multiplier
    ``sigma``; ``q = 1`` is the plain Gaussian).  The PLD is discretised with connect-the-dots
    (upper) and the tangent construction (lower) and composed by FFT with certified truncation and
    floating-point terms (:mod:`dpplugins.pld`).  The grid step is chosen so that
    ``(upper - lower) / upper <= eps_tolerance``; if the memory limit does not allow that,
    :class:`~dpplugins.errors.NumericalError` says what to change.

    Work is reused and memory bounded.  Per-step PLDs are cached process-wide by their
    parameters and grid (:func:`poisson_gaussian_step`; at most ``2^23`` bins, about 128 MiB),
    and so are their spectra at each transform size (:mod:`dpplugins.pld.spectra`; at most
    64 MiB; neither cache counts against ``memory_limit``, which bounds each query),
    grid steps lie on a ladder of powers of ``2^(1/4)`` so that queries after more steps share
    them, and each accountant keeps its last few composed PLDs keyed by the history and the grid
    (at most 8, holding at most ``2^22`` grid bins, about 160 MiB: the bins of their
    compositions and of the distinct per-step PLDs they are composed of, which they keep alive;
    never in ``state_dict``; guarded by the accountant's lock): a repeated or follow-up query
    on the same history reuses their FFT compositions, and a delta query is also checked
    against them, so ``get_delta(get_epsilon(d)) <= d``.  A query starts on the grid that met
    the tolerance at the previous query on the same settings when that is close to its own
    first grid (``_remember_grid``): after one more epoch the per-step PLDs and their spectra
    are then reused, and a first grid that the
    previous query found too coarse is not tried again.  So the bounds can depend on which
    queries came before (each answer is certified either way, and held to the same
    ``eps_tolerance``).  A changed history has another key, so it never reuses a stale value.
    ``value_discretization_interval`` is at most ``dpplugins.errors.MAX_GRID_STEP`` (1); one
    component uses at most ``memory_limit / 256`` bins (a smaller
    ``value_discretization_interval`` is a ParameterError naming the smallest valid one) and
    the first grid at most ``2^17`` bins per component; refinement stops (with an
    :class:`~dpplugins.pld.AccuracyWarning`) before ``2^20`` bins per component or an FFT window
    of ``2^22`` bins (or ``memory_limit / 128``, the memory a window's bin takes; above that a
    composition refuses).  The grids of a query's distinct steps (one per-step PLD per distinct
    setting, all held while the query composes them: about 48 bytes a bin and 8 KiB each,
    :func:`~dpplugins.pld.distribution.held_component_bytes`) hold at most half of
    ``memory_limit``, and the first grid and the refinements keep the FFT window within the
    rest.  A history of many distinct steps (10,000 distinct noise multipliers) thus gets a
    grid as coarse as that needs: its bounds stay certified, and when the gap is then above
    ``eps_tolerance`` an :class:`~dpplugins.pld.AccuracyWarning` says that memory_limit limited
    it (raise memory_limit for tighter bounds); when even the coarsest grid step
    (``MAX_GRID_STEP``) does not fit, the query raises
    :class:`~dpplugins.errors.NumericalError` naming memory_limit and the bytes it needs.  The
    same holds for the distinct leaves of a history with Laplace, randomized-response or
    (epsilon, delta) steps.  Deltas far in the tail (below ``1e-3 *
    tail_mass`` by a Chernoff certificate on a coarse grid) are answered by that certificate.

    Sources: Koskela, Jälkö, Prediger, Honkela (2021), Alg. 1 and Sec. 6.3 (PLD of the subsampled
    Gaussian, FFT composition); Doroshenko et al. (2022), Thm 4.1 (connect the dots); Zhu, Dong,
    Wang (2022), Thm 10-11 (dominating pairs for Poisson subsampling and their composition).

    Example::

        >>> from dpplugins.accountants import create
        >>> acc = create("pld")
        >>> acc.step(noise_multiplier=1.0, sample_rate=0.01, count=10_000)
        >>> lower, upper = acc.get_epsilon_bounds(delta=1e-5)   # about 6.19 for both
    """

    name: ClassVar[str] = "pld"
    theorem: ClassVar[str] = ("PLD/FFT composition of the Poisson-subsampled Gaussian "
                              "(Koskela et al. 2021, Alg. 1) with connect-the-dots bounds "
                              "(Doroshenko et al. 2022, Thm 4.1); under replace-one the "
                              "antipodal one-dimensional pair, numerically checked as the worst "
                              "case (no proof found)")
    _option_names = ("neighbouring", "eps_tolerance", "value_discretization_interval",
                     "tail_mass", "memory_limit")

    def __init__(self, *, neighbouring: str = "add_remove", eps_tolerance: float = 1e-3,
                 value_discretization_interval: float | None = None, tail_mass: float = 1e-15,
                 memory_limit: int = 1 << 30) -> None:
        super().__init__(neighbouring=neighbouring)
        self.eps_tolerance = check_positive("eps_tolerance", eps_tolerance)
        self.value_discretization_interval = (
            None if value_discretization_interval is None
            else check_grid_step("value_discretization_interval", value_discretization_interval))
        self.tail_mass = check_positive("tail_mass", tail_mass)
        # an integer number of bytes, at least 1 MiB (as balls_and_bins): 2.5 was truncated to
        # 2 and every query then refused with a window limit of 0 bins
        self.memory_limit = check_count("memory_limit", memory_limit, minimum=1 << 20)
        self._plds: OrderedDict = OrderedDict()

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_plds"] = OrderedDict()  # a cache: never saved
        state["_grid_hint"] = OrderedDict()
        return state

    def _plds_cache(self) -> OrderedDict:
        plds = self.__dict__.get("_plds")
        if plds is None:
            plds = self._plds = OrderedDict()
        return plds

    def _cached_pld(self, key: tuple, build) -> PrivacyLossDistribution:
        """The composed PLD of ``key`` (history and grid step), built once; the few most recent
        are kept, so later queries on the same history reuse their FFT compositions (the
        accountant's lock is held by every query)."""
        with self._lock:
            plds = self._plds_cache()
            if key in plds:
                plds.move_to_end(key)
                pld = plds[key]
            else:
                pld = build()
                plds[key] = pld
            # bounded: drop the least recently used beyond the count or the bins (this is called
            # before every evaluation on a PLD, so compositions added by a query are counted at
            # the next one)
            while plds and (len(plds) > _PLD_CACHE_SIZE or self._cache_bins(plds)
                            > _PLD_CACHE_BINS):
                plds.popitem(last=False)
            return pld

    @staticmethod
    def _cache_bins(plds: OrderedDict) -> int:
        """Grid bins the cached PLDs hold: their compositions and their distinct components
        (:func:`_component_bins`), which a PLD keeps alive after the per-step cache let them
        go."""
        return (sum(p.cached_bins() for p in plds.values())
                + _component_bins(list(plds.values())))

    def _grid_hints(self) -> OrderedDict:
        hints = self.__dict__.get("_grid_hint")
        if hints is None:
            hints = self._grid_hint = OrderedDict()
        return hints

    def _remember_grid(self, settings: tuple, h: float, gap: float, steps: int) -> None:
        """Remember ``h`` as the grid that met the tolerance for ``settings`` (the distinct
        ``(sigma, q)`` of a history, without counts) with relative gap ``gap`` after ``steps``
        steps: the next query on them -- typically after one more epoch -- starts there when it
        is close to its own first grid (see :data:`_STICKY_FINER`).  Which grid a query
        starts on changes its cost, never the validity of its bounds."""
        with self._lock:
            hints = self._grid_hints()
            hints[settings] = (h, gap, steps)
            hints.move_to_end(settings)
            while len(hints) > _STICKY_GRID_SETTINGS:
                hints.popitem(last=False)

    def _plds_of(self, history_key: tuple) -> list[PrivacyLossDistribution]:
        """The cached PLDs of one history (every grid it was evaluated on)."""
        return [pld for key, pld in list(self._plds_cache().items()) if key[0] == history_key]

    def _supports_leaf(self, event: Event) -> bool | str:
        if is_poisson_gaussian(event) or isinstance(event, (LaplaceEvent, EpsilonDeltaEvent)):
            return True
        if isinstance(event, RandomizedResponseEvent):
            return True
        if isinstance(event, PoissonSampledEvent) and isinstance(event.event, LaplaceEvent):
            if self.neighbouring == "add_remove":
                return True
            return "Poisson-subsampled Laplace is accounted for add/remove neighbours"
        return ("Gaussian or Laplace noise, on a Poisson subsample or on the whole data, "
                "randomized response or an (epsilon, delta) mechanism")

    # -- mechanisms other than the (subsampled) Gaussian ------------------------------------------
    def _sensitivity(self) -> float:
        """L2 (Gaussian) or L1 (Laplace) sensitivity of a step whose noise is given relative to
        the add/remove sensitivity: replacing one example moves the sum twice as far."""
        return 2.0 if self.neighbouring == "replace_one" else 1.0

    def _pairs(self, leaf: Event):
        """Worst-case pairs of one leaf event (:mod:`dpplugins.mechanisms`)."""
        if is_poisson_gaussian(leaf):
            sigma, q = ((leaf.noise_multiplier, 1.0) if isinstance(leaf, GaussianEvent)
                        else (leaf.event.noise_multiplier, leaf.sample_rate))
            return mechanisms.poisson_subsampled_gaussian(sigma, q, 1.0,
                                                          neighbouring=self.neighbouring)
        if isinstance(leaf, LaplaceEvent):
            # the noise scale is relative to the add/remove sensitivity; replacing one example
            # moves the sum twice as far with the same noise
            return mechanisms.laplace(leaf.scale, self._sensitivity())
        if isinstance(leaf, PoissonSampledEvent):
            return mechanisms.poisson_subsampled_laplace(leaf.event.scale, leaf.sample_rate, 1.0)
        if isinstance(leaf, RandomizedResponseEvent):
            # (beyond epsilon0 = 700 both carry the dominated pairs for the lower bounds)
            if self.neighbouring == "replace_one":
                return mechanisms.k_randomized_response(leaf.epsilon0, leaf.num_buckets)
            return zero_out_randomized_response(leaf.epsilon0, leaf.num_buckets)
        return epsilon_delta_pairs(leaf.epsilon, leaf.delta)[0]

    def _max_losses(self, leaf: Event) -> tuple[float, float]:
        """The largest privacy loss of one leaf in the remove and in the add direction (its
        pure-DP epsilon is the larger; inf if there is none)."""
        if is_poisson_gaussian(leaf):
            return math.inf, math.inf
        if isinstance(leaf, LaplaceEvent):
            value = self._sensitivity() / leaf.scale
            return value, value
        if isinstance(leaf, PoissonSampledEvent):   # Laplace on a Poisson subsample
            # log(1 - q + q e^(+-a)), a = 1/b (the pair's loss at its ends; mechanisms.
            # poisson_subsampled_laplace); in log space where e^a overflows (a scale below
            # 1/709 raised an OverflowError, reported as a count beyond the float range)
            q, a = leaf.sample_rate, 1.0 / leaf.event.scale
            if a < 700.0:
                return math.log1p(q * math.expm1(a)), -math.log1p(-q * -math.expm1(-a))
            with np.errstate(divide="ignore"):
                log_rest, log_q = float(np.log1p(-q)), math.log(q)
                return (float(np.logaddexp(log_rest, log_q + a)),
                        -float(np.logaddexp(log_rest, log_q - a)))
        if isinstance(leaf, RandomizedResponseEvent):
            if self.neighbouring == "replace_one":
                return leaf.epsilon0, leaf.epsilon0
            # zero-out pair (zero_out_rr_pair): log(k e / (e + k - 1)) on the true bucket and
            # log((e + k - 1) / k) on the others, e = e^eps0, in log space (the pair's masses
            # underflow to 0 beyond eps0 = 700, which divided by zero)
            k, eps0 = leaf.num_buckets, leaf.epsilon0
            spread = math.log1p((k - 1) * math.exp(-eps0))
            return math.log(k) - spread, eps0 + spread - math.log(k)
        value = leaf.epsilon if leaf.delta == 0 else math.inf
        return value, value

    def _max_loss(self, leaf: Event) -> float:
        """The largest privacy loss of one leaf (its pure-DP epsilon; inf if none)."""
        return max(self._max_losses(leaf))

    def _pure_epsilon_bounds(self, history) -> Bounds:
        """Exact epsilon at delta = 0: the larger over the two directions of the sum of the
        per-step largest losses (for these mechanisms the largest losses of all steps occur
        together in each direction, so the sum is attained; Dwork & Roth 2014, Thm 3.16 gives
        it as an upper bound)."""
        leaves = private_leaves(history)
        remove = math.fsum(self._max_losses(leaf)[0] * count for leaf, count in leaves)
        add = math.fsum(self._max_losses(leaf)[1] * count for leaf, count in leaves)
        total = max(remove, add)
        if math.isinf(total):
            return Bounds(math.inf, math.inf)
        return Bounds(total * (1 - 1e-12), total * (1 + 1e-12))

    def _basic_composition(self, history) -> tuple[float, float]:
        """``(sum count_i eps_i, sum count_i delta_i)``, both rounded up: the history is
        (eps, delta)-DP by the basic composition theorem (Dwork & Roth 2014, Thm 3.16) over the
        leaves' own guarantees -- an (eps, delta) step's, the largest loss of a pure-DP step
        (eps inf with Gaussian steps).  It caps the PLD's bounds where the grid cannot represent
        a step: an (eps, delta) step with eps above :data:`EPSILON_DELTA_PAIR_MAX`, whose
        dominating pair there is that of eps = inf."""
        total_eps, total_delta = [], []
        for leaf, count in private_leaves(history):
            if isinstance(leaf, EpsilonDeltaEvent):
                total_eps.append(leaf.epsilon * count)
                total_delta.append(leaf.delta * count)
            else:
                total_eps.append(self._max_loss(leaf) * count)
        eps, delta = math.fsum(total_eps), math.fsum(total_delta)
        return (eps * (1 + 1e-12) if math.isfinite(eps) else math.inf,
                min(1.0, delta * (1 + 1e-12)))

    def _basic_composition_epsilon(self, history, delta: float) -> float:
        """The epsilon of :meth:`_basic_composition` if ``delta`` is at least its delta, else
        inf (an upper bound on epsilon(delta) either way)."""
        eps, total_delta = self._basic_composition(history)
        return eps if delta >= total_delta else math.inf

    def _generic_counts(self, history) -> dict[Event, int]:
        counts: dict[Event, int] = {}
        for leaf, count in private_leaves(history):
            counts[leaf] = counts.get(leaf, 0) + count
        return counts

    def _generic_pld(self, counts: dict[Event, int], h: float) -> PrivacyLossDistribution:
        key = (("generic",) + tuple(sorted(((repr(leaf), k) for leaf, k in counts.items()))), h)

        def build():
            total = None
            for leaf, count in counts.items():
                options = dict(value_discretization_interval=h, tail_mass=self.tail_mass,
                               memory_limit=self.memory_limit)
                if isinstance(leaf, EpsilonDeltaEvent) and \
                        leaf.epsilon > EPSILON_DELTA_PAIR_MAX:
                    part = PrivacyLossDistribution.from_bracketing_pairs(
                        *epsilon_delta_pairs(leaf.epsilon, leaf.delta), **options)
                else:
                    part = PrivacyLossDistribution.from_mechanism(self._pairs(leaf), **options)
                part = part.self_compose(count)
                total = part if total is None else total.compose(part)
            return total
        return self._cached_pld(key, build)

    def _lattice_step(self, counts: dict[Event, int]) -> float | None:
        """A grid step on which every finite privacy loss of every leaf lies exactly (discrete
        pairs whose losses are integer multiples of one value, e.g. binary randomized response
        under replace-one: +-eps0), or None.  On such a grid both constructions are the exact
        PLD up to rounding (our derivation: connect-the-dots moves no mass off an atom that sits
        on a grid point, Doroshenko et al. 2022, Thm 4.1; and the privacy profile of a PLD with
        atoms on grid points only is linear in ``e^eps`` between grid points, so the tangent at
        one grid point meets the profile at the next and the tangent construction is exact
        too), so one grid answers and no refinement could narrow the gap."""
        losses = []
        for leaf in counts:
            for pair in self._pairs(leaf).pairs.values():
                if not isinstance(pair, DiscretePair):
                    return None
                both = (pair.p > 0) & (pair.q > 0)
                values = np.abs(pair.losses()[both])
                losses.extend(float(v) for v in values if v > 0)
        if not losses:
            return None
        base = min(losses)
        if not 1e-6 <= base <= 600.0:
            return None
        ratios = np.asarray(losses) / base
        if np.all(np.abs(ratios - np.round(ratios)) <= 1e-9 * ratios) and ratios.max() <= 1e5:
            return base
        return None

    def _fit_atoms(self, counts: dict[Event, int], h: float) -> float:
        """``h`` shrunk (by less than a step in ``ceil(loss / h)``) so that the atom at the
        largest loss of a Laplace step lies on a grid point
        (:func:`~dpplugins.pld.distribution.atom_grid_step`): connect-the-dots and the tangent
        construction are then exact for it (second order in ``h`` for the rest), where an atom
        between grid points costs the lower bound a first-order error.  The Laplace leaf with
        the most steps decides; other leaves are valid on any grid."""
        laplace = [(count, leaf) for leaf, count in counts.items()
                   if isinstance(leaf, LaplaceEvent)]
        if not laplace:
            return h
        _, leaf = max(laplace, key=lambda item: (item[0], item[1].scale))
        atom = laplace_top_atom(self._pairs(leaf).pairs["remove"])
        if atom is None or not atom[0] >= h:
            # (an atom below one grid step, e.g. scale 1e308: fitting would shrink the step to
            # the atom's loss; the grid stays, valid, only the lower bound is less tight)
            return h
        return atom_grid_step(atom[0], h)

    def _fit_within(self, counts: dict[Event, int], h: float, floor: float) -> float:
        """:meth:`_fit_atoms` of ``h`` unless that shrinks it below ``floor`` (the finest grid
        step within the memory share, :meth:`_memory_floor`): then ``h`` itself (valid on any
        grid; only the lower bound of a Laplace step is less tight)."""
        fitted = self._fit_atoms(counts, h)
        return fitted if fitted >= floor else h

    def _generic(self, history, evaluate, evaluate_upper=None) -> Bounds:
        """Bounds for histories with Laplace, randomized-response or (eps, delta) steps: one
        PLD component per distinct leaf, composed by FFT, on grids refined until the relative
        gap is within ``eps_tolerance`` (or the best certified bounds reached; a finer grid is
        tried only while one component stays within ``_MAX_REFINE_BINS`` bins).

        Bounded work, chosen deterministically (never by the clock, so answers are
        reproducible): at most four grids, each FFT window at most ``_GENERIC_WINDOW_BUDGET``
        bins (the refinement step is capped so that the next window fits); once the target is
        met, one more grid (a half to a tenth of the step, as ``_BONUS_WINDOW`` bins allow) is
        composed for the upper bound alone (``evaluate_upper(pld) -> Bounds``; both bounds when
        None): it only intersects, so it can only tighten, and it keeps the upper bound as tight
        as the longer refinements that a loose lower bound used to force.  Laplace steps get a grid step with their top atom on a grid point
        (:meth:`_fit_atoms`).  A target that is not met returns the certified bounds with an
        :class:`~dpplugins.pld.AccuracyWarning` naming what stopped the refinement.  As in
        :meth:`_refine`, no grid is finer than the distinct leaves' share of ``memory_limit``
        allows (:meth:`_memory_floor`)."""
        counts = self._generic_counts(history)
        lattice = None if self.value_discretization_interval else self._lattice_step(counts)
        scale = min(min(self._max_loss(leaf), 1.0) if math.isfinite(self._max_loss(leaf))
                    else 1.0 for leaf in counts)
        span, count = self._generic_span(counts)
        if self.value_discretization_interval or lattice:
            self._check_held(span, count, self.value_discretization_interval or lattice)
            memory_floor = 0.0
        else:
            # the finest grid whose distinct leaves fit in their share of memory_limit
            memory_floor = self._memory_floor(span, count)
        h = self.value_discretization_interval or lattice or self._fit_within(counts, max(float(
            np.clip(scale / 40.0, _MIN_H, _MAX_H)), memory_floor), memory_floor)
        best, previous_gap, reason = None, None, "four grids were tried"
        bonus = False  # one extra grid within the small-window budget, after the target is met
        for _ in range(4):
            try:
                pld = self._generic_pld(counts, h)
                if bonus and evaluate_upper is not None:
                    upper_only = evaluate_upper(pld)
                    bounds, gap = Bounds(0.0, upper_only.upper), 1.0
                else:
                    bounds, gap = evaluate(pld)
            except NumericalError as error:
                if best is not None:
                    reason = f"a finer grid could not be evaluated ({getattr(error, 'what', error)})"
                    break
                raise
            if best is not None:
                # every grid certifies: intersect (a crossing between grids raises)
                bounds = certified_bounds(max(bounds.lower, best.lower),
                                          min(bounds.upper, best.upper), "the queried value")
                gap = (bounds.upper - bounds.lower) / bounds.upper if bounds.upper > 0 else 0.0
            best = bounds
            if self.value_discretization_interval is not None or lattice is not None or bonus:
                return bounds
            width = bounds.upper - bounds.lower
            if not (math.isfinite(width) and math.isfinite(gap)):
                return bounds
            window = pld.largest_window()
            if gap <= self.eps_tolerance:
                # target met: one more grid for the upper bound (a half to a tenth of the step,
                # as the window allows) if its window stays within the bonus budget -- a
                # deterministic work budget, not the clock
                bonus_budget = min(_BONUS_WINDOW, window_limit(self.memory_limit), _MAX_REFINE_WINDOW)
                if 2 * window > bonus_budget or width <= 0:
                    return bounds
                bonus, ratio = True, float(np.clip(window / bonus_budget, 0.1, 0.5))
            else:
                if previous_gap is not None and width > 0.75 * previous_gap:
                    reason = "refining the grid stopped narrowing it"
                    break
                previous_gap = width
                # the connect-the-dots gap is second order in h (Doroshenko et al. 2022, Sec. 4);
                # the next window is at most _GENERIC_WINDOW_BUDGET bins (time bounded by work,
                # not by the clock, so answers are reproducible)
                ratio = float(np.clip(0.8 * math.sqrt(self.eps_tolerance / gap), 0.1, 0.8))
                budget = min(window_limit(self.memory_limit), _MAX_REFINE_WINDOW, _GENERIC_WINDOW_BUDGET)
                if window > 0 and window / ratio > budget:
                    ratio = window / budget
                    if ratio > 0.8:
                        reason = (f"a finer grid needs an FFT window above {budget:,} bins "
                                  "(the work budget of a query)")
                        break
            wanted = max(h * ratio, _MIN_H)
            if wanted < memory_floor:
                # the distinct leaves' grids would not fit their share of memory_limit
                if bonus:
                    return best
                if memory_floor > 0.8 * h:
                    reason = self._memory_reason(span, count, wanted)
                    break
                wanted = memory_floor
            h = self._fit_within(counts, wanted, memory_floor)
            bins = max(component_bins(self._pairs(leaf), h) for leaf in counts)
            if not bins <= min(component_bin_limit(self.memory_limit), _MAX_REFINE_BINS):
                if bonus:
                    return best
                reason = f"a finer grid needs more than {_MAX_REFINE_BINS:,} bins per component"
                break
        if best.upper > 0 and (best.upper - best.lower) > self.eps_tolerance * best.upper:
            warnings.warn(
                f"{self.name}: certified bounds [{best.lower:.6g}, {best.upper:.6g}] have a "
                f"relative gap of {(best.upper - best.lower) / best.upper:.3g}, above "
                "eps_tolerance="
                f"{self.eps_tolerance:g}: {reason}. The bounds are valid; the upper one is the "
                "certified value", AccuracyWarning, stacklevel=4)
        return best

    # -- grid ---------------------------------------------------------------------------------
    def initial_grid_step(self, history, loss_range_tail: float = SINGLE_TAIL) -> float:
        """First grid step: the step at which the relative gap is predicted to be 0.6 times
        ``eps_tolerance``, so that one grid usually meets the tolerance.

        The prediction (numerically checked, not derived): on the grid ``h = s / 40``, with
        ``s`` the per-step loss scale of :func:`loss_scale`, the relative gap of epsilon at
        delta 1e-5 and 1e-10 was ``c / 1600`` with ``c`` between 0.01 and 2.2 and about ``0.55
        (T / 10^4)^0.1`` for ``T`` steps (sigma 0.6 to 4, q 0.001 to 0.1, T 100 to 10^5; 96
        settings); the gap of connect-the-dots bounds is second order in ``h``.  So ``h = s
        sqrt(0.6 eps_tolerance / c(T))``: ``s / 30`` at the default tolerance and 10^4 steps
        (a tolerance below 1e-4 counts as 1e-4 here: refinement goes further, and the grid
        holds at most ``2^17`` bins per component and what ``memory_limit`` allows).
        A setting whose gap is larger gets a finer grid from the refinement loop; one whose
        gap is smaller is answered on this grid.

        With several settings the per-step scale is the root mean square ``sqrt(sum_i T_i s_i^2 /
        sum_i T_i)``: ``T h^2`` against the composed variance ``sum_i T_i s_i^2`` is then the same
        as for a single setting, and a run whose loss is negligible (a tiny sample rate) does not
        set the grid for all the others.  ``loss_range_tail``: of the grids the query builds
        (:func:`loss_range_tail_for`), which sets their number of bins."""
        if self.value_discretization_interval is not None:
            return self.value_discretization_interval
        scale = self._scale(history)
        steps = max(sum(t for _, _, t in history), 1)
        predicted = _GAP_AT_40 * (steps / 1e4) ** _GAP_STEPS_EXPONENT
        # a tolerance below 1e-4 is approached by refinement (its first grid would be huge)
        target = _FIRST_GRID_GAP * max(self.eps_tolerance, _FIRST_GRID_MIN_TOLERANCE)
        ratio = math.sqrt(target / predicted) * 40.0
        bins = min(_FIRST_GRID_BINS, component_bin_limit(self.memory_limit))
        return self._on_ladder(history, scale / 40.0 * ratio, bins, loss_range_tail)

    def _scale(self, history) -> float:
        scales = [(loss_scale(sigma, q), t) for sigma, q, t in history]
        steps = sum(t for _, _, t in history)
        if len({value for value, _ in scales}) == 1:
            return scales[0][0]
        with np.errstate(over="ignore"):
            variance = sum(t * value * value for value, t in scales)
        return math.sqrt(variance / steps) if math.isfinite(variance) else math.inf

    def _on_ladder(self, history, h: float, max_bins: int = _FIRST_GRID_BINS,
                   loss_range_tail: float = SINGLE_TAIL) -> float:
        """``h`` clipped to ``[_MIN_H, _MAX_H]`` and rounded down (finer) to a power of
        ``2^(1/4)``, so that queries after more steps share grids, and with them the cached
        per-step PLDs; but no finer than needed to keep one component within ``max_bins`` bins
        (a run with a long loss tail and a tiny loss scale, e.g. q = 1e-5, would otherwise need
        millions)."""
        h = _ladder_down(float(np.clip(h, _MIN_H, _MAX_H)))
        cap = max(self._grid_bins(history, 1.0, loss_range_tail) - 4.0, 0.0) / (max_bins - 4)
        h = _ladder_up(cap) if cap > h else h
        return max(h, self._memory_floor(*self._held_span(history, loss_range_tail)))

    # -- memory of the distinct steps' grids ------------------------------------------------------
    def _held_span(self, history, loss_range_tail: float = SINGLE_TAIL) -> tuple[float, int]:
        """``(total loss-range width, number)`` of the distinct ``(sigma, q)`` of a run-length
        history: their per-step PLDs on grid step ``h`` hold
        :func:`~dpplugins.pld.distribution.held_component_bytes` ``(span, number, h)`` bytes
        while a query composes them (all at once: the sum, not the largest)."""
        settings = {(float(sigma), float(q)) for sigma, q, _ in history}
        tail = float(loss_range_tail)
        return (math.fsum(_loss_span(sigma, q, self.neighbouring, tail) for sigma, q in settings),
                len(settings))

    def _generic_span(self, counts: dict[Event, int]) -> tuple[float, int]:
        """:meth:`_held_span` of the distinct leaves of a history with Laplace, randomized
        response or (eps, delta) steps."""
        return (math.fsum(max(component_bins(self._pairs(leaf), 1.0) - 4.0, 0.0)
                          for leaf in counts), len(counts))

    def _component_budget(self) -> float:
        """Bytes the grids of one query's distinct steps may hold: ``_COMPONENT_SHARE`` of
        ``memory_limit`` (the rest is for the FFT window)."""
        return _COMPONENT_SHARE * self.memory_limit

    def _memory_floor(self, span: float, count: int) -> float:
        """The finest grid step on the ladder on which ``count`` distinct steps of total
        loss-range width ``span`` (:meth:`_held_span`) hold at most :meth:`_component_budget`
        bytes (0 when they have no loss range).  When even the coarsest grid step
        (``MAX_GRID_STEP``) does not fit, NumericalError naming ``memory_limit`` and the bytes
        it needs: 10,000 distinct steps held 0.45 MB each on the first grid, 5 GB in all under
        the default limit of 1 GiB, since only one component's bins were checked against it."""
        h = finest_held_step(span, count, self._component_budget())
        if h > MAX_GRID_STEP:
            held = held_component_bytes(span, count, MAX_GRID_STEP)
            raise NumericalError(
                f"the grids of the {count:,} distinct steps of this history would hold "
                f"{held:,.0f} bytes even on the coarsest grid step ({MAX_GRID_STEP:g}), more "
                f"than half of memory_limit={self.memory_limit:,} bytes (the other half is for "
                "the FFT window)",
                f"raise memory_limit to at least {math.ceil(held / _COMPONENT_SHARE):,} bytes")
        return _ladder_up(h * (1 + 1e-9)) if h > 0 else 0.0

    def _check_held(self, span: float, count: int, h: float) -> None:
        """Refuse a grid step ``h`` fixed by the caller (``value_discretization_interval``, or
        a lattice step) on which the grids of the distinct steps would hold more than
        :meth:`_component_budget` bytes: a ParameterError naming
        ``value_discretization_interval`` and the smallest valid one (as a step too fine for
        one component is), or NumericalError naming ``memory_limit`` when no step fits or the
        step is a lattice's."""
        budget = self._component_budget()
        held = held_component_bytes(span, count, h)
        if held <= budget:
            return
        needed = held / _COMPONENT_SHARE
        raise_to = (f"raise memory_limit to at least {math.ceil(needed):,} bytes"
                    if math.isfinite(needed) else "use a coarser grid step")
        smallest = finest_held_step(span, count, budget)
        if self.value_discretization_interval is not None and math.isfinite(smallest):
            raise ParameterError(
                "value_discretization_interval", h,
                f">= {smallest:.3g} for the {count:,} distinct steps of this history (their "
                f"grids may hold half of memory_limit={self.memory_limit:,} bytes, the other "
                "half is for the FFT window)",
                f"Or {raise_to}" if math.isfinite(needed) else "")
        raise NumericalError(
            f"the grids of the {count:,} distinct steps of this history would hold "
            f"{held:,.3g} bytes on grid step {h:g}, more than half of memory_limit="
            f"{self.memory_limit:,} bytes (the other half is for the FFT window)",
            f"{raise_to}, or use a coarser value_discretization_interval")

    def _memory_reason(self, span: float, count: int, wanted: float) -> str:
        """Why a refinement stopped short of grid step ``wanted``: the distinct steps' grids
        would not fit :meth:`_component_budget` (the text of the AccuracyWarning, with the fix)."""
        needed = held_component_bytes(span, count, wanted) / _COMPONENT_SHARE
        return (f"memory_limit limits the grid: the grids of the {count:,} distinct steps may "
                f"hold half of memory_limit={self.memory_limit:,} bytes, and the grid step the "
                f"tolerance asks for ({wanted:.3g}) needs a memory_limit of about "
                f"{needed:,.0f} bytes (raise memory_limit for tighter bounds)")

    def _window_room(self, span: float, count: int, h: float) -> int:
        """FFT window bins ``memory_limit`` leaves beside the distinct steps' grids on grid step
        ``h`` (:func:`~dpplugins.pld.compose.window_limit` of the rest; at least 1)."""
        return max(window_limit(int(self.memory_limit - held_component_bytes(span, count, h))),
                   1)

    def _history_key(self, history) -> tuple:
        counts: dict[tuple[float, float], int] = {}
        for sigma, q, steps in history:
            counts[(sigma, q)] = counts.get((sigma, q), 0) + steps
        return ("poisson",) + tuple(sorted(counts.items()))

    def _pld(self, history, h: float,
             loss_range_tail: float = SINGLE_TAIL) -> PrivacyLossDistribution:
        return self._cached_pld(
            (self._history_key(history), h, loss_range_tail), lambda: poisson_gaussian_pld(
                history, h, neighbouring=self.neighbouring, tail_mass=self.tail_mass,
                memory_limit=self.memory_limit, loss_range_tail=loss_range_tail))

    def _refine(self, history, evaluate, loss_range_tail: float = SINGLE_TAIL):
        """Evaluate on finer grids until the relative gap is within ``eps_tolerance``.

        ``evaluate(pld) -> (Bounds, relative_gap)``.  The gap of connect-the-dots bounds shrinks
        about like ``h^2``, which sets the next step.  Every grid gives certified bounds, so their
        intersection is certified too; it is returned as soon as

        * the gap is within ``eps_tolerance`` (relative to the upper bound), or
        * the part of the gap a finer grid can shrink (the gap minus ``pld.last_floor``, the
          floating-point and truncation terms) is below that floor -- for deltas far below the
          error floor a relative target cannot be met by any grid, or
        * refining stops helping (the gap shrank by less than a quarter), the grid would need
          more memory than ``memory_limit``, or eight grids were tried.

        No grid is finer than :meth:`_memory_floor`: the distinct steps' per-step PLDs, all
        held at once, stay within half of ``memory_limit`` (where that stops the refinement,
        the warning says to raise memory_limit), and the windows it moves to within the rest.

        ``eps_tolerance`` is a target: when it is not met, the certified bounds are returned with
        an :class:`~dpplugins.pld.AccuracyWarning` saying what limits them.  Only when not even
        the first grid can be evaluated does :class:`~dpplugins.errors.NumericalError` propagate.
        Every grid leaves out ``loss_range_tail`` of each tail of a step
        (:func:`loss_range_tail_for`).
        """
        tail = loss_range_tail
        h = self.initial_grid_step(history, tail)
        fixed = self.value_discretization_interval is not None
        span, count = self._held_span(history, tail)
        if fixed:
            self._check_held(span, count, h)
        # the finest grid whose distinct steps fit in their share of memory_limit
        memory_floor = 0.0 if fixed else self._memory_floor(span, count)
        tolerance = self.eps_tolerance
        settings = tuple(sorted({(sigma, q) for sigma, q, _ in history}))
        steps = sum(t for _, _, t in history)
        hint = self._grid_hints().get(settings)
        if not fixed and hint is not None:
            hint_h, hint_gap, hint_steps = hint
            # the relative gap on a fixed grid grows at most like the number of steps (the
            # connect-the-dots error of each step adds up; measured: about like steps^0.3 for
            # Poisson-subsampled Gaussians)
            predicted = hint_gap * max(steps / hint_steps, 1.0)
            if h / _STICKY_FINER <= hint_h < h or (
                    h <= hint_h <= h * _STICKY_COARSER and predicted <= _STICKY_GAP * tolerance):
                h = max(hint_h, memory_floor)
        best, previous_gap, reason = None, None, "eight grids were tried"
        for _ in range(8):
            if best is not None and self._grid_bins(history, h, tail) > min(
                    component_bin_limit(self.memory_limit), _MAX_REFINE_BINS):
                reason = (f"a finer grid needs more than {_MAX_REFINE_BINS:,} bins per component "
                          "or more memory than memory_limit allows")
                break
            try:
                if best is None and not fixed:
                    # the window within what the distinct steps' grids leave of memory_limit
                    room = self._window_room(span, count, h) // LOWER_WINDOW_MARGIN
                    h, pld = within_window_budget(lambda step: self._pld(history, step, tail),
                                                  h, min(FIRST_WINDOW_BINS, room),
                                                  snap=_ladder_up)
                else:
                    pld = self._pld(history, h, tail)
                bounds, _ = evaluate(pld)
            except (NumericalError, MemoryError) as error:
                if best is None:
                    raise
                reason = f"a finer grid could not be evaluated ({getattr(error, 'what', error)})"
                break
            floor = float(getattr(pld, "last_floor", 0.0))
            best = certified_bounds(bounds.lower, bounds.upper, "the queried value") \
                if best is None else certified_bounds(max(best.lower, bounds.lower),
                                                      min(best.upper, bounds.upper),
                                                      "the queried value")
            gap = best.upper - best.lower
            if fixed or not math.isfinite(best.upper) or gap <= tolerance * best.upper:
                if not fixed and math.isfinite(bounds.upper) and bounds.upper > 0:
                    # this grid's own gap (best may be narrower, intersected with coarser ones)
                    self._remember_grid(settings, h, (bounds.upper - bounds.lower)
                                        / bounds.upper, steps)
                return best
            refinable = (bounds.upper - bounds.lower) - floor
            if refinable <= floor:
                reason = (f"floating-point and truncation terms ({floor:.3g}) limit it, "
                          "not the grid")
                break
            if previous_gap is not None and gap > 0.75 * previous_gap:
                reason = "refining the grid stopped narrowing it"
                break
            if h <= _REFINE_MIN_H:
                reason = f"the grid step reached {_REFINE_MIN_H:g}"
                break
            previous_gap = gap
            # what the grid's part of the gap must shrink to (the floor stays; when the floor
            # alone is above the tolerance, as far as the tolerance)
            target = tolerance * best.upper
            if floor < target:
                target -= floor
            finer = h * float(np.clip(0.8 * math.sqrt(target / refinable), 0.1, 0.8))
            if finer < memory_floor:
                # the distinct steps' grids would not fit their share of memory_limit
                if memory_floor > 0.8 * h:
                    reason = self._memory_reason(span, count, finer)
                    break
                finer = memory_floor
            window = pld.largest_window() * h / finer
            limit = min(self._window_room(span, count, finer), _MAX_REFINE_WINDOW)
            if window > limit:
                # the finest grid whose window fits, if it is still a useful step finer
                within = _ladder_up(h * 1.05 * pld.largest_window() / limit)
                if within > 0.8 * h:
                    reason = (f"a finer grid needs an FFT window of about {window:,.0f} bins, "
                              f"more than {limit:,}")
                    break
                h = within  # on the ladder already (and maybe coarser than _MAX_H: not clipped)
                continue
            if finer > _MAX_H:
                # a first grid coarser than _MAX_H (the window budget): down the ladder, unclipped
                finer = max(_ladder_down(finer), memory_floor)
            elif finer >= _MIN_H or self._grid_bins(history, finer, tail) > _MAX_REFINE_BINS:
                # the finest grid within the bin budget, if the wanted one is beyond it
                finer = self._on_ladder(history, finer, _MAX_REFINE_BINS, tail)
                if finer >= 0.8 * h:
                    reason = (f"a finer grid needs more than {_MAX_REFINE_BINS:,} bins per "
                              "component")
                    break
            h = max(finer, _REFINE_MIN_H)
        warnings.warn(
            f"{self.name}: certified bounds [{best.lower:.6g}, {best.upper:.6g}] have a "
            f"relative gap of {(best.upper - best.lower) / best.upper:.3g}, above "
            "eps_tolerance="
            f"{tolerance:g}: {reason}. The bounds are valid; the upper one is the certified "
            "value", AccuracyWarning, stacklevel=4)
        return best

    def _grid_bins(self, history, h: float, loss_range_tail: float = SINGLE_TAIL) -> float:
        """Largest number of grid bins of one component at grid step ``h`` (from the loss range
        of each step, as :func:`~dpplugins.pld.PrivacyLossDistribution.from_mechanism` builds
        it; ``inf`` when ``h`` is too small to count them)."""
        largest = 0.0
        for sigma, q, _ in history:
            try:
                pairs = mechanisms.poisson_subsampled_gaussian(grid_noise_multiplier(sigma), q,
                                                               neighbouring=self.neighbouring)
                largest = max(largest, component_bins(pairs, h, loss_range_tail))
            except (ArithmeticError, ValueError):
                continue
        return largest

    def _tail_delta(self, build_coarse, epsilon: float) -> Bounds | None:
        """Bounds ``(0, Chernoff bound)`` when the cheap certificate of
        :meth:`~dpplugins.pld.PrivacyLossDistribution.delta_upper_chernoff` on a coarse grid
        (a dominating pair on any grid) shows ``delta(epsilon)`` below ``_TAIL_SHARE *
        tail_mass``: the FFT composition cannot resolve such a delta better than its truncation
        term, and refining grids for it costs minutes.  None otherwise."""
        try:
            bound = build_coarse().delta_upper_chernoff(epsilon)
        except (NumericalError, ParameterError):
            return None
        if bound <= _TAIL_SHARE * self.tail_mass:
            return Bounds(0.0, bound)
        return None

    def _coarse_step(self, pairs_list) -> float:
        span = max(component_bins(pairs, 1.0) for pairs in pairs_list)
        return float(max(span / _COARSE_BINS, _MIN_H))

    def _only_gaussian(self, history) -> bool:
        return all(is_poisson_gaussian(leaf) for leaf, _ in private_leaves(history))

    def _full_batch_mu(self, runs) -> tuple[float, float] | None:
        """The exact ``G_mu`` of a history whose every step has sample rate 1 (plain Gaussian
        steps; :mod:`dpplugins.full_batch`: sensitivity 1 under add/remove, 2 under replace-one,
        as :func:`~dpplugins.mechanisms.poisson_subsampled_gaussian` at ``q = 1``), or None.
        Such histories need no PLD, at any number of steps."""
        return full_batch_mu(runs, sensitivity_factor=2.0 if self.neighbouring == "replace_one"
                             else 1.0)

    def _epsilon_evaluator(self, delta: float):
        """``pld -> (bounds, relative gap)`` for an epsilon query.  The lower bound's accuracy
        levels (extended precision, tilting) stop once it is within ``eps_tolerance`` of the
        upper one, or when only a finer grid could bring it there (``lower_rtol``; the bounds
        stay certified): a costlier level would only narrow a gap already accepted, or one
        that :meth:`_refine` narrows on the next grid.  sigma = 0.5, q = 1e-5, delta = 1e-10
        took 5.1 s for one step and 24 s for 100 steps without it, 0.5 s and 12 s with it."""
        return lambda pld: _with_gap(pld.epsilon_for_delta(delta, lower_rtol=self.eps_tolerance))

    def _delta_evaluator(self, epsilon: float):
        """``pld -> (bounds, relative gap)`` for a delta query (``lower_rtol`` as in
        :meth:`_epsilon_evaluator`)."""
        return lambda pld: _with_gap(pld.delta_for_epsilon(epsilon,
                                                           lower_rtol=self.eps_tolerance))

    def _epsilon_bounds(self, history, delta: float) -> Bounds:
        if delta == 0:
            return self._pure_epsilon_bounds(history)
        if not self._only_gaussian(history):
            # epsilon(delta) <= epsilon(0): the pure-DP epsilon caps the upper bound, and answers
            # where delta is below what the PLD can certify
            pure = self._pure_epsilon_bounds(history)
            cap = min(pure.upper, self._basic_composition_epsilon(history, delta))
            try:
                bounds = self._capped(lambda: self._generic(
                    history, self._epsilon_evaluator(delta),
                    evaluate_upper=lambda pld: pld.epsilon_for_delta(delta, lower=False)), cap,
                    _BASIC_CAP)
            except NumericalError as error:
                if math.isinf(cap):
                    raise
                # found by a hostile sweep: 1e12 randomized-response steps at eps0 = 1e-9
                # answered [0, 1000] in silence, where the CLT puts epsilon near 0.002
                warnings.warn(
                    f"{self.name}: certified bounds [0, {cap:.6g}] at delta={delta!r} only: "
                    "the upper one is the pure-DP or basic-composition epsilon, since the PLD "
                    f"could not certify this delta ({error}). The bounds are valid; the upper "
                    "one is the certified value",
                    AccuracyWarning, stacklevel=4)
                return Bounds(0.0, cap)
            return Bounds(min(bounds.lower, pure.lower), bounds.upper)
        runs = poisson_gaussian_runs(history)
        mus = self._full_batch_mu(runs)
        if mus is not None:
            return full_batch_epsilon_bounds(mus, delta)
        return self._refine(runs, self._epsilon_evaluator(delta),
                            loss_range_tail_for(delta, sum(t for _, _, t in runs)))

    def _delta_bounds(self, history, epsilon: float) -> Bounds:
        if not self._only_gaussian(history):
            # at or above the pure-DP epsilon (a certified upper bound on the largest total
            # privacy loss) delta is exactly 0 (Dwork & Roth 2014, Thm 3.16)
            if epsilon >= self._pure_epsilon_bounds(history).upper:
                return Bounds(0.0, 0.0)
            basic_eps, basic_delta = self._basic_composition(history)
            # delta(eps) <= delta(basic_eps) <= basic_delta
            cap = basic_delta if epsilon >= basic_eps else math.inf
            return self._capped(lambda: self._generic_delta_bounds(history, epsilon), cap,
                                _BASIC_CAP)
        return self._gaussian_delta_bounds(history, epsilon)

    def _generic_delta_bounds(self, history, epsilon: float) -> Bounds:
        """delta(epsilon) of a history with Laplace, randomized-response or (eps, delta)
        steps (:meth:`_generic`, after the cheap tail bound)."""
        counts = self._generic_counts(history)
        if self.value_discretization_interval is None and len(counts) <= _TAIL_MAX_DISTINCT:
            coarse = self._coarse_step([self._pairs(leaf) for leaf in counts])
            tail = self._tail_delta(lambda: self._generic_pld(counts, coarse), epsilon)
            if tail is not None:
                return tail
        bounds = self._generic(history,
                               self._delta_evaluator(epsilon))
        return self._with_cached(bounds, self._plds_of(
            ("generic",) + tuple(sorted(((repr(leaf), k) for leaf, k in counts.items())))),
            epsilon)

    def _gaussian_delta_bounds(self, history, epsilon: float) -> Bounds:
        """delta(epsilon) of a history of Poisson-subsampled Gaussian steps."""
        runs = poisson_gaussian_runs(history)
        mus = self._full_batch_mu(runs)
        if mus is not None:
            return full_batch_delta_bounds(mus, epsilon)
        if self.value_discretization_interval is None:
            low, high = NOISE_RANGE
            pairs = [mechanisms.poisson_subsampled_gaussian(sigma, q,
                                                            neighbouring=self.neighbouring)
                     for sigma, q, _ in runs if low <= sigma <= high]
            # (a coarse grid per distinct step: worth it for a few distinct steps only)
            if pairs and len(pairs) == len(runs) <= _TAIL_MAX_DISTINCT:
                coarse = self._coarse_step(pairs)
                tail = self._tail_delta(lambda: self._pld(runs, coarse), epsilon)
                if tail is not None:
                    return tail
        bounds = self._refine(runs, self._delta_evaluator(epsilon))
        return self._with_cached(bounds, self._plds_of(self._history_key(runs)), epsilon)

    @staticmethod
    def _with_cached(bounds: Bounds, plds, epsilon: float) -> Bounds:
        """Intersect with what the compositions already computed for this history certify at
        ``epsilon`` (on every grid it was evaluated on), so that ``get_delta(get_epsilon(d))
        <= d``: the composition that certified the epsilon is among them."""
        lower, upper = bounds
        for pld in plds:
            cached = pld.cached_delta_bounds(epsilon)
            if cached is not None:
                lower, upper = max(lower, cached.lower), min(upper, cached.upper)
        return certified_bounds(lower, upper, f"delta at epsilon={epsilon!r}")

    def epsilon_upper_fast(self, delta: float, history=None, *, coarsen: float = 1.0) -> float:
        """Certified upper bound on one grid (no accuracy loop); used by calibration.

        ``coarsen > 1`` uses a grid that many times coarser than :meth:`initial_grid_step`:
        still a certified upper bound (connect-the-dots dominates on every grid), cheaper by
        about that factor and looser by about its square (the gap is second order in ``h``) --
        what a search needs before its last steps.  Without a fixed
        ``value_discretization_interval`` the grid is coarsened further where the composed
        window would exceed the first grid's budget, as the first grid of a query is
        (:func:`~dpplugins.pld.distribution.within_window_budget`): 10^9 steps at q = 0.5 and
        sigma 8300 needed 33 million bins at the accountant's own grid and raised
        NumericalError, which stopped a calibration after minutes."""
        recorded = tuple(self._history if history is None else history)
        if private_leaves(recorded) and self._private_history(recorded) is None:
            return math.inf   # a release without noise (raised AttributeError)
        history = poisson_gaussian_runs(recorded)
        if not history:
            return 0.0
        if any(sigma == 0 for sigma, _, _ in history):
            return math.inf
        mus = self._full_batch_mu(history)
        if mus is not None:
            return full_batch_epsilon_bounds(mus, delta).upper
        tail = loss_range_tail_for(delta, sum(t for _, _, t in history))
        h = self.initial_grid_step(history, tail)
        if self.value_discretization_interval is not None:
            pld = self._pld(history, h, tail)
        else:
            if coarsen != 1.0:
                h = self._on_ladder(history, h * float(coarsen), loss_range_tail=tail)
            h, pld = within_window_budget(lambda step: self._pld(history, step, tail), h,
                                          snap=_ladder_up, lower=False)
        return pld.epsilon_for_delta(delta, lower=False).upper
