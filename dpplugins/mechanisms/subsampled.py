"""Poisson-subsampled Gaussian mechanism (DP-SGD's step)."""

from __future__ import annotations

import math

import numpy as np

from dpplugins.errors import check_choice, check_positive, check_probability
from dpplugins.mechanisms.distributions import Gaussian, Mixture
from dpplugins.mechanisms.gaussian import gaussian, tail_z
from dpplugins.mechanisms.pairs import MonotoneLossPair
from dpplugins.mechanisms.types import MechanismPairs


def poisson_subsampled_gaussian(standard_deviation: float, sampling_probability: float,
                                sensitivity: float = 1.0, *,
                                neighbouring: str = "add_remove") -> MechanismPairs:
    """One step of DP-SGD with Poisson sampling: each record is in the batch w.p. ``q``.

    ``add_remove`` (Opacus' and dp_accounting's default), Koskela et al. 2021 Sec. 6.3 /
    Zhu, Dong, Wang 2022 Thm 11:

    * remove: ``P = q N(Δ, s^2) + (1 - q) N(0, s^2)``, ``Q = N(0, s^2)``,
      ``L(x) = log(1 - q + q e^((Δx - Δ^2/2)/s^2))``, bounded below by ``log(1 - q)``;
    * add: ``P = N(0, s^2)``, ``Q = q N(Δ, s^2) + (1 - q) N(0, s^2)`` (written in ``y = -x`` so
      that the loss increases), bounded above by ``-log(1 - q)``.

    ``replace_one``: the record ``v`` is replaced by ``v'``; the batch sum is shifted by ``v`` or
    ``v'`` when the record is sampled and by nothing otherwise, the other records adding the same
    independent noise to both.  In one dimension the extreme case is ``v = Δ, v' = -Δ``:
    ``P = q N(Δ) + (1-q) N(0)``, ``Q = q N(-Δ) + (1-q) N(0)``, a symmetric pair.  (We take this
    antipodal configuration as the worst case; see the test comparing it with other angles.)

    ``sampling_probability = 1`` is the plain Gaussian mechanism.
    """
    s = check_positive("standard_deviation", standard_deviation)
    q = check_probability("sampling_probability", sampling_probability)
    d = check_positive("sensitivity", sensitivity)
    check_choice("neighbouring", neighbouring, ("add_remove", "replace_one"))
    if q == 1.0:
        return gaussian(s, 2 * d if neighbouring == "replace_one" else d)
    log_q, log_1mq = np.log(q), np.log1p(-q)
    a = d / (s * s)  # loss slope per unit x
    c = 0.5 * d * d / (s * s)
    z_of = tail_z
    desc = f"Poisson-subsampled Gaussian(sigma={s:g}, q={q:g}, sensitivity={d:g}, {neighbouring})"
    if neighbouring == "add_remove":
        def loss_remove(x):
            return np.logaddexp(log_1mq, log_q + a * x - c)

        def inverse_remove(eps):
            inner = np.expm1(eps) + q
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(inner > 0, (np.log(inner) - log_q + c) / a, -np.inf)

        def loss_add(y):
            return -np.logaddexp(log_1mq, log_q - a * y - c)

        def inverse_add(eps):
            inner = np.expm1(-np.asarray(eps, dtype=float)) + q
            with np.errstate(divide="ignore", invalid="ignore"):
                return np.where(inner > 0, -(np.log(inner) - log_q + c) / a, np.inf)

        mix_plus = Mixture((q, 1 - q), (Gaussian(d, s), Gaussian(0.0, s)))
        mix_minus = Mixture((q, 1 - q), (Gaussian(-d, s), Gaussian(0.0, s)))
        remove = MonotoneLossPair(mix_plus, Gaussian(0.0, s), loss_remove, inverse_remove,
                                  lambda t: (-z_of(t) * s, d + z_of(t) * s))
        add = MonotoneLossPair(Gaussian(0.0, s), mix_minus, loss_add, inverse_add,
                               lambda t: (-d - z_of(t) * s, z_of(t) * s))
        # add is remove with P and Q exchanged (y = -x), a loss without atoms: mirrored
        return MechanismPairs({"remove": remove, "add": add}, False, desc, mirrored=True)

    log_qc = log_q - c

    def loss_replace(x):
        return np.logaddexp(log_1mq, log_qc + a * x) - np.logaddexp(log_1mq, log_qc - a * x)

    def inverse_replace(eps):
        # Solve q c A^2 + (1-q)(1-e^s) A - e^s q c = 0 for A = e^(a x), in log space.
        eps = np.asarray(eps, dtype=float)
        b = -(1 - q) * np.expm1(eps)
        log_e = 2 * (np.log(2.0) + log_qc) + eps  # log(4 q^2 c^2 e^s)
        with np.errstate(divide="ignore"):
            log_abs_b = np.log(np.abs(b))
        half = 0.5 * np.logaddexp(2 * log_abs_b, log_e)  # log sqrt(b^2 + E)
        log_a_pos = np.log(2.0) + log_qc + eps - np.logaddexp(log_abs_b, half)
        log_a_neg = np.logaddexp(log_abs_b, half) - (np.log(2.0) + log_qc)
        log_a = np.where(b >= 0, log_a_pos, log_a_neg)
        return log_a / a

    mix_plus = Mixture((q, 1 - q), (Gaussian(d, s), Gaussian(0.0, s)))
    mix_minus = Mixture((q, 1 - q), (Gaussian(-d, s), Gaussian(0.0, s)))
    pair = MonotoneLossPair(mix_plus, mix_minus, loss_replace, inverse_replace,
                            lambda t: (-d - z_of(t) * s, d + z_of(t) * s))
    return MechanismPairs({"remove": pair}, True, desc)


