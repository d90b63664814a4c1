"""The random check-in accountant (registry name ``"checkin"``).

One *pass* is one run of a check-in protocol (``num_slots`` steps for the fixed and averaged
variants, ``num_examples - window + 1`` for the sliding window; the samplers in
:mod:`dpplugins.samplers.checkin` produce exactly these runs).  Each pass is bounded by the
privacy profile of :func:`dpplugins.amplification.checkin.pass_privacy_profile` (Balle et al.
2020, Thm 3.2 / 4.1 / 4.3, minimum with the single-participation bound), turned into a dominating
PLD and composed over passes by FFT (Koskela, Jalko, Honkela 2020, arXiv:1906.03049;
Doroshenko, Ghazi, Kamath, Kumar, Manurangsi 2022, arXiv:2207.04380).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from dpplugins.accountants.base import (Accountant, UnsupportedEventError, is_non_private,
                                       leaves_to_check, private_leaves)
from dpplugins.events import EpsilonDeltaEvent, Event, GaussianEvent, RandomCheckInEvent
from dpplugins.passes import Pass, cut_passes
from dpplugins.amplification.checkin import (VARIANTS, expected_dummy_updates,
                                             pass_privacy_profile)
from dpplugins.composition import optimal_composition_delta, optimal_composition_epsilon
from dpplugins.errors import (NumericalError, ParameterError, check_choice, check_count, check_flag,
                              check_grid_step, check_nonnegative, check_positive,
                              check_probability)
from dpplugins.mechanisms.gaussian import gaussian_delta, gaussian_delta_upper, gaussian_epsilon
from dpplugins.pld import Bounds, PrivacyLossDistribution
from dpplugins.profiles import pld_from_profile, profile_grid

__all__ = ["CheckInAccountant", "pass_profile", "local_noise_multiplier",
           "composed_local_epsilon", "composed_local_delta"]

#: grid points of one pass's PLD that fit in the PLD engine's default memory (1 GiB, a few
#: float64 arrays of the grid)
_MAX_GRID_POINTS = 2**25
#: the unit round-off of double precision
_UNIT_ROUNDOFF = float(np.finfo(float).eps) / 2


class CheckInAccountant(Accountant):
    """Privacy of DP-SGD / federated training with random check-ins, composed over passes.

    Protocol (constructor): ``variant`` is ``"fixed"`` (A_fix, Thm 3.2: each example checks in
    w.p. ``checkin_probability`` into one of ``num_slots`` slots, one example per slot, dummy
    updates), ``"averaged"`` (A_avg, Thm 4.1: ``checkin_probability`` must be 1, all checked-in
    examples of a slot are averaged) or ``"sliding"`` (A_sldw, Thm 4.3: ``window`` instead of
    ``num_slots``, ``window <= num_examples``).

    Local randomizer (what one step does to one example): either ``eps0`` (and ``delta0``) -- an
    ``(eps0, delta0)``-DP randomizer, the steps' noise multipliers are then not used; a ``delta0``
    above the theorems' admissible bound
    (:func:`~dpplugins.amplification.checkin.admissible_delta0` at ``delta1 = 1``) is accounted
    without amplification, each pass ``(eps0, delta0)``-DP (:meth:`local_guarantee`), and so is
    any history where that beats the amplified bound's grid -- or Gaussian
    noise: ``noise_multiplier`` fixes it (steps with another value are refused), or, if neither is
    given, each step's ``noise_multiplier`` is used.  The Gaussian randomizer has L2 sensitivity
    ``2C`` (replace-one with clipping norm ``C``), so ``mu = 2 / sigma``; every pair
    ``(eps0, delta0(eps0))`` of its exact profile on a grid is tried and the best is kept.  For
    ``variant="averaged"`` with noise added once to the batch sum (Opacus), a batch of at most
    ``b = max_batch_size`` examples (``num_examples`` if unset) is a post-processing of per-example
    randomizers with noise multiplier ``sigma / sqrt(b)``, which is what we account for; pass
    ``per_example_noise=True`` if every example gets its own noise ``sigma``.

    History: Opacus-style ``step(noise_multiplier=, sample_rate=, count=)`` calls (the sample rate
    is not used: the protocol's randomness is the check-in).  Steps accumulate into passes; a
    partial last pass is counted as a full pass (its release is a prefix of a full pass's, a
    post-processing), and a pass whose steps used different noise multipliers is charged with the
    smallest one.

    The neighbouring relation is the paper's *replace one* (Sec. 2); ``"add_remove"`` is refused.
    ``get_epsilon`` is a certified upper bound; no lower bound is known (``lower = 0``).

    Example::

        >>> from dpplugins.accountants import create
        >>> acc = create("checkin", num_examples=10_000, num_slots=100,
        ...              checkin_probability=0.01, eps0=1.0)
        >>> acc.step(noise_multiplier=1.0, sample_rate=0.01, count=100 * 100)   # 100 passes
        >>> eps = acc.get_epsilon(1e-6)        # about 0.48
    """

    name: ClassVar[str] = "checkin"
    computes_lower_bounds: ClassVar[bool] = False   # no lower bound is known
    theorem: ClassVar[str] = (
        "Random check-ins, Balle, Kairouz, McMahan, Thakkar, Thakurta 2020 (Thm 3.2 fixed window, "
        "Thm 4.1 averaged updates, Thm 4.3 sliding window) per pass, with the single-participation "
        "bound; passes composed by PLD/FFT of the per-pass privacy profile (connect-the-dots, "
        "Doroshenko et al. 2022)")
    _option_names = ("neighbouring", "variant", "num_examples", "num_slots", "window",
                     "checkin_probability", "eps0", "delta0", "noise_multiplier",
                     "max_batch_size", "per_example_noise", "value_discretization_interval")

    def __init__(self, *, num_examples: int | None = None, variant: str = "fixed",
                 num_slots: int | None = None, window: int | None = None,
                 checkin_probability: float = 1.0, eps0: float | None = None,
                 delta0: float = 0.0, noise_multiplier: float | None = None,
                 max_batch_size: int | None = None, per_example_noise: bool = False,
                 neighbouring: str = "replace_one",
                 value_discretization_interval: float | None = None) -> None:
        super().__init__(neighbouring=neighbouring)
        if self.neighbouring != "replace_one":
            raise ParameterError("neighbouring", neighbouring, "'replace_one' (the random check-in "
                                 "theorems are proved for replacing one client's data)")
        self.variant = check_choice("variant", variant, VARIANTS)
        self.value_discretization_interval = (
            None if value_discretization_interval is None
            else check_grid_step("value_discretization_interval", value_discretization_interval))
        if num_examples is None:   # the protocol comes from the events
            given = {"num_slots": num_slots, "window": window, "eps0": eps0,
                     "noise_multiplier": noise_multiplier, "max_batch_size": max_batch_size}
            for key, value in given.items():
                if value is not None:
                    raise ParameterError(key, value, "None unless num_examples is given (the "
                                         "version-0.1 protocol options; with events the "
                                         "protocol is in the RandomCheckInEvent)")
            self.num_examples = self.num_slots = self.window = self.eps0 = None
            self.noise_multiplier = self.max_batch_size = None
            self.checkin_probability = check_probability("checkin_probability",
                                                         checkin_probability)
            self.delta0 = check_nonnegative("delta0", delta0)
            if self.delta0 >= 1.0:
                raise ParameterError("delta0", delta0, "in [0, 1)")
            self.per_example_noise = check_flag("per_example_noise", per_example_noise)
            return
        self.num_examples = check_count("num_examples", num_examples, minimum=1)
        if self.variant == "sliding":
            if window is None:
                raise ParameterError("window", None, "an integer in [1, num_examples] for "
                                     "variant='sliding'")
            if num_slots is not None:
                raise ParameterError("num_slots", num_slots, "None for variant='sliding' (give "
                                     "window)")
            self.window = check_count("window", window, minimum=1)
            if self.window > self.num_examples:
                raise ParameterError("window", window, f"<= num_examples={self.num_examples} "
                                     "(Thm 4.3 needs m in [n])")
            self.num_slots = None
        else:
            if num_slots is None:
                raise ParameterError("num_slots", None, f"an integer >= 1 for "
                                     f"variant={self.variant!r}")
            if window is not None:
                raise ParameterError("window", window, "None unless variant='sliding'")
            self.num_slots = check_count("num_slots", num_slots, minimum=1)
            self.window = None
        self.checkin_probability = check_probability("checkin_probability", checkin_probability)
        if self.variant != "fixed" and self.checkin_probability != 1.0:
            raise ParameterError("checkin_probability", checkin_probability,
                                 f"1 for variant={self.variant!r} (Thms 4.1 and 4.3 assume every "
                                 "client checks in)")
        if eps0 is not None and noise_multiplier is not None:
            raise ParameterError("noise_multiplier", noise_multiplier,
                                 f"None when eps0={eps0!r} is given (one local randomizer)")
        self.eps0 = None if eps0 is None else check_positive("eps0", eps0)
        self.delta0 = check_nonnegative("delta0", delta0)
        if eps0 is None and self.delta0 != 0.0:
            raise ParameterError("delta0", delta0, "0 unless eps0 is given (a Gaussian randomizer "
                                 "is converted to (eps0, delta0) pairs internally)")
        if self.eps0 is not None and not 0.0 <= self.delta0 < 1.0:
            raise ParameterError("delta0", delta0, "in [0, 1)")
        self.noise_multiplier = (None if noise_multiplier is None
                                 else check_positive("noise_multiplier", noise_multiplier))
        self.max_batch_size = (None if max_batch_size is None
                               else check_count("max_batch_size", max_batch_size, minimum=1))
        self.per_example_noise = check_flag("per_example_noise", per_example_noise)

    # -- events -------------------------------------------------------------------------------
    def _supports_leaf(self, event: Event) -> bool | str:
        if not isinstance(event, RandomCheckInEvent):
            return ("random check-ins (RandomCheckInEvent, Balle et al. 2020); for random "
                    "allocation with central noise use 'balls_and_bins'")
        if event.variant != "fixed" and event.checkin_probability != 1.0:
            return (f"checkin_probability=1 for variant={event.variant!r} (Thms 4.1 and 4.3 "
                    "assume every client checks in)")
        randomizer = event.event
        if isinstance(randomizer, GaussianEvent):
            return True
        if isinstance(randomizer, EpsilonDeltaEvent):
            if randomizer.epsilon <= 0:
                return "a local randomizer with eps0 > 0"
            if randomizer.delta >= 1:
                return "a local randomizer with delta0 < 1"
            return True
        return ("a Gaussian (GaussianEvent) or (eps0, delta0) (EpsilonDeltaEvent) local "
                "randomizer")

    def _check_history(self, history: tuple) -> None:
        """A pass runs one kind of local randomizer, Gaussian or (eps0, delta0): the passes are
        cut only when the newest event's kind differs from the last one's (a history of one
        kind costs nothing here).  A mix was accepted, and every query then failed with an
        AttributeError."""
        def is_checkin(leaf):
            return isinstance(leaf, RandomCheckInEvent)

        kinds = {type(leaf.event) for leaf, _ in leaves_to_check(history, is_checkin)
                 if is_checkin(leaf)}
        if len(kinds) <= 1:
            return
        # (only the check-in events: a non-private step in the ledger is no protocol event,
        # and cut_passes raised a TypeError on it)
        for p, _ in cut_passes([(leaf, count) for leaf, count in private_leaves(history)
                                if is_checkin(leaf)]):
            if len({type(e) for e in p.events}) > 1:
                raise UnsupportedEventError(
                    history[-1], self.name, "one kind of local randomizer per pass, Gaussian "
                    "(GaussianEvent) or (eps0, delta0) (EpsilonDeltaEvent); this event would "
                    "mix them within a pass: change the randomizer at a pass boundary", ())

    def protocol_event(self, noise_multiplier: float | None = None) -> RandomCheckInEvent:
        """The version-0.1 protocol options as a one-step ``RandomCheckInEvent``."""
        if self.num_examples is None:
            raise UnsupportedEventError(
                self._poisson(noise_multiplier), self.name, "step() is a Poisson step unless "
                "the accountant was created with the protocol options (num_examples, num_slots "
                "or window, ...; version 0.1); compose a RandomCheckInEvent, e.g. "
                "sampler.event(noise_multiplier, epochs)")
        if self.eps0 is not None:
            randomizer = EpsilonDeltaEvent(self.eps0, self.delta0)
        else:
            sigma = self.noise_multiplier if noise_multiplier is None else noise_multiplier
            if sigma is None:
                raise ParameterError("noise_multiplier", None, "a value > 0 (from step() or "
                                     "the constructor) when eps0 is not given")
            randomizer = GaussianEvent(check_positive("noise_multiplier", sigma))
        event = RandomCheckInEvent(self.num_examples, randomizer, self.variant, self.num_slots,
                                   self.window, self.checkin_probability, self.max_batch_size,
                                   self.per_example_noise)
        return event.with_steps(1)

    def _poisson(self, noise_multiplier):
        return super().step_event(noise_multiplier or 0.0, 1.0)

    def step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """Version 0.1: one step of the configured protocol (the sample rate is not used: the
        protocol's randomness is the check-in)."""
        if self.noise_multiplier is not None and noise_multiplier != self.noise_multiplier:
            raise ParameterError("noise_multiplier", noise_multiplier,
                                 f"{self.noise_multiplier} as configured for this accountant")
        check_positive("noise_multiplier", noise_multiplier)
        return self.protocol_event(noise_multiplier)

    # -- protocol -----------------------------------------------------------------------------
    @property
    def steps_per_pass(self) -> int:
        """Steps of one protocol run of the version-0.1 options: ``num_slots``, or
        ``num_examples - window + 1``."""
        return self.protocol_event(1.0 if self.eps0 is None else None).steps_per_epoch

    def expected_dummy_updates(self) -> float:
        """Expected dummy updates per pass (fixed: Thm 3.4; sliding: Thm 4.4), or expected empty
        (skipped) slots per pass for the averaged variant, of the version-0.1 options; see
        :func:`dpplugins.amplification.checkin.expected_dummy_updates`."""
        slots = self.window if self.variant == "sliding" else self.num_slots
        return expected_dummy_updates(self.num_examples, slots, self.checkin_probability,
                                      variant=self.variant)

    def local_noise_multiplier(self, noise_multiplier: float) -> float:
        """Noise multiplier of the per-example randomizer a step with ``noise_multiplier`` amounts
        to under the version-0.1 options (see :func:`local_noise_multiplier`)."""
        return local_noise_multiplier(self.protocol_event(noise_multiplier), noise_multiplier)

    def pass_profile(self, noise_multiplier: float | None = None):
        """Upper bound ``delta(eps)`` for one pass of the version-0.1 protocol."""
        event = self.protocol_event(noise_multiplier)
        return pass_profile(event, event.event)

    def passes(self, history=None) -> list[tuple[float | None, int]]:
        """The recorded passes as ``(noise multiplier charged, number of passes)`` runs, sorted
        (``None`` for an (eps0, delta0) randomizer); a partial last pass counts."""
        counts: dict = {}
        for p, count in self._cut(history):
            first = p.events[0]
            key = (None if isinstance(first, EpsilonDeltaEvent)
                   else min(e.noise_multiplier for e in p.events))
            counts[key] = counts.get(key, 0) + count
        return sorted(counts.items(), key=lambda kv: (kv[0] is not None, kv[0] or 0))

    def _cut(self, history=None) -> list[tuple[Pass, int]]:
        """The passes of the protocol events (a recorded non-private step is not one: it raised
        a TypeError from the cutter; the queries answer inf for it)."""
        history = self._history if history is None else history
        return cut_passes([(leaf, count) for leaf, count in private_leaves(history)
                           if not is_non_private(leaf)])

    # -- privacy ------------------------------------------------------------------------------
    def _pld(self, history) -> PrivacyLossDistribution:
        runs = []
        for p, count in self._cut(history):
            randomizers = p.events
            if isinstance(randomizers[0], EpsilonDeltaEvent):
                # an (eps0, delta0) pass: the weakest randomizer of the pass
                worst = max(randomizers, key=lambda e: (e.epsilon, e.delta))
                if any(e.epsilon > worst.epsilon or e.delta > worst.delta for e in randomizers):
                    worst = EpsilonDeltaEvent(max(e.epsilon for e in randomizers),
                                              max(e.delta for e in randomizers))
                label = f"eps0={worst.epsilon:g}"
            else:  # Gaussian: the smallest noise multiplier of the pass
                worst = min(randomizers, key=lambda e: e.noise_multiplier)
                label = f"sigma={worst.noise_multiplier:g}"
            runs.append((pass_profile(p.protocol, worst), count,
                         f"{p.protocol.variant} check-in pass ({label})"))
        h, eps_max = self._grid([r[0] for r in runs])
        total = None
        for profile, count, description in runs:
            pld = pld_from_profile(profile, h, eps_max, description=description)
            part = pld.self_compose(count)
            total = part if total is None else total.compose(part)
        return total

    def _grid(self, profiles) -> tuple[float, float]:
        """``(h, epsilon_max)`` of :func:`profile_grid`; :class:`ParameterError` when the given
        ``value_discretization_interval`` is too fine for the grid to fit in memory."""
        h, eps_max = profile_grid(profiles, self.value_discretization_interval)
        points = 2.0 * eps_max / h
        if not points <= _MAX_GRID_POINTS:
            raise ParameterError(
                "value_discretization_interval", self.value_discretization_interval,
                f">= {2.0 * eps_max / _MAX_GRID_POINTS:.3g} for this history (privacy losses "
                f"up to {eps_max:g}: at most {_MAX_GRID_POINTS} grid points fit in memory)",
                "or leave it None: the accountant then chooses the grid")
        return h, eps_max

    def gaussian_mu(self, history=None) -> float | None:
        """``mu`` of a Gaussian-DP bound for the whole history (no amplification), or ``None``
        when a pass uses an (eps0, delta0) randomizer.  A client is in at most one slot of a
        pass and reaches the output only through that slot's update, released with Gaussian
        noise ``sigma`` on a sum of clipped updates (its own, or the batch's for the averaged
        variant with central noise), whose replace-one L2 sensitivity is 2: a pass is a
        post-processing of one Gaussian mechanism with ``mu = 2 / sigma`` (the pass's smallest
        noise multiplier), and passes compose to ``sqrt(sum mu^2)`` (Dong, Roth, Su 2022,
        Cor. 3.3).  Where the PLD of the passes cannot be computed or is vacuous (its window is
        too short for thousands of passes of large privacy loss), this still gives a finite
        certified epsilon."""
        recorded = tuple(self._history if history is None else history)
        if private_leaves(recorded) and self._private_history(recorded) is None:
            return math.inf   # a release without noise
        terms = []
        for p, count in self._cut(history):
            if isinstance(p.events[0], EpsilonDeltaEvent):
                return None
            terms.append((count, 2.0 / min(e.noise_multiplier for e in p.events)))
        # sqrt(sum count (2 / sigma)^2) scaled by the largest 2 / sigma: the squares underflowed
        # to 0 beyond sigma of about 1e162 (mu = 0, an upper bound below the true delta, and a
        # division by zero), and overflow to inf below about 1e-154 (inf is then the answer);
        # rounded up by a few ulps
        scale = max((inverse for _, inverse in terms), default=0.0)
        if scale == 0.0 or math.isinf(scale):
            return scale
        total = math.fsum(count * (inverse / scale) ** 2 for count, inverse in terms)
        return scale * math.sqrt(total) * (1 + 8 * _UNIT_ROUNDOFF)

    def amplifies(self, history=None) -> bool:
        """Whether the check-in theorems improve on the plain Gaussian pass for some pass of the
        history: the pass profile (:func:`pass_profile`) lies below the profile of
        ``G_{2/sigma}`` (Balle & Wang 2018, arXiv:1805.06530, Thm 8) somewhere on 256 log-spaced
        epsilons from 1e-4 to where that profile underflows (``mu^2/2 + 40 mu``), or the history
        has an (eps0, delta0) pass.

        If no pass is amplified, the composition of the pass profiles (a PLD, discretised and
        truncated, hence an upper bound on the exact composition of the same profiles) cannot be
        below :meth:`gaussian_mu`'s exact composition of the plain passes, and the queries skip
        it (our reasoning; it is the expensive part: thousands of passes of large privacy loss
        took minutes).  Skipping a candidate bound never makes a reported value invalid; at
        worst, amplification between the sampled epsilons is not used."""
        for p, _ in self._cut(history):
            randomizers = p.events
            if isinstance(randomizers[0], EpsilonDeltaEvent):
                return True
            sigma = min(e.noise_multiplier for e in randomizers)
            mu = 2.0 / sigma
            if not math.isfinite(mu):
                continue
            top = max(mu * mu / 2 + 40.0 * mu, 1.0)
            eps = np.geomspace(1e-4, min(top, 1e300), 256)
            amplified = pass_profile(p.protocol, min(randomizers,
                                                     key=lambda e: e.noise_multiplier))(eps)
            plain = gaussian_delta(eps, mu)
            if np.any(amplified < plain * (1 - 1e-9) - 1e-300):
                return True
        return False

    def local_guarantee(self, history=None) -> tuple[float, float, int] | None:
        """``(eps0, delta0, passes)`` when every pass of the history uses an (eps0, delta0)
        randomizer: the largest eps0 and delta0 of any pass and the number of passes; ``None``
        when a pass is Gaussian.

        Each pass is ``(eps0, delta0)``-DP without any amplification (a client is in at most one
        slot and the slot choice does not depend on the data:
        :func:`~dpplugins.amplification.checkin.single_participation_profile`), and an
        ``(eps0, delta0)``-DP pass is also ``(eps, delta)``-DP for every larger pair, so the
        history is the adaptive composition of ``passes`` ``(eps0, delta0)``-DP mechanisms."""
        eps0 = delta0 = 0.0
        passes = 0
        for p, count in self._cut(history):
            if not isinstance(p.events[0], EpsilonDeltaEvent):
                return None
            eps0 = max(eps0, max(e.epsilon for e in p.events))
            delta0 = max(delta0, max(e.delta for e in p.events))
            passes += count
        return (eps0, delta0, passes) if passes else None

    def _epsilon_bounds(self, history, delta: float) -> Bounds:
        mu = self.gaussian_mu(history)
        if mu is not None and not self.amplifies(history):
            return Bounds(0.0, _gaussian_epsilon(mu, delta))
        local = self.local_guarantee(history)
        try:
            pld = self._cached_object(history, ("pld",), self._pld)
            upper = pld.epsilon_for_delta(delta, lower=False).upper
        except NumericalError:
            if mu is None and local is None:
                raise
            upper = math.inf
        if mu is not None:
            upper = min(upper, _gaussian_epsilon(mu, delta))
        if local is not None:
            upper = min(upper, composed_local_epsilon(delta, *local))
        return Bounds(0.0, upper)

    def _delta_bounds(self, history, epsilon: float) -> Bounds:
        mu = self.gaussian_mu(history)
        if mu is not None and not self.amplifies(history):
            return Bounds(0.0, min(_gaussian_delta_up(epsilon, mu), 1.0))
        local = self.local_guarantee(history)
        try:
            pld = self._cached_object(history, ("pld",), self._pld)
            upper = pld.delta_for_epsilon(epsilon, lower=False).upper
        except NumericalError:
            if mu is None and local is None:
                raise
            upper = 1.0
        if mu is not None:
            plain = _gaussian_delta_up(epsilon, mu)
            if math.isfinite(plain):   # (NaN where both tails underflow, at eps ~ 1e308)
                upper = min(upper, plain)
        if local is not None:
            upper = min(upper, composed_local_delta(epsilon, *local))
        return Bounds(0.0, min(upper, 1.0))


#: most passes composed by the optimal composition theorem (its sum has passes + 1 terms);
#: beyond, basic composition
_OPTIMAL_COMPOSITION_MAX = 10**6


def composed_local_epsilon(delta: float, eps0: float, delta0: float, passes: int) -> float:
    """Upper bound on epsilon(delta) of ``passes`` adaptive ``(eps0, delta0)``-DP passes with
    no amplification: the optimal composition theorem (Kairouz, Oh, Viswanath 2015,
    arXiv:1311.0776, Thm 3.3; :func:`dpplugins.composition.optimal_composition_epsilon`) up
    to 10^6 passes, basic composition beyond (``(k eps0, k delta0)``; Dwork & Roth 2014,
    Thm 3.16): ``k eps0`` if ``k delta0 <= delta``, else ``inf``.  The accountant takes the
    minimum with the amplified bound, which its grid cannot resolve for a very large or a
    very small eps0 (299.008 for eps0 = 299 in one pass; 7.85e-5 for eps0 = 1e-300).

    Example::

        >>> round(composed_local_epsilon(1e-6, 299.0, 0.0, 1), 6)   # delta = 1e-6 buys a little
        298.999999
    """
    if passes <= _OPTIMAL_COMPOSITION_MAX:
        return optimal_composition_epsilon(delta, eps0, delta0, passes)
    with np.errstate(over="ignore"):
        total = float(np.float64(passes) * eps0) * (1 + 1e-12)
    return total if passes * delta0 * (1 + 1e-12) <= delta else math.inf


def composed_local_delta(epsilon: float, eps0: float, delta0: float, passes: int) -> float:
    """Upper bound on delta(epsilon) of the same composition as :func:`composed_local_epsilon`:
    the optimal composition theorem's exact delta up to 10^6 passes; beyond, ``k delta0`` where
    ``epsilon >= k eps0`` and 1 elsewhere."""
    if passes <= _OPTIMAL_COMPOSITION_MAX:
        return optimal_composition_delta(epsilon, eps0, delta0, passes)
    if epsilon >= float(np.float64(passes) * eps0) * (1 + 1e-12):
        return min(passes * delta0 * (1 + 1e-12), 1.0)
    return 1.0


def _gaussian_delta_up(epsilon: float, mu: float) -> float:
    """The exact profile of mu-GDP (Balle & Wang 2018, arXiv:1805.06530, Thm 8), rounded up."""
    return gaussian_delta_upper(epsilon, mu)


def _gaussian_epsilon(mu: float, delta: float) -> float:
    """Certified upper bound on epsilon(delta) of mu-GDP to relative 1e-12
    (:func:`dpplugins.mechanisms.gaussian.gaussian_epsilon`)."""
    return gaussian_epsilon(mu, delta, rtol=1e-12)


def local_noise_multiplier(event: RandomCheckInEvent, noise_multiplier: float) -> float:
    """Noise multiplier of the per-example randomizer that one step of ``event`` with central
    noise ``noise_multiplier`` amounts to: ``sigma / sqrt(b)`` for the averaged variant with the
    noise added once to a batch of at most ``b = max_batch_size`` (``dataset_size`` if unset)
    examples -- a post-processing of ``b`` per-example randomizers with noise ``sigma / sqrt(b)``
    each (the sum of ``b`` independent ``N(0, sigma^2 / b)`` is ``N(0, sigma^2)``) -- and ``sigma``
    otherwise."""
    sigma = check_positive("noise_multiplier", noise_multiplier)
    if event.variant != "averaged" or event.per_example_noise:
        return sigma
    cap = event.max_batch_size or event.dataset_size
    return sigma / math.sqrt(min(cap, event.dataset_size))


def pass_profile(event: RandomCheckInEvent, randomizer: Event):
    """Upper bound ``delta(eps)`` (vectorised callable) for one pass of the check-in protocol
    ``event`` with local randomizer ``randomizer`` (:func:`pass_privacy_profile`; Balle et al.
    2020, Thm 3.2 / 4.1 / 4.3 with the single-participation bound)."""
    slots = event.window if event.variant == "sliding" else event.num_slots
    common = dict(num_clients=event.dataset_size, num_slots=slots,
                  checkin_probability=event.checkin_probability)
    if isinstance(randomizer, EpsilonDeltaEvent):
        return pass_privacy_profile(event.variant, eps0=randomizer.epsilon,
                                    delta0=randomizer.delta, **common)
    return pass_privacy_profile(
        event.variant, noise_multiplier=local_noise_multiplier(event,
                                                               randomizer.noise_multiplier),
        **common)
