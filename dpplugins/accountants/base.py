"""The accountant contract shared by every accountant.

An accountant keeps a ledger of :mod:`dpplugins.events` -- what the training released -- and
interprets it:

* ``supports(event) -> bool`` and ``compose(event, count=1) -> self``.  An event the accountant
  cannot account for raises :class:`UnsupportedEventError` (a ``ParameterError``) that names the
  accountants that can; the ledger is left untouched.  Refusal is the default: a subclass
  accepts exactly the leaf events its ``_supports_leaf`` recognises.
* ``step(noise_multiplier=, sample_rate=, count=)`` is sugar: it composes
  :meth:`Accountant.step_event`, which is Opacus' ``PoissonSampledEvent(sample_rate,
  GaussianEvent(noise_multiplier))`` unless the accountant was created with the protocol options
  of version 0.1 (then one step of that protocol, the meaning a 0.1 history entry had; a 0.1
  state dict loads with that meaning).
* ``history``: the composed events (run-length: repeats become ``SelfComposedEvent``);
  ``len(accountant)`` (or ``accountant.steps``, which has no size limit) is the number of
  optimizer steps.  A query on a history of more than ``MAX_COMPOSITIONS = 2**53``
  compositions (steps, or passes of a protocol) raises :class:`NumericalError`: the engines
  use counts as floats.
* ``get_epsilon(delta)`` (a certified upper bound unless ``bound_type`` says estimate),
  ``get_epsilon_bounds(delta)``, ``get_delta(epsilon)``, ``get_delta_bounds(epsilon)``.  A
  history with a non-private release answers ``inf`` (delta 1).  Reading never changes the
  ledger; results are cached per ledger.
* ``state_dict()`` / ``load_state_dict()``: options, events and library version.

Subclasses implement ``_supports_leaf(event)`` and ``_epsilon_bounds(history, delta)`` /
``_delta_bounds(history, epsilon)`` as functions of the (non-empty, private) tuple of events.
"""

from __future__ import annotations

import contextlib
import math
import threading
import warnings
from typing import Any, Callable, ClassVar, Iterable

from dpplugins.errors import (NumericalError, ParameterError, check_choice, check_count,
                              check_nonnegative, check_probability, check_real, integer_text)
from dpplugins.events import (Event, GaussianEvent, NonPrivateEvent, PoissonSampledEvent,
                              SelfComposedEvent, UnsupportedEvent, from_dict, leaves)
from dpplugins.numerics import epsilon_lower_from_larger_delta
from dpplugins.pld import AccuracyWarning, Bounds, certified_bounds

__all__ = ["Accountant", "UnsupportedEventError", "validate_history", "is_non_private",
           "private_leaves", "leaves_to_check", "MAX_COMPOSITIONS", "compositions"]

NEIGHBOURING = ("add_remove", "replace_one")
#: the most compositions (steps, or passes of a protocol) a query can account for, ``2**53``:
#: the composition engines use counts as floats (FFT powers, closed forms), exact up to 2**53
MAX_COMPOSITIONS = 2**53


class UnsupportedEventError(ParameterError):
    """An accountant was given an event it cannot account for.

    ``event`` is the offending (leaf) event, ``accountant`` the refusing accountant's name,
    ``supported_by`` the registry names of the accountants that support the whole event with
    their default options; the message also names those that support it with other options
    (:func:`~dpplugins.accountants.registry.describe_supporting`).
    """

    def __init__(self, event: Event, accountant: str, reason: str = "",
                 supported_by: Iterable[str] | None = None, *, ledger: bool = False) -> None:
        self.event = event
        self.accountant = accountant
        self.reason = reason
        #: refused for what the ledger already holds, not for the event itself
        self.ledger = ledger
        described = ""
        if supported_by is None:
            from dpplugins.accountants.registry import describe_supporting, supporting
            supported_by = supporting(event)
            described = describe_supporting(event)   # with options where defaults do not do
        self.supported_by = tuple(supported_by)
        valid = f"an event the {accountant!r} accountant supports"
        if reason:
            valid += f" ({reason})"
        described = described or ", ".join(self.supported_by)
        hint = ("accountants that support it: " + described if described
                else "no registered accountant supports it")
        if ledger:
            # the event alone is fine here ('accountants that support it' named the refusing
            # accountant itself)
            hint = (f"{accountant!r} supports it on its own, not after the events this ledger "
                    "holds; a run's events are accounted together, so account the whole run "
                    "with one accountant that supports all of them")
        super().__init__("event", event, valid, hint)


