"""A certified lower bound for the shuffled Laplace mechanism from its full likelihood ratio.

The dataset pair.  ``n`` users hold ``0``; in the neighbouring dataset the first holds ``1``.
Each reports ``x + Lap(1/eps0)`` (Dwork, McSherry, Nissim, Smith, TCC 2006; input in ``[0,
1]``, so eps0-DP) and the shuffler outputs the multiset of reports.  With ``f_x`` the density
of one report and ``rho = f_1 / f_0``, the multiset's likelihood ratio is the average ``L = (1/n)
sum rho(y_i)`` (the ``n!`` orders of the second dataset each put the ``1`` on one position), so
with ``P`` the law of the output of the all-zero dataset and ``Q`` of the other ::

    delta_(P || Q)(eps) = E_P[(1 - e^eps L)_+] = (e^eps / n) E[(sum_i (e^(-eps) - rho_i))_+],

``rho_i = rho(y_i)`` i.i.d. under ``f_0`` (our derivation, from the hockey-stick divergence
``sup_S P(S) - e^eps Q(S) = E_Q[(dP/dQ - e^eps)_+]``).  Every value of it is a lower bound on
the shuffled mechanism's delta(eps).  This direction was the larger at each of the ten points
we computed (eps0 from 0.5 to 8, numerically checked): the other, ``E_Q[(L - e^eps)_+]``, was
from 0.8 times it (eps0 = 0.5) down to 1e-8 times (eps0 = 4, n = 1000).  The
likelihood ratio is the optimal statistic for this pair (Neyman-Pearson), so no test of the
same pair certifies more; the three-category tests of
:mod:`~dpplugins.amplification.shuffle_model_families` are post-processings of it.

The law of ``rho``.  ``rho(y) = exp(eps0 (|y| - |y - 1|))``: with ``E = e^eps0`` and ``gamma =
e^(-eps0/2)`` it has an atom ``1/2`` at ``1/E`` (``y <= 0``), an atom ``gamma^2 / 2`` at ``E``
(``y >= 1``) and density ``(gamma/4) r^(-3/2)`` on ``(1/E, E)`` (``y = (1 + log(r)/eps0)/2``,
``f_0(y) = (eps0/2) e^(-eps0 y)``; our derivation).  On a cell ``(a, b]`` of the density the
mass is ``(gamma/2)(a^(-1/2) - b^(-1/2))`` and the mean of ``rho`` is ``sqrt(a b)``.

The lattice (our derivation).  A lower bound needs a lattice law *below* ``G = c - rho`` (``c =
e^(-eps)``) in increasing convex order: ``(sum G_i)_+`` is increasing and convex in each
``G_i``, and the order is closed under sums of independent variables (Shaked and Shanthikumar
2007, *Stochastic Orders*, Thm. 4.A.15), so the expectation can only drop.  Replacing ``rho``
on a cell by its mean (a conditional expectation: below in convex order, by Jensen) and then
moving that mean *up* (``G`` down, below in the usual order) gives such a law.  With spacing
``s`` the cells are:

* **bottom**: the atom ``1/E`` and the density on ``(1/E, 1/E + 2s]``, mean ``gamma u^2 / (2u -
  gamma)`` (``u^2`` the cut, mass ``1 - gamma/(2u)``); its mean, moved up by ``1e-12`` of
  itself, is the *anchor*, lattice point 0 (the lattice ``anchor + s i`` is chosen by it, and
  ``G`` has the offset ``c - anchor``, so the anchor costs nothing).  Merging the steep part of
  the density into the atom keeps its mean exactly; rounding it up to the next point instead
  cost up to ``s/2`` per report (4 % of epsilon at eps0 = 8, n = 10^5);
* **middle**: the density on ``(T - s/2, T + s/2]`` (cut at the two ends) goes to ``T = anchor
  + s i`` when its mean ``sqrt(lo hi)`` is at most ``T`` -- always for a whole cell, since
  ``(T - s/2)(T + s/2) < T^2`` -- else to ``T + s``;
* **top**: the atom ``E`` and the density above a cut ``a``, mean ``2 sqrt(a)/gamma - a`` (mass
  ``gamma / (2 sqrt(a))``), with ``a`` solved so that the mean is the largest point below ``E -
  s``.  The lattice always reaches ``E``: the spacing is at least ``(E - 1/E) /``
  :data:`MAX_POINTS` (so at eps0 above about 12 the positive part of ``G`` is a few points
  or less at small n, and the bound is weak there; the pairs of
  :mod:`~dpplugins.amplification.shuffle_model_families` answer).

The cost is second order in ``s`` (``T - sqrt(T^2 - s^2/4)`` per unit mass in the middle) and
nothing at the two atoms, whose masses are large.  Masses are rounded down; floating-point
error in the points (at most ``8 u E``) is absorbed by computing at ``c`` lowered by ``32 u (E +
1)``.  The sum is bounded from below by
:func:`~dpplugins.amplification.blanket_lattice.positive_part_lower`.

The spacing is ``1/16`` of the standard deviation of ``rho`` and ``1/64`` of ``c - 1/E`` (the
range of the positive part of ``G``), coarsened until the FFT fits
:data:`~dpplugins.amplification.blanket_lattice.MAX_FFT_SIZE` (at eps0 = 8 and n = 10^6 it is
34 times coarser, and the bound is looser there).

How it was checked (``tests/test_laplace_full_statistic.py``): the stop-loss transform of the
lattice law against quadrature of the Laplace density at 80 thresholds (never above, within
``2 s``); two reports against nested quadrature (within 3 %); Monte Carlo (``n`` = 50 to 400,
within 5 standard errors and 2 %); the FFT against direct convolution.  At ``n = 10^4`` and
``10^5`` (eps0 = 8) it is 0.4 % and 0.8 % below an independent uncertified FFT of a fine
mean-preserving discretisation (numerically checked, not in the tests: 20 s per point).

Example (eps0 = 8, n = 10^4: delta(2.66) is certified above 1e-6, so epsilon(1e-6) > 2.66;
:func:`epsilon_lower` finds 2.674, against the upper bound 3.247 and the three-category
tests' 2.413)::

    >>> delta_lower(8.0, 10_000, 2.66) > 1e-6
    True
"""

