"""The random-allocation accountant (registry name ``"balls_and_bins"``): DP-SGD where every
example is used in uniformly random steps of each epoch.

What is accounted: an epoch has ``t`` steps; each example independently takes part with
probability ``p`` (``checkin_probability``, default 1) and then in ``k`` (``participations``,
default 1) distinct uniformly random steps of them (balls-and-bins / random allocation: Chua et
al., AISTATS 2025, arXiv:2412.16802; Feldman & Shenfeld 2025, arXiv:2502.08202); each step adds
``N(0, sigma^2 C^2)`` to the sum of its batch's clipped gradients (clipping norm C); batches vary
in size; a step without examples is run anyway (a noise-only update).  Supported: every
``k >= 1`` and ``p`` in (0, 1]; several participations with ``p < 1`` are accounted by the
mixture identities of :mod:`dpplugins.amplification.allocation_participations` ("Check-in
probability", our derivation: an upper bound from the p = 1 epoch's, a lower bound for the
remove direction only).  Steps may also run the Laplace mechanism (``LaplaceEvent``, L1
sensitivity 1) or randomized response (``RandomizedResponseEvent``, read as zero-out), with
any ``k`` and ``p``: :mod:`dpplugins.amplification.allocation_mechanisms` (the same
constructions with the base mechanism's own pair, our derivation); an epoch runs one family
(Laplace epochs at their smallest scale for the upper bound and largest for the lower bound,
randomized response at its largest and smallest ``epsilon0``), and a ledger that mixes families
inside an epoch is refused when the event is composed.  The matching samplers are
``balls_and_bins(n, t, participations=k, checkin_probability=p)`` and
``RandomCheckIn(n, num_slots=t, checkin_probability=p, variant="averaged")``.  Opacus reports
a step as ``(noise_multiplier, sample_rate)``; here ``sample_rate = 1 / t`` (what Opacus computes
as ``1 / len(data_loader)`` for that sampler; ``k = 1``, ``p = 1``).  Neighbouring relation:
add/remove one example (replace-one is refused: it needs the pair of moving one example between
steps, which these constructions do not bound).

How (certified, both bounds): :mod:`dpplugins.amplification.allocation` -- the dominating pair of
one epoch (Chua et al. 2025; mixed with the absent case for ``p < 1``), reduced to a sum of ``t``
log-normals, bracketed by a dominating pair (convex-order spread) and a dominated pair
(post-processing), and composed over epochs by the PLD engine; for ``k > 1`` the upper bound is
the reduction to ``k`` single allocations and the lower bound a dominated post-processing
(:mod:`dpplugins.amplification.allocation_participations`).  History rules:

* steps are cut into epochs of ``t`` consecutive steps, in order;
* an epoch whose steps use different noise multipliers is accounted at its smallest one for the
  upper bound and at its largest one for the lower bound (adding noise to the less noisy steps
  is a post-processing of the true epoch, so the epoch at the largest noise is dominated by it,
  and the true epoch is dominated by the one at the smallest noise);
* a partial last epoch (training stopped mid-epoch) is a post-processing of a full epoch, so the
  upper bound counts it as full; the lower bound leaves it out (dropping a mechanism from a
  composition cannot increase privacy loss);
* ``t`` may change between epochs, not inside one.

A Monte Carlo estimate (:func:`dpplugins.amplification.allocation.monte_carlo_delta`) is available
as an independent *estimate*; it is never this accountant's answer.

Example::

    >>> from dpplugins.accountants import create
    >>> from dpplugins.samplers import balls_and_bins
    >>> acc = create("balls_and_bins")
    >>> _ = acc.compose(balls_and_bins(10_000, 100).event(1.0, epochs=1))     # one epoch
    >>> lower, upper = acc.get_epsilon_bounds(1e-5)    # about 0.621 (Poisson sampling: 0.718)
    >>> from dpplugins.events import GaussianEvent, RandomAllocationEvent
    >>> acc = create("balls_and_bins")
    >>> _ = acc.compose(RandomAllocationEvent(100, 1, GaussianEvent(1.0), checkin_probability=0.5))
    >>> lower, upper = acc.get_epsilon_bounds(1e-5)    # about 0.32
"""

from __future__ import annotations

import math
import warnings
from typing import ClassVar

from fractions import Fraction

from dpplugins.accountants.base import Accountant, UnsupportedEventError, private_leaves
from dpplugins.amplification.allocation import (default_loss_step, default_summand_step,
                                                random_allocation_pld)
