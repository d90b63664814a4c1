"""Time the exact clone-pair bounds at n = 10^6, delta = 1e-6 (target: <= 1 s per epsilon point).

Prints, per eps0 in {0.5, 2, 4, 8}: the FMT21 bound (every eps0-DP randomizer), the FMT23 bound
(binary randomized response), the Balle et al. 2020 closed form, and the exact binary/ternary RR
lower bound, with wall-clock seconds for each (caches cleared, so every point is computed from
scratch; ``--rounds`` alternating rounds per point, each running every bound once in a rotated
order, median seconds reported).  If the FMT21 authors' code is importable as ``computeamplification`` (put
apple/ml-shuffling-amplification on PYTHONPATH yourself; it is not a dependency), its numerical
upper bound and running time are printed beside ours.

Run: ``PYTHONPATH=. python benchmarks/shuffle_bound_speed.py``
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from pathlib import Path

from dpplugins.amplification import shuffle

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ab import alternate, clear_caches  # noqa: E402

N = 1_000_000
DELTA = 1e-6
EPS0S = (0.5, 2.0, 4.0, 8.0)


def uncached(fn):
    """``fn`` with the module's caches cleared first, so every call computes from scratch."""
    def call():
        clear_caches(shuffle)
        return fn()
    return call


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per point")
    args = parser.parse_args()
    try:
        theirs = importlib.import_module("computeamplification")
    except ImportError:
        theirs = None
    header = (f"{'eps0':>5} | {'FMT21 eps':>10} {'s':>6} | {'FMT23 (RR)':>10} {'s':>6} | "
              f"{'Balle20':>9} | {'RR lower':>9} {'s':>6}")
    if theirs is not None:
        header += f" | {'apple code':>10} {'s':>7} {'ours/theirs':>11}"
    print(f"n = {N}, delta = {DELTA:g}, {args.rounds} rounds, median seconds")
    print(header)
    print("-" * len(header))
    worst = 0.0
    for eps0 in EPS0S:
        values = {}
        candidates = {
            "fmt21": lambda: shuffle.fmt21_epsilon(eps0, N, DELTA).epsilon,
            "fmt23": lambda: shuffle.fmt23_epsilon(eps0, N, DELTA).epsilon,
            "lower": lambda: shuffle.lower_bound(eps0, N, DELTA).epsilon}
        if theirs is not None:
            candidates["theirs"] = lambda: theirs.numericalanalysis(N, eps0, DELTA, 10, 100, True)
        timed = {name: uncached(lambda fn=fn, name=name: values.__setitem__(name, fn()))
                 for name, fn in candidates.items()}
        seconds = {name: statistics.median(v)
                   for name, v in alternate(timed, max(1, args.rounds)).items()}
        balle = shuffle.balle2020_epsilon(eps0, N, DELTA).epsilon
        worst = max(worst, seconds["fmt21"], seconds["fmt23"])
        row = (f"{eps0:>5g} | {values['fmt21']:>10.5g} {seconds['fmt21']:>6.3f} | "
               f"{values['fmt23']:>10.5g} {seconds['fmt23']:>6.3f} | {balle:>9.4g} | "
               f"{values['lower']:>9.5g} {seconds['lower']:>6.2f}")
        if theirs is not None:
            row += (f" | {values['theirs']:>10.5g} {seconds['theirs']:>7.2f} "
                    f"{seconds['fmt21'] / seconds['theirs']:>11.3f}")
        print(row)
    print(f"slowest upper-bound point: {worst:.3f} s (target 1 s)")


if __name__ == "__main__":
    main()
