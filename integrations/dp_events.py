"""dp_accounting views of our events: what dp_accounting cannot describe, as ``DpEvent`` classes.

Frozen ``attrs`` classes subclassing ``dp_accounting.DpEvent``, like dp_accounting's own, so
``to_named_tuple``/``from_named_tuple``, ``DpEventBuilder`` and the accountants' ledger handle
them.  Each is a *thin view* of exactly one of our events (:mod:`dpplugins.events`): its
``to_event()`` returns that event, and the accountants of
:mod:`dpplugins.integrations.dp_accountants` account it by composing that event in the core
accountant.  The translation of dp_accounting's own events lives in
:mod:`dpplugins.integrations.dp_accounting_events`.

* :class:`ShuffledEpochsDpEvent` -> :class:`~dpplugins.events.ShuffledEpochsEvent` (Keras
  ``fit``, Opacus without Poisson sampling);
* :class:`RandomCheckInDpEvent` -> :class:`~dpplugins.events.RandomCheckInEvent` (Balle et al.
  2020);
* :class:`RandomAllocationDpEvent` -> :class:`~dpplugins.events.RandomAllocationEvent` (balls and
  bins, Chua et al. 2025);
* :class:`PNSGDDpEvent` -> :class:`~dpplugins.events.PNSGDEvent` (projected noisy SGD);
* :class:`RandomizedResponseDpEvent` and :class:`EpsilonDeltaDpEvent`: dp_accounting's own
  classes when the installed dp_accounting has them (0.4.4 and later), otherwise views with
  dp_accounting's names, fields and meaning (dp-accounting 0.4.3, what TF-Privacy 0.9.0 pins,
  lacks them);
* :class:`DPPluginsDpEvent` -- any of our events as a ``DpEvent`` (e.g. ``SwapEvent``), for the
  events none of the above describes.

dp_accounting's own accountants do not know the views and reject them (``supports`` is False).
Invalid parameters raise :class:`~dpplugins.errors.ParameterError` naming the event field.
Only dp_accounting and attrs (a dependency of dp_accounting) are imported.

Example::

    >>> from dpplugins.integrations.dp_events import ShuffledEpochsDpEvent
    >>> view = ShuffledEpochsDpEvent(noise_multiplier=1.1, dataset_size=60000, batch_size=256)
    >>> view.num_steps, view.to_event().steps
    (235, 235)
"""

from __future__ import annotations

import enum
import math
from fractions import Fraction
from typing import Any, Callable, Optional

import attr
import numpy as np

try:
    from dp_accounting import dp_event
except ImportError as _error:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError("the TF-Privacy integration needs dp_accounting: pip install "
                      "'dp-accounting>=0.4.3' (tensorflow-privacy installs it)") from _error

from dpplugins.errors import (ParameterError, check_count, check_nonnegative, check_positive,
                              check_probability, check_real)
from dpplugins.events import (EpsilonDeltaEvent, Event, GaussianEvent, LaplaceEvent,
                              NonPrivateEvent, NoOpEvent, PNSGDEvent, RandomAllocationEvent,
                              RandomCheckInEvent, RandomizedResponseEvent, ShuffledEpochsEvent)

__all__ = ["ShuffledEpochsDpEvent", "RandomCheckInDpEvent", "RandomAllocationDpEvent",
           "PNSGDDpEvent", "RandomizedResponseDpEvent", "EpsilonDeltaDpEvent",
           "DPPluginsDpEvent", "CheckInVariant", "PNSGDVariant", "PNSGDNoise",
           "check_noise_multiplier", "randomized_response_event", "epsilon_delta_event"]


# -- validation helpers ---------------------------------------------------------------------------
def check_noise_multiplier(name: str, value: Any) -> float:
    """``value`` as a float if it is a valid noise multiplier of an event (finite, ``>= 0``; 0
    means no noise, a non-private step), else :class:`ParameterError` naming ``name``."""
    value = check_real(name, value)
    if value < 0:
        raise ParameterError(name, value, "a finite number >= 0 (0 means no noise: not private)")
    return value


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterError(name, value, "True or False")
    return bool(value)


