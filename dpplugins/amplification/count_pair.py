"""Count pairs: certified hockey-stick divergences of the laws of category counts.

A *count pair* (:class:`CountPair`) is the pair of laws of the counts ``(N_A, N_B, N_C)`` of n
reports, one user's law differing between the two datasets and the ``n - 1`` others i.i.d.;
every shuffle-model bound of the library reduces to one: the clone pairs of Feldman, McMillan,
Talwar (FMT21, arXiv:2012.12803, Thm 3.1; FMT23, arXiv:2208.04591, Thm 3.1), the privacy
blanket of a known randomizer (:mod:`dpplugins.amplification.shuffle_model`) and the exact
lower-bound pairs.  ``delta(eps)`` is a closed-form sum over a binomial window (de Moivre's
identity, :class:`_Direction`), with every truncated and floating-point term charged to the
upper bound.  This module is the one implementation of that sum and of the binomial tails it
uses (:func:`binomial_sf`, :func:`binomial_cdf`, :func:`binomial_window`).

Example::

    >>> pair = clone_pair(1.0, 1000, math.exp(-1.0))    # FMT21's pair at eps0 = 1
    >>> bounds = pair.delta(0.2)
    >>> 0 < bounds.lower <= bounds.upper < 1e-3
    True
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np
from scipy import special, stats

from dpplugins.errors import NumericalError, ParameterError, check_real
from dpplugins.numerics import largest_violating_epsilon, smallest_epsilon
from dpplugins.pld import Bounds

__all__ = ["CountPair", "clone_pair", "krr_laws", "krr_lower_pairs", 
           "count_pair_loss_binned_pmfs", "binomial_pmf_rows", "binomial_pmf_error",
           "parameter_drift",
           "ragged_windows", "binomial_sf",
           "binomial_cdf",
           "binomial_window", "binomial_pmf", "newton_smallest_epsilon", "largest_violated",
           "loss_scale_guess", "EPS_ROUNDING_MARGIN", "eps_rounding_margin", "eps_less_margin",
           "below_by_margin", "margined_candidates", "upper_at_zero",
           "RELATIVE_TAIL_ERROR", "UNIT_ROUNDOFF"]

_U = float(np.finfo(float).eps) / 2
#: the unit round-off of double precision (shared with the shuffle-model modules)
UNIT_ROUNDOFF = _U
#: log of the probability mass a summation window leaves out (charged to delta)
_LOG_CUT = -75.0


# --------------------------------------------------------------------------------------------
# binomial tails
# --------------------------------------------------------------------------------------------
def _betainc_is_accurate() -> bool:
    """``scipy.special.betainc`` is Boost's incomplete beta from SciPy 1.12 on; older versions
    (cephes) are off by ~1e-9 relative for ~1e5 trials.  Checked once against
    ``scipy.stats.binom.sf`` (Boost)."""
    k, n = 201897.0, 400000.0
    a = float(special.betainc(k + 1, n - k, 0.5))
    b = float(stats.binom.sf(k, n, 0.5))
    return abs(a / b - 1) < 1e-13


_FAST_SF = _betainc_is_accurate()


def binomial_sf(k, n, p):
    """``P(Bin(n, p) > k)`` as an array (Boost's incomplete beta; ``k < 0`` gives 1, ``k >= n``
    gives 0)."""
    k = np.asarray(k, dtype=float)
    n = np.broadcast_to(np.asarray(n, dtype=float), k.shape)
    if not _FAST_SF:
        return np.asarray(stats.binom.sf(k, n, p), dtype=float)
    out = np.zeros(k.shape)
    inner = (k >= 0) & (k < n)
    out[k < 0] = 1.0
    if np.any(inner):
        out[inner] = special.betainc(k[inner] + 1, n[inner] - k[inner], p)
    return out


def binomial_cdf(k, n, p, complement: float | None = None):
    """``P(Bin(n, p) <= k)`` (Boost's incomplete beta, accurate in the lower tail);
    ``complement``: ``1 - p`` from its own closed form where ``p`` is within rounding of 1 (by
    subtraction ``1 - p`` keeps no digit below about 1e-16)."""
    if complement is not None:
        return binomial_sf(np.asarray(n, dtype=float) - np.asarray(k, dtype=float) - 1, n,
                           complement)
    if not _FAST_SF:
        return np.asarray(stats.binom.cdf(k, n, p), dtype=float)
    k = np.asarray(k, dtype=float)
    n = np.broadcast_to(np.asarray(n, dtype=float), k.shape)
    out = np.ones(k.shape)
    inner = (k >= 0) & (k < n)
    out[k < 0] = 0.0
    if np.any(inner):
        out[inner] = special.betainc(n[inner] - k[inner], k[inner] + 1, 1 - p)
    return out


def binomial_window(trials: int, prob: float, log_cut: float = _LOG_CUT) -> tuple[int, int, float]:
    """``(lo, hi, outside)``: ``Bin(trials, prob)`` puts all but ``outside`` (its exact mass,
    rounded up) on ``[lo, hi]``, and ``outside <= 2 e^log_cut`` unless the support ends first.
    The one binomial window of the shuffle modules (tails by :func:`binomial_sf` and
    :func:`binomial_cdf`)."""
    if trials == 0 or prob <= 0:
        return 0, 0, 0.0
    if prob >= 1:
        return trials, trials, 0.0
    mean = trials * prob
    sd = math.sqrt(trials * prob * (1 - prob))
    k = math.sqrt(-2 * log_cut) + 1
    lo = max(0, math.floor(mean - k * sd - 2))
    hi = min(trials, math.ceil(mean + k * sd + 2))
    cut = math.exp(log_cut)
    while hi < trials and float(binomial_sf(hi, trials, prob)) > cut:
        hi = min(trials, hi + max(2, hi - math.floor(mean)))
    while lo > 0 and float(binomial_cdf(lo - 1, trials, prob)) > cut:
        lo = max(0, lo - max(2, math.ceil(mean) - lo))
    outside = 0.0
    if lo > 0:
        outside += float(binomial_cdf(lo - 1, trials, prob))
    if hi < trials:
        outside += float(binomial_sf(hi, trials, prob))
    return lo, hi, outside * (1 + 1e-9)  # rounded up: it is charged to upper bounds


def newton_smallest_epsilon(fn, delta: float, hi: float, guess: float,
                            rtol: float = 1e-7) -> float:
    """:func:`dpplugins.numerics.smallest_epsilon` with safeguarded Newton on ``[0, hi]``
    (``fn(eps) -> (upper bound on delta(eps), d delta / d eps)``).  ``hi`` is the round's eps0,
    where its delta is exactly 0; where the computed upper bound there still exceeds ``delta``
    (its error terms, e.g. at delta = 1e-300, or at eps0 = 50) the answer is ``hi`` itself.  The
    bracket used to grow past ``hi``: ``exp`` overflowed at delta = 1e-300, and a count pair
    evaluated at twice eps0 raised "wrong orientation" (general randomizer, eps0 = 50,
    n = 1000)."""
    eps = smallest_epsilon(fn, delta, hi=hi, guess=guess, newton=True, rtol=rtol,
                           epsilon_max=hi)
    return hi if math.isinf(eps) else eps


#: relative accuracy we assume of one scipy binomial pmf / survival-function value; it is
#: charged to every upper bound
_REL_SF = RELATIVE_TAIL_ERROR = 1e-12


def _boost_pdf():
    """SciPy's Boost binomial pmf ufunc (what ``scipy.stats.binom.pmf`` calls, without its
    argument-checking overhead), if this SciPy has it and it agrees with the public function."""
    try:
        from scipy.stats._boost import _binom_pdf
    except ImportError:  # pragma: no cover - other SciPy versions
        return None
    k = np.array([3.0, 200000.0, 201000.0])
    n = np.array([10.0, 400000.0, 400000.0])
    if np.allclose(_binom_pdf(k, n, 0.5), stats.binom.pmf(k, n, 0.5), rtol=1e-15, atol=0):
        return _binom_pdf
    return None  # pragma: no cover


_PDF = _boost_pdf()


#: below this many trials :func:`binomial_pmf` is Boost's, from it on Loader's form
_LOADER_TRIALS = 1000
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def binomial_pmf_error(trials) -> float:
    """The relative error assumed of :func:`binomial_pmf` at ``trials`` trials:
    ``RELATIVE_TAIL_ERROR + 4 u min(trials, 1000) + 64 u sqrt(trials)`` (assumed; numerically
    checked against mpmath at 40 digits in the tests).  Boost's pmf, used below 1000 trials,
    is off by up to about 0.7 u trials (5.8e-11 at 1.5e6 trials, 7.5e-9 at 1e8), which 1e-12
    did not cover (a review); Loader's form, used above, by about u z sqrt(trials) at z standard
    deviations from the mean (the rounding of ``n p``), 1.4e-11 at 1e9 trials.  Boost's tails
    (:func:`binomial_sf`) are assumed within ``RELATIVE_TAIL_ERROR + 64 u trials``
    (:class:`_Direction`)."""
    if np.ndim(trials):
        t = np.maximum(np.asarray(trials, dtype=float), 1.0)
        return _REL_SF + 4 * _U * np.minimum(t, _LOADER_TRIALS) + 64 * _U * np.sqrt(t)
    t = max(float(trials), 1.0)
    return _REL_SF + 4 * _U * min(t, _LOADER_TRIALS) + 64 * _U * math.sqrt(t)


def _stirling_error(n: np.ndarray) -> np.ndarray:
    """``log(n!) - log(sqrt(2 pi n) (n/e)^n)`` for ``n >= 1``: ``gammaln`` up to 15, the
    Stirling series above (Loader 2000, below)."""
    out = np.empty(n.shape)
    small = n <= 15
    ns = n[small]
    out[small] = special.gammaln(ns + 1) - (ns + 0.5) * np.log(ns) + ns - _HALF_LOG_2PI
    nl = n[~small]
    nn = nl * nl
    s0, s1, s2, s3, s4 = 1 / 12, 1 / 360, 1 / 1260, 1 / 1680, 1 / 1188
    out[~small] = np.where(
        nl > 500, (s0 - s1 / nn) / nl, np.where(
            nl > 80, (s0 - (s1 - s2 / nn) / nn) / nl, np.where(
                nl > 35, (s0 - (s1 - (s2 - s3 / nn) / nn) / nn) / nl,
                (s0 - (s1 - (s2 - (s3 - s4 / nn) / nn) / nn) / nn) / nl)))
    return out


def _deviance(x: np.ndarray, m: np.ndarray) -> np.ndarray:
    """``x log(x / m) + m - x`` without cancellation near ``x = m`` (its series in ``v = (x -
    m) / (x + m)``, Loader 2000)."""
    out = np.empty(x.shape)
    near = np.abs(x - m) < 0.1 * (x + m)
    xn, mn = x[near], m[near]
    v = (xn - mn) / (xn + mn)
    s = (xn - mn) * v
    ej = 2 * xn * v
    v2 = v * v
    for j in range(1, 40):
        ej = ej * v2
        term = ej / (2 * j + 1)
        s = s + term
        if not np.any(np.abs(term) > 1e-17 * np.abs(s)):
            break
    out[near] = s
    xf, mf = x[~near], m[~near]
    with np.errstate(divide="ignore", invalid="ignore"):
        out[~near] = xf * np.log(xf / mf) + mf - xf
    return out


def _loader_pmf(k: np.ndarray, n: np.ndarray, p: float) -> np.ndarray:
    """``P(Bin(n, p) = k)`` for ``0 <= k <= n``, ``0 < p < 1``, in Loader's saddle-point form
    (C. Loader, "Fast and accurate computation of binomial probabilities", 2000; what R's
    ``dbinom`` computes): ``exp(stirl(n) - stirl(k) - stirl(n-k) - D(k, np) - D(n-k, nq)) /
    sqrt(2 pi k (n - k) / n)`` with the deviance ``D`` (:func:`_deviance`), ``n q^n`` and ``p^n``
    at the ends.  Its error does not grow with ``n`` as Boost's does."""
    q = 1.0 - p
    res = np.zeros(k.shape)
    zero, full = k == 0, (k == n) & (k > 0)
    mid = ~zero & ~full
    if np.any(zero):
        nz = n[zero]
        res[zero] = np.exp(-_deviance(nz, nz * q) - nz * p if p < 0.1 else nz * math.log(q))
    if np.any(full):
        nf = n[full]
        res[full] = np.exp(-_deviance(nf, nf * p) - nf * q if q < 0.1 else nf * math.log(p))
    if np.any(mid):
        x, m = k[mid], n[mid]
        lc = (_stirling_error(m) - _stirling_error(x) - _stirling_error(m - x)
              - _deviance(x, m * p) - _deviance(m - x, m * q))
        lf = 2 * _HALF_LOG_2PI + np.log(x) + np.log(m - x) - np.log(m)
        res[mid] = np.exp(lc - 0.5 * lf)
    return res


