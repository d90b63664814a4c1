"""dp_accounting's events and ours: the one translation between the two vocabularies.

:func:`to_event` maps a dp_accounting ``DpEvent`` (any nesting) to one of our frozen events
(:mod:`dpplugins.events`); :func:`to_dp_event` maps back.  Nothing is flattened: a composition
stays a composition, a sampled step stays a sampled step, and every accountant interprets the
result itself (``accountant.supports(event)`` / ``compose(event)``).

=======================================  ===========================================================
dp_accounting                            dpplugins
=======================================  ===========================================================
``GaussianDpEvent(s)``                   ``GaussianEvent(s)`` (s = noise std / L2 sensitivity)
``LaplaceDpEvent(s)``                    ``LaplaceEvent(s)`` (s = Laplace scale / L1 sensitivity)
``RandomizedResponseDpEvent(p, k)``      ``RandomizedResponseEvent(log(1 + k (1 - p) / p), k)``
                                         (``k = 1``: ``NoOpEvent``; ``p = 0``: ``NonPrivateEvent``;
                                         see :func:`~dpplugins.integrations.dp_events.randomized_response_event`)
``EpsilonDeltaDpEvent(eps, delta)``      ``EpsilonDeltaEvent(eps, delta)``
``PoissonSampledDpEvent(q, e)``          ``PoissonSampledEvent(q, e)``
``SampledWithoutReplacementDpEvent``     ``FixedBatchEvent(n, b, e)`` (``b = 0``: ``NoOpEvent``)
``ComposedDpEvent``                      ``ComposedEvent``
``SelfComposedDpEvent``                  ``SelfComposedEvent``
``NoOpDpEvent``                          ``NoOpEvent``
``NonPrivateDpEvent``                    ``NonPrivateEvent``
``UnsupportedDpEvent`` and every other   ``UnsupportedEvent(reason)`` (every accountant refuses it)
event without a counterpart
our views (:mod:`.dp_events`)            ``view.to_event()``: ``ShuffledEpochsEvent``,
                                         ``RandomCheckInEvent``, ``RandomAllocationEvent``,
                                         ``PNSGDEvent``, any event (``DPPluginsDpEvent``)
=======================================  ===========================================================

``RandomizedResponseDpEvent`` and ``EpsilonDeltaDpEvent`` are dp_accounting's classes where the
installed dp_accounting has them and our views with the same names and fields otherwise
(:mod:`dpplugins.integrations.dp_events`).  The neighbouring relation is not part of an event
(in either library): the accountant's decides.

:func:`translate` also returns, for every event it built, the dp_accounting event it came from,
so an accountant that refuses one of our (sub-)events can name the dp_accounting sub-event
(``CompositionErrorDetails.invalid_event``).  Invalid parameters raise
:class:`~dpplugins.errors.ParameterError` naming the dp_accounting field.

Example::

    >>> import dp_accounting as dpa
    >>> to_event(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01,
    ...                                                             dpa.GaussianDpEvent(1.0)), 100))
    SelfComposedEvent(event=PoissonSampledEvent(sample_rate=0.01, event=GaussianEvent(noise_multiplier=1.0)), count=100)
"""

from __future__ import annotations

from typing import Any

try:
    from dp_accounting import dp_event
except ImportError as _error:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError("the TF-Privacy integration needs dp_accounting: pip install "
                      "'dp-accounting>=0.4.3' (tensorflow-privacy installs it)") from _error

from dpplugins.errors import ParameterError, check_count, check_probability
from dpplugins.events import (MAX_NESTING, ComposedEvent, EpsilonDeltaEvent, Event,
                              FixedBatchEvent, GaussianEvent, LaplaceEvent, NonPrivateEvent,
                              NoOpEvent, PoissonSampledEvent, RandomizedResponseEvent,
                              SelfComposedEvent, UnsupportedEvent)
from dpplugins.integrations.dp_events import (DPPluginsDpEvent, EpsilonDeltaDpEvent,
                                              PNSGDDpEvent, RandomAllocationDpEvent,
                                              RandomCheckInDpEvent, RandomizedResponseDpEvent,
                                              ShuffledEpochsDpEvent, check_noise_multiplier,
                                              epsilon_delta_event, randomized_response_event,
                                              randomized_response_noise_parameter)

__all__ = ["to_event", "to_dp_event", "translate"]


def to_event(event: Any) -> Event:
    """Our event for the dp_accounting event ``event`` (see the module's table).

    Example::

        >>> import dp_accounting as dpa
        >>> to_event(dpa.ComposedDpEvent([dpa.GaussianDpEvent(2.0), dpa.NoOpDpEvent()]))
        ComposedEvent(events=(GaussianEvent(noise_multiplier=2.0), NoOpEvent()))
    """
    return translate(event)[0]


def translate(event: Any) -> tuple[Event, dict]:
    """``(our event, origins)``: :func:`to_event` and, for every event built (the whole one and
    each sub-event), the dp_accounting event it translates (the first, if several translate to
    equal events)."""
    origins: dict = {}
    return _translate(event, origins), origins


def _translate(event: Any, origins: dict, depth: int = 1) -> Event:
    if depth > MAX_NESTING:   # (RecursionError from a depth of about 250)
        raise ParameterError("event", f"a dp_accounting event nested more than {MAX_NESTING} "
                             "deep", f"events nested at most {MAX_NESTING} deep (the deepest "
                             "dpplugins' events can be, dpplugins.events.MAX_NESTING)",
                             "Compose a flat list: ComposedDpEvent([a, b, c, ...])")
    ours = _convert(event, origins, depth)
    origins.setdefault(ours, event)
    return ours


