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
    """

    pairs: Mapping[str, object]
    symmetric: bool
    description: str
    mirrored: bool = False
