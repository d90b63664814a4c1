"""The shuffled-epochs accountant (registry name ``"shuffle"``): DP-SGD on shuffled batches.

What is accounted: every epoch draws a fresh uniformly random permutation of the dataset and cuts
it into batches of ``batch_size`` examples; each step adds ``N(0, sigma^2 C^2)`` once to the sum of
the batch's clipped gradients (clipping norm C); every noisy step is released.  This is Opacus
with ``poisson_sampling=False`` and every Keras ``fit``.  Opacus reports a step as
``(noise_multiplier, sample_rate)``; here ``sample_rate = 1 / steps_per_epoch``.

Neighbouring relation.  ``"add_remove"`` is read as *zero-out*: the differing example is replaced
by one whose clipped gradient is 0 (adding an example to a shuffled fixed-batch pipeline changes
the number of steps, so the literal add/remove relation is not defined; zero-out is the usual
surrogate).  ``"replace_one"``: two arbitrary examples.

Upper bound (certified), per epoch, the pointwise minimum of valid privacy profiles:

* No amplification.  For a fixed permutation the differing example enters exactly one step, so
  an epoch is an adaptive composition in which only one Gaussian mechanism differs (sensitivity 1
  for zero-out, 2 for replace-one; noise multiplier at least the epoch's smallest); averaging over
  permutations keeps the bound (joint convexity of the hockey-stick divergence).  E epochs
  compose to a Gaussian with ``mu = sensitivity * sqrt(sum_e 1/sigma_e^2)``, computed in closed
  form (Dong, Roth, Su 2022, Cor. 3.3).
* Batch size 1 only: amplification by shuffling.  Each step is a Gaussian local randomizer on one
  example, (eps0, delta0)-DP along its exact profile with sensitivity 2 (the diameter of clipped
  gradients -- a local randomizer must hide *any* input); the best bound for such approximate-DP
  randomizers available here is Balle et al. 2020 Thm 5.1 (see
  :func:`dpplugins.amplification.swap.gaussian_profile`; FMT21's clone bounds need pure eps0-DP,
  and their approximate-DP extension is not implemented).  The per-epoch profile is the minimum of
  the two, turned into a dominating PLD (``from_privacy_profile``) and composed over epochs by FFT.
  A partial last epoch is a prefix of a full one (a post-processing), so full-epoch bounds apply.
* Batches of b > 1 with one noise draw per batch: the clone / swap arguments treat each *step* as
  a local randomizer applied to one record; a batch step is a function of b records, so they do
  not apply, and we do not treat the T batches as T independent users.  Only the no-amplification
  profile is used.  (The f-DP shuffling bound of van Dijk & Ertan, arXiv 2605.06259, is not
  implemented: we had only its abstract.)

Lower bound (certified): :func:`dpplugins.amplification.shuffle.shuffle_lower_bound` -- the
Chua et al. (2024, arXiv:2403.17673 and arXiv:2411.04205) pair, binned exactly and composed over
epochs with the PLD engine's lower bounds, each epoch at its largest noise multiplier but at
least ``LOWER_BOUND_MIN_NOISE`` (more noise is a post-processing).  Long runs use a coarser PLD
grid (``GRID_BUDGET``): any grid gives certified bounds, a coarser one looser ones.  ``get_epsilon_bounds`` returns ``(that lower bound, our upper bound)``.

When the upper bound is (close to) the no-amplification value -- which it is for every batch size
above 1 and, with the bounds known today, for batch size 1 unless the noise is very large --
Poisson subsampling (``"pld"``) or random check-ins (``"checkin"``) with their own accountants give
far better guarantees at the same noise; :meth:`ShuffleAccountant.summary` says so.

Example::

    >>> from dpplugins.accountants.shuffle import ShuffleAccountant
    >>> acc = ShuffleAccountant(batch_size=256)
    >>> acc.step(noise_multiplier=1.0, sample_rate=1 / 200, count=2000)   # 10 epochs
    >>> lower, upper = acc.get_epsilon_bounds(1e-5)
    >>> lower <= upper
    True
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from typing import ClassVar

import numpy as np

from dpplugins.accountants.base import (FAR_TAIL_DELTA, Accountant, UnsupportedEventError,
                                        check_query_delta,
                                       is_non_private, leaves_to_check, private_leaves)
from dpplugins.amplification import shuffle as shuffle_bounds
from dpplugins.amplification.shuffle import MAX_USERS
from dpplugins.amplification import swap as swap_bounds
from dpplugins.display import interval_text, upper_text
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_grid_step,
                              check_flag, check_positive)
from dpplugins.events import (Event, GaussianEvent, ProtocolEvent, ShuffledEpochsEvent,
                              steps_per_epoch_for_rate)
from dpplugins.passes import cut_passes
from dpplugins.mechanisms.gaussian import (gaussian_delta, gaussian_delta_upper,
                                           gaussian_delta_upper_many)
from dpplugins.mechanisms.gaussian import gaussian_epsilon as _gaussian_epsilon
from dpplugins.pld import Bounds, PrivacyLossDistribution, certified_bounds

__all__ = ["ShuffleAccountant", "EpochPlan", "epoch_plan", "gaussian_epsilon"]

class EpochPlan:
    """The history cut into epochs: the protocol (``steps_per_epoch``, ``batch_size``,
    ``dataset_size``) and, per epoch kind, ``(sigma_min, sigma_max, released_steps) -> count``."""

    def __init__(self, steps_per_epoch: int, epochs: dict[tuple[float, float, int], int],
                 batch_size: int = 1, dataset_size: int | None = None) -> None:
        self.steps_per_epoch = steps_per_epoch
        self.epochs = epochs
        self.batch_size = batch_size
        self.dataset_size = dataset_size

    def __repr__(self) -> str:
        return f"EpochPlan(T={self.steps_per_epoch}, b={self.batch_size}, epochs={self.epochs})"


def legacy_shuffled_step(noise_multiplier: float, sample_rate: float, batch_size: int,
                         dataset_size: int | None) -> ShuffledEpochsEvent:
    """One step of shuffled epochs as a version-0.1 history entry meant it: ``sample_rate = 1 /
    T`` with T the steps per epoch.  Without ``dataset_size`` the largest dataset with T batches
    of ``batch_size`` is assumed (``T b + b - 1`` with ``drop_last``), which the lower bound of
    version 0.1 also assumed; with it, T must be ``ceil(n / b)`` (or ``floor`` with
    ``drop_last``)."""
    T = steps_per_epoch_for_rate("sample_rate", sample_rate)
    b = batch_size
    if dataset_size is None:
        n, drop_last = T * b + b - 1, b > 1
    else:
        n = dataset_size
        if T == math.ceil(n / b):
            drop_last = False
        elif T == n // b:
            drop_last = True
        else:
            raise ParameterError(
                "sample_rate", sample_rate,
                f"1/{math.ceil(n / b)} (or 1/{n // b} with drop_last) for dataset_size="
                f"{n} and batch_size={b}")
    return ShuffledEpochsEvent(n, b, Fraction(1, T), GaussianEvent(noise_multiplier), drop_last)


def epoch_plan(passes) -> EpochPlan:
    """The :class:`EpochPlan` of ``cut_passes`` output for one shuffled-epochs protocol: every
    pass becomes ``(smallest sigma, largest sigma, released steps)``."""
    epochs: dict[tuple[float, float, int], int] = {}
    protocol = None
    for p, count in passes:
        protocol = p.protocol
        sigmas = [e.noise_multiplier for e in p.events]
        key = (min(sigmas), max(sigmas), p.steps)
        epochs[key] = epochs.get(key, 0) + count
    return EpochPlan(protocol.steps_per_epoch, epochs, getattr(protocol, "batch_size", 1),
                     protocol.dataset_size)


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Certified upper bound on epsilon(delta) of the mu-GDP (Gaussian) mechanism (Balle & Wang
    2018, arXiv:1805.06530, Thm 8): :func:`dpplugins.mechanisms.gaussian.gaussian_epsilon` to
    relative 1e-7 (the profile rounded up by a relative 1e-12)."""
    return _gaussian_epsilon(mu, delta, rtol=1e-7)


