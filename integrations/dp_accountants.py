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

Every wrapper works the same way: the dp_accounting event is translated into our event
(:func:`dpplugins.integrations.dp_accounting_events.to_event`; our own dp_accounting events,
:mod:`dpplugins.integrations.dp_events`, are views of our events) and the core accountant
(:attr:`DPPluginsPrivacyAccountant.inner`) interprets it: ``supports(event)`` is False -- and
``compose(event)`` raises dp_accounting's ``UnsupportedEventError``, leaving the ledger and the
core accountant untouched -- exactly when the core accountant refuses the translated event
(``inner.check``), and the error names the offending dp_accounting sub-event and the
accountants that support it.  Nothing is flattened into ``(noise_multiplier, sample_rate,
steps)`` runs; :attr:`~DPPluginsPrivacyAccountant.history` is the core accountant's history of
our events.

Queries follow dp_accounting's conventions: ``get_epsilon(0)`` is the pure-DP epsilon (0 for no
events, ``inf`` once a non-private event is composed), ``get_epsilon(1)`` is 0 (every mechanism
is (0, 1)-DP), ``get_delta(inf)`` is the certified delta at the largest finite epsilon (an
upper bound on the mass at infinite loss: the engine's error terms for Gaussian steps, ``delta0``
for an (epsilon, delta) event; 1 for a non-private event, 0 for no events).

