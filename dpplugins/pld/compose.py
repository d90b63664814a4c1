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
  ``G = prod m_i^k_i``, plus the rounding of ``exp(sum k_i log a_i)`` (relative
  ``c u (1 + sum k_i |log a_i|)``, the complex logarithm including its phase).  Summing over frequencies bounds the l1 error of the
  inverse transform, which bounds the error of any delta (``fp_error``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import fft as sp_fft
from scipy.optimize import minimize_scalar

from dpplugins.errors import NumericalError
from dpplugins.pld.grid import GridPMF

__all__ = ["ComposedPLD", "compose_grid_pmfs"]

_U = np.finfo(float).eps / 2
_C_FFT = 10.0


@dataclass(frozen=True)
class ComposedPLD:
    """P-masses of the composed finite privacy loss on ``(lo + i) * h`` (a window of the grid).

    ``delta_upper(eps)`` and ``delta_lower(eps)`` are certified bounds on the hockey-stick
    divergence of the composition of the *component pairs* (upper for pessimistic components,
    lower for optimistic ones; see :mod:`dpplugins.pld.grid`).
    """

    h: float
    lo: int
    pmf: np.ndarray
    inf_mass: float
    tail_above: float
    tail_below: float
    fp_error: float

    def __post_init__(self) -> None:
        s = (self.lo + np.arange(len(self.pmf))) * self.h
        mass = np.maximum(self.pmf, 0.0)  # negative entries are rounding noise (inside fp_error)
        # suffix sums for delta(eps) = sum_{s > eps} m - e^eps sum_{s > eps} m e^-s, in long double
        # for s >= 0 only (we never evaluate delta at negative epsilon)
        start = int(np.searchsorted(s, 0.0, side="left"))
        s_pos, m_pos = s[start:], mass[start:].astype(np.longdouble)
        suffix_m = np.cumsum(m_pos[::-1])[::-1]
        suffix_me = np.cumsum((m_pos * np.exp(-s_pos.astype(np.longdouble)))[::-1])[::-1]
        object.__setattr__(self, "_s", s_pos)
        object.__setattr__(self, "_suffix_m", np.append(suffix_m, 0.0))
        object.__setattr__(self, "_suffix_me", np.append(suffix_me, 0.0))
        # relative error of the long-double suffix sums (non-negative terms)
        object.__setattr__(self, "_sum_rel", 2.0 * len(s_pos) * np.finfo(np.longdouble).eps + 4 * _U)

    # -- raw hockey-stick of the stored window ---------------------------------------------------
    def _raw(self, epsilon: float) -> float:
        """``sum_{s > eps} (1 - e^(eps - s)) m(s)`` over the stored window, for ``eps >= 0``."""
        j = int(np.searchsorted(self._s, epsilon, side="right"))
        value = self._suffix_m[j] - np.exp(np.longdouble(epsilon)) * self._suffix_me[j]
        return max(float(value), 0.0)

    def _upper_offset(self) -> float:
        return self.inf_mass + self.tail_above + self.fp_error

    def _lower_offset(self) -> float:
        return self.tail_above + self.tail_below + self.fp_error - self.inf_mass

    def delta_upper(self, epsilon: float) -> float:
        """Certified upper bound on delta(epsilon) (epsilon >= 0): window sum plus delta(inf),
        the Chernoff bound on the mass above the window and the floating-point term."""
        return float(min(1.0, self._raw(epsilon) * (1 + self._sum_rel) + self._upper_offset()))

    def delta_lower(self, epsilon: float) -> float:
        """Certified lower bound on delta(epsilon): window sum minus everything that may have been
        folded into the window and the floating-point term, plus delta(inf)."""
        return float(max(0.0, self._raw(epsilon) * (1 - self._sum_rel) - self._lower_offset()))

    # -- inversion --------------------------------------------------------------------------------
    def _solve(self, target: float) -> float:
        """Smallest ``eps >= 0`` with ``raw(eps) <= target`` (raw is continuous, non-increasing)."""
        if self._raw(0.0) <= target:
            return 0.0
        # raw at grid point s_j is suffix_m[j+1] - e^(s_j) suffix_me[j+1]; it does not increase
        # with j, so bisect for the first grid point where it is <= target
        def raw_at(j: int):
            return self._suffix_m[j + 1] - np.exp(np.longdouble(self._s[j])) * self._suffix_me[j + 1]

        lo_j, hi_j = 0, len(self._s) - 1
        if len(self._s) == 0 or raw_at(hi_j) > target:
            return float("inf")
        while lo_j < hi_j:
            mid = (lo_j + hi_j) // 2
            if raw_at(mid) <= target:
                hi_j = mid
            else:
                lo_j = mid + 1
        idx = lo_j
        # eps lies in (s_{idx-1}, s_idx]; there raw = A - e^eps B with the sums over s >= s_idx
        a_sum, b_sum = self._suffix_m[idx], self._suffix_me[idx]
        if b_sum <= 0:
            return float(self._s[idx])
        value = float(np.log((a_sum - np.longdouble(target)) / b_sum))
        low = float(self._s[idx - 1]) if idx > 0 else 0.0
        return min(max(value, low), float(self._s[idx]))

    def epsilon_upper(self, delta: float) -> float:
        """Smallest certified epsilon: ``delta_upper(eps) <= delta``."""
        target = (delta - self._upper_offset()) / (1 + self._sum_rel)
        if self.inf_mass >= delta:
            return float("inf")  # delta(eps) >= delta(inf) >= delta for every eps: no finite eps
        if target <= 0:
            raise NumericalError(
                f"delta={delta:g} is not above the certified error terms "
                f"(delta(inf)={self.inf_mass:.3g}, truncation={self.tail_above:.3g}, "
                f"floating point={self.fp_error:.3g})",
                "ask for a larger delta, or a finer grid / smaller tail_mass when the error terms "
                "dominate")
        eps = self._solve(target)
        # guard against rounding in the solve: nudge up until the certified inequality holds
        step = 1e-15
        while self.delta_upper(eps) > delta:
            eps = eps * (1 + step) + step
            step *= 2
        return eps

    def epsilon_lower(self, delta: float) -> float:
        """Largest epsilon for which ``delta_lower(eps) > delta`` is certified (0 if none)."""
        target = (delta + self._lower_offset()) / (1 - self._sum_rel)
        if target >= 1.0:
            return 0.0
        eps = self._solve(target)
        if not math.isfinite(eps):
            return 0.0
        step = 1e-15
        while eps > 0 and self.delta_lower(eps) < delta:
            eps = max(0.0, eps * (1 - step) - step)
            step *= 2
        return eps


class _CumulantSum:
    """``lam -> sum_i k_i log E[e^(lam L_i)]`` for the finite parts, computed exactly.

    Shifting by ``lam * s_max`` (``lam > 0``) or ``lam * s_min`` (``lam < 0``) keeps every
    exponential at most 1, and the extreme atom has positive mass, so the sum never underflows.
    """

    def __init__(self, components: Sequence[tuple[GridPMF, int]]) -> None:
        self._parts = []
        for c, k in components:
            pmf = np.maximum(c.pmf, 0.0)
            keep = pmf > 0
            s = c.losses()[keep]
            self._parts.append((np.log(pmf[keep]), s, float(s.max()), float(s.min()), k))

    def __call__(self, lam: float) -> float:
        total = 0.0
        for log_pmf, s, s_max, s_min, k in self._parts:
            ref = s_max if lam > 0 else s_min
            # terms are floored at e^-700 (no slow subnormals); that only increases the sum
            exponent = np.maximum(log_pmf + lam * (s - ref), -700.0)
            total += k * (lam * ref + math.log(float(np.sum(np.exp(exponent)))))
        return total


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


def _window(components: Sequence[tuple[GridPMF, int]], tail_mass: float, max_bins: int):
    """Choose the window [w_lo, w_hi] (grid indices) and bound the mass outside it.

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
    # values far from 1 in size (sums of many grid variables, not only losses) need smaller lam
    extent = max(1.0, h * max(abs(c.lo) + len(c.pmf) for c, _ in components))
    lam_min = min(1e-3, 1e-2 / extent)
    lam_up, edge_up = _best_lambda(lambda lam: (cumulants(lam) - log_tail) / abs(lam), 1.0,
                                   lam_min)
    lam_dn, edge_dn = _best_lambda(lambda lam: (cumulants(lam) - log_tail) / abs(lam), -1.0,
                                   lam_min)
    w_hi = min(support_hi, math.ceil(edge_up / h))
    w_lo = max(support_lo, math.floor(-edge_dn / h))
    if w_hi - w_lo + 1 > max_bins:
        raise NumericalError(
            f"composing to the requested accuracy needs {w_hi - w_lo + 1:,} grid bins, more than "
            f"the memory limit allows ({max_bins:,})",
            "use a coarser value_discretization_interval (larger eps_tolerance), a larger tail_mass, "
            "or raise memory_limit")
    # certified mass strictly above w_hi and strictly below w_lo (Chernoff at the chosen lam)
    tail_above = 0.0 if w_hi >= support_hi else \
        min(1.0, math.exp(min(0.0, cumulants(lam_up) - lam_up * (w_hi + 1) * h)))
    tail_below = 0.0 if w_lo <= support_lo else \
        min(1.0, math.exp(min(0.0, cumulants(-lam_dn) + lam_dn * (w_lo - 1) * h)))
    return w_lo, w_hi, tail_above, tail_below


def compose_grid_pmfs(components: Sequence[tuple[GridPMF, int]], *, tail_mass: float = 1e-15,
                      memory_limit: int = 1 << 30, extended: bool = False) -> ComposedPLD:
    """Compose ``count`` copies of each grid PLD; returns the composed PLD with error terms.

    ``extended=True`` runs the forward transforms and powers in long double (slower, with a
    floating-point error term about 2000 times smaller on x86).
    """
    components = [(c, int(k)) for c, k in components if k > 0]
    if not components:
        return ComposedPLD(1.0, 0, np.array([1.0]), 0.0, 0.0, 0.0, 0.0)
    h = components[0][0].h
    if any(c.h != h for c, _ in components):
        raise ValueError("all components must share the same grid step")
    survive = math.prod((1.0 - c.inf_mass) ** k for c, k in components)
    inf_mass = -math.expm1(sum(k * math.log1p(-min(c.inf_mass, 1.0)) for c, k in components)) \
        if survive > 0 else 1.0
    construction_error = sum(k * c.fp_error for c, k in components)
    if any(not np.any(c.pmf > 0) for c, _ in components):
        # a component with all its mass at +inf: the composition has no finite part
        return ComposedPLD(h, 0, np.zeros(1), 1.0 if survive == 0 else inf_mass, 0.0, 0.0,
                           construction_error)
    bytes_per_bin = 8 * 6  # real input, complex half-spectrum accumulators and error bounds
    w_lo, w_hi, tail_above, tail_below = _window(components, tail_mass, memory_limit // bytes_per_bin)
    if w_hi < w_lo:
        # the whole finite part is below the tail allowance: keep none of it, charge all of it
        finite = math.exp(sum(k * math.log(float(np.sum(np.maximum(c.pmf, 0.0))))
                              for c, k in components))
        return ComposedPLD(h, 0, np.zeros(1), inf_mass, finite, finite, construction_error)
    size = sp_fft.next_fast_len(w_hi - w_lo + 1, real=True)
    log2n = math.log2(max(size, 2))
    # Forward transforms, powers and products in extended precision where the platform has it:
    # the power k amplifies the forward error k-fold, so this is where digits are lost.
    work = np.longdouble if extended and np.finfo(np.longdouble).eps < 1e-18 else np.float64
    u_work = float(np.finfo(work).eps) / 2
    half = size // 2 + 1
    # First pass (double): spectra, and the error-bound magnitudes m_i = |a_i| + eta_i.
    spectra, etas = [], []
    log_g = np.zeros(half)
    for c, k in components:
        positions = (c.lo + np.arange(len(c.pmf))) % size  # composed index S lands on S mod size
        wrapped = np.bincount(positions, weights=c.pmf, minlength=size).astype(work)
        spectrum = sp_fft.rfft(wrapped)
        # error of the computed transform of the *stored* masses; the construction error of the
        # masses themselves is charged separately (construction_error, an l1 bound)
        eta = _C_FFT * u_work * log2n * float(np.sum(np.abs(c.pmf)))
        with np.errstate(divide="ignore"):
            log_g += k * np.log(np.abs(spectrum).astype(float) + eta)
        spectra.append(spectrum)
        etas.append(eta)
    # Only frequencies where the bound G = prod m_i^k_i is above e^-745 can contribute anything
    # representable; elsewhere both the product and its error bound are below double's range.
    live = np.flatnonzero(log_g > -745.0)
    log_modulus = np.zeros(len(live), dtype=work)
    phase = np.zeros(len(live), dtype=work)
    err_ratio = np.zeros(len(live))  # sum_i k_i eta_i / m_i
    pow_terms = np.ones(len(live))  # 1 + sum_i k_i |log a_i|
    for (c, k), spectrum, eta in zip(components, spectra, etas):
        # logarithm as (log-modulus, phase) in the working precision: real logarithms and
        # arctangents are much faster than complex ones in long double, and k * (-inf) stays clean
        re, im = spectrum.real[live], spectrum.imag[live]
        with np.errstate(divide="ignore"):
            log_mod = 0.5 * np.log(re * re + im * im)
        arg = np.arctan2(im, re)
        log_modulus += k * log_mod
        phase += k * arg
        magnitude = np.exp(log_mod.astype(float)) + eta
        err_ratio += k * eta / magnitude
        abs_log = np.hypot(log_mod.astype(float), arg.astype(float))
        pow_terms += k * (np.minimum(abs_log, -math.log(eta)) if eta > 0 else abs_log)
    with np.errstate(under="ignore"):
        # reduce the phase in the working precision, then round to double: relative error u
        two_pi = 2 * np.pi if work is np.float64 else np.longdouble(2) * np.pi
        phase = np.remainder(phase, two_pi)
        product = np.zeros(half, dtype=complex)
        product[live] = np.exp(log_modulus).astype(float) * np.exp(1j * phase.astype(float))
        g = np.exp(log_g[live])
    composed = sp_fft.irfft(product, n=size)
    # The l1 norm of the output error is at most the 2-norm of the coefficient error over the
    # full spectrum (the inverse DFT scaled by 1/N has 2-norm 1/sqrt(N)); the inverse transform's
    # own rounding adds c u log2(N) sqrt(N) ||output||_2 (Higham 2002, Sec. 24.1).
    coeff_error = g * (err_ratio + _C_FFT * u_work * pow_terms + 4 * _U)
    weights = np.full(half, 2.0)
    weights[0] = 1.0
    if size % 2 == 0:
        weights[-1] = 1.0
    # frequencies outside `live` have G < e^-745: their error is below 2^-1074 each
    dead = (half - len(live)) * 2 * 5e-324
    fft_error = float(np.sqrt(np.sum(weights[live] * coeff_error ** 2)) + dead
                      + _C_FFT * _U * log2n * math.sqrt(size) * np.linalg.norm(composed))
    window = np.roll(composed, -(w_lo % size))[: w_hi - w_lo + 1]
    # the window entries are the finite part; scale check is implicit in the masses
    return ComposedPLD(h=h, lo=w_lo, pmf=window, inf_mass=inf_mass, tail_above=tail_above,
                       tail_below=tail_below, fp_error=fft_error + construction_error)