def _whole(value: Any) -> Any:
    """``value`` as an int when it is a whole number (keeps reprs and named tuples simple)."""
    return int(value) if float(value).is_integer() else value


# -- the meaning of dp_accounting's randomized response and (epsilon, delta) events ---------------
def randomized_response_event(noise_parameter: Any, num_buckets: Any,
                              name: str = "RandomizedResponseDpEvent") -> Event:
    """Our event for dp_accounting's ``RandomizedResponseDpEvent(noise_parameter, num_buckets)``.

    dp_accounting's definition (``dp_event.py``): on input one of ``k = num_buckets`` buckets, with
    probability ``1 - p`` output the input, otherwise (probability ``p = noise_parameter``) a
    bucket drawn uniformly from all ``k``.  So the true bucket has probability ``1 - p + p / k``
    and every other bucket ``p / k``; with ``e^eps0 = (1 - p + p / k) / (p / k) = 1 + k (1 - p)
    / p`` these are ``e^eps0 / (e^eps0 + k - 1)`` and ``1 / (e^eps0 + k - 1)`` (since
    ``e^eps0 + k - 1 = k / p``), the parametrisation of
    :class:`~dpplugins.events.RandomizedResponseEvent`.  Special cases: ``k = 1`` releases the
    only bucket (:class:`~dpplugins.events.NoOpEvent`); ``p = 0`` with ``k >= 2`` releases the
    input (:class:`~dpplugins.events.NonPrivateEvent`); ``p = 1`` is ``eps0 = 0``.

    Example::

        >>> event = randomized_response_event(4 / (3 + math.e), 4)
        >>> round(event.epsilon0, 12), event.num_buckets
        (1.0, 4)
    """
    p = check_probability(f"{name}.noise_parameter", noise_parameter, allow_zero=True)
    k = check_count(f"{name}.num_buckets", num_buckets, minimum=1)
    if k == 1:
        return NoOpEvent()
    if p == 0.0:
        return NonPrivateEvent()
    # log(1 + k (1 - p) / p), accurate for p near 1 (eps0 near 0)
    return RandomizedResponseEvent(math.log1p(k * (1.0 - p) / p), k)


def randomized_response_noise_parameter(event: RandomizedResponseEvent) -> float:
    """dp_accounting's ``noise_parameter`` of our :class:`RandomizedResponseEvent`:
    ``p = k / (e^eps0 + k - 1)`` (the inverse of :func:`randomized_response_event`)."""
    k = event.num_buckets
    return k / (math.expm1(event.epsilon0) + k)


def epsilon_delta_event(epsilon: Any, delta: Any, name: str = "EpsilonDeltaDpEvent") -> Event:
    """Our event for dp_accounting's ``EpsilonDeltaDpEvent(epsilon, delta)`` (a mechanism known
    only to be ``(epsilon, delta)``-DP): :class:`~dpplugins.events.EpsilonDeltaEvent`, or
    :class:`~dpplugins.events.NonPrivateEvent` for ``epsilon = inf`` or ``delta = 1``."""
    if isinstance(epsilon, (int, float, np.floating, np.integer)) and not isinstance(
            epsilon, bool) and math.isinf(float(epsilon)) and float(epsilon) > 0:
        return NonPrivateEvent()
    epsilon = check_nonnegative(f"{name}.epsilon", epsilon)
    delta = check_real(f"{name}.delta", delta)
    if not 0.0 <= delta <= 1.0:
        raise ParameterError(f"{name}.delta", delta, "in [0, 1]")
    if delta == 1.0:
        return NonPrivateEvent()
    return EpsilonDeltaEvent(epsilon, delta)


# -- our events -----------------------------------------------------------------------------------
# Choices are enums, not strings: dp_accounting's to_named_tuple/from_named_tuple treat every
# Sequence field element-wise, which would turn a string into a list of characters.
class CheckInVariant(enum.Enum):
    """The check-in protocol of a :class:`RandomCheckInDpEvent` (Balle et al. 2020)."""

    FIXED = "fixed"          # A_fix, Alg. 1, Thm 3.2
    AVERAGED = "averaged"    # A_avg, Thm 4.1
    SLIDING = "sliding"      # A_sldw, Thm 4.3