#: grid points over which the composed privacy loss of a long run is spread (24 of its standard
#: deviations): long runs get a coarser grid, so a query takes about a second whatever the
#: number of epochs -- still certified, only looser
GRID_BUDGET = 2**16
#: grid points of one epoch's PLD that fit in memory (``value_discretization_interval`` finer
#: than this allows is refused)
MAX_EPOCH_GRID_POINTS = 2**25
#: smallest noise multiplier of the lower-bound pair (below it the pair's far tails underflow)
LOWER_BOUND_MIN_NOISE = 0.05
#: distinct epochs of the lower bound beyond which their noise multipliers are rounded up to
#: a ladder (:func:`lower_bound_noise`)
LOWER_BOUND_KINDS = 32
#: steps of that ladder per doubling of the noise multiplier (1.1 % apart)
LOWER_BOUND_LADDER = 64


def lower_bound_noise(sigma: float, laddered: bool) -> float:
    """The noise multiplier of an epoch's lower-bound pair: at least
    :data:`LOWER_BOUND_MIN_NOISE`, and with ``laddered`` rounded *up* to the next power of
    ``2^(1/LOWER_BOUND_LADDER)``.  More noise is a post-processing (independent Gaussian noise
    added to the step), so the pair stays a lower bound; the ladder keeps the number of distinct
    epoch pairs bounded -- a noise schedule that changed every epoch built one pair of up to
    200,000 bins per epoch (1,000 epochs: 27 s and 1.2 GB per query, found by a hostile sweep)."""
    sigma = max(float(sigma), LOWER_BOUND_MIN_NOISE)
    if not laddered or not math.isfinite(sigma):
        return sigma
    k = math.ceil(math.log2(sigma) * LOWER_BOUND_LADDER)
    value = 2.0 ** (k / LOWER_BOUND_LADDER)
    while value < sigma:
        k += 1
        value = 2.0 ** (k / LOWER_BOUND_LADDER)
    return value


#: a width the finite privacy losses of a lower-bound epoch always need (a user grid step must
#: resolve it within MAX_EPOCH_GRID_POINTS)
_PAIR_LOSS_RANGE = 1.0
#: standard deviations of the composed privacy loss the grid budget is spread over
_SPREAD = 24.0


def _budget_step(h: float, spread: float) -> float:
    """``h``, or coarser so that ``_SPREAD`` standard deviations ``spread`` of the composed
    privacy loss take at most :data:`GRID_BUDGET` grid points."""
    if not math.isfinite(spread):
        return h
    return max(h, _SPREAD * spread / GRID_BUDGET)


def _loss_spread(p: np.ndarray, q: np.ndarray) -> float:
    """Standard deviation of the finite privacy loss ``log(p/q)`` under ``p`` (0 if none is
    finite): the per-epoch scale of the composed PLD's window."""
    both = (p > 0) & (q > 0)
    if not np.any(both):
        return 0.0
    w = p[both]
    loss = np.log(w) - np.log(q[both])
    mean = float(np.dot(w, loss) / w.sum())
    return math.sqrt(max(float(np.dot(w, (loss - mean) ** 2) / w.sum()), 0.0))


def _finite_loss_range(p: np.ndarray, q: np.ndarray) -> float:
    """Width of the range of the finite privacy losses ``log(p/q)`` (both directions)."""
    both = (p > 0) & (q > 0)
    if not np.any(both):
        return 0.0
    loss = np.log(p[both]) - np.log(q[both])
    return float(loss.max() - loss.min())


def _profile_end(profile) -> float:
    """Where an epoch profile falls below 1e-16 (a power of two from 0.25, at most 400): the
    end of its PLD grid, as ``from_privacy_profile`` chooses it by default."""
    eps = 0.25
    while eps < 400 and float(profile(np.array([eps]))[0]) > 1e-16:
        eps *= 2
    return min(eps, 400.0)


