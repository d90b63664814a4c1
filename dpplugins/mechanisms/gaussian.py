"""The Gaussian mechanism."""

from __future__ import annotations

import math

import numpy as np

from dpplugins.errors import check_positive
from dpplugins.mechanisms.distributions import Gaussian
from dpplugins.mechanisms.pairs import MonotoneLossPair
from dpplugins.mechanisms.types import MechanismPairs

_U = float(np.finfo(float).eps) / 2


def tail_z(tail: float) -> float:
    """``z`` with ``P(|N(0,1)| > z) < tail`` (from the bound ``P(N > z) <= e^{-z^2/2}``)."""
    return math.sqrt(2.0 * math.log(1.0 / tail))


def gaussian(standard_deviation: float, sensitivity: float = 1.0) -> MechanismPairs:
    """Gaussian mechanism ``f(D) + N(0, standard_deviation^2)`` with L2 sensitivity ``sensitivity``.

    Worst-case pair ``P = N(sensitivity, s^2)``, ``Q = N(0, s^2)`` (Balle & Wang 2018, Thm 8);
    its privacy loss ``L(x) = (sensitivity * x - sensitivity^2 / 2) / s^2`` is linear in x, and the
    pair is symmetric.
    """
    s = check_positive("standard_deviation", standard_deviation)
    d = check_positive("sensitivity", sensitivity)

    def loss(x):
        return (d * x - 0.5 * d * d) / (s * s)

    def loss_inverse(eps):
        return eps * s * s / d + 0.5 * d

    def x_range(tail):
        z = tail_z(tail)
        return -z * s, d + z * s

    pair = MonotoneLossPair(Gaussian(d, s), Gaussian(0.0, s), loss, loss_inverse, x_range)
    return MechanismPairs({"remove": pair}, True,
                          f"Gaussian(sigma={s:g}, sensitivity={d:g})")


def gaussian_delta(epsilon, mu):
    """Exact profile of ``N(mu, 1)`` vs ``N(0, 1)`` (Balle & Wang 2018, arXiv:1805.06530, Thm 8;
    Dong, Roth, Su 2022, arXiv:1905.02383, Cor. 2.13):
    ``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``, computed in log space.
    A value, not a bound: at small ``mu`` the two terms cancel (relative error up to about
    ``u / mu``); :func:`gaussian_delta_upper_many` is the certified upper bound.

    Where the first term underflows (``log Phi = -inf``, e.g. ``eps = 1e308`` or ``eps = inf``)
    the value is 0 -- not ``(-inf) - (-inf) = NaN``; it is below every representable positive
    number, and callers that need an upper bound add their own floor (``1e-300``).
    ``mu = inf`` gives 1 at every finite ``eps``.

    Example::

        >>> import numpy as np
        >>> [round(float(v), 6) for v in gaussian_delta(np.array([0.0, 1.0]), 1.0)]
        [0.382925, 0.126937]
        >>> float(gaussian_delta(1e308, 2.0))
        0.0
    """
    from scipy.special import log_ndtr

    epsilon = np.asarray(epsilon, dtype=float)
    if np.all(np.asarray(mu) == 0):   # two equal laws: (1 - e^eps)_+ (0 / 0 gave NaN at eps = 0)
        return np.maximum(-np.expm1(epsilon), 0.0) + 0.0   # (+ 0.0: no negative zero)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        a = log_ndtr(-epsilon / mu + mu / 2)
        b = epsilon + log_ndtr(-epsilon / mu - mu / 2)
        ratio = np.where(np.isneginf(a), -np.inf, np.minimum(b - a, 0.0))
        ratio = np.where(np.isnan(ratio), 0.0, ratio)     # b - a = NaN only if a = +inf: no
        return np.where(np.isneginf(a), 0.0, np.exp(a) * -np.expm1(ratio))


