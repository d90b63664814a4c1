"""Shuffled epochs: a fresh uniform permutation every pass, cut into consecutive batches.

This is what most DP-SGD code runs with ``poisson_sampling=False``.  It is *not* Poisson
subsampling; pair it with an accountant that is valid for shuffling.
"""

from __future__ import annotations

import numpy as np

from dpplugins.errors import ParameterError, check_count, check_flag
from dpplugins.events import GaussianEvent, ShuffledEpochsEvent
from dpplugins.samplers.base import SeededSampler

__all__ = ["ShuffledEpochs", "make_generator"]


def make_generator(rng) -> np.random.Generator:
    """A ``numpy.random.Generator`` from ``None`` (fresh entropy), an int seed, a
    ``SeedSequence`` or a ``Generator`` (used as is, so its stream is shared)."""
    if isinstance(rng, np.random.Generator):
        return rng
    if rng is None or isinstance(rng, np.random.SeedSequence) or (
            isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0):
        return np.random.default_rng(rng)
    raise ParameterError("rng", rng, "None, a non-negative int seed, a numpy SeedSequence or a "
                         "numpy.random.Generator")


class ShuffledEpochs(SeededSampler):
    """Each pass draws a uniform permutation of ``range(num_examples)`` and yields consecutive
    batches of ``batch_size`` indices (the last one shorter unless ``drop_last``).

    Attributes: ``scheme = "shuffled_epochs"``, ``num_examples``, ``batch_size`` (the cap: no
    batch is larger), ``steps_per_epoch`` (``ceil(n / b)``, or ``floor(n / b)`` with
    ``drop_last``), ``expected_batch_size`` (mean batch size over a pass).  ``len(sampler)`` is
    the number of steps per pass; iterating yields one pass of ``int64`` index arrays and moves
    to the next epoch (a fresh permutation).  Seeds, ranks (``num_replicas``, ``rank``),
    ``set_epoch`` and ``state_dict``: :mod:`dpplugins.samplers.base`.

    Example::

        >>> sampler = ShuffledEpochs(10, 4, rng=0)
        >>> [len(b) for b in sampler]
        [4, 4, 2]
    """

    scheme = "shuffled_epochs"

    def __init__(self, num_examples: int, batch_size: int, drop_last: bool = False,
                 rng=None, *, num_replicas: int | None = None, rank: int | None = None) -> None:
        self.num_examples = check_count("num_examples", num_examples, minimum=1)
        self.batch_size = check_count("batch_size", batch_size, minimum=1)
        self.drop_last = check_flag("drop_last", drop_last)
        if self.drop_last and self.batch_size > self.num_examples:
            raise ParameterError("batch_size", batch_size,
                                 f"<= num_examples={self.num_examples} with drop_last=True "
                                 "(otherwise a pass has no batch)")
        self._init_schedule(rng, num_replicas, rank)

    @property
    def steps_per_epoch(self) -> int:
        n, b = self.num_examples, self.batch_size
        return n // b if self.drop_last else -(-n // b)

    @property
    def expected_batch_size(self) -> float:
        used = self.steps_per_epoch * self.batch_size if self.drop_last else self.num_examples
        return used / self.steps_per_epoch

    @property
    def max_batch_size(self) -> int:
        return self.batch_size

    def __len__(self) -> int:
        return self.steps_per_epoch

    def event(self, noise_multiplier: float, epochs=1) -> ShuffledEpochsEvent:
        """What training with this sampler releases: ``epochs`` epochs (an int, a Fraction, or
        :meth:`~dpplugins.events.ProtocolEvent.with_steps`) of Gaussian noise
        ``noise_multiplier`` on every batch sum."""
        return ShuffledEpochsEvent(self.num_examples, self.batch_size, epochs,
                                   GaussianEvent(noise_multiplier), self.drop_last)

    def _params(self) -> dict:
        return {"num_examples": self.num_examples, "batch_size": self.batch_size,
                "drop_last": self.drop_last}

    def _global_pass(self, generator: np.random.Generator) -> list[np.ndarray]:
        order = generator.permutation(self.num_examples).astype(np.int64)
        b = self.batch_size
        return [order[step * b:(step + 1) * b] for step in range(self.steps_per_epoch)]

    def __repr__(self) -> str:
        return (f"ShuffledEpochs(num_examples={self.num_examples}, batch_size={self.batch_size}, "
                f"drop_last={self.drop_last})")
