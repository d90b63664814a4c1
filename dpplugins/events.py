"""Events: frozen, hashable descriptions of what a training run released.

An event says *what happened*, completely and nothing else; an accountant *interprets* it
(``accountant.supports(event)``, ``accountant.compose(event)``).  Samplers emit their event
(``sampler.event(noise_multiplier, epochs)``); the Opacus, Keras, TF-Privacy and Flower
integrations only translate what their framework did into events.  The idea follows
dp_accounting's ``dp_event.py`` (Google's differential-privacy library); the classes here are
our own and carry the protocol parameters our accountants need.

Vocabulary (one name per concept across the library):

* ``noise_multiplier`` -- standard deviation of the Gaussian noise divided by the L2 sensitivity
  of one step's sum (Opacus' meaning); ``0`` means no noise (a non-private release).
* ``dataset_size`` -- the number of examples (or clients) the sampler draws from.
* ``epochs`` (``passes`` for check-in protocols) -- how many passes of the sampler were run.  It
  may end inside a pass: it is then a :class:`fractions.Fraction` whose denominator divides
  ``steps_per_epoch`` (``event.with_steps(s)`` builds one from a step count).  Floats are
  accepted when they are within a relative ``1e-9`` of such a fraction -- the only tolerance of
  this kind in the library (:func:`epochs_as_fraction`).

**Consecutive passes continue.**  A protocol event (:class:`ShuffledEpochsEvent`,
:class:`RandomAllocationEvent`, :class:`RandomCheckInEvent`, :class:`SwapEvent`,
:class:`PNSGDEvent`) that follows another event of the *same protocol* (equal
:meth:`ProtocolEvent.protocol_key`; the noise may differ) in an accountant's history continues
its step sequence: passes are cut every ``steps_per_epoch`` steps counted from the first step of
that run of events (:func:`dpplugins.passes.cut_passes`).  This is what training does -- an
optimizer step at a time -- and what the accountants have always assumed.  Two full-epoch events
therefore compose to their sum of epochs whichever way they are read.

**Gradient accumulation** (``k`` batches per noisy optimizer step) is a method of the event type,
:meth:`Event.accumulate`; it returns the event of the logical steps, or raises
:class:`~dpplugins.errors.ParameterError` with the reason when the merged protocol is not one the
library describes.  Nobody else decides it.

Every event round-trips through JSON: ``from_dict(json.loads(json.dumps(event.to_dict())))``
equals ``event``.

Example::

    >>> from dpplugins.events import GaussianEvent, PoissonSampledEvent, SelfComposedEvent
    >>> step = PoissonSampledEvent(0.01, GaussianEvent(1.0))
    >>> run = SelfComposedEvent(step, 1000)
    >>> from_dict(run.to_dict()) == run
    True
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from numbers import Integral, Real
from typing import Any, ClassVar

from dpplugins.errors import (ParameterError, check_choice, check_count, check_flag,
                              check_nonnegative, check_positive, check_probability, check_real)

__all__ = [
    "Event", "GaussianEvent", "LaplaceEvent", "RandomizedResponseEvent", "EpsilonDeltaEvent",
    "UnaryEncodingEvent", "SubsetSelectionEvent", "LocalHashingEvent", "BoundedLaplaceEvent",
    "LOCAL_RANDOMIZER_EVENTS", "PersonalizedRandomizedResponseEvent",
    "PoissonSampledEvent", "FixedBatchEvent", "ProtocolEvent", "ShuffledEpochsEvent",
    "RandomAllocationEvent", "RandomCheckInEvent", "SwapEvent", "PNSGDEvent", "ShuffleEvent",
    "ComposedEvent", "SelfComposedEvent", "NoOpEvent", "NonPrivateEvent", "UnsupportedEvent",
    "from_dict", "epochs_as_fraction", "steps_per_epoch_for_rate", "leaves", "EVENT_TYPES", "CHECKIN_VARIANTS",
    "PNSGD_VARIANTS",
]

CHECKIN_VARIANTS = ("fixed", "averaged", "sliding")
PNSGD_VARIANTS = ("shuffled", "randomly_stopped", "online")
#: the one relative tolerance for "this float number of epochs is a whole number of steps"
_EPOCH_TOLERANCE = 1e-9


def epochs_as_fraction(name: str, value: Any, steps_per_epoch: int) -> Fraction | int:
    """``value`` (epochs) as an ``int`` or an exact ``Fraction`` with a whole number of steps.

    Accepts ints, Fractions and floats (a float within a relative ``1e-9`` of ``s /
    steps_per_epoch`` for an integer ``s`` is that fraction).  Raises :class:`ParameterError`
    naming ``name`` for anything else, for ``value <= 0``, and for a number of epochs that is not
    a whole number of steps.

    Example::

        >>> epochs_as_fraction("epochs", 1.5, 34)
        Fraction(3, 2)
    """
    if isinstance(value, bool):
        raise ParameterError(name, value, "a number of epochs > 0")
    if isinstance(value, Fraction):
        frac = value
    elif isinstance(value, Integral):
        frac = Fraction(int(value))
    elif isinstance(value, Real) and math.isfinite(float(value)):
        product = float(value) * steps_per_epoch
        if not math.isfinite(product):   # beyond the float range as a number of steps
            raise ParameterError(name, value, "a float number of epochs whose steps fit in a "
                                 f"float (at most {1.7976931348623157e308 / steps_per_epoch:.4g})",
                                 "pass an int or a fractions.Fraction")
        steps = round(product)
        if abs(product - steps) > _EPOCH_TOLERANCE * max(1.0, abs(product)):
            raise ParameterError(name, value,
                                 f"a whole number of steps of {steps_per_epoch} per epoch "
                                 f"(e.g. {math.ceil(product)}/{steps_per_epoch})",
                                 "pass a fractions.Fraction or use event.with_steps(steps)")
        frac = Fraction(steps, steps_per_epoch)
    else:
        raise ParameterError(name, value, "a number of epochs > 0 (int, Fraction or float)")
    if frac <= 0:
        raise ParameterError(name, value, "a number of epochs > 0")
    if (frac * steps_per_epoch).denominator != 1:
        raise ParameterError(name, value, f"a whole number of steps of {steps_per_epoch} per "
                             "epoch", "use event.with_steps(steps)")
    return int(frac) if frac.denominator == 1 else frac


def steps_per_epoch_for_rate(name: str, sample_rate: Any) -> int:
    """The whole number ``t`` with ``sample_rate == 1 / t`` (within the relative ``1e-9`` of
    :func:`epochs_as_fraction`): how a version-0.1 history entry, or Opacus'
    ``sample_rate = 1 / len(data_loader)``, names the steps per epoch.

    Example::

        >>> steps_per_epoch_for_rate("sample_rate", 1 / 93)
        93
    """
    q = check_probability(name, sample_rate)
    inverse = 1.0 / q if q > 0 else math.inf
    t = round(inverse) if math.isfinite(inverse) else 0
    if t < 1 or abs(t * q - 1.0) > _EPOCH_TOLERANCE:
        raise ParameterError(name, sample_rate, "1/t for a whole number t of steps per epoch",
                             "describe the sampler with its event instead of a sample rate")
    return t


def _noise(name: str, value: Any) -> float:
    value = check_real(name, value)
    if value < 0:
        raise ParameterError(name, value, "a finite number >= 0 (0 means no noise: not private)")
    return value


def _flag(name: str, value: Any) -> bool:
    return check_flag(name, value)


#: the deepest nesting of events (composed in composed ...): deeper ones are refused when built
#: and when read (Python's recursion limit stopped hashing, counting the steps of and reading
#: compositions nested a few hundred deep: RecursionError)
MAX_NESTING = 100


def _nesting(event: "Event") -> int:
    """Levels of events in ``event`` (1 for a leaf), remembered on it: each event's is found
    when it is checked as a part of another, from its parts' (already remembered)."""
    found = event.__dict__.get("_nesting")
    if found is None:
        values = [getattr(event, f.name) for f in dataclasses.fields(event)]
        parts = [v for value in values for v in (value if isinstance(value, tuple) else (value,))
                 if isinstance(v, Event)]
        found = 1 + max((_nesting(part) for part in parts), default=0)
        object.__setattr__(event, "_nesting", found)
    return found