The interface used is the one common to dp-accounting 0.4.3 (what TF-Privacy 0.9.0 pins) and
0.6.x: ``PrivacyAccountant.__init__(neighboring_relation)``, ``_maybe_compose(event, count,
do_compose)`` returning ``None`` or ``CompositionErrorDetails``, ``get_epsilon``, ``get_delta``.
"""

from __future__ import annotations

import math
import sys
from numbers import Real
from typing import Any, ClassVar, Optional

try:
    from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant
except ImportError as _error:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError("the TF-Privacy integration needs dp_accounting: pip install "
                      "'dp-accounting>=0.4.3' (tensorflow-privacy installs it)") from _error

from dpplugins.accountants import UnsupportedEventError, create, get_class
from dpplugins.accountants.base import is_non_private, private_leaves
from dpplugins.errors import ParameterError, check_real
from dpplugins.integrations.dp_accounting_events import translate
from dpplugins.pld import Bounds

__all__ = ["PLDAccountant", "GDPAccountant", "ShuffleAccountant", "CheckInAccountant",
           "PNSGDAccountant", "RandomAllocationAccountant", "DPPluginsPrivacyAccountant"]

_Details = PrivacyAccountant.CompositionErrorDetails

#: dp_accounting's neighbouring relations -> ours, in order of preference.  REPLACE_SPECIAL
#: (zero-out: the record is replaced by a special one, e.g. with zero clipped gradient) is the
#: core's ``"zero_out"`` where the core accountant has that relation, else ``"add_remove"``: for
#: noise added to a sum the two pairs are the same (the sums differ by one clipped value either
#: way); for randomized response only the zero-out reading is defined.
_RELATIONS = {
    NeighboringRelation.ADD_OR_REMOVE_ONE: ("add_remove",),
    NeighboringRelation.REPLACE_SPECIAL: ("zero_out", "add_remove"),
    NeighboringRelation.REPLACE_ONE: ("replace_one",),
}


def _wrapper_names() -> dict[str, str]:
    """Registry name -> the wrapper class of this module that wraps it (for error messages)."""
    names: dict[str, str] = {}
    pending = list(DPPluginsPrivacyAccountant.__subclasses__())
    while pending:
        cls = pending.pop(0)
        if cls._registry_name and cls.__module__ == __name__:
            names.setdefault(cls._registry_name, cls.__name__)
        pending.extend(cls.__subclasses__())
    return names


def _probability(name: str, value: Any) -> float:
    value = check_real(name, value)
    if not 0.0 <= value <= 1.0:
        raise ParameterError(name, value, "in [0, 1]")
    return value


class DPPluginsPrivacyAccountant(PrivacyAccountant):
    """A dp_accounting ``PrivacyAccountant`` that accounts with one of our accountants.

    A subclass names the core accountant (``_registry_name``, any name of
    :func:`dpplugins.accountants.create`).  The neighbouring relation is mapped to ours
    (``ADD_OR_REMOVE_ONE`` to ``"add_remove"``; ``REPLACE_SPECIAL``, zero-out, to
    ``"zero_out"`` where the core accountant has it, else ``"add_remove"``; ``REPLACE_ONE`` to
    ``"replace_one"``) and must be one the core accountant analyses; the
    default is the core accountant's default.  ``**options`` go to the core accountant's
    constructor (accuracy options such as ``value_discretization_interval``); the protocol
    options of its version-0.1 ``step()`` interface are refused, since every event carries its
    protocol.  :attr:`inner` is the core accountant; ``get_epsilon``/``get_delta`` return its
    values (see :attr:`bound_type`) and ``get_epsilon_bounds`` its certified ``(lower, upper)``
    pair.  Invalid event parameters raise :class:`ParameterError`.
    """

    _registry_name: ClassVar[str] = ""
    #: core options the events carry (the version-0.1 protocol options): refused here
    _event_options: ClassVar[tuple[str, ...]] = ()

    def __init__(self, neighboring_relation: Optional[NeighboringRelation] = None,
                 **options: Any) -> None:
        core = get_class(self._registry_name)
        core_options = set(core._option_names) - {"neighbouring"}
        for name, value in options.items():
            if name in self._event_options:
                raise ParameterError(name, value, "left out of the accountant's options",
                                     "every event carries it: the events say what was released")
            if name not in core_options:
                raise ParameterError(name, value, "one of " + ", ".join(
                    sorted(core_options - set(self._event_options))))
        if neighboring_relation is None:
            default = create(self._registry_name, **options).neighbouring
            neighboring_relation = next(r for r, ours in _RELATIONS.items() if ours[0] == default)
        if neighboring_relation not in _RELATIONS:
            raise ParameterError("neighboring_relation", neighboring_relation,
                                 "a dp_accounting NeighboringRelation")
        inner = self._core(neighboring_relation, options)
        if isinstance(inner, ParameterError):
            accepted = [r for r in _RELATIONS if not isinstance(self._core(r, options),
                                                                ParameterError)]
            raise ParameterError("neighboring_relation", neighboring_relation, " or ".join(
                f"NeighboringRelation.{r.name}" for r in accepted),
                f"the {self._registry_name!r} accountant: {inner.valid}")
        super().__init__(neighboring_relation)
        self.inner = inner

    def _core(self, relation: NeighboringRelation, options: dict):
        """The core accountant for ``relation`` (its first reading the core analyses), or the
        core's refusal of the last one."""
        refusal = None
        for ours in _RELATIONS[relation]:
            try:
                return create(self._registry_name, neighbouring=ours, **options)
            except ParameterError as error:
                if error.name != "neighbouring":
                    raise
                refusal = error
        return refusal

    # -- description -------------------------------------------------------------------------------
    @property
    def neighbouring(self) -> str:
        """Our name of the neighbouring relation (``"add_remove"`` or ``"replace_one"``)."""
        return self.inner.neighbouring

    @property
    def bound_type(self) -> str:
        """``"certified upper bound"`` or ``"estimate"``, from the wrapped accountant."""
        return self.inner.bound_type

    @property
    def theorem(self) -> str:
        """The result the wrapped accountant implements, with its source."""
        return self.inner.theorem

    @property
    def history(self) -> list:
        """The composed events, ours (:mod:`dpplugins.events`): the core accountant's ledger."""
        return self.inner.history

    # -- composition -------------------------------------------------------------------------------
    def _maybe_compose(self, event, count: int, do_compose: bool) -> Optional[_Details]:
        ours, origins = translate(event)
        if self._neighboring_relation is NeighboringRelation.ADD_OR_REMOVE_ONE:
            # dp_accounting defines randomized response for replacing a record (by another, or
            # by a special one: REPLACE_SPECIAL, our zero-out reading), not for adding one
            from dpplugins.events import RandomizedResponseEvent, leaves
            for leaf, _ in leaves(ours):
                if isinstance(leaf, RandomizedResponseEvent):
                    return _Details(invalid_event=origins.get(leaf, event), error_message=(
                        f"Unsupported event. {type(self).__name__}: randomized response "
                        "needs neighboring_relation REPLACE_ONE or REPLACE_SPECIAL"))
        try:
            self.inner.check(ours)
        except UnsupportedEventError as error:
            wrappers = _wrapper_names()
            also = [f"{wrappers[name]} ({name!r})" if name in wrappers else repr(name)
                    for name in error.supported_by]
            message = f"Unsupported event. {type(self).__name__}: {error}"
            if also:
                message += ". dp_accounting accountants that support it: " + ", ".join(also)
            return _Details(invalid_event=origins.get(error.event, event),
                            error_message=message)
        if do_compose:
            self.inner.compose(ours, count)
        return None

    # -- queries -----------------------------------------------------------------------------------
    def _state(self) -> str:
        """``"empty"`` (nothing that depends on the data), ``"non_private"`` or ``"private"``."""
        leaves = private_leaves(self.inner.history)
        if not leaves:
            return "empty"
        if any(is_non_private(leaf) for leaf, _ in leaves):
            return "non_private"
        return "private"

    def get_epsilon_bounds(self, target_delta: float) -> Bounds:
        """The core accountant's ``(lower, upper)`` bounds on epsilon at ``target_delta`` in
        ``[0, 1]``: ``(inf, inf)`` if a non-private event was composed, ``(0, 0)`` if nothing
        was or ``target_delta = 1``; ``target_delta = 0`` asks the core accountant for the
        pure-DP epsilon."""
        delta = _probability("target_delta", target_delta)
        state = self._state()
        if state == "non_private":
            return Bounds(math.inf, math.inf)
        if state == "empty" or delta == 1.0:
            return Bounds(0.0, 0.0)
        return self.inner.get_epsilon_bounds(delta)

    def get_epsilon(self, target_delta: float) -> float:
        """Epsilon at ``target_delta`` (upper bound, see :attr:`bound_type`)."""
        return self.get_epsilon_bounds(target_delta).upper

    def get_delta(self, target_epsilon: float) -> float:
        """Delta at ``target_epsilon`` in ``[0, inf]`` (upper bound): 1 if a non-private event
        was composed, 0 if nothing was."""
        epsilon = (float(target_epsilon) if isinstance(target_epsilon, Real)
                   and not isinstance(target_epsilon, bool) else math.nan)
        if math.isnan(epsilon) or epsilon < 0:
            raise ParameterError("target_epsilon", target_epsilon, "a number in [0, inf]")
        state = self._state()
        if state == "non_private":
            return 1.0
        if state == "empty":
            return 0.0
        # delta(inf), the mass at infinite loss, is at most delta at the largest finite epsilon
        # (delta is non-increasing); the core accountant takes finite epsilons only (this raised
        # a ParameterError about epsilon=inf)
        return self.inner.get_delta(min(epsilon, sys.float_info.max))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.neighboring_relation.name}; {self.inner!r})"