from dpplugins.amplification.allocation_mechanisms import (default_mechanism_summand_step,
                                                           k_out_of_t_mechanism_pld,
                                                           mechanism_k_loss_step,
                                                           mechanism_loss_step,
                                                           step_max_loss, step_total_variation,
                                                           supported_base)
from dpplugins.amplification.allocation_participations import (BracketedPLD, k_out_of_t_loss_step,
                                                               k_out_of_t_pld)
from dpplugins.composition import optimal_composition_delta
from dpplugins.errors import NumericalError, ParameterError, check_count, check_positive
from dpplugins.events import (Event, GaussianEvent, LaplaceEvent, RandomAllocationEvent,
                              RandomCheckInEvent, RandomizedResponseEvent,
                              steps_per_epoch_for_rate)
from dpplugins.numerics import epsilon_lower_from_larger_delta
from dpplugins.passes import cut_passes
from dpplugins.pld import AccuracyWarning, Bounds, certified_bounds
from dpplugins.pld.distribution import FIRST_WINDOW_BINS, within_window_budget

__all__ = ["RandomAllocationAccountant", "steps_per_epoch_from_rate", "epochs_of_history",
           "allocation_of", "epoch_kind"]

#: refinement levels: (factor on the grid steps, factor on the geometric cells)
_LEVELS = ((1.0, 1.0), (0.5, 1.5), (0.25, 2.0))


def steps_per_epoch_from_rate(sample_rate: float, *, name: str = "sample_rate") -> int:
    """The number of steps per epoch ``t`` with ``sample_rate == 1 / t``
    (:func:`dpplugins.events.steps_per_epoch_for_rate`)."""
    return steps_per_epoch_for_rate(name, sample_rate)


def allocation_of(event: Event) -> RandomAllocationEvent | str:
    """``event`` as random allocation this accountant can account (Gaussian noise, Laplace
    noise or randomized response, any ``k`` and check-in probability), or the reason it is
    not.  A
    :class:`~dpplugins.events.RandomCheckInEvent` is that protocol (``k = 1``) when it is
    averaged, no example is dropped from a full slot (no binding ``max_batch_size``), the noise
    is added once to the sum, and empty slots are run as noise-only steps."""
    if isinstance(event, RandomCheckInEvent):
        if event.variant != "averaged":
            return (f"variant={event.variant!r} uses one example per slot, so adding an example "
                    "can replace another (random allocation is variant='averaged')")
        if event.max_batch_size is not None and event.max_batch_size < event.dataset_size:
            return (f"max_batch_size={event.max_batch_size} drops examples from full slots, so "
                    "adding an example can push another out (use no cap)")
        if event.per_example_noise:
            return "per_example_noise=True is a local randomizer, not one noise draw per step"
        event = RandomAllocationEvent(event.num_slots, event.passes, event.event, 1,
                                      event.checkin_probability)
    if not isinstance(event, RandomAllocationEvent):
        return ("random allocation (RandomAllocationEvent: every example in uniformly random "
                "steps of each epoch)")
    base = event.event
    if isinstance(base, GaussianEvent):
        return event
    if not supported_base(base):
        return ("Gaussian or Laplace noise or randomized response on every step (got "
                f"{type(base).__name__})")
    return event


def _pass_bases(events) -> tuple:
    """The base mechanisms that bound a pass whose steps run ``events``: ``(upper, lower)``
    with ``upper`` dominating every step and ``lower`` dominated by every step (module
    docstring: the smallest and the largest noise; for randomized response with one number of
    buckets the largest and the smallest epsilon0, whose trade-off functions are ordered).
    Gaussian noise is keyed by its noise multiplier.  Raises :class:`ParameterError` for a pass
    that mixes mechanisms with no such order."""
    if all(isinstance(e, GaussianEvent) for e in events):
        sigmas = [e.noise_multiplier for e in events]
        return min(sigmas), max(sigmas)
    if all(isinstance(e, LaplaceEvent) for e in events):
        scales = [e.scale for e in events]
        return LaplaceEvent(min(scales)), LaplaceEvent(max(scales))
    if (all(isinstance(e, RandomizedResponseEvent) for e in events)
            and len({e.num_buckets for e in events}) == 1):
        eps = [e.epsilon0 for e in events]
        k = events[0].num_buckets
        return RandomizedResponseEvent(max(eps), k), RandomizedResponseEvent(min(eps), k)
    names = sorted({type(e).__name__ for e in events})
    raise ParameterError("history", f"an epoch whose steps run {', '.join(names)}",
                         "one mechanism family per epoch (Gaussian, Laplace, or randomized "
                         "response with one number of buckets)",
                         "change the mechanism at an epoch boundary")