class PNSGDVariant(enum.Enum):
    """What a :class:`PNSGDDpEvent` releases and in which order it visits the records."""

    SHUFFLED = "shuffled"
    RANDOMLY_STOPPED = "randomly_stopped"
    ONLINE = "online"


class PNSGDNoise(enum.Enum):
    """The noise of a :class:`PNSGDDpEvent`."""

    GAUSSIAN = "gaussian"
    LAPLACE = "laplace"


def _choice_converter(kind: type, name: str) -> Callable[[Any], enum.Enum]:
    """attrs converter: a member of ``kind`` from itself or its value (``"fixed"``)."""
    def convert(value: Any) -> enum.Enum:
        if isinstance(value, kind):
            return value
        try:
            return kind(value)
        except ValueError:
            raise ParameterError(name, value, "one of " + ", ".join(
                repr(member.value) for member in kind)) from None
    return convert


@attr.s(frozen=True, slots=True, auto_attribs=True)
class ShuffledEpochsDpEvent(dp_event.DpEvent):
    """DP-SGD on shuffled epochs: ``num_epochs`` epochs, each a fresh uniformly random
    permutation of the ``dataset_size`` records cut into consecutive batches of ``batch_size``
    (the last one shorter, or dropped with ``drop_last``); every step adds ``N(0, s^2 I)`` once to
    the sum of the batch's values, each of norm at most C, with ``noise_multiplier = s / C``; every
    noisy step is released.  This is Keras ``fit`` and Opacus with ``poisson_sampling=False``.

    The view of :class:`~dpplugins.events.ShuffledEpochsEvent` (``to_event()``).
    ``steps_per_epoch`` is ``ceil(dataset_size / batch_size)`` (``floor`` with ``drop_last``);
    a fractional ``num_epochs`` runs the first ``num_steps = ceil(num_epochs * steps_per_epoch)``
    steps (a partial last epoch is a prefix of a full one), i.e. the event of
    ``num_steps / steps_per_epoch`` epochs.  As for every protocol event, consecutive events of
    the same protocol continue the step sequence: an event that follows a partial epoch finishes
    that epoch first (the accountants cut passes every ``steps_per_epoch`` steps from the first
    step), so ``SelfComposedDpEvent(e, k)`` is ``k * num_epochs`` epochs of one run.  Accounted
    by :class:`~dpplugins.integrations.dp_accountants.ShuffleAccountant`.

    Example::

        >>> event = ShuffledEpochsDpEvent(noise_multiplier=1.1, dataset_size=1000, batch_size=30,
        ...                               num_epochs=1.5)
        >>> event.steps_per_epoch, event.num_steps, event.to_event().epochs
        (34, 51, Fraction(3, 2))
    """

    noise_multiplier: float
    dataset_size: int
    batch_size: int
    num_epochs: float = 1.0
    drop_last: bool = False

    def __attrs_post_init__(self) -> None:
        name = type(self).__name__
        check_noise_multiplier(f"{name}.noise_multiplier", self.noise_multiplier)
        n = check_count(f"{name}.dataset_size", self.dataset_size, minimum=2)
        b = check_count(f"{name}.batch_size", self.batch_size, minimum=1)
        if b > n:
            raise ParameterError(f"{name}.batch_size", self.batch_size,
                                 f"<= dataset_size={n}")
        check_positive(f"{name}.num_epochs", self.num_epochs)
        _flag(f"{name}.drop_last", self.drop_last)

    @property
    def steps_per_epoch(self) -> int:
        """Batches per epoch."""
        n, b = int(self.dataset_size), int(self.batch_size)
        return n // b if self.drop_last else -(-n // b)

    @property
    def num_steps(self) -> int:
        """Noisy steps of the event, ``ceil(num_epochs * steps_per_epoch)`` (a product within a
        relative 1e-9 of an integer counts as that integer: floating-point representation of a
        fraction such as 51/34 epochs)."""
        product = float(self.num_epochs) * self.steps_per_epoch
        return max(1, math.ceil(product - 1e-9 * max(1.0, product)))

    def to_event(self) -> ShuffledEpochsEvent:
        """Our :class:`~dpplugins.events.ShuffledEpochsEvent` of ``num_steps`` steps."""
        t = self.steps_per_epoch
        epochs = Fraction(self.num_steps, t)
        return ShuffledEpochsEvent(int(self.dataset_size), int(self.batch_size),
                                   int(epochs) if epochs.denominator == 1 else epochs,
                                   GaussianEvent(float(self.noise_multiplier)),
                                   bool(self.drop_last))

    @classmethod
    def from_event(cls, event: Event) -> Optional["ShuffledEpochsDpEvent"]:
        """The view of ``event``, or ``None`` when it is not one (not shuffled epochs, noise
        other than Gaussian, or sizes the view does not describe)."""
        if not (isinstance(event, ShuffledEpochsEvent) and isinstance(event.event, GaussianEvent)
                and event.dataset_size >= 2 and event.batch_size <= event.dataset_size):
            return None
        epochs = event.steps / event.steps_per_epoch
        view = cls(event.event.noise_multiplier, event.dataset_size, event.batch_size,
                   _whole(epochs), event.drop_last)
        return view if view.to_event() == event else None


