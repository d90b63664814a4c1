"""Our accountants behind dp_accounting's ``PrivacyAccountant`` interface.

:class:`PLDAccountant`, :class:`GDPAccountant`, :class:`ShuffleAccountant`,
:class:`CheckInAccountant`, :class:`PNSGDAccountant` and :class:`RandomAllocationAccountant` are
``dp_accounting.PrivacyAccountant`` subclasses with the names of the core classes they wrap.  A
dp_accounting workflow swaps the accountant object and nothing else::

    import dp_accounting
    from dpplugins.integrations.dp_accountants import PLDAccountant, ShuffleAccountant
    from dpplugins.integrations.dp_events import ShuffledEpochsDpEvent

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 1000)
    eps = PLDAccountant().compose(event).get_epsilon(1e-5)    # certified upper bound
    shuffled = ShuffledEpochsDpEvent(noise_multiplier=1.1, dataset_size=60000,
                                     batch_size=256, num_epochs=3)
    eps = ShuffleAccountant().compose(shuffled).get_epsilon(1e-5)

The PLD and f-DP wrappers account dp_accounting's Gaussian and Poisson-sampled Gaussian events
(:func:`events_to_history` translates them into our ``(noise_multiplier, sample_rate, steps)``
history); the protocol wrappers account our events (:mod:`dpplugins.integrations.dp_events`).
Every other event is rejected with ``UnsupportedEventError``, as dp_accounting's accountants do;
Laplace and randomized-response events are among them (our accountants' histories hold Gaussian
steps only).

The interface used is the one common to dp-accounting 0.4.3 (what TF-Privacy 0.9.0 pins) and
0.6.x: ``PrivacyAccountant.__init__(neighboring_relation)``, ``_maybe_compose(event, count,
do_compose)`` returning ``None`` or ``CompositionErrorDetails``, ``get_epsilon``, ``get_delta``,
and the event classes ``NoOpDpEvent``, ``NonPrivateDpEvent``, ``GaussianDpEvent``,
``PoissonSampledDpEvent``, ``SelfComposedDpEvent``, ``ComposedDpEvent``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, Optional

try:
    from dp_accounting import dp_event
    from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant
except ImportError as _error:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError("the TF-Privacy integration needs dp_accounting: pip install "
                      "'dp-accounting>=0.4.3' (tensorflow-privacy installs it)") from _error

from dpplugins.accountants import create, get_class
from dpplugins.errors import (ParameterError, check_count, check_nonnegative, check_open_unit,
                              check_real)
from dpplugins.integrations.dp_events import (PNSGDDpEvent, RandomAllocationDpEvent,
                                              RandomCheckInDpEvent, ShuffledEpochsDpEvent,
                                              check_noise_multiplier)
from dpplugins.pld import Bounds

__all__ = ["PLDAccountant", "GDPAccountant", "ShuffleAccountant", "CheckInAccountant",
           "PNSGDAccountant", "RandomAllocationAccountant", "DPPluginsPrivacyAccountant",
           "events_to_history"]

_Details = PrivacyAccountant.CompositionErrorDetails

#: dp_accounting's neighbouring relations -> ours.  REPLACE_SPECIAL (zero-out: the record is
#: replaced by one with zero clipped gradient) gives exactly the add/remove pair for Gaussian and
#: Poisson-subsampled Gaussian steps, whose sums differ by one clipped gradient either way.
_RELATIONS = {
    NeighboringRelation.ADD_OR_REMOVE_ONE: "add_remove",
    NeighboringRelation.REPLACE_SPECIAL: "add_remove",
    NeighboringRelation.REPLACE_ONE: "replace_one",
}


def _rate(name: str, value: Any) -> float:
    value = check_real(name, value)
    if not 0.0 <= value <= 1.0:
        raise ParameterError(name, value, "a probability in [0, 1]")
    return value


#: our event classes -> the wrapper that accounts them (for error messages)
_ACCOUNTANT_OF = {ShuffledEpochsDpEvent: "ShuffleAccountant",
                  RandomCheckInDpEvent: "CheckInAccountant",
                  RandomAllocationDpEvent: "RandomAllocationAccountant",
                  PNSGDDpEvent: "PNSGDAccountant"}


# -- events -> runs -------------------------------------------------------------------------------
@dataclass
class _Translation:
    """What composing an event adds: ``runs`` of ``(noise_multiplier, sample_rate, steps)`` for
    the core accountant, whether a non-private step occurs, the protocol (``key`` to compare
    events, ``options`` for the core accountant's constructor) and whether the runs end inside an
    epoch (a fractional number of shuffled epochs)."""

    runs: list = field(default_factory=list)
    non_private: bool = False
    key: Optional[tuple] = None
    options: Optional[dict] = None
    open_partial: bool = False


Leaf = Callable[[Any, int, _Translation], Optional[_Details]]


def _walk(event, count: int, t: _Translation, leaf: Leaf) -> Optional[_Details]:
    """Traverse ``event`` composed ``count`` times; the structural events are handled here, every
    other event by ``leaf``.  Returns the error details of the first unsupported sub-event."""
    if isinstance(event, dp_event.NoOpDpEvent):
        return None
    if isinstance(event, dp_event.NonPrivateDpEvent):
        t.non_private = True
        return None
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner = check_count("SelfComposedDpEvent.count", event.count, minimum=0)
        return _walk(event.event, count * inner, t, leaf)
    if isinstance(event, dp_event.ComposedDpEvent):
        for sub in event.events:
            details = _walk(sub, count, t, leaf)
            if details is not None:
                return details
        return None
    return leaf(event, count, t)


def _unsupported(event, accountant: str, supported: str) -> _Details:
    message = f"Unsupported event. {accountant} accounts {supported}."
    home = _ACCOUNTANT_OF.get(type(event))
    if home is not None and home != accountant:
        message += f" {type(event).__name__} is accounted by {home}."
    return _Details(invalid_event=event, error_message=message)


_POISSON_SUPPORTED = "GaussianDpEvent and PoissonSampledDpEvent(GaussianDpEvent)"


def _poisson_leaf(event, count: int, t: _Translation, accountant: str = "PLDAccountant"
                  ) -> Optional[_Details]:
    """``GaussianDpEvent(s)`` composed ``c`` times is the run ``(s, 1.0, c)``;
    ``PoissonSampledDpEvent(q, GaussianDpEvent(s))`` is ``(s, q, c)`` (``q = 0`` releases nothing
    about anyone and adds no run); a zero noise multiplier is a non-private step."""
    if isinstance(event, dp_event.GaussianDpEvent):
        sigma = check_noise_multiplier("GaussianDpEvent.noise_multiplier",
                                       event.noise_multiplier)
        if sigma == 0:
            t.non_private = True
        elif count:
            t.runs.append((sigma, 1.0, count))
        return None
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        q = _rate("PoissonSampledDpEvent.sampling_probability", event.sampling_probability)
        if not isinstance(event.event, dp_event.GaussianDpEvent):
            return _Details(invalid_event=event, error_message=(
                "dpplugins accountants support PoissonSampledDpEvent only around a "
                f"GaussianDpEvent. Found {event.event}."))
        sigma = check_noise_multiplier("GaussianDpEvent.noise_multiplier",
                                       event.event.noise_multiplier)
        if q == 0:
            return None
        if sigma == 0:
            t.non_private = True
        elif count:
            t.runs.append((sigma, q, count))
        return None
    return _unsupported(event, accountant, _POISSON_SUPPORTED)


def events_to_history(event, count: int = 1
                      ) -> tuple[list[tuple[float, float, int]], bool] | _Details:
    """Translate a dp_accounting event of Gaussian / Poisson-sampled Gaussian steps into our
    run-length history.

    Returns ``(runs, non_private)`` where ``runs`` is a list of ``(noise_multiplier, sample_rate,
    steps)`` (Opacus' format, the history our accountants keep) and ``non_private`` says whether
    the event contains a step without privacy (``NonPrivateDpEvent`` or a zero noise multiplier:
    epsilon is then infinite, as in dp_accounting).  Unsupported events give a
    ``PrivacyAccountant.CompositionErrorDetails`` naming the offending sub-event, exactly what
    ``_maybe_compose`` must return.

    The translation: ``GaussianDpEvent(s)`` composed ``c`` times is ``(s, 1.0, c)``;
    ``PoissonSampledDpEvent(q, GaussianDpEvent(s))`` is ``(s, q, c)`` (``q = 0`` releases nothing
    about anyone and adds no run); ``SelfComposedDpEvent`` multiplies the count;
    ``ComposedDpEvent`` concatenates; ``NoOpDpEvent`` adds nothing.

    Example::

        >>> import dp_accounting as dpa
        >>> events_to_history(dpa.SelfComposedDpEvent(
        ...     dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 100))
        ([(1.0, 0.01, 100)], False)
    """
    t = _Translation()
    details = _walk(event, check_count("count", count, minimum=0), t, _poisson_leaf)
    if details is not None:
        return details
    return t.runs, t.non_private


# -- accountants ----------------------------------------------------------------------------------
class DPPluginsPrivacyAccountant(PrivacyAccountant):
    """A dp_accounting ``PrivacyAccountant`` that accounts with one of our accountants.

    Subclasses name the core accountant (``_registry_name``) and the events it accounts.  Every
    other event makes ``supports(event)`` False and ``compose(event)`` raise
    ``UnsupportedEventError``, as dp_accounting's own accountants do, and nothing is composed
    (not even the supported part of a composition).  ``get_epsilon``/``get_delta`` return the
    wrapped accountant's values (see :attr:`bound_type`); ``get_epsilon_bounds`` gives its
    certified ``(lower, upper)`` pair.  The wrapped accountant is :attr:`inner`: for the
    protocol accountants (shuffle, check-in, random allocation, PNSGD) it is created from the
    first event's protocol parameters (``None`` before), and later events must describe the same
    protocol (same dataset size, batch size, ...; the noise multiplier may change, and for
    random allocation the steps per epoch too).
    ``**options`` go to the core accountant's constructor (accuracy options such as
    ``value_discretization_interval``; not the protocol parameters the events carry).  Invalid
    event parameters raise :class:`ParameterError`.
    """

    _registry_name: ClassVar[str] = ""
    #: the dp_accounting relations this accountant accepts -> our ``neighbouring``
    _relations: ClassVar[dict] = _RELATIONS
    _default_relation: ClassVar[NeighboringRelation] = NeighboringRelation.ADD_OR_REMOVE_ONE
    #: the event class of a protocol accountant (``None``: Gaussian / Poisson-sampled events)
    _event_class: ClassVar[Optional[type]] = None

    def __init__(self, neighboring_relation: Optional[NeighboringRelation] = None,
                 **options: Any) -> None:
        if neighboring_relation is None:
            neighboring_relation = self._default_relation
        if neighboring_relation not in self._relations:
            raise ParameterError("neighboring_relation", neighboring_relation,
                                 " or ".join(f"NeighboringRelation.{r.name}"
                                             for r in self._relations))
        super().__init__(neighboring_relation)
        core_options = set(get_class(self._registry_name)._option_names) - {"neighbouring"}
        for name, value in options.items():
            if name in self._protocol_names():
                raise ParameterError(name, value, "left out of the accountant's options",
                                     f"every {self._event_class.__name__} carries it")
            if name not in core_options:
                raise ParameterError(name, value, "one of " + ", ".join(
                    sorted(core_options - set(self._protocol_names()))))
        self._options = dict(options)
        self._non_private = False
        self._key: Optional[tuple] = None
        self._protocol: Optional[dict] = None
        self._open_partial = False
        self.inner = None if self._event_class is not None else self._new_inner({})

    # -- description -------------------------------------------------------------------------------
    @classmethod
    def _protocol_names(cls) -> tuple[str, ...]:
        return ()

    @property
    def neighbouring(self) -> str:
        """Our name of the neighbouring relation (``"add_remove"`` or ``"replace_one"``)."""
        return self._relations[self.neighboring_relation]

    @property
    def bound_type(self) -> str:
        """``"certified upper bound"`` or ``"estimate"``, from the wrapped accountant."""
        return get_class(self._registry_name).bound_type

    @property
    def theorem(self) -> str:
        """The result the wrapped accountant implements, with its source."""
        return get_class(self._registry_name).theorem

    @property
    def history(self) -> list[tuple[float, float, int]]:
        """The composed events as our ``(noise_multiplier, sample_rate, steps)`` history."""
        return [] if self.inner is None else self.inner.history

    # -- composition -------------------------------------------------------------------------------
    def _new_inner(self, protocol: dict):
        try:
            return create(self._registry_name, neighbouring=self.neighbouring, **self._options,
                          **protocol)
        except ParameterError as error:
            if error.name not in protocol:
                raise
            # name the event field the core accountant refused
            stem = f"{error.name}={error.value!r} is invalid: must be {error.valid}"
            hint = str(error)[len(stem) + 2:] if str(error).startswith(stem) else ""
            raise ParameterError(f"{self._event_class.__name__}.{error.name}", error.value,
                                 error.valid, hint) from None

    def _leaf(self, event, count: int, t: _Translation) -> Optional[_Details]:
        return _poisson_leaf(event, count, t, type(self).__name__)

    def _maybe_compose(self, event, count: int, do_compose: bool) -> Optional[_Details]:
        t = _Translation(key=self._key, options=self._protocol, open_partial=self._open_partial)
        details = _walk(event, count, t, self._leaf)
        if details is not None:
            return details
        if not do_compose:
            if self._event_class is not None and t.options is not None and t.runs:
                scratch = self._new_inner(t.options)    # the core accountant's own checks
                for sigma, q, steps in t.runs:
                    scratch.step(noise_multiplier=sigma, sample_rate=q, count=steps)
            return None
        if self.inner is None and t.options is not None:
            self.inner = self._new_inner(t.options)
        self._key, self._protocol, self._open_partial = t.key, t.options, t.open_partial
        self._non_private = self._non_private or t.non_private
        for sigma, q, steps in t.runs:
            self.inner.step(noise_multiplier=sigma, sample_rate=q, count=steps)
        return None

    # -- queries -----------------------------------------------------------------------------------
    def get_epsilon_bounds(self, target_delta: float) -> Bounds:
        """Our accountant's ``(lower, upper)`` bounds on epsilon; ``(inf, inf)`` if a non-private
        event was composed, ``(0, 0)`` if nothing was."""
        if self._non_private or self.inner is None:
            check_open_unit("target_delta", target_delta)
            value = math.inf if self._non_private else 0.0
            return Bounds(value, value)
        return self.inner.get_epsilon_bounds(target_delta)

    def get_epsilon(self, target_delta: float) -> float:
        """Epsilon at ``target_delta`` (upper bound, see :attr:`bound_type`)."""
        return self.get_epsilon_bounds(target_delta).upper

    def get_delta(self, target_epsilon: float) -> float:
        """Delta at ``target_epsilon`` (upper bound); 1 if a non-private event was composed."""
        if self._non_private:
            return 1.0
        if self.inner is None:
            check_nonnegative("target_epsilon", target_epsilon)
            return 0.0
        return self.inner.get_delta(target_epsilon)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.neighboring_relation.name}; {self.inner!r})"


class PLDAccountant(DPPluginsPrivacyAccountant):
    """Our certified PLD accountant (:class:`dpplugins.accountants.pld.PLDAccountant`) behind
    dp_accounting's interface, for ``GaussianDpEvent`` and
    ``PoissonSampledDpEvent(GaussianDpEvent)``.  Options (``eps_tolerance``,
    ``value_discretization_interval``, ``tail_mass``, ``memory_limit``) go to the core accountant.

    Neighbouring relations: ``ADD_OR_REMOVE_ONE`` (default) and ``REPLACE_SPECIAL`` use our
    ``"add_remove"`` analysis; ``REPLACE_ONE`` uses our ``"replace_one"`` analysis, in which a
    ``GaussianDpEvent``'s sum moves by up to twice the clipping norm (dp_accounting's PLD
    accountant uses sensitivity 1 there and refuses Poisson events under ``REPLACE_ONE``).

    Example::

        >>> import dp_accounting as dpa
        >>> acc = PLDAccountant().compose(dpa.SelfComposedDpEvent(
        ...     dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 10_000))
        >>> round(acc.get_epsilon(1e-5), 2)   # certified upper bound
        6.19
    """

    _registry_name = "pld"


class GDPAccountant(DPPluginsPrivacyAccountant):
    """Our f-DP accountant (:class:`dpplugins.accountants.fdp.GDPAccountant`, certified exact
    composition; ``inner.get_mu()`` gives the CLT estimate) behind dp_accounting's interface, for
    the same events as :class:`PLDAccountant`.

    dp_accounting events describe Poisson sampling, so the core option ``sampling`` is fixed to
    ``"poisson"``; the other options go to the core accountant.
    """

    _registry_name = "fdp"

    def __init__(self, neighboring_relation: Optional[NeighboringRelation] = None,
                 **options: Any) -> None:
        if "sampling" in options and options["sampling"] != "poisson":
            raise ParameterError("sampling", options["sampling"], "'poisson'",
                                 "dp_accounting events describe Poisson sampling "
                                 "(PoissonSampledDpEvent)")
        options.pop("sampling", None)
        super().__init__(neighboring_relation, sampling="poisson", **options)


class _ProtocolAccountant(DPPluginsPrivacyAccountant):
    """Base of the accountants for our own events: each event is ``num_epochs`` (or passes) of a
    protocol with ``period`` steps per epoch, recorded as the run ``(noise_multiplier,
    1 / period, steps)``, the history format of the core accountant."""

    _supported: ClassVar[str] = ""

    def _describe(self, event) -> tuple[dict, tuple, int, int]:
        """``(core options, protocol key, steps per epoch, steps of the event)``."""
        raise NotImplementedError

    def _leaf(self, event, count: int, t: _Translation) -> Optional[_Details]:
        name = type(self).__name__
        if not isinstance(event, self._event_class):
            return _unsupported(event, name, self._supported)
        options, key, period, steps = self._describe(event)
        if t.key is not None and key != t.key:
            return _Details(invalid_event=event, error_message=(
                f"{name} accounts one protocol per accountant: this event has "
                f"{dict(key)}, the events before it {dict(t.key)} (use one accountant per "
                "protocol; the noise multiplier may change)"))
        if t.open_partial:
            return _Details(invalid_event=event, error_message=(
                "the events before this one ended inside an epoch (fractional num_epochs); a "
                "partial epoch must be the last event composed"))
        if count > 1 and steps % period:
            return _Details(invalid_event=event, error_message=(
                f"{steps} steps are not whole epochs of {period} steps and cannot be "
                "self-composed: every copy would start a fresh epoch mid-way"))
        t.key, t.options = key, options
        sigma = check_noise_multiplier(f"{type(event).__name__}.noise_multiplier",
                                       event.noise_multiplier)
        if sigma == 0:
            t.non_private = True
        elif count:
            t.runs.append((sigma, 1.0 / period, steps * count))
        if count:
            t.open_partial = (steps * count) % period != 0
        return None


class ShuffleAccountant(_ProtocolAccountant):
    """Our shuffled-epochs accountant (:class:`dpplugins.accountants.shuffle.ShuffleAccountant`:
    certified upper bound, Chua et al. 2024 lower bound) behind dp_accounting's interface, for
    :class:`ShuffledEpochsDpEvent`.

    All events composed must have the same ``dataset_size``, ``batch_size`` and epoch length;
    a fractional number of epochs may only come last (its partial epoch is a prefix of a full
    one).  Neighbouring relations: ``ADD_OR_REMOVE_ONE`` (default) and ``REPLACE_SPECIAL`` are
    both analysed as *zero-out* (the differing example's clipped gradient replaced by 0; adding
    an example to fixed-size shuffled batches would change the number of steps, so literal
    add/remove is not defined for this sampler); ``REPLACE_ONE`` replaces one example.  Options:
    ``value_discretization_interval``, ``lower_bound``.

    Example::

        >>> acc = ShuffleAccountant().compose(ShuffledEpochsDpEvent(
        ...     noise_multiplier=1.0, dataset_size=1000, batch_size=100, num_epochs=2))
        >>> acc.history
        [(1.0, 0.1, 20)]
    """

    _registry_name = "shuffle"
    _event_class = ShuffledEpochsDpEvent
    _supported = "ShuffledEpochsDpEvent"

    @classmethod
    def _protocol_names(cls) -> tuple[str, ...]:
        return ("batch_size", "examples_per_step", "dataset_size")

    def _describe(self, event: ShuffledEpochsDpEvent):
        n, b, period = int(event.dataset_size), int(event.batch_size), event.steps_per_epoch
        key = (("dataset_size", n), ("batch_size", b), ("steps_per_epoch", period))
        return {"batch_size": b, "dataset_size": n}, key, period, event.num_steps


class CheckInAccountant(_ProtocolAccountant):
    """Our random check-in accountant (:class:`dpplugins.accountants.checkin.CheckInAccountant`,
    Balle et al. 2020 Thms 3.2 / 4.1 / 4.3 per pass, passes composed by PLD) behind
    dp_accounting's interface, for :class:`RandomCheckInDpEvent` (one event = ``num_passes``
    whole runs of the protocol).  The theorems are proved for replacing one example:
    ``REPLACE_ONE`` is the default and the only relation accepted.  Option:
    ``value_discretization_interval``.

    Example::

        >>> acc = CheckInAccountant().compose(RandomCheckInDpEvent(
        ...     noise_multiplier=4.0, num_examples=1000, num_slots=100, checkin_probability=0.1))
        >>> acc.history
        [(4.0, 0.01, 100)]
    """

    _registry_name = "checkin"
    _event_class = RandomCheckInDpEvent
    _supported = "RandomCheckInDpEvent"
    _relations = {NeighboringRelation.REPLACE_ONE: "replace_one"}
    _default_relation = NeighboringRelation.REPLACE_ONE

    @classmethod
    def _protocol_names(cls) -> tuple[str, ...]:
        return ("num_examples", "variant", "num_slots", "window", "checkin_probability",
                "max_batch_size", "per_example_noise", "noise_multiplier", "eps0", "delta0")

    def _describe(self, event: RandomCheckInDpEvent):
        options = {
            "num_examples": int(event.num_examples), "variant": event.variant.value,
            "num_slots": None if event.num_slots is None else int(event.num_slots),
            "window": None if event.window is None else int(event.window),
            "checkin_probability": float(event.checkin_probability),
            "max_batch_size": None if event.max_batch_size is None else int(event.max_batch_size),
            "per_example_noise": bool(event.per_example_noise)}
        period = event.steps_per_pass
        return options, tuple(options.items()), period, period * int(event.num_passes)


class PNSGDAccountant(_ProtocolAccountant):
    """Our PNSGD accountant (:class:`dpplugins.accountants.pnsgd.PNSGDAccountant`, privacy
    amplification by iteration, passes composed by PLD) behind dp_accounting's interface, for
    :class:`PNSGDDpEvent` (one event = ``num_passes`` passes of ``dataset_size`` steps).  The
    theorems compare datasets that differ in one record: ``REPLACE_ONE`` is the default and the
    only relation accepted.  Option: ``value_discretization_interval``.

    Example::

        >>> acc = PNSGDAccountant().compose(PNSGDDpEvent(
        ...     noise_multiplier=2.0, lipschitz=1.0, diameter=2.0, learning_rate=0.5,
        ...     dataset_size=1000, num_passes=2))
        >>> acc.history
        [(2.0, 0.001, 2000)]
    """

    _registry_name = "pnsgd"
    _event_class = PNSGDDpEvent
    _supported = "PNSGDDpEvent"
    _relations = {NeighboringRelation.REPLACE_ONE: "replace_one"}
    _default_relation = NeighboringRelation.REPLACE_ONE

    @classmethod
    def _protocol_names(cls) -> tuple[str, ...]:
        return ("lipschitz", "diameter", "learning_rate", "dataset_size", "variant",
                "contraction", "noise", "smoothness")

    def _describe(self, event: PNSGDDpEvent):
        options = {
            "lipschitz": float(event.lipschitz), "diameter": float(event.diameter),
            "learning_rate": float(event.learning_rate), "dataset_size": int(event.dataset_size),
            "variant": event.variant.value, "contraction": float(event.contraction),
            "noise": event.noise.value,
            "smoothness": None if event.smoothness is None else float(event.smoothness)}
        n = options["dataset_size"]
        return options, tuple(options.items()), n, n * int(event.num_passes)


class RandomAllocationAccountant(_ProtocolAccountant):
    """Our random-allocation ("balls and bins") accountant
    (:class:`dpplugins.accountants.balls_and_bins.RandomAllocationAccountant`, registry name
    ``"balls_and_bins"``: certified upper and lower bounds from the dominating pair of Chua et al.,
    AISTATS 2025, composed over epochs by PLD) behind dp_accounting's interface, for
    :class:`RandomAllocationDpEvent`.  One event is ``num_epochs`` epochs of ``steps_per_epoch``
    steps, recorded as the Opacus-style run ``(noise_multiplier, 1 / steps_per_epoch,
    steps_per_epoch * num_epochs)``; events are whole epochs, so ``steps_per_epoch`` may change
    from one event to the next (the core accountant cuts its history into epochs).

    Neighbouring relations: ``ADD_OR_REMOVE_ONE`` (default) and ``REPLACE_SPECIAL`` (zero-out:
    the record keeps its place in its step with a zero clipped gradient, so the step sums differ
    exactly as for adding or removing it); ``REPLACE_ONE`` is refused (the dominating pair is for
    adding or removing one example).  Options (``eps_tolerance``, ``method``, ``memory_limit``)
    go to the core accountant.

    Example::

        >>> acc = RandomAllocationAccountant().compose(RandomAllocationDpEvent(
        ...     noise_multiplier=1.0, steps_per_epoch=10, num_epochs=3))
        >>> acc.history
        [(1.0, 0.1, 30)]
    """

    _registry_name = "balls_and_bins"
    _event_class = RandomAllocationDpEvent
    _supported = "RandomAllocationDpEvent"
    _relations = {NeighboringRelation.ADD_OR_REMOVE_ONE: "add_remove",
                  NeighboringRelation.REPLACE_SPECIAL: "add_remove"}

    def _describe(self, event: RandomAllocationDpEvent):
        period = int(event.steps_per_epoch)
        return {}, (), period, period * int(event.num_epochs)
