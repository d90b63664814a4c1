"""The f-DP / Gaussian DP accountant, registry name ``"fdp"`` (Opacus' ``"gdp"`` is CLT-only).

``get_epsilon(delta)`` is **certified**: the exact composition of the per-step trade-off function,
computed by the PLD engine (:mod:`dpplugins.pld`).  ``get_mu()`` and ``method="clt"`` give the
central-limit estimate of Bu, Dong, Long, Su (2020) / Dong, Roth, Su (2022, Cor. 5.4), which is
an approximation and is labelled so (a :class:`~dpplugins.fdp.CLTEstimateWarning` says by how much
it differs from the certified value).

Sampling schemes and neighbouring relations (sensitivity 2C for replace-one with fixed-size
batches -- replacing one example moves the clipped sum by up to 2C -- and C for Poisson
add/remove):

* ``sampling="poisson"``, ``neighbouring="add_remove"`` (default; Opacus): each record is in the
  batch with probability q; a neighbour adds or removes one record, which moves the clipped sum by
  at most C.  Each step is the Poisson-subsampled Gaussian with sensitivity C.
* ``sampling="poisson"``, ``neighbouring="replace_one"``: a record is replaced by another; the
  antipodal pair of :func:`dpplugins.mechanisms.poisson_subsampled_gaussian` (shift up to 2C).
* ``sampling="uniform"`` (fixed-size batches drawn without replacement), only
  ``neighbouring="replace_one"`` (the default for it): the replaced record moves the sum by up to
  2C, so with noise ``sigma C`` each step is ``C_q(G_{2/sigma})``-DP (Dong, Roth, Su 2022,
  Thm 4.2, which compares datasets of equal size).

Lower bound for fixed-size batches (our derivation)
---------------------------------------------------
A batch of ``m`` of the ``N`` records, ``q = m/N``.  Take neighbours that replace ``x`` by
``x'`` with clipped gradients ``g(x) = C v``, ``g(x') = -C v`` (``|v| = 1``), and give every
other record the gradient ``-C v``.  On the dataset with ``x'`` the batch sum is always ``-m C
v``; on the one with ``x`` it is ``-(m - 2) C v`` when ``x`` is sampled (probability ``q``) and
``-m C v`` otherwise: a sampled record *displaces another one*, so the sum moves by ``2C``, not
by ``C``.  With noise ``N(0, sigma^2 C^2)``, the sum shifted by ``m C v``, projected on ``v``
and divided by ``C`` (bijections and a post-processing), one step on the two datasets is the pair ``(1 - q)
N(0, sigma^2) + q N(2, sigma^2)`` against ``N(0, sigma^2)``: the "remove" pair of the
Poisson-subsampled Gaussian with noise multiplier ``sigma / 2`` (scaled by 1/2;
:func:`dpplugins.mechanisms.poisson_subsampled_gaussian`).  The gradients do not depend on the
model, so every step draws an independent batch from the same pair, and ``T`` steps are that
pair composed ``T`` times (steps with other batch sizes or noise take their own pairs, with
the same records); exchanging the two datasets gives the "add" pair.  The certified
lower bound of the Poisson add/remove PLD with noise ``sigma / 2`` (the larger of the two
directions) is therefore a certified lower bound for fixed-size batches.  (Lebeda, Regehr,
Kamath, Steinke 2024, arXiv:2405.20769, likewise find that sampling without replacement under
substitution can cost much more than Poisson sampling.)  Composing the two directions in a
fixed mix (``k`` steps one way, ``T - k`` the other) gave smaller values in our checks (sigma =
1, q = 0.01, T = 1e5, delta = 1e-5: 221.6 for k = 0, 187.0 for k = T/2; numerically checked),
so only the two pure directions are used.  Example: sigma = 2, q = 0.01, 10,000 steps, delta =
1e-5 give the certified interval [6.17, 8.08].  Where no finite upper bound can be certified
(delta below the construction's error terms), the query raises :class:`NumericalError` and
states the lower bound.
"""

from __future__ import annotations

import math
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from dpplugins import fdp
from fractions import Fraction

from dpplugins.accountants.base import (Accountant, UnsupportedEventError, is_non_private,
                                       leaves_to_check, private_leaves)
from dpplugins.accountants.pld import (_MAX_REFINE_WINDOW, PLDAccountant, is_poisson_gaussian,
                                       loss_scale, poisson_gaussian_pld, poisson_gaussian_runs)
from dpplugins.events import (Event, FixedBatchEvent, GaussianEvent, PoissonSampledEvent,
                              SelfComposedEvent)
from dpplugins.errors import (NumericalError, ParameterError, check_choice, check_nonnegative,
                              check_open_unit, larger_delta_advice)
from dpplugins.display import interval_text, upper_text
from dpplugins.fdp import CLTEstimateWarning, TradeoffCurve
from dpplugins.full_batch import full_batch_delta_bounds, full_batch_epsilon_bounds, full_batch_mu
from dpplugins.pld import AccuracyWarning, Bounds, PrivacyLossDistribution
from dpplugins.pld.compose import window_limit
from dpplugins.pld.distribution import within_window_budget

__all__ = ["GDPAccountant", "TradeoffComparison", "CLTEstimateWarning", "fixed_size_gaussian_pld",
           "SAMPLING"]

