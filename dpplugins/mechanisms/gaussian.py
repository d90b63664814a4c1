"""The Gaussian mechanism."""

from __future__ import annotations

import math

import numpy as np

from dpplugins.errors import check_positive
from dpplugins.mechanisms.distributions import Gaussian
from dpplugins.mechanisms.pairs import MonotoneLossPair
from dpplugins.mechanisms.types import MechanismPairs


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
    """Exact profile of ``N(mu, 1)`` vs ``N(0, 1)`` (Balle & Wang 2018, Thm 8; Dong, Roth, Su 2022,
    Cor. 2.13): ``Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``, computed in log space."""
    from scipy.special import log_ndtr

    epsilon = np.asarray(epsilon, dtype=float)
    a = log_ndtr(-epsilon / mu + mu / 2)
    b = epsilon + log_ndtr(-epsilon / mu - mu / 2)
    with np.errstate(divide="ignore"):
        return np.exp(a) * -np.expm1(np.minimum(b - a, 0.0))