def gaussian_delta_upper(epsilon: float, mu: float) -> float:
    """Certified upper bound on :func:`gaussian_delta` at one ``epsilon`` (at most 1).

    ``delta = Phi(x_a) (1 - e^r)`` with ``r = eps + log Phi(x_b) - log Phi(x_a)`` (``x_a =
    -eps/mu + mu/2``, ``x_b = -eps/mu - mu/2``).  ``r`` is a difference of terms as large as
    ``eps``, so its rounding error grows with ``eps`` (at ``mu = 1e100`` it is larger than
    ``r``); we bound it by ``E = 16 u (|eps| + |log Phi(x_b)| + |log Phi(x_a)|) + 1e-300`` (a few
    ulps per term -- our error model for ``log_ndtr`` and the two additions) and evaluate at
    ``r - E``, then round up by a relative ``1e-12`` and an absolute ``1e-300``.  Our derivation;
    at ordinary ``eps`` it changes the value by a relative ``1e-13`` or less.

    The arguments are rounded too: ``x_a`` is a sum of ``-eps/mu`` and ``mu/2``, off by up to
    about ``2u (eps/mu + mu/2)`` in absolute terms, which near ``eps = mu^2/2`` (``x_a`` near 0)
    is not small against ``x_a`` once ``mu`` is large.  So ``x_a`` is raised and ``x_b`` lowered
    by ``8u (|eps/mu| + mu/2)`` plus an absolute ``2^-1072`` (subnormal quotients) before
    ``log_ndtr`` -- the profile increases in ``Phi(x_a)`` and decreases in ``Phi(x_b)`` -- and
    ``log Phi(x_a)`` is raised by ``16 u |log Phi(x_a)|`` before its exponential.  Without this,
    ``mu = 1e12, eps = 5e23`` gave 0.5000000000005 where the exact value is 0.5000033466, and
    ``mu = 1e75, eps = 4.999999999999999e149`` gave 0.5 where it is 1 (``x_a`` rounded to 0; the
    exact one is 2.7e58): from ``mu = 1e8`` up about half of the sampled points near ``eps =
    mu^2/2`` were below the exact profile (found by a hostile sweep against 60-digit arithmetic;
    the relative ``1e-12`` and the ``E`` above had covered it below ``mu = 1e8``).

    Example::

        >>> 0.126936 < gaussian_delta_upper(1.0, 1.0) < 0.126937
        True
    """
    from scipy.special import log_ndtr

    # (scalar arithmetic: root searches call this one point at a time, and the array form
    # below took 30 us a call instead of 5.5; the two share their error terms)
    epsilon, mu = float(epsilon), float(mu)
    if not mu < math.inf:
        return 1.0
    if mu == 0.0:
        # two equal laws (mu = 2 / sigma underflows to 0 beyond sigma of about 1e162; this
        # divided by zero): delta(eps) = (1 - e^eps)_+, 0 at eps >= 0
        return min(max(0.0, -math.expm1(min(epsilon, 0.0))) * (1 + 1e-12), 1.0)
    ratio, half = epsilon / mu, mu / 2
    # the rounding of the arguments, outward (an infinite ratio leaves x_a = x_b = -inf, where
    # the profile is below every float: no slack, which would give inf - inf = NaN)
    slack = _argument_slack(ratio, half) if math.isfinite(ratio) else 0.0
    a = float(log_ndtr(-ratio + half + slack))
    if a == -math.inf:
        return 1e-300
    a = a + _LOG_PHI_ROUNDING * abs(a)   # log_ndtr's own rounding, before the exponential of a
    log_b = float(log_ndtr(-ratio - half - slack))
    r = epsilon + log_b - a
    if math.isnan(r):
        return 1e-300 if a < -745 else 1.0
    value = math.exp(a) * -math.expm1(min(r - _difference_error(epsilon, log_b, a), 0.0))
    return min(value * (1 + 1e-12) + 1e-300, 1.0)


#: the rounding charged on a computed ``log Phi`` (16 u of its magnitude; see
#: :func:`gaussian_delta_upper`)
_LOG_PHI_ROUNDING = 16 * _U


def _argument_slack(ratio, half):
    """``8 u (|eps/mu| + mu/2) + 2^-1072``: how far the arguments ``-eps/mu +- mu/2`` of Phi
    are moved outward (:func:`gaussian_delta_upper`; numbers or arrays)."""
    return 8 * _U * (abs(ratio) + abs(half)) + 2.0 ** -1072


def _difference_error(epsilon, log_b, log_a):
    """``E = 16 u (|eps| + |log Phi(x_b)| + |log Phi(x_a)|) + 1e-300``, the rounding charged on
    ``r`` (:func:`gaussian_delta_upper`; numbers or arrays)."""
    return _LOG_PHI_ROUNDING * (abs(epsilon) + abs(log_b) + abs(log_a)) + 1e-300