def is_non_private(event: Event) -> bool:
    """True for a release without a guarantee: ``NonPrivateEvent`` or zero noise."""
    if isinstance(event, NonPrivateEvent):
        return True
    inner = getattr(event, "event", None)
    if isinstance(event, GaussianEvent):
        return event.noise_multiplier == 0.0
    if isinstance(event, PoissonSampledEvent):
        return event.sample_rate > 0 and isinstance(inner, Event) and is_non_private(inner)
    if isinstance(inner, Event) and hasattr(event, "protocol_key"):
        return is_non_private(inner)
    if type(event).__name__ == "FixedBatchEvent":
        return is_non_private(inner)
    return getattr(event, "scale", None) == 0.0


def _is_no_op(event: Event) -> bool:
    return isinstance(event, PoissonSampledEvent) and event.sample_rate == 0.0


def private_leaves(history) -> list[tuple[Event, int]]:
    """The leaves of ``history`` (in order) that can change the privacy loss: no-ops (including
    Poisson steps with sample rate 0) are dropped."""
    out = []
    for event in history:
        for leaf, count in leaves(event):
            if not _is_no_op(leaf):
                out.append((leaf, count))
    return out


def leaves_to_check(history, relevant: Callable[[Event], bool] | None = None
                    ) -> list[tuple[Event, int]]:
    """The private leaves of the newest event of ``history`` and the last private leaf before
    it for which ``relevant`` holds (default: any).  For a property that every relevant leaf of
    a ledger must share (one sampling scheme, one protocol), this is all a check at
    :meth:`Accountant.compose` needs to look at: every earlier leaf was checked when it was
    composed, so it shares the property with that last one.  (Checking the whole ledger at
    every compose made a run of n distinct per-step events cost O(n^2): 6,000 steps of a noise
    schedule took 54 s to record.)"""
    newest = private_leaves(history[-1:])
    for event in reversed(history[:-1]):
        earlier = [leaf for leaf in private_leaves((event,))
                   if relevant is None or relevant(leaf[0])]
        if earlier:
            return [earlier[-1]] + newest
    return newest


def compositions(history) -> int:
    """How many mechanisms the composition engines compose for ``history``: each leaf counts
    once per repetition, a protocol event (shuffled epochs, check-ins, PNSGD, ...) once per pass
    (a partial pass counts as one) -- whatever the number of steps in a pass."""
    total = 0
    for leaf, count in private_leaves(history):
        passes = getattr(leaf, "passes", None)
        total += count * (math.ceil(passes) if passes is not None else 1)
    return total


def check_query_delta(delta: Any) -> float:
    """The ``delta`` of an epsilon query: a real number in ``[0, 1)`` (ParameterError
    otherwise)."""
    delta = check_real("delta", delta)
    if not 0.0 <= delta < 1.0:
        raise ParameterError("delta", delta, "in [0, 1)")
    return delta


def check_representable(history) -> None:
    """NumericalError when ``history`` needs more than :data:`MAX_COMPOSITIONS` compositions:
    the engines would overflow or lose exactness (a query-time check, so that a ledger records
    whatever was released, and ``len`` and ``state_dict`` still work)."""
    n = compositions(history)
    if n > MAX_COMPOSITIONS:
        raise NumericalError(
            f"the history needs {integer_text(n)} compositions (steps, or passes of a protocol), "
            f"more than the {MAX_COMPOSITIONS} (2**53) the composition engines represent "
            "exactly (counts are used as floats)",
            "account for fewer steps or passes (split the run), or use more noise per step")


