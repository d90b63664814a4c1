"""The reduction of the FMT23 errata (Lemma 7.3): a randomizer-specific pair that is valid.

Source: Feldman, McMillan, Talwar, "Stronger Privacy Amplification by Shuffling for Renyi and
Approximate Differential Privacy" (SODA 2023, arXiv:2208.04591), errata, Sec. 7.4, Lemma 7.3.
Statement as we read it (its displayed equations were not readable through our tools; the prose
around them was, and what follows is our reconstruction, checked against it and re-proved
below).  Let every randomizer decompose, for the differing user's inputs ``x0, x1`` and every
other input ``x``, as ::

    R(x0) = e^eps0 p Q0 + p Q1 + (1 - (e^eps0 + 1) p) W
    R(x1) = p Q0 + e^eps0 p Q1 + (1 - (e^eps0 + 1) p) W
    R(x)  = p Q0 + p Q1 + q W + (1 - 2p - q) L_x                           (errata eq. (9))

with common distributions ``Q0, Q1, W``.  Then the shuffled output on X0 / X1 is a
post-processing of the counts ``(n0, n1, n2)`` where user 1 reports 0, 1, 2 w.p.
``(e^eps0 p, p, 1 - (e^eps0 + 1) p)`` (0 and 1 swapped on X1) and each of the ``n - 1`` others
reports 0, 1, 2, 3 w.p. ``(p, p, q, 1 - 2p - q)``; only the users reporting 3 need identities,
and user 1 never reports 3 -- which is what FMT23's withdrawn Lemma 3.5 got wrong (there user
1's "2" had to be told apart from the others').  Wang et al.'s variation-ratio pair (VLDB 2024,
arXiv:2304.05007) with ``alpha = p`` is this pair with categories 2 and 3 merged into one blank
(a post-processing of it, so never above it -- our observation); keeping them apart is what
makes the reduction valid, at a cost the benchmark measures (about 0.1 % at n = 1e6).  The
errata also allows ``p <= p*`` and
``q >= q* + 2 (p* - p)`` against a reference ``(p*, q*)``; we only use exact ``(p, q)``, the
same for every pair of inputs.

Our re-proof of the post-processing (the shuffled, non-adaptive case we use): given the counts,
the set of 3-reporters is a uniformly random subset of the others of size ``n - n0 - n1 - n2``
under both X0 and X1 (the others are iid, user 1 is never among them), so ``f`` draws that
subset, a sample of ``L_x`` for each of its users, ``n0`` samples of Q0, ``n1`` of Q1, ``n2`` of
W, and shuffles: the result has the law of the shuffled reports on X_b for b = 0, 1.

Our derivation of a decomposition for any eps0-DP randomizer whose total variation between two
distinct inputs is ``beta`` for *every* pair: with ``P = R(x0)``, ``Q = R(x1)``, ``E = e^eps0``,
``Q0 = (P - Q)_+/beta``, ``Q1 = (Q - P)_+/beta``, ``p = beta/(E - 1)``; then
``P - E p Q0 - p Q1 = (E Q - P)/(E - 1) >= 0`` on ``P > Q``, ``(E P - Q)/(E - 1) >= 0`` on
``P < Q`` and ``P`` elsewhere, which defines ``W >= 0``; and ``R(x) >= p Q0 + p Q1 + q W`` with
``q = (1 - (E + 1) p)/E``, because the right side is ``P/E`` on ``P > Q``, ``Q/E`` on ``P < Q``
and ``P/E`` elsewhere, all ``<= R(x)`` by eps0-DP.  (The errata states the same lower bound on
q.)  A family may allow a larger q (k-RR: ``q = (k-2)/(E+k-1)``, where this pair is exactly the
privacy blanket of Balle, Bell, Gascon, Nissim, CRYPTO 2019, arXiv:1903.02837, computed by
:class:`dpplugins.amplification.shuffle_model.KRRBlanket`).

Computation (our construction, the same as :class:`~dpplugins.amplification.shuffle_model.
KRRBlanket`): reveal the number of 3-reporters; the remaining ``M`` users (user 1 and the
``M - 1 ~ Bin(n - 1, 2p + q)`` others) form a three-category count pair whose divergence
``delta_M`` does not increase with M (one more iid report is a post-processing), so blocks of M
are bounded by their smallest M; each conditional pair is a certified
:class:`~dpplugins.amplification.shuffle_model.CountPair` sum, M outside an e^-75 window is
charged in full.

Example::

    >>> import math
    >>> e = math.exp(2.0)
    >>> pair = ErrataPair(2.0, 10_000, 1 / (e + 3), 2 / (e + 3))   # 4-RR
    >>> 0 < pair.epsilon(1e-6) < 2.0
    True
"""

from __future__ import annotations

import functools
import math

from dpplugins.amplification.shuffle import check_local_epsilon
from dpplugins.amplification.count_pair import (below_by_margin, eps_rounding_margin,
                                                newton_smallest_epsilon, upper_at_zero)
from dpplugins.amplification.shuffle_model import Blanket
from dpplugins.errors import ParameterError, check_count, check_nonnegative, check_open_unit

__all__ = ["ErrataPair", "errata_pair", "decomposition_for_total_variation"]


