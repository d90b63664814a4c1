"""Privacy amplification by random check-ins, as pure functions.

Source: B. Balle, P. Kairouz, H. B. McMahan, O. Thakkar, A. Thakurta, "Privacy Amplification via
Random Check-Ins", NeurIPS 2020 (arXiv:2007.06605).
Notation: ``eps0`` / ``delta0`` is the local randomizer's guarantee, ``n`` the number of clients
(examples), ``m`` the number of check-in slots (or the window of the sliding-window protocol),
``p0`` the check-in probability.  ``log`` is natural.  The neighbouring relation is the paper's:
*replace one* client's data (Sec. 2).

Every theorem here has the shape ``eps(delta) = B + A sqrt(log(1/delta))`` for every delta in
(0, 1), so it is a whole privacy profile; the ``*_profile`` functions return its exact inverse
``delta(eps) = exp(-((eps - B) / A)^2)`` (1 for ``eps <= B``) as a vectorised callable, which
:meth:`dpplugins.pld.PrivacyLossDistribution.from_privacy_profile` turns into a dominating PLD, so
repeated protocol runs compose by FFT (pessimistic connect-the-dots: Doroshenko, Ghazi,
Kamath, Kumar, Manurangsi 2022, arXiv:2207.04380).

Which formulas we trust (the text of the paper we worked from lost some displayed formulas):

* Thm 3.2 and Thm 4.3: stated in full in the paper.  We re-derived both from
  Lemma A.2 with ``a = w (e^eps0 - 1)``, ``b = 1 - e^-eps0``, ``k = m`` (proof of Thm A.4;
  ``w = p0`` for A_fix, ``w = 1`` for the sliding window):
  ``a^2 / (2k(1-b)) = w^2 e^eps0 (e^eps0-1)^2 / (2m)`` and
  ``sqrt(2 a^2 log(1/delta) / (k(1-b))) = w (e^eps0-1) sqrt(2 e^eps0 log(1/delta) / m)``.
  (The proof text of Thm 3.2 in the arXiv version divides the second term by ``m`` instead of ``sqrt(m)``;
  that is a typo -- the theorem statement, Thm A.4 and the derivation all give ``sqrt(m)``.)
* Thm 4.1 (pure eps0): its display was lost in our copy; we restore it from the paper's
  approximate-DP statement by ``8 eps0 -> eps0`` (our derivation, not checked against the
  original display).  We trust the restoration: (i) the same substitution maps every
  other pure/approximate pair in the paper (Thms 3.2, 4.3, 5.1) into each other; (ii) the ratio of
  its leading term to Thm 3.2's (p0 = 1) is ``e^(2 eps0) / e^(eps0/2) = e^(3 eps0/2)``, the
  "additional O(e^(3 eps0/2)) factor" the text announces; (iii) ``eps1`` re-derives from the proof
  (Lemma A.6): ``E||L||_2 <= sqrt(n + n^2/m)`` (Jensen) and McDiarmid with bounded differences
  ``sqrt(2)`` gives ``||L||_2 <= E||L||_2 + sqrt(n log(1/delta2))`` w.p. ``1 - delta2``; divided
  by ``n`` this is ``eps1``; (iv) the brute-force tests on tiny protocols never contradict it.
* Lemma A.2: re-derived from heterogeneous advanced composition
  ``sum eps_i (e^eps_i - 1)/2 + sqrt(2 sum eps_i^2 log(1/delta))`` with ``eps_i <= a/(k - b(i-1))``
  and ``sum_i 1/(k - b(i-1))^2 <= 1/(k(1-b))`` (integral comparison); the result is also implied by
  zCDP composition (Bun & Steinke 2016, arXiv:1605.02065, Prop. 1.3 and Lemma 3.5), so it is
  sound.
* Approximate-DP local randomizers: the paper's statements (``8 eps0`` everywhere, admissible
  ``delta0`` bound, ``delta' = delta + m (e^eps' + 1) delta1``) are used as printed; this is the
  corrected version the acknowledgements mention.

Example::

    >>> from dpplugins.amplification.checkin import fixed_window_epsilon
    >>> eps, delta = fixed_window_epsilon(1.0, 1e-6, num_slots=1000, checkin_probability=0.1)
    >>> round(eps, 4)
    0.0471
"""

from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import numpy as np

from dpplugins.composition import (advanced_composition_epsilon,
                                   heterogeneous_composition_epsilon, optimal_composition_delta,
                                   optimal_composition_epsilon)
from dpplugins.errors import (ParameterError, check_choice, check_count, check_float_count,
                              check_nonnegative,
                              check_open_unit, check_positive, check_probability)
from dpplugins.numerics import smallest_epsilon
from dpplugins.profiles import pld_from_profile, profile_grid

__all__ = [
    "EpsDelta",
    "admissible_delta0",
    "delta1_for_delta0",
    "fixed_window_epsilon",
    "fixed_window_profile",
    "averaged_epsilon",
    "averaged_profile",
    "averaged_eps1",
    "sliding_window_epsilon",
    "sliding_window_profile",
    "heterogeneous_composition_epsilon",
    "optimal_composition_delta",
    "optimal_composition_epsilon",
    "advanced_composition_epsilon",
    "repeated_fixed_window_epsilon",
    "expected_dummy_updates",
    "expected_dummy_updates_bound",
    "checkin_probability_for_dummy_fraction",
    "single_participation_profile",
    "gaussian_local_delta0",
    "pass_privacy_profile",
    "profile_grid",
    "pld_from_profile",
]

