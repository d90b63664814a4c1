"""General composition theorems for (epsilon, delta)-DP mechanisms, as pure functions.

* :func:`optimal_composition_delta` / :func:`optimal_composition_epsilon`: the exact (optimal)
  k-fold composition of ``(eps, delta)``-DP mechanisms (Kairouz, Oh, Viswanath 2015,
  arXiv:1311.0776, Thm 3.3; Murtagh & Vadhan 2016, arXiv:1507.03113).
* :func:`advanced_composition_epsilon`: advanced composition (Dwork, Rothblum, Vadhan 2010,
  Thm III.3).
* :func:`heterogeneous_composition_epsilon`: Lemma A.2 of Balle, Kairouz, McMahan, Thakkar,
  Thakurta 2020 (arXiv:2007.06605) for mechanisms whose epsilons shrink along the sequence.

Every value is rounded up (relative ``1e-12``), so floating-point rounding never moves a bound in
the user's favour.  These theorems need only an (eps, delta) statement per mechanism; where a
privacy profile or a PLD is known, composing PLDs (:mod:`dpplugins.pld`) is tighter.

Example::

    >>> from dpplugins.composition import advanced_composition_epsilon, optimal_composition_epsilon
    >>> optimal_composition_epsilon(1e-5, 0.1, 0.0, 100) < advanced_composition_epsilon(0.1, 100, 1e-5)
    True
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from scipy.special import gammaln, logsumexp

from dpplugins.errors import (ParameterError, check_count, check_nonnegative, check_open_unit,
                              check_positive)
from dpplugins.numerics import smallest_epsilon

__all__ = ["heterogeneous_composition_epsilon", "optimal_composition_delta",
           "optimal_composition_epsilon", "advanced_composition_epsilon"]

#: relative safety margin added to every epsilon and delta reported
_UP = 1.0 + 1e-12
#: unit roundoff of double precision
_U_ROUND = float(np.finfo(float).eps) / 2


def _expm1(x: float) -> float:
    return math.expm1(x) if x < 709.0 else math.inf


def heterogeneous_composition_epsilon(a: float, b: float, k: int, delta: float) -> float:
    """Lemma A.2 (Balle, Kairouz, McMahan, Thakkar, Thakurta 2020, arXiv:2007.06605): if the i-th of ``k`` adaptive mechanisms is
    ``log(1 + a / (k - b (i - 1)))``-DP (``a > 0``, ``b`` in [0, 1)), their composition is
    ``(eps, delta)``-DP with ``eps = a^2 / (2k(1-b)) + sqrt(2 a^2 log(1/delta) / (k(1-b)))``.

    (The paper states ``b`` in (0, 1); ``b = 0`` -- k identical ``log(1 + a/k)``-DP mechanisms --
    follows from the same proof.)

    Example::

        >>> heterogeneous_composition_epsilon(2.0, 0.5, 4, math.exp(-1))  # doctest: +ELLIPSIS
        3.0000...
    """
    a = check_positive("a", a)
    b = check_nonnegative("b", b)
    if b >= 1:
        raise ParameterError("b", b, "in [0, 1)")
    k = _check_steps(k)
    delta = check_open_unit("delta", delta)
    scale = k * (1.0 - b)
    return (a * a / (2.0 * scale) + math.sqrt(2.0 * a * a * math.log(1.0 / delta) / scale)) * _UP


def optimal_composition_delta(epsilon: float, eps_step: float, delta_step: float, k: int) -> float:
    """Exact ``delta(epsilon)`` of the k-fold adaptive composition of ``(eps_step, delta_step)``-DP
    mechanisms -- the optimal composition theorem (Kairouz, Oh, Viswanath 2015, arXiv:1311.0776,
    Thm 3.3; its characterisation for general epsilon, Murtagh & Vadhan 2016, arXiv:1507.03113):

    ``1 - (1-d)^k + (1-d)^k sum_l C(k,l) (e^((k-l)e) - e^(epsilon + l e))_+ / (1 + e^e)^k``

    with ``e = eps_step``, ``d = delta_step``; it is the hockey-stick divergence of the k-fold
    product of the four-point dominating pair of an ``(e, d)``-DP mechanism.

    Example::

        >>> round(optimal_composition_delta(0.0, 1.0, 0.0, 1), 6)  # TV of RR(1): (e-1)/(e+1)
        0.462117
    """
    epsilon = check_nonnegative("epsilon", epsilon)
    e, d, k = _check_step_guarantee(eps_step, delta_step, k)
    return _kov_delta(epsilon, e, d, k)


def _check_step_guarantee(eps_step, delta_step, k) -> tuple[float, float, int]:
    """Validate the per-step (eps, delta) guarantee and the number of steps."""
    e = check_nonnegative("eps_step", eps_step)
    d = check_nonnegative("delta_step", delta_step)
    if d >= 1:
        raise ParameterError("delta_step", d, "in [0, 1)")
    return e, d, _check_steps(k)


def _check_steps(k) -> int:
    """The number of mechanisms composed: an integer in [1, 2^53] (it is used as a float)."""
    k = check_count("k", k, minimum=1)
    if k > MAX_STEPS:
        raise ParameterError("k", k, "an integer in [1, 2^53]")
    return k


#: the most binomial terms one evaluation of :func:`_kov_delta` sums (8 bytes each, a few arrays)
MAX_TERMS = 1 << 21
#: most steps the composition theorems accept (``k`` is used as a float)
MAX_STEPS = 1 << 53


def _kl_bernoulli_lower(x: float, p: float) -> float:
    """A lower bound on ``KL(Bern(x) || Bern(p))``: the larger of Pinsker's ``2 (x - p)^2``
    (exact in floating point up to a relative ``4u``) and the divergence itself, computed with
    ``log1p`` and lowered by a relative ``1e-6`` (its rounding is far below that)."""
    t = x - p
    pinsker = 2.0 * t * t * (1 - 4 * _U_ROUND)
    if x <= 0.0:
        direct = -math.log1p(-p)
    elif x >= 1.0:
        direct = -math.log(p)
    else:
        direct = x * math.log1p(t / p) + (1 - x) * math.log1p(-t / (1 - p))
    return max(pinsker, direct * (1 - 1e-6))


def _binomial_tail_above(k: int, p: float, b: float) -> float:
    """Chernoff's bound ``P(Bin(k, p) >= b) <= exp(-k KL(b/k || p))`` for ``b > k p`` (Hoeffding
    1963, Thm 1), rounded up; 1 otherwise."""
    if not b > k * p:
        return 1.0
    if p <= 0.0:      # Bin(k, 0) is 0: nothing at b > 0 (t / p divided by zero at eps_step = 800)
        return 0.0
    return min(1.0, math.exp(-k * _kl_bernoulli_lower(min(b / k, 1.0), p)) * (1 + 1e-9))


def _kov_delta(epsilon: float, e: float, d: float, k: int) -> float:
    """The sum of :func:`optimal_composition_delta` in logarithms, rounded up.

    Each term ``C(k,l) (e^((k-l)e) - e^(epsilon + l e)) / (1 + e^e)^k`` is taken as
    ``exp(log C(k,l) - l e - k log1p(e^-e) + log(1 - e^-margin))`` (``(k-l) e - k log(1 + e^e)
    = -l e - k log1p(e^-e)`` for ``e >= 0``: no difference of two large numbers, and no
    overflow for a huge ``e``).  Rounding (our derivation): each logarithm is off by a few
    ulps of the magnitudes of its parts, at most ``16 u S`` with ``S`` their sum, so each term
    is raised by ``exp(16 u S)``; the sum of at most ``k + 1`` positive terms is off by
    ``(k + 1) u`` relatively, and is raised by ``exp(2 (k + 1) u)``.  (The old fixed margin of
    1e-12 was exceeded: at k = 5000, e = 1.21, epsilon = 4776 the sum was 3.5e-12 below the
    40-digit value.)

    ``margin = (k - 2l) e - epsilon`` is itself rounded, by at most ``2u (|(k - 2l) e| +
    epsilon)``: it is raised by that much before the sign test and the logarithm, so a term
    whose true margin is a hair above 0 is kept (at epsilon = fl(3e) the last term was dropped
    and delta read 1e-300 where it is 1.2e-17).

    The terms are ``P(l) (1 - e^-margin)_+`` for ``l ~ Bin(k, 1/(1 + e^e))``; each is at most
    ``P(l)``, so only a window of at most :data:`MAX_TERMS` around the mean is summed (40
    standard deviations each side where that fits) and the mass outside it is added whole,
    bounded by Chernoff (:func:`_binomial_tail_above`): memory and time stay bounded for any
    ``k`` (k = 1e9 needed 8 GB; it now takes 0.3 s).  Past about 10^10 steps of small
    ``eps_step`` the window is narrower than 40 standard deviations and the mass outside it
    makes the bound loose (for such runs compose PLDs instead, :mod:`dpplugins.pld`); it stays
    an upper bound.

    ``1 - (1 - d)^k`` is ``-expm1(k log1p(-d))`` (``1 - exp(...)`` lost ``d`` below 1e-16 to
    cancellation and answered 1e-300 for one step of delta 1e-17), raised by ``8u``
    relatively, and ``(1 - d)^k`` is raised the same way."""
    tiny = math.exp(-e)
    p = tiny / (1.0 + tiny)      # 1 / (1 + e^e): P(one step takes its "l" side); 0 past e = 745
    mean, sd = k * p, math.sqrt(k * p * (1 - p))
    half = min(40.0 * sd + 40.0, MAX_TERMS / 2.0)
    lo = max(0, math.floor(mean - half))
    hi = min(k, math.ceil(mean + half), lo + MAX_TERMS - 1)
    l = np.arange(lo, hi + 1, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        reach = (k - 2 * l) * e
        margin = reach - epsilon + 2 * _U_ROUND * (np.abs(reach) + epsilon)
    keep = margin > 0
    outside = 0.0
    reach0 = k * e    # the margin is largest at l = 0: where it is not positive, no term is
    if lo > 0 and reach0 - epsilon + 2 * _U_ROUND * (reach0 + epsilon) > 0:
        # P(l < lo) = P(Bin(k, 1 - p) >= k - lo + 1)
        outside += _binomial_tail_above(k, 1.0 - p, k - lo + 1)
    if hi < k and keep[-1]:     # (the margin falls with l: above a dropped term all are 0)
        outside += _binomial_tail_above(k, p, hi + 1)
    pure = 0.0
    if np.any(keep):
        lk = l[keep]
        with np.errstate(over="ignore"):
            parts = (gammaln(k + 1) - gammaln(lk + 1) - gammaln(k - lk + 1),   # log C(k, l)
                     -lk * e, np.full(len(lk), -k * math.log1p(math.exp(-e))),
                     np.log(-np.expm1(-margin[keep])))
            log_terms = parts[0] + parts[1] + parts[2] + parts[3]
            magnitude = (2 * gammaln(k + 1) + np.abs(parts[1]) + np.abs(parts[2])
                         + np.abs(parts[3]))
        finite = np.isfinite(log_terms)        # -inf: a term below every float, exactly 0
        if np.any(finite):   # each term raised by its own rounding bound (which is large
            # for a huge k: inf is then capped at 1 below)
            with np.errstate(over="ignore"):
                pure = float(np.exp(logsumexp(log_terms[finite]
                                              + 16 * _U_ROUND * magnitude[finite])
                                    + 2 * (len(lk) + 1) * _U_ROUND))
    pure = min(1.0, pure + outside)
    lost, survive = _delta_step_parts(d, k)
    return min(1.0, (lost + survive * pure) * _UP + 1e-300)


def _delta_step_parts(d: float, k: int) -> tuple[float, float]:
    """``1 - (1 - d)^k`` and ``(1 - d)^k``, each rounded up (``-expm1`` and ``exp`` of
    ``k log1p(-d)``: a few ulps each, charged as 8u)."""
    if d <= 0:
        return 0.0, 1.0
    log_survive = k * math.log1p(-d)
    return (min(1.0, -math.expm1(log_survive) * (1 + 8 * _U_ROUND)),
            min(1.0, math.exp(log_survive) * (1 + 8 * _U_ROUND)))


def optimal_composition_epsilon(delta: float, eps_step: float, delta_step: float, k: int) -> float:
    """Smallest epsilon (up to relative 1e-10, rounded up) with
    :func:`optimal_composition_delta` ``<= delta``; ``inf`` if even ``k eps_step`` does not reach
    it (Kairouz, Oh, Viswanath 2015, arXiv:1311.0776, Thm 3.3).  The search is
    :func:`dpplugins.numerics.smallest_epsilon` (bisection on the rounded-up delta).

    Example::

        >>> optimal_composition_epsilon(1e-6, 0.0, 0.0, 10)
        0.0
    """
    delta = check_open_unit("delta", delta)
    e, d, k = _check_step_guarantee(eps_step, delta_step, k)
    if _kov_delta(0.0, e, d, k) <= delta:
        return 0.0
    # the smallest float >= k e (fl(k e) can be below it): at and above it every term of the
    # sum is 0 in exact arithmetic, and delta is the delta_step part 1 - (1 - d)^k alone
    hi = k * e
    if math.isfinite(hi) and Fraction(hi) < k * Fraction(e):
        hi = math.nextafter(hi, math.inf)
    if _kov_delta(hi, e, d, k) > delta:
        # (the rounded sum keeps a hair of the last term at hi; the exact value is the
        # delta_step part)
        return hi if min(1.0, _delta_step_parts(d, k)[0] * _UP + 1e-300) <= delta else math.inf
    return smallest_epsilon(lambda eps: _kov_delta(eps, e, d, k), delta, hi=hi, rtol=1e-10)


def advanced_composition_epsilon(eps_step: float, k: int, delta_slack: float) -> float:
    """Advanced composition (Dwork, Rothblum, Vadhan 2010, FOCS, "Boosting and Differential
    Privacy", Thm III.3): ``k`` adaptive
    ``(eps_step, d)``-DP mechanisms compose to ``(eps, k d + delta_slack)``-DP with
    ``eps = eps_step sqrt(2 k log(1/delta_slack)) + k eps_step (e^eps_step - 1)``.

    This is the composition Cor. 3.3 of Balle et al. (2020, arXiv:2007.06605) uses.

    Example::

        >>> round(advanced_composition_epsilon(0.1, 100, 1e-5), 4)
        5.8502
    """
    e = check_nonnegative("eps_step", eps_step)
    k = _check_steps(k)
    slack = check_open_unit("delta_slack", delta_slack)
    return (e * math.sqrt(2.0 * k * math.log(1.0 / slack)) + k * e * _expm1(e)) * _UP
