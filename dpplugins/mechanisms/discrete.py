"""Any pair of finite probability vectors."""

from __future__ import annotations

import numpy as np

from dpplugins.errors import ParameterError
from dpplugins.mechanisms.pairs import DiscretePair
from dpplugins.mechanisms.types import MechanismPairs


def _probability_vector(name: str, values) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or arr.size == 0:
        raise ParameterError(name, values, "a non-empty 1-D sequence of probabilities")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ParameterError(name, values, "finite, non-negative probabilities")
    total = arr.sum()
    if abs(total - 1.0) > 1e-9:
        raise ParameterError(name, f"sum={total!r}", "probabilities summing to 1 (within 1e-9)")
    return arr


def discrete_pair(p, q, *, symmetric: bool = False, description: str = "") -> MechanismPairs:
    """The mechanism whose output distributions on neighbouring datasets are ``p`` and ``q``.

    Both directions are kept (``p`` vs ``q`` and ``q`` vs ``p``) unless ``symmetric`` says they have
    the same privacy loss distribution (Koskela et al. 2021, Sec. 2: take the max over both).
    """
    p = _probability_vector("p", p)
    q = _probability_vector("q", q)
    if p.shape != q.shape:
        raise ParameterError("q", f"length {q.size}", f"the same length as p ({p.size})")
    pairs = {"remove": DiscretePair(p, q)}
    if not symmetric:
        pairs["add"] = DiscretePair(q, p)
    return MechanismPairs(pairs, symmetric, description or f"discrete pair on {p.size} outcomes")
