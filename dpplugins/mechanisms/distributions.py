"""One-dimensional noise distributions with *relatively accurate* interval masses.

The PLD constructions (:mod:`dpplugins.pld.grid`) need, for every grid bin, the P- and Q-mass of
the set of outputs whose privacy loss falls in the bin, accurate to a few units of round-off
*relative to the mass itself* (absolute accuracy is not enough: bins are narrow, and a CDF
difference ``F(b) - F(a)`` of a narrow interval loses ``log10(F / (F(b) - F(a)))`` digits).

``interval_mass(a, b)`` therefore uses the tail on the side where the interval lies, and switches to
8-point Gauss-Legendre quadrature of the density when the two tail values are within a factor 2 of
each other.  On such an interval the log-density changes by less than about 1 (for the Gaussian the
tail ratio bounds ``(b - a) * max(z, 1)``), and the 8-point rule's error for an integrand
``e^(c t)`` with ``|c| <= 1`` on the unit interval is below ``(8!)^4 / (17 (16!)^3) ~ 1e-23``
relative (Abramowitz & Stegun 25.4.30), far below round-off.  Outside that regime the tail
difference loses at most one bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

__all__ = ["Gaussian", "Laplace", "Mixture", "interval_masses"]

_GL_RULES = {n: np.polynomial.legendre.leggauss(n) for n in (4, 8)}


def _quadrature(log_density, a: np.ndarray, b: np.ndarray, nodes: int = 8) -> np.ndarray:
    """Gauss-Legendre integral (``nodes`` points) of ``exp(log_density)`` over each ``[a, b]``."""
    points, weights = _GL_RULES[nodes]
    half = 0.5 * (b - a)
    mid = 0.5 * (a + b)
    x = mid[:, None] + half[:, None] * points[None, :]
    return half * np.sum(weights[None, :] * np.exp(log_density(x)), axis=1)


@dataclass(frozen=True)
class Gaussian:
    """``N(mean, scale^2)``."""

    mean: float
    scale: float

    def log_density(self, x):
        z = (x - self.mean) / self.scale
        return -0.5 * z * z - np.log(self.scale * np.sqrt(2 * np.pi))

    def interval_mass(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``P(a < X <= b)`` with relative accuracy of a few ulps (module docstring)."""
        a = np.asarray(a, dtype=float)
        b = np.asarray(b, dtype=float)
        za = (a - self.mean) / self.scale
        zb = (b - self.mean) / self.scale
        # tail on the side away from the mean: for the right half use survival functions
        right = za >= -zb  # midpoint of the interval at or above the mean
        # the same values as ndtr of each side chosen separately, with two ndtr passes, not four
        big = special.ndtr(np.where(right, -za, zb))
        small = special.ndtr(np.where(right, -zb, za))
        mass = big - small
        narrow = (small > 0.5 * big) & np.isfinite(za) & np.isfinite(zb) & (zb > za)
        if np.any(narrow):
            mass = mass.copy()
            # 4 points suffice where the log-density changes by < 0.05 over the cell: the rule's
            # error for e^(c t), |c| <= 0.05, on the unit interval is below (4!)^4 / (9 (8!)^3)
            # * 0.05^8 ~ 2e-20 relative (Abramowitz & Stegun 25.4.30)
            variation = np.full(za.shape, np.inf)
            variation[narrow] = (zb[narrow] - za[narrow]) * (
                np.maximum(np.abs(za[narrow]), np.abs(zb[narrow])) + 1.0)
            tiny = narrow & (variation < 0.05)
            rest = narrow & ~tiny
            if np.any(tiny):
                mass[tiny] = _quadrature(self.log_density, a[tiny], b[tiny], nodes=4)
            if np.any(rest):
                mass[rest] = _quadrature(self.log_density, a[rest], b[rest], nodes=8)
        return np.maximum(mass, 0.0)


@dataclass(frozen=True)
class Laplace:
    """Laplace distribution with location ``mean`` and scale ``scale`` (density e^(-|x-mean|/scale)/2scale)."""

    mean: float
    scale: float

    def interval_mass(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """``P(a < X <= b)`` from ``expm1`` of the exponential tails (relative accuracy)."""
        a = np.asarray(a, dtype=float)
        b = np.asarray(b, dtype=float)
        ta = (a - self.mean) / self.scale
        tb = (b - self.mean) / self.scale
        with np.errstate(over="ignore", invalid="ignore"):
            # both right of the mean: 0.5 e^-ta (1 - e^-(tb - ta))
            right = 0.5 * np.exp(-ta) * -np.expm1(-(tb - ta))
            # both left: 0.5 e^tb (1 - e^-(tb - ta))
            left = 0.5 * np.exp(tb) * -np.expm1(-(tb - ta))
            # straddling: mass left of mean plus right of mean
            straddle = 0.5 * -np.expm1(ta) + 0.5 * -np.expm1(-tb)
        mass = np.where(ta >= 0, right, np.where(tb <= 0, left, straddle))
        mass = np.where(tb > ta, mass, 0.0)
        return np.maximum(np.nan_to_num(mass, nan=0.0), 0.0)


@dataclass(frozen=True)
class Mixture:
    """A finite mixture ``sum_i w_i D_i`` (weights positive, summing to 1)."""

    weights: tuple
    components: tuple

    def interval_mass(self, a, b):
        # a sum of non-negative terms keeps relative accuracy (the one implementation is
        # interval_masses, which also shares components between distributions)
        return interval_masses((self,), a, b)[0]


def interval_masses(distributions, a, b) -> list[np.ndarray]:
    """``[D.interval_mass(a, b) for D in distributions]``, computing the masses of a base
    distribution that several of them share (a mixture's component that is also the other
    distribution of a pair: ``N(0, s^2)`` in both halves of the subsampled Gaussian's pair) only
    once.  The values are exactly those of the separate calls: the same masses, summed in the
    same order.  A mixture's masses are ``sum_i w_i D_i(a, b)`` over its positive weights, a sum
    of non-negative terms that keeps relative accuracy."""
    memo: dict = {}

    def masses(dist):
        if isinstance(dist, Mixture):
            return sum(w * masses(c) for w, c in zip(dist.weights, dist.components) if w > 0)
        try:
            found = memo.get(dist)
        except TypeError:  # not hashable: nothing to share
            return dist.interval_mass(a, b)
        if found is None:
            found = memo[dist] = dist.interval_mass(a, b)
        return found

    return [masses(d) for d in distributions]

