"""The swapping accountant (registry name ``"swap"``): batch-size-1 DP-SGD on shuffled epochs.

Balle, Kairouz, McMahan, Thakkar, Thakurta 2020 (NeurIPS, "Privacy Amplification via Random
Check-Ins"), Thm A.5 (amplification by swapping), which their proof of Thm 5.1 uses for the
shuffled protocol A_sl: every epoch runs one Gaussian local randomizer per example, in a fresh
random order, with batch size 1 (``sample_rate = 1 / n``).  Each step is (eps0, delta0)-DP along
the exact Gaussian profile with sensitivity 2 (any two clipped gradients), and the
approximate-DP version of the theorem (every eps0 -> 8 eps0, ``delta' = delta + n (e^eps' + 1)
delta1``) gives a per-epoch profile for every admissible (eps0, delta0) on a grid; their minimum,
and the minimum with the no-amplification Gaussian profile, is turned into a dominating PLD and
composed over epochs by FFT.  The same guarantee holds
for the A_swap protocol itself with respect to the record at index 1.

This is :class:`~dpplugins.accountants.shuffle.ShuffleAccountant` with ``batch_size=1`` (whose
amplified bound *is* this theorem); it exists under its own name so that reports say which
theorem was used.  Lower bound: the Chua et al. (2024) pair (with all other records equal, the
swapped and the shuffled protocol have the same output distribution).

Example::

    >>> from dpplugins.accountants.swap import SwapAccountant
    >>> from dpplugins.samplers import ShuffledEpochs
    >>> acc = SwapAccountant()
    >>> _ = acc.compose(ShuffledEpochs(10**6, 1).event(300.0, epochs=1))   # one epoch, n = 10^6
    >>> acc.get_epsilon(1e-6) < acc.no_amplification_epsilon(1e-6)
    True
"""

from __future__ import annotations

from typing import ClassVar

from dpplugins.accountants.base import Accountant, UnsupportedEventError
from dpplugins.accountants.shuffle import ShuffleAccountant
from dpplugins.events import Event, GaussianEvent, ShuffledEpochsEvent, SwapEvent

__all__ = ["SwapAccountant"]


class SwapAccountant(ShuffleAccountant):
    """Batch size 1 on shuffled epochs, amplified by swapping (Balle et al. 2020, Thm A.5).

    Options: ``dataset_size`` (optional; must equal ``1 / sample_rate``), ``neighbouring``
    (``"add_remove"`` read as zero-out, or ``"replace_one"``), ``lower_bound``,
    ``value_discretization_interval``.
    """

    name: ClassVar[str] = "swap"
    theorem: ClassVar[str] = (
        "Balle et al. 2020 Thm A.5 (amplification by swapping; = Thm 5.1 for shuffling), "
        "approximate-DP version for Gaussian local randomizers, per epoch, minimum with the "
        "no-amplification Gaussian profile, composed by PLD/FFT. Lower bound: Chua et al. 2024.")
    _option_names = ("neighbouring", "dataset_size", "value_discretization_interval",
                     "lower_bound")

    def __init__(self, *, neighbouring: str = "add_remove", dataset_size: int | None = None,
                 value_discretization_interval: float | None = None,
                 lower_bound: bool = True) -> None:
        super().__init__(batch_size=1, neighbouring=neighbouring, dataset_size=dataset_size,
                         value_discretization_interval=value_discretization_interval,
                         lower_bound=lower_bound)

    def step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """``step()`` is Opacus' Poisson step, which swapping does not account: refused
        (UnsupportedEventError naming the accountants that do).  Version 0.1 read it as a
        shuffled step of one example, so a Poisson training loop that only changed the
        accountant's name was accounted as another protocol.  Version-0.1 state dicts still
        load with that meaning (:meth:`_legacy_step_event`)."""
        event = Accountant.step_event(self, noise_multiplier, sample_rate)
        raise UnsupportedEventError(
            event, self.name, "step() is Opacus' Poisson step, which swapping does not "
            "account; compose the shuffled epochs of one example that ran, e.g. "
            "ShuffledEpochs(n, 1).event(noise_multiplier, epochs)")

    def _legacy_step_event(self, noise_multiplier: float, sample_rate: float) -> Event:
        """Version 0.1's ``step()``: one shuffled step of one example (``sample_rate = 1 /
        n``), what this accountant's 0.1 state dicts record."""
        return ShuffleAccountant.step_event(self, noise_multiplier, sample_rate)

    def _supports_leaf(self, event: Event) -> bool | str:
        if isinstance(event, SwapEvent) and isinstance(event.event, GaussianEvent):
            return True
        if (isinstance(event, ShuffledEpochsEvent) and event.batch_size == 1
                and isinstance(event.event, GaussianEvent)):
            return True
        return ("batch size 1 on shuffled epochs with Gaussian noise (ShuffledEpochsEvent with "
                "batch_size=1, or SwapEvent); for larger batches use 'shuffle'")