def binomial_pmf(k, n, p):
    """``P(Bin(n, p) = k)``, 0 outside ``0 <= k <= n``: Boost's pmf below 1000 trials, Loader's
    form (:func:`_loader_pmf`) from 1000 on; relative error :func:`binomial_pmf_error`."""
    k = np.asarray(k, dtype=float)
    n = np.broadcast_to(np.asarray(n, dtype=float), k.shape)
    p = float(p)
    out = np.zeros(k.shape)
    inner = (k >= 0) & (k <= n)
    if p <= 0 or p >= 1:
        out[inner & (k == (0.0 if p <= 0 else n))] = 1.0
        return out
    small = inner & (n < _LOADER_TRIALS)
    if np.any(small):
        out[small] = (_PDF(k[small], n[small], p) if _PDF is not None
                      else stats.binom.pmf(k[small], n[small], p))
    large = inner & (n >= _LOADER_TRIALS)
    if np.any(large):
        out[large] = _loader_pmf(k[large], n[large], p)
    return out


def _binom_path(U0: int, I: np.ndarray, theta: float, rho: float, block: int | None = None):
    """``S = P(Bin(U, theta) >= I)`` and ``P = P(Bin(U, theta) = I)`` along a path
    ``U = U0, U0 + 1, ...`` with integer thresholds ``I``, with certified absolute error bounds.

    Every ``block``-th point, and every point whose threshold moves by more than one or touches
    the boundary (``I <= 0`` or ``I > U``), is computed directly (Boost; relative error ``rho``);
    the others by the exact recurrences ``P(U+1, I) = P(U, I) (U+1)(1-theta)/(U+1-I)``,
    ``S(U+1, I) = S(U, I) + theta P(U, I-1)`` with ``P(U, I-1) = P(U, I) I (1-theta) /
    ((U-I+1) theta)``, then ``S(U, I+1) = S(U, I) - P(U, I)`` and
    ``P(U, I+1) = P(U, I) (U-I) theta / ((I+1)(1-theta))`` (or the mirror step down).  Each step
    adds at most ``6u`` times the computed value to the running bound of P (a ratio of four
    numbers) and ``2u`` times S plus the error of the P it adds to the bound of S.  The bounds are
    absolute, so a subtraction cannot hide a loss of relative accuracy."""
    I = np.asarray(I, dtype=np.int64)
    L = len(I)
    if block is None:
        block = int(min(256, max(8, math.sqrt(0.03 * L))))
    U = U0 + np.arange(L, dtype=np.int64)
    prev_I = np.concatenate([[0], I[:-1]])
    step = I - prev_I
    ok = (prev_I >= 1) & (prev_I <= U - 1) & (np.abs(step) <= 1) & (I >= 1) & (I <= U)
    pos = np.arange(L)
    anchor = ~ok | (pos % block == 0)
    offset = pos - np.maximum.accumulate(np.where(anchor, pos, 0))
    S = np.zeros(L)
    P = np.zeros(L)
    S[anchor] = binomial_sf(I[anchor] - 1, U[anchor], theta)
    P[anchor] = binomial_pmf(I[anchor], U[anchor], theta)
    eS = rho * S
    eP = rho * P
    q = theta / (1 - theta)
    c6, c2 = 6 * _U, 2 * _U
    # the points at each offset from their anchor, in increasing order (a stable sort: the
    # same index arrays as np.nonzero(offset == s), without a pass over the path per offset;
    # offsets are below block <= 256, so 16 bits hold them and the sort is a radix sort)
    order = np.argsort(offset.astype(np.int16), kind="stable")
    ends = np.cumsum(np.bincount(offset))
    U_float, I_float = U.astype(float), I.astype(float)
    for s in range(1, len(ends)):
        idx = order[ends[s - 1]:ends[s]]
        j = idx - 1
        u, i0 = U_float[j], I_float[j]
        p_cur, ep = P[j], eP[j]
        # U -> U + 1 at the threshold i0 (1 <= i0 <= u)
        r_down = i0 / ((u - i0 + 1) * q)                  # P(u, i0-1) / P(u, i0)
        p_down = p_cur * r_down
        s_new = S[j] + theta * p_down
        es_new = eS[j] + theta * (ep * r_down + c6 * p_down) + c2 * s_new
        r_up = (u + 1) * (1 - theta) / (u + 1 - i0)       # P(u+1, i0) / P(u, i0)
        p_new = p_cur * r_up
        ep_new = ep * r_up + c6 * p_new
        d = step[idx]
        up = d > 0
        if np.any(up):                                    # threshold i0 -> i0 + 1 at u + 1
            r = (u[up] + 1 - i0[up]) * q / (i0[up] + 1)
            s_new[up] = s_new[up] - p_new[up]
            es_new[up] = es_new[up] + ep_new[up] + c2 * np.abs(s_new[up])
            p_new[up] = p_new[up] * r
            ep_new[up] = ep_new[up] * r + c6 * p_new[up]
        down = d < 0
        if np.any(down):                                  # threshold i0 -> i0 - 1 at u + 1
            r = i0[down] / ((u[down] + 2 - i0[down]) * q)
            p_new[down] = p_new[down] * r
            ep_new[down] = ep_new[down] * r + c6 * p_new[down]
            s_new[down] = s_new[down] + p_new[down]
            es_new[down] = es_new[down] + ep_new[down] + c2 * s_new[down]
        S[idx] = np.clip(s_new, 0.0, 1.0)
        P[idx] = p_new
        eS[idx] = es_new
        eP[idx] = ep_new
    return S, P, eS, eP

