"""Pairs of distributions (P, Q) and their privacy-loss bins on a grid.

A *pair* is what :mod:`dpplugins.pld` discretises.  Two kinds cover every mechanism we build in:

* :class:`DiscretePair` -- finite pmfs; losses ``log(p_i / q_i)`` are exact.
* :class:`MonotoneLossPair` -- continuous outputs ``x`` on the real line where the privacy loss
  ``L(x)`` is non-decreasing; the set ``{eps_j < L <= eps_{j+1}}`` is the interval
  ``(u(eps_j), u(eps_{j+1})]`` with ``u(s) = sup{x : L(x) <= s}``, so bin masses are interval
  masses of the noise distributions (:mod:`dpplugins.mechanisms.distributions`).

Each pair also suggests a loss range outside which both tails have probability below ``tail``;
the range only affects accuracy, never validity (mass outside is handled conservatively by the
constructions in :mod:`dpplugins.pld.grid`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from dpplugins.mechanisms.bins import LossBins
from dpplugins.mechanisms.distributions import interval_masses

__all__ = ["DiscretePair", "MonotoneLossPair", "grid_range"]

#: largest |loss| we put on a grid; beyond it e^loss overflows
MAX_ABS_LOSS = 600.0
_U = np.finfo(float).eps / 2


def grid_range(loss_lo: float, loss_hi: float, h: float) -> tuple[int, int]:
    """Grid indices covering ``[loss_lo, loss_hi]``, with at least one point below 0 and one spare
    point at the bottom (the tangent construction starts from the line ``1 - x`` there)."""
    loss_lo = max(min(loss_lo, -h), -MAX_ABS_LOSS)
    loss_hi = min(max(loss_hi, h), MAX_ABS_LOSS)
    lo = math.floor(loss_lo / h) - 1
    hi = max(math.ceil(loss_hi / h), lo + 2)
    return lo, hi


@dataclass(frozen=True)
class DiscretePair:
    """Two probability vectors on the same finite set of outcomes."""

    p: np.ndarray
    q: np.ndarray

    def __post_init__(self) -> None:
        p = np.asarray(self.p, dtype=float)
        q = np.asarray(self.q, dtype=float)
        object.__setattr__(self, "p", p)
        object.__setattr__(self, "q", q)

    def losses(self) -> np.ndarray:
        """``log(p_i / q_i)``; +inf where only P has mass, -inf where only Q has, NaN where
        neither (such outcomes never occur and are ignored by :meth:`loss_bins`)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(self.p) - np.log(self.q)

    def loss_range(self, tail: float) -> tuple[float, float]:
        """Smallest and largest finite loss (the grid must start below ``log(1 - delta(inf))``)."""
        both = (self.p > 0) & (self.q > 0)
        if not np.any(both):
            return -1.0, 1.0
        losses = self.losses()[both]
        low = float(losses.min())
        p_inf = float(self.p[self.q == 0].sum())
        if 0 < p_inf < 1:
            # the tangent construction starts on the line 1 - x, which needs e^eps_lo < 1 - p_inf
            low = min(low, np.log1p(-p_inf) - 1e-3)
        return low, float(losses.max())

    def loss_bins(self, h: float, lo: int, hi: int) -> LossBins:
        """Exact bin masses of the losses on the grid ``lo .. hi`` (step ``h``)."""
        p, q = self.p, self.q
        both = (p > 0) & (q > 0)
        log_p, log_q = np.log(p[both]), np.log(q[both])
        losses = log_p - log_q
        pb, qb = p[both], q[both]
        # A loss within its own rounding error of a grid point is put on that point, so that
        # atoms meant to sit on the grid (e.g. eps0 = 1 with h = 1e-3) are not pushed one bin up;
        # the move is charged to fp_error (delta is 1-Lipschitz in the loss of each unit of mass).
        rounding = 8 * _U * np.maximum(1.0, np.maximum(np.abs(log_p), np.abs(log_q)))
        index = losses / h
        nearest = np.round(index)
        snap = np.abs(index - nearest) * h <= rounding
        index = np.where(snap, nearest, index)
        # bin k holds (eps_{lo+k}, eps_{lo+k+1}]
        k = np.ceil(index).astype(np.int64) - 1 - lo
        below = k < 0
        above = k >= hi - lo
        inside = ~below & ~above
        n = hi - lo
        return LossBins(
            h=h, lo=lo, hi=hi,
            p=np.bincount(k[inside], weights=pb[inside], minlength=n),
            q=np.bincount(k[inside], weights=qb[inside], minlength=n),
            p_below=float(pb[below].sum()),
            q_below=float(qb[below].sum() + q[(p == 0) & (q > 0)].sum()),
            q_minus_inf=float(q[(p == 0) & (q > 0)].sum()),
            p_above=float(pb[above].sum()),
            q_above=float(qb[above].sum()),
            p_inf=float(p[(q == 0) & (p > 0)].sum()),
            fp_error=float(64 * _U + np.max(rounding, initial=0.0)),
        )


@dataclass(frozen=True)
class MonotoneLossPair:
    """Continuous pair on the real line with a non-decreasing privacy loss ``L(x)``.

    ``P`` and ``Q`` provide ``interval_mass(a, b)``; ``loss_inverse(s)`` is the generalised inverse
    ``sup{x : L(x) <= s}`` (``-inf``/``+inf`` allowed); ``x_range`` is an interval holding all but
    ``tail`` of both distributions, used to suggest the loss range.
    """

    P: object
    Q: object
    loss: Callable[[np.ndarray], np.ndarray]
    loss_inverse: Callable[[np.ndarray], np.ndarray]
    x_range: Callable[[float], tuple[float, float]] = field(repr=False)

    def loss_range(self, tail: float) -> tuple[float, float]:
        """Losses at the ends of ``x_range(tail)`` (outside it both tails are below ``tail``)."""
        a, b = self.x_range(tail)
        with np.errstate(over="ignore", divide="ignore"):
            la, lb = self.loss(np.array([a, b], dtype=float))
        return float(la), float(lb)

    def loss_bins(self, h: float, lo: int, hi: int) -> LossBins:
        """Bin masses as interval masses of P and Q between the inverse losses of the grid."""
        eps = (lo + np.arange(hi - lo + 1)) * h
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            u = self.loss_inverse(eps)
        # the cells between grid points, and the two beyond them, in one call per distribution
        ends_a = np.concatenate([[-np.inf], u])
        ends_b = np.concatenate([u, [np.inf]])
        p_all, q_all = (np.asarray(x, float) for x in interval_masses((self.P, self.Q),
                                                                        ends_a, ends_b))
        return LossBins(h=h, lo=lo, hi=hi, p=p_all[1:-1], q=q_all[1:-1],
                        p_below=float(p_all[0]), q_below=float(q_all[0]),
                        p_above=float(p_all[-1]), q_above=float(q_all[-1]), p_inf=0.0)
