"""Per-epoch wall time of Opacus training on digits: our samplers vs the plain loaders.

One run, same model and data: a plain shuffled ``DataLoader`` (``poisson_sampling=False``),
Opacus' Poisson ``DPDataLoader``, our ``ShuffledEpochs`` and ``RandomCheckIn`` through
``make_data_loader``.  Prints the median epoch time of each and the ratio to the plain loader
(target: our samplers within 5 % of it).

    python benchmarks/sampler_epoch_time.py [--epochs 5] [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import torch
from opacus import PrivacyEngine
from sklearn.datasets import load_digits

from dpplugins.integrations.opacus import make_data_loader
from dpplugins.samplers import RandomCheckIn, ShuffledEpochs

BATCH = 64


def dataset():
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    return torch.utils.data.TensorDataset(x, torch.tensor(data.target))


def epoch_times(loader_kind: str, epochs: int) -> list[float]:
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
    times = []
    for _ in range(epochs):
        start = time.perf_counter()
        for x, y in loader:
            optimizer.zero_grad()
            out = model(x)
            (criterion(out, y) if len(y) else out.sum()).backward()
            optimizer.step()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 epochs")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    epochs = 3 if args.quick else args.epochs
    kinds = ["plain shuffled", "opacus poisson", "ours: ShuffledEpochs", "ours: RandomCheckIn"]
    epoch_times(kinds[0], 1)  # warm-up
    medians = {kind: statistics.median(epoch_times(kind, epochs)) for kind in kinds}
    base = medians["plain shuffled"]
    print(f"{'loader':24s} {'median epoch s':>15s} {'ratio to plain':>15s}")
    for kind, value in medians.items():
        print(f"{kind:24s} {value:15.3f} {value / base:15.3f}")
    for kind in kinds[2:]:
        ok = medians[kind] <= 1.05 * base
        print(f"{kind}: ratio to plain loader {medians[kind] / base:.3f} "
              f"(target <= 1.05 -> {'met' if ok else 'NOT met'})")


if __name__ == "__main__":
    main()
