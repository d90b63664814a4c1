"""Random check-in schedules (Balle, Kairouz, McMahan, Thakkar, Thakurta 2020, Alg. 1, Alg. 2 and
Sec. 4.2): every example (client) picks its own slot; the server never subsamples or shuffles.

One pass = one run of the protocol = ``len(sampler)`` steps; iterating the sampler again starts a
new, independent run.  A step is one check-in slot and yields an ``int64`` index array:

* ``RandomCheckIn(variant="fixed")`` (A_fix): at most one example per slot, chosen uniformly among
  the examples that checked into it; the others in that slot are discarded for this pass.  An
  **empty array is a dummy update**: run the step anyway with no data (in DP-SGD: a noise-only
  update).  Thm 3.2 assumes dummy updates are released; do not skip them.
* ``RandomCheckIn(variant="averaged")`` (A_avg, "thrifty"): every example that checked into the
  slot, in increasing index order.  An empty array is an empty slot; Thm 4.1 lets the server skip
  it (a noise-only step is equally private: it is data-independent).  With ``max_batch_size = b``
  a slot with more than ``b`` examples keeps a uniformly random subset of ``b`` and drops the rest
  for this pass (counted in ``last_pass_overflow``).  Accounting: dropping a uniformly random
  subset is data-independent post-processing of the slot's multiset of local reports, so the
  theorem still applies; with *central* Gaussian noise on the batch sum the per-example randomizer
  is the one with noise multiplier ``sigma / sqrt(b)`` (see
  :class:`dpplugins.accountants.checkin.CheckInAccountant`).
* ``SlidingWindowCheckIn`` (A_sldw): example ``j`` checks into a uniform slot of
  ``{j, ..., j + m - 1}``; the server runs the ``n - m + 1`` slots ``m - 1, ..., n - 1``
  (0-based), one example per slot, an empty array is a dummy update.  Examples that picked a slot
  outside that range are not used in this pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

from dpplugins.amplification.checkin import expected_dummy_updates
from dpplugins.errors import ParameterError, check_choice, check_count, check_probability
from dpplugins.events import GaussianEvent, RandomCheckInEvent
from dpplugins.samplers.base import SeededSampler

if TYPE_CHECKING:
    from dpplugins.samplers.allocation import RandomAllocation

__all__ = ["RandomCheckIn", "SlidingWindowCheckIn"]



def _batch(chosen: int) -> np.ndarray:
    return np.empty(0, dtype=np.int64) if chosen < 0 else np.array([chosen], dtype=np.int64)


def _one_per_slot(slots: np.ndarray, num_slots: int, rng: np.random.Generator) -> np.ndarray:
    """For each slot, one uniformly chosen example among those with that slot (-1 if none)."""
    idx = np.flatnonzero((slots >= 0) & (slots < num_slots))
    chosen = np.full(num_slots, -1, dtype=np.int64)
    if idx.size == 0:
        return chosen
    order = np.lexsort((rng.random(idx.size), slots[idx]))
    s, i = slots[idx][order], idx[order]
    first = np.ones(s.size, dtype=bool)
    first[1:] = s[1:] != s[:-1]
    chosen[s[first]] = i[first]
    return chosen


class RandomCheckIn(SeededSampler):
    """Random check-ins with a fixed window ``[m]`` (A_fix, Alg. 1) or averaged updates (A_avg).

    Every example independently checks in with probability ``checkin_probability`` (``p0``) into a
    uniformly random slot of ``range(num_slots)``.  See the module docstring for what a step yields
    and for ``max_batch_size`` (binding only for ``variant="averaged"``; a fixed-variant batch has
    at most one example).

    Attributes: ``scheme = "random_checkin"``, ``variant``, ``num_examples``, ``num_slots``,
    ``checkin_probability``, ``steps_per_epoch = num_slots = len(sampler)``,
    ``expected_batch_size`` (fixed: ``1 - (1 - p0/m)^n``; averaged: ``E[min(L, b)]`` with
    ``L ~ Binomial(n, p0/m)``), ``max_batch_size`` (the cap every batch respects),
    :meth:`expected_dummy_updates` (Thm 3.4, exact), ``last_pass_overflow``.

    Example::

        >>> sampler = RandomCheckIn(100, 10, checkin_probability=0.5, rng=0)
        >>> batches = list(sampler)
        >>> len(batches), all(len(b) <= 1 for b in batches)
        (10, True)
    """

    scheme = "random_checkin"

    def __init__(self, num_examples: int, num_slots: int, checkin_probability: float = 1.0,
                 variant: str = "fixed", max_batch_size: int | None = None, rng=None, *,
                 num_replicas: int | None = None, rank: int | None = None) -> None:
        self.num_examples = check_count("num_examples", num_examples, minimum=1)
        self.num_slots = check_count("num_slots", num_slots, minimum=1)
        self.checkin_probability = check_probability("checkin_probability", checkin_probability)
        self.variant = check_choice("variant", variant, ("fixed", "averaged"))
        self._cap = (None if max_batch_size is None
                     else check_count("max_batch_size", max_batch_size, minimum=1))
        self._init_schedule(rng, num_replicas, rank)
        self.last_pass_overflow = 0

    @property
    def steps_per_epoch(self) -> int:
        return self.num_slots

    def __len__(self) -> int:
        return self.num_slots

    @property
    def max_batch_size(self) -> int:
        if self.variant == "fixed":
            return 1
        return self.num_examples if self._cap is None else min(self._cap, self.num_examples)

    @property
    def expected_batch_size(self) -> float:
        n, m, p0 = self.num_examples, self.num_slots, self.checkin_probability
        if self.variant == "fixed":
            return 1.0 - self.expected_dummy_updates() / m
        # E[min(L, b)] = n p P(Bin(n - 1, p) <= b - 1) + b P(Bin(n, p) > b) (our one-line
        # derivation: sum_{l > b} l C(n, l) p^l (1-p)^(n-l) = n p P(Bin(n - 1, p) >= b), and
        # E[min(L, b)] = E[L] - sum_{l > b} (l - b) P(L = l)); two tail values instead of a pmf
        # over all n + 1 loads (3 GB and a MemoryError at n = 10^8)
        b, p = self.max_batch_size, p0 / m
        return float(n * p * stats.binom.cdf(b - 1, n - 1, p) + b * stats.binom.sf(b, n, p))

    def expected_dummy_updates(self) -> float:
        """Expected empty slots per pass, ``m (1 - p0/m)^n`` (Balle et al. 2020, Thm 3.4)."""
        return expected_dummy_updates(self.num_examples, self.num_slots,
                                      self.checkin_probability, variant=self.variant)

    def event(self, noise_multiplier: float, epochs=1) -> RandomCheckInEvent:
        """What training with this sampler releases: ``epochs`` passes of the check-in protocol
        with Gaussian noise ``noise_multiplier`` added once to every step's sum (an empty slot:
        the noise alone).  With ``variant="averaged"``, check-in probability 1 and no cap this is
        random allocation (the ``balls_and_bins`` accountant)."""
        return RandomCheckInEvent(self.num_examples, GaussianEvent(noise_multiplier),
                                  self.variant, self.num_slots, None, self.checkin_probability,
                                  self._cap, False, epochs)

    def draw_checkins(self, generator: np.random.Generator | None = None) -> np.ndarray:
        """One round of check-ins: the slot of every example (``-1``: it abstains); from
        ``generator``, or from an independent stream of the sampler's seed."""
        rng = self._stream if generator is None else generator
        n, m, p0 = self.num_examples, self.num_slots, self.checkin_probability
        slots = rng.integers(0, m, size=n, dtype=np.int64)
        if p0 < 1.0:
            slots[rng.random(n) >= p0] = -1
        return slots

    def _params(self) -> dict:
        return {"num_examples": self.num_examples, "num_slots": self.num_slots,
                "checkin_probability": self.checkin_probability, "variant": self.variant,
                "max_batch_size": self._cap}

    def _global_pass(self, generator: np.random.Generator) -> list[np.ndarray]:
        slots = self.draw_checkins(generator)
        if self.variant == "fixed":
            chosen = _one_per_slot(slots, self.num_slots, generator)
            self.last_pass_overflow = 0
            return [_batch(c) for c in chosen]
        return self._averaged_batches(slots, generator)

    def _averaged_batches(self, slots: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
        idx = np.flatnonzero(slots >= 0)
        order = np.lexsort((rng.random(idx.size), slots[idx]))
        s, i = slots[idx][order], idx[order]
        bounds = np.searchsorted(s, np.arange(self.num_slots + 1))
        cap = self.max_batch_size
        batches, dropped = [], 0
        for slot in range(self.num_slots):
            members = i[bounds[slot]:bounds[slot + 1]]   # in random order
            dropped += max(0, members.size - cap)
            batches.append(np.sort(members[:cap]).astype(np.int64))
        self.last_pass_overflow = dropped
        return batches

    def __repr__(self) -> str:
        return (f"RandomCheckIn(num_examples={self.num_examples}, num_slots={self.num_slots}, "
                f"checkin_probability={self.checkin_probability}, variant={self.variant!r}, "
                f"max_batch_size={self._cap})")


class SlidingWindowCheckIn(SeededSampler):
    """Random check-ins into a sliding window (A_sldw, Balle et al. 2020, Sec. 4.2, Thm 4.3).

    Example ``j`` (``0 <= j < n``) checks in, with probability 1, into a uniform slot of
    ``{j, ..., j + window - 1}``; a pass runs the ``n - window + 1`` slots
    ``window - 1, ..., n - 1``, each with one uniformly chosen example (an empty array is a dummy
    update).  Needs ``1 <= window <= num_examples``.

    Attributes: ``scheme = "sliding_window"``, ``num_examples``, ``window``,
    ``steps_per_epoch = n - window + 1 = len(sampler)``, ``expected_batch_size =
    1 - (1 - 1/window)^window``, ``max_batch_size = 1``, :meth:`expected_dummy_updates`.

    Example::

        >>> sampler = SlidingWindowCheckIn(20, 5, rng=1)
        >>> len(sampler), len(list(sampler))
        (16, 16)
    """

    scheme = "sliding_window"
    max_batch_size = 1

    def __init__(self, num_examples: int, window: int, rng=None, *,
                 num_replicas: int | None = None, rank: int | None = None) -> None:
        self.num_examples = check_count("num_examples", num_examples, minimum=1)
        self.window = check_count("window", window, minimum=1)
        if self.window > self.num_examples:
            raise ParameterError("window", window, f"<= num_examples={self.num_examples} "
                                 "(Thm 4.3 needs the window m in [n])")
        self._init_schedule(rng, num_replicas, rank)

    @property
    def steps_per_epoch(self) -> int:
        return self.num_examples - self.window + 1

    def __len__(self) -> int:
        return self.steps_per_epoch

    @property
    def expected_batch_size(self) -> float:
        return 1.0 - self.expected_dummy_updates() / self.steps_per_epoch

    def expected_dummy_updates(self) -> float:
        """Expected dummy updates per pass, ``(n - m + 1)(1 - 1/m)^m <= (n - m + 1)/e``
        (Balle et al. 2020, Thm 4.4)."""
        return expected_dummy_updates(self.num_examples, self.window, variant="sliding")

    def event(self, noise_multiplier: float, epochs=1) -> RandomCheckInEvent:
        """What training with this sampler releases: ``epochs`` passes of the sliding-window
        protocol with Gaussian noise ``noise_multiplier`` on every step (an empty slot: a dummy,
        noise-only update)."""
        return RandomCheckInEvent(self.num_examples, GaussianEvent(noise_multiplier), "sliding",
                                  None, self.window, 1.0, None, False, epochs)

    def draw_checkins(self, generator: np.random.Generator | None = None) -> np.ndarray:
        """One round of check-ins: the (0-based) time slot chosen by every example."""
        rng = self._stream if generator is None else generator
        n = self.num_examples
        return np.arange(n, dtype=np.int64) + rng.integers(0, self.window, size=n,
                                                           dtype=np.int64)

    def _params(self) -> dict:
        return {"num_examples": self.num_examples, "window": self.window}

    def _global_pass(self, generator: np.random.Generator) -> list[np.ndarray]:
        slots = self.draw_checkins(generator) - (self.window - 1)  # step index; out = unused
        chosen = _one_per_slot(slots, self.steps_per_epoch, generator)
        return [_batch(c) for c in chosen]

    def __repr__(self) -> str:
        return f"SlidingWindowCheckIn(num_examples={self.num_examples}, window={self.window})"


def balls_and_bins(num_examples: int, steps_per_epoch: int, rng=None, *,
                   participations: int = 1, checkin_probability: float = 1.0,
                   num_replicas: int | None = None, rank: int | None = None
                   ) -> "RandomCheckIn | RandomAllocation":
    """The random-allocation (balls-and-bins) sampler: every example goes into exactly one
    uniformly random step of each pass of ``steps_per_epoch`` steps, and every example of a step
    is used (Chua et al., AISTATS 2025).  This is ``RandomCheckIn`` with check-in probability 1,
    the averaged variant and no batch cap -- what the ``balls_and_bins`` accountant assumes
    (``sample_rate = 1 / steps_per_epoch``).  With ``participations = k > 1`` or
    ``checkin_probability = p < 1`` every example takes part with probability ``p`` and then in
    ``k`` distinct uniform steps: a :class:`~dpplugins.samplers.allocation.RandomAllocation`,
    whose event reports ``k`` and ``p`` (accounted by the same accountant).

    Example::

        >>> sampler = balls_and_bins(1000, steps_per_epoch=10, rng=0)
        >>> len(sampler), sum(len(batch) for batch in sampler)
        (10, 1000)
        >>> balls_and_bins(1000, 10, rng=0, participations=2).event(1.0).participations
        2
    """
    # named here: RandomCheckIn would name it num_slots, a parameter this function does not have
    steps_per_epoch = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
    k = check_count("participations", participations, minimum=1)
    p = check_probability("checkin_probability", checkin_probability)
    if (k, p) != (1, 1.0):
        from dpplugins.samplers.allocation import RandomAllocation
        return RandomAllocation(num_examples, steps_per_epoch, k, p, rng=rng,
                                num_replicas=num_replicas, rank=rank)
    return RandomCheckIn(num_examples, steps_per_epoch, checkin_probability=1.0,
                         variant="averaged", rng=rng, num_replicas=num_replicas, rank=rank)