def _families(event: Event) -> set:
    """The mechanism families of an event's allocation leaves (``(type, buckets)``)."""
    out = set()
    for leaf, _ in private_leaves((event,)):
        verdict = allocation_of(leaf)
        if isinstance(verdict, RandomAllocationEvent):
            base = verdict.event
            out.add((type(base).__name__, getattr(base, "num_buckets", 0)))
    return out


def epochs_of_history(history) -> tuple[dict, dict]:
    """Cut a history of allocation events into epochs (:func:`dpplugins.passes.cut_passes`).

    Returns ``(upper, lower)``: dicts ``(sigma, t) -> number of epochs`` for plain random
    allocation, ``(sigma, t, k, p) -> number of epochs`` otherwise (``k`` the participations,
    ``p`` the check-in probability; :func:`epoch_kind` reads both; ``sigma`` is the base
    mechanism's event for Laplace noise and randomized response, :func:`_pass_bases`);
    ``upper`` keys every epoch on its smallest noise multiplier and counts a partial last epoch
    as a full one, ``lower`` keys complete epochs on their largest noise multiplier and leaves
    partial ones out (module docstring)."""
    # the allocation leaves only: a non-private step is no protocol event (composing one and
    # then an allocation event raised a TypeError from the pass cutter).  Passes are cut on the
    # events as recorded, converted afterwards: a check-in event's own protocol key holds its
    # dataset size and type, which the converted event does not -- two runs of check-ins over
    # 1,000 and 2,000 examples (5 of 10 steps each) were cut as one epoch, 2.19 where two
    # half-epochs certify more (a hostile sweep; Monte Carlo delta(1) = 0.0050 against the
    # upper bound 0.0028 claimed)
    runs = [(leaf, count) for leaf, count in private_leaves(history)
            if isinstance(allocation_of(leaf), RandomAllocationEvent)]
    upper: dict[tuple, int] = {}
    lower: dict[tuple, int] = {}
    for p, count in cut_passes(runs):
        most, least = _pass_bases(p.events)
        proto = allocation_of(p.protocol)
        shape = (proto.steps_per_epoch,)
        if (proto.participations, proto.checkin_probability) != (1, 1.0):
            shape += (proto.participations, proto.checkin_probability)
        key = (most,) + shape
        upper[key] = upper.get(key, 0) + count
        if p.complete:
            key = (least,) + shape
            lower[key] = lower.get(key, 0) + count
    return upper, lower


def epoch_kind(key: tuple) -> tuple:
    """``(sigma, t, k, p)`` of a key of :func:`epochs_of_history` (``sigma`` the Gaussian's
    noise multiplier, or the base mechanism's event for Laplace noise and randomized
    response)."""
    return tuple(key) if len(key) == 4 else (key[0], key[1], 1, 1.0)


def _lower_at_a_larger_delta(composed, bounds: Bounds, delta: float, slack: float
                             ) -> tuple[Bounds, float | None]:
    """``bounds`` with its lower end raised to the certified lower bound at a larger delta
    ``d' = 10, 100, 1000`` times the engine's numerical slack, where that no longer swamps it
    (:func:`~dpplugins.numerics.epsilon_lower_from_larger_delta`), and that ``d'``."""
    lower, larger = epsilon_lower_from_larger_delta(
        lambda d: composed.epsilon_for_delta(d).lower, delta, 10.0 * slack, ratio=10.0)
    if lower > bounds.lower:
        return certified_bounds(lower, bounds.upper, f"epsilon at delta={delta!r}"), larger
    return bounds, None


def _in_order(epochs: dict) -> list:
    """The epochs' ``(key, count)`` in a fixed order: Gaussian kinds first, by value."""
    return sorted(epochs.items(), key=lambda item: (isinstance(item[0][0], Event),
                                                   repr(item[0]) if isinstance(item[0][0], Event)
                                                   else item[0]))


def _loss_step(epochs: dict) -> float:
    """The finest default PLD loss step over the epochs' kinds."""
    def step(sigma, t, k, p):
        if isinstance(sigma, Event):
            return mechanism_k_loss_step(sigma, t, k) if k > 1 else mechanism_loss_step(sigma, t, p)
        return default_loss_step(sigma, t, p) if k == 1 else k_out_of_t_loss_step(sigma, t, k)
    return min(step(*epoch_kind(key)) for key in epochs)


