"""Worker of ``tests/test_ddp.py::test_ranks_whose_samplers_disagree_are_refused_at_set_up``:
run under ``torch.distributed.run`` (gloo, 127.0.0.1) with 2 processes.  Every rank builds one
data loader per scenario -- samplers that do or do not deal one global schedule -- calls
``make_private`` with the ``shuffle`` accountant, and writes what happened (accepted, or the
refusal, at the sampler or at ``make_private``) to ``<out>/rank<r>.json``."""

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
        ("torch_rank_0_everywhere", lambda: tud.DataLoader(
            dataset, batch_size=torch_batch, sampler=tud.DistributedSampler(
                dataset, num_replicas=world, rank=0, shuffle=True, seed=0))),
    ]


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
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"rank{rank}.json").write_text(json.dumps(outcome))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
