"""Privacy amplification by iteration for projected noisy SGD (PNSGD), as pure functions.

Sources
-------
* Asoodeh, Liao, Calmon, Kosut, Sankar (2020), "Privacy amplification of iterative algorithms via
  contraction coefficients" (ISIT 2020; arXiv:2001.06546): contraction coefficient of the
  hockey-stick divergence, the fixed-position bound (restated as Thm 1 by Sordello et al.) and
  randomly stopped PNSGD (their Thm 5).
* Sordello, Bu, Dong (2021), "Privacy amplification via iteration for shuffled and online PNSGD"
  (ECML-PKDD 2021; arXiv:2106.11767) -- "SBD21" below: A and B in eqs. (1.4)-(1.5), shuffled PNSGD (Thm 2, eq. 3.1), noise-decay schedules (Thms 3-4), online
  PNSGD with per-step noise (eq. 6.1).

The algorithm and the units
---------------------------
Records ``x_1, ..., x_n`` are processed one per step,

    w_t = Pi_K( w_{t-1} - eta * (grad l(w_{t-1}, x_t) + Z_t) ),

with ``Z_t ~ N(0, sigma^2 I)`` (Gaussian) or ``Z_t ~ Laplace(0, v)`` (1-D, ``K = [a, b]``), so the
*iterate* receives noise ``eta * Z_t`` of standard deviation ``eta * sigma`` (Laplace scale
``eta * v``).  ``sigma`` (``v``) is the noise on the *gradient*, in the same units as the Lipschitz
constant ``L``.  This convention (our reading of SBD21 Sec. 1; we had the paper's text without
its displayed update rule) is the one that makes both of its formulas (1.4) consistent: neighbouring records move the mean of one step
by at most ``2 eta L`` (A's argument ``2 eta L / (eta sigma) = 2L / sigma``), and two iterates of K
are at most ``M D_K`` apart after the gradient step (B's argument ``M D_K / (eta sigma)``).

Notation: ``gamma = e^eps`` with ``eps >= 0``; ``theta_gamma(r) = E_gamma(N(r, 1) || N(0, 1))
= Q(log(gamma)/r - r/2) - gamma Q(log(gamma)/r + r/2)`` (Balle & Wang 2018, arXiv:1805.06530,
Thm 8, with ``gamma = e^eps``; SBD21 eq. 1.4).

* ``A = E_gamma`` between one step on neighbouring records from the same start (joint convexity),
  Gaussian ``theta_gamma(2L/sigma)``, Laplace ``(1 - e^(eps/2 - L/v))_+`` (SBD21 eqs. 1.4-1.5).
* ``B = eta_gamma(K)``, the E_gamma contraction coefficient of one step,
  ``sup_{w1, w2 in K} E_gamma(K(w1) || K(w2))`` (Asoodeh et al. 2020, restated in SBD21 before
  eq. 1.4; we checked the inequality we use, ``E_gamma(mu K || nu K) <= E_gamma(mu || nu) sup
  E_gamma(K(w1) || K(w2))`` for gamma >= 1: split ``mu - gamma nu`` into its positive part (mass
  delta) and a negative part of mass ``gamma - 1 + delta >= gamma delta``, then joint convexity):
  Gaussian ``theta_gamma(M D_K / (eta sigma))``, Laplace
  ``(1 - e^(eps/2 - M (b - a) / (2 eta v)))_+``.  ``M`` is the Lipschitz constant of the gradient
  step ``w -> w - eta grad l(w, x)`` (1 for convex beta-smooth losses with ``eta <= 2/beta``).

Privacy profiles delta(eps) for one pass (each an upper bound for every eps >= 0, and symmetric in
the two datasets because A and B are):

* fixed position i (SBD21 Thm 1 = Asoodeh et al.): ``A B^(n-i)``; with per-step noise (SBD21
  eq. 6.1) ``A_i prod_{t>i} B_t``;
* randomly stopped (Asoodeh et al. Thm 5; output ``w_T`` with ``T`` uniform on ``{1..n}``): the
  proof gives ``A (1 - B^(n-i+1)) / (n (1 - B))`` for position i, worst at ``i = 1``:
  ``A (1 - B^n) / (n (1 - B))``; the theorem as stated drops the factor: ``A / (n (1 - B))``;
* shuffled (SBD21 Thm 2, eq. 3.1): ``A (1 - B^n) / (n (1 - B))`` -- the position is uniform;
* online (SBD21 eq. 6.1): ``A_i prod_{t>i} B_t`` for record i; the guarantee for *every* record is
  the maximum over i, which is attained at the last step of a run of constant noise.

Note: with the proof's factor, the randomly stopped bound *equals* the shuffled one (both average
``A B^k`` over ``k = 0..n-1``); SBD21's "strictly better" compares with the bound as stated.
The fixed position ``i = 1`` is the *best* protected record (``A B^(n-1)``), ``i = n`` the worst
(``A``): ``A B^(n-1) <= shuffled = randomly stopped <= A / (n (1 - B))`` and ``shuffled <= A``.

Per-step schedules (``noise_scale`` an array with ``counts``) generalise every variant with the
same proof (joint convexity over the position or stopping time, then the strong data processing
inequality with one contraction coefficient per step, as in eq. 6.1).  Composition over passes is
*not* done here: turn a profile into a dominating PLD
(``PrivacyLossDistribution.from_privacy_profile``) and compose by FFT.  Do not convert one
(eps, delta) point to RDP as SBD21 Sec. 5 suggests: an (eps, delta)-DP statement with delta > 0
implies no finite Renyi divergence of any order > 1 (a mechanism can put mass delta where the
other has none; Mironov 2017, arXiv:1702.07476, Sec. III).

Example::

    >>> import numpy as np
    >>> setting = PNSGDSetting(lipschitz=1.0, diameter=2.0, learning_rate=0.5)
    >>> profile = privacy_profile("shuffled", setting, noise_scale=2.0, dataset_size=1000)
    >>> eps = epsilon_for_delta(profile, 1e-5)          # one pass, upper bound
    >>> bool(profile(np.array([eps]))[0] <= 1e-5)
    True
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from scipy.special import log_ndtr, logsumexp, zeta

from dpplugins.numerics import smallest_epsilon
from dpplugins.errors import (NumericalError, ParameterError, check_choice, check_count,
                              check_nonnegative, check_open_unit, check_positive, check_real)

__all__ = [
    "NOISES",
    "VARIANTS",
    "PNSGDSetting",
    "hockey_stick_gaussian",
    "gaussian_step_divergence",
    "gaussian_contraction_coefficient",
    "laplace_step_divergence",
    "laplace_contraction_coefficient",
    "delta_fixed_position",
    "delta_randomly_stopped",
    "delta_shuffled",
    "delta_online",
    "privacy_profile",
    "epsilon_for_delta",
    "shuffled_limit_delta",
    "shuffled_limit_constant",
    "shuffled_noise_for_limit",
    "gaussian_shuffled_radius_asymptotic",
    "online_limit_delta",
    "online_noise_schedule",
]

NOISES = ("gaussian", "laplace")
VARIANTS = ("fixed_position", "randomly_stopped", "shuffled", "online")
#: largest (number of epsilons) x (number of noise runs) evaluated at once
_CHUNK = 1 << 19
_LOG_HALF = math.log(0.5)
#: Error charged per unit of magnitude on a computed log (128 units in the last place): scipy's
#: ``log_ndtr`` was numerically checked against mpmath (50 digits) on 11,000 points of
#: [-1e6, 40] at most 2.6 ulp x (1 + |value|) off, and each further operation adds about 1 ulp
#: of its largest operand; see :func:`_log_theta_pair_regular` and :func:`_evaluate`.
_LOG_ROUNDING = 2.0 ** -45
_TINY = float(np.finfo(float).tiny)
#: 1 - B below exp(this) (about 1e-280) counts as 0 in the geometric sums
_LOG_COMP_NEGLIGIBLE = -645.0


# -- validation helpers ---------------------------------------------------------------------------
def _epsilons(epsilon) -> np.ndarray:
    eps = np.asarray(epsilon, dtype=float)
    if eps.ndim > 1:
        raise ParameterError("epsilon", epsilon, "a number or a 1-D array of numbers >= 0")
    if np.any(~np.isfinite(eps)) or np.any(eps < 0):
        raise ParameterError("epsilon", epsilon, "finite numbers >= 0")
    return eps


def _positive_array(name: str, value) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError(name, value, "a number > 0 or an array of numbers > 0") from None
    if arr.ndim > 1 or arr.size == 0 or np.any(~np.isfinite(arr)) or np.any(arr <= 0):
        raise ParameterError(name, value, "a finite number > 0 or a 1-D array of them")
    return arr


def _runs(noise_scale, counts, dataset_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Run-length schedule: (scales, counts).  A scalar scale without counts is one full pass.

    Counts are float64 (exact up to 2^53 steps; beyond that only the products ``B^count`` use
    them, where a relative error of 1e-16 in the count is harmless).
    """
    scales = _positive_array("noise_scale", noise_scale)
    if counts is None:
        counts_arr = (np.array([float(dataset_size)]) if scales.ndim == 0
                      else np.ones(scales.size))
    else:
        try:
            raw = np.atleast_1d(np.asarray(counts, dtype=float))
        except (TypeError, ValueError):
            raw = np.array([np.nan])
        if raw.ndim != 1 or raw.size == 0 or not np.all(np.isfinite(raw)) or \
                np.any(raw != np.round(raw)) or np.any(raw < 1):
            raise ParameterError("counts", counts, "integers >= 1, one per noise level")
        counts_arr = raw
    scales = np.atleast_1d(scales)
    if scales.size == 1 and counts_arr.size > 1:
        scales = np.full(counts_arr.size, scales[0])
    if scales.size != counts_arr.size:
        raise ParameterError("counts", counts, f"one count per noise level ({scales.size})")
    if counts_arr.sum() > float(dataset_size):
        raise ParameterError("counts", counts,
                             f"summing to at most dataset_size={dataset_size} (one pass)",
                             "split longer runs into passes and compose their profiles")
    return scales, counts_arr