Profile = Callable[[np.ndarray], np.ndarray]
# heterogeneous_composition_epsilon, optimal_composition_delta, optimal_composition_epsilon and
# advanced_composition_epsilon live in dpplugins.composition, profile_grid and pld_from_profile in
# dpplugins.profiles; they are re-exported here under their version-0.1 names

#: relative safety margin added to every epsilon and delta we report, so that floating-point
#: rounding never moves a bound in the user's favour (a few ulps would do; this is generous)
_UP = 1.0 + 1e-12
#: relative rounding of the theorems' coefficients ``A`` and ``B`` (a few ulps for each of their
#: ``exp``, ``expm1``, ``sqrt``, ``log`` and arithmetic operations: our error model)
_COEFFICIENT_ROUNDING = 32 * 2.0 ** -53
VARIANTS = ("fixed", "averaged", "sliding")


class EpsDelta(NamedTuple):
    """An (epsilon, delta)-DP statement; ``delta`` is the *total* delta of the statement."""

    epsilon: float
    delta: float


# -- small helpers -------------------------------------------------------------------------------
def _exp(x: float) -> float:
    return math.exp(x) if x < 709.0 else math.inf


def _expm1(x: float) -> float:
    return math.expm1(x) if x < 709.0 else math.inf


def _check_delta0(delta0) -> float:
    delta0 = check_nonnegative("delta0", delta0)
    if delta0 >= 1:
        raise ParameterError("delta0", delta0, "in [0, 1)")
    return delta0


def _eps_at(a: float, b: float, delta: float) -> float:
    """``b + a sqrt(log(1/delta))``, rounded up."""
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return (b + a * math.sqrt(math.log(1.0 / delta))) * _UP