class ShuffleAccountant(Accountant):
    """DP-SGD on shuffled epochs: certified upper bound and Chua et al. lower bound (see module).

    Accounts :class:`~dpplugins.events.ShuffledEpochsEvent` with Gaussian noise (one
    shuffled-epochs protocol per accountant; the noise may change from step to step).

    Options: ``neighbouring``, ``lower_bound`` (compute the lower bound; ``False`` reports 0 for
    it), ``value_discretization_interval`` (PLD grid step, at most 1; default chosen from the
    per-epoch noise).  ``batch_size`` (alias ``examples_per_step``) and ``dataset_size`` are the version-0.1
    way of naming the protocol for :meth:`step` (``sample_rate = 1 / steps per epoch``); with
    events they are not needed.
    """

    name: ClassVar[str] = "shuffle"
    theorem: ClassVar[str] = (
        "Per epoch, the minimum of the no-amplification Gaussian profile (each example in one "
        "step per epoch) and, for batch size 1, Balle et al. 2020 Thm 5.1 for (eps0, delta0) "
        "Gaussian local randomizers; epochs composed in closed form (Gaussian DP) or by PLD/FFT "
        "(Koskela et al. 2021; Doroshenko et al. 2022). Lower bound: Chua et al. 2024 "
        "(max-of-batch-sums test on the worst-case pair), composed with PLD lower bounds.")
    bound_type: ClassVar[str] = "certified upper bound"
    _option_names = ("neighbouring", "batch_size", "dataset_size",
                     "value_discretization_interval", "lower_bound")

    def __init__(self, *, batch_size: int | None = None, examples_per_step: int | None = None,
                 neighbouring: str = "add_remove", dataset_size: int | None = None,
                 value_discretization_interval: float | None = None,
                 lower_bound: bool = True) -> None:
        super().__init__(neighbouring=neighbouring)
        if batch_size is not None and examples_per_step is not None and \
                batch_size != examples_per_step:
            raise ParameterError("examples_per_step", examples_per_step,
                                 f"equal to batch_size={batch_size} (they are aliases)")
        if batch_size is None:
            batch_size = examples_per_step
        self.batch_size = None if batch_size is None else check_count("batch_size", batch_size,
                                                                        minimum=1)
        self.dataset_size = (None if dataset_size is None
                             else check_count("dataset_size", dataset_size, minimum=2))
        if self.dataset_size is not None and self.batch_size is None:
            raise ParameterError("batch_size", None, "an integer >= 1 when dataset_size is given")
        if self.dataset_size is not None and self.dataset_size < self.batch_size:
            raise ParameterError("dataset_size", dataset_size, f">= batch_size={self.batch_size}")
        self.value_discretization_interval = (
            None if value_discretization_interval is None
            else check_grid_step("value_discretization_interval", value_discretization_interval))
        self.lower_bound = check_flag("lower_bound", lower_bound)

    # -- plan and sensitivities -----------------------------------------------------------------
    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of one step's noisy sum between neighbours (clipping norm 1)."""
        return 2.0 if self.neighbouring == "replace_one" else 1.0

    # -- events -------------------------------------------------------------------------------
    def _supports_leaf(self, event: Event) -> bool | str:
        if isinstance(event, ShuffledEpochsEvent) and isinstance(event.event, GaussianEvent):
            return True
        return ("shuffled epochs with Gaussian noise (ShuffledEpochsEvent); for Poisson "
                "sampling use 'pld'")

    def _check_history(self, history: tuple) -> None:
        keys = {leaf.protocol_key()
                for leaf, _ in leaves_to_check(history, lambda e: isinstance(e, ProtocolEvent))
                if isinstance(leaf, ProtocolEvent)}
        if len(keys) > 1:
            raise UnsupportedEventError(history[-1], self.name, "one shuffled-epochs protocol "
                                        "(dataset size, batch size, drop_last) per accountant; "
                                        "use one accountant per phase", ())

    def step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """Version 0.1: with ``batch_size`` set, one step of shuffled epochs with ``sample_rate
        = 1 / steps per epoch`` (:func:`legacy_shuffled_step`); without it there is no protocol
        to name and the step is Opacus' Poisson step, which this accountant refuses."""
        if self.batch_size is None:
            event = super().step_event(noise_multiplier, sample_rate)
            raise UnsupportedEventError(
                event, self.name, "step() is a Poisson step unless the accountant was created "
                "with batch_size (version 0.1); compose a ShuffledEpochsEvent, e.g. "
                "sampler.event(noise_multiplier, epochs)")
        sigma = check_positive("noise_multiplier", noise_multiplier)
        return legacy_shuffled_step(sigma, sample_rate, self.batch_size, self.dataset_size)

    def plan(self, history=None) -> EpochPlan | None:
        """The epochs of ``history`` (default: the recorded one); None when it records no
        private step."""
        history = self._history if history is None else history
        passes = cut_passes([(leaf, count) for leaf, count in private_leaves(history)
                             if isinstance(leaf, ProtocolEvent)])
        return epoch_plan(passes) if passes else None

    def _users_per_epoch(self, plan: EpochPlan) -> int | None:
        """n of the shuffle theorems (batch size 1 only), or None when they do not apply."""
        if plan.batch_size != 1:
            return None
        n = plan.dataset_size
        if n > sys.float_info.max:   # the theorem's formulas are evaluated in floats
            return None
        return n if n >= 2 else None

    def _mu_total(self, plan: EpochPlan) -> float:
        """``sensitivity * sqrt(sum_e 1/sigma_e^2)`` (Dong, Roth, Su 2022, Cor. 3.3), scaled by
        the smallest sigma so that ``sigma^2`` never underflows (``inf`` past the float range),
        and rounded up by a relative ``1e-12`` (the few roundings of the sum, the square root and
        the products are below ``1e-15``; a larger ``mu`` is a weaker guarantee, so the upper
        bounds computed from it stay valid)."""
        s0 = min(smin for (smin, _, _) in plan.epochs)
        total = math.fsum(float(count) * (s0 / smin) ** 2
                          for (smin, _, _), count in plan.epochs.items())
        with np.errstate(over="ignore"):
            scale = self.sensitivity / s0 if s0 > 0 else math.inf
        return scale * math.sqrt(total) * (1 + 1e-12) if math.isfinite(scale) else math.inf

    # -- upper bound ----------------------------------------------------------------------------
    def _epoch_profile(self, sigma: float, n: int):
        mu = self.sensitivity / sigma
        amplified = swap_bounds.gaussian_profile(sigma, n, sensitivity=2.0)

        def profile(eps):
            # (the log-space profile times 1 + 1e-12 was below the exact one from noise 3 on:
            # gaussian_delta_upper_many)
            eps = np.asarray(eps, dtype=float)
            return np.minimum(gaussian_delta_upper_many(eps, mu), amplified(eps))
        return profile, amplified

    def _amplification_helps(self, sigma: float, n: int) -> bool:
        """Whether the amplified profile is below the Gaussian one anywhere it matters."""
        mu = self.sensitivity / sigma
        probe = np.array([gaussian_epsilon(mu, d) for d in (1e-3, 1e-6, 1e-9, 1e-12)])
        amplified = swap_bounds.gaussian_profile(sigma, n, sensitivity=2.0)(probe)
        return bool(np.any(amplified < gaussian_delta(probe, mu)))

    def _grid_step(self, plan: EpochPlan) -> float:
        if self.value_discretization_interval is not None:
            return self.value_discretization_interval
        mu = self.sensitivity / max(smax for (_, smax, _) in plan.epochs)
        return float(np.clip(mu / 200, 1e-5, 2e-3))

    def _amplified_pld(self, plan: EpochPlan) -> PrivacyLossDistribution | None:
        n = self._users_per_epoch(plan)
        if n is None:
            return None
        sigmas = {smin for (smin, _, _) in plan.epochs}
        if not any(self._amplification_helps(s, n) for s in sigmas):
            return None
        counts: dict[float, int] = {}
        for (smin, _, _), count in plan.epochs.items():
            counts[smin] = counts.get(smin, 0) + count
        # the Gaussian (no-amplification) loss, sd mu per epoch, is our proxy for the amplified
        # one's spread; it only sets the grid of long runs (every grid is certified)
        spread = math.sqrt(sum(float(c) * (self.sensitivity / s) ** 2 for s, c in counts.items()))
        profiles = {sigma: self._epoch_profile(sigma, n)[0] for sigma in counts}
        ends = {sigma: _profile_end(profile) for sigma, profile in profiles.items()}
        h = self._fit_grid(2.0 * max(ends.values()), _budget_step(self._grid_step(plan), spread))
        total = None
        for sigma, count in counts.items():
            part = PrivacyLossDistribution.from_privacy_profile(
                profiles[sigma], epsilon_max=ends[sigma], symmetric=True,
                value_discretization_interval=h, profile_step=h,
                description=f"shuffled epoch, batch size 1 (sigma={sigma:g}, n={n})")
            part = part.self_compose(count)
            total = part if total is None else total.compose(part)
        return total

    def _fit_grid(self, loss_range: float, h: float) -> float:
        """``h``, checked (:meth:`_check_grid`) when the user chose the grid, else coarsened
        until one epoch's PLD fits in :data:`MAX_EPOCH_GRID_POINTS` points."""
        if self.value_discretization_interval is not None:
            self._check_grid(loss_range, h)
            return h
        return max(h, loss_range / MAX_EPOCH_GRID_POINTS)

    def _check_grid(self, loss_range: float, h: float) -> None:
        """ParameterError when one epoch's PLD would need more than
        :data:`MAX_EPOCH_GRID_POINTS` grid points of step ``h`` over ``loss_range``."""
        if not loss_range / h <= MAX_EPOCH_GRID_POINTS:
            raise ParameterError(
                "value_discretization_interval", self.value_discretization_interval,
                f">= {loss_range / MAX_EPOCH_GRID_POINTS:.3g} for this history (privacy losses "
                f"spread over {loss_range:.4g}: at most {MAX_EPOCH_GRID_POINTS} grid points per "
                "epoch fit in memory)", "or leave it None: the accountant then chooses the grid")

    def _upper_epsilon(self, plan: EpochPlan, delta: float) -> float:
        eps = gaussian_epsilon(self._mu_total(plan), delta)
        pld = self._amplified_pld(plan)
        if pld is not None:
            try:
                eps = min(eps, pld.epsilon_for_delta(delta, lower=False).upper)
            except NumericalError:
                pass  # the closed-form Gaussian bound stands
        return eps

    def _upper_delta(self, plan: EpochPlan, epsilon: float) -> float:
        value = gaussian_delta_upper(epsilon, self._mu_total(plan))
        pld = self._amplified_pld(plan)
        if pld is not None:
            try:
                value = min(value, pld.delta_for_epsilon(epsilon, lower=False).upper)
            except NumericalError:
                pass
        return min(value + 1e-300, 1.0)

    # -- lower bound ----------------------------------------------------------------------------
    def _used_fraction(self, plan: EpochPlan, released: int) -> float:
        """A lower bound on the probability that the differing example is in one of the first
        ``released`` batches of an epoch.  Using a smaller probability than the true one is a
        post-processing (replace the output, with the right probability, by a fresh draw of the
        "example not used" distribution), so the lower bound stays valid.  With ``dataset_size``
        N it is ``min(released b, N) / N``; without it, N may be as large as ``T b + b - 1``
        (``drop_last``), and we use that."""
        b, n = plan.batch_size, plan.dataset_size
        return min(released * b, n) / n

    def _lower_plds(self, plan: EpochPlan) -> list[PrivacyLossDistribution]:
        """The Chua et al. pair's PLDs (one per realisable pair of means), each epoch at its
        largest noise multiplier, at least :data:`LOWER_BOUND_MIN_NOISE` (on a ladder beyond
        :data:`LOWER_BOUND_KINDS` distinct epochs, :func:`lower_bound_noise`): adding independent
        Gaussian noise to a step is a post-processing, so a pair with more noise is still a
        lower bound (and its bin masses stay representable in floating point).  The grid step is the
        option (or a default from the noise), coarser for long runs (:data:`GRID_BUDGET`): any
        grid gives certified lower bounds (optimistic discretisation), a coarser one is only
        looser."""
        T = plan.steps_per_epoch
        epochs: dict[tuple, int] = {}
        laddered = len(plan.epochs) > LOWER_BOUND_KINDS
        for (_, smax, released), count in plan.epochs.items():
            key = (lower_bound_noise(smax, laddered), released,
                   self._used_fraction(plan, released))
            epochs[key] = epochs.get(key, 0) + count
        if not epochs:
            return []
        smax = max(s for (s, _, _) in epochs)
        h0 = self.value_discretization_interval or float(np.clip(1.0 / (smax * 200), 1e-4, 5e-3))
        if self.value_discretization_interval is not None:
            self._check_grid(_PAIR_LOSS_RANGE, h0)
        out = []
        for mp, mq in shuffle_bounds.neighbour_means(self.neighbouring):
            pairs = {key: shuffle_bounds.max_statistic_pair(
                key[0], T, mp, mq, released_steps=key[1], released_fraction=key[2])
                for key in epochs}
            spread = math.sqrt(sum(float(count) * _loss_spread(*pairs[key]) ** 2
                                   for key, count in epochs.items()))
            h = self._fit_grid(max(_finite_loss_range(*pair) for pair in pairs.values()),
                               _budget_step(h0, spread))
            out.append(shuffle_bounds.pairs_pld(pairs, epochs, h))
        return out

    def _lower(self, plan: EpochPlan, query) -> float:
        """The best certified lower bound of the pairs of :meth:`_lower_plds` for ``plan``."""
        if not self.lower_bound or plan.steps_per_epoch > sys.float_info.max:
            return 0.0   # 0 is a valid lower bound (the pair's formulas need a float T)
        best = 0.0
        for pld in self._lower_plds(plan):
            try:
                best = max(best, query(pld))
            except NumericalError:
                continue  # 0 is always a valid lower bound
        return best

    def _single_epoch_lower(self, plan: EpochPlan, query) -> float:
        """:meth:`_lower` of the plan's most revealing single epoch (the smallest largest noise,
        the most released steps); 0 for a plan of one epoch.  One epoch's outputs are a
        marginal of the run's on the pair's fixed datasets, so its lower bound holds for the
        run; the run's own composition is held on a grid that coarsens with the number of
        epochs and can certify less (n = 10^6, sigma = 1, swap: 0.0204 for one epoch, 0 for
        1000 epochs, before one epoch was also asked)."""
        if sum(plan.epochs.values()) <= 1:
            return 0.0
        key = min(plan.epochs, key=lambda k: (k[1], -k[2]))
        return self._lower(EpochPlan(plan.steps_per_epoch, {key: 1}, plan.batch_size,
                                     plan.dataset_size), query)

    def _lower_from_larger_delta(self, history, delta: float, bounds: Bounds) -> Bounds:
        """The base class's far-tail lower bound (certified at larger deltas), and for shuffled
        epochs at least the single epoch's at ``delta`` (:meth:`_single_epoch_lower`, which
        :meth:`_epsilon_bounds` leaves to this step when the run certifies nothing)."""
        found = super()._lower_from_larger_delta(history, delta, bounds)
        plan = self.plan(history) if self._shuffle_rounds(history) is None else None
        if plan is None:   # shuffle-model rounds (or nothing to cut into epochs)
            return found
        single = self._single_epoch_lower(plan, lambda pld: pld.epsilon_for_delta(delta).lower)
        return certified_bounds(max(found.lower, single), found.upper, f"epsilon at delta={delta!r}")

    # -- the contract ---------------------------------------------------------------------------
    def _epsilon_bounds(self, history, delta: float) -> Bounds:
        plan = self.plan(history)
        upper = self._upper_epsilon(plan, delta)
        query = lambda pld: pld.epsilon_for_delta(delta).lower  # noqa: E731
        lower = self._lower(plan, query)
        if lower > 0 or delta >= FAR_TAIL_DELTA:
            lower = max(lower, self._single_epoch_lower(plan, query))
        # else 0: the base class's far-tail step (_lower_from_larger_delta) certifies the run
        # at larger deltas and adds the single epoch
        return certified_bounds(lower, upper, f"epsilon at delta={delta!r}")

    def _delta_bounds(self, history, epsilon: float) -> Bounds:
        plan = self.plan(history)
        upper = self._upper_delta(plan, epsilon)
        query = lambda pld: pld.delta_for_epsilon(epsilon).lower  # noqa: E731
        lower = max(self._lower(plan, query), self._single_epoch_lower(plan, query))
        return certified_bounds(lower, upper, f"delta at epsilon={epsilon!r}")

    def no_amplification_epsilon(self, delta: float) -> float:
        """Epsilon without any amplification (Gaussian DP composition of one step per epoch;
        at ``delta = 0``, inf: the Gaussian mechanism has no pure-DP epsilon)."""
        delta = check_query_delta(delta)
        plan = self.plan()
        if any(is_non_private(leaf) for leaf, _ in private_leaves(self._history)):
            return math.inf
        if plan is None:
            return 0.0
        mu = self._mu_total(plan)
        if delta == 0.0:
            return math.inf if mu > 0 else 0.0
        return gaussian_epsilon(mu, delta)

    def summary(self, delta: float) -> str:
        """A short report: lower bound, upper bound, no-amplification value, and advice."""
        lower, upper = self.get_epsilon_bounds(delta)
        plan = self.plan()
        non_private = any(is_non_private(leaf) for leaf, _ in private_leaves(self._history))
        if plan is None or non_private:
            # (an empty ledger raised an AttributeError, a non-private step a TypeError)
            what = "a non-private step recorded" if non_private else "no private step recorded"
            return (f"shuffled epochs ({self.neighbouring}), delta={delta:g}: {what}, epsilon "
                    f"in {interval_text(lower, upper, digits=4)}")
        plain = self.no_amplification_epsilon(delta)
        lines = [f"shuffled epochs ({self.neighbouring}, batch size {plan.batch_size}), "
                 f"delta={delta:g}: epsilon in {interval_text(lower, upper, digits=4)} "
                 f"(no amplification: {upper_text(plain, digits=4)})"]
        if upper >= 0.95 * plain:
            lines.append("The upper bound is (close to) no amplification: Poisson subsampling "
                         "('pld') or random check-ins ('checkin') with their own accountants give "
                         "far better guarantees at the same noise. Reporting the Poisson epsilon "
                         "for shuffled batches is not valid (Chua et al. 2024).")
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------------
    # The shuffle model: ShuffleEvent(num_users, randomizer), SelfComposedEvent for rounds.
    # Bounds: dpplugins.amplification.shuffle_model (its docstring has the theorems, the
    # validity verdict on the variation-ratio bound, and the tables).  Randomizers:
    # RandomizedResponseEvent(eps0, k) -- binary RR by the exact worst case over datasets, k-RR by
    # its privacy blanket or the FMT23 stronger clone; EpsilonDeltaEvent(eps0, 0) -- FMT21 Thm 3.1
    # (and Balle et al. 2020 Thm 5.1); EpsilonDeltaEvent(eps0, delta0 > 0) -- Balle et al. 2020
    # Thm 5.1 for (eps0, delta0) randomizers, or no amplification; the families with exact
    # parameters (UnaryEncodingEvent, SubsetSelectionEvent, LocalHashingEvent,
    # BoundedLaplaceEvent) -- dpplugins.amplification.shuffle_model_families (FMT21 at their
    # eps0, the FMT23 errata's Lemma 7.3 and a relaxed privacy blanket where they apply).
    # Replace-one bounds, which
    # cover zero-out ("add_remove").  One round: the direct bounds; several rounds: the rounds'
    # dominating PLDs composed by FFT, beside exact lower-bound pairs composed the same way.  A
    # ledger holds shuffle-model rounds or shuffled epochs, not both.
    # ------------------------------------------------------------------------------------------
    _epochs_supports_leaf = _supports_leaf
    _epochs_check_history = _check_history
    _epochs_epsilon_bounds = _epsilon_bounds
    _epochs_delta_bounds = _delta_bounds
    _epochs_pure_epsilon_bounds = Accountant._pure_epsilon_bounds
    theorem: ClassVar[str] = theorem + (
        " Shuffle-model rounds (ShuffleEvent): binary RR by its exact worst case over datasets "
        "(branch and bound), k-RR by its privacy blanket (Balle et al. 2019) or the FMT23 "
        "stronger clone (errata class E_eps0), general eps0-DP randomizers by the FMT23 stronger "
        "clone (valid when every user runs the same randomizer: the privacy blanket spread to "
        "binary RR's, our derivation) and FMT21 Thm 3.1, "
        "(eps0, delta0) randomizers by Balle et al. 2020 Thm 5.1; unary encoding (SUE: "
        "Erlingsson et al. 2014; OUE: Wang et al. 2017), k-subset selection (Ye & Barg 2018; Wang "
        "et al. 2016), optimized local hashing (Wang et al. 2017) and Laplace on [0, 1] (Dwork et "
        "al. 2006) by the stronger clone at their eps0, the FMT23 errata's Lemma 7.3 "
        "(arXiv:2208.04591) with their exact (p, q) and a relaxed privacy blanket (Balle et al. "
        "2019), k-RR with a local epsilon per group of users by the blanket with a "
        "Poisson-binomial count (our extension of Balle et al. 2019), lower bounds from exact "
        "dataset pairs; "
        "rounds composed by PLD/FFT (Doroshenko et al. 2022).")

    @staticmethod
    def _shuffle_model_randomizer(event: Event):
        """The randomizer of a ShuffleEvent -- a
        :class:`~dpplugins.amplification.shuffle_model.Randomizer` (randomized response, (eps0,
        delta0) mechanisms, and the families at eps0 = 0, whose reports do not depend on the
        value) or a :class:`~dpplugins.amplification.shuffle_model_families.Family` -- or the
        reason it is refused."""
        from dpplugins.amplification.shuffle_model import Randomizer
        from dpplugins.amplification.shuffle_model_heterogeneous import GroupedKRR, capped_groups
        from dpplugins.events import (LOCAL_RANDOMIZER_EVENTS, EpsilonDeltaEvent,
                                      PersonalizedRandomizedResponseEvent,
                                      RandomizedResponseEvent)

        inner = event.randomizer
        try:
            if isinstance(inner, RandomizedResponseEvent):
                return Randomizer("krr", inner.epsilon0, inner.num_buckets)
            if isinstance(inner, EpsilonDeltaEvent):
                return Randomizer("general", inner.epsilon, 2, inner.delta)
            if isinstance(inner, PersonalizedRandomizedResponseEvent):
                # more than MAX_USERS users: accounted as MAX_USERS of them (see _shuffle_rounds)
                grouped = GroupedKRR(capped_groups(inner.groups), inner.num_buckets)
                if len(grouped.groups) == 1:   # one local epsilon: plain k-RR (tighter bounds)
                    return Randomizer("krr", grouped.eps0, grouped.k)
                return grouped
        except ParameterError as error:
            hint = f"; {error.hint}" if error.hint else ""
            return f"a shuffle-model randomizer with {error.name} {error.valid}{hint}"
        if isinstance(inner, LOCAL_RANDOMIZER_EVENTS):
            return _family_of(inner, event.num_users)
        return ("a ShuffleEvent whose randomizer is a RandomizedResponseEvent, a "
                "PersonalizedRandomizedResponseEvent, an EpsilonDeltaEvent (delta < 1), a "
                "UnaryEncodingEvent, a SubsetSelectionEvent, a LocalHashingEvent or a "
                "BoundedLaplaceEvent")

    def _supports_leaf(self, event: Event) -> bool | str:
        from dpplugins.events import ShuffleEvent

        if isinstance(event, ShuffleEvent):
            found = self._shuffle_model_randomizer(event)
            return found if isinstance(found, str) else True
        verdict = self._epochs_supports_leaf(event)
        if verdict is True:
            return True
        return verdict + "; or shuffle-model rounds (ShuffleEvent)"

    def _check_history(self, history: tuple) -> None:
        from dpplugins.events import NonPrivateEvent, ShuffleEvent

        def counted(leaf):
            return not isinstance(leaf, NonPrivateEvent)

        kinds = {isinstance(leaf, ShuffleEvent)
                 for leaf, _ in leaves_to_check(history, counted) if counted(leaf)}
        if len(kinds) > 1:
            raise UnsupportedEventError(history[-1], self.name, "shuffle-model rounds "
                                        "(ShuffleEvent) and shuffled epochs in one ledger; use "
                                        "one accountant for each", ())
        self._epochs_check_history(history)

    def _shuffle_rounds(self, history: tuple, *, uncapped_only: bool = False):
        """``[Round, ...]`` when the history is shuffle-model rounds, else None;
        ``uncapped_only``: only the rounds of at most MAX_USERS users (None if there are
        none)."""
        from dpplugins.amplification.shuffle_model import Round
        from dpplugins.events import ShuffleEvent

        leaves = [(leaf, c) for leaf, c in private_leaves(history)
                  if isinstance(leaf, ShuffleEvent)
                  and not (uncapped_only and leaf.num_users > MAX_USERS)]
        if not leaves:
            return None
        counts: dict[tuple, int] = {}
        for leaf, count in leaves:
            key = (self._shuffle_model_randomizer(leaf), leaf.num_users)
            counts[key] = counts.get(key, 0) + count
        # more users cannot increase epsilon (dpplugins.amplification.shuffle.check_users): a
        # round of more than MAX_USERS users is accounted as one of MAX_USERS for the upper
        # bounds (its lower bounds are not valid for more users: see _users_capped)
        return [Round(r, min(n, MAX_USERS), c) for (r, n), c in counts.items()]

    @staticmethod
    def _users_capped(history: tuple) -> bool:
        """Whether a round has more than MAX_USERS users.  Such a round's lower-bound datasets
        are those of MAX_USERS users, not a lower bound for more, so the lower bounds then come
        from the other rounds alone (:meth:`_uncapped_lower`)."""
        from dpplugins.events import ShuffleEvent

        return any(isinstance(leaf, ShuffleEvent) and leaf.num_users > MAX_USERS
                   for leaf, _ in private_leaves(history))

    def _epsilon_bounds(self, history, delta: float) -> Bounds:
        rounds = self._shuffle_rounds(history)
        if rounds is None:
            return self._epochs_epsilon_bounds(history, delta)
        if delta < _published(rounds):
            # a round's randomizer may publish its input with probability delta0
            # (shuffle_model.lower_bound): no finite epsilon, and the lower bound says so
            return Bounds(math.inf if self.lower_bound else 0.0, math.inf)
        # the rounds without amplification (basic composition) cap the upper bound, and answer
        # where delta is below what the composition can certify
        cap = _no_amplification(rounds, delta)
        capped = self._users_capped(history)
        try:
            bounds = self._rounds_epsilon_bounds(rounds, delta, self.lower_bound and not capped)
        except NumericalError:
            if math.isinf(cap):
                raise
            if capped:
                lower = self._uncapped_lower(history, delta=delta)
            elif self.lower_bound:
                lower = _single_round_lower(rounds, delta)
            else:
                lower = 0.0
            return certified_bounds(lower, cap, f"epsilon at delta={delta!r}")
        upper = min(bounds.upper, cap)
        lower = self._uncapped_lower(history, delta=delta) if capped else bounds.lower
        return certified_bounds(lower, upper, f"epsilon at delta={delta!r}")

    def _uncapped_lower(self, history: tuple, *, delta: float | None = None,
                        epsilon: float | None = None) -> float:
        """A certified lower bound on epsilon(``delta``) or delta(``epsilon``) from the rounds of
        at most MAX_USERS users alone (0 if there are none, or without ``lower_bound``).

        Why it is valid: dropping the other rounds' reports is a post-processing of the
        history's output, so the pair of datasets that certifies a lower bound for the kept
        rounds (each round on fixed datasets) certifies it for the whole history; a round of
        more than MAX_USERS users is only accounted as MAX_USERS of them for the upper bounds,
        and its own lower-bound datasets (of MAX_USERS users) are not valid for it."""
        kept = self._shuffle_rounds(history, uncapped_only=True)
        if not self.lower_bound or kept is None:
            return 0.0
        try:
            if epsilon is not None:
                return self._rounds_delta_bounds(kept, epsilon, True).lower
            return self._rounds_epsilon_bounds(kept, delta, True).lower
        except NumericalError:
            # 0 is always a lower bound; any one round is a post-processing of the history
            return 0.0 if epsilon is not None else _single_round_lower(kept, delta)

    def _rounds_epsilon_bounds(self, rounds, delta: float, lower: bool) -> Bounds:
        from dpplugins.amplification import shuffle_model, shuffle_model_heterogeneous
        from dpplugins.amplification import shuffle_model_families as shuffle_families

        families = _families_path(rounds)
        if families == "grouped":
            r = rounds[0]
            found = shuffle_model_heterogeneous.epsilon_bounds(r.randomizer.groups,
                                                               r.randomizer.k, delta)
            return found if lower else Bounds(0.0, found.upper)
        if families == "one":
            r = rounds[0]
            if r.count == 1:
                if not lower:
                    return Bounds(0.0, shuffle_families.epsilon(r.randomizer, r.n, delta).epsilon)
                return shuffle_families.epsilon_bounds(r.randomizer, r.n, delta)
            return shuffle_families.composed_epsilon_bounds(
                r.randomizer, r.n, r.count, delta,
                value_discretization_interval=self.value_discretization_interval, lower=lower)
        if families == "mixed":
            return shuffle_families.composed_rounds_epsilon_bounds(
                rounds, delta, value_discretization_interval=self.value_discretization_interval,
                lower=lower)
        if len(rounds) == 1 and rounds[0].count == 1 and rounds[0].n >= 2:
            r = rounds[0]
            if not lower:
                return Bounds(0.0, shuffle_model.epsilon(r.randomizer, r.n, delta).epsilon)
            return shuffle_model.epsilon_bounds(r.randomizer, r.n, delta)
        return shuffle_model.composed_epsilon_bounds(
            rounds, delta, value_discretization_interval=self.value_discretization_interval,
            lower=lower)

    def _delta_bounds(self, history, epsilon: float) -> Bounds:
        rounds = self._shuffle_rounds(history)
        if rounds is None:
            return self._epochs_delta_bounds(history, epsilon)
        capped = self._users_capped(history)
        try:
            found = self._rounds_delta_bounds(rounds, epsilon, self.lower_bound and not capped)
        except NumericalError:
            # (10^15 rounds: the composition needs 3e11 grid bins) the rounds without
            # amplification still bound it, and one round's lower bound holds
            cap = _no_amplification_delta(rounds, epsilon)
            lower = 0.0
            if self.lower_bound:
                lower = (self._uncapped_lower(history, epsilon=epsilon) if capped
                         else _single_round_delta_lower(rounds, epsilon))
            found = certified_bounds(lower, cap, f"delta at epsilon={epsilon!r}")
        if not self.lower_bound:
            return Bounds(0.0, found.upper)
        lower = self._uncapped_lower(history, epsilon=epsilon) if capped else found.lower
        # a round's randomizer may publish its input with probability delta0, whatever the
        # number of users: delta >= delta0
        return certified_bounds(max(lower, _published(rounds)), found.upper,
                                f"delta at epsilon={epsilon!r}")

    def _rounds_delta_bounds(self, rounds, epsilon: float, lower: bool) -> Bounds:
        from dpplugins.amplification import shuffle_model, shuffle_model_heterogeneous
        from dpplugins.amplification import shuffle_model_families as shuffle_families

        families = _families_path(rounds)
        if families == "grouped":
            r = rounds[0]
            found = shuffle_model_heterogeneous.delta_bounds(r.randomizer.groups,
                                                             r.randomizer.k, epsilon)
        elif families == "one":
            r = rounds[0]
            if r.count == 1:
                found = shuffle_families.delta_bounds(r.randomizer, r.n, epsilon)
            else:
                found = shuffle_families.composed_delta_bounds(
                    r.randomizer, r.n, r.count, epsilon,
                    value_discretization_interval=self.value_discretization_interval,
                    lower=lower)
        elif families == "mixed":
            found = shuffle_families.composed_rounds_delta_bounds(
                rounds, epsilon, value_discretization_interval=self.value_discretization_interval,
                lower=lower)
        elif len(rounds) == 1 and rounds[0].count == 1:
            r = rounds[0]
            found = shuffle_model.delta_bounds(r.randomizer, r.n, epsilon)
        else:
            found = shuffle_model.composed_delta_bounds(
                rounds, epsilon, value_discretization_interval=self.value_discretization_interval,
                lower=lower)
        return found if lower else Bounds(0.0, found.upper)

    def _pure_epsilon_bounds(self, history: tuple) -> Bounds:
        """delta = 0: shuffling does not amplify pure DP (the event "every report is the user's
        own value" has privacy loss eps0 under k-RR), so the rounds' eps0 add up, and binary RR
        attains the sum; (eps0, delta0 > 0) randomizers certify no pure epsilon.  The families
        attain their eps0 too (our derivation): with every other user at x0, the event "every
        report is in category A" (unary encoding: bit x0 set, bit x1 clear; subset: S holds x0
        not x1; local hashing: y = h(x0) != h(x1); Laplace on [0, 1], x0 = 1, x1 = 0: y > 1) has
        probability ratio exactly e^eps0 between the datasets, and the rounds' events multiply,
        so the sum is attained (lower = upper).  k-RR with a local epsilon per group: the
        differing user in the group of the largest, so its eps0 is that largest."""
        rounds = self._shuffle_rounds(history)
        if rounds is None:
            return self._epochs_pure_epsilon_bounds(history)
        if any(_delta0(r.randomizer) > 0 for r in rounds):
            return Bounds(0.0, math.inf)
        from dpplugins.amplification.shuffle_model import basic_composition_epsilon

        # the exact sum rounded up, and rounded down (minus the negated sum rounded up)
        upper = basic_composition_epsilon((r.randomizer, r.count) for r in rounds)
        lower = basic_composition_epsilon((r.randomizer, -r.count) for r in rounds)
        return Bounds(max(0.0, -lower), upper)

    _epochs_no_amplification_epsilon = no_amplification_epsilon
    _epochs_summary = summary

    def no_amplification_epsilon(self, delta: float) -> float:
        """Shuffled epochs: see above.  Shuffle-model rounds: the randomizers' epsilons add up
        (no amplification; with delta0 > 0 the sum of the rounds' delta0 must fit in delta)."""
        delta = check_query_delta(delta)
        rounds = self._shuffle_rounds(tuple(self._history)) if self._history else None
        if rounds is None:
            return self._epochs_no_amplification_epsilon(delta)
        return _no_amplification(rounds, delta)

    def summary(self, delta: float) -> str:
        """A short report (shuffled epochs as above; shuffle-model rounds: the bounds and what
        they rest on)."""
        rounds = self._shuffle_rounds(tuple(self._history)) if self._history else None
        if rounds is None:
            return self._epochs_summary(delta)
        lower, upper = self.get_epsilon_bounds(delta)
        names = ", ".join(f"{r.count} x {r.randomizer.name} (eps0={r.randomizer.eps0:g}, "
                          f"n={r.n})" for r in rounds)
        if self._users_capped(tuple(self._history)):
            names += (f" (rounds of more than {MAX_USERS:.0e} users accounted as {MAX_USERS:.0e}: "
                      "more users cannot increase epsilon; lower bound from the other rounds "
                      "only)")
        return (f"shuffle model ({self.neighbouring}; replace-one bounds), {names}, "
                f"delta={delta:g}: epsilon in {interval_text(lower, upper, digits=4)} (no "
                f"amplification: {upper_text(self.no_amplification_epsilon(delta), digits=4)})")