def _unsupported(event: Any, what: str) -> UnsupportedEvent:
    return UnsupportedEvent(f"dp_accounting's {type(event).__name__} ({what})")


def _convert(event: Any, origins: dict, depth: int) -> Event:
    if not isinstance(event, dp_event.DpEvent):
        raise ParameterError("event", type(event).__name__, "a dp_accounting DpEvent")
    name = type(event).__name__
    view = getattr(type(event), "to_event", None)
    if callable(view):                     # our views (and any user-defined one)
        ours = event.to_event()
        if not isinstance(ours, Event):
            raise ParameterError(f"{name}.to_event()", type(ours).__name__,
                                 "an event from dpplugins.events")
        return ours
    if isinstance(event, dp_event.NoOpDpEvent):
        return NoOpEvent()
    if isinstance(event, dp_event.NonPrivateDpEvent):
        return NonPrivateEvent()
    if isinstance(event, dp_event.UnsupportedDpEvent):
        return _unsupported(event, "an operation without a DP description")
    if isinstance(event, dp_event.GaussianDpEvent):
        return GaussianEvent(check_noise_multiplier(f"{name}.noise_multiplier",
                                                    event.noise_multiplier))
    if isinstance(event, dp_event.LaplaceDpEvent):
        return LaplaceEvent(check_noise_multiplier(f"{name}.noise_multiplier",
                                                   event.noise_multiplier))
    if isinstance(event, RandomizedResponseDpEvent):     # dp_accounting's class (>= 0.4.4)
        return randomized_response_event(event.noise_parameter, event.num_buckets, name)
    if isinstance(event, EpsilonDeltaDpEvent):           # dp_accounting's class (>= 0.4.4)
        return epsilon_delta_event(event.epsilon, event.delta, name)
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        q = check_probability(f"{name}.sampling_probability", event.sampling_probability,
                              allow_zero=True)
        return PoissonSampledEvent(q, _translate(event.event, origins, depth + 1))
    if isinstance(event, dp_event.SampledWithoutReplacementDpEvent):
        n = check_count(f"{name}.source_dataset_size", event.source_dataset_size, minimum=1)
        b = check_count(f"{name}.sample_size", event.sample_size, minimum=0)
        if b > n:
            raise ParameterError(f"{name}.sample_size", event.sample_size,
                                 f"<= source_dataset_size={n}")
        inner = _translate(event.event, origins, depth + 1)
        return NoOpEvent() if b == 0 else FixedBatchEvent(n, b, inner)
    if isinstance(event, dp_event.SelfComposedDpEvent):
        count = check_count(f"{name}.count", event.count, minimum=0)
        return SelfComposedEvent(_translate(event.event, origins, depth + 1), count)
    if isinstance(event, dp_event.ComposedDpEvent):
        return ComposedEvent(tuple(_translate(sub, origins, depth + 1)
                                    for sub in event.events))
    return _unsupported(event, "no dpplugins event describes it")


def to_dp_event(event: Event) -> Any:
    """The dp_accounting event of our ``event``: dp_accounting's own class where one describes
    it (the module's table read right to left), else one of our views
    (:mod:`dpplugins.integrations.dp_events`), else :class:`DPPluginsDpEvent`.  ``to_event(
    to_dp_event(e)) == e`` for every event except ``UnsupportedEvent`` (dp_accounting's
    ``UnsupportedDpEvent`` has no reason) and randomized response (its noise parameter is
    recomputed, exact up to rounding).

    Example::

        >>> from dpplugins.samplers import ShuffledEpochs
        >>> to_dp_event(ShuffledEpochs(1000, 100).event(1.0, epochs=2))
        ShuffledEpochsDpEvent(noise_multiplier=1.0, dataset_size=1000, batch_size=100, num_epochs=2, drop_last=False)
    """
    if not isinstance(event, Event):
        raise ParameterError("event", type(event).__name__, "an event from dpplugins.events")
    if isinstance(event, GaussianEvent):
        return dp_event.GaussianDpEvent(event.noise_multiplier)
    if isinstance(event, LaplaceEvent):
        return dp_event.LaplaceDpEvent(event.scale)
    if isinstance(event, RandomizedResponseEvent):
        return RandomizedResponseDpEvent(randomized_response_noise_parameter(event),
                                         event.num_buckets)
    if isinstance(event, EpsilonDeltaEvent):
        return EpsilonDeltaDpEvent(event.epsilon, event.delta)
    if isinstance(event, PoissonSampledEvent):
        return dp_event.PoissonSampledDpEvent(event.sample_rate, to_dp_event(event.event))
    if isinstance(event, FixedBatchEvent):
        return dp_event.SampledWithoutReplacementDpEvent(event.dataset_size, event.batch_size,
                                                         to_dp_event(event.event))
    if isinstance(event, SelfComposedEvent):
        return dp_event.SelfComposedDpEvent(to_dp_event(event.event), event.count)
    if isinstance(event, ComposedEvent):
        return dp_event.ComposedDpEvent([to_dp_event(sub) for sub in event.events])
    if isinstance(event, NoOpEvent):
        return dp_event.NoOpDpEvent()
    if isinstance(event, NonPrivateEvent):
        return dp_event.NonPrivateDpEvent()
    if isinstance(event, UnsupportedEvent):
        return dp_event.UnsupportedDpEvent()
    for view in (ShuffledEpochsDpEvent, RandomCheckInDpEvent, RandomAllocationDpEvent,
                 PNSGDDpEvent):
        described = view.from_event(event)
        if described is not None:
            return described
    return DPPluginsDpEvent(event)