def poisson_subsampled_laplace(scale: float, sampling_probability: float,
                               sensitivity: float = 1.0) -> MechanismPairs:
    """One step of the Laplace mechanism on a Poisson subsample, add/remove neighbours.

    With ``l(x) = (|x| - |x - Δ|) / b`` the Laplace loss (:func:`dpplugins.mechanisms.laplace`),
    the worst-case pairs are the Laplace analogues of the Gaussian ones (Zhu, Dong, Wang 2022,
    Thm 11, which holds for any pair dominating the base mechanism):

    * remove: ``P = q Lap(Δ, b) + (1 - q) Lap(0, b)``, ``Q = Lap(0, b)``,
      ``L(x) = log(1 - q + q e^(l(x)))``, non-decreasing in ``x`` with
      ``|L| <= log(1 + q (e^(Δ/b) - 1))``;
    * add: ``P = Lap(0, b)``, ``Q = q Lap(-Δ, b) + (1 - q) Lap(0, b)``,
      ``L(y) = -log(1 - q + q e^(l(-y)))`` (``l(-y)`` is the loss of ``Lap(-Δ)`` against
      ``Lap(0)`` at ``y``), non-decreasing in ``y``.

    ``sampling_probability = 1`` is the plain Laplace mechanism.
    """
    from dpplugins.mechanisms.distributions import Laplace
    from dpplugins.mechanisms.laplace import laplace

    b = check_positive("scale", scale)
    q = check_probability("sampling_probability", sampling_probability)
    d = check_positive("sensitivity", sensitivity)
    if q == 1.0:
        return laplace(b, d)
    log_q, log_1mq = np.log(q), np.log1p(-q)
    bound = d / b

    def inner(x):
        return (np.abs(x) - np.abs(x - d)) / b

    def inner_inverse(value):
        value = np.asarray(value, dtype=float)
        return np.where(value < -bound, -np.inf, np.where(value >= bound, np.inf,
                                                          (value * b + d) / 2))

    def loss_remove(x):
        return np.logaddexp(log_1mq, log_q + inner(x))

    def inverse_remove(eps):
        arg = np.expm1(np.asarray(eps, dtype=float)) + q
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(arg > 0, inner_inverse(np.log(np.maximum(arg, 1e-300)) - log_q),
                            -np.inf)

    def loss_add(y):
        return -np.logaddexp(log_1mq, log_q + inner(-np.asarray(y, dtype=float)))

    def inverse_add(eps):
        # -log(1 - q + q e^m) = eps  <=>  e^m = (e^(-eps) - 1 + q) / q, m = l(-y)
        arg = np.expm1(-np.asarray(eps, dtype=float)) + q
        with np.errstate(divide="ignore", invalid="ignore"):
            m = np.log(np.maximum(arg, 1e-300)) - log_q
            y = -(m * b + d) / 2
            y = np.where(m > bound, -np.inf, y)
            return np.where((arg <= 0) | (m < -bound), np.inf, y)

    def x_range(tail):
        # (at most 1e300: the loss is constant beyond [0, d], and b = 1e308 overflowed)
        t = min(float(b) * math.log(1.0 / tail), 1e300)
        return -t, d + t

    mix = Mixture((q, 1 - q), (Laplace(d, b), Laplace(0.0, b)))
    remove = MonotoneLossPair(mix, Laplace(0.0, b), loss_remove, inverse_remove, x_range)
    add = MonotoneLossPair(Laplace(0.0, b), Mixture((q, 1 - q), (Laplace(-d, b), Laplace(0.0, b))),
                           loss_add, inverse_add, x_range)
    desc = f"Poisson-subsampled Laplace(scale={b:g}, q={q:g}, sensitivity={d:g})"
    return MechanismPairs({"remove": remove, "add": add}, False, desc)
