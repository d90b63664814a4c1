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
moving that mean *up* (``G`` down, below in the usual order) gives such a law.  The cells are
chosen so that their means *are* lattice points (up to 1e-11 of themselves, below), so only the
spread inside each cell is lost, a cost of order ``s^2/12`` in the variance and nothing in the
mean.  With spacing ``s``:

* **bottom**: the atom ``1/E`` and the density on ``(1/E, w]``, mean ``gamma u^2 / (2u -
  gamma)`` (``u^2 = w``, mass ``1 - gamma/(2u)``); its mean, moved up by ``1e-12`` of itself,
  is the *anchor*, lattice point 0 (the lattice ``anchor + s i`` is chosen by it, and ``G`` has
  the offset ``c - anchor``, so the anchor costs nothing).  The cut ``w`` starts at ``1/E +
  2s`` and moves up to the lowest edge of the middle cells (below);
* **top**: the atom ``E`` alone, at the lattice point ``top_index``: ``s`` is the spacing
  nearest the one asked for that puts a point at ``E`` (moved up by 1e-12 of itself).  Putting
  it on the largest point below ``E - s`` together with the density near it (as this module did
  before) lost the atom's spread over ``s`` or more: at eps0 = 0.5 and a spacing of ``sd/19``,
  1.6 % of the variance of ``rho`` and 6 % of delta at n = 10^6;
