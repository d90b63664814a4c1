"""Privacy amplification by random check-ins, as pure functions.

Source: B. Balle, P. Kairouz, H. B. McMahan, O. Thakkar, A. Thakurta, "Privacy Amplification via
Random Check-Ins", NeurIPS 2020 (arXiv:2007.06605; seed text ``papers/random-check-ins.txt``).
Notation: ``eps0`` / ``delta0`` is the local randomizer's guarantee, ``n`` the number of clients
(examples), ``m`` the number of check-in slots (or the window of the sliding-window protocol),
``p0`` the check-in probability.  ``log`` is natural.  The neighbouring relation is the paper's:
*replace one* client's data (Sec. 2).

Every theorem here has the shape ``eps(delta) = B + A sqrt(log(1/delta))`` for every delta in
(0, 1), so it is a whole privacy profile; the ``*_profile`` functions return its exact inverse
``delta(eps) = exp(-((eps - B) / A)^2)`` (1 for ``eps <= B``) as a vectorised callable, which
:meth:`dpplugins.pld.PrivacyLossDistribution.from_privacy_profile` turns into a dominating PLD, so
repeated protocol runs compose by FFT (DESIGN.md, "Composition across epochs").

Which formulas we trust (REFERENCE.md restores some displayed formulas the seed lost):

* Thm 3.2 and Thm 4.3: the seed states them in full; REFERENCE.md agrees.  We re-derived both from
  Lemma A.2 with ``a = w (e^eps0 - 1)``, ``b = 1 - e^-eps0``, ``k = m`` (proof of Thm A.4;
  ``w = p0`` for A_fix, ``w = 1`` for the sliding window):
  ``a^2 / (2k(1-b)) = w^2 e^eps0 (e^eps0-1)^2 / (2m)`` and
  ``sqrt(2 a^2 log(1/delta) / (k(1-b))) = w (e^eps0-1) sqrt(2 e^eps0 log(1/delta) / m)``.
  (The proof text of Thm 3.2 in the seed divides the second term by ``m`` instead of ``sqrt(m)``;
  that is a typo -- the theorem statement, Thm A.4 and the derivation all give ``sqrt(m)``.)
* Thm 4.1 (pure eps0): lost in the seed; REFERENCE.md restores it from the seed's approximate-DP
  statement by ``8 eps0 -> eps0``.  We trust the restoration: (i) the same substitution maps every
  other pure/approximate pair in the paper (Thms 3.2, 4.3, 5.1) into each other; (ii) the ratio of
  its leading term to Thm 3.2's (p0 = 1) is ``e^(2 eps0) / e^(eps0/2) = e^(3 eps0/2)``, the
  "additional O(e^(3 eps0/2)) factor" the text announces; (iii) ``eps1`` re-derives from the proof
  (Lemma A.6): ``E||L||_2 <= sqrt(n + n^2/m)`` (Jensen) and McDiarmid with bounded differences
  ``sqrt(2)`` gives ``||L||_2 <= E||L||_2 + sqrt(n log(1/delta2))`` w.p. ``1 - delta2``; divided
  by ``n`` this is ``eps1``; (iv) the brute-force tests on tiny protocols never contradict it.
* Lemma A.2: re-derived from heterogeneous advanced composition
  ``sum eps_i (e^eps_i - 1)/2 + sqrt(2 sum eps_i^2 log(1/delta))`` with ``eps_i <= a/(k - b(i-1))``
  and ``sum_i 1/(k - b(i-1))^2 <= 1/(k(1-b))`` (integral comparison); the result is also implied by
  zCDP composition (Bun & Steinke 2016, Prop. 1.3 and Lemma 3.5), so it is sound.
* Approximate-DP local randomizers: the seed's statements (``8 eps0`` everywhere, admissible
  ``delta0`` bound, ``delta' = delta + m (e^eps' + 1) delta1``) are used as printed; this is the
  corrected version the acknowledgements mention.

Example::

    >>> from dpplugins.amplification.checkin import fixed_window_epsilon
    >>> eps, delta = fixed_window_epsilon(1.0, 1e-6, num_slots=1000, checkin_probability=0.1)
    >>> round(eps, 4)
    0.0471
"""

from __future__ import annotations

import math
import sys
from typing import Callable, NamedTuple

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaln, logsumexp

from dpplugins.errors import (ParameterError, check_choice, check_count, check_nonnegative,
                              check_open_unit, check_positive, check_probability)

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

