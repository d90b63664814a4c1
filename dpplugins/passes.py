"""The one epoch/pass cutter: a history of protocol events cut into passes.

A pass is ``steps_per_epoch`` consecutive steps of one protocol run (see
:mod:`dpplugins.events`, "Consecutive passes continue"): events with equal
:meth:`~dpplugins.events.ProtocolEvent.protocol_key` that follow each other continue one run;
anything else starts a new run, whose first pass starts afresh.  (Starting afresh is what the
events say; it is also never optimistic: a pass cut short counts as a full pass for upper bounds
-- a prefix of a pass is a post-processing of it -- and is left out of lower bounds -- dropping a
mechanism from a composition cannot increase the privacy loss.)

Every accountant with a per-pass guarantee (``shuffle``, ``swap``, ``checkin``,
``balls_and_bins``, ``pnsgd``) reads its passes from :func:`cut_passes`.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from dpplugins.errors import check_count
from dpplugins.events import Event, ProtocolEvent, leaves

__all__ = ["Pass", "cut_passes", "extend_run"]


@dataclasses.dataclass(frozen=True)
class Pass:
    """One pass of a protocol.

    ``protocol``: the run's first event (its protocol parameters; its own ``epochs`` and
    ``event`` are not this pass's).  ``segments``: ``((event, steps), ...)`` -- the per-step
    mechanism (e.g. ``GaussianEvent(sigma)``) of consecutive steps, in order.  ``complete``:
    whether the pass ran all ``steps_per_epoch`` steps.
    """

    protocol: ProtocolEvent
    segments: tuple
    complete: bool

    @property
    def steps(self) -> int:
        return sum(steps for _, steps in self.segments)

    @property
    def events(self) -> tuple:
        """The distinct per-step events of the pass."""
        return tuple(dict.fromkeys(event for event, _ in self.segments))


def cut_passes(runs: Iterable[tuple[ProtocolEvent, int]]) -> list[tuple[Pass, int]]:
    """Cut ``(protocol_event, count)`` runs (in release order) into passes.

    Returns run-length ``(pass, number of such passes)`` in order; whole passes of one per-step
    event are counted, not listed, so the cost grows with the number of events, not of steps.

    Example::

        >>> from dpplugins.events import GaussianEvent, RandomAllocationEvent
        >>> e = RandomAllocationEvent(4, 1, GaussianEvent(1.0)).with_steps(6)
        >>> [(p.steps, p.complete, n) for p, n in cut_passes([(e, 1)])]
        [(4, True, 1), (2, False, 1)]
    """
    out: list[tuple[Pass, int]] = []
    key = None
    protocol: ProtocolEvent | None = None
    open_segments: list[tuple[Event, int]] = []
    filled = 0

    def emit(segments, complete, count=1):
        merged: list[list] = []
        for event, steps in segments:
            if merged and merged[-1][0] == event:
                merged[-1][1] += steps
            else:
                merged.append([event, steps])
        p = Pass(protocol, tuple((e, s) for e, s in merged), complete)
        if out and out[-1][0] == p:
            out[-1] = (p, out[-1][1] + count)
        else:
            out.append((p, count))

    for event, count in runs:
        if not isinstance(event, ProtocolEvent):
            raise TypeError(f"cut_passes takes protocol events, got {type(event).__name__}")
        count = check_count("count", count, minimum=0)   # (-1 made a pass of -4 steps)
        if event.protocol_key() != key:
            if open_segments:
                emit(open_segments, False)
            key, protocol, open_segments, filled = event.protocol_key(), event, [], 0
        per = event.steps_per_epoch
        remaining = event.steps * count
        inner = event.event
        if filled:
            take = min(remaining, per - filled)
            open_segments.append((inner, take))
            filled += take
            remaining -= take
            if filled == per:
                emit(open_segments, True)
                open_segments, filled = [], 0
        if remaining >= per:
            emit(((inner, per),), True, remaining // per)
            remaining %= per
        if remaining:
            open_segments, filled = [(inner, remaining)], remaining
    if open_segments:
        emit(open_segments, False)
    return out


def extend_run(steps: int, events: Iterable[Event], key: tuple) -> int:
    """Steps of the trailing run of the protocol with :meth:`~ProtocolEvent.protocol_key`
    ``key`` after ``events``, given that the events before them ended in such a run of
    ``steps`` steps (0: none).  Any other leaf -- another protocol, a Poisson step, a
    non-private step -- ends the run; a ``NoOpEvent`` has no leaves and does not.  Integrations that record steps one at a time read the
    position in the current pass from it (``steps % steps_per_epoch``) and carry it over, so
    that a step costs the new events only.

    Example::

        >>> from dpplugins.events import (GaussianEvent, NonPrivateEvent, NoOpEvent,
        ...                               ShuffledEpochsEvent)
        >>> step = ShuffledEpochsEvent(64, 8, 1, GaussianEvent(1.0)).with_steps(1)
        >>> extend_run(0, [step, NoOpEvent(), step, NonPrivateEvent(), step], step.protocol_key())
        1
    """
    for event in events:
        for leaf, count in leaves(event):
            if isinstance(leaf, ProtocolEvent) and leaf.protocol_key() == key:
                steps += leaf.steps * count
            else:
                steps = 0
    return steps
