"""Per-epoch wall time of Opacus training on digits: our samplers vs the plain loaders.

One run, same model and data: a plain shuffled ``DataLoader`` (``poisson_sampling=False``),
Opacus' Poisson ``DPDataLoader``, our ``ShuffledEpochs`` and ``RandomCheckIn`` through
``make_data_loader``.  Epochs of the four loaders alternate (one epoch each per round, rotated order); prints each
loader's median epoch time, its spread and the ratio of medians to the plain loader (target:
our samplers within 5 % of it; read the spread before calling a difference real).

    python benchmarks/sampler_epoch_time.py [--epochs 5] [--quick]
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch
from opacus import PrivacyEngine
from sklearn.datasets import load_digits

from dpplugins.integrations.opacus import make_data_loader
from dpplugins.samplers import RandomCheckIn, ShuffledEpochs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ab import alternate, report  # noqa: E402

BATCH = 64


def dataset():
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    return torch.utils.data.TensorDataset(x, torch.tensor(data.target))


def make_epoch(loader_kind: str):
    """A function that trains one epoch with the given loader (model and engine built once)."""
    torch.manual_seed(0)
    data = dataset()
    n = len(data)
    poisson = loader_kind == "opacus poisson"
    if loader_kind in ("plain shuffled", "opacus poisson"):
        loader = torch.utils.data.DataLoader(data, batch_size=BATCH, shuffle=True)
    elif loader_kind == "ours: ShuffledEpochs":
        loader = make_data_loader(data, ShuffledEpochs(n, BATCH, rng=0))
    else:
        loader = make_data_loader(data, RandomCheckIn(n, -(-n // BATCH), variant="averaged",
                                                      rng=0))
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    engine = PrivacyEngine(accountant="rdp")
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer,
                                                   data_loader=loader, noise_multiplier=1.0,
                                                   max_grad_norm=1.0, poisson_sampling=poisson)
    criterion = torch.nn.CrossEntropyLoss()

    def epoch() -> None:
        for x, y in loader:
            optimizer.zero_grad()
            out = model(x)
            (criterion(out, y) if len(y) else out.sum()).backward()
            optimizer.step()
    return epoch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=7, help="rounds: epochs per loader")
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    rounds = 3 if args.quick else args.epochs
    kinds = ["plain shuffled", "opacus poisson", "ours: ShuffledEpochs", "ours: RandomCheckIn"]
    epochs = {kind: make_epoch(kind) for kind in kinds}
    for epoch in epochs.values():  # warm-up
        epoch()
    samples = alternate(epochs, rounds)
    print(f"per-epoch time, {rounds} alternating rounds (ratio: median / plain shuffled median)")
    print(report(samples, "plain shuffled"))


if __name__ == "__main__":
    main()