#: relative safety margin added to every epsilon and delta we report, so that floating-point
#: rounding never moves a bound in the user's favour (a few ulps would do; this is generous)
_UP = 1.0 + 1e-12
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
    up)."""
    eps = np.asarray(eps, dtype=float)
    if not (math.isfinite(a) and math.isfinite(b)) or a <= 0:
        return np.ones_like(eps)
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
    k = -math.log1p(-math.exp(-5.0 * eps0)) if 5.0 * eps0 < 745 else 0.0
    if k == 0.0:
        return 0.0
    return -math.expm1(-eps0) * delta1 / (4.0 * _exp(eps0) * (2.0 + math.log(2.0 / delta1) / k))


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


def _delta1(eps0: float, delta0: float) -> float:
    if delta0 == 0.0:
        return 0.0
    if _admissible(eps0, 1.0) < delta0:
        return math.inf
    lo = math.log(delta0)  # admissible(delta0) < delta0 / 8 < delta0, so the root is above
    f = lambda t: math.log(max(_admissible(eps0, math.exp(t)), 1e-320)) - math.log(delta0)
    t = brentq(f, lo, 0.0, xtol=1e-14, rtol=1e-14) if f(0.0) > 0 else 0.0
    d1 = min(math.exp(t), 1.0)
    while _admissible(eps0, d1) < delta0:
        d1 = min(d1 * (1 + 1e-12), 1.0)
    return d1


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
    slots = check_count("num_slots", num_slots, minimum=1)
    p0 = check_probability("checkin_probability", checkin_probability)
    delta0 = _check_delta0(delta0)
    e0, delta1 = _approximate_reduction(eps0, delta0)
    eps = _eps_at(*_fixed_coefficients(e0, slots, p0), delta)
    return EpsDelta(eps, _check_admissible(eps, delta, slots, eps0, delta0, delta1, "Thm 3.2"))


def _approx_profile(a: float, b: float, slots: int, delta1: float, offset: float = 0.0) -> Profile:
    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        out = _profile_values(a, b, eps) + offset
        if delta1 > 0:
            with np.errstate(over="ignore"):
                out = out + slots * (np.exp(eps) + 1.0) * delta1 * _UP
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
    slots = check_count("num_slots", num_slots, minimum=1)
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
    n = check_count("num_clients", num_clients, minimum=1)
    m = check_count("num_slots", num_slots, minimum=1)
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

    (pure statement restored in REFERENCE.md; see the module docstring for why we trust it).  For
    ``(eps0, delta0)`` randomizers: ``8 eps0`` everywhere and total delta
    ``delta + delta2 + m (e^eps + 1) delta1`` (the seed's statement).

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
    n = check_count("num_clients", num_clients, minimum=1)
    m = check_count("num_slots", num_slots, minimum=1)
    delta0 = _check_delta0(delta0)
    grid = np.geomspace(1e-16, 0.5, 64) if delta2_grid is None else np.asarray(delta2_grid, float)
    if grid.ndim != 1 or grid.size == 0 or np.any(~((grid > 0) & (grid < 1))):
        raise ParameterError("delta2_grid", delta2_grid,
                             "a non-empty 1-D array of values in (0, 1)")
    e0, delta1 = _approximate_reduction(eps0, delta0)
    if math.isinf(delta1):
        return lambda eps: np.ones_like(np.asarray(eps, dtype=float))
    parts = [_approx_profile(*_averaged_coefficients(e0, averaged_eps1(n, m, d2)), m, delta1,
                             offset=float(d2)) for d2 in grid]

    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        out = np.ones_like(eps)
        for part in parts:
            np.minimum(out, part(eps), out=out)
        return out
    return profile


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
    window = check_count("window", window, minimum=1)
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
    window = check_count("window", window, minimum=1)
    delta0 = _check_delta0(delta0)
    e0, delta1 = _approximate_reduction(eps0, delta0)
    if math.isinf(delta1):
        return lambda eps: np.ones_like(np.asarray(eps, dtype=float))
    return _approx_profile(*_fixed_coefficients(e0, window, 1.0), window, delta1)


# -- Lemma A.2 and composition theorems -----------------------------------------------------------
def heterogeneous_composition_epsilon(a: float, b: float, k: int, delta: float) -> float:
    """Lemma A.2 (Balle et al. 2020): if the i-th of ``k`` adaptive mechanisms is
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
    k = check_count("k", k, minimum=1)
    delta = check_open_unit("delta", delta)
    scale = k * (1.0 - b)
    return (a * a / (2.0 * scale) + math.sqrt(2.0 * a * a * math.log(1.0 / delta) / scale)) * _UP


