"""Shuffle model with a known randomizer vs FMT21 and the VLDB 2024 (variation-ratio) numbers.

For binary RR on the grid n in {1e3, 1e4, 1e5, 1e6}, eps0 in {0.5, 1, 2, 4, 8},
delta in {1e-6, 1e-8} it prints our certified upper bound (the exact worst case over datasets,
:class:`dpplugins.amplification.shuffle_model.BinaryRRWorstCase`), the certified lower bound,
their gap, FMT21 (every eps0-DP randomizer) and the ratio ours/FMT21, the number the
variation-ratio pair gives (for binary RR it is FMT23's stronger clone, valid there), and the
wall-clock time of our upper bound (caches cleared; no assertion).  Then k-RR (k = 4, 16): our
upper bound (blanket / stronger clone), Wang et al.'s k-RR number -- which is a certified *lower*
bound, see the module docstring -- and the time.  Then general eps0-DP randomizers: FMT21 (what
we certify) against the VLDB "general mechanisms" number, which rests on the unproven stronger
clone.  Last, 10 rounds composed by PLD, upper vs lower.

Run: ``PYTHONPATH=. python benchmarks/shuffle_model_vs_vldb.py [--quick]``
"""

from __future__ import annotations

import argparse
import time

from dpplugins.amplification import shuffle as sh
from dpplugins.amplification import shuffle_model as sm

NS = (1_000, 10_000, 100_000, 1_000_000)
EPS0S = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTAS = (1e-6, 1e-8)


def clear() -> None:
    for fn in (sm._binary_core, sm._binary_worst_case, sm._cached_blanket, sm._coarse_blanket,
               sm._strong_clone, sm._fmt21_clone, sm._lower_pairs, sm._epsilon_cached,
               sm._lower_cached, sm._blanket_conditional, sm._profile_cached, sm._profile_memo,
               sh._clone_pair):
        fn.cache_clear()


def timed(fn):
    clear()
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def binary_grid(ns, eps0s, deltas) -> None:
    print("binary randomized response (upper = exact worst case over all datasets, certified)")
    head = (f"{'delta':>6} {'n':>8} {'eps0':>4} | {'upper':>9} {'lower':>9} {'gap%':>6} | "
            f"{'FMT21':>9} {'ours/FMT21':>10} | {'VR(=FMT23)':>10} {'ours/VR':>7} | {'s':>6}")
    print(head)
    print("-" * len(head))
    worst_ratio, worst_gap, slowest, worst_free = 0.0, 0.0, 0.0, 0.0
    for delta in deltas:
        for n in ns:
            for eps0 in eps0s:
                b, t = timed(lambda: sm.epsilon_bounds(("binary_rr", eps0), n, delta))
                f21 = sh.fmt21_epsilon(eps0, n, delta).epsilon
                vr = sm.variation_ratio_pair(*sm.variation_ratio_parameters(
                    ("binary_rr", eps0)), n).epsilon(delta, eps0)
                gap = (b.upper - b.lower) / b.upper * 100 if b.upper > 0 else 0.0
                worst_ratio, worst_gap = max(worst_ratio, b.upper / f21), max(worst_gap, gap)
                if f21 < 0.99 * eps0:  # FMT21 amplifies at all here
                    worst_free = max(worst_free, b.upper / f21)
                slowest = max(slowest, t)
                print(f"{delta:>6g} {n:>8} {eps0:>4g} | {b.upper:>9.6f} {b.lower:>9.6f} "
                      f"{gap:>6.3f} | {f21:>9.6f} {b.upper / f21:>10.4f} | {vr:>10.6f} "
                      f"{b.upper / vr:>7.4f} | {t:>6.2f}")
    print(f"binary RR: max ratio ours/FMT21 = {worst_ratio:.4f} ({worst_free:.4f} where FMT21 "
          f"is below 0.99 eps0), max gap to lower bound = {worst_gap:.3f} %, slowest point "
          f"{slowest:.2f} s (target 1 s at n = 1e6)")


def krr_grid(ns, eps0s, delta, ks=(4, 16)) -> None:
    print(f"\nk-ary randomized response, delta = {delta:g} (Wang et al.'s k-RR number is a "
          "certified lower bound)")
    head = (f"{'k':>3} {'n':>8} {'eps0':>4} | {'upper':>9} {'method':>12} | {'lower':>9} "
            f"{'gap%':>6} | {'VLDB k-RR':>9} | {'FMT21':>9} {'ours/FMT21':>10} | {'s':>6}")
    print(head)
    print("-" * len(head))
    for k in ks:
        for n in ns:
            for eps0 in eps0s:
                up, t = timed(lambda: sm.epsilon(("krr", eps0, k), n, delta))
                low = sm.lower_bound(("krr", eps0, k), n, delta).epsilon
                vr = sm.krr_lower_pairs(eps0, n, k)["others_at_c"].epsilon_lower(delta, eps0)
                f21 = sh.fmt21_epsilon(eps0, n, delta).epsilon
                gap = (up.epsilon - low) / up.epsilon * 100 if up.epsilon > 0 else 0.0
                print(f"{k:>3} {n:>8} {eps0:>4g} | {up.epsilon:>9.6f} {up.method:>12} | "
                      f"{low:>9.6f} {gap:>6.3f} | {vr:>9.6f} | {f21:>9.6f} "
                      f"{up.epsilon / f21:>10.4f} | {t:>6.2f}")


def general_grid(ns, eps0s, delta) -> None:
    print(f"\ngeneral eps0-DP randomizers, delta = {delta:g}: certified FMT21 vs the VLDB number "
          "(= stronger clone, unproven for general randomizers)")
    head = f"{'n':>8} {'eps0':>4} | {'FMT21':>9} | {'VLDB':>9} {'FMT21/VLDB':>10}"
    print(head)
    print("-" * len(head))
    for n in ns:
        for eps0 in eps0s:
            f21 = sm.epsilon(("general", eps0), n, delta).epsilon
            vr = sm.variation_ratio_pair(*sm.variation_ratio_parameters(("general", eps0)),
                                         n).epsilon(delta, eps0)
            print(f"{n:>8} {eps0:>4g} | {f21:>9.6f} | {vr:>9.6f} {f21 / vr:>10.4f}")


def composition(n=10_000, rounds=10, delta=1e-6) -> None:
    print(f"\n{rounds} rounds composed by PLD, n = {n}, delta = {delta:g}")
    for spec in (("binary_rr", 1.0), ("binary_rr", 4.0), ("krr", 2.0, 8), ("general", 2.0)):
        b, t = timed(lambda: sm.composed_epsilon_bounds([(spec, n, rounds)], delta))
        one = sm.epsilon(spec, n, delta).epsilon
        print(f"{str(spec):>22}: one round {one:.5f}; {rounds} rounds [{b.lower:.5f}, "
              f"{b.upper:.5f}] gap {(b.upper - b.lower) / b.upper * 100:.2f} %  ({t:.1f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset of the grid")
    args = parser.parse_args()
    if args.quick:
        binary_grid((1_000, 100_000), (0.5, 4.0), (1e-6,))
        krr_grid((10_000,), (1.0, 4.0), 1e-6, ks=(4,))
        general_grid((10_000,), (1.0, 4.0), 1e-6)
        composition(n=2_000, rounds=5)
        return
    binary_grid(NS, EPS0S, DELTAS)
    krr_grid(NS, EPS0S, 1e-6)
    general_grid(NS, EPS0S, 1e-6)
    composition()


if __name__ == "__main__":
    main()