def largest_violated(delta_lower: Callable[[float], float], delta: float, hi: float) -> float:
    """Largest eps in [0, hi] (to ~1e-7 relative) with ``delta_lower(eps) > delta`` (0 if none):
    a certified lower bound on epsilon(delta) when ``delta_lower`` is a lower bound on delta
    (:func:`dpplugins.numerics.largest_violating_epsilon`)."""
    return largest_violating_epsilon(delta_lower, delta, hi, rtol=1e-7, atol=1e-12)


# --------------------------------------------------------------------------------------------
# count pairs
# --------------------------------------------------------------------------------------------
def count_threshold(jmin: np.ndarray, ca: float, cb: float, cc: float, T: np.ndarray, n,
                    weights: np.ndarray, theta: float) -> tuple[np.ndarray, float]:
    """The first ``j`` (per entry ``T``, with ``n`` users: a number or one per entry) whose
    summand ``f(j) = ca j + cb (T - j) + cc (n - T)`` is positive, starting from the estimate
    ``jmin = floor(-k / d) + 1``, and a bound on the summands whose computed sign may be wrong,
    each entry's charge weighted by ``weights`` (its probability, and any normalisation).

    ``floor(-k / d)`` loses the threshold when ``f(T)`` is far below ``|ca|, |cb|``
    relative to the unit round-off: at eps0 = 25, ``f(1) / d`` is about ``1e-17``, the
    positive summand was dropped and the certified epsilon of the clone pair fell below
    binary RR's exact lower bound (25 - 7e-6 against 25 - 2.5e-6; eps0 = 50: 37.3).  Our
    analysis: a computed ``f(j)`` is within ``5 u s(j)`` of the true one, ``s(j) = |ca| j +
    |cb| (T - j) + |cc| (n - T) <= top = (|ca| + |cb|) T + |cc| (n - T)``, and the true
    ``f`` rises by ``d = ca - cb`` per step.  Where ``32 u top <= d`` at most one summand
    can have the wrong sign and ``floor(-k / d)`` is within two steps: the threshold is
    moved until the computed ``f`` changes sign there, and the two summands beside it whose
    computed ``|f| <= 16 u s(j)`` are charged ``32 u s(j)`` times their probability.
    Otherwise (``d < 32 u top``) ``floor(-k / d)`` is within ``2 u top / d + 1`` steps of the
    true threshold, so every summand it classifies wrongly has ``|f| <= 18 u top + 2 d <=
    82 u top``, and ``96 u top`` is charged for the T (their probabilities sum to at most
    1).

    The one implementation for :class:`_Direction` and the stacked blanket of
    :mod:`dpplugins.amplification.shuffle_model` (which estimated the threshold without this
    correction: k-RR with eps0 = 40, n = 2 certified epsilon 37.02 at delta 1e-3 where the exact
    value is 39.999).
    """
    T = np.asarray(T)
    n = np.asarray(n) if np.ndim(n) else n
    d = ca - cb

    def f(j):
        return ca * j + cb * (T - j) + cc * (n - T)

    def scale(j):
        return abs(ca) * j + abs(cb) * (T - j) + abs(cc) * (n - T)
    top = scale(T) + abs(cb) * T
    wide = 32 * _U * top > d
    for _ in range(8):
        down = ~wide & (jmin >= 1) & (f(jmin - 1) > 0)
        up = ~wide & (jmin <= T) & ~(f(jmin) > 0)
        if not (np.any(down) or np.any(up)):
            break
        jmin = jmin - down + up
    else:
        raise NumericalError("count pair threshold not found", "report this as a bug")
    boundary = float(np.dot(weights[wide], 96 * _U * top[wide])) if np.any(wide) else 0.0
    for j in (jmin - 1, jmin):
        unsure = ~wide & (j >= 0) & (j <= T) & (np.abs(f(j)) <= 16 * _U * scale(j))
        if np.any(unsure):
            pm = binomial_pmf(j[unsure], T[unsure], theta)
            boundary += float(np.dot(weights[unsure], pm * 32 * _U * scale(j)[unsure]))
    return jmin, boundary