@attr.s(frozen=True, slots=True, auto_attribs=True)
class RandomCheckInDpEvent(dp_event.DpEvent):
    """DP-SGD (or federated training) with random check-ins (Balle, Kairouz, McMahan, Thakkar,
    Thakurta 2020): ``num_passes`` independent runs of the protocol, each of ``num_slots`` steps
    (``num_examples - window + 1`` for ``variant="sliding"``), every step adding ``N(0, s^2 I)``
    to the (clipped) update of the slot, ``noise_multiplier = s / C``.

    ``variant`` is a :class:`CheckInVariant` or its value:

    * ``"fixed"`` (A_fix, Alg. 1): every example checks in with probability
      ``checkin_probability`` into a uniformly random one of ``num_slots`` slots; one checked-in
      example per slot is used; an empty slot is a released dummy (noise-only) update.
    * ``"averaged"`` (A_avg, Thm 4.1): every example checks in and all examples of a slot are
      used, at most ``max_batch_size`` of them (a uniformly random subset if more); noise is added
      once to the batch sum unless ``per_example_noise``.
    * ``"sliding"`` (A_sldw, Thm 4.3): example ``j`` checks into a uniform slot of
      ``{j, ..., j + window - 1}``.

    The view of :class:`~dpplugins.events.RandomCheckInEvent` (``to_event()``), the event of the
    samplers :class:`dpplugins.samplers.RandomCheckIn` and
    :class:`~dpplugins.samplers.SlidingWindowCheckIn`.  Accounted by
    :class:`~dpplugins.integrations.dp_accountants.CheckInAccountant` (replace one example) and,
    for the averaged variant with check-in probability 1 and no cap (random allocation), by
    :class:`~dpplugins.integrations.dp_accountants.RandomAllocationAccountant`.

    Example::

        >>> RandomCheckInDpEvent(noise_multiplier=2.0, num_examples=1000, num_slots=100,
        ...                      checkin_probability=0.5).steps_per_pass
        100
    """

    noise_multiplier: float
    num_examples: int
    num_slots: Optional[int] = None
    checkin_probability: float = 1.0
    variant: CheckInVariant = attr.ib(
        default=CheckInVariant.FIXED,
        converter=_choice_converter(CheckInVariant, "RandomCheckInDpEvent.variant"))
    window: Optional[int] = None
    max_batch_size: Optional[int] = None
    per_example_noise: bool = False
    num_passes: int = 1

    def __attrs_post_init__(self) -> None:
        name = type(self).__name__
        check_noise_multiplier(f"{name}.noise_multiplier", self.noise_multiplier)
        check_count(f"{name}.num_examples", self.num_examples, minimum=1)
        if self.variant is CheckInVariant.SLIDING:
            if self.window is None or self.num_slots is not None:
                raise ParameterError(f"{name}.window", self.window,
                                     "an integer in [1, num_examples] (and num_slots=None) for "
                                     "variant='sliding'")
            if check_count(f"{name}.window", self.window, minimum=1) > self.num_examples:
                raise ParameterError(f"{name}.window", self.window,
                                     f"<= num_examples={self.num_examples}")
        else:
            if self.num_slots is None or self.window is not None:
                raise ParameterError(f"{name}.num_slots", self.num_slots,
                                     f"an integer >= 1 (and window=None) for "
                                     f"variant={self.variant.value!r}")
            check_count(f"{name}.num_slots", self.num_slots, minimum=1)
        check_probability(f"{name}.checkin_probability", self.checkin_probability)
        if self.max_batch_size is not None:
            check_count(f"{name}.max_batch_size", self.max_batch_size, minimum=1)
        _flag(f"{name}.per_example_noise", self.per_example_noise)
        check_count(f"{name}.num_passes", self.num_passes, minimum=1)

    @property
    def steps_per_pass(self) -> int:
        """Steps of one run of the protocol."""
        if self.variant is CheckInVariant.SLIDING:
            return int(self.num_examples) - int(self.window) + 1
        return int(self.num_slots)

    def to_event(self) -> RandomCheckInEvent:
        """Our :class:`~dpplugins.events.RandomCheckInEvent` of ``num_passes`` passes."""
        return RandomCheckInEvent(
            int(self.num_examples), GaussianEvent(float(self.noise_multiplier)),
            self.variant.value, None if self.num_slots is None else int(self.num_slots),
            None if self.window is None else int(self.window), float(self.checkin_probability),
            None if self.max_batch_size is None else int(self.max_batch_size),
            bool(self.per_example_noise), int(self.num_passes))

    @classmethod
    def from_event(cls, event: Event) -> Optional["RandomCheckInDpEvent"]:
        """The view of ``event``, or ``None`` (not random check-ins, noise other than Gaussian,
        or a fractional number of passes)."""
        if not (isinstance(event, RandomCheckInEvent) and isinstance(event.event, GaussianEvent)
                and Fraction(event.passes).denominator == 1):
            return None
        return cls(event.event.noise_multiplier, event.dataset_size, event.num_slots,
                   event.checkin_probability, event.variant, event.window, event.max_batch_size,
                   event.per_example_noise, int(event.passes))


