"""Opacus integration: our accountants by registry name in ``PrivacyEngine(accountant=...)``.

Usage (the only change to an existing Opacus script)::

    from dpplugins.integrations.opacus import register
    register()                                    # once, before creating the engine
    privacy_engine = PrivacyEngine(accountant="pld")
    model, optimizer, loader = privacy_engine.make_private_with_epsilon(..., target_epsilon=3)
    privacy_engine.get_epsilon(delta=1e-5)        # certified upper bound

``register()`` adds an adapter (a subclass of ``opacus.accountants.IAccountant``) for every
accountant in :func:`dpplugins.accountants.available` -- the built-in ones and any the user
registered with :func:`dpplugins.accountants.register` -- through Opacus' own
``register_accountant``.  Opacus' ``rdp``, ``gdp`` and ``prv`` are left untouched.

Events, not ``(sigma, q)`` tuples (:mod:`dpplugins.events`).  What one optimizer step released is
read from the data loader ``make_private`` really returns (:func:`loader_event`):

* Opacus' ``DPDataLoader`` (``poisson_sampling=True``, or passed in) samples Poisson batches:
  ``PoissonSampledEvent(sample_rate, GaussianEvent(sigma))``;
* a loader over one of our samplers (:func:`make_data_loader`, :func:`torch_batch_sampler`):
  the sampler's own event, one step (``sampler.event(sigma).with_steps(1)``);
* a plain ``torch.utils.data.DataLoader`` with a ``batch_size`` and ``shuffle=True``
  (``RandomSampler`` without replacement) or ``shuffle=False`` (``SequentialSampler``):
  ``ShuffledEpochsEvent(len(dataset), batch_size, ..., drop_last)``.  A fixed order is one
  permutation: every shuffled-epochs *upper* bound that holds for each permutation (the
  no-amplification profile the ``shuffle`` accountant uses for batches of more than one example)
  holds for it, and every shuffled-epochs *lower* bound (the Chua et al. 2024 pair) is a lower
  bound for it too (the shuffled mechanism is a mixture over permutations of the fixed-order one,
  so by joint convexity its privacy loss is at most the fixed order's worst case).  Amplification
  by shuffling or swapping (batch size 1) needs a fresh random order, so a fixed order with batch
  size 1 is *not* described (see the last item);
* under DPDDP, a ``DataLoader`` over torch's ``DistributedSampler`` on every rank: one global
  step is shuffled epochs of the global batch (``num_replicas x batch_size``), see
  :func:`_distributed_step` for the argument and what is refused;
* anything else -- another sampler, an iterable dataset, a batch size of 1 in a fixed order --
  is :class:`~dpplugins.events.UnsupportedEvent` with the reason, which every accountant refuses
  (unknown means refuse).

Refusal at set-up.  ``register()`` wraps ``PrivacyEngine.make_private`` and
``make_private_with_epsilon`` (signatures unchanged): with one of our accountants the loader's
event is checked with the accountant (``accountant.inner.check(event)``) *before* Opacus touches
the model, and an :class:`~dpplugins.accountants.UnsupportedEventError` (a ``ValueError``) names
the accountants that do support it (:func:`dpplugins.accountants.supporting`).  No table of
accountant names is involved: every accountant -- ours or a user's -- decides from the event.
With one of Opacus' own accountants (which read every step as a Poisson-subsampled Gaussian,
the meaning of Opacus' ``(noise_multiplier, sample_rate)`` interface) a loader that is not
Poisson gets a warning naming the valid accountants (:func:`check_sampler`); a Poisson loader
gets a watcher that warns once when an optimizer step accumulates several Poisson batches
(Opacus records them as one step at rate ``k q``, which under-reports).

Gradient accumulation.  Opacus adds the noise once per ``optimizer.step()`` to the clipped
gradients of all ``k = optim.accumulated_iterations`` batches since the last ``zero_grad``.
The step hook records ``event.accumulate(k)``: the event type decides or refuses
(:meth:`dpplugins.events.Event.accumulate`).  Poisson batches become ``k`` steps at
``sigma / sqrt(k)`` (the merged step is a post-processing of their composition); shuffled batches
of ``b`` become shuffled batches of ``k b``; random check-ins / allocation merge slots (``k``
dividing the slots, every example checking in); swapping and PNSGD refuse.  For per-pass
protocols the hook learns ``k`` on the first step and every later step must follow
:func:`accumulation_plan` (``k`` batches per step, the last step of a pass the remaining
``T mod k``), otherwise it raises :class:`~dpplugins.errors.ParameterError`.

Passes follow the loader.  Per-pass accountants cut passes from the recorded steps, so the
loader's batch sampler is watched (:func:`_watch_passes`): a new iteration must begin where the
recorded steps stand -- torch's samplers begin a new permutation every time, so the previous pass
must have run to its end; ours continue from ``position``, which must equal the batches trained
-- otherwise :class:`~dpplugins.errors.ParameterError` before any batch of it is drawn (a
``break`` inside an epoch followed by a fresh permutation was accounted as one pass).  Every
optimizer step must also train batches of that loader: the batches the recorded steps train
may not outnumber the batches it has drawn (:meth:`DPPluginsAccountant._check_batch_drawn`), for
every loader, Poisson too -- steps on another ``DataLoader`` or on the full data were recorded as
its batches -- otherwise :class:`~dpplugins.errors.ParameterError` before the parameters move.

Calibration (``make_private_with_epsilon`` with our accountants):
:func:`dpplugins.calibration.find_noise_multiplier` on the loader's event for the whole run
(``epochs`` passes), verified ``<= target``; ``opacus.accountants.utils.get_noise_multiplier``
called directly with one of our names calibrates the Poisson event it describes.

Non-finite gradients.  Opacus clips with the factor ``C / (norm + 1e-6)``: one example whose
gradient is infinite or NaN (a diverged loss, an infinite input) made the noisy update NaN, and
only when that example was in the batch -- the released model showed whether it was sampled.
With our accountants such an example's per-example gradients are set to zero before clipping
(zero is a valid clipped value: the sensitivity and every epsilon are unchanged), with a
``RuntimeWarning`` naming how many (:func:`zero_non_finite_examples`).  Ghost clipping
(``grad_sample_mode="ghost"``) holds no per-example gradients; there a step whose summed
gradient is not finite raises :class:`~dpplugins.errors.NumericalError` before its noise is
drawn; such an error ends the run (caught and continued, the refused steps are not recorded --
which steps were refused shows when the example was sampled -- and per-pass accountants refuse
the next pass).  :func:`attach` with an optimizer made without ``make_private`` installs the
same.  Opacus' own accountants keep Opacus' behaviour.

Also: ``noise_multiplier=0`` records non-private steps (epsilon ``inf``); state dicts carry our
events (and load the ``(sigma, q, steps)`` histories of version 0.1 with the meaning they had);
adapters pickle and deep-copy (``torch.save(privacy_engine.accountant)``).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import inspect
import math
import sys
import types
import warnings
from collections import OrderedDict
from fractions import Fraction
from typing import Any

import numpy as np

from dpplugins.accountants import UnsupportedEventError, available, create, get_class, supporting
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_positive,
                              check_probability)
from dpplugins.events import (Event, GaussianEvent, NonPrivateEvent, PNSGDEvent,
                              PoissonSampledEvent, ProtocolEvent, SelfComposedEvent,
                              ShuffledEpochsEvent, UnsupportedEvent, leaves)
from dpplugins.passes import extend_run

__all__ = ["register", "configure", "attach", "check_sampler", "valid_accountants",
           "loader_event", "is_random_allocation", "make_data_loader", "torch_batch_sampler",
           "make_private_pnsgd", "logical_sampler", "accumulation_plan",
           "poisson_accumulation_noise", "steps_for_epochs", "zero_non_finite_examples", "OURS",
           "DPPluginsAccountant"]

#: registry names of our accountants that Opacus users can pass to PrivacyEngine
OURS: tuple[str, ...] = ()
_ORIGINAL_GET_NOISE_MULTIPLIER = None
_ORIGINAL_MAKE_PRIVATE = None
_ORIGINAL_MAKE_PRIVATE_WITH_EPSILON = None
_MIN_OPACUS = (1, 5)
#: adapter classes by registry name (one class per name, so pickles find it again)
_ADAPTERS: dict[str, type] = {}


def _opacus():
    try:
        import opacus
        from opacus import accountants
    except ImportError as error:
        raise ImportError("the Opacus integration needs opacus: pip install 'dpplugins[opacus]' "
                          "(install torch==2.13.0 first on CPU machines)") from error
    version = tuple(int(p) for p in opacus.__version__.split(".")[:2] if p.isdigit())
    if version < _MIN_OPACUS or not hasattr(accountants, "register_accountant"):
        raise ImportError(f"opacus {opacus.__version__} has no accountant registry; "
                          f"dpplugins needs opacus >= {'.'.join(map(str, _MIN_OPACUS))}")
    return opacus


# -- what a data loader releases ------------------------------------------------------------------
def _with_noise(event: Event, noise_multiplier: float) -> Event:
    """``event`` (one sampled step or protocol step) with Gaussian noise ``noise_multiplier``."""
    inner = getattr(event, "event", None)
    if isinstance(inner, GaussianEvent) and dataclasses.is_dataclass(event):
        return dataclasses.replace(event, event=GaussianEvent(noise_multiplier))
    return event


def _same_protocol(a: Event | None, b: Event | None) -> bool:
    """Whether two one-step events describe the same sampling (the noise may differ)."""
    if a is None or b is None:
        return a is b
    return _with_noise(a, 1.0) == _with_noise(b, 1.0)


def _unsupported(reason: str) -> tuple[Event, int]:
    return UnsupportedEvent(reason), 0


def _step_of(data_loader, noise: GaussianEvent, poisson_sampling: bool) -> tuple[Event, int]:
    """(the event of one step of ``data_loader``, steps per epoch) -- see :func:`loader_event`."""
    import torch.utils.data as tud

    dataset = getattr(data_loader, "dataset", None)
    if dataset is None or isinstance(dataset, tud.IterableDataset):
        return _unsupported("a data loader over an iterable dataset (or without one): its "
                            "sampling cannot be described")
    try:
        n = len(dataset)
    except TypeError:
        return _unsupported(f"a dataset without len(): {type(dataset).__name__}")
    if n < 1:
        return _unsupported("an empty dataset")
    try:
        steps = len(data_loader)
    except TypeError:
        return _unsupported(f"a data loader without len(): {type(data_loader).__name__}")
    if poisson_sampling:
        # make_private replaces the loader by DPDataLoader.from_data_loader(loader): Poisson
        # batches at sample rate 1 / len(loader)
        if steps < 1:
            return _unsupported("a data loader without batches")
        return PoissonSampledEvent(1.0 / steps, noise), steps

    from opacus.utils.batch_memory_manager import BatchSplittingSampler
    from opacus.utils.uniform_sampler import (DistributedUniformWithReplacementSampler,
                                              UniformWithReplacementSampler)

    batch_sampler = getattr(data_loader, "batch_sampler", None)
    if isinstance(batch_sampler, BatchSplittingSampler):
        # BatchMemoryManager: physical batches of the logical ones, one optimizer step each
        batch_sampler = batch_sampler.sampler
        steps = len(batch_sampler)
    if isinstance(batch_sampler, (UniformWithReplacementSampler,
                                  DistributedUniformWithReplacementSampler)):
        return PoissonSampledEvent(batch_sampler.sample_rate, noise), steps

    emit = getattr(batch_sampler, "event", None)
    if callable(emit):  # one of our samplers (or any batch sampler that emits its event)
        event = emit(noise.noise_multiplier)
        num = getattr(batch_sampler, "num_examples", None)
        if not isinstance(event, ProtocolEvent):
            return _unsupported(f"the sampler's event is a {type(event).__name__}, not a "
                                "per-pass protocol event")
        if num is not None and num != n:
            return _unsupported(f"a sampler over {num} examples for a dataset of {n}")
        if event.steps_per_epoch != steps:
            return _unsupported(f"a sampler whose pass has {event.steps_per_epoch} steps while "
                                f"the loader has {steps} batches")
        return event.with_steps(1), steps

    plain = type(batch_sampler)
    if getattr(plain, "_dpplugins_watched", False):   # watched by an earlier make_private
        plain = plain.__mro__[1]
    if plain is tud.BatchSampler:
        sampler, b = batch_sampler.sampler, batch_sampler.batch_size
        drop_last = bool(batch_sampler.drop_last)
        if type(sampler) is tud.DistributedSampler:
            return _distributed_step(sampler, b, drop_last, n, noise, steps)
        if type(sampler) is tud.RandomSampler:
            if sampler.replacement or sampler.num_samples != n:
                return _unsupported("a RandomSampler with replacement or num_samples != "
                                    "len(dataset): not one permutation per epoch")
        elif type(sampler) is tud.SequentialSampler:
            if len(sampler) != n:
                return _unsupported("a SequentialSampler over another data source")
            if b == 1:
                return _unsupported(
                    "batch size 1 in a fixed order (shuffle=False): amplification by shuffling "
                    "or swapping needs a fresh random order every epoch; use shuffle=True")
        else:
            return _unsupported(f"a {type(sampler).__name__}: only RandomSampler (shuffle=True) "
                                "and SequentialSampler (shuffle=False) batches are described")
        if drop_last and b > n:
            return _unsupported("drop_last=True with batch_size > len(dataset): no batches")
        event = ShuffledEpochsEvent(n, b, 1, noise, drop_last)
        if event.steps_per_epoch != steps:  # pragma: no cover - torch's len(BatchSampler)
            return _unsupported(f"{steps} batches where shuffled epochs have "
                                f"{event.steps_per_epoch}")
        return event.with_steps(1), steps
    return _unsupported(f"a data loader with batch sampler {type(batch_sampler).__name__}, "
                        "whose sampling is not described (use Opacus' DPDataLoader, one of "
                        "dpplugins' samplers via make_data_loader, or a DataLoader with "
                        "batch_size and shuffle)")


def _distributed_module(module) -> bool:
    """Whether Opacus trains ``module`` distributed (its own test in ``make_private``: DPDDP,
    torch's DDP or an FSDP module)."""
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
    from torch.nn.parallel import DistributedDataParallel as DDP

    kinds: tuple = (DPDDP, DDP)
    try:
        from torch.distributed._composable.fsdp import FSDPModule
        kinds += (FSDPModule,)
    except ImportError:  # pragma: no cover - older torch
        pass
    return isinstance(module, kinds)


def _replica_disagreement(data_loader, module=None) -> str:
    """Why this rank's sampler of ``data_loader`` cannot deal this rank's part of one global
    schedule ("" if it can, or if no process group of more than one rank runs): built for
    another world size (before ``init_process_group``: one replica, so every example ran once
    per rank in every step) or another rank (two ranks dealt the same shard).  Both were
    accounted as one shuffled pass, 4.38, where the step that ran has a certified lower bound of
    10.0.  Local checks only (no collective: a rank that calls ``make_private`` alone must not
    wait for the others).  That the ranks share one seed is enforced where it is chosen: our
    samplers refuse ``rng=None`` with more than one replica; torch's ``DistributedSampler``
    takes ``seed=`` (default 0 on every rank) and ``set_epoch`` on every rank, which cannot be
    checked here: the ranks compare those at the first optimizer step of each pass
    (:meth:`DPPluginsAccountant._compare_ranks`)."""
    import torch.distributed as dist
    import torch.utils.data as tud

    if not _process_group_of_two_or_more():
        return ""
    world, own = dist.get_world_size(), dist.get_rank()
    batch_sampler = getattr(data_loader, "batch_sampler", None)
    inner = getattr(batch_sampler, "inner", None)
    sampler = getattr(batch_sampler, "sampler", None)
    if inner is not None and hasattr(inner, "num_replicas"):          # one of ours
        replicas, rank = int(inner.num_replicas), int(inner.rank)
    elif type(sampler) is tud.DistributedSampler:
        replicas, rank = int(sampler.num_replicas), int(sampler.rank)
    elif module is not None and _distributed_module(module) and type(sampler) in (
            tud.RandomSampler, tud.SequentialSampler):
        # every rank iterates the whole dataset: a global step holds each rank's batch, with
        # an example in several of them (in all of them with one seed), while the accountant
        # would record one rank's batch -- an under-count of the sensitivity by up to the world
        # size (found while checking the DDP schedule comparison)
        return (f"a {type(sampler).__name__} on each of {world} ranks under distributed "
                "training: every rank draws its batches from the whole dataset, so one global "
                "step can hold an example several times")
    else:
        return ""
    if replicas != world:
        return (f"a sampler built for num_replicas={replicas} in a process group of {world} "
                "(built before init_process_group?): its shard is not this rank's part of one "
                "global step")
    if rank != own:
        return (f"a sampler that deals the shard of rank={rank} on rank {own}: two ranks would "
                "train on the same examples")
    return ""


def _schedule_fingerprint(batch_sampler) -> tuple | None:
    """What decides the *global* schedule of the pass ``batch_sampler`` is about to run, the
    same on every rank of one schedule (rank excluded), or None when no process group of more
    than one rank runs or the sampler is not one whose schedule is known: for ours the class,
    seed, epoch, position and constructor parameters (a pass is drawn from (seed, epoch),
    :mod:`dpplugins.samplers.base`); for torch's ``DistributedSampler`` its seed, epoch,
    shuffle, drop_last, dataset length and world size (torch draws the permutation from
    ``seed + epoch``)."""
    import torch.utils.data as tud

    if not _process_group_of_two_or_more():
        return None
    inner = getattr(batch_sampler, "inner", None)
    sampler = getattr(batch_sampler, "sampler", None)
    if inner is not None and hasattr(inner, "num_replicas") and hasattr(inner, "seed"):
        params = getattr(inner, "_params", dict)()
        return (type(inner).__qualname__, int(inner.seed), int(inner.epoch),
                int(inner.position), int(inner.num_replicas), sorted(params.items()))
    if type(sampler) is tud.DistributedSampler:
        return ("DistributedSampler", int(sampler.seed), int(sampler.epoch),
                bool(sampler.shuffle), bool(sampler.drop_last), len(sampler.dataset),
                int(sampler.num_replicas), getattr(batch_sampler, "batch_size", None))
    return None


def _process_group_of_two_or_more() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() >= 2


def _ranks_disagree(fingerprint: tuple) -> bool:
    """True when some rank of the process group holds another ``fingerprint`` (one
    ``all_reduce`` of two integers: the largest hash and the largest negated hash, i.e. the
    smallest).  Called from the optimizer step, where every rank of DPDDP training already meets
    in Opacus' gradient all-reduce, so no rank waits here for one that does not come.  The hash
    is SHA-256 of the fingerprint's repr (Python's ``hash`` differs between processes)."""
    import hashlib

    import torch
    import torch.distributed as dist

    digest = hashlib.sha256(repr(fingerprint).encode()).digest()
    value = int.from_bytes(digest[:8], "big") >> 2          # below 2^62: its negation fits
    device = (torch.device("cuda", torch.cuda.current_device())
              if dist.get_backend() == "nccl" else torch.device("cpu"))
    both = torch.tensor([value, -value], dtype=torch.int64, device=device)
    dist.all_reduce(both, op=dist.ReduceOp.MAX)
    return int(both[0]) != -int(both[1])


def _distributed_step(sampler, per_rank_batch: int, drop_last: bool, n: int,
                      noise: GaussianEvent, steps: int) -> tuple[Event, int]:
    """One global step of DPDDP training over torch's ``DistributedSampler``.

    torch deals rank ``r`` the positions ``r, r + R, r + 2R, ...`` of one permutation of the
    dataset (drawn from ``seed + epoch``; ``R = num_replicas``), and each rank's loader batches
    its positions in order, so batch ``j`` of all ranks together is the block of positions
    ``[j R b, (j + 1) R b)`` of the permutation: the global step is a shuffled-epochs step of
    ``R b`` examples (our derivation, from torch's documented dealing; the union over ranks is
    checked in the distributed test).  Opacus' distributed optimizer adds the noise once to the
    sum over ranks, so the step releases what that single-process step would.  Refused: a
    dataset size that ``R`` does not divide (torch then pads the epoch with repeated examples,
    or drops a random remainder), ``num_replicas`` other than the running process group's size
    (each rank would release only its shard), and a global batch of one example (amplification
    by shuffling needs a fresh order every epoch, which only ``set_epoch`` gives).  Call
    ``sampler.set_epoch(epoch)`` every epoch, as torch documents: without it the order repeats;
    the upper bounds (one batch per example per epoch) hold either way, the lower bounds are
    stated for fresh orders.
    """
    import torch.distributed as dist

    world = int(sampler.num_replicas)
    running = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
    if world != running:
        return _unsupported(f"a DistributedSampler with num_replicas={world} in a process group "
                            f"of {running}: each rank would release only its own shard")
    if n % world:
        return _unsupported(f"a DistributedSampler over {n} examples, not divisible by "
                            f"num_replicas={world}: torch pads the epoch with repeated examples "
                            "(or drops a random remainder); use a dataset size divisible by the "
                            "world size, or dpplugins' samplers with num_replicas and rank")
    if world * per_rank_batch == 1:
        return _unsupported("a global batch of one example: amplification by shuffling needs "
                            "a fresh order every epoch (set_epoch), which cannot be checked here")
    if drop_last and per_rank_batch > n // world:
        return _unsupported("drop_last=True with a batch larger than a rank's shard: no batches")
    event = ShuffledEpochsEvent(n, world * per_rank_batch, 1, noise, drop_last)
    if event.steps_per_epoch != steps:  # pragma: no cover - torch's len(BatchSampler)
        return _unsupported(f"{steps} batches where shuffled epochs have "
                            f"{event.steps_per_epoch}")
    return event.with_steps(1), steps


def loader_event(data_loader, noise_multiplier: float, *, epochs=None,
                 poisson_sampling: bool = False) -> Event:
    """What training on ``data_loader`` with noise ``noise_multiplier`` releases.

    Without ``epochs``: one optimizer step (one batch); with it, the whole run of ``epochs``
    passes (a partial last pass counted in full, :func:`steps_for_epochs`).
    ``poisson_sampling=True`` describes the loader ``make_private(poisson_sampling=True)`` makes
    of ``data_loader`` (Opacus' ``DPDataLoader`` at sample rate ``1 / len(data_loader)``).  The
    rules are in the module docstring; an undescribed loader gives an ``UnsupportedEvent``.

    Example (``dataset`` of 256 examples)::

        >>> loader_event(DataLoader(dataset, batch_size=32, shuffle=True), 1.0)
        ShuffledEpochsEvent(dataset_size=256, batch_size=32, epochs=Fraction(1, 8), ...)
        >>> loader_event(DataLoader(dataset, batch_size=32), 1.0, epochs=3,
        ...              poisson_sampling=True)
        SelfComposedEvent(event=PoissonSampledEvent(sample_rate=0.125, ...), count=24)
    """
    noise = GaussianEvent(noise_multiplier)
    step, steps_per_epoch = _step_of(data_loader, noise, poisson_sampling)
    if epochs is None or isinstance(step, UnsupportedEvent):
        return step
    steps = steps_for_epochs(epochs, 1.0 / steps_per_epoch)
    if isinstance(step, ProtocolEvent):
        return step.with_steps(steps)
    return SelfComposedEvent(step, steps)


def _opacus_reads(event: Event) -> bool:
    """Whether Opacus' own accountants (Poisson-subsampled Gaussian steps) describe ``event``."""
    return all(isinstance(leaf, PoissonSampledEvent) and isinstance(leaf.event, GaussianEvent)
               for leaf, _ in leaves(event)) and not isinstance(event, UnsupportedEvent)


def _describe(event: Event) -> str:
    if isinstance(event, UnsupportedEvent):
        return f"a data loader whose sampling is not described ({event.reason})"
    if isinstance(event, PoissonSampledEvent):
        return f"a Poisson data loader (sample rate {event.sample_rate:.6g})"
    if isinstance(event, ShuffledEpochsEvent):
        return (f"a shuffled-batches data loader ({event.dataset_size} examples, batch size "
                f"{event.batch_size})")
    return f"a data loader whose steps are {type(event).__name__}s"


# -- non-finite per-example gradients -----------------------------------------------------------
def _non_finite_rows(chunk) -> Any:
    """A boolean tensor: which rows (examples) of one per-example gradient tensor hold a value
    that is not finite."""
    import torch

    finite = torch.isfinite(chunk)
    if chunk.dim() > 1:
        finite = finite.all(dim=tuple(range(1, chunk.dim())))
    return ~finite


def zero_non_finite_examples(params, *, processed: bool = False) -> int:
    """Set to zero every example's per-example gradients (``p.grad_sample``, a tensor or Opacus'
    list of accumulated batches) when any of its values, in any parameter, is not finite; returns
    the number of examples zeroed.

    Why: Opacus clips with the factor ``C / (norm + 1e-6)``, which is 0 or NaN for an infinite or
    NaN norm, and ``0 * inf`` is NaN, so one diverged example made the whole noisy update -- and
    the model -- NaN.  NaN appears only when that example is in the batch: the released model
    shows whether it was sampled, and no epsilon holds for that.  Zero is a valid clipped value
    (norm 0 <= C), so replacing the example's gradient by zero is clipping with a function that is
    still bounded by C: the sensitivity, and so every epsilon we report, is unchanged (our
    reading of the clipping argument of Abadi et al., CCS 2016, arXiv:1607.00133, Sec. 3.1).
    Batches Opacus has already processed are left alone (Opacus raises for them) unless
    ``processed`` (a step clipped again after it was undone).
    """
    import torch

    chunks = []
    for p in params:
        sample = getattr(p, "grad_sample", None)
        if sample is None:
            continue
        parts = list(sample) if isinstance(sample, list) else [sample]
        if not parts:
            continue
        if not processed and any(getattr(part, "_processed", False) for part in parts):
            return 0
        chunks.append((p, isinstance(sample, list), parts))
    if not chunks:
        return 0
    bad = None
    device = chunks[0][2][0].device
    for _, _, parts in chunks:
        # on one device: a single synchronisation per step (the count below)
        rows = torch.cat([_non_finite_rows(part).to(device) for part in parts])
        if bad is not None and len(rows) != len(bad):
            return 0   # inconsistent batch layouts: Opacus raises for them
        bad = rows if bad is None else bad | rows
    count = int(bad.sum())
    if count == 0:
        return 0
    for p, is_list, parts in chunks:
        start, fixed = 0, []
        for part in parts:
            mask = bad[start:start + len(part)].to(part.device)
            start += len(part)
            mask = mask.reshape((-1,) + (1,) * (part.dim() - 1))
            fixed.append(torch.where(mask, torch.zeros((), dtype=part.dtype,
                                                       device=part.device), part))
        p.grad_sample = fixed if is_list else fixed[0]
    return count


def _count_non_finite_as_zero(optimizer) -> None:
    """Make ``optimizer`` (an Opacus DP optimizer) count an example whose per-example gradient is
    not finite as zero (:func:`zero_non_finite_examples`), with a warning naming how many;
    Opacus' ghost clipping never holds per-example gradients, so there a step whose summed
    gradient is not finite raises :class:`~dpplugins.errors.NumericalError` before its noise is
    drawn (nothing of the step is released)."""
    if getattr(optimizer, "_dpplugins_finite_guard", False):
        return
    optimizer._dpplugins_finite_guard = True
    ghost = _ghost_optimizer_class()
    if ghost is not None and isinstance(optimizer, ghost):
        original_accumulate = optimizer.accumulate

        def accumulate() -> None:
            import torch

            if any(p.grad is not None and not bool(torch.isfinite(p.grad).all())
                   for p in optimizer.params):
                raise NumericalError(
                    "the clipped gradient of this step is not finite (an example's gradient, or "
                    "its ghost-clipping norm, is not finite: a diverged loss, or an infinite or "
                    "huge input) and ghost clipping cannot count the example as zero: this step "
                    "was refused before its noise was drawn",
                    "train with grad_sample_mode='hooks' (such an example then counts as "
                    "zero), or find the example and fix the data or the loss")
            original_accumulate()

        optimizer.accumulate = accumulate
        return
    original = optimizer.clip_and_accumulate
    # Opacus' own clipping changes nothing but the summed gradients and the processed flags, so
    # a step can be clipped first and undone in the rare case its sum is not finite: a check of
    # the summed gradients (the size of the model) instead of a pass over every per-example
    # gradient (the batch size times that; the pass doubled an MLP's step time).  Other
    # clipping (adaptive clipping counts the clipped examples) is checked before clipping.
    undoable = _undoable_clipping()
    if type(optimizer).clip_and_accumulate not in undoable:
        def clip_and_accumulate() -> None:
            _warn_zeroed(zero_non_finite_examples(optimizer.params))
            original()

        optimizer.clip_and_accumulate = clip_and_accumulate
        return

    def clip_and_accumulate() -> None:
        import torch

        params = optimizer.params
        saved = [None if p.summed_grad is None else p.summed_grad.clone() for p in params]
        original()
        sums = [p.summed_grad for p in params if p.summed_grad is not None]
        # one synchronisation: every flag on the first sum's device (model-parallel parameters)
        if not sums or bool(torch.stack([torch.isfinite(t).all().to(sums[0].device)
                                         for t in sums]).all()):
            return
        for p, previous in zip(params, saved):
            p.summed_grad = previous
        zeroed = zero_non_finite_examples(params, processed=True)
        if not zeroed:
            raise NumericalError(
                "the clipped sum of this step is not finite although every per-example gradient "
                "is: this step was refused before its noise was drawn",
                "report this with the model and optimizer; as a workaround lower max_grad_norm")
        _warn_zeroed(zeroed)
        original()

    optimizer.clip_and_accumulate = clip_and_accumulate


def _warn_zeroed(zeroed: int) -> None:
    if zeroed:
        warnings.warn(
            f"{zeroed} example(s) of this step had a gradient that is not finite (a diverged "
            "loss or an infinite input); dpplugins counted them as zero, which clipping "
            "allows, instead of letting Opacus release a NaN update", RuntimeWarning,
            stacklevel=5)


def _undoable_clipping() -> tuple:
    """Opacus' ``clip_and_accumulate`` implementations that change only ``p.summed_grad`` and the
    processed flags (flat and per-layer clipping)."""
    from opacus.optimizers import DPOptimizer, DPPerLayerOptimizer
    return (DPOptimizer.clip_and_accumulate, DPPerLayerOptimizer.clip_and_accumulate)


def _ghost_optimizer_class():
    """Opacus' ghost-clipping optimizer class (it holds no per-example gradients), or None."""
    try:
        from opacus.optimizers import DPOptimizerFastGradientClipping
    except ImportError:   # pragma: no cover - older Opacus
        return None
    return DPOptimizerFastGradientClipping


# -- the adapter ---------------------------------------------------------------------------------
class _StepHook:
    """Opacus' optimizer step hook for one of our adapters: records the loader's event of the
    step (``event``, bound by the wrapped ``make_private``), accumulated over
    ``optim.accumulated_iterations`` batches."""

    def __init__(self, adapter: "DPPluginsAccountant", sample_rate: float) -> None:
        self.adapter = adapter
        self.sample_rate = sample_rate
        self.event: Event | None = None
        #: the watched batch sampler of the loader ``event`` was read from (None: not watched),
        #: and the batches this optimizer's recorded steps trained
        self.batch_sampler = None
        self.trained = 0

    def bind(self, event: Event, loader) -> None:
        """Record ``event`` for every step, on the batches of ``loader`` (watched)."""
        self.event = event
        sampler = getattr(loader, "batch_sampler", None)
        self.batch_sampler = sampler if getattr(type(sampler), "_dpplugins_watched",
                                                False) else None
        self.trained = 0

    def __call__(self, optim) -> None:
        self.adapter._record_step(self.event, self.sample_rate,
                                  float(optim.noise_multiplier),
                                  int(optim.accumulated_iterations), hook=self,
                                  settings=_mechanism_settings(optim))


def _mechanism_settings(optim) -> tuple:
    """What decides one optimizer step's mechanism besides the loader, compared across ranks
    under torch.distributed (:meth:`DPPluginsAccountant._compare_ranks`): Opacus adds rank 0's
    noise (``noise_multiplier * max_grad_norm`` of rank 0) to the sum of every rank's clipped
    gradients, each clipped to its own rank's ``max_grad_norm`` and scaled by its own
    ``expected_batch_size``, while each rank's accountant records its own noise multiplier."""
    return (type(optim).__qualname__, float(optim.noise_multiplier),
            repr(getattr(optim, "max_grad_norm", None)),
            getattr(optim, "expected_batch_size", None), getattr(optim, "loss_reduction", None),
            int(optim.accumulated_iterations))


class DPPluginsAccountant:
    """Mixin that makes one of our accountants speak Opacus' ``IAccountant`` interface.

    The concrete classes are built by :func:`register` as ``(DPPluginsAccountant, IAccountant)``
    subclasses with ``_dpplugins_name`` set (the registry name); the wrapped accountant is
    ``self.inner``.  ``history`` is the inner accountant's list of events.
    """

    _dpplugins_name = ""

    def __init__(self, **options: Any) -> None:
        self._accumulation = None   # batches per optimizer step of a per-pass protocol
        self._loader_event = None   # one step of the loader make_private returned (at sigma)
        try:
            self.inner = create(self._dpplugins_name, **options)
            self._missing = None
        except (ParameterError, TypeError) as error:  # TypeError: required options missing
            self.inner = None
            self._missing = error

    def _require(self):
        if self.inner is None:
            raise ValueError(
                f"the {self._dpplugins_name!r} accountant cannot be created without options "
                f"({self._missing}); call dpplugins.integrations.opacus.configure("
                "privacy_engine.accountant, ...)")
        return self.inner

    # -- the ledger -------------------------------------------------------------------------
    @property
    def history(self) -> list:
        """The recorded events (Opacus' ``get_noise_multiplier`` may assign ``(sigma, q, steps)``
        tuples: they are read with the accountant's ``step_event``)."""
        return [] if getattr(self, "inner", None) is None else self.inner.history

    @history.setter
    def history(self, value) -> None:
        self._require().history = value

    @property
    def bound_type(self) -> str:
        return self._require().bound_type

    def supports(self, event: Event) -> bool:
        return self._require().supports(event)

    def check(self, event: Event, context: str = "") -> None:
        """Raise :class:`UnsupportedEventError` (named with this adapter's registry name and the
        accountants that support ``event``) unless the accountant supports it."""
        try:
            self._require().check(event)
        except UnsupportedEventError as error:
            reason = "; ".join(r for r in (error.reason, context) if r)
            raise UnsupportedEventError(error.event, self.mechanism(), reason,
                                        error.supported_by, ledger=error.ledger) from None

    def compose(self, event: Event, count: int = 1) -> "DPPluginsAccountant":
        self._require().compose(event, count)
        return self

    def step(self, *, noise_multiplier: float, sample_rate: float, count: int = 1) -> None:
        """Opacus' interface: ``count`` steps of the accountant's ``step_event`` (Opacus'
        Poisson-subsampled Gaussian unless the accountant was configured with version-0.1
        protocol options)."""
        self._require().step(noise_multiplier=noise_multiplier, sample_rate=sample_rate,
                             count=count)

    def get_epsilon(self, delta: float, **kwargs: Any) -> float:
        if kwargs:
            raise TypeError(f"{self.mechanism()} accountant takes no options in get_epsilon, "
                            f"got {sorted(kwargs)}")
        return self._require().get_epsilon(delta)

    def get_epsilon_bounds(self, delta: float):
        """Certified (lower, upper) epsilon bounds (our extension of Opacus' interface)."""
        return self._require().get_epsilon_bounds(delta)

    def __len__(self) -> int:
        return 0 if getattr(self, "inner", None) is None else len(self.inner)

    @classmethod
    def mechanism(cls) -> str:
        return cls._dpplugins_name

    # -- the step hook ----------------------------------------------------------------------
    def get_optimizer_hook_fn(self, sample_rate: float):
        """Opacus' step hook.  The wrapped ``make_private`` binds it to the event of the loader
        it returned; an unbound hook (attached by hand) records the accountant's
        ``step_event(sigma, sample_rate)`` -- Opacus' meaning of the sample rate."""
        return _StepHook(self, sample_rate)

    def _as_recorded(self, event: Event) -> Event:
        """``event`` (one physical step) as the hook records it: with the accumulation learned
        for this loader's protocol, its logical step."""
        k = self._accumulation
        if (k and k != 1 and isinstance(event, ProtocolEvent)
                and (self._loader_event is None or _same_protocol(self._loader_event, event))):
            try:
                return event.accumulate(k)
            except ParameterError:
                return event
        return event

    def _bind(self, event: Event) -> None:
        if self._loader_event is not None and not _same_protocol(self._loader_event, event):
            self._accumulation = None   # a new sampler: learn its accumulation afresh
        self._loader_event = event

    def _trailing_run_steps(self, logical: ProtocolEvent) -> int:
        """Steps of the trailing run of ``logical``'s protocol in the ledger (passes are cut from
        the first step of that run, :mod:`dpplugins.passes`).  Only the events composed since the
        last call are read: reading the whole ledger at every optimizer step cost O(steps^2)
        (a noise schedule, one distinct event per step: 4,000 steps took 29 s)."""
        inner = self._require()
        ledger = getattr(inner, "_history", None)   # the list compose appends to
        history = ledger if isinstance(ledger, list) else inner.history
        key = logical.protocol_key()
        start, total = 0, 0
        cache = getattr(self, "_run_cache", None)
        if (cache is not None and cache[0] is history and cache[3] == key
                and 0 < cache[1] <= len(history) and history[cache[1] - 1] is cache[2]):
            start, total = cache[1], cache[4]
        total = extend_run(total, history[start:], key)
        if history:
            self._run_cache = (history, len(history), history[-1], key, total)
        return total

    def _check_pass_start(self, batch_sampler) -> None:
        """Called when the loader's batch sampler is iterated anew: the batches of the current
        pass that the sampler has already drawn must be the batches this accountant recorded
        (ParameterError otherwise, before any batch of the new iteration is drawn).

        Torch's samplers start a new permutation (a new pass) on every iteration; ours
        continue their pass from ``position``.  Passes are cut from the recorded steps
        (:mod:`dpplugins.passes`), so a pass cut short (a ``break``, ``max_steps``, a restart
        mid-epoch with a new loader) followed by a fresh permutation would be accounted as one
        pass: the 20 first batches of 20 permutations of 64 examples in batches of 63 were
        accounted as 10 epochs, epsilon 7.51, where the Poisson pair they amount to has a
        certified lower bound of 11.29."""
        event = self._loader_event
        if not isinstance(event, ProtocolEvent) or self.inner is None:
            return
        # compared across ranks at the next optimizer step (:meth:`_compare_ranks`), in
        # distributed training only: there every rank's step meets the others' in the gradient
        # all-reduce, so the comparison cannot wait for a rank that does not come
        self._schedule_to_compare = (_schedule_fingerprint(batch_sampler)
                                     if getattr(self, "_distributed_training", False) else None)
        inner = getattr(batch_sampler, "inner", None)
        drawn = getattr(inner, "position", None) if inner is not None else None
        # torch's samplers start a new pass (permutation) at every iteration; ours at the end of
        # a pass whose last iteration was not resumed after its last batch stand at its end and
        # move on to the next pass when iterated
        per_pass = event.steps_per_epoch
        drawn = 0 if drawn is None else int(drawn) % per_pass
        k = self._accumulation or 1
        plan = accumulation_plan(per_pass, k) if k <= per_pass else (per_pass,)
        logical = self._as_recorded(event)
        position = self._trailing_run_steps(logical) % len(plan) \
            if isinstance(logical, ProtocolEvent) else 0
        done = sum(plan[:position])
        if drawn == done:
            return
        name = self.mechanism()
        if drawn == 0:
            what = (f"a new pass begun after {done} of the {per_pass} batches of the current "
                    "one were trained")
        else:
            what = (f"the sampler continues its pass at batch {drawn} of {per_pass} while {done} "
                    "were trained (a batch drawn but not trained, a skipped batch, set_epoch or "
                    "a restored sampler state)")
        raise ParameterError(
            "data_loader", what,
            f"iterated so that every batch drawn is trained and every pass runs to its end "
            f"before the next begins: the {name!r} accountant cuts passes every {per_pass} "
            "trained batches, so the two would be accounted as one pass (an under-count)",
            "Run every epoch to its end (no break or max_steps inside an epoch; call "
            "optimizer.step() on every batch, empty ones too); resume mid-epoch only with one "
            "of dpplugins' samplers restored from its state_dict; or use Poisson sampling "
            "(poisson_sampling=True) with 'pld', whose steps do not form passes")

    def _compare_ranks(self, settings: tuple | None) -> None:
        """At every optimizer step under torch.distributed (a distributed module in a process
        group of two or more ranks), on every rank alike, before the step is recorded or the
        parameters move: refuse when the ranks do not run one mechanism or one schedule.

        * The mechanism (:func:`_mechanism_settings`): Opacus adds rank 0's noise to the sum
          of the ranks' clipped gradients, each rank clipped to its own ``max_grad_norm``, and
          each rank records its own noise multiplier.  Found by a hostile sweep: rank 1 at
          ``max_grad_norm=10`` beside rank 0 at 1 reported 6.57 where the example on rank 1
          has sensitivity 20 against noise 1 (epsilon 468); ranks at noise multipliers 0.5 and
          2 reported 15.46 and 2.94 for noise 0.5.  Compared at every step (the values may
          change between steps): one all-reduce of two integers, where the ranks meet in
          Opacus' gradient all-reduce anyway.
        * The schedule, at the first step of a pass (``_schedule_to_compare``): explicitly
          different seeds (torch's ``seed=rank``, ours with ``rng=rank``) or ``set_epoch``
          called on some ranks only.  Each rank deals its shard of a global step from its own
          copy of the sampler while the accountant records the global step, so such ranks
          trained some examples several times in one step and others never, accounted as one
          shuffled pass.  What :func:`_replica_disagreement` cannot see at ``make_private``
          without a collective.

        The two are compared together; only when they differ somewhere is the mechanism
        compared alone (every rank sees the same all-reduced result, so every rank makes the
        same number of collective calls)."""
        fingerprint = getattr(self, "_schedule_to_compare", None)
        self._schedule_to_compare = None
        if settings is None or not getattr(self, "_distributed_training", False) \
                or not _process_group_of_two_or_more():
            if fingerprint is not None and _ranks_disagree(fingerprint):
                self._refuse_schedules()
            return
        if not _ranks_disagree((fingerprint, settings, self._dpplugins_name)):
            return
        if _ranks_disagree((settings, self._dpplugins_name)):
            raise ParameterError(
                "optimizer", "an optimizer step whose accountant, noise multiplier, "
                "max_grad_norm, expected batch size, loss reduction or gradient accumulation "
                "differs between ranks",
                "the same on every rank: Opacus adds rank 0's noise to the sum of every "
                "rank's clipped gradients, each clipped with its own max_grad_norm, while each "
                "rank records its own noise multiplier",
                "call make_private with the same noise_multiplier, max_grad_norm, batch size "
                "and accountant on every rank, and change them (a schedule) on every rank "
                "alike")
        self._refuse_schedules()

    def _refuse_schedules(self) -> None:
        """ParameterError: the ranks' samplers do not run one global schedule."""
        raise ParameterError(
            "data_loader", "samplers that differ between ranks (seed, epoch or position)",
            "one global schedule on every rank: each rank deals its shard of a global step "
            "from its own copy of the sampler, so ranks with other seeds or epochs train some "
            "examples twice in a step and others never, which the accountant cannot "
            "describe",
            "give the sampler the same seed on every rank (torch's DistributedSampler: "
            "seed=, the same everywhere; dpplugins' samplers: rng=) and call "
            "set_epoch(epoch) on every rank or on none")

    @staticmethod
    def _check_batch_drawn(hook: _StepHook, accumulated: int) -> None:
        """Refuse an optimizer step that trained batches the loader it was made with did not
        draw: the batches that optimizer's recorded steps trained (``accumulated`` each, as the
        step is recorded) may not outnumber the batches that loader's batch sampler has drawn
        (:func:`_watch_passes`).  The hook records each step as batches of that loader, so
        steps on another loader (a new ``DataLoader`` with another batch size, the loader of
        another ``make_private`` stage, fresh permutations) or on no loader (full-batch steps)
        were accounted as batches of it: 16 full-batch steps with the ``shuffle`` accountant
        reported 6.57 where the 16 Gaussian steps that ran have 24.38 (a hostile sweep).  A
        prefetching loader draws ahead of training, so a batch drawn and never trained (an
        evaluation pass over the loader, a ``break``) leaves room for one step on other data;
        per-pass protocols are also checked at every new iteration
        (:meth:`_check_pass_start`).  Opacus' ``BatchMemoryManager`` trains one drawn batch in
        physical parts and records it once (``accumulated`` 1).  Without a watched loader
        (attached by hand to a loader without a batch sampler) nothing is checked here."""
        sampler = hook.batch_sampler
        if sampler is None:
            return
        drawn = int(sampler.__dict__.get("_dpplugins_drawn", 0))
        if hook.trained + accumulated > drawn:
            what = ("a step before the loader was iterated" if drawn == 0 else
                    f"a step of {accumulated} batch{'es' if accumulated != 1 else ''} after "
                    f"{hook.trained} trained, while the loader has drawn {drawn}")
            raise ParameterError(
                "optimizer.step()", what,
                "a step on batches of the data loader make_private returned with this "
                "optimizer: the accountant records every step as a batch of that loader, so a "
                "step on other data (another DataLoader, a full batch, a loader made again) "
                "would be accounted as a protocol that did not run",
                "train on the loader make_private returned (for x, y in data_loader: ...); to "
                "change the batch size, the sampler or the data, call make_private again and "
                "train with the optimizer and loader it returns")

    def _record_step(self, template: Event | None, sample_rate: float, sigma: float,
                     accumulated: int, hook: _StepHook | None = None,
                     settings: tuple | None = None) -> None:
        self._compare_ranks(settings)
        if hook is not None and hook.event is not None:
            self._check_batch_drawn(hook, accumulated)
        inner = self._require()
        template = template if template is not None else self._loader_event
        learned = self._accumulation
        try:
            if template is None:
                event = inner.step_event(sigma, sample_rate)
                if not getattr(self, "_warned_unbound", False):
                    self._warned_unbound = True
                    warnings.warn(
                        f"the {self.mechanism()!r} accountant's step hook does not know its data "
                        f"loader (attached by hand, not by make_private): it records every step "
                        f"as a {type(event).__name__} (the accountant's reading of "
                        f"sample_rate={sample_rate:g}, Opacus' Poisson sampling unless configured "
                        "otherwise), valid only for a loader that samples that way; for any "
                        "other loader create the optimizer with privacy_engine.make_private, "
                        "which reads the loader", RuntimeWarning, stacklevel=3)
                if accumulated != 1 and isinstance(event, ProtocolEvent):
                    raise ParameterError(
                        "optimizer.accumulated_iterations", accumulated,
                        "1 for a step hook that does not know its data loader",
                        "create the optimizer with privacy_engine.make_private")
                event = event.accumulate(accumulated)
            else:
                step = _with_noise(template, sigma)
                if isinstance(step, ProtocolEvent):
                    event, learned = self._logical_step(step, accumulated)
                else:
                    event = step.accumulate(accumulated)
            self.check(event)
        except ParameterError:
            if sigma != 0.0:
                raise
            event, learned = NonPrivateEvent(), self._accumulation  # no noise: not private
        inner.compose(event)
        self._accumulation = learned
        if hook is not None and hook.event is not None:
            hook.trained += accumulated

    def _logical_step(self, step: ProtocolEvent, accumulated: int) -> tuple[Event, int]:
        """The logical step of ``step`` (one physical batch of a per-pass protocol) for an
        optimizer step over ``accumulated`` batches, checked against :func:`accumulation_plan`;
        returns ``(event, k)`` with ``k`` the batches per step of this run."""
        physical = step.steps_per_epoch
        k = self._accumulation
        if k is None:
            if accumulated > physical:
                raise ParameterError(
                    "optimizer.accumulated_iterations", accumulated,
                    f"at most {physical} (the batches of one pass): this step mixes two passes",
                    hint="call optimizer.step() at least once per pass (epoch)")
            k = accumulated
        logical = step.accumulate(k)
        plan = accumulation_plan(physical, k)
        if not isinstance(logical, ProtocolEvent) or logical.steps_per_epoch != len(plan):
            raise ParameterError(
                "optimizer.accumulated_iterations", accumulated,
                f"an accumulation that {type(step).__name__} describes as a pass of "
                f"{len(plan)} steps", "do not accumulate gradients with this sampler")
        position = self._trailing_run_steps(logical) % len(plan)
        if accumulated != plan[position]:
            r = physical % k
            tail = f"; the last step of a pass takes the remaining {r}" if r else ""
            raise ParameterError(
                "optimizer.accumulated_iterations", accumulated,
                f"{plan[position]} at logical step {position + 1} of {len(plan)} of this pass "
                f"({physical} batches per pass, {k} per optimizer step as on the first "
                f"step{tail})",
                hint=f"call optimizer.step() (then zero_grad) after every k = {k} batches and "
                     "after the last batch of every pass, with the same k throughout; a step "
                     "that mixes batches of two passes is not the protocol the accountant "
                     "describes")
        return logical, k

    # -- state --------------------------------------------------------------------------------
    def state_dict(self, destination=None):
        """Opacus' keys -- ``history`` (our events as JSON dicts) and ``mechanism`` -- plus
        ``dpplugins``: the accountant's options, the library version and the accumulation."""
        state = OrderedDict() if destination is None else destination
        ours = self._require().state_dict()
        state["history"] = ours["events"]
        state["mechanism"] = self.mechanism()
        state["dpplugins"] = {"accountant": ours["accountant"], "version": ours["version"],
                              "options": ours["options"], "accumulation": self._accumulation}
        return state

    def load_state_dict(self, state_dict) -> None:
        """Load what :meth:`state_dict` saved, or a version-0.1 state (``history`` of
        ``(noise_multiplier, sample_rate, steps)`` tuples, read with the accountant's meaning of
        0.1).  Raises ``ValueError`` like Opacus' accountants for an empty state, a missing
        ``history`` or ``mechanism``, or another mechanism's state."""
        if not state_dict:
            raise ValueError("state dict is either None or empty and hence cannot be loaded "
                             "into Privacy Accountant.")
        for key in ("history", "mechanism"):
            if key not in state_dict:
                raise ValueError(f"state_dict does not have the key `{key}`. Cannot be loaded "
                                 "into Privacy Accountant.")
        if state_dict["mechanism"] != self.mechanism():
            raise ValueError(f"state_dict of {state_dict['mechanism']} cannot be loaded into "
                             f"Privacy Accountant with mechanism {self.mechanism()}")
        extra = state_dict.get("dpplugins") or {}
        if not isinstance(extra, dict):
            raise ParameterError("state_dict['dpplugins']", extra, "a dict (accountant, version, "
                                 "options, accumulation) as state_dict() saved it")
        accumulation = extra.get("accumulation")
        if accumulation is not None:   # checked before anything is loaded
            accumulation = check_count("state_dict['dpplugins']['accumulation']", accumulation,
                                       minimum=1)
        options = extra.get("options")
        if options is not None and not isinstance(options, dict):
            raise ParameterError("state_dict['dpplugins']['options']", options, "a dict of options")
        history = state_dict["history"]
        events = (isinstance(history, (list, tuple)) and len(history) > 0
                  and all(isinstance(entry, dict) for entry in history))
        if events and "neighbouring" not in (options or {}):
            # events do not carry the relation (Accountant.load_state_dict): {} re-created the
            # accountant with its defaults, replace_one -> add_remove (2.84 -> 1.83), and keeping
            # ours instead gives the saved run whatever relation this adapter has (a sweep)
            raise ParameterError("state_dict['dpplugins']['options']", options,
                                 "the saved options with the 'neighbouring' relation, as "
                                 "state_dict() writes them (the events do not carry it)")
        if not events and options is not None and "neighbouring" not in options:
            # an empty or version-0.1 history: this adapter's relation (and options) stay,
            # under the options saved -- a {} re-created the accountant with its defaults,
            # replace_one -> add_remove, 2.84 -> 1.83 (a review)
            options = {**self._require().options(), **options} if options else None
        if options is not None and (self.inner is None or options != self.inner.options()):
            inner = create(self._dpplugins_name, **options)
        else:
            inner = create(self._dpplugins_name, **self._require().options())
        history = state_dict["history"]
        if isinstance(history, tuple):
            history = list(history)
        if not isinstance(history, list):
            raise ParameterError("state_dict['history']", history, "a list of event dicts or of "
                                 "(noise_multiplier, sample_rate, steps)")
        ours = {"accountant": extra.get("accountant", inner.name),
                "version": extra.get("version", "0.1"), "options": options or {}}
        if all(isinstance(entry, dict) for entry in history):
            ours["events"] = history
        else:
            ours["history"] = history   # (checked and read by Accountant.load_state_dict)
        inner.load_state_dict(ours)
        self.inner = inner
        if "accumulation" in extra:   # logical steps of this many batches
            self._accumulation = accumulation

    def __reduce__(self):
        # the adapter classes are made by register(): pickle by registry name
        return (_rebuild_adapter, (self._dpplugins_name, dict(self.__dict__)))

    def __copy__(self):
        """A copy with its own ledger (the inner accountant copied, :meth:`Accountant.__copy__`):
        ``copy.copy`` shared it, so a what-if step in the copy was in the original's epsilon
        (a review: 0.199 -> 0.718)."""
        new = _rebuild_adapter(self._dpplugins_name, dict(self.__dict__))
        if getattr(self, "inner", None) is not None:
            new.inner = copy.copy(self.inner)
        return new


#: watched subclasses of batch sampler classes (one per class)
_WATCHED: dict[type, type] = {}


def _watch_passes(loader, adapter: "DPPluginsAccountant", event: Event) -> None:
    """Make every new iteration of ``loader``'s batch sampler call
    ``adapter._check_pass_start`` first, and count the batches it draws
    (:meth:`DPPluginsAccountant._check_batch_drawn`; ``event``: the loader's step, for the
    Poisson rate check of :func:`_counted`).  The batch sampler is iterated by the loader
    itself and by Opacus' ``BatchMemoryManager`` (which wraps it), so that is where a new pass
    begins.  The instance gets a subclass of its own class that only adds that call
    and the count (same state, same batches otherwise); loaders without a batch sampler are
    left alone."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    if batch_sampler is None:
        return
    cls = type(batch_sampler)
    if not getattr(cls, "_dpplugins_watched", False):
        watched = _WATCHED.get(cls)
        if watched is None:
            def __iter__(self, _base=cls, _empty_too=_skips_empty_draws(cls)):
                adapter_ = self.__dict__.get("_dpplugins_adapter")
                if adapter_ is None:
                    return _base.__iter__(self)
                adapter_._check_pass_start(self)
                draws = _distributed_poisson_draws(self) if _empty_too else _base.__iter__(self)
                return _counted(draws, self)

            def __reduce_ex__(self, protocol, _base=cls):
                # copies and pickles are of the plain class, unwatched
                state = {k: v for k, v in self.__dict__.items()
                         if k not in ("_dpplugins_adapter", "_dpplugins_drawn",
                                      "_dpplugins_event")}
                return _unwatched, (_base, state)

            watched = type(cls.__name__, (cls,), {"__iter__": __iter__,
                                                  "__reduce_ex__": __reduce_ex__,
                                                  "_dpplugins_watched": True,
                                                  "__module__": cls.__module__,
                                                  "__qualname__": cls.__qualname__})
            _WATCHED[cls] = watched
        try:
            batch_sampler.__class__ = watched
        except TypeError:   # pragma: no cover - a batch sampler with __slots__
            return
    batch_sampler.__dict__["_dpplugins_adapter"] = adapter
    batch_sampler.__dict__["_dpplugins_event"] = event
    batch_sampler.__dict__.setdefault("_dpplugins_drawn", 0)


def _skips_empty_draws(cls) -> bool:
    """Whether ``cls`` iterates as Opacus' ``DistributedUniformWithReplacementSampler``."""
    try:
        from opacus.utils.uniform_sampler import DistributedUniformWithReplacementSampler
    except ImportError:   # pragma: no cover - other Opacus versions
        return False
    return getattr(cls, "__iter__", None) is DistributedUniformWithReplacementSampler.__iter__


def _distributed_poisson_draws(sampler):
    """The draws of Opacus' ``DistributedUniformWithReplacementSampler``, the empty ones
    included.  Opacus (1.6) deals each rank a fixed shard of the dataset (a permutation drawn
    from ``shuffle_seed + epoch``, every ``num_replicas``-th position from ``rank``) and keeps
    each example of the shard with probability ``sample_rate`` at every step, but yields a
    step only when this rank's draw is not empty.  So the ranks ran different numbers of
    steps, their gradient all-reduces paired unrelated draws, the rank with more steps died at
    the end, and the released steps were draws conditioned on being non-empty, not Poisson
    ones (a hostile sweep: 3 examples on 2 ranks at rate 0.05, the one example of rank 1 in
    every one of 6 steps, 1.48 reported where those steps have 30.2).  Here every rank yields
    every one of the ``len(sampler)`` steps, empty or not (Opacus' ``DPDataLoader`` collates an
    empty batch, and the optimizer steps on it).

    The masks must also be independent between ranks.  Opacus draws each rank's from
    ``sampler.generator`` (the loader's, or torch's global one), which is the same on every
    rank when the ranks seed alike -- torch's global generator starts from one fixed seed in
    every process, and ``DataLoader(generator=torch.Generator().manual_seed(0))`` is common --
    so two ranks' examples were kept or dropped together, or along one stream shifted against
    the other (a review: an example and its partner on the other rank kept together, 1000 steps
    at rate 0.01 and sigma 1 have epsilon 10.37 where the Poisson steps have 1.83).  Here each
    pass draws 4 x 62 bits from that generator, and each rank derives its masks from them and
    its rank (numpy's ``SeedSequence(bits, spawn_key=(rank,))``, PCG64): distinct ranks get
    independent streams whatever their generators' states, as secret as that generator.  The
    union of the ranks' draws of a step keeps each example independently with probability
    ``sample_rate``, the Poisson step the accountant records."""
    import torch

    total, replicas, rank = int(sampler.total_size), int(sampler.num_replicas), int(sampler.rank)
    if sampler.shuffle:
        order = torch.randperm(total, generator=torch.Generator().manual_seed(
            int(sampler.shuffle_seed) + int(sampler.epoch)))
    else:
        order = torch.arange(total)
    shard = order[rank:total:replicas]
    generator = sampler.generator
    where = {} if generator is None else {"generator": generator, "device": generator.device}
    bits = [int(x) for x in torch.randint(0, 2**62, (4,), **where).tolist()]
    stream = np.random.default_rng(np.random.SeedSequence(bits, spawn_key=(rank,)))
    rate = float(sampler.sample_rate)
    for _ in range(int(sampler.num_batches)):
        yield shard[torch.from_numpy(stream.random(len(shard)) < rate)]


def _counted(batches, batch_sampler):
    """``batches`` of the watched ``batch_sampler`` as they are drawn, each counted before it is
    handed on.  A Poisson sampler whose ``sample_rate`` was changed in place since
    ``make_private`` read it is refused before its batch is trained: the hook records the rate
    it read (a rate set to 0.5 after make_private at 0.125 was accounted as 16 steps at 0.125,
    epsilon 4.02, where the steps that ran have 13.38 -- a hostile sweep)."""
    for batch in batches:
        event = batch_sampler.__dict__.get("_dpplugins_event")
        rate = getattr(batch_sampler, "sample_rate", None)
        if (isinstance(event, PoissonSampledEvent) and rate is not None
                and float(rate) != float(event.sample_rate)):
            raise ParameterError(
                "data_loader.batch_sampler.sample_rate", rate,
                f"{float(event.sample_rate)!r}, the sample rate make_private read from the "
                "loader (the accountant records every step at it)",
                "call make_private again with a loader of the new rate to change it")
        batch_sampler.__dict__["_dpplugins_drawn"] = \
            batch_sampler.__dict__.get("_dpplugins_drawn", 0) + 1
        yield batch


def _unwatched(cls: type, state: dict):
    """A batch sampler of class ``cls`` with ``state`` (the copy of a watched one)."""
    obj = cls.__new__(cls)
    obj.__dict__.update(state)
    return obj


def _adapter_class(name: str) -> type:
    """The Opacus adapter class of our accountant ``name`` (created once)."""
    if name not in _ADAPTERS:
        _opacus()
        from opacus.accountants import IAccountant

        cls_name = f"Opacus{get_class(name).__name__}"
        _ADAPTERS[name] = type(cls_name, (DPPluginsAccountant, IAccountant),
                               {"_dpplugins_name": name, "__doc__": get_class(name).__doc__,
                                "__module__": __name__, "__qualname__": cls_name})
    return _ADAPTERS[name]


def _rebuild_adapter(name: str, state: dict) -> DPPluginsAccountant:
    adapter = object.__new__(_adapter_class(name))
    adapter.__dict__.update(state)
    return adapter


def configure(accountant, **options: Any) -> None:
    """Re-create the wrapped accountant of an Opacus adapter with ``options`` (keeps the
    events), e.g. ``configure(privacy_engine.accountant, eps_tolerance=1e-4)``."""
    if not isinstance(accountant, DPPluginsAccountant):
        raise TypeError(f"{type(accountant).__name__} is not a dpplugins accountant")
    history = list(accountant.history)
    inner = create(accountant.mechanism(), **options)
    inner.history = history
    accountant.inner = inner


def steps_for_epochs(epochs: float, sample_rate: float) -> int:
    """Steps in ``epochs`` epochs at ``sample_rate = 1 / steps per epoch``, never too few.

    Opacus computes ``int(epochs / sample_rate)``, which floating point can put one below the
    steps actually run (``int(1 / (1 / 93)) == 92``), so a noise multiplier calibrated for it
    misses the target.  Here a quotient within ``1e-9`` (relative) of an integer is that
    integer, and any other is rounded up (a partial last epoch is run to its end or stopped;
    counting it in full is the conservative choice).

    Example::

        >>> steps_for_epochs(1, 1 / 93)
        93
    """
    epochs = check_positive("epochs", epochs)
    sample_rate = check_probability("sample_rate", sample_rate)
    quotient = epochs / sample_rate
    if not math.isfinite(quotient):
        raise ParameterError("epochs", epochs, f"at most {sys.float_info.max * sample_rate:.4g} "
                             f"at sample_rate={sample_rate:g} (steps beyond the float range)")
    nearest = round(quotient)
    if abs(quotient - nearest) <= 1e-9 * max(1.0, quotient):
        return max(1, int(nearest))
    return max(1, math.ceil(quotient))


def _get_noise_multiplier(*, target_epsilon, target_delta, sample_rate, epochs=None, steps=None,
                          accountant="rdp", epsilon_tolerance=0.01, **kwargs):
    """Opacus' ``get_noise_multiplier`` signature; our accountants calibrate the run it
    describes -- ``steps`` Poisson-subsampled Gaussian steps at ``sample_rate`` -- with our
    calibration (an accountant that does not support Poisson sampling raises
    :class:`UnsupportedEventError`)."""
    if accountant not in OURS:
        return _ORIGINAL_GET_NOISE_MULTIPLIER(
            target_epsilon=target_epsilon, target_delta=target_delta, sample_rate=sample_rate,
            epochs=epochs, steps=steps, accountant=accountant,
            epsilon_tolerance=epsilon_tolerance, **kwargs)
    if (steps is None) == (epochs is None):
        raise ValueError("get_noise_multiplier takes as input EITHER a number of steps or a "
                         "number of epochs")
    if steps is None:
        steps = steps_for_epochs(epochs, sample_rate)
    from dpplugins.calibration import find_noise_multiplier

    steps = check_count("steps", steps, minimum=1)
    return find_noise_multiplier(
        target_epsilon=target_epsilon, delta=target_delta, accountant=accountant,
        event_for_noise=lambda s: SelfComposedEvent(
            PoissonSampledEvent(sample_rate, GaussianEvent(s)), steps))


# -- PrivacyEngine: refusal at set-up -------------------------------------------------------------
def _poisson_hint(poisson_sampling: bool) -> str:
    return ("make_private(poisson_sampling=True) replaces the loader by Opacus' Poisson "
            "DPDataLoader; for this accountant pass poisson_sampling=False with a loader of the "
            "sampler it describes" if poisson_sampling else "")


def _check_clipping_norm(max_grad_norm) -> None:
    """ParameterError unless ``max_grad_norm`` is a finite number > 0, or a list of them (per
    layer).  NaN was accepted at set-up and the first step failed with a NumericalError that
    named neither the parameter nor its value (a hostile sweep)."""
    def scalar(value):   # a one-element tensor or array is read as its number
        size = getattr(value, "numel", getattr(value, "size", None))
        size = size() if callable(size) else size
        return value.item() if size == 1 and hasattr(value, "item") else value

    if isinstance(max_grad_norm, (list, tuple)):
        if not max_grad_norm:
            raise ParameterError("max_grad_norm", max_grad_norm,
                                 "a finite number > 0 or a non-empty list of them (per layer)")
        for i, value in enumerate(max_grad_norm):
            check_positive(f"max_grad_norm[{i}]", scalar(value))
    else:
        check_positive("max_grad_norm", scalar(max_grad_norm))


def _private(engine, original, arguments: dict, step_event=None):
    """``make_private`` with the loader's event checked before and bound after.

    ``arguments``: the bound arguments of ``make_private`` (with ``kwargs``);
    ``step_event``: a one-step event that replaces the loader's (PNSGD)."""
    accountant = engine.accountant
    ours = isinstance(accountant, DPPluginsAccountant)
    call = {k: v for k, v in arguments.items() if k not in ("self", "kwargs")}
    call.update(arguments.get("kwargs", {}))
    sigma = arguments["noise_multiplier"]
    poisson = arguments["poisson_sampling"]
    if ours:
        disagreement = "" if poisson else _replica_disagreement(arguments["data_loader"],
                                                               arguments.get("module"))
        if disagreement:
            raise ParameterError("data_loader", "this rank's sampler", "this rank's part of one "
                                 f"global schedule: {disagreement}",
                                 "shard the data across ranks: torch's DataLoader with "
                                 "sampler=DistributedSampler(dataset, seed=<same on every "
                                 "rank>), or one of dpplugins' samplers built after "
                                 "init_process_group on every rank, with its default "
                                 "num_replicas and rank and the same seed")
        _check_clipping_norm(arguments.get("max_grad_norm"))
        predicted = step_event if step_event is not None else loader_event(
            arguments["data_loader"], sigma, poisson_sampling=poisson)
        # before Opacus touches anything
        accountant.check(accountant._as_recorded(predicted), _poisson_hint(poisson))
    result = original(engine, **call)
    optimizer, returned = result[1], result[-1]
    event = step_event if step_event is not None else loader_event(returned, sigma)
    if ours:
        accountant.check(accountant._as_recorded(event))
        _watch_passes(returned, accountant, event)
        hook = getattr(optimizer, "step_hook", None)
        if isinstance(hook, _StepHook) and hook.adapter is accountant:
            hook.bind(event, returned)
        accountant._bind(event)
        accountant._distributed_training = _distributed_module(arguments.get("module"))
        _count_non_finite_as_zero(optimizer)
    else:
        name = accountant.mechanism()
        _warn_for_opacus_accountant(name, event, stacklevel=4)
        if _opacus_reads(event):
            _warn_on_poisson_accumulation(optimizer, name)
    return result


def _wrap_make_private(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def make_private(self, *args, **kwargs):
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            return original(self, *args, **kwargs)   # Opacus' own error
        bound.apply_defaults()
        return _private(self, original, dict(bound.arguments))

    make_private._dpplugins_wrapped = True
    return make_private


def _wrap_make_private_with_epsilon(original):
    signature = inspect.signature(original)

    @functools.wraps(original)
    def make_private_with_epsilon(self, *args, **kwargs):
        accountant = self.accountant
        try:
            bound = signature.bind(self, *args, **kwargs)
        except TypeError:
            return original(self, *args, **kwargs)
        if not isinstance(accountant, DPPluginsAccountant):
            return original(self, *args, **kwargs)  # Opacus' search; make_private warns
        bound.apply_defaults()
        a = dict(bound.arguments)
        loader, poisson, epochs = a["data_loader"], a["poisson_sampling"], a["epochs"]

        def run(sigma):
            return loader_event(loader, sigma, epochs=epochs, poisson_sampling=poisson)

        accountant.check(run(1.0), _poisson_hint(poisson))   # refuse before calibrating
        if len(accountant) > 0:
            warnings.warn(
                "You're calling make_private_with_epsilon with non-zero privacy budget "
                "already spent. Returned noise_multiplier assumes zero starting point, "
                "so your overall privacy budget will be higher.", stacklevel=2)
        from dpplugins.calibration import find_noise_multiplier

        sigma = find_noise_multiplier(target_epsilon=a["target_epsilon"],
                                      delta=a["target_delta"], accountant=accountant.mechanism(),
                                      event_for_noise=run, **accountant.inner.options())
        return self.make_private(
            module=a["module"], optimizer=a["optimizer"], data_loader=loader,
            criterion=a["criterion"], noise_multiplier=sigma, max_grad_norm=a["max_grad_norm"],
            batch_first=a["batch_first"], loss_reduction=a["loss_reduction"],
            noise_generator=a["noise_generator"], grad_sample_mode=a["grad_sample_mode"],
            poisson_sampling=poisson, clipping=a["clipping"], wrap_model=a["wrap_model"],
            **a.get("kwargs", {}))

    make_private_with_epsilon._dpplugins_wrapped = True
    return make_private_with_epsilon


def register() -> tuple[str, ...]:
    """Register our accountants with Opacus (idempotent) and wrap ``PrivacyEngine``'s
    ``make_private`` / ``make_private_with_epsilon`` (module docstring); returns the names
    registered.  Accountants added to :mod:`dpplugins.accountants` later are picked up by
    calling it again."""
    global OURS, _ORIGINAL_GET_NOISE_MULTIPLIER, _ORIGINAL_MAKE_PRIVATE
    global _ORIGINAL_MAKE_PRIVATE_WITH_EPSILON
    _opacus()
    from opacus import privacy_engine
    from opacus.accountants import registry, utils

    names = []
    for name in available():
        existing = registry._ACCOUNTANTS.get(name)
        if existing is not None and not issubclass(existing, DPPluginsAccountant):
            continue  # never shadow Opacus' own accountants
        if existing is None:
            registry.register_accountant(name, _adapter_class(name))
        names.append(name)
    OURS = tuple(names)
    if _ORIGINAL_GET_NOISE_MULTIPLIER is None:
        _ORIGINAL_GET_NOISE_MULTIPLIER = utils.get_noise_multiplier
        # privacy_engine imported the function by name; point both places at the dispatcher
        utils.get_noise_multiplier = _get_noise_multiplier
        privacy_engine.get_noise_multiplier = _get_noise_multiplier
    engine = privacy_engine.PrivacyEngine
    if not getattr(engine.make_private, "_dpplugins_wrapped", False):
        _ORIGINAL_MAKE_PRIVATE = engine.make_private
        engine.make_private = _wrap_make_private(engine.make_private)
    if not getattr(engine.make_private_with_epsilon, "_dpplugins_wrapped", False):
        _ORIGINAL_MAKE_PRIVATE_WITH_EPSILON = engine.make_private_with_epsilon
        engine.make_private_with_epsilon = _wrap_make_private_with_epsilon(
            engine.make_private_with_epsilon)
    return OURS


# -- which accountants are valid ------------------------------------------------------------------
def is_random_allocation(sampler) -> bool:
    """True when ``sampler``'s event is random allocation (what ``balls_and_bins`` accounts):
    every example in exactly one uniformly random step of each pass, all of a step's examples
    used (:func:`dpplugins.accountants.balls_and_bins.allocation_of`)."""
    from dpplugins.accountants.balls_and_bins import allocation_of
    from dpplugins.events import RandomAllocationEvent

    emit = getattr(sampler, "event", None)
    return callable(emit) and isinstance(allocation_of(emit(1.0)), RandomAllocationEvent)


def _opacus_own() -> tuple[str, ...]:
    from opacus.accountants import registry

    return tuple(sorted(name for name, cls in registry._ACCOUNTANTS.items()
                        if not issubclass(cls, DPPluginsAccountant)))


def valid_accountants(data_loader) -> tuple[str, ...]:
    """Registry names of the accountants that support ``data_loader``'s event
    (:func:`dpplugins.accountants.supporting` of :func:`loader_event`), then Opacus' own
    accountants when the loader samples Poisson batches (the steps they describe)."""
    event = loader_event(data_loader, 1.0)
    names = supporting(event)
    if _opacus_reads(event):
        names += tuple(name for name in _opacus_own() if name not in names)
    return names


def _warn_for_opacus_accountant(name: str, event: Event, stacklevel: int = 3) -> None:
    if _opacus_reads(event):
        return
    valid = ", ".join(supporting(event)) or "none"
    warnings.warn(f"accountant {name!r} is not valid for {_describe(event)}: Opacus' "
                  "accountants assume Poisson sampling, so its epsilon is not a guarantee for "
                  f"this training. Valid: {valid}", UserWarning, stacklevel=stacklevel)


def check_sampler(accountant_name: str, data_loader) -> None:
    """Check accountant ``accountant_name`` against ``data_loader``'s event (:func:`loader_event`).

    One of our accountants (any name in :func:`dpplugins.accountants.available`) raises
    :class:`UnsupportedEventError` naming the accountants that support the loader; one of
    Opacus' own (which assume Poisson sampling) warns on a loader that is not Poisson, naming
    the valid accountants.  ``make_private`` does this by itself; this function is for loaders
    built otherwise.
    """
    if accountant_name not in available() and accountant_name not in _opacus_own():
        raise ParameterError("accountant_name", accountant_name,
                             "one of dpplugins' accountants (" + ", ".join(available())
                             + ") or Opacus' own (" + ", ".join(_opacus_own()) + ")")
    event = loader_event(data_loader, 1.0)
    if accountant_name in available():
        try:
            create(accountant_name).check(event)
        except UnsupportedEventError as error:
            raise UnsupportedEventError(error.event, accountant_name, error.reason,
                                        error.supported_by) from None
        return
    _warn_for_opacus_accountant(accountant_name, event)


def attach(privacy_engine, data_loader, optimizer=None) -> None:
    """A re-check, kept for scripts of version 0.1: ``make_private`` now reads the loader by
    itself.  With our accountant the loader's event is checked (UnsupportedEventError) and must
    be the one ``make_private`` bound (else :class:`ParameterError`: account the loader you
    train on); a hook made without ``make_private`` is bound to it.  With Opacus' own accountant
    :func:`check_sampler` warns for a loader that is not Poisson, and with ``optimizer`` a
    watcher warns once about accumulated Poisson batches.
    """
    accountant = privacy_engine.accountant
    bound = getattr(accountant, "_loader_event", None)
    sigma = (float(optimizer.noise_multiplier) if optimizer is not None
             else getattr(getattr(bound, "event", None), "noise_multiplier", 1.0))
    event = loader_event(data_loader, sigma)
    if isinstance(accountant, DPPluginsAccountant):
        accountant.check(accountant._as_recorded(event))
        if bound is not None and not _same_protocol(bound, event):
            raise ParameterError(
                "data_loader", _describe(event),
                f"the loader make_private returned ({_describe(bound)})",
                "the accountant records the steps of the loader make_private returned; train "
                "on that loader")
        if bound is None:
            accountant._bind(event)
        _watch_passes(data_loader, accountant, event)
        hook = getattr(optimizer, "step_hook", None)
        if isinstance(hook, _StepHook) and hook.adapter is accountant and hook.event is None:
            hook.bind(event, data_loader)
        if hasattr(optimizer, "clip_and_accumulate"):
            # a DP optimizer made without make_private: count non-finite examples as zero there too
            _count_non_finite_as_zero(optimizer)
        return
    name = accountant.mechanism()
    _warn_for_opacus_accountant(name, event)
    if optimizer is not None and _opacus_reads(event):
        _warn_on_poisson_accumulation(optimizer, name)


def _warn_on_poisson_accumulation(optimizer, accountant_name: str) -> None:
    """Chain a step hook on ``optimizer`` that warns once when Opacus' accountant
    ``accountant_name`` records an optimizer step over several accumulated Poisson batches."""
    previous = getattr(optimizer, "step_hook", None)
    if getattr(previous, "_dpplugins_poisson_watch", False):
        return  # already watching

    def hook(optim) -> None:
        accumulated = int(optim.accumulated_iterations)
        if accumulated > 1 and not hook.warned:
            hook.warned = True
            warnings.warn(
                f"Opacus' {accountant_name!r} accountant records this optimizer step over "
                f"{accumulated} accumulated Poisson batches as one step at sample rate "
                f"{accumulated} * q, which may under-report the privacy loss (an example can be "
                f"in several of the batches); use accountant='pld' (dpplugins), which records "
                f"{accumulated} steps with noise multiplier sigma / sqrt({accumulated})",
                UserWarning, stacklevel=2)
        if previous is not None:
            previous(optim)

    hook.warned = False
    hook._dpplugins_poisson_watch = True
    optimizer.attach_step_hook(hook)


# -- samplers ---------------------------------------------------------------------------------
def torch_batch_sampler(sampler):
    """A ``torch.utils.data.Sampler`` of index lists over one of our samplers
    (:mod:`dpplugins.samplers`): ``len`` = steps per epoch, ``scheme``, ``num_examples`` and
    ``event`` are passed through, and an empty step (a check-in dummy update) is an empty
    list."""
    import torch

    class _BatchSampler(torch.utils.data.Sampler):
        def __init__(self, inner):
            self.inner = inner
            self.scheme = inner.scheme
            self.num_examples = inner.num_examples

        def event(self, noise_multiplier: float, epochs=1):
            return self.inner.event(noise_multiplier, epochs)

        def __len__(self) -> int:
            return len(self.inner)

        def __iter__(self):
            for batch in self.inner:
                yield [int(i) for i in batch]

    return _BatchSampler(sampler)


def make_data_loader(dataset, sampler, *, collate_fn=None, **loader_options):
    """A ``DataLoader`` that draws its batches from one of our samplers, for
    ``make_private(..., poisson_sampling=False)``.  Empty batches (dummy updates) become
    zero-length tensors shaped like the dataset's items, so Opacus adds noise only."""
    import torch
    from opacus.data_loader import wrap_collate_with_empty
    from torch.utils.data.dataloader import default_collate

    if len(dataset) != sampler.num_examples:
        raise ParameterError("sampler.num_examples", sampler.num_examples,
                             f"equal to len(dataset) = {len(dataset)}")
    first = dataset[0]
    items = first if isinstance(first, (tuple, list)) else (first,)
    shapes = [(0, *torch.as_tensor(x).shape) for x in items]  # zero-length batch per item
    dtypes = [torch.as_tensor(x).dtype for x in items]
    wrapped = wrap_collate_with_empty(collate_fn=collate_fn or default_collate,
                                      sample_empty_shapes=shapes, dtypes=dtypes)
    return torch.utils.data.DataLoader(dataset, batch_sampler=torch_batch_sampler(sampler),
                                       collate_fn=wrapped, **loader_options)


# -- gradient accumulation -------------------------------------------------------------------
def poisson_accumulation_noise(noise_multiplier: float, accumulation: int) -> float:
    """Noise multiplier ``sigma / sqrt(k)`` of each of the ``k`` Poisson steps whose composition
    dominates one optimizer step over ``k`` accumulated Poisson batches with noise multiplier
    ``sigma`` (:meth:`dpplugins.events.PoissonSampledEvent.accumulate`, which the step hook
    uses): the step's output has the law of the sum of ``k`` independent steps with noise
    ``N(0, sigma^2 C^2 / k I)``, a post-processing of their composition (Dwork & Roth 2014,
    Prop. 2.1).  Rounded down by one ulp; ``k = 1`` returns ``sigma`` unchanged.

    Example::

        >>> round(poisson_accumulation_noise(1.0, 4), 12)
        0.5
    """
    from dpplugins.errors import check_positive

    sigma = check_positive("noise_multiplier", noise_multiplier)
    k = check_count("accumulation", accumulation, minimum=1)
    merged = PoissonSampledEvent(1.0, GaussianEvent(sigma)).accumulate(k)
    return sigma if k == 1 else merged.event.event.noise_multiplier


def accumulation_plan(physical_steps: int, accumulation: int) -> tuple[int, ...]:
    """Physical batches in each optimizer step of one pass when ``accumulation`` (k) batches
    are accumulated per step and the pass of ``physical_steps`` (T) batches ends with a step:
    ``floor(T/k)`` steps of k, then one of ``T mod k`` if that is not 0 -- ``ceil(T/k)`` steps.

    Example::

        >>> accumulation_plan(7, 2)
        (2, 2, 2, 1)
    """
    T = check_count("physical_steps", physical_steps, minimum=1)
    k = check_count("accumulation", accumulation, minimum=1)
    return (k,) * (T // k) + ((T % k,) if T % k else ())


def logical_sampler(sampler, accumulation: int, *, name: str = "accumulation"):
    """The sampler whose batches are the *logical* batches when ``accumulation`` (k) consecutive
    batches of ``sampler`` go into one noisy optimizer step (:func:`accumulation_plan`: the last
    step of a pass takes the remaining batches).  It describes the protocol; it is not used to
    draw batches (the step hook uses the events' own
    :meth:`~dpplugins.events.Event.accumulate`, which agrees with it).  Raises
    :class:`ParameterError` (naming ``name``) when the accumulated protocol is not described.

    * ``ShuffledEpochs(n, b)`` -> ``ShuffledEpochs(n, k b)``, ``ceil(ceil(n / b) / k)`` steps
      per epoch (nested ceilings, Graham, Knuth, Patashnik, *Concrete Mathematics*, eq. (3.11));
      with ``drop_last=True`` only when ``k`` divides ``T = floor(n / b)``.
    * ``RandomCheckIn`` with ``checkin_probability = 1`` and ``k`` dividing ``m = num_slots``:
      the averaged protocol (Balle et al. 2020, Alg. 2, Thm 4.1) with ``m / k`` slots and at most
      ``k * max_batch_size`` examples per step; uncapped averaged (random allocation) stays
      uncapped.  Refused: ``checkin_probability < 1``, ``k`` not dividing ``m``.
    * ``SlidingWindowCheckIn``: refused (Thm 4.3 covers one example per step).

    Example::

        >>> from dpplugins.samplers import ShuffledEpochs
        >>> logical_sampler(ShuffledEpochs(200, 32), 2).batch_size
        64
    """
    k = check_count(name, accumulation, minimum=1)
    if k == 1:
        return sampler
    from dpplugins.samplers import RandomCheckIn, ShuffledEpochs

    steps = len(sampler)
    if sampler.scheme == "shuffled_epochs":
        if sampler.drop_last and steps % k:
            raise ParameterError(
                name, k, f"a divisor of the {steps} batches per epoch of {sampler!r} "
                "(with drop_last=True a shorter last accumulation is not a shuffled-epochs "
                "pass of larger batches)", hint="use drop_last=False or such a k")
        logical = ShuffledEpochs(sampler.num_examples, k * sampler.batch_size,
                                 drop_last=sampler.drop_last, rng=0)
    elif sampler.scheme == "random_checkin":
        if sampler.checkin_probability != 1.0:
            raise ParameterError(
                name, k, f"1 for {sampler!r}: a merged step holds up to {k} "
                "examples, which Thm 3.2 (one example per step) does not cover, and Thm 4.1 "
                "(averaged updates) needs checkin_probability = 1",
                hint="do not accumulate, or use checkin_probability=1.0")
        if steps % k:
            raise ParameterError(
                name, k, f"a divisor of num_slots={steps} (otherwise the last merged "
                "slot is less likely than the others: not a uniform check-in)",
                hint="choose num_slots as a multiple of the accumulation")
        logical = RandomCheckIn(sampler.num_examples, steps // k, checkin_probability=1.0,
                                variant="averaged", max_batch_size=k * sampler.max_batch_size,
                                rng=0)
    else:
        raise ParameterError(
            name, k, f"1 for {sampler!r} (Balle et al. 2020, Thm 4.3 covers one "
            "example per step; merged sliding-window slots are not that protocol)",
            hint="do not accumulate gradients with the sliding-window sampler")
    if len(logical) != len(accumulation_plan(steps, k)):  # pragma: no cover - identity above
        raise AssertionError(f"logical steps {len(logical)} != ceil({steps}/{k})")
    return logical


# -- PNSGD under Opacus ---------------------------------------------------------------------------
def _check_plain_sgd(param_groups) -> None:
    """ParameterError unless every group runs plain SGD steps ``theta - eta g``: no momentum
    (each example would keep moving later iterates), no Nesterov, no weight decay, no
    maximisation -- the algorithm whose amplification by iteration the pnsgd accountant
    bounds (:mod:`dpplugins.amplification.iteration`)."""
    for group in param_groups:
        for option, plain in (("momentum", 0), ("nesterov", False), ("weight_decay", 0),
                              ("maximize", False)):
            value = group.get(option, plain)
            if value != plain:
                raise ParameterError(f"optimizer {option}", value, f"{plain!r} (plain SGD "
                                     "steps, the algorithm the pnsgd accountant analyses)",
                                     f"create torch.optim.SGD without {option}")


def make_private_pnsgd(privacy_engine, *, module, optimizer, data_loader, noise_multiplier: float,
                       max_grad_norm: float, diameter: float, variant: str = "shuffled",
                       smoothness: float | None = None):
    """Projected noisy SGD with Opacus' per-sample gradients and the ``pnsgd`` accountant.

    The loader must give one example per step in a fresh random order every pass
    (``batch_size=1, shuffle=True``: ``ShuffledEpochsEvent`` with batch size 1).  Opacus clips the
    example's gradient to ``max_grad_norm`` (= L), adds ``N(0, (noise_multiplier L)^2)`` and the
    wrapped SGD steps with its ``lr`` (= eta); after every step the parameters are projected
    onto the centred ball of diameter ``diameter`` (= D_K), which is the algorithm of
    :mod:`dpplugins.amplification.iteration`.  Every step is recorded as a
    :class:`~dpplugins.events.PNSGDEvent` built from these same numbers (one source of truth).
    The engine's accountant must support it (``PrivacyEngine(accountant="pnsgd")`` or a user's
    accountant that does).  Returns ``(module, optimizer, data_loader)`` like ``make_private``.
    """
    import torch

    if _ORIGINAL_MAKE_PRIVATE is None:
        register()
    accountant = privacy_engine.accountant
    if not isinstance(accountant, DPPluginsAccountant):
        raise ParameterError("privacy_engine.accountant", accountant.mechanism(),
                             "a dpplugins accountant that supports PNSGDEvent (create the "
                             "engine with PrivacyEngine(accountant='pnsgd'))")
    step = loader_event(data_loader, noise_multiplier)
    if not (isinstance(step, ShuffledEpochsEvent) and step.batch_size == 1):
        raise ParameterError("data_loader", _describe(step),
                             "a loader of one example per step in a fresh random order "
                             "(DataLoader(dataset, batch_size=1, shuffle=True))")
    learning_rates = {group["lr"] for group in optimizer.param_groups}
    if len(learning_rates) != 1 or not isinstance(optimizer, torch.optim.SGD):
        raise ParameterError("optimizer", type(optimizer).__name__,
                             "torch.optim.SGD with one learning rate (the theory's eta)")
    _check_plain_sgd(optimizer.param_groups)
    n = step.dataset_size
    learning_rate = learning_rates.pop()
    event = PNSGDEvent(n, Fraction(1, n), GaussianEvent(noise_multiplier),
                       lipschitz=max_grad_norm, diameter=diameter,
                       learning_rate=learning_rate, variant=variant,
                       smoothness=smoothness)
    signature = inspect.signature(_ORIGINAL_MAKE_PRIVATE)
    bound = signature.bind(privacy_engine, module=module, optimizer=optimizer,
                           data_loader=data_loader, noise_multiplier=noise_multiplier,
                           max_grad_norm=max_grad_norm, poisson_sampling=False)
    bound.apply_defaults()
    module, optimizer, data_loader = _private(privacy_engine, _ORIGINAL_MAKE_PRIVATE,
                                              dict(bound.arguments), step_event=event)
    from dpplugins.integrations.pnsgd import project_onto_ball

    params = [p for group in optimizer.param_groups for p in group["params"]]
    original_step = optimizer.step

    def step_then_project(self, *args, **kwargs):
        # the recorded event fixes eta and plain SGD: a scheduler or a changed group is refused
        # before the step (StepLR drove lr to 5e-13 while every step was recorded at 0.5)
        for group in optimizer.param_groups:
            if group["lr"] != learning_rate:
                raise ParameterError("lr", group["lr"], f"the learning rate make_private_pnsgd "
                                     f"recorded, {learning_rate!r}, in every group",
                                     "the pnsgd accountant assumes a constant step size; do not "
                                     "use a learning-rate scheduler")
        _check_plain_sgd(optimizer.param_groups)
        if getattr(optimizer, "max_grad_norm", max_grad_norm) != max_grad_norm:
            # the recorded event's Lipschitz constant is the clipping norm made private with
            raise ParameterError("optimizer.max_grad_norm", optimizer.max_grad_norm,
                                 f"the clipping norm make_private_pnsgd recorded, "
                                 f"{max_grad_norm!r}",
                                 "the pnsgd accountant's Lipschitz constant is that norm; "
                                 "call make_private_pnsgd again to change it")
        result = original_step(*args, **kwargs)
        project_onto_ball(params, diameter)
        return result

    # a bound method, as torch's learning-rate schedulers expect of optimizer.step
    optimizer.step = types.MethodType(step_then_project, optimizer)
    return module, optimizer, data_loader