# -- shuffle-model families (module level: pure functions the accountant calls) -----------------
#: family constructors' parameter names -> the event fields they come from
_FAMILY_FIELDS = {"eps0": "epsilon0", "d": "num_values", "k": "subset_size", "g": "num_buckets"}


def _family_of(inner: Event, num_users: int):
    """The :class:`~dpplugins.amplification.shuffle_model_families.Family` of a local-randomizer
    event (``Randomizer("general", 0)`` at epsilon0 = 0: the reports do not depend on the
    values), or the reason it is refused (naming the event's field and its valid range)."""
    from dpplugins.amplification import shuffle_model_families as shuffle_families
    from dpplugins.amplification.shuffle_model import Randomizer
    from dpplugins.events import (LocalHashingEvent, SubsetSelectionEvent,
                                  UnaryEncodingEvent)

    kind = type(inner).__name__
    if inner.epsilon0 == 0:
        return Randomizer("general", 0.0)
    if num_users < 2:
        return (f"ShuffleEvent.num_users >= 2 for a {kind} randomizer (the family bounds are "
                "for shuffled reports of at least two users; one user's report is the local "
                "randomizer itself)")
    try:
        if isinstance(inner, UnaryEncodingEvent):
            return shuffle_families.unary_encoding(inner.epsilon0, inner.num_values,
                                                   optimized=inner.optimized)
        if isinstance(inner, SubsetSelectionEvent):
            return shuffle_families.subset_selection(inner.epsilon0, inner.num_values,
                                                     inner.subset_size)
        if isinstance(inner, LocalHashingEvent):
            return shuffle_families.local_hashing(inner.epsilon0, inner.num_buckets)
        return shuffle_families.laplace_bounded(inner.epsilon0)
    except ParameterError as error:
        field = _FAMILY_FIELDS.get(error.name, error.name)
        hint = f"; {error.hint}" if error.hint else ""
        return (f"a shuffle-model {kind} with {kind}.{field} {error.valid} (the range of the "
                f"family bounds, dpplugins.amplification.shuffle_model_families){hint}")