SAMPLING = ("poisson", "uniform")
_MIN_H, _MAX_H = 1e-6, 2e-2
#: bins of one fixed-size-batch component on the first grid, and the most a refinement may use
#: (the budgets of the PLD accountant)
_FIRST_GRID_BINS, _MAX_REFINE_BINS = 2 ** 17, 2 ** 20
#: the accuracy target of the fixed-size-batch lower bound's own query (``_uniform_lower``)
_LOWER_TOLERANCE = 1e-2
_RELATIONS = {
    ("poisson", "add_remove"): "Poisson sampling, add/remove neighbours (sensitivity C)",
    ("poisson", "replace_one"): "Poisson sampling, replace-one neighbours (sum moves by up to 2C)",
    ("uniform", "replace_one"): ("fixed-size batches without replacement, replace-one neighbours "
                                 "(sensitivity 2C: each step is C_q(G_{2/sigma}))"),
}


def _directed_rate(event: FixedBatchEvent, rounding: str) -> float:
    """``batch_size / dataset_size`` as the nearest float at or above it (``rounding="up"``) or
    at or below it (``"down"``).

    Example::

        >>> _directed_rate(FixedBatchEvent(3, 1, GaussianEvent(1.0)), "down") <= 1 / 3
        True
    """
    rate = event.sample_rate
    exact = Fraction(event.batch_size, event.dataset_size)
    if rounding == "up" and Fraction(rate) < exact:
        return math.nextafter(rate, 1.0)
    if rounding == "down" and Fraction(rate) > exact:
        return math.nextafter(rate, 0.0)
    return rate


def _half_up(sigma: float) -> float:
    """``sigma / 2`` rounded up: more noise, so a lower bound stays valid (halving is exact
    except among subnormals, where ``5e-324 / 2`` rounds to 0, a non-private step).

    Example::

        >>> _half_up(5e-324) == 5e-324 and _half_up(3.0) == 1.5
        True
    """
    half = sigma / 2.0
    return half if 2.0 * half >= sigma else math.nextafter(half, math.inf)


def _profile_end(profile, threshold: float) -> float:
    """A power-of-two epsilon in ``[2^-20, 1e4]`` where ``profile`` is at most ``threshold``: the
    smallest power of two >= 1 with that property, or, when it holds at 1, the smallest one
    below 1 (tiny sample rates have tiny privacy losses: a grid up to 1 would spend most of its
    bins where the profile is already negligible)."""
    eps = 1.0
    while float(profile(np.array([eps]))[0]) > threshold:
        eps *= 2.0
        if eps > 1e4:
            raise NumericalError(f"the privacy profile stays above {threshold:g} up to eps=1e4",
                                 "use a larger noise multiplier")
    if eps == 1.0:
        while eps > 2.0 ** -20 and float(profile(np.array([eps / 2]))[0]) <= threshold:
            eps /= 2.0
    return eps


def _mu_up(sigma: float) -> float:
    """``mu = 2 / sigma`` of a replace-one Gaussian step, rounded up (a larger ``mu`` is a
    weaker guarantee, so an upper bound on delta stays valid).

    Example::

        >>> _mu_up(2.0), _mu_up(3.0) >= 2 / 3
        (1.0, True)
    """
    mu = 2.0 / sigma
    if math.isfinite(mu) and Fraction(mu) * Fraction(sigma) < 2:
        return math.nextafter(mu, math.inf)
    return mu


def _component_end(sigma: float, q: float, steps: int, tail_mass: float) -> float:
    """Largest privacy loss kept on the grid of one fixed-size-batch component (what lies beyond
    goes to ``delta(inf)``; see :func:`fixed_size_gaussian_pld`)."""
    mu = _mu_up(sigma)
    if not math.isfinite(mu):
        # a noise multiplier below about 1e-308 (it raised a ParameterError about mu = inf)
        raise NumericalError(f"the noise multiplier {sigma:g} is too small to account: 2 / sigma "
                             "overflows the float range", "use a larger noise multiplier")
    return _profile_end(lambda eps: fdp.subsampled_gaussian_delta_upper(eps, mu, q),
                        min(1e-16, tail_mass) / max(steps, 1))