def validate_history(history: Iterable) -> list[tuple[float, float, int]]:
    """Check and normalise a version-0.1 run-length history of ``(noise_multiplier,
    sample_rate, steps)``; merge adjacent runs with equal parameters."""
    if history is None or isinstance(history, (str, bytes)):
        raise ParameterError("history", history, "a list of events or of (noise_multiplier, "
                             "sample_rate, steps) tuples")
    out: list[tuple[float, float, int]] = []
    for i, entry in enumerate(history):
        try:
            sigma, q, steps = entry
        except (TypeError, ValueError):
            raise ParameterError(f"history[{i}]", entry,
                                 "a (noise_multiplier, sample_rate, steps) tuple") from None
        sigma = check_nonnegative(f"history[{i}].noise_multiplier", sigma)
        q = check_probability(f"history[{i}].sample_rate", q, allow_zero=True)
        steps = check_count(f"history[{i}].steps", steps, minimum=0)
        if steps == 0:
            continue
        if out and out[-1][0] == sigma and out[-1][1] == q:
            out[-1] = (sigma, q, out[-1][2] + steps)
        else:
            out.append((sigma, q, steps))
    return out


@contextlib.contextmanager
def _float_range(accountant: str):
    """Turn an ``OverflowError`` of an engine (a size or count of the history that does not fit
    in a float, e.g. a dataset of 10**400 examples) into a :class:`NumericalError` that says so
    (the validators accept any integer size; the engines compute in floats)."""
    try:
        yield
    except OverflowError as error:
        raise NumericalError(
            f"{accountant}: a size or count of the history is beyond the floating-point range "
            f"({error})", "use dataset sizes, steps per epoch and counts below 2**53 "
            "(about 9.0e15)") from None


def _parse_version(text: Any) -> tuple[int, ...]:
    parts = []
    for piece in str(text).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():
            break
    return tuple(parts)


#: below this delta, an epsilon query whose lower bound is 0 also tries the lower bounds
#: certified at larger deltas (:meth:`Accountant._lower_from_larger_delta`); at larger deltas
#: a lower bound of 0 is not the error terms' doing, and three more queries would cost time for
#: nothing
FAR_TAIL_DELTA = 1e-6


