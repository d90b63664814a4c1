"""dp_accounting events for the samplers dp_accounting cannot describe.

Frozen ``attrs`` classes subclassing ``dp_accounting.DpEvent``, like dp_accounting's own, so
``to_named_tuple``/``from_named_tuple``, ``DpEventBuilder`` and the accountants' ledger handle
them:

* :class:`ShuffledEpochsDpEvent` -- shuffled epochs (Keras ``fit``, Opacus without Poisson);
* :class:`RandomCheckInDpEvent` -- random check-ins (Balle et al. 2020);
* :class:`RandomAllocationDpEvent` -- random allocation / balls and bins (Chua et al. 2025);
* :class:`PNSGDDpEvent` -- projected noisy SGD with hidden iterates.

Each carries the protocol parameters its accountant needs
(:mod:`dpplugins.integrations.dp_accountants`); dp_accounting's accountants do not know them and
reject them (``supports`` is False).  Invalid parameters raise
:class:`~dpplugins.errors.ParameterError` naming the event field.  Only dp_accounting and attrs
(a dependency of dp_accounting) are imported.

Example::

    >>> from dpplugins.integrations.dp_events import ShuffledEpochsDpEvent
    >>> ShuffledEpochsDpEvent(noise_multiplier=1.1, dataset_size=60000, batch_size=256).num_steps
    235
"""

from __future__ import annotations

import enum
import math
from typing import Any, Callable, Optional

import attr
import numpy as np

try:
    from dp_accounting import dp_event
except ImportError as _error:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError("the TF-Privacy integration needs dp_accounting: pip install "
                      "'dp-accounting>=0.4.3' (tensorflow-privacy installs it)") from _error

from dpplugins.errors import (ParameterError, check_count, check_positive, check_probability,
                              check_real)

__all__ = ["ShuffledEpochsDpEvent", "RandomCheckInDpEvent", "RandomAllocationDpEvent",
           "PNSGDDpEvent", "CheckInVariant", "PNSGDVariant", "PNSGDNoise",
           "check_noise_multiplier"]


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

    ``steps_per_epoch`` is ``ceil(dataset_size / batch_size)`` (``floor`` with ``drop_last``);
    a fractional ``num_epochs`` runs the first ``num_steps = ceil(num_epochs * steps_per_epoch)``
    steps (a partial last epoch is a prefix of a full one).  Composing the event ``k`` times
    (``SelfComposedDpEvent``) is ``k * num_epochs`` epochs, which must then be whole.  Accounted
    by :class:`~dpplugins.integrations.dp_accountants.ShuffleAccountant`.

    Example::

        >>> event = ShuffledEpochsDpEvent(noise_multiplier=1.1, dataset_size=1000, batch_size=30,
        ...                               num_epochs=1.5)
        >>> event.steps_per_epoch, event.num_steps
        (34, 51)
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
    * ``"averaged"`` (A_avg, Thm 4.1): every example checks in (probability 1) and all
      examples of a slot are used, at most ``max_batch_size`` of them (a uniformly random subset
      if more); noise is added once to the batch sum unless ``per_example_noise``.
    * ``"sliding"`` (A_sldw, Thm 4.3): example ``j`` checks into a uniform slot of
      ``{j, ..., j + window - 1}``.

    These are the samplers :class:`dpplugins.samplers.RandomCheckIn` and
    :class:`~dpplugins.samplers.SlidingWindowCheckIn`.  Neighbouring relation: replace one
    example.  Accounted by :class:`~dpplugins.integrations.dp_accountants.CheckInAccountant`.

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


@attr.s(frozen=True, slots=True, auto_attribs=True)
class RandomAllocationDpEvent(dp_event.DpEvent):
    """DP-SGD with random allocation ("balls and bins", Chua et al., AISTATS 2025; Feldman &
    Shenfeld 2025): in each of ``num_epochs`` epochs every example is placed in exactly one of the
    ``steps_per_epoch`` steps, uniformly at random and independently of the others; every step
    adds ``N(0, s^2 I)`` to the sum of its examples' values (norm at most C),
    ``noise_multiplier = s / C``.  (:class:`dpplugins.samplers.RandomCheckIn` with
    ``variant="averaged"``, ``checkin_probability=1`` and no ``max_batch_size`` samples this
    way.)  Neighbouring relation: add or remove one example.  Accounted by
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
    Neighbouring relation: replace one record.  Accounted by
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


#: our event classes -> the wrapper that accounts them (for error messages)