@attr.s(frozen=True, slots=True, auto_attribs=True)
class RandomAllocationDpEvent(dp_event.DpEvent):
    """DP-SGD with random allocation ("balls and bins", Chua et al., AISTATS 2025; Feldman &
    Shenfeld 2025): in each of ``num_epochs`` epochs every example is placed in exactly one of the
    ``steps_per_epoch`` steps, uniformly at random and independently of the others; every step
    adds ``N(0, s^2 I)`` to the sum of its examples' values (norm at most C),
    ``noise_multiplier = s / C``.  (:func:`dpplugins.samplers.balls_and_bins` samples this way.)
    The view of :class:`~dpplugins.events.RandomAllocationEvent` (``to_event()``).  Accounted by
    :class:`~dpplugins.integrations.dp_accountants.RandomAllocationAccountant`.

    Example::

        >>> RandomAllocationDpEvent(noise_multiplier=1.0, steps_per_epoch=100, num_epochs=3)
        RandomAllocationDpEvent(noise_multiplier=1.0, steps_per_epoch=100, num_epochs=3)
    """

    noise_multiplier: float
    steps_per_epoch: int
    num_epochs: int = 1

    def __attrs_post_init__(self) -> None:
        name = type(self).__name__
        check_noise_multiplier(f"{name}.noise_multiplier", self.noise_multiplier)
        check_count(f"{name}.steps_per_epoch", self.steps_per_epoch, minimum=1)
        check_count(f"{name}.num_epochs", self.num_epochs, minimum=1)

    def to_event(self) -> RandomAllocationEvent:
        """Our :class:`~dpplugins.events.RandomAllocationEvent` (one participation per epoch,
        every example taking part)."""
        return RandomAllocationEvent(int(self.steps_per_epoch), int(self.num_epochs),
                                     GaussianEvent(float(self.noise_multiplier)))

    @classmethod
    def from_event(cls, event: Event) -> Optional["RandomAllocationDpEvent"]:
        """The view of ``event``, or ``None`` (several participations, check-in probability
        below 1, noise other than Gaussian, or a fractional number of epochs)."""
        if not (isinstance(event, RandomAllocationEvent) and isinstance(event.event, GaussianEvent)
                and event.participations == 1 and event.checkin_probability == 1.0
                and Fraction(event.passes).denominator == 1):
            return None
        return cls(event.event.noise_multiplier, event.steps_per_epoch, int(event.passes))


