"""The PLD accountant (registry name ``"pld"``): DP-SGD with Poisson sampling, certified bounds."""

from __future__ import annotations

import math
import warnings
from typing import ClassVar

import numpy as np

from dpplugins.accountants.base import Accountant, private_leaves
from dpplugins.errors import NumericalError, check_positive
from dpplugins import mechanisms
from dpplugins.events import (EpsilonDeltaEvent, Event, GaussianEvent, LaplaceEvent,
                              PoissonSampledEvent, RandomizedResponseEvent)
from dpplugins.pld import AccuracyWarning, Bounds, PrivacyLossDistribution

__all__ = ["PLDAccountant", "poisson_gaussian_pld", "loss_scale", "poisson_gaussian_runs",
           "is_poisson_gaussian", "epsilon_delta_pair", "zero_out_rr_pair"]

_MIN_H, _MAX_H = 1e-6, 2e-2
#: smallest grid step the refinement may reach (below _MIN_H: the memory limit is the real stop)
_REFINE_MIN_H = 1e-9


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


def epsilon_delta_pair(epsilon: float, delta: float) -> tuple[list[float], list[float]]:
    """The dominating pair of every (epsilon, delta)-DP mechanism (Kairouz, Oh, Viswanath 2015,
    Thm 2.1 / Murtagh & Vadhan 2016): four outcomes with
    ``P = (delta, (1-delta) e^eps / (1+e^eps), (1-delta) / (1+e^eps), 0)`` and ``Q`` its mirror."""
    a = (1 - delta) / (1 + math.exp(-epsilon)) if epsilon < 700 else 1 - delta
    b = (1 - delta) - a
    return [delta, a, b, 0.0], [0.0, b, a, delta]


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


