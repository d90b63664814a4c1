"""Random allocation with Laplace noise or randomized response vs Poisson sampling: certified
epsilon and wall time.

Printed side by side, in one run (fresh accountants, nothing cached between calls;
``--rounds`` alternating rounds per case, each running every candidate once in a rotated order,
median seconds reported):

* ours ``balls_and_bins`` on ``RandomAllocationEvent(t, epochs, base)`` (certified lower and
  upper bounds; :mod:`dpplugins.amplification.allocation_mechanisms`);
* ours ``pld`` with Poisson sampling at q = k p / t, the same expected participation
  (Laplace only: the same noise with Poisson batches);
* dp-accounting's PLD accountant with Poisson-subsampled Laplace at that rate, when installed
  (its default, connect-the-dots estimate; the anchor for the Poisson column);
* the base mechanism composed without amplification (k steps per epoch), for scale.

Run: ``PYTHONPATH=. python benchmarks/allocation_mechanisms_vs_poisson.py [--quick]``
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import warnings
from pathlib import Path

from dpplugins.accountants import create
from dpplugins.events import (LaplaceEvent, PoissonSampledEvent, RandomAllocationEvent,
                              RandomizedResponseEvent)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ab import alternate, dp_accounting_pld_epsilon  # noqa: E402

DELTA = 1e-5
#: (base mechanism, steps per epoch, epochs, check-in probability, participations)
CASES = [(LaplaceEvent(2.0), 100, 10, 1.0, 1), (LaplaceEvent(1.0), 1000, 10, 1.0, 1),
         (LaplaceEvent(2.0), 100, 10, 0.5, 1), (RandomizedResponseEvent(1.0, 2), 100, 10, 1.0, 1),
         (LaplaceEvent(0.5), 10, 3, 1.0, 1), (LaplaceEvent(2.0), 100, 5, 1.0, 4),
         (LaplaceEvent(2.0), 100, 5, 0.5, 4)]
QUICK = CASES[:2]


def _bounds(acc):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an AccuracyWarning still leaves certified bounds
        return acc.get_epsilon_bounds(DELTA)


def allocation(base, t: int, epochs: int, p: float, k: int):
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(t, epochs, base, participations=k, checkin_probability=p))
    return _bounds(acc)


def poisson(base, t: int, epochs: int, rate: float):
    acc = create("pld")
    acc.compose(PoissonSampledEvent(rate, base), t * epochs)
    return _bounds(acc)


def unamplified(base, epochs: int):
    acc = create("pld")
    acc.compose(base, epochs)
    return _bounds(acc)


def dp_accounting_poisson(base, t: int, epochs: int, rate: float) -> float:
    import dp_accounting
    event = dp_accounting.PoissonSampledDpEvent(rate, dp_accounting.LaplaceDpEvent(base.scale))
    return dp_accounting_pld_epsilon(event, t * epochs, DELTA)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the first two cases")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    args = parser.parse_args()
    have_dpa = importlib.util.find_spec("dp_accounting") is not None
    print(f"delta = {DELTA:g}")
    header = (f"{'base':>22} {'t':>5} {'ep':>3} {'p':>4} {'k':>2} | "
              f"{'balls_and_bins [lower, upper]':>26} "
              f"{'gap':>7} {'s':>6} | {'Poisson (ours pld)':>18} {'s':>6} | "
              f"{'dp-acc Poisson':>14} {'s':>6} | {'no amplification':>16}")
    print(header)
    print("-" * len(header))
    for base, t, epochs, p, k in (QUICK if args.quick else CASES):
        results = {}
        laplace = isinstance(base, LaplaceEvent)
        rate = k * p / t  # the same expected participation
        candidates = {"bb": lambda: results.__setitem__("bb", allocation(base, t, epochs, p, k))}
        if laplace:
            candidates["pois"] = lambda: results.__setitem__(
                "pois", poisson(base, t, epochs, rate))
            if have_dpa:
                candidates["dpa"] = lambda: results.__setitem__(
                    "dpa", dp_accounting_poisson(base, t, epochs, rate))
        seconds = {name: statistics.median(values)
                   for name, values in alternate(candidates, max(1, args.rounds)).items()}
        bb = results["bb"]
        gap = (bb.upper - bb.lower) / bb.upper
        name = (f"Laplace(b={base.scale:g})" if laplace
                else f"RR(eps0={base.epsilon0:g}, k={base.num_buckets})")
        line = (f"{name:>22} {t:5d} {epochs:3d} {p:4.2f} {k:2d} | [{bb.lower:.5f}, {bb.upper:.5f}]"
                f"{'':>4} {gap:7.3%} {seconds['bb']:6.2f} | ")
        line += (f"{results['pois'].upper:18.5f} {seconds['pois']:6.2f} | " if "pois" in results
                 else f"{'-':>18} {'':>6} | ")
        line += (f"{results['dpa']:14.5f} {seconds['dpa']:6.2f} | " if "dpa" in results
                 else f"{'-':>14} {'':>6} | ")
        line += f"{unamplified(base, k * epochs).upper:16.4f}"
        print(line)


if __name__ == "__main__":
    main()
