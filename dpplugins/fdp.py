"""f-DP and Gaussian DP: trade-off functions, conversions, composition, subsampling, CLT, groups.

Sources (theorem numbers as in arXiv:1905.02383, the numbering van Dijk & Nguyen use; the
published version, JRSS-B 84(1) 2022, renumbers some results):

* **DRS** -- Dong, Roth, Su (2022), "Gaussian differential privacy".
* **BDLS** -- Bu, Dong, Long, Su (2020), "Deep learning with Gaussian differential privacy",
  Harvard Data Science Review 2(3).
* van Dijk, Nguyen (2023), "Considerations on the Theory of Training Models with Differential
  Privacy", arXiv:2303.04676, Sec. 4.

Conventions.  A trade-off function ``f = T(P, Q)`` maps a type I error ``alpha`` (test of the null
``P``) to the smallest type II error (DRS Def. 2.1); it is convex, continuous, non-increasing and
``f(alpha) <= 1 - alpha``.  A mechanism is f-DP if ``T(M(d), M(d')) >= f`` for all neighbouring
``d, d'``; larger ``f`` means more privacy.  ``G_mu = T(N(0,1), N(mu,1))``.  The privacy profile of
``f`` is ``delta_f(eps) = 1 + f*(-e^eps) = sup_alpha (1 - f(alpha) - e^eps alpha)``, the
hockey-stick divergence ``H_{e^eps}(Q || P)`` (DRS Prop. 2.12).

What is a bound and what is not:

* closed forms (``gaussian_tradeoff``, ``gdp_delta_for_epsilon``, ``gdp_compose``,
  ``gdp_group_mu``, ``subsampled_gaussian_delta``) are exact formulas evaluated in floating
  point: a few ulps either way, except that the Gaussian profile's two terms cancel at small
  ``mu`` (relative error up to about ``u / mu``: 1e-9 at ``mu`` near 0.002, 9 % at ``mu =
  5e-15``; below about 1e-49 it underflows to 0);
  ``subsampled_gaussian_delta_upper`` rounds *up* (for profiles that must be upper bounds);
* ``gdp_epsilon_for_delta`` rounds *up* (never in the user's favour);
* :class:`TradeoffCurve` objects are piecewise-linear curves on an ``alpha`` grid.  Curves made
  from a privacy profile or a PLD (``tradeoff_from_privacy_profile``, ``tradeoff_from_pld``) are
  valid *lower* bounds on the trade-off function at their grid points (every ``eps`` gives a
  valid ``f_{eps,delta}`` and we take the supremum over a finite set); curves made by sampling a
  smooth function are exact at the grid points.  Between grid points linear interpolation lies
  *above* a convex function (the chord error); :meth:`TradeoffCurve.lower_bound` gives a curve
  that is below it everywhere, and the composition path (``tradeoff_to_pld``) uses it;
* the CLT values (``clt_mu_*``) are **approximations, not bounds**: for small ``T`` or large
  sampling rates they under-report epsilon.  Use the PLD (``dpplugins.accountants.create("fdp")``)
  for certified values.

Example::

    >>> from dpplugins import fdp
    >>> round(float(fdp.gaussian_tradeoff(0.05, 1.0)), 4)    # G_1(0.05)
    0.7405
    >>> round(fdp.gdp_epsilon_for_delta(1.0, 1e-5), 3)        # 1-GDP at delta = 1e-5
    4.377
    >>> round(fdp.gdp_compose([0.3] * 100), 12)               # 100 x 0.3-GDP = 3-GDP
    3.0
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence, Union

import numpy as np
from scipy import special
from scipy.optimize import brentq

from dpplugins.errors import (NumericalError, ParameterError, check_choice, check_count,
                              check_nonnegative, check_open_unit, check_positive,
                              check_probability)
from dpplugins.mechanisms.gaussian import (gaussian_delta, gaussian_delta_upper,
                                           gaussian_delta_upper_many)
from dpplugins.numerics import smallest_epsilon
from dpplugins.pld.grid import lower_convex_hull

__all__ = [
    "CLTEstimateWarning",
    "TradeoffCurve",
    "gaussian_tradeoff",
    "G_mu",
    "epsilon_delta_tradeoff",
    "default_alphas",
    "alpha_array",
    "tradeoff_curve",
    "tradeoff_from_privacy_profile",
    "tradeoff_from_pld",
    "tradeoff_to_pld",
    "compose_tradeoffs",
    "gdp_delta_for_epsilon",
    "gdp_epsilon_for_delta",
    "equivalent_gdp_mu",
    "gdp_compose",
    "gdp_group_mu",
    "group_tradeoff",
    "subsampled_tradeoff",
    "subsampled_gaussian_delta",
    "subsampled_gaussian_delta_upper",
    "clt_mu_poisson",
    "clt_mu_uniform",
    "clt_mu_from_history",
]


class CLTEstimateWarning(UserWarning):
    """A value from the central limit theorem was returned: an estimate, not a bound.

    The CLT (DRS Thm 3.5, Cor. 5.4; BDLS) describes the limit ``T -> inf`` with ``q sqrt(T)`` fixed;
    at finite ``T`` it can under-report epsilon.
    """


TradeoffLike = Union["TradeoffCurve", Callable[[np.ndarray], np.ndarray]]


# -- validation ------------------------------------------------------------------------------
def alpha_array(alpha, name: str = "alpha") -> np.ndarray:
    """``alpha`` as a float array of type I errors, checked: ParameterError naming ``name``
    unless every value is in [0, 1] (and there is at least one).

    Example::

        >>> alpha_array([0.0, 0.5]).tolist()
        [0.0, 0.5]
    """
    arr = np.asarray(alpha, dtype=float)
    if arr.size == 0 or np.any(np.isnan(arr)) or np.any(arr < 0) or np.any(arr > 1):
        bad = arr[np.isnan(arr) | (arr < 0) | (arr > 1)] if arr.size else arr
        shown = float(bad.flat[0]) if bad.size else alpha
        raise ParameterError(name, shown, "in [0, 1] (a type I error)")
    return arr


_alpha_array = alpha_array   # the name of version 0.1 (other modules: use alpha_array)


def _mu(mu, name: str = "mu") -> float:
    return check_nonnegative(name, mu)


def _as_curve(f: TradeoffLike, alphas) -> "TradeoffCurve":
    if isinstance(f, TradeoffCurve):
        return f if alphas is None else f.resample(alphas)
    if not callable(f):
        raise ParameterError("f", type(f).__name__,
                             "a TradeoffCurve or a callable alpha -> f(alpha)")
    return tradeoff_curve(f, alphas)


# -- trade-off functions ---------------------------------------------------------------------
def gaussian_tradeoff(alpha, mu: float) -> np.ndarray:
    """``G_mu(alpha) = Phi(Phi^-1(1 - alpha) - mu)`` (DRS Def. 2.6; restated by van Dijk & Nguyen 2023).

    Computed as ``Phi(-Phi^-1(alpha) - mu)`` so that small ``alpha`` keeps its digits.

    Example::

        >>> float(gaussian_tradeoff(0.5, 0.0))   # mu = 0: perfect privacy, 1 - alpha
        0.5
    """
    a = alpha_array(alpha)
    mu = _mu(mu)
    with np.errstate(divide="ignore", invalid="ignore"):
        return special.ndtr(-special.ndtri(a) - mu)


#: the paper's name for :func:`gaussian_tradeoff`
G_mu = gaussian_tradeoff


def epsilon_delta_tradeoff(alpha, epsilon: float, delta: float) -> np.ndarray:
    """The trade-off function of (eps, delta)-DP, the four-segment curve
    ``f_{eps,delta}(alpha) = max(0, 1 - delta - e^eps alpha, e^-eps (1 - delta - alpha))``
    (DRS Eq. (5) and Prop. 2.5, after Wasserman & Zhou 2010 and Kairouz, Oh, Viswanath 2017):
    a mechanism is (eps, delta)-DP iff it is ``f_{eps,delta}``-DP.

    Example::

        >>> float(epsilon_delta_tradeoff(0.0, 1.0, 0.1))
        0.9
    """
    a = alpha_array(alpha)
    eps = check_nonnegative("epsilon", epsilon)
    delta = check_probability("delta", delta, allow_zero=True)
    # (math.exp overflowed for eps above 709: an OverflowError; e^eps alpha is then inf where
    # alpha > 0 and the segment is 0 there, 1 - delta at alpha = 0)
    steep = (1 - delta - math.exp(eps) * a) if eps < 709 else np.where(a > 0, -np.inf, 1 - delta)
    return np.maximum.reduce([np.zeros_like(a), steep, math.exp(-eps) * (1 - delta - a)])


def _merged_grid(*grids: np.ndarray) -> np.ndarray:
    """Sorted union of grids on [0, 1]; points closer than 1e-13 to the previous one are dropped
    (near-duplicates only add rounding noise to slopes)."""
    x = np.unique(np.clip(np.concatenate(grids), 0.0, 1.0))
    keep = np.concatenate([[True], np.diff(x) > 1e-13])
    x = x[keep]
    x[0], x[-1] = 0.0, 1.0
    return x


def default_alphas(points: int = 1001) -> np.ndarray:
    """A grid on [0, 1]: ``points`` equally spaced values plus log-spaced values down to 1e-12 at
    both ends (trade-off curves of Gaussians are steep near alpha = 0 and flat near 1)."""
    points = check_count("points", points, minimum=3)
    tails = np.logspace(-12, math.log10(0.05), 120)
    return _merged_grid(np.linspace(0.0, 1.0, points), tails, 1.0 - tails)


@dataclass(frozen=True, eq=False)
class TradeoffCurve:
    """A trade-off function given by its values on a grid, linear in between.

    ``alphas`` must be strictly increasing from 0 to 1; ``values`` must lie in ``[0, 1 - alpha]``
    (up to 1e-12).  A piecewise-linear convex non-increasing curve is itself a trade-off function
    (that of a discrete pair, see :func:`tradeoff_to_pld`).  Build one with
    :func:`tradeoff_curve`, :func:`tradeoff_from_privacy_profile`, :func:`subsampled_tradeoff`, ...

    Example::

        >>> curve = tradeoff_curve(lambda a: gaussian_tradeoff(a, 1.0))
        >>> curve.is_tradeoff_function(), curve.symmetry_gap() < 1e-4
        (True, True)
    """

    alphas: np.ndarray
    values: np.ndarray
    description: str = ""

    def __post_init__(self) -> None:
        a = alpha_array(self.alphas, "alphas")
        v = np.asarray(self.values, dtype=float)
        if a.ndim != 1 or a.size < 2 or a[0] != 0.0 or a[-1] != 1.0 or np.any(np.diff(a) <= 0):
            raise ParameterError("alphas", f"{a.size} points from {a.flat[0]:g} to {a.flat[-1]:g}",
                                 "a strictly increasing grid from 0 to 1")
        if v.shape != a.shape or not np.all(np.isfinite(v)):
            raise ParameterError("values", f"shape {v.shape}", f"finite values of shape {a.shape}")
        if np.any(v < -1e-12) or np.any(v > 1 - a + 1e-12):
            raise ParameterError("values", "outside [0, 1 - alpha]",
                                 "values of a trade-off function, 0 <= f(alpha) <= 1 - alpha")
        object.__setattr__(self, "alphas", a)
        object.__setattr__(self, "values", np.clip(v, 0.0, 1.0 - a))

    def __call__(self, alpha) -> np.ndarray:
        """Linear interpolation at ``alpha`` (in [0, 1])."""
        return np.interp(alpha_array(alpha), self.alphas, self.values)

    def resample(self, alphas) -> "TradeoffCurve":
        """The same piecewise-linear curve evaluated on another grid (kinks between the new grid
        points are lost; the result lies on or above this curve when this curve is convex)."""
        alphas = alpha_array(alphas, "alphas")
        return TradeoffCurve(alphas, np.interp(alphas, self.alphas, self.values), self.description)

    def is_tradeoff_function(self, tol: float = 1e-12) -> bool:
        """Non-increasing, convex and within ``[0, 1 - alpha]``, up to ``tol`` in value: every
        vertex lies at most ``tol`` above the chord of its neighbours (a value-space test, robust to
        the rounding of slopes on tiny intervals)."""
        a, v = self.alphas, self.values
        chord = (v[:-2] * (a[2:] - a[1:-1]) + v[2:] * (a[1:-1] - a[:-2])) / (a[2:] - a[:-2])
        return bool(np.all(np.diff(v) <= tol) and np.all(v[1:-1] - chord <= tol)
                    and np.all(v <= 1 - a + tol) and np.all(v >= -tol))

    def inverse(self) -> "TradeoffCurve":
        """``f^-1(alpha) = inf{t in [0, 1] : f(t) <= alpha}`` (DRS Sec. 4.1; ``T(Q, P)`` when
        ``f = T(P, Q)``).  Exact for the piecewise-linear curve: its vertices are the swapped
        vertices of this one."""
        a, v = self.alphas, self.values
        # vertices (v_i, a_i); for equal v keep the smallest a (the infimum)
        x = v[::-1]
        y = a[::-1]
        keep = np.concatenate([x[1:] != x[:-1], [True]])  # last occurrence in reversed = smallest a
        x, y = x[keep], y[keep]
        if x[-1] < 1:
            x, y = np.concatenate([x, [1.0]]), np.concatenate([y, [0.0]])
        return TradeoffCurve(x, y, f"inverse of {self.description}" if self.description else "")

    def convex_envelope(self) -> "TradeoffCurve":
        """Lower convex hull of the vertices: the largest convex function below this curve
        (the double conjugate ``f**`` of the piecewise-linear curve)."""
        keep = lower_convex_hull(self.alphas, self.values)
        return TradeoffCurve(self.alphas, np.interp(self.alphas, self.alphas[keep],
                                                    self.values[keep]), self.description)

    def lower_bound(self) -> "TradeoffCurve":
        """A convex curve below *every* convex function that takes these values at the grid points.

        Treating the values as samples ``f(a_i)`` of a convex ``f``: the chord of
        ``[a_{i-1}, a_i]`` extended to the right, and that of ``[a_{i+1}, a_{i+2}]`` extended to the
        left, lie below ``f`` on ``[a_i, a_{i+1}]`` (convexity), so their maximum (and 0) does; we
        return the lower convex hull of that function.  Linear interpolation, by contrast, lies
        *above* ``f`` between grid points.  Use this before treating a sampled curve as a
        guarantee (:func:`tradeoff_to_pld` does).
        """
        a, v = self.alphas, self.values
        n = len(a)
        if n < 4:  # not enough chords to bound anything between the points
            return TradeoffCurve(a, np.zeros_like(a), self.description)
        slope = np.diff(v) / np.diff(a)  # chord j lives on [a_j, a_{j+1}], j = 0 .. n-2

        def chord(j, x):
            return v[j] + slope[j] * (x - a[j])

        # kinks: the crossing of the two neighbouring chords inside each interior interval
        i = np.arange(1, n - 2)
        with np.errstate(divide="ignore", invalid="ignore"):
            x_cross = (v[i + 1] - v[i] - slope[i + 1] * a[i + 1] + slope[i - 1] * a[i]) / (
                slope[i - 1] - slope[i + 1])
        inside = np.isfinite(x_cross) & (x_cross > a[i]) & (x_cross < a[i + 1])
        candidates = np.union1d(a, x_cross[inside])
        # where the last left chord reaches 0 in the last interval
        last = chord(n - 3, 1.0)
        if slope[n - 3] < 0 and last < 0:
            root = a[n - 3] - v[n - 3] / slope[n - 3]
            if a[n - 2] < root < 1.0:
                candidates = np.union1d(candidates, [root])
        interval = np.clip(np.searchsorted(a, candidates, side="right") - 1, 0, n - 2)
        values = np.full(candidates.shape, -np.inf)
        left = interval >= 1
        values[left] = chord(interval[left] - 1, candidates[left])
        right = interval <= n - 3
        values[right] = np.maximum(values[right], chord(interval[right] + 1, candidates[right]))
        values = np.clip(np.maximum(values, 0.0), 0.0, 1.0 - candidates)
        values = np.minimum(values, np.interp(candidates, a, v))  # never above the samples
        keep = lower_convex_hull(candidates, values)
        grid = _merged_grid(candidates)
        return TradeoffCurve(grid, np.interp(grid, candidates[keep], values[keep]),
                             self.description)

    def symmetry_gap(self) -> float:
        """``max |f - f^-1|`` on the union of both grids (0 for a symmetric trade-off function)."""
        inv = self.inverse()
        grid = _merged_grid(self.alphas, inv.alphas)
        return float(np.max(np.abs(self(grid) - inv(grid))))

    def privacy_profile(self, epsilon) -> np.ndarray:
        """``delta_f(eps) = sup_alpha (1 - f(alpha) - e^eps alpha)`` (DRS Prop. 2.12); exact for the
        piecewise-linear curve (the supremum is attained at a vertex).  For a curve sampled from a
        smooth ``f`` it is *below* ``delta_f`` by the chord error (large eps needs grid points
        near alpha = 0); certified deltas come from the PLD engine, not from here."""
        eps = np.atleast_1d(np.asarray(epsilon, dtype=float))
        out = np.max(1 - self.values[None, :] - np.exp(eps)[:, None] * self.alphas[None, :], axis=1)
        return np.maximum(out, 0.0)


def tradeoff_curve(f: Callable[[np.ndarray], np.ndarray], alphas=None, *,
                   description: str = "") -> TradeoffCurve:
    """Sample the trade-off function ``f`` on ``alphas`` (default :func:`default_alphas`).

    Example::

        >>> curve = tradeoff_curve(lambda a: gaussian_tradeoff(a, 2.0), description="G_2")
    """
    alphas = default_alphas() if alphas is None else alpha_array(alphas, "alphas")
    return TradeoffCurve(alphas, np.asarray(f(alphas), dtype=float), description)


def _profile_epsilons(delta_fn: Callable[[np.ndarray], np.ndarray], points: int,
                      threshold: float = 1e-12) -> np.ndarray:
    """``points`` epsilons from 0 to the first power of two where ``delta_fn <= threshold``."""
    hi = 1.0
    while hi < 512 and float(np.asarray(delta_fn(np.array([hi])))[0]) > threshold:
        hi *= 2
    return np.linspace(0.0, hi, points)


#: rounding charged on each line of :func:`tradeoff_from_privacy_profile` (4 u of the
#: magnitudes of its terms)
_TRADEOFF_ROUNDING = 4 * float(np.finfo(float).eps) / 2


def tradeoff_from_privacy_profile(delta_for_epsilon: Callable[[np.ndarray], np.ndarray],
                                  alphas=None, epsilons=None, *, description: str = "",
                                  points: int = 2001) -> TradeoffCurve:
    """Trade-off curve implied by an upper bound on the privacy profile ``delta(eps)``, eps >= 0:
    ``f(alpha) = sup_eps max(0, 1 - delta(eps) - e^eps alpha, e^-eps (1 - delta(eps) - alpha))``.

    Each eps gives ``f_{eps, delta(eps)}``-DP (DRS Prop. 2.5) and f-DP for several ``f`` means
    f-DP for their supremum, so at every grid point the value is a valid lower bound on the
    mechanism's trade-off function, for any finite set ``epsilons`` (DRS Prop. 2.12 says it is
    tight when the set is all of ``[0, inf)``).  The supremum is convex, so
    :meth:`TradeoffCurve.lower_bound` of the result is a valid lower bound at every alpha.
    Default ``epsilons``: ``points`` values from 0 to where delta <= 1e-12.

    Rounding (ours): each line is lowered by ``4u`` of the magnitudes of its terms (``exp``,
    the product and the two subtractions round by at most ``u`` each), so the curve stays a
    lower bound where the steep line cancels (at ``alpha = 1e-15``, ``eps = 34.5`` it was a
    relative 8e-5 above the exact line).  ``e^eps`` beyond the float range leaves the steep
    line at ``1 - delta`` for ``alpha = 0`` and out of play elsewhere.

    Example::

        >>> curve = tradeoff_from_privacy_profile(lambda e: gdp_delta_for_epsilon(1.0, e))
    """
    alphas = default_alphas() if alphas is None else alpha_array(alphas, "alphas")
    eps = (_profile_epsilons(delta_for_epsilon, points) if epsilons is None
           else np.asarray(epsilons, dtype=float))
    if eps.ndim != 1 or eps.size == 0 or np.any(~np.isfinite(eps)) or np.any(eps < 0):
        raise ParameterError("epsilons", epsilons, "a 1-D array of finite numbers >= 0")
    deltas = np.clip(np.asarray(delta_for_epsilon(eps), dtype=float), 0.0, 1.0)
    if deltas.shape != eps.shape or np.any(np.isnan(deltas)):
        raise ParameterError("delta_for_epsilon", "returned NaN or a wrong shape",
                             "a function mapping an array of epsilons to deltas of the same shape")
    best = np.zeros_like(alphas)
    for start in range(0, eps.size, 256):  # bounded memory: 256 x len(alphas) at a time
        e, d = eps[start:start + 256, None], deltas[start:start + 256, None]
        a = alphas[None, :]
        with np.errstate(over="ignore", invalid="ignore"):
            slope = np.exp(e)
            pushed = np.where(a > 0, slope * a, 0.0)   # (inf * 0 would be NaN)
            steep = (1 - d - pushed) - _TRADEOFF_ROUNDING * (1 + d + pushed)
        shrink = np.exp(-e)
        flat = shrink * (1 - d - a) - _TRADEOFF_ROUNDING * shrink * (1 + d + a)
        best = np.maximum(best, np.maximum(steep, flat).max(axis=0))
    return TradeoffCurve(alphas, np.minimum(best, 1 - alphas), description)


def tradeoff_from_pld(pld, alphas=None, epsilons=None, *, points: int = 1001) -> TradeoffCurve:
    """Certified lower bound (at the grid points; see :meth:`TradeoffCurve.lower_bound`) on the
    trade-off function of a PLD (``dpplugins.pld``): the curve of
    :func:`tradeoff_from_privacy_profile` with the PLD's certified *upper* bounds on delta (the
    maximum over both directions, so the statement holds for either order of the datasets).

    Example::

        >>> from dpplugins.pld import PrivacyLossDistribution
        >>> pld = PrivacyLossDistribution.from_gaussian(2.0, value_discretization_interval=1e-3)
        >>> curve = tradeoff_from_pld(pld)   # about G_0.5, never above it
    """
    def profile(eps):
        return np.array([pld.delta_for_epsilon(float(e), lower=False).upper
                         for e in np.atleast_1d(eps)])

    if epsilons is None:  # the PLD's certified error terms are ~1e-11, so stop at 1e-9
        epsilons = _profile_epsilons(profile, points, threshold=1e-9)
    return tradeoff_from_privacy_profile(profile, alphas, epsilons,
                                         description=f"trade-off of {pld.description}")


# -- composition -----------------------------------------------------------------------------
def tradeoff_to_pld(f: TradeoffLike, *, alphas=None, value_discretization_interval: float = 1e-3,
                    **options):
    """PLD of a trade-off function, for composition with the FFT engine.

    The values of ``f`` on the grid are treated as samples of a convex function and replaced by
    :meth:`TradeoffCurve.lower_bound` (below ``f`` everywhere, so this is conservative).  That
    convex piecewise-linear curve is the trade-off function of a discrete pair (DRS Prop. 2.2):
    segment ``i`` of the curve from
    ``(a_{i-1}, b_{i-1})`` to ``(a_i, b_i)`` is an outcome with ``P``-mass ``a_i - a_{i-1}`` and
    ``Q``-mass ``b_{i-1} - b_i``, and ``Q`` has an extra atom ``1 - f(0)`` where ``P`` has none.
    The PLD is that of ``(Q, P)``: its delta is ``H_{e^eps}(Q || P) = delta_f(eps)``, the f-DP
    statement (used for both orders of the datasets, as f-DP requires).

    Example::

        >>> pld = tradeoff_to_pld(tradeoff_curve(lambda a: gaussian_tradeoff(a, 1.0)))
    """
    from dpplugins.pld import PrivacyLossDistribution

    curve = _as_curve(f, alphas).lower_bound()
    p_mass = np.diff(curve.alphas)
    q_mass = -np.diff(curve.values)
    keep = (p_mass > 0) | (q_mass > 0)
    p_mass, q_mass = p_mass[keep], np.maximum(q_mass[keep], 0.0)
    q_only = max(1.0 - float(curve.values[0]), 0.0)  # Q-mass where P has none (loss +inf)
    q_vec = np.concatenate([[q_only], q_mass]) if q_only > 0 else q_mass
    p_vec = np.concatenate([[0.0], p_mass]) if q_only > 0 else p_mass
    q_vec, p_vec = q_vec / q_vec.sum(), p_vec / p_vec.sum()
    h = value_discretization_interval
    return PrivacyLossDistribution.from_pmfs(q_vec, p_vec, symmetric=True,
                                             value_discretization_interval=h, **options)


def compose_tradeoffs(fs: Sequence[TradeoffLike], counts: Sequence[int] | None = None, *,
                      alphas=None, value_discretization_interval: float = 1e-3) -> TradeoffCurve:
    """Certified lower bound (at the grid points) on ``f_1^{(x) k_1} (x) f_2^{(x) k_2} (x) ...``
    (DRS Thm 3.2: adaptive composition of ``f_i``-DP mechanisms is ``(x)_i f_i``-DP), computed
    through the PLD engine.  Each ``f_i`` is taken to be convex with the given values at the grid
    points (a trade-off function is convex).

    Each ``f_i`` goes through :func:`tradeoff_to_pld`; the PLDs compose by FFT with certified
    upper bounds on delta, and :func:`tradeoff_from_pld` turns the result back into a curve.
    For Gaussians use the closed form :func:`gdp_compose` instead.

    Example::

        >>> g = tradeoff_curve(lambda a: gaussian_tradeoff(a, 0.5))
        >>> four = compose_tradeoffs([g], [4])   # about G_1
    """
    fs = list(fs)
    if not fs:
        raise ParameterError("fs", fs, "a non-empty sequence of trade-off functions")
    counts = [1] * len(fs) if counts is None else [check_count("counts[i]", k, minimum=1)
                                                 for k in counts]
    if len(counts) != len(fs):
        raise ParameterError("counts", f"length {len(counts)}", f"length {len(fs)} like fs")
    total = None
    for f, k in zip(fs, counts):
        part = tradeoff_to_pld(f, value_discretization_interval=value_discretization_interval
                               ).self_compose(k)
        total = part if total is None else total.compose(part)
    return tradeoff_from_pld(total, alphas)


# -- Gaussian DP conversions -----------------------------------------------------------------
def gdp_delta_for_epsilon(mu: float, epsilon) -> np.ndarray:
    """``delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2)``: mu-GDP is equivalent to
    (eps, delta(eps))-DP for all eps >= 0 (DRS Cor. 2.13).  Log-space evaluation
    (:func:`dpplugins.mechanisms.gaussian.gaussian_delta`): a value, not a bound -- at small
    ``mu`` the two terms cancel (relative error up to about ``u / mu``); for a certified upper
    bound use :func:`dpplugins.mechanisms.gaussian.gaussian_delta_upper_many`.

    Example::

        >>> float(gdp_delta_for_epsilon(1.0, 0.0))   # total variation 2 Phi(1/2) - 1
        0.3829...
    """
    mu = _mu(mu)
    eps = np.asarray(epsilon, dtype=float)
    if np.any(np.isnan(eps)) or np.any(eps < 0):
        raise ParameterError("epsilon", epsilon, "finite numbers >= 0")
    if mu == 0.0:
        return np.zeros_like(eps)
    return np.maximum(gaussian_delta(eps, mu), 0.0)


#: where :func:`gdp_epsilon_for_delta` stops looking (it was 1e12, which refused mu = 1.5e6:
#: 10^12 full-batch steps at noise 0.8); the root is about mu^2 / 2 + mu z
_GDP_EPSILON_MAX = 1e300


def gdp_epsilon_for_delta(mu: float, delta: float) -> float:
    """Smallest eps >= 0 with ``delta_mu(eps) <= delta`` (DRS Cor. 2.13), rounded up.

    The bracket widens geometrically until it contains the root, so large ``mu`` works (Opacus'
    fixed ``[0, 500]`` bracket fails there); the search is
    :func:`dpplugins.numerics.smallest_epsilon` on the certified upper bound
    :func:`dpplugins.mechanisms.gaussian.gaussian_delta_upper`, so the returned value satisfies
    ``gdp_delta_for_epsilon(mu, eps) <= delta``.

    Example::

        >>> round(gdp_epsilon_for_delta(50.0, 1e-5), 2)   # beyond Opacus' bracket [0, 500]
        1462.29
    """
    mu = _mu(mu)
    delta = check_open_unit("delta", delta)
    if mu == 0.0:
        return 0.0

    eps = smallest_epsilon(lambda e: gaussian_delta_upper(e, mu), delta,
                           start=max(1.0, min(mu * mu / 2, _GDP_EPSILON_MAX)),
                           epsilon_max=_GDP_EPSILON_MAX, rtol=1e-14)
    if eps == math.inf:
        if delta <= 1e-300:
            # (the advice was "a smaller mu", which cannot help: no mu reaches such a delta)
            raise NumericalError(f"delta={delta:g} is at or below 1e-300, the floor of the "
                                 "certified Gaussian profile (its absolute rounding term)",
                                 "ask for a delta above 1e-300")
        raise NumericalError(f"no epsilon below {_GDP_EPSILON_MAX:g} reaches delta={delta:g} "
                             f"for mu={mu:g}", "use a smaller mu or a larger delta")
    return float(eps)


def equivalent_gdp_mu(epsilon: float, delta: float) -> float:
    """The ``mu`` whose mu-GDP curve passes through (eps, delta): ``delta_mu(eps) = delta``.

    A *description* of one (eps, delta) point, not a guarantee: an (eps, delta)-DP mechanism is
    not mu-GDP in general (its trade-off function is the four-point curve of Kairouz, Oh,
    Viswanath 2015, arXiv:1311.0776, Thm 2.1, which no ``G_mu`` lower-bounds when delta > 0 and
    ``alpha`` is near 0).  Used to compare an exact
    composition with the CLT's mu.  ``delta_mu(eps)`` increases with ``mu`` (DRS Cor. 2.13).

    Example::

        >>> round(equivalent_gdp_mu(gdp_epsilon_for_delta(1.0, 1e-5), 1e-5), 6)
        1.0
    """
    eps = check_nonnegative("epsilon", epsilon)
    delta = check_open_unit("delta", delta)
    if eps == 0.0:
        # delta_mu(0) = 2 Phi(mu/2) - 1
        return float(2 * special.ndtri((1 + delta) / 2))

    def excess(mu: float) -> float:
        return float(gaussian_delta(eps, mu)) - delta

    lo, hi = 1e-12, 1.0
    while excess(hi) < 0:
        lo, hi = hi, 2 * hi
        if hi > 1e8:
            raise NumericalError(f"no mu below 1e8 matches (eps={eps:g}, delta={delta:g})",
                                 "check the inputs")
    if excess(lo) > 0:
        return 0.0
    return float(brentq(excess, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps))


def gdp_compose(mus: Iterable[float]) -> float:
    """``G_mu1 (x) ... (x) G_muk = G_sqrt(mu1^2 + ... + muk^2)`` (DRS Cor. 3.3).

    Example::

        >>> gdp_compose([3.0, 4.0])
        5.0
    """
    values = [_mu(m, f"mus[{i}]") for i, m in enumerate(mus)]
    # scaled by the largest mu: the squares underflowed to 0 below about 1e-162 (mu = 0, a
    # perfect-privacy claim) and overflowed in fsum above about 1e154 (OverflowError)
    scale = max(values, default=0.0)
    if scale == 0.0:
        return 0.0
    return float(scale * math.sqrt(math.fsum((m / scale) ** 2 for m in values)))


def gdp_group_mu(mu: float, group_size: int) -> float:
    """mu-GDP gives ``(g mu)``-GDP for groups of ``g`` records (DRS Thm 2.14 applied to G_mu;
    restated by van Dijk & Nguyen 2023, arXiv:2303.04676).

    Example::

        >>> gdp_group_mu(0.5, 3)
        1.5
    """
    mu = _mu(mu)
    g = check_count("group_size", group_size, minimum=1)
    # (a group beyond the float range raised OverflowError converting the int)
    return mu * float(g) if g <= sys.float_info.max else (math.inf if mu > 0 else 0.0)


def group_tradeoff(f: TradeoffLike, group_size: int, alphas=None) -> TradeoffCurve:
    """``1 - (1 - f)^{o g}``: an f-DP mechanism is this-DP for groups of ``g`` records
    (DRS Thm 2.14; ``o g`` is g-fold composition of the map ``alpha -> 1 - f(alpha)``).

    Evaluated on ``alphas`` by iterating the map (``f`` interpolated linearly if it is a
    :class:`TradeoffCurve`).  For ``G_mu`` the result is ``G_{g mu}``.

    Example::

        >>> g3 = group_tradeoff(lambda a: gaussian_tradeoff(a, 0.5), 3)   # = G_1.5
    """
    g = check_count("group_size", group_size, minimum=1)
    alphas = default_alphas() if alphas is None else alpha_array(alphas, "alphas")
    if not callable(f):  # a TradeoffCurve is callable (linear interpolation)
        raise ParameterError("f", type(f).__name__,
                             "a TradeoffCurve or a callable alpha -> f(alpha)")
    x = alphas.copy()
    for _ in range(g):
        nxt = np.clip(1.0 - np.asarray(f(x), dtype=float), 0.0, 1.0)
        if np.array_equal(nxt, x):   # a fixed point: further iterations change nothing (a
            break                    # group of 10^6 under G_1e300 ran for minutes)
        x = nxt
    return TradeoffCurve(alphas, np.clip(1.0 - x, 0.0, 1.0 - alphas), f"group of {g}")


# -- subsampling -----------------------------------------------------------------------------
def subsampled_tradeoff(f: TradeoffLike, p: float, alphas=None) -> TradeoffCurve:
    """``C_p(f) = min{f_p, f_p^-1}**`` with ``f_p = p f + (1 - p)(1 - alpha)`` (DRS Thm 4.2 and
    Sec. 4.1; restated by van Dijk & Nguyen 2023): if ``M`` is f-DP on datasets of size ``n``, then ``M``
    on a uniformly random subset of size ``m = p n`` (without replacement; replace-one
    neighbours) is ``C_p(f)``-DP.

    Numerically: ``f`` is sampled on ``alphas`` (default :func:`default_alphas`); ``f_p`` and its
    exact piecewise-linear inverse are evaluated on the union of their vertices, and the double
    conjugate is the lower convex hull of the minimum.  On each interval of that union both curves
    are linear, so the sampled minimum interpolates below the true minimum: the result is exact
    for a piecewise-linear ``f`` and otherwise carries only the chord error of sampling ``f``.

    Example::

        >>> c = subsampled_tradeoff(lambda a: gaussian_tradeoff(a, 1.0), 0.1)
        >>> c.symmetry_gap() < 1e-6
        True
    """
    p = check_probability("p", p)
    curve = _as_curve(f, alphas)
    f_p = TradeoffCurve(curve.alphas, p * curve.values + (1 - p) * (1 - curve.alphas),
                        f"({p:g}-mixture)")
    inv = f_p.inverse()
    grid = _merged_grid(f_p.alphas, inv.alphas)
    lowest = np.minimum(f_p(grid), inv(grid))
    desc = f"C_{p:g}({curve.description or 'f'})"
    return TradeoffCurve(grid, lowest, desc).convex_envelope()


def _subsampled_gaussian_inputs(epsilon, mu, p) -> tuple[float, float, np.ndarray, tuple]:
    """The checked ``mu`` and ``p``, the epsilons as a flat array and their shape (the inputs
    of :func:`subsampled_gaussian_delta` and :func:`subsampled_gaussian_delta_upper`)."""
    mu = _mu(mu)
    p = check_probability("p", p)
    eps = np.atleast_1d(np.asarray(epsilon, dtype=float)).ravel()
    if np.any(np.isnan(eps)) or np.any(eps < 0):
        raise ParameterError("epsilon", epsilon, "finite numbers >= 0")
    return mu, p, eps, np.shape(epsilon)


def subsampled_gaussian_delta(epsilon, mu: float, p: float) -> np.ndarray:
    """Privacy profile of ``C_p(G_mu)`` for eps >= 0 (the exact closed form in floating point; it
    can be a relative 1e-9 below the exact value at small ``mu``: where an upper bound is needed,
    use :func:`subsampled_gaussian_delta_upper`).

    Derivation.  Conjugation turns a minimum into a maximum and ``(g**)* = g*``, so the profile
    ``1 + C_p(f)*(-e^eps)`` (DRS Prop. 2.12) is the larger of the profiles of ``f_p`` and
    ``f_p^-1``.  For ``f = G_mu``, ``f_p = T(N(0,1), p N(mu,1) + (1-p) N(0,1))``, so these are the
    hockey-stick divergences of that mixture pair in its two orders (the Poisson-subsampled
    Gaussian's two directions; Zhu, Dong, Wang 2022, Thm 11).  Solving for the likelihood-ratio
    threshold gives, with ``d_mu`` the Gaussian profile (DRS Cor. 2.13),

    * ``H(mix || N) = p d_mu(eps1)``, ``eps1 = log(1 + (e^eps - 1)/p)``;
    * ``H(N || mix) = p e^(eps - eps2) d_mu(eps2)``, ``eps2 = -log(1 - (1 - e^-eps)/p)``, when
      ``eps < -log(1 - p)``, else 0.

    Both are numerically checked against quadrature (in the project's test suite).

    Example::

        >>> float(subsampled_gaussian_delta(0.0, 1.0, 1.0))   # p = 1: total variation of G_1
        0.3829...
    """
    mu, p, eps, shape = _subsampled_gaussian_inputs(epsilon, mu, p)
    if mu == 0.0:
        return np.zeros(shape)
    log_p = math.log(p)
    # eps1 = log(1 + (e^eps - 1)/p): log1p(expm1(eps)/p) where that is finite; for small eps
    # the form e^eps (1 - (1-p) e^-eps) lost up to 6e-9 of delta (relative) to cancellation in
    # 1 - (1-p) e^-eps, below the exact profile the fixed-size PLD takes as an upper bound
    # (and warned log1p(-1) at eps = 0, p = 1e-300); that form, without overflow, for large eps
    with np.errstate(over="ignore", divide="ignore"):
        small = np.minimum(eps, 709.0)
        ratio = np.expm1(small) / p
        eps1 = np.where(np.isfinite(ratio) & (eps < 709.0), np.log1p(ratio),
                        np.where(eps < 709.0, np.log(np.expm1(small)) - log_p,
                                 eps + np.log1p(-(1 - p) * np.exp(-eps)) - log_p))
    first = p * gaussian_delta(np.maximum(eps1, 0.0), mu)
    second = np.zeros_like(eps)
    inside = (-np.expm1(-eps)) < p  # 1 - e^-eps < p  <=>  eps < -log(1 - p)
    if np.any(inside):
        e = eps[inside]
        with np.errstate(divide="ignore"):
            eps2 = -np.log1p(np.expm1(-e) / p)
        finite = np.isfinite(eps2)  # eps2 = inf exactly at the boundary, where the value is 0
        value = np.zeros_like(e)
        value[finite] = p * np.exp(e[finite] - eps2[finite]) * gaussian_delta(
            np.maximum(eps2[finite], 0.0), mu)
        second[inside] = value
    return np.clip(np.maximum(first, second), 0.0, 1.0).reshape(shape)


#: unit roundoff of float64
_U = float(np.finfo(float).eps) / 2


def subsampled_gaussian_delta_upper(epsilon, mu: float, p: float) -> np.ndarray:
    """Certified upper bound on the privacy profile of ``C_p(G_mu)`` at every ``epsilon >= 0``.

    :func:`subsampled_gaussian_delta` evaluates the closed form in floating point and can land
    below it (a few ulps at ordinary points, a relative 9.4e-10 at ``mu`` near 0.002, where the
    Gaussian profile's two terms cancel); a profile that a PLD takes as an upper bound must
    not.  Here every rounding is moved outward (our error analysis; each step is
    a few ulps, as for :func:`~dpplugins.mechanisms.gaussian.gaussian_delta_upper`):

    * ``H(mix || N) = p d_mu(eps1)`` decreases in ``eps1``, so ``eps1 = log1p((e^eps - 1)/p)``
      is lowered: the ratio by a relative ``8u``, the logarithm by ``4u`` (where the ratio
      overflows and the log form is used, by ``16u`` of the magnitudes of its terms);
    * ``H(N || mix) = p e^(eps - eps2) d_mu(eps2)`` decreases in ``eps2`` (both factors do), so
      ``eps2 = -log1p(x)``, ``x = -(1 - e^-eps)/p``, is lowered by raising ``x`` by a relative
      ``8u`` and not above ``-1 + 16u`` -- near ``eps = -log(1 - p)``, where ``x`` is near -1,
      the exact ``eps2`` is at least ``-log(16u)`` whenever the computed ``x`` is within the
      rounding of -1 -- and the test ``1 - e^-eps < p`` is widened by ``4u``;
    * ``d_mu`` is :func:`~dpplugins.mechanisms.gaussian.gaussian_delta_upper_many`, the
      exponential's argument is raised by ``2u`` of its size and the products by ``4u`` and one
      float step (so a product that underflows is the smallest subnormal, not 0).

    At ordinary points the result is a relative 1e-12 above :func:`subsampled_gaussian_delta`
    (numerically checked against 50-digit arithmetic in the project's tests).

    Example::

        >>> exact = float(subsampled_gaussian_delta(0.5, 1.0, 0.01))
        >>> exact <= float(subsampled_gaussian_delta_upper(0.5, 1.0, 0.01)) <= exact * (1 + 1e-11)
        True
    """
    mu, p, eps, shape = _subsampled_gaussian_inputs(epsilon, mu, p)
    if mu == 0.0:
        return np.zeros(shape)
    log_p = math.log(p)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        small = np.minimum(eps, 709.0)
        ratio = np.expm1(small) / p
        by_ratio = np.log1p(ratio * (1 - 8 * _U)) * (1 - 4 * _U)
        log_expm1 = np.log(np.expm1(small))
        by_log = np.where(
            eps < 709.0, log_expm1 - log_p - 16 * _U * (np.abs(log_expm1) + abs(log_p)),
            # (at least 709: lowered by 16u of itself and 32u |log p|, which is 16u of the
            # terms' magnitudes and keeps eps = inf at inf)
            (eps + np.log1p(-(1 - p) * np.exp(-eps)) - log_p) * (1 - 16 * _U)
            - 32 * _U * abs(log_p))
        eps1 = np.where(np.isfinite(ratio) & (eps < 709.0), by_ratio, by_log)
    # (products: up by 4u, and by one step of the smallest subnormal, where p is so small that
    # they underflow -- the exact profile is positive at every finite eps)
    first = np.nextafter(p * gaussian_delta_upper_many(np.maximum(eps1, 0.0), mu)
                         * (1 + 4 * _U), np.inf)
    second = np.zeros_like(eps)
    inside = (-np.expm1(-eps)) * (1 - 4 * _U) < p
    if np.any(inside):
        e = eps[inside]
        x = np.maximum(np.expm1(-e) / p * (1 - 8 * _U), -1.0 + 16 * _U)
        eps2 = -np.log1p(x) * (1 - 4 * _U)
        gap = e - eps2
        with np.errstate(over="ignore"):
            factor = np.exp(gap + 2 * _U * np.abs(gap))
        second[inside] = np.nextafter(
            p * factor * gaussian_delta_upper_many(np.maximum(eps2, 0.0), mu) * (1 + 4 * _U),
            np.inf)
    return np.clip(np.maximum(first, second), 0.0, 1.0).reshape(shape)


# -- central limit theorem -------------------------------------------------------------------
def _clt_inputs(noise_multiplier, sample_rate, steps) -> tuple[float, float, float]:
    sigma = check_positive("noise_multiplier", noise_multiplier)
    q = check_probability("sample_rate", sample_rate)
    t = check_nonnegative("steps", steps)
    return sigma, q, t


def _inverse_square(sigma: float) -> float:
    """``1 / sigma^2``; inf where ``sigma^2`` underflows to 0 (sigma below about 1e-162: it
    raised ZeroDivisionError)."""
    square = sigma * sigma
    return math.inf if square == 0.0 else 1.0 / square


def _expm1_inverse_square(sigma: float) -> float:
    x = _inverse_square(sigma)
    return math.inf if x > 700 else math.expm1(x)


def clt_mu_poisson(noise_multiplier: float, sample_rate: float, steps: float, *,
                   neighbouring: str = "add_remove") -> float:
    """CLT mu of ``steps`` Poisson-subsampled Gaussian steps -- an **estimate**, not a bound.

    ``add_remove`` (sensitivity C, noise ``sigma C``; Opacus' setting): BDLS Sec. 3 (the CLT for
    Poisson subsampling, used for their MNIST figures),

        ``mu = q sqrt(T (e^(1/sigma^2) - 1))``.

    It is DRS Thm 3.5 (``mu = 2K/s``, ``K = sum kl``, ``s^2 = sum kappa_2``) applied to the pair
    ``N(0,1)`` vs ``q N(1/sigma,1) + (1-q) N(0,1)``: with ``u = e^(x/sigma - 1/(2 sigma^2)) - 1``,
    ``kl ~ q^2 E[u^2]/2`` and ``kappa_2 ~ q^2 E[u^2]``, ``E[u^2] = e^(1/sigma^2) - 1``.

    ``replace_one`` (record v replaced by v', the antipodal pair of
    :func:`dpplugins.mechanisms.poisson_subsampled_gaussian`): the same computation with
    ``log(P/Q) ~ q (u_+ - u_-)`` gives ``E[(u_+ - u_-)^2] = 2 (e^(1/sigma^2) - e^(-1/sigma^2))``,

        ``mu = q sqrt(2 T (e^(1/sigma^2) - e^(-1/sigma^2)))``

    (our derivation from DRS Thm 3.5, not a published formula; it tends to ``2 q sqrt(T)/sigma``,
    twice the add/remove value, as the factor-2 sensitivity suggests).  ``T`` may be real (BDLS
    use ``T = E n / m``).

    Example::

        >>> round(clt_mu_poisson(1.06, 256 / 60000, 20 * 60000 / 256), 2)   # BDLS Fig. 4: 0.35
        0.35
    """
    sigma, q, t = _clt_inputs(noise_multiplier, sample_rate, steps)
    check_choice("neighbouring", neighbouring, ("add_remove", "replace_one"))
    if t == 0:
        return 0.0   # (0 * inf was NaN for a noise multiplier whose 1/sigma^2 overflows)
    chi2 = _expm1_inverse_square(sigma)
    if neighbouring == "replace_one":
        chi2 = chi2 + (-math.expm1(-_inverse_square(sigma)))  # e^x - e^-x = (e^x - 1) + (1 - e^-x)
        return q * math.sqrt(2.0 * t * chi2)
    return q * math.sqrt(t * chi2)


def clt_mu_uniform(noise_multiplier: float, sample_rate: float, steps: float) -> float:
    """CLT mu of ``steps`` fixed-size-batch (uniform without replacement) Gaussian steps,
    replace-one neighbours -- an **estimate**, not a bound.

    DRS Cor. 5.4 for ``C_p(G_{1/s})^{(x)T}`` with ``p sqrt(T) -> nu``:

        ``mu = sqrt(2) nu sqrt(e^(1/s^2) Phi(1.5/s) + 3 Phi(-0.5/s) - 2)``.

    Re-derived: with ``f_p`` kinked at ``alpha* = Phi(-1/(2s))``, ``kl(C_p f)`` and
    ``kappa_2(C_p f)`` are, to order ``p^2``, ``p^2 I`` and ``2 p^2 I`` with
    ``I = E[(e^(x/s - 1/(2s^2)) - 1)^2 ; x >= 1/(2s)] = e^(1/s^2) Phi(1.5/s) + 3 Phi(-0.5/s) - 2``,
    and DRS Thm 3.5 gives ``mu = 2K/s = p sqrt(2 T I)`` (our derivation).  (It is sometimes
    attributed to Poisson sampling, with ``sqrt(e^(1/sigma^2) - 1)`` for uniform sampling; the
    derivation above, Opacus' ``compute_mu_uniform`` and BDLS' published numbers all support the
    assignment used here.)

    Sensitivity: a replaced record moves the batch sum by up to ``2C`` (van Dijk & Nguyen
    2023, Sec. 4, discuss this factor 2), so with noise ``sigma C`` each step is ``C_q(G_{2/sigma})`` and
    ``s = sigma / 2``.
    Opacus' ``compute_mu_uniform`` uses ``s = sigma`` (it takes sigma relative to the
    replace-one sensitivity); ours is the value for Opacus' noise convention.

    Example::

        >>> mu = clt_mu_uniform(2.0, 0.01, 10_000)   # = DRS Cor. 5.4 with s = 1
    """
    sigma, q, t = _clt_inputs(noise_multiplier, sample_rate, steps)
    if t == 0:
        return 0.0
    s = sigma / 2.0
    x = _inverse_square(s)
    if x > 700:
        return math.inf
    inner = math.exp(x) * special.ndtr(1.5 / s) + 3.0 * special.ndtr(-0.5 / s) - 2.0
    return q * math.sqrt(2.0 * t * max(inner, 0.0))


def clt_mu_from_history(history, *, sampling: str = "poisson",
                        neighbouring: str = "add_remove") -> float:
    """CLT mu of a run-length history ``[(noise_multiplier, sample_rate, steps), ...]``: the runs'
    mus add in quadrature, ``mu = sqrt(sum mu_run^2)`` (DRS Thm 3.5: ``K`` and ``s^2`` are sums over
    steps and ``K ~ s^2/2`` to leading order, so ``mu = 2K/s ~ s``).  An **estimate**.

    Example::

        >>> round(clt_mu_from_history([(1.0, 0.01, 1000), (2.0, 0.01, 500)]), 3)
        0.431
    """
    check_choice("sampling", sampling, ("poisson", "uniform"))
    check_choice("neighbouring", neighbouring, ("add_remove", "replace_one"))
    total = 0.0
    for sigma, q, steps in history:
        if sampling == "poisson":
            mu = clt_mu_poisson(sigma, q, steps, neighbouring=neighbouring)
        else:
            mu = clt_mu_uniform(sigma, q, steps)
        total += mu * mu
    return math.sqrt(total)