class PLDAccountant(DPPluginsPrivacyAccountant):
    """Our certified PLD accountant (:class:`dpplugins.accountants.pld.PLDAccountant`) behind
    dp_accounting's interface: it accounts what the core accountant supports (``GaussianDpEvent``
    and ``PoissonSampledDpEvent(GaussianDpEvent)`` and their compositions; the other events as
    the core accountant learns them).  Options (``eps_tolerance``,
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
    composition; ``inner.get_mu()`` gives the CLT estimate) behind dp_accounting's interface:
    Poisson-subsampled Gaussian steps (``PoissonSampledDpEvent``), and, with
    ``NeighboringRelation.REPLACE_ONE``, fixed-size batches without replacement
    (``SampledWithoutReplacementDpEvent``).  The events say how the batches were sampled, so the
    core option ``sampling`` is refused; the other options go to the core accountant.
    """

    _registry_name = "fdp"
    _event_options = ("sampling",)


class ShuffleAccountant(DPPluginsPrivacyAccountant):
    """Our shuffled-epochs accountant (:class:`dpplugins.accountants.shuffle.ShuffleAccountant`:
    certified upper bound, Chua et al. 2024 lower bound) behind dp_accounting's interface, for
    :class:`~dpplugins.integrations.dp_events.ShuffledEpochsDpEvent` (and any event the core
    accountant supports).

    All events composed must describe the same protocol (dataset size, batch size,
    ``drop_last``; the noise multiplier may change); consecutive events continue the step
    sequence, so an event after a partial epoch finishes that epoch.  Neighbouring relations:
    ``ADD_OR_REMOVE_ONE`` (default) and ``REPLACE_SPECIAL`` are both analysed as *zero-out* (the
    differing example's clipped gradient replaced by 0; adding an example to fixed-size shuffled
    batches would change the number of steps, so literal add/remove is not defined for this
    sampler); ``REPLACE_ONE`` replaces one example.  Options: ``value_discretization_interval``,
    ``lower_bound``.

    Example::

        >>> from dpplugins.integrations.dp_events import ShuffledEpochsDpEvent
        >>> acc = ShuffleAccountant().compose(ShuffledEpochsDpEvent(
        ...     noise_multiplier=1.0, dataset_size=1000, batch_size=100, num_epochs=2))
        >>> acc.history[0].epochs, acc.history[0].steps
        (2, 20)
    """

    _registry_name = "shuffle"
    _event_options = ("batch_size", "examples_per_step", "dataset_size")