def _event(name: str, value: Any) -> "Event":
    if not isinstance(value, Event):
        raise ParameterError(name, type(value).__name__, "an event from dpplugins.events")
    if _nesting(value) >= MAX_NESTING:
        raise ParameterError(name, f"an event nested {_nesting(value)} deep",
                             f"an event nested at most {MAX_NESTING - 1} deep (compositions "
                             f"nest at most {MAX_NESTING} levels)",
                             "compose a flat list of events: ComposedEvent((a, b, c, ...))")
    return value


def _set(obj: Any, field: str, value: Any) -> None:
    object.__setattr__(obj, field, value)


def _encode(value: Any) -> Any:
    if isinstance(value, Event):
        return value.to_dict()
    if isinstance(value, Fraction):
        return f"{value.numerator}/{value.denominator}"
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


def _decode(value: Any, depth: int = 0) -> Any:
    if isinstance(value, dict) and "type" in value:
        return from_dict(value, _depth=depth + 1)
    if isinstance(value, list):
        return tuple(_decode(v, depth) for v in value)
    if isinstance(value, str) and "/" in value:
        num, den = (part.strip() for part in value.split("/", 1))
        # ASCII digits only ('²'.isdigit() is True and int('²') raised ValueError), and at most
        # 4000 of them (int() refuses more than 4300: ValueError)
        if (num.lstrip("-").isascii() and num.lstrip("-").isdigit() and den.isascii()
                and den.isdigit() and len(num) + len(den) <= 4000):
            if int(den) == 0:
                raise ParameterError("fraction", value, "a numerator/denominator with a "
                                     "denominator > 0")
            return Fraction(int(num), int(den))
    return value


@dataclasses.dataclass(frozen=True)
class Event:
    """Base class of all events: frozen, hashable, JSON round-trip (:meth:`to_dict`)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict ``{"type": class name, field: value, ...}``."""
        out: dict[str, Any] = {"type": type(self).__name__}
        for f in dataclasses.fields(self):
            out[f.name] = _encode(getattr(self, f.name))
        return out

    @property
    def steps(self) -> int:
        """Noisy optimizer steps this event releases (1 for a single mechanism)."""
        return 1

    def accumulate(self, accumulation: int) -> "Event":
        """The event of one optimizer step that accumulates ``accumulation`` (k) consecutive
        batches of this event before adding the noise once.  ``k = 1`` returns ``self``; the
        base class refuses every other ``k`` (it describes no batches)."""
        k = check_count("accumulation", accumulation, minimum=1)
        if k == 1:
            return self
        raise ParameterError("accumulation", k, f"1 for {type(self).__name__} (it is not a "
                             "sampled batch, so accumulating batches of it is not described)")


