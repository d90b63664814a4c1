"""Amplification by shuffling: certified upper bounds, exact lower bounds, DP-SGD diagnostics.

Setting (Feldman, McMillan, Talwar 2021, FOCS, arXiv:2012.12803 -- "FMT21"; Feldman, McMillan,
Talwar 2023, SODA, arXiv:2208.04591 with its errata -- "FMT23"): n users run an adaptive sequence of local
randomizers ``R^(i)(z_{1:i-1}, x_pi(i))`` on a uniformly random permutation of the data; each is
eps0-DP for every value of the earlier outputs.  Neighbouring datasets differ in one record
(*replace one*).  ``log`` is natural.

**The clone reduction.**  The shuffled output is a post-processing of the counts ``(n0, n1)`` of
the following experiment: the differing user reports 0 with probability
``alpha = e^eps0 / (e^eps0 + 1)`` and 1 otherwise (on X1 the roles of 0 and 1 swap); each of the
other ``n - 1`` users is, independently, a *clone* with probability ``c`` and then reports 0 or 1
with probability 1/2 each (otherwise 2).  Hence for every divergence with the data-processing
inequality ``D(A(X0) || A(X1)) <= D(P0 || P1)``.

* FMT21, Thm 3.1: ``c = e^-eps0`` (``p = c/2 = 1/(2 e^eps0)``), valid for every eps0-DP randomizer.
  In the notation of the pair: ``C ~ Bin(n-1, e^-eps0)``, ``A ~ Bin(C, 1/2)``,
  ``Delta ~ Bern(alpha)``, ``P0 = (A + Delta, C - A + 1 - Delta)``.  (Confirmed against the
  authors' code, apple/ml-shuffling-amplification, ``deltacomp`` docstring.)
* FMT23, Thm 3.1 / errata Thm 7.1: ``c = 2 / (e^eps0 + 1)`` (``p = 1/(e^eps0 + 1)``), valid **only**
  for randomizers in the class E_eps0 of the errata -- those with the decomposition of Cor. 3.4 at
  ``p = 1/(e^eps0 + 1)``, where the differing user never reports 2.  Binary randomized response is
  in it.  k-ary randomized response is in it too -- our derivation (the errata does not state it):
  with ``R(a) = (e^eps0 1_a + 1_b + 1_rest) / (e^eps0 + k - 1)`` for the differing inputs a, b,
  put ``Q0 = (alpha R(a) - (1-alpha) R(b)) / (2 alpha - 1)`` and ``Q1`` symmetrically; their
  masses are ``(e^eps0 + 1) / (e^eps0 + k - 1)`` on a (resp. b), 0 on b (resp. a) and
  ``1 / (e^eps0 + k - 1)`` on every other value, all >= 0, so ``R(a) = alpha Q0 + (1-alpha) Q1``;
  and ``Q0 + Q1 = R(a) + R(b) <= (e^eps0 + 1) R(c)`` output by output for every input c (on a or
  b: ``e^eps0 + 1 <= e^eps0 + 1`` resp. ``1 + 1 <= e^eps0 + 1`` when c in {a, b}; on other
  outputs ``2 <= e^eps0 + 1``), so ``R(c) - (Q0 + Q1)/(e^eps0 + 1) >= 0`` is the remaining
  component.  The errata's refinement (Lemma 7.3, with a second parameter q) is implemented in
  :mod:`dpplugins.amplification.shuffle_model_errata` (its formulas reconstructed and the
  reduction re-proved there); for k-RR it coincides with the privacy blanket of
  :mod:`dpplugins.amplification.shuffle_model`.
* **Trap** (combining the FMT23 variables ``Y^b_1`` -- which can report 2 -- with the FMT21
  value of p): that combination is the flawed Lemma 3.5 of FMT23 at
  ``p < 1/(e^eps0 + 1)``, and because the differing user then hides behind "2" it *under*-reports.
  FMT21's differing user never reports 2; we implement FMT21's pair as its Thm 3.1 states it.

**Exact hockey-stick divergence of the pair.**  With ``m = n0 + n1 = C + 1`` and ``j = n0``,
``P0(m, j) = B(m-1) Bin(m, 1/2)(j) 2 (alpha j + (1-alpha)(m-j)) / m`` where ``B = Bin(n-1, c)``,
and ``P1(m, j) = P0(m, m - j)``, so the pair is symmetric (both directions give the same delta).
For ``eps < eps0`` put ``a = alpha - e^eps (1-alpha)``, ``b = e^eps alpha - (1-alpha)``; the
positive part of ``P0 - e^eps P1`` is where ``j >= J_m = floor(b m / (a+b)) + 1``, and
``sum_j Bin(m,1/2)(j) j 1{j >= J} = (m/2) P(Bin(m-1,1/2) >= J-1)`` gives, exactly,

    delta(eps) = sum_m B(m-1) [ (a+b) P(Bin(m-1,1/2) >= J_m - 1) - 2b P(Bin(m,1/2) >= J_m) ],

an O(n) sum of binomial survival functions.  It is computed by the count-pair engine, the one
implementation of such sums in the library
(:class:`~dpplugins.amplification.count_pair.CountPair`; :func:`_clone_pair`): the pair is
the count pair with the others' law ``(c/2, c/2, 1 - c)`` over (0, 1, 2) and the differing
user's ``(alpha, 1 - alpha, 0)`` on X0, ``(1 - alpha, alpha, 0)`` on X1.  Its sum is the closed
form above written with de Moivre's identity, so that the two terms of a bracket cancel only by
about ``c^2`` for a threshold ``c`` standard deviations above the mean; the window of the clone
count holds all but ``e^-75`` (the rest charged in full), and the binomial tails' accuracy, the
rounding of every term and the sign of the summands next to the threshold are charged to the
upper bound (see that class).  The public FMT21 code sums over
blocks of C with a typo in the second direction (``max(deltaq_upperc, deltaq_upperc)``); for
this symmetric pair the exact sum needs one direction.
For ``eps >= eps0`` the pair is eps0-DP, so delta = 0.

Closed forms: Balle et al. 2020 Thm 5.1 (see :mod:`dpplugins.amplification.swap`) and the FMT21
analytic bound :func:`fmt21_closed_form_epsilon`.  Lower bounds: the exact privacy of shuffled
binary and ternary randomized response on specific neighbouring datasets (:func:`lower_bound`).
For DP-SGD on shuffled batches: :func:`shuffle_lower_bound` (after Chua et al. 2024).

Not implemented, on purpose: FMT21's extension to (eps0, delta0)-DP randomizers (Thm 3.8 or near
it) -- we could not confirm its exact statement from a primary source, so approximate-DP
randomizers use only Balle et al. 2020 Thm 5.1.  The variation-ratio bound of Wang et al. (VLDB
2024) is *not* used for general randomizers here: its general form is FMT23's stronger clone,
whose validity outside the errata's class E_eps0 rests, for this module's adaptive and per-user
randomizers, on the flawed Lemma 3.5 (when every user runs the same randomizer it holds by a
privacy-blanket argument, :mod:`dpplugins.amplification.shuffle_model`), and its
randomizer-specific form is false for k-RR with k >= 3 (a two-user counterexample); see
:mod:`dpplugins.amplification.shuffle_model`, which also has the bounds that use a known
randomizer (binary RR: the exact worst case over datasets; k-RR: its privacy blanket).

Example::

    >>> from dpplugins.amplification import shuffle
    >>> b = shuffle.epsilon(4.0, 100_000, 1e-6)
    >>> b.method, round(b.epsilon, 3)
    ('fmt21', 0.17)
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
from scipy import special, stats

from dpplugins.amplification import swap
from dpplugins.amplification.count_pair import (_LOG_CUT, EPS_ROUNDING_MARGIN, UNIT_ROUNDOFF,
                                                CountPair, below_by_margin, binomial_window,
                                                clone_pair, eps_less_margin, eps_rounding_margin,
                                                krr_lower_pairs, largest_violated,
                                                ragged_windows)
from dpplugins.errors import (NumericalError, ParameterError, check_choice, check_count,
                              check_nonnegative, check_open_unit, check_positive)
from dpplugins.pld import Bounds, PrivacyLossDistribution

__all__ = [
    "ShuffleBound", "normalise_randomizer", "METHODS", "MAX_USERS", "check_users",
    "MAX_DOMAIN_SIZE", "check_domain_size",
    "fmt21_clone_probability", "fmt23_clone_probability", "clone_pair_delta",
    "clone_pair_epsilon", "clone_pair_profile", "fmt21_epsilon", "fmt23_epsilon",
    "fmt21_closed_form_epsilon", "balle2020_epsilon", "no_amplification_epsilon", "epsilon",
    "dominating_pair_pld", "shuffled_rr_delta", "rr_lower_bound_epsilon", "lower_bound",
    "gaussian_amplified_profile", "max_statistic_pair", "shuffle_lower_bound",
    "shuffle_lower_bound_pld", "neighbour_means", "pairs_pld",
]

METHODS = ("best", "fmt21", "fmt23", "fmt21_closed_form", "balle2020", "none")
_U = UNIT_ROUNDOFF


@dataclass(frozen=True)
class ShuffleBound:
    """An (epsilon, delta) guarantee for the shuffled protocol and the bound that gave it.

    ``candidates`` maps every bound that applied to its epsilon (``method`` is the smallest).
    For :func:`lower_bound` the numbers are *lower* bounds and ``method`` says so.
    """

    epsilon: float
    delta: float
    method: str
    eps0: float
    n: int
    randomizer: str
    candidates: Mapping[str, float] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------
def normalise_randomizer(randomizer) -> tuple:
    """``"general"`` -> ``("general",)``; ``"binary_rr"`` or ``("krr", 2)`` -> ``("krr", 2)``;
    ``("krr", k)`` -> ``("krr", k)`` with k an integer >= 2."""
    if randomizer == "general" or (isinstance(randomizer, tuple) and randomizer == ("general",)):
        return ("general",)
    if randomizer == "binary_rr":
        return ("krr", 2)
    if isinstance(randomizer, (tuple, list)) and len(randomizer) == 2 and randomizer[0] == "krr":
        k = check_domain_size("randomizer k", randomizer[1], 2)
        return ("krr", k)
    raise ParameterError("randomizer", randomizer,
                         "'general', 'binary_rr' or ('krr', k) with an integer k >= 2")


def _randomizer_name(r: tuple) -> str:
    if r[0] == "general":
        return "general"
    return "binary_rr" if r[1] == 2 else f"{r[1]}-rr"


#: the smallest positive local epsilon of the shuffle-model randomizers whose bounds are written
#: in ``E = e^eps0`` (:class:`~dpplugins.amplification.shuffle_model.Randomizer`, the errata's
#: pair, the randomizer families): below it ``E - 1`` keeps few digits in double precision, and
#: below 1.1e-16 ``E`` rounds to 1 (their pairs degenerated: a bare ZeroDivisionError, a "bug")
LOCAL_EPSILON_FLOOR = 1e-12


def check_local_epsilon(eps0, maximum: float, *, zero: bool = True) -> float:
    """The local epsilon ``eps0`` of a shuffle-model randomizer: 0 (where ``zero``) or in
    ``[LOCAL_EPSILON_FLOOR, maximum]``, else :class:`ParameterError` saying what holds below
    the floor: the shuffled output's total variation is at most the randomizer's,
    ``tanh(eps0/2) <= eps0/2`` (post-processing), so ``epsilon(delta) = 0`` for every
    ``delta >= eps0/2``.

    Example::

        >>> check_local_epsilon(1.0, 300)
        1.0
    """
    eps0 = check_nonnegative("eps0", eps0)
    if eps0 == 0 and zero:
        return 0.0
    if not LOCAL_EPSILON_FLOOR <= eps0 <= maximum:
        valid = f"{'0 or ' if zero else ''}in [{LOCAL_EPSILON_FLOOR:g}, {maximum:g}]"
        hint = ("below 1e-12 no accounting is needed: the shuffled reports' total variation is "
                "at most eps0/2, so epsilon(delta) = 0 for every delta >= eps0/2; an eps0-DP "
                "randomizer is also 1e-12-DP, so the general bound at eps0=1e-12 holds at every "
                "delta") if 0 < eps0 < LOCAL_EPSILON_FLOOR else ""
        raise ParameterError("eps0", eps0, valid, hint=hint)
    return eps0


#: the most users a shuffle-model bound is computed for: the count windows grow like sqrt(n)
#: (n = 10^16 asked for 9 GiB); at 10^8 one query of two composed unary-encoding rounds takes
#: 15-26 s (10^9: 80 s).  More users cannot increase epsilon, so the bounds at MAX_USERS hold
#: for any larger n (:func:`check_users`)
MAX_USERS = 10**8


def check_users(n, minimum: int = 2) -> int:
    """The number of users ``n`` of a shuffle-model bound: an integer in
    ``[minimum, MAX_USERS]``, else :class:`ParameterError` with the way out for a larger n.

    Why the bounds at ``MAX_USERS`` hold for more users (our derivation): a neighbouring pair of
    n-user datasets is ``(D + E, D' + E)`` with ``(D, D')`` a neighbouring pair of m < n users and
    ``E`` the other n - m users' values.  Appending E's reports (the randomizer is public, E
    fixed) to the m-user shuffled reports and shuffling again is a post-processing that yields
    the n-user release, so ``delta_n(eps) <= delta_m(eps)`` for every eps, round by round.

    Example::

        >>> check_users(1000)
        1000
    """
    n = check_count("n", n, minimum=minimum)
    if n > MAX_USERS:
        raise ParameterError(
            "n", n, f"an integer in [{minimum}, {MAX_USERS:.0e}]",
            hint=f"more users cannot increase epsilon, so the bound for n={MAX_USERS:.0e} is "
                 "valid for any larger n: ask for that (the 'shuffle' accountant does so itself)")
    return n


#: the largest number of values (buckets, domain size) of a shuffle-model randomizer: its
#: probabilities are computed in double precision, which holds every integer up to 2^53
MAX_DOMAIN_SIZE = 2**53


def check_domain_size(name: str, value, minimum: int) -> int:
    """A randomizer's number of values (k of k-RR, d, g): an integer in
    ``[minimum, MAX_DOMAIN_SIZE]``, else :class:`ParameterError` (10**400 buckets overflowed a
    float deep in the bounds)."""
    value = check_count(name, value, minimum=minimum)
    if value > MAX_DOMAIN_SIZE:
        raise ParameterError(name, value, f"an integer in [{minimum}, 2**53]",
                             hint="the randomizer's probabilities are computed in double "
                                  "precision")
    return value


def _check_eps0_n(eps0, n) -> tuple[float, int]:
    eps0 = check_nonnegative("eps0", eps0)
    if eps0 > 700:
        raise ParameterError("eps0", eps0, "<= 700 (e^eps0 must be finite)")
    return eps0, check_users(n)


def _check_delta0(delta0) -> float:
    delta0 = check_nonnegative("delta0", delta0)
    if delta0 >= 1:
        raise ParameterError("delta0", delta0, "in [0, 1)")
    return delta0


# --------------------------------------------------------------------------------------------
# binomial windows
# --------------------------------------------------------------------------------------------
# --------------------------------------------------------------------------------------------
# the clone pair (FMT21 / FMT23)
# --------------------------------------------------------------------------------------------
def fmt21_clone_probability(eps0: float) -> float:
    """Clone probability ``c = e^-eps0`` of FMT21 Thm 3.1 (every eps0-DP randomizer)."""
    return math.exp(-check_nonnegative("eps0", eps0))


def fmt23_clone_probability(eps0: float, randomizer="binary_rr") -> float:
    """Clone probability ``c = 2 / (e^eps0 + 1)`` of FMT23 Thm 3.1, valid only for randomizers
    in the errata's class E_eps0 (binary and k-ary randomized response; see the module
    docstring).  ``randomizer="general"`` raises :class:`ParameterError`."""
    eps0 = check_nonnegative("eps0", eps0)
    r = normalise_randomizer(randomizer)
    if r[0] == "general":
        raise ParameterError(
            "randomizer", randomizer, "'binary_rr' or ('krr', k) for the FMT23 bound",
            hint="FMT23's p = 1/(e^eps0+1) holds only for the restricted class of its errata; "
                 "general randomizers use method='fmt21' (one randomizer run by every user: "
                 "dpplugins.amplification.shuffle_model.epsilon(('general', eps0), n, delta))")
    return 2.0 / (math.exp(eps0) + 1.0)


@dataclass(frozen=True)
class _CloneMixture:
    """The clone pair as a mixture over ``m``, the number of reports 0 or 1 with the differing
    user's (``m - 1 ~ Bin(n - 1, c)`` on a window that holds all but ``outside``, with the
    binomial ``weights``): what its pmfs and Renyi divergences sum over (:func:`_pair_pmfs`,
    :func:`clone_pair_rdp`).  Its hockey-stick divergence is the count pair's
    (:func:`_clone_pair`)."""

    m: np.ndarray
    weights: np.ndarray
    outside: float
    alpha: float
    beta: float


@functools.lru_cache(maxsize=64)
def _clone_mixture(eps0: float, n: int, c: float) -> _CloneMixture:
    lo, hi, outside = binomial_window(n - 1, c)
    clones = np.arange(lo, hi + 1)
    return _CloneMixture(clones + 1, stats.binom.pmf(clones, n - 1, c), outside,
                         float(special.expit(eps0)), float(special.expit(-eps0)))


@functools.lru_cache(maxsize=64)
def _clone_pair(eps0: float, n: int, c: float) -> CountPair:
    """The clone pair as a :class:`~dpplugins.amplification.count_pair.CountPair` (the one
    implementation of its certified delta and epsilon; the module docstring has the sum)."""
    return clone_pair(eps0, n, c)


def _clone_delta(eps0: float, n: int, c: float, epsilon: float) -> Bounds:
    """Certified bounds on the pair's delta(epsilon), both directions: exactly 0 from eps0 on
    (its likelihood ratio is at most ``alpha / (1 - alpha) = e^eps0``); the upper one from
    ``epsilon`` less, the lower one from ``epsilon`` plus the rounding margin
    (:data:`~dpplugins.amplification.count_pair.EPS_ROUNDING_MARGIN`)."""
    if epsilon >= eps0 or eps0 == 0:
        return Bounds(0.0, 0.0)
    pair = _clone_pair(eps0, n, c)
    upper = pair.delta(float(below_by_margin(epsilon))).upper
    above = epsilon + EPS_ROUNDING_MARGIN
    lower = pair.delta(above).lower if above < eps0 else 0.0
    return Bounds(min(lower, upper), upper)


def _clone_delta_upper(eps0: float, n: int, c: float, epsilon: float) -> float:
    """The upper bound of :func:`_clone_delta` alone (one evaluation: profiles)."""
    if epsilon >= eps0 or eps0 == 0:
        return 0.0
    return _clone_pair(eps0, n, c).delta(float(below_by_margin(epsilon))).upper


def _clone_epsilon(eps0: float, n: int, c: float, delta: float) -> float:
    """Certified upper bound on the pair's smallest epsilon with delta(epsilon) <= delta (at
    most eps0; safeguarded Newton ending with a checked point, plus the rounding margin)."""
    if eps0 == 0:
        return 0.0
    return min(eps_rounding_margin(_clone_pair(eps0, n, c).epsilon(delta, eps0)), eps0)


def _check_clone(eps0, n, clone_probability) -> tuple[float, int, float]:
    eps0, n = _check_eps0_n(eps0, n)
    c = check_positive("clone_probability", clone_probability)
    if c > 1:
        raise ParameterError("clone_probability", c, "in (0, 1]")
    return eps0, n, c


def clone_pair_delta(eps0: float, n: int, clone_probability: float, epsilon: float) -> Bounds:
    """Exact hockey-stick divergence (both directions) of the clone pair, as certified bounds.

    ``clone_probability`` is :func:`fmt21_clone_probability` or :func:`fmt23_clone_probability`;
    the pair and the formula are in the module docstring.

    Example::

        >>> b = clone_pair_delta(1.0, 1000, fmt21_clone_probability(1.0), 0.2)
        >>> b.lower <= b.upper
        True
    """
    eps0, n, c = _check_clone(eps0, n, clone_probability)
    epsilon = check_nonnegative("epsilon", epsilon)
    return _clone_delta(eps0, n, c, epsilon)


def clone_pair_epsilon(eps0: float, n: int, clone_probability: float, delta: float) -> float:
    """Certified upper bound on the smallest eps with ``delta(eps) <= delta`` for the clone pair
    (bisection on the exact profile; at most eps0)."""
    eps0, n, c = _check_clone(eps0, n, clone_probability)
    delta = check_open_unit("delta", delta)
    return _clone_epsilon(eps0, n, c, delta)


def clone_pair_profile(eps0: float, n: int,
                       clone_probability: float) -> Callable[[np.ndarray], np.ndarray]:
    """The pair's upper profile ``delta(eps)`` as a vectorised callable (for
    :meth:`PrivacyLossDistribution.from_privacy_profile`)."""
    eps0, n, c = _check_clone(eps0, n, clone_probability)

    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        return np.array([_clone_delta_upper(eps0, n, c, float(e))
                         for e in eps.ravel()]).reshape(eps.shape)

    return profile


def _bound(eps, delta, method, eps0, n, r, candidates=None) -> ShuffleBound:
    return ShuffleBound(float(eps), float(delta), method, eps0, n, _randomizer_name(r),
                        dict(candidates or {method: float(eps)}))


def fmt21_epsilon(eps0: float, n: int, delta: float) -> ShuffleBound:
    """FMT21 Thm 3.1 with the clone pair computed exactly: valid for every adaptive sequence of
    eps0-DP local randomizers (pure DP).

    Example::

        >>> round(fmt21_epsilon(4.0, 100_000, 1e-6).epsilon, 3)
        0.17
    """
    eps0, n = _check_eps0_n(eps0, n)
    delta = check_open_unit("delta", delta)
    eps = clone_pair_epsilon(eps0, n, fmt21_clone_probability(eps0), delta)
    return _bound(eps, delta, "fmt21", eps0, n, ("general",))


def fmt23_epsilon(eps0: float, n: int, delta: float, *, randomizer="binary_rr") -> ShuffleBound:
    """FMT23 Thm 3.1 (errata Thm 7.1) with the clone pair computed exactly; only for the
    restricted class (``randomizer="binary_rr"`` or ``("krr", k)``).

    Example::

        >>> fmt23_epsilon(4.0, 100_000, 1e-6).epsilon < fmt21_epsilon(4.0, 100_000, 1e-6).epsilon
        True
    """
    eps0, n = _check_eps0_n(eps0, n)
    delta = check_open_unit("delta", delta)
    r = normalise_randomizer(randomizer)
    c = fmt23_clone_probability(eps0, r)
    eps = clone_pair_epsilon(eps0, n, c, delta)
    return _bound(eps, delta, "fmt23", eps0, n, r)


def fmt21_closed_form_epsilon(eps0: float, n: int, delta: float) -> ShuffleBound:
    """FMT21's analytic bound (Thm 3.2), for eps0-DP randomizers, where it applies.

    We use the form the authors' code evaluates (apple/ml-shuffling-amplification,
    ``closedformanalysis``): with ``A = 8 sqrt(e^eps0 log(4/delta) / n) + 8 e^eps0 / n`` and
    ``e = log(1 + A)``, ``eps = log(1 + (1 - e^-eps0) / (1 + e^(-eps0 - e)) A)``.  The form usually
    quoted from the paper has the factor ``(e^eps0 - 1)/(e^eps0 + 1)`` instead, which is smaller, so
    ours is the conservative one.  Validity: ``eps0 <= log(n / (16 log(4/delta)))`` -- the code's
    condition, stricter than the ``log(2/delta)`` one sometimes quoted.  Outside it we raise
    :class:`ParameterError` instead of returning a number.

    Rounding (ours): the float ``limit`` is lowered by a relative ``1e-12`` before the test
    (eps0 = 0.7691341123148706 was admitted at n = 991 where the exact limit is a few ulps
    below it), and the result is raised by a relative ``1e-12`` (a chain of a dozen roundings,
    each below ``u``; it was up to 3.4e-16 relative below the formula's exact value).
    """
    eps0, n = _check_eps0_n(eps0, n)
    delta = check_open_unit("delta", delta)
    limit = math.log(n / (16 * math.log(4 / delta))) if n > 16 * math.log(4 / delta) else -math.inf
    limit -= 1e-12 * (1.0 + abs(limit))
    if eps0 > limit:
        raise ParameterError(
            "eps0", eps0, f"<= log(n / (16 log(4/delta))) = {limit:.4g} for the FMT21 closed form "
            f"(n={n}, delta={delta:g})", hint="use method='fmt21' (numerical) instead")
    a = 8 * math.sqrt(math.exp(eps0) * math.log(4 / delta) / n) + 8 * math.exp(eps0) / n
    e = math.log1p(a)
    eps = math.log1p(-math.expm1(-eps0) / (1 + math.exp(-eps0 - e)) * a) * (1 + 1e-12)
    return _bound(eps, delta, "fmt21_closed_form", eps0, n, ("general",))


def balle2020_epsilon(eps0: float, n: int, delta: float, *, delta0: float = 0.0) -> ShuffleBound:
    """Balle et al. 2020 Thm 5.1 (pure and approximate-DP randomizers); see
    :func:`dpplugins.amplification.swap.epsilon`."""
    eps0, n = _check_eps0_n(eps0, n)
    delta0 = _check_delta0(delta0)
    res = swap.epsilon(eps0, n, delta, delta0=delta0)
    return _bound(res.epsilon, res.delta, "balle2020", eps0, n, ("general",))


def no_amplification_epsilon(eps0: float, n: int, delta: float, *,
                             delta0: float = 0.0) -> ShuffleBound:
    """The shuffled protocol is (eps0, delta0)-DP like each randomizer (for a fixed permutation
    only one randomizer sees the differing record; mixing over permutations keeps the bound by
    joint convexity of the hockey-stick divergence).  Valid when ``delta0 <= delta``."""
    eps0, n = _check_eps0_n(eps0, n)
    delta = check_open_unit("delta", delta)
    delta0 = _check_delta0(delta0)
    if delta0 > delta:
        raise ParameterError("delta0", delta0, f"<= delta={delta:g} for the no-amplification bound")
    return _bound(eps0, delta, "none", eps0, n, ("general",))


def epsilon(eps0: float, n: int, delta: float, *, randomizer="general", method: str = "best",
            delta0: float = 0.0) -> ShuffleBound:
    """Certified epsilon at ``delta`` for n shuffled adaptive (eps0, delta0)-DP local randomizers.

    ``randomizer`` states the class the caller vouches for: ``"general"`` (any eps0-DP randomizer),
    ``"binary_rr"`` or ``("krr", k)`` (randomized response, which is pure eps0-DP, so delta0 must
    be 0).  ``method``: ``"best"`` (smallest valid bound; ``.method`` names it), ``"fmt21"``,
    ``"fmt23"`` (restricted class only), ``"fmt21_closed_form"``, ``"balle2020"``, ``"none"``.
    With ``delta0 > 0`` only ``"balle2020"`` and ``"none"`` apply (FMT21's approximate-DP
    extension is not implemented; see the module docstring); below ``delta0`` no epsilon is
    finite, and ``"best"`` answers ``inf`` (method ``"none"``): the randomizer that publishes
    its input with probability ``delta0`` and runs eps0-DP randomized response otherwise is
    (eps0, delta0)-DP, and its shuffled reports have ``delta(eps) >= delta0`` at every eps (our
    two-line argument, in the code).

    Example::

        >>> epsilon(4.0, 100_000, 1e-6, randomizer="binary_rr").method
        'fmt23'
    """
    eps0, n = _check_eps0_n(eps0, n)
    delta = check_open_unit("delta", delta)
    delta0 = _check_delta0(delta0)
    r = normalise_randomizer(randomizer)
    method = check_choice("method", method, METHODS)
    if r[0] == "krr" and delta0 > 0:
        raise ParameterError("delta0", delta0, f"0 for randomizer={randomizer!r}",
                             hint="randomized response is pure eps0-DP")
    if delta0 > 0 and method in ("fmt21", "fmt23", "fmt21_closed_form"):
        raise ParameterError(
            "method", method, "'balle2020', 'none' or 'best' when delta0 > 0",
            hint="the clone bounds here are for pure eps0-DP randomizers; FMT21's (eps0, delta0) "
                 "extension is not implemented because its statement could not be confirmed")
    if method == "fmt23" and r[0] == "general":
        fmt23_clone_probability(eps0, randomizer)  # raises the explanatory ParameterError
    runners = {
        "fmt21": lambda: fmt21_epsilon(eps0, n, delta),
        "fmt23": lambda: fmt23_epsilon(eps0, n, delta, randomizer=r),
        "fmt21_closed_form": lambda: fmt21_closed_form_epsilon(eps0, n, delta),
        "balle2020": lambda: balle2020_epsilon(eps0, n, delta, delta0=delta0),
        "none": lambda: no_amplification_epsilon(eps0, n, delta, delta0=delta0),
    }
    if method != "best":
        res = runners[method]()
        return _bound(res.epsilon, delta, method, eps0, n, r)
    names = ["balle2020", "none"]
    if delta0 == 0:
        names = ["fmt21", "fmt21_closed_form"] + (["fmt23"] if r[0] == "krr" else []) + names
    candidates = {}
    for name in names:
        try:
            candidates[name] = runners[name]().epsilon
        except ParameterError:
            continue  # this bound does not apply here (validity condition, delta0 split)
    if not candidates:
        # "none" applies whenever delta0 <= delta, so here delta < delta0: an (eps0, delta0)-DP
        # randomizer may publish its input with probability delta0 (and be eps0-DP otherwise),
        # and then, on a dataset where the differing user's value is held by nobody else, the
        # shuffled reports show that value with probability >= delta0 under one dataset and 0
        # under the other: delta(eps) >= delta0 > delta for every eps, so no finite epsilon
        return _bound(math.inf, delta, "none", eps0, n, r, {"none": math.inf})
    best = min(candidates, key=candidates.get)
    return _bound(candidates[best], delta, best, eps0, n, r, candidates)


# --------------------------------------------------------------------------------------------
# the pair as a PLD
# --------------------------------------------------------------------------------------------
def _pair_pmfs(eps0: float, n: int, c: float, max_support: int):
    """Flattened pmfs of the clone pair on a window of ``(m, j)`` plus two atoms, one where only
    P0 has mass and one where only P1 has, each carrying the mass outside the window.  With the
    exact missing mass the true pair is a post-processing of this one (map each atom to the
    conditional law of the missing part), so it dominates.  We put an *upper bound* on the missing
    mass there: extra P-mass where Q = 0 only increases ``(P - e^eps Q)_+`` pointwise, also for
    products of pairs, so every delta computed from it (composed or not) stays an upper bound.
    ``None`` if the window exceeds ``max_support``."""
    pair = _clone_mixture(eps0, n, c)
    m = pair.m
    k = math.sqrt(-2 * _LOG_CUT) + 1
    j_lo = np.maximum(0, np.floor(m / 2 - k * np.sqrt(m) / 2 - 2)).astype(np.int64)
    j_hi = np.minimum(m, np.ceil(m / 2 + k * np.sqrt(m) / 2 + 2)).astype(np.int64)
    if int((j_hi - j_lo + 1).sum()) > max_support:
        return None
    row, j = ragged_windows(j_lo, j_hi)
    mm = m[row]
    base = pair.weights[row] * stats.binom.pmf(j, mm, 0.5) * 2.0 / mm
    p0 = base * (pair.alpha * j + pair.beta * (mm - j))
    p1 = base * (pair.beta * j + pair.alpha * (mm - j))
    # P0-mass outside the j-window <= 2 P(Bin(m,1/2) outside) (the factor 2(...)/m is <= 2)
    j_out = stats.binom.cdf(j_lo - 1, m, 0.5) + stats.binom.sf(j_hi, m, 0.5)
    missing = pair.outside + 2.0 * float(np.dot(pair.weights, j_out)) + 1e-15
    p = np.concatenate([p0, [missing, 0.0]])
    q = np.concatenate([p1, [0.0, missing]])
    return p, q


def clone_pair_rdp(eps0: float, n: int, orders, *, randomizer="general",
                   method: str = "fmt21") -> np.ndarray:
    """Certified upper bounds on the Renyi divergence ``D_a(P0 || P1)`` of the clone pair.

    The shuffled output of n adaptive eps0-DP randomizers is a post-processing of the pair
    (FMT21 Thm 3.1; FMT23 Thm 3.1 for the errata's class), and Renyi divergence satisfies the data
    processing inequality, so these are RDP bounds for the shuffler (FMT23 Sec. 4 uses the same
    reduction).  The pair is symmetric (swap the roles of 0 and 1), so one direction suffices.

    ``D_a = log(sum P0^a P1^(1-a)) / (a - 1)`` is summed exactly over the window of clone counts
    and zero counts that holds all but e^-75 of the mass; outside it ``P0 / P1 <= e^eps0``
    pointwise, so ``P0^a P1^(1-a) <= P0 e^(eps0 (a - 1))`` bounds what is left out.  Orders must be
    > 1.

    Example::

        >>> float(clone_pair_rdp(1.0, 1000, [2.0])[0]) < 1.0
        True
    """
    eps0, n = _check_eps0_n(eps0, n)
    orders = np.atleast_1d(np.asarray(orders, dtype=float))
    if orders.size == 0 or not np.all(np.isfinite(orders)) or np.any(orders <= 1):
        raise ParameterError("orders", orders.tolist(), "finite Renyi orders > 1")
    if method == "fmt23":
        c = fmt23_clone_probability(eps0, randomizer)
    elif method == "fmt21":
        c = fmt21_clone_probability(eps0)
    else:
        raise ParameterError("method", method, "'fmt21' or 'fmt23'")
    if eps0 == 0:
        return np.zeros(orders.shape)
    pair = _clone_mixture(eps0, n, c)
    k = math.sqrt(-2 * _LOG_CUT) + 1
    log_sums = np.full(orders.shape, -np.inf)
    missing = pair.outside
    log_alpha, log_beta = math.log(pair.alpha), math.log(pair.beta)
    summed = 0
    for m, weight in zip(pair.m.tolist(), pair.weights.tolist()):
        if weight <= 0:
            continue
        j_lo = max(0, int(math.floor(m / 2 - k * math.sqrt(m) / 2 - 2)))
        j_hi = min(m, int(math.ceil(m / 2 + k * math.sqrt(m) / 2 + 2)))
        j = np.arange(j_lo, j_hi + 1)
        log_base = math.log(weight) + stats.binom.logpmf(j, m, 0.5) + math.log(2.0 / m)
        log_p0 = log_base + np.logaddexp(log_alpha + np.log(np.maximum(j, 1e-300)),
                                         log_beta + np.log(np.maximum(m - j, 1e-300)))
        log_p1 = log_base + np.logaddexp(log_beta + np.log(np.maximum(j, 1e-300)),
                                         log_alpha + np.log(np.maximum(m - j, 1e-300)))
        terms = orders[:, None] * log_p0[None, :] + (1 - orders[:, None]) * log_p1[None, :]
        # rounding, each term raised by its bound (our derivation): the logarithms are off by
        # 16 u of their magnitudes plus what binom.logpmf loses, within 6.1 u m absolutely
        # (numerically checked against 40-digit values for m up to 10^7), times the weights
        # a and a - 1 of the two logarithms
        slack = 16 * _U * ((m + 40.0) + np.abs(log_p0) + np.abs(log_p1))
        terms += (orders + np.abs(1 - orders))[:, None] * slack[None, :]
        log_sums = np.logaddexp(log_sums, special.logsumexp(terms, axis=1))
        summed += len(j)
        out = stats.binom.cdf(j_lo - 1, m, 0.5) + stats.binom.sf(j_hi, m, 0.5)
        missing += 2.0 * weight * float(out)  # P0-mass outside the j-window (factor <= 2)
    # floating point: a sum of ``summed`` positive terms is off by at most (summed + 2) u
    # relatively (doubled here, and at least 1e-12); the certified outside part is added in
    # logarithms (e^(eps0 (a - 1)) overflowed from order 710 / eps0 on: inf and a
    # RuntimeWarning); the pair is eps0-DP (P0 / P1 <= e^eps0 pointwise), so D_a <= eps0
    log_total = np.logaddexp(log_sums + math.log1p(max(1e-12, 2 * (summed + 2) * _U)),
                             math.log(missing + 1e-15) + eps0 * (orders - 1))
    return np.minimum(log_total / (orders - 1), eps0)


def dominating_pair_pld(eps0: float, n: int, *, randomizer="general", method: str = "fmt21",
                        value_discretization_interval: float | None = None,
                        max_support: int = 2_000_000, **options) -> PrivacyLossDistribution:
    """The clone pair (FMT21 or FMT23) as a dominating PLD, so repeated shuffles compose by FFT
    (Koskela, Heikkilä, Honkela 2021).

    Built from the pmfs on the ``(n0, n1)`` support with
    :meth:`PrivacyLossDistribution.from_pmfs` when the support window has at most ``max_support``
    points (lower and upper bounds), otherwise from the exact privacy profile with
    ``from_privacy_profile`` (upper bounds only; the profile is sampled up to the eps where it
    falls below 1e-15, and the rest goes to ``delta(inf)``).  The pair is symmetric, so one
    direction is kept.  The default grid step is 1/1000 of that eps (pass the same
    ``value_discretization_interval`` to every PLD you compose this with).

    Example::

        >>> pld = dominating_pair_pld(2.0, 500, value_discretization_interval=1e-3)
        >>> pld.self_compose(10).epsilon_for_delta(1e-6).upper > 0
        True
    """
    eps0, n = _check_eps0_n(eps0, n)
    r = normalise_randomizer(randomizer)
    method = check_choice("method", method, ("fmt21", "fmt23"))
    c = fmt21_clone_probability(eps0) if method == "fmt21" else fmt23_clone_probability(eps0, r)
    if eps0 == 0:
        h = check_positive("value_discretization_interval", value_discretization_interval or 1e-3)
        return PrivacyLossDistribution.from_pmfs([1.0], [1.0], symmetric=True,
                                                 value_discretization_interval=h, **options)
    eps_hi = max(_clone_epsilon(eps0, n, c, 1e-15), 1e-6)
    h = check_positive("value_discretization_interval",
                       value_discretization_interval or float(np.clip(eps_hi / 1000, 1e-6, 1e-2)))
    pmfs = _pair_pmfs(eps0, n, c, int(max_support))
    if pmfs is not None:
        return PrivacyLossDistribution.from_pmfs(pmfs[0], pmfs[1], symmetric=True,
                                                 value_discretization_interval=h, **options)
    return PrivacyLossDistribution.from_privacy_profile(
        clone_pair_profile(eps0, n, c), epsilon_max=eps_hi, symmetric=True,
        value_discretization_interval=h, profile_step=max(h, eps_hi / 100),
        description=f"{method} clone pair (eps0={eps0:g}, n={n})", **options)


# --------------------------------------------------------------------------------------------
# lower bounds: shuffled randomized response computed exactly
# --------------------------------------------------------------------------------------------
def _binary_rr_delta(eps0: float, n: int, epsilon: float, others_ones: int) -> Bounds:
    """Shuffled binary RR, differing user 0 vs 1, ``others_ones`` of the others hold 1: the output
    is the count of reported 1s; both directions, windowed with the dropped mass charged."""
    alpha, beta = float(special.expit(eps0)), float(special.expit(-eps0))
    trials = n - 1
    parts, dropped = [], 0.0
    start = 0
    for count, prob in ((others_ones, alpha), (trials - others_ones, beta)):
        lo, hi, out = binomial_window(count, prob)
        parts.append(stats.binom.pmf(np.arange(lo, hi + 1), count, prob))
        start += lo
        dropped += out
    w = np.convolve(parts[0], parts[1])
    w = np.concatenate([[0.0], w, [0.0]])  # W(s-1) and W(s) on s = start .. start+len
    w_prev, w_cur = w[:-1], w[1:]
    p0 = alpha * w_cur + beta * w_prev
    p1 = beta * w_cur + alpha * w_prev
    x = math.exp(epsilon)
    value = max(float(np.sum(np.maximum(p0 - x * p1, 0.0))),
                float(np.sum(np.maximum(p1 - x * p0, 0.0))))
    # dropped mass moves each sum by at most (1 + e^eps) times it; np.convolve sums len(w)
    # non-negative products (relative error <= len(w) u each), and the differences cancel at
    # most against (1 + e^eps) units of mass
    slack = (1 + x) * (dropped + 4 * _U * len(w) + 1e-13)
    return Bounds(float(max(value - slack, 0.0)), float(min(value + slack, 1.0)))


def _ternary_rr_delta(eps0: float, n: int, epsilon: float) -> Bounds:
    """Shuffled 3-RR, differing user a vs b, every other user holds the third value c.

    With ``p = 1/(e^eps0 + 2)`` the histogram ``(A, B, D)`` has
    ``P0 = Mult(n; p, p, e^eps0 p)(A, B, D) (e^(2 eps0) A + e^eps0 B + D) / (n e^eps0)`` (and
    A <-> B for P1): the count pair
    :func:`~dpplugins.amplification.count_pair.krr_lower_pairs` calls ``"others_at_c"``, whose
    delta is a closed-form sum like the clone pair's (one implementation, in
    :class:`~dpplugins.amplification.count_pair.CountPair`).  Symmetric pair.

    Like :func:`_clone_delta`: 0 from eps0 on (the likelihood ratio is at most ``e^eps0``), the
    upper bound from ``epsilon`` less and the lower one from ``epsilon`` plus the rounding
    margin (:data:`~dpplugins.amplification.count_pair.EPS_ROUNDING_MARGIN`).  Without them
    the bounds missed the exact value on both sides at a tiny eps0 (an upper bound a relative
    2.3e-8 below it at eps0 = 1.9e-8, n = 3; an upper bound of 0 where it is 5e-19 at epsilon a
    few ulps below eps0 = 0.0116), found by exact enumeration.
    """
    if epsilon >= eps0:
        return Bounds(0.0, 0.0)
    pair = _ternary_pair(eps0, n)
    upper = pair.delta(float(below_by_margin(epsilon))).upper
    above = epsilon + EPS_ROUNDING_MARGIN
    lower = pair.delta(above).lower if above < eps0 else 0.0
    return Bounds(min(lower, upper), upper)


@functools.lru_cache(maxsize=64)
def _ternary_pair(eps0: float, n: int) -> CountPair:
    """The pair of :func:`_ternary_rr_delta`, built once per ``(eps0, n)`` (its binomial window
    and weights): a lower bound on epsilon evaluates it dozens of times."""
    return krr_lower_pairs(eps0, n, 3)["others_at_c"]


def shuffled_rr_delta(eps0: float, n: int, epsilon: float, *, k: int = 2,
                      others_ones: int | None = None) -> Bounds:
    """Exact delta(epsilon) (both directions, as certified bounds) of n shuffled k-RR reports on
    one pair of neighbouring datasets -- a *lower* bound for every upper bound in this module.

    ``k = 2``: the differing user holds 0 vs 1 and ``others_ones`` of the others hold 1 (default 0).
    ``k = 3``: the differing user holds a vs b and every other user the third value (the worst
    case on tiny instances by brute force).  The output of shuffled RR is its histogram.

    Example::

        >>> b = shuffled_rr_delta(2.0, 1000, 0.3, k=3)
        >>> 0 < b.lower <= b.upper < 1
        True
    """
    eps0, n = _check_eps0_n(eps0, n)
    if eps0 > 300:
        raise ParameterError("eps0", eps0, "<= 300 for the randomized-response lower bounds")
    epsilon = check_nonnegative("epsilon", epsilon)
    k = check_count("k", k, minimum=2)
    if k == 2:
        ones = 0 if others_ones is None else check_count("others_ones", others_ones)
        if ones > n - 1:
            raise ParameterError("others_ones", ones, f"<= n - 1 = {n - 1}")
        return _binary_rr_delta(eps0, n, epsilon, ones)
    if k == 3:
        if others_ones is not None:
            raise ParameterError("others_ones", others_ones, "None for k = 3")
        return _ternary_rr_delta(eps0, n, epsilon)
    raise ParameterError("k", k, "2 or 3")


def rr_lower_bound_epsilon(eps0: float, n: int, delta: float, *, k: int = 2) -> float:
    """Certified lower bound on epsilon(delta) of shuffled k-RR (k = 2: best of the datasets with
    0 and floor((n-1)/2) other ones; k = 3: others on the third value).

    Example::

        >>> rr_lower_bound_epsilon(2.0, 1000, 1e-6, k=2) <= fmt23_epsilon(2.0, 1000, 1e-6).epsilon
        True
    """
    eps0, n = _check_eps0_n(eps0, n)
    delta = check_open_unit("delta", delta)
    # (less the rounding margin: count_pair.EPS_ROUNDING_MARGIN)
    if k == 2:
        options = sorted({0, (n - 1) // 2})
        return eps_less_margin(max(largest_violated(
            lambda e, o=o: shuffled_rr_delta(eps0, n, e, k=2, others_ones=o).lower, delta, eps0)
            for o in options))
    return eps_less_margin(largest_violated(
        lambda e: shuffled_rr_delta(eps0, n, e, k=k).lower, delta, eps0))


def lower_bound(eps0: float, n: int, delta: float) -> ShuffleBound:
    """Largest of the exact shuffled 2-RR and 3-RR lower bounds (FMT23, Sec. "Numerical results"):
    no valid upper bound for eps0-DP randomizers can be smaller.

    Example::

        >>> lb = lower_bound(4.0, 100_000, 1e-6)
        >>> lb.epsilon <= fmt21_epsilon(4.0, 100_000, 1e-6).epsilon
        True
    """
    eps0, n = _check_eps0_n(eps0, n)
    delta = check_open_unit("delta", delta)
    cands = {"2rr_lower": rr_lower_bound_epsilon(eps0, n, delta, k=2),
             "3rr_lower": rr_lower_bound_epsilon(eps0, n, delta, k=3)}
    best = max(cands, key=cands.get)
    return ShuffleBound(cands[best], delta, best, eps0, n, "lower bound", cands)


# --------------------------------------------------------------------------------------------
# DP-SGD with shuffled batches
# --------------------------------------------------------------------------------------------
def gaussian_amplified_profile(noise_multiplier: float, n: int, *, sensitivity: float = 2.0
                               ) -> Callable[[np.ndarray], np.ndarray]:
    """Per-epoch ``delta(eps)`` for batch size 1 with Gaussian noise on every step: each step is a
    Gaussian local randomizer on one example (sensitivity 2 = the diameter of clipped gradients),
    (eps0, delta0)-DP along its exact profile; the best valid bound for approximate-DP randomizers
    available here is Balle et al. 2020 Thm 5.1 (:func:`swap.gaussian_profile`).

    Example::

        >>> import numpy as np
        >>> float(gaussian_amplified_profile(300.0, 10**6)(np.array([0.01]))[0]) < 1e-9
        True
    """
    return swap.gaussian_profile(noise_multiplier, n, sensitivity=sensitivity)


def _log_max_cdf(tau, sigma, released, fraction, mean):
    """log P(max of the ``released`` coordinates <= tau) when the differing record (mean shift
    ``mean``) sits in one released step with probability ``fraction`` (uniformly among them; by
    symmetry of the max only the total matters) and in an unreleased one otherwise."""
    log_phi = special.log_ndtr(tau / sigma)
    shifted = math.log(fraction) + special.log_ndtr((tau - mean) / sigma)
    if fraction < 1:
        mixed = np.logaddexp(shifted, math.log1p(-fraction) + log_phi)
        # Above the median, log of the mixture through its deficit f Phi(-(tau - mean)/s) +
        # (1 - f) Phi(-tau/s): logaddexp next to log f = O(1) rounds the log-CDF to multiples
        # of 1.1e-16, so the survival function of the tail was quantised and the top bins got
        # privacy losses of rounding noise (swap, n = 2, half an epoch, sigma = 1: 11.95 at
        # delta = 1e-12 where the pair's exact value is 7.14)
        deficit = (fraction * special.ndtr(-(tau - mean) / sigma)
                   + (1 - fraction) * special.ndtr(-tau / sigma))
        shifted = np.where(deficit < 0.5, np.log1p(-np.minimum(deficit, 0.5)), mixed)
    return float(released - 1) * log_phi + shifted   # float: a Python int may exceed int64


def max_statistic_pair(noise_multiplier: float, steps_per_epoch: int, mean_p: float, mean_q: float,
                       *, released_steps: int | None = None, released_fraction: float | None = None,
                       bin_width: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Exact bin masses of ``M = max_t y_t`` for one shuffled epoch of the Chua et al. pair.

    One epoch releases ``y_t = (sum of the batch's clipped gradients) + N(0, sigma^2)``.  Every
    record but one has gradient ``u``, so every batch sum is a known constant except in the batch
    holding the differing record, where it is shifted by ``mean_p`` (on X) or ``mean_q`` (on X');
    that batch is uniformly random.  Hence ``P = (1/T) sum_t N(mean_p e_t, sigma^2 I)`` and ``Q``
    likewise (Chua, Ghazi, Kamath, Kumar, Manurangsi, Sinha, Zhang: ICML 2024 "How Private are
    DP-SGD Implementations?", arXiv:2403.17673, and NeurIPS 2024 "Scalable DP-SGD: Shuffling vs.
    Poisson Subsampling", arXiv:2411.04205; their code, google-research
    ``dpsgd_batch_sampler_accounting``, tests the sets
    ``{max_t y_t > C}``).  ``P(M <= tau) = Phi(tau/s)^(T-1) Phi((tau - mean)/s)``; binning M is a
    post-processing, so the binned pair's divergence is a lower bound for the mechanism.  Bins are
    exact probabilities (the two end bins are half-lines), so nothing is truncated.  A partial last
    epoch releases ``released_steps < T`` steps and holds the record with probability
    ``released_fraction`` (default ``released_steps / T``).

    Example::

        >>> p, q = max_statistic_pair(1.0, 100, 2.0, 1.0)
        >>> round(float(p.sum()), 12), bool(0.5 * abs(p - q).sum() > 0)
        (1.0, True)
    """
    sigma = check_positive("noise_multiplier", noise_multiplier)
    T = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    k = T if released_steps is None else check_count("released_steps", released_steps, minimum=1)
    if k > T:
        raise ParameterError("released_steps", k, f"<= steps_per_epoch={T}")
    frac = k / T if released_fraction is None else float(released_fraction)
    if not 0 < frac <= 1:
        raise ParameterError("released_fraction", released_fraction, "in (0, 1]")
    top = max(mean_p, mean_q, 0.0)
    lo = sigma * float(special.ndtri_exp(-80.0 / k)) + min(mean_p, mean_q, 0.0)
    hi = top - sigma * float(special.ndtri_exp(-80.0 - math.log(k)))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        # noise near the float limit (sigma = 1e308): the window's ends overflow and linspace
        # raised numpy's invalid-value warning.  One bin for all outcomes is a post-processing
        # (the trivial statistic): a valid pair for lower bounds, which certifies 0
        return np.ones(1), np.ones(1)
    gap = abs(mean_p - mean_q)
    width = bin_width or min(sigma / 10, 5e-4 * sigma * sigma / max(gap, 1e-12))
    with np.errstate(over="ignore", divide="ignore"):
        # sigma^2 may underflow (sigma = 1e-300): then the finest binning
        count = int(min(max((hi - lo) / width, 1000), 200_000)) if width > 0 else 200_000
    edges = np.linspace(lo, hi, count + 1)
    masses = []
    for mean in (mean_p, mean_q):
        log_f = np.minimum(_log_max_cdf(edges, sigma, k, frac, mean), 0.0)
        surv = -np.expm1(log_f)
        f = np.exp(log_f)
        low_half = f[1:] <= 0.5
        with np.errstate(invalid="ignore", over="ignore"):
            inner_low = f[1:] * -np.expm1(log_f[:-1] - log_f[1:])
        inner_low = np.where(f[1:] > 0, inner_low, 0.0)   # (-inf) - (-inf): an empty bin
        inner = np.where(low_half, inner_low, surv[:-1] - surv[1:])
        masses.append(np.maximum(np.concatenate([[f[0]], inner, [surv[-1]]]), 0.0))
    p, q = masses
    keep = (p > 0) | (q > 0)  # outcomes of probability 0 under both carry no information
    p, q = p[keep], q[keep]
    return merge_unrepresented_bins(p / p.sum(), q / q.sum())


#: bin masses below this are not trusted to carry their privacy loss (``exp`` of a log-CDF
#: below about -708 is subnormal or 0): :func:`merge_unrepresented_bins`
REPRESENTED_MASS = 1e-290


def merge_unrepresented_bins(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A binned pair whose every bin has both masses at least :data:`REPRESENTED_MASS` (or is
    merged), for lower bounds.

    Where one law's mass of a bin is below the floating-point range (the Chua et al. pair at
    sigma = 0.05 has bins of privacy loss above 709: ``q`` underflows to 0 while ``p`` is 2e-7),
    the PLD reads the bin as infinite privacy loss, and a "lower bound" far above what the pair
    certifies -- above the exact value for one step per epoch -- was reported.  Merging bins is a
    post-processing (a coarser statistic), so the merged pair's divergence is still a lower
    bound for the mechanism.  The bins with ``min(p, q) < REPRESENTED_MASS`` and ``p >= q`` are
    merged into the represented bin of the largest ratio ``p / q`` (those with ``q > p`` into
    the one of the smallest), and the smaller law's merged mass is raised by ``2
    REPRESENTED_MASS`` per merged bin, above what it lost to underflow or rounding (each such
    mass is below ``REPRESENTED_MASS`` up to an absolute 1e-300).  Then ``(p - e^eps q)_+``
    of the merged bin (remove direction) is at most its true value; and as long as the merged
    bin still has ``q <= p``, ``(q - e^eps p)_+ = 0`` for ``eps >= 0`` in the add direction
    (likewise for the other end), so neither direction's lower bound rises (our derivation).  A
    pair where that fails, or with no represented bin (sigma = 1e-300), becomes one bin (a
    constant output: lower bound 0).  Sums stay within ``4e5 REPRESENTED_MASS`` of 1 (at most
    200,000 bins)."""
    if p.size == 0 or not (np.all(np.isfinite(p)) and np.all(np.isfinite(q))):
        return np.ones(1), np.ones(1)   # (sigma = 5e307: the bin edges overflowed)
    small = np.minimum(p, q) < REPRESENTED_MASS
    if not np.any(small):
        return p, q
    p, q = p.copy(), q.copy()
    kept = ~small
    if not np.any(kept):
        return np.ones(1), np.ones(1)   # a constant output
    with np.errstate(divide="ignore"):
        log_ratio = np.log(p) - np.log(q)
    for high in (True, False):
        merged = small & ((p >= q) if high else (q > p))
        if not np.any(merged):
            continue
        candidates = np.flatnonzero(kept)
        target = candidates[np.argmax(log_ratio[candidates]) if high
                            else np.argmin(log_ratio[candidates])]
        slack = 2.0 * REPRESENTED_MASS * int(merged.sum())
        if high:
            p[target] += p[merged].sum()
            q[target] += q[merged].sum() + slack
            safe = q[target] <= p[target]
        else:
            q[target] += q[merged].sum()
            p[target] += p[merged].sum() + slack
            safe = p[target] <= q[target]
        if not safe:
            return np.ones(1), np.ones(1)   # a constant output
        p[merged], q[merged] = 0.0, 0.0
    keep = (p > 0) | (q > 0)
    return p[keep], q[keep]


def neighbour_means(neighbouring: str) -> list[tuple[float, float]]:
    """(mean_p, mean_q) pairs realisable with gradients of norm <= 1 (clipping norm 1): others at
    ``u``, the differing record ``v`` vs ``v'``; means are ``v - u`` and ``v' - u``.  Zero-out
    ("add_remove": v' is the null record, gradient 0): (2, 1) with u = -1 and (1, 0) with u = 0;
    replace-one adds (2, 0) (u = -1, v = 1, v' = -1)."""
    if neighbouring == "replace_one":
        return [(2.0, 0.0), (2.0, 1.0), (1.0, 0.0)]
    return [(2.0, 1.0), (1.0, 0.0)]


_neighbour_means = neighbour_means   # the name of version 0.1


def pairs_pld(pairs: Mapping[tuple, tuple[np.ndarray, np.ndarray]], epochs: Mapping[tuple, int],
              h: float) -> PrivacyLossDistribution:
    """PLD of independent epochs given their binned pairs ``{key: (p, q)}`` and counts
    ``{key: count}`` (same keys), on grid step ``h``: each pair's PLD composed ``count`` times,
    all composed together (the composition theorem for independent mechanisms; Dong, Roth, Su
    2022, arXiv:1905.02383, Thm 3.2)."""
    total = None
    for key, count in epochs.items():
        p, q = pairs[key]
        part = PrivacyLossDistribution.from_pmfs(p, q, symmetric=False,
                                                 value_discretization_interval=h)
        part = part.self_compose(count)
        total = part if total is None else total.compose(part)
    return total


def shuffle_lower_bound_pld(epochs: Mapping[tuple, int], steps_per_epoch: int,
                            mean_p: float, mean_q: float, h: float) -> PrivacyLossDistribution:
    """PLD of the binned Chua et al. pair over epochs given as
    ``{(sigma, released_steps, released_fraction): count}`` (an independent reshuffle per epoch,
    so epochs compose).  ``sigma`` must be the *largest* noise multiplier among the epoch's steps:
    a step with less noise becomes one with noise ``sigma`` by adding independent Gaussian noise
    (a post-processing), so the pair built with ``sigma`` is a post-processing of the real one and
    its divergence is still a lower bound.  Only the PLD's lower bounds are meaningful."""
    pairs = {key: max_statistic_pair(key[0], steps_per_epoch, mean_p, mean_q,
                                     released_steps=key[1], released_fraction=key[2])
             for key in epochs}
    return pairs_pld(pairs, epochs, h)


def shuffle_lower_bound(noise_multiplier: float, steps_per_epoch: int, epochs: int, delta: float,
                        *, neighbouring: str = "add_remove",
                        value_discretization_interval: float | None = None) -> float:
    """Certified *lower* bound on epsilon(delta) of DP-SGD with shuffled batches (a fresh random
    permutation every epoch, every example in exactly one of the ``steps_per_epoch`` batches --
    no ``drop_last`` --, one Gaussian noise draw per batch, clipping norm 1, noise standard
    deviation ``noise_multiplier``, every noisy batch gradient released).

    Construction (Chua et al. 2024; see :func:`max_statistic_pair`): a linear loss realises any
    clipped gradients, all records but the differing one share one gradient, and the test statistic
    is the per-epoch maximum of the noisy batch sums.  We compose the exact binned pair over epochs
    with the PLD engine's *lower* bounds and take the largest result over the realisable
    ``(mean_p, mean_q)``.  ``neighbouring="add_remove"`` is read as zero-out (the differing record
    is replaced by one with zero gradient), the usual add/remove surrogate for fixed-size batches.

    Example::

        >>> round(shuffle_lower_bound(1.0, 100, 1, 1e-5), 2) > 0
        True
    """
    sigma = check_positive("noise_multiplier", noise_multiplier)
    T = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    epochs = check_count("epochs", epochs, minimum=1)
    delta = check_open_unit("delta", delta)
    neighbouring = check_choice("neighbouring", neighbouring, ("add_remove", "replace_one"))
    h = value_discretization_interval or float(np.clip(1.0 / (sigma * 200), 1e-4, 5e-3))
    best = 0.0
    for mean_p, mean_q in neighbour_means(neighbouring):
        pld = shuffle_lower_bound_pld({(sigma, T, 1.0): epochs}, T, mean_p, mean_q, h)
        try:
            best = max(best, pld.epsilon_for_delta(delta).lower)
        except NumericalError:
            continue
    return best