from __future__ import annotations

import math

import numpy as np

from dpplugins.amplification.blanket_lattice import (MAX_LATTICE, LatticeLaw,
                                                     positive_part_lower_fitted)
from dpplugins.amplification.shuffle_model import UNIT_ROUNDOFF
from dpplugins.errors import ParameterError, check_count, check_open_unit, check_positive

__all__ = ["laplace_ratio_law_lower", "delta_lower", "epsilon_lower", "MAX_POINTS"]

_U = UNIT_ROUNDOFF
#: the most lattice points of ``rho`` (its spacing is at least ``(E - 1/E) / MAX_POINTS``)
MAX_POINTS = MAX_LATTICE - 16


def _check_eps0(eps0) -> float:
    eps0 = check_positive("eps0", eps0)
    if eps0 > 300:
        raise ParameterError("eps0", eps0, "<= 300 (e^eps0 within floating point)")
    return eps0


def _cells(lo: np.ndarray, hi: np.ndarray, gamma: float) -> np.ndarray:
    """Masses ``(gamma/2)(lo^(-1/2) - hi^(-1/2))`` of the density cells ``(lo, hi]``, in the
    cancellation-free form ``(gamma/2)(hi - lo) / (sqrt(lo hi) (sqrt(lo) + sqrt(hi)))``, rounded
    down (about ten correctly rounded operations, and ``gamma`` within 2 u)."""
    sl, sh = np.sqrt(lo), np.sqrt(hi)
    return 0.5 * gamma * (hi - lo) / (sl * sh * (sl + sh)) * (1 - 32 * _U)


