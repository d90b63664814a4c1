"""The value object shared by the mechanism constructors."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class MechanismPairs:
    """Worst-case pairs of one mechanism, keyed by direction (``"remove"``, ``"add"``).

    ``symmetric`` means the two directions have the same privacy loss distribution, so only
    ``pairs["remove"]`` is stored and used for both.  ``description`` is shown in reports.
    """

    pairs: Mapping[str, object]
    symmetric: bool
    description: str
