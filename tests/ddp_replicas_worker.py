"""Worker of ``tests/test_ddp.py::test_ranks_whose_samplers_disagree_are_refused_at_set_up``:
run under ``torch.distributed.run`` (gloo, 127.0.0.1) with 2 processes.  Every rank builds one
data loader per scenario -- samplers that do or do not deal one global schedule -- calls
``make_private`` with the ``shuffle`` accountant, and writes what happened (accepted, or the
refusal, at the sampler or at ``make_private``) to ``<out>/rank<r>.json``; the scenarios that
only differ in a sampler setting per rank (seed, set_epoch) also take one optimizer step, where
the ranks compare schedules."""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import torch
import torch.distributed as dist
from opacus import PrivacyEngine
from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

from dpplugins.errors import ParameterError
from dpplugins.integrations.opacus import make_data_loader, register
from dpplugins.samplers import ShuffledEpochs

N, BATCH = 8, 4


def loaders(dataset, rank: int, world: int, before_init):
    """``(name, a function building the loader)`` of every scenario."""
    tud = torch.utils.data
    torch_batch = BATCH // world
    return [
        ("ours_seeded", lambda: make_data_loader(dataset, ShuffledEpochs(N, BATCH, rng=0))),
        ("ours_unseeded", lambda: make_data_loader(dataset, ShuffledEpochs(N, BATCH))),
        ("ours_built_before_init", lambda: make_data_loader(dataset, before_init)),
        ("ours_rank_0_everywhere", lambda: make_data_loader(
            dataset, ShuffledEpochs(N, BATCH, rng=0, num_replicas=world, rank=0))),
        ("torch_seeded", lambda: tud.DataLoader(dataset, batch_size=torch_batch, sampler=(
            tud.DistributedSampler(dataset, shuffle=True, seed=0)))),
        ("torch_shuffle_without_distributed_sampler", lambda: tud.DataLoader(
            dataset, batch_size=torch_batch, shuffle=True)),
        ("torch_rank_0_everywhere", lambda: tud.DataLoader(
            dataset, batch_size=torch_batch, sampler=tud.DistributedSampler(
                dataset, num_replicas=world, rank=0, shuffle=True, seed=0))),
    ]


def stepped(dataset, rank: int, world: int):
    """``(name, loader builder, set_epoch of this rank or None)`` of the scenarios whose ranks
    disagree only in what the sampler's settings say on each rank (seed, epoch): one optimizer
    step is taken, where the ranks compare their schedules."""
    tud = torch.utils.data
    torch_batch = BATCH // world

    def torch_loader(seed: int):
        return tud.DataLoader(dataset, batch_size=torch_batch,
                              sampler=tud.DistributedSampler(dataset, shuffle=True, seed=seed))
    return [
        ("step_ours_seeded", lambda: make_data_loader(dataset, ShuffledEpochs(N, BATCH, rng=0)),
         None),
        ("step_ours_seed_per_rank", lambda: make_data_loader(
            dataset, ShuffledEpochs(N, BATCH, rng=rank)), None),
        ("step_torch_seeded_set_epoch", lambda: torch_loader(0), 1),
        ("step_torch_seed_per_rank", lambda: torch_loader(rank), None),
        ("step_torch_set_epoch_on_rank_0", lambda: torch_loader(0), 1 if rank == 0 else None),
    ]


def one_step(dataset, build, epoch, noise_multiplier=1.0, max_grad_norm=1.0) -> str:
    """make_private, then the first optimizer step of a pass: "accepted" or the refusal."""
    model = DPDDP(torch.nn.Linear(3, 2))
    engine = PrivacyEngine(accountant="shuffle")
    loader = build()
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=loader,
        noise_multiplier=noise_multiplier, max_grad_norm=max_grad_norm, poisson_sampling=False)
    if epoch is not None:
        loader.sampler.set_epoch(epoch)
    try:
        for x, y in loader:
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
            break
    except ParameterError as error:
        return f"refused: {error}"
    return "accepted"