class _Direction:
    """One direction of a count pair.  n users: one (the differing user) with law ``v0`` on X0
    and ``v1`` on X1 over categories (A, B, C), and ``n - 1`` others iid with law ``pi``; the
    output is the vector of counts.  Requires ``pi_A, pi_B > 0`` and ``v0_C = v1_C``, and the
    orientation ``v0_A / pi_A - v0_B / pi_B > v1_A / pi_A - v1_B / pi_B`` (large N_A favours X0).

    ``P_b(h) = sum_y v_b(y) Mult_{n-1}(h - e_y; pi) = Mult_n(h; pi) / n * sum_y v_b(y) h_y / pi_y``
    (as ``Mult_{n-1}(h - e_y; pi) = Mult_n(h; pi) h_y / (n pi_y)``).  With ``T = N_A + N_B ~
    Bin(n, pi_A + pi_B)`` and ``N_A | T ~ Bin(T, theta)``, ``P0 - x P1`` is linear in N_A for fixed
    T, so the positive part is the tail ``N_A >= J_T`` and its sum is closed form:
    ``sum_{j >= J} Bin(T, theta)(j) (D j + K) = D T theta (1 - theta) P(Bin(T-1, theta) = J-1)
    + (D T theta + K) P(Bin(T, theta) >= J)``.  This is de Moivre's identity
    ``sum_{j >= J} (j - T theta) b(j) = J (1 - theta) b(J)`` for the binomial pmf ``b`` (Diaconis &
    Zabell, "Closed form summation for classical distributions: variations on a theme of de
    Moivre", Statistical Science 6(3), 1991); our one-line check: with ``g(j) = j (1 - theta)
    b(j)``, ``g(j) - g(j+1) = b(j) (j - T theta)`` since ``(j+1)(1 - theta) b(j+1) = (T - j)
    theta b(j)``, and the sum telescopes; then ``J b(J; T) = T theta b(J-1; T-1)``.  Written this
    way the two terms cancel only by the factor ``c^2`` for a threshold ``c`` standard deviations
    above the mean (the Mills ratio), where the form ``D T theta P(Bin(T-1) >= J-1) + K P(Bin(T)
    >= J)`` cancelled by about ``c sqrt(T)``: at n = 1e8 that swamped the lower bounds.  The
    summand at the mean, ``D T theta + K``, is computed from the coefficients directly.  If
    ``pi_C = 0`` the outcomes where the differing user reports C have equal probability under X0
    and X1 and add nothing to the hockey-stick divergence.
    """

    def __init__(self, n: int, pi, v0, v1) -> None:
        self.n = n
        self.pi = tuple(float(v) for v in pi)
        self.v0 = tuple(float(v) for v in v0)
        self.v1 = tuple(float(v) for v in v1)
        pa, pb, pc = self.pi
        pab = pa + pb
        lo, hi, out = binomial_window(n - 1, min(pab, 1.0))
        self.T = np.arange(lo, min(hi + 1, n) + 1, dtype=np.int64)
        self.w = binomial_pmf(self.T, n, min(pab, 1.0))
        self.outside = out
        self.theta = pa / pab
        self.rho = _REL_SF + 64 * _U * max(n, 1)   # Boost's tails of at most n trials

    def _tails(self, jmin: np.ndarray):
        """``S1 = P(Bin(T-1) >= J-1)``, ``PM = P(Bin(T-1) = J-1)`` and ``S2 = P(Bin(T) >= J) =
        S1 - (1-theta) PM`` for every T of the window, with absolute error bounds
        ``(s1, s2, pm, e1, e2, epm)``."""
        T, theta = self.T, self.theta
        s1 = np.zeros(len(T))
        s2 = np.where(jmin <= 0, 1.0, 0.0)
        pmf = np.zeros(len(T))
        e1 = np.zeros(len(T))
        e2 = np.zeros(len(T))
        epmf = np.zeros(len(T))
        pos = T >= 1
        if not np.any(pos):
            return s1, s2, pmf, e1, e2, epmf
        i = jmin[pos] - 1
        u = T[pos] - 1
        if len(u) >= 3000 or (len(u) >= 1000 and u[0] > 20000):
            a, pm, ea, epm = _binom_path(int(u[0]), i, theta, self.rho)
        else:
            a = binomial_sf(i - 1, u, theta)
            pm = binomial_pmf(i, u, theta)
            ea, epm = self.rho * a, self.rho * pm
        b = a - (1 - theta) * pm
        s1[pos], s2[pos], pmf[pos] = a, np.maximum(b, 0.0), pm
        e1[pos], e2[pos], epmf[pos] = ea, ea + (1 - theta) * epm + 2 * _U * np.abs(b), epm
        return s1, s2, pmf, e1, e2, epmf

    def _coefficients(self, x: float):
        pa, pb, pc = self.pi
        ca = (self.v0[0] - x * self.v1[0]) / pa
        cb = (self.v0[1] - x * self.v1[1]) / pb
        cc = (self.v0[2] - x * self.v1[2]) / pc if pc > 0 else 0.0
        return ca, cb, cc

    def _threshold(self, jmin: np.ndarray, ca: float, cb: float, cc: float
                   ) -> tuple[np.ndarray, float]:
        """:func:`count_threshold` for this direction's window (its boundary charge divided by
        ``n``, the normalisation of the hockey-stick sum)."""
        jmin, boundary = count_threshold(jmin, ca, cb, cc, self.T, self.n, self.w, self.theta)
        return jmin, boundary / self.n

    def evaluate(self, x: float) -> tuple[float, float, float]:
        """``(value, error, P1(L > log x))``: the hockey-stick ``sum (P0 - x P1)_+`` computed from
        the window, a bound on its floating-point and truncation error, and the P1-mass of the
        positive region (the derivative is ``-x`` times it)."""
        n, T = self.n, self.T
        ca, cb, cc = self._coefficients(x)
        d = ca - cb
        if d <= 0:
            raise NumericalError("count pair with the wrong orientation", "report this as a bug")
        k = cb * T + cc * (n - T)
        with np.errstate(over="ignore", invalid="ignore"):
            jr = np.floor(-k / d)
        jmin = np.clip(np.nan_to_num(jr, nan=0.0, posinf=1e18, neginf=-1e18), -1, T) + 1
        jmin, boundary = self._threshold(jmin.astype(np.int64), ca, cb, cc)
        s1, s2, pm, e1, e2, epm = self._tails(jmin)
        theta = self.theta
        mean = T * theta
        # the summand at the mean, D T theta + K, from the coefficients (class docstring): each
        # of the three products (their factors rounded once, T - mean with the rounding of mean
        # as well) and their sum round by at most 6 u of the magnitudes below
        at_mean = ca * mean + cb * (T - mean) + cc * (n - T)
        at_mean_error = 6 * _U * (abs(ca) * mean + abs(cb) * T + abs(cc) * (n - T))
        t1 = d * mean * (1 - theta) * pm
        t2 = at_mean * s2
        value = float(np.dot(self.w, np.maximum(t1 + t2, 0.0))) / n
        # (the products round by at most 4 u, 1 - theta and the sum by 2 u more; the weights
        # are binomial_pmf of n trials, within binomial_pmf_error(n))
        rounding = (8 * _U + binomial_pmf_error(n)) * (np.abs(t1) + np.abs(t2))
        error = float(np.dot(self.w, abs(d) * mean * (1 - theta) * epm + np.abs(at_mean) * e2
                             + at_mean_error * (s2 + e2) + rounding)) / n
        error = (error + boundary) * (1 + 1e-12) + self.outside
        pa, pb, pc = self.pi
        da, db = self.v1[0] / pa, self.v1[1] / pb
        dc = self.v1[2] / pc if pc > 0 else 0.0
        tail = float(np.dot(self.w, (da - db) * mean * s1 + (db * T + dc * (n - T)) * s2)) / n
        return value, error, max(tail, 0.0)