@attr.s(frozen=True, slots=True, auto_attribs=True)
class PNSGDDpEvent(dp_event.DpEvent):
    """Projected noisy SGD with hidden intermediate iterates (privacy amplification by
    iteration; Feldman et al. 2018, Asoodeh et al. 2020, Sordello, Bu, Dong 2021): ``num_passes``
    passes of ``dataset_size`` steps, one record per step,
    ``w_t = Pi_K(w_{t-1} - learning_rate (g_t + noise_multiplier * lipschitz * Z_t))`` with
    ``|g_t| <= lipschitz``, ``Pi_K`` the projection onto a convex set of diameter ``diameter``,
    the gradient step ``contraction``-Lipschitz (1 for convex losses that are
    ``smoothness``-smooth with ``learning_rate <= 2 / smoothness``).  ``variant`` is
    ``"shuffled"`` (fresh permutation per pass, only the end of a pass released),
    ``"randomly_stopped"`` or ``"online"`` (a :class:`PNSGDVariant` or its value); ``noise`` is
    ``"gaussian"`` or ``"laplace"`` (:class:`PNSGDNoise`).
    The view of :class:`~dpplugins.events.PNSGDEvent` (``to_event()``).  Neighbouring relation:
    replace one record.  Accounted by
    :class:`~dpplugins.integrations.dp_accountants.PNSGDAccountant` (see
    :class:`dpplugins.accountants.pnsgd.PNSGDAccountant` for the units).

    Example::

        >>> PNSGDDpEvent(noise_multiplier=2.0, lipschitz=1.0, diameter=2.0, learning_rate=0.5,
        ...              dataset_size=1000, num_passes=3).num_passes
        3
    """

    noise_multiplier: float
    lipschitz: float
    diameter: float
    learning_rate: float
    dataset_size: int
    num_passes: int = 1
    variant: PNSGDVariant = attr.ib(
        default=PNSGDVariant.SHUFFLED,
        converter=_choice_converter(PNSGDVariant, "PNSGDDpEvent.variant"))
    contraction: float = 1.0
    noise: PNSGDNoise = attr.ib(
        default=PNSGDNoise.GAUSSIAN, converter=_choice_converter(PNSGDNoise, "PNSGDDpEvent.noise"))
    smoothness: Optional[float] = None

    def __attrs_post_init__(self) -> None:
        name = type(self).__name__
        check_noise_multiplier(f"{name}.noise_multiplier", self.noise_multiplier)
        for attribute in ("lipschitz", "diameter", "learning_rate", "contraction"):
            check_positive(f"{name}.{attribute}", getattr(self, attribute))
        check_count(f"{name}.dataset_size", self.dataset_size, minimum=1)
        check_count(f"{name}.num_passes", self.num_passes, minimum=1)
        if self.smoothness is not None:
            check_positive(f"{name}.smoothness", self.smoothness)

    def to_event(self) -> PNSGDEvent:
        """Our :class:`~dpplugins.events.PNSGDEvent` of ``num_passes`` passes."""
        sigma = float(self.noise_multiplier)
        noise = GaussianEvent(sigma) if self.noise is PNSGDNoise.GAUSSIAN else LaplaceEvent(sigma)
        return PNSGDEvent(int(self.dataset_size), int(self.num_passes), noise,
                          float(self.lipschitz), float(self.diameter), float(self.learning_rate),
                          self.variant.value, float(self.contraction),
                          None if self.smoothness is None else float(self.smoothness))

    @classmethod
    def from_event(cls, event: Event) -> Optional["PNSGDDpEvent"]:
        """The view of ``event``, or ``None`` (not PNSGD, or a fractional number of passes)."""
        if not (isinstance(event, PNSGDEvent) and isinstance(event.event, (GaussianEvent,
                                                                           LaplaceEvent))
                and Fraction(event.passes).denominator == 1):
            return None
        gaussian = isinstance(event.event, GaussianEvent)
        sigma = event.event.noise_multiplier if gaussian else event.event.scale
        return cls(sigma, event.lipschitz, event.diameter, event.learning_rate,
                   event.dataset_size, int(event.passes), event.variant, event.contraction,
                   PNSGDNoise.GAUSSIAN if gaussian else PNSGDNoise.LAPLACE, event.smoothness)


