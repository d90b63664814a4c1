"""What every sampler shares: a schedule from (seed, epoch), ranks, and resumable state.

* **Schedule.**  Pass ``e`` of a sampler is drawn from ``numpy.random.default_rng(
  SeedSequence(seed, spawn_key=(e,)))``, so it depends only on the seed and the epoch: a sampler
  rebuilt from the same seed, or another process with the same seed, draws the same pass.
  Iterating the sampler runs the current pass and then moves to the next epoch (a fresh,
  independent pass -- what the accountants assume); ``set_epoch(e)`` jumps to pass ``e`` like
  ``torch.utils.data.DistributedSampler.set_epoch``.  A pass is drawn once: iterating steps of a
  pass that this sampler object has already yielded (``set_epoch(0)`` before every epoch, or
  ``set_epoch(e)`` back to a pass begun earlier) raises :class:`~dpplugins.errors.ParameterError`
  at the first batch, because the accountants take every pass as a fresh draw and a replayed pass
  would reuse its batches unaccounted (torch's sampler replays silently); so does a step that
  another live iteration of the same sampler has drawn (two loops over one loader at once).
  ``load_state_dict`` starts the record afresh (a restored run continues from the saved
  position).
* **Ranks.**  With ``num_replicas = R`` and ``rank = r`` every rank draws the same *global* pass
  and yields its shard of every global step: the step's index array split into ``R`` contiguous
  pieces by ``numpy.array_split`` (the first ``len % R`` ranks get one index more), piece ``r``.
  The union over ranks is exactly the single-process step; a shard may be empty (then that rank
  contributes nothing to the step, and a step empty on every rank stays a noise-only step).
  ``len(sampler)`` and ``sampler.event(...)`` describe the global steps.  Defaults: the world
  size and rank of an initialised ``torch.distributed`` process group if one exists (looked up
  without importing torch), else 1 and 0.
* **State.**  ``state_dict()`` holds the seed, the epoch and the position in the pass (steps
  already yielded); ``load_state_dict`` on a sampler with the same parameters continues the same
  schedule from there -- a run resumed mid-epoch replays exactly the protocol that was accounted.
"""

from __future__ import annotations

import bisect
import sys
from typing import Any, Iterator

import numpy as np

from dpplugins.errors import ParameterError, check_count

__all__ = ["SeededSampler", "DrawnPasses", "make_seed", "default_replicas", "MAX_DRAWN_SIZE"]

#: the most examples, slots or steps per pass a sampler draws: a pass is an index array in
#: memory (10^30 examples were accepted and then failed in numpy with "cannot fit 'int' into an
#: index-sized integer"); ``len()`` and ``event()`` are exact at any size
MAX_DRAWN_SIZE = 2**40


def make_seed(rng) -> int:
    """An int seed from ``None`` (fresh entropy, recorded so the run can be resumed), an int, a
    ``SeedSequence`` (its entropy) or a ``Generator`` (one draw from it)."""
    if rng is None:
        return int(np.random.SeedSequence().entropy) % (1 << 63)
    if isinstance(rng, np.random.Generator):
        return int(rng.integers(1 << 63))
    if isinstance(rng, np.random.SeedSequence):
        return int(rng.entropy) % (1 << 63)
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool) and rng >= 0:
        return int(rng)
    raise ParameterError("rng", rng, "None, a non-negative int seed, a numpy SeedSequence or a "
                         "numpy.random.Generator")


