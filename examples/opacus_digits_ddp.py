"""Opacus DPDDP on scikit-learn's digits with our distributed samplers (CPU, gloo; no download).

Launch on one machine with two processes::

    torchrun --nproc_per_node 2 examples/opacus_digits_ddp.py --sampler shuffle --epochs 3

Every rank builds the same *global* schedule from the shared seed and epoch and trains on its
shard of every global step (``ShuffledEpochs(..., num_replicas, rank)`` and friends; with
``--sampler poisson`` Opacus' own distributed Poisson sampler; with ``--sampler torch`` torch's
``DistributedSampler``, whose global step is a shuffled-epochs step of the global batch).  Opacus' distributed optimizer
adds the Gaussian noise once per step (on rank 0) to the sum of all ranks' clipped gradients, so
a step releases what the single-process sampler's step would: the accountant records the global
event on every rank and every rank reports the same epsilon.

``--sampler`` takes several names too (``--sampler shuffle balls_and_bins poisson``): the
runs follow one another in the same process group, each a fresh model from the same seed, so
one launch compares the samplers' epsilons.

``--out DIR`` writes one JSON file per rank (epsilon, the indices of every shard, the accountant
state; with several samplers, one directory per sampler, ``DIR/<sampler>/``); ``--stop-after K``
saves a checkpoint (accountant and sampler state, written by rank 0) after K optimizer steps and
stops; ``--resume FILE`` continues from such a checkpoint on every rank (one sampler).  The test
suite uses these to check sharding, equal epsilon and exact resumption; the per-epoch training
time is recorded too (``epoch_seconds``, used by ``benchmarks/ddp_epoch_time.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from opacus import PrivacyEngine
from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
from sklearn.datasets import load_digits

from dpplugins.display import upper_text
from dpplugins.integrations.opacus import make_data_loader, register
from dpplugins.samplers import ShuffledEpochs, balls_and_bins

DELTA = 1e-5


def digits(seed: int):
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:600]
    index = torch.arange(len(order))
    return torch.utils.data.TensorDataset(x[order], y[order], index)


def make_sampler(kind: str, n: int, batch_size: int, seed: int, world: int, rank: int):
    if kind == "shuffle":
        return ShuffledEpochs(n, batch_size, rng=seed, num_replicas=world, rank=rank)
    if kind == "balls_and_bins":
        return balls_and_bins(n, -(-n // batch_size), rng=seed, num_replicas=world, rank=rank)
    return None


SAMPLERS = ("shuffle", "balls_and_bins", "poisson", "torch")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sampler", nargs="+", choices=SAMPLERS, default=["shuffle"],
                        help="one or more (several: trained in turn, one after the other)")
    parser.add_argument("--accountant", default=None,
                        help="registry name (default: shuffle / balls_and_bins / pld)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=60, help="global batch size")
    parser.add_argument("--noise-multiplier", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--stop-after", type=int, default=None)
    parser.add_argument("--resume", type=Path, default=None)
    args = parser.parse_args()
    if len(set(args.sampler)) < len(args.sampler):
        parser.error("--sampler: each sampler once")
    if args.resume is not None and len(args.sampler) > 1:
        parser.error("--resume continues the run of one sampler")
    if args.resume is not None and args.sampler == ["torch"]:
        parser.error("--resume needs a sampler with a state (torch's DistributedSampler has none)")
    warnings.filterwarnings("ignore")
    dist.init_process_group("gloo")
    register()
    data = digits(args.seed)
    for kind in args.sampler:
        out = args.out if args.out is None or len(args.sampler) == 1 else args.out / kind
        train(kind, data, args, out)
    dist.barrier()
    dist.destroy_process_group()


def train(kind: str, data, args, out: Path | None) -> None:
    """One run of DP-SGD with sampler ``kind`` on this rank (a fresh model from the seed)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    n = len(data)
    accountant = args.accountant or {"shuffle": "shuffle", "balls_and_bins": "balls_and_bins",
                                     "poisson": "pld", "torch": "shuffle"}[kind]
    sampler = make_sampler(kind, n, args.batch_size, args.seed, world, rank)
    torch_sampler = None
    if kind == "torch":   # torch's own: a shard of one permutation per epoch per rank
        torch_sampler = torch.utils.data.DistributedSampler(
            data, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
        loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size // world,
                                             sampler=torch_sampler)
    elif sampler is None:
        loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size // world)
    else:
        loader = make_data_loader(data, sampler)
    model = DPDDP(torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                      torch.nn.Linear(32, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    engine = PrivacyEngine(accountant=accountant)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader,
        noise_multiplier=args.noise_multiplier, max_grad_norm=1.0,
        poisson_sampling=kind == "poisson")
    steps_done = 0
    if args.resume is not None:
        checkpoint = json.loads(args.resume.read_text())
        engine.accountant.load_state_dict(checkpoint["accountant"])
        if sampler is not None:
            sampler.load_state_dict(checkpoint["sampler"])
        steps_done = checkpoint["steps"]
    criterion = torch.nn.CrossEntropyLoss()
    shards, epoch_seconds = [], []
    total = args.epochs * len(loader)       # global steps of the whole run
    while steps_done < total:
        if torch_sampler is not None:         # torch's sampler needs its epoch set
            torch_sampler.set_epoch(steps_done // len(loader))
        start = time.perf_counter()
        batches = iter(loader)                # the sampler continues where it stands
        while steps_done < total:
            if args.stop_after is not None and steps_done == args.stop_after:
                total = steps_done   # checked before drawing the next batch: the sampler's
                break                # position is exactly the steps done
            try:
                x, y, index = next(batches)
            except StopIteration:
                break
            optimizer.zero_grad()
            logits = model(x)
            (criterion(logits, y) if len(y) else logits.sum() * 0).backward()
            optimizer.step()
            shards.append(index.tolist())
            steps_done += 1
        epoch_seconds.append(time.perf_counter() - start)
    epsilon = engine.accountant.get_epsilon(DELTA)
    print(f"rank {rank}/{world}: {steps_done} steps, epsilon = {upper_text(epsilon, decimals=4)} "
          f"at delta = {DELTA:g} "
          f"({accountant}, certified upper bound, valid for the {kind} sampler)")
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        state = engine.accountant.state_dict()
        record = {"rank": rank, "world": world, "epsilon": epsilon, "shards": shards,
                  "steps": steps_done, "accountant": _json(state),
                  "epoch_seconds": epoch_seconds}
        (out / f"rank{rank}.json").write_text(json.dumps(record))
        if args.stop_after is not None and rank == 0:
            checkpoint = {"accountant": _json(state), "steps": steps_done,
                          "sampler": None if sampler is None else sampler.state_dict()}
            (out / "checkpoint.json").write_text(json.dumps(checkpoint))


def _json(state):
    return json.loads(json.dumps(state, default=lambda o: list(o) if isinstance(o, tuple)
                                 else str(o)))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