# -- base mechanisms ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class GaussianEvent(Event):
    """One release of ``f(D) + N(0, (noise_multiplier * Delta)^2 I)`` where ``Delta`` is the L2
    sensitivity of ``f`` (for DP-SGD: the clipping norm); ``noise_multiplier = 0`` releases
    ``f(D)`` itself (not private)."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        _set(self, "noise_multiplier", _noise("GaussianEvent.noise_multiplier",
                                              self.noise_multiplier))

    def with_noise(self, noise_multiplier: float) -> "GaussianEvent":
        return GaussianEvent(noise_multiplier)


@dataclasses.dataclass(frozen=True)
class LaplaceEvent(Event):
    """One release of ``f(D) + Lap(scale * Delta)`` per coordinate, ``Delta`` the L1 sensitivity
    of ``f``; ``scale = 0`` is not private."""

    scale: float

    def __post_init__(self) -> None:
        _set(self, "scale", _noise("LaplaceEvent.scale", self.scale))


@dataclasses.dataclass(frozen=True)
class RandomizedResponseEvent(Event):
    """k-ary randomized response on one example's value in ``num_buckets`` buckets: the true
    bucket with probability ``e^eps0 / (e^eps0 + k - 1)``, each other bucket with probability
    ``1 / (e^eps0 + k - 1)`` (Warner 1965; Kairouz, Oh, Viswanath 2016 for k > 2)."""

    epsilon0: float
    num_buckets: int = 2

    def __post_init__(self) -> None:
        _set(self, "epsilon0", check_nonnegative("RandomizedResponseEvent.epsilon0",
                                                 self.epsilon0))
        _set(self, "num_buckets", check_count("RandomizedResponseEvent.num_buckets",
                                              self.num_buckets, minimum=2))


@dataclasses.dataclass(frozen=True)
class EpsilonDeltaEvent(Event):
    """A mechanism known only to be ``(epsilon, delta)``-DP."""

    epsilon: float
    delta: float = 0.0

    def __post_init__(self) -> None:
        _set(self, "epsilon", check_nonnegative("EpsilonDeltaEvent.epsilon", self.epsilon))
        delta = check_real("EpsilonDeltaEvent.delta", self.delta)
        if not 0.0 <= delta <= 1.0:
            raise ParameterError("EpsilonDeltaEvent.delta", delta, "in [0, 1]")
        _set(self, "delta", delta)


# -- local randomizers with exact parameters (shuffle model) ------------------------------------
# They describe what *one user* runs on its own value; only the shuffle model
# (:class:`ShuffleEvent`) gives them a meaning as a release of a dataset, so every accountant
# refuses them outside a ShuffleEvent.
def _local_epsilon(name: str, value: Any) -> float:
    return check_nonnegative(name, value)


@dataclasses.dataclass(frozen=True)
class UnaryEncodingEvent(Event):
    """Unary encoding of one user's value ``x`` in ``[num_values]``: a bit vector of length
    ``num_values`` whose bit ``x`` is 1 with probability ``a`` and every other bit is 1 with
    probability ``b``, all bits independent.

    * ``optimized=False`` -- symmetric unary encoding (SUE, basic RAPPOR: Erlingsson, Pihur,
      Korolova, CCS 2014, arXiv:1407.6981): ``a = e^(eps0/2) / (e^(eps0/2) + 1) = 1 - b``;
    * ``optimized=True`` -- optimized unary encoding (OUE: Wang, Blocki, Li, Jha, "Locally
      differentially private protocols for frequency estimation", USENIX Security 2017,
      arXiv:1705.04421, Sec. 4.4): ``a = 1/2``, ``b = 1 / (e^eps0 + 1)``.

    Both are exactly ``epsilon0``-LDP: ``a (1 - b) / ((1 - a) b) = e^epsilon0``.  The names
    ``"sue"`` / ``"oue"`` of :data:`dpplugins.amplification.shuffle_model_families.FAMILIES`.
    """

    epsilon0: float
    num_values: int
    optimized: bool = False

    def __post_init__(self) -> None:
        _set(self, "epsilon0", _local_epsilon("UnaryEncodingEvent.epsilon0", self.epsilon0))
        _set(self, "num_values", check_count("UnaryEncodingEvent.num_values", self.num_values,
                                             minimum=2))
        _set(self, "optimized", _flag("UnaryEncodingEvent.optimized", self.optimized))


@dataclasses.dataclass(frozen=True)
class SubsetSelectionEvent(Event):
    """k-subset selection on one user's value ``x`` in ``[num_values]``: report a subset ``S`` of
    ``[num_values]`` with ``|S| = subset_size`` (k), with probability proportional to
    ``e^epsilon0`` if ``x in S`` and to 1 otherwise (Ye, Barg, "Optimal schemes for discrete
    distribution estimation under locally differential privacy", IEEE T-IT 2018,
    arXiv:1702.00610; Wang, Wu, Li, Jha, Nguyen, arXiv:1602.07387, 2016).  Exactly
    ``epsilon0``-LDP; ``subset_size = 1`` is ``num_values``-ary randomized response (described
    here as that subset selection: use :class:`RandomizedResponseEvent` for k-RR's own bounds).
    The name ``"subset"`` of the families module."""

    epsilon0: float
    num_values: int
    subset_size: int

    def __post_init__(self) -> None:
        name = "SubsetSelectionEvent"
        _set(self, "epsilon0", _local_epsilon(f"{name}.epsilon0", self.epsilon0))
        d = check_count(f"{name}.num_values", self.num_values, minimum=2)
        k = check_count(f"{name}.subset_size", self.subset_size, minimum=1)
        if k >= d:
            raise ParameterError(f"{name}.subset_size", k, f"in [1, num_values - 1] = [1, {d - 1}]")
        _set(self, "num_values", d)
        _set(self, "subset_size", k)


@dataclasses.dataclass(frozen=True)
class LocalHashingEvent(Event):
    """Optimized local hashing (OLH: Wang, Blocki, Li, Jha, USENIX Security 2017,
    arXiv:1705.04421, Sec. 4.4) of one user's value ``x``: the user draws a hash function ``h``
    into ``[num_buckets]`` (g) independently of everyone else and reports ``(h, y)`` with ``y``
    the g-ary randomized response of ``h(x)``: ``y = h(x)`` with probability
    ``e^epsilon0 / (e^epsilon0 + g - 1)``, every other bucket with probability
    ``1 / (e^epsilon0 + g - 1)``.  Exactly ``epsilon0``-LDP whatever the hash family.

    The hash family is assumed **3-wise independent** (for any three distinct values their
    buckets are independent and uniform; a uniformly random function qualifies): the shuffle
    bounds' total variation needs pairwise independence, their lower-bound dataset with the
    other users at a third value needs 3-wise (``shuffle_model_families.local_hashing``).  Wang
    et al.'s OLH uses ``g = round(e^epsilon0 + 1)``; any ``g >= 2`` is described.  The name
    ``"olh"`` of the families module."""

    epsilon0: float
    num_buckets: int

    def __post_init__(self) -> None:
        _set(self, "epsilon0", _local_epsilon("LocalHashingEvent.epsilon0", self.epsilon0))
        _set(self, "num_buckets", check_count("LocalHashingEvent.num_buckets", self.num_buckets,
                                              minimum=2))


@dataclasses.dataclass(frozen=True)
class BoundedLaplaceEvent(Event):
    """The Laplace mechanism as a local randomizer on one user's value ``x`` in ``[0, 1]``:
    report ``x + Lap(1 / epsilon0)`` (Dwork, McSherry, Nissim, Smith, TCC 2006); inputs differ by
    at most 1, so it is exactly ``epsilon0``-LDP.  The name ``"laplace"`` of the families module.

    Not :class:`LaplaceEvent`: that event is a central release ``f(D) + Lap(scale * Delta)`` of a
    dataset's statistic with ``Delta`` its *add/remove* L1 sensitivity, which accountants
    interpret (e.g. ``"pld"`` doubles the sensitivity for replace-one), and it carries a scale,
    not a local privacy level.  This event fixes the input range ``[0, 1]`` (sensitivity 1 between
    any two users' values) and is meaningful only inside a :class:`ShuffleEvent`; a new class
    keeps one meaning per class."""

    epsilon0: float

    def __post_init__(self) -> None:
        _set(self, "epsilon0", check_positive("BoundedLaplaceEvent.epsilon0", self.epsilon0))

    @property
    def laplace_scale(self) -> float:
        """The Laplace scale ``1 / epsilon0`` of the report."""
        return 1.0 / self.epsilon0


#: local randomizers with exact parameters (accounted only inside a :class:`ShuffleEvent`)
LOCAL_RANDOMIZER_EVENTS = (UnaryEncodingEvent, SubsetSelectionEvent, LocalHashingEvent,
                           BoundedLaplaceEvent)


@dataclasses.dataclass(frozen=True)
class PersonalizedRandomizedResponseEvent(Event):
    """k-ary randomized response (``num_buckets`` values) where each group of users runs its own
    local epsilon (personalized LDP): ``groups = ((epsilon0, num_users), ...)``; a user of a
    group reports its value with probability ``e^epsilon0 / (e^epsilon0 + k - 1)`` and each other
    value with ``1 / (e^epsilon0 + k - 1)``.  Meaningful only inside a :class:`ShuffleEvent`
    whose ``num_users`` is the groups' total (the shuffle-model bounds:
    :mod:`dpplugins.amplification.shuffle_model_heterogeneous`).

    Example::

        >>> ShuffleEvent(300, PersonalizedRandomizedResponseEvent(((1.0, 100), (4.0, 200)))).num_users
        300
    """

    groups: tuple
    num_buckets: int = 2

    def __post_init__(self) -> None:
        name = "PersonalizedRandomizedResponseEvent"
        if isinstance(self.groups, (str, bytes, Event)) or not hasattr(self.groups, "__iter__"):
            raise ParameterError(f"{name}.groups", self.groups,
                                 "a sequence of (epsilon0, num_users) pairs")
        groups = []
        for i, item in enumerate(self.groups):
            if (isinstance(item, (str, bytes, dict)) or not hasattr(item, "__len__")
                    or len(item) != 2):   # (a dict of two keys raised KeyError 0)
                raise ParameterError(f"{name}.groups[{i}]", item, "an (epsilon0, num_users) pair")
            groups.append((_local_epsilon(f"{name}.groups[{i}].epsilon0", item[0]),
                           check_count(f"{name}.groups[{i}].num_users", item[1], minimum=1)))
        if not groups:
            raise ParameterError(f"{name}.groups", self.groups, "at least one group")
        _set(self, "groups", tuple(groups))
        _set(self, "num_buckets", check_count(f"{name}.num_buckets", self.num_buckets,
                                              minimum=2))

    @property
    def num_users(self) -> int:
        """The users of all groups."""
        return sum(n for _, n in self.groups)


# -- one sampled step ----------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PoissonSampledEvent(Event):
    """One step on a Poisson subsample: every example is in the batch independently with
    probability ``sample_rate``, then ``event`` runs on the batch (an empty batch too: the step
    is always released).  ``sample_rate = 0`` releases nothing that depends on the data."""

    sample_rate: float
    event: Event

    def __post_init__(self) -> None:
        _set(self, "sample_rate", check_probability("PoissonSampledEvent.sample_rate",
                                                    self.sample_rate, allow_zero=True))
        _event("PoissonSampledEvent.event", self.event)

    def accumulate(self, accumulation: int) -> Event:
        """``k`` Poisson batches summed with one Gaussian noise draw: the law of the sum of ``k``
        independent steps with noise multiplier ``sigma / sqrt(k)`` each, so a post-processing of
        their composition (Dwork & Roth 2014, Prop. 2.1, Thm 3.16); the noise is rounded down by
        one ulp.  Only Gaussian inner events."""
        k = check_count("accumulation", accumulation, minimum=1)
        if k == 1:
            return self
        return SelfComposedEvent(PoissonSampledEvent(self.sample_rate,
                                                     _split_gaussian(self.event, k)), k)


def _split_gaussian(event: Event, k: int) -> GaussianEvent:
    if not isinstance(event, GaussianEvent):
        raise ParameterError("accumulation", k, f"1 for batches of a {type(event).__name__} "
                             "(only Gaussian noise on the summed batches splits into k steps)")
    sigma = event.noise_multiplier
    return GaussianEvent(math.nextafter(sigma / math.sqrt(k), 0.0) if sigma > 0 else 0.0)


@dataclasses.dataclass(frozen=True)
class FixedBatchEvent(Event):
    """One step on a batch of exactly ``batch_size`` examples drawn uniformly without
    replacement from the ``dataset_size`` examples, then ``event`` on the batch."""

    dataset_size: int
    batch_size: int
    event: Event

    def __post_init__(self) -> None:
        n = check_count("FixedBatchEvent.dataset_size", self.dataset_size, minimum=1)
        b = check_count("FixedBatchEvent.batch_size", self.batch_size, minimum=1)
        if b > n:
            raise ParameterError("FixedBatchEvent.batch_size", b, f"<= dataset_size={n}")
        _set(self, "dataset_size", n)
        _set(self, "batch_size", b)
        _event("FixedBatchEvent.event", self.event)

    @property
    def sample_rate(self) -> float:
        return self.batch_size / self.dataset_size

    def accumulate(self, accumulation: int) -> Event:
        """As for :meth:`PoissonSampledEvent.accumulate`: ``k`` independent batches with one
        Gaussian draw are a post-processing of ``k`` steps with ``sigma / sqrt(k)``."""
        k = check_count("accumulation", accumulation, minimum=1)
        if k == 1:
            return self
        return SelfComposedEvent(FixedBatchEvent(self.dataset_size, self.batch_size,
                                                 _split_gaussian(self.event, k)), k)


# -- protocols over passes -----------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ProtocolEvent(Event):
    """A sampler run over passes (epochs).  Subclasses define ``steps_per_epoch``, the number of
    passes in the field named by ``_passes_field`` and :meth:`protocol_key` (what must be equal
    for two events to be steps of the same run, see the module docstring)."""

    _passes_field: ClassVar[str] = "epochs"
    # subclasses define ``steps_per_epoch`` (a field or a property)

    @property
    def passes(self) -> Fraction | int:
        return getattr(self, self._passes_field)

    @property
    def steps(self) -> int:
        return int(self.passes * self.steps_per_epoch)

    def protocol_key(self) -> tuple:
        """Every field except the number of passes and the noise of the steps."""
        return (type(self).__name__,) + tuple(
            getattr(self, f.name) for f in dataclasses.fields(self)
            if f.name not in (self._passes_field, "event"))

    def with_steps(self, steps: int) -> "ProtocolEvent":
        """The same protocol run for ``steps`` steps (``steps / steps_per_epoch`` passes)."""
        steps = check_count("steps", steps, minimum=1)
        return dataclasses.replace(self, **{self._passes_field:
                                            _fraction(steps, self.steps_per_epoch)})

    def with_event(self, event: Event) -> "ProtocolEvent":
        """The same protocol with another per-step mechanism (e.g. another noise multiplier)."""
        return dataclasses.replace(self, event=event)

    def _check_passes(self) -> None:
        name = f"{type(self).__name__}.{self._passes_field}"
        _set(self, self._passes_field, epochs_as_fraction(name, self.passes,
                                                          self.steps_per_epoch))


def _fraction(steps: int, per: int) -> Fraction | int:
    frac = Fraction(steps, per)
    return int(frac) if frac.denominator == 1 else frac


@dataclasses.dataclass(frozen=True)
class ShuffledEpochsEvent(ProtocolEvent):
    """Shuffled epochs: every epoch draws a fresh uniformly random permutation of the
    ``dataset_size`` examples and cuts it into consecutive batches of ``batch_size`` (the last
    one shorter, or dropped with ``drop_last``); each step runs ``event`` (DP-SGD: the Gaussian
    on the sum of the batch's clipped gradients) and every step is released.  Steps per epoch:
    ``ceil(n / b)`` (``floor`` with ``drop_last``).  This is Keras ``fit`` and Opacus with
    ``poisson_sampling=False``; a fixed (unshuffled) order is a special case for which every
    shuffled-epochs *upper* bound that holds for each permutation also holds."""

    dataset_size: int
    batch_size: int
    epochs: Any
    event: Event
    drop_last: bool = False

    def __post_init__(self) -> None:
        n = check_count("ShuffledEpochsEvent.dataset_size", self.dataset_size, minimum=1)
        b = check_count("ShuffledEpochsEvent.batch_size", self.batch_size, minimum=1)
        _set(self, "drop_last", _flag("ShuffledEpochsEvent.drop_last", self.drop_last))
        if b > n and self.drop_last:
            raise ParameterError("ShuffledEpochsEvent.batch_size", b,
                                 f"<= dataset_size={n} with drop_last=True")
        _set(self, "dataset_size", n)
        _set(self, "batch_size", min(b, n) if not self.drop_last else b)
        _event("ShuffledEpochsEvent.event", self.event)
        self._check_passes()

    @property
    def steps_per_epoch(self) -> int:
        n, b = self.dataset_size, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def accumulate(self, accumulation: int) -> Event:
        """``k`` consecutive batches of ``b`` are consecutive entries of the permutation, i.e.
        shuffled epochs with batches of ``k b``: ``ceil(n / (k b)) = ceil(ceil(n / b) / k)``
        logical steps per epoch (nested ceilings: Graham, Knuth, Patashnik, *Concrete
        Mathematics*, eq. (3.11)), the last one taking the remaining batches.  With
        ``drop_last`` this holds only when ``k`` divides ``floor(n / b)``."""
        k = check_count("accumulation", accumulation, minimum=1)
        if k == 1:
            return self
        t = self.steps_per_epoch
        if self.drop_last and t % k:
            raise ParameterError(
                "accumulation", k, f"a divisor of the {t} batches per epoch with drop_last=True "
                "(a shorter last accumulated step is not a shuffled-epochs pass of larger "
                "batches)", "use drop_last=False or such a k")
        logical_t = -(-t // k)
        passes = self.passes
        if (passes * logical_t).denominator != 1:
            steps = math.ceil(passes * logical_t)
            passes = _fraction(steps, logical_t)
        return ShuffledEpochsEvent(self.dataset_size, k * self.batch_size, passes, self.event,
                                   self.drop_last)


@dataclasses.dataclass(frozen=True)
class RandomAllocationEvent(ProtocolEvent):
    """Random allocation (balls and bins; Chua et al. 2025, Feldman & Shenfeld 2025): in every
    epoch of ``steps_per_epoch`` (t) steps each example independently takes part with
    probability ``checkin_probability`` and then in ``participations`` (k) distinct uniformly
    random steps of the t; every step runs ``event`` on the sum over its examples and is released
    (a step without examples releases the noise alone).  The sampler is
    :func:`dpplugins.samplers.balls_and_bins` (``RandomCheckIn(n, t, 1.0, "averaged")``; with
    ``participations`` or ``checkin_probability`` given, a
    :class:`dpplugins.samplers.allocation.RandomAllocation`).  The ``balls_and_bins`` accountant
    accounts every ``k`` and ``p`` with Gaussian noise, :class:`LaplaceEvent` or
    :class:`RandomizedResponseEvent` steps (the latter two:
    :mod:`dpplugins.amplification.allocation_mechanisms`)."""

    steps_per_epoch: int
    epochs: Any
    event: Event
    participations: int = 1
    checkin_probability: float = 1.0

    def __post_init__(self) -> None:
        t = check_count("RandomAllocationEvent.steps_per_epoch", self.steps_per_epoch,
                        minimum=1)
        _set(self, "steps_per_epoch", t)
        k = check_count("RandomAllocationEvent.participations", self.participations, minimum=1)
        if k > t:
            raise ParameterError("RandomAllocationEvent.participations", k,
                                 f"<= steps_per_epoch={t} (distinct steps)")
        _set(self, "participations", k)
        _set(self, "checkin_probability", check_probability(
            "RandomAllocationEvent.checkin_probability", self.checkin_probability))
        _event("RandomAllocationEvent.event", self.event)
        self._check_passes()

    def accumulate(self, accumulation: int) -> Event:
        """Merging ``k`` consecutive steps (``k`` dividing t): an example's merged step
        ``floor(step / k)`` is uniform on ``t / k`` steps, so one participation becomes random
        allocation into ``t / k`` steps with the same check-in probability.  Refused for several
        participations (two of them can fall into one merged step: sensitivity 2) and for ``k``
        not dividing ``t`` (the last merged step would be less likely)."""
        k = check_count("accumulation", accumulation, minimum=1)
        if k == 1:
            return self
        t = self.steps_per_epoch
        if self.participations != 1:
            raise ParameterError("accumulation", k, f"1 for participations="
                                 f"{self.participations} (two participations can fall into one "
                                 "merged step)")
        if t % k:
            raise ParameterError("accumulation", k, f"a divisor of steps_per_epoch={t} (the last "
                                 "merged step would be less likely than the others)",
                                 "choose the steps per epoch as a multiple of the accumulation")
        passes = self.passes
        logical = t // k
        if (passes * logical).denominator != 1:
            passes = _fraction(math.ceil(passes * logical), logical)
        return RandomAllocationEvent(logical, passes, self.event, 1, self.checkin_probability)


@dataclasses.dataclass(frozen=True)
class RandomCheckInEvent(ProtocolEvent):
    """Random check-ins (Balle, Kairouz, McMahan, Thakkar, Thakurta 2020): ``passes`` runs of
    the protocol on ``dataset_size`` examples (clients), every step running ``event`` on the
    step's update.

    * ``variant="fixed"`` (A_fix, Alg. 1, Thm 3.2): every example checks in with probability
      ``checkin_probability`` into a uniform one of ``num_slots`` slots; one checked-in example
      per slot is used; an empty slot releases a dummy (noise-only) update.
    * ``variant="averaged"`` (A_avg, Thm 4.1): every example checks in (probability 1); all
      examples of a slot are used, at most ``max_batch_size`` (a uniformly random subset if
      more); with central noise the noise is added once to the batch sum unless
      ``per_example_noise``.  An empty slot may be skipped.
    * ``variant="sliding"`` (A_sldw, Thm 4.3): example ``j`` checks into a uniform slot of
      ``{j, ..., j + window - 1}``; a pass runs ``dataset_size - window + 1`` slots, one example
      each, an empty slot a dummy update.
    """

    _passes_field: ClassVar[str] = "passes"
    dataset_size: int
    event: Event
    variant: str = "fixed"
    num_slots: int | None = None
    window: int | None = None
    checkin_probability: float = 1.0
    max_batch_size: int | None = None
    per_example_noise: bool = False
    passes: Any = 1

    def __post_init__(self) -> None:
        name = "RandomCheckInEvent"
        n = check_count(f"{name}.dataset_size", self.dataset_size, minimum=1)
        _set(self, "dataset_size", n)
        _event(f"{name}.event", self.event)
        variant = check_choice(f"{name}.variant", self.variant, CHECKIN_VARIANTS)
        if variant == "sliding":
            if self.window is None or self.num_slots is not None:
                raise ParameterError(f"{name}.window", self.window, "an integer in [1, "
                                     "dataset_size] (and num_slots=None) for variant='sliding'")
            w = check_count(f"{name}.window", self.window, minimum=1)
            if w > n:
                raise ParameterError(f"{name}.window", w, f"<= dataset_size={n}")
            _set(self, "window", w)
        else:
            if self.num_slots is None or self.window is not None:
                raise ParameterError(f"{name}.num_slots", self.num_slots, "an integer >= 1 (and "
                                     f"window=None) for variant={variant!r}")
            _set(self, "num_slots", check_count(f"{name}.num_slots", self.num_slots, minimum=1))
        _set(self, "checkin_probability", check_probability(f"{name}.checkin_probability",
                                                            self.checkin_probability))
        if self.max_batch_size is not None:
            _set(self, "max_batch_size", check_count(f"{name}.max_batch_size",
                                                     self.max_batch_size, minimum=1))
        _set(self, "per_example_noise", _flag(f"{name}.per_example_noise",
                                              self.per_example_noise))
        self._check_passes()

    @property
    def steps_per_epoch(self) -> int:
        if self.variant == "sliding":
            return self.dataset_size - self.window + 1
        return self.num_slots

    def accumulate(self, accumulation: int) -> Event:
        """With ``checkin_probability = 1`` and ``k`` dividing ``num_slots``, an example's merged
        slot is uniform on ``num_slots / k`` slots and a merged step releases one noisy sum over
        at most ``k * max_batch_size`` examples of it: a post-processing of the averaged
        protocol (Balle et al. 2020, Thm 4.1) with ``num_slots / k`` slots.  Refused for
        ``checkin_probability < 1``, the sliding window and ``k`` not dividing the slots."""
        k = check_count("accumulation", accumulation, minimum=1)
        if k == 1:
            return self
        if self.variant == "sliding":
            raise ParameterError("accumulation", k, "1 for the sliding-window protocol (Thm 4.3 "
                                 "covers one example per step; merged slots are not that "
                                 "protocol)")
        if self.checkin_probability != 1.0:
            raise ParameterError("accumulation", k, f"1 for checkin_probability="
                                 f"{self.checkin_probability:g} (a merged step holds up to {k} "
                                 "examples, which Thm 3.2 does not cover, and Thm 4.1 needs "
                                 "checkin_probability = 1)")
        if self.num_slots % k:
            raise ParameterError("accumulation", k, f"a divisor of num_slots={self.num_slots} "
                                 "(the last merged slot would be less likely than the others)")
        cap = 1 if self.variant == "fixed" else (self.max_batch_size or self.dataset_size)
        logical = self.num_slots // k
        passes = self.passes
        if (passes * logical).denominator != 1:
            passes = _fraction(math.ceil(passes * logical), logical)
        return RandomCheckInEvent(self.dataset_size, self.event, "averaged", logical, None, 1.0,
                                  min(k * cap, self.dataset_size), self.per_example_noise,
                                  passes)


@dataclasses.dataclass(frozen=True)
class SwapEvent(ProtocolEvent):
    """Batch size 1 on ``dataset_size`` examples, one local randomizer (``event``) per example
    and step, every epoch in a fresh uniformly random order (Balle et al. 2020, A_sl, whose
    Thm A.5, amplification by swapping, bounds it).  The ``swap`` accountant accounts a
    Gaussian ``event`` (clipped gradients, sensitivity 2 per step: the theorem's bound where
    it beats the Gaussian step, i.e. many examples and a small per-step epsilon, and the
    Gaussian step otherwise); other randomizers are described but no accountant takes them."""

    dataset_size: int
    epochs: Any
    event: Event

    def __post_init__(self) -> None:
        _set(self, "dataset_size", check_count("SwapEvent.dataset_size", self.dataset_size,
                                               minimum=1))
        _event("SwapEvent.event", self.event)
        self._check_passes()

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset_size


@dataclasses.dataclass(frozen=True)
class PNSGDEvent(ProtocolEvent):
    """Projected noisy SGD with hidden intermediate iterates (Feldman et al. 2018; Asoodeh et
    al. 2020; Sordello, Bu, Dong 2021): ``epochs`` passes of ``dataset_size`` steps, one record
    per step, ``w_t = Pi_K(w_{t-1} - learning_rate (g_t + noise))`` with ``|g_t| <= lipschitz``,
    ``Pi_K`` the projection onto a convex set of diameter ``diameter`` and the gradient step
    ``contraction``-Lipschitz.  ``event`` is ``GaussianEvent(noise_multiplier)`` (noise
    ``N(0, (noise_multiplier * lipschitz)^2 I)``) or ``LaplaceEvent(scale)`` (1-D, Laplace scale
    ``scale * lipschitz``).  ``variant``: ``"shuffled"`` (fresh permutation per pass, only the
    end of a pass released), ``"randomly_stopped"`` or ``"online"``.  ``smoothness`` (optional)
    lets the accountant check ``learning_rate <= 2 / smoothness``."""

    dataset_size: int
    epochs: Any
    event: Event
    lipschitz: float = 1.0
    diameter: float = 1.0
    learning_rate: float = 1.0
    variant: str = "shuffled"
    contraction: float = 1.0
    smoothness: float | None = None

    def __post_init__(self) -> None:
        name = "PNSGDEvent"
        _set(self, "dataset_size", check_count(f"{name}.dataset_size", self.dataset_size,
                                               minimum=1))
        _event(f"{name}.event", self.event)
        for field in ("lipschitz", "diameter", "learning_rate", "contraction"):
            _set(self, field, check_positive(f"{name}.{field}", getattr(self, field)))
        if self.smoothness is not None:
            _set(self, "smoothness", check_positive(f"{name}.smoothness", self.smoothness))
        check_choice(f"{name}.variant", self.variant, PNSGD_VARIANTS)
        self._check_passes()

    @property
    def steps_per_epoch(self) -> int:
        return self.dataset_size


@dataclasses.dataclass(frozen=True)
class ShuffleEvent(Event):
    """The shuffle model: each of ``num_users`` users applies the same local randomizer
    ``randomizer`` (e.g. :class:`RandomizedResponseEvent`, :class:`EpsilonDeltaEvent`: one
    eps0-DP randomizer, a function of the user's value only) to its own value and the server
    sees the multiset (a uniformly random permutation) of the reports."""

    num_users: int
    randomizer: Event

    def __post_init__(self) -> None:
        _set(self, "num_users", check_count("ShuffleEvent.num_users", self.num_users, minimum=1))
        _event("ShuffleEvent.randomizer", self.randomizer)
        if isinstance(self.randomizer, PersonalizedRandomizedResponseEvent) \
                and self.num_users != self.randomizer.num_users:
            raise ParameterError("ShuffleEvent.num_users", self.num_users,
                                 f"{self.randomizer.num_users:,}, the users of the randomizer's "
                                 "groups")


# -- structure -----------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ComposedEvent(Event):
    """The events in order, each adaptively chosen given the earlier outputs."""

    events: tuple

    def __post_init__(self) -> None:
        if isinstance(self.events, Event) or not hasattr(self.events, "__iter__"):
            raise ParameterError("ComposedEvent.events", type(self.events).__name__,
                                 "a sequence of events")
        events = tuple(self.events)
        for i, event in enumerate(events):
            _event(f"ComposedEvent.events[{i}]", event)
        _set(self, "events", events)

    @property
    def steps(self) -> int:
        return sum(e.steps for e in self.events)


@dataclasses.dataclass(frozen=True)
class SelfComposedEvent(Event):
    """``event`` composed ``count`` times (adaptively)."""

    event: Event
    count: int

    def __post_init__(self) -> None:
        _event("SelfComposedEvent.event", self.event)
        _set(self, "count", check_count("SelfComposedEvent.count", self.count, minimum=0))

    @property
    def steps(self) -> int:
        return self.count * self.event.steps


@dataclasses.dataclass(frozen=True)
class NoOpEvent(Event):
    """Nothing that depends on the data was released."""

    @property
    def steps(self) -> int:
        return 0


@dataclasses.dataclass(frozen=True)
class NonPrivateEvent(Event):
    """Something was released without any privacy guarantee (epsilon is infinite)."""


@dataclasses.dataclass(frozen=True)
class UnsupportedEvent(Event):
    """A mechanism this library cannot describe (e.g. a data loader whose sampling is unknown);
    ``reason`` says what it is.  Every accountant refuses it."""

    reason: str = "unknown mechanism"

    def __post_init__(self) -> None:
        if not isinstance(self.reason, str):
            raise ParameterError("reason", self.reason, "a string saying what the mechanism is")


EVENT_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    GaussianEvent, LaplaceEvent, RandomizedResponseEvent, EpsilonDeltaEvent, PoissonSampledEvent,
    FixedBatchEvent, ShuffledEpochsEvent, RandomAllocationEvent, RandomCheckInEvent, SwapEvent,
    PNSGDEvent, ShuffleEvent, ComposedEvent, SelfComposedEvent, NoOpEvent, NonPrivateEvent,
    UnsupportedEvent, PersonalizedRandomizedResponseEvent) + LOCAL_RANDOMIZER_EVENTS}


def from_dict(data: dict[str, Any], *, _depth: int = 0) -> Event:
    """The event :meth:`Event.to_dict` produced (ParameterError for anything else)."""
    if _depth > MAX_NESTING:   # (RecursionError from a depth of about 200)
        raise ParameterError("data", f"events nested more than {MAX_NESTING} deep",
                             f"events nested at most {MAX_NESTING} deep")
    kind = data.get("type") if isinstance(data, dict) else None
    if not isinstance(kind, str) or kind not in EVENT_TYPES:
        raise ParameterError("data", data if not isinstance(data, dict) else kind,
                             "a dict from Event.to_dict() with 'type' one of "
                             + ", ".join(EVENT_TYPES))
    cls = EVENT_TYPES[kind]
    fields = dataclasses.fields(cls)
    names = {f.name for f in fields}
    unknown = set(data) - names - {"type"}
    if unknown:
        raise ParameterError(f"{kind} fields", sorted(unknown, key=repr),
                             "fields of " + kind + ": " + ", ".join(sorted(names)))
    required = {f.name for f in fields if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}
    missing = required - set(data)
    if missing:
        raise ParameterError(f"{kind} fields", sorted(missing),
                             "present: " + kind + " needs " + ", ".join(sorted(required)))
    # a text field keeps its text ("1/2" is a Fraction only where a number is meant)
    text = {f.name for f in fields if f.type in ("str", str)}
    return cls(**{k: v if k in text else _decode(v, _depth) for k, v in data.items()
                  if k != "type"})


#: repetitions, in all (nested ones multiply), of compositions that contain protocol events
MAX_REPEATED_COMPOSITIONS = 100_000


def leaves(event: Event, count: int = 1, *, _repeats: int = 1):
    """Yield ``(leaf_event, count)`` in release order, expanding :class:`ComposedEvent` and
    :class:`SelfComposedEvent` (zero counts and no-ops are skipped).  A self-composition of a
    composition is repeated in order when it contains protocol events (their steps continue
    across events, so the order matters); otherwise the counts multiply.  The repetitions are
    limited to :data:`MAX_REPEATED_COMPOSITIONS` in all, nested ones multiplied (three nested
    levels of 99,999 each were within the limit level by level and never finished)."""
    if count == 0 or isinstance(event, NoOpEvent):
        return
    if isinstance(event, ComposedEvent):
        for inner in event.events:
            yield from leaves(inner, count, _repeats=_repeats)
    elif isinstance(event, SelfComposedEvent):
        inner = event.event
        if isinstance(inner, ComposedEvent) and _has_protocol(inner):
            total = count * event.count
            if total * _repeats > MAX_REPEATED_COMPOSITIONS:
                raise ParameterError("SelfComposedEvent.count", event.count,
                                     f"at most {MAX_REPEATED_COMPOSITIONS} repetitions in all "
                                     "(nested ones multiplied) of compositions that contain "
                                     "protocol events", "compose the protocol events with "
                                     "more epochs instead")
            for _ in range(total):
                yield from leaves(inner, 1, _repeats=total * _repeats)
        else:
            yield from leaves(inner, count * event.count, _repeats=_repeats)
    else:
        yield event, count


def _has_protocol(event: Event) -> bool:
    if isinstance(event, ProtocolEvent):
        return True
    if isinstance(event, ComposedEvent):
        return any(_has_protocol(e) for e in event.events)
    if isinstance(event, SelfComposedEvent):
        return _has_protocol(event.event)
    return False
