"""The random-allocation sampler with several participations and a check-in probability: in every
pass of ``t`` steps each example takes part with probability ``p`` and then in ``k`` distinct
uniformly random steps (Feldman & Shenfeld 2025, arXiv:2502.08202; ``k = 1``, ``p = 1`` is
balls-and-bins, Chua et al., AISTATS 2025, arXiv:2412.16802).  Every example of a step is used;
a step without examples is yielded as an empty array and must be run as a noise-only update
(the accounting assumes every step is released).
"""

from __future__ import annotations

import numpy as np

from dpplugins.errors import ParameterError, check_count, check_probability
from dpplugins.events import GaussianEvent, RandomAllocationEvent
from dpplugins.samplers.base import SeededSampler

__all__ = ["RandomAllocation"]


class RandomAllocation(SeededSampler):
    """Random allocation of every example into ``participations`` (k) distinct uniform steps of
    each pass of ``steps_per_epoch`` (t) steps, after checking in with probability
    ``checkin_probability`` (p).

    Attributes: ``scheme = "random_allocation"``, ``variant = "averaged"`` (all examples of a
    step are used), ``num_examples``, ``steps_per_epoch = len(sampler)``, ``participations``,
    ``checkin_probability``, ``expected_batch_size = n p k / t``, ``max_batch_size = n``.

    Example::

        >>> sampler = RandomAllocation(100, 10, participations=3, rng=0)
        >>> batches = list(sampler)
        >>> len(batches), sum(len(b) for b in batches)
        (10, 300)
        >>> sampler.event(1.0).participations
        3
    """

    scheme = "random_allocation"
    variant = "averaged"

    def __init__(self, num_examples: int, steps_per_epoch: int, participations: int = 1,
                 checkin_probability: float = 1.0, rng=None, *,
                 num_replicas: int | None = None, rank: int | None = None) -> None:
        self.num_examples = check_count("num_examples", num_examples, minimum=1)
        self._steps = check_count("steps_per_epoch", steps_per_epoch, minimum=1)
        self.participations = check_count("participations", participations, minimum=1)
        if self.participations > self._steps:
            raise ParameterError("participations", participations,
                                 f"<= steps_per_epoch={self._steps} (distinct steps)")
        self.checkin_probability = check_probability("checkin_probability",
                                                     checkin_probability)
        self._init_schedule(rng, num_replicas, rank)

    @property
    def steps_per_epoch(self) -> int:
        return self._steps

    def __len__(self) -> int:
        return self._steps

    @property
    def max_batch_size(self) -> int:
        return self.num_examples

    @property
    def expected_batch_size(self) -> float:
        return self.num_examples * self.checkin_probability * self.participations / self._steps

    def event(self, noise_multiplier: float, epochs=1) -> RandomAllocationEvent:
        """What training with this sampler releases: ``epochs`` passes, Gaussian noise
        ``noise_multiplier`` added once to every step's sum (an empty step: the noise alone)."""
        return RandomAllocationEvent(self._steps, epochs, GaussianEvent(noise_multiplier),
                                     self.participations, self.checkin_probability)

    def draw_allocation(self, generator: np.random.Generator | None = None) -> np.ndarray:
        """One pass's allocation: an ``(num_examples, participations)`` array of the steps of
        every example (``k`` distinct uniform steps), a row of ``-1`` where the example
        abstains.  Where ``k^2 <= t``, ``k`` uniform steps are drawn and a row with a repeated
        step is drawn again (each row is kept with probability at least ``1 - k^2 / (2 t) >=
        1/2``, and a kept row is a uniform ordered ``k``-tuple of distinct steps, so its set
        is a uniform ``k``-subset: ``O(n k)`` work); otherwise the ``k`` smallest of ``t``
        i.i.d. uniforms (``O(n t)``: 10^6 examples with 10^3 steps took 14 s that way).  Drawn
        in chunks of at most about 4 million numbers."""
        rng = self._stream if generator is None else generator
        n, t, k = self.num_examples, self._steps, self.participations
        out = np.empty((n, k), dtype=np.int64)
        rejection = 1 < k < t and k * k <= t
        chunk = max(1, (1 << 22) // (k if rejection else t))
        for start in range(0, n, chunk):
            rows = min(chunk, n - start)
            if k == t:
                out[start:start + rows] = np.arange(t)
            elif k == 1:
                out[start:start + rows, 0] = rng.integers(0, t, size=rows)
            elif rejection:
                out[start:start + rows] = _distinct_rows(rng, rows, k, t)
            else:
                keys = rng.random((rows, t))
                out[start:start + rows] = np.argpartition(keys, k - 1, axis=1)[:, :k]
        if self.checkin_probability < 1.0:
            out[rng.random(n) >= self.checkin_probability] = -1
        return out

    def _params(self) -> dict:
        return {"num_examples": self.num_examples, "steps_per_epoch": self._steps,
                "participations": self.participations,
                "checkin_probability": self.checkin_probability}

    def _global_pass(self, generator: np.random.Generator) -> list[np.ndarray]:
        steps = self.draw_allocation(generator)
        examples = np.repeat(np.arange(self.num_examples, dtype=np.int64), self.participations)
        steps = steps.ravel()
        used = steps >= 0
        examples, steps = examples[used], steps[used]
        order = np.lexsort((examples, steps))
        bounds = np.searchsorted(steps[order], np.arange(self._steps + 1))
        sorted_examples = examples[order]
        return [sorted_examples[bounds[j]:bounds[j + 1]] for j in range(self._steps)]

    def __repr__(self) -> str:
        return (f"RandomAllocation(num_examples={self.num_examples}, steps_per_epoch="
                f"{self._steps}, participations={self.participations}, checkin_probability="
                f"{self.checkin_probability})")


def _distinct_rows(rng: np.random.Generator, rows: int, k: int, t: int) -> np.ndarray:
    """``rows`` rows of ``k`` distinct integers in ``[0, t)``, each row's set a uniform
    ``k``-subset: uniform rows drawn, those with a repeat drawn again (rejection sampling; at
    least half are kept when ``k^2 <= t``, since a row repeats with probability at most ``k (k
    - 1) / (2 t)``)."""
    out = rng.integers(0, t, size=(rows, k))
    redraw = np.arange(rows)
    while True:
        ordered = np.sort(out[redraw], axis=1)
        redraw = redraw[np.any(ordered[:, 1:] == ordered[:, :-1], axis=1)]
        if not len(redraw):
            return out
        out[redraw] = rng.integers(0, t, size=(len(redraw), k))
