"""The value object shared by the mechanism constructors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class MechanismPairs:
    """Worst-case pairs of one mechanism, keyed by direction (``"remove"``, ``"add"``).

    ``symmetric`` means the two directions have the same privacy loss distribution, so only
    ``pairs["remove"]`` is stored and used for both.  ``description`` is shown in reports.
    ``mirrored`` means ``pairs["add"]`` is ``pairs["remove"]`` with P and Q exchanged (its loss
    is the remove loss negated) and that loss has no atoms and is finite everywhere, so the add
    direction's bins are the remove direction's read backwards
    (:meth:`~dpplugins.mechanisms.bins.LossBins.mirrored`): one set of interval masses serves
    both directions.
    ``dominated``: where ``pairs`` only *dominate* the mechanism (e.g. their small masses
    underflowed to 0, which makes finite losses infinite), pairs the mechanism dominates -- a
    post-processing of it, with the same directions -- which the PLD engine uses for the lower
    bounds instead; ``None`` when ``pairs`` are the mechanism's own.
    """

    pairs: Mapping[str, object]
    symmetric: bool
    description: str
    mirrored: bool = False
    dominated: "MechanismPairs | None" = None