def per_rank_settings(dataset, rank: int):
    """``(name, noise_multiplier, max_grad_norm)`` of this rank: Opacus adds rank 0's noise
    to the sum of every rank's gradients, each clipped with its own rank's max_grad_norm."""
    return [("step_same_settings", 1.0, 1.0),
            ("step_clip_per_rank", 1.0, 1.0 + 9.0 * rank),
            ("step_noise_per_rank", 0.5 if rank == 0 else 2.0, 1.0)]


def poisson_epochs(dataset, epochs: int = 2) -> dict:
    """Opacus' distributed Poisson loader (make_private with poisson_sampling=True under DPDDP)
    at rate 1/8 over 8 examples, 4 per rank: a rank's draw is empty with probability
    (7/8)^4 = 0.59, which Opacus' sampler skipped (the ranks fell out of step)."""
    model = DPDDP(torch.nn.Linear(3, 2))
    engine = PrivacyEngine(accountant="pld")
    loader = torch.utils.data.DataLoader(dataset, batch_size=1)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=loader,
        noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=True)
    shards = []
    for _ in range(epochs):
        for x, y in loader:
            shards.append(len(x))
            if len(x):
                torch.nn.functional.cross_entropy(model(x), y).backward()
            else:   # an empty batch: no examples, a zero clipped sum (the noise alone)
                (model(torch.zeros(1, 3)) * 0.0).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
    return {"sizes": shards, "steps": engine.accountant.steps if hasattr(
        engine.accountant, "steps") else len(engine.accountant),
            "epsilon": engine.accountant.get_epsilon(1e-5)}


def poisson_alike_generators(passes: int = 70) -> list:
    """6 examples, Opacus' distributed Poisson loader at rate 1/3 (3 steps a pass) with the
    loader's generator seeded alike on every rank (``generator=torch.Generator().manual_seed(0)``
    on each, a common way to make runs reproducible): the examples each step kept, per rank."""
    data = torch.utils.data.TensorDataset(torch.randn(6, 3), torch.randint(0, 2, (6,)))
    model = DPDDP(torch.nn.Linear(3, 2))
    engine = PrivacyEngine(accountant="pld")
    loader = torch.utils.data.DataLoader(data, batch_size=2,
                                         generator=torch.Generator().manual_seed(0))
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), data_loader=loader,
        noise_multiplier=1.0, max_grad_norm=1.0, poisson_sampling=True)
    kept = []
    for _ in range(passes):
        for indices in loader.batch_sampler:
            kept.append(sorted(int(i) for i in indices))
    return kept


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    before_init = ShuffledEpochs(N, BATCH, rng=0)        # one replica: no process group yet
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    register()
    torch.manual_seed(0)
    dataset = torch.utils.data.TensorDataset(torch.randn(N, 3), torch.randint(0, 2, (N,)))
    outcome = {}
    for name, build in loaders(dataset, rank, world, before_init):
        model = DPDDP(torch.nn.Linear(3, 2))
        engine = PrivacyEngine(accountant="shuffle")
        try:
            loader = build()
            engine.make_private(module=model, optimizer=torch.optim.SGD(model.parameters(),
                                                                        lr=0.1),
                                data_loader=loader, noise_multiplier=1.0, max_grad_norm=1.0,
                                poisson_sampling=False)
            outcome[name] = "accepted"
        except ParameterError as error:
            outcome[name] = f"refused: {error}"
    for name, build, epoch in stepped(dataset, rank, world):
        outcome[name] = one_step(dataset, build, epoch)
    for name, sigma, clip in per_rank_settings(dataset, rank):
        outcome[name] = one_step(dataset, lambda: make_data_loader(
            dataset, ShuffledEpochs(N, BATCH, rng=0)), None, sigma, clip)
    outcome["poisson_epochs"] = poisson_epochs(dataset)
    outcome["poisson_alike_generators"] = poisson_alike_generators()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{rank}.json").write_text(json.dumps(outcome))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