def _bottom_mean(u: float, gamma: float) -> float:
    """Mean of ``rho`` on the atom ``1/E`` and the density on ``(1/E, u^2]``: ``gamma u^2 /
    (2u - gamma)`` (module docstring; mass ``1 - gamma/(2u)``)."""
    return gamma * u * u / (2 * u - gamma)


def _top_cut(target: float, gamma: float) -> float:
    """The cut ``a`` at which the density on ``(a, E)`` and the atom at ``E`` have mean
    ``target``: ``2 sqrt(a)/gamma - a = target``, ``sqrt(a) = target gamma / (1 + sqrt(1 -
    target gamma^2))`` (module docstring; mass ``gamma / (2 sqrt(a))``)."""
    root = target * gamma / (1 + math.sqrt(max(1 - target * gamma * gamma, 0.0)))
    return root * root


def laplace_ratio_law_lower(eps0: float, epsilon: float, spacing: float) -> LatticeLaw:
    """Lattice law (``rounded == "down"``, spacing ``spacing``) below ``G = e^(-eps) - rho``
    in increasing convex order (module docstring).

    Example (the masses sum to at most 1)::

        >>> law = laplace_ratio_law_lower(2.0, 0.5, 0.01)
        >>> law.rounded, 0.999 < float(law.masses.sum()) <= 1.0
        ('down', True)
    """
    eps0 = _check_eps0(eps0)
    s = check_positive("spacing", spacing)
    if not math.isfinite(epsilon) or epsilon < 0:
        raise ParameterError("epsilon", epsilon, ">= 0 and finite")
    a0, big, gamma = math.exp(-eps0), math.exp(eps0), math.exp(-eps0 / 2)
    if not s >= (big - a0) / MAX_POINTS:
        raise ParameterError("spacing", s, f">= (e^eps0 - e^-eps0) / {MAX_POINTS} = "
                             f"{(big - a0) / MAX_POINTS:.6g} (at most {MAX_POINTS:,} lattice "
                             "points)")
    # the bottom cell: the atom 1/E and the density on (1/E, 1/E + 2s]; its mean, moved up by
    # 1e-12 of itself, is the lattice point 0 (the anchor)
    cut_lo = a0 + 2 * s
    if cut_lo >= big:
        raise ParameterError("spacing", s, f"< (e^eps0 - e^-eps0) / 2 = {(big - a0) / 2:.6g}")
    u_lo = math.sqrt(cut_lo)
    anchor = _bottom_mean(u_lo, gamma) * (1 + 1e-12)
    bottom_mass = (1 - gamma / (2 * u_lo)) * (1 - 32 * _U)
    # the top cell: the atom E and the density above a cut, its mean the lattice point
    # ``last`` (the largest below E - s)
    # (the cut grows with the mean: where the largest mean allowed puts it at or below the
    # bottom cell -- a range of a few points -- no smaller
    # mean does better, and one cell holds everything above the bottom cell; a search down
    # the points cost 4 million steps there)
    last = max(min(math.floor((big - s - anchor) / s), MAX_POINTS - 4), 1)
    cut_hi = _top_cut(anchor + s * last, gamma) * (1 - 1e-10)
    if not cut_hi > cut_lo:
        cut_hi = cut_lo
    top_mean = 2 * math.sqrt(cut_hi) / gamma - cut_hi
    top_index = max(math.ceil((top_mean * (1 + 1e-12) - anchor) / s), 1)
    top_mass = 0.5 * gamma / math.sqrt(cut_hi) * (1 - 32 * _U)
    # the density on (cut_lo, cut_hi]: cells (T - s/2, T + s/2] of the points T = anchor + s i
    # (cut at both ends), each at T where its mean sqrt(lo hi) is at most T, else at T + s
    masses = np.zeros(top_index + 2)
    masses[0] = bottom_mass
    masses[top_index] += top_mass
    if cut_hi > cut_lo:
        first = max(math.floor((cut_lo - anchor) / s + 0.5), 0)
        stop = math.floor((cut_hi - anchor) / s + 0.5)
        i = np.arange(first, stop + 1, dtype=np.int64)
        lo = np.maximum(anchor + s * (i - 0.5), cut_lo)
        hi = np.minimum(anchor + s * (i + 0.5), cut_hi)
        ok = hi > lo
        i, lo, hi = i[ok], lo[ok], hi[ok]
        point = anchor + s * i
        up = np.sqrt(lo * hi) * (1 + 1e-12) > point
        np.add.at(masses, i + up, _cells(lo, hi, gamma))
    while masses[-1] == 0 and len(masses) > 1:
        masses = masses[:-1]
    # G = c - rho = (c - anchor) - s i: offset in [0, s), k = m - i; c lowered so that every
    # floating-point error of the points (at most 8 u E) is on the safe side
    c = math.exp(-epsilon) * (1 - 4 * _U) - 32 * _U * (big + 1)
    m = math.floor((c - anchor) / s)
    offset = (c - anchor) - s * m
    masses = masses[::-1].copy()
    masses.setflags(write=False)
    return LatticeLaw(s, m - (len(masses) - 1), masses, offset=offset, rounded="down")