#: absolute margin added to an upper epsilon below eps0 (and taken off a lower one; profiles
#: and delta queries are evaluated that far below / above): the bounds' laws are built from
#: ``exp(eps0)`` and ``exp(eps)`` in double precision, and ``fl(e^eps) = e^eps (1 + r)``,
#: ``|r| <= u``, is ``e^eps'`` with ``|eps' - eps| <= u`` (likewise eps0 and the laws'
#: probabilities, a few u each): the computed delta is that of points a few u away, which no
#: error term charged.  64 u covers it with room (numerically checked, not proven: a helper's
#: exact enumeration at eps0 in 1e-12, 1e-10, 1e-8, n = 2, 3, found 72 upper bounds below the
#: exact value without it -- binary RR, n = 2, delta = 1e-20 gave 9.99978e-13 where the exact
#: delta is 5.5e-18 -- and none with it; the project's tests repeat the check against an exact
#: enumeration of shuffled k-ary randomized response at n = 2)
EPS_ROUNDING_MARGIN = 64 * UNIT_ROUNDOFF

#: absolute charge on a count pair's delta at ``eps = 0`` (:meth:`CountPair.evaluate`), where
#: the margin above cannot be applied.  There delta is the total variation of the two output
#: laws, which moves by at most the total variation between the exact and the computed law of
#: the differing user's report (shuffling and counting post-process it): each of its
#: probabilities is one correctly rounded operation from ``exp(eps0)`` or ``expit``, so a few u
#: in all; the others' laws enter through the same few-u roundings.  Our derivation for the
#: differing user, numerically checked for the others (exact enumeration of the clone pair and
#: shuffled 3-RR at eps0 down to 1e-9): 16 u.
LAW_ROUNDING_AT_ZERO = 16 * UNIT_ROUNDOFF


def eps_rounding_margin(eps: float) -> float:
    """``eps`` plus :data:`EPS_ROUNDING_MARGIN` (0 stays 0: it was checked at 0 itself)."""
    return eps + EPS_ROUNDING_MARGIN if eps > 0 else eps


def eps_less_margin(eps: float) -> float:
    """A certified lower epsilon less :data:`EPS_ROUNDING_MARGIN`, at least 0 (inf stays)."""
    return max(eps - EPS_ROUNDING_MARGIN, 0.0) if math.isfinite(eps) else eps


def margined_candidates(candidates, *, upper: bool, cap: float = math.inf) -> dict:
    """Each candidate epsilon of a bound with the margin its reported value carries
    (:func:`eps_rounding_margin`, at most ``cap``, for upper bounds; :func:`eps_less_margin`,
    at least 0, for lower ones): the candidates are reported beside the value and must be
    bounds too (a tiny upper candidate was a few ulps below the exact epsilon without it)."""
    if upper:
        return {k: min(eps_rounding_margin(v), cap) for k, v in candidates.items()}
    return {k: eps_less_margin(max(v, 0.0)) for k, v in candidates.items()}


def upper_at_zero(value: float, epsilon: float, eps0: float) -> float:
    """An upper bound on delta evaluated at ``epsilon`` less the margin, with what that
    evaluation cannot cover where the margin reaches 0: :data:`LAW_ROUNDING_AT_ZERO` where the
    point was 0, and the smallest positive float below ``eps0`` (the exact delta of an
    eps0-DP pair is positive there, if below the float range).  From ``eps0`` on, and for
    ``eps0 = 0``, delta is exactly 0 and ``value`` is returned as it is."""
    if not epsilon < eps0:
        return value
    if epsilon < EPS_ROUNDING_MARGIN:
        value += LAW_ROUNDING_AT_ZERO
    return min(max(value, 5e-324), 1.0)


def below_by_margin(eps):
    """``max(eps - EPS_ROUNDING_MARGIN, 0)`` (elementwise): where an upper bound on a privacy
    profile is evaluated for ``eps`` -- the profile does not increase, so its bound at the
    lower point bounds it at ``eps`` whatever the rounding of ``exp(eps)`` there."""
    return np.maximum(np.asarray(eps, dtype=float) - EPS_ROUNDING_MARGIN, 0.0)


