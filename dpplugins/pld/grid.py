"""Privacy loss distributions on a grid: the pessimistic and optimistic constructions.

Notation (Koskela, Jälkö, Prediger, Honkela 2021, "Tight differential privacy for discrete-valued
mechanisms and for the subsampled Gaussian mechanism using FFT", Sec. 2; ``papers/pld-fft-discrete.txt``):
for a pair of distributions (P, Q) the privacy loss is ``L = log(dP/dQ)`` and the privacy profile
is the hockey-stick divergence

    delta(eps) = E_P[(1 - e^(eps - L))_+] = E_Q[(e^L - e^eps)_+] + P(L = +inf).

As a function of ``x = e^eps`` it is convex and non-increasing.  A *grid PLD* puts P-mass only on
``eps_j = j * h`` and on ``+inf``; its profile is piecewise linear in ``x`` with kinks at the
grid points.  Everything in this package reduces a mechanism to such grid PLDs:

* :func:`pessimistic_from_bins` -- "connect the dots" (Doroshenko, Ghazi, Kamath, Kumar, Manurangsi
  2022, "Connect the dots: tighter discrete approximations of privacy loss distributions", Thm 4.1):
  the loss mass in each bin ``(eps_j, eps_{j+1}]`` is split between the two end points so that the
  likelihood ratios are exactly ``e^eps_j`` and ``e^eps_{j+1}``.  The result is a pair from which
  (P, Q) is a post-processing, so it *dominates* the mechanism and its profile agrees with the true
  profile at every grid point.  Composing dominating pairs gives a dominating pair (Zhu, Dong, Wang
  2022, "Optimal accounting of differential privacy via characteristic function", Thm 10), so every
  delta computed from it is an upper bound.
* :func:`optimistic_from_bins` -- the matching lower construction.  At each grid point the profile
  value is replaced by the value of the tangent at the previous grid point, ``v_j = T_{j-1}(x_j)``;
  the polygon through these points lies below every tangent, hence below the true (convex) profile,
  and its lower convex hull is the profile of a genuine pair that is a post-processing of (P, Q)
  (Blackwell).  Composition preserves this order, so deltas computed from it are lower bounds.
  Both constructions are exact at grid points up to a second-order term in ``h``.
* :func:`pessimistic_from_profile` -- connect the dots for a mechanism known only through an upper
  bound ``delta_U(eps)`` on its profile (shuffling, check-ins, PNSGD): the lower convex hull of the
  given points is still an upper bound of the true (convex) profile, and linear interpolation of a
  convex function lies above it.

Floating point: every construction carries ``fp_error``, a bound on how much delta computed from the
stored masses can differ from delta of the exact construction.  :func:`pessimistic_from_bins` and
:func:`optimistic_from_bins` make it (almost) zero by rounding in the safe direction: the bin masses
are relatively accurate (see :mod:`dpplugins.mechanisms.distributions`; we allow 64 u, u the unit
round-off), and each formula's rounding error is bounded and pushed towards more delta (upper) or
less delta (lower) -- see their docstrings.  Only the snapping of losses onto grid points and
rounding-level clipping remain in ``fp_error``.  Why it matters: an allowance charged per unit of
mass (the previous model, still used by :func:`pessimistic_from_profile`) adds up to ``T * 64 u``
after ``T`` compositions (7e-9 for ``T = 10^6``), an absolute floor under every delta; a safely
rounded construction composes into a bias relative to the delta itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpplugins.errors import NumericalError, ParameterError
from dpplugins.mechanisms.bins import LossBins

__all__ = ["LossBins", "GridPMF", "pessimistic_from_bins", "optimistic_from_bins",
           "pessimistic_from_profile", "lower_convex_hull"]

_UNIT_ROUNDOFF = np.finfo(float).eps / 2
#: floating-point allowance charged per construction, in units of probability mass
FP_ALLOWANCE = 64 * _UNIT_ROUNDOFF
#: the tangent construction evaluates grid points with ``eps + h`` at most this (``e^eps (e^h -
#: 1)`` stays below double's maximum, about ``e^709``)
_TOP_LOSS = 700.0


@dataclass(frozen=True)
class GridPMF:
    """P-masses of a privacy loss on ``eps_j = (lo + i) * h`` plus an atom at ``+inf``.

    ``fp_error`` bounds, in probability mass, the floating-point error of the stored masses (its
    effect on any delta is at most ``fp_error``).
    """

    h: float
    lo: int
    pmf: np.ndarray
    inf_mass: float
    fp_error: float

    @property
    def hi(self) -> int:
        return self.lo + len(self.pmf) - 1

    def losses(self) -> np.ndarray:
        """The loss value of every stored mass."""
        return (self.lo + np.arange(len(self.pmf))) * self.h

    def delta(self, epsilon: float) -> float:
        """Exact hockey-stick divergence of this grid PLD (no composition)."""
        s = self.losses()
        mask = s > epsilon
        return float(np.sum(-np.expm1(epsilon - s[mask]) * self.pmf[mask]) + self.inf_mass)


def _trimmed(h: float, lo: int, pmf: np.ndarray, inf_mass: float, fp_error: float) -> GridPMF:
    """Drop leading/trailing zeros so that compositions work on the support only."""
    nz = np.flatnonzero(pmf > 0)
    if len(nz) == 0:
        return GridPMF(h, lo, np.zeros(1), float(inf_mass), fp_error)
    return GridPMF(h, lo + int(nz[0]), np.ascontiguousarray(pmf[nz[0]: nz[-1] + 1]),
                   float(inf_mass), fp_error)


#: beyond this |loss|, e^loss is 0 or inf in double precision (exp underflows below -745.2)
_EXP_RANGE = 750.0
#: smallest bin mass taken as relatively accurate.  Below double's normal range (2^-1022) a mass
#: is only known to an absolute few times 2^-1074 (subnormal rounding; the quadrature's and
#: ndtr's intermediates), and e^eps up to e^600 amplifies that far beyond the mass itself;
#: 2^-1000 leaves a factor 2^22 for the absolute error of those roundings
_TRUSTED_MASS = 2.0 ** -1000
#: bound on the absolute error of an interval mass in double's subnormal range
_SUBNORMAL_SLACK = 2.0 ** -1064


def pessimistic_from_bins(bins: LossBins) -> GridPMF:
    """Connect-the-dots dominating pair of ``bins`` (Doroshenko et al. 2022, Thm 4.1).

    In bin ``(eps_j, eps_{j+1}]`` with masses (p, q), the Q-mass ``b = (p - x_j q) / (x_{j+1} - x_j)``
    goes to ratio ``x_{j+1}`` and ``q - b`` to ratio ``x_j``; the P-masses are ``x_{j+1} b`` and
    ``p - x_{j+1} b``.  Mass below ``eps_lo`` goes to ``eps_lo`` (pessimistic), and the part of the
    mass above ``eps_hi`` that exceeds ratio ``x_hi`` goes to ``+inf``, so that the profile at
    ``eps_hi`` is exact.

    Floating point (our derivation): the stored masses *dominate* the exact construction, so no
    error term is left for the composition.  The bin masses are within a relative ``r_b`` (the
    :class:`LossBins` contract, "a few units of round-off"; we allow ``r_b = 64 u``), and the split
    ``p_up = (p - x_j q) / (1 - e^-h)`` is off by at most ``(2 r_b + u (|eps_j| + 8)) p /
    (1 - e^-h)`` (the cancellation in ``p - x_j q``, with ``x_j q <= p``, and the rounding of
    ``x_j = e^eps_j``).  We add that much to ``p_up`` (capped at ``p``): more P-mass at the upper
    point, which only raises every delta, and it makes ``p_up`` at least the exact value.  Then all
    masses are scaled up by ``1 + 2 r_b + u (max |eps| + 16)``, which covers the bins' relative error
    and the few roundings of the sums, and ``delta(inf)`` gets the same treatment.  Every stored
    mass is then at least the exact connect-the-dots mass after an upward move, so every delta of
    every composition of stored masses is at least the exact one (the hockey-stick integrand is
    non-negative and non-decreasing in the loss).  The cost is a bias of order ``r_b`` times the
    mass near ``eps`` per composed step, where an absolute allowance cost ``r_b`` per step.
    Only a mechanism's own rounding of losses onto grid points (``bins.fp_error`` beyond the
    default ``FP_ALLOWANCE``; discrete pairs) remains in ``fp_error``.
    """
    h, lo, hi = bins.h, bins.lo, bins.hi
    eps = (lo + np.arange(hi - lo)) * h  # lower end of each bin
    r_b = FP_ALLOWANCE
    # A Q-mass below _TRUSTED_MASS may be rounded up by more than itself (sigma = 0.05, q = 1e-6:
    # 4e-323 for 2.5e-323 at loss 553, so x_j q > p and the bin's P-mass went to its lower end;
    # epsilon at delta = 1e-80 was certified 550.5100 for the true 550.5112): use 0 there, a
    # lower bound on the exact Q-mass, so that all of the bin's P-mass goes to its upper end
    q_trusted = np.where(bins.q >= _TRUSTED_MASS, bins.q, 0.0)
    with np.errstate(over="ignore", invalid="ignore"):
        excess = bins.p - np.exp(eps) * q_trusted  # = P-mass - x_j * Q-mass >= 0
    excess = np.where(np.isfinite(excess), excess, bins.p)
    h1 = -np.expm1(-h)
    p_up = np.clip(excess / h1, 0.0, bins.p)
    # the rounding of x_j = e^eps_j is u |eps_j| relative where x_j is finite and positive
    # (|eps_j| < 745); beyond, x_j is 0 or inf and the excess p (rounded up) is used: |eps| is
    # capped there (at a grid step of 1e300 the factor below became 1e284, a PMF of masses
    # far above 1, and the FFT overflowed)
    abs_eps = np.minimum(np.abs(eps), _EXP_RANGE)
    margin = bins.p * ((2 * r_b + _UNIT_ROUNDOFF * (abs_eps + 16)) / h1)
    p_up = np.minimum(p_up + margin, bins.p)
    pmf = np.zeros(hi - lo + 1)
    pmf[:-1] += bins.p - p_up
    pmf[1:] += p_up
    pmf[0] += bins.p_below
    x_hi_q = np.exp(hi * h) * bins.q_above if bins.q_above >= _TRUSTED_MASS else 0.0
    at_top = min(x_hi_q, bins.p_above)
    pmf[-1] += at_top
    eps_abs = min(max(abs(lo), abs(hi)) * h, _EXP_RANGE)
    scale = 1.0 + 2 * r_b + _UNIT_ROUNDOFF * (eps_abs + 16)
    inf_margin = (2 * r_b + _UNIT_ROUNDOFF * (eps_abs + 16)) * (bins.p_above + at_top) \
        + 2 * r_b * bins.p_inf
    # delta(inf) <= 1 always: capping keeps the bound valid (and 1 - delta(inf) >= 0)
    inf_mass = min((bins.p_above - at_top + bins.p_inf + inf_margin) * scale, 1.0)
    fp_error = max(float(bins.fp_error) - FP_ALLOWANCE, 0.0)
    return _trimmed(h, lo, pmf * scale, inf_mass, fp_error)


def fp_error_of(bins: LossBins) -> float:
    """The part of ``bins.fp_error`` that the safely rounded constructions do not absorb (the
    mechanism's own rounding of losses onto grid points beyond ``FP_ALLOWANCE``)."""
    return max(float(bins.fp_error) - FP_ALLOWANCE, 0.0)


def optimistic_from_bins(bins: LossBins, top_q: float = 0.0) -> GridPMF:
    """The tangent construction: a pair that (P, Q) dominates, exact to O(h^2) at grid points.

    Let ``T_j`` be the tangent of the true profile at ``x_j = e^eps_j`` (slope ``-Q(L > eps_j)``).
    The polygon through ``v_0 = 1 - x_0`` and ``v_j = T_{j-1}(x_j)`` lies below the profile (each
    segment lies below the tangent at its left end).  We follow it up to the last grid point ``J``
    where it is still ``>= P(L = inf)``, continue along a line of slope ``-Q(L > eps_J)`` (below
    ``T_J``) down to ``P(L = inf)`` at some ``x*`` and stay flat.  Its lower convex hull is the
    profile of a pair that is a post-processing of (P, Q) (Blackwell), so composing it gives lower
    bounds.  The one kink ``x*`` off the grid is rounded *down* to the grid: a stochastically
    smaller loss, which keeps every composed delta a lower bound.

    With ``g_k = (q_k - p_k e^(-eps_{k+1})) / (e^h - 1)`` (gap between the profile and the tangent in
    bin k, over the next grid step), the Q-mass at ``x_j`` is ``q_{j-1} + g_{j-1} - g_{j-2}``; if
    that is negative somewhere the polygon is not convex and the hull is computed explicitly.

    Floating point (our derivation): writing a grid PLD's profile as ``sum_j m_j (x_j - x)_+``
    (``m_j`` the Q-mass at ``x_j``), raising ``g_k`` moves Q-mass from ``x_{k+1}`` down to ``x_k``
    and lowers the profile everywhere; lowering a Q-mass or a P-mass also lowers it.  So we use
    ``g_k`` plus a bound on its rounding error (from the bins' relative accuracy ``r_b`` and the
    cancellation in ``q - p/x``), Q-masses times ``1 - r_b``, P-masses rounded down, a tail atom
    computed from lower estimates of ``v_J`` and ``x*``, and we end the polygon at the last
    ``J`` where ``v_J`` exceeds its own error bound (so the exact ``v_J`` is ``>= 0``).  The stored
    profile then lies below the exact construction's, which lies below the true profile; the
    composition preserves this (each delta of a composition is an integral of one component's
    profile against the others' P-masses).  What remains in ``fp_error``: kinks clipped at 0 and
    the atom snapped onto a grid point (both absolute, as before).

    ``top_q`` (optional): a certified lower bound on ``Q(L >= eps_hi)`` known from the
    mechanism's structure, e.g. the Q-mass of an atom of the loss at or above the top grid point
    (the Laplace mechanism puts P-mass 1/2 on its largest loss).  The bins cannot tell such an
    atom from mass just below it, so without ``top_q`` the polygon's last segment (slope
    ``-Q(L > eps_hi-1)``) reaches ``delta(inf)`` just *before* ``x_hi`` and the kink is rounded
    down a whole grid step: the atom's loss drops by ``h``, a first-order error (``h/2`` of mean
    loss per Laplace step, 2.7 % of epsilon after 685,161 steps at ``h = 0.02``).  With it, the
    last segment is taken under the left tangent at ``x_hi`` instead (our derivation): for
    ``x < x_hi``, ``delta(x) - delta(x_hi) = int_x^x_hi Q(L > log t) dt >= (x_hi - x) Q(L >=
    eps_hi)``, so the line through ``(x_hi, w)``, ``w <= delta(x_hi)``, with slope ``-top_q``
    lies below the profile left of ``x_hi``; the segment from ``(x_hi-1, min(v_hi-1, w + top_q
    (x_hi - x_hi-1)))`` to ``(x_hi, w)`` lies below it.  Lowering a vertex of the (valid) polygon
    keeps it valid, so the polygon stays below the profile, and its lower convex hull is taken
    as in the non-convex case (:func:`_optimistic_hull`).  ``w = p_above - x_hi q_above`` is the
    exact ``delta(x_hi) - delta(inf)`` (on ``L > eps_hi`` the integrand is ``dP - x_hi dQ``),
    rounded down; the slope used is the larger of ``top_q`` and ``q_above`` (rounded down; also
    a lower bound on ``Q(L >= eps_hi)``); all values are rounded down.  Numerically checked
    against the closed-form Laplace privacy profile (in the project's test suite).  Used only when the
    polygon is positive up to
    ``x_hi-1`` (otherwise it ends before the top anyway).
    """
    cut = _untrusted_cut(bins)
    if cut is not None:
        return _optimistic_split(bins, cut)
    h, lo = bins.h, bins.lo
    # e^(eps + h) must stay in double's range (a grid step above about 50 could put it beyond
    # e^709: e^eps overflowed, inf * 0 gave NaN, and the PMF an infinite mass).  Grid points
    # with eps + h > _TOP_LOSS are cut off the tangent construction: their bins join the mass
    # above the top, as where the loss range of a mechanism ends, so the construction and its
    # argument are unchanged; only ``top_q`` (an atom's credit at the old top) is dropped.  The
    # losses of the mechanisms stop at 600 (MAX_ABS_LOSS) and the grid one step above, so at
    # grid steps up to 50 nothing is cut.  A grid with fewer than two points left (only
    # extreme compositions coarsen that far) gets the pair with P = Q, which every pair
    # dominates (Blackwell): a lower bound of 0.
    top = math.floor(_TOP_LOSS / h) - 1 if h <= _TOP_LOSS else lo - 1
    if bins.hi > top:
        if top < lo + 1:
            return GridPMF(h, 0, np.ones(1), 0.0, 0.0)
        bins, top_q = bins.restricted(lo, top), 0.0
    n = bins.hi - lo + 1
    eps = (lo + np.arange(n)) * h
    x = np.exp(eps)
    em1 = np.expm1(h)
    r_b = FP_ALLOWANCE
    u = _UNIT_ROUNDOFF
    abs_eps = np.abs(eps)
    p_ext = np.concatenate([[bins.p_below], bins.p])  # region j-1 below grid point j
    # the Q-mass at loss -inf (where P vanishes) is left out: no hockey-stick divergence sees
    # it, and the construction would have put it at the first grid point -- with the gap term
    # below, a P-mass of x_0 q_minus_inf that does not exist (an (eps, delta) pair at eps = 0.5,
    # delta = 0.05 got a total P-mass of 1.030, and composed lower bounds above the truth)
    q_ext = np.concatenate([[max(bins.q_below - bins.q_minus_inf, 0.0)], bins.q])
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        g = (q_ext - p_ext / x) / em1  # g[j] belongs to the region just below x_j
    # G_{j-1} lies in [0, (x_j - x_{j-1}) q_{j-1}], so g lies in [0, q_{j-1} e^-h]
    g = np.clip(np.nan_to_num(g, nan=0.0, posinf=0.0), 0.0, q_ext * np.exp(-h))
    # bound on |g - exact g| (p/x <= q in each region, so the numerator loses 2 r_b q + rounding)
    g_err = q_ext * ((2 * r_b + u * (abs_eps + 10)) / em1 + r_b + 4 * u)
    # profile at grid points from suffix sums (long double), then the polygon values
    ld = np.longdouble
    p_ld = np.asarray(bins.p, dtype=ld)
    q_ld = np.asarray(bins.q, dtype=ld)
    sp = (np.concatenate([np.cumsum(p_ld[::-1])[::-1], [ld(0)]]) + ld(bins.p_above)).astype(float)
    sq = (np.concatenate([np.cumsum(q_ld[::-1])[::-1], [ld(0)]]) + ld(bins.q_above)).astype(float)
    del p_ld, q_ld  # 32 bytes a bin, not needed below (they were held through the hull)
    sum_rel = r_b + 2 * n * float(np.finfo(ld).eps) + 2 * u  # relative error of sp, sq
    profile_finite = np.maximum(sp - x * sq, 0.0)
    gap = g * x * em1  # G_{j-1} = g_{j-1} * (x_{j+1} - x_j)
    v = profile_finite - gap  # v_j - p_inf
    v_err = (sum_rel + u * (abs_eps + 6)) * (sp + x * sq) + g_err * x * em1 * (1 + 4 * u) \
        + 4 * u * (gap + np.abs(v))
    if 1.0 - x[0] - bins.p_inf <= 0:
        finite = float(np.sum(bins.p) + bins.p_below + bins.p_above)
        if finite == 0.0:
            # all P-mass at +inf (mutually singular pair, e.g. an (eps, 0)-DP pair whose e^-eps
            # underflows): the pair with P-mass p_inf (1 - 2 r_b) at +inf and the rest nowhere
            # has the profile p_inf (1 - 2 r_b) <= delta(eps) for every eps, a lower bound
            return GridPMF(h, lo, np.zeros(1), bins.p_inf * (1 - 2 * r_b), fp_error_of(bins))
        raise NumericalError(
            f"the optimistic construction needs e^eps_lo < 1 - delta(inf) (grid starts at "
            f"eps={eps[0]:.4g}, delta(inf)={bins.p_inf:.4g})",
            "start the grid lower (a smaller loss range) or use a finer grid")
    v[0] = 1.0 - x[0] - bins.p_inf
    v_err[0] = u * (abs_eps[0] + 6) * x[0] + r_b * bins.p_inf + 2 * u
    if top_q > 0 and n >= 3 and q_ext[-1] > 0:
        low = v - v_err
        if np.all(low[: n - 1] > 0):
            top = n - 1
            w_err = (sum_rel + u * (abs_eps[top] + 6)) * (sp[top] + x[top] * sq[top]) \
                + 4 * u * profile_finite[top]
            w = max(float(profile_finite[top] - w_err), 0.0)
            slope = max(float(top_q), float(sq[top]) * (1 - sum_rel)) * (1 - 4 * u)
            dx = max(float(x[top] - x[top - 1]) - 2 * u * (abs_eps[top] + 8) * float(x[top]),
                     0.0) * (1 - 4 * u)
            cap = (w + slope * dx) * (1 - 4 * u)
            low = low.copy()
            low[top] = w
            low[top - 1] = min(float(low[top - 1]), cap)
            return _optimistic_hull(bins, x, low, np.zeros(n), top, sq[top], sum_rel)
    below = np.flatnonzero(v < v_err)
    last = n - 1 if len(below) == 0 else max(int(below[0]) - 1, 0)
    if last < n - 2:
        mixed = _mixed_tangent_vertices(v, v_err, profile_finite, sp, sq, x, abs_eps, h,
                                        sum_rel, last)
        if mixed is not None:
            w, w_err, w_last = mixed
            return _optimistic_hull(bins, x, w, w_err, w_last, sq[w_last], sum_rel)
    q_gt_last = sq[last]
    pmf = np.zeros(n)
    # tail line from (x_last, v_last) with slope -Q(L > eps_last) down to p_inf at x_star
    tail_atom = None
    fp_error = max(float(bins.fp_error) - FP_ALLOWANCE, 0.0)
    if q_gt_last > 0:
        v_low = max(float(v[last] - v_err[last]), 0.0)
        x_low = x[last] * (1 - u * (abs_eps[last] + 8))
        q_high = q_gt_last * (1 + sum_rel)
        with np.errstate(over="ignore"):
            x_star_low = (x_low + v_low / q_high) * (1 - 4 * u)
            x_star = x[last] + max(float(v[last]), 0.0) / q_gt_last
        atom = (x_low * q_gt_last * (1 - sum_rel) + v_low) * (1 - 4 * u)
        j_star, moved = _kink_index(x_star_low, x_star, x, h, lo, last)
        tail_atom = (j_star, atom)
        fp_error += moved * atom
    # Q-masses at the kinks of the polygon 0..last (g raised by its error: Q-mass moves down)
    g_up = g + g_err
    q_low = q_ext * (1 - r_b)
    m = np.empty(last + 1)
    m[0] = q_low[0] + g_up[0] if last > 0 else (1.0 - q_gt_last * (1 + sum_rel)) * (1 - 2 * u)
    if last >= 2:
        m[1:last] = q_low[1:last] + g_up[1:last] - g_up[0:last - 1]
    if last >= 1:
        m[last] = q_low[last] - g_up[last - 1]
    # the polygon is not convex where a kink of the plain (unraised) construction is clearly
    # negative: then take the lower convex hull explicitly
    plain = np.empty(last + 1)
    plain[0] = q_ext[0] + g[0] if last > 0 else 1.0 - q_gt_last
    if last >= 2:
        plain[1:last] = q_ext[1:last] + g[1:last] - g[0:last - 1]
    if last >= 1:
        plain[last] = q_ext[last] - g[last - 1]
    tolerance = 1e-12 * (q_ext[: last + 1] + g[: last + 1] + np.concatenate([[0.0], g[: last]]))
    # (the absolute part of the tolerance in P-mass units: a Q-mass deficit c at x_j carried
    # down costs c x_j (e^h - 1) of fp_error, 2e-288 at x_j = e^35 for a deficit of 5e-302,
    # which left no lower bound at delta = 1e-300)
    if np.any(plain < -tolerance - 1e-300 / np.maximum(x[: last + 1], 1.0)):
        # the hull needs x, v and v_err only: the other arrays (about 120 bytes a bin) are
        # freed before it (they were held through it, the peak of the construction)
        del eps, abs_eps, p_ext, q_ext, g, g_err, sp, sq, profile_finite, gap, pmf
        del g_up, q_low, m, plain, tolerance
        return _optimistic_hull(bins, x, v, v_err, last, q_gt_last, sum_rel)
    # raising g can leave rounding-level negative kinks: carry each deficit down to the next
    # kink (moving Q-mass c from x_{j-1} up to x_j raises the profile by at most
    # c (x_j - x_{j-1}), charged to fp_error); what reaches kink 0 is clipped (charged c x_0)
    negative = np.flatnonzero(m < 0)
    for j in negative[::-1]:
        deficit = -m[j]
        if deficit <= 0:
            continue
        m[j] = 0.0
        i = j - 1
        while deficit > 0 and i >= 0:
            fp_error += deficit * (x[i + 1] - x[i]) * (1 + 4 * u)
            take = min(deficit, m[i])
            m[i] -= take
            deficit -= take
            i -= 1
        if deficit > 0:
            fp_error += deficit * x[0]
    x_down = x[: last + 1] * (1 - u * (abs_eps[: last + 1] + 8))
    pmf[: last + 1] = x_down * np.maximum(m, 0.0)
    if tail_atom is not None:
        pmf[tail_atom[0]] += tail_atom[1]
    if q_gt_last <= 0:
        pmf[n - 1] += _flat_tail_mass(bins, float(v[last] - v_err[last]))
    return _trimmed(h, lo, pmf, bins.p_inf * (1 - 2 * r_b), fp_error)


def _untrusted_cut(bins: LossBins) -> int | None:
    """Index of the first bin at a non-negative loss with P-mass whose Q-mass is below
    ``_TRUSTED_MASS`` (``n`` for the region above the grid), or None.  There ``x_j q``,
    with ``x_j`` up to ``e^600``, is not known to the accuracy the tangent construction needs
    (sigma = 0.05, q = 1e-6: Q-masses flushed to 0 from loss 553 on, and lower bounds on
    epsilon above the truth at delta = 1e-80 and below)."""
    n = bins.hi - bins.lo
    eps = (bins.lo + np.arange(n)) * bins.h
    bad = np.flatnonzero((bins.q < _TRUSTED_MASS) & (bins.p > 0) & (eps >= 0))
    if len(bad):
        return int(bad[0])
    if bins.q_above < _TRUSTED_MASS and bins.p_above > 0 and bins.hi * bins.h >= 0:
        return n
    return None


def _optimistic_split(bins: LossBins, cut: int) -> GridPMF:
    """Tangent construction for bins whose Q-masses from bin ``cut`` on cannot be trusted.

    Our derivation.  Write the profile as ``f = p_inf + A + B``, ``A`` and ``B`` the integrals of
    ``(1 - x e^-L)_+ dP`` over the outputs of the bins below ``cut`` and over the rest (bins
    ``cut ..`` and the region above the grid).  (i) ``B`` is at least the profile of the P-masses
    of those bins put at the lower ends of their bins (``eps_hi`` for the region above): a
    smaller loss for each unit of mass; the masses are rounded down (relative ``2 r_b``, and
    ``_SUBNORMAL_SLACK`` absolute).  (ii) The pair with the outputs of ``B`` merged into one output of
    P-mass ``P_B`` at loss ``+inf`` and their Q-mass ``Q_B`` moved to loss ``-inf`` (P = 0
    there) is a genuine pair whose profile is ``p_inf + P_B + A``; its bins are the head bins
    with ``P_B`` (rounded up: only lowers ``v_0``) added to ``p_inf`` and ``Q_B`` to the
    left-out ``q_minus_inf``, all trusted, so the tangent construction of it is below that
    profile, and its finite part below ``A``.  The sum of the finite part, the atoms of (i) and
    ``p_inf`` (rounded down) is therefore below ``f``; as a function of the P-masses and losses
    only, it composes to lower bounds as in :func:`optimistic_from_bins`."""
    h, lo, hi = bins.h, bins.lo, bins.hi
    n = hi - lo
    r_b = FP_ALLOWANCE
    tail_p = np.concatenate([bins.p[cut:], [bins.p_above]])
    p_b = (math.fsum(tail_p.tolist()) * (1 + 2 * r_b) + 1e-300) * (1 + 4 * _UNIT_ROUNDOFF)
    q_b = math.fsum(bins.q[cut:].tolist()) + bins.q_above
    pmf = np.zeros(n + 1)
    fp_error = fp_error_of(bins)
    if cut >= 2 and 1.0 - math.exp(lo * h) - (bins.p_inf + p_b) > 0:
        head = LossBins(h=h, lo=lo, hi=lo + cut, p=bins.p[:cut], q=bins.q[:cut],
                        p_below=bins.p_below, q_below=bins.q_below + q_b, p_above=0.0,
                        q_above=0.0, p_inf=bins.p_inf + p_b, fp_error=bins.fp_error,
                        q_minus_inf=bins.q_minus_inf + q_b)
        lower = optimistic_from_bins(head)
        start = lower.lo - lo
        pmf[start: start + len(lower.pmf)] += lower.pmf
        fp_error = lower.fp_error
    # (otherwise no head construction: its finite part 0 is below A)
    # rounded down: relative r_b, and an absolute 2^-1064 (1024 units of the subnormal range)
    atoms = np.maximum(tail_p * ((1 - 2 * r_b) * (1 - 4 * _UNIT_ROUNDOFF)) - _SUBNORMAL_SLACK, 0.0)
    pmf[cut: n] += atoms[:-1]
    pmf[n] += atoms[-1]
    return _trimmed(h, lo, pmf, bins.p_inf * (1 - 2 * r_b), fp_error)


def _mixed_tangent_vertices(v, v_err, profile_finite, sp, sq, x, abs_eps, h, sum_rel, last):
    """Polygon vertices under a choice of tangent per grid interval, for a tangent polygon that
    ends early although the profile is still well above its rounding error; ``None`` when that
    is not the case or the choice does not carry the polygon further.

    Why (measured): the Poisson-subsampled Gaussian with ``q = 1e-5`` has a kink of its profile
    at ``x = 1 - q``, where the slope jumps from about -1 to about -0.16.  When the kink lies
    late in its grid interval, the left tangent there (slope about -1) reaches 0 at the next
    grid point, the polygon of :func:`optimistic_from_bins` ends, and its lower bound on every
    delta beyond is 0 (a sigma = 0.5, 100-step history had lower bound 0 on two grids).

    The construction (our derivation; it generalises the ``top_q`` segment of
    :func:`optimistic_from_bins`).  Give each interval ``[x_{j-1}, x_j]`` a supporting line
    ``L_j`` of the convex profile ``f``: the left tangent ``T_{j-1}`` or the right tangent
    ``T_j`` (slope ``-Q(L > eps_j)``, below ``f`` everywhere).  With vertex values ``w_j <=
    min(L_j(x_j), L_{j+1}(x_j))`` (and ``w_0 <= min(v_0, L_1(x_0))``, ``v_0 = 1 - x_0 - P(L =
    inf) <= f(x_0)``), the segment on interval ``j`` has both ends below ``L_j``, so it lies
    below ``L_j <= f``; the polygon lies below ``f``, and so does its lower convex hull, which
    :func:`_optimistic_hull` takes (with the tail line of slope ``-Q(L > eps_J)`` from the last
    vertex ``J``, below ``T_J``).  The values: ``T_{j-1}(x_j) = v_j`` as in the plain polygon,
    ``T_j(x_j) = f(x_j)``, and ``T_j(x_{j-1}) = f(x_j) + Q(L > eps_j) (x_j - x_{j-1})``.  The
    right tangent is chosen where it loses less of the profile relative to its value (the left
    tangent ``1 - T_{j-1}(x_j) / f(x_j)`` at ``x_j``, the right one ``1 - T_j(x_{j-1}) /
    f(x_{j-1})`` at ``x_{j-1}``; any choice is valid).  Rounding: ``f(x_j)`` is charged the error bound of the suffix sums as in
    :func:`optimistic_from_bins`, the rise ``Q (x_j - x_{j-1})`` its relative error plus
    ``8 u``, and every value ``4 u`` of itself; the vertex's lower estimate is the smaller of its
    two lines' lower estimates."""
    u = _UNIT_ROUNDOFF
    n = len(x)
    j0 = last + 1
    pf, spn, sqn = profile_finite[:n], sp[:n], sq[:n]
    pf_err = (sum_rel + u * (abs_eps + 6)) * (spn + x * sqn) + 4 * u * pf
    if not pf[j0] - pf_err[j0] > 1e3 * (v_err[j0] + pf_err[j0]):
        return None  # the profile itself is at its rounding level there: nothing to gain
    rise = sqn * (x * -np.expm1(-h))  # Q(L > eps_j) (x_j - x_{j-1})
    r = pf + rise  # T_j(x_{j-1}), stored at j
    r_err = pf_err + (sum_rel + 8 * u) * rise + 4 * u * r
    right = np.zeros(n + 1, dtype=bool)  # right[j]: interval j (ending at x_j) uses T_j
    right[1:n] = (pf[1:] - v[1:]) * pf[:-1] > (pf[:-1] - r[1:]) * pf[1:]
    # A_j = L_j(x_j) for j >= 1; B_j = L_{j+1}(x_j) for j <= n - 2
    a, a_low = v.copy(), v - v_err
    a[right[:n]], a_low[right[:n]] = pf[right[:n]], (pf - pf_err)[right[:n]]
    b, b_low = np.full(n, np.inf), np.full(n, np.inf)
    nxt = right[1:n + 1]  # interval j + 1 uses T_{j+1}
    b[:n - 1] = np.where(nxt[:n - 1], r[1:], pf[:n - 1])
    b_low[:n - 1] = np.where(nxt[:n - 1], (r - r_err)[1:], (pf - pf_err)[:n - 1])
    w, w_low = np.minimum(a, b), np.minimum(a_low, b_low)
    failed = np.flatnonzero(~(w_low >= 0))
    w_last = n - 1 if len(failed) == 0 else int(failed[0]) - 1
    if w_last <= last:
        return None
    return w, np.maximum(w - w_low, 0.0), w_last


def _flat_tail_mass(bins: LossBins, value: float) -> float:
    """P-mass put at the top grid point ``eps_hi`` when the polygon ends flat (no Q-mass above
    its last point, as computed) at ``value`` above ``delta(inf)``.

    A flat end would mean P-mass at loss ``+inf``; but a computed ``Q(L > eps_last) = 0`` with
    ``value > 0`` means that Q's mass there underflowed, not that the loss is infinite: the
    Laplace mechanism with scale 10^-3 has losses up to 1000, beyond the grid (capped at
    ``MAX_ABS_LOSS``), with Q-mass ``e^-1000 / 2``.  Putting ``value`` at ``+inf`` claimed
    ``delta(eps) > 0`` for every eps, above the true profile past the largest loss (an invalid
    lower bound).  Instead (our derivation): the true profile is ``delta(x) = p_inf + sum_o P(o)
    (1 - x e^-L(o))_+`` over the outcomes of finite loss, and each outcome with ``L(o) >=
    eps_hi`` contributes at least ``(1 - x e^-eps_hi)_+``; so P-mass ``A <= P(eps_hi < L <
    inf)`` (= ``p_above``, rounded down) at loss ``eps_hi`` gives a profile below the true one
    for ``x >= x_last``.  For ``x < x_last`` its contribution ``A (1 - x e^-eps_hi)_+`` is at
    most ``A <= value``, the flat tail it replaces, so the polygon stays below the profile there.
    Lowering the profile keeps every composed delta a lower bound (Blackwell).  The remaining
    ``value - A`` (mass of losses between the polygon's end and ``eps_hi``, below the polygon's
    error bound there) is dropped, which also only lowers the profile."""
    if not value > 0:
        return 0.0
    return min(value, bins.p_above * (1 - 2 * FP_ALLOWANCE)) * (1 - 4 * _UNIT_ROUNDOFF)


def _optimistic_hull(bins: LossBins, x: np.ndarray, v: np.ndarray, v_err: np.ndarray, last: int,
                     q_gt_last: float, sum_rel: float) -> GridPMF:
    """Slow path of :func:`optimistic_from_bins`: explicit lower convex hull of the polygon.

    Certified the same way (our derivation): the polygon's values are lowered by their error
    bounds and its tail ends at a lower estimate of ``x*``, so the hull lies below the exact
    polygon; slopes and kinks are computed in long double and each kink is lowered by a bound on
    its rounding error (a smaller Q-mass at a kink lowers the profile everywhere)."""
    h, lo = bins.h, bins.lo
    n = len(x)
    u = _UNIT_ROUNDOFF
    ld = np.longdouble
    u_ld = float(np.finfo(ld).eps) / 2
    top = (1.0 - bins.p_inf) * (1 - 2 * u)
    # the running minimum (our derivation): the true profile does not increase, so lowering a
    # vertex to the smallest value at or left of it keeps every vertex below it, and the hull
    # then does not increase either.  Without it a polygon that rose again (a tangent at an atom
    # just below a grid point undershoots the next vertex: k-ary randomized response at eps0 =
    # 650 read as zero-out, whose other atom lies beyond the grid) gave a hull whose rising last
    # segment was dropped with its kink, while the flat end took the higher value: a total
    # P-mass of 1.0016, and lower bounds above the true delta after composition
    v_low = np.minimum.accumulate(np.asarray(v[: last + 1], dtype=float) - v_err[: last + 1])
    x_low = x[: last + 1] * (1 - u * (np.abs(np.log(x[: last + 1])) + 8))
    xs = [np.array([0.0]), x_low]
    vs = [np.array([top]), v_low]
    slack = 0.0
    if q_gt_last > 0 and v_low[-1] > 0:
        with np.errstate(over="ignore"):
            x_star_low = (x_low[-1] + v_low[-1] / (q_gt_last * (1 + sum_rel))) * (1 - 4 * u)
            x_star = x[last] + max(float(v[last]), 0.0) / q_gt_last
        # a kink beyond the top grid point is moved down to it (a smaller x*: the tail line
        # only gets lower); this also keeps x* finite when v / Q(L > eps_last) overflows
        # (a kink clamped onto the last vertex is left out: the end is then flat, see below)
        top_low = float(x[-1]) * (1 - u * (abs(math.log(float(x[-1]))) + 8))
        x_star_low = min(float(x_star_low), top_low)
        if x_star_low > x_low[-1]:
            slack = max(math.log(min(float(x_star), float(x[-1]))) - math.log(x_star_low), 0.0)
            xs.append(np.array([x_star_low]))
            vs.append(np.array([0.0]))
    xs_a, vs_a = np.concatenate(xs), np.concatenate(vs)
    keep = lower_convex_hull(xs_a, vs_a)
    hx, hv = xs_a[keep].astype(ld), vs_a[keep].astype(ld)
    dx, dv = np.diff(hx), np.diff(hv)
    slopes = np.concatenate([dv / dx, [ld(0)]])
    # |error of a slope| <= u_ld (|v| + |v'|) / dx + 3 u_ld |slope| (the inputs are exact in ld)
    slope_err = np.concatenate([u_ld * (np.abs(hv[1:]) + np.abs(hv[:-1])) / dx
                                + 3 * u_ld * np.abs(dv / dx), [ld(0)]])
    qk = np.diff(slopes) - (slope_err[1:] + slope_err[:-1]) - u_ld * np.abs(np.diff(slopes))
    qk = np.maximum(qk, ld(0))
    pmf = np.zeros(n)
    grid_index = np.concatenate([[-1], np.arange(last + 1), [-2]])[: len(xs_a)][keep]
    fp_error = max(float(bins.fp_error) - FP_ALLOWANCE, 0.0)
    masses = (hx[1:] * qk).astype(float) * (1 - 4 * u)
    index = grid_index[1:]
    on_grid = index >= 0
    np.add.at(pmf, index[on_grid], masses[on_grid])
    for xv, mass in zip(hx[1:][~on_grid], masses[~on_grid]):
        # the off-grid kink x*: round its loss down (optimistic)
        j, snapped = _round_loss_down(float(np.log(xv)), h, slack=slack)
        j = min(max(j - lo, last), n - 1)
        fp_error += snapped * mass
        pmf[j] += mass
    # a flat end (no Q-mass above the last vertex as computed): see _flat_tail_mass
    pmf[n - 1] += _flat_tail_mass(bins, float(hv[-1]))
    return _trimmed(h, lo, pmf, bins.p_inf * (1 - 2 * FP_ALLOWANCE), fp_error)


def _kink_index(x_star_low: float, x_star: float, x: np.ndarray, h: float, lo: int,
                last: int) -> tuple[int, float]:
    """Index (from ``lo``) of the grid point at or below the tail kink ``x*`` of the tangent
    construction, given a lower estimate ``x_star_low`` and the computed ``x_star`` (either may
    be ``inf`` when ``v / Q(L > eps_last)`` overflows), and the distance moved up (see
    :func:`_round_loss_down`).  A kink at or beyond the top grid point ``x[-1]`` goes to it: its
    loss is then at least ``eps_hi``, and rounding a loss down keeps the construction below the
    profile."""
    n = len(x)
    top_high = float(x[-1]) * (1 + _UNIT_ROUNDOFF * (abs(math.log(float(x[-1]))) + 8))
    if not x_star_low < top_high:
        return n - 1, 0.0
    slack = max(math.log(min(float(x_star), float(x[-1]))) - math.log(float(x_star_low)), 0.0)
    j, moved = _round_loss_down(math.log(float(x_star_low)), h, slack=slack)
    return max(min(j - lo, n - 1), last), moved


def _round_loss_down(loss: float, h: float, slack: float = 0.0) -> tuple[int, float]:
    """Grid index at or below ``loss``; a loss within its own rounding error (16 u max(1, |loss|),
    plus ``slack`` when ``loss`` is itself a lower estimate) below a grid point is put on that
    point.  Returns the index and the distance moved up (to be charged to ``fp_error``: delta is
    1-Lipschitz in the loss of each unit of mass)."""
    index = loss / h
    nearest = round(index)
    tolerance = 16 * _UNIT_ROUNDOFF * max(1.0, abs(loss)) + slack
    if nearest > index and (nearest - index) * h <= tolerance:
        return int(nearest), tolerance
    return int(np.floor(index)), 0.0


def lower_convex_hull(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Indices of the lower convex hull of points sorted by increasing ``x``.

    Vectorised first: repeatedly delete every concave vertex at once (a vertex whose right
    slope is smaller than its left slope lies above the chord of its two neighbours, which are
    points of the set, so it is not a vertex of the lower hull; deleting points that are not
    hull vertices leaves the hull unchanged, however many are deleted together).  After the
    first pass only the vertices next to a deleted one can have become concave (the others keep
    their neighbours), so each later pass checks those alone.  Profiles from the constructions
    here are convex except at rounding-level zigzags and a few dents, so the passes are few and
    short; when removals cascade for longer, Andrew's monotone chain finishes the job on the
    remaining points in one linear pass.  Of points with equal ``x`` only the lowest is
    considered.
    """
    n = len(x)
    if n >= 2 and not np.all(x[1:] > x[:-1]):
        # points with equal x (e^(j h) rounds to the same float once h is below an ulp; they
        # gave 0 / 0 slopes): only the lowest of each run can be a vertex of the lower hull
        run = np.cumsum(np.concatenate([[True], x[1:] > x[:-1]])) - 1
        order = np.lexsort((y, run))
        pick = order[np.concatenate([[True], run[order][1:] > run[order][:-1]])]
        return pick[lower_convex_hull(x[pick], y[pick])]
    if n <= 2:
        return np.arange(n)
    slopes = np.diff(y) / np.diff(x)
    concave = np.flatnonzero(slopes[1:] < slopes[:-1]) + 1  # never the two end points
    if len(concave) == 0:
        return np.arange(n)
    # the remaining points as a doubly linked list: a pass costs O(vertices it checks)
    alive = np.ones(n, dtype=bool)
    before, after = np.arange(-1, n - 1), np.arange(1, n + 1)
    for _ in range(_HULL_PASSES):
        alive[concave] = False
        left, right = before[concave], after[concave]
        while True:  # through runs of deleted neighbours
            dead = ~alive[left]
            if not dead.any():
                break
            left[dead] = before[left[dead]]
        while True:
            dead = ~alive[right]
            if not dead.any():
                break
            right[dead] = after[right[dead]]
        after[left], before[right] = right, left
        check = np.unique(np.concatenate([left, right]))
        check = check[(check > 0) & (check < n - 1)]
        a, b = before[check], after[check]
        slope_left = (y[check] - y[a]) / (x[check] - x[a])
        slope_right = (y[b] - y[check]) / (x[b] - x[check])
        concave = check[slope_right < slope_left]
        if len(concave) == 0:
            return np.flatnonzero(alive)
    keep = np.flatnonzero(alive)
    return keep[_monotone_chain(x[keep], y[keep])]


#: passes of :func:`lower_convex_hull` before Andrew's monotone chain takes over
_HULL_PASSES = 64


def _monotone_chain(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Lower hull by Andrew's monotone chain (points sorted by x); positions into ``x``."""
    xs, ys = x.tolist(), y.tolist()
    hull: list[int] = []
    for i in range(len(xs)):
        while len(hull) >= 2:
            a, b = hull[-2], hull[-1]
            # drop b unless the turn a -> b -> i is strictly convex (slope increases)
            if (ys[b] - ys[a]) * (xs[i] - xs[a]) < (ys[i] - ys[a]) * (xs[b] - xs[a]):
                break
            hull.pop()
        hull.append(i)
    return np.asarray(hull, dtype=np.int64)


def pessimistic_from_profile(delta_upper, h: float, lo: int, hi: int, stride: int = 1) -> GridPMF:
    """Connect-the-dots dominating pair for a mechanism known by an upper bound on its profile.

    ``delta_upper`` maps an array of epsilons (grid points ``lo, lo + stride, ..., hi``, possibly
    negative) to upper bounds on ``delta(eps)``.  We clip the values into the valid range
    ``[max(0, 1 - e^eps), 1]``, make them non-increasing, and take the lower convex hull (in
    ``x = e^eps``) of those points together with ``(0, 1)``.  Any convex function below the given
    values still lies above the true convex profile, and linear interpolation of a convex function
    lies above it, so the hull's piecewise-linear profile is a valid upper bound (Doroshenko et al.
    2022, Sec. 4); beyond ``eps_hi`` the remaining ``delta_U(eps_hi)`` goes to ``+inf``.  A
    ``stride > 1`` evaluates the (possibly expensive) profile on a coarser sub-grid; the kinks then
    sit on every ``stride``-th grid point, which is still valid.  Leading atoms of total mass at
    most ``FP_ALLOWANCE`` (round-off of the hull) move up to the first atom after them
    (:func:`_raise_left_tail`; valid, and it keeps the FFT window to the pair's own losses).
    """
    if hi <= lo:
        raise ParameterError("hi", hi, f"> lo={lo}")
    # beyond |eps| = 600, e^eps overflows: end the grid there (what is left of the profile at the
    # top goes to delta(inf), which is valid, only looser)
    limit = math.floor(600.0 / h)
    lo, hi = max(lo, -limit), min(hi, limit)
    # the multiples of stride (0 among them) and both ends: on a window symmetric about 0 the
    # negative points mirror the positive ones, so a profile of both signs from one bound
    # (PrivacyLossDistribution.from_privacy_profile, symmetric) asks for each |eps| once, and
    # a memoised profile is evaluated at half the points (the grid from lo used to put the
    # negative side's points between the positive side's mirrored: a shuffled round's profile
    # at 10^8 users was evaluated at 155 points instead of about 80, 90 ms each)
    index = np.unique(np.concatenate([[lo], np.arange(-((-lo) // stride) * stride, hi + 1,
                                                      stride), [hi]]).astype(np.int64))
    eps = index * h
    values = np.asarray(delta_upper(eps), dtype=float)
    if values.shape != eps.shape or np.any(np.isnan(values)):
        raise ValueError("privacy profile returned NaN or an array of the wrong shape")
    values = np.clip(values, np.maximum(-np.expm1(eps), 0.0), 1.0)
    values = np.minimum.accumulate(values)
    xs = np.concatenate([[0.0], np.exp(eps)])
    vs = np.concatenate([[1.0], values])
    keep = lower_convex_hull(xs, vs)
    hx, hv = xs[keep], vs[keep]
    slopes = np.concatenate([np.diff(hv) / np.diff(hx), [0.0]])
    qk = np.maximum(np.diff(slopes), 0.0)
    pmf = np.zeros(hi - lo + 1)
    pmf[index[keep[1:] - 1] - lo] = hx[1:] * qk
    return _trimmed(h, lo, _raise_left_tail(pmf, FP_ALLOWANCE), float(values[-1]), FP_ALLOWANCE)


def _raise_left_tail(pmf: np.ndarray, mass: float) -> np.ndarray:
    """``pmf`` with its leading atoms of total P-mass at most ``mass`` moved up to the first
    atom after them (in place).

    Valid (our derivation): ``H_x(P||Q) = sum_l pmf(l) (1 - x e^-l)_+ + delta(inf)`` increases
    with every atom's loss for every ``x >= 0``, so the moved pair dominates the original one at
    every epsilon, negative ones included, and compositions of dominating pairs dominate.  It
    changes nothing at epsilon above the new first atom.  Why: the hull of a profile given only
    to double precision places atoms of about ``1e-17`` far to the left (a check-in epoch of
    randomized response with 10^6 buckets: 50 atoms of 5e-17 in all, down to loss -4.6 where
    the pair's own atoms begin at -0.69); they set the FFT window's width, which then did not
    shrink with a coarser grid (16 s, four grids, to stay over the window budget)."""
    cut = min(int(np.searchsorted(np.cumsum(pmf), mass, side="right")), len(pmf) - 1)
    if cut > 0:
        # the correctly rounded sum (half an ulp) plus the rounded addition (half an ulp of the
        # result, which is the larger): one ulp up keeps the moved mass from shrinking
        moved = math.fsum(pmf[:cut].tolist())
        pmf[:cut] = 0.0
        pmf[cut] = np.nextafter(pmf[cut] + moved, np.inf)
    return pmf