def _no_amplification(rounds, delta: float) -> float:
    """Epsilon of the rounds without amplification: each round is (eps0, delta0)-DP like its
    randomizer (:func:`dpplugins.amplification.shuffle.no_amplification_epsilon`).  Rounds of
    one randomizer compose by the optimal composition theorem (Kairouz, Oh, Viswanath 2015,
    arXiv:1311.0776, Thm 3.3; :func:`dpplugins.accountants.checkin.composed_local_epsilon`);
    several randomizers by basic composition (Dwork & Roth 2014, Thm 3.16): ``sum count eps0``
    (:func:`~dpplugins.amplification.shuffle_model.basic_composition_epsilon`) when ``sum count
    delta0 <= delta``, else inf."""
    if len(rounds) == 1 and delta > 0:
        from dpplugins.accountants.checkin import composed_local_epsilon

        r = rounds[0]
        return composed_local_epsilon(delta, r.randomizer.eps0, _delta0(r.randomizer), r.count)
    spent = math.fsum(r.count * _delta0(r.randomizer) for r in rounds)
    if spent > delta:
        return math.inf
    from dpplugins.amplification.shuffle_model import basic_composition_epsilon

    return basic_composition_epsilon((r.randomizer, r.count) for r in rounds)


def _single_round_delta_lower(rounds, epsilon: float) -> float:
    """The best one-round lower bound on delta(epsilon) among ``rounds`` (a post-processing of
    their composition, as :func:`_single_round_lower`)."""
    from dpplugins.amplification.shuffle_model_families import single_round_delta_lower

    return single_round_delta_lower(rounds, epsilon)


