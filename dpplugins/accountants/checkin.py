"""The random check-in accountant (registry name ``"checkin"``).

One *pass* is one run of a check-in protocol (``num_slots`` steps for the fixed and averaged
variants, ``num_examples - window + 1`` for the sliding window; the samplers in
:mod:`dpplugins.samplers.checkin` produce exactly these runs).  Each pass is bounded by the
privacy profile of :func:`dpplugins.amplification.checkin.pass_privacy_profile` (Balle et al.
2020, Thm 3.2 / 4.1 / 4.3, minimum with the single-participation bound), turned into a dominating
PLD and composed over passes by FFT (DESIGN.md, "Composition across epochs").
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from dpplugins.accountants.base import Accountant
from dpplugins.amplification.checkin import (VARIANTS, admissible_delta0, delta1_for_delta0,
                                             expected_dummy_updates, pass_privacy_profile,
                                             pld_from_profile, profile_grid)
from dpplugins.errors import (ParameterError, check_choice, check_count, check_nonnegative,
                              check_positive, check_probability)
from dpplugins.pld import Bounds, PrivacyLossDistribution

__all__ = ["CheckInAccountant"]


class CheckInAccountant(Accountant):
    """Privacy of DP-SGD / federated training with random check-ins, composed over passes.

    Protocol (constructor): ``variant`` is ``"fixed"`` (A_fix, Thm 3.2: each example checks in
    w.p. ``checkin_probability`` into one of ``num_slots`` slots, one example per slot, dummy
    updates), ``"averaged"`` (A_avg, Thm 4.1: ``checkin_probability`` must be 1, all checked-in
    examples of a slot are averaged) or ``"sliding"`` (A_sldw, Thm 4.3: ``window`` instead of
    ``num_slots``, ``window <= num_examples``).

    Local randomizer (what one step does to one example): either ``eps0`` (and ``delta0``) -- an
    ``(eps0, delta0)``-DP randomizer, the steps' noise multipliers are then not used -- or Gaussian
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
        if num_examples is None:
            raise ParameterError("num_examples", None, "an integer >= 1 (the number of examples "
                                 "or clients taking part in the protocol)")
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
        if not isinstance(per_example_noise, (bool, np.bool_)):
            raise ParameterError("per_example_noise", per_example_noise, "True or False")
        self.per_example_noise = bool(per_example_noise)
        self.value_discretization_interval = (
            None if value_discretization_interval is None
            else check_positive("value_discretization_interval", value_discretization_interval))
        if self.eps0 is not None and self.delta0 > 0 and math.isinf(
                delta1_for_delta0(self.eps0, self.delta0)):
            raise ParameterError(
                "delta0", delta0, f"<= {admissible_delta0(self.eps0, 1.0):.6g} for eps0="
                f"{self.eps0:g} (the admissible bound of Balle et al. 2020, Thm 3.2/4.1/4.3, at "
                "delta1 = 1; above it the theorems do not apply)", "lower delta0")

    # -- protocol -----------------------------------------------------------------------------
    @property
    def steps_per_pass(self) -> int:
        """Steps of one protocol run: ``num_slots``, or ``num_examples - window + 1``."""
        if self.variant == "sliding":
            return self.num_examples - self.window + 1
        return self.num_slots

    def expected_dummy_updates(self) -> float:
        """Expected dummy updates per pass (fixed: Thm 3.4; sliding: Thm 4.4), or expected empty
        (skipped) slots per pass for the averaged variant; see
        :func:`dpplugins.amplification.checkin.expected_dummy_updates`."""
        slots = self.window if self.variant == "sliding" else self.num_slots
        return expected_dummy_updates(self.num_examples, slots, self.checkin_probability,
                                      variant=self.variant)

    def local_noise_multiplier(self, noise_multiplier: float) -> float:
        """Noise multiplier of the per-example randomizer a step with ``noise_multiplier`` amounts
        to (``sigma / sqrt(b)`` for central noise on an averaged batch of at most ``b``)."""
        sigma = check_positive("noise_multiplier", noise_multiplier)
        if self.variant != "averaged" or self.per_example_noise:
            return sigma
        cap = self.max_batch_size or self.num_examples
        return sigma / math.sqrt(min(cap, self.num_examples))

    def pass_profile(self, noise_multiplier: float | None = None):
        """Upper bound ``delta(eps)`` (vectorised callable) for one pass; ``noise_multiplier`` is
        used only for a Gaussian randomizer that is not fixed in the constructor."""
        slots = self.window if self.variant == "sliding" else self.num_slots
        common = dict(num_clients=self.num_examples, num_slots=slots,
                      checkin_probability=self.checkin_probability)
        if self.eps0 is not None:
            return pass_privacy_profile(self.variant, eps0=self.eps0, delta0=self.delta0, **common)
        sigma = self.noise_multiplier if noise_multiplier is None else noise_multiplier
        if sigma is None:
            raise ParameterError("noise_multiplier", None, "a value > 0 (from step() or the "
                                 "constructor) when eps0 is not given")
        return pass_privacy_profile(self.variant,
                                    noise_multiplier=self.local_noise_multiplier(sigma), **common)

    # -- history ------------------------------------------------------------------------------
    def step(self, *, noise_multiplier: float, sample_rate: float, count: int = 1) -> None:
        """Record ``count`` steps (Opacus' signature); see the class docstring."""
        if self.noise_multiplier is not None and noise_multiplier != self.noise_multiplier:
            raise ParameterError("noise_multiplier", noise_multiplier,
                                 f"{self.noise_multiplier} as configured for this accountant")
        super().step(noise_multiplier=noise_multiplier, sample_rate=sample_rate, count=count)

    def passes(self, history=None) -> list[tuple[float | None, int]]:
        """The recorded passes as ``(noise multiplier charged, number of passes)`` runs (the noise
        multiplier is ``None`` when ``eps0`` fixes the randomizer); a partial last pass counts."""
        history = self._history if history is None else history
        total = sum(steps for _, _, steps in history)
        if total == 0:
            return []
        per = self.steps_per_pass
        if self.eps0 is not None:
            return [(None, math.ceil(total / per))]
        counts: dict[float, int] = {}
        position, current = 0, math.inf   # steps into the current pass, its smallest sigma
        for sigma, _, steps in history:
            if self.noise_multiplier is not None and sigma != self.noise_multiplier:
                raise ParameterError("history noise_multiplier", sigma,
                                     f"{self.noise_multiplier} as configured for this accountant")
            if position > 0:              # finish the pass in progress
                take = min(steps, per - position)
                current, position, steps = min(current, sigma), position + take, steps - take
                if position == per:
                    counts[current] = counts.get(current, 0) + 1
                    position, current = 0, math.inf
            if steps >= per:              # whole passes at this noise multiplier
                counts[sigma] = counts.get(sigma, 0) + steps // per
                steps %= per
            if steps > 0:                 # start a new pass
                position, current = steps, sigma
        if position > 0:
            counts[current] = counts.get(current, 0) + 1
        return sorted(counts.items())

    # -- privacy ------------------------------------------------------------------------------
    def _pld(self, history) -> PrivacyLossDistribution:
        def build():
            runs = self.passes(history)
            profiles = [self.pass_profile(sigma) for sigma, _ in runs]
            h, eps_max = profile_grid(profiles, self.value_discretization_interval)
            total = None
            for profile, (sigma, count) in zip(profiles, runs):
                label = f"eps0={self.eps0:g}" if sigma is None else f"sigma={sigma:g}"
                pld = pld_from_profile(profile, h, eps_max,
                                       description=f"{self.variant} check-in pass ({label})")
                total = pld.self_compose(count) if total is None else total.compose(
                    pld.self_compose(count))
            return total
        return self._cached(("pld",), build)

    def _epsilon_bounds(self, history, delta: float) -> Bounds:
        return Bounds(0.0, self._pld(history).epsilon_for_delta(delta, lower=False).upper)

    def _delta_bounds(self, history, epsilon: float) -> Bounds:
        return Bounds(0.0, self._pld(history).delta_for_epsilon(epsilon).upper)
