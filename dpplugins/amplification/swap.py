"""Privacy amplification by swapping (Balle, Kairouz, McMahan, Thakkar, Thakurta 2020).

Source: "Privacy Amplification via Random Check-Ins", NeurIPS 2020 (arXiv:2007.06605),
Theorem A.5 (amplification by swapping) and Theorem 5.1
(shuffling, proved by reducing the shuffled protocol A_sl to the swapping protocol A_swap, so the
two theorems state the same numbers).

Protocol A_swap: given ``d_1..d_n``, swap ``d_1`` with a uniformly random element, then run an
adaptive sequence of local randomizers ``A^(i)(s_{1:i-1}, d_i)``, each eps0-DP for every value of
the earlier outputs.  A_swap is (eps, delta)-DP *at index 1* (neighbours differ in ``d_1``) with

    eps = e^(3 eps0) (e^eps0 - 1)^2 / (2n) + e^(3 eps0 / 2) (e^eps0 - 1) sqrt(2 log(1/delta) / n)

for every delta in (0, 1).  For (eps0, delta0)-DP randomizers with

    delta0 <= (1 - e^-eps0) delta1 / (4 e^eps0 (2 + log(2/delta1) / log(1/(1 - e^(-5 eps0)))))

the same formula with every eps0 replaced by 8 eps0 holds with ``delta' = delta + n (e^eps' + 1)
delta1``.  (The arXiv version prints ``m (e^eps' + 1) delta1`` in Thm A.5, where no ``m`` exists; Thm 5.1
prints ``n``.  ``m <= n`` in every protocol of the paper, so ``n`` is the conservative reading and
the one we use.)

Because the bound holds for every delta, ``eps = A + B sqrt(2 log(1/delta) / n)`` is a whole
privacy profile; :func:`pure_profile` returns its exact inverse
``delta(eps) = exp(-n ((eps - A) / B)^2 / 2)``, which
:meth:`dpplugins.pld.PrivacyLossDistribution.from_privacy_profile` turns into a dominating PLD
(pessimistic connect-the-dots, Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022,
arXiv:2207.04380), so epochs compose by FFT.  Neighbouring relation: *replace one* record.

Example::

    >>> from dpplugins.amplification import swap
    >>> bound = swap.epsilon(1.0, 10_000, 1e-6)
    >>> round(bound.epsilon, 4)
    0.4078
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from dpplugins.errors import (ParameterError, check_float_count, check_nonnegative,
                              check_open_unit)

__all__ = ["SwapBound", "epsilon", "coefficients", "pure_profile", "minimal_delta1",
           "approximate_profile", "gaussian_profile", "gaussian_local_delta", "GAUSSIAN_EPS0_GRID"]

#: local epsilons tried when a Gaussian randomizer is turned into (eps0, delta0) pairs
GAUSSIAN_EPS0_GRID = np.geomspace(1e-4, 2.0, 64)

#: relative margin on every epsilon and delta reported, as in
#: :mod:`dpplugins.amplification.checkin` (a few ulps would do; this is generous): without it
#: :func:`epsilon` was below the exact value of its formula at 264 of 600 sampled inputs (by
#: up to a relative 7e-15; a hostile sweep against 80-digit arithmetic)
_UP = 1.0 + 1e-12
#: relative rounding of the coefficients ``A`` and ``B`` (a few ulps for each of their ``exp``,
#: ``expm1`` and arithmetic operations: our error model), by which the profiles round them up
#: before the cancelling difference ``eps - A``: against ``B`` the rounding of ``A`` is ``A / B ~
#: e^(3 eps0 / 2)`` times larger (``8 eps0`` for approximate-DP randomizers), and without this
#: :func:`pure_profile` was up to a relative 2.4e-6 below the exact value of its formula at
#: eps0 = 8.3, n = 10 (1162 of 2700 sampled points below it, the same sweep)
_COEFFICIENT_ROUNDING = 32 * 2.0 ** -53


def _rounded_up(a, b):
    """``(A, B)`` raised by :data:`_COEFFICIENT_ROUNDING` (the profiles increase in both)."""
    return a * (1 + _COEFFICIENT_ROUNDING), b * (1 + _COEFFICIENT_ROUNDING)


@dataclass(frozen=True)
class SwapBound:
    """An (epsilon, delta) guarantee and how it was obtained.

    ``delta1`` is the part of ``delta`` spent on the approximate-DP randomizers (0 for pure
    eps0-DP ones); ``delta - n (e^epsilon + 1) delta1`` went into the swapping bound itself.
    """

    epsilon: float
    delta: float
    method: str
    delta1: float = 0.0


def coefficients(eps0: float, n: int) -> tuple[float, float]:
    """``(A, B)`` with ``eps(delta) = A + B sqrt(2 log(1/delta) / n)`` (Thm A.5, pure eps0).

    ``A = e^(3 eps0) (e^eps0 - 1)^2 / (2n)``, ``B = e^(3 eps0/2) (e^eps0 - 1)``; ``inf`` when
    they overflow (the bound is then vacuous, not wrong).
    """
    with np.errstate(over="ignore"):
        em1 = math.expm1(eps0) if eps0 < 700 else math.inf
        a = math.exp(min(3 * eps0, 709.0)) * em1 * em1 / (2 * n) if eps0 < 236 else math.inf
        b = math.exp(min(1.5 * eps0, 709.0)) * em1 if eps0 < 470 else math.inf
    return a, b


def _check(eps0, n, delta0):
    eps0 = check_nonnegative("eps0", eps0)
    n = check_float_count("n", n, minimum=2)
    delta0 = check_nonnegative("delta0", delta0)
    if delta0 >= 1:
        raise ParameterError("delta0", delta0, "in [0, 1)")
    return eps0, n, delta0


def minimal_delta1(eps0: float, delta0: float) -> float:
    """Smallest ``delta1`` allowed by the delta0 condition of Thm A.5 / Thm 5.1 (``inf`` if none).

    The condition is the one of Balle et al. 2020 Thm 3.2 (the same hypothesis on the local
    randomizer), so this is :func:`dpplugins.amplification.checkin.delta1_for_delta0`, which
    returns a value on the safe side of the root; ``eps0 <= 0`` admits no ``delta1``.

    Example::

        >>> 1e-17 < minimal_delta1(0.05, 1e-20) < 1e-15
        True
    """
    from dpplugins.amplification.checkin import delta1_for_delta0

    if delta0 == 0:
        return 0.0
    if eps0 <= 0:
        return math.inf
    return delta1_for_delta0(eps0, delta0)

def pure_profile(eps0: float, n: int) -> Callable[[np.ndarray], np.ndarray]:
    """``delta(eps)`` of Thm A.5 for eps0-DP randomizers: ``exp(-n ((eps - A)/B)^2 / 2)`` for
    ``eps > A`` and 1 below (vectorised).

    Example::

        >>> import numpy as np
        >>> eps = epsilon(1.0, 10_000, 1e-6).epsilon
        >>> round(float(pure_profile(1.0, 10_000)(np.array([eps]))[0]) * 1e6, 6)
        1.0
    """
    eps0, n, _ = _check(eps0, n, 0.0)
    a, b = _rounded_up(*coefficients(eps0, n))

    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        if eps0 == 0:
            return np.zeros_like(eps)
        with np.errstate(invalid="ignore", over="ignore"):
            z = np.where(eps > a, (eps - a) / b, 0.0)
            out = np.where(eps > a, np.exp(-0.5 * n * z * z) * _UP, 1.0)
        return np.minimum(np.nan_to_num(out, nan=1.0), 1.0)

    return profile


def approximate_profile(eps0: float, n: int, delta0: float) -> Callable[[np.ndarray], np.ndarray]:
    """``delta(eps)`` of the approximate-DP part of Thm A.5 / 5.1 for (eps0, delta0) randomizers:
    the pure profile at ``8 eps0`` plus ``n (e^eps + 1) delta1`` with the smallest admissible
    delta1 (:func:`minimal_delta1`); 1 where no delta1 is admissible."""
    eps0, n, delta0 = _check(eps0, n, delta0)
    if delta0 == 0:
        return pure_profile(eps0, n)
    delta1 = minimal_delta1(eps0, delta0)
    inner = pure_profile(8 * eps0, n)

    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        if not math.isfinite(delta1):
            return np.ones_like(eps)
        with np.errstate(over="ignore"):
            extra = n * (np.exp(np.minimum(eps, 700.0)) + 1) * delta1
        return np.minimum((inner(eps) + extra) * _UP, 1.0)

    return profile


def epsilon(eps0: float, n: int, delta: float, *, delta0: float = 0.0) -> SwapBound:
    """Thm A.5 (= Thm 5.1): epsilon at ``delta`` for n adaptive (eps0, delta0)-DP randomizers.

    With ``delta0 > 0`` the total ``delta`` is split as ``delta_inner + n (e^eps' + 1) delta1``:
    delta1 is the smallest admissible value and delta_inner is chosen on a grid to minimise eps'.
    Raises :class:`ParameterError` if no split fits inside ``delta``.  ``epsilon`` is ``inf``
    when the closed form overflows (vacuous, still true).

    Example::

        >>> round(epsilon(0.5, 100_000, 1e-6).epsilon, 4)
        0.0228
    """
    eps0, n, delta0 = _check(eps0, n, delta0)
    delta = check_open_unit("delta", delta)
    if eps0 == 0 and delta0 == 0:
        return SwapBound(0.0, delta, "balle2020_swap")
    if delta0 == 0:
        a, b = coefficients(eps0, n)
        eps = (a + b * math.sqrt(2 * math.log(1 / delta) / n)) * _UP
        return SwapBound(float(eps), delta, "balle2020_swap")
    delta1 = minimal_delta1(eps0, delta0)
    a, b = coefficients(8 * eps0, n)
    best = None
    if math.isfinite(delta1) and 2 * n * delta1 < delta:
        for inner in delta * np.geomspace(1e-8, 1.0, 400, endpoint=False):
            eps = (a + b * math.sqrt(2 * math.log(1 / inner) / n)) * _UP
            if not math.isfinite(eps) or eps > 700:
                continue
            total = (inner + n * (math.exp(eps) + 1) * delta1) * _UP
            if total <= delta and (best is None or eps < best):
                best = eps
    if best is None:
        raise ParameterError(
            "delta0", delta0,
            f"small enough that n (e^eps' + 1) delta1 fits inside delta={delta:g} "
            f"(smallest admissible delta1 = {delta1:.3g} for eps0={eps0:g})",
            hint="lower delta0 (use more noise) or raise delta")
    return SwapBound(float(best), delta, "balle2020_swap_approx", delta1)


def gaussian_local_delta(eps0: np.ndarray, noise_multiplier: float,
                         sensitivity: float = 2.0) -> np.ndarray:
    """delta0 of a Gaussian local randomizer at each eps0 (exact profile of ``N(sensitivity, s^2)``
    vs ``N(0, s^2)`` with ``s = noise_multiplier``; Balle & Wang 2018, Thm 8), rounded up; the
    same as :func:`dpplugins.amplification.checkin.gaussian_local_delta0`.  ``sensitivity = 2``
    is the L2 diameter of clipped gradients (norm <= 1): a *local* randomizer must be
    indistinguishable between any two inputs."""
    from dpplugins.amplification.checkin import gaussian_local_delta0

    return gaussian_local_delta0(eps0, noise_multiplier, sensitivity)

def gaussian_profile(noise_multiplier: float, n: int, *, sensitivity: float = 2.0,
                     eps0_grid: np.ndarray | None = None) -> Callable[[np.ndarray], np.ndarray]:
    """Per-pass ``delta(eps)`` of n shuffled (or swapped) Gaussian local randomizers via Thm 5.1 /
    A.5 (approximate-DP version): each randomizer is (eps0, delta0)-DP for every eps0 on the grid
    with ``delta0 = gaussian_local_delta(eps0)``; each grid point gives a valid profile, so their
    pointwise minimum is one (vectorised).

    Example::

        >>> import numpy as np
        >>> profile = gaussian_profile(300.0, 10**6)
        >>> bool(profile(np.array([0.006]))[0] < 1e-6 < profile(np.array([0.005]))[0])
        True
    """
    n = float(check_float_count("n", n, minimum=2))
    grid = GAUSSIAN_EPS0_GRID if eps0_grid is None else np.asarray(eps0_grid, float)
    deltas0 = gaussian_local_delta(grid, noise_multiplier, sensitivity)
    # With little noise the randomizer is (eps0, delta0)-DP only for delta0 = 1 at some (or
    # all) grid points: no delta1 is admissible there (the theorem needs delta0 < 1), so such
    # points are dropped; with none left the profile is the trivial bound 1 and the caller keeps
    # its no-amplification bound.
    delta1 = np.array([minimal_delta1(float(e), float(d)) if 0.0 <= d < 1.0 else math.inf
                       for e, d in zip(grid, deltas0)])
    usable = np.isfinite(delta1) & (2 * n * delta1 < 1)
    grid, delta1 = grid[usable], delta1[usable]
    coeffs = np.array([_rounded_up(*coefficients(8 * float(e), n)) for e in grid]).reshape(-1, 2)

    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        if len(grid) == 0:
            return np.ones_like(eps)
        a, b = coeffs[:, :1], coeffs[:, 1:]
        e = eps[None, :]
        with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
            z = np.where(e > a, (e - a) / b, 0.0)
            inner = np.where(e > a, np.exp(-0.5 * n * z * z), 1.0)
            extra = n * (np.exp(np.minimum(e, 700.0)) + 1) * delta1[:, None]
        total = (np.nan_to_num(inner, nan=1.0) + extra) * _UP
        return np.minimum(total.min(axis=0), 1.0)

    return profile
