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

import math
from dataclasses import dataclass

import numpy as np
from scipy import special

__all__ = ["Gaussian", "Laplace", "Mixture", "interval_masses"]

_GL_RULES = {n: np.polynomial.legendre.leggauss(n) for n in (4, 8)}


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
        with np.errstate(invalid="ignore", over="ignore"):
            variation = (zb - za) * (np.maximum(np.abs(za), np.abs(zb)) + 1.0)
        # A cell whose variation is below 0.69 has its two tails within a factor 2 (our
        # derivation: the log-tail ratio is the integral of the hazard rate phi / (1 - Phi) over
        # the cell, which increases and is at most z + 1 (Birnbaum 1942: the Mills ratio is at
        # least 2 / (z + sqrt(z^2 + 4))), so at most the variation < log 2; the same on the
        # left by symmetry): it takes the quadrature below in any case, so the tails -- two
        # ndtr passes, most of the cost on a fine grid -- are computed for the other cells only
        # (the masses are exactly those of computing them everywhere)
        known = np.isfinite(za) & np.isfinite(zb) & (zb > za) & (variation < 0.69)
        mass = np.zeros(za.shape)
        rest = ~known
        if np.any(rest):
            za_r, zb_r = za[rest], zb[rest]
            # tail on the side away from the mean: for the right half use survival functions
            right = za_r >= -zb_r  # midpoint of the interval at or above the mean
            # the same values as ndtr of each side chosen separately: two ndtr passes, not four
            big = special.ndtr(np.where(right, -za_r, zb_r))
            small = special.ndtr(np.where(right, -zb_r, za_r))
            mass[rest] = big - small
            narrow_rest = (small > 0.5 * big) & np.isfinite(za_r) & np.isfinite(zb_r) \
                & (zb_r > za_r)
            narrow = known.copy()
            narrow[rest] = narrow_rest
        else:
            narrow = known
        if np.any(narrow):
            # 4 points suffice where the log-density changes by < 0.05 over the cell: the rule's
            # error for e^(c t), |c| <= 0.05, on the unit interval is below (4!)^4 / (9 (8!)^3)
            # * 0.05^8 ~ 2e-20 relative (Abramowitz & Stegun 25.4.30)
            tiny = narrow & (variation < 0.05)
            rest = narrow & ~tiny
            if np.any(tiny):
                mass[tiny] = self._quadrature(a[tiny], b[tiny], nodes=4)
            if np.any(rest):
                mass[rest] = self._quadrature(a[rest], b[rest], nodes=8)
        return np.maximum(mass, 0.0)

    def _quadrature(self, a: np.ndarray, b: np.ndarray, nodes: int) -> np.ndarray:
        """Gauss-Legendre integral (``nodes`` points) of the density over each ``[a, b]``: the
        standardised nodes in place, ``exp(-z^2 / 2)`` summed with the weights, the normalising
        constant applied once (a few ulps of rounding, as the module docstring allows)."""
        points, weights = _GL_RULES[nodes]
        half = 0.5 * (b - a)
        z = (half / self.scale)[:, None] * points[None, :]
        z += ((0.5 * (a + b) - self.mean) / self.scale)[:, None]
        np.multiply(z, z, out=z)
        z *= -0.5
        np.exp(z, out=z)
        # einsum: a plain loop, no threaded BLAS call
        return half * np.einsum("ij,j->i", z, weights) / (self.scale * math.sqrt(2 * math.pi))


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

