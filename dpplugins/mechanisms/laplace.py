"""The Laplace mechanism."""

from __future__ import annotations

import math

import numpy as np

from dpplugins.errors import check_positive
from dpplugins.mechanisms.distributions import Laplace
from dpplugins.mechanisms.pairs import MonotoneLossPair
from dpplugins.mechanisms.types import MechanismPairs


def laplace(scale: float, sensitivity: float = 1.0) -> MechanismPairs:
    """Laplace mechanism ``f(D) + Lap(scale)`` with L1 sensitivity ``sensitivity``.

    Worst-case pair ``P = Lap(sensitivity, b)``, ``Q = Lap(0, b)`` (Koskela et al. 2021, Sec. 6;
    Dwork & Roth 2014, Thm 3.6): ``L(x) = (|x| - |x - sensitivity|) / b``, constant ``-sensitivity/b``
    left of 0, linear on ``[0, sensitivity]``, constant ``sensitivity/b`` right of it.  Symmetric.
    """
    b = check_positive("scale", scale)
    d = check_positive("sensitivity", sensitivity)
    bound = d / b

    def loss(x):
        # (|x| - |x - d|) / b written as clip(2x - d, -d, d) / b: the same function, without
        # the cancellation of two huge terms (x = +-inf at scale 1e308 gave NaN)
        return np.clip(2.0 * np.asarray(x, dtype=float) - d, -d, d) / b

    def loss_inverse(eps):
        eps = np.asarray(eps, dtype=float)
        inner = (eps * b + d) / 2
        return np.where(eps < -bound, -np.inf, np.where(eps >= bound, np.inf, inner))

    def x_range(tail):
        # (at most 1e300: the loss is constant beyond [0, d], and b = 1e308 overflowed)
        t = min(float(b) * math.log(1.0 / tail), 1e300)
        return -t, d + t

    pair = MonotoneLossPair(Laplace(d, b), Laplace(0.0, b), loss, loss_inverse, x_range)
    return MechanismPairs({"remove": pair}, True, f"Laplace(scale={b:g}, sensitivity={d:g})")
