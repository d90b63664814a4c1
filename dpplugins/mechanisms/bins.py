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
    #: the part of ``q_below`` where P vanishes (loss ``-inf``), which no hockey-stick divergence
    #: ever sees; 0 where the pair has none or does not tell
    q_minus_inf: float = 0.0

    def __post_init__(self) -> None:
        if self.hi <= self.lo or len(self.p) != self.hi - self.lo or len(self.q) != len(self.p):
            raise ValueError("LossBins: inconsistent grid and mass arrays")

    def restricted(self, lo: int, hi: int) -> "LossBins":
        """The same masses on the sub-grid ``lo .. hi`` (within ``self.lo .. self.hi``): the
        bins left out go into ``below`` and ``above`` (sums of non-negative masses, so they keep
        their relative accuracy up to the rounding of the sum)."""
        if not self.lo <= lo < hi <= self.hi:
            raise ValueError("LossBins.restricted: the sub-grid must lie within the grid")
        if (lo, hi) == (self.lo, self.hi):
            return self
        a, b = lo - self.lo, hi - self.lo
        return LossBins(h=self.h, lo=lo, hi=hi, p=self.p[a:b], q=self.q[a:b],
                        p_below=float(self.p_below + np.sum(self.p[:a])),
                        q_below=float(self.q_below + np.sum(self.q[:a])),
                        p_above=float(self.p_above + np.sum(self.p[b:])),
                        q_above=float(self.q_above + np.sum(self.q[b:])),
                        p_inf=self.p_inf, fp_error=self.fp_error, q_minus_inf=self.q_minus_inf)

    def mirrored(self) -> "LossBins":
        """The bins of the pair ``(Q, P)`` on the grid ``-hi .. -lo``: its loss is ``-L``, so
        its bin ``(eps_j, eps_j+1]`` is the set ``-L in [eps_j, eps_j+1)``, one of these bins
        read backwards with P and Q exchanged.  Valid for pairs whose loss has no atoms (the
        two bins differ only at their end points) and no outputs where one of P, Q vanishes:
        only :class:`~dpplugins.mechanisms.types.MechanismPairs` that declare ``mirrored`` use
        it (the Poisson-subsampled Gaussian)."""
        if self.p_inf != 0:
            raise ValueError("LossBins.mirrored: a pair with an infinite loss has no mirror here")
        return LossBins(h=self.h, lo=-self.hi, hi=-self.lo, p=self.q[::-1], q=self.p[::-1],
                        p_below=self.q_above, q_below=self.p_above,
                        p_above=self.q_below, q_above=self.p_below, p_inf=0.0,
                        fp_error=self.fp_error)