def optimal_composition_delta(epsilon: float, eps_step: float, delta_step: float, k: int) -> float:
    """Exact ``delta(epsilon)`` of the k-fold adaptive composition of ``(eps_step, delta_step)``-DP
    mechanisms -- the optimal composition theorem (Kairouz, Oh, Viswanath 2015, Thm 3.3; its
    general-epsilon form, Murtagh & Vadhan 2016):

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
    return e, d, check_count("k", k, minimum=1)


def _kov_delta(epsilon: float, e: float, d: float, k: int) -> float:
    l = np.arange(k + 1, dtype=float)
    margin = (k - 2 * l) * e - epsilon          # log of e^((k-l)e) / e^(epsilon + l e)
    keep = margin > 0
    if np.any(keep):
        lk = l[keep]
        log_terms = (gammaln(k + 1) - gammaln(lk + 1) - gammaln(k - lk + 1) + (k - lk) * e
                     - k * np.logaddexp(0.0, e) + np.log(-np.expm1(-margin[keep])))
        pure = float(np.exp(logsumexp(log_terms)))
    else:
        pure = 0.0
    survive = math.exp(k * math.log1p(-d)) if d > 0 else 1.0
    return min(1.0, ((1.0 - survive) + survive * pure) * _UP + 1e-300)


def optimal_composition_epsilon(delta: float, eps_step: float, delta_step: float, k: int) -> float:
    """Smallest epsilon (up to relative 1e-10, rounded up) with
    :func:`optimal_composition_delta` ``<= delta``; ``inf`` if even ``k eps_step`` does not reach
    it (Kairouz, Oh, Viswanath 2015, Thm 3.3).

    Example::

        >>> optimal_composition_epsilon(1e-6, 0.0, 0.0, 10)
        0.0
    """
    delta = check_open_unit("delta", delta)
    e, d, k = _check_step_guarantee(eps_step, delta_step, k)
    if _kov_delta(0.0, e, d, k) <= delta:
        return 0.0
    hi = k * e
    if _kov_delta(hi, e, d, k) > delta:
        return math.inf
    lo = 0.0
    while hi - lo > 1e-10 * hi:
        mid = 0.5 * (lo + hi)
        if _kov_delta(mid, e, d, k) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def advanced_composition_epsilon(eps_step: float, k: int, delta_slack: float) -> float:
    """Advanced composition (Dwork, Rothblum, Vadhan 2010, Thm III.3): ``k`` adaptive
    ``(eps_step, d)``-DP mechanisms compose to ``(eps, k d + delta_slack)``-DP with
    ``eps = eps_step sqrt(2 k log(1/delta_slack)) + k eps_step (e^eps_step - 1)``.

    This is the composition Cor. 3.3 of Balle et al. (2020) uses.

    Example::

        >>> round(advanced_composition_epsilon(0.1, 100, 1e-5), 4)
        5.8502
    """
    e = check_nonnegative("eps_step", eps_step)
    k = check_count("k", k, minimum=1)
    slack = check_open_unit("delta_slack", delta_slack)
    return (e * math.sqrt(2.0 * k * math.log(1.0 / slack)) + k * e * _expm1(e)) * _UP


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
    n = check_count("num_clients", num_clients, minimum=1)
    m = check_count("num_slots", num_slots, minimum=1)
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
    n = check_count("num_clients", num_clients, minimum=1)
    m = check_count("num_slots", num_slots, minimum=1)
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
    n = check_count("num_clients", num_clients, minimum=1)
    m = check_count("num_slots", num_slots, minimum=1)
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
    n = check_count("num_clients", num_clients, minimum=1)
    m = check_count("num_slots", num_slots, minimum=1)
    f = check_open_unit("dummy_fraction", dummy_fraction)
    p0 = -m * math.expm1(math.log(f) / n)
    while math.exp(n * math.log1p(-min(p0, m) / m)) > f:   # guard against rounding
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
    rounded up.

    Example::

        >>> round(float(gaussian_local_delta0(1.0, 2.0)), 6)   # mu = 1
        0.126937
    """
    from dpplugins.mechanisms.gaussian import gaussian_delta

    sigma = check_positive("noise_multiplier", noise_multiplier)
    mu = check_positive("sensitivity", sensitivity) / sigma
    values = np.asarray(gaussian_delta(np.asarray(eps0, dtype=float), mu), dtype=float)
    return np.minimum(values * (1 + 1e-10) + 1e-300, 1.0)


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

    * the theorem's profile (for a Gaussian randomizer: for every ``eps0`` on ``eps0_grid``, with
      the exact ``delta0 = gaussian_local_delta0(eps0)`` -- the tightest pair at that eps0 -- when
      it is admissible; default grid: 64 log-spaced values in ``[1e-3, 10]``);
    * the single-participation profile (each client enters one slot per run): the
      ``(eps0, delta0)`` dominating pair, or the exact Gaussian profile.

    Example::

        >>> f = pass_privacy_profile("fixed", num_clients=10_000, num_slots=100,
        ...                          checkin_probability=0.01, eps0=1.0)
        >>> bool(f(np.array([0.1]))[0] < 1e-6)
        True
    """
    variant = check_choice("variant", variant, VARIANTS)
    n = check_count("num_clients", num_clients, minimum=1)
    m = check_count("num_slots", num_slots, minimum=1)
    p0 = check_probability("checkin_probability", checkin_probability)
    if variant == "averaged" and p0 != 1.0:
        raise ParameterError("checkin_probability", p0, "1 for the averaged variant (Thm 4.1 "
                             "assumes every client checks in)")
    if variant == "sliding" and m > n:
        raise ParameterError("window", m, f"<= num_examples={n} (Thm 4.3 needs m in [n])")
    for name, value in (("num_clients", n), ("num_slots", m)):
        if value > sys.float_info.max:   # the theorems' formulas are evaluated in floats
            raise ParameterError(name, value, f"at most {sys.float_info.max:.4g}")
    if (eps0 is None) == (noise_multiplier is None):
        raise ParameterError("eps0", eps0, "given exactly when noise_multiplier is not "
                             f"(noise_multiplier={noise_multiplier!r})")
    parts: list[Profile] = []
    if eps0 is not None:
        eps0 = check_positive("eps0", eps0)
        delta0 = _check_delta0(delta0)
        parts.append(single_participation_profile(eps0, delta0))
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

    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        out = np.ones_like(eps)
        for part in parts:
            np.minimum(out, part(eps), out=out)
        return out
    return profile


# -- from a per-run profile to a PLD ------------------------------------------------------------
_MIN_H, _MAX_H = 2e-5, 1e-3
_MAX_EPS, _MAX_GRID_POINTS = 2.0 ** 14, 200_000
#: profile evaluations per run (the PLD module's convex hull slows down on much longer inputs)
_MAX_PROFILE_POINTS = 4000


def _profile_epsilon_max(profile: Profile) -> float:
    """First power of two (>= 1) where the profile is below 1e-16 or has reached a floor below
    1e-3 (such as delta0)."""
    eps_max = 1.0
    while eps_max < _MAX_EPS:
        now, later = profile(np.array([eps_max, 2 * eps_max]))
        if now <= 1e-16 or (now < 1e-3 and later >= now * (1 - 1e-12)):
            break
        eps_max *= 2
    return eps_max


def _profile_epsilon(profile: Profile, delta: float, eps_max: float) -> float:
    """Smallest eps (bisection, upper end) with profile(eps) <= delta, at most eps_max."""
    lo, hi = 0.0, 1.0
    while hi < eps_max and profile(np.array([hi]))[0] > delta:
        hi *= 2
    for _ in range(40):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if profile(np.array([mid]))[0] <= delta else (mid, hi)
    return hi


def profile_grid(profiles, value_discretization_interval: float | None = None
                 ) -> tuple[float, float]:
    """Grid ``(h, epsilon_max)`` for the PLDs of runs known by their privacy profiles.

    ``epsilon_max``: the first power of two where every profile is below 1e-16 or at a floor
    (what is left there goes to ``delta(inf)``, so this only decides accuracy).  ``h``: the given
    ``value_discretization_interval``, else a 200th of the smallest single-run epsilon at
    ``delta = 1e-5``, clipped to ``[2e-5, 1e-3]`` and coarse enough for at most 200 000 grid
    points.  Every choice gives certified upper bounds; this one balances accuracy and time.

    Example::

        >>> h, eps_max = profile_grid([single_participation_profile(1.0)])
        >>> h, eps_max
        (0.001, 1.0)
    """
    profiles = list(profiles)
    eps_max = max(_profile_epsilon_max(p) for p in profiles)
    if value_discretization_interval is not None:
        return check_positive("value_discretization_interval", value_discretization_interval), \
            eps_max
    scale = min(_profile_epsilon(p, 1e-5, eps_max) for p in profiles)
    h = max(float(np.clip(scale / 200.0, _MIN_H, _MAX_H)), eps_max / _MAX_GRID_POINTS)
    return h, eps_max


def pld_from_profile(profile: Profile, h: float, epsilon_max: float, *,
                     description: str = "random check-in run"):
    """Dominating PLD of one run (connect-the-dots on the profile, Doroshenko et al. 2022, via
    :meth:`PrivacyLossDistribution.from_privacy_profile`), with the profile evaluated on at most
    4000 points.

    Example::

        >>> pld = pld_from_profile(single_participation_profile(1.0), 1e-3, 1.0)
        >>> round(pld.epsilon_for_delta(1e-9, lower=False).upper, 3)
        1.0
    """
    from dpplugins.pld import PrivacyLossDistribution

    return PrivacyLossDistribution.from_privacy_profile(
        profile, epsilon_max=epsilon_max, value_discretization_interval=h,
        profile_step=max(h, epsilon_max / _MAX_PROFILE_POINTS), description=description)