class RandomAllocationAccountant(Accountant):
    """Certified accountant for random allocation (balls-and-bins) DP-SGD.

    Options: ``eps_tolerance`` (relative gap ``(upper - lower) / upper`` to reach by refining the
    grids; :class:`~dpplugins.errors.NumericalError` if it cannot), ``method`` (``"auto"``,
    ``"fft"``, ``"geometric"``; see :func:`~dpplugins.amplification.allocation.allocation_pairs`),
    ``memory_limit`` in bytes.
    """

    name: ClassVar[str] = "balls_and_bins"
    theorem: ClassVar[str] = (
        "random allocation (balls-and-bins) with the dominating pair of Chua et al. (AISTATS 2025), "
        "bracketed by convex-order dominating / post-processed dominated pairs "
        "(dpplugins.amplification.allocation) and composed over epochs by PLD/FFT")
    _option_names = ("neighbouring", "eps_tolerance", "method", "memory_limit")

    def __init__(self, *, neighbouring: str = "add_remove", eps_tolerance: float = 1e-2,
                 method: str = "auto", memory_limit: int = 1 << 30) -> None:
        super().__init__(neighbouring=neighbouring)
        if self.neighbouring != "add_remove":
            raise ParameterError(
                "neighbouring", neighbouring, "'add_remove' (the dominating pair is for adding "
                "or removing one example)",
                "for replace-one, compose the add and remove directions by group privacy or use "
                "the checkin accountant")
        self.eps_tolerance = check_positive("eps_tolerance", eps_tolerance)
        if method not in ("auto", "fft", "geometric"):
            raise ParameterError("method", method, "'auto', 'fft' or 'geometric'")
        self.method = method
        self.memory_limit = check_count("memory_limit", memory_limit, minimum=1 << 20)
        #: the epochs' PLDs by ``(epoch kind, grid step, level, lower)``: only those the
        #: queried history can use are kept (:meth:`_forget_epochs_but`); never pickled
        self._epoch_cache: dict[tuple, BracketedPLD] = {}
        #: the first grid step :func:`within_window_budget` chose, by (epochs, default step)
        self._window_steps: dict[tuple, float] = {}

    def __getstate__(self) -> dict:
        """The base state without the caches: epoch PLDs are rebuilt by the next query (and
        can be hundreds of megabytes)."""
        state = super().__getstate__()
        state["_epoch_cache"] = {}
        state["_window_steps"] = {}
        return state

    # -- events -------------------------------------------------------------------------------
    def _supports_leaf(self, event: Event) -> bool | str:
        verdict = allocation_of(event)
        return True if isinstance(verdict, RandomAllocationEvent) else verdict

    def _check_history(self, history: tuple) -> None:
        """An epoch must run one mechanism family (:func:`_pass_bases`).  The epochs are cut
        only when the new event holds several families or its family differs from the last
        one's (so a long history of one family costs nothing here; a single composition of
        Laplace and Gaussian steps in one epoch was accepted and refused only by the queries)."""
        last = _families(history[-1]) if history else set()
        if len(last) <= 1 and (len(history) < 2 or _families(history[-2]) == last):
            return
        try:
            epochs_of_history(history)
        except ParameterError as error:
            # (supported_by=(): computing the supporting accountants here asked this one
            # again, forever, for a composition that mixes families in one epoch)
            raise UnsupportedEventError(history[-1], self.name,
                                        f"{error.value}: must be {error.valid}", ()) from None

    def step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """``step()`` is Opacus' Poisson step, which random allocation does not account: refused
        (UnsupportedEventError naming the accountants that do).  Version 0.1 read it as one
        step of random allocation into ``1 / sample_rate`` steps, so a Poisson training loop
        that only changed the accountant's name was accounted as random allocation (100 steps
        at rate 0.01: 0.621, below the certified lower bound 0.718 of the Poisson steps that
        ran -- a hostile sweep).  Version-0.1 state dicts still load with that meaning
        (:meth:`_legacy_step_event`)."""
        event = super().step_event(noise_multiplier, sample_rate)
        raise UnsupportedEventError(
            event, self.name, "step() is Opacus' Poisson step, which random allocation does "
            "not account; compose the random allocation that ran, e.g. "
            "balls_and_bins(n, t).event(noise_multiplier, epochs) or "
            "RandomAllocationEvent(t, Fraction(1, t), GaussianEvent(noise_multiplier))")

    def _legacy_step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """Version 0.1's ``step()``: one step of random allocation into ``t = 1 / sample_rate``
        steps (what this accountant's 0.1 state dicts record)."""
        sigma = check_positive("noise_multiplier", noise_multiplier)
        t = steps_per_epoch_from_rate(sample_rate)
        return RandomAllocationEvent(t, Fraction(1, t), GaussianEvent(sigma))

    # -- PLDs ----------------------------------------------------------------------------------
    def _epoch(self, key: tuple, h_loss: float, level: int, lower: bool = True) -> BracketedPLD:
        sigma, t, k, p = epoch_kind(key)
        cache_key = (key, h_loss, level, lower)
        if cache_key not in self._epoch_cache and isinstance(sigma, Event):
            # Laplace noise or randomized response: sigma is the step's event
            grid_factor = _LEVELS[level][0]
            summand_step = (None if grid_factor == 1.0
                            else default_mechanism_summand_step(sigma, t, grid_factor))
            self._epoch_cache[cache_key] = k_out_of_t_mechanism_pld(
                sigma, t, k, 1, checkin_probability=p, value_discretization_interval=h_loss,
                summand_step=summand_step, memory_limit=self.memory_limit, lower=lower)
        elif cache_key not in self._epoch_cache:
            grid_factor, cell_factor = _LEVELS[level]
            summand_step = None
            if grid_factor != 1.0:
                summand_step = default_summand_step(sigma, t, grid_factor)
            options = dict(value_discretization_interval=h_loss, method=self.method,
                           summand_step=summand_step, geometric_cells=round(2000 * cell_factor),
                           memory_limit=self.memory_limit, lower=lower)
            if k == 1:
                pld = BracketedPLD.same(random_allocation_pld(sigma, t, 1, checkin_probability=p,
                                                              **options))
            else:
                pld = k_out_of_t_pld(sigma, t, k, 1, checkin_probability=p, **options)
            self._epoch_cache[cache_key] = pld
        return self._epoch_cache[cache_key]

    def _forget_epochs_but(self, epochs, grids) -> None:
        """Drop the cached epoch PLDs whose epoch kind is not a key of ``epochs`` or whose
        ``(grid step, level)`` is not in ``grids``: a query of a history with those epochs on
        those grids cannot use them.  Called by every query before it builds, so the cache
        holds what one history's queries use (at most two PLDs per epoch kind and level), and a
        repeated query of the same history reuses all of it.  Without this, a noise multiplier
        that grows every epoch moved the grid every epoch and the cache grew with the square of
        the epochs (3,160 PLDs, 471 MB after 78 epochs queried one by one)."""
        keep = {(kind, h, level) for kind in epochs for h, level in grids}
        for cache_key in [key for key in self._epoch_cache if key[:3] not in keep]:
            del self._epoch_cache[cache_key]

    def _composed(self, epochs: dict, h_loss: float, level: int,
                  lower: bool = True) -> BracketedPLD | None:
        total = None
        for key, count in _in_order(epochs):
            part = self._epoch(key, h_loss, level, lower).self_compose(count)
            total = part if total is None else total.compose(part)
        return total

    def _evaluate(self, history, query, delta: float | None = None, epochs=None):
        """``query(BracketedPLD) -> Bounds`` on the upper and the lower composition, refined
        until the relative gap is within ``eps_tolerance``.  Refinement stops early when it no
        longer narrows the gap (then the certified floating-point slack dominates).
        ``epochs``: :func:`epochs_of_history` of ``history`` if the caller has it already."""
        upper_epochs, lower_epochs = epochs_of_history(history) if epochs is None else epochs
        if not upper_epochs:
            return Bounds(0.0, 0.0)
        why_stopped = "finer grids stopped narrowing it"
        h0 = _loss_step(upper_epochs)
        # Laplace and randomized-response epochs have no closed form to fall back on: a long
        # history of large losses would compose a huge FFT window on the default grid, so the
        # first grid is coarsened to the engine's window budget, and no finer grid is tried
        # from a window already at it (the pld accountant's rule, reliability issue 21)
        windowed = any(isinstance(epoch_kind(key)[0], Event) for key in upper_epochs)
        if windowed:
            memo = (tuple(_in_order(upper_epochs)), h0)
            found = self._window_steps.get(memo)
            if found is None:
                before = set(self._epoch_cache)
                found, _ = within_window_budget(
                    lambda h: self._composed(upper_epochs, h, 0), h0)
                # the epochs built on the grids the budget rejected are never used again (a
                # later query reuses the step chosen here): their grids were a quarter of the
                # peak (RR with 10^6 buckets, 50-out-of-100, p = 0.9: 313 MB of 463)
                for cache_key in set(self._epoch_cache) - before:
                    if cache_key[1] != found:
                        del self._epoch_cache[cache_key]
                if len(self._window_steps) >= 32:
                    self._window_steps.clear()
                self._window_steps[memo] = found
            h0 = found
        # (h_loss below is h0 * grid_factor, the same float as here)
        self._forget_epochs_but({**upper_epochs, **lower_epochs},
                                [(h0 * grid_factor, level)
                                 for level, (grid_factor, _) in enumerate(_LEVELS)])
        best, last_gap, slack_share = None, None, None
        # with several participations the lower construction is what limits the gap (it
        # observes only the sum of the summands) and finer grids barely move it, at seconds
        # each for few steps per epoch: it is built on the first grid only, and finer grids
        # refine the upper bound (any grid's bounds are certified: they are intersected)
        several = any(epoch_kind(key)[2] > 1 for key in upper_epochs)
        # with a check-in probability below 1 as well, the upper bound comes from the p = 1
        # epoch's profile at a fixed set of nodes: finer grids moved it by less than 0.02 % (t
        # in 3..100) at twice the cost, so the first grid is the answer
        levels = _LEVELS[:1] if several and any(epoch_kind(key)[3] < 1.0
                                                for key in upper_epochs) else _LEVELS
        # a history of one partial epoch: the lower bound leaves that epoch out (0 whatever the
        # grid) and the upper bound counts it as a whole epoch, a gap no finer grid narrows --
        # the first grid's upper construction is the answer (found by the long fuzz tests: a
        # finer grid took 10.6 s of 14.8 at t = 191,284 and certified a larger upper bound)
        only_partial = not lower_epochs
        if only_partial:
            levels = _LEVELS[:1]
        for level, (grid_factor, _) in enumerate(levels):
            h_loss = h0 * grid_factor
            with_lower = (level == 0 or not several) and not only_partial
            try:
                composed = self._composed(upper_epochs, h_loss, level, lower=with_lower)
                full = query(composed)
                lower = float(full.lower)
                if lower_epochs != upper_epochs:  # a partial epoch: lower bound without it
                    lower = (float(query(self._composed(lower_epochs, h_loss, level,
                                                        lower=with_lower)).lower)
                             if lower_epochs else 0.0)
            except NumericalError as error:
                if best is not None:
                    break
                raise error
            upper = float(full.upper)
            full_lower = float(full.lower)
            if best is not None:  # every grid certifies: intersect
                upper = min(upper, best.upper)
                lower, full_lower = max(lower, best.lower), max(full_lower, best.lower)
            bounds = certified_bounds(lower, upper, "the queried value")
            best = bounds
            if only_partial:
                if upper <= 0.0:
                    return bounds
                why_stopped = ("the history is one partial epoch, which the lower bound leaves "
                               "out and the upper bound counts as a whole epoch")
                break
            # the numerical gap is that of the full composition (a partial epoch adds a real one)
            gap = (upper - full_lower) / upper if upper > 0 else 0.0
            if gap <= self.eps_tolerance:
                return bounds
            try:
                # (builds the FFT engine if the cheap certificates answered without it)
                slack_share = composed.slack_at(upper) / delta if delta is not None else None
                floor = (composed.upper_floor() if delta is None and full_lower <= 0.0
                         else 0.0)
            except NumericalError as error:
                # the engine does not fit (finer grids would not either): the cheap bounds stand
                why_stopped = f"the FFT engine cannot be built ({getattr(error, 'what', error)})"
                break
            if slack_share is not None and slack_share >= 1.0:
                # the engine's certified numerical slack is above delta itself: finer grids
                # (seconds each) cannot certify anything at this delta
                why_stopped = "the engine's numerical slack exceeds delta"
                if lower_epochs == upper_epochs:
                    best, larger = _lower_at_a_larger_delta(composed, best, delta,
                                                            slack_share * delta)
                    if larger is not None:
                        why_stopped += (f"; the lower one is certified at delta={larger:.3g} "
                                        "(epsilon does not increase with delta)")
                break
            if delta is None and full_lower <= 0.0 and upper <= 1.25 * floor:
                # a delta query whose upper bound is (nearly) the additive error terms of the
                # construction and whose lower bound is 0: a finer grid (several times the cost)
                # could shave at most a fifth of the bound
                why_stopped = "the upper bound is within 25 % of the construction's error terms"
                break
            if last_gap is not None and gap > 0.8 * last_gap:
                break  # finer grids do not help: the slack (or the method) limits the gap
            if windowed and 2 * composed.composed_window_bins() > FIRST_WINDOW_BINS:
                why_stopped = ("a finer grid would compose a window above the budget of "
                               f"{FIRST_WINDOW_BINS:,} bins")
                break
            last_gap = gap
        if several:
            # the run's composition is not queried again: its cached compositions (554 MB in
            # the example above) need not stay alive next to the single epochs'
            composed = None
            best = self._single_epoch_lower(best, lower_epochs, query, h0)
            # several participations: the gap is that of the two constructions (module
            # docstring of allocation_participations), which finer grids do not close
            warnings.warn(AccuracyWarning(
                f"balls_and_bins: certified bounds [{best.lower:.6g}, {best.upper:.6g}] have a "
                f"relative gap above eps_tolerance={self.eps_tolerance:g}; with participations "
                "> 1 the lower bound observes only the sum of the summands (and with "
                "checkin_probability < 1 only the remove direction; the upper bound is valid "
                "whatever the gap)"), stacklevel=3)
            return best
        why = ""
        if slack_share is not None and slack_share > 0.01:
            why = (f"; the certified floating-point slack of the summed log-normals is "
                   f"{slack_share:.0%} of delta")
        # "the gap could not be narrowed" is an answer, not an error (the accountant contract):
        # both bounds are certified whatever the gap
        warnings.warn(AccuracyWarning(
            f"balls_and_bins: certified bounds [{best.lower:.6g}, {best.upper:.6g}] have a "
            f"relative gap above eps_tolerance={self.eps_tolerance:g}: {why_stopped}{why}.  "
            "The bounds are valid; the upper one is the certified value"),
            stacklevel=3)
        return best

    def _single_epoch_lower(self, best: Bounds, lower_epochs: dict, query, h_loss: float
                            ) -> Bounds:
        """``best`` with its lower end raised to the best lower bound of one complete epoch of
        each kind: one epoch's outputs are a marginal of the run's (the other epochs run on
        their own allocations), so its lower bound holds for the run.  With several
        participations and a check-in probability below 1 the composed lower construction can
        fall below it (t = k = 5, p = 0.1, sigma = 2, delta = 1e-5: 2.04 for one epoch, 0.98
        for two, 0 for three, where the truth grows; found by a hostile sweep)."""
        if sum(lower_epochs.values()) <= 1:
            return best
        for key in lower_epochs:
            try:
                one = float(query(self._composed({key: 1}, h_loss, 0, lower=True)).lower)
            except NumericalError:
                continue
            if one > best.lower:
                best = certified_bounds(one, best.upper, "the queried value")
        return best

    def _epsilon_bounds(self, history, delta: float) -> Bounds:
        # epsilon(delta) = 0 exactly when delta(0), the total variation of the history's pair,
        # is at most delta; an E-DP pair has total variation at most (e^E - 1) / (e^E + 1)
        # (the optimal composition theorem at one step and epsilon 0, Kairouz, Oh, Viswanath
        # 2015, arXiv:1311.0776, Thm 3.3; rounded up).  No composition is needed then:
        # randomized response with eps0 = 1e-300 composed profile nodes for over a minute
        # The sum of the steps' total variations (below) bounds delta(0) too: randomized
        # response with 10^6 buckets has a tiny one, and its profile nodes took 32 s to certify
        # 5e-4 where the answer is 0
        epochs = epochs_of_history(history)  # cut once, for both
        pure = self._pure_epsilon_upper(history, epochs[0])
        if math.isfinite(pure) and delta >= min(optimal_composition_delta(0.0, pure, 0.0, 1),
                                                self._total_variation_upper(epochs[0])):
            return Bounds(0.0, 0.0)
        try:
            # the pure-DP epsilon caps the upper bound too (the composition answered inf at
            # delta = 2.8e-13 for k = 14 participations of randomized response, whose pure-DP
            # epsilon is 1.82)
            return self._capped(
                lambda: self._evaluate(history, lambda pld: pld.epsilon_for_delta(delta), delta,
                                       epochs=epochs), pure,
                f"the upper one is the pure-DP epsilon of the history (at delta={delta:g})")
        except NumericalError as error:
            if not math.isfinite(pure):
                raise
            # a delta below what the composition certifies (its construction error): the
            # pure-DP epsilon still bounds epsilon(delta) for every delta >= 0
            warnings.warn(AccuracyWarning(
                f"balls_and_bins: certified bounds [0, {pure:.6g}] from the pure-DP epsilon of "
                f"the history; the composition could not answer at delta={delta:g} "
                f"({getattr(error, 'what', error)})"), stacklevel=3)
            return Bounds(0.0, pure)

    @staticmethod
    def _total_variation_upper(upper_epochs: dict) -> float:
        """An upper bound on ``delta(0)``, the total variation distance of a history whose steps
        run Laplace noise or randomized response (1 with Gaussian steps): per epoch at most
        ``k`` times one step's (:func:`~dpplugins.amplification.allocation_mechanisms.
        step_total_variation`), summed over epochs, a partial epoch counted as a whole one.

        Our derivation: the epoch with the example is a mixture over the allocations ``S``
        (at most ``k`` steps; none when it does not check in) of runs that differ from the run
        without it in the steps of ``S`` only, so by joint convexity of the total variation and
        the hybrid argument over those steps (each step, whatever came before, is dominated by
        the base pair, whose total variation bounds it), the epoch's is at most ``k`` times the
        step's; adaptive composition adds them (the same hybrid argument over epochs)."""
        total = 0.0
        for key, count in upper_epochs.items():
            base, _, k, _ = epoch_kind(key)
            if not isinstance(base, Event):
                return 1.0  # Gaussian noise: not used here
            total += count * k * step_total_variation(base)
        return min(total * (1 + 1e-12), 1.0)

    def _pure_epsilon_bounds(self, history) -> Bounds:
        """delta = 0: ``[0, _pure_epsilon_upper]`` (inf with Gaussian steps)."""
        return Bounds(0.0, self._pure_epsilon_upper(history))

    def _delta_bounds(self, history, epsilon: float) -> Bounds:
        # at or above the pure-DP epsilon the privacy loss never exceeds epsilon: delta is
        # exactly 0, with no composition (a huge epsilon cost seconds of profile nodes before)
        epochs = epochs_of_history(history)  # cut once, for both
        if epsilon >= self._pure_epsilon_upper(history, epochs[0]):
            return Bounds(0.0, 0.0)
        return self._evaluate(history, lambda pld: pld.delta_for_epsilon(epsilon), epochs=epochs)

    def _pure_epsilon_upper(self, history, upper_epochs: dict | None = None) -> float:
        """An upper bound on the pure-DP epsilon of a history whose steps run Laplace noise or
        randomized response (``inf`` with Gaussian steps): per epoch, the example is in at most
        ``k`` steps, so the privacy loss of the epoch's output is at most ``k`` times the largest
        loss of one step (:func:`~dpplugins.amplification.allocation_mechanisms.step_max_loss`;
        the likelihood ratio of a mixture over the allocations, with or without the absent
        case, lies between the smallest and the largest ratio of its components, each a product
        of at most ``k`` step ratios); losses add over epochs (Dwork & Roth 2014, Thm 3.16), a
        partial epoch counted as a whole one.  Our derivation.  ``upper_epochs``: the first
        part of :func:`epochs_of_history` of ``history`` if the caller has it already."""
        if upper_epochs is None:
            upper_epochs, _ = epochs_of_history(history)
        total = 0.0
        for key, count in upper_epochs.items():
            base, _, k, _ = epoch_kind(key)
            if not isinstance(base, Event):
                return math.inf  # Gaussian noise: no pure-DP guarantee
            total += count * k * step_max_loss(base)
        return total * (1 + 1e-12)

    def epsilon_upper_fast(self, delta: float, history=None) -> float:
        """Certified upper bound at the default grids, without the lower bound or the accuracy
        loop (used by noise calibration, which verifies its answer with :meth:`get_epsilon`)."""
        history = tuple(self._history if history is None else history)
        if private_leaves(history) and self._private_history(history) is None:
            return math.inf   # a release without noise (was ignored: 2.19 where it is inf)
        upper_epochs, _ = epochs_of_history(history)
        if not upper_epochs:
            return 0.0
        h_loss = _loss_step(upper_epochs)
        with self._lock:   # (the epoch cache is shared with the queries)
            self._forget_epochs_but(upper_epochs, [(h_loss, 0)])
            total = self._composed(upper_epochs, h_loss, 0, lower=False)
            return total.epsilon_for_delta(delta).upper

    def epochs(self) -> float:
        """Epochs recorded so far (a partial epoch as a fraction)."""
        return float(sum(verdict.epochs * count for verdict, count in
                         ((allocation_of(leaf), count) for leaf, count in
                          private_leaves(self._history))
                         if isinstance(verdict, RandomAllocationEvent)))

    def __repr__(self) -> str:
        return f"RandomAllocationAccountant(epochs={self.epochs():.3g}, steps={self.steps})"