def loss_scale_guess(n: int, pi, v0, v1, delta: float) -> float:
    """A first point for searching the epsilon of the count pair ``(n, pi, v0, v1)`` at
    ``delta``: ``s sqrt(2 log(1/delta))`` with ``s^2 = sum_y (v0_y - v1_y)^2 / (n pi_y)``, the
    variance of the privacy loss to first order in ``1/n`` (a Gaussian approximation; only where
    a search starts, never what it returns); ``inf`` where that is 0."""
    s2 = sum((a - b) ** 2 / p for a, b, p in zip(v0, v1, pi) if p > 0)
    guess = math.sqrt(max(s2, 0.0) / n * 2 * math.log(1 / delta))
    return guess if guess > 0 else math.inf


class CountPair:
    """Both directions of a count pair (:class:`_Direction`): certified ``delta(eps)`` of the
    pair, its epsilon at a delta, and its exact pmfs for the PLD engine when small."""

    def __init__(self, n: int, pi, v0, v1, *, description: str = "") -> None:
        self.n = n
        self.pi, self.v0, self.v1 = tuple(pi), tuple(v0), tuple(v1)
        self.description = description
        self.forward = _Direction(n, pi, v0, v1)
        symmetric = (math.isclose(pi[0], pi[1], rel_tol=1e-15)
                     and math.isclose(v0[0], v1[1], rel_tol=1e-15)
                     and math.isclose(v0[1], v1[0], rel_tol=1e-15))
        self.backward = None if symmetric else _Direction(
            n, (pi[1], pi[0], pi[2]), (v1[1], v1[0], v1[2]), (v0[1], v0[0], v0[2]))

    def evaluate(self, epsilon: float) -> tuple[Bounds, float]:
        """Certified bounds on ``max(D_{e^eps}(P0||P1), D_{e^eps}(P1||P0))`` and the derivative of
        the larger one.

        At ``epsilon <= 0`` the bounds are widened by :data:`LAW_ROUNDING_AT_ZERO`: there no
        rounding margin can be taken off the evaluation point (:func:`below_by_margin`), and
        the laws' own rounding, a relative ``u / eps0`` in their difference at a tiny eps0,
        put the certified total variation of the clone pair a relative 1e-7 below the exact one
        at eps0 = 1e-9 (and its epsilon at 0 where it is 7e-17)."""
        x = math.exp(epsilon)
        best = None
        for part in (self.forward, self.backward):
            if part is None:
                continue
            value, err, tail = part.evaluate(x)
            if best is None or value > best[0]:
                best = (value, err, tail)
            else:
                best = (best[0], max(best[1], err), best[2])
        value, err, tail = best
        if epsilon <= 0:
            err += LAW_ROUNDING_AT_ZERO
        return (Bounds(float(max(value - err, 0.0)), float(min(value + err, 1.0))), -x * tail)

    def delta(self, epsilon: float) -> Bounds:
        return self.evaluate(epsilon)[0]

    def epsilon(self, delta: float, hi: float) -> float:
        """Certified upper bound on the smallest eps in ``[0, hi]`` with ``delta(eps) <= delta``
        (``hi`` must satisfy it; memoised)."""
        memo = self.__dict__.setdefault("_upper_memo", {})
        if (delta, hi) not in memo:
            def upper(e):
                b, slope = self.evaluate(e)
                return b.upper, slope
            memo[(delta, hi)] = newton_smallest_epsilon(upper, delta, hi,
                                                        min(self._scale_guess(delta), 0.1 * hi))
        return memo[(delta, hi)]

    def _scale_guess(self, delta: float) -> float:
        """First Newton point (:func:`loss_scale_guess`)."""
        return loss_scale_guess(self.n, self.pi, self.v0, self.v1, delta)

    def epsilon_lower(self, delta: float, hi: float) -> float:
        """Certified lower bound on the same quantity (memoised)."""
        memo = self.__dict__.setdefault("_lower_memo", {})
        if (delta, hi) not in memo:
            memo[(delta, hi)] = _lower_epsilon(lambda e: self.delta(e).lower, delta, hi,
                                               self.epsilon(delta, hi))
        return memo[(delta, hi)]


def _lower_epsilon(delta_lower: Callable[[float], float], delta: float, hi: float,
                   near: float | None) -> float:
    """Certified lower bound on epsilon(delta) from a lower bound on delta(eps): try just below
    ``near`` (a certified upper bound found before), then further below, and bisect between
    the last point that failed and the first that holds (from 0 if none holds)."""
    if near is not None and near > 0:
        failed = near
        for t in (1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.03, 0.1, 0.3):
            e = near * (1 - t)
            if delta_lower(e) > delta:
                if t <= 1e-2:
                    return e
                return largest_violating_epsilon(delta_lower, delta, min(failed, hi),
                                                 rtol=1e-7, atol=1e-12, violated=e)
            failed = e
        return largest_violated(delta_lower, delta, min(failed, hi))
    return largest_violated(delta_lower, delta, hi)


def clone_pair(eps0: float, n: int, clone_probability: float) -> CountPair:
    """The FMT21 / FMT23 clone pair as a :class:`CountPair`: the differing user reports 0 with
    probability ``e^eps0/(e^eps0+1)`` (1 otherwise, roles swapped on X1), every other user reports
    0 or 1 with probability ``c/2`` each (a clone) and nothing otherwise
    (:mod:`dpplugins.amplification.shuffle` has the pair's derivation and its users).
    ``1/(e^eps0+1)`` is computed as ``expit(-eps0)``, not ``1 - expit(eps0)``: the subtraction
    lost its relative accuracy for large eps0 (eps0 = 24: 6e-6, and the certified epsilon fell
    below binary RR's exact lower bound; eps0 = 36: 35.74 < 35.99999)."""
    a, b = float(special.expit(eps0)), float(special.expit(-eps0))
    c = check_real("clone_probability", clone_probability)
    if not 0 < c <= 1:   # 0: the others report nothing (a division by 0); 2: a law of -1
        raise ParameterError("clone_probability", clone_probability, "in (0, 1]")
    return CountPair(n, (c / 2, c / 2, 1 - c), (a, b, 0.0), (b, a, 0.0),
                     description=f"clone pair (eps0={eps0:g}, n={n}, c={c:.4g})")


def krr_laws(eps0: float, k: int) -> tuple[float, float, float]:
    """``(e^eps0, e^eps0 + k - 1, k / (e^eps0 + k - 1))`` of k-ary randomized response: the
    true value is reported with probability ``e^eps0 / z`` and each other one with ``1 / z``."""
    e = math.exp(eps0)
    z = e + k - 1
    return e, z, k / z