def _profile_values(a: float, b: float, eps: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_eps_at`: ``exp(-((eps - b)/a)^2)`` for ``eps > b``, else 1 (rounded
    up).

    ``eps - b`` cancels where eps is near ``b``, and ``b`` carries the rounding of its
    computation (a few ulps of ``b``): against ``a`` that is ``b / a`` times larger, and ``b / a``
    grows like ``e^(3 eps0 / 2)`` (``8 eps0`` for approximate-DP randomizers).  So ``b`` and ``a``
    are rounded up by :data:`_COEFFICIENT_ROUNDING` first (both only raise the profile).  Without
    it the profile at eps0 = 10.9, m = 10, p0 = 1 was a relative 4e-9 below the exact value of
    the formula (and 0 where it is 1 at eps0 = 80), from eps0 = 5 on beyond the ``_UP`` margin
    (found by a hostile sweep against 80-digit arithmetic)."""
    eps = np.asarray(eps, dtype=float)
    if not (math.isfinite(a) and math.isfinite(b)) or a <= 0:
        return np.ones_like(eps)
    a, b = a * (1 + _COEFFICIENT_ROUNDING), b * (1 + _COEFFICIENT_ROUNDING)
    with np.errstate(over="ignore"):
        # a tiny (eps0 = 1e-300): z * z is +inf, and exp(-inf) = 0 is the exact value
        z = np.maximum(eps - b, 0.0) / a
        return np.minimum(np.exp(-z * z) * _UP, 1.0)


# -- approximate-DP randomizers: the admissible delta0 ------------------------------------------
def admissible_delta0(eps0: float, delta1: float) -> float:
    """Largest ``delta0`` the approximate-DP parts of Thms 3.2, 4.1, 4.3 allow for ``delta1``:

    ``(1 - e^-eps0) delta1 / (4 e^eps0 (2 + ln(2/delta1) / ln(1/(1 - e^(-5 eps0)))))``

    (Balle et al. 2020, Thm 3.2; the same hypothesis in Thms 4.1, 4.3, 5.1).  Increasing in
    ``delta1`` on (0, 1].

    Example::

        >>> admissible_delta0(1.0, 1e-3) < 1e-3
        True
    """
    eps0 = check_positive("eps0", eps0)
    delta1 = check_positive("delta1", delta1)
    if delta1 > 1:
        raise ParameterError("delta1", delta1, "in (0, 1]")
    return _admissible(eps0, delta1)


def _admissible(eps0: float, delta1: float) -> float:
    """The admissible ``delta0`` of :func:`admissible_delta0`, rounded down by ``_UP``.

    ``k = log(1 / (1 - e^(-5 eps0)))`` is ``-log(-expm1(-x))`` for ``x = 5 eps0`` below
    ``log 2`` (exact for a subnormal eps0, where e^(-5 eps0) rounds to 1 and log1p(-1) is a
    domain error) and ``-log1p(-exp(-x))`` above (Maechler 2012, "Accurately computing
    log(1 - exp(-|a|))"): ``-expm1(-x)`` is then within an ulp of 1, and its log had lost the
    digits of ``k`` -- at eps0 = 6.6 the bound was 0.6 % above its exact value, so the search
    of :func:`delta1_for_delta0` took a ``delta1`` the theorem does not admit (found by a hostile
    sweep against 60-digit arithmetic).  The rest is a few ulps, under ``_UP``."""
    x = 5.0 * eps0
    k = -math.log(-math.expm1(-x)) if x < math.log(2.0) else -math.log1p(-math.exp(-x))
    if k == 0.0:
        return 0.0
    return (-math.expm1(-eps0) * delta1
            / (4.0 * _exp(eps0) * (2.0 + math.log(2.0 / delta1) / k))) / _UP


def delta1_for_delta0(eps0: float, delta0: float) -> float:
    """Smallest ``delta1`` in (0, 1] with ``delta0 <= admissible_delta0(eps0, delta1)``.

    ``delta0 = 0`` gives 0; ``math.inf`` means no ``delta1 <= 1`` is admissible.  The root is found
    by Brent's method on ``log delta1`` and then moved up until the hypothesis provably holds in
    floating point, so the returned value is on the safe side.

    Example::

        >>> 0 < delta1_for_delta0(1.0, 1e-10) < 1e-5
        True
    """
    eps0 = check_positive("eps0", eps0)
    delta0 = _check_delta0(delta0)
    return _delta1(eps0, delta0)


@functools.lru_cache(maxsize=1 << 16)
def _delta1(eps0: float, delta0: float) -> float:
    # memoised: a pass profile asks for it twice per grid point (the admissibility check and
    # the theorem's profile), and the accountant builds every distinct pass's profile twice
    # (amplifies() and the PLD); 1000 passes of distinct noise took 114 s per query
    if delta0 == 0.0:
        return 0.0
    if _admissible(eps0, 1.0) < delta0:
        return math.inf
    # admissible(delta0) < delta0 / 8 < delta0, so the root is above delta0: search
    # x = log(delta1 / delta0) >= 0 for the smallest x with admissible(delta1) >= delta0
    # (dpplugins.numerics.smallest_epsilon; the returned point was checked in floating point)
    log_d0 = math.log(delta0)

    def delta1_at(x: float) -> float:
        return min(math.exp(log_d0 + x), 1.0)

    def shortfall(x: float) -> float:   # 0 where the hypothesis holds in floating point
        return 0.0 if _admissible(eps0, delta1_at(x)) >= delta0 else 1.0

    x = smallest_epsilon(shortfall, 0.5, hi=-log_d0, rtol=1e-14)
    return delta1_at(x)


def _approximate_reduction(eps0: float, delta0: float) -> tuple[float, float]:
    """The epsilon to plug into a pure theorem and the ``delta1`` of the reduction."""
    if delta0 == 0.0:
        return eps0, 0.0
    return 8.0 * eps0, _delta1(eps0, delta0)


def _check_admissible(eps: float, delta: float, slots: int, eps0: float, delta0: float,
                      delta1: float, theorem: str) -> float:
    """Total delta ``delta + m (e^eps + 1) delta1``; ParameterError if it is not below 1."""
    extra = slots * (_exp(eps) + 1.0) * delta1 if delta1 > 0 else 0.0  # inf if inadmissible
    total = (delta + extra) * _UP
    if total < 1.0:
        return total
    room = (1.0 - delta) / (slots * (_exp(eps) + 1.0)) if math.isfinite(eps) else 0.0
    bound = _admissible(eps0, min(room, 1.0)) if room > 0 else 0.0
    raise ParameterError(
        "delta0", delta0,
        f"<= {bound:.6g} for eps0={eps0:g}, delta={delta:g} and m={slots} (the admissible bound "
        f"of {theorem}: delta0 <= (1-e^-eps0) delta1 / (4 e^eps0 (2 + ln(2/delta1) / "
        f"ln(1/(1-e^(-5 eps0))))) with delta1 small enough that delta + m (e^eps' + 1) delta1 < 1, "
        f"where eps'={eps:.6g})",
        "lower delta0 (more local noise), or accept a larger delta")


# -- Theorem 3.2: A_fix ---------------------------------------------------------------------------
def _fixed_coefficients(e0: float, slots: int, p0: float) -> tuple[float, float]:
    x, ee = _expm1(e0), _exp(e0)
    b = p0 * p0 * ee * x * x / (2.0 * slots)
    a = p0 * x * math.sqrt(2.0 * ee / slots) if math.isfinite(ee) else math.inf
    return a, b


def fixed_window_epsilon(eps0: float, delta: float, num_slots: int, checkin_probability: float,
                         delta0: float = 0.0) -> EpsDelta:
    """Random check-ins with a fixed window, A_fix (Balle et al. 2020, Thm 3.2).

    Every client checks in with probability ``p0`` into a uniform slot of ``[m]``; the server uses
    one checked-in client per slot and a dummy update in an empty slot.  For an ``eps0``-DP local
    randomizer the protocol is ``(eps, delta)``-DP for every ``delta`` in (0, 1) with

    ``eps = p0 (e^eps0 - 1) sqrt(2 e^eps0 log(1/delta) / m) + p0^2 e^eps0 (e^eps0 - 1)^2 / (2m)``.

    For an ``(eps0, delta0)``-DP randomizer with ``delta0 <= admissible_delta0(eps0, delta1)`` the
    same formula holds with every ``eps0`` replaced by ``8 eps0``, and the total delta is
    ``delta + m (e^eps + 1) delta1``; we use the smallest admissible ``delta1``
    (:func:`delta1_for_delta0`), which minimises the total delta (eps does not depend on it).

    Returns ``EpsDelta(epsilon, total_delta)``.  Raises :class:`ParameterError` if ``delta0`` is
    above the admissible bound (the message states the bound).

    Example::

        >>> fixed_window_epsilon(math.log(2), math.exp(-4), 8, 0.5).epsilon  # doctest: +ELLIPSIS
        0.7383...
    """
    eps0 = check_positive("eps0", eps0)
    delta = check_open_unit("delta", delta)
    slots = check_float_count("num_slots", num_slots, minimum=1)
    p0 = check_probability("checkin_probability", checkin_probability)
    delta0 = _check_delta0(delta0)
    e0, delta1 = _approximate_reduction(eps0, delta0)
    eps = _eps_at(*_fixed_coefficients(e0, slots, p0), delta)
    return EpsDelta(eps, _check_admissible(eps, delta, slots, eps0, delta0, delta1, "Thm 3.2"))


def _smallest_of(parts: list[Profile]) -> Profile:
    """The pointwise minimum of valid privacy profiles (each an upper bound on delta(eps), so
    their minimum is one too), 1 where ``parts`` is empty."""
    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        out = np.ones_like(eps)
        for part in parts:
            np.minimum(out, part(eps), out=out)
        return out
    return profile


def _approx_profile(a: float, b: float, slots: int, delta1: float, offset: float = 0.0) -> Profile:
    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        out = _profile_values(a, b, eps) + offset
        if delta1 > 0:
            # (float: a Python int beyond int64 made an object array that np.minimum refused;
            # 1e308 slots, found by the fuzz tests)
            with np.errstate(over="ignore"):
                out = out + float(slots) * (np.exp(eps) + 1.0) * delta1 * _UP
        return np.minimum(out, 1.0)
    return profile


def fixed_window_profile(eps0: float, num_slots: int, checkin_probability: float,
                         delta0: float = 0.0) -> Profile:
    """Privacy profile ``delta(eps)`` of A_fix from Thm 3.2 (Balle et al. 2020), for every eps >= 0.

    The theorem holds for every delta, so its exact inverse is
    ``delta(eps) = exp(-((eps - B)/A)^2)`` for ``eps > B`` (1 below), with
    ``A = p0 (e^eps0 - 1) sqrt(2 e^eps0 / m)`` and ``B = p0^2 e^eps0 (e^eps0 - 1)^2 / (2m)``; for
    ``delta0 > 0`` use ``8 eps0`` and add ``m (e^eps + 1) delta1``.  Values are rounded up.

    Example::

        >>> f = fixed_window_profile(1.0, 100, 0.5)
        >>> e = fixed_window_epsilon(1.0, 1e-5, 100, 0.5).epsilon
        >>> abs(float(f(np.array([e]))[0]) - 1e-5) < 1e-12
        True
    """
    eps0 = check_positive("eps0", eps0)
    slots = check_float_count("num_slots", num_slots, minimum=1)
    p0 = check_probability("checkin_probability", checkin_probability)
    delta0 = _check_delta0(delta0)
    e0, delta1 = _approximate_reduction(eps0, delta0)
    if math.isinf(delta1):
        return lambda eps: np.ones_like(np.asarray(eps, dtype=float))
    return _approx_profile(*_fixed_coefficients(e0, slots, p0), slots, delta1)


# -- Theorem 4.1: A_avg ---------------------------------------------------------------------------
def averaged_eps1(num_clients: int, num_slots: int, delta2: float) -> float:
    """``eps1 = sqrt(1/n + 1/m) + sqrt(log(1/delta2) / n)`` of Thm 4.1 (Balle et al. 2020): with
    probability ``>= 1 - delta2`` the check-in loads ``L`` satisfy ``||L||_2 / n <= eps1``
    (Lemma A.6, McDiarmid + Jensen)."""
    n = check_float_count("num_clients", num_clients, minimum=1)
    m = check_float_count("num_slots", num_slots, minimum=1)
    delta2 = check_open_unit("delta2", delta2)
    return math.sqrt(1.0 / n + 1.0 / m) + math.sqrt(math.log(1.0 / delta2) / n)


def _averaged_coefficients(e0: float, eps1: float) -> tuple[float, float]:
    x = _expm1(e0)
    b = _exp(4 * e0) * x * x * eps1 * eps1 / 2.0
    a = _exp(2 * e0) * x * eps1 * math.sqrt(2.0)
    return a, b


def averaged_epsilon(eps0: float, delta: float, delta2: float, num_clients: int, num_slots: int,
                     delta0: float = 0.0) -> EpsDelta:
    """Random check-ins with averaged ("thrifty") updates, A_avg (Balle et al. 2020, Thm 4.1).

    Every client checks in (``p_j = 1``) into a uniform slot of ``[m]``; the server averages all
    updates of a slot and skips empty slots.  For an ``eps0``-DP randomizer the protocol is
    ``(eps, delta + delta2)``-DP with ``eps1 = sqrt(1/n + 1/m) + sqrt(log(1/delta2)/n)`` and

    ``eps = e^(4 eps0) (e^eps0 - 1)^2 eps1^2 / 2``
    ``      + e^(2 eps0) (e^eps0 - 1) eps1 sqrt(2 log(1/delta))``

    (pure statement restored by us from the approximate-DP one; see the module docstring for why
    we trust it).  For
    ``(eps0, delta0)`` randomizers: ``8 eps0`` everywhere and total delta
    ``delta + delta2 + m (e^eps + 1) delta1`` (the paper's statement).

    Returns ``EpsDelta(epsilon, total_delta)``.

    Example::

        >>> round(averaged_epsilon(math.log(2), math.exp(-2), math.exp(-2), 8, 8).epsilon, 6)
        16.0
    """
    eps0 = check_positive("eps0", eps0)
    delta = check_open_unit("delta", delta)
    eps1 = averaged_eps1(num_clients, num_slots, delta2)
    if delta + delta2 >= 1:
        raise ParameterError("delta2", delta2, f"< 1 - delta = {1 - delta:g} (the statement is "
                             "(eps, delta + delta2)-DP)")
    m = int(num_slots)
    delta0 = _check_delta0(delta0)
    e0, delta1 = _approximate_reduction(eps0, delta0)
    eps = _eps_at(*_averaged_coefficients(e0, eps1), delta)
    return EpsDelta(eps, _check_admissible(eps, delta + delta2, m, eps0, delta0, delta1, "Thm 4.1"))


def averaged_profile(eps0: float, num_clients: int, num_slots: int, delta0: float = 0.0,
                     delta2_grid=None) -> Profile:
    """Privacy profile of A_avg from Thm 4.1: ``min over delta2`` of
    ``delta2 + exp(-((eps - B)/A)^2) [+ m (e^eps + 1) delta1]`` (each ``delta2`` gives a valid
    statement for every eps, so the minimum over a grid is valid).  ``delta2_grid`` defaults to 64
    log-spaced values in ``[1e-16, 0.5]``.

    Example::

        >>> f = averaged_profile(0.5, 10_000, 100)
        >>> bool(f(np.array([1.0]))[0] < 1e-3)
        True
    """
    eps0 = check_positive("eps0", eps0)
    n = check_float_count("num_clients", num_clients, minimum=1)
    m = check_float_count("num_slots", num_slots, minimum=1)
    delta0 = _check_delta0(delta0)
    grid = np.geomspace(1e-16, 0.5, 64) if delta2_grid is None else np.asarray(delta2_grid, float)
    if grid.ndim != 1 or grid.size == 0 or np.any(~((grid > 0) & (grid < 1))):
        raise ParameterError("delta2_grid", delta2_grid,
                             "a non-empty 1-D array of values in (0, 1)")
    e0, delta1 = _approximate_reduction(eps0, delta0)
    if math.isinf(delta1):
        return lambda eps: np.ones_like(np.asarray(eps, dtype=float))
    return _smallest_of([_approx_profile(*_averaged_coefficients(e0, averaged_eps1(n, m, d2)),
                                         m, delta1, offset=float(d2)) for d2 in grid])


# -- Theorem 4.3: sliding window ------------------------------------------------------------------
def sliding_window_epsilon(eps0: float, delta: float, window: int, delta0: float = 0.0) -> EpsDelta:
    """Random check-ins into a sliding window, A_sldw (Balle et al. 2020, Thm 4.3).

    Client ``j`` checks in (``p_j = 1``) into a uniform slot of ``{j, ..., j + m - 1}``; the server
    performs ``n - m + 1`` updates, one client per slot, a dummy update in an empty slot.  For an
    ``eps0``-DP randomizer and any ``m`` in ``[n]`` it is ``(eps, delta)``-DP with

    ``eps = e^eps0 (e^eps0 - 1)^2 / (2m) + (e^eps0 - 1) sqrt(2 e^eps0 log(1/delta) / m)``

    (Thm 3.2's formula with ``p0 = 1``).  ``(eps0, delta0)`` randomizers: ``8 eps0`` and total
    delta ``delta + m (e^eps + 1) delta1``.

    Example::

        >>> sliding_window_epsilon(math.log(3), math.exp(-2), 12).epsilon  # doctest: +ELLIPSIS
        2.5000...
    """
    eps0 = check_positive("eps0", eps0)
    delta = check_open_unit("delta", delta)
    window = check_float_count("window", window, minimum=1)
    delta0 = _check_delta0(delta0)
    e0, delta1 = _approximate_reduction(eps0, delta0)
    eps = _eps_at(*_fixed_coefficients(e0, window, 1.0), delta)
    return EpsDelta(eps, _check_admissible(eps, delta, window, eps0, delta0, delta1, "Thm 4.3"))


def sliding_window_profile(eps0: float, window: int, delta0: float = 0.0) -> Profile:
    """Privacy profile of the sliding-window protocol (inverse of Thm 4.3; see
    :func:`fixed_window_profile` with ``p0 = 1``).

    Example::

        >>> bool(sliding_window_profile(0.5, 1000)(np.array([0.2]))[0] < 1e-4)
        True
    """
    eps0 = check_positive("eps0", eps0)
    window = check_float_count("window", window, minimum=1)
    delta0 = _check_delta0(delta0)
    e0, delta1 = _approximate_reduction(eps0, delta0)
    if math.isinf(delta1):
        return lambda eps: np.ones_like(np.asarray(eps, dtype=float))
    return _approx_profile(*_fixed_coefficients(e0, window, 1.0), window, delta1)


# -- Corollary 3.3: repeated A_fix ----------------------------------------------------------------
COMPOSITION_METHODS = ("pld", "optimal", "advanced")


def repeated_fixed_window_epsilon(eps0: float, delta: float, num_clients: int, num_slots: int, *,
                                  repetitions: int | None = None, delta0: float = 0.0,
                                  method: str = "pld",
                                  value_discretization_interval: float | None = None
                                  ) -> EpsDelta:
    """A_fix with ``p0 = m/n`` repeated ``ceil(n/m)`` times adaptively (Balle et al. 2020,
    Cor. 3.3).

    The corollary composes the runs with advanced composition; any valid composition is allowed:

    * ``method="pld"`` (default): each run's privacy profile (Thm 3.2, combined by minimum with the
      single-participation profile of :func:`single_participation_profile` -- every client enters
      at most one slot per run) becomes a dominating PLD, composed by FFT
      (:meth:`PrivacyLossDistribution.from_privacy_profile`); a certified upper bound.
    * ``method="optimal"``: each run as an ``(eps1, beta)`` point of Thm 3.2 (or the point
      ``(eps0, delta0)``), composed with the optimal composition theorem
      (:func:`optimal_composition_epsilon`), minimised over a grid of ``beta``.
    * ``method="advanced"``: the paper's route (:func:`advanced_composition_epsilon`), minimised
      over the split of delta between the runs and the slack.

    Every candidate on a grid is a valid statement, so the minimum is valid.  Returns
    ``EpsDelta(epsilon, delta)`` (``delta`` is the target total).  Needs ``m <= n``;
    ``value_discretization_interval`` is the PLD grid step (default: :func:`profile_grid`).

    Example::

        >>> r = repeated_fixed_window_epsilon(0.5, 1e-6, 10_000, 100, method="optimal")
        >>> 0 < r.epsilon < 0.5
        True
    """
    eps0 = check_positive("eps0", eps0)
    delta = check_open_unit("delta", delta)
    n = check_float_count("num_clients", num_clients, minimum=1)
    m = check_float_count("num_slots", num_slots, minimum=1)
    if m > n:
        raise ParameterError("num_slots", m, f"<= num_clients={n} (Cor. 3.3 sets p0 = m/n <= 1)")
    k = math.ceil(n / m) if repetitions is None else check_count("repetitions", repetitions,
                                                                  minimum=1)
    delta0 = _check_delta0(delta0)
    method = check_choice("method", method, COMPOSITION_METHODS)
    p0 = m / n
    if method == "pld":
        profile = pass_privacy_profile("fixed", num_clients=n, num_slots=m,
                                       checkin_probability=p0, eps0=eps0, delta0=delta0)
        h, eps_max = profile_grid([profile], value_discretization_interval)
        pld = pld_from_profile(profile, h, eps_max,
                               description=f"A_fix(eps0={eps0:g}, m={m}, p0={p0:g})")
        return EpsDelta(pld.self_compose(k).epsilon_for_delta(delta, lower=False).upper, delta)

    points = [(eps0, delta0)]
    for beta in delta / k * np.geomspace(1e-6, 0.999, 48):
        try:
            points.append(fixed_window_epsilon(eps0, float(beta), m, p0, delta0))
        except ParameterError:
            continue
    best = math.inf
    for e1, d1 in points:
        if method == "optimal":
            if 1.0 - (1.0 - d1) ** k >= delta:
                continue
            best = min(best, optimal_composition_epsilon(delta, e1, d1, k))
        else:
            slack = delta - k * d1
            if slack <= 0:
                continue
            best = min(best, advanced_composition_epsilon(e1, k, slack), k * e1)
    return EpsDelta(best, delta)


# -- Theorem 3.4 and the sliding window: dummy updates ---------------------------------------------
def expected_dummy_updates(num_clients: int, num_slots: int, checkin_probability: float = 1.0, *,
                           variant: str = "fixed") -> float:
    """Expected number of empty slots in one run (exact).

    * ``"fixed"`` (A_fix, dummy updates) and ``"averaged"`` (A_avg, skipped slots):
      ``m (1 - p0/m)^n`` -- each slot is empty iff none of the ``n`` independent check-ins lands
      in it (Balle et al. 2020, Thm 3.4 and its proof, eq. 8; the theorem states it as a bound).
    * ``"sliding"`` (``num_slots`` is the window ``m <= n``): ``(n - m + 1)(1 - 1/m)^m`` -- each of
      the ``n - m + 1`` used slots can receive exactly ``m`` clients, each w.p. ``1/m`` (proof of
      Thm 4.4, the "(n - m + 1)/e" bound).

    Example::

        >>> expected_dummy_updates(2, 2)   # 4 equally likely check-ins, 2 leave a slot empty
        0.5
    """
    variant = check_choice("variant", variant, VARIANTS)
    n = check_float_count("num_clients", num_clients, minimum=1)
    m = check_float_count("num_slots", num_slots, minimum=1)
    if variant == "sliding":
        if m > n:
            raise ParameterError("num_slots", m,
                                 f"<= num_clients={n} (the window m must be in [n])")
        return (n - m + 1) * math.exp(m * math.log1p(-1.0 / m)) if m > 1 else 0.0
    p0 = check_probability("checkin_probability", checkin_probability)
    if p0 == 1.0 and m == 1:
        return 0.0
    return m * math.exp(n * math.log1p(-p0 / m))


def expected_dummy_updates_bound(num_clients: int, num_slots: int, checkin_probability: float = 1.0,
                                 *, variant: str = "fixed") -> float:
    """The paper's closed-form upper bounds: ``m e^(-c)`` with ``c = p0 n / m`` (Thm 3.4) and
    ``(n - m + 1) / e`` for the sliding window (Thm 4.4).

    Example::

        >>> round(expected_dummy_updates_bound(100, 10, 0.1), 4)   # c = 1
        3.6788
    """
    variant = check_choice("variant", variant, VARIANTS)
    n = check_float_count("num_clients", num_clients, minimum=1)
    m = check_float_count("num_slots", num_slots, minimum=1)
    if variant == "sliding":
        if m > n:
            raise ParameterError("num_slots", m, f"<= num_clients={n}")
        return (n - m + 1) / math.e
    p0 = check_probability("checkin_probability", checkin_probability)
    return m * math.exp(-p0 * n / m)


def checkin_probability_for_dummy_fraction(num_clients: int, num_slots: int,
                                           dummy_fraction: float) -> float:
    """Smallest check-in probability ``p0`` (the most private choice, Thm 3.2) whose expected
    fraction of dummy updates ``(1 - p0/m)^n`` (Thm 3.4) is at most ``dummy_fraction``:
    ``p0 = m (1 - dummy_fraction^(1/n))``.

    Raises :class:`ParameterError` if even ``p0 = 1`` leaves more dummies than asked
    (the reachable minimum ``(1 - 1/m)^n`` is in the message).

    Example::

        >>> round(checkin_probability_for_dummy_fraction(1000, 100, math.exp(-1)), 6)  # c = 1
        0.09995
    """
    n = check_float_count("num_clients", num_clients, minimum=1)
    m = check_float_count("num_slots", num_slots, minimum=1)
    f = check_open_unit("dummy_fraction", dummy_fraction)

    def fraction(p: float) -> float:   # (1 - p/m)^n; 0 once p/m rounds to 1 (log1p(-1) was a
        r = min(p, m) / m              # math domain error: n = 5, m = 1, dummy_fraction = 1e-300)
        return 0.0 if r >= 1.0 else math.exp(n * math.log1p(-r))

    p0 = -m * math.expm1(math.log(f) / n)
    while fraction(p0) > f:   # guard against rounding
        p0 = math.nextafter(p0, math.inf)
    if p0 > 1.0:
        floor = math.exp(n * math.log1p(-1.0 / m)) if m > 1 else 0.0
        raise ParameterError("dummy_fraction", f,
                             f">= {floor:.6g}, the expected dummy fraction (1 - 1/m)^n at p0 = 1 "
                             f"for n={n}, m={m}", "use fewer slots or accept more dummy updates")
    return p0


# -- local randomizers and the privacy profile of one pass ---------------------------------------
def single_participation_profile(eps0: float, delta0: float = 0.0) -> Profile:
    """Profile of an ``(eps0, delta0)``-DP mechanism's dominating pair (Kairouz, Oh, Viswanath
    2015, Thm 2.1): ``delta0 + (1 - delta0) (e^eps0 - e^eps)_+ / (1 + e^eps0)``.

    One pass of every check-in protocol uses each client in at most one slot and the slot choice
    does not depend on the data, so a pass is itself ``(eps0, delta0)``-DP (post-processing); this
    profile is a valid bound for a pass and takes over where a theorem is loose.

    Example::

        >>> float(single_participation_profile(1.0)(np.array([1.0]))[0])
        0.0
    """
    eps0 = check_positive("eps0", eps0)
    delta0 = _check_delta0(delta0)

    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        part = -np.expm1(np.minimum(eps - eps0, 0.0)) / (1.0 + math.exp(-eps0))
        return np.minimum((delta0 + (1.0 - delta0) * part) * _UP, 1.0)
    return profile


def gaussian_local_delta0(eps0, noise_multiplier: float, sensitivity: float = 2.0):
    """Exact ``delta0(eps0)`` of the Gaussian local randomizer: noise standard deviation
    ``noise_multiplier * C``, L2 sensitivity ``sensitivity * C`` (2 for replace-one with clipping
    norm C), i.e. ``mu = sensitivity / noise_multiplier`` and
    ``delta0 = Phi(-eps0/mu + mu/2) - e^eps0 Phi(-eps0/mu - mu/2)`` (Balle & Wang 2018, Thm 8),
    rounded up (:func:`dpplugins.mechanisms.gaussian.gaussian_delta_upper_many`; the log-space
    value times ``1 + 1e-10`` was a relative 1.6e-9 below the exact one at noise 300 and 2.6e-2
    at noise 1e14, found by a hostile sweep against 60-digit arithmetic).

    Example::

        >>> round(float(gaussian_local_delta0(1.0, 2.0)), 6)   # mu = 1
        0.126937
    """
    from dpplugins.mechanisms.gaussian import gaussian_delta_upper_many

    sigma = check_positive("noise_multiplier", noise_multiplier)
    mu = check_positive("sensitivity", sensitivity) / sigma
    return gaussian_delta_upper_many(eps0, mu)


def _theorem_profile(variant: str, n: int, m: int, p0: float, eps0: float,
                     delta0: float) -> Profile:
    if variant == "fixed":
        return fixed_window_profile(eps0, m, p0, delta0)
    if variant == "averaged":
        return averaged_profile(eps0, n, m, delta0)
    return sliding_window_profile(eps0, m, delta0)


def pass_privacy_profile(variant: str, *, num_clients: int, num_slots: int,
                         checkin_probability: float = 1.0, eps0: float | None = None,
                         delta0: float = 0.0, noise_multiplier: float | None = None,
                         sensitivity: float = 2.0, eps0_grid=None) -> Profile:
    """Upper bound on the privacy profile ``delta(eps)`` of one run of a check-in protocol.

    ``variant`` is ``"fixed"`` (Thm 3.2), ``"averaged"`` (Thm 4.1; needs ``p0 = 1``) or
    ``"sliding"`` (Thm 4.3; ``num_slots`` is the window, ``<= num_clients``).  The local randomizer
    is either ``(eps0, delta0)``-DP or Gaussian with ``noise_multiplier`` (L2 sensitivity
    ``sensitivity`` in units of the clipping norm).  The result is the pointwise minimum of valid
    bounds, hence valid:

    * the theorem's profile when ``delta0`` is admissible (:func:`delta1_for_delta0` finite; a
      pure randomizer always is), for a Gaussian randomizer for every ``eps0`` on ``eps0_grid``
      with the exact ``delta0 = gaussian_local_delta0(eps0)`` -- the tightest pair at that
      eps0 -- that is admissible (default grid: 64 log-spaced values in ``[1e-3, 10]``);
    * the single-participation profile (each client enters one slot per run): the
      ``(eps0, delta0)`` dominating pair, or the exact Gaussian profile.

    Example::

        >>> f = pass_privacy_profile("fixed", num_clients=10_000, num_slots=100,
        ...                          checkin_probability=0.01, eps0=1.0)
        >>> bool(f(np.array([0.1]))[0] < 1e-6)
        True
    """
    variant = check_choice("variant", variant, VARIANTS)
    n = check_float_count("num_clients", num_clients, minimum=1)
    m = check_float_count("num_slots", num_slots, minimum=1)
    p0 = check_probability("checkin_probability", checkin_probability)
    if variant == "averaged" and p0 != 1.0:
        raise ParameterError("checkin_probability", p0, "1 for the averaged variant (Thm 4.1 "
                             "assumes every client checks in)")
    if variant == "sliding" and m > n:
        raise ParameterError("window", m, f"<= num_examples={n} (Thm 4.3 needs m in [n])")
    if (eps0 is None) == (noise_multiplier is None):
        raise ParameterError("eps0", eps0, "given exactly when noise_multiplier is not "
                             f"(noise_multiplier={noise_multiplier!r})")
    parts: list[Profile] = []
    if eps0 is not None:
        eps0 = check_positive("eps0", eps0)
        delta0 = _check_delta0(delta0)
        parts.append(single_participation_profile(eps0, delta0))
        if math.isfinite(_delta1(eps0, delta0)):   # else no theorem applies (no amplification)
            parts.append(_theorem_profile(variant, n, m, p0, eps0, delta0))
    else:
        sigma = check_positive("noise_multiplier", noise_multiplier)
        sens = check_positive("sensitivity", sensitivity)
        parts.append(lambda eps: gaussian_local_delta0(eps, sigma, sens))
        grid = np.geomspace(1e-3, 10.0, 64) if eps0_grid is None else np.asarray(eps0_grid, float)
        if grid.ndim != 1 or grid.size == 0 or np.any(~(grid > 0)) or np.any(~np.isfinite(grid)):
            raise ParameterError("eps0_grid", eps0_grid,
                                 "a non-empty 1-D array of finite values > 0")
        for e in grid:
            d0 = float(gaussian_local_delta0(float(e), sigma, sens))
            if d0 < 1.0 and math.isfinite(_delta1(float(e), d0)):
                parts.append(_theorem_profile(variant, n, m, p0, float(e), d0))
    return _smallest_of(parts)


