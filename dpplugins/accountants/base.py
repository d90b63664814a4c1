"""The accountant contract shared by every accountant (DESIGN.md, "The accountant contract").

An accountant keeps a history of DP-SGD steps in Opacus' format -- a run-length list of
``(noise_multiplier, sample_rate, steps)`` tuples -- and answers ``get_epsilon(delta)`` (a certified
upper bound unless the class says it is an estimate), ``get_epsilon_bounds(delta)`` and
``get_delta(epsilon)``.  Reading never changes the history; results are cached per history.
Subclasses implement :meth:`Accountant._epsilon_bounds` and :meth:`Accountant._delta_bounds` as
functions of the history, and list their constructor options in ``_option_names``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Iterable

from dpplugins.errors import (ParameterError, check_choice, check_count, check_nonnegative,
                              check_open_unit, check_positive, check_probability)
from dpplugins.pld import Bounds

__all__ = ["Accountant", "HistoryEntry", "validate_history"]

HistoryEntry = tuple  # (noise_multiplier: float, sample_rate: float, steps: int)
NEIGHBOURING = ("add_remove", "replace_one")


def validate_history(history: Iterable) -> list[tuple[float, float, int]]:
    """Check and normalise a run-length history; merge adjacent runs with equal parameters."""
    if history is None:
        raise ParameterError("history", history, "a list of (noise_multiplier, sample_rate, steps)")
    out: list[tuple[float, float, int]] = []
    for i, entry in enumerate(history):
        try:
            sigma, q, steps = entry
        except (TypeError, ValueError):
            raise ParameterError(f"history[{i}]", entry,
                                 "a (noise_multiplier, sample_rate, steps) tuple") from None
        sigma = check_positive(f"history[{i}].noise_multiplier", sigma)
        q = check_probability(f"history[{i}].sample_rate", q)
        steps = check_count(f"history[{i}].steps", steps, minimum=0)
        if steps == 0:
            continue
        if out and out[-1][0] == sigma and out[-1][1] == q:
            out[-1] = (sigma, q, out[-1][2] + steps)
        else:
            out.append((sigma, q, steps))
    return out


class Accountant:
    """Base class: history, validation, caching and state; the mathematics lives in subclasses.

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
    _option_names: ClassVar[tuple[str, ...]] = ("neighbouring",)

    def __init__(self, *, neighbouring: str = "add_remove") -> None:
        self.neighbouring = check_choice("neighbouring", neighbouring, NEIGHBOURING)
        self._history: list[tuple[float, float, int]] = []
        self._cache: dict[tuple, Any] = {}

    # -- history ------------------------------------------------------------------------------
    @property
    def history(self) -> list[tuple[float, float, int]]:
        """Run-length list of ``(noise_multiplier, sample_rate, steps)`` (Opacus' format).

        Assigning to it is allowed (Opacus' ``get_noise_multiplier`` does); the value is validated.
        """
        return self._history

    @history.setter
    def history(self, value) -> None:
        self._history = validate_history(value)

    def step(self, *, noise_multiplier: float, sample_rate: float, count: int = 1) -> None:
        """Record ``count`` steps with the given noise multiplier and sampling rate."""
        sigma = check_positive("noise_multiplier", noise_multiplier)
        q = check_probability("sample_rate", sample_rate)
        count = check_count("count", count, minimum=0)
        if count == 0:
            return
        if self._history and self._history[-1][0] == sigma and self._history[-1][1] == q:
            last = self._history[-1]
            self._history[-1] = (sigma, q, last[2] + count)
        else:
            self._history.append((sigma, q, count))

    def __len__(self) -> int:
        return sum(steps for _, _, steps in self._history)

    # -- queries ------------------------------------------------------------------------------
    def _cached(self, key: tuple, compute):
        full_key = (tuple(self._history),) + key
        if full_key not in self._cache:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[full_key] = compute()
        return self._cache[full_key]

    def get_epsilon_bounds(self, delta: float) -> Bounds:
        """Certified ``(lower, upper)`` bounds on epsilon at ``delta`` for the recorded history."""
        delta = check_open_unit("delta", delta)
        if not self._history:
            return Bounds(0.0, 0.0)
        return self._cached(("eps", delta), lambda: self._epsilon_bounds(tuple(self._history), delta))

    def get_epsilon(self, delta: float) -> float:
        """Epsilon at ``delta``: a certified upper bound (see ``bound_type``)."""
        return self.get_epsilon_bounds(delta).upper

    def get_delta_bounds(self, epsilon: float) -> Bounds:
        """Certified ``(lower, upper)`` bounds on delta at ``epsilon``."""
        epsilon = check_nonnegative("epsilon", epsilon)
        if not self._history:
            return Bounds(0.0, 0.0)
        return self._cached(("delta", epsilon),
                            lambda: self._delta_bounds(tuple(self._history), epsilon))

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
        """Settings, history and library version; JSON-serialisable."""
        from dpplugins import __version__

        return {"accountant": self.name, "version": __version__, "options": self.options(),
                "history": [list(entry) for entry in self._history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved (options must match this accountant's)."""
        if not isinstance(state, dict) or "history" not in state:
            raise ParameterError("state", type(state).__name__,
                                 "a dict produced by state_dict() with a 'history' entry")
        name = state.get("accountant", self.name)
        if name != self.name:
            raise ParameterError("state['accountant']", name, f"{self.name!r} for this accountant")
        for key, value in state.get("options", {}).items():
            if key not in self._option_names:
                raise ParameterError(f"state['options'][{key!r}]", value,
                                     "one of " + ", ".join(self._option_names))
            if getattr(self, key) != value:
                raise ParameterError(f"state['options'][{key!r}]", value,
                                     f"{getattr(self, key)!r} as in this accountant "
                                     "(create the accountant with the saved options)")
        self.history = [tuple(entry) for entry in state["history"]]

    def __repr__(self) -> str:
        opts = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({opts}; {len(self)} steps)"