def krr_lower_pairs(eps0: float, n: int, k: int) -> dict[str, CountPair]:
    """Exact shuffled k-RR on two datasets (the differing user holds a on X0, b on X1), each a
    :class:`CountPair`, so each gives certified *lower* bounds:

    * ``"others_at_a"``: every other user holds a.  The reports on the k - 2 values other than a,
      b are uniform for everybody, so (N_a, N_b) is sufficient: exact.
    * ``"others_at_c"`` (k >= 3): every other user holds a third value c; the histogram merged
      into (N_a, N_b, rest) -- a post-processing, exact for k = 3.  This is Wang et al.'s pair
      for k-RR (:func:`dpplugins.amplification.shuffle_model.variation_ratio_pair` with their
      k-RR parameters) and FMT23's original Thm 5.2 pair.
    """
    e, z, _ = krr_laws(eps0, k)
    v0, v1 = (e / z, 1 / z, (k - 2) / z), (1 / z, e / z, (k - 2) / z)
    out = {"others_at_a": CountPair(n, (e / z, 1 / z, (k - 2) / z), v0, v1,
                                    description=f"{k}-RR, others at a")}
    if k >= 3:
        out["others_at_c"] = CountPair(n, (1 / z, 1 / z, (e + k - 3) / z), v0, v1,
                                       description=f"{k}-RR, others at a third value")
    return out