* **middle**: the density between, in cells ``(a, b]`` whose mean ``sqrt(a b)`` is a lattice
  point: going down from ``E``, the edge below ``b`` is ``T^2 / b`` with ``T`` the next point
  below ``b`` (:func:`_mean_matching_edges`; the recursion contracts towards cells of width
  about ``s`` around their points).  Where it reaches the bottom, the remaining cell ``(w,
  b_1]`` would go to the point above its mean; instead ``w`` moves up to ``b_1`` (the anchor
  then moves up a little, and the edges with it) and the construction is repeated, a few
  times, until that cell is a millionth of ``s`` or less.  Every cell goes to the lattice point
  at or above its computed mean (times ``1 + 1e-12``), so any edges give a valid law; these
  only make it tight.  The cells used to be ``(T - s/2, T + s/2]``, whose means lie
  ``T - sqrt(T^2 - s^2/4)`` below ``T``, a bias that forced a fine lattice: on the issue grid
  (n from 10^3 to 10^6, eps0 from 0.5 to 8, delta 1e-6 and 1e-8) the lower bounds on epsilon
  with the old cells and top cell were 0.02 % to 4.7 % lower (the most at eps0 = 4, n = 10^6;
  there delta was 42 % below the pair's value, now 0.15 %).

The lattice always reaches ``E``: the spacing is at least ``(E - 1/E) /`` :data:`MAX_POINTS`
(so at eps0 above about 12 the positive part of ``G`` is a few points or less at small n, and
the bound is weak there; the pairs of :mod:`~dpplugins.amplification.shuffle_model_families`
answer).  Masses are rounded down; floating-point error in the points (at most ``8 u E``) is
absorbed by computing at ``c`` lowered by ``32 u (E + 1)``.  The sum is bounded from below by
:func:`~dpplugins.amplification.blanket_lattice.positive_part_lower`.

The spacing (:func:`_spacing`) is ``1/16`` of the standard deviation of ``rho`` and ``1/64`` of
``c - 1/E`` (the range of the positive part of ``G``), the latter widened by ``sqrt(n)/8`` up to
``1/32`` of the standard deviation, and coarsened until the FFT fits
:data:`~dpplugins.amplification.blanket_lattice.MAX_FFT_SIZE`.

One convolution per search.  The lattice law of ``rho`` does not depend on epsilon (it only
moves ``G = c - rho`` by a constant), so :func:`epsilon_lower` builds it once, at the spacing of
the top of its search, and answers the points of the search from one tilted FFT
(:class:`~dpplugins.amplification.blanket_lattice.PositivePartLower`: the other points' sums are
the same sums moved, every answer certified) until a point moves the sums by more than two of
their standard deviations, where it builds another.  The search starts from half its top (a
point not violated is a new top), not from 0, where the law is not tilted and its sum's spread
needed the coarsest lattice.  At n = 10^6 a search took five or six FFTs of up to 4 million
points and now takes one or two of 0.5 to 1 million.

How it was checked (the project's tests repeat these checks): the stop-loss transform of the
lattice law against quadrature of the Laplace density at 80 thresholds (never above, within
``2 s``); the law's mean and variance against quadrature (the mean within a millionth of the
spacing, the variance within ``s^2``); two reports against nested quadrature (within 3 %);
Monte Carlo (``n`` = 50 to 400, within 5 standard errors and 2 %); the FFT against direct
convolution; at ``n = 10^6`` an uncertified estimate from above (numpy FFT of a mean-preserving
spread of ``rho``): 0.08 % to 0.5 % below it (numerically checked beyond the tests: 0.05 % to
0.19 % at n = 10^6 for eps0 = 0.5 to 8, 0.01 % at n = 10^5 and eps0 = 8).

Example (eps0 = 8, n = 10^4: delta(2.66) is certified above 1e-6, so epsilon(1e-6) > 2.66;
:func:`epsilon_lower` finds 2.676, against the upper bound 3.247 and the three-category
tests' 2.413)::

    >>> delta_lower(8.0, 10_000, 2.66) > 1e-6
    True
"""

from __future__ import annotations

import functools
import math

import numpy as np

from dpplugins.amplification.blanket_lattice import (MAX_LATTICE, LatticeLaw,
                                                     PositivePartLower)
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


def _mean_matching_edges(cut_lo: float, cut_hi: float, anchor: float, s: float) -> np.ndarray:
    """Cell edges ``cut_lo = b_0 < b_1 < ... < b_M = cut_hi`` of the density of ``rho`` whose
    cells have their means at (just below) the lattice points ``T_j = anchor + s j`` (module
    docstring, "The lattice"; our derivation).  The mean of ``(a, b]`` is ``sqrt(a b)``, so
    going *down* from ``cut_hi``, the edge below ``b`` that puts the mean of the cell under it
    at the next point ``T < b`` is ``T^2 / b``.  Written ``b = T + y``, the next ``y`` is ``s - y
    + y^2 / T`` up to third-order terms: it stays in ``(0, s]`` and settles at about ``s/2``
    (the map contracts by ``1 - s/T``; the same recursion upwards expands and left the lattice
    after a few hundred cells).  In logs, ``log b_m = (-1)^m (2 A_m - log cut_hi)`` with
    ``A_m`` the alternating sum of ``log T_l``, ``l <= m``, from the top.  The computed edges are
    capped at ``T_m^2`` over the edge above, less 1e-11 of it, which keeps every cell's mean
    below its point (capping an edge only lowers the means of the cells beside it); edges that
    do not decrease or reach ``cut_lo`` are dropped, so the lowest cell, ``(cut_lo, b_1]``, may
    have its mean above its point and the caller puts it on the next one.  Any increasing edges
    give a valid law; these only make it tight."""
    top = math.ceil((cut_hi - anchor) / s) - 1
    bottom = max(math.floor((cut_lo - anchor) / s), 0)
    if top < bottom:
        return np.array([cut_lo, cut_hi])
    targets = anchor + s * np.arange(top, bottom - 1, -1, dtype=float)
    targets = targets[targets < cut_hi]
    log_t = np.log(targets)
    signs = np.where(np.arange(len(targets)) % 2 == 0, 1.0, -1.0)
    alternating = np.cumsum(signs * log_t)
    with np.errstate(over="ignore", under="ignore"):
        edges = np.exp(signs * (2 * alternating - math.log(cut_hi)))
        above = np.concatenate(([cut_hi], edges[:-1]))
        edges = np.minimum(edges, targets * targets / above * (1 - 1e-11))
    # keep the edges below every earlier one and above cut_lo
    running = np.minimum.accumulate(np.concatenate(([cut_hi], edges)))[:-1]
    edges = edges[(edges < running) & (edges > cut_lo)]
    return np.concatenate(([cut_lo], edges[::-1], [cut_hi]))


#: halvings of the top that :func:`epsilon_lower` tries for a violated point before searching
#: from 0
_HALVINGS = 6

#: passes that move the bottom cut to the lowest edge of the middle cells
_BOTTOM_PASSES = 12


def _ends(cut_lo: float, spacing: float, a0: float, big: float, gamma: float):
    """``(anchor, bottom_mass, s, top_index, top_mass)`` for the bottom cut ``cut_lo`` (module
    docstring, "The lattice"): the bottom cell is the atom ``1/E`` and the density on ``(1/E,
    cut_lo]``, its mean moved up by 1e-12 of itself is the lattice point 0 (the anchor); the
    spacing ``s`` is the one nearest ``spacing`` that puts a lattice point, ``top_index``, at
    ``E`` (moved up by 1e-12 of itself), where the atom ``E`` goes."""
    u_lo = math.sqrt(cut_lo)
    anchor = _bottom_mean(u_lo, gamma) * (1 + 1e-12)
    bottom_mass = (1 - gamma / (2 * u_lo)) * (1 - 32 * _U)
    top = big * (1 + 1e-12)
    top_index = max(min(round((top - anchor) / spacing), MAX_POINTS - 4), 1)
    s = (top - anchor) / top_index
    while anchor + s * top_index < top:
        s *= 1 + 4 * _U
    return anchor, bottom_mass, s, top_index, 0.5 * a0 * (1 - 32 * _U)


@functools.lru_cache(maxsize=4)
def _ratio_lattice(eps0: float, spacing: float) -> tuple[float, float, np.ndarray]:
    """``(anchor, s, masses)``: the lattice law of ``rho`` (module docstring, "The lattice"),
    its points ``anchor + s i`` with masses ``masses[-1 - i]`` (read-only).  It does not depend
    on epsilon, which only moves ``G = c - rho``: memoised for the queries of one search (four
    lattices of at most :data:`MAX_POINTS` points, 16 MB each)."""
    a0, big, gamma = math.exp(-eps0), math.exp(eps0), math.exp(-eps0 / 2)
    # the bottom cut moves up to the lowest edge of the middle cells (the first cell, below it,
    # would go to the point above its mean): the anchor then moves up a little, and so do the
    # edges (by about 1/8 of the move: a contraction, extrapolated from the last two gaps)
    cut_lo, best, previous, ratio = a0 + 2 * spacing, None, None, None
    for _ in range(_BOTTOM_PASSES):
        layout = _ends(cut_lo, spacing, a0, big, gamma)
        edges = _mean_matching_edges(cut_lo, big, layout[0], layout[2])
        gap = float(edges[1]) - cut_lo if len(edges) > 2 else 0.0
        if best is None or gap < best[0]:
            best = (gap, cut_lo, layout, edges)
        if gap <= 1e-6 * layout[2]:
            break
        if previous is not None and gap >= previous:   # past the fixed point: step from the best
            cut_lo, previous, ratio = best[1] + best[0], None, None
            continue
        if previous is not None:
            ratio = gap / previous
        step = gap / (1 - ratio) * 0.99 if ratio is not None and ratio < 0.5 else gap
        cut_lo, previous = cut_lo + step, gap
    _, cut_lo, (anchor, bottom_mass, s, top_index, top_mass), edges = best
    masses = np.zeros(top_index + 2)
    masses[0] = bottom_mass
    masses[top_index] += top_mass
    lo, hi = edges[:-1], edges[1:]
    mean = np.sqrt(lo * hi) * (1 + 1e-12)
    i = np.maximum(np.ceil((mean - anchor) / s), 0).astype(np.int64)
    i += anchor + s * i < mean           # (the point at or above the cell's mean)
    np.add.at(masses, i, _cells(lo, hi, gamma))
    while masses[-1] == 0 and len(masses) > 1:
        masses = masses[:-1]
    masses = masses[::-1].copy()     # (by the index of G = c - rho: reversed)
    masses.setflags(write=False)
    return anchor, s, masses


def laplace_ratio_law_lower(eps0: float, epsilon: float, spacing: float) -> LatticeLaw:
    """Lattice law (``rounded == "down"``, spacing ``spacing``) below ``G = e^(-eps) - rho``
    in increasing convex order (module docstring).

    Example (the masses sum to at most 1)::

        >>> law = laplace_ratio_law_lower(2.0, 0.5, 0.01)
        >>> law.rounded, 0.999 < float(law.masses.sum()) <= 1.0
        ('down', True)
    """
    eps0 = _check_eps0(eps0)
    spacing = check_positive("spacing", spacing)
    if not math.isfinite(epsilon) or epsilon < 0:
        raise ParameterError("epsilon", epsilon, ">= 0 and finite")
    a0, big = math.exp(-eps0), math.exp(eps0)
    if not spacing >= (big - a0) / MAX_POINTS:
        raise ParameterError("spacing", spacing, f">= (e^eps0 - e^-eps0) / {MAX_POINTS} = "
                             f"{(big - a0) / MAX_POINTS:.6g} (at most {MAX_POINTS:,} lattice "
                             "points)")
    if a0 + 2 * spacing >= big:
        raise ParameterError("spacing", spacing,
                             f"< (e^eps0 - e^-eps0) / 2 = {(big - a0) / 2:.6g}")
    anchor, s, masses = _ratio_lattice(eps0, spacing)
    # G = c - rho = (c - anchor) - s i: offset in [0, s), k = m - i; c lowered so that every
    # floating-point error of the points (at most 8 u E) is on the safe side
    c = math.exp(-epsilon) * (1 - 4 * _U) - 32 * _U * (big + 1)
    m = math.floor((c - anchor) / s)
    offset = (c - anchor) - s * m
    return LatticeLaw(s, m - (len(masses) - 1), masses, offset=offset, rounded="down")


def _spacing(eps0: float, epsilon: float, n: int = 1) -> float:
    """A lattice spacing for ``rho``: 1/16 of its standard deviation and 1/64 of ``c - 1/E``
    (the range of the positive part of ``G``), the latter widened by ``sqrt(n)/8`` up to 1/32 of
    the standard deviation (many reports: the sum's scale, not one report's positive part,
    sets the resolution needed; the lattice's cells keep their means, so a coarser one only
    loses the spread inside the cells).  Numerically checked at the 40 points of the issue grid
    (at the lower bound's epsilon): delta at most 3.7e-3 below its value on the unwidened
    lattice (eps0 = 2, n = 1e4, delta = 1e-8), 1e-3 typically; epsilon moves far less."""
    a0, big, gamma = math.exp(-eps0), math.exp(eps0), math.exp(-eps0 / 2)
    second = 0.5 * a0 * a0 + 0.5 * big + gamma / 6 * (big ** 1.5 - a0 ** 1.5)
    sd = math.sqrt(max(second - 1.0, 1e-300))
    fine = min(sd / 16, (math.exp(-epsilon) - a0) / 64)
    wide = max(fine, min(sd / 32, fine * math.sqrt(n) / 8))
    return max(wide, (big - a0) / (MAX_POINTS - 8))


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
    return _delta_lower(eps0, n, epsilon, None)


def _delta_lower(eps0: float, n: int, epsilon: float, spacing: float | None,
                 searches: list | None = None) -> float:
    """:func:`delta_lower` on a lattice of spacing ``spacing`` (None: :func:`_spacing` at
    ``epsilon``), coarsened where the FFT does not fit.  ``searches``: a one-element memory of
    the last :class:`~dpplugins.amplification.blanket_lattice.PositivePartLower`, whose
    convolution answers every epsilon that moves the sums by little (one FFT for several
    points of a search; any answer is certified, module docstring)."""
    if epsilon >= eps0 or math.exp(-epsilon) <= math.exp(-eps0) * (1 + 1e-9):
        return 0.0
    try:
        value = None
        if searches:
            last = searches[0]
            value = last.at(laplace_ratio_law_lower(eps0, epsilon, last.requested_spacing))
        if value is None:
            # the finest lattice that fits the FFT (a coarser one costs second-order terms
            # only, module docstring)
            search = PositivePartLower.fitted(
                lambda s: laplace_ratio_law_lower(eps0, epsilon, s), n,
                _spacing(eps0, epsilon, n) if spacing is None else spacing)
            if search is None:
                return 0.0
            if searches is not None:
                searches[:] = [search]
            value = search.at(search.law)
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
    # one lattice for the whole search (the finest any of its points asks for: the spacing
    # falls with epsilon), so that the law of rho is built once
    spacing = _spacing(eps0, top * (1 - 1e-9), n) if top < eps0 else None
    searches: list = []

    def value(e):
        return _delta_lower(eps0, n, e, spacing, searches)

    if violated is None or not 0 < violated < top:
        # a violated point from halving the top, not from 0: at epsilon = 0 the law is not
        # tilted, and its sum's spread (the atom e^eps0) needed the coarsest lattice and most
        # of the time (eps0 = 8, n = 1e4: 4.8 of 6.2 s); a point tried and not violated is a
        # new top (every answer is a point where the bound was seen above delta)
        violated, probe = None, top / 2
        for _ in range(_HALVINGS):
            if value(probe) > delta:
                violated = probe
                break
            top, probe = probe, probe / 2
    return largest_violating_epsilon(value, delta, top, rtol=2e-3, violated=violated,
                                     secant=True)