def _spacing(eps0: float, epsilon: float) -> float:
    """A lattice spacing for ``rho``: 1/16 of its standard deviation and 1/64 of ``c - 1/E``
    (the range of the positive part of ``G``)."""
    a0, big, gamma = math.exp(-eps0), math.exp(eps0), math.exp(-eps0 / 2)
    second = 0.5 * a0 * a0 + 0.5 * big + gamma / 6 * (big ** 1.5 - a0 ** 1.5)
    sd = math.sqrt(max(second - 1.0, 1e-300))
    return max(min(sd / 16, (math.exp(-epsilon) - a0) / 64), (big - a0) / (MAX_POINTS - 8))


def delta_lower(eps0: float, n: int, epsilon: float) -> float:
    """Certified lower bound on delta(eps) of ``n`` shuffled reports of the Laplace mechanism on
    ``[0, 1]`` (scale ``1/eps0``): the divergence of the all-zero dataset from its neighbour
    with one ``1`` (module docstring); 0 where no lattice fits the FFT.

    Example::

        >>> 0 < delta_lower(8.0, 10_000, 2.7) <= 1
        True
    """
    eps0 = _check_eps0(eps0)
    n = check_count("n", n, minimum=1)
    if not math.isfinite(epsilon) or epsilon < 0:
        raise ParameterError("epsilon", epsilon, ">= 0 and finite")
    if epsilon >= eps0 or math.exp(-epsilon) <= math.exp(-eps0) * (1 + 1e-9):
        return 0.0
    try:   # the finest lattice that fits the FFT (a coarser one costs second-order terms only,
        # module docstring)
        value = positive_part_lower_fitted(
            lambda s: laplace_ratio_law_lower(eps0, epsilon, s), n, _spacing(eps0, epsilon))
    except ParameterError:     # no lattice law at any spacing tried: nothing certified
        return 0.0
    if value is None:
        return 0.0
    return min(math.exp(epsilon) * (1 - 4 * _U) * value, 1.0)


def epsilon_lower(eps0: float, n: int, delta: float, *, violated: float | None = None,
                  hi: float | None = None) -> float:
    """Certified lower bound on epsilon(delta) (:func:`delta_lower` and
    :func:`~dpplugins.numerics.largest_violating_epsilon`, relative 2e-3 from below): every
    point it returns had ``delta_lower > delta`` (or is ``violated``, a point the caller knows
    to have it, or 0).  ``hi``: a known upper bound (default eps0)."""
    from dpplugins.numerics import largest_violating_epsilon

    eps0 = _check_eps0(eps0)
    n = check_count("n", n, minimum=1)
    delta = check_open_unit("delta", delta)    # (delta = -1 answered eps0)
    top = eps0 if hi is None else min(float(hi), eps0)
    return largest_violating_epsilon(lambda e: delta_lower(eps0, n, e), delta, top,
                                     rtol=2e-3, violated=violated, secant=True)
