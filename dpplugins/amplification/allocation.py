"""Random allocation ("balls-and-bins") DP-SGD with Gaussian noise: certified privacy bounds.

**Protocol.**  Every epoch has ``t`` steps; each example is put into exactly one of them, chosen
uniformly at random and independently of the others (Chua, Ghazi, Harrison, Leeman, Kamath, Kumar,
Manurangsi, Sinha, Zhang, "Balls-and-Bins Sampling for DP-SGD", AISTATS 2025, arXiv:2412.16802;
Feldman & Shenfeld, "Privacy amplification by random allocation", 2025, arXiv:2502.08202, whose
follow-up arXiv:2602.17284 reports random allocation at least as good as Poisson sampling for the
Gaussian mechanism -- what our numbers show too).  It is the random
check-in protocol with check-in probability 1 (Balle et al. 2020; REFERENCE.md, "Where the seeds
stop").  Each step adds ``N(0, sigma^2 I)`` to the sum of clipped gradients (clipping norm 1).

**Dominating pair** (Chua et al. 2025, the pair ``(P_B, Q_B)`` of ABLQ_B; issue #6): for one
epoch and the remove direction,

    P = (1/t) sum_j N(e_j, sigma^2 I_t)      versus      Q = N(0, sigma^2 I_t),

and the add direction is ``(Q, P)``.  Epochs use fresh allocations, so they compose.

**Reduction to a sum of log-normals** (our derivation).  ``dP/dQ(x) = (1/t) sum_j
exp((x_j - 1/2) / sigma^2) = a S`` with ``S = sum_j Y_j``, ``Y_j = exp(x_j / sigma^2)`` and
``a = exp(-1/(2 sigma^2)) / t``.  The loss depends on ``x`` only through ``S``, so the pair is
equivalent to ``(a s mu(ds), mu(ds))`` with ``mu`` the law of ``S`` under Q: a sum of ``t``
i.i.d. log-normals ``Y = e^G``, ``G ~ N(0, 1/sigma^2)``.  Under P one summand is replaced by
``e^G'``, ``G' ~ N(1/sigma^2, 1/sigma^2)``.

**Upper bound: a dominating pair by convex order** (our derivation).  For a probability measure
``nu`` on ``[0, inf)`` with ``int a s d nu = 1`` write ``pair(nu) = (a s nu, nu)``.  If ``nu'``
dominates ``nu`` in the convex order, Strassen's theorem gives a martingale coupling
``E[S' | S] = S``, and the reverse kernel ``S' -> S`` maps ``nu'`` to ``nu`` *and* ``a s nu'`` to
``a s nu`` (by the martingale property), so ``pair(nu)`` is a post-processing of ``pair(nu')``:
``pair(nu')`` dominates it in both directions and under composition.  We build ``nu'`` by
spreading every summand ``Y`` to the two ends of its cell of a grid of step ``h``, keeping the
cell's mean (a martingale coupling per summand; sums of independent ones are one for ``S``).
Summands above ``y_max`` and sums beyond the FFT window are moved to two extra outcomes (one with
only P-mass, one with only Q-mass): a post-processing maps them back, so dominance is kept.

**Lower bound: a dominated pair by post-processing.**  Rounding each ``Y_j`` *down* to the grid,
summing, and merging everything truncated into one outcome is a function of the output, so the
laws of that sum under P and under Q form a pair that the true one dominates.

**Numerics.**  Two ways to sum the ``t`` summands, both certified: FFT powers on a uniform grid
with certified windows and floating-point bounds (:func:`dpplugins.pld.compose.compose_grid_pmfs`;
many steps per epoch), or direct pairwise summation on a geometric grid with the spread (upper) or
barycentre contraction (lower) applied after every sum (few steps per epoch or heavy-tailed
summands, i.e. small noise).  The arrays we hand on differ from the exact pairs above by certified
l1 distances.  For the dominating pair, P-masses are exactly ``a s`` times Q-masses (rounded
down), and the remove divergence of a composition is ``E_Q[(prod a s_i - e^eps)_+]`` (kernel at
most ``prod a s_i``), the add divergence ``E_Q[(1 - e^eps prod a s_i)_+]`` (kernel at most 1): an
error in one epoch's masses moves them by at most its a-weighted (remove) or plain (add) l1 size,
with no factor ``e^eps``.  Where that structure is missing (the merged outcome of the lower pair)
we use ``|E_g(P||Q) - E_g(P'||Q')| <= ||P - P'|| + g ||Q - Q'||``.  :class:`AllocationPLD` adds
these slacks to upper and subtracts them from lower bounds, per direction.

Example::

    >>> from dpplugins.amplification.allocation import random_allocation_pld
    >>> pld = random_allocation_pld(noise_multiplier=1.0, steps_per_epoch=100, epochs=1)
    >>> lower, upper = pld.epsilon_for_delta(1e-5)   # about 0.62 (Poisson sampling: 0.72)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
from scipy import special

from dpplugins.errors import (NumericalError, ParameterError, check_count, check_open_unit,
                              check_positive, check_nonnegative)
from dpplugins.mechanisms.distributions import Gaussian
from dpplugins.mechanisms.pairs import DiscretePair
from dpplugins.mechanisms.types import MechanismPairs
from dpplugins.pld.compose import ComposedPLD, compose_grid_pmfs
from dpplugins.pld.distribution import Bounds, PrivacyLossDistribution
from dpplugins.pld.grid import GridPMF

__all__ = ["AllocationPair", "AllocationPLD", "allocation_pairs", "random_allocation_pld",
           "default_summand_step", "epoch_loss_scale", "MonteCarloEstimate",
           "monte_carlo_delta"]

_U = np.finfo(float).eps / 2
#: relative accuracy we charge for Gaussian interval masses (the routine promises "a few ulps";
#: we take 32 to be safe)
_REL_MASS = 32 * _U


def _check_protocol(noise_multiplier, steps_per_epoch) -> tuple[float, int]:
    sigma = check_positive("noise_multiplier", noise_multiplier)
    t = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    return sigma, t


def epoch_loss_scale(noise_multiplier: float, steps_per_epoch: int) -> float:
    """Rough standard deviation of one epoch's privacy loss, used only to size grids:
    ``sqrt((e^(1/sigma^2) - 1) / t)`` (the chi-square divergence of Poisson sampling at rate 1/t
    summed over t steps; Mironov, Talwar, Zhang 2019, Sec. 3), at most ``1/sigma``."""
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    chi2 = math.expm1(min(1.0 / sigma ** 2, 700.0))
    return min(1.0 / sigma, math.sqrt(chi2 / t))


def default_summand_step(noise_multiplier: float, steps_per_epoch: int,
                         accuracy: float = 1.0) -> float:
    """Grid step ``h`` for the summands ``Y = e^G`` (``G ~ N(0, 1/sigma^2)``).

    The convex-order spread adds at most ``h^2 / 4`` to each summand's variance, so we take ``h``
    a fiftieth of ``sd(Y)``; for few steps per epoch the sum can be small where the add direction
    is decided, so ``h`` is also at most ``t E[Y] / 4000``.  ``accuracy < 1`` refines.
    """
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    s2 = 1.0 / sigma ** 2
    mean = math.exp(s2 / 2)
    sd = math.sqrt(math.expm1(s2)) * mean
    return accuracy * min(sd / 20.0, t * mean / 2000.0)


def _summand_cells(log_mean: float, s: float, h: float, cells: int):
    """Masses ``m_k = P(Y in (kh, (k+1)h])`` and partial means ``E[Y; Y in cell k]`` for
    ``Y = e^G``, ``G ~ N(log_mean, s^2)``, k = 0 .. cells-1, relatively accurate.

    ``E[e^G; a < G <= b] = e^(log_mean + s^2/2) P(a < N(log_mean + s^2, s^2) <= b)`` (completing
    the square)."""
    k = np.arange(cells + 1, dtype=float)
    with np.errstate(divide="ignore"):
        edges = np.log(k * h)  # -inf at k = 0
    lo, hi = edges[:-1], edges[1:]
    mass = Gaussian(log_mean, s).interval_mass(lo, hi)
    partial = math.exp(log_mean + s * s / 2) * Gaussian(log_mean + s * s, s).interval_mass(lo, hi)
    return mass, partial


def _tail_above(log_mean: float, s: float, y: float) -> float:
    """``P(e^G > y)`` for ``G ~ N(log_mean, s^2)``."""
    return float(special.ndtr(-(math.log(y) - log_mean) / s))


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(8)


def _upper_end_weights(s: float, h: float, cells: int, mass: np.ndarray, partial: np.ndarray
                       ) -> tuple[np.ndarray, float, float]:
    """``w_k = E[(Y - kh) / h; Y in (kh, (k+1)h]]`` for ``Y = e^G``, ``G ~ N(0, s^2)``, and an
    l1 bound on the error of ``(mass - w, w)``.

    Where the log-density of ``Y`` varies by at most 1 over the cell (``k`` not small) we use
    8-point Gauss-Legendre quadrature of ``(y - kh) f(y) / h``: its error is far below round-off
    there (Abramowitz & Stegun 25.4.30; the argument of
    :mod:`dpplugins.mechanisms.distributions`), and we charge ``32 u`` relative.  Elsewhere
    ``w_k = partial_k / h - k m_k``, whose cancellation costs ``r (2k + 1) m_k`` with ``r = 32 u``
    the relative accuracy of masses and partial means.  The second bound is the same error
    weighted by the position (``sum_x x |error(x)|``, with cell k's error at most at (k+1)h)."""
    k = np.arange(cells, dtype=float)
    w = np.clip(partial / h - k * mass, 0.0, mass)
    error_terms = (4 * k + 3) * mass
    with np.errstate(divide="ignore"):
        y_lo = np.log(np.maximum(k, 1e-300) * h)
    y_hi = np.log((k + 1) * h)
    # |d log f / dy| = |1 + log(y) / s^2| / y <= (1 + max|log y| / s^2) / (kh) on the cell
    variation = (1.0 + np.maximum(np.abs(y_lo), np.abs(y_hi)) / (s * s)) / np.maximum(k, 1e-300)
    smooth = (k >= 1) & (variation <= 1.0)
    if np.any(smooth):
        kk = k[smooth]
        u = 0.5 * (_GL_NODES + 1.0)  # nodes on [0, 1]
        y = (kk[:, None] + u[None, :]) * h
        log_f = -0.5 * (np.log(y) / s) ** 2 - np.log(y * s * math.sqrt(2 * math.pi))
        # w_k = h * int_0^1 u f(kh + hu) du
        w_quad = h * 0.5 * np.sum(_GL_WEIGHTS[None, :] * u[None, :] * np.exp(log_f), axis=1)
        w[smooth] = np.clip(w_quad, 0.0, mass[smooth])
        error_terms[smooth] = 3 * mass[smooth]
    l1 = _REL_MASS * float(np.sum(error_terms)) + 4 * _U
    weighted = _REL_MASS * float(np.sum((k + 1) * h * error_terms)) + 4 * _U * cells * h
    return w, l1, weighted


def _spread_summand(s: float, h: float, cells: int) -> tuple[GridPMF, float]:
    """Law of the summand ``Y`` (under Q) spread to the ends of its grid cell with the cell mean
    kept (convex-order dominating), on ``0, h, .., cells*h``; mass above ``cells*h`` at +inf.

    Weight to the upper end of cell k: ``E[(Y - kh) / h; Y in cell k]``
    (:func:`_upper_end_weights`).  Also returns the position-weighted error bound."""
    mass, partial = _summand_cells(0.0, s, h, cells)
    up, error, weighted = _upper_end_weights(s, h, cells, mass, partial)
    pmf = np.zeros(cells + 1)
    pmf[:-1] += mass - up
    pmf[1:] += up
    return GridPMF(h, 0, pmf, _tail_above(0.0, s, cells * h), error), weighted


def _floor_summand(log_mean: float, s: float, h: float, cells: int) -> GridPMF:
    """Law of ``floor(Y / h) * h`` for ``Y = e^G``, ``G ~ N(log_mean, s^2)``; mass above
    ``cells*h`` at +inf (it is merged into one outcome later)."""
    mass, _ = _summand_cells(log_mean, s, h, cells)
    return GridPMF(h, 0, mass, _tail_above(log_mean, s, cells * h), _REL_MASS + 4 * _U)


def _window_error(c: ComposedPLD) -> float:
    """l1 distance between a computed window and the exact law restricted to it: folded mass
    (at most the mass outside the window) plus the floating-point term."""
    return c.fp_error + c.tail_above + c.tail_below


def _pair_slack(p_error: float, q_error: float) -> dict:
    """Slack of a pair whose P-masses are exactly ``a s`` times its Q-masses (also after the
    computation): the remove divergence is ``E_Q[(prod a s_i - g)_+]``, whose kernel is at most
    ``prod a s_i``, so an error ``e`` in one Q-measure moves it by at most ``sum a s |e|`` (the
    P-side error); the add divergence ``E_Q[(1 - g prod a s_i)_+]`` has kernel at most 1, so it
    moves by at most the Q-side error.  Neither carries a factor ``e^eps``: the stored P-masses
    are rounded *down* from ``a s`` times the Q-masses (:func:`_p_masses`), which can only lower
    the add divergence ``sum (q - g p)_+`` of a pair that dominates -- on the safe side -- and
    moves the remove divergence by at most their l1 change (in ``p_error``)."""
    return {"remove": (p_error, 0.0), "add": (q_error, 0.0)}


def _p_masses(a: float, support: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``a s q`` rounded down: each product is within 3 ulps, so ``(1 - 8u)`` keeps it below the
    exact value."""
    return a * support * q * (1.0 - 8 * _U)


def _p_side_error(a: float, t: int, l1: float, weighted: float) -> float:
    """l1 bound on the P-side error ``a sum_x x |e(x)|`` of a ``t``-fold sum whose summand law is
    off by ``l1`` (and ``weighted`` with position weights).

    The sum is multilinear: its error is ``sum_i exact^(i-1) * e * computed^(t-i)``, and for a
    convolution ``sum x |u * v| <= sum x |u| ||v||_1 + ||u||_1 sum x |v|``, so the weighted error
    is at most ``(t weighted + t (t-1) m l1) g`` with ``m <= e^(s^2/2) = 1 / (a t)`` the summand
    mean and ``g = (1 + l1)^t`` for the masses.  Times ``a``: ``(a t weighted + (t-1) l1) g``."""
    growth = math.exp(t * math.log1p(l1))
    return (a * t * weighted + (t - 1) * l1) * growth


@dataclass(frozen=True)
class AllocationPair:
    """One epoch as a discrete pair ``(p, q)`` (both directions are ``(p, q)`` and ``(q, p)``).

    ``kind == "upper"``: close to a pair that dominates the epoch; ``"lower"``: close to a pair
    the epoch dominates; ``slack`` says how close, per direction, in hockey-stick terms.
    ``support`` holds the sums ``s`` (positions) of the body outcomes (two or one extra outcomes
    follow them).
    """

    kind: str
    p: np.ndarray
    q: np.ndarray
    #: direction -> (A, B): the hockey-stick divergence at eps of any composition containing this
    #: pair moves by at most ``A + e^eps B`` when the computed pair replaces the exact one
    slack: dict
    support: np.ndarray = field(repr=False)

    def direction_pair(self, direction: str, description: str) -> MechanismPairs:
        """One direction (``"remove"``: P vs Q, ``"add"``: Q vs P) as a one-sided
        :class:`~dpplugins.mechanisms.types.MechanismPairs`."""
        first, second = (self.p, self.q) if direction == "remove" else (self.q, self.p)
        return MechanismPairs({"remove": DiscretePair(first, second)}, True, description)


def _normalised(body: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Clip to >= 0; if the total exceeds 1 scale it to 1.  Returns (body, leftover, extra error)."""
    body = np.maximum(body, 0.0)
    total = float(np.sum(body))
    extra = 0.0
    if total > 1.0:
        body = body / total
        extra = total - 1.0
        total = float(np.sum(body))
    return body, max(0.0, 1.0 - total), extra + 4 * _U * len(body) ** 0.5


def _upper_pair(sigma: float, t: int, h: float, cells: int, tail_mass: float,
                memory_limit: int) -> AllocationPair:
    s = 1.0 / sigma
    a = math.exp(-s * s / 2) / t
    summand, weighted = _spread_summand(s, h, cells)
    law = compose_grid_pmfs([(summand, t)], tail_mass=tail_mass, memory_limit=memory_limit,
                            extended=True)
    support = (law.lo + np.arange(len(law.pmf))) * h
    body_error = _window_error(law)
    q_body, q_left, q_extra = _normalised(law.pmf)
    p_body, p_left, p_extra = _normalised(_p_masses(a, support, q_body))
    top = float(support[-1]) if len(support) else 0.0
    construction = t * summand.fp_error  # part of law.fp_error, the rest is the FFT's own
    fft_error = max(body_error - construction, 0.0)
    # one outcome carries the P-mass only (loss +inf, remove), one the Q-mass only (add)
    p = np.concatenate([p_body, [p_left, 0.0]])
    q = np.concatenate([q_body, [0.0, q_left]])
    q_error = 2 * (body_error + q_extra)
    p_error = 2 * (a * top * fft_error + _p_side_error(a, t, summand.fp_error, weighted)
                   + q_extra + p_extra) + 8 * _U
    return AllocationPair("upper", p, q, _pair_slack(p_error, q_error), support)


def _lower_pair(sigma: float, t: int, h: float, cells: int, tail_mass: float,
                memory_limit: int) -> AllocationPair:
    s = 1.0 / sigma
    a = math.exp(-s * s / 2) / t
    plain = _floor_summand(0.0, s, h, cells)
    special_ = _floor_summand(s * s, s, h, cells)
    law_q = compose_grid_pmfs([(plain, t)], tail_mass=tail_mass, memory_limit=memory_limit,
                              extended=True)
    parts = [(plain, t - 1), (special_, 1)] if t > 1 else [(special_, 1)]
    law_p = compose_grid_pmfs(parts, tail_mass=tail_mass, memory_limit=memory_limit,
                              extended=True)
    lo = min(law_q.lo, law_p.lo)
    hi = max(law_q.lo + len(law_q.pmf), law_p.lo + len(law_p.pmf))
    q_raw = np.zeros(hi - lo)
    p_raw = np.zeros(hi - lo)
    q_raw[law_q.lo - lo: law_q.lo - lo + len(law_q.pmf)] = law_q.pmf
    p_raw[law_p.lo - lo: law_p.lo - lo + len(law_p.pmf)] = law_p.pmf
    support = (lo + np.arange(hi - lo)) * h
    top = float(support[-1]) + t * h
    # Errors on the union window.  FFT part: folded mass, mass outside the law's own window and
    # the transform's floating point (law.fp_error minus the construction part t * fp_summand).
    # Construction part (summand masses off by r relative, r = plain.fp_error): l1 t r, and
    # a-weighted (sum a x |error|) by _p_side_error with the summand's weighted error r E[Y; kh].
    fft_q = max(law_q.fp_error - t * plain.fp_error, 0.0) + 2 * (law_q.tail_above
                                                                 + law_q.tail_below)
    growth = math.exp(t * math.log1p(plain.fp_error))
    weighted_summand = plain.fp_error * float(np.sum(np.arange(cells) * h * plain.pmf))
    e_q = fft_q + t * plain.fp_error * growth
    w_q = a * top * fft_q + _p_side_error(a, t, plain.fp_error, weighted_summand)
    e_p = law_p.fp_error + 2 * (law_p.tail_above + law_p.tail_below)
    q_raw = np.maximum(q_raw, 0.0)
    # given the rounded-down sum s, the true sum lies in [s, s + t h), so the exact pair has
    # p / q in [a s, a (s + t h)]: project onto that range (moves p by at most the a-weighted
    # Q-error w_q beyond its own error)
    p_raw = np.clip(p_raw, a * support * q_raw, a * (support + t * h) * q_raw)
    q_body, q_left, q_extra = _normalised(q_raw)
    p_body, p_left, p_extra = _normalised(p_raw)
    p = np.concatenate([p_body, [p_left]])
    q = np.concatenate([q_body, [q_left]])
    q_error = 2 * (e_q + q_extra)
    p_error = 2 * (e_p + w_q + p_extra)
    # remove: on the body p = a x q with x in the cell, so the kernel argument gives
    # |p - p'| + 2 a x |q - q'| <= p_error + 4 w_q; the merged outcome has no such structure and
    # adds e^eps times its Q-error.  add: the generic bound ||Q - Q'|| + e^eps ||P - P'||.
    slack = {"remove": (p_error + 4 * w_q, q_error), "add": (q_error, p_error)}
    return AllocationPair("lower", p, q, slack, support)


def _geometric_grid(s: float, t: int, cells: int, log_y_max: float) -> tuple[np.ndarray, int]:
    """Grid ``0, g_1 < g_2 < ...`` with constant ratio ``e^r``; ``g_1`` is where
    ``P(Y <= g_1) = 1e-20``, the point ``cells`` is ``y_max``, and the grid reaches
    ``t y_max e^(r (levels + 1))`` so that sums spread upward at every level stay on it."""
    log_y_lo = s * float(special.ndtri(1e-20))
    r = (log_y_max - log_y_lo) / (cells - 1)
    levels = 2 * max(1, t.bit_length())
    extra = math.ceil((math.log(t) + r * (levels + 1)) / r) + 1
    logs = log_y_lo + r * np.arange(cells + extra)
    return np.concatenate([[0.0], np.exp(logs)]), cells


def _cells_of(grid: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.clip(np.searchsorted(grid, x, side="right") - 1, 0, len(grid) - 2)


def _spread_onto(grid: np.ndarray, x: np.ndarray, m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Masses ``m`` at ``x`` spread to the two neighbouring grid points with their mean kept;
    also returns how many terms each grid point summed."""
    if len(x) and float(np.max(x)) > grid[-1]:
        raise NumericalError("a partial sum left the geometric grid",
                             "report this as a bug (the grid top is sized for every level)")
    j = _cells_of(grid, x)
    frac = np.clip((x - grid[j]) / (grid[j + 1] - grid[j]), 0.0, 1.0)
    out = np.bincount(j, weights=m * (1.0 - frac), minlength=len(grid))
    out += np.bincount(j + 1, weights=m * frac, minlength=len(grid))
    counts = np.bincount(j, minlength=len(grid)) + np.bincount(j + 1, minlength=len(grid))
    return out, counts


def _contract_onto(grid: np.ndarray, x: np.ndarray, m: np.ndarray
                   ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], np.ndarray]:
    """Masses ``m`` at ``x`` merged per grid cell into one atom at the cell's barycentre.
    Returns ((cell index, mass, moment) of the occupied cells, terms summed per cell)."""
    j = _cells_of(grid, x)
    mass = np.bincount(j, weights=m, minlength=len(grid) - 1)
    moment = np.bincount(j, weights=m * x, minlength=len(grid) - 1)
    counts = np.bincount(j, minlength=len(grid) - 1)
    keep = np.flatnonzero(mass > 0)
    return (keep, mass[keep], moment[keep]), counts


def _pairwise_spread(grid, x1, m1, x2, m2, block: int = 1 << 20):
    """Sum of two independent grid laws, spread onto the grid; (masses, max terms per point)."""
    rows = max(1, block // max(len(x2), 1))
    total = np.zeros(len(grid))
    counts = np.zeros(len(grid), dtype=np.int64)
    for start in range(0, len(x1), rows):
        xs = (x1[start:start + rows, None] + x2[None, :]).ravel()
        ms = (m1[start:start + rows, None] * m2[None, :]).ravel()
        part, c = _spread_onto(grid, xs, ms)
        total += part
        counts += c
    return total, int(counts.max(initial=0))


def _pairwise_contract(grid, x1, m1, x2, m2, block: int = 1 << 20):
    """Sum of two independent laws, merged per cell into barycentres;
    (positions, masses, max terms per cell)."""
    rows = max(1, block // max(len(x2), 1))
    mass = np.zeros(len(grid) - 1)
    moment = np.zeros(len(grid) - 1)
    counts = np.zeros(len(grid) - 1, dtype=np.int64)
    for start in range(0, len(x1), rows):
        xs = (x1[start:start + rows, None] + x2[None, :]).ravel()
        ms = (m1[start:start + rows, None] * m2[None, :]).ravel()
        (cells, bm, bmom), c = _contract_onto(grid, xs, ms)
        mass[cells] += bm
        moment[cells] += bmom
        counts += c
    keep = mass > 0
    return moment[keep] / mass[keep], mass[keep], int(counts.max(initial=0))


@dataclass
class _Law:
    """A discrete law with certified error bounds against the exact law of the same recipe:
    ``rel`` componentwise relative error of masses, ``pos`` relative error of positions,
    ``l1`` absolute l1 error from the spreading fractions."""

    x: np.ndarray
    m: np.ndarray
    rel: float = 0.0
    pos: float = 0.0
    l1: float = 0.0


def _self_sum(law: _Law, t: int, combine) -> _Law:
    """Law of the sum of ``t`` i.i.d. copies by binary powering, ``combine`` reducing each sum."""
    result = None
    base = law
    while t:
        if t & 1:
            result = base if result is None else combine(result, base)
        t >>= 1
        if t:
            base = combine(base, base)
    return result


def _geometric_pairs(sigma: float, t: int, cells: int, log_y_max: float, lower: bool = True
                     ) -> tuple[AllocationPair, AllocationPair | None]:
    """Both pairs by direct summation on a geometric grid (for few steps per epoch or heavy
    tails, where a uniform grid would need too many cells).

    Upper: every partial sum is spread to its two neighbouring grid points with its mean kept
    (convex order up; sums of independent convex-order dominating variables dominate).  Lower:
    every partial sum is merged per grid cell into its barycentre (convex order down; the pair
    of a convex-order smaller law is a post-processing of the true pair, module docstring).
    Summands above ``y_max`` are dropped (lower) or moved to the extra outcomes (upper).

    Rounding is tracked per sum (:class:`_Law`): a sum of ``n`` non-negative terms has relative
    error at most ``(n - 1) u`` (Higham 2002, Sec. 4.2), products add ``u``; a spreading fraction
    ``(x - g_j) / (g_(j+1) - g_j)`` is off by at most ``5 u / (1 - e^-r)`` absolutely (ratio
    ``e^r`` of the grid), which moves at most that share of the mass between neighbours."""
    s = 1.0 / sigma
    a = math.exp(-s * s / 2) / t
    grid, top_cell = _geometric_grid(s, t, cells, log_y_max)
    ratio_gap = -math.expm1(-math.log(grid[2] / grid[1]))  # 1 - e^-r
    with np.errstate(divide="ignore"):
        log_edges = np.log(grid[: top_cell + 1])
    lo_e, hi_e = log_edges[:-1], log_edges[1:]
    mass = Gaussian(0.0, s).interval_mass(lo_e, hi_e)
    partial = math.exp(s * s / 2) * Gaussian(s * s, s).interval_mass(lo_e, hi_e)
    width = grid[1: top_cell + 1] - grid[:top_cell]
    up = np.clip((partial - grid[:top_cell] * mass) / width, 0.0, mass)
    # relative accuracy r of masses and partial means: |error of up| <= r (g_j+1 + g_j) m / width
    cell_errors = _REL_MASS * (2 * (grid[1: top_cell + 1] + grid[:top_cell]) / width + 1) * mass
    summand_error = float(np.sum(cell_errors)) + 4 * _U
    summand_weighted = float(np.sum(grid[1: top_cell + 1] * cell_errors)) + 4 * _U * grid[top_cell]
    spread = np.zeros(len(grid))
    spread[:top_cell] += mass - up
    spread[1: top_cell + 1] += up
    keep = mass > 0
    # barycentres: masses and partial means relatively accurate to _REL_MASS
    bary = _Law(partial[keep] / mass[keep], mass[keep], rel=_REL_MASS, pos=2 * _REL_MASS + _U)
    frac_error = 5 * _U / ratio_gap

    def combine_up(u: _Law, v: _Law) -> _Law:
        iu, iv = np.flatnonzero(u.m > 0), np.flatnonzero(v.m > 0)
        out, n = _pairwise_spread(grid, u.x[iu], u.m[iu], v.x[iv], v.m[iv])
        grow = (1 + u.rel) * (1 + v.rel)
        return _Law(grid, out, rel=u.rel + v.rel + u.rel * v.rel + (n + 4) * _U,
                    l1=(u.l1 + v.l1 + frac_error) * grow)

    def combine_down(u: _Law, v: _Law) -> _Law:
        x, m, n = _pairwise_contract(grid, u.x, u.m, v.x, v.m)
        rel = u.rel + v.rel + u.rel * v.rel + (n + 2) * _U
        moment_rel = rel + max(u.pos, v.pos) + 3 * _U
        return _Law(x, m, rel=rel, pos=rel + moment_rel + 2 * _U)

    up_law = _self_sum(_Law(grid, spread), t, combine_up)
    # upper pair: body on the grid, extra outcomes with only P- or only Q-mass
    q_body, q_left, q_extra = _normalised(up_law.m)
    p_body, p_left, p_extra = _normalised(_p_masses(a, grid, q_body))
    growth = math.exp(t * math.log1p(summand_error))
    q_error = 2 * (t * summand_error * growth + up_law.rel + up_law.l1 + q_extra)
    # the a-weighted error of a move between neighbours is at most e^r times its mass
    p_error = 2 * (_p_side_error(a, t, summand_error, summand_weighted) + up_law.rel
                   + up_law.l1 / (1 - ratio_gap) + q_extra + p_extra) + 8 * _U
    upper = AllocationPair(
        "upper", np.concatenate([p_body, [p_left, 0.0]]), np.concatenate([q_body, [0.0, q_left]]),
        _pair_slack(p_error, q_error), grid)
    if not lower:
        return upper, None
    dn_law = _self_sum(bary, t, combine_down)
    # lower pair: barycentres, and one merged outcome for everything truncated
    q_low, q_rest, q_extra = _normalised(dn_law.m)
    p_low, p_rest, p_extra = _normalised(a * dn_law.x * q_low)
    # p = a x q with masses off by `rel` and positions by `pos` (relative): the kernel argument
    # bounds both directions by (rel + pos)(1 + pos); the merged outcome adds e^eps times the
    # error of its other mass
    e_m, e_x = dn_law.rel, dn_law.pos
    body = (e_m + e_x) * (1 + e_x)
    lower = AllocationPair(
        "lower", np.concatenate([p_low, [p_rest]]), np.concatenate([q_low, [q_rest]]),
        {"remove": (2 * (body + p_extra + q_extra), e_m + q_extra),
         "add": (2 * (body + p_extra + q_extra), body + p_extra)},
        dn_law.x)
    return upper, lower


#: the FFT route is used when a uniform summand grid needs at most this many cells
FFT_CELL_BUDGET = 3_000_000


def allocation_pairs(noise_multiplier: float, steps_per_epoch: int, *, method: str = "auto",
                     summand_step: float | None = None, geometric_cells: int = 2000,
                     truncation_mass: float = 1e-14, tail_mass: float = 1e-16,
                     memory_limit: int = 1 << 30, lower: bool = True
                     ) -> tuple[AllocationPair, AllocationPair | None]:
    """The (dominating, dominated) discrete pairs of one random-allocation epoch.

    ``method="fft"`` sums the summands on a uniform grid of step ``summand_step`` (default
    :func:`default_summand_step`) by FFT powers; ``"geometric"`` sums them directly on a
    geometric grid of ``geometric_cells`` cells up to ``y_max`` (cost ~ cells^2 log t, no FFT);
    ``"auto"`` takes the FFT for ``t >= 32`` when its grid has at most ``FFT_CELL_BUDGET`` cells.
    Summands above ``y_max`` (where ``P(e^G' > y_max) = truncation_mass`` for the summand that
    carries the example) are truncated; ``tail_mass`` is the FFT window allowance.
    Raises :class:`NumericalError` if the grid would not fit in ``memory_limit`` bytes.
    ``lower=False`` skips the dominated pair (returned as ``None``).
    """
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    truncation_mass = check_open_unit("truncation_mass", truncation_mass)
    if method not in ("auto", "fft", "geometric"):
        raise ParameterError("method", method, "'auto', 'fft' or 'geometric'")
    geometric_cells = check_count("geometric_cells", geometric_cells, minimum=16)
    h = (default_summand_step(sigma, t) if summand_step is None
         else check_positive("summand_step", summand_step))
    s = 1.0 / sigma
    z = -special.ndtri(truncation_mass)
    log_y_max = s * s + s * z
    if log_y_max > 700:
        raise NumericalError(
            f"noise_multiplier={sigma:g} is too small for random-allocation accounting "
            "(the summands' range overflows)", "use a larger noise multiplier")
    cells = math.ceil(math.exp(log_y_max) / h)
    if method == "auto":
        method = "fft" if t >= 32 and cells <= FFT_CELL_BUDGET else "geometric"
    if method == "geometric":
        if 48 * geometric_cells * (geometric_cells + 64) > memory_limit:
            raise NumericalError(f"geometric_cells={geometric_cells} needs more memory than "
                                 f"memory_limit={memory_limit}", "use fewer cells or raise "
                                 "memory_limit")
        return _geometric_pairs(sigma, t, geometric_cells, log_y_max, lower)
    max_cells = memory_limit // (8 * 6)
    if cells > max_cells:
        raise NumericalError(
            f"random allocation at noise_multiplier={sigma:g}, steps_per_epoch={t} needs "
            f"{float(cells):.3g} grid cells for one summand (memory limit allows {max_cells:,})",
            "use method='geometric', a larger summand_step or truncation_mass, or raise "
            "memory_limit")
    return (_upper_pair(sigma, t, h, cells, tail_mass, memory_limit),
            _lower_pair(sigma, t, h, cells, tail_mass, memory_limit) if lower else None)


_Slack = tuple  # (A, B): error at most A + e^eps B


def _slack_value(slack: _Slack, epsilon: float) -> float:
    a, b = slack
    return a + (math.exp(min(epsilon, 700.0)) * b if b else 0.0)


class AllocationPLD:
    """Composed PLD of random-allocation epochs, one per direction, with certified slacks.

    ``pld[d]`` composes the computed pairs of direction ``d``; ``upper_slack[d]`` /
    ``lower_slack[d]`` are ``(A, B)`` with the true divergence of the exact pairs within
    ``A + e^eps B`` of the computed one (summed over epochs).  Queries return
    :class:`~dpplugins.pld.Bounds` for the maximum over both directions.
    """

    def __init__(self, plds: dict, upper_slack: dict, lower_slack: dict, *,
                 has_lower: bool = True) -> None:
        self.plds = plds
        self.upper_slack = upper_slack
        self.lower_slack = lower_slack
        #: False when the PLDs were built from the dominating pair only (lower bounds are 0)
        self.has_lower = has_lower

    @staticmethod
    def _add(a: dict, b: dict) -> dict:
        return {d: (a[d][0] + b[d][0], a[d][1] + b[d][1]) for d in a}

    def compose(self, other: "AllocationPLD") -> "AllocationPLD":
        """Both compositions, slacks added."""
        return AllocationPLD({d: self.plds[d].compose(other.plds[d]) for d in self.plds},
                             self._add(self.upper_slack, other.upper_slack),
                             self._add(self.lower_slack, other.lower_slack),
                             has_lower=self.has_lower and other.has_lower)

    def self_compose(self, count: int) -> "AllocationPLD":
        """``count`` repetitions, slacks times ``count``."""
        count = check_count("count", count, minimum=1)
        scale = lambda sl: {d: (count * a, count * b) for d, (a, b) in sl.items()}  # noqa: E731
        return AllocationPLD({d: p.self_compose(count) for d, p in self.plds.items()},
                             scale(self.upper_slack), scale(self.lower_slack),
                             has_lower=self.has_lower)

    def slack_at(self, epsilon: float) -> float:
        """The largest slack (upper plus lower, over both directions) at ``epsilon``."""
        return max(_slack_value(self.upper_slack[d], epsilon)
                   + _slack_value(self.lower_slack[d], epsilon) for d in self.plds)

    def _delta(self, direction: str, epsilon: float) -> Bounds:
        b = self.plds[direction].delta_for_epsilon(epsilon)
        if not self.has_lower:
            b = Bounds(0.0, b.upper)
        return Bounds(max(0.0, b.lower - _slack_value(self.lower_slack[direction], epsilon)),
                      min(1.0, b.upper + _slack_value(self.upper_slack[direction], epsilon)))

    def delta_for_epsilon(self, epsilon: float) -> Bounds:
        """Certified bounds on ``delta(epsilon)`` (the maximum over both directions)."""
        epsilon = check_nonnegative("epsilon", epsilon)
        per = [self._delta(d, epsilon) for d in self.plds]
        return Bounds(max(b.lower for b in per), max(b.upper for b in per))

    def _epsilon_upper(self, direction: str, delta: float) -> float:
        pld, slack = self.plds[direction], self.upper_slack[direction]
        eps = 0.0
        for _ in range(60):
            target = delta - _slack_value(slack, eps)
            if target <= delta / 2:
                raise NumericalError(
                    f"the certified numerical slack ({_slack_value(slack, eps):.3g}) is not small "
                    f"next to delta={delta:g}",
                    "ask for a larger delta, or use more geometric_cells / a finer summand_step")
            eps = max(eps, pld.epsilon_for_delta(target, lower=False).upper)
            if self._delta(direction, eps).upper <= delta:
                return eps
        raise NumericalError(f"epsilon at delta={delta:g} did not settle under the numerical "
                             "slack", "ask for a larger delta or refine the grids")

    def _epsilon_lower(self, direction: str, delta: float, upper: float) -> float:
        pld = self.plds[direction]
        if not (self.has_lower and pld.has_lower_bound):
            return 0.0
        # the slack grows with eps and the answer is <= upper: charging slack(upper) is safe
        target = delta + _slack_value(self.lower_slack[direction], upper)
        return pld.epsilon_for_delta(target).lower if target < 1.0 else 0.0

    def epsilon_for_delta(self, delta: float) -> Bounds:
        """Certified bounds on the smallest epsilon with ``delta(epsilon) <= delta``: the
        maximum over directions of each direction's bounds."""
        delta = check_open_unit("delta", delta)
        uppers = {d: self._epsilon_upper(d, delta) for d in self.plds}
        upper = max(uppers.values())
        lower = max(self._epsilon_lower(d, delta, uppers[d]) for d in self.plds)
        return Bounds(min(lower, upper), upper)


def _epoch_pld(sigma: float, t: int, h_loss: float, *, method: str, summand_step,
               geometric_cells: int, tail_mass: float, memory_limit: int,
               lower: bool = True) -> AllocationPLD:
    description = f"random allocation, sigma={sigma:g}, {t} steps/epoch"
    if t == 1:
        one = PrivacyLossDistribution.from_gaussian(sigma, value_discretization_interval=h_loss,
                                                    tail_mass=tail_mass, memory_limit=memory_limit)
        zero = {d: (0.0, 0.0) for d in ("remove", "add")}
        return AllocationPLD({"remove": one, "add": one}, zero, dict(zero))
    upper, dominated = allocation_pairs(sigma, t, method=method, summand_step=summand_step,
                                        geometric_cells=geometric_cells,
                                        memory_limit=memory_limit, lower=lower)
    # without the dominated pair the upper one stands in for it; its "lower" bounds are unused
    stand_in = dominated if dominated is not None else upper
    plds = {d: PrivacyLossDistribution.from_bracketing_pairs(
        upper.direction_pair(d, f"{description} ({d})"),
        stand_in.direction_pair(d, f"{description} ({d})"),
        value_discretization_interval=h_loss, tail_mass=tail_mass, memory_limit=memory_limit)
        for d in ("remove", "add")}
    return AllocationPLD(plds, dict(upper.slack), dict(stand_in.slack),
                         has_lower=dominated is not None)


def default_loss_step(noise_multiplier: float, steps_per_epoch: int) -> float:
    """Default PLD grid step: a 40th of :func:`epoch_loss_scale`, at most 1e-2."""
    return min(epoch_loss_scale(noise_multiplier, steps_per_epoch) / 40.0, 1e-2)


def random_allocation_pld(noise_multiplier: float, steps_per_epoch: int, epochs: int = 1, *,
                          value_discretization_interval: float | None = None,
                          method: str = "auto", summand_step: float | None = None,
                          geometric_cells: int = 2000, tail_mass: float = 1e-15,
                          memory_limit: int = 1 << 30, lower: bool = True) -> AllocationPLD:
    """Certified PLD of ``epochs`` epochs of random-allocation DP-SGD (add/remove neighbours).

    One epoch with one step (``t = 1``) is exactly the Gaussian mechanism with sensitivity 1 and
    is built as such.  ``value_discretization_interval`` is the loss grid step of the PLD
    (default :func:`default_loss_step`); the other options go to :func:`allocation_pairs`.
    ``lower=False`` builds only what the upper bound needs (lower bounds are then reported as 0).
    """
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    epochs = check_count("epochs", epochs, minimum=1)
    h_loss = (default_loss_step(sigma, t) if value_discretization_interval is None
              else check_positive("value_discretization_interval", value_discretization_interval))
    one = _epoch_pld(sigma, t, h_loss, method=method, summand_step=summand_step,
                     geometric_cells=geometric_cells, tail_mass=tail_mass,
                     memory_limit=memory_limit, lower=lower)
    return one.self_compose(epochs)


class MonteCarloEstimate(NamedTuple):
    """A Monte Carlo *estimate* of delta(epsilon) -- not a certified bound.

    ``upper_confidence`` is the estimate plus ``z`` standard errors (normal approximation), which
    is what a 99.9 % one-sided confidence statement would use; it is still an estimate.
    """

    estimate: float
    standard_error: float
    upper_confidence: float
    samples: int
    direction: str


def _log_sum_exp_rows(g: np.ndarray) -> np.ndarray:
    return special.logsumexp(g, axis=-1)


def monte_carlo_delta(noise_multiplier: float, steps_per_epoch: int, epsilon: float, *,
                      epochs: int = 1, direction: str = "remove", samples: int = 100_000,
                      tilt: float = 0.0, seed: int | None = None, z: float = 3.09,
                      chunk: int = 4096) -> MonteCarloEstimate:
    """Importance-sampling estimate of one direction's ``delta(epsilon)`` (an *estimate*).

    Draws the Gaussian outputs of the dominating pair directly (independent of the FFT code):
    ``remove`` estimates ``E_P[(1 - e^(eps - L))_+]``, ``add`` estimates
    ``E_Q[(1 - e^(eps + L))_+]`` with ``L = log(a S)``, in the scaled coordinates
    ``g_j = x_j / sigma^2`` (``N(0, s^2)`` under Q, ``s = 1/sigma``; under ``P_j`` coordinate j has
    mean ``s^2``).  For ``remove`` with ``tilt > 0`` the proposal is the mixture
    ``R = (1/t) sum_j R_j`` in which coordinate j has mean ``s^2 + tilt * s`` (a mixture of mean
    shifts, in the spirit of the importance sampling of Chua et al. 2025, Sec. 5); by symmetry we
    shift coordinate 0 and weight by ``dP/dR = sum_j e^(g_j - s^2/2) / sum_j
    e^((m g_j - m^2/2) / s^2)``, which stays bounded where the loss is large.  ``tilt = 0`` is
    plain Monte Carlo.  ``upper_confidence`` adds ``z`` standard errors.
    """
    sigma, t = _check_protocol(noise_multiplier, steps_per_epoch)
    epsilon = check_nonnegative("epsilon", epsilon)
    epochs = check_count("epochs", epochs, minimum=1)
    samples = check_count("samples", samples, minimum=2)
    tilt = check_nonnegative("tilt", tilt)
    if direction not in ("remove", "add"):
        raise ParameterError("direction", direction, "'remove' or 'add'")
    rng = np.random.default_rng(seed)
    s = 1.0 / sigma
    log_a = -s * s / 2 - math.log(t)
    m = s * s + tilt * s  # proposal mean of the shifted coordinate
    total, total_sq, done = 0.0, 0.0, 0
    while done < samples:
        n = min(chunk, samples - done)
        loss = np.zeros(n)
        log_weight = np.zeros(n)
        for _ in range(epochs):
            g = rng.normal(0.0, s, size=(n, t))
            if direction == "remove":
                g[:, 0] += m if tilt > 0 else s * s  # the coordinate that carries the example
                if tilt > 0:
                    log_weight += (_log_sum_exp_rows(g - s * s / 2)
                                   - _log_sum_exp_rows((m * g - m * m / 2) / (s * s)))
            loss += _log_sum_exp_rows(g) + log_a
        signed = loss if direction == "remove" else -loss
        value = -np.expm1(np.minimum(epsilon - signed, 0.0)) * np.exp(log_weight)
        total += float(np.sum(value))
        total_sq += float(np.sum(value * value))
        done += n
    mean = total / done
    var = max(total_sq / done - mean * mean, 0.0)
    se = math.sqrt(var / done)
    return MonteCarloEstimate(mean, se, mean + z * se, done, direction)
