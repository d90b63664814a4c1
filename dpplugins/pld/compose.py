"""Composition of grid PLDs by FFT, with certified truncation and floating-point error.

Composition of independent mechanisms adds their privacy losses, so the PLD of a composition is
the convolution of the PLDs (Koskela et al. 2021, Sec. 3; Sommer, Meiser, Mohammadi 2019).  We
compute all convolutions at once: the DFT of every distinct component is raised to its count and
multiplied, and one inverse DFT gives the composed PLD on a window of the grid (Koskela et al.
2021, Alg. 1; for the window rule, Gopi, Lee, Wutschitz 2021).

What is certified (all terms are returned in :class:`ComposedPLD` and used by its methods):

* ``+inf`` atoms compose as ``1 - prod (1 - delta_i(inf))^k_i`` (Koskela et al. 2021, Sec. 2).
* **Window / periodisation.**  The circular convolution folds mass outside the window back into
  it.  With ``S`` the composed finite loss, the Chernoff bound
  ``P(S >= w) <= exp(sum_i k_i K_i(lam) - lam w)`` for every ``lam > 0``, where
  ``K_i(lam) = log E[e^(lam L_i)]`` is computed exactly from the component, bounds the mass above
  the window
  (``tail_above``) and likewise below it (``tail_below``).  Folded mass can only *add* to window
  bins, so an upper bound on delta adds ``tail_above`` (true mass beyond the window, where the
  hockey-stick integrand is at most 1), and a lower bound subtracts ``tail_above + tail_below``.
* **Floating point.**  For inputs of total mass <= 1, every coefficient of a length-N FFT is off
  by at most ``eta = c u log2 N`` (Higham 2002, "Accuracy and stability of numerical algorithms",
  Sec. 24.1; we take c = 10 and add the error of the stored masses).  Then
  ``|prod a_i^k_i - prod b_i^k_i| <= G sum_i k_i eta_i / m_i`` with ``m_i = |a_i| + eta_i`` and
  ``G = prod m_i^k_i``, plus the rounding of ``exp(sum k_i log a_i)``: relative
  ``c u (1 + sum k_i (|log a_i| + 0.2))`` in the working precision (the complex logarithm
  including its phase; ``0.2`` is the absolute rounding ``u`` of each log-modulus, doubled;
  :func:`dpplugins.pld.spectra.power_rounding`), with ``c = K + 3`` in place of 10 for ``K >
  7`` distinct components (the recursive summation of their logarithms, Higham 2002, Sec.
  4.2), and ``10 u`` of the output precision for the phase reduction (modulo ``2 pi`` known to
  the working precision), the exponential, sine, cosine and product.  Summing over frequencies
  bounds the l1 error of the inverse transform, which bounds the error of any delta
  (``fp_error``).
  With ``extended=True`` the forward transforms and powers run in long double (u about 2000 times
  smaller on x86), with ``extended_inverse=True`` also the products and the inverse transform.
* **Tiny deltas: exponential tilting.**  However small ``u`` is, the bound above is *absolute*:
  ``T c u log2 N`` after ``T`` steps, far above a delta of 1e-12 when ``T = 10^6``.  The actual
  error of the transform is of the same kind (measured against long double it is 100-200 times
  below the bound: worst-case versus typical rounding), so no sharper worst-case analysis of the
  same computation removes the floor.  Tilting the components by ``e^(lam s)`` before the FFT
  (``tilt=lam``, :func:`compose_grid_pmfs`) makes the window error count with the weight
  ``exp(log_scale - lam eps)`` in a delta at ``eps`` (our derivation): the absolute error becomes
  relative to the Chernoff bound, which is within a small factor of delta for the right ``lam``
  (we use the Chernoff optimum).  Numerically checked against an exact long-double convolution
  (in the project's test suite).
* **Evaluation.**  ``delta(eps) = sum_{s > eps} m(s) - e^eps sum_{s > eps} m(s) e^-s`` is evaluated as
  ``A_j - e^(eps - s_j) D_j`` with ``D_j = sum_{i >= j} m_i e^-(s_i - s_j)``, so no exponential
  leaves the range whatever ``eps`` is (epsilon 12146 for sigma = 0.1 and 230 steps used to
  overflow).  The suffix sums are in double precision (blocks of 300 loss units) for untilted
  compositions and in long double (blocks of 4000) for tilted ones, whose factors need its
  range; their rounding is charged to every value.  Every inversion is a bisection that ends,
  started from the closed-form crossing of its cell (``s_j + log((A_j - r) / D_j)``) so that it
  takes a dozen evaluations instead of about fifty; only verified points narrow it.
* **Reuse.**  The spectral terms of each component at each transform size are cached
  (:mod:`dpplugins.pld.spectra`), so composing the same components again -- one more epoch,
  another accuracy level -- costs a few vector operations and one inverse transform.
"""

from __future__ import annotations

import math
import sys
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import fft as sp_fft
from scipy.signal import lfilter
from scipy.optimize import minimize_scalar

from dpplugins.errors import NumericalError, larger_delta_advice
from dpplugins.pld.grid import GridPMF
from dpplugins.pld.spectra import (before_transform, from_log_polar, reduce_phase,
                                   summed_spectral_terms, transform_size)

__all__ = ["ComposedPLD", "compose_grid_pmfs"]

_U = np.finfo(float).eps / 2
_C_FFT = 10.0
#: relative width to which the uncertified diagnostics (``epsilon_*_ideal``: the part of a gap due
#: to error terms, used only to decide whether a finer grid can help) are bisected
_DIAGNOSTIC_RTOL = 1e-10