def _single_round_lower(rounds, delta: float) -> float:
    """The best one-round lower bound on epsilon(delta) among ``rounds``: any one round is a
    post-processing of their composition."""
    from dpplugins.amplification.shuffle_model_families import single_round_epsilon_lower

    return single_round_epsilon_lower(rounds, delta)


def _published(rounds) -> float:
    """``1 - prod_r (1 - delta0_r)^count_r``, rounded down: every round's (eps0, delta0)
    randomizer may publish its input with probability delta0, independently, so the
    differing user's input is published in some round with this probability, and delta(eps)
    is at least this at every eps (a certified lower bound;
    :func:`dpplugins.amplification.shuffle.epsilon` has the argument for one round; the rounds
    are independent).  It was the largest delta0 alone: 10^5 rounds of delta0 = 1e-9 publish
    with probability 1e-4, so epsilon(1e-6) is inf -- the query refused after asking for 10^7
    grid bins."""
    largest = max((_delta0(r.randomizer) for r in rounds), default=0.0)   # one round: exact
    log_kept = math.fsum(r.count * math.log1p(-_delta0(r.randomizer)) for r in rounds
                         if _delta0(r.randomizer) > 0)
    # log1p, the products, the sum and expm1 round by a few u relative (times |log_kept| for
    # the argument's absolute error); 1e-12 covers them
    return max(largest, -math.expm1(log_kept) * (1 - 1e-12))