def fixed_size_gaussian_pld(history, h: float, *, tail_mass: float = 1e-15,
                            memory_limit: int = 1 << 30) -> PrivacyLossDistribution:
    """Dominating PLD of a run-length history of fixed-size-batch Gaussian steps (replace-one).

    Why it is valid.  Each step, with noise ``sigma C`` and replace-one sensitivity ``2C``, runs a
    ``G_{2/sigma}``-DP mechanism on a uniformly random batch of ``m = q n`` records drawn without
    replacement, so it is ``C_q(G_{2/sigma})``-DP (Dong, Roth, Su 2022, Thm 4.2) for every choice
    of the earlier outputs.  :func:`dpplugins.fdp.subsampled_gaussian_delta_upper` bounds the
    privacy profile of ``C_q(G_{2/sigma})`` from above (with ``2/sigma`` rounded up: the profile
    grows with ``mu``), a symmetric trade-off function; ``from_privacy_profile(...,
    symmetric=True)`` turns it into a pair whose profile lies above it at every eps (connect the
    dots, Doroshenko et al. 2022), i.e. a pair whose trade-off function is at most
    ``C_q(G_{2/sigma})``.  Adaptive composition of ``f_i``-DP steps is ``(x) f_i``-DP (DRS Thm 3.2),
    and composing dominating pairs dominates the composition (Zhu, Dong, Wang 2022, Thm 10), so the
    FFT composition of these PLDs gives upper bounds on delta.

    We symmetrise *each step* (``C_q`` takes the minimum of both orders before composing) rather
    than composing the two orders of the mixture pair separately: that would assume the same
    worst-case order in every step, and with fixed-size batches the order can change from step to
    step (Lebeda, Regehr, Kamath, Steinke 2024 show that single-step worst cases need not survive
    composition).  This bound can be loose; it is never optimistic.  The grid ends where the
    per-step profile is below ``min(1e-16, tail_mass) / steps``; what lies beyond goes to
    ``delta(inf)`` (conservative).

    Example::

        >>> pld = fixed_size_gaussian_pld([(2.0, 0.01, 1000)], 2e-3)
        >>> eps = pld.epsilon_for_delta(1e-5, lower=False).upper
    """
    counts: dict[tuple[float, float], int] = {}
    for sigma, q, steps in history:
        counts[(sigma, q)] = counts.get((sigma, q), 0) + steps
    total = None
    for (sigma, q), steps in counts.items():
        mu = _mu_up(sigma)

        def profile(eps, mu=mu, q=q):
            return fdp.subsampled_gaussian_delta_upper(eps, mu, q)

        eps_max = _component_end(sigma, q, steps, tail_mass)
        step = PrivacyLossDistribution.from_privacy_profile(
            profile, epsilon_max=eps_max, symmetric=True, value_discretization_interval=h,
            profile_step=h, tail_mass=tail_mass, memory_limit=memory_limit,
            description=f"C_{q:g}(G_{mu:g}) (fixed-size batch, replace-one)").self_compose(steps)
        total = step if total is None else total.compose(step)
    return total


@dataclass(frozen=True, eq=False)
class TradeoffComparison:
    """Certified and CLT trade-off curves of one history, ready to plot.

    ``exact`` holds certified lower bounds on the trade-off function of the composed mechanism at
    its grid points (from the PLD's upper bounds on delta; ``exact.lower_bound()`` is certified
    at every alpha); ``clt`` is ``G_mu`` with the CLT's ``mu`` (an estimate; where it lies above
    ``exact`` it over-states privacy).
    """

    alphas: np.ndarray
    exact: TradeoffCurve
    clt: TradeoffCurve
    mu_clt: float
    sampling: str
    neighbouring: str
    steps: int

    def max_clt_excess(self) -> float:
        """Largest amount by which the CLT curve lies above the certified one (0 if never)."""
        return float(max(0.0, np.max(self.clt(self.alphas) - self.exact(self.alphas))))