@dataclass(frozen=True)
class ComposedPLD:
    """P-masses of the composed finite privacy loss on ``(lo + i) * h`` (a window of the grid).

    ``delta_upper(eps)`` and ``delta_lower(eps)`` are certified bounds on the hockey-stick
    divergence of the composition of the *component pairs* (upper for pessimistic components,
    lower for optimistic ones; see :mod:`dpplugins.pld.grid`).

    With ``tilt = lam > 0`` the window holds the composition of the exponentially tilted
    components (Esscher transform, see :func:`compose_grid_pmfs`): the finite mass at
    ``s = (lo + i) h`` is ``pmf[i] * exp(log_scale - lam * s)``.  The window error terms
    ``tail_above``, ``tail_below`` and ``fp_error`` are then in tilted units; in a delta at
    ``eps`` they count with the weight ``W(eps) = exp(log_scale - lam * eps)``, which bounds
    ``exp(log_scale - lam * s)`` for every ``s > eps``.  Untilted (``lam = 0``, ``log_scale =
    0``) the weight is 1 and everything is as in the absolute model.  ``rel_error`` is a relative
    error of the finite masses (rounding of the tilted components and of ``log_scale``) and
    ``abs_error`` an unweighted absolute error (the components' construction errors).
    """

    h: float
    lo: int
    pmf: np.ndarray
    inf_mass: float
    tail_above: float
    tail_below: float
    fp_error: float
    rel_error: float = 0.0
    tilt: float = 0.0
    log_scale: float = 0.0
    abs_error: float = 0.0

    #: the evaluation tables, built on first use by :meth:`_prepare` (a composition that is
    #: only an intermediate -- the untilted core of a tilted one -- never pays for them)
    _LAZY = frozenset({"_idx", "_svals", "_A", "_T", "_block", "_steps", "_unreliable", "_rho",
                       "_dtype", "_underflow"})

    def __getattr__(self, name: str):
        # called only for attributes not set yet: the lazily built evaluation tables
        if name in ComposedPLD._LAZY:
            self._prepare()
            return object.__getattribute__(self, name)
        raise AttributeError(name)

    def _ensure_tables(self, epsilon: float) -> None:
        """Evaluation tables that cover every grid point above ``epsilon`` (0: the whole stored
        part, as the epsilon inversions need).  A delta query needs only the points above its
        epsilon, often a small part of the window: the tables are built from there and rebuilt
        from lower down only when a later evaluation needs it.  Suffix sums do not depend on the
        points below their start, so every value is the one the full tables give."""
        first = self.__dict__.get("_first_index")
        if first is None or first > 0:
            needed = int(max(0.0, math.floor(min(epsilon / self.h, 2.0 ** 62)) - 1)) \
                if epsilon > 0 else 0
            if first is None or first > needed:
                self._prepare(needed)

    def _prepare(self, first_index: int = 0) -> None:
        """Suffix sums for evaluating delta (see the module docstring, "Evaluation"), on the
        stored grid points with index at least ``first_index >= 0``."""
        index = self.lo + np.arange(len(self.pmf))
        # the stored part: grid points s >= 0 (we never evaluate delta at negative epsilon)
        start = int(np.searchsorted(index, first_index, side="left"))
        object.__setattr__(self, "_first_index", first_index)
        idx = index[start:]
        n = len(idx)
        # untilted masses are at most 1 and blocks span at most 300 loss units, so double
        # precision holds every value; the tilt factors need the long-double range
        tilted = self.tilt > 0
        ld = np.longdouble if tilted else np.float64
        span = 4000.0 if tilted else 300.0
        # built in place (long double is 16 bytes a bin: every temporary of the window's length
        # counts against BYTES_PER_WINDOW_BIN; the tables of one tilted window of 6.7e6 bins
        # peaked at 145 bytes a bin)
        mass = np.array(self.pmf[start:], dtype=ld)
        np.maximum(mass, 0, out=mass)  # negatives: FFT noise
        unreliable, exp_max = -1, 0.0
        if self.tilt > 0 and n:
            # untilted masses pmf * exp(L - lam s_i), s_i = idx_i h; exponents above 11300 would
            # overflow long double: those points (far below the tilted bulk) are unreliable
            first = float(ld(self.log_scale) - ld(self.tilt) * ld(int(idx[0])) * ld(self.h))
            slope = -self.tilt * self.h
            factor, rows_bad = _exp_linear(first, slope, n)
            mass *= factor
            del factor
            unreliable = rows_bad
            exp_max = max(abs(first), abs(first + slope * (n - 1)))
        # A[j] = sum_{i >= j} m_i; D[j] = sum_{i >= j} m_i e^-(s_i - s_j) = T[j] / e^-(j - b0) h
        # with T[j] = sum_{i >= j} m_i e^-(i - b0) h and b0 the start of j's block (blocks of at
        # most `span` loss units keep every exponential in range); all sums have non-negative
        # terms
        a_table = np.zeros(n + 1, dtype=ld)
        if n:
            np.cumsum(mass[::-1], out=a_table[n - 1::-1])
        block = max(1, min(int(span / self.h), n if n else 1))
        if tilted:
            steps, _ = _exp_linear(0.0, -self.h, block)  # e^-(k h), k < block
        else:
            steps = np.exp(-self.h * np.arange(block))
        t_table = np.zeros(n + 1, dtype=ld)
        tail = t_table[:n]
        carry = ld(0)  # D at the start of the next block
        if block == 1 and n > 1:
            # grid steps beyond `span` (long compositions on coarse grids): one bin per block,
            # D[j] = m_j + e^-h D[j+1]; the same recurrence as the loop below, in C (the loop
            # made ~10^7 Python iterations: 10^11 swap steps at n = 3 took 469 s)
            decay = np.exp(-ld(1) * ld(self.h))
            tail[:] = lfilter(np.array([1], dtype=ld), np.array([1, -decay], dtype=ld),
                              mass[::-1])[::-1]
            n_loop = -1
        else:
            n_loop = ((n - 1) // block) * block if n else -1
        for b0 in range(n_loop, -1, -block):
            b1 = min(b0 + block, n)
            inner = np.cumsum((mass[b0:b1] * steps[: b1 - b0])[::-1])[::-1]
            shift = np.exp(-ld(b1 - b0) * ld(self.h)) * carry  # e^-(b1 - b0) h D[b1]
            tail[b0:b1] = inner + shift
            carry = tail[b0]  # = D[b0]
        object.__setattr__(self, "_idx", idx)
        object.__setattr__(self, "_svals", idx * self.h)
        del mass, tail
        object.__setattr__(self, "_A", a_table)
        object.__setattr__(self, "_T", t_table)
        object.__setattr__(self, "_block", block)
        object.__setattr__(self, "_steps", steps)
        object.__setattr__(self, "_unreliable", unreliable)
        object.__setattr__(self, "_dtype", ld)
        # relative error of A, D and of e^(eps - s_j) D: sequential sums of non-negative terms
        # ((n - 1) u_ld each), the exponentials and their products (u_ld per unit of argument)
        # and the final rounding to double
        u_ld = float(np.finfo(ld).eps) / 2
        s_max = float(np.max(np.abs(idx), initial=0)) * self.h
        rho = (2.0 * n + 2 * exp_max + 4 * span + s_max + 32) * u_ld + 4 * _U * (1 + s_max)
        object.__setattr__(self, "_rho", rho)
        # in double, a product m_i e^-(i - b0) h below the normal range keeps an absolute error
        # of at most 2^-1074 (gradual underflow); divided by e^-(j - b0) h >= e^-span it adds at
        # most n 2^-1074 e^span to a D (charged in _parts); nothing underflows in long double
        object.__setattr__(self, "_underflow", 0.0 if tilted else
                           (n + 1) * 5e-324 * math.exp(span))

    def drop_tables(self) -> None:
        """Free the evaluation tables (:meth:`_prepare`; rebuilt, identical, on next use): a
        cached composition then keeps only its masses, 8 bytes a bin."""
        for name in ComposedPLD._LAZY | {"_first_index"}:
            if name in self.__dict__:
                object.__delattr__(self, name)

    def tables_built(self) -> bool:
        """True while the evaluation tables are held."""
        return "_A" in self.__dict__

    def _d(self, j: int):
        """``D[j]`` (in the tables' precision) from the blocked suffix sums."""
        offset = j % self._block
        return self._T[j] / self._steps[offset] if j < len(self._idx) else self._dtype(0)

    # -- pieces of the bounds --------------------------------------------------------------------
    def weight(self, epsilon: float) -> float:
        """``W(eps)``: the factor of the window error terms in a delta at ``epsilon`` (1 untilted);
        rounded up."""
        if self.tilt <= 0:
            return 1.0
        exponent = self.log_scale - self.tilt * epsilon
        return math.inf if exponent > 700 else math.exp(exponent) * (1 + 1e-12)

    def _parts(self, epsilon: float) -> tuple[float, float, bool]:
        """``(raw, error, reliable)``: the window sum ``sum_{s > eps} (1 - e^(eps - s)) m(s)``
        and a bound on its rounding error (``2 rho A``), for ``eps >= 0``."""
        self._ensure_tables(epsilon)
        j = int(np.searchsorted(self._svals, epsilon, side="right"))
        reliable = j > self._unreliable
        if j >= len(self._idx):
            return 0.0, 0.0, reliable
        a_sum, d_sum = self._A[j], self._d(j)
        ld = self._dtype
        x = np.exp(ld(epsilon) - ld(int(self._idx[j])) * ld(self.h))
        raw = float(max(a_sum - x * d_sum, ld(0)))
        return raw, 2 * self._rho * float(a_sum) + self._underflow, reliable

    def additive_error(self, epsilon: float, kind: str = "upper") -> float:
        """The part of ``delta_upper(eps) - delta_lower(eps)`` that does not shrink with the grid
        step: truncation, floating point and construction terms (for one of the two bounds)."""
        w = self.weight(epsilon)
        below = self.tail_below if (kind == "lower" or epsilon < self.lo * self.h) else 0.0
        fp = self.fp_error if kind == "upper" else 2 * self.fp_error
        return w * (self.tail_above + below + fp) + self.abs_error

    def delta_ideal(self, epsilon: float) -> float:
        """The window sum plus ``delta(inf)`` without any error term (diagnostic, not certified)."""
        raw, _, reliable = self._parts(epsilon)
        return float(min(raw + self.inf_mass, 1.0)) if reliable and math.isfinite(raw) else 1.0

    def delta_upper(self, epsilon: float) -> float:
        """Certified upper bound on delta(epsilon) (epsilon >= 0): window sum plus delta(inf),
        the Chernoff bound on the mass outside the window and the floating-point terms."""
        raw, err, reliable = self._parts(epsilon)
        if not reliable:
            return 1.0
        value = (1 + self.rel_error) * (raw + err + self.additive_error(epsilon) - self.abs_error)
        value += self.inf_mass + self.abs_error
        return float(min(1.0, value)) if math.isfinite(value) else 1.0

    def delta_lower(self, epsilon: float) -> float:
        """Certified lower bound on delta(epsilon): window sum minus everything that may have been
        folded into the window and the floating-point terms (twice: negative rounding noise is
        clipped before summing), plus delta(inf)."""
        raw, err, reliable = self._parts(epsilon)
        if not (reliable and math.isfinite(raw) and math.isfinite(err)):
            # an unreliable window, or tables that overflow at this epsilon (a composition
            # tilted towards another query, asked again from the cache): no finite part
            return float(min(max(self.inf_mass - self.abs_error, 0.0), 1.0))
        finite = raw - err - (self.additive_error(epsilon, "lower") - self.abs_error)
        if not math.isfinite(finite):
            finite = 0.0
        value = max(finite, 0.0) * (1 - self.rel_error) + self.inf_mass - self.abs_error
        return float(min(max(value, 0.0), 1.0))

    # -- inversion --------------------------------------------------------------------------------
    def _grid_point(self, j: int) -> float:
        return float(self._svals[j])

    def _first(self, predicate, lo_j: int, hi_j: int) -> int:
        """Smallest j in [lo_j, hi_j] with ``predicate(j)`` (monotone: False...False True...True);
        ``hi_j + 1`` if none."""
        if lo_j > hi_j or not predicate(hi_j):
            return hi_j + 1
        while lo_j < hi_j:
            mid = (lo_j + hi_j) // 2
            if predicate(mid):
                hi_j = mid
            else:
                lo_j = mid + 1
        return lo_j

    @staticmethod
    def _bisect(good, bad: float, ok: float, rtol: float = 0.0,
                guess: float | None = None) -> float:
        """Shrink ``(bad, ok]`` (``good(ok)`` true, ``good(bad)`` false, ``good`` monotone) to
        neighbouring floats (or, with ``rtol > 0``, to a relative width ``rtol``: for the
        uncertified diagnostics only); returns a point where ``good`` was verified.

        ``guess``: an estimate of the crossing (:meth:`_crossing`); when ``good`` changes
        within ``1e-13`` (relative) of it, the bracket starts there -- a dozen evaluations
        instead of about fifty, and the same result, since only verified points narrow it."""
        if guess is not None and bad < guess < ok:
            width = 1e-13 * max(abs(guess), 1e-300)
            low, high = max(bad, guess - width), min(ok, guess + width)
            if low < high and good(high):
                if low == bad or not good(low):
                    bad, ok = low, high
                else:
                    ok = low
            elif low < high:
                bad = high
        for _ in range(200):
            mid = 0.5 * (bad + ok)
            if not bad < mid < ok or ok - bad <= rtol * abs(ok):
                break
            if good(mid):
                ok = mid
            else:
                bad = mid
        return ok

    def _upper_excess(self, j: int, delta: float, epsilon: float) -> float:
        """The window sum at which ``delta_upper`` equals ``delta`` in the cell below grid point
        ``j`` (error terms taken at ``epsilon``; see :meth:`_crossing`)."""
        err = 2 * self._rho * float(self._A[j]) + self._underflow
        return ((delta - self.inf_mass - self.abs_error) / (1 + self.rel_error) - err
                - (self.additive_error(epsilon) - self.abs_error))

    def _lower_excess(self, j: int, delta: float, epsilon: float) -> float:
        """Counterpart of :meth:`_upper_excess` for ``delta_lower``."""
        err = 2 * self._rho * float(self._A[j]) + self._underflow
        return ((delta - self.inf_mass + self.abs_error) / (1 - self.rel_error) + err
                + (self.additive_error(epsilon, "lower") - self.abs_error))

    def _crossing(self, j: int, excess: float) -> float | None:
        """The epsilon in the cell below grid point ``j`` at which the window sum
        ``A_j - e^(eps - s_j) D_j`` equals ``excess`` (closed form: ``s_j + log((A_j - excess) /
        D_j)``), or None when that is not in the cell.  Only a starting guess for
        :meth:`_bisect`: every result is verified there."""
        if not 0 <= j < len(self._idx) or not math.isfinite(excess):
            return None
        d_j = float(self._d(j))
        ratio = (float(self._A[j]) - excess) / d_j if d_j > 0 else math.nan
        if not 0 < ratio <= 1:
            return None
        guess = self._grid_point(j) + math.log(ratio)
        return guess if math.isfinite(guess) else None

    def epsilon_upper(self, delta: float) -> float:
        """Smallest certified epsilon: ``delta_upper(eps) <= delta`` (verified at the returned
        value; bisection, so it always ends)."""
        self._ensure_tables(0.0)
        if self.inf_mass >= delta:
            return float("inf")  # delta(eps) >= delta(inf) >= delta for every eps: no finite eps
        good = lambda e: self.delta_upper(e) <= delta  # noqa: E731
        if good(0.0):
            return 0.0
        n = len(self._idx)
        j = self._first(lambda i: good(self._grid_point(i)), 0, n - 1)
        if j < n:
            top = self._grid_point(j)
            low = self._grid_point(j - 1) if j > 0 else 0.0
            return self._bisect(good, max(low, 0.0), top,
                                guess=self._crossing(j, self._upper_excess(j, delta, top)))
        # beyond the window only the error terms remain; with a tilt they fall like e^(-lam eps)
        top = self._grid_point(n - 1) if n else max(self.lo * self.h, 0.0)
        if self.tilt > 0 and delta > self.inf_mass + self.abs_error:
            step, previous, guess = max(1.0, abs(top)), top, top
            for _ in range(64):
                guess = previous + step
                if good(guess):
                    return self._bisect(good, previous, guess)
                previous, step = guess, 2 * step
        raise NumericalError(
            f"delta={delta:g} is not above the certified error terms "
            f"(delta(inf)={self.inf_mass:.3g}, truncation={self.tail_above:.3g}, "
            f"floating point={self.fp_error * self.weight(top) + self.abs_error:.3g})",
            "ask for a larger delta, or a smaller tail_mass when the truncation term dominates")

    def _lower_on_grid(self) -> np.ndarray:
        """``delta_lower`` at every stored grid point (vectorised, for locating a crossing only;
        every returned value is re-checked with :meth:`delta_lower`)."""
        self._ensure_tables(0.0)
        n = len(self._idx)
        ld = self._dtype
        # tables tilted towards another query may exceed double's range here: those points
        # become inf (or nan) and are dropped below (no finite part), without a warning
        with np.errstate(over="ignore", invalid="ignore"):
            a_next = self._A[1:].astype(float)
            d_all = np.append(self._T[:n] / np.resize(self._steps, n), ld(0))
            raw = np.maximum(self._A[1:] - np.exp(-ld(self.h)) * d_all[1:], 0).astype(float)
        if self.tilt > 0:
            with np.errstate(over="ignore"):
                w = np.exp(self.log_scale - self.tilt * self._svals) * (1 + 1e-12)
        else:
            w = np.ones(len(self._svals))
        fixed = self.tail_above + self.tail_below + 2 * self.fp_error
        with np.errstate(invalid="ignore", over="ignore"):
            finite = raw - 2 * self._rho * a_next - self._underflow - w * fixed
        finite = np.where(np.isfinite(finite), finite, 0.0)
        return np.maximum(finite, 0.0) * (1 - self.rel_error) + self.inf_mass - self.abs_error

    def epsilon_lower(self, delta: float) -> float:
        """Largest epsilon for which ``delta_lower(eps) > delta`` is certified (0 if none).

        ``delta_lower`` need not be monotone (with a tilt its error weight grows towards small
        epsilon) but the true delta is, so any epsilon where it exceeds ``delta`` is a lower bound;
        we take the largest grid point where it does and refine in the cell above it."""
        self._ensure_tables(0.0)
        if self.inf_mass - self.abs_error > delta:
            return float("inf")  # delta(eps) >= delta(inf) > delta for every eps
        good = lambda e: self.delta_lower(e) > delta  # noqa: E731
        n = len(self._idx)
        above = np.flatnonzero(self._lower_on_grid() > delta) if n else np.array([], dtype=int)
        for j in above[::-1][:64]:
            low = self._grid_point(int(j))
            if low < 0 or not good(low):
                continue
            high = self._grid_point(int(j) + 1) if j + 1 < n else low + self.h
            if good(high):
                return high
            guess = self._crossing(int(j) + 1, self._lower_excess(int(j) + 1, delta, low))
            return -self._bisect(lambda e: good(-e), -high, -low,
                                 guess=None if guess is None else -guess)
        if not good(0.0):
            return 0.0
        high = self._grid_point(0) if n and self._grid_point(0) > 0 else self.h
        if good(high):
            return high
        return -self._bisect(lambda e: good(-e), -high, -0.0)

    def epsilon_upper_ideal(self, delta: float) -> float:
        """The epsilon of the window sum alone (no error terms): what ``epsilon_upper`` would be
        with exact arithmetic and no truncation.  Diagnostic only, *not* certified."""
        self._ensure_tables(0.0)
        if self.inf_mass >= delta:
            return float("inf")
        good = lambda e: self._parts(e)[0] + self.inf_mass <= delta  # noqa: E731
        if good(0.0):
            return 0.0
        n = len(self._idx)
        j = self._first(lambda i: good(self._grid_point(i)), 0, n - 1)
        if j >= n:
            return self._grid_point(n - 1) if n else 0.0
        return self._bisect(good, max(self._grid_point(j - 1) if j else 0.0, 0.0),
                            self._grid_point(j), rtol=_DIAGNOSTIC_RTOL,
                            guess=self._crossing(j, delta - self.inf_mass))

    def epsilon_lower_ideal(self, delta: float) -> float:
        """Counterpart of :meth:`epsilon_upper_ideal` for the lower bound (diagnostic only)."""
        self._ensure_tables(0.0)
        good = lambda e: self._parts(e)[0] + self.inf_mass > delta  # noqa: E731
        if not good(0.0):
            return 0.0
        n = len(self._idx)
        j = self._first(lambda i: not good(self._grid_point(i)), 0, n - 1) - 1
        low = self._grid_point(j) if j >= 0 else 0.0
        high = self._grid_point(j + 1) if j + 1 < n else low + self.h
        if high <= low:
            return low
        if good(high):
            return high
        guess = self._crossing(j + 1, delta - self.inf_mass)
        return -self._bisect(lambda e: good(-e), -high, -low, rtol=_DIAGNOSTIC_RTOL,
                             guess=None if guess is None else -guess)


#: the tilts at which every component's cumulant generating function is tabulated once (a log
#: grid, ratio about 1.5 between neighbours): window edges, tilts and tail certificates are
#: optimised over it, so a composition costs no pass over the components per candidate tilt
LAMBDA_GRID = np.exp(np.linspace(math.log(1e-5), math.log(1e6), 64))


def cumulant_at(component: GridPMF, sign: float, index: int) -> tuple[float, float]:
    """``(K, M)`` of one component at ``lam = sign * LAMBDA_GRID[index]``: an upper bound ``K``
    on ``log sum_i p_i e^(lam s_i)`` over the finite masses and a magnitude ``M`` with ``2 u
    M`` at least the rounding error of ``K``; computed once and memoised on the (immutable)
    component, so that later compositions with the same component (more steps, another query,
    a calibration step) do not pass over its masses again.  ``(nan, nan)`` without finite part.

    The bound is :class:`CumulantBatch`'s (two short tables of exponentials and one
    multiplication per mass, terms below ``e^-700`` bounded by ``e^-700`` times their mass;
    its docstring has the derivation), for this one component and the tilts of a block of
    ``_CUMULANT_BLOCK`` neighbours at once (the searches ask for neighbours).  Numerically
    checked against mpmath (in the project's test suite)."""
    memo = component.__dict__.get("_cumulant_memo")
    if memo is None:  # only scalars are kept: the memo costs no memory per grid bin
        memo = {}
        object.__setattr__(component, "_cumulant_memo", memo)
    key = (sign > 0, int(index))
    if key not in memo:
        start = (int(index) // _CUMULANT_BLOCK) * _CUMULANT_BLOCK
        block = [i for i in range(start, min(start + _CUMULANT_BLOCK, len(LAMBDA_GRID)))
                 if (sign > 0, i) not in memo]
        batch = CumulantBatch([component])
        for i in block:
            values, magnitudes = batch.at(sign, i)
            memo[(sign > 0, i)] = (float(values[0]), float(magnitudes[0]))
    return memo[key]


#: tilts of LAMBDA_GRID whose cumulants :func:`cumulant_at` computes together
_CUMULANT_BLOCK = 4
#: a composition of at least this many distinct components computes their cumulants together
#: (:class:`CumulantBatch`), one vectorised pass over all their masses per tilt
_BATCH_COMPONENTS = 16


class CumulantBatch:
    """The cumulants of many components at once: ``(K_c, M_c)`` of every component ``c`` at
    ``lam = sign * LAMBDA_GRID[index]``, with the meaning of :func:`cumulant_at`, from one
    matrix-vector product over all their masses (composing a thousand distinct steps otherwise
    costs a thousand Python-level passes per tilt).

    The computation (our derivation; the bound of :func:`cumulant_at` with other tables).  Each
    component's positive masses, ordered by their distance ``d`` from its extreme mass on the
    side of ``sign``, fill rows of width ``W = isqrt(n_max) + 1`` (``n_max`` the longest
    component; the last row padded with zeros), so ``d = a W + b`` for row ``a`` of the
    component and column ``b``.  Then ``e^(-|lam| h d) <= T1[a] T2[b]`` with ``T2[b] = e^(-|lam|
    h b)`` and ``T1[a] = max(e^(-|lam| h W a), e^-700)`` (floored: only larger), so ``S_c =
    sum_a T1[a] sum_b p_ab T2[b]`` bounds the shifted sum from above.  Products below the
    normal range lose at most ``2^-1074`` each, added back (at most two per mass).  Rounding:
    each table argument ``x`` has relative error ``2 u`` (``|x| <= 700 + |lam| h W`` for the
    floored table, ``|lam| h W`` for the other), each exponential ``u``, the two products
    ``2 u``, the sums of at most ``W`` and ``rows`` terms (at most ``2 n_c`` in all, in any
    order) ``2 n_c u``, the logarithm and ``lam s_r`` ``u`` each; ``2 u M_c`` covers all of it
    with ``M_c = |lam s_r| + |log S_c| + 2 (min(|lam| h n_c, 700 + |lam| h W) + |lam| h W) +
    n_c + 6``.  Numerically checked against mpmath (test suite).  Components without
    positive mass get ``(nan, nan)``.
    """

    def __init__(self, components: Sequence[GridPMF]) -> None:
        self.h = components[0].h if components else 1.0
        self._pieces, ref_lo, ref_hi = [], [], []
        self._empty = np.zeros(len(components), dtype=bool)
        for i, component in enumerate(components):
            pmf = np.maximum(component.pmf, 0.0)
            positive = np.flatnonzero(pmf > 0)
            if not len(positive):
                self._empty[i] = True
                self._pieces.append(np.ones(1))  # a placeholder; its values are set to nan
                ref_lo.append(0.0)
                ref_hi.append(0.0)
                continue
            first, last = int(positive[0]), int(positive[-1])
            self._pieces.append(pmf[first: last + 1])
            ref_lo.append((component.lo + first) * component.h)
            ref_hi.append((component.lo + last) * component.h)
        lengths = np.asarray([len(x) for x in self._pieces], dtype=np.int64)
        self._n = lengths.astype(float)
        longest = int(lengths.max()) if len(lengths) else 1
        self._width = int(math.isqrt(longest)) + 1
        rows = -(-lengths // self._width)
        self._row_starts = np.concatenate([[0], np.cumsum(rows)[:-1]]).astype(np.int64)
        #: the row of each matrix row within its component (the index into T1)
        self._row_index = np.arange(int(rows.sum()), dtype=np.int64) \
            - np.repeat(self._row_starts, rows)
        self._rows = int(rows.max()) if len(rows) else 1
        self._ref = {False: np.asarray(ref_lo), True: np.asarray(ref_hi)}
        #: the matrix of the side last asked for (one at a time: a window search finishes one
        #: side before the other, and the matrix is as large as the components' masses)
        self._matrix_of: tuple[bool, np.ndarray] | None = None

    def _matrix(self, positive_side: bool) -> np.ndarray:
        """The masses by distance from the last (``positive_side``) or first mass, in rows."""
        if self._matrix_of is None or self._matrix_of[0] != positive_side:
            self._matrix_of = None  # release the other side's matrix first
            width = self._width
            total = len(self._row_index) * width
            flat = np.zeros(total)
            for piece, start in zip(self._pieces, self._row_starts.tolist()):
                ordered = piece[::-1] if positive_side else piece
                flat[start * width: start * width + len(ordered)] = ordered
            self._matrix_of = (positive_side, flat.reshape(-1, width))
        return self._matrix_of[1]

    def at(self, sign: float, index: int) -> tuple[np.ndarray, np.ndarray]:
        """``(K, M)`` arrays over the components (see the class docstring)."""
        lam = sign * float(LAMBDA_GRID[index])
        rate = abs(lam) * self.h
        with np.errstate(under="ignore"):
            inner = np.exp(-rate * np.arange(self._width))
            outer = np.maximum(np.exp(-rate * self._width * np.arange(self._rows)),
                               math.exp(-700.0))
            # einsum: a plain loop, no threaded BLAS call
            per_row = np.einsum("rw,w->r", self._matrix(sign > 0), inner)
            total = np.add.reduceat(per_row * outer[self._row_index], self._row_starts)
        total = total + 2 * self._n * 5e-324
        log_sum = np.log(total)
        ref = self._ref[sign > 0]
        span = rate * self._width
        magnitude = (np.abs(lam * ref) + np.abs(log_sum)
                     + 2 * (np.minimum(rate * self._n, 700.0 + span) + span) + self._n + 6.0)
        value = lam * ref + log_sum
        value[self._empty] = math.nan
        magnitude[self._empty] = math.nan
        return value, magnitude


def grid_minimum(objective, size: int = len(LAMBDA_GRID), stride: int = 8,
                 start: int | None = None) -> int:
    """Index minimising ``objective(index)`` over ``range(size)``.  Without ``start``: every
    ``stride``-th index, then around the best at half the distance, a quarter, ... down to 1
    (about ``size / stride + 2 log2(stride)`` evaluations).  With a guess ``start``: a pattern
    search from it (the step doubles after a success and halves after a failure; a few
    evaluations when the guess is good).  Either way a quasi-convex objective -- the Chernoff
    exponents here -- is minimised exactly, and any index gives a valid bound.  NaN counts as
    +inf."""
    values: dict[int, float] = {}

    def value(i: int) -> float:
        if i not in values:
            v = objective(i)
            values[i] = math.inf if math.isnan(v) else v
        return values[i]

    if start is not None:
        best, step = min(max(int(start), 0), size - 1), 1
        while True:
            around = [i for i in (best - step, best + step) if 0 <= i < size]
            candidate = min(around, key=value) if around else best
            if value(candidate) < value(best):
                best, step = candidate, step * 2
            elif step > 1:
                step //= 2
            else:
                return best
    coarse = list(range(0, size, stride))
    if coarse[-1] != size - 1:
        coarse.append(size - 1)
    best = min(coarse, key=value)
    step = stride // 2
    while step >= 1:
        best = min((i for i in (best - step, best, best + step) if 0 <= i < size), key=value)
        step //= 2
    return best


def moments(component: GridPMF) -> tuple[float, float, float]:
    """``(log mass, mean, variance)`` of the finite part of one component (memoised): the
    Gaussian approximation ``K(lam) ~ log m + lam mean + lam^2 var / 2`` that supplies the
    starting guesses of the tilt searches (only guesses: every bound uses the exact ``K``)."""
    memo = component.__dict__.get("_moments")
    if memo is None:
        pmf = np.maximum(component.pmf, 0.0)
        mass = float(np.sum(pmf))
        if mass > 0:
            s = component.losses()
            mean = float(np.einsum("i,i->", pmf, s)) / mass  # einsum: no threaded BLAS call
            memo = (math.log(mass), mean, float(np.einsum("i,i->", pmf, (s - mean) ** 2)) / mass)
        else:
            memo = (-math.inf, 0.0, 0.0)
        object.__setattr__(component, "_moments", memo)
    return memo


def lambda_index(lam: float) -> int:
    """Index of the point of :data:`LAMBDA_GRID` nearest to ``lam`` (in log scale)."""
    if not (math.isfinite(lam) and lam > 0):
        return len(LAMBDA_GRID) // 2
    ratio = math.log(LAMBDA_GRID[1] / LAMBDA_GRID[0])
    # logs taken apart: lam / LAMBDA_GRID[0] overflows for lam near the float maximum
    position = (math.log(lam) - math.log(LAMBDA_GRID[0])) / ratio
    return int(min(max(round(min(position, float(len(LAMBDA_GRID)))), 0), len(LAMBDA_GRID) - 1))


class _CumulantSum:
    """``lam -> sum_i k_i log E[e^(lam L_i)]`` for the finite parts, computed exactly.

    Shifting by ``lam * s_max`` (``lam > 0``) or ``lam * s_min`` (``lam < 0``) keeps every
    exponential at most 1, and the extreme atom has positive mass, so the sum never underflows.
    """

    def __init__(self, components: Sequence[tuple[GridPMF, int]]) -> None:
        self._components = [(c, float(k)) for c, k in components]
        self._parts_cache = None  # for with_magnitude only (at() uses the memoised tables)
        self._batch = None  # CumulantBatch of many components, built at the first at()
        self._totals: dict = {}

    @property
    def _parts(self):
        if self._parts_cache is None:
            parts = []
            for c, k in self._components:
                pmf = np.maximum(c.pmf, 0.0)
                keep = pmf > 0
                s = c.losses()[keep]
                parts.append((np.log(pmf[keep]), s, float(s.max()), float(s.min()), k))
            self._parts_cache = parts
        return self._parts_cache

    def __call__(self, lam: float) -> float:
        return self.with_magnitude(lam)[0]

    def at(self, sign: float, index: int) -> tuple[float, float, float]:
        """``(lam, K, M)`` at ``lam = sign * LAMBDA_GRID[index]``: sums over the components of
        their memoised values (:func:`cumulant_at`).  ``K + 8 u M`` bounds the exact ``K`` from
        above: each component's ``K_c`` is within ``2 u M_c``, each product ``k K_c`` within
        ``u`` of itself and the correctly rounded sum (``math.fsum``) within ``u`` of the total,
        at most ``4 u M`` in all.  Many components are computed together
        (:class:`CumulantBatch`), a few one by one (:func:`cumulant_at`, memoised on each)."""
        key = (sign > 0, int(index))
        found = self._totals.get(key)
        if found is None:
            counts = [k for _, k in self._components]
            if len(self._components) >= _BATCH_COMPONENTS:
                if self._batch is None:
                    self._batch = CumulantBatch([c for c, _ in self._components])
                values, magnitudes = self._batch.at(sign, int(index))
                values, magnitudes = values.tolist(), magnitudes.tolist()
            else:
                each = [cumulant_at(c, sign, index) for c, _ in self._components]
                values, magnitudes = [v for v, _ in each], [m for _, m in each]
            found = (math.fsum(k * v for k, v in zip(counts, values)),
                     math.fsum(k * m for k, m in zip(counts, magnitudes)))
            self._totals[key] = found
        return sign * float(LAMBDA_GRID[index]), found[0], found[1]

    def moments(self) -> tuple[float, float, float]:
        """``(log mass, mean, variance)`` of the composed finite part (sums of the components'
        :func:`moments`; for starting guesses only)."""
        log_mass = mean = variance = 0.0
        for component, k in self._components:
            lm, mu, var = moments(component)
            log_mass, mean, variance = log_mass + k * lm, mean + k * mu, variance + k * var
        return log_mass, mean, variance

    def upper_at(self, sign: float, index: int) -> tuple[float, float]:
        """``(lam, K rounded up)`` at ``lam = sign * LAMBDA_GRID[index]``."""
        lam, value, magnitude = self.at(sign, index)
        return lam, value + 8 * _U * magnitude

    def with_magnitude(self, lam: float) -> tuple[float, float]:
        """``(K(lam), M)`` with ``M = sum_i k_i (|lam ref_i| + |log sum_i|)``: the rounding
        error of the computed ``K`` is at most a few ``u M`` (each term is a product of an
        exact count and a value with relative error ``u (|s| lam + log2 n + 4)``)."""
        total, magnitude = 0.0, 0.0
        for log_pmf, s, s_max, s_min, k in self._parts:
            ref = s_max if lam > 0 else s_min
            # terms are floored at e^-700 (no slow subnormals); that only increases the sum
            exponent = np.maximum(log_pmf + lam * (s - ref), -700.0)
            log_sum = math.log(float(np.sum(np.exp(exponent))))
            total += k * (lam * ref + log_sum)
            magnitude += k * (abs(lam * ref) + abs(log_sum) + 1.0)
        return total, magnitude


def _best_lambda(objective, sign: float, lam_min: float = 1e-3) -> tuple[float, float]:
    """Approximately minimise ``objective(sign * lam)`` over ``lam > 0``; returns (lam, value).
    Any lam gives a valid Chernoff bound, so an approximate minimiser is enough.  The search runs
    over ``[lam_min, 2e3]`` on a log grid (eight points from 1e-3 up, more below)."""
    points = max(8, math.ceil(0.55 * (math.log(2e3) - math.log(lam_min))))
    grid = np.linspace(math.log(lam_min), math.log(2e3), points)
    values = [objective(sign * math.exp(g)) for g in grid]
    best = int(np.argmin(values))
    a = grid[max(best - 1, 0)]
    b = grid[min(best + 1, len(grid) - 1)]
    result = minimize_scalar(lambda g: objective(sign * math.exp(g)), bounds=(a, b),
                             method="bounded", options={"xatol": 3e-2, "maxiter": 6})
    if result.fun < values[best]:
        return math.exp(result.x), float(result.fun)
    return math.exp(grid[best]), float(values[best])


#: windows computed recently (:func:`_window`), keyed by the components' identities (checked
#: through weak references), counts and ``tail_mass``: a query asks for the window of the same
#: composition several times (its size first, then the composition itself)
_WINDOWS: "OrderedDict[tuple, tuple[tuple, tuple]]" = OrderedDict()
_WINDOWS_SIZE = 16
_WINDOWS_LOCK = threading.Lock()


def _window(components: Sequence[tuple[GridPMF, int]], tail_mass: float, max_bins: int):
    """Choose the window [w_lo, w_hi] (grid indices) and bound the mass outside it
    (:func:`_window_edges`, memoised); NumericalError when it has more than ``max_bins`` bins."""
    key = (tuple((id(c), k) for c, k in components), float(tail_mass))
    with _WINDOWS_LOCK:
        found = _WINDOWS.get(key)
        if found is not None and all(ref() is c for ref, (c, _) in zip(found[0], components)):
            _WINDOWS.move_to_end(key)
            result = found[1]
        else:
            result = None
    if result is None:
        result = _window_edges(components, tail_mass)
        with _WINDOWS_LOCK:
            _WINDOWS[key] = (tuple(weakref.ref(c) for c, _ in components), result)
            while len(_WINDOWS) > _WINDOWS_SIZE:
                _WINDOWS.popitem(last=False)
    w_lo, w_hi = result[0], result[1]
    if w_hi - w_lo + 1 > max_bins:
        raise NumericalError(
            f"composing to the requested accuracy needs {w_hi - w_lo + 1:,} grid bins, more than "
            f"the memory limit allows ({max_bins:,})",
            "use a coarser value_discretization_interval (larger eps_tolerance), a larger tail_mass, "
            "or raise memory_limit")
    return result


def _window_edges(components: Sequence[tuple[GridPMF, int]], tail_mass: float):
    """The window [w_lo, w_hi] (grid indices) and the certified mass above and below it.

    ``P(S >= w) <= exp(K(lam) - lam w) <= tail_mass`` iff ``w >= (K(lam) - log tail_mass) / lam``;
    likewise for ``-S``.
    """
    h = components[0][0].h
    support_lo = sum(k * c.lo for c, k in components)
    support_hi = sum(k * c.hi for c, k in components)
    if support_hi - support_lo < 4096:
        return support_lo, support_hi, 0.0, 0.0  # small enough: no truncation at all
    cumulants = _CumulantSum(components)
    log_tail = math.log(tail_mass)
    # one table per component (LAMBDA_GRID), summed: the edge is optimised over the grid only
    # (any lam gives a valid Chernoff bound; the grid ratio of 1.5 widens it by a few per cent)
    edges = []
    log_mass, _, variance = cumulants.moments()
    guess = lambda_index(math.sqrt(2.0 * max(log_mass - log_tail, 1.0) / variance)
                         if variance > 0 else math.nan)
    for sign in (1.0, -1.0):
        def edge_of(i: int, sign: float = sign) -> float:
            lam, upper_k = cumulants.upper_at(sign, i)  # K rounded up: a valid upper bound
            return (upper_k - log_tail) / abs(lam)
        best = grid_minimum(edge_of, start=guess)
        lam, upper_k = cumulants.upper_at(sign, best)
        edges.append((abs(lam), edge_of(best), upper_k))
    (lam_up, edge_up, k_up), (lam_dn, edge_dn, k_dn) = edges
    w_hi = min(support_hi, math.ceil(edge_up / h))
    w_lo = max(support_lo, math.floor(-edge_dn / h))
    # certified mass strictly above w_hi and strictly below w_lo (Chernoff at the chosen lam)
    tail_above = 0.0 if w_hi >= support_hi else \
        min(1.0, math.exp(min(0.0, k_up - lam_up * (w_hi + 1) * h)) * (1 + 1e-12))
    tail_below = 0.0 if w_lo <= support_lo else \
        min(1.0, math.exp(min(0.0, k_dn + lam_dn * (w_lo - 1) * h)) * (1 + 1e-12))
    return w_lo, w_hi, tail_above, tail_below


#: bytes per bin of a composed FFT window: the transform's arrays (real input, the half-spectrum's
#: accumulators and error bounds, in long double for extended precision) while composing, and
#: the composed masses with their evaluation tables after (long double where tilted).  Measured
#: by peak resident memory per window bin at 5.6e6 bins: 72 (double), 99 (extended), 105 and
#: 114 with a tilted composition's tables.  :func:`compose_grid_pmfs` refuses a window above
#: ``memory_limit`` / this (it was 48, and a query at delta = 1e-300 reached 6.3 GB under the
#: default 1 GiB limit)
BYTES_PER_WINDOW_BIN = 128


def window_limit(memory_limit: int) -> int:
    """The most bins an FFT window may have under ``memory_limit`` bytes
    (:data:`BYTES_PER_WINDOW_BIN` each).

    Example::

        >>> window_limit(1 << 30) == 2 ** 23
        True
    """
    return int(memory_limit) // BYTES_PER_WINDOW_BIN


def window_bins(components: Sequence[tuple[GridPMF, int]], tail_mass: float) -> int:
    """Bins of the FFT window :func:`compose_grid_pmfs` would use for ``components`` (from the
    components' cumulants: no transform; 1 when there is no finite part)."""
    components = [(c, int(k)) for c, k in components if k > 0]
    if not components or any(not np.any(c.pmf > 0) for c, _ in components):
        return 1
    w_lo, w_hi, _, _ = _window(components, tail_mass, max_bins=2 ** 62)
    return max(w_hi - w_lo + 1, 1)


def _exp_linear(first: float, slope: float, n: int) -> tuple[np.ndarray, int]:
    """``exp(first + slope * i)`` for ``i < n`` in long double, as an outer product of two short
    tables of exponentials (one multiplication per entry instead of one exponential; relative
    error a few ``u_ld`` per unit of argument).  Exponents are capped at 11300 (the long-double
    range ends at 11356); returns the values and the last index whose exponent was capped (-1 if
    none), below which the values are not to be trusted."""
    ld = np.longdouble
    if n <= 0:
        return np.zeros(0, dtype=ld), -1
    width = max(1, int(math.isqrt(n)))
    rows = -(-n // width)
    inner = np.exp(ld(slope) * np.arange(width).astype(ld))
    outer_arg = ld(first) + ld(slope) * (np.arange(rows).astype(ld) * ld(width))
    capped = np.flatnonzero(outer_arg > 11300)
    outer = np.exp(np.minimum(outer_arg, ld(11300)))
    values = (outer[:, None] * inner[None, :]).ravel()[:n]
    last_bad = min(int((capped[-1] + 1) * width) - 1, n - 1) if len(capped) else -1
    if slope > 0:  # increasing exponents: the cap can bite inside a row; mark the tail
        arg_last = first + slope * (n - 1)
        if arg_last > 11300:
            last_bad = n - 1
    return values, last_bad


def _norm_upper(values: np.ndarray) -> float:
    """An upper bound on the 2-norm of ``values`` (the computed norm, rounded up by ``4 u`` per
    unit of ``log2 N``: pairwise summation of non-negative terms).  ``einsum``, not the BLAS dot
    product: a threaded BLAS call on a loaded 2-core machine cost 3.5 ms for 64k entries
    (einsum: 0.04 ms) and was the most expensive step of a small composition."""
    x = np.asarray(values, dtype=float)
    total = float(np.einsum("i,i->", x, x))
    return math.sqrt(total) * (1 + 4 * _U * (math.log2(max(len(x), 2)) + 2))


def _frequency_zero_error(components: Sequence[tuple[GridPMF, int]], u_work: float,
                          log2n: float) -> float:
    """Lower bound on the frequency-0 coefficient error term of :func:`compose_grid_pmfs`
    (``G(0) sum_i k_i eta_i / m_i(0)``; the transform at frequency 0 is the sum of the masses),
    hence on its ``fp_error`` minus the construction error: computed without any transform."""
    log_g, ratio = 0.0, 0.0
    for c, k in components:
        eta = _C_FFT * u_work * log2n * float(np.sum(np.abs(c.pmf)))
        magnitude = abs(float(np.sum(c.pmf))) + eta
        if magnitude <= 0:
            return 0.0
        log_g += k * math.log(magnitude)
        ratio += k * eta / magnitude
    if log_g >= 709.0:   # (math.exp raised an OverflowError: a grid step of 1e300)
        return math.inf
    return math.exp(log_g) * ratio if log_g > -745.0 else 0.0


def _tilted(component: GridPMF, tilt: float) -> tuple[GridPMF, float, float, float]:
    """The finite part of ``component`` tilted by ``e^(tilt s)`` and normalised.

    Returns ``(tilted, log_normaliser, rel, lost)``: ``tilted.pmf[i] = pmf[i] e^(tilt s_i - c)``
    with ``c = log_normaliser``, each entry within a relative ``rel`` of that value (the exponential
    of an argument ``t`` costs about ``u (|t| + 1)``, the normalising sum ``u log2(n)``, the losses
    ``s_i`` themselves ``u |s_i|``), except entries that underflow below the smallest normal
    number: their total is at most ``lost`` (in tilted units).
    """
    pmf = np.maximum(component.pmf, 0.0)
    s = component.losses()
    positive = pmf > 0
    s_max = float(s[positive].max())
    s_min = float(s[positive].min())
    with np.errstate(under="ignore"):
        weights = pmf * np.exp(tilt * (s - s_max))
    total = float(np.sum(weights))
    tilted = weights / total
    log_normaliser = tilt * s_max + math.log(total)
    span = tilt * (s_max - s_min)
    scale = tilt * max(abs(s_max), abs(s_min))
    rel = _U * (2 * span + 4 * scale + 2 * math.log2(max(len(pmf), 2)) + 12)
    tiny = np.finfo(float).tiny
    lost = float(np.count_nonzero(positive & (tilted < tiny))) * tiny
    return (GridPMF(component.h, component.lo, tilted, 0.0, 0.0), log_normaliser, rel, lost)


def _refuse_below_floor(components, work, u_work: float, log2n: float, construction_error: float,
                        fp_limit: float) -> None:
    """NumericalError when the composition's floating-point term certainly exceeds
    ``fp_limit``: its frequency-0 part (:func:`_frequency_zero_error`, at a transform of at
    least ``2^log2n``) plus the construction error already does."""
    if not fp_limit < math.inf:
        return
    floor = _frequency_zero_error(components, u_work, log2n) + construction_error
    if 0.99 * floor > fp_limit:
        total = sum(k for _, k in components)
        precision = "extended" if work is not np.float64 else "double"
        raise NumericalError(
            f"delta={fp_limit:.3g} is not above the certified floating-point error term of "
            f"composing {total:,} steps by FFT in {precision} precision (at least "
            f"{floor:.3g}; it grows with the number of steps)",
            larger_delta_advice(floor, "account fewer steps")
            + (", or account fewer steps" if floor < 1 else ""))


def compose_grid_pmfs(components: Sequence[tuple[GridPMF, int]], *, tail_mass: float = 1e-15,
                      memory_limit: int = 1 << 30, extended: bool = False,
                      extended_inverse: bool = False, tilt: float = 0.0,
                      fp_limit: float = math.inf) -> ComposedPLD:
    """Compose ``count`` copies of each grid PLD; returns the composed PLD with error terms.

    ``fp_limit`` (untilted compositions only): raise :class:`NumericalError` before any
    transform when the floating-point term ``fp_error`` would certainly exceed it (its
    frequency-0 part, :func:`_frequency_zero_error`, already does).  An epsilon query at
    ``delta`` passes ``delta``: a composition whose error terms exceed ``delta`` cannot answer it.

    ``extended=True`` runs the forward transforms and powers in long double (slower, with a
    floating-point error term about 2000 times smaller on x86); with ``extended_inverse=True`` as
    well, the products and the inverse transform are also computed in long double (the window
    is then rounded to double, a relative error ``u`` recorded in ``rel_error``).

    ``tilt = lam > 0`` composes the exponentially tilted components ``p_i(s) e^(lam s) / M_i(lam)``
    instead (the Esscher transform, as in saddle-point approximations; Koskela et al. 2021 use
    the untilted FFT).  Tilting commutes with convolution, so the window holds the tilted
    composition and the finite composed mass at ``s`` is the window value times
    ``exp(log_scale - lam s)`` with ``log_scale = sum_i k_i log M_i(lam)``.  The point (our
    derivation): the FFT's error is *absolute* in the units of the window, so untilted it is
    absolute in delta, whereas tilted it is multiplied by ``exp(log_scale - lam eps)`` -- the
    Chernoff bound on ``P(S > eps)`` -- in a delta at ``eps``.  Choosing ``lam`` near the
    Chernoff optimum for the query makes every window error term relative to delta, so deltas
    far below the absolute floating-point floor (1e-12, 1e-15) are certified.  The truncation
    terms are the Chernoff bounds of the *tilted* composition, likewise weighted.
    """
    components = [(c, int(k)) for c, k in components if k > 0]
    if not components:
        return ComposedPLD(1.0, 0, np.array([1.0]), 0.0, 0.0, 0.0, 0.0)
    h = components[0][0].h
    if any(c.h != h for c, _ in components):
        raise ValueError("all components must share the same grid step")
    if tilt > 0 and all(np.any(c.pmf > 0) for c, _ in components):
        parts, log_scale, rel_sum, lost = [], 0.0, 0.0, 0.0
        scale_terms = 0.0
        for c, k in components:
            tilted, log_m, rel, lost_i = _tilted(c, tilt)
            parts.append((tilted, k))
            log_scale += k * log_m
            scale_terms += k * (abs(log_m) + 1.0)
            rel_sum += k * math.log1p(rel)
            lost += k * lost_i
        inner = compose_grid_pmfs(parts, tail_mass=tail_mass, memory_limit=memory_limit,
                                  extended=extended, extended_inverse=extended_inverse)
        survive = math.prod((1.0 - c.inf_mass) ** k for c, k in components)
        inf_mass = -math.expm1(sum(k * math.log1p(-min(c.inf_mass, 1.0))
                                   for c, k in components)) if survive > 0 else 1.0
        # log_scale is rounded (a relative error of exp(log_scale) of 4 u per unit of the terms)
        exponent = rel_sum + 4 * _U * scale_terms
        if not exponent < 700.0:
            # (math.expm1 raised an OverflowError: swap, 10^15 epochs of sigma = 300)
            raise NumericalError(
                f"the tilted composition's relative error bound, exp({exponent:.4g}) - 1, is "
                "beyond the floating-point range", "compose fewer steps, or ask for a delta "
                "the untilted composition certifies (above its floating-point floor)")
        rel_error = math.expm1(exponent) + inner.rel_error
        return ComposedPLD(h=h, lo=inner.lo, pmf=inner.pmf, inf_mass=inf_mass,
                           tail_above=inner.tail_above, tail_below=inner.tail_below,
                           fp_error=inner.fp_error + lost, rel_error=rel_error, tilt=tilt,
                           log_scale=log_scale,
                           abs_error=sum(k * c.fp_error for c, k in components))
    survive = math.prod((1.0 - c.inf_mass) ** k for c, k in components)
    inf_mass = -math.expm1(sum(k * math.log1p(-min(c.inf_mass, 1.0)) for c, k in components)) \
        if survive > 0 else 1.0
    construction_error = sum(k * c.fp_error for c, k in components)
    if any(not np.any(c.pmf > 0) for c, _ in components):
        # a component with all its mass at +inf: the composition has no finite part
        return ComposedPLD(h, 0, np.zeros(1), 1.0 if survive == 0 else inf_mass, 0.0, 0.0,
                           construction_error)
    bytes_per_bin = BYTES_PER_WINDOW_BIN
    # Forward transforms, powers and products in extended precision where the platform has it:
    # the power k amplifies the forward error k-fold, so this is where digits are lost.
    work = np.longdouble if extended and np.finfo(np.longdouble).eps < 1e-18 else np.float64
    u_work = float(np.finfo(work).eps) / 2
    w_lo, w_hi, tail_above, tail_below = _window(components, tail_mass, sys.maxsize)
    if w_hi - w_lo + 1 > window_limit(memory_limit):
        # a delta below the floating-point floor is refused for that reason first (no memory
        # limit would let it answer); the transform is at least the window, so the floor with
        # log2 of the window is a lower bound
        _refuse_below_floor(components, work, u_work, math.log2(max(w_hi - w_lo + 1, 2)),
                            construction_error, fp_limit)
        _window(components, tail_mass, window_limit(memory_limit))   # raises the reason
    if w_hi < w_lo:
        # the whole finite part is below the tail allowance: keep none of it, charge all of it
        finite = math.exp(sum(k * math.log(float(np.sum(np.maximum(c.pmf, 0.0))))
                              for c, k in components))
        return ComposedPLD(h, 0, np.zeros(1), inf_mass, finite, finite, construction_error)
    size = transform_size(w_hi - w_lo + 1)
    if size * bytes_per_bin > memory_limit:
        size = sp_fft.next_fast_len(w_hi - w_lo + 1, real=True)
    log2n = math.log2(max(size, 2))
    _refuse_below_floor(components, work, u_work, log2n, construction_error, fp_limit)
    half = size // 2 + 1
    # One pass over the components: log-modulus and phase of every spectrum in the working
    # precision, accumulated with the counts, and the error-bound terms with the magnitudes
    # m_i = |a_i| + eta_i (memory O(size) beyond the bounded cache of :mod:`spectra`).
    # the count-independent terms, cached per component and size (:mod:`spectra`); the
    # error of the computed transform is that of the *stored* masses, the construction
    # error of the masses themselves is charged separately (construction_error, an l1 bound)
    parts = [(c, k, _C_FFT * u_work * log2n * float(np.sum(np.abs(c.pmf))))
             for c, k in components]
    # log-modulus, phase, log G, sum k eta / m, sum k |log a| (see SpectralTerms)
    sums = summed_spectral_terms(parts, size, work)
    log_modulus, phase, log_g, err_ratio, pow_terms = sums
    pow_terms += 1.0  # 1 + sum_i k_i (|log a_i| + 0.2), spectra.power_rounding
    # Only frequencies where the bound G = prod m_i^k_i is above e^-745 can contribute anything
    # representable; elsewhere both the product and its error bound are below double's range.
    live = np.flatnonzero(log_g > -745.0)
    log_modulus, phase = log_modulus[live], phase[live]
    err_ratio, pow_terms = err_ratio[live], pow_terms[live]
    full = extended_inverse and work is not np.float64
    with np.errstate(under="ignore"):
        if full:
            # products and inverse transform in long double as well
            product = np.zeros(half, dtype=np.clongdouble)
            product[live] = from_log_polar(log_modulus, phase)
        else:
            # reduce the phase in the working precision (its error is in the power term), then
            # round to double
            product = np.zeros(half, dtype=complex)
            product[live] = (np.exp(log_modulus).astype(float)
                             * np.exp(1j * reduce_phase(phase).astype(float)))
        # the sums over the K components above (in chunks, :func:`summed_spectral_terms`) are
        # each off by at most gamma_K = K u / (1 - K u) times the sum of the absolute terms
        # whatever the order (Higham 2002, Sec. 4.2;
        # the products k x and the logarithms add u each): G is raised by that (in double;
        # sum k |log m| <= |log G| + 1 since log m > 0 only by eta), and the log-modulus and
        # phase sums (working precision) are charged with max(c, K + 3) in place of c
        count = len(components)
        g = np.exp(log_g[live] + (count + 3) * _U * (np.abs(log_g[live]) + 1.0))
    sum_factor = max(_C_FFT, count + 3.0)
    err_ratio = err_ratio * (1 + (count + 2) * _U)
    # rounding of the product in the output precision, relative to G: a phase in [0, 2 pi)
    # rounded to it is off by at most 4 u absolutely (half an ulp in [4, 8)), the exponential,
    # the sine and cosine and the complex product add about 4 u more; 10 u covers them
    u_out = u_work if full else _U
    before_transform(size, product.real.dtype)
    composed = sp_fft.irfft(product, n=size)
    # The l1 norm of the output error is at most the 2-norm of the coefficient error over the
    # full spectrum (the inverse DFT scaled by 1/N has 2-norm 1/sqrt(N)); the inverse transform's
    # own rounding adds c u log2(N) sqrt(N) ||output||_2 (Higham 2002, Sec. 24.1).
    coeff_error = g * (err_ratio + sum_factor * u_work * pow_terms * (1 + 1e-9) + 10 * u_out)
    weights = np.full(half, 2.0)
    weights[0] = 1.0
    if size % 2 == 0:
        weights[-1] = 1.0
    # frequencies outside `live` have G < e^-745: their error is below 2^-1074 each; at live
    # ones whose product or G is below the normal range, its rounding is absolute (at most
    # 2^-1074 in each of the real and imaginary parts), not relative: 4 * 2^-1074 per frequency
    # covers both cases
    dead = half * 4 * 5e-324
    fft_error = float(np.sqrt(np.sum(weights[live] * coeff_error ** 2)) + dead
                      + _C_FFT * u_out * log2n * math.sqrt(size) * _norm_upper(composed))
    window = np.roll(composed, -(w_lo % size))[: w_hi - w_lo + 1]
    # rounding the long-double window to double: a relative error u of each mass
    rel_error = _U if full else 0.0
    # the window entries are the finite part; scale check is implicit in the masses
    return ComposedPLD(h=h, lo=w_lo, pmf=np.asarray(window, dtype=float), inf_mass=inf_mass,
                       tail_above=tail_above, tail_below=tail_below,
                       fp_error=fft_error + construction_error, rel_error=rel_error)
