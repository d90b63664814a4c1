"""Opacus on scikit-learn's digits with any accountant and sampler (no download).

A small network is trained with Opacus' ``PrivacyEngine``; the accountant is chosen by name
(ours are registered with one call) and the sampler is Opacus' Poisson loader or one of ours.
Every epoch prints test accuracy, the chosen accountant's epsilon, and Opacus' RDP epsilon for
the same steps -- labelled "valid" or "not valid for this sampler".

    python examples/opacus_digits.py --accountant pld --sampler poisson --epochs 5
    python examples/opacus_digits.py --accountant shuffle --sampler shuffle --epochs 5
    python examples/opacus_digits.py --accountant balls_and_bins --sampler checkin --epochs 5

Which accountant fits which sampler: poisson -> pld (or fdp, rdp, prv); shuffle -> shuffle;
checkin (every example in exactly one random step per epoch, ``RandomCheckIn(n, steps,
checkin_probability=1.0, variant="averaged")``) -> balls_and_bins (or the looser checkin).  A
mismatch prints a warning naming the valid accountants.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
import torch
from opacus import PrivacyEngine
from opacus.accountants import RDPAccountant
from sklearn.datasets import load_digits

from dpplugins.integrations.opacus import attach, make_data_loader, register
from dpplugins.samplers import RandomCheckIn, ShuffledEpochs

DELTA = 1e-5
#: the accountant valid for each --sampler, tightest first (the default when --accountant is
#: not given)
SUGGESTED = {"poisson": "pld", "shuffle": "shuffle", "checkin": "balls_and_bins"}
ACCOUNTANTS = ("rdp", "prv", "pld", "fdp", "shuffle", "checkin", "balls_and_bins")


def digits_tensors(seed: int):
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    return (torch.utils.data.TensorDataset(x[order[:cut]], y[order[:cut]]),
            torch.utils.data.TensorDataset(x[order[cut:]], y[order[cut:]]))


def build_loader(train, sampler: str, batch_size: int, seed: int):
    n = len(train)
    if sampler == "poisson":  # Opacus replaces it with its Poisson DPDataLoader
        return torch.utils.data.DataLoader(train, batch_size=batch_size), True
    if sampler == "shuffle":
        return make_data_loader(train, ShuffledEpochs(n, batch_size, rng=seed)), False
    # random allocation: every example in exactly one uniformly random step of each epoch, all
    # of a step's examples used (no max_batch_size), empty steps run as noise-only steps
    steps = -(-n // batch_size)
    return make_data_loader(train, RandomCheckIn(n, steps, checkin_probability=1.0,
                                                 variant="averaged", rng=seed)), False


def main() -> None:
    ours = register()
    names = [name for name in ACCOUNTANTS if name in ("rdp", "prv") or name in ours]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accountant", choices=names, default=None,
                        help="default: the tightest valid one for --sampler "
                             f"({', '.join(f'{k} -> {v}' for k, v in SUGGESTED.items())})")
    parser.add_argument("--sampler", choices=tuple(SUGGESTED), default="poisson")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--noise-multiplier", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.accountant is None:
        args.accountant = SUGGESTED[args.sampler]
    torch.manual_seed(args.seed)
    warnings.filterwarnings("ignore", message=".*Secure RNG turned off.*")
    warnings.filterwarnings("ignore", message=".*Full backward hook.*")

    train, test = digits_tensors(args.seed)
    loader, poisson = build_loader(train, args.sampler, args.batch_size, args.seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    engine = PrivacyEngine(accountant=args.accountant)
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=optimizer, data_loader=loader, noise_multiplier=args.noise_multiplier,
        max_grad_norm=1.0, poisson_sampling=poisson)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # checks accountant against sampler; with the optimizer it also watches Opacus' own
        # accountants for accumulated Poisson batches
        attach(engine, loader, optimizer=optimizer)
    valid = not caught
    for w in caught:
        print(f"warning: {w.message}")
    label = "valid" if valid else "not valid for this sampler"
    criterion = torch.nn.CrossEntropyLoss()
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            out = model(x)
            # an empty batch (check-in dummy update) still runs backward: zero per-sample rows,
            # and the optimizer's step is noise only
            (criterion(out, y) if len(y) else out.sum()).backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            xs, ys = test.tensors
            accuracy = float((model(xs).argmax(1) == ys).float().mean())
        rdp = RDPAccountant()
        rdp.history = list(engine.accountant.history)
        print(f"epoch {epoch}  accuracy {accuracy:.3f}  epsilon[{args.accountant}] "
              f"{engine.get_epsilon(DELTA):.3f} ({label})  epsilon[opacus rdp] "
              f"{rdp.get_epsilon(DELTA):.3f} ({'valid' if poisson else 'not valid: assumes Poisson'})"
              f"  {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