def default_replicas() -> tuple[int, int]:
    """(world size, rank) of an initialised torch.distributed group, else (1, 0); torch is not
    imported here (only looked up if the program already imported it)."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return int(dist.get_world_size()), int(dist.get_rank())
    except Exception:  # pragma: no cover - a broken torch install
        pass
    return 1, 0


class DrawnPasses:
    """The steps of each pass that a sampler object has yielded: the passes drawn to their end
    as runs of consecutive epochs (``[first, end)``, merged, so a run of any length is one
    entry) and the passes begun but not finished (epoch -> steps yielded from the start).

    Example::

        >>> drawn = DrawnPasses()
        >>> for epoch in range(3):
        ...     drawn.record(epoch, 4, 4)
        >>> drawn.record(5, 2, 4)
        >>> drawn.runs, drawn.yielded(1, 4), drawn.yielded(5, 4), drawn.yielded(4, 4)
        ([[0, 3]], 4, 2, 0)
    """

    def __init__(self) -> None:
        self.runs: list[list[int]] = []
        self.partial: dict[int, int] = {}

    def yielded(self, epoch: int, steps_per_pass: int) -> int:
        """Steps of pass ``epoch`` yielded so far (from its start)."""
        i = bisect.bisect_right(self.runs, [epoch, float("inf")]) - 1
        if i >= 0 and self.runs[i][0] <= epoch < self.runs[i][1]:
            return steps_per_pass
        return self.partial.get(epoch, 0)

    def record(self, epoch: int, yielded: int, steps_per_pass: int) -> None:
        """Pass ``epoch`` has yielded its first ``yielded`` steps."""
        if yielded < steps_per_pass:
            self.partial[epoch] = max(self.partial.get(epoch, 0), yielded)
            return
        self.partial.pop(epoch, None)
        i = bisect.bisect_right(self.runs, [epoch, float("inf")])
        if i > 0 and self.runs[i - 1][1] >= epoch:      # inside or right after the run before
            self.runs[i - 1][1] = max(self.runs[i - 1][1], epoch + 1)
            i -= 1
        else:
            self.runs.insert(i, [epoch, epoch + 1])
        if i + 1 < len(self.runs) and self.runs[i + 1][0] <= self.runs[i][1]:
            self.runs[i][1] = max(self.runs[i][1], self.runs.pop(i + 1)[1])


class SeededSampler:
    """Base class (module docstring).  Subclasses implement ``_global_pass(generator)``
    returning the list of the pass's global index arrays, and ``_params()`` (the constructor
    parameters that a saved state must match)."""

    scheme: str = ""

    def _init_schedule(self, rng, num_replicas: int | None, rank: int | None) -> None:
        self.seed = make_seed(rng)
        self.epoch = 0
        self._position = 0
        self._drawn = DrawnPasses()
        world, own = default_replicas()
        if num_replicas is None and rank is not None:
            raise ParameterError("num_replicas", None, "given together with rank")
        self.num_replicas = world if num_replicas is None else check_count(
            "num_replicas", num_replicas, minimum=1)
        self.rank = (own if num_replicas is None else 0) if rank is None else check_count(
            "rank", rank, minimum=0)
        if self.rank >= self.num_replicas:
            raise ParameterError("rank", rank, f"in [0, num_replicas - 1] = [0, "
                                 f"{self.num_replicas - 1}]")
        if self.num_replicas > 1 and not (isinstance(rng, (int, np.integer))
                                          and not isinstance(rng, bool)):
            # every rank deals its shard of one global schedule drawn from the seed: fresh
            # entropy differs per process (under DPDDP each rank drew its own permutation, an
            # example twice in one global step and others never).  A Generator or SeedSequence
            # cannot show whether it was seeded (default_rng() on each rank passed and drew a
            # different schedule per rank), so only an int seed is taken
            raise ParameterError("rng", rng if rng is None else type(rng).__name__,
                                 f"an int seed shared by every rank (num_replicas="
                                 f"{self.num_replicas})", "pass the same rng=<int> on every "
                                 "rank, so that all ranks draw one global schedule")
        self._stream = np.random.default_rng(np.random.SeedSequence(self.seed,
                                                                   spawn_key=(1 << 32,)))

    def _global_pass(self, generator: np.random.Generator) -> list[np.ndarray]:
        raise NotImplementedError  # pragma: no cover

    def _params(self) -> dict[str, Any]:
        raise NotImplementedError  # pragma: no cover

    def set_epoch(self, epoch: int) -> None:
        """Make the next iteration run pass ``epoch`` from its start."""
        self.epoch = check_count("epoch", epoch, minimum=0)
        self._position = 0

    def generator_for_epoch(self, epoch: int) -> np.random.Generator:
        """The generator pass ``epoch`` is drawn from."""
        return np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(int(epoch),)))

    def global_pass(self, epoch: int | None = None) -> list[np.ndarray]:
        """The global index arrays of pass ``epoch`` (default: the current one)."""
        return self._global_pass(self.generator_for_epoch(self.epoch if epoch is None
                                                          else epoch))

    def shard(self, batch: np.ndarray) -> np.ndarray:
        """This rank's part of a global step (module docstring)."""
        if self.num_replicas == 1:
            return batch
        # numpy.array_split's pieces, computed for this rank only (array_split made all R
        # pieces: O(R) per step, and OverflowError for R beyond the index range)
        q, extra = divmod(len(batch), self.num_replicas)
        start = self.rank * q + min(self.rank, extra)
        return batch[start:start + q + (1 if self.rank < extra else 0)]

    def __iter__(self) -> Iterator[np.ndarray]:
        for name in ("num_examples", "num_slots", "steps_per_epoch"):
            value = getattr(self, name, None)
            if isinstance(value, int) and value > MAX_DRAWN_SIZE:
                raise ParameterError(
                    name, value, "at most 2^40 for a sampler that draws its passes (a pass is "
                    "an index array in memory)", "len() and event() are exact at any size, so "
                    "the sampler can still describe such a run to the accountants")
        if self._position >= len(self):
            # the last iteration yielded the last step of its pass but was not resumed after it
            # (zip(range(len(loader)), loader), a break after the last batch): the pass is over,
            # and this iteration draws the next one (it yielded nothing, and Opacus' pass check
            # refused a pass that had run to its end -- a hostile sweep)
            self.epoch += 1
            self._position = 0
        epoch, start = self.epoch, self._position
        drawn = self._drawn.yielded(epoch, len(self))
        if start < drawn:
            raise ParameterError(
                "epoch", epoch, f"a pass this sampler has not drawn yet: steps {start} to "
                f"{drawn - 1} of pass {epoch} were drawn already, and the accountants take "
                "every pass as a fresh draw (a replayed pass reuses its batches, unaccounted)",
                "Call set_epoch(epoch) with every epoch once, counting up, or not at all (after "
                "a pass the sampler moves to the next one by itself); to resume a run, "
                "load_state_dict() the state saved with it")
        batches = self.global_pass()
        for i in range(start, len(batches)):
            # another live iteration of this sampler (a second loop over the same loader) may
            # have yielded this step meanwhile: its batches were stored when it began, so it
            # replayed steps of a pass and skipped the next pass (a hostile sweep)
            if self.epoch != epoch or self._drawn.yielded(epoch, len(batches)) > i:
                raise ParameterError(
                    "sampler", f"an iteration at step {i} of pass {epoch}, which another "
                    "iteration of this sampler has drawn already",
                    "one iteration at a time: every step of a pass is drawn once, and the "
                    "accountants take every pass as a fresh draw",
                    "Finish or drop one loop over the loader before starting another (evaluate "
                    "on a loader of its own)")
            self._position = i + 1
            self._drawn.record(epoch, i + 1, len(batches))
            yield self.shard(batches[i])
        if self.epoch == epoch:   # (not moved on by a later iteration meanwhile)
            self.epoch += 1
            self._position = 0

    @property
    def position(self) -> int:
        """Steps of the current pass already yielded."""
        return self._position

    def state_dict(self) -> dict[str, Any]:
        """JSON-serialisable state: parameters, seed, epoch and position in the pass."""
        return {"scheme": self.scheme, "params": self._params(), "seed": self.seed,
                "epoch": self.epoch, "position": self._position}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the schedule saved by :meth:`state_dict` (same parameters required)."""
        missing = ([] if not isinstance(state, dict) else
                   [key for key in ("seed", "epoch", "position") if key not in state])
        if not isinstance(state, dict) or missing:   # (a missing 'epoch' raised KeyError)
            raise ParameterError("state", type(state).__name__ if not isinstance(state, dict)
                                 else f"a dict without {missing}",
                                 "a dict produced by sampler.state_dict()")
        if state.get("scheme") != self.scheme or state.get("params") != self._params():
            raise ParameterError("state['params']", state.get("params"),
                                 f"{self._params()} (the parameters of this {self.scheme} "
                                 "sampler)", "rebuild the sampler with the saved parameters")
        seed = state["seed"]
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            # only the int seed state_dict() writes: None drew fresh entropy on every rank (a
            # different global schedule per rank, as the constructor refuses for num_replicas > 1)
            raise ParameterError("state['seed']", seed, "a non-negative int (the seed "
                                 "state_dict() saved)")
        epoch = check_count("state['epoch']", state["epoch"], minimum=0)
        position = check_count("state['position']", state["position"], minimum=0)
        if position > len(self):
            raise ParameterError("state['position']", position, f"<= {len(self)} steps per pass")
        # everything checked: nothing changes on a refused state
        self.seed = int(seed)
        self.epoch = epoch
        self._position = position
        self._drawn = DrawnPasses()   # a restored run continues from the saved position
        self._stream = np.random.default_rng(np.random.SeedSequence(self.seed,
                                                                   spawn_key=(1 << 32,)))
