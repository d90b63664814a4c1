"""Opacus on scikit-learn's digits with any accountant and sampler (no download).

A small network is trained with Opacus' ``PrivacyEngine``; the sampler is Opacus' Poisson loader
or one of ours, and the accountant is chosen by name (ours are registered with one call) or, by
default, from the accountants that support the sampler's event
(:func:`dpplugins.accountants.supporting`): the one with the smallest certified epsilon for the
planned run.  Every epoch prints test accuracy, the accountant's epsilon at delta with its bound
type and the sampler it is valid for, and Opacus' RDP epsilon for the same steps read as Poisson
steps (valid only for the Poisson sampler).

    python examples/opacus_digits.py                                  # poisson -> pld
    python examples/opacus_digits.py --sampler shuffle --epochs 5     # -> shuffle
    python examples/opacus_digits.py --sampler checkin --epochs 5     # -> balls_and_bins

``--sampler checkin`` is random allocation: every example in exactly one uniformly random step
of each epoch (``RandomCheckIn(n, steps, checkin_probability=1.0, variant="averaged")``).  One of
our accountants that does not describe the sampler is refused by ``make_private`` (the message
names the valid ones); Opacus' own ``rdp``/``prv``/``gdp`` on a sampler that is not Poisson train
with a warning and are labelled "not valid for this sampler".
"""

from __future__ import annotations

import argparse
import time
import warnings

import torch
from opacus import PrivacyEngine
from opacus.accountants import RDPAccountant
from opacus.accountants import registry as opacus_registry
from sklearn.datasets import load_digits

from dpplugins.accountants import UnsupportedEventError, create, supporting
from dpplugins.display import upper_text
from dpplugins.events import PoissonSampledEvent, ProtocolEvent, leaves
from dpplugins.integrations.opacus import loader_event, make_data_loader, register
from dpplugins.samplers import RandomCheckIn, ShuffledEpochs

DELTA = 1e-5
SAMPLERS = ("poisson", "shuffle", "checkin")


def digits_tensors(seed: int):
    data = load_digits()
    x = torch.tensor(data.data / 16.0, dtype=torch.float32)
    y = torch.tensor(data.target, dtype=torch.long)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    cut = int(0.8 * len(x))
    return (torch.utils.data.TensorDataset(x[order[:cut]], y[order[:cut]]),
            torch.utils.data.TensorDataset(x[order[cut:]], y[order[cut:]]))


def build_loader(train, sampler: str, batch_size: int, seed: int):
    """(loader, poisson_sampling flag for make_private)."""
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


def pick_accountant(run) -> tuple[str, tuple[str, ...]]:
    """The accountant with the smallest certified epsilon for ``run`` among those that support
    it (ties: the larger certified lower bound, then the one with fewer options); and them."""
    candidates = supporting(run)
    scored = []
    for name in candidates:
        accountant = create(name)
        if accountant.bound_type != "certified upper bound":
            continue
        bounds = accountant.compose(run).get_epsilon_bounds(DELTA)
        scored.append(((bounds.upper, -bounds.lower, len(accountant.options()), name), name))
    if not scored:
        raise SystemExit(f"no registered accountant supports this sampler ({run})")
    return min(scored)[1], candidates


def as_poisson_steps(history) -> list[tuple[float, float, int]]:
    """Opacus' reading of a ledger: every step a Poisson step, ``(sigma, q, steps)`` with ``q``
    the loader's sample rate or ``1 / steps per pass`` -- what Opacus' RDP would have been told.
    Our ledger holds events; Opacus' own accountants already hold these tuples."""
    out = []
    for event in history:
        if isinstance(event, tuple):
            out.append(event)
            continue
        for leaf, count in leaves(event):
            if isinstance(leaf, PoissonSampledEvent):
                out.append((leaf.event.noise_multiplier, leaf.sample_rate, count))
            elif isinstance(leaf, ProtocolEvent):
                out.append((leaf.event.noise_multiplier, 1.0 / leaf.steps_per_epoch,
                            leaf.steps * count))
    return out


def main() -> None:
    ours = register()
    names = sorted(opacus_registry._ACCOUNTANTS)   # Opacus' own and ours, as PrivacyEngine sees
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accountant", choices=names,
                        default=None, help="default: the accountant with the smallest certified "
                        "epsilon among those that support the sampler")
    parser.add_argument("--sampler", choices=SAMPLERS, default="poisson")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--noise-multiplier", type=float, default=1.0)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    warnings.filterwarnings("ignore", message=".*Secure RNG turned off.*")
    warnings.filterwarnings("ignore", message=".*Full backward hook.*")

    train, test = digits_tensors(args.seed)
    loader, poisson = build_loader(train, args.sampler, args.batch_size, args.seed)
    run = loader_event(loader, args.noise_multiplier, epochs=args.epochs,
                       poisson_sampling=poisson)
    valid_for_sampler = supporting(run)
    if args.accountant is None:
        args.accountant, _ = pick_accountant(run)
        why = (f"smallest certified epsilon for {args.epochs} epoch"
               f"{'s' if args.epochs != 1 else ''}")
    else:
        why = "chosen with --accountant"
    step = next(iter(leaves(run)))[0]
    print(f"sampler {args.sampler}: {type(step).__name__}; accountants that support it: "
          f"{', '.join(valid_for_sampler) or 'none'}")
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    engine = PrivacyEngine(accountant=args.accountant)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:   # make_private checks the accountant against the loader's event
            model, optimizer, loader = engine.make_private(
                module=model, optimizer=optimizer, data_loader=loader,
                noise_multiplier=args.noise_multiplier, max_grad_norm=1.0,
                poisson_sampling=poisson)
        except UnsupportedEventError as error:
            print(f"refused: accountant {args.accountant!r} does not describe the "
                  f"{args.sampler} sampler: {error}")
            raise SystemExit(2) from None
    mismatch = [str(w.message) for w in caught if "is not valid for" in str(w.message)]
    for message in mismatch:
        print(f"warning: {message}")
    ours_chosen = args.accountant in ours
    valid = ours_chosen or not mismatch
    label = "valid" if valid else "not valid for this sampler"
    bound = (engine.accountant.bound_type if ours_chosen
             else "Opacus' own accountant, which assumes Poisson sampling")
    validity = f"{'valid' if valid else 'not valid'} for the {args.sampler} sampler"
    print(f"accountant {args.accountant} ({why}): {bound}; {validity}")
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
        rdp.history = as_poisson_steps(engine.accountant.history)
        print(f"epoch {epoch}  accuracy {accuracy:.3f}  epsilon[{args.accountant}] "
              f"{upper_text(engine.get_epsilon(DELTA), decimals=3)} ({label}) at "
              f"delta={DELTA:g} ({bound}; "
              f"{validity})  epsilon[opacus rdp] {rdp.get_epsilon(DELTA):.3f} "
              f"({'valid' if poisson else 'not valid: assumes Poisson'})"
              f"  {time.perf_counter() - start:.1f}s")


if __name__ == "__main__":
    main()
