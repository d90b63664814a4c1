"""The exact four-class privacy blanket of a shuffled randomizer whose outputs fall into four
classes (unary encoding, subset selection, local hashing), computed where its counts are few.

Source.  The privacy blanket (Balle, Bell, Gascon, Nissim, CRYPTO 2019, arXiv:1903.02837),
which Su, Cheng, Wang (arXiv:2504.07414) show is the optimal decomposition of the "general
clone" paradigm, bounds the shuffled divergence of n users by ::

    delta(eps) <= (1/n) E[(G_1 + ... + G_n)_+],

``G_i`` i.i.d. with ``G = (R(x0)(y) - e^eps R(x1)(y)) / c(y)`` w.p. ``c(y)`` (``c`` the blanket)
and 0 otherwise (:mod:`dpplugins.amplification.shuffle_model_families`, module docstring, "The
privacy blanket", which derives the identity from Balle et al.'s Sec. 3).  For the families
there, an output supports ``x0`` or not and ``x1`` or not, and ``G`` takes four values besides 0
(``E = e^eps0``, ``x = e^eps``)::

    class 10: E - x,   class 01: 1 - E x,   class 11: E (1 - x),   class 00: 1 - x

with masses ``w10 = w01, w11, w00`` (the table there).  That module relaxes class 11 into 00
(three categories, the count-pair engine).  This module computes the four-class value itself.

Computation (our construction).  The counts ``(a, b, c, d)`` of the four classes among the n
draws are multinomial; given ``(a, b, c)``, ``d ~ Bin(r, p00)`` with ``r = n - a - b - c`` and
``p00 = w00 / (1 - 2 w10 - w11)``.  With ``K = a (E - x) + b (1 - E x) + c E (1 - x)`` and
``x > 1`` the sum is positive iff ``d <= D = floor(K / (x - 1))``, so (using
``d Bin(r, p)(d) = r p Bin(r - 1, p)(d - 1)``) ::

    E[(K + d (1 - x))_+ | a, b, c] = K F_r(D) - (x - 1) r p00 F_(r-1)(D - 1),

``F_m`` the cdf of ``Bin(m, p00)``; the sum over ``(a, b, c)`` is direct.  Every term charged:

* ``(a, b, c)`` run over ``[0, hi]`` with ``hi`` the upper end of each marginal's e^-60 window
  (:func:`~dpplugins.amplification.count_pair.binomial_window`).  A draw outside has ``(sum
  G)_+ <= a (E - x)`` (every other value is ``<= 0``), and ``E[a; a > h] = n w10 P(Bin(n-1,
  w10) >= h)``, ``E[a | b] <= n w10 / (1 - w10)``, ``E[a | c] <= n w10 / (1 - w11)``, so the
  outside is charged ``(E - x) w10 (P(Bin(n-1, w10) >= h_a) + P(b > h_b) / (1 - w10) +
  P(c > h_c) / (1 - w11))`` (after the ``1/n``).  Cells below ``e^-80`` of the largest are
  dropped and charged ``a (E - x)`` each in the same way.
* Multinomial probabilities ``exp(L)`` with ``L`` a sum of ``gammaln`` and ``log`` terms: we
  assume SciPy's ``gammaln`` is accurate to ``4 u`` relative plus ``1e-15`` absolute (``u``
  the unit round-off) and charge ``exp(16 u S + 1e-14) - 1`` relative, ``S`` the sum of the
  terms' magnitudes.  Binomial cdfs (Boost's incomplete beta) are charged ``1e-12 + 64 u n``
  relative, the convention of :mod:`dpplugins.amplification.shuffle_model`.
* ``K``: its computed value is within ``tol = 16 u (a (E + x) + b (1 + E x) + c E (1 + x))``
  of the true one, and the conditional value moves by at most ``tol F_r(D)`` with it; a cell
  whose computed ``K`` is in ``(-tol, 0]`` is charged ``tol``.  ``D``: where ``K / (x - 1)`` is
  within rounding of an integer, the summand beside ``D`` may be on the wrong side; it is at
  most ``band = 2 tol + 32 u (D + 1)(x - 1)`` in size and is charged ``band F_r(D + 1)``.

It is used where the three windows hold at most :data:`MAX_CELLS` cells (``n w10`` up to about
20 to 80, depending on ``n w11``; for OLH with g = 8, SUE and subset selection on d = 16, n up
to about 2000 at eps0 = 4 and 1e5 at eps0 = 8): there it gains up to 10 % over the better of the
relaxed blanket and the errata's Lemma 7.3 (OLH with g = 8 and SUE with d = 16, eps0 = 4, n =
1000, delta = 1e-6: 1.669 and 1.664 -> 1.496 and 1.488), where the relaxation of class 11 costs
most.  The pair is symmetric (swap ``x0`` and ``x1``), so one direction bounds both.

Example (OLH with g = 8 buckets, eps0 = 4, n = 1000)::

    >>> from dpplugins.amplification.shuffle_model_families import local_hashing
    >>> olh = local_hashing(4.0, 8)
    >>> four = FourClassBlanket.for_masses(4.0, 1000, *olh.blanket_classes)
    >>> round(four.epsilon(1e-6), 3), FourClassBlanket.for_masses(4.0, 10**5, *olh.blanket_classes)
    (1.496, None)
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

from dpplugins.amplification.count_pair import RELATIVE_TAIL_ERROR as _REL_SF
from dpplugins.amplification.count_pair import UNIT_ROUNDOFF as _U
from dpplugins.amplification.count_pair import (binomial_cdf, binomial_sf, binomial_window,
                                                newton_smallest_epsilon)
from dpplugins.amplification.shuffle import check_local_epsilon
from dpplugins.errors import ParameterError, check_count, check_nonnegative, check_open_unit

__all__ = ["FourClassBlanket", "MAX_CELLS"]

#: most cells ``(a, b, c)`` the direct sum visits (each evaluation is a few vectorised passes
#: over them)
MAX_CELLS = 1_500_000
#: cells this far (in log) below the largest are dropped (and charged)
_LOG_DROP = 80.0
_LOG_CUT = -60.0


def _windows(n: int, w10: float, w11: float) -> tuple[int, int]:
    """Upper ends of the count windows of classes 10 (and 01) and 11 (module docstring)."""
    return (binomial_window(n, w10, _LOG_CUT)[1],
            binomial_window(n, w11, _LOG_CUT)[1] if w11 > 0 else 0)


class FourClassBlanket:
    """Certified upper bound on ``delta(eps)`` of the four-class blanket (module docstring) for
    local privacy ``eps0``, ``n`` users and class masses ``w10 = w01``, ``w11``, ``w00``.
    Build it with :meth:`for_masses`, which returns None where the windows are too large."""

    def __init__(self, eps0: float, n: int, w10: float, w11: float, w00: float,
                 max_cells: int = MAX_CELLS, outside_mass: float | None = None) -> None:
        self.eps0 = check_local_epsilon(eps0, 300)
        self.n = n = check_count("n", n, minimum=1)
        for name, value in (("w10", w10), ("w11", w11), ("w00", w00)):
            check_nonnegative(name, value)
        if not w10 > 0 or 2 * w10 + w11 + w00 > 1 + 1e-12:
            raise ParameterError("w10", w10, "> 0 with 2 w10 + w11 + w00 <= 1")
        self.w10, self.w11, self.w00 = w10, w11, w00
        rest = max(1.0 - 2 * w10 - w11, 0.0)
        self.p00 = min(w00 / rest, 1.0) if rest > 0 else 0.0
        # 1 - p00 = (1 - gamma) / rest: from ``outside_mass`` (1 - gamma in closed form) where
        # given -- by subtraction it kept no digit where 1 - gamma is below the rounding of
        # p00 (subset selection with d = 2^53: 7e-17; the bound came out below the exact value)
        self.q00 = (min(max(outside_mass / rest, 0.0), 1.0)
                    if outside_mass is not None and rest > 0 else None)
        ha, hc = _windows(n, w10, w11)
        self.cells = (ha + 1) ** 2 * (hc + 1)
        if self.cells > max_cells:
            raise ParameterError("n", n, f"at most {max_cells:,} cells of counts (this has "
                                 f"{self.cells:,})", hint="use FourClassBlanket.for_masses, "
                                 "which returns None here")
        # one slice of c at a time (memory: the live cells, not the whole box)
        base = gammaln(n + 1.0)
        log_w10 = math.log(w10)
        log_w11 = math.log(w11) if w11 > 0 else 0.0
        log_rest = math.log1p(-(2 * w10 + w11)) if rest > 0 else 0.0
        grid_a, grid_b = (v.ravel() for v in np.meshgrid(np.arange(ha + 1.0),
                                                         np.arange(ha + 1.0), indexing="ij"))
        lg_a, lg_b = gammaln(grid_a + 1.0), gammaln(grid_b + 1.0)
        slices = []
        for c in range(hc + 1):
            keep = grid_a + grid_b + c <= n
            a, b = grid_a[keep], grid_b[keep]
            r = n - a - b - c
            terms = (base, -lg_a[keep], -lg_b[keep], -gammaln(c + 1.0), -gammaln(r + 1.0),
                     (a + b) * log_w10, c * log_w11, r * log_rest)
            log_p = sum(terms)
            size = sum(np.abs(t) for t in terms)
            slices.append((a, b, np.full(a.shape, float(c)), r, log_p, size))
        top = max(float(np.max(sl[4])) for sl in slices if len(sl[4]))
        self.dropped_a = 0.0
        kept = []
        for a, b, c, r, log_p, size in slices:
            # exp(L) rounded up by its relative error (module docstring)
            p_up = np.exp(log_p) * (1 + np.expm1(16 * _U * size + 1e-14 + 2 * _U))
            live = (log_p >= top - _LOG_DROP) & (a >= 1)   # a = 0: K <= 0, nothing positive
            # dropped cells with a >= 1 are charged a (E - x) each (a coefficient of (E - x))
            self.dropped_a += float(np.sum((p_up * a)[~live & (a >= 1)]))
            kept.append((a[live], b[live], c[live], r[live], p_up[live]))
        self.dropped_a *= 1 + 1e-12
        self.a, self.b, self.c, self.r, self.p = (np.concatenate(v) for v in zip(*kept))
        # the outside of the windows, as a coefficient of (E - x) (module docstring)
        out = w10 * float(binomial_sf(ha - 1, n - 1, w10)) if n > 1 else 0.0
        out += w10 / (1 - w10) * float(binomial_sf(ha, n, w10))
        if w11 > 0:
            out += w10 / (1 - w11) * float(binomial_sf(hc, n, w11))
        self.outside = out * (1 + 1e-9)
        self.rho = _REL_SF + 64 * _U * n

    @classmethod
    def for_masses(cls, eps0: float, n: int, w10: float, w11: float, w00: float,
                   max_cells: int = MAX_CELLS, outside_mass: float | None = None
                   ) -> "FourClassBlanket | None":
        """The blanket, or None where its windows exceed ``max_cells`` cells (``outside_mass``:
        ``1 - gamma`` in closed form, see ``__init__``)."""
        ha, hc = _windows(n, w10, w11)
        if (ha + 1) ** 2 * (hc + 1) > max_cells:
            return None
        return cls(eps0, n, w10, w11, w00, max_cells, outside_mass)

    def evaluate(self, epsilon: float) -> tuple[float, float]:
        """``(certified upper bound on delta(epsilon), its approximate derivative)``."""
        E = math.exp(self.eps0)
        if epsilon >= self.eps0:
            return 0.0, 0.0
        x = math.exp(epsilon)
        xm1 = math.expm1(epsilon)
        a, b, c, r, p = self.a, self.b, self.c, self.r, self.p
        k = a * (E - x) + b * (1 - E * x) + c * (E * (1 - x))
        # |computed K - K| <= tol (E, x, the products and the sum, each within a few u)
        tol = 16 * _U * (a * (E + x) + b * (1 + E * x) + c * (E * (1 + x)))
        value = np.zeros(a.shape)
        # a true K in (0, tol] where the computed one is not positive: its value is <= K
        error = np.where((k <= 0) & (k > -tol), tol, 0.0)
        slope = np.zeros(a.shape)
        pos = k > 0
        if np.any(pos):
            kp, rp, tp = k[pos], r[pos], tol[pos]
            if xm1 > 0:
                t = kp / xm1
                d = np.minimum(np.floor(t), rp)
            else:
                t, d = np.full(kp.shape, np.inf), rp
            f1 = binomial_cdf(d, rp, self.p00, self.q00)
            f2 = np.where(rp >= 1, binomial_cdf(d - 1, np.maximum(rp - 1, 0), self.p00,
                                                    self.q00), 0.0)
            t1, t2 = kp * f1, xm1 * rp * self.p00 * f2
            value[pos] = np.maximum(t1 - t2, 0.0)
            # the value moves by at most |error of K| F(D); the cdfs are charged relative
            err = tp * f1 + (self.rho + 4 * _U) * (t1 + t2)
            # a summand at D or D + 1 within rounding of 0 may be on the wrong side of D: it is
            # at most band in size and has probability at most F(D + 1)
            if xm1 > 0:
                band = 2 * tp + 32 * _U * (d + 1) * xm1
                near = (d < rp) & (np.minimum(t - np.floor(t), np.ceil(t) - t) * xm1 <= band)
                if np.any(near):
                    err[near] += band[near] * binomial_cdf(d[near] + 1, rp[near], self.p00,
                                                              self.q00)
            error[pos] += err
            slope[pos] = (a[pos] + E * (b[pos] + c[pos])) * f1 + rp * self.p00 * f2
        kept = float(np.dot(p, value + error)) * (1 + 1e-12 + (len(p) + 2) * _U)
        spill = (self.dropped_a / self.n + self.outside) * max(E - x, 0.0) * (1 + 4 * _U)
        total = min(kept / self.n * (1 + 2 * _U) + spill, 1.0)
        return total, -x * float(np.dot(p, slope)) / self.n

    def delta(self, epsilon: float) -> float:
        """Certified upper bound on delta(epsilon) (both directions: the pair is symmetric)."""
        return self.evaluate(check_nonnegative("epsilon", epsilon))[0]

    def epsilon(self, delta: float) -> float:
        """Certified upper bound on the smallest epsilon with delta(epsilon) <= delta (at most
        eps0)."""
        delta = check_open_unit("delta", delta)
        if self.eps0 == 0:
            return 0.0
        guess = 0.5 * self.eps0
        return newton_smallest_epsilon(self.evaluate, delta, self.eps0, guess)
