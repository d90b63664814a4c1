"""The PNSGD accountant (registry name ``"pnsgd"``): privacy amplification by iteration.

Thin state around :mod:`dpplugins.amplification.iteration`: it splits the recorded steps into
passes of ``dataset_size`` steps, takes each pass's privacy profile (shuffled, randomly stopped
or online PNSGD) and composes the passes through the PLD engine.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from fractions import Fraction

from dpplugins.accountants.base import (Accountant, UnsupportedEventError, leaves_to_check,
                                        private_leaves, validate_history)
from dpplugins.events import Event, GaussianEvent, LaplaceEvent, PNSGDEvent
from dpplugins.amplification.iteration import (NOISES, PNSGDSetting, epsilon_for_delta,
                                               privacy_profile)
from dpplugins.errors import (NumericalError, ParameterError, check_choice, check_count,
                              check_positive, larger_delta_advice)
from dpplugins.pld import Bounds, PrivacyLossDistribution
from dpplugins.pld.distribution import within_window_budget

__all__ = ["PNSGDAccountant", "split_into_passes", "pass_runs"]

VARIANTS = ("shuffled", "randomly_stopped", "online")
#: (profile evaluations) x (distinct noise runs in a pass) spent on one pass's PLD; passes with
#: many noise levels are sampled on a coarser sub-grid (still a dominating PLD, a little looser)
EVALUATION_BUDGET = 4_000_000
#: grid points (``epsilon_max / h``) of one pass's PLD above which the grid step is coarsened:
#: passes whose profile stays above 1e-16 far out (little noise) would otherwise need 10^5 to
#: 4 x 10^5 points per pass and minutes of FFT work for bounds in the hundreds
MAX_PASS_GRID_POINTS = 100_000
#: the PLD engine's rule for where a profile ends (``from_privacy_profile``'s default)
_PROFILE_FLOOR, _PROFILE_END_LIMIT = 1e-16, 400.0
Pass = tuple  # ((noise_multiplier, steps), ...), steps summing to at most dataset_size


def split_into_passes(history, dataset_size: int) -> list[Pass]:
    """Cut a run-length history into passes of ``dataset_size`` steps (the last may be partial).

    Each pass is a tuple of ``(noise_multiplier, steps)`` runs.

    Example::

        >>> split_into_passes([(1.0, 0.1, 25)], 10)
        [((1.0, 10),), ((1.0, 10),), ((1.0, 5),)]
    """
    return [p for p, count in pass_runs(history, dataset_size) for _ in range(count)]


def pass_runs(history, dataset_size: int) -> list[tuple[Pass, int]]:
    """:func:`split_into_passes` run-length encoded: ``(pass, number of such passes in a row)``,
    in time and memory linear in the number of runs of the history (not of passes).

    Example::

        >>> pass_runs([(1.0, 0.1, 25)], 10)
        [(((1.0, 10),), 2), (((1.0, 5),), 1)]
    """
    n = check_count("dataset_size", dataset_size, minimum=1)
    out: list[tuple[Pass, int]] = []

    def emit(p: Pass, count: int) -> None:
        if out and out[-1][0] == p:
            out[-1] = (p, out[-1][1] + count)
        else:
            out.append((p, count))

    current: list[tuple[float, int]] = []
    filled = 0
    for sigma, _, steps in history:
        if filled:                       # complete the pass under way
            take = min(steps, n - filled)
            current.append((sigma, take))
            filled += take
            steps -= take
            if filled < n:
                continue
            emit(tuple(current), 1)
            current, filled = [], 0
        full, steps = divmod(steps, n)   # whole passes of this run
        if full:
            emit(((sigma, n),), full)
        if steps:
            current, filled = [(sigma, steps)], steps
    if current:
        emit(tuple(current), 1)
    return out


class PNSGDAccountant(Accountant):
    """Projected noisy SGD with hidden intermediate iterates, one record per step.

    The algorithm (Feldman et al. 2018; Asoodeh et al. 2020; Sordello, Bu, Dong 2021 -- see
    :mod:`dpplugins.amplification.iteration`): each step takes one record ``x_t``,

        w_t = Pi_K( w_{t-1} - eta * (g_t + noise_multiplier * L * Z_t) ),   Z_t ~ N(0, I)

    where ``g_t`` is the record's gradient with norm at most ``L`` (``lipschitz``; with per-example
    clipping, Opacus' ``max_grad_norm``) and ``Pi_K`` projects onto a convex set of diameter
    ``D_K`` (``diameter``).  **Units**: ``noise_multiplier`` is, as in Opacus, the standard
    deviation of the gradient noise divided by L, so the paper's ``sigma = noise_multiplier * L``
    and the iterate receives ``N(0, (eta * noise_multiplier * L)^2 I)``.  Then
    ``A = theta_{e^eps}(2 / noise_multiplier)`` and
    ``B = theta_{e^eps}(M D_K / (eta * noise_multiplier * L))``.  For ``noise="laplace"`` (1-D,
    ``K = [a, b]``, ``diameter = b - a``) ``noise_multiplier * L`` is the Laplace scale ``v``.

    ``sample_rate`` must be ``1 / dataset_size`` (one record per step; Opacus passes it on every
    step); a pass is ``dataset_size`` steps.  Variants (one pass, delta(eps) for every eps >= 0):

    * ``"shuffled"``: a fresh uniform permutation per pass, only the end of a pass released or
      not at all (Sordello, Bu, Dong 2021, Thm 2): ``A (1 - B^n) / (n (1 - B))``;
    * ``"randomly_stopped"``: each pass outputs ``w_T``, ``T`` uniform on ``{1..n}`` (Asoodeh et al.
      Thm 5 with the factor ``1 - B^n`` its proof gives -- numerically the same as shuffled);
    * ``"online"``: fixed order, per-step noise (Sordello et al. 2021, eq. 6.1), the maximum over positions, i.e.
      the guarantee of the least protected (latest) record.

    Passes compose through the PLD engine: each pass's profile becomes a dominating PLD
    (``PrivacyLossDistribution.from_privacy_profile``, grid ``value_discretization_interval``
    -- coarser for passes so little noisy that their profile needs more than
    ``MAX_PASS_GRID_POINTS`` grid points, :meth:`grid_step` -- profile evaluated at every grid
    point, or on a coarser sub-grid for passes with thousands of noise levels --
    :meth:`profile_step`) and the passes are composed by FFT -- never by the
    (eps, delta) -> RDP conversion of Sordello, Bu, Dong 2021 (arXiv:2106.11767) Sec. 5 (an
    (eps, delta) point with delta > 0 implies no finite RDP; Mironov 2017, arXiv:1702.07476).  A single pass is answered
    directly from its profile.  Passes may differ in noise (steps with different
    ``noise_multiplier`` inside a pass use the per-step forms of the same theorems).

    **Partial passes** (the recorded steps are not a multiple of ``dataset_size``): the trailing
    ``r < n`` steps are charged conservatively as the larger of (a) the bound for the ``r`` steps
    actually run (a uniform permutation stopped early for shuffled; the latest record for online)
    and (b) the bound for the completed pass, the missing steps run at the last recorded noise.
    For randomly stopped only (b) is defined.

    Preconditions checked: ``lipschitz, diameter, learning_rate, contraction > 0``,
    ``dataset_size >= 1``, ``neighbouring == "replace_one"`` (the theorems compare datasets that
    differ in one record's value), and, when ``smoothness`` (beta) is given, ``learning_rate <=
    2 / beta`` unless ``contraction >= learning_rate * beta - 1`` (the gradient step of a convex
    beta-smooth loss is ``max(1, eta beta - 1)``-Lipschitz).  Convexity itself, and any
    ``contraction < 1`` (strong convexity), cannot be checked and are the caller's claim.

    Example::

        >>> from dpplugins.accountants import create
        >>> acc = create("pnsgd", lipschitz=1.0, diameter=2.0, learning_rate=0.5,
        ...              dataset_size=1000)
        >>> acc.step(noise_multiplier=2.0, sample_rate=1 / 1000, count=3000)   # three passes
        >>> eps = acc.get_epsilon(delta=1e-5)
    """

    name: ClassVar[str] = "pnsgd"
    computes_lower_bounds: ClassVar[bool] = False   # no lower bound is known
    theorem: ClassVar[str] = (
        "privacy amplification by iteration for PNSGD: shuffled (Sordello, Bu, Dong 2021, Thm 2), "
        "randomly stopped (Asoodeh et al. 2020, Thm 5, with the proof's (1 - B^n) factor), online "
        "(Sordello et al. 2021, eq. 6.1); passes composed by FFT from the per-pass privacy profile "
        "(connect-the-dots, Doroshenko et al. 2022)")
    bound_type: ClassVar[str] = "certified upper bound"
    _option_names = ("neighbouring", "lipschitz", "diameter", "learning_rate", "dataset_size",
                     "variant", "contraction", "noise", "smoothness",
                     "value_discretization_interval")

    def __init__(self, *, lipschitz: float | None = None, diameter: float | None = None,
                 learning_rate: float | None = None, dataset_size: int | None = None,
                 variant: str = "shuffled", contraction: float = 1.0,
                 noise: str = "gaussian", smoothness: float | None = None,
                 neighbouring: str = "replace_one",
                 value_discretization_interval: float = 1e-3) -> None:
        if neighbouring != "replace_one":
            raise ParameterError("neighbouring", neighbouring, "'replace_one'",
                                 "the PNSGD theorems compare datasets of equal size that differ "
                                 "in one record (A uses the gradient difference 2L)")
        super().__init__(neighbouring=neighbouring)
        settings = dict(lipschitz=lipschitz, diameter=diameter, learning_rate=learning_rate,
                        dataset_size=dataset_size)
        if all(value is None for value in settings.values()):
            # the algorithm's constants come from the PNSGDEvent (events mode)
            for key in settings:
                setattr(self, key, None)
            self.variant = check_choice("variant", variant, VARIANTS)
            self.contraction = check_positive("contraction", contraction)
            self.noise = check_choice("noise", noise, NOISES)
            self.smoothness = (None if smoothness is None
                               else check_positive("smoothness", smoothness))
            self.value_discretization_interval = check_positive(
                "value_discretization_interval", value_discretization_interval)
            self._setting = None
            return
        for key, value in settings.items():
            if value is None:
                raise ParameterError(key, None, "a value (with lipschitz, diameter, learning_rate "
                                     "and dataset_size all given; or none of them, and compose "
                                     "PNSGDEvent)")
        self.lipschitz = check_positive("lipschitz", lipschitz)
        self.diameter = check_positive("diameter", diameter)
        self.learning_rate = check_positive("learning_rate", learning_rate)
        self.dataset_size = check_count("dataset_size", dataset_size, minimum=1)
        self.variant = check_choice("variant", variant, VARIANTS)
        self.contraction = check_positive("contraction", contraction)
        self.noise = check_choice("noise", noise, NOISES)
        self.smoothness = None if smoothness is None else check_positive("smoothness", smoothness)
        self.value_discretization_interval = check_positive("value_discretization_interval",
                                                            value_discretization_interval)
        if self.smoothness is not None:
            limit = 2.0 / self.smoothness
            needed = self.learning_rate * self.smoothness - 1.0
            if self.learning_rate > limit and self.contraction < needed:
                raise ParameterError(
                    "learning_rate", learning_rate,
                    f"<= 2/smoothness = {limit:.6g} for the gradient step to be non-expansive "
                    f"(contraction M = {self.contraction:g})",
                    f"with eta > 2/beta the step is only (eta beta - 1) = {needed:.6g}-Lipschitz;"
                    " lower the learning rate or pass contraction >= that")
        self._setting = PNSGDSetting(lipschitz=self.lipschitz, diameter=self.diameter,
                                     learning_rate=self.learning_rate,
                                     contraction=self.contraction, noise=self.noise)

    # -- history ------------------------------------------------------------------------------
    def _check_sample_rate(self, name: str, sample_rate: float) -> None:
        # in rationals: 1.0 / dataset_size overflowed for dataset_size = 10**400
        expected = Fraction(1, self.dataset_size)
        if abs(Fraction(sample_rate) - expected) > expected / 10**9:
            raise ParameterError(name, sample_rate,
                                 f"1/dataset_size = {float(expected):.12g} (PNSGD takes one "
                                 "record per step)", "use batch size 1 or create the accountant "
                                 "with the dataset size the loader uses")

    def step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """Version 0.1: one PNSGD step of the configured algorithm; ``sample_rate`` must be
        ``1/dataset_size``.  ``noise_multiplier`` = (std of the Gaussian noise added to the
        gradient) / ``lipschitz`` (for Laplace noise: the Laplace scale / ``lipschitz``)."""
        sigma = check_positive("noise_multiplier", noise_multiplier)
        if self._setting is None:
            raise UnsupportedEventError(
                super().step_event(noise_multiplier, sample_rate), self.name,
                "step() is a Poisson step unless the accountant was created with lipschitz, "
                "diameter, learning_rate and dataset_size (version 0.1); compose a PNSGDEvent")
        sample_rate = check_positive("sample_rate", sample_rate)
        self._check_sample_rate("sample_rate", sample_rate)
        inner = GaussianEvent(sigma) if self.noise == "gaussian" else LaplaceEvent(sigma)
        return PNSGDEvent(self.dataset_size, Fraction(1, self.dataset_size), inner,
                          self.lipschitz, self.diameter, self.learning_rate, self.variant,
                          self.contraction, self.smoothness)

    def _supports_leaf(self, event: Event) -> bool | str:
        if not isinstance(event, PNSGDEvent):
            return "projected noisy SGD (PNSGDEvent)"
        if not isinstance(event.event, (GaussianEvent, LaplaceEvent)):
            return "Gaussian or Laplace noise in PNSGDEvent.event"
        if event.smoothness is not None:
            limit = 2.0 / event.smoothness
            needed = event.learning_rate * event.smoothness - 1.0
            if event.learning_rate > limit and event.contraction < needed:
                return (f"learning_rate <= 2/smoothness = {limit:.6g} for the gradient step to "
                        f"be non-expansive (or contraction >= {needed:.6g})")
        return True

    def _check_history(self, history: tuple) -> None:
        def is_pnsgd(leaf):
            return isinstance(leaf, PNSGDEvent)

        keys = {leaf.protocol_key() + (type(leaf.event).__name__,)
                for leaf, _ in leaves_to_check(history, is_pnsgd) if is_pnsgd(leaf)}
        if len(keys) > 1:
            raise UnsupportedEventError(history[-1], self.name, "one PNSGD algorithm (constants, "
                                        "variant and noise family) per accountant", ())

    def _configured(self, history) -> tuple["PNSGDAccountant", list]:
        """An accountant configured with the history's algorithm and its steps as version-0.1
        runs ``(noise_multiplier, 1 / dataset_size, steps)``."""
        leaves_ = private_leaves(history)
        event = leaves_[0][0]
        configured = PNSGDAccountant(
            lipschitz=event.lipschitz, diameter=event.diameter,
            learning_rate=event.learning_rate, dataset_size=event.dataset_size,
            variant=event.variant, contraction=event.contraction,
            noise="gaussian" if isinstance(event.event, GaussianEvent) else "laplace",
            smoothness=event.smoothness,
            value_discretization_interval=self.value_discretization_interval)
        # the event's own constants, always (an accountant created with version-0.1 options
        # was reused when only lipschitz, dataset_size and variant agreed: a PNSGDEvent of
        # diameter 100 was accounted with the options' diameter 1, 7.58 where it is 9.997, and
        # Gaussian noise as the options' Laplace noise, 3.998 where it is 19.6 -- hostile sweep)
        runs = []
        for leaf, count in leaves_:
            inner = leaf.event
            scale = inner.noise_multiplier if isinstance(inner, GaussianEvent) else inner.scale
            steps = leaf.steps * count
            if runs and runs[-1][0] == scale:
                runs[-1] = (scale, runs[-1][1], runs[-1][2] + steps)
            else:
                runs.append((scale, 1.0 / leaf.dataset_size, steps))
        return configured, runs

    def passes_of(self, history) -> list[tuple[Pass, int]]:
        """The passes of a version-0.1 history ``[(noise_multiplier, 1/dataset_size, steps),
        ...]`` for this accountant's ``dataset_size``, run-length encoded (:func:`pass_runs`);
        ParameterError for a sample rate other than ``1/dataset_size``."""
        history = validate_history(history)
        for i, (_, q, _) in enumerate(history):
            self._check_sample_rate(f"history[{i}].sample_rate", q)
        return pass_runs(history, self.dataset_size)

    _passes = passes_of   # the name of version 0.1

    # -- one pass -----------------------------------------------------------------------------
    def _profile_of(self, runs: Pass):
        scales = np.array([sigma * self.lipschitz for sigma, _ in runs])
        counts = np.array([steps for _, steps in runs])
        return privacy_profile(self.variant, self._setting, scales, self.dataset_size,
                               counts=counts)

    def pass_profile(self, runs: Pass):
        """delta(eps) of one pass (``runs`` as in :func:`split_into_passes`); a trailing partial
        pass is charged conservatively (see the class docstring)."""
        runs = tuple(runs)
        done = sum(steps for _, steps in runs)
        if done == self.dataset_size:
            return self._profile_of(runs)
        completed = runs[:-1] + ((runs[-1][0], runs[-1][1] + self.dataset_size - done),)
        full = self._profile_of(completed)
        if self.variant == "randomly_stopped":
            return full
        partial = self._profile_of(runs)
        return lambda eps: np.maximum(full(eps), partial(eps))

    # -- composition --------------------------------------------------------------------------
    def profile_step(self, runs: Pass, profile, h: float | None = None) -> float:
        """Sub-grid on which a pass's profile is evaluated: every grid point (``h``, default the
        accountant's grid step) unless the pass has so many noise levels that
        ``EVALUATION_BUDGET`` would be exceeded; then a multiple of ``h`` (connect-the-dots on a
        sub-grid still dominates the mechanism)."""
        h = self.value_discretization_interval if h is None else h
        eps_max = 0.25  # where the profile falls below 1e-16 (the engine's rule, at most 50)
        while eps_max < 50 and float(profile(np.array([eps_max]))[0]) > 1e-16:
            eps_max *= 2
        points = 2 * min(eps_max, 50.0) / h
        return h * max(1, math.ceil(points * len(runs) / EVALUATION_BUDGET))

    @staticmethod
    def _profile_end(profile) -> float:
        """Where the profile falls to 1e-16 (a power of two from 0.25, at most 400): the end of
        the pass's PLD grid, as ``from_privacy_profile`` chooses it by default."""
        eps = 0.25
        while eps < _PROFILE_END_LIMIT and float(profile(np.array([eps]))[0]) > _PROFILE_FLOOR:
            eps *= 2
        return min(eps, _PROFILE_END_LIMIT)

    def grid_step(self, ends) -> float:
        """PLD grid step for passes whose profiles end at ``ends``: the accountant's
        ``value_discretization_interval``, coarser when a pass would need more than
        ``MAX_PASS_GRID_POINTS`` points (any grid gives a dominating PLD, i.e. certified upper
        bounds; a coarser one is only looser)."""
        return max(self.value_discretization_interval, max(ends) / MAX_PASS_GRID_POINTS)

    def _pld(self, passes: list[tuple[Pass, int]]) -> PrivacyLossDistribution:
        """The composed PLD of the passes, on :meth:`grid_step`'s grid, or a coarser one where
        the composed window would exceed ``FIRST_WINDOW_BINS``
        (:func:`~dpplugins.pld.distribution.within_window_budget`: hundreds of thousands of
        passes with little noise compose a privacy loss tens of thousands wide)."""
        counts: dict[Pass, int] = {}
        for p, count in passes:
            counts[p] = counts.get(p, 0) + count
        profiles = {runs: self.pass_profile(runs) for runs in counts}
        ends = {runs: self._profile_end(profile) for runs, profile in profiles.items()}

        def build(h: float) -> PrivacyLossDistribution:
            total = None
            for runs, k in counts.items():
                profile = profiles[runs]
                one = PrivacyLossDistribution.from_privacy_profile(
                    profile, epsilon_max=ends[runs], value_discretization_interval=h,
                    profile_step=self.profile_step(runs, profile, h), symmetric=True,
                    description=f"one pass of {self.variant} PNSGD")
                part = one.self_compose(k)
                total = part if total is None else total.compose(part)
            return total
        return within_window_budget(build, self.grid_step(ends.values()))[1]

    def _epsilon_bounds(self, history, delta: float) -> Bounds:
        acc, runs = self._configured(history)
        passes = acc.passes_of(runs)
        if passes == [(passes[0][0], 1)]:
            return Bounds(0.0, epsilon_for_delta(acc.pass_profile(passes[0][0]), delta))
        pld = self._cached_object(history, ("pld",), lambda _: acc._pld(passes))
        upper = pld.epsilon_for_delta(delta, lower=False).upper
        if math.isinf(upper):
            # the noise makes every epsilon finite; the infinite loss is the profiles' mass
            # beyond the end of each pass's grid (a fuzz case: 172,308 passes at delta = 1e-15)
            at_infinity = pld.delta_at_infinity()
            raise NumericalError(
                f"no finite epsilon is certified at delta={delta:g}: the composed passes place "
                f"{at_infinity:.3g} at infinite privacy loss (each pass's privacy profile beyond "
                "the end of its grid)",
                larger_delta_advice(at_infinity + pld.delta_upper_floor(),
                                    "account fewer passes or use more noise"))
        return Bounds(0.0, upper)

    def _delta_bounds(self, history, epsilon: float) -> Bounds:
        acc, runs = self._configured(history)
        passes = acc.passes_of(runs)
        if passes == [(passes[0][0], 1)]:
            value = float(acc.pass_profile(passes[0][0])(np.array([epsilon]))[0])
            return Bounds(0.0, min(value, 1.0))
        pld = self._cached_object(history, ("pld",), lambda _: acc._pld(passes))
        return Bounds(0.0, pld.delta_for_epsilon(epsilon, lower=False).upper)
