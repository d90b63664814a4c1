"""Shuffle model with a known randomizer vs FMT21 and the VLDB 2024 (variation-ratio) numbers.

Values (each computed once):

* binary RR on the grid n in {1e3, 1e4, 1e5, 1e6}, eps0 in {0.5, 1, 2, 4, 8},
  delta in {1e-6, 1e-8}: our certified upper bound (exact worst case over datasets,
  :class:`dpplugins.amplification.shuffle_model.BinaryRRWorstCase`), the certified lower bound,
  their gap, FMT21 and the variation-ratio pair's number (for binary RR it is FMT23's stronger
  clone, valid there);
* binary RR at n in {1e7, 1e8} and delta in {1e-10, 1e-12}: which bound answers, its gap to
  the lower bound and its time;
* k-RR (k = 4, 16, 64; delta in {1e-6, 1e-8}): our bound (blanket / stronger clone), the
  certified lower bound (the exact third-value pair, :mod:`dpplugins.amplification.
  krr_third_value`, where it is computed), their gap, and Wang et al.'s k-RR number (a
  certified *lower* bound, the pooled pair, see :mod:`dpplugins.amplification.shuffle_model`);
* the families of :mod:`dpplugins.amplification.shuffle_model_families`: FMT21, the errata's
  Lemma 7.3 bound, the lower bound, and the variation-ratio number with Wang et al.'s parameters
  (not certified: its reduction is the withdrawn FMT23 Lemma 3.5);
* general eps0-DP randomizers: FMT21 and our certified stronger clone against the VLDB
  "general" number (the same pair, uncertified);
* 10 rounds composed by PLD.

Timing: alternating A/B rounds (:mod:`benchmarks._ab`), caches cleared before every call of
ours: ours against the authors' public code (``amplificationUB`` of ``unifiedamplification.py``
from github.com/wangsw/PrivacyAmplification, run from a directory given by ``--vldb-dir`` or the
environment variable ``VLDB_CODE_DIR``; it is never copied here) for binary RR at n = 1e6 and
n = 1e8, and of our Laplace upper and lower bounds at n = 1e6 (against the same code with Wang
et al.'s Laplace parameters), medians and ratios printed, and the peak memory of one n = 1e8
point of ours measured in a fresh process.  No assertion: this prints.

Run: ``PYTHONPATH=. python benchmarks/shuffle_model_vs_vldb.py [--quick] [--vldb-dir DIR]
[--rounds R]``
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _ab import alternate, clear_caches, report  # noqa: E402

from dpplugins.amplification import shuffle as sh  # noqa: E402
from dpplugins.amplification import shuffle_model as sm  # noqa: E402
from dpplugins.amplification import shuffle_model_errata as sme  # noqa: E402
from dpplugins.amplification import shuffle_model_families as fam  # noqa: E402

NS = (1_000, 10_000, 100_000, 1_000_000)
EPS0S = (0.5, 1.0, 2.0, 4.0, 8.0)
DELTAS = (1e-6, 1e-8)


def clear() -> None:
    clear_caches(sh, sm, sme, fam)


def binary_grid(ns, eps0s, deltas) -> None:
    print("binary randomized response (upper = exact worst case over all datasets, certified)")
    head = (f"{'delta':>6} {'n':>8} {'eps0':>4} | {'upper':>9} {'lower':>9} {'gap%':>6} | "
            f"{'FMT21':>9} {'ours/FMT21':>10} | {'VR(=FMT23)':>10} {'ours/VR':>7}")
    print(head)
    print("-" * len(head))
    worst_gap, worst_vr = 0.0, 0.0
    for delta in deltas:
        for n in ns:
            for eps0 in eps0s:
                b = sm.epsilon_bounds(("binary_rr", eps0), n, delta)
                f21 = sh.fmt21_epsilon(eps0, n, delta).epsilon
                vr = sm.variation_ratio_pair(*sm.variation_ratio_parameters(
                    ("binary_rr", eps0)), n).epsilon(delta, eps0)
                gap = (b.upper - b.lower) / b.upper * 100 if b.upper > 0 else 0.0
                worst_gap, worst_vr = max(worst_gap, gap), max(worst_vr, b.upper / vr)
                print(f"{delta:>6g} {n:>8} {eps0:>4g} | {b.upper:>9.6f} {b.lower:>9.6f} "
                      f"{gap:>6.3f} | {f21:>9.6f} {b.upper / f21:>10.4f} | {vr:>10.6f} "
                      f"{b.upper / vr:>7.4f}")
    print(f"binary RR: max gap to the lower bound {worst_gap:.3f} %, max ours/VR "
          f"{worst_vr:.4f}")


def binary_small_deltas(ns=(10_000_000, 100_000_000), eps0s=(0.5, 2.0, 8.0),
                        deltas=(1e-10, 1e-12)) -> None:
    """Binary RR at many users and small deltas: which bound answers (the exact worst case, or
    FMT23's stronger clone where the exact search stops at its rounding charge), the gap to the
    certified lower bound, and seconds for the upper bound (caches cleared, one call each)."""
    print("\nbinary RR, many users and small deltas (caches cleared, one call each)")
    head = (f"{'delta':>6} {'n':>10} {'eps0':>4} | {'upper':>10} {'method':>15} "
            f"{'lower':>10} {'gap%':>6} | {'seconds':>7}")
    print(head)
    print("-" * len(head))
    for delta in deltas:
        for n in ns:
            for eps0 in eps0s:
                clear()
                start = time.perf_counter()
                up = sm.epsilon(("binary_rr", eps0), n, delta)
                seconds = time.perf_counter() - start
                low = sm.lower_bound(("binary_rr", eps0), n, delta).epsilon
                gap = (up.epsilon - low) / up.epsilon * 100 if up.epsilon > 0 else 0.0
                print(f"{delta:>6g} {n:>10} {eps0:>4g} | {up.epsilon:>10.7f} {up.method:>15} "
                      f"{low:>10.7f} {gap:>6.3f} | {seconds:>7.2f}")


def krr_grid(ns, eps0s, delta, ks=(4, 16, 64)) -> None:
    print(f"\nk-ary randomized response, delta = {delta:g} (Wang et al.'s k-RR number is a "
          "certified lower bound)")
    head = (f"{'k':>3} {'n':>8} {'eps0':>4} | {'upper':>9} {'method':>12} | {'lower':>9} "
            f"{'gap%':>6} | {'VLDB k-RR':>9} | {'FMT21':>9}")
    print(head)
    print("-" * len(head))
    for k in ks:
        for n in ns:
            for eps0 in eps0s:
                up = sm.epsilon(("krr", eps0, k), n, delta)
                low = sm.lower_bound(("krr", eps0, k), n, delta).epsilon
                vr = sm.krr_lower_pairs(eps0, n, k)["others_at_c"].epsilon_lower(delta, eps0)
                f21 = sh.fmt21_epsilon(eps0, n, delta).epsilon
                gap = (up.epsilon - low) / up.epsilon * 100 if up.epsilon > 0 else 0.0
                print(f"{k:>3} {n:>8} {eps0:>4g} | {up.epsilon:>9.6f} {up.method:>12} | "
                      f"{low:>9.6f} {gap:>6.3f} | {vr:>9.6f} | {f21:>9.6f}")


def family_grid(ns, eps0s, delta) -> None:
    print(f"\nrandomizer families, delta = {delta:g}: FMT21, ours = the best of FMT21, the "
          "stronger clone, the errata's Lemma 7.3, the relaxed blanket and the blanket with the "
          "exact law of its variable (certified; 'method' names it), lower "
          "bound, and the variation-ratio number with Wang et al.'s parameters (NOT certified)")
    head = (f"{'family':>18} {'n':>8} {'eps0':>4} | {'FMT21':>9} {'ours':>9} {'ours/FMT21':>10} "
            f"{'method':>14} | {'lower':>9} {'gap%':>6} | {'VR (unproven)':>13}")
    print(head)
    print("-" * len(head))
    for n in ns:
        for eps0 in eps0s:
            for family in (fam.unary_encoding(eps0, 64), fam.unary_encoding(eps0, 64,
                                                                             optimized=True),
                           fam.subset_selection(eps0, 64, 4), fam.local_hashing(eps0, 16),
                           fam.laplace_bounded(eps0)):
                up = fam.epsilon(family, n, delta)
                low = fam.lower_bound(family, n, delta).epsilon
                f21 = up.candidates["fmt21"]
                vr = sm.variation_ratio_pair(*family.vr, n).epsilon(delta, eps0)
                gap = (up.epsilon - low) / up.epsilon * 100 if up.epsilon > 0 else 0.0
                print(f"{family.name:>18} {n:>8} {eps0:>4g} | {f21:>9.6f} {up.epsilon:>9.6f} "
                      f"{up.epsilon / f21:>10.4f} {up.method:>14} | {low:>9.6f} {gap:>6.2f} | "
                      f"{vr:>13.6f}")


def general_grid(ns, eps0s, delta) -> None:
    print(f"\ngeneral eps0-DP randomizers, delta = {delta:g}: FMT21 and our certified bound (the "
          "stronger clone, proved by the blanket argument of shuffle_model) vs the VLDB number")
    head = (f"{'n':>8} {'eps0':>4} | {'FMT21':>9} {'ours':>9} {'method':>6} | {'VLDB':>9} "
            f"{'ours/VLDB':>9}")
    print(head)
    print("-" * len(head))
    for n in ns:
        for eps0 in eps0s:
            up = sm.epsilon(("general", eps0), n, delta)
            vr = sm.variation_ratio_pair(*sm.variation_ratio_parameters(("general", eps0)),
                                         n).epsilon(delta, eps0)
            print(f"{n:>8} {eps0:>4g} | {up.candidates['fmt21']:>9.6f} {up.epsilon:>9.6f} "
                  f"{up.method:>6} | {vr:>9.6f} {up.epsilon / vr:>9.5f}")


def composition(ns=(10_000, 1_000_000), rounds=10, delta=1e-6) -> None:
    """10 rounds at each n; at 1e6 users the lower-bound pairs' windows have 1e7 to 6e7
    outcomes, merged by privacy loss (before: one category's count, gaps of 25-40 %)."""
    for n in ns:
        print(f"\n{rounds} rounds composed by PLD, n = {n}, delta = {delta:g} (seconds: the "
              "composed bounds, caches cleared)")
        for spec in (("binary_rr", 1.0), ("binary_rr", 4.0), ("krr", 2.0, 8), ("general", 2.0)):
            clear()
            start = time.perf_counter()
            b = sm.composed_epsilon_bounds([(spec, n, rounds)], delta)
            seconds = time.perf_counter() - start
            one = sm.epsilon(spec, n, delta).epsilon
            print(f"{str(spec):>22}: one round {one:.5f}; {rounds} rounds [{b.lower:.5f}, "
                  f"{b.upper:.5f}] gap {(b.upper - b.lower) / b.upper * 100:.2f} % "
                  f"({seconds:.1f} s)")
        for family in (fam.unary_encoding(2.0, 64, optimized=True), fam.local_hashing(2.0, 16)):
            clear()
            start = time.perf_counter()
            b = fam.composed_epsilon_bounds(family, n, rounds, delta)
            seconds = time.perf_counter() - start
            one = fam.epsilon(family, n, delta).epsilon
            print(f"{family.name:>22}: one round {one:.5f}; {rounds} rounds [{b.lower:.5f}, "
                  f"{b.upper:.5f}] gap {(b.upper - b.lower) / b.upper * 100:.2f} % "
                  f"({seconds:.1f} s)")


def _vldb_module(directory: str | None):
    if not directory:
        return None
    sys.path.insert(0, directory)
    try:
        return importlib.import_module("unifiedamplification")
    except ImportError as error:
        print(f"(VLDB code not importable from the given directory: {error})")
        return None


def timing(points, rounds: int, vldb, iterations: int) -> None:
    print(f"\ntiming, binary RR, alternating A/B, {rounds} rounds (ours: caches cleared before "
          f"each call; VLDB: amplificationUB with T = {iterations} bisection steps)")
    for n, eps0, delta in points:
        e = math.exp(eps0)
        values = {}

        def ours():
            clear()
            values["ours"] = sm.epsilon(("binary_rr", eps0), n, delta).epsilon

        candidates = {"ours (certified)": ours}
        if vldb is not None:
            def theirs():
                values["vldb"] = vldb.amplificationUB(e, (e - 1) / (e + 1), e, e, n, delta,
                                                      iterations)
            candidates["VLDB 2024 code"] = theirs
        samples = alternate(candidates, rounds)
        print(f"n = {n:g}, eps0 = {eps0:g}, delta = {delta:g}: ours {values['ours']:.7g}"
              + (f", VLDB {values['vldb']:.7g}" if "vldb" in values else ""))
        print(report(samples, "ours (certified)"))


def family_timing(points, rounds: int, vldb, iterations: int) -> None:
    """Laplace on bounded input at n = 1e6: our certified upper bound, and both bounds (the lower
    bound's search needs the upper as its top; each from scratch) against the VLDB code's variation-ratio number with Wang et al.'s
    Laplace parameters (not certified, see the module docstring of
    :mod:`dpplugins.amplification.shuffle_model_families`)."""
    print(f"\ntiming, Laplace on bounded input, alternating A/B, {rounds} rounds (ours: caches "
          "cleared before each call)")
    for n, eps0, delta in points:
        e = math.exp(eps0)
        values = {}

        def upper():
            clear()
            values["upper"] = fam.epsilon(fam.laplace_bounded(eps0), n, delta).epsilon

        def lower():
            clear()
            values["lower"] = fam.lower_bound(fam.laplace_bounded(eps0), n, delta).epsilon

        candidates = {"ours upper": upper, "ours upper + lower": lower}
        if vldb is not None:
            def theirs():
                values["vldb"] = vldb.amplificationUB(e, 1 - math.exp(-eps0 / 2), e, e, n,
                                                      delta, iterations)
            candidates["VLDB 2024 code"] = theirs
        samples = alternate(candidates, rounds)
        print(f"n = {n:g}, eps0 = {eps0:g}, delta = {delta:g}: ours [{values['lower']:.6g}, "
              f"{values['upper']:.6g}]" + (f", VLDB {values['vldb']:.6g}" if "vldb" in values
                                          else ""))
        print(report(samples, "ours upper"))


def peak_memory(n: int, eps0: float, delta: float) -> None:
    code = ("import resource; from dpplugins.amplification import shuffle_model as sm; "
            f"v = sm.epsilon(('binary_rr', {eps0}), {n}, {delta}).epsilon; "
            "print(v, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
         os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    print(f"peak memory of one point of ours in a fresh process (n = {n:g}, eps0 = {eps0:g}, "
          f"delta = {delta:g}): {float(out[1]):.0f} MB (epsilon {float(out[0]):.7g})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small subset of the grid")
    parser.add_argument("--vldb-dir", default=os.environ.get("VLDB_CODE_DIR"),
                        help="directory holding the authors' unifiedamplification.py")
    parser.add_argument("--vldb-iterations", type=int, default=12,
                        help="bisection steps T of the VLDB code (their default: 12)")
    parser.add_argument("--rounds", type=int, default=3, help="A/B rounds per timed point")
    parser.add_argument("--skip-values", action="store_true", help="timing and memory only")
    args = parser.parse_args()
    vldb = _vldb_module(args.vldb_dir)
    if not args.skip_values:
        if args.quick:
            binary_grid((1_000, 100_000), (0.5, 4.0), (1e-6,))
            krr_grid((10_000,), (1.0, 4.0), 1e-6, ks=(4,))
            family_grid((10_000,), (1.0, 4.0), 1e-6)
            general_grid((10_000,), (1.0, 4.0), 1e-6)
            composition(ns=(2_000,), rounds=5)
        else:
            binary_grid(NS, EPS0S, DELTAS)
            binary_small_deltas()
            for delta in DELTAS:
                krr_grid(NS, EPS0S, delta)
            for delta in DELTAS:
                family_grid(NS, EPS0S, delta)
            general_grid(NS, EPS0S, 1e-6)
            composition()
    points = [(1_000_000, 1.0, 1e-6), (100_000_000, 1.0, 1e-8), (100_000_000, 4.0, 1e-8)]
    timing(points[:2] if args.quick else points, args.rounds, vldb, args.vldb_iterations)
    laplace = [(1_000_000, eps0, 1e-6) for eps0 in ((1.0, 8.0) if args.quick else EPS0S)]
    family_timing(laplace, args.rounds, vldb, args.vldb_iterations)
    peak_memory(100_000_000, 0.5, 1e-8)


if __name__ == "__main__":
    main()