class Accountant:
    """Base class: ledger of events, validation, caching and state; the mathematics lives in
    subclasses (module docstring).

    Attributes
    ----------
    name : registry name (``dpplugins.accountants.create(name)``).
    theorem : the result the accountant implements, with its source.
    bound_type : ``"certified upper bound"`` or ``"estimate"``.
    neighbouring : ``"add_remove"`` or ``"replace_one"``.
    """

    name: ClassVar[str] = ""
    theorem: ClassVar[str] = ""
    bound_type: ClassVar[str] = "certified upper bound"
    #: False for accountants whose lower bound is always 0 (no lower bound is known): the
    #: far-tail fallback of :meth:`get_epsilon_bounds` is then not tried
    computes_lower_bounds: ClassVar[bool] = True
    #: other option sets under which the accountant may support events its defaults refuse
    #: (e.g. ``({"neighbouring": "replace_one"},)``): the registry tries them to name the
    #: accountant, with those options, in refusals (``describe_supporting``)
    alternative_options: ClassVar[tuple[dict, ...]] = ()
    _option_names: ClassVar[tuple[str, ...]] = ("neighbouring",)

    def __init__(self, *, neighbouring: str = "add_remove") -> None:
        self.neighbouring = check_choice("neighbouring", neighbouring, NEIGHBOURING)
        self._history: list[Event] = []
        self._cache: dict[tuple, Any] = {}
        self._lock = threading.RLock()

    # -- what the accountant accounts for ------------------------------------------------------
    def _supports_leaf(self, event: Event) -> bool | str:
        """Whether a leaf event (not composed, not a no-op, not non-private) is accounted for;
        a string is a refusal with its reason.  The default refuses everything."""
        return False

    def _check_leaf(self, event: Event) -> None:
        if isinstance(event, UnsupportedEvent):
            raise UnsupportedEventError(event, self.name, event.reason, ())
        if isinstance(event, NonPrivateEvent):
            return
        verdict = self._supports_leaf(event)
        if verdict is True:
            return
        raise UnsupportedEventError(event, self.name, verdict if isinstance(verdict, str)
                                    else "", ())

    def _check_history(self, history: tuple) -> None:
        """Checks across events (e.g. one protocol per ledger); raise UnsupportedEventError."""

    def _verify(self, event: Event) -> None:
        if not isinstance(event, Event):
            raise ParameterError("event", type(event).__name__, "an event from dpplugins.events")
        for leaf, _ in leaves(event):
            if not _is_no_op(leaf):
                self._check_leaf(leaf)
        try:
            self._check_history(tuple(self._history) + (event,))
        except UnsupportedEventError as error:
            if not self._history:
                raise
            try:
                self._check_history((event,))
            except UnsupportedEventError:
                raise error from None   # refused on its own too
            raise UnsupportedEventError(error.event, error.accountant, error.reason, (),
                                        ledger=True) from None

    def check(self, event: Event) -> None:
        """Raise :class:`UnsupportedEventError` -- with the reason and the registered
        accountants that support ``event`` -- unless this accountant supports it."""
        try:
            self._verify(event)
        except UnsupportedEventError as error:
            from dpplugins.accountants.registry import registered_name
            raise UnsupportedEventError(error.event, registered_name(type(self)), error.reason,
                                        () if error.ledger else None,
                                        ledger=error.ledger) from None

    def supports(self, event: Event) -> bool:
        """Whether :meth:`compose` would accept ``event`` (no exception, no side effect)."""
        try:
            self._verify(event)
        except ParameterError:
            return False
        return True

    def compose(self, event: Event, count: int = 1) -> "Accountant":
        """Record ``event`` composed ``count`` times; refuse (ledger untouched) what this
        accountant does not support.  Returns ``self``."""
        count = check_count("count", count, minimum=0)
        self.check(event)
        if count == 0:
            return self
        with self._lock:
            self._append(event, count)
        return self

    def _append(self, event: Event, count: int) -> None:
        if self._history:
            last = self._history[-1]
            base, n = (last.event, last.count) if isinstance(last, SelfComposedEvent) else (last, 1)
            if base == event:
                self._history[-1] = SelfComposedEvent(event, n + count)
                return
        self._history.append(event if count == 1 else SelfComposedEvent(event, count))

    def step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """The event of one ``step(noise_multiplier, sample_rate)``: the Poisson-subsampled
        Gaussian (Opacus' meaning); ``noise_multiplier = 0`` is a non-private step and
        ``sample_rate = 0`` a no-op."""
        sigma = check_nonnegative("noise_multiplier", noise_multiplier)
        q = check_probability("sample_rate", sample_rate, allow_zero=True)
        return PoissonSampledEvent(q, GaussianEvent(sigma))

    def _legacy_step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """What a ``(noise_multiplier, sample_rate, steps)`` entry of this accountant's own
        version-0.1 state dict meant (:meth:`load_state_dict`): :meth:`step_event`, unless the
        accountant gave ``step()`` a protocol of its own in 0.1 and refuses it now."""
        return self.step_event(noise_multiplier, sample_rate)

    def step(self, *, noise_multiplier: float, sample_rate: float, count: int = 1) -> None:
        """Record ``count`` steps: ``compose(step_event(noise_multiplier, sample_rate), count)``."""
        count = check_count("count", count, minimum=0)
        self.compose(self.step_event(noise_multiplier, sample_rate), count)

    # -- history --------------------------------------------------------------------------------
    @property
    def history(self) -> list[Event]:
        """The composed events in order (a copy).  Assigning replaces the ledger; a list of
        version-0.1 ``(noise_multiplier, sample_rate, steps)`` tuples is read with
        :meth:`step_event` (what Opacus' ``get_noise_multiplier`` assigns)."""
        return list(self._history)

    @history.setter
    def history(self, value) -> None:
        events = self._events_from(value)
        fresh = type(self).__new__(type(self))
        fresh.__dict__.update(self.__dict__)
        fresh._history = []
        for event in events:     # validate everything before touching the ledger
            fresh.compose(event)
        with self._lock:
            self._history = fresh._history

    def _events_from(self, value) -> list[Event]:
        if value is None or isinstance(value, (str, bytes, dict)):
            raise ParameterError("history", value, "a list of events or of (noise_multiplier, "
                                 "sample_rate, steps) tuples")
        value = list(value)
        if all(isinstance(v, Event) for v in value):
            return value
        if any(isinstance(v, Event) for v in value):
            raise ParameterError("history", value, "all events or all (noise_multiplier, "
                                 "sample_rate, steps) tuples, not a mix")
        return [SelfComposedEvent(self.step_event(sigma, q), steps)
                for sigma, q, steps in validate_history(value)]

    @property
    def steps(self) -> int:
        """Noisy optimizer steps recorded (a Python int of any size)."""
        return sum(event.steps for event in self._history)

    def __len__(self) -> int:
        """:attr:`steps`; Python's ``len`` is limited to ``2**63 - 1`` (OverflowError above:
        use :attr:`steps`)."""
        return self.steps

    # -- queries ------------------------------------------------------------------------------
    def _cached(self, key: tuple, compute):
        with self._lock:
            full_key = (tuple(self._history),) + key
            if full_key not in self._cache:
                if len(self._cache) > 256:
                    self._cache.clear()
                self._cache[full_key] = compute(full_key[0])
            return self._cache[full_key]

    def _cached_object(self, history: tuple, key: tuple, build):
        """``build(history)``, kept while the queries are of ``history``: one large object per
        ``key`` (a composed PLD, say) that the queries of one history share, dropped when a
        query of another history comes.  The answer cache (:meth:`_cached`) keeps up to 257
        entries, of every history queried, which suits small answers: composed PLDs kept
        there, queried after every pass, held 1.8 GB after 250 passes.  Guarded by the
        accountant's lock; never pickled (:meth:`__getstate__`)."""
        history = tuple(history)
        with self._lock:
            held = self.__dict__.get("_history_objects")
            if held is None or held[0] != history:
                # the other history's objects go before this one's are built
                held = self._history_objects = (history, {})
            objects = held[1]
            if key not in objects:
                objects[key] = build(history)
            return objects[key]

    def _private_history(self, history: tuple) -> tuple | None:
        """``None`` when the history releases something without noise, else the history."""
        for leaf, _ in private_leaves(history):
            if is_non_private(leaf):
                return None
        return history

    def _capped(self, compute, cap: float, reason: str) -> Bounds:
        """``compute()`` (certified bounds) with both ends capped at ``cap``, a certified upper
        bound from elsewhere.  Where the cap changes them, the computation's AccuracyWarnings
        (which state the uncapped bounds) are replaced by one stating the capped bounds and
        ``reason`` (what the cap is), if their gap is still above ``eps_tolerance``; every other
        warning passes unchanged."""
        if not math.isfinite(cap):
            return compute()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            bounds = compute()
        capped = certified_bounds(bounds.lower, min(bounds.upper, cap),
                                  f"the queried value (capped: {reason})")
        changed = capped != bounds
        for item in caught:
            if not (changed and issubclass(item.category, AccuracyWarning)):
                warnings.warn_explicit(item.message, item.category, item.filename, item.lineno)
        gap = capped.upper - capped.lower
        tolerance = getattr(self, "eps_tolerance", 0.0)
        if changed and capped.upper > 0 and gap > tolerance * capped.upper:
            warnings.warn(
                f"{self.name}: certified bounds [{capped.lower:.6g}, {capped.upper:.6g}] have a "
                f"relative gap of {gap / capped.upper:.3g}, above eps_tolerance={tolerance:g}; "
                f"{reason}. The bounds are valid; the upper one is the certified value",
                AccuracyWarning, stacklevel=5)
        return capped

    def _pure_epsilon_bounds(self, history: tuple) -> Bounds:
        """Bounds on epsilon at delta = 0 (pure DP); by default only ``[0, inf]`` is known."""
        return Bounds(0.0, math.inf)

    def get_epsilon_bounds(self, delta: float) -> Bounds:
        """Certified ``(lower, upper)`` bounds on epsilon at ``delta`` (``0 <= delta < 1``; at
        ``delta = 0`` the pure-DP epsilon, ``inf`` when the accountant cannot certify one) for
        the recorded history."""
        delta = check_query_delta(delta)

        def compute(history):
            if not private_leaves(history):
                return Bounds(0.0, 0.0)
            if self._private_history(history) is None:
                return Bounds(math.inf, math.inf)
            check_representable(history)
            with _float_range(self.name):
                if delta == 0.0:
                    return self._pure_epsilon_bounds(history)
                bounds = self._epsilon_bounds(history, delta)
                if (bounds.lower <= 0 < bounds.upper and delta < FAR_TAIL_DELTA
                        and self.computes_lower_bounds):
                    bounds = self._lower_from_larger_delta(history, delta, bounds)
                return bounds
        return self._cached(("eps", delta), compute)

    def _lower_from_larger_delta(self, history, delta: float, bounds: Bounds) -> Bounds:
        """``bounds`` (lower end 0: nothing certified at ``delta``, whose error terms swamp it,
        far in the tail) with the lower bound certified at ``100, 10^4, 10^6`` times ``delta``
        (:func:`~dpplugins.numerics.epsilon_lower_from_larger_delta`: epsilon does not increase
        with delta; a bisection over the three, so two more queries, not up to three).  The
        warnings of those queries, about other deltas, are not passed on."""
        def lower_at(larger: float) -> float:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", AccuracyWarning)
                return self._epsilon_bounds(history, larger).lower
        lower, _ = epsilon_lower_from_larger_delta(lower_at, delta, 100.0 * delta)
        return certified_bounds(lower, bounds.upper, f"epsilon at delta={delta!r}")

    def get_epsilon(self, delta: float) -> float:
        """Epsilon at ``delta``: a certified upper bound (see ``bound_type``)."""
        return self.get_epsilon_bounds(delta).upper

    def get_delta_bounds(self, epsilon: float) -> Bounds:
        """Certified ``(lower, upper)`` bounds on delta at ``epsilon``."""
        epsilon = check_nonnegative("epsilon", epsilon)

        def compute(history):
            if not private_leaves(history):
                return Bounds(0.0, 0.0)
            if self._private_history(history) is None:
                return Bounds(1.0, 1.0)
            check_representable(history)
            with _float_range(self.name):
                return self._with_epsilon_certificates(history, epsilon,
                                                       self._delta_bounds(history, epsilon))
        return self._cached(("delta", epsilon), compute)

    def _with_epsilon_certificates(self, history: tuple, epsilon: float,
                                   bounds: Bounds) -> Bounds:
        """``bounds`` on delta(epsilon) intersected with what the epsilon queries already
        answered for this history: a certified ``epsilon(d) <= e`` means ``delta(e') <= d`` for
        every ``e' >= e`` (delta is non-increasing in epsilon).  So ``get_delta(get_epsilon(d))
        <= d`` holds even where the delta query's own grid is a little looser than the one
        that certified the epsilon."""
        lower, upper = bounds
        for key, answer in list(self._cache.items()):
            if (len(key) == 3 and key[0] == history and key[1] == "eps" and key[2] > 0
                    and answer.upper <= epsilon):
                upper = min(upper, float(key[2]))
        return certified_bounds(lower, upper, f"delta at epsilon={epsilon!r}")

    def get_delta(self, epsilon: float) -> float:
        """Delta at ``epsilon``: a certified upper bound."""
        return self.get_delta_bounds(epsilon).upper

    def _epsilon_bounds(self, history: tuple, delta: float) -> Bounds:  # pragma: no cover
        raise NotImplementedError

    def _delta_bounds(self, history: tuple, epsilon: float) -> Bounds:  # pragma: no cover
        raise NotImplementedError

    # -- state --------------------------------------------------------------------------------
    def options(self) -> dict[str, Any]:
        """The constructor options (JSON-serialisable)."""
        return {name: getattr(self, name) for name in self._option_names}

    def state_dict(self) -> dict[str, Any]:
        """Settings, events and library version; JSON-serialisable."""
        from dpplugins import __version__

        return {"accountant": self.name, "version": __version__, "options": self.options(),
                "events": [event.to_dict() for event in self._history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (options must match this accountant's).

        State dicts of version 0.1 (a ``history`` of ``(noise_multiplier, sample_rate, steps)``
        tuples) load with the meaning they had (:meth:`step_event`); those of Opacus' own
        accountants (``mechanism`` another name, e.g. ``"rdp"``) as Poisson steps."""
        from dpplugins import __version__

        if not isinstance(state, dict) or not ("events" in state or "history" in state):
            raise ParameterError("state", type(state).__name__,
                                 "a dict produced by state_dict() with an 'events' entry")
        name = state.get("accountant", self.name)
        if name != self.name:
            raise ParameterError("state['accountant']", name, f"{self.name!r} for this accountant")
        version = state.get("version", "0.1")
        if _parse_version(version)[:2] > _parse_version(__version__)[:2]:
            raise ParameterError("state['version']", version,
                                 f"at most {__version__} (the installed dpplugins)",
                                 "upgrade dpplugins to load this state")
        options = state.get("options", {})
        if not isinstance(options, dict):
            raise ParameterError("state['options']", options, "a dict of options")
        for key, value in options.items():
            if key not in self._option_names:
                raise ParameterError(f"state['options'][{key!r}]", value,
                                     "one of " + ", ".join(self._option_names))
            if getattr(self, key) != value:
                raise ParameterError(f"state['options'][{key!r}]", value,
                                     f"{getattr(self, key)!r} as in this accountant "
                                     "(create the accountant with the saved options)")
        if "events" in state:
            raw = state["events"]
            if not isinstance(raw, list):
                raise ParameterError("state['events']", raw, "a list of event dicts")
            if raw and "neighbouring" not in options:
                # events do not carry the relation: without it a saved replace-one run loaded
                # into an add/remove accountant reported 0.718 for its 0.895 (a hostile sweep)
                raise ParameterError("state['options']", options, "a dict with the saved "
                                     "'neighbouring' relation, as state_dict() writes it (the "
                                     "events do not carry it)")
            self.history = [from_dict(item) for item in raw]
        else:
            raw = state["history"]
            if not isinstance(raw, list):
                raise ParameterError("state['history']", raw,
                                     "a list of (noise_multiplier, sample_rate, steps)")
            mechanism = state.get("mechanism", self.name)
            if mechanism != self.name:
                # an Opacus accountant's state ("rdp", "prv", "gdp"): its tuples are Poisson
                # steps, whatever this accountant's version-0.1 reading of a tuple was
                # (balls_and_bins read an RDP state as random allocation: 0.62 where the Poisson
                # steps are 0.72 -- hostile sweep); accountants that cannot account Poisson
                # steps refuse them
                self.history = [SelfComposedEvent(Accountant.step_event(self, sigma, q), steps)
                                for sigma, q, steps in validate_history(raw)]
            else:
                # validate_history names a non-iterable entry (tuple(5) raised TypeError).  The
                # 0.1 meaning of an accountant whose step() was its own protocol is taken only
                # from a state that names it: a bare {"history": ...} (Opacus' tuples copied by
                # hand) loaded into balls_and_bins as random allocation, 0.621 where the Poisson
                # steps are 0.718 (a hostile sweep); unnamed, the tuples are Poisson steps
                named = self.name in (state.get("accountant"), state.get("mechanism"))
                read = self._legacy_step_event if named else self.step_event
                self.history = [SelfComposedEvent(read(sigma, q), steps)
                                for sigma, q, steps in validate_history(raw)]

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_lock", None)
        state.pop("_history_objects", None)
        state["_cache"] = {}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def __copy__(self):
        """A copy with its own ledger, lock and caches (as a pickle round trip): composing into
        the copy leaves this accountant as it is.  Found by a hostile sweep: ``copy.copy`` shared
        the history list, so a what-if step composed into the copy (100 steps at sigma 0.5, q
        0.5) was reported by the original too, 137.2 where its own steps have 0.718."""
        new = type(self).__new__(type(self))
        new.__setstate__(self.__getstate__())
        new._history = list(self._history)
        return new

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts}; {integer_text(self.steps)} steps)"