class GDPAccountant(Accountant):
    """Gaussian DP / f-DP accountant: certified epsilon by exact composition, CLT mu beside it.

    Options
    -------
    sampling : ``"poisson"`` (default) or ``"uniform"`` (fixed-size batches without replacement).
    neighbouring : ``"add_remove"`` (default for Poisson) or ``"replace_one"`` (default and only
        choice for uniform sampling).  See the module docstring for the sensitivity each implies.
    eps_tolerance, value_discretization_interval, tail_mass, memory_limit : accuracy controls of
        the PLD engine, as in :class:`~dpplugins.accountants.pld.PLDAccountant`.

    Certified path.  Poisson: exactly :class:`PLDAccountant` (the Poisson-subsampled Gaussian PLD,
    certified lower and upper bounds).  Uniform: the upper bound from
    :func:`fixed_size_gaussian_pld`, evaluated on grids ``h``, ``h/2``, ... until two agree to
    ``eps_tolerance`` (every value is a valid upper bound; :class:`NumericalError`, which states
    the lower bound, where even the first grid cannot certify the query), and the lower bound of
    the module docstring (the Poisson add/remove PLD with noise ``sigma / 2``; its gap to the
    upper bound does not shrink with the grid) -- except when
    every batch is the whole dataset (``q = 1``): then the run is exactly ``G_mu`` (closed form,
    lower and upper bounds, at any number of steps up to the ledgers' limit of ``2**53``
    compositions; :mod:`dpplugins.full_batch`).

    Example::

        >>> from dpplugins.accountants import create
        >>> acc = create("fdp")
        >>> acc.step(noise_multiplier=1.1, sample_rate=256 / 60000, count=4688)
        >>> eps = acc.get_epsilon(1e-5)                  # certified (PLD)
        >>> mu = acc.get_mu()                            # CLT estimate, about 0.33
        >>> eps_clt = acc.get_epsilon(1e-5, method="clt")  # warns: estimate, vs certified value
    """

    name: ClassVar[str] = "fdp"
    #: fixed-size batches (FixedBatchEvent) are accounted under replace-one neighbouring
    alternative_options: ClassVar[tuple[dict, ...]] = ({"neighbouring": "replace_one"},)
    theorem: ClassVar[str] = (
        "exact composition (Dong, Roth, Su 2022, Thm 3.2) through the PLD engine of: the "
        "Poisson-subsampled Gaussian (Koskela et al. 2021; Zhu, Dong, Wang 2022, Thm 11) or, for "
        "fixed-size batches, C_q(G_{2/sigma}) (Dong, Roth, Su 2022, Thm 4.2); CLT mu from Bu, "
        "Dong, Long, Su 2020 (Poisson) and Dong, Roth, Su 2022, Cor. 5.4 (uniform) as an estimate")
    bound_type: ClassVar[str] = "certified upper bound"
    _option_names = ("sampling", "neighbouring", "eps_tolerance", "value_discretization_interval",
                     "tail_mass", "memory_limit")

    def __init__(self, *, sampling: str = "poisson", neighbouring: str | None = None,
                 eps_tolerance: float = 1e-3, value_discretization_interval: float | None = None,
                 tail_mass: float = 1e-15, memory_limit: int = 1 << 30) -> None:
        self.sampling = check_choice("sampling", sampling, SAMPLING)
        if neighbouring is None:
            neighbouring = "add_remove" if self.sampling == "poisson" else "replace_one"
        if self.sampling == "uniform" and neighbouring == "add_remove":
            raise ParameterError(
                "neighbouring", neighbouring, "'replace_one' when sampling='uniform'",
                "fixed-size batches are analysed for datasets of equal size (Dong, Roth, Su 2022, "
                "Thm 4.2); use neighbouring='replace_one' or sampling='poisson'")
        super().__init__(neighbouring=neighbouring)
        # the Poisson path *is* the PLD accountant; it also validates the accuracy options
        self._poisson = PLDAccountant(neighbouring=self.neighbouring, eps_tolerance=eps_tolerance,
                                      value_discretization_interval=value_discretization_interval,
                                      tail_mass=tail_mass, memory_limit=memory_limit)
        self.eps_tolerance = self._poisson.eps_tolerance
        self.value_discretization_interval = self._poisson.value_discretization_interval
        self.tail_mass = self._poisson.tail_mass
        self.memory_limit = self._poisson.memory_limit

    def __getstate__(self) -> dict:
        """The base state without the fixed-size-batch lower bound's composed PLDs: a cache,
        and one that cannot be pickled (its PLDs hold local functions: pickling failed after a
        query with ``sampling="uniform"``).  The Poisson accountant drops its own."""
        state = super().__getstate__()
        state.pop("_uniform_lower_plds", None)
        return state

    # -- events -------------------------------------------------------------------------------
    def _supports_leaf(self, event: Event) -> bool | str:
        if is_poisson_gaussian(event):
            return True
        if isinstance(event, FixedBatchEvent) and isinstance(event.event, GaussianEvent):
            if self.neighbouring == "replace_one":
                return True
            return ("fixed-size batches are accounted for replace-one neighbours: "
                    "create('fdp', sampling='uniform')")
        return ("Gaussian steps on Poisson subsamples (PoissonSampledEvent) or on fixed-size "
                "batches without replacement (FixedBatchEvent, replace-one)")

    def _check_history(self, history: tuple) -> None:
        # a release without a guarantee has no sampling scheme: epsilon is infinite beside
        # either kind (a NonPrivateEvent counted as Poisson, so that fixed-size batches before
        # or after it were refused, naming fdp itself as the accountant to use)
        scheme = lambda leaf: not is_non_private(leaf)  # noqa: E731
        kinds = {self._kind_of(leaf) for leaf, _ in leaves_to_check(history, scheme)
                 if scheme(leaf)}
        if len(kinds) > 1:
            last = history[-1]
            raise UnsupportedEventError(last, self.name, "one sampling scheme per accountant: "
                                        "Poisson and fixed-size-batch steps are not mixed", ())

    @staticmethod
    def _kind_of(event: Event) -> str:
        return "uniform" if isinstance(event, FixedBatchEvent) else "poisson"

    def _kind(self, history) -> str:
        for leaf, _ in private_leaves(history):
            return self._kind_of(leaf)
        return self.sampling

    @staticmethod
    def _runs(history, rate_rounding: str = "up") -> list[tuple[float, float, int]]:
        """``(noise_multiplier, sample_rate, steps)`` runs of the history (either kind; a
        history holds one kind).  A fixed-size batch's rate ``batch_size / dataset_size`` is
        rounded to a float in the direction ``rate_rounding`` says (``"up"`` for upper bounds,
        ``"down"`` for lower bounds: a larger rate is less private), so that neither bound
        rests on a rate rounded its way."""
        runs: list[tuple[float, float, int]] = []
        for leaf, count in private_leaves(history):
            if not isinstance(leaf, FixedBatchEvent):
                return poisson_gaussian_runs(history)
            entry = (leaf.event.noise_multiplier, _directed_rate(leaf, rate_rounding))
            if runs and runs[-1][:2] == entry:
                runs[-1] = entry + (runs[-1][2] + count,)
            else:
                runs.append(entry + (count,))
        return runs

    def step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """Poisson sugar (``sampling="poisson"``); for ``sampling="uniform"`` (version 0.1) a
        ``FixedBatchEvent`` whose ``batch_size / dataset_size`` is exactly ``sample_rate``."""
        event = super().step_event(noise_multiplier, sample_rate)
        if self.sampling == "poisson" or event.sample_rate == 0:
            return event
        frac = Fraction(event.sample_rate)
        return FixedBatchEvent(frac.denominator, frac.numerator, event.event)

    # -- description ----------------------------------------------------------------------------
    @property
    def relation(self) -> str:
        """Sampling scheme and neighbouring relation in words, with the sensitivity they imply."""
        return _RELATIONS[(self._kind(self._history), self.neighbouring)]

    # -- certified path -------------------------------------------------------------------------
    def _poisson_for(self, history) -> PLDAccountant:
        poisson = PLDAccountant(**self._poisson.options())
        poisson.name = self.name    # its warnings and errors are this accountant's ("pld: ...")
        poisson.history = list(history)
        # share the composed-PLD cache (keyed by history and grid step) across queries, so that
        # later queries reuse earlier compositions; every query holds this accountant's lock
        poisson._plds = self._poisson._plds_cache()
        poisson._lock = self._lock  # one lock guards the shared cache
        return poisson

    def _uniform_grid_step(self, history) -> float:
        """First grid step of the fixed-size-batch path: a 40th of the per-step loss scale of the
        sensitivity-2 mixture (noise multiplier ``sigma / 2``), clipped to ``[1e-6, 0.02]`` and
        raised where needed so that one component has at most ``2^17`` bins (as the PLD
        accountant's first grid; a tiny sample rate would otherwise need millions of bins, whose
        floating-point error term then exceeds every small delta)."""
        if self.value_discretization_interval is not None:
            return self.value_discretization_interval
        scale = min(loss_scale(sigma / 2.0, q) for sigma, q, _ in history)
        h = float(np.clip(scale / 40.0, _MIN_H, _MAX_H))
        return max(h, self._bins_cap_step(history, _FIRST_GRID_BINS))

    def _bins_cap_step(self, history, bins: int) -> float:
        """Smallest grid step at which every component has at most ``bins`` bins."""
        counts: dict[tuple[float, float], int] = {}
        for sigma, q, steps in history:
            counts[(sigma, q)] = counts.get((sigma, q), 0) + steps
        return max(2.0 * _component_end(sigma, q, steps, self.tail_mass) / bins
                   for (sigma, q), steps in counts.items())

    def _uniform_pld(self, history, h: float) -> PrivacyLossDistribution:
        return fixed_size_gaussian_pld(history, h, tail_mass=self.tail_mass,
                                       memory_limit=self.memory_limit)

    def _uniform_upper(self, history, evaluate) -> float:
        """Certified upper bound (``evaluate(pld) -> float``) on grids h, h/2, ... until two
        successive grids agree to ``eps_tolerance`` (connect-the-dots on a finer grid is
        dominated by the coarser one, so each value is valid and they decrease).

        ``eps_tolerance`` is a target: when a finer grid would exceed ``2^20`` bins per component,
        cannot be evaluated, or four halvings did not settle the value, the smallest value found
        is returned (it is certified) with an :class:`~dpplugins.pld.AccuracyWarning`.  Only
        when the first grid cannot be evaluated, or certifies no finite epsilon, does
        :class:`NumericalError` propagate."""
        h = self._uniform_grid_step(history)
        try:
            if self.value_discretization_interval is None:
                h, first = within_window_budget(lambda step: self._uniform_pld(history, step), h)
            else:
                first = self._uniform_pld(history, h)
            value = evaluate(first)
            window = first.composed_window_bins()
        except NumericalError as error:
            raise NumericalError(
                f"the fixed-size-batch PLD could not be evaluated ({error.what})",
                f"{error.fix}, or use sampling='poisson' if the batches are Poisson-sampled"
            ) from None
        if math.isinf(value):
            # delta is below the mass the construction moves to infinite loss (its truncated
            # tails): finer grids keep that mass, so refining would only repeat the answer
            at_infinity = first.delta_at_infinity()
            raise NumericalError(
                f"no finite epsilon is certified: the fixed-size-batch construction places "
                f"{at_infinity:.3g} at infinite privacy loss (its truncated tails; a finer grid "
                f"keeps them)", larger_delta_advice(at_infinity + first.delta_upper_floor())
                + ", or use sampling='poisson' if the batches are Poisson-sampled")
        if self.value_discretization_interval is not None:
            return value
        finest = self._bins_cap_step(history, _MAX_REFINE_BINS)
        reason = "four finer grids did not settle it"
        for _ in range(4):
            h = h / 2.0
            if h < max(finest, _MIN_H):
                reason = f"a finer grid needs more than {_MAX_REFINE_BINS:,} bins per component"
                break
            window *= 2
            if window > min(window_limit(self.memory_limit), _MAX_REFINE_WINDOW):
                reason = (f"a finer grid needs an FFT window of about {window:,} bins, more "
                          f"than {min(window_limit(self.memory_limit), _MAX_REFINE_WINDOW):,}")
                break
            try:
                finer = evaluate(self._uniform_pld(history, h))
            except (NumericalError, MemoryError) as error:
                reason = f"a finer grid could not be evaluated ({getattr(error, 'what', error)})"
                break
            if value - finer <= self.eps_tolerance * max(finer, 1e-300):
                return min(value, finer)
            value = min(value, finer)
        warnings.warn(
            f"fdp (fixed-size batches): the certified upper bound {value:.6g} may still be "
            f"loose by more than eps_tolerance={self.eps_tolerance:g}: {reason}. The value is "
            "valid", AccuracyWarning, stacklevel=5)
        return value

    def _lower_from_larger_delta(self, history, delta: float, bounds: Bounds) -> Bounds:
        """``bounds`` as they are: their lower end is a pld accountant's query (Poisson sampling,
        or the fixed-size-batch lower bound's), which has tried the larger deltas itself (trying
        them again nested the retries: 19.5 s for one query of 398,669 steps at delta =
        1e-15)."""
        return bounds

    def _epsilon_bounds(self, history, delta: float) -> Bounds:
        if self._kind(history) == "poisson":
            return self._poisson_for(history).get_epsilon_bounds(delta)
        return self._uniform_bounds(
            history, lambda mus: full_batch_epsilon_bounds(mus, delta),
            lambda acc: acc.get_epsilon_bounds(delta).lower,
            lambda pld: pld.epsilon_for_delta(delta, lower=False).upper, "epsilon")

    def _delta_bounds(self, history, epsilon: float) -> Bounds:
        if self._kind(history) == "poisson":
            return self._poisson_for(history).get_delta_bounds(epsilon)
        return self._uniform_bounds(
            history, lambda mus: full_batch_delta_bounds(mus, epsilon),
            lambda acc: acc.get_delta_bounds(epsilon).lower,
            lambda pld: pld.delta_for_epsilon(epsilon, lower=False).upper, "delta")

    def _uniform_bounds(self, history, closed_form, lower_of, upper_of, what: str) -> Bounds:
        """Bounds of a fixed-size-batch history for one query: ``closed_form(mus)`` where every
        batch is the whole dataset (:mod:`dpplugins.full_batch`), else ``lower_of`` on the
        lower bound's accountant (:meth:`_uniform_lower`) and ``upper_of`` on the upper bound's
        PLDs (:meth:`_uniform_upper`); ``what`` names the quantity in a refusal."""
        runs, low_runs = self._runs(history), self._runs(history, rate_rounding="down")
        mus = full_batch_mu(runs, sensitivity_factor=2.0)
        if mus is not None and runs == low_runs:
            return closed_form(mus)
        lower = self._uniform_lower(low_runs, lower_of)
        if mus is not None:   # every batch rounds to the whole dataset: the upper bound only
            return Bounds(lower, closed_form(mus).upper)
        return Bounds(lower, self._uniform_upper_or_refuse(runs, upper_of, lower, what))

    def _uniform_lower(self, runs, evaluate) -> float:
        """Certified lower bound for fixed-size batches: ``evaluate`` (a query returning the lower
        end) on the Poisson add/remove accountant of the same runs with noise ``sigma / 2`` (module
        docstring, "Lower bound for fixed-size batches").  0 where that accountant cannot
        evaluate the history (0 is always a valid lower bound).  Its accuracy target is at most
        1 % (``_LOWER_TOLERANCE``): the gap to the upper bound is wider than that (5-30 % in our
        checks), and a 0.1 % target cost up to 5 times more work (sigma = 0.5, q = 0.01, 10^5
        steps: 0.07 s instead of 0.02 s)."""
        options = self._poisson.options()
        options.update(neighbouring="add_remove",
                       eps_tolerance=max(options["eps_tolerance"], _LOWER_TOLERANCE))
        lower = PLDAccountant(**options)
        lower.history = [SelfComposedEvent(PoissonSampledEvent(q, GaussianEvent(_half_up(sigma))),
                                           steps) for sigma, q, steps in runs]
        # its compositions are kept across queries like the upper bound's (its own cache: the
        # key is the history and the grid step, and these histories are Poisson ones)
        lower._plds = self.__dict__.setdefault("_uniform_lower_plds", OrderedDict())
        lower._lock = self._lock
        try:
            with warnings.catch_warnings():
                # its accuracy target concerns its own interval, not this query's
                warnings.simplefilter("ignore", AccuracyWarning)
                return max(float(evaluate(lower)), 0.0)
        except (NumericalError, MemoryError):
            return 0.0

    def _uniform_upper_or_refuse(self, runs, evaluate, lower: float, what: str) -> float:
        """:meth:`_uniform_upper`; where even its first grid cannot certify the query (a delta
        below the construction's error terms, say), its :class:`NumericalError` says too what the
        lower bound certifies (``what``: the quantity, e.g. "epsilon")."""
        try:
            return self._uniform_upper(runs, evaluate)
        except NumericalError as error:
            raise NumericalError(f"{error.what}; the certified lower bound on {what} is "
                                 f"{lower:.6g}", error.fix) from None

    def epsilon_upper_fast(self, delta: float, history=None, *, coarsen: float = 1.0) -> float:
        """Certified upper bound on one grid (no accuracy loop); used by calibration
        (``coarsen`` as in :meth:`PLDAccountant.epsilon_upper_fast`)."""
        events = tuple(self._history if history is None else history)
        if self._private_history(events) is None:
            return math.inf   # a non-private step
        if self._kind(events) == "poisson":
            with self._lock:
                return self._poisson_for(events).epsilon_upper_fast(delta, coarsen=coarsen)
        runs = self._runs(events)
        if not runs:
            return 0.0
        mus = full_batch_mu(runs, sensitivity_factor=2.0)
        if mus is not None:
            return full_batch_epsilon_bounds(mus, delta).upper
        h = self._uniform_grid_step(runs)
        if self.value_discretization_interval is None:
            # coarser still where the window would exceed the first grid's budget (as the
            # first grid of a query): 10^6 steps with memory_limit = 4 MiB raised NumericalError
            h, pld = within_window_budget(lambda step: self._uniform_pld(runs, step),
                                          float(min(h * coarsen, _MAX_H)), lower=False)
        else:
            pld = self._uniform_pld(runs, h)
        return pld.epsilon_for_delta(delta, lower=False).upper

    def certified_pld(self) -> PrivacyLossDistribution | None:
        """The PLD behind the certified values (first grid), or None for an empty or a
        non-private history (a non-private step has no PLD on a grid)."""
        if self._private_history(self._history) is None:
            return None
        history = self._runs(self._history)
        if not history:
            return None
        if self._kind(self._history) == "poisson":
            return poisson_gaussian_pld(history, self._poisson.initial_grid_step(history),
                                        neighbouring=self.neighbouring, tail_mass=self.tail_mass,
                                        memory_limit=self.memory_limit)
        return self._uniform_pld(history, self._uniform_grid_step(history))

    # -- CLT estimate ---------------------------------------------------------------------------
    def get_mu(self) -> float:
        """CLT mu of the recorded history -- an **approximation**, not a guarantee.

        Poisson/add-remove: Bu, Dong, Long, Su (2020), ``mu = q sqrt(T (e^(1/sigma^2) - 1))``;
        uniform/replace-one: Dong, Roth, Su (2022, Cor. 5.4) with sensitivity 2C; runs add in
        quadrature (:func:`dpplugins.fdp.clt_mu_from_history`).  The mechanism is *not* mu-GDP
        for finite T; use :meth:`get_epsilon` for certified values.  A non-private step gives
        ``inf`` (the history's runs raised an AttributeError on it).
        """
        if self._private_history(self._history) is None:
            return math.inf
        return fdp.clt_mu_from_history(self._runs(self._history),
                                       sampling=self._kind(self._history),
                                       neighbouring=self.neighbouring)

    def _clt_message(self, what: str, value: float, certified: float | None, note: str) -> str:
        text = (f"{what}={value:.6g} is a CLT estimate (mu={self.get_mu():.6g}), not a bound: "
                f"it can under-report privacy loss.")
        if certified is not None and math.isfinite(value) and certified > 0:
            rel = (certified - value) / certified
            side = "lower" if rel > 0 else "higher"
            text += (f" The certified upper bound is {certified:.6g}; the estimate is "
                     f"{abs(rel):.1%} {side}.")
        elif note:
            text += f" {note}"
        return text + f" [{self.relation}; {self.steps} steps]"

    def _certified_or_note(self, compute) -> tuple[float | None, str]:
        try:
            return compute(), ""
        except NumericalError as error:
            return None, f"(certified value not available: {error.what})"

    def _clt_warning(self, what: str, estimate: float, certified_fn, compare: bool) -> None:
        certified, note = (self._certified_or_note(certified_fn) if compare
                           else (None, "(comparison with the certified value skipped)"))
        warnings.warn(CLTEstimateWarning(self._clt_message(what, estimate, certified, note)),
                      stacklevel=3)

    def get_epsilon(self, delta: float, method: str = "exact", *, compare: bool = True) -> float:
        """Epsilon at ``delta``.

        ``method="exact"`` (default): certified upper bound by exact composition (PLD engine).
        ``method="clt"``: ``gdp_epsilon_for_delta(get_mu(), delta)``, an estimate; emits a
        :class:`~dpplugins.fdp.CLTEstimateWarning` that states the certified value beside it and
        by how much the estimate differs (``compare=False`` skips that certified evaluation,
        which costs what ``get_epsilon(delta)`` costs, typically 0.1-1 s, unless cached).
        """
        method = check_choice("method", method, ("exact", "clt"))
        if method == "exact":
            return super().get_epsilon(delta)
        delta = check_open_unit("delta", delta)
        if not self._history:
            return 0.0
        mu = self.get_mu()
        estimate = fdp.gdp_epsilon_for_delta(mu, delta) if math.isfinite(mu) else math.inf
        self._clt_warning(f"epsilon(delta={delta:g})", estimate,
                          lambda: self.get_epsilon(delta), compare)
        return estimate

    def get_delta(self, epsilon: float, method: str = "exact", *, compare: bool = True) -> float:
        """Delta at ``epsilon``: certified upper bound (``"exact"``) or CLT estimate (``"clt"``,
        with a :class:`~dpplugins.fdp.CLTEstimateWarning`; ``compare`` as in
        :meth:`get_epsilon`)."""
        method = check_choice("method", method, ("exact", "clt"))
        if method == "exact":
            return super().get_delta(epsilon)
        epsilon = check_nonnegative("epsilon", epsilon)
        if not self._history:
            return 0.0
        mu = self.get_mu()
        estimate = float(fdp.gdp_delta_for_epsilon(mu, epsilon)) if math.isfinite(mu) else 1.0
        self._clt_warning(f"delta(epsilon={epsilon:g})", estimate,
                          lambda: self.get_delta(epsilon), compare)
        return estimate

    # -- trade-off curves and report --------------------------------------------------------------
    def tradeoff_curve(self, alphas=None) -> TradeoffComparison:
        """Certified (exact composition) and CLT trade-off curves on ``alphas``.

        ``exact`` comes from :meth:`certified_pld` through :func:`dpplugins.fdp.tradeoff_from_pld`
        (a valid lower bound on the trade-off function); ``clt`` is ``G_{get_mu()}``.
        """
        alphas = fdp.default_alphas() if alphas is None else fdp.alpha_array(alphas, "alphas")
        mu = self.get_mu()
        pld = self.certified_pld()
        if self._private_history(self._history) is None:   # f = 0: told apart for sure
            exact = TradeoffCurve(alphas, np.zeros_like(alphas), "a non-private step")
        elif pld is None:
            exact = TradeoffCurve(alphas, 1.0 - alphas, "no steps")
        else:
            exact = fdp.tradeoff_from_pld(pld, alphas)
        clt = TradeoffCurve(alphas, fdp.gaussian_tradeoff(alphas, mu) if math.isfinite(mu)
                            else np.zeros_like(alphas), f"G_{mu:.4g} (CLT estimate)")
        return TradeoffComparison(alphas, exact, clt, mu, self._kind(self._history), self.neighbouring,
                                  self.steps)

    def plot_tradeoff(self, path, alphas=None, *, title: str | None = None,
                      size: tuple[float, float] = (10.0, 4.8), dpi: int = 110) -> Path:
        """Draw the certified and CLT trade-off curves into an image: ``f(alpha)`` on linear
        axes (left) and the tail, the power ``1 - f(alpha)`` against ``alpha`` on log axes
        (right), where small-delta guarantees live and where the CLT's optimism shows.

        ``size`` is ``(width, height)`` in inches and ``dpi`` the dots per inch (checked by
        :func:`dpplugins.plots.check_figure_size`); the format follows the suffix of ``path``
        (PNG when it has none).  Needs matplotlib (``pip install "dpplugins[plot]"``); it is
        imported here, so the core does not depend on it.  The title always states the
        sampling scheme and neighbouring relation.  Returns the path written.

        Example::

            acc = create("fdp")
            acc.step(noise_multiplier=1.0, sample_rate=0.01, count=1000)
            acc.plot_tradeoff("tradeoff.pdf", size=(8, 4), dpi=150)
        """
        try:
            from matplotlib.backends.backend_agg import FigureCanvasAgg
            from matplotlib.figure import Figure
        except ImportError:
            raise ImportError("plot_tradeoff needs matplotlib; install it with "
                              "pip install 'dpplugins[plot]' (or pip install matplotlib)") from None
        from dpplugins.plots import check_figure_size, check_output_path

        path = check_output_path(path)
        size, dpi = check_figure_size(size, dpi)
        comparison = self.tradeoff_curve(alphas)
        a, exact, clt = comparison.alphas, comparison.exact.values, comparison.clt.values
        figure = Figure(figsize=size, dpi=dpi)
        FigureCanvasAgg(figure)
        left, right = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
        labels = ("certified (exact composition, PLD)",
                  f"CLT estimate G_mu, mu={comparison.mu_clt:.3g}")
        left.plot(a, 1 - a, ":", color="grey", label="no privacy loss (1 - alpha)")
        left.plot(a, exact, "-", color="C0", label=labels[0])
        left.plot(a, clt, "--", color="C3", label=labels[1])
        left.set(xlabel="type I error alpha", ylabel="type II error f(alpha)", xlim=(0, 1),
                 ylim=(0, 1), aspect="equal")
        left.legend(fontsize=8, loc="upper right")
        tail = (a > 0) & (a < 0.5)
        right.loglog(a[tail], a[tail], ":", color="grey", label="no privacy loss")
        right.loglog(a[tail], np.maximum(1 - exact[tail], 1e-300), "-", color="C0",
                     label=labels[0])
        right.loglog(a[tail], np.maximum(1 - clt[tail], 1e-300), "--", color="C3",
                     label=labels[1])
        right.set(xlabel="type I error alpha", ylabel="power 1 - f(alpha)",
                  title="tail (higher = less private)")
        right.legend(fontsize=8, loc="lower right")
        subtitle = f"{self.steps} steps; {self.relation}"  # every plot states the relation
        figure.suptitle(f"{title}\n{subtitle}" if title else subtitle, fontsize=9)
        figure.tight_layout()
        figure.savefig(path, format=path.suffix.lower().lstrip(".") or "png", dpi=dpi)
        return path

    def report(self, delta: float) -> str:
        """One paragraph: certified epsilon, the CLT estimate beside it, and the neighbouring
        relation and sampling scheme they assume."""
        delta = check_open_unit("delta", delta)
        lower, upper = self.get_epsilon_bounds(delta)
        mu = self.get_mu()
        if not self._history:
            estimate = 0.0
        else:   # (mu = inf, a non-private step or noise too small, printed epsilon~0)
            estimate = fdp.gdp_epsilon_for_delta(mu, delta) if math.isfinite(mu) else math.inf
        bounds = (f"epsilon <= {upper_text(upper, decimals=4)}" if lower == 0 and upper > 0
                  else f"epsilon in {interval_text(lower, upper, decimals=4)}")
        return (f"fdp accountant, {self.relation}; {self.steps} steps. "
                f"Certified at delta={delta:g}: {bounds}. CLT estimate (not a bound): "
                f"mu={mu:.4f}, epsilon~{estimate:.4f}.")
