"""Random allocation (balls-and-bins) vs Poisson sampling: certified epsilon and wall time.

Target: sigma = 1, t = 1000 steps per epoch, 10 epochs, delta = 1e-5 in <= 10 s with a
certified gap (upper - lower) / upper <= 2 %.  Printed side by side, in one run (fresh
accountants, nothing cached between calls; ``--rounds`` alternating rounds per case, each
running every accountant once in a rotated order, median seconds reported):

* ours ``balls_and_bins`` (certified lower and upper bounds, seconds);
* ours ``pld`` with Poisson sampling at q = 1/t (what the same noise would give with Poisson
  batches);
* dp-accounting's PLD accountant at q = 1/t, when installed (anchor for the Poisson column);
* an importance-sampled Monte Carlo *estimate* of the balls-and-bins delta at our upper epsilon
  (labelled as such; the accountant never reports it), with its sample size and seconds.

The public random-allocation package (pld-accounting) has its own benchmark in its own
environment: ``benchmarks/allocation_vs_pld_accounting.py``.

Run: ``PYTHONPATH=. python benchmarks/balls_and_bins_vs_poisson.py [--quick]``
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from fractions import Fraction
from pathlib import Path

from dpplugins.accountants import create
from dpplugins.amplification.allocation import monte_carlo_delta
from dpplugins.events import GaussianEvent, RandomAllocationEvent

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ab import alternate, dp_accounting_pld_epsilon  # noqa: E402

DELTA = 1e-5
#: (sigma, steps per epoch, epochs); the first row is the target case
CASES = [(1.0, 1000, 10), (1.0, 100, 1), (0.8, 1000, 10), (2.0, 10_000, 5), (1.0, 10, 3)]
QUICK = CASES[:2]


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def ours(name: str, sigma: float, t: int, epochs: int):
    acc = create(name)
    if name == "balls_and_bins":   # random allocation into t steps, every epoch
        acc.compose(RandomAllocationEvent(t, Fraction(1, t), GaussianEvent(sigma)), t * epochs)
    else:                           # Poisson steps at rate 1 / t
        acc.step(noise_multiplier=sigma, sample_rate=1 / t, count=t * epochs)
    return acc.get_epsilon_bounds(DELTA)


def dp_accounting_pld(sigma: float, t: int, epochs: int) -> float:
    import dp_accounting
    event = dp_accounting.PoissonSampledDpEvent(1 / t, dp_accounting.GaussianDpEvent(sigma))
    return dp_accounting_pld_epsilon(event, t * epochs, DELTA)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the first two cases")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    parser.add_argument("--mc-normals", type=float, default=4e7,
                        help="Gaussian draws per Monte Carlo estimate (samples x t x epochs)")
    args = parser.parse_args()
    have_dpa = importlib.util.find_spec("dp_accounting") is not None
    print(f"delta = {DELTA:g}")
    header = (f"{'sigma':>5} {'t':>6} {'ep':>3} | {'balls_and_bins [lower, upper]':>30} {'gap':>7} "
              f"{'s':>6} | {'Poisson (ours pld)':>18} {'s':>6}")
    if have_dpa:
        header += f" | {'dp-acc PLD':>10} {'s':>6} {'time ours/dp':>12}"
    header += f" | {'MC estimate of delta at upper':>30} {'s':>6}"
    print(header)
    print("-" * len(header))
    for sigma, t, epochs in (QUICK if args.quick else CASES):
        results = {}
        candidates = {
            "bb": lambda: results.__setitem__("bb", ours("balls_and_bins", sigma, t, epochs)),
            "pois": lambda: results.__setitem__("pois", ours("pld", sigma, t, epochs))}
        if have_dpa:
            candidates["dpa"] = lambda: results.__setitem__(
                "dpa", dp_accounting_pld(sigma, t, epochs))
        seconds = {name: statistics.median(values)
                   for name, values in alternate(candidates, max(1, args.rounds)).items()}
        bb, pois, t_bb, t_pois = results["bb"], results["pois"], seconds["bb"], seconds["pois"]
        gap = (bb.upper - bb.lower) / bb.upper
        line = (f"{sigma:5.2f} {t:6d} {epochs:3d} | [{bb.lower:.5f}, {bb.upper:.5f}]"
                f"{'':>10} {gap:7.3%} {t_bb:6.2f} | {pois.upper:18.5f} {t_pois:6.2f}")
        if have_dpa:
            theirs, t_dpa = results["dpa"], seconds["dpa"]
            line += f" | {theirs:10.5f} {t_dpa:6.2f} {t_bb / t_dpa:11.2f}x"
        samples = max(2, int(args.mc_normals // (t * epochs)))
        est, t_mc = timed(lambda: monte_carlo_delta(sigma, t, bb.upper, epochs=epochs,
                                                    samples=samples, tilt=2.0, seed=0))
        line += (f" | {est.estimate:.3e} +- {est.standard_error:.1e} (n={est.samples})"
                 f" {t_mc:6.2f}")
        print(line)
        if (sigma, t, epochs) == CASES[0]:
            print(f"  target: time {t_bb:.2f} s <= 10 s -> "
                  f"{'met' if t_bb <= 10 else 'MISSED'}; gap {gap:.3%} <= 2 % -> "
                  f"{'met' if gap <= 0.02 else 'MISSED'}; ratio to Poisson eps "
                  f"{bb.upper / pois.upper:.3f}")


if __name__ == "__main__":
    main()
