"""The privacy-blanket bound for any law of the blanket variable, certified by a tilted FFT.

Source.  The privacy blanket (Balle, Bell, Gascon, Nissim, CRYPTO 2019, arXiv:1903.02837; the
optimal decomposition of the "general clone" paradigm, Su, Cheng, Wang 2025, arXiv:2504.07414)
bounds the divergence of n shuffled reports by ::

    delta(eps) <= (1/n) E[(G_1 + ... + G_n)_+],

``G_i`` i.i.d.: 0 with probability ``1 - gamma``, and ``r_0(y) - e^eps r_1(y)`` for ``y`` drawn
from the blanket ``c`` (mass ``gamma``), ``r_j = R(x_j) / c`` (the identity with Balle et al.'s
Sec. 3 is derived in :mod:`dpplugins.amplification.shuffle_model_families`, "The privacy
blanket").  :mod:`~dpplugins.amplification.shuffle_model_four_class` computes it for four
atoms while the counts are few; this module computes it for any law of ``G`` -- finitely many
atoms (unary encoding, subset selection, local hashing at every n) or a continuous law (Laplace
on bounded input) -- at every n up to about 10^7.

Computation (our derivation; every step gives a larger value, so the result is an upper bound)

1. **Lattice.**  Each value ``g`` of ``G`` is split between the neighbouring points of
   ``spacing * Z`` with the weights of linear interpolation (``g`` keeps its mean).  The new
   ``G'`` has ``E[G' | G] = G``, so by Jensen (given the ``G_i``, ``z -> z_+`` convex)
   ``E[(sum G_i)_+] <= E[(sum G'_i)_+]``.  The lattice law is rounded *up* pointwise (a larger
   measure: every term of the n-fold convolution is non-negative, so the sum can only grow).
   Only the spread ``spacing^2 / 4`` per report is added, not a bias: the lattice can be
   coarse (``spacing`` about a thirtieth of the standard deviation of ``G``).
2. **Tilt.**  With ``p`` the lattice law (index ``k``), any ``t >= 0`` and ``q_k = p_k
   e^(t k) / Z``: ``p^(*n)(K) = Z^n e^(-t K) q^(*n)(K)``, so ``E[(spacing K)_+] = spacing Z^n
   sum_(K >= 1) K e^(-t K) q^(*n)(K)``.  ``t`` is the saddle point (``q`` has mean 0), which
   puts the part of the sum that matters in the bulk of ``q^(*n)``; ``K e^(-t K) <= 1/(e t)``.
3. **FFT.**  ``q^(*n)`` modulo ``N`` (a fast size ``m 2^j``, ``m`` in 8, 9, 10, 12, 14, 15,
   16: :func:`~dpplugins.pld.spectra.transform_size`, at most 1.2 times the window where the
   next power of two was up to 2 times it) is ``F^-1 (F q)^n``.  On a window of
   ``N`` consecutive K the folded values are at least the true ones (the folded-in terms are
   non-negative), K <= 0 contributes nothing, and the part above the window is charged by a
   Chernoff bound (``sum_(K > w) K e^(-t K) q^(*n)(K) <= (w+1) e^(-t (w+1)) P(K_n > w)`` once
   ``t (w+1) >= 1``).
4. **Floating point.**  With ``kappa`` the FFT's relative error
   (:func:`~dpplugins.amplification.shuffle_model.fft_relative_error`), the computed spectrum
   is within ``e1 = kappa ||F q||_2`` of the exact one in every entry; the n-th power (binary
   powering, ``n + log2 n`` complex products at most, each ``sqrt(2) gamma_2`` relative) is
   within ``A_j^n r + n e1 A_j^(n-1)``, ``A_j = |computed_j| + e1``, ``r = exp((n + log2 n)
   sqrt(2) gamma_2) - 1``; the inverse adds ``kappa ||P||_2 / sqrt(N)`` in l2.  The sum's
   error is at most the l2 norm of ``K e^(-t K)`` on the window times that l2 error (Cauchy-
   Schwarz); the sums of non-negative terms and ``Z^n`` are rounded up.

Where the range of ``G`` needs more than :data:`MAX_LATTICE` points at the spacing its positive
part needs (near eps0, and for eps0 above about 15) or the FFT more than :data:`MAX_FFT_SIZE`,
no value is computed (None) and the callers' other bounds answer.

Example (binary values: ``G`` is ``1`` or ``-1`` with probability 1/4 each, else 0, n = 100; the
exact value by direct convolution is 0.0281742...)::

    >>> law = split_atoms([1.0, -1.0], [0.25, 0.25], 1.0, zero_mass=0.5)
    >>> value = blanket_delta_upper(law, 100)
    >>> 0.02817 < value < 0.02818
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy import fft as sp_fft

from dpplugins.amplification.shuffle_model import UNIT_ROUNDOFF, fft_relative_error
from dpplugins.errors import ParameterError, check_count, check_positive
from dpplugins.pld.spectra import transform_size

__all__ = ["LatticeLaw", "split_atoms", "laplace_blanket_law", "class_blanket_law",
           "blanket_delta_upper", "positive_part_lower", "positive_part_lower_fitted",
           "PositivePartLower",
           "fft_size", "LatticeBlanket",
           "MAX_FFT_SIZE", "POINTS_PER_SD"]

_U = UNIT_ROUNDOFF
#: the largest FFT (points) a query may use; a larger n is not computed here (None)
MAX_FFT_SIZE = 1 << 22
#: lattice points per standard deviation of G (the spread added is 1/(4 POINTS_PER_SD^2) of
#: the variance)
POINTS_PER_SD = 16
#: lattice points below the largest value of G, at least (within MAX_LATTICE)
TOP_POINTS = 64
#: the most lattice points a law may have (8 bytes each)
MAX_LATTICE = 1 << 21
_GC = math.sqrt(2) * 2 * _U / (1 - 2 * _U)   # complex product, relative (Higham, Lemma 3.5)


@dataclass(frozen=True)
class LatticeLaw:
    """Masses at ``offset + spacing * (lo + i)`` (``masses`` a read-only float array).
    ``rounded == "up"``: each mass at least the exact lattice law's (module docstring, step 1;
    the input of :func:`blanket_delta_upper`); ``"down"``: at most the masses of a lattice law
    below the variable in increasing convex order (the input of :func:`positive_part_lower`)."""

    spacing: float
    lo: int
    masses: np.ndarray
    offset: float = 0.0
    rounded: str = "up"

    @property
    def indices(self) -> np.ndarray:
        return self.lo + np.arange(len(self.masses))


def _check_size(lowest: float, highest: float, spacing: float, scale: float = 0.0) -> None:
    """The lattice has at most :data:`MAX_LATTICE` points, and cells wide enough for floating
    point: ``spacing >= 1e-9 scale`` (``scale`` the magnitude of the numbers the cell edges are
    formed from; narrower cells collapsed to width 0 and gave NaN masses at eps0 = 1e-12)."""
    points = (highest - lowest) / spacing
    if not points <= MAX_LATTICE - 8:
        raise ParameterError("spacing", spacing, f">= (largest - smallest value) / "
                             f"{MAX_LATTICE - 8} = {(highest - lowest) / (MAX_LATTICE - 8):.6g} "
                             f"(at most {MAX_LATTICE:,} lattice points)")
    if not spacing >= 1e-9 * scale:
        raise ParameterError("spacing", spacing, f">= 1e-9 x {scale:.6g} (cells narrower than "
                             "that are not resolved in floating point)")


def _accumulate(parts: list[tuple[np.ndarray, np.ndarray]], spacing: float) -> LatticeLaw:
    idx = np.concatenate([i for i, _ in parts])
    mass = np.concatenate([m for _, m in parts])
    keep = mass > 0
    idx, mass = idx[keep], mass[keep]
    if len(idx) == 0:
        return LatticeLaw(spacing, 0, np.zeros(1))
    lo = int(idx.min())
    out = np.zeros(int(idx.max()) - lo + 1)
    np.add.at(out, idx - lo, mass)
    # sums of non-negative terms: relative error below (terms - 1) u; rounded up
    terms = np.bincount(idx - lo, minlength=len(out))
    out *= 1 + (terms + 2) * _U
    out.setflags(write=False)
    return LatticeLaw(spacing, lo, out)


def _split(values_lo: np.ndarray, values_hi: np.ndarray, masses: np.ndarray, spacing: float
           ) -> tuple[np.ndarray, np.ndarray]:
    """Linear-interpolation split of atoms whose value lies in ``[values_lo, values_hi]``:
    each of the (at most three) lattice points near the interval gets the largest weight any
    value in it would give (the hat function at the interval's nearest point), times the mass
    rounded up."""
    x_lo = np.asarray(values_lo, float) / spacing
    x_hi = np.asarray(values_hi, float) / spacing
    slack = 4 * _U * (np.abs(x_lo) + np.abs(x_hi) + 1)
    x_lo, x_hi = x_lo - slack, x_hi + slack
    base = np.floor(x_lo)
    idx, out = [], []
    for offset in (0, 1, 2):
        j = base + offset
        distance = np.maximum(np.maximum(x_lo - j, j - x_hi), 0.0)
        weight = np.clip(1.0 - distance, 0.0, 1.0)
        idx.append(j.astype(np.int64))
        out.append(np.asarray(masses, float) * weight * (1 + 4 * _U))
    return np.concatenate(idx), np.concatenate(out)


def split_atoms(values, masses, spacing: float, *, zero_mass: float = 0.0,
                value_error: float = 0.0) -> LatticeLaw:
    """The lattice law (module docstring, step 1) of atoms ``values`` with ``masses`` (each
    value known within ``value_error`` in absolute terms) and ``zero_mass`` at 0."""
    spacing = check_positive("spacing", spacing)
    values = np.asarray(values, float)
    if values.size:
        _check_size(min(float(values.min()), 0.0), max(float(values.max()), 0.0), spacing,
                    scale=float(value_error) / (16 * _U) if value_error > 0 else 0.0)
    err = np.abs(values) * 4 * _U + float(value_error)
    parts = [_split(values - err, values + err, np.asarray(masses, float), spacing)]
    if zero_mass > 0:
        parts.append((np.array([0]), np.array([float(zero_mass)])))
    return _accumulate(parts, spacing)


def class_blanket_law(eps0: float, w10: float, w11: float, w00: float, epsilon: float,
                      spacing: float) -> LatticeLaw:
    """The four-class blanket variable (:mod:`~dpplugins.amplification.shuffle_model_four_class`:
    ``E - x``, ``1 - E x``, ``E (1 - x)``, ``1 - x`` with masses ``w10, w10, w11, w00``, ``E =
    e^eps0``, ``x = e^eps``) on the lattice."""
    e, x = math.exp(eps0), math.exp(epsilon)
    gamma = 2 * w10 + w11 + w00
    values = [e - x, 1 - e * x, e * (1 - x), 1 - x]
    return split_atoms(values, [w10, w10, w11, w00], spacing,
                       zero_mass=max(1 - gamma, 0.0) + 8 * _U,
                       value_error=16 * _U * (e * x + e + x + 1))


def _laplace_cells(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(int_a^b (b - r) r^(-3/2) dr, int_a^b (r - a) r^(-3/2) dr)`` for ``0 < a < b``, in
    cancellation-free form: ``(2/sqrt(a)) (sqrt(b) - sqrt(a))^2`` and ``(2/sqrt(b)) (sqrt(b) -
    sqrt(a))^2``, ``sqrt(b) - sqrt(a) = (b - a)/(sqrt(a) + sqrt(b))``."""
    sa, sb = np.sqrt(a), np.sqrt(b)
    d = (b - a) / (sa + sb)
    return 2 * d * d / sa, 2 * d * d / sb


def laplace_blanket_law(eps0: float, epsilon: float, spacing: float) -> LatticeLaw:
    """The blanket variable of the Laplace mechanism on ``[0, 1]`` (scale ``1/eps0``) for the
    pair ``(0, 1)`` on the lattice -- the largest of every pair
    (:mod:`~dpplugins.amplification.shuffle_model_families`, "Laplace: the exact blanket").

    With ``E = e^eps0``, ``gamma = e^(-eps0/2)``, ``x = e^eps``: the law ``nu`` of ``r_0`` on
    the half of the blanket where ``r_1 = 1`` has density ``(gamma/4) r^(-3/2)`` on ``[1, E)``
    and an atom ``gamma^2 / 2`` at ``E``; ``G = r - x`` there, ``G = 1 - x r`` (``r ~ nu``)
    on the other half, 0 off the blanket (mass ``1 - gamma``).  Cells of the lattice in ``r``
    are integrated in closed form (:func:`_laplace_cells`); the two cut by ``[1, E]`` in each
    half in 40-digit arithmetic."""
    spacing = check_positive("spacing", spacing)
    big, gamma, x = math.exp(eps0), math.exp(-eps0 / 2), math.exp(epsilon)
    _check_size(1 - x * big, big - x, spacing, scale=big * (1 + x) + 1)
    parts = []
    # the two atoms at r = E
    atom = 0.5 * math.exp(-eps0)
    values = np.array([big - x, 1 - x * big])
    err = 16 * _U * (big * x + big + x + 1)
    parts.append(_split(values - err, values + err, np.array([atom, atom]), spacing))
    # half 1: G = r - x, lattice cell k <-> r in [x + k s, x + (k + 1) s]; half 2: G = 1 - x r,
    # cell k <-> r in [(1 - (k + 1) s)/x, (1 - k s)/x] with the upper G point at the low r end
    for half in (1, 2):
        if half == 1:
            k_first = math.floor((1 - x) / spacing)
            k_last = math.floor((big - x) / spacing)
        else:
            k_first = math.floor((1 - x * big) / spacing)
            k_last = math.floor((1 - x) / spacing)
        ks = np.arange(k_first, k_last + 1, dtype=np.int64)
        kf = ks.astype(float)
        if half == 1:
            a, b = x + kf * spacing, x + (kf + 1) * spacing
        else:
            a, b = (1 - (kf + 1) * spacing) / x, (1 - kf * spacing) / x
        inner = (a > 1) & (b < big) & (a > 0)
        low_w, high_w = np.zeros(len(ks)), np.zeros(len(ks))
        if inner.any():
            to_low_r, to_high_r = _laplace_cells(a[inner], b[inner])
            # half 1: weight (r - a)/s to the upper point k+1 (high r), (b - r)/s to k;
            # half 2: the upper point k+1 is the low-r end: weight x (b - r)/s
            scale = gamma / 4 / spacing
            if half == 1:
                low_w[inner], high_w[inner] = scale * to_low_r, scale * to_high_r
            else:
                low_w[inner], high_w[inner] = scale * x * to_high_r, scale * x * to_low_r
        # cells cut by [1, E] (at most two per half): 40 digits
        for i in np.flatnonzero(~inner):
            lo_r, hi_r = max(float(a[i]), 1.0), min(float(b[i]), big)
            if not hi_r > lo_r:
                continue
            low_w[i], high_w[i] = _cut_cell(half, float(a[i]), float(b[i]), lo_r, hi_r, x,
                                            gamma, spacing)
        # rounding: products and quotients of positive numbers, about 12 u relative; the
        # computed edges a, b are off by u |a| from the cell's true edges (neighbouring cells
        # share them, so nothing is left out), which moves a weight by at most a relative
        # u (|a| + |b|) / (b - a) of the cell's mass (each weight is at least a third of it)
        up = 1 + 64 * _U * (1 + (np.abs(a) + np.abs(b)) / (b - a))
        parts.append((ks, low_w * up))
        parts.append((ks + 1, high_w * up))
    parts.append((np.array([0]), np.array([max(1 - gamma, 0.0) + 8 * _U])))
    return _accumulate(parts, spacing)


def _cut_cell(half, a, b, lo_r, hi_r, x, gamma, spacing) -> tuple[float, float]:
    """The two weights of a lattice cell ``[a, b]`` cut by ``[1, E]`` (``nu`` on ``[lo_r,
    hi_r]``, ``a <= lo_r < hi_r <= b``), rounded up.

    The integrals (our derivation) are written without cancellation, every term non-negative:
    with ``g = sqrt(lo hi)`` and ``w = 2 (hi - lo) / (sqrt(hi) + sqrt(lo))`` (that is ``int
    r^-1/2 = 2 (sqrt(hi) - sqrt(lo))``),

    * ``int (r - a) r^-3/2 dr = w (g - a) / g`` with ``g - a = ((lo - a) hi + a (hi - a)) / (g
      + a)`` (``g^2 - a^2`` regrouped; ``g - a`` as it is for ``a <= 0``), and
    * ``int (b - r) r^-3/2 dr = w (b - g) / g`` with ``b - g = (b (b - hi) + hi (b - lo)) / (b
      + g)``,

    using ``int r^-3/2 = 2 (1/sqrt(lo) - 1/sqrt(hi)) = w / g``.  Each of the few dozen
    operations on positive numbers costs at most ``u`` relative, so ``(1 + 1e-12)`` rounds the
    weights up with a wide margin (checked against 50-digit quadrature in the tests).  (It
    was computed in 40-digit mpmath arithmetic, which is not a dependency of the core.)"""
    root_lo, root_hi = math.sqrt(lo_r), math.sqrt(hi_r)
    g = root_lo * root_hi
    w = 2.0 * (hi_r - lo_r) / (root_hi + root_lo)
    # (a cell of the second half may start at a <= 0: then g - a is a sum of non-negatives)
    g_minus_a = ((lo_r - a) * hi_r + a * (hi_r - a)) / (g + a) if a > 0 else g - a
    b_minus_g = (b * (b - hi_r) + hi_r * (b - lo_r)) / (b + g)
    up_r, down_r = w * g_minus_a / g, w * b_minus_g / g
    scale = gamma / 4.0 / spacing
    if half == 1:
        low, high = scale * down_r, scale * up_r
    else:
        low, high = scale * x * up_r, scale * x * down_r
    return (max(low, 0.0) * (1 + 1e-12) + 1e-300, max(high, 0.0) * (1 + 1e-12) + 1e-300)


def _log_mgf(k: np.ndarray, logp: np.ndarray, t: float) -> tuple[float, float]:
    """``(log sum p_k e^(t k), mean of the tilted law)``."""
    z = logp + t * k
    top = float(np.max(z))
    w = np.exp(z - top)
    total = float(np.sum(w))
    return top + math.log(total), float(np.dot(w, k) / total)


def _saddle(k: np.ndarray, logp: np.ndarray) -> float:
    """``t >= 0`` with tilted mean 0 (0 when the mean is already >= 0)."""
    if _log_mgf(k, logp, 0.0)[1] >= 0:
        return 0.0
    lo, hi = 0.0, 1.0 / max(float(np.max(np.abs(k))), 1.0)
    for _ in range(200):
        if _log_mgf(k, logp, hi)[1] > 0:
            break
        lo, hi = hi, hi * 2
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        if _log_mgf(k, logp, mid)[1] > 0:
            hi = mid
        else:
            lo = mid
        if hi - lo <= 1e-6 * hi:
            break
    return hi


def _power(z: np.ndarray, n: int) -> np.ndarray:
    """``z**n`` elementwise by binary powering (at most ``n + log2 n`` products per entry in
    the error count of the module docstring)."""
    result = np.ones_like(z)
    base = z.copy()
    while n:
        if n & 1:
            result *= base
        n >>= 1
        if n:
            base *= base
    return result


def _check_law(law, rounded: str) -> None:
    if not isinstance(law, LatticeLaw):
        raise ParameterError("law", law, "a LatticeLaw (split_atoms, laplace_blanket_law, "
                             "class_blanket_law, laplace_ratio_law_lower)")
    if law.rounded != rounded:
        raise ParameterError("law.rounded", law.rounded,
                             f"'{rounded}' (an {'upper' if rounded == 'up' else 'lower'} "
                             "bound needs a law rounded that way)")


def blanket_delta_upper(law: LatticeLaw, n: int) -> float | None:
    """Certified upper bound on ``(1/n) E[(sum_(i<=n) G_i)_+]`` for ``G_i`` i.i.d. with the
    lattice law ``law`` (module docstring; not capped at 1 -- :class:`LatticeBlanket` caps its
    deltas); ``None`` when the FFT would need more than :data:`MAX_FFT_SIZE` points."""
    _check_law(law, "up")
    n = check_count("n", n, minimum=1)
    return _positive_part(law, n, _tilt(law, n, False), lower=False)


def positive_part_lower(law: LatticeLaw, n: int) -> float | None:
    """Certified *lower* bound on ``(1/n) E[(sum_(i<=n) G_i)_+]`` for ``G_i`` i.i.d. with any
    law above ``law`` in increasing convex order (``law.rounded == "down"``: its masses are at
    most those of such a lattice law, e.g. :func:`laplace_ratio_law_lower`); ``None`` when the
    FFT would need more than :data:`MAX_FFT_SIZE` points.

    The steps of the module docstring with every rounding the other way (our derivation): the
    masses and the tilted law are rounded down (a smaller measure: every term of the n-fold
    convolution can only drop); the terms above the window are left out (they are
    non-negative); the folded-in mass of the terms outside the window is bounded by Chernoff
    on both sides and charged at the largest ``J e^(-t J) <= 1/(e t)`` of the window (nothing
    is charged when the whole support fits); the floating-point error is subtracted.  Valid for
    the true law because ``(sum G_i)_+`` is an increasing convex function of each ``G_i`` and
    the increasing convex order is closed under sums of independent variables (Shaked and
    Shanthikumar 2007, *Stochastic Orders*, Thm. 4.A.15).

    Example (the same binary law as the module docstring; exact 0.0281742...)::

        >>> low = LatticeLaw(1.0, -1, np.array([0.25, 0.5, 0.25]), rounded="down")
        >>> 0.0281742 < positive_part_lower(low, 100) <= 0.02817424
        True
    """
    _check_law(law, "down")
    n = check_count("n", n, minimum=1)
    return _positive_part(law, n, _tilt(law, n, True), lower=True)


def positive_part_lower_fitted(law_at: Callable[[float], LatticeLaw], n: int, spacing: float,
                               *, attempts: int = 6) -> float | None:
    """:func:`positive_part_lower` of ``law_at(s)`` at the finest spacing ``s >= spacing``
    whose FFT fits :data:`MAX_FFT_SIZE`: the FFT size scales about as ``1 / s``, so each
    attempt coarsens ``s`` by the factor it was over (5 % more); ``None`` when no attempt
    fits.  Any spacing gives a valid lower bound; a coarser one only gives away second-order
    terms.  The tilt and window of each attempt are computed once.

    Example (the binary law of :func:`positive_part_lower`, scaled by the spacing)::

        >>> def law_at(s):
        ...     return LatticeLaw(s, -1, np.array([0.25, 0.5, 0.25]), rounded="down")
        >>> 0.0281742 < positive_part_lower_fitted(law_at, 100, 1.0) <= 0.02817424
        True
    """
    fitted = PositivePartLower.fitted(law_at, n, spacing, attempts=attempts)
    return None if fitted is None else fitted.at(fitted.law)


class PositivePartLower:
    """Certified lower bounds on ``(1/n) E[(sum_(i<=n) G_i)_+]`` (:func:`positive_part_lower`)
    for ``law`` and for the same masses moved by a constant -- the same ``spacing`` and
    ``masses``, another ``lo`` and ``offset`` -- from one convolution: a search over a
    threshold that only moves the law (``G = c - rho`` in
    :mod:`~dpplugins.amplification.laplace_full_statistic`) makes one FFT, not one a point.

    Why it holds (our derivation): with ``p`` the law, ``q = p e^(t v) / Z`` its tilt at the
    first law's saddle point ``t`` and ``v = k + o``, ``p^(*n)(K) = Z^n e^(-t (K + n o)) q^(*n)(K)``
    for every ``K``, whatever the threshold; a moved law has the sums ``J' = K + n (lo' - lo) +
    n o'``, so its expectation is the same sum over ``q^(*n)`` with the weights ``J'_+ e^(-t (K
    + n o))``.  The window and its folded-in mass are those of the first law; the terms of the
    moved law below or above the window are left out (non-negative), and the folded-in mass is
    charged at the window's largest weight, ``e^(t (n o' - n o + n (lo' - lo))) / (e t)``.
    Each bound is valid at every move; it is *tight* while the moved sums' region that counts
    stays near the tilt's centre, so :meth:`at` answers None beyond :data:`REUSE_SDS` standard
    deviations of the tilted sum (the caller then builds another).

    Example (the binary law of :func:`positive_part_lower`, then moved by 0.05 a draw: the
    sum by 5, 0.7 of its standard deviation; far moves are refused)::

        >>> low = LatticeLaw(1.0, -1, np.array([0.25, 0.5, 0.25]), rounded="down")
        >>> search = PositivePartLower(low, 100)
        >>> 0.0281742 < search.at(low) <= 0.02817424
        True
        >>> moved = LatticeLaw(1.0, -1, low.masses, offset=0.05, rounded="down")
        >>> abs(search.at(moved) / positive_part_lower(moved, 100) - 1) < 1e-9
        True
        >>> far = LatticeLaw(1.0, 0, low.masses, offset=0.5, rounded="down")
        >>> search.at(far) is None
        True
    """

    #: how far (in standard deviations of the tilted sum) a moved law may take the sums
    REUSE_SDS = 2.0

    def __init__(self, law: LatticeLaw, n: int, *, _tilted: _Tilted | None = None) -> None:
        _check_law(law, "down")
        self.law, self.n = law, check_count("n", n, minimum=1)
        self._tilted = _tilted if _tilted is not None else _tilt(law, self.n, True)
        self._convolved: _Convolved | None = None
        self.fits = self._tilted is None or self._tilted.size <= MAX_FFT_SIZE
        #: the spacing :meth:`fitted` passed to ``law_at`` for ``law`` (None otherwise)
        self.requested_spacing: float | None = None

    @classmethod
    def fitted(cls, law_at: Callable[[float], LatticeLaw], n: int, spacing: float, *,
               attempts: int = 6) -> "PositivePartLower | None":
        """The search at the finest spacing ``s >= spacing`` whose FFT fits (as in
        :func:`positive_part_lower_fitted`), or None."""
        n = check_count("n", n, minimum=1)
        s = check_positive("spacing", spacing)
        for _ in range(attempts):
            law = law_at(s)
            _check_law(law, "down")
            tilted = _tilt(law, n, True)
            size = 16 if tilted is None else tilted.size
            if size <= MAX_FFT_SIZE:
                search = cls(law, n, _tilted=tilted)
                search.requested_spacing = s
                return search
            s *= 1.05 * size / MAX_FFT_SIZE
        return None

    def _shift(self, law: LatticeLaw) -> float | None:
        """``n (lo' - lo) + n o'`` in lattice units, or None if ``law`` is not ``self.law``
        moved."""
        own = self.law
        if not isinstance(law, LatticeLaw):
            raise ParameterError("law", law, "a LatticeLaw (the first law moved by a constant)")
        if law.spacing != own.spacing or law.rounded != "down" or not (
                law.masses is own.masses or np.array_equal(law.masses, own.masses)):
            return None
        return self.n * (law.lo - own.lo) + self.n * (float(law.offset) / law.spacing)

    def at(self, law: LatticeLaw) -> float | None:
        """Certified lower bound for ``law`` (``self.law`` moved), or None: not a move of it,
        the FFT does not fit, or the move is beyond :data:`REUSE_SDS`."""
        shift = self._shift(law)
        if shift is None or not self.fits:
            return None
        tilted = self._tilted
        if tilted is None:       # nothing positive in the first law
            return 0.0 if law is self.law else None
        if law is not self.law and abs(shift - tilted.shift) > self.REUSE_SDS * tilted.sd:
            return None
        if self._convolved is None:
            self._convolved = _convolve(self.n, tilted, lower=True)
            if self._convolved is None:
                self.fits = False
                return None
        return _lower_sum(self._convolved, self.n, law.spacing, shift)


@dataclass(frozen=True)
class _Tilted:
    """The tilted law and the window of :func:`_positive_part` (module docstring, steps 2-3)."""

    k: np.ndarray          # lattice indices with positive mass
    q: np.ndarray          # the tilted law, rounded the bound's way
    t: float
    log_z: float
    o: float               # offset / spacing
    shift: float           # J = K + shift
    k_pos: int             # the smallest K with J > 0
    w_hi: int              # the window is [w_hi - size + 1, w_hi]
    whole: bool            # the whole support is in the window (nothing folded)
    size: int              # FFT points
    outside: float         # lower bounds: mass of q^(*n) outside the window, at most
    sd: float              # standard deviation of the tilted sum K (lattice units)


def _tilt(law: LatticeLaw, n: int, lower: bool) -> _Tilted | None:
    """Saddle-point tilt and window of ``law`` for ``n`` reports (None: nothing positive)."""
    down = -1.0 if lower else 1.0      # the direction every rounding takes
    k = law.indices.astype(float)
    p = np.asarray(law.masses, float)
    o = float(law.offset) / law.spacing
    keep = p > 0
    if not np.any(k[keep] + o > 0):
        return None
    # a value below -(n - 1) times the largest makes every sum it is in negative: those sums
    # contribute nothing, so the values are left out (exact for both bounds; with few users
    # and heavy tails their mass, folded into the window, swamped a lower bound: eps0 = 8,
    # n = 200 gave 0.140 where the value is 0.210)
    top = float(np.max(k[keep])) + o
    keep &= k + o >= -(n - 1) * top * (1 + 1e-9) - 1e-9
    k, p = k[keep], p[keep]
    v = k + o
    logp = np.log(p)
    t = _saddle(v, logp)
    log_z, mean = _log_mgf(v, logp, t)
    # the tilted law q = p e^(t v) / Z, rounded (exp: a few ulps plus the argument's error)
    arg = logp + t * v - log_z
    q = np.exp(arg) * (1 + down * 8 * _U * (1 + np.abs(arg) + np.abs(logp) + abs(log_z)
                                            + abs(t) * np.abs(v)))
    mass = float(np.sum(q))
    var = max(float(np.dot(q, (v - mean) ** 2)) / mass, 1e-12)
    sd = math.sqrt(n * var)
    shift = n * o                           # J = K + shift
    centre = n * mean - shift
    k_pos = math.floor(-shift) + 1          # the smallest K with J > 0
    if k_pos + shift <= 0:
        k_pos += 1
    # (an upper bound's tail charge needs J e^(-t J) falling beyond the window, J > 1/t; a
    # lower bound drops what lies beyond, mass e^-40 of the tilted law: with the mean of G
    # within rounding of 0, t ~ 1e-12 asked for 10^11 points and the lattice was coarsened
    # until the bound was 1e-8 where it is 3e-4)
    reach = 2.0 / t if t > 0 and not lower else 0.0
    w_hi = math.ceil(max(centre + 9 * sd, k_pos + reach, k_pos) + 2)
    w_lo = math.floor(min(centre - 7 * sd, k_pos - 1))
    whole = False
    k_lo, k_hi = int(k.min()), int(k.max())
    if w_hi < n * k_hi <= w_hi + max(w_hi - w_lo, 1 << 16):
        # the largest sum is within reach: the window ends there, nothing lies above it (few
        # users: the part above centre + 9 sd went to the Chernoff term and made the bound
        # looser than the blanket spread to three classes, or 1)
        w_hi = n * k_hi
    if n * (k_hi - k_lo) + 1 <= max(4 * (w_hi - w_lo + 1), 1 << 16):
        # the whole support fits: nothing is folded and nothing lies above the window (few
        # users and heavy tails: two reports of eps0 = 8 folded a far negative atom into the
        # window and gave 1 where 0.916 is the value)
        w_lo, w_hi, whole = min(n * k_lo, k_pos - 1), max(n * k_hi, k_pos), True
    size = transform_size(max(w_hi - w_lo + 1, 16))
    outside = 0.0
    if lower and not whole:
        # the mass outside the window, folded in (a lower bound charges it): where Chernoff
        # cannot make it small (few users, heavy tails: eps0 = 8, n = 10 gave 0 against
        # 0.038) and the whole support fits the FFT, the whole support is taken instead
        outside = (_chernoff(k, q, n, w_hi + 1, above=True)
                   + _chernoff(k, q, n, w_hi - size, above=False))
        whole_size = transform_size(max(n * (k_hi - k_lo) + 1, 16))
        if outside > 1e-9 and whole_size <= MAX_FFT_SIZE:
            w_hi, size, whole, outside = max(n * k_hi, k_pos), whole_size, True, 0.0
    return _Tilted(k, q, t, log_z, o, shift, k_pos, w_hi, whole, size, outside, sd)


def fft_size(law: LatticeLaw, n: int) -> int:
    """The number of FFT points :func:`blanket_delta_upper` or :func:`positive_part_lower`
    would use for ``law`` and ``n`` (more than :data:`MAX_FFT_SIZE`: they answer None); it
    scales about as ``1 / law.spacing``, so a caller can choose a spacing that fits."""
    tilted = _tilt(law, check_count("n", n, minimum=1), law.rounded == "down")
    return 16 if tilted is None else tilted.size


@dataclass(frozen=True)
class _Convolved:
    """The computed ``q^(*n)`` on the window of ``tilted`` (module docstring, steps 3-4) and the
    l2 bound ``err_l2`` on its error."""

    tilted: _Tilted
    folded_sum: np.ndarray
    err_l2: float


def _convolve(n: int, tilted: _Tilted, *, lower: bool) -> _Convolved | None:
    """The FFT of :func:`_positive_part` (None where the error bound is too large to use)."""
    down = -1.0 if lower else 1.0      # the direction every rounding takes
    size = tilted.size
    folded = np.zeros(size)
    slots = np.mod(tilted.k.astype(np.int64), size)
    np.add.at(folded, slots, tilted.q)
    folded *= 1 + down * (np.bincount(slots, minlength=size) + 2) * _U   # sums rounded
    spectrum = sp_fft.rfft(folded)
    kappa = fft_relative_error(size)
    e1 = kappa * math.sqrt(size) * float(np.linalg.norm(folded)) * (1 + 1e-10)
    if n * e1 > 0.1:
        return None
    powered = _power(spectrum, n)
    amp = np.abs(spectrum) * (1 + 2 * _U) + e1
    r_pow = math.expm1((n + math.log2(n) + 2) * _GC * (1 + 1e-10))
    with np.errstate(under="ignore", over="ignore", divide="ignore"):
        # amp^(n-1) = e^((n-1) log amp), rounded up (log and exp a few ulps each)
        log_amp = np.log(amp)
        amp_n1 = np.exp((n - 1) * log_amp + 8 * _U * (1 + n * np.abs(log_amp)))
        bound = amp_n1 * (amp * r_pow + n * e1)

    # rfft keeps half the spectrum: the full l2 norm counts the conjugate half twice
    def full_norm(w):
        inner = w[1:-1] if size % 2 == 0 else w[1:]
        return math.sqrt(float(w[0] ** 2 + 2 * np.sum(inner ** 2)
                               + (w[-1] ** 2 if size % 2 == 0 else 0.0))) * (1 + 1e-10)
    p_norm = full_norm(np.abs(powered))
    err_l2 = (full_norm(bound) + kappa * p_norm) / math.sqrt(size) * (1 + 1e-10)
    return _Convolved(tilted, sp_fft.irfft(powered, size), err_l2)


def _positive_part(law: LatticeLaw, n: int, tilted: _Tilted | None, *,
                   lower: bool) -> float | None:
    """The common computation of :func:`blanket_delta_upper` and :func:`positive_part_lower`
    (module docstring): values ``v = k + o`` in lattice units (``o = offset / spacing``), sums
    ``J = K + n o`` for the integer ``K``, positive where ``J > 0``; ``tilted`` is
    ``_tilt(law, n, lower)``."""
    if tilted is None:
        return 0.0
    if tilted.size > MAX_FFT_SIZE:
        return None
    convolved = _convolve(n, tilted, lower=lower)
    if convolved is None:
        return None
    if lower:
        return _lower_sum(convolved, n, law.spacing, tilted.shift)
    return _upper_sum(convolved, n, law.spacing)


def _window_weights(t: float, shift_tilt: float, shift: float, ks: np.ndarray):
    """``(js, j_err, rel, decay)`` of the weights ``h(K) = J e^(-t (K + shift_tilt))``, ``J = K +
    shift``, on the window representatives ``ks``: ``J`` is known within ``j_err`` (a shift is
    formed from two roundings, the sum from one), so ``h`` within the factor ``1 +- rel``
    around ``J +- j_err``.  The decay's argument ``t (K + shift_tilt)`` is known within ``t``
    times the same error of ``K + shift_tilt`` and one rounding of the product, and ``exp``
    within a few ulps: ``rel`` is twice their sum (``e^x - 1 <= 2x`` for ``x <= 1``).  (Its
    earlier form left out the shift's error, about ``4 u t |shift|``; the final factor
    ``1 +- 1e-12`` covered that only while ``t |shift|`` was below about 2000.)"""
    js = ks + shift
    j_err = 4 * _U * (1 + abs(shift) + np.abs(js))
    tilt_arg = ks + shift_tilt
    arg_err = 4 * _U * (1 + abs(shift_tilt) + 2 * np.abs(tilt_arg))
    rel = 4 * _U + 2 * t * arg_err
    with np.errstate(under="ignore", over="ignore"):
        decay = np.exp(-t * tilt_arg)
    return js, j_err, rel, decay


def _lower_sum(convolved: _Convolved, n: int, spacing: float, shift: float) -> float:
    """Certified lower bound on ``(1/n) E[(spacing J)_+]``, ``J = K + shift``, for ``K`` the sum
    of ``n`` draws of the lattice law whose tilted, convolved form is ``convolved`` (the lower
    branch of :func:`_positive_part`; ``shift`` is the tilted law's own ``n o``, or that of the
    same masses moved by a constant: :class:`PositivePartLower`).  The weights keep the tilt
    ``e^(-t (K + tilted.shift))`` of the convolution; terms below or above the window are left
    out (non-negative), the folded-in mass is charged at the window's largest weight."""
    tilted = convolved.tilted
    t, size, w_hi = tilted.t, tilted.size, tilted.w_hi
    k_pos = math.floor(-shift) + 1          # the smallest K with J > 0
    if k_pos + shift <= 0:
        k_pos += 1
    k_lo = max(k_pos, w_hi - size + 1)
    if k_lo > w_hi:
        return 0.0
    ks = np.arange(k_lo, w_hi + 1)
    js, j_err, rel, decay = _window_weights(t, tilted.shift, shift, ks)
    computed = convolved.folded_sum[np.mod(ks, size)]
    h_up = (js + j_err) * decay * (1 + rel)
    h = np.maximum(js - j_err, 0.0) * decay * (1 - rel)
    if not (np.all(np.isfinite(h_up)) and np.all(np.isfinite(computed))):
        return 0.0
    body = (float(np.dot(h, computed))
            - 2 * len(ks) * _U * float(np.dot(h_up, np.abs(computed))))
    fp = float(np.linalg.norm(h_up)) * (1 + 1e-10) * convolved.err_l2
    alias = 0.0
    if not tilted.whole:
        # every term outside [w_hi - size + 1, w_hi] was folded onto one slot of it: charged
        # at the largest weight of the window, J e^(-t (J + shift_tilt - shift)) <= e^(t
        # (shift - shift_tilt)) / (e t)
        h_max = float(np.max(h_up))     # the largest weight on a slot of the window
        if t > 0:
            h_max = min(h_max, math.exp(min(t * (shift - tilted.shift), 700.0)) / (math.e * t))
        alias = h_max * (1 + 1e-9) * tilted.outside
    inner_total = (body - fp - alias) * spacing * (1 - 4 * _U)
    if not inner_total > 0:
        return 0.0
    log_total = n * tilted.log_z - 4 * _U * n * abs(tilted.log_z) - 1e-300
    value = log_total + math.log(inner_total) - math.log(n)
    return math.exp(min(value, 700.0)) * (1 - 1e-12)


def _upper_sum(convolved: _Convolved, n: int, spacing: float) -> float:
    """The upper branch of :func:`_positive_part`."""
    tilted = convolved.tilted
    k, q, t, log_z, o, shift = tilted.k, tilted.q, tilted.t, tilted.log_z, tilted.o, tilted.shift
    k_pos, w_hi, whole, size = tilted.k_pos, tilted.w_hi, tilted.whole, tilted.size
    k_hi = int(k.max())
    ks = np.arange(k_pos, w_hi + 1)
    js, j_err, rel, decay = _window_weights(t, shift, shift, ks)
    h_up = (js + j_err) * decay * (1 + rel)
    computed = convolved.folded_sum[np.mod(ks, size)]
    values = np.maximum(computed, 0.0)
    body = float(np.dot(h_up, values)) * (1 + 2 * len(ks) * _U)
    fp = float(np.linalg.norm(h_up)) * (1 + 1e-10) * convolved.err_l2
    tail = 0.0
    if not (whole or w_hi >= n * k_hi):
        # sum over K > w_hi of h(J) q^(*n)(K): h decreasing there (t (w_hi + 1 + shift) >= 1
        # by the window's choice), else bounded by its value at the largest sum
        j_w = w_hi + 1 + shift
        h_w = j_w * math.exp(-t * j_w) if t > 0 else n * (k_hi + o)
        tail = h_w * (1 + 1e-9) * _chernoff(k, q, n, w_hi + 1, above=True)
    log_total = n * log_z + 4 * _U * n * abs(log_z) + 1e-300
    inner_total = (body + fp + tail) * spacing * (1 + 4 * _U)
    if inner_total <= 0:
        return 0.0
    if log_total + math.log(inner_total) - math.log(n) > 700.0:
        return math.inf
    return math.exp(log_total + math.log(inner_total) - math.log(n)) * (1 + 1e-12)


def _chernoff(k: np.ndarray, q: np.ndarray, n: int, w: int, *, above: bool) -> float:
    """Bound on the mass of ``q^(*n)`` at ``K >= w`` (``above``) or ``K <= w``: Chernoff's
    ``e^(-lam s w) M(s lam)^n`` (``s = +-1``) at the best of a few ``lam > 0``, else the whole
    mass ``(sum q)^n`` (``q`` rounded up can be a hair above 1)."""
    sign = 1.0 if above else -1.0
    total = float(np.sum(q)) * (1 + (len(q) + 2) * _U)
    # (capped at e^700: a bound that large charges everything either way, and n = 2^50 overflowed)
    best = (math.exp(min(n * math.log(total) * (1 + 4 * _U) + 4 * _U, 700.0)) if total > 1
            else 1.0)
    top = float(np.max(np.abs(k)))
    for lam in np.geomspace(1e-8, 1.0, 60) / max(top, 1.0) * 50:
        z = sign * lam * k
        m = float(np.max(z))
        log_m = m + math.log(float(np.sum(q * np.exp(z - m))))
        exponent = n * log_m - sign * lam * w + 16 * _U * (n * (abs(log_m) + abs(m) + 1)
                                                         + lam * abs(w))
        if exponent < 0:
            best = min(best, math.exp(exponent) * (1 + 1e-9))
    return best


@dataclass
class LatticeBlanket:
    """``delta(eps)`` and ``epsilon(delta)`` of a blanket bound whose variable's law at each
    ``eps`` is ``law_at(eps, spacing)`` (:func:`laplace_blanket_law`, :func:`class_blanket_law`)
    for ``n`` users of an ``eps0``-DP randomizer; ``sd_at(eps)`` the standard deviation of
    ``G`` (sets the spacing, :data:`POINTS_PER_SD` points a standard deviation)."""

    eps0: float
    n: int
    law_at: Callable[[float, float], LatticeLaw]
    sd_at: Callable[[float], float]

    def delta(self, epsilon: float) -> float | None:
        if epsilon >= self.eps0:
            return 0.0
        # a fine lattice for the spread of G and for its positive part (the largest value is
        # E - e^eps): where a few large reports decide the sum (eps near eps0, small n) the
        # standard deviation is set by the negative values, and a spacing from it alone
        # smeared the positive atom over a lattice point beyond it (eps0 = 8, n = 1000: 7.90
        # where the blanket spread to two classes gives 7.06)
        big, x = math.exp(self.eps0), math.exp(epsilon)
        spacing = min(self.sd_at(epsilon) / POINTS_PER_SD, (big - x) / TOP_POINTS)
        # ... within MAX_LATTICE points over the range [1 - E x, E - x] of G.  Near eps0, or
        # for eps0 above about 15, the positive part is tiny against that range (52 billion
        # points were asked for); a lattice coarsened to the budget smeared it and was looser
        # than the blanket spread to three classes (eps0 = 20, n = 1e5, eps = 19.4: 0.19
        # against 0.0048): no value there, the other bounds answer
        if (big - 1) * (1 + x) * (1 + 1e-9) / (MAX_LATTICE - 64) > spacing:
            return None
        try:
            law = self.law_at(epsilon, spacing)
        except ParameterError:     # (rounding at the point budget): no value, the caller's
            return None            # other bounds stand
        value = blanket_delta_upper(law, self.n)
        return None if value is None else min(value, 1.0)    # a delta is at most 1

    def epsilon(self, delta: float, hi: float | None = None) -> float | None:
        """Smallest certified epsilon (:func:`~dpplugins.numerics.smallest_epsilon`, relative
        1e-3) at most ``hi`` (a known upper bound, default ``eps0``); None where the FFT is too
        large."""
        from dpplugins.numerics import smallest_epsilon

        failed = []

        def upper(eps):
            value = self.delta(eps)
            if value is None:
                failed.append(eps)
                # at 0 the trivial bound delta <= 1 (the lattice of eps = 0 is often too large):
                # it lets the search's first step interpolate log delta between 0 and ``hi``
                # instead of bisecting (Laplace, eps0 = 0.5, n = 10^6: one FFT evaluation of six)
                return 1.0 if eps == 0 else math.inf
            return value

        top = self.eps0 if hi is None else min(hi, self.eps0)
        # never beyond ``top`` (a bracket grown past it only re-proved eps0 and cost FFTs:
        # 13-24 s at eps0 >= 12 where every lattice was too large)
        value = smallest_epsilon(upper, delta, hi=top, rtol=1e-3, secant=True,
                                 epsilon_max=top)
        if not math.isfinite(value):
            return None
        return min(value, self.eps0)


def laplace_sd(eps0: float, epsilon: float) -> float:
    """Standard deviation of the Laplace blanket variable (``G`` of
    :func:`laplace_blanket_law` before the lattice): ``E[G] = 1 - x`` and ``E[G^2] = 2 x
    int r^2 dnu - ...`` in closed form (our derivation, from ``int r dnu = (gamma/2)(sqrt(E) -
    1) + gamma^2 E / 2`` and ``int r^2 dnu = (gamma/6)(E^(3/2) - 1) + gamma^2 E^2 / 2``)."""
    big, gamma, x = math.exp(eps0), math.exp(-eps0 / 2), math.exp(epsilon)
    m0 = gamma / 2
    m1 = gamma / 2 * (math.sqrt(big) - 1) + gamma ** 2 * big / 2
    m2 = gamma / 6 * (big ** 1.5 - 1) + gamma ** 2 * big ** 2 / 2
    # half 1: (r - x)^2; half 2: (1 - x r)^2
    second = (m2 - 2 * x * m1 + x * x * m0) + (m0 - 2 * x * m1 + x * x * m2)
    mean = 1 - x
    return math.sqrt(max(second - mean * mean, 1e-300))


def class_sd(eps0: float, w10: float, w11: float, w00: float, epsilon: float) -> float:
    """Standard deviation of the four-class blanket variable."""
    e, x = math.exp(eps0), math.exp(epsilon)
    values = [e - x, 1 - e * x, e * (1 - x), 1 - x]
    masses = [w10, w10, w11, w00]
    mean = sum(v * m for v, m in zip(values, masses))
    second = sum(v * v * m for v, m in zip(values, masses))
    return math.sqrt(max(second - mean * mean, 1e-300))


