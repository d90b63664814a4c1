"""Exact shuffled k-ary randomized response on the dataset where every other user holds a third
value: certified *lower* bounds on its delta and epsilon with nothing merged.

k-RR (Warner 1965; Kairouz, Oh, Viswanath, ICML 2014, arXiv:1407.1338, Sec. 2) reports the true
value with probability ``E/z`` and each other value with ``1/z`` (``E = e^eps0``, ``z = E + k -
1``).  n users, the server sees the histogram of the shuffled reports.  The differing user holds
a on X0 and b on X1; every other user holds a third value c.  Write ``h`` for the histogram and
``pi`` for the other users' law: ``1/z`` on a, b and on each of the ``k - 3`` remaining values,
``E/z`` on c.

**The four counts are sufficient (our derivation).**  ``P_x(h) = sum_y v_x(y) Mult_{n-1}(h - e_y;
pi) = Mult_n(h; pi) / n * sum_y v_x(y) h_y / pi_y`` (as ``Mult_{n-1}(h - e_y; pi) = Mult_n(h;
pi) h_y / (n pi_y)``), and ``v_0(y) / pi(y)`` is ``E`` on a, 1 on b, ``1/E`` on c and 1 on every
remaining value (``v_1``: a and b swapped).  So ``P_0(h) / P_1(h) = L_0 / L_1`` with ``L_0 = E
N_a + N_b + N_c / E + N_r`` and ``L_1 = N_a + E N_b + N_c / E + N_r`` (``N_r``: the reports on
the remaining values, pooled), the law of ``h`` given ``(N_a, N_b, N_c, N_r)`` is the same on
X0 and X1, and the divergence of the two laws of the four counts is that of the histograms.
:func:`dpplugins.amplification.count_pair.krr_lower_pairs`' ``"others_at_c"`` pair pools c with
the remaining values (three categories, Wang et al.'s k-RR pair): a post-processing, exact only
for k = 3.  At large eps0 and few users the pooled counts lose the most: 64-RR, eps0 = 8, n =
1000, delta = 1e-6 certifies 6.4702 pooled and 6.8552 here, against the privacy blanket's upper
bound 6.8736.

**Computed** on a window of ``(N_r, T = N_a + N_b, N_a)``: ``N_r ~ Bin(n, (k-3)/z)``, ``T |
N_r ~ Bin(n - N_r, 2/(E+2))``, ``N_a | T ~ Bin(T, 1/2)`` (the multinomial as three binomials,
the library's binomial pmf).  Outcomes outside the window are left out, and each term of the hockey-stick sum is
taken with its masses moved by their error bound in the direction that lowers it, so the sum is
a certified lower bound on delta(eps) of the exact pair; by the symmetry a <-> b both directions
are equal.  Errors: the binomial pmf within
:func:`~dpplugins.amplification.count_pair.binomial_pmf_error` (assumed, as for its tails
everywhere in the shuffle modules), the products and ``L_x`` a few roundings each, and the parameters' rounding:
``(k-3)/z`` and ``2/(E+2)`` within ``16 u`` of the exact ones (assumed: each is a handful of
operations), which moves a binomial pmf of ``t`` trials by at most ``exp(t r max(1, p/(1-p)) /
(1 - r'))`` (:func:`dpplugins.amplification.count_pair.parameter_drift`); above a drift of 1e-3
(k near 2^53) the pair is left out.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from dpplugins.amplification.count_pair import (UNIT_ROUNDOFF, binomial_pmf, binomial_pmf_error,
                                                binomial_window, largest_violated,
                                                parameter_drift, ragged_windows)

__all__ = ["KRRThirdValuePair", "third_value_pair"]

_U = UNIT_ROUNDOFF
#: outcomes of the window at most (a few seconds); above it the pooled pair is the lower bound
MAX_OUTCOMES = 4_000_000
#: the log-mass each coordinate's window leaves out (only lowers the lower bounds)
_LOG_CUT = -40.0
#: relative rounding of the parameters (k-3)/z and 2/(E+2) (assumed)
_PARAMETER_ROUNDING = 16 * _U


class KRRThirdValuePair:
    """The exact pair of shuffled k-RR (k >= 4) with every other user holding a third value,
    on a window of its four counts (module docstring).  Use :func:`third_value_pair`, which
    returns None when the window is too large (many users at small eps0, where the pooled
    three-category pair is already within a fraction of a percent of the upper bounds)."""

    def __init__(self, eps0: float, n: int, k: int) -> None:
        self.eps0, self.n, self.k = float(eps0), int(n), int(k)
        e = math.exp(self.eps0)
        z = e + k - 1
        p_rest, p_pair = (k - 3) / z, 2 / (e + 2)
        lo_r, hi_r, _ = binomial_window(n, p_rest, log_cut=_LOG_CUT)
        r = np.arange(lo_r, hi_r + 1)
        # T given N_r: one window over the rows, from the extreme rows' windows
        t_lo = min(binomial_window(n - int(x), p_pair, log_cut=_LOG_CUT)[0] for x in (lo_r, hi_r))
        t_hi = max(binomial_window(n - int(x), p_pair, log_cut=_LOG_CUT)[1] for x in (lo_r, hi_r))
        t = np.arange(t_lo, t_hi + 1)
        self.p0 = self.p1 = None
        self.size = len(r) * len(t)        # rows, before any array of them is built
        if self.size > MAX_OUTCOMES:       # (at 1e8 users a grid of 1e10 rows: 16 GiB)
            return
        drift = parameter_drift(((n, p_rest, _PARAMETER_ROUNDING),
                                 (n, p_pair, _PARAMETER_ROUNDING)))
        if drift > 1e-3:   # (k near 2^53: p_rest within rounding of 1) not worth certifying
            return
        rows_r, rows_t = np.repeat(r, len(t)), np.tile(t, len(r))
        fits = rows_t <= n - rows_r
        rows_r, rows_t = rows_r[fits], rows_t[fits]
        sd = np.sqrt(np.maximum(rows_t / 4.0, 1.0))
        a_lo = np.maximum(0, np.floor(rows_t / 2 - 9 * sd - 2)).astype(np.int64)
        a_hi = np.minimum(rows_t, np.ceil(rows_t / 2 + 9 * sd + 2)).astype(np.int64)
        self.size = int((a_hi - a_lo + 1).sum())
        if self.size > MAX_OUTCOMES:
            return
        row, a = ragged_windows(a_lo, a_hi)
        nr, nt = rows_r[row], rows_t[row]
        mass = (binomial_pmf(rows_r, n, p_rest) * binomial_pmf(rows_t, n - rows_r, p_pair))[row]
        mass = mass * binomial_pmf(a, nt, 0.5) / n
        b, c = nt - a, n - nt - nr
        common = c / e + nr
        self.p0 = mass * (e * a + b + common)
        self.p1 = mass * (a + e * b + common)
        # 3 binomial pmfs of at most n trials, e within 1 u, then about 12 roundings in the
        # products and L_x
        self.relative = (3 * binomial_pmf_error(n) + 16 * _U + math.expm1(drift * (1 + 1e-9))) \
            * (1 + 1e-6)

    @property
    def available(self) -> bool:
        return self.p0 is not None

    def delta_lower(self, epsilon: float) -> float:
        """Certified lower bound on delta(epsilon) of the exact pair (either direction)."""
        x = math.exp(min(float(epsilon), 700.0))
        # exact masses P >= p / (1 + rel) >= p (1 - rel) and P <= p / (1 - rel) <= p (1 + 2
        # rel); 8 u more on each side covers the term's own roundings (three, each within u of
        # the larger mass, plus x's), so every term is at most the exact one
        rel = self.relative + 8 * _U
        terms = self.p0 * (1 - rel) - x * (self.p1 * (1 + 2 * rel))
        # the sum of the positive terms, rounded down: within (m - 1) u of its exact value
        # (non-negative terms; Higham 2002, Sec. 4.2)
        positive = terms[terms > 0]
        total = float(positive.sum())
        return max(0.0, total * (1 - (len(positive) + 2) * _U) - 1e-300)

    def epsilon_lower(self, delta: float) -> float:
        """Certified lower bound on epsilon(delta): the largest eps in [0, eps0] where
        :meth:`delta_lower` is above ``delta`` (0 if none)."""
        return largest_violated(self.delta_lower, float(delta), self.eps0)


@functools.lru_cache(maxsize=4)   # (each holds up to 64 MB of masses)
def third_value_pair(eps0: float, n: int, k: int) -> KRRThirdValuePair | None:
    """The exact third-value pair of ``n`` users running k-RR at ``eps0``, or None for ``k <
    4`` (the pooled pair is exact there), ``n < 2`` or a window of more than
    :data:`MAX_OUTCOMES` outcomes.

    Example::

        >>> pair = third_value_pair(8.0, 1000, 64)
        >>> 6.85 < pair.epsilon_lower(1e-6) < 6.8736    # the blanket's upper bound: 6.8736
        True
    """
    if k < 4 or n < 2 or not eps0 > 0:
        return None
    pair = KRRThirdValuePair(eps0, n, k)
    return pair if pair.available else None