def _no_amplification_delta(rounds, epsilon: float) -> float:
    """Delta at ``epsilon`` of the rounds without amplification (as :func:`_no_amplification`):
    one randomizer by the optimal composition theorem
    (:func:`dpplugins.accountants.checkin.composed_local_delta`), several by basic composition
    (``sum count delta0`` where ``epsilon >= sum count eps0``, else 1)."""
    from dpplugins.accountants.checkin import composed_local_delta

    if len(rounds) == 1:
        r = rounds[0]
        return composed_local_delta(epsilon, r.randomizer.eps0, _delta0(r.randomizer), r.count)
    from dpplugins.amplification.shuffle_model import basic_composition_epsilon

    if epsilon >= basic_composition_epsilon((r.randomizer, r.count) for r in rounds):
        return min(math.fsum(r.count * _delta0(r.randomizer) for r in rounds) * (1 + 1e-12),
                   1.0)
    return 1.0


def _delta0(spec) -> float:
    """delta0 of a round's randomizer (0 for a family: pure eps0-LDP)."""
    return getattr(spec, "delta0", 0.0)


def _families_path(rounds) -> str:
    """``"one"``: one (family, n) kind of round; ``"grouped"``: one round of k-RR with a local
    epsilon per group of users; ``"mixed"``: families or such rounds with other rounds, several
    of them, or grouped rounds composed; ``"none"``: no family (the randomized-response /
    (eps0, delta0) path)."""
    from dpplugins.amplification import shuffle_model_families as shuffle_families
    from dpplugins.amplification.shuffle_model_heterogeneous import GroupedKRR
    grouped = [r for r in rounds if isinstance(r.randomizer, GroupedKRR)]
    fams = [r for r in rounds if isinstance(r.randomizer, shuffle_families.Family)]
    if grouped and len(rounds) == 1 and rounds[0].count == 1:
        return "grouped"
    if not fams and not grouped:
        return "none"
    return "one" if len(rounds) == 1 and fams else "mixed"