def poisson_gaussian_pld(history, h: float, *, neighbouring: str = "add_remove",
                         tail_mass: float = 1e-15,
                         memory_limit: int = 1 << 30) -> PrivacyLossDistribution:
    """PLD of a run-length history of Poisson-subsampled Gaussian steps on grid step ``h``.

    Identical ``(sigma, q)`` runs share one component, so the FFT work grows with the number of
    distinct settings, not with the number of steps.
    """
    counts: dict[tuple[float, float], int] = {}
    for sigma, q, steps in history:
        counts[(sigma, q)] = counts.get((sigma, q), 0) + steps
    total = None
    for (sigma, q), steps in counts.items():
        step = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
            sigma, q, neighbouring=neighbouring, value_discretization_interval=h,
            tail_mass=tail_mass, memory_limit=memory_limit).self_compose(steps)
        total = step if total is None else total.compose(step)
    return total


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
                              "(Doroshenko et al. 2022, Thm 4.1)")
    _option_names = ("neighbouring", "eps_tolerance", "value_discretization_interval",
                     "tail_mass", "memory_limit")

    def __init__(self, *, neighbouring: str = "add_remove", eps_tolerance: float = 1e-3,
                 value_discretization_interval: float | None = None, tail_mass: float = 1e-15,
                 memory_limit: int = 1 << 30) -> None:
        super().__init__(neighbouring=neighbouring)
        self.eps_tolerance = check_positive("eps_tolerance", eps_tolerance)
        self.value_discretization_interval = (
            None if value_discretization_interval is None
            else check_positive("value_discretization_interval", value_discretization_interval))
        self.tail_mass = check_positive("tail_mass", tail_mass)
        self.memory_limit = int(check_positive("memory_limit", memory_limit))

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
            if self.neighbouring == "replace_one":
                return mechanisms.k_randomized_response(leaf.epsilon0, leaf.num_buckets)
            return mechanisms.discrete_pair(*zero_out_rr_pair(leaf.epsilon0, leaf.num_buckets))
        return mechanisms.discrete_pair(*epsilon_delta_pair(leaf.epsilon, leaf.delta),
                                        symmetric=True)

    def _max_losses(self, leaf: Event) -> tuple[float, float]:
        """The largest privacy loss of one leaf in the remove and in the add direction (its
        pure-DP epsilon is the larger; inf if there is none)."""
        if is_poisson_gaussian(leaf):
            return math.inf, math.inf
        if isinstance(leaf, LaplaceEvent):
            value = self._sensitivity() / leaf.scale
            return value, value
        if isinstance(leaf, PoissonSampledEvent):   # Laplace on a Poisson subsample
            q, b = leaf.sample_rate, leaf.event.scale
            return math.log1p(q * math.expm1(1.0 / b)), -math.log1p(-q * -math.expm1(-1.0 / b))
        if isinstance(leaf, RandomizedResponseEvent):
            if self.neighbouring == "replace_one":
                return leaf.epsilon0, leaf.epsilon0
            p, q = zero_out_rr_pair(leaf.epsilon0, leaf.num_buckets)
            return math.log(p[0] / q[0]), math.log(q[1] / p[1])
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

    def _generic(self, history, evaluate) -> Bounds:
        """Bounds for histories with Laplace, randomized-response or (eps, delta) steps: one
        PLD component per distinct leaf, composed by FFT, on grids refined until the relative
        gap is within ``eps_tolerance`` (or the best certified bounds reached)."""
        counts: dict[Event, int] = {}
        for leaf, count in private_leaves(history):
            counts[leaf] = counts.get(leaf, 0) + count
        scale = min(min(self._max_loss(leaf), 1.0) if math.isfinite(self._max_loss(leaf))
                    else 1.0 for leaf in counts)
        h = self.value_discretization_interval or float(np.clip(scale / 40.0, _MIN_H, _MAX_H))
        best = None
        for _ in range(4):
            total = None
            try:
                for leaf, count in counts.items():
                    part = PrivacyLossDistribution.from_mechanism(
                        self._pairs(leaf), value_discretization_interval=h,
                        tail_mass=self.tail_mass, memory_limit=self.memory_limit
                    ).self_compose(count)
                    total = part if total is None else total.compose(part)
                bounds, gap = evaluate(total)
            except NumericalError:
                if best is not None:
                    return best
                raise
            if best is None or bounds.upper - bounds.lower < best.upper - best.lower:
                best = bounds
            if self.value_discretization_interval is not None or gap <= self.eps_tolerance:
                return bounds
            h = max(h / 4.0, _MIN_H)
        return best

    # -- grid ---------------------------------------------------------------------------------
    def initial_grid_step(self, history) -> float:
        """First grid step: a 40th of the per-step loss scale (see :func:`loss_scale`), coarser
        for short histories -- the connect-the-dots gap grows about like ``steps * h^2``, so ``h``
        can grow like ``1 / sqrt(steps)`` (up to 10 times) below 10^4 steps.

        With several settings the per-step scale is the root mean square ``sqrt(sum_i T_i s_i^2 /
        sum_i T_i)``: ``T h^2`` against the composed variance ``sum_i T_i s_i^2`` is then the same
        as for a single setting, and a run whose loss is negligible (a tiny sample rate) does not
        set the grid for all the others."""
        if self.value_discretization_interval is not None:
            return self.value_discretization_interval
        scales = [(loss_scale(sigma, q), t) for sigma, q, t in history]
        steps = sum(t for _, _, t in history)
        if len({value for value, _ in scales}) == 1:
            scale = scales[0][0]
        else:
            with np.errstate(over="ignore"):
                variance = sum(t * value * value for value, t in scales)
            scale = math.sqrt(variance / steps) if math.isfinite(variance) else math.inf
        widen = float(np.clip(math.sqrt(1e4 / steps), 1.0, 10.0))
        return float(np.clip(scale / 40.0 * widen, _MIN_H, _MAX_H))

    def _pld(self, history, h: float) -> PrivacyLossDistribution:
        return poisson_gaussian_pld(history, h, neighbouring=self.neighbouring,
                                    tail_mass=self.tail_mass, memory_limit=self.memory_limit)

    def _refine(self, history, evaluate):
        """Evaluate on finer grids until the relative gap is within ``eps_tolerance``.

        ``evaluate(pld) -> (Bounds, relative_gap)``.  The gap of connect-the-dots bounds shrinks
        about like ``h^2``, which sets the next step.  Every grid gives certified bounds, so their
        intersection is certified too; it is returned as soon as

        * the gap is within ``eps_tolerance`` (relative to the upper bound), or
        * the part of the gap a finer grid can shrink (the gap minus ``pld.last_floor``, the
          floating-point and truncation terms) is within ``eps_tolerance`` or below that floor --
          for deltas far below the error floor a relative target cannot be met by any grid, or
        * refining stops helping (the gap shrank by less than a quarter), the grid would need
          more memory than ``memory_limit``, or eight grids were tried.

        ``eps_tolerance`` is a target: when it is not met, the certified bounds are returned with
        an :class:`~dpplugins.pld.AccuracyWarning` saying what limits them.  Only when not even
        the first grid can be evaluated does :class:`~dpplugins.errors.NumericalError` propagate.
        """
        h = self.initial_grid_step(history)
        fixed = self.value_discretization_interval is not None
        tolerance = self.eps_tolerance
        best, previous_gap, reason = None, None, "eight grids were tried"
        for _ in range(8):
            if best is not None and self._grid_bins(history, h) > self.memory_limit // 48:
                reason = "a finer grid needs more memory than memory_limit allows"
                break
            try:
                pld = self._pld(history, h)
                bounds, _ = evaluate(pld)
            except (NumericalError, MemoryError) as error:
                if best is None:
                    raise
                reason = f"a finer grid could not be evaluated ({getattr(error, 'what', error)})"
                break
            floor = float(getattr(pld, "last_floor", 0.0))
            best = bounds if best is None else Bounds(max(best.lower, bounds.lower),
                                                      min(best.upper, bounds.upper))
            best = Bounds(min(best.lower, best.upper), best.upper)
            gap = best.upper - best.lower
            if fixed or not math.isfinite(best.upper) or gap <= tolerance * best.upper:
                return best
            refinable = (bounds.upper - bounds.lower) - floor
            if refinable <= max(tolerance * best.upper, floor):
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
            target = tolerance * best.upper
            h = max(h * float(np.clip(0.8 * math.sqrt(target / refinable), 0.2, 0.8)),
                    _REFINE_MIN_H)
        warnings.warn(
            f"pld: certified bounds [{best.lower:.6g}, {best.upper:.6g}] have a relative gap of "
            f"{(best.upper - best.lower) / best.upper:.3g}, above eps_tolerance="
            f"{tolerance:g}: {reason}. The bounds are valid; the upper one is the certified "
            "value", AccuracyWarning, stacklevel=4)
        return best

    def _grid_bins(self, history, h: float) -> int:
        """Largest number of grid bins of one component at grid step ``h`` (from the loss range
        of each step, as :func:`~dpplugins.pld.PrivacyLossDistribution.from_mechanism` builds
        it), to stop refining before the memory limit is hit."""
        from dpplugins import mechanisms
        from dpplugins.pld.distribution import SINGLE_TAIL
        largest = 0
        for sigma, q, _ in history:
            try:
                pairs = mechanisms.poisson_subsampled_gaussian(sigma, q,
                                                               neighbouring=self.neighbouring)
                for pair in pairs.pairs.values():
                    lo, hi = pair.loss_range(SINGLE_TAIL)
                    lo, hi = max(min(lo, 0.0), -600.0), min(max(hi, 0.0), 600.0)
                    largest = max(largest, int((hi - lo) / h) + 4)
            except (ArithmeticError, ValueError):
                continue
        return largest

    def _only_gaussian(self, history) -> bool:
        return all(is_poisson_gaussian(leaf) for leaf, _ in private_leaves(history))

    def _epsilon_bounds(self, history, delta: float) -> Bounds:
        if delta == 0:
            return self._pure_epsilon_bounds(history)
        if not self._only_gaussian(history):
            # epsilon(delta) <= epsilon(0): the pure-DP epsilon caps the upper bound, and answers
            # where delta is below what the PLD can certify
            pure = self._pure_epsilon_bounds(history)
            try:
                bounds = self._generic(history,
                                       lambda pld: _with_gap(pld.epsilon_for_delta(delta)))
            except NumericalError:
                if math.isinf(pure.upper):
                    raise
                return Bounds(0.0, pure.upper)
            return Bounds(min(bounds.lower, pure.upper), min(bounds.upper, pure.upper))
        runs = poisson_gaussian_runs(history)
        return self._refine(runs, lambda pld: _with_gap(pld.epsilon_for_delta(delta)))

    def _delta_bounds(self, history, epsilon: float) -> Bounds:
        if not self._only_gaussian(history):
            return self._generic(history, lambda pld: _with_gap(pld.delta_for_epsilon(epsilon)))
        runs = poisson_gaussian_runs(history)
        return self._refine(runs, lambda pld: _with_gap(pld.delta_for_epsilon(epsilon)))

    def epsilon_upper_fast(self, delta: float, history=None) -> float:
        """Certified upper bound on one grid (no accuracy loop); used by calibration."""
        history = poisson_gaussian_runs(self._history if history is None else history)
        if not history:
            return 0.0
        if any(sigma == 0 for sigma, _, _ in history):
            return math.inf
        pld = self._pld(history, self.initial_grid_step(history))
        return pld.epsilon_for_delta(delta, lower=False).upper