class CheckInAccountant(DPPluginsPrivacyAccountant):
    """Our random check-in accountant (:class:`dpplugins.accountants.checkin.CheckInAccountant`,
    Balle et al. 2020 Thms 3.2 / 4.1 / 4.3 per pass, passes composed by PLD) behind
    dp_accounting's interface, for
    :class:`~dpplugins.integrations.dp_events.RandomCheckInDpEvent` (one event = ``num_passes``
    whole runs of the protocol).  The theorems are proved for replacing one example:
    ``REPLACE_ONE`` is the default and the only relation accepted.  Option:
    ``value_discretization_interval``.

    Example::

        >>> from dpplugins.integrations.dp_events import RandomCheckInDpEvent
        >>> acc = CheckInAccountant().compose(RandomCheckInDpEvent(
        ...     noise_multiplier=4.0, num_examples=1000, num_slots=100, checkin_probability=0.1))
        >>> acc.history[0].steps
        100
    """

    _registry_name = "checkin"
    _event_options = ("num_examples", "variant", "num_slots", "window", "checkin_probability",
                      "max_batch_size", "per_example_noise", "noise_multiplier", "eps0",
                      "delta0")


class PNSGDAccountant(DPPluginsPrivacyAccountant):
    """Our PNSGD accountant (:class:`dpplugins.accountants.pnsgd.PNSGDAccountant`, privacy
    amplification by iteration, passes composed by PLD) behind dp_accounting's interface, for
    :class:`~dpplugins.integrations.dp_events.PNSGDDpEvent` (one event = ``num_passes`` passes
    of ``dataset_size`` steps).  The theorems compare datasets that differ in one record:
    ``REPLACE_ONE`` is the default and the only relation accepted.  Option:
    ``value_discretization_interval``.

    Example::

        >>> from dpplugins.integrations.dp_events import PNSGDDpEvent
        >>> acc = PNSGDAccountant().compose(PNSGDDpEvent(
        ...     noise_multiplier=2.0, lipschitz=1.0, diameter=2.0, learning_rate=0.5,
        ...     dataset_size=1000, num_passes=2))
        >>> acc.history[0].steps
        2000
    """

    _registry_name = "pnsgd"
    _event_options = ("lipschitz", "diameter", "learning_rate", "dataset_size", "variant",
                      "contraction", "noise", "smoothness")


class RandomAllocationAccountant(DPPluginsPrivacyAccountant):
    """Our random-allocation ("balls and bins") accountant
    (:class:`dpplugins.accountants.balls_and_bins.RandomAllocationAccountant`, registry name
    ``"balls_and_bins"``: certified upper and lower bounds from the dominating pair of Chua et al.,
    AISTATS 2025, composed over epochs by PLD) behind dp_accounting's interface, for
    :class:`~dpplugins.integrations.dp_events.RandomAllocationDpEvent` and the random check-ins
    that are random allocation (``RandomCheckInDpEvent`` averaged, check-in probability 1, no
    ``max_batch_size``).  The steps per epoch may change between whole epochs.

    Neighbouring relations: ``ADD_OR_REMOVE_ONE`` (default) and ``REPLACE_SPECIAL`` (zero-out:
    the record keeps its place in its step with a zero clipped gradient, so the step sums differ
    exactly as for adding or removing it); ``REPLACE_ONE`` is refused (the dominating pair is for
    adding or removing one example).  Options (``eps_tolerance``, ``method``, ``memory_limit``)
    go to the core accountant.

    Example::

        >>> from dpplugins.integrations.dp_events import RandomAllocationDpEvent
        >>> acc = RandomAllocationAccountant().compose(RandomAllocationDpEvent(
        ...     noise_multiplier=1.0, steps_per_epoch=10, num_epochs=3))
        >>> acc.history[0].steps
        30
    """

    _registry_name = "balls_and_bins"