def gaussian_delta_upper_many(epsilon, mu: float) -> np.ndarray:
    """:func:`gaussian_delta_upper` at every entry of ``epsilon`` (an array of its shape; the
    same bound and error terms, in array arithmetic).

    For profiles that must be certified upper bounds: :func:`gaussian_delta` times ``1 + 1e-12``
    (or ``1 + 1e-10``) is not one -- its log-space difference cancels for small ``mu`` and was
    up to a relative 3e-9 below the exact profile at ``mu = 1/300`` and 1e-5 at ``mu = 1e-6``
    (a hostile sweep against 60-digit arithmetic).

    Example::

        >>> [round(float(v), 6) for v in gaussian_delta_upper_many([0.0, 1.0], 1.0)]
        [0.382925, 0.126937]
    """
    from scipy.special import log_ndtr

    eps, mu = np.asarray(epsilon, dtype=float), float(mu)
    if not mu < math.inf:
        return np.ones(eps.shape)
    if mu == 0.0:
        # two equal laws (mu = 2 / sigma underflows to 0 beyond sigma of about 1e162; this
        # divided by zero): delta(eps) = (1 - e^eps)_+, 0 at eps >= 0
        with np.errstate(over="ignore"):   # (huge eps: -expm1 = -inf, and the value is 0)
            return np.minimum(np.maximum(0.0, -np.expm1(eps)) * (1 + 1e-12), 1.0)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        ratio, half = eps / mu, mu / 2
        # the rounding of the arguments, outward (an infinite ratio leaves x_a = x_b = -inf,
        # where the profile is below every float: no slack, which would give inf - inf = NaN)
        slack = np.where(np.isfinite(ratio), _argument_slack(ratio, half), 0.0)
        a = log_ndtr(-ratio + half + slack)
        below_every_float = a == -np.inf
        # log_ndtr's own rounding, before the exponential of a
        a = np.where(below_every_float, a, a + _LOG_PHI_ROUNDING * np.abs(a))
        log_b = log_ndtr(-ratio - half - slack)
        r = eps + log_b - a
        value = np.exp(a) * -np.expm1(np.minimum(r - _difference_error(eps, log_b, a), 0.0))
    value = np.minimum(value * (1 + 1e-12) + 1e-300, 1.0)
    value = np.where(np.isnan(r), np.where(a < -745, 1e-300, 1.0), value)
    return np.where(below_every_float, 1e-300, value)


def gaussian_epsilon(mu: float, delta: float, *, rtol: float = 1e-12) -> float:
    """Certified upper bound on epsilon(delta) of mu-GDP (the Gaussian mechanism with
    sensitivity / noise = mu): the smallest eps with :func:`gaussian_delta_upper` ``<= delta``,
    to relative ``rtol`` from above (:func:`dpplugins.numerics.smallest_epsilon`, safeguarded
    Newton with the exact derivative ``d delta / d eps = -e^eps Phi(-eps/mu - mu/2)``; Balle &
    Wang 2018, arXiv:1805.06530, Thm 8 and its proof).

    ``mu = 0`` gives 0; ``mu = inf`` (or an epsilon beyond the float range) gives ``inf``.  The
    bracket starts at ``max(1, mu^2)``; where ``mu^2`` overflows it starts at the Gaussian tail
    bound ``mu^2/2 + mu sqrt(2 log(1/delta))`` (our derivation: ``delta(eps) <=
    Phi(-eps/mu + mu/2) <= exp(-(eps/mu - mu/2)^2 / 2)`` for ``eps >= mu^2/2``).

    Example::

        >>> round(gaussian_epsilon(1.0, 1e-5), 4)
        4.3772
    """
    from scipy.special import log_ndtr

    from dpplugins.numerics import smallest_epsilon

    mu = float(mu)
    if mu == 0.0:
        return 0.0
    if not mu < math.inf:
        return math.inf

    def upper(e):
        with np.errstate(over="ignore"):
            slope = -math.exp(min(e + float(log_ndtr(-e / mu - mu / 2)), 709.0))
        return gaussian_delta_upper(e, mu), slope

    start = mu * mu
    if not math.isfinite(start):
        start = mu * mu / 2 + mu * math.sqrt(2 * math.log(1 / delta))
        if not math.isfinite(start):
            return math.inf
    guess = mu * math.sqrt(2 * math.log(1 / delta))
    return smallest_epsilon(upper, delta, start=max(1.0, start), guess=guess, newton=True,
                            rtol=rtol)