def decomposition_for_total_variation(eps0: float, beta: float) -> tuple[float, float]:
    """``(p, q)`` of the errata's eq. (9) for an eps0-DP randomizer whose total variation between
    any two distinct inputs equals ``beta``: ``p = beta/(e^eps0 - 1)``,
    ``q = (1 - (e^eps0 + 1) p)/e^eps0`` (our derivation, module docstring; FMT23 errata,
    arXiv:2208.04591, Sec. 7.4).

    Example::

        >>> p, q = decomposition_for_total_variation(1.0, (math.e - 1) / (math.e + 1))
        >>> round(p * (math.e + 1), 12), q
        (1.0, 0.0)
    """
    eps0 = check_local_epsilon(eps0, 300, zero=False)
    e = math.exp(eps0)
    top = (e - 1) / (e + 1)
    beta = check_nonnegative("beta", beta)
    if beta > top * (1 + 1e-12):
        raise ParameterError("beta", beta, f"in [0, (e^eps0-1)/(e^eps0+1)] = [0, {top:.6g}]",
                             hint="an eps0-DP randomizer cannot have a larger total variation")
    p = min(beta / (e - 1), 1 / (e + 1))
    q = (1 - (e + 1) * p) / e
    # rounding never in our favour: the errata's Lemma 7.3 allows a reference p* >= p with
    # q* <= q - 2 (p* - p); we round p up and q down accordingly
    p_star = min(p * (1 + 1e-12), 1 / (e + 1))
    return p_star, max(0.0, q - 2 * (p_star - p) - 4e-16)


class ErrataPair(Blanket):
    """Certified upper bound on the divergence of the errata's Lemma 7.3 pair for parameters
    ``(eps0, p, q)`` and n users (module docstring).  ``delta(eps)`` and ``epsilon(delta)`` are
    upper bounds (every truncated and floating-point term charged).  The computation is the
    blanket's (:class:`~dpplugins.amplification.shuffle_model.Blanket`) with ``M - 1 ~
    Bin(n - 1, 2p + q)`` and the categories 0, 1 and 2 of the module docstring; blocks of M
    widen until there are at most ``max_blocks``.  Both are evaluated
    :data:`~dpplugins.amplification.count_pair.EPS_ROUNDING_MARGIN` below / above epsilon, which
    covers the rounding of ``e^eps0 p`` in the laws (without it, eps0 = 1e-12 and epsilon =
    0.99e-12 gave a delta 8e-4 below the pair's exact 1.1111e-15), and at epsilon 0 delta is
    widened by :data:`~dpplugins.amplification.count_pair.LAW_ROUNDING_AT_ZERO`
    (:func:`~dpplugins.amplification.count_pair.upper_at_zero`)."""

    def __init__(self, eps0: float, n: int, p: float, q: float, *, eta: float = 2.5e-3,
                 max_blocks: int = 4000) -> None:
        eps0 = check_local_epsilon(eps0, 300)
        n = check_count("n", n, minimum=1)
        e = math.exp(eps0)
        p = check_nonnegative("p", p)
        if p <= 0 or p > 1 / (e + 1) * (1 + 1e-12):
            raise ParameterError("p", p, f"in (0, 1/(e^eps0+1)] = (0, {1 / (e + 1):.6g}]")
        q = check_nonnegative("q", q)
        if 2 * p + q > 1 + 1e-12:
            raise ParameterError("q", q, f"in [0, 1 - 2p] = [0, {1 - 2 * p:.6g}]")
        self.p, self.q = p, min(q, 1 - 2 * p)
        self.keep = keep = min(1.0, 2 * p + self.q)
        blank = max(0.0, 1 - (e + 1) * p)
        laws = ((p / keep, p / keep, self.q / keep), (min(e * p, 1.0), p, blank),
                (p, min(e * p, 1.0), blank))
        super().__init__(eps0, n, keep, laws, eta=eta)
        while len(self.blocks) > max_blocks:
            eta *= 2
            super().__init__(eps0, n, keep, laws, eta=eta)

    def delta(self, epsilon: float) -> float:
        """Certified upper bound on delta(epsilon), both directions (the pair is symmetric)."""
        epsilon = check_nonnegative("epsilon", epsilon)
        value = self.evaluate(float(below_by_margin(epsilon)))[0].upper
        return upper_at_zero(value, epsilon, self.eps0)

    def epsilon(self, delta: float) -> float:
        """Certified upper bound on the smallest epsilon with delta(epsilon) <= delta (at most
        eps0, where delta(eps0) = 0)."""
        delta = check_open_unit("delta", delta)
        if self.eps0 == 0:
            return 0.0

        def upper(e):
            b, s = self.evaluate(e)
            return b.upper, s
        e = math.exp(self.eps0)
        guess = (e - 1) * self.p * math.sqrt(2 * math.log(1 / delta) / (self.n * self.keep + 1))
        found = newton_smallest_epsilon(upper, delta, self.eps0, min(max(guess, 1e-9),
                                                                      0.5 * self.eps0))
        return min(eps_rounding_margin(found), self.eps0)


@functools.lru_cache(maxsize=128)
def errata_pair(eps0: float, n: int, p: float, q: float) -> ErrataPair:
    """Memoised :class:`ErrataPair`."""
    return ErrataPair(eps0, n, p, q)
