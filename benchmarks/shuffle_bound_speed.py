"""Time the exact clone-pair bounds at n = 10^6, delta = 1e-6 (target: <= 1 s per epsilon point).

Prints, per eps0 in {0.5, 2, 4, 8}: the FMT21 bound (every eps0-DP randomizer), the FMT23 bound
(binary randomized response), the Balle et al. 2020 closed form, and the exact binary/ternary RR
lower bound, with wall-clock seconds for each (caches cleared, so every point is computed from
scratch).  If the FMT21 authors' code is importable as ``computeamplification`` (put
apple/ml-shuffling-amplification on PYTHONPATH yourself; it is not a dependency), its numerical
upper bound and running time are printed beside ours.

Run: ``PYTHONPATH=. python benchmarks/shuffle_bound_speed.py``
"""

from __future__ import annotations

import importlib
import time

from dpplugins.amplification import shuffle

N = 1_000_000
DELTA = 1e-6
EPS0S = (0.5, 2.0, 4.0, 8.0)


def timed(fn):
    shuffle._clone_pair.cache_clear()
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    try:
        theirs = importlib.import_module("computeamplification")
    except ImportError:
        theirs = None
    header = (f"{'eps0':>5} | {'FMT21 eps':>10} {'s':>6} | {'FMT23 (RR)':>10} {'s':>6} | "
              f"{'Balle20':>9} | {'RR lower':>9} {'s':>6}")
    if theirs is not None:
        header += f" | {'apple code':>10} {'s':>7}"
    print(f"n = {N}, delta = {DELTA:g}")
    print(header)
    print("-" * len(header))
    worst = 0.0
    for eps0 in EPS0S:
        fmt21, t21 = timed(lambda: shuffle.fmt21_epsilon(eps0, N, DELTA).epsilon)
        fmt23, t23 = timed(lambda: shuffle.fmt23_epsilon(eps0, N, DELTA).epsilon)
        balle = shuffle.balle2020_epsilon(eps0, N, DELTA).epsilon
        lower, tl = timed(lambda: shuffle.lower_bound(eps0, N, DELTA).epsilon)
        worst = max(worst, t21, t23)
        row = (f"{eps0:>5g} | {fmt21:>10.5g} {t21:>6.3f} | {fmt23:>10.5g} {t23:>6.3f} | "
               f"{balle:>9.4g} | {lower:>9.5g} {tl:>6.2f}")
        if theirs is not None:
            start = time.perf_counter()
            value = theirs.numericalanalysis(N, eps0, DELTA, 10, 100, True)
            row += f" | {value:>10.5g} {time.perf_counter() - start:>7.2f}"
        print(row)
    print(f"slowest upper-bound point: {worst:.3f} s (target 1 s)")


if __name__ == "__main__":
    main()
