"""Privacy-loss masses of a pair of distributions on the bins of a grid (what mechanisms hand to
:mod:`dpplugins.pld`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["LossBins"]


@dataclass(frozen=True)
class LossBins:
    """Masses of the privacy loss ``L = log dP/dQ`` in the bins of the grid ``eps_j = j * h``.

    ``p[k]`` and ``q[k]`` (k = 0 .. hi - lo - 1) are ``P(L in (eps_{lo+k}, eps_{lo+k+1}])`` and the
    same under Q.  ``p_below``/``q_below`` hold ``L <= eps_lo`` (``q_below`` includes the Q-mass
    where P vanishes), ``p_above``/``q_above`` hold ``eps_hi < L < inf``, and ``p_inf`` is the
    P-mass where Q vanishes.  Masses must be accurate to a few units of round-off *relative to
    themselves*; the constructors in :mod:`dpplugins.mechanisms` guarantee that.
    """

    h: float
    lo: int
    hi: int
    p: np.ndarray
    q: np.ndarray
    p_below: float
    q_below: float
    p_above: float
    q_above: float
    p_inf: float
    #: bound on the floating-point error of these masses' effect on any delta (probability units);
    #: charged per unit of mass by the constructions
    fp_error: float = 64 * np.finfo(float).eps / 2

    def __post_init__(self) -> None:
        if self.hi <= self.lo or len(self.p) != self.hi - self.lo or len(self.q) != len(self.p):
            raise ValueError("LossBins: inconsistent grid and mass arrays")