def _scalar_or_array(out: np.ndarray, scalar: bool):
    return float(np.reshape(out, -1)[0]) if scalar else out


# -- the hockey-stick divergence of two unit Gaussians -----------------------------------------
def _rounding_charge(constant: float, *logs: np.ndarray) -> np.ndarray:
    """``_LOG_ROUNDING (constant + sum |v|)`` over the finite entries of ``logs`` (infinite ones
    are exact and add nothing): the floating-point error charged on a log computed from them."""
    total = np.full(np.broadcast(*logs).shape, constant)
    for v in logs:
        total = total + np.where(np.isfinite(v), np.abs(v), 0.0)
    return _LOG_ROUNDING * total


def _log_theta_pair(log_gamma: np.ndarray, r: np.ndarray, outward: bool = False
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(log theta_gamma(r), log(1 - theta_gamma(r)))``, broadcast, accurate in both tails.

    ``theta = Q(a - r/2) - gamma Q(a + r/2)`` with ``a = log(gamma)/r`` is evaluated as
    ``exp(lp) * (1 - exp(d))`` with ``lp = log Q(a - r/2)`` and
    ``d = log(gamma) + log Q(a + r/2) - lp <= 0``
    (``log_ndtr`` keeps both logs accurate far into the tails); the complement is the sum of two
    positive terms ``Phi(a - r/2) + gamma Q(a + r/2)``, added with ``logaddexp``.

    ``outward=True`` rounds both away from the exact values in the direction that can only
    loosen a privacy bound: theta up, its complement down (for the privacy profiles, which
    increase in A and B; see :func:`_log_theta_pair_regular`).
    """
    log_gamma, r = np.broadcast_arrays(np.asarray(log_gamma, dtype=float),
                                       np.asarray(r, dtype=float))
    regular = (r > 0) & np.isfinite(r) & np.isfinite(log_gamma)
    if np.all(regular):  # the common case, without masked copies
        return _log_theta_pair_regular(log_gamma, r, outward)
    log_theta = np.empty(log_gamma.shape)
    log_comp = np.empty(log_gamma.shape)
    log_theta[regular], log_comp[regular] = _log_theta_pair_regular(log_gamma[regular],
                                                                    r[regular], outward)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # r = 0: the two Gaussians coincide, theta = (1 - gamma)_+
        zero = (r == 0) & np.isfinite(log_gamma)
        lg0 = log_gamma[zero]
        log_theta[zero] = np.where(lg0 < 0, np.log(-np.expm1(np.minimum(lg0, 0.0))), -np.inf)
        log_comp[zero] = np.minimum(lg0, 0.0)
        # r = inf: disjoint supports, theta = 1 for finite gamma
        far = np.isinf(r) & np.isfinite(log_gamma)
        log_theta[far], log_comp[far] = 0.0, -np.inf
        # gamma = inf: theta = 0 unless r = inf (then E_inf of disjoint measures is 1)
        inf_gamma = np.isposinf(log_gamma)
        log_theta[inf_gamma] = np.where(np.isinf(r[inf_gamma]), 0.0, -np.inf)
        log_comp[inf_gamma] = np.where(np.isinf(r[inf_gamma]), -np.inf, 0.0)
    return log_theta, log_comp


def _log_theta_pair_regular(log_gamma: np.ndarray, r: np.ndarray, outward: bool = False
                            ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_log_theta_pair` for finite log_gamma and 0 < r < inf.

    With ``outward``, every computed log ``v`` (``lp``, ``lq``, ``log Phi(a - r/2)``) is taken
    ``_LOG_ROUNDING (1 + |v|)`` off in the loosening direction, and ``d`` a further
    ``_LOG_ROUNDING |log gamma|`` (our error analysis: the arguments ``a -+ r/2`` carry about
    1 ulp of ``|a| + r/2``, which moves ``log Q`` by about ``(|a| + r/2)^2`` ulp, i.e. a few ulp
    of ``|v|``; the sums add 1 ulp of their operands).  The charge on ``d`` matters where
    ``theta`` is a small difference of two close tail masses (``d`` near 0): it is what keeps
    ``theta`` above its exact value there (numerically checked against mpmath; a plain
    evaluation was 7e-12 below it at eps = 0.21, r = 0.018).
    """
    with np.errstate(over="ignore"):   # r below ~1e-308 log(gamma): a = inf, theta = 0 (exact)
        a = log_gamma / r
    half = r / 2
    lp = log_ndtr(half - a)
    lq = log_ndtr(-a - half)
    log_below = log_ndtr(a - half)
    with np.errstate(invalid="ignore"):   # lp = lq = -inf: NaN, replaced by -inf below
        d = log_gamma + lq - lp
    if outward:   # (an infinite log is an exact 0 or 1 and is charged nothing)
        d = d - _rounding_charge(3.0, lp, lq, log_gamma)
        lp = lp + _rounding_charge(1.0, lp)
        log_below = log_below - _rounding_charge(1.0, log_below)
        lq = lq - _rounding_charge(2.0, lq, log_gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_theta = np.minimum(lp, 0.0) + np.log(-np.expm1(np.minimum(d, 0.0)))
    # Q(a - r/2) underflows to 0 (lp = -inf) for log(gamma) beyond ~1e154 r: then lq = -inf too,
    # the difference above is NaN, and theta <= Q(a - r/2) = 0
    log_theta = np.where(lp == -np.inf, -np.inf, log_theta)
    log_comp = np.logaddexp(log_below, log_gamma + lq)
    return log_theta, log_comp


def hockey_stick_gaussian(gamma, r):
    """``theta_gamma(r) = E_gamma(N(r, 1) || N(0, 1))``, vectorised (numpy broadcasting).

    ``theta_gamma(r) = Q(log(gamma)/r - r/2) - gamma Q(log(gamma)/r + r/2)`` with ``Q`` the standard
    normal tail (the Gaussian mechanism's privacy curve, Balle & Wang 2018, arXiv:1805.06530,
    Thm 8, with ``gamma = e^eps``; Sordello, Bu, Dong 2021, arXiv:2106.11767, eq. 1.4).  Evaluated in log space with
    ``scipy.special.log_ndtr``, so it keeps full relative accuracy deep in both tails.

    ``gamma > 0`` (``inf`` allowed), ``r >= 0`` (``inf`` allowed); returns a float for scalar
    inputs, else an array.

    Example::

        >>> round(hockey_stick_gaussian(1.0, 1.0), 6)   # total variation of N(1,1), N(0,1)
        0.382925
    """
    scalar = np.ndim(gamma) == 0 and np.ndim(r) == 0
    try:
        g = np.asarray(gamma, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError("gamma", gamma, "numbers > 0 (gamma = e^eps)") from None
    try:
        rr = np.asarray(r, dtype=float)
    except (TypeError, ValueError):
        raise ParameterError("r", r, "numbers >= 0") from None
    if np.any(np.isnan(g)) or np.any(g <= 0):
        raise ParameterError("gamma", gamma, "numbers > 0 (gamma = e^eps)")
    if np.any(np.isnan(rr)) or np.any(rr < 0):
        raise ParameterError("r", r, "numbers >= 0 (the shift in noise standard deviations)")
    with np.errstate(divide="ignore"):
        log_theta, _ = _log_theta_pair(np.log(g), rr)
    return _scalar_or_array(np.exp(log_theta), scalar)


# -- A and B --------------------------------------------------------------------------------------
def gaussian_step_divergence(epsilon, lipschitz: float, sigma):
    """A for Gaussian noise: ``theta_{e^eps}(2 L / sigma)`` (Sordello, Bu, Dong 2021, eq. 1.4).

    ``sigma`` is the standard deviation of the noise added to the gradient (the iterate gets
    ``eta sigma``); arrays of ``epsilon`` and ``sigma`` broadcast.

    Example::

        >>> round(gaussian_step_divergence(1.0, lipschitz=1.0, sigma=2.0), 4)
        0.1269
    """
    scalar = np.ndim(epsilon) == 0 and np.ndim(sigma) == 0
    eps = _epsilons(epsilon)
    L = check_positive("lipschitz", lipschitz)
    s = _positive_array("sigma", sigma)
    with np.errstate(over="ignore"):
        r = 2 * L / s
    log_a, _ = _log_theta_pair(eps, r)
    return _scalar_or_array(np.exp(log_a), scalar)


def gaussian_contraction_coefficient(epsilon, diameter: float, learning_rate: float, sigma,
                                     contraction: float = 1.0):
    """B for Gaussian noise: ``theta_{e^eps}(M D_K / (eta sigma))`` (Sordello, Bu, Dong 2021, eq. 1.4; Asoodeh et al.
    2020: the E_gamma contraction coefficient of ``w -> Pi_K(psi(w) + eta Z)``).

    Example::

        >>> round(gaussian_contraction_coefficient(1.0, 2.0, 0.5, 2.0), 4)
        0.5099
    """
    scalar = np.ndim(epsilon) == 0 and np.ndim(sigma) == 0
    eps = _epsilons(epsilon)
    D = check_positive("diameter", diameter)
    eta = check_positive("learning_rate", learning_rate)
    M = check_positive("contraction", contraction)
    s = _positive_array("sigma", sigma)
    with np.errstate(over="ignore"):
        r = M * D / (eta * s)
    log_b, _ = _log_theta_pair(eps, r)
    return _scalar_or_array(np.exp(log_b), scalar)


def _laplace_exponent(epsilon: np.ndarray, shift_over_scale: np.ndarray) -> np.ndarray:
    """``min(eps/2 - shift/(2 scale), 0)``: ``E_{e^eps}(Lap(shift, scale) || Lap(0, scale))
    = 1 - e^(that)`` (the hockey-stick divergence of two Laplace laws, valid for eps >= 0)."""
    return np.minimum(epsilon / 2 - shift_over_scale / 2, 0.0)


def laplace_step_divergence(epsilon, lipschitz: float, scale):
    """A for Laplace noise (1-D): ``(1 - e^(eps/2 - L/v))_+`` (Sordello, Bu, Dong 2021, eq. 1.5); ``v`` = ``scale`` is
    the Laplace scale of the gradient noise (the iterate gets ``eta v``).

    Example::

        >>> round(laplace_step_divergence(0.5, lipschitz=1.0, scale=1.0), 4)
        0.5276
    """
    scalar = np.ndim(epsilon) == 0 and np.ndim(scale) == 0
    eps = _epsilons(epsilon)
    L = check_positive("lipschitz", lipschitz)
    v = _positive_array("scale", scale)
    with np.errstate(over="ignore"):
        shift = 2 * L / v
    return _scalar_or_array(-np.expm1(_laplace_exponent(eps, shift)), scalar)


def laplace_contraction_coefficient(epsilon, interval_length: float, learning_rate: float, scale,
                                    contraction: float = 1.0):
    """B for Laplace noise on ``K = [a, b]``: ``(1 - e^(eps/2 - M (b - a) / (2 eta v)))_+``
    (Sordello, Bu, Dong 2021, eq. 1.5); ``interval_length = b - a = D_K``.

    Example::

        >>> round(laplace_contraction_coefficient(0.5, 1.0, 0.5, 1.0), 4)
        0.5276
    """
    scalar = np.ndim(epsilon) == 0 and np.ndim(scale) == 0
    eps = _epsilons(epsilon)
    D = check_positive("interval_length", interval_length)
    eta = check_positive("learning_rate", learning_rate)
    M = check_positive("contraction", contraction)
    v = _positive_array("scale", scale)
    with np.errstate(over="ignore"):
        shift = M * D / (eta * v)
    return _scalar_or_array(-np.expm1(_laplace_exponent(eps, shift)), scalar)


# -- the setting ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class PNSGDSetting:
    """The constants of a PNSGD run that do not change from step to step.

    lipschitz : L, bound on the norm of every per-example gradient (the clipping norm).
    diameter : D_K, the diameter of the constraint set K (``b - a`` for Laplace on ``[a, b]``).
    learning_rate : eta.
    contraction : M, Lipschitz constant of the gradient step ``w -> w - eta grad l(w, x)``
        (1 for convex beta-smooth losses with ``eta <= 2/beta``).
    noise : ``"gaussian"`` (any dimension) or ``"laplace"`` (1-D only).

    Example::

        >>> PNSGDSetting(lipschitz=1.0, diameter=2.0, learning_rate=0.1).noise
        'gaussian'
    """

    lipschitz: float
    diameter: float
    learning_rate: float
    contraction: float = 1.0
    noise: str = "gaussian"

    def __post_init__(self) -> None:
        object.__setattr__(self, "lipschitz", check_positive("lipschitz", self.lipschitz))
        object.__setattr__(self, "diameter", check_positive("diameter", self.diameter))
        object.__setattr__(self, "learning_rate",
                           check_positive("learning_rate", self.learning_rate))
        object.__setattr__(self, "contraction", check_positive("contraction", self.contraction))
        check_choice("noise", self.noise, NOISES)

    @property
    def step_shift(self) -> float:
        """``M D_K / eta``: the largest distance between two gradient steps, over eta."""
        return self.contraction * self.diameter / self.learning_rate

    def log_terms(self, epsilon: np.ndarray, scales: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(log A, log B, log(1 - B))`` on the grid ``epsilon[:, None] x scales[None, :]``,
        rounded outward (A and B up, ``1 - B`` down: the profiles increase in A and B, so they
        stay upper bounds; see :func:`_log_theta_pair_regular`)."""
        eps = np.asarray(epsilon, dtype=float)[:, None]
        s = np.asarray(scales, dtype=float)[None, :]
        # (a noise scale near 1e-308 makes the shifts overflow to inf: A = B = 1 exactly, and
        # numpy's overflow warning leaked to the user)
        with np.errstate(divide="ignore", over="ignore"):
            if self.noise == "gaussian":
                log_a, _ = _log_theta_pair(eps, 2 * self.lipschitz / s, outward=True)
                log_b_direct, log_comp = _log_theta_pair(eps, self.step_shift / s, outward=True)
            else:
                shift_a, shift_b = 2 * self.lipschitz / s, self.step_shift / s
                # (the exponent eps/2 - shift/2 cancels near eps = shift: charge its rounding)
                log_a = np.log(-np.expm1(_laplace_exponent(
                    eps - _rounding_charge(1.0, eps, shift_a), shift_a)))
                log_comp = _laplace_exponent(eps - _rounding_charge(1.0, eps, shift_b), shift_b)
                log_b_direct = np.log(-np.expm1(log_comp))
            # B close to 1: log B = log1p(-(1 - B)) from the accurate complement
            near_one = log_comp < _LOG_HALF
            log_b = np.where(near_one, np.log1p(-np.exp(np.minimum(log_comp, _LOG_HALF))),
                             log_b_direct)
        return log_a, log_b, log_comp


# -- one pass: the four variants ------------------------------------------------------------------
def _mul(count, log_b):
    """``count * log_b`` with ``0 * -inf = 0`` (B^0 = 1 even when B = 0)."""
    count = np.asarray(count)
    with np.errstate(invalid="ignore"):
        return np.where(count == 0, 0.0, count * log_b)


def _log_geometric(counts, log_b, log_comp):
    """``log sum_{k<m} B^k = log((1 - B^m) / (1 - B))``, stable as B -> 1 (then -> log m).

    Where ``1 - B`` is below ``exp(_LOG_COMP_NEGLIGIBLE)`` the sum is taken as its upper bound ``m``: it is
    within a factor ``1 - m (1 - B)`` of it, while ``log B`` itself would come from a subnormal
    ``1 - B`` with a few digits only (that put the shuffled profile 1e-12 below its exact value at
    ``1 - B = 1e-313``; numerically checked against mpmath)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.log(-np.expm1(_mul(counts, log_b))) - log_comp
    return np.where((log_b == 0) | (log_comp < _LOG_COMP_NEGLIGIBLE),
                    np.log(np.broadcast_to(counts, out.shape).astype(float)), out)


def _suffix_exclusive(x: np.ndarray) -> np.ndarray:
    """``out[:, k] = sum_{j>k} x[:, j]`` without subtraction (keeps -inf exact)."""
    out = np.zeros_like(x)
    if x.shape[1] > 1:
        out[:, :-1] = np.cumsum(x[:, :0:-1], axis=1)[:, ::-1]
    return out


def _log_delta(variant: str, log_a, log_b, log_comp, counts, n: int, position, as_stated: bool):
    """log delta for one chunk of epsilons; all arrays (E, R)."""
    later = _suffix_exclusive(_mul(counts[None, :], log_b))  # log prod of B over later runs
    if variant == "shuffled":
        terms = log_a + _log_geometric(counts[None, :], log_b, log_comp) + later
        with np.errstate(divide="ignore"):
            return logsumexp(terms, axis=1) - math.log(n)
    if variant in ("fixed_position", "online") and position is not None:
        ends = np.cumsum(counts)
        if position > ends[-1]:
            return np.full(log_a.shape[0], -np.inf)  # the record has not been used yet
        k = int(np.searchsorted(ends, position))
        after = int(ends[k] - position)
        return log_a[:, k] + _mul(after, log_b[:, k]) + later[:, k]
    if variant == "online":  # worst record: the last step of some run (B <= 1)
        return np.max(log_a + later, axis=1)
    # randomly stopped, T uniform on {1..n}; sum(counts) == n
    if as_stated:
        return log_a[:, 0] - math.log(n) - log_comp[:, 0]
    log_g = _log_geometric(counts[None, :], log_b, log_comp)
    runs = log_a.shape[1]
    log_w = np.full(log_a.shape, -np.inf)  # W_k = sum over later stopping times (see docstring)
    for k in range(runs - 2, -1, -1):
        log_w[:, k] = np.logaddexp(log_b[:, k + 1] + log_g[:, k + 1],
                                   _mul(counts[k + 1], log_b[:, k + 1]) + log_w[:, k + 1])
    at_run_end = np.logaddexp(0.0, log_w)  # G(1) + B^0 W
    at_run_start = np.logaddexp(log_g, _mul(counts[None, :] - 1, log_b) + log_w)  # G(m) + B^(m-1) W
    return np.max(log_a + np.maximum(at_run_end, at_run_start), axis=1) - math.log(n)


def _evaluate(variant: str, setting: PNSGDSetting, epsilon: np.ndarray, scales: np.ndarray,
              counts: np.ndarray, n: int, position=None, as_stated: bool = False) -> np.ndarray:
    eps = np.atleast_1d(epsilon)
    out = np.empty(eps.shape)
    step = max(1, _CHUNK // max(1, scales.size))
    for start in range(0, eps.size, step):
        chunk = eps[start:start + step]
        log_a, log_b, log_comp = setting.log_terms(chunk, scales)
        log_delta = _log_delta(variant, log_a, log_b, log_comp, counts, n, position, as_stated)
        # the sums, products and logsumexp above add a few ulp of their terms' magnitudes; the
        # terms are logs of numbers <= 1 except the geometric sums (<= log n) and the 1/n, so
        # they are at most |log delta| + 3 log n in size (our bound, see _LOG_ROUNDING)
        log_delta = log_delta + _rounding_charge(4.0 + 3.0 * math.log(n), log_delta)
        value = np.exp(log_delta)
        # below the normal range exp rounds to a multiple of 5e-324: take the next one up
        out[start:start + step] = np.where((value < _TINY) & (log_delta > -np.inf),
                                           np.nextafter(value, np.inf), value)
    return np.minimum(out, 1.0) if not as_stated else out


def _check_setting(setting) -> PNSGDSetting:
    if not isinstance(setting, PNSGDSetting):
        raise ParameterError("setting", setting, "a PNSGDSetting")
    return setting


def delta_fixed_position(epsilon, setting: PNSGDSetting, noise_scale, dataset_size: int,
                         position: int, *, counts=None):
    """delta(eps) when the differing record is at step ``position`` of the pass:
    ``A B^(n - i)`` (Sordello, Bu, Dong 2021, arXiv:2106.11767, Thm 1, after Asoodeh et al. 2020), or ``A_i prod_{t>i} B_t`` with a
    per-step schedule (Sordello, Bu, Dong 2021, eq. 6.1).  ``position`` is 1-based; a position beyond the recorded
    steps gives 0 (the record has not influenced the output).

    ``noise_scale`` is sigma (Gaussian) or v (Laplace) on the gradient, a number (constant for the
    whole pass of ``dataset_size`` steps) or a 1-D array (one per run of ``counts`` steps; without
    ``counts``, one per step).

    Example::

        >>> s = PNSGDSetting(lipschitz=1.0, diameter=2.0, learning_rate=0.5)
        >>> a_only = delta_fixed_position(1.0, s, 2.0, dataset_size=10, position=10)
        >>> round(a_only, 4)    # the last record: A
        0.1269
    """
    scalar = np.ndim(epsilon) == 0
    eps = _epsilons(epsilon)
    setting = _check_setting(setting)
    n = check_count("dataset_size", dataset_size, minimum=1)
    i = check_count("position", position, minimum=1)
    if i > n:
        raise ParameterError("position", position, f"an integer in [1, dataset_size={n}]")
    scales, counts_arr = _runs(noise_scale, counts, n)
    return _scalar_or_array(_evaluate("fixed_position", setting, eps, scales, counts_arr, n, i),
                            scalar)


def delta_randomly_stopped(epsilon, setting: PNSGDSetting, noise_scale, dataset_size: int, *,
                           counts=None, as_stated: bool = False):
    """delta(eps) of randomly stopped PNSGD (Asoodeh et al. 2020, Thm 5): the output is ``w_T``
    with ``T`` uniform on ``{1, ..., n}``.

    Default: the bound the proof gives, ``max_i A (1 - B^(n-i+1)) / (n (1 - B))
    = A (1 - B^n) / (n (1 - B))`` (Sordello, Bu, Dong 2021, arXiv:2106.11767, Sec. 2, point out
    the factor).  ``as_stated=True``:
    the theorem's ``A / (n (1 - B))`` (constant noise only; may exceed 1).

    Per-step schedule: for the record at position i, averaging over T and the strong data
    processing inequality give ``(1/n) sum_{T >= i} A_i prod_{i<t<=T} B_t``.  Inside a run of
    constant noise this is monotone in the position, so the maximum over i is attained at the
    first or last step of a run; the sum over later stopping times is accumulated run by run.  The
    schedule must cover the whole pass (``sum(counts) == dataset_size``).

    Example::

        >>> s = PNSGDSetting(lipschitz=1.0, diameter=2.0, learning_rate=0.5)
        >>> d = delta_randomly_stopped(1.0, s, 2.0, dataset_size=1000)
        >>> d == delta_shuffled(1.0, s, 2.0, dataset_size=1000)
        True
    """
    scalar = np.ndim(epsilon) == 0
    eps = _epsilons(epsilon)
    setting = _check_setting(setting)
    n = check_count("dataset_size", dataset_size, minimum=1)
    scales, counts_arr = _runs(noise_scale, counts, n)
    if counts_arr.sum() != float(n):
        raise ParameterError("counts", counts, f"summing to dataset_size={n}: randomly stopped "
                             "PNSGD draws its stopping time from the whole pass")
    if as_stated and scales.size > 1 and np.any(scales != scales[0]):
        raise ParameterError("as_stated", as_stated, "False for a per-step noise schedule "
                             "(Asoodeh et al. state Thm 5 for constant noise)")
    if as_stated:
        scales, counts_arr = scales[:1], np.array([float(n)])
    return _scalar_or_array(_evaluate("randomly_stopped", setting, eps, scales, counts_arr, n,
                                      as_stated=as_stated), scalar)


def delta_shuffled(epsilon, setting: PNSGDSetting, noise_scale, dataset_size: int, *,
                   counts=None):
    """delta(eps) of shuffled PNSGD: ``A (1 - B^n) / (n (1 - B))`` (Sordello, Bu, Dong 2021, Thm 2, eq. 3.1).

    The data are shuffled uniformly, so the differing record sits at each position with
    probability 1/n; joint convexity of E_gamma averages the fixed-position bounds.  With a
    per-step schedule: ``(1/n) sum_i A_i prod_{t>i} B_t``.  A partial pass (``sum(counts) = r < n``:
    a uniform permutation of all n records stopped after r steps) gives
    ``A (1 - B^r) / (n (1 - B))`` by the same argument (records not reached contribute 0).

    Example::

        >>> s = PNSGDSetting(lipschitz=1.0, diameter=2.0, learning_rate=0.5)
        >>> round(delta_shuffled(1.0, s, 2.0, dataset_size=1000), 7)
        0.000259
    """
    scalar = np.ndim(epsilon) == 0
    eps = _epsilons(epsilon)
    setting = _check_setting(setting)
    n = check_count("dataset_size", dataset_size, minimum=1)
    scales, counts_arr = _runs(noise_scale, counts, n)
    return _scalar_or_array(_evaluate("shuffled", setting, eps, scales, counts_arr, n), scalar)


def delta_online(epsilon, setting: PNSGDSetting, noise_scale, dataset_size: int, *,
                 counts=None, position: int | None = None):
    """delta(eps) of online PNSGD with per-step noise: ``A_i prod_{t=i+1}^{n} B_t`` for the record
    at step i (Sordello, Bu, Dong 2021, eq. 6.1); ``position=None`` gives the guarantee for *every* record, the
    maximum over i (attained at the last step of a run of constant noise; with constant or
    decreasing noise it is the last record's ``A_n`` -- no amplification for the newest record).

    Example::

        >>> s = PNSGDSetting(lipschitz=1.0, diameter=2.0, learning_rate=0.5)
        >>> sig = np.array([4.0, 3.0, 2.0])
        >>> round(delta_online(1.0, s, sig, dataset_size=3, position=1), 6)
        0.000884
    """
    scalar = np.ndim(epsilon) == 0
    eps = _epsilons(epsilon)
    setting = _check_setting(setting)
    n = check_count("dataset_size", dataset_size, minimum=1)
    if position is not None:
        position = check_count("position", position, minimum=1)
        if position > n:
            raise ParameterError("position", position, f"an integer in [1, dataset_size={n}]")
    scales, counts_arr = _runs(noise_scale, counts, n)
    return _scalar_or_array(_evaluate("online", setting, eps, scales, counts_arr, n, position),
                            scalar)


_DELTA_FUNCTIONS = {
    "fixed_position": delta_fixed_position,
    "randomly_stopped": delta_randomly_stopped,
    "shuffled": delta_shuffled,
    "online": delta_online,
}


def privacy_profile(variant: str, setting: PNSGDSetting, noise_scale, dataset_size: int, *,
                    counts=None, position: int | None = None
                    ) -> Callable[[np.ndarray], np.ndarray]:
    """The privacy profile ``eps -> delta(eps)`` of one pass, as a vectorised callable.

    Validates once; the callable maps an array of eps >= 0 to upper bounds on delta (the format
    ``PrivacyLossDistribution.from_privacy_profile`` takes, so passes compose by FFT).
    ``position`` is required for ``"fixed_position"`` and optional for ``"online"``.

    Example::

        >>> from dpplugins.pld import PrivacyLossDistribution
        >>> s = PNSGDSetting(lipschitz=1.0, diameter=2.0, learning_rate=0.5)
        >>> one_pass = privacy_profile("shuffled", s, 2.0, 1000)
        >>> pld = PrivacyLossDistribution.from_privacy_profile(
        ...     one_pass, value_discretization_interval=1e-3).self_compose(5)
    """
    check_choice("variant", variant, VARIANTS)
    setting = _check_setting(setting)
    n = check_count("dataset_size", dataset_size, minimum=1)
    kwargs = {"counts": counts}
    if variant == "fixed_position":
        if position is None:
            raise ParameterError("position", position, "an integer in [1, dataset_size] for the "
                                 "fixed-position bound")
        kwargs["position"] = position
    elif variant == "online":
        kwargs["position"] = position
    fn = _DELTA_FUNCTIONS[variant]
    fn(np.zeros(1), setting, noise_scale, n, **kwargs)  # validate now, not inside the PLD engine

    def profile(epsilon):
        return fn(np.asarray(epsilon, dtype=float), setting, noise_scale, n, **kwargs)

    profile.__doc__ = f"delta(eps) of one pass of {variant} PNSGD ({setting})"
    return profile


def epsilon_for_delta(profile: Callable[[np.ndarray], np.ndarray], delta: float, *,
                      relative_tolerance: float = 1e-10, epsilon_limit: float = 1e4) -> float:
    """Smallest eps (to ``relative_tolerance``, rounded *up*) with ``profile(eps) <= delta``.

    Bisection on the non-increasing profile (A and B are non-increasing in eps, so every variant
    is), by :func:`dpplugins.numerics.smallest_epsilon`.  The returned eps is an evaluated point where the profile is at most ``delta``, so the
    (eps, delta) statement holds for it.  Raises :class:`NumericalError` if the profile stays above
    ``delta`` up to ``epsilon_limit``.

    Example::

        >>> s = PNSGDSetting(lipschitz=1.0, diameter=2.0, learning_rate=0.5)
        >>> round(epsilon_for_delta(privacy_profile("shuffled", s, 2.0, 1000), 1e-5), 3)
        2.439
    """
    delta = check_open_unit("delta", delta)
    tol = check_positive("relative_tolerance", relative_tolerance)
    limit = check_positive("epsilon_limit", epsilon_limit)

    def value(eps: float) -> float:
        return float(np.asarray(profile(np.array([eps])), dtype=float)[0])

    eps = smallest_epsilon(value, delta, rtol=tol, epsilon_max=limit)
    if eps == math.inf:
        raise NumericalError(f"the privacy profile stays above delta={delta:g} up to "
                             f"eps={limit:g}", "raise delta or epsilon_limit, or add noise")
    return eps


# -- noise-decay schedules (SBD21 Thms 3-4 and the online variant) --------------------------------
def shuffled_limit_delta(x):
    """``(1 - e^(-x)) / x``: the limit of the shuffled bound (3.1) when ``n (1 - B) -> x`` and
    ``A -> 1`` (``(1 - (1 - x/n)^n) / x -> (1 - e^(-x)) / x``).  Decreasing from 1 (x -> 0) to 0.

    Example::

        >>> round(shuffled_limit_delta(1.0), 6)
        0.632121
    """
    scalar = np.ndim(x) == 0
    x = _positive_array("x", x)
    return _scalar_or_array(-np.expm1(-x) / x, scalar)


def shuffled_limit_constant(target_delta: float) -> float:
    """The x > 0 with ``(1 - e^(-x)) / x = target_delta`` (bisection on the decreasing map,
    :func:`dpplugins.numerics.smallest_epsilon`; the smallest x where the map is at most the
    target).

    Example::

        >>> round(shuffled_limit_constant(0.632120558828558), 9)
        1.0
    """
    target = check_open_unit("target_delta", target_delta)
    return smallest_epsilon(lambda x: -math.expm1(-x) / x if x > 0 else 1.0, target,
                            rtol=1e-300)   # to float resolution


def _gaussian_radius_for_complement(log_target: np.ndarray, epsilon: float) -> np.ndarray:
    """Vectorised: the r > 0 with ``log(1 - theta_{e^eps}(r)) = log_target`` (bisection in log r;
    ``1 - theta`` decreases from 1 at r = 0 to 0 as r -> inf for eps >= 0)."""
    log_target = np.asarray(log_target, dtype=float)
    lo = np.full(log_target.shape, math.log(1e-12))
    hi = np.full(log_target.shape, math.log(1e4))
    _, c_lo = _log_theta_pair(epsilon, np.exp(lo))
    _, c_hi = _log_theta_pair(epsilon, np.exp(hi))
    if np.any(c_lo < log_target) or np.any(c_hi > log_target):
        raise NumericalError("no noise level in [1e-12, 1e4] noise standard deviations reaches "
                             "the requested contraction", "choose a target_delta in (1e-300, 1)")
    for _ in range(80):
        mid = 0.5 * (lo + hi)
        _, c_mid = _log_theta_pair(epsilon, np.exp(mid))
        above = c_mid > log_target  # complement too large: r too small
        lo = np.where(above, mid, lo)
        hi = np.where(above, hi, mid)
    return np.exp(0.5 * (lo + hi))


def _scale_for_complement(setting: PNSGDSetting, epsilon: float, log_complement: np.ndarray
                          ) -> np.ndarray:
    """Noise scale (sigma or v) at which ``1 - B = exp(log_complement)`` at ``epsilon``."""
    if setting.noise == "laplace":
        # 1 - B = exp(eps/2 - M D / (2 eta v))  =>  v = M D / (eta (eps - 2 log(1 - B)))
        return setting.step_shift / (epsilon - 2 * log_complement)
    return setting.step_shift / _gaussian_radius_for_complement(log_complement, epsilon)


def shuffled_noise_for_limit(dataset_size: int, *, setting: PNSGDSetting, epsilon: float,
                             target_delta: float) -> float:
    """The noise level of Sordello, Bu, Dong 2021 (arXiv:2106.11767) Thms 3 (Laplace) and 4
    (Gaussian): sigma(n) or v(n) such that
    the shuffled bound (3.1) at ``epsilon`` tends to ``target_delta`` as ``n -> inf``.

    We did not have the displayed statements of Thms 3-4; this is our derivation from (3.1).  With ``x`` solving ``(1 - e^(-x))/x = target_delta`` (:func:`shuffled_limit_constant`)
    the noise is chosen so that ``n (1 - B) = x`` exactly at ``epsilon``; then
    ``delta_n = A_n (1 - (1 - x/n)^n) / x -> (1 - e^(-x)) / x`` because ``A_n -> 1`` as the noise
    vanishes (``L > 0``).

    * Laplace (Thm 3): ``v(n) = M (b - a) / (2 eta log(n / c))`` with ``c = x e^(-eps/2)``.
    * Gaussian (Thm 4): ``sigma(n) = M D_K / (eta r_n)`` with ``1 - theta_{e^eps}(r_n) = x / n``,
      solved numerically; asymptotically
      ``r_n^2 = 8 log n - 4 log log n - 8 log(c sqrt(pi)) + o(1)``
      (:func:`gaussian_shuffled_radius_asymptotic`), i.e.
      ``sigma(n) ~ M D_K / (eta sqrt(8 log n))``.

    Conditions (checked): ``0 < target_delta < 1``, ``epsilon >= 0``, and ``n > x`` so that
    ``1 - B = x/n < 1`` is reachable with finite noise.

    Example::

        >>> s = PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=1.0, noise="laplace")
        >>> v = shuffled_noise_for_limit(10_000, setting=s, epsilon=1.0, target_delta=0.5)
    """
    setting = _check_setting(setting)
    n = check_count("dataset_size", dataset_size, minimum=1)
    eps = check_nonnegative("epsilon", epsilon)
    x = shuffled_limit_constant(target_delta)
    if n <= x:
        raise ParameterError("dataset_size", n, f"> x = {x:.6g}, the constant with "
                             f"(1 - e^-x)/x = target_delta (so that 1 - B = x/n < 1)",
                             "raise target_delta or use more data")
    return float(_scale_for_complement(setting, eps, np.array([math.log(x / n)]))[0])


def gaussian_shuffled_radius_asymptotic(dataset_size, *, epsilon: float, target_delta: float):
    """``r_n^2 ~ 8 log n - 4 log log n - 8 log(c sqrt(pi))``, ``c = x e^(-eps/2)``: the closed-form
    rate behind :func:`shuffled_noise_for_limit` for Gaussian noise
    (``sigma(n) = M D_K / (eta r_n)``).

    Derivation: for large r, ``1 - theta_{e^eps}(r) ~ (4 / (r sqrt(2 pi))) e^(eps/2) e^(-r^2/8)``
    (Mills ratio for both tails); setting it equal to ``x/n`` and solving for r^2 up to o(1).
    Returns ``r_n`` (NaN where the right-hand side is not positive).

    Example::

        >>> r = gaussian_shuffled_radius_asymptotic(10**6, epsilon=1.0, target_delta=0.5)
    """
    scalar = np.ndim(dataset_size) == 0
    n = np.asarray(dataset_size, dtype=float)
    if np.any(~np.isfinite(n)) or np.any(n < 3):
        raise ParameterError("dataset_size", dataset_size, "numbers >= 3 (log log n > 0)")
    eps = check_nonnegative("epsilon", epsilon)
    c = shuffled_limit_constant(target_delta) * math.exp(-eps / 2)
    r2 = 8 * np.log(n) - 4 * np.log(np.log(n)) - 8 * math.log(c * math.sqrt(math.pi))
    with np.errstate(invalid="ignore"):
        out = np.where(r2 > 0, np.sqrt(np.maximum(r2, 0.0)), np.nan)
    return _scalar_or_array(out, scalar)


#: explicit terms of the infinite product before the zeta-function tail
_PRODUCT_TERMS = 100_000


def _log_tail_product(x: float, exponent: float, position: int) -> float:
    """``log prod_{t > position} (1 - x t^-exponent)`` (x < 1): explicit terms, then the tail
    ``sum log(1 - y) ~ -sum y`` by the Hurwitz zeta function (error <= x^2 zeta(2a) / (1 - x))."""
    t = np.arange(position + 1, position + 1 + _PRODUCT_TERMS, dtype=float)
    head = float(np.sum(np.log1p(-x * t ** (-exponent))))
    return head - x * float(zeta(exponent, position + 1 + _PRODUCT_TERMS))


def _online_checks(setting, epsilon, exponent, position):
    setting = _check_setting(setting)
    eps = check_nonnegative("epsilon", epsilon)
    alpha = check_real("exponent", exponent)
    if alpha <= 1:
        raise ParameterError("exponent", exponent, "> 1 (with exponent <= 1 the product of the "
                             "B_t tends to 0, so the bound has no positive limit)")
    i = check_count("position", position, minimum=1)
    return setting, eps, alpha, i


def online_limit_delta(x: float, *, setting: PNSGDSetting, epsilon: float, exponent: float,
                       position: int = 1) -> float:
    """``lim_{n->inf} A_i prod_{t=i+1}^{n} B_t`` (Sordello, Bu, Dong 2021, eq. 6.1) for the schedule of
    :func:`online_noise_schedule` with constant ``x`` (``1 - B_t = x t^-exponent`` at ``epsilon``).

    Example::

        >>> s = PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=1.0)
        >>> d = online_limit_delta(0.5, setting=s, epsilon=1.0, exponent=2.0)
    """
    setting, eps, alpha, i = _online_checks(setting, epsilon, exponent, position)
    x = check_open_unit("x", x)
    scale = _scale_for_complement(setting, eps, np.array([math.log(x) - alpha * math.log(i)]))
    log_a, _, _ = setting.log_terms(np.array([eps]), scale)
    return float(np.exp(log_a[0, 0] + _log_tail_product(x, alpha, i)))


def online_noise_schedule(steps: int, *, setting: PNSGDSetting, epsilon: float,
                          target_delta: float, exponent: float, position: int = 1) -> np.ndarray:
    """Per-step noise ``sigma_t`` (Gaussian) or ``v_t`` (Laplace), ``t = 1..steps``, for online
    PNSGD, such that the bound (6.1) for the record at ``position`` tends to ``target_delta`` as the
    stream grows.

    Sordello, Bu, Dong 2021 (arXiv:2106.11767, Sec. 6) keep the decay rates of Thms 3-4 with ``log n`` replaced by
    ``exponent * log t``, ``exponent > 1``; its statement was lost in extraction and this is the
    re-derivation: choose ``1 - B_t = x t^-exponent`` at ``epsilon`` (Laplace:
    ``v_t = M (b - a) / (2 eta log(t^exponent / c))``, ``c = x e^(-eps/2)``; Gaussian: solved for
    ``sigma_t``, asymptotically ``M D_K / (eta sqrt(8 exponent log t))``).  Then
    ``prod_{t>i} B_t`` converges to a positive limit iff ``sum t^-exponent < inf``, i.e.
    ``exponent > 1``, and ``delta_i -> A_i prod_{t>i}^inf B_t`` (:func:`online_limit_delta`), which
    decreases in x; x in (0, 1) is found by bisection.  This chooses a schedule; the accountant
    certifies whatever schedule was actually run.

    Conditions (checked): ``exponent > 1``; ``0 < target_delta < 1``; the target must be reachable
    at this position (for ``position > 1`` there is a positive floor; the error states it).

    Example::

        >>> s = PNSGDSetting(lipschitz=1.0, diameter=1.0, learning_rate=1.0)
        >>> sig = online_noise_schedule(1000, setting=s, epsilon=1.0, target_delta=0.1,
        ...                             exponent=2.0)
    """
    setting, eps, alpha, i = _online_checks(setting, epsilon, exponent, position)
    steps = check_count("steps", steps, minimum=1)
    target = check_open_unit("target_delta", target_delta)
    x_max = 1 - 1e-12  # 1 - B_1 = x must stay below 1

    def limit(x: float) -> float:
        return online_limit_delta(x, setting=setting, epsilon=eps, exponent=alpha, position=i)

    floor = limit(x_max)
    if target <= floor:
        raise ParameterError("target_delta", target_delta,
                             f"> {floor:.6g}, the smallest limit reachable for position {i} with "
                             f"exponent {alpha:g}", "use a larger target or position=1")
    # limit(x -> 0) -> 1 > target > limit(x_max); limit decreasing in x: the smallest x with
    # limit(x) <= target, by bisection (dpplugins.numerics.smallest_epsilon)
    x = smallest_epsilon(lambda v: limit(v) if v > 0 else math.inf, target, hi=x_max,
                         rtol=1e-14)
    t = np.arange(1, steps + 1, dtype=float)
    log_comp = np.log(x) - alpha * np.log(t)
    return _scale_for_complement(setting, eps, log_comp)