def ragged_windows(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every point of the integer windows ``[lo[r], hi[r]]``, flattened row by row: the row
    ``r`` of each point and its value (the outcomes of a pmf over ``(row, value)``)."""
    sizes = hi - lo + 1
    row = np.repeat(np.arange(len(lo)), sizes)
    return row, np.arange(int(sizes.sum())) - np.repeat(np.cumsum(sizes) - sizes, sizes) + lo[row]


def _count_pair_window(d: "_Direction"):
    """The outcomes ``(T, N_A)`` of a count pair's window: ``T`` on its binomial's e^-32 window
    and ``N_A`` within 9 standard deviations (and 2) of its mean given ``T`` (``9^2 / 2 > 32``);
    returns ``T``, the rows' windows ``a_lo, a_hi`` and the number of outcomes."""
    n, (pa, pb, _) = d.n, d.pi
    lo, hi, _ = binomial_window(n, pa + pb, log_cut=-32.0)
    T = np.arange(lo, hi + 1)
    sd = np.sqrt(np.maximum(T * d.theta * (1 - d.theta), 1.0))
    a_lo = np.maximum(0, np.floor(T * d.theta - 9 * sd - 2)).astype(np.int64)
    a_hi = np.minimum(T, np.ceil(T * d.theta + 9 * sd + 2)).astype(np.int64)
    return T, a_lo, a_hi, int((a_hi - a_lo + 1).sum())


def _count_pair_linear(d: "_Direction", v, t, a):
    """``sum_y v(y) h_y / pi_y`` at the outcomes: ``P_b = Mult_n(h; pi) / n`` times it
    (:class:`_Direction`)."""
    n, (pa, pb, pc) = d.n, d.pi
    return v[0] * a / pa + v[1] * (t - a) / pb + (v[2] * (n - t) / pc if pc > 0 else 0.0)


#: loss cells of :func:`count_pair_loss_binned_pmfs` at most (coarser than the grid only where
#: the window's losses span more than 2^20 grid steps)
_LOSS_CELLS = 1 << 20
#: outcomes per Boost evaluation in :func:`binomial_pmf_rows` (the others by the recurrence)
_PMF_CHUNK = 32
#: a chunk whose anchor is below this, and recurrence values below it, are Boost's: the pmf
#: is unimodal, so between an anchor and a value both above it no step met a subnormal number
_PMF_RECURRENCE_FLOOR = 1e-250


def binomial_pmf_rows(t: np.ndarray, lo: np.ndarray, hi: np.ndarray, p: float
                      ) -> tuple[np.ndarray, float]:
    """``P(Bin(t[r], p) = k)`` for ``k`` in ``[lo[r], hi[r]]`` (``0 <= lo <= hi <= t``),
    flattened row by row as :func:`ragged_windows`, and a bound on each entry's relative error
    to the pmf of ``Bin(t[r], p)`` at the float ``p``.

    The pmf (:func:`binomial_pmf`, relative error :func:`binomial_pmf_error` assumed) at every
    ``_PMF_CHUNK``-th point of a row, the points between by the recurrence ``b(k) = b(k-1) (t -
    k + 1) / k * p / (1 - p)``: each step adds at most 5 roundings (the division, ``p / (1 -
    p)`` computed once with 3, the two products), so an entry is within Boost's error ``+ 5
    (_PMF_CHUNK - 1) u`` to first order; ``6 _PMF_CHUNK u`` covers the second-order terms.
    Several times faster than the pmf at every point.  Below ``_PMF_RECURRENCE_FLOOR`` (where the steps
    could have met subnormal numbers) every point is :func:`binomial_pmf`'s.  Checked against mpmath in the
    tests."""
    size = hi - lo + 1
    padded = -(-size // _PMF_CHUNK) * _PMF_CHUNK
    row, k = ragged_windows(lo, lo + padded - 1)
    tk = t[row].astype(float)
    k = k.astype(float).reshape(-1, _PMF_CHUNK)
    tk = tk.reshape(-1, _PMF_CHUNK)
    steps = np.empty_like(k)
    steps[:, 0] = binomial_pmf(k[:, 0], tk[:, 0], p)
    with np.errstate(invalid="ignore", divide="ignore", under="ignore"):
        steps[:, 1:] = np.maximum(tk[:, 1:] - k[:, 1:] + 1, 0.0) / k[:, 1:] * (p / (1 - p))
        values = np.cumprod(steps, axis=1)
    low_anchor = np.repeat(~(steps[:, 0] >= _PMF_RECURRENCE_FLOOR), _PMF_CHUNK)
    keep = (np.arange(padded.sum()) - np.repeat(np.cumsum(padded) - padded, padded)
            < np.repeat(size, padded))
    values, k, tk = values.ravel()[keep], k.ravel()[keep], tk.ravel()[keep]
    tails = low_anchor[keep] | ~(values >= _PMF_RECURRENCE_FLOOR)
    if np.any(tails):
        values[tails] = binomial_pmf(k[tails], tk[tails], p)
    return values, binomial_pmf_error(int(np.max(t, initial=0))) + 6 * _PMF_CHUNK * _U


def parameter_drift(binomials) -> float:
    """A bound on ``|log(Bin(t, p')(k) / Bin(t, p)(k))|`` summed over ``binomials``, triples
    ``(t, p, r)`` with the float ``p'`` within relative ``r`` of the exact ``p`` (our
    derivation): the ratio is ``(p'/p)^k ((1 - p')/(1 - p))^(t - k)``, ``1 - p'`` is within
    relative ``r p / (1 - p)`` of ``1 - p``, and ``|log(1 + x)| <= |x| / (1 - |x|)``, so each
    term is at most ``t w / (1 - w)`` with ``w = r max(1, p / (1 - p))`` (0 for ``p`` at 0 or
    1, where the pmf does not depend on ``p``'s rounding).  A binomial pmf computed at the float
    is within ``expm1`` of it of the exact one."""
    drift = 0.0
    for trials, p, r in binomials:
        if 0 < p < 1:
            worst = r * max(1.0, p / (1 - p))
            drift += trials * worst / (1 - min(worst, 0.5))
    return drift


def count_pair_loss_binned_pmfs(pair: CountPair, h: float, max_support: int = 80_000_000,
                                block: int = 1 << 18, rounding: float = 16 * _U):
    """The pmfs of a count pair on the outcomes ``(T, N_A)`` of a window (e^-32 on each
    coordinate, :func:`_count_pair_window`) merged by privacy loss (cells ``[k w, (k + 1) w)``
    of ``log(P0/P1)`` with ``w = max(h, range / 2^20)`` for the range of the window's finite
    losses, outcomes beyond it in the end cells, one cell each for the outcomes of loss +-inf),
    or None if the window has more than ``max_support`` outcomes or the probabilities'
    rounding could move its masses by more than 1e-3 (below).  Merging outcomes is a
    post-processing, so the merged pair is dominated by the count pair and its lower bounds
    stay certified, and it needs memory for the cells, not the window: at 10^6 users the
    windows of the families' pairs have 2e6 to 6e7 outcomes (a few seconds).  The loss of an
    outcome does not depend on its multinomial mass, only on the two linear factors
    (:class:`_Direction`), so a rounding error in it only moves the outcome to a neighbouring
    cell, which is another post-processing.

    Returns ``(p0, p1, relative, outside)``.  Every entry is within ``relative`` of the exact
    mass of its outcomes, for the exact probabilities of which the pair's floats are within
    relative ``rounding`` (assumed; the laws here are a few roundings each): the pmf of
    ``T`` and :func:`binomial_pmf_rows` for ``N_A`` given ``T``, 8 roundings for the products
    and the linear factors, and the summation of non-negative terms, in blocks of at most
    ``block`` outcomes (``numpy.bincount`` adds in order) and then over the blocks, at most
    ``(m - 1) u / (1 - (m - 1) u)`` for ``m`` terms (Higham, *Accuracy and Stability of
    Numerical Algorithms*, 2nd ed. 2002, Sec. 4.2).  The probabilities' own error
    (:func:`parameter_drift`), for ``T`` (``p = pi_A + pi_B``, ``r = 2 rounding + u``) and
    ``N_A`` (``p = theta``, ``r = 4 rounding + 2 u``, ``t`` at most the window's largest ``T``); each
    linear factor is a sum of non-negative terms ``v_y h_y / pi_y``, within ``2 rounding``.
    ``outside`` bounds each law's exact mass outside the window (our derivation): ``P_b(h) =
    Mult_n(h; pi) lin_b(h) / n`` with ``lin_b(h) / n = sum_y v_b(y) (h_y / n) / pi_y <= max_y
    v_b(y) / pi_y``, times the multinomial's mass outside (``T``'s binomial tails plus, row by
    row, ``N_A``'s, by :func:`binomial_sf` and :func:`binomial_cdf`), plus the larger ``v_C``
    when ``pi_C = 0`` (those outcomes are left out), rounded up.
    """
    h = float(h)
    if not (h > 0 and math.isfinite(h)):
        raise ParameterError("h", h, "a positive finite grid step")
    d = pair.forward
    n, (pa, pb, _) = d.n, d.pi
    T, a_lo, a_hi, size = _count_pair_window(d)
    if size > max_support:
        return None
    drift = parameter_drift(((n, pa + pb, 2 * rounding + _U),
                             (int(T[-1]), d.theta, 4 * rounding + 2 * _U)))
    if drift > 1e-3:   # probabilities within rounding of 1: not worth certifying
        return None
    w_row = binomial_pmf(T, n, pa + pb) / n
    tails = binomial_cdf(a_lo - 1, T, d.theta) + binomial_sf(a_hi, T, d.theta)
    outside_mult = binomial_window(n, pa + pb, log_cut=-32.0)[2] + float(np.dot(w_row * n, tails))
    ratio = max(v[c] / d.pi[c] for v in (d.v0, d.v1) for c in range(3) if d.pi[c] > 0)
    left_out = max(d.v0[2], d.v1[2]) if d.pi[2] <= 0 else 0.0
    outside = (ratio * outside_mult + left_out) * (1 + 1e-6) + 1e-300
    ends = np.cumsum(a_hi - a_lo + 1)
    cuts = np.searchsorted(ends, np.arange(block, size, block), side="left")
    starts = np.unique(np.concatenate([[0], cuts, [len(T)]]))
    # the window's finite losses: log(lin0 / lin1) is monotone in N_A on each row (a ratio of
    # two linear functions), so the rows' ends hold its extremes; cells of width
    # max(h, range / 2^20) (at most 2^20 + 2 of them), outcomes beyond clipped to the end cells
    ends_t, ends_a = np.concatenate([T, T]), np.concatenate([a_lo, a_hi])
    e0, e1 = (_count_pair_linear(d, v, ends_t, ends_a) for v in (d.v0, d.v1))
    finite = (e0 > 0) & (e1 > 0)
    ends_loss = np.log(e0[finite]) - np.log(e1[finite]) if np.any(finite) else np.zeros(1)
    loss_lo, loss_hi = float(ends_loss.min()), float(ends_loss.max())
    width = max(h, (loss_hi - loss_lo) / _LOSS_CELLS)
    first, last = math.floor(loss_lo / width), math.floor(loss_hi / width)
    acc0, acc1 = np.zeros(last - first + 1), np.zeros(last - first + 1)
    inf0 = minus1 = 0.0
    largest, blocks, pmf_error = 0, 0, 0.0
    for r0, r1 in zip(starts[:-1], starts[1:]):
        row, a = ragged_windows(a_lo[r0:r1], a_hi[r0:r1])
        t = T[r0:r1][row]
        pmf, pmf_error = binomial_pmf_rows(T[r0:r1], a_lo[r0:r1], a_hi[r0:r1], d.theta)
        base = w_row[r0:r1][row] * pmf
        lin0, lin1 = (_count_pair_linear(d, v, t, a) for v in (d.v0, d.v1))
        p0, p1 = base * lin0, base * lin1
        largest, blocks = max(largest, len(a)), blocks + 1
        both = (p0 > 0) & (p1 > 0)
        inf0 += float(p0[p1 <= 0].sum())
        minus1 += float(p1[p0 <= 0].sum())
        if not np.any(both):
            continue
        k = np.floor((np.log(lin0[both]) - np.log(lin1[both])) / width)
        index = (np.clip(k, first, last) - first).astype(np.int64)
        acc0 += np.bincount(index, weights=p0[both], minlength=len(acc0))
        acc1 += np.bincount(index, weights=p1[both], minlength=len(acc1))
    keep = (acc0 > 0) | (acc1 > 0)
    p0 = np.concatenate([acc0[keep], [inf0, 0.0]])
    p1 = np.concatenate([acc1[keep], [0.0, minus1]])
    m = largest + blocks + 2
    summation = (m - 1) * _U / (1 - (m - 1) * _U)
    entries = binomial_pmf_error(n) + pmf_error + 8 * _U + 2 * rounding
    entries += math.expm1(drift * (1 + 1e-9))
    return p0, p1, ((1 + entries) * (1 + summation) - 1) * (1 + 1e-6), outside