# -- dp_accounting's newer events, for dp_accounting versions without them ------------------------
if hasattr(dp_event, "RandomizedResponseDpEvent"):
    RandomizedResponseDpEvent = dp_event.RandomizedResponseDpEvent
else:
    @attr.s(frozen=True, slots=True, auto_attribs=True)
    class RandomizedResponseDpEvent(dp_event.DpEvent):
        """Randomized response over ``num_buckets`` buckets with noise parameter
        ``noise_parameter`` (p), with the name, fields and meaning of dp_accounting's class
        (dp-accounting >= 0.4.4; this view is used with older versions): on input one of the
        buckets, output it with probability ``1 - p``, otherwise (probability ``p``) a bucket
        drawn uniformly from all of them.  ``to_event()`` is
        :func:`randomized_response_event`."""

        noise_parameter: float
        num_buckets: int

        def __attrs_post_init__(self) -> None:
            self.to_event()          # validates, naming the field

        def to_event(self) -> Event:
            """Our event (:func:`randomized_response_event`)."""
            return randomized_response_event(self.noise_parameter, self.num_buckets)


if hasattr(dp_event, "EpsilonDeltaDpEvent"):
    EpsilonDeltaDpEvent = dp_event.EpsilonDeltaDpEvent
else:
    @attr.s(frozen=True, slots=True, auto_attribs=True)
    class EpsilonDeltaDpEvent(dp_event.DpEvent):
        """A mechanism known only to be ``(epsilon, delta)``-DP, with the name, fields and
        meaning of dp_accounting's class (dp-accounting >= 0.4.4; this view is used with older
        versions).  ``to_event()`` is :func:`epsilon_delta_event`."""

        epsilon: float
        delta: float

        def __attrs_post_init__(self) -> None:
            self.to_event()          # validates, naming the field

        def to_event(self) -> Event:
            """Our event (:func:`epsilon_delta_event`)."""
            return epsilon_delta_event(self.epsilon, self.delta)


@attr.s(frozen=True, slots=True, auto_attribs=True)
class DPPluginsDpEvent(dp_event.DpEvent):
    """Any of our events (:mod:`dpplugins.events`) as a dp_accounting ``DpEvent``: the view of
    the events that no dp_accounting class and no view above describes (e.g.
    :class:`~dpplugins.events.SwapEvent`, :class:`~dpplugins.events.ShuffleEvent`, or a protocol
    event with a fractional number of passes).  ``to_event()`` returns ``event``.

    Example::

        >>> from dpplugins.events import GaussianEvent, SwapEvent
        >>> DPPluginsDpEvent(SwapEvent(100, 2, GaussianEvent(1.0))).to_event().steps
        200
    """

    event: Event

    def __attrs_post_init__(self) -> None:
        if not isinstance(self.event, Event):
            raise ParameterError("DPPluginsDpEvent.event", type(self.event).__name__,
                                 "an event from dpplugins.events")

    def to_event(self) -> Event:
        """The wrapped event."""
        return self.event
