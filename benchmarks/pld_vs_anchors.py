"""Benchmark: our certified PLD accountant against the reference ("anchor") accountants.

What it measures
----------------
For DP-SGD steps (Poisson-subsampled Gaussian, add/remove neighbouring) it computes epsilon at a
fixed delta with

* ours:            ``dpplugins.accountants.create("pld")`` -- certified ``(lower, upper)`` bounds;
* dp-accounting:   ``dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)``
                   (its pessimistic estimate) and ``dp_accounting.rdp.RdpAccountant``;
* prv-accountant:  ``PRVAccountant`` (lower and upper bounds; ``eps_error`` 0.01 by default),

and the wall-clock time of each (``time.perf_counter``, a fresh accountant per timing so no cache
helps; ``--rounds`` rounds per cell (default 3), each running every accountant once in a rotated
order, and the median time is reported; every library is warmed up once on a tiny problem first
so imports and one-off set-up are not counted).

Sections
--------
1. Grid: q in {1e-3, 1e-2, 1e-1} x sigma in {0.6, 1, 2} x T in {100, 1000, 10000}, delta = 1e-5,
   with our relative certified gap ``(upper - lower) / upper``, our upper relative to dp-accounting
   ``(ours_upper - dpacc) / dpacc`` and the time ratios ours/dp-accounting PLD and ours/prv.
2. Headline case q = 0.01, sigma = 1, T = 10^4, delta = 1e-5 with its targets
   (gap <= 0.2 %, upper <= dp-accounting * (1 + 1e-4), time <= 0.5x dp-accounting PLD and
   <= 0.25x prv-accountant).
3. Long run: T = 10^6 steps at q = 1e-3, sigma = 1 (target: well under a second).
4. Calibration: ``find_noise_multiplier(target_epsilon=8, delta=1e-5, sample_rate=0.01,
   steps=10000)`` (target <= 1 s) and the certified epsilon of the sigma it returns.

After the grid the script lists consistency problems it finds (our lower > our upper, our interval
not overlapping prv-accountant's, our upper far from dp-accounting, our lower above an anchor's
upper bound) and every anchor error, one line per cell.

How to run
----------
From the repository root::

    PYTHONPATH=. python benchmarks/pld_vs_anchors.py            # everything (a few minutes)
    PYTHONPATH=. python benchmarks/pld_vs_anchors.py --quick    # sections 2-4 only (CI smoke)

Anchors that are not installed are reported and skipped.  Only numpy and the anchors are needed.
"""

from __future__ import annotations

import argparse
import importlib
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

DELTA = 1e-5
GRID_SAMPLE_RATES = (1e-3, 1e-2, 1e-1)
GRID_NOISE_MULTIPLIERS = (0.6, 1.0, 2.0)
GRID_STEPS = (100, 1_000, 10_000)
HEADLINE = dict(sample_rate=0.01, noise_multiplier=1.0, steps=10_000)
LONG_RUN = dict(sample_rate=1e-3, noise_multiplier=1.0, steps=1_000_000)
CALIBRATION = dict(target_epsilon=8.0, delta=1e-5, sample_rate=0.01, steps=10_000)
DPACC_VALUE_DISCRETIZATION_INTERVAL = 1e-4
PRV_DELTA_ERROR = 1e-10
# "upper far from dp-accounting": relative difference flagged in the consistency notes
FAR_FROM_DPACC = 1e-2


# -- results ------------------------------------------------------------------------------------
@dataclass
class Measurement:
    """One accountant's answer for one cell: epsilon bounds (lower may equal upper), seconds."""

    lower: Optional[float] = None
    upper: Optional[float] = None
    seconds: Optional[float] = None
    error: Optional[str] = None
    skipped: Optional[str] = None   # reason the accountant was not run (e.g. not installed)

    @property
    def ok(self) -> bool:
        return self.error is None and self.skipped is None and self.upper is not None


@dataclass
class Cell:
    sample_rate: float
    noise_multiplier: float
    steps: int
    ours: Measurement = field(default_factory=Measurement)
    dpacc_pld: Measurement = field(default_factory=Measurement)
    prv: Measurement = field(default_factory=Measurement)
    dpacc_rdp: Measurement = field(default_factory=Measurement)

    def label(self) -> str:
        return f"q={self.sample_rate:g} sigma={self.noise_multiplier:g} T={self.steps:g}"


# -- lazily imported anchors --------------------------------------------------------------------
_MODULES: dict = {}


def load_module(name: str):
    """Import ``name`` once; return ``None`` (and remember the reason) if it is missing."""
    if name not in _MODULES:
        try:
            _MODULES[name] = importlib.import_module(name)
        except ImportError as error:
            _MODULES[name] = None
            _MODULES[name + ":reason"] = str(error)
    return _MODULES[name]


def report_missing_anchors() -> None:
    for package, module in (("dp-accounting", "dp_accounting"),
                            ("prv-accountant", "prv_accountant")):
        if load_module(module) is None:
            print(f"{package}: not installed ({_MODULES[module + ':reason']}); its columns are "
                  "skipped")


def short_message(error: BaseException, limit: int = 90) -> str:
    text = f"{type(error).__name__}: {error}".replace("\n", " ")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def timed(compute: Callable[[], tuple]) -> Measurement:
    """Run ``compute() -> (lower, upper)`` once; time it; turn an exception into ``error``."""
    start = time.perf_counter()
    try:
        lower, upper = compute()
    except Exception as error:  # noqa: BLE001 -- every anchor failure is reported per cell
        return Measurement(seconds=time.perf_counter() - start, error=short_message(error))
    return Measurement(lower=float(lower), upper=float(upper),
                       seconds=time.perf_counter() - start)


# -- the four accountants -----------------------------------------------------------------------
def measure_ours(q: float, sigma: float, steps: int, delta: float = DELTA) -> Measurement:
    from dpplugins.accountants import create

    def compute():
        acc = create("pld")
        acc.step(noise_multiplier=sigma, sample_rate=q, count=steps)
        bounds = acc.get_epsilon_bounds(delta)
        return bounds.lower, bounds.upper
    return timed(compute)


def dpacc_event(q: float, sigma: float, steps: int):
    dp_accounting = load_module("dp_accounting")
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)


def measure_dpacc_pld(q: float, sigma: float, steps: int, delta: float = DELTA) -> Measurement:
    if load_module("dp_accounting") is None:
        return Measurement(skipped="dp-accounting not installed")
    from dp_accounting.pld import pld_privacy_accountant

    def compute():
        acc = pld_privacy_accountant.PLDAccountant(
            value_discretization_interval=DPACC_VALUE_DISCRETIZATION_INTERVAL)
        acc.compose(dpacc_event(q, sigma, steps))
        eps = acc.get_epsilon(delta)
        return eps, eps
    return timed(compute)


def measure_dpacc_rdp(q: float, sigma: float, steps: int, delta: float = DELTA) -> Measurement:
    if load_module("dp_accounting") is None:
        return Measurement(skipped="dp-accounting not installed")
    from dp_accounting.rdp import rdp_privacy_accountant

    def compute():
        acc = rdp_privacy_accountant.RdpAccountant()
        acc.compose(dpacc_event(q, sigma, steps))
        eps = acc.get_epsilon(delta)
        return eps, eps
    return timed(compute)


def measure_prv(q: float, sigma: float, steps: int, delta: float = DELTA,
                eps_error: float = 0.01) -> Measurement:
    if load_module("prv_accountant") is None:
        return Measurement(skipped="prv-accountant not installed")
    from prv_accountant import PRVAccountant
    from prv_accountant.privacy_random_variables import PoissonSubsampledGaussianMechanism

    def compute():
        prv = PRVAccountant(
            prvs=PoissonSubsampledGaussianMechanism(noise_multiplier=sigma,
                                                    sampling_probability=q),
            max_self_compositions=steps, eps_error=eps_error, delta_error=PRV_DELTA_ERROR)
        lower, _estimate, upper = prv.compute_epsilon(delta=delta, num_self_compositions=[steps])
        return lower, upper
    return timed(compute)


def warm_up(prv_eps_error: float) -> None:
    """One tiny run of every accountant so imports and one-off set-up are not timed."""
    measure_ours(0.5, 1.0, 3)
    measure_dpacc_pld(0.5, 1.0, 3)
    measure_dpacc_rdp(0.5, 1.0, 3)
    measure_prv(0.5, 1.0, 3, eps_error=prv_eps_error)


#: rounds per cell: every round runs each accountant once, in a rotated order (A/B alternation,
#: so drift of a busy machine hits all alike); the cell keeps each accountant's median time
ROUNDS = 3


def _median_of(runs: list[Measurement]) -> Measurement:
    """The last run's bounds with the median time of all runs (an error or skip is kept)."""
    for m in runs:
        if not m.ok:
            return m
    last = runs[-1]
    return Measurement(lower=last.lower, upper=last.upper,
                       seconds=median([m.seconds for m in runs]))


def measure_cell(q: float, sigma: float, steps: int, prv_eps_error: float,
                 with_rdp: bool = True, with_prv: bool = True, rounds: int | None = None) -> Cell:
    cell = Cell(q, sigma, steps)
    candidates = {"ours": lambda: measure_ours(q, sigma, steps),
                  "dpacc_pld": lambda: measure_dpacc_pld(q, sigma, steps)}
    if with_prv:
        candidates["prv"] = lambda: measure_prv(q, sigma, steps, eps_error=prv_eps_error)
    if with_rdp:
        candidates["dpacc_rdp"] = lambda: measure_dpacc_rdp(q, sigma, steps)
    names = list(candidates)
    runs: dict[str, list[Measurement]] = {name: [] for name in names}
    for r in range(ROUNDS if rounds is None else rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            runs[name].append(candidates[name]())
    cell.prv = cell.dpacc_rdp = Measurement(skipped="not run")
    for name, measured in runs.items():
        setattr(cell, name, _median_of(measured))
    return cell


# -- derived quantities -------------------------------------------------------------------------
def relative_gap(m: Measurement) -> Optional[float]:
    if not m.ok or m.upper <= 0:
        return None
    return (m.upper - m.lower) / m.upper


def relative_difference(value: Optional[float], reference: Optional[float]) -> Optional[float]:
    if value is None or reference is None or reference == 0:
        return None
    return (value - reference) / reference


def time_ratio(ours: Measurement, other: Measurement) -> Optional[float]:
    if not (ours.ok and other.ok) or not other.seconds:
        return None
    return ours.seconds / other.seconds


def consistency_problems(cell: Cell) -> list[str]:
    """Everything that looks wrong about our numbers in this cell, one string each."""
    problems = []
    ours = cell.ours
    if ours.error is not None:
        return [f"OURS raised {ours.error}"]
    if not ours.ok:
        return problems
    if not all(math.isfinite(v) for v in (ours.lower, ours.upper)):
        problems.append(f"OURS non-finite bounds ({ours.lower}, {ours.upper})")
    if ours.lower > ours.upper:
        problems.append(f"OURS lower > upper ({ours.lower:.6g} > {ours.upper:.6g})")
    if cell.prv.ok and (ours.upper < cell.prv.lower or ours.lower > cell.prv.upper):
        problems.append(f"ours [{ours.lower:.6g}, {ours.upper:.6g}] does not overlap prv "
                        f"[{cell.prv.lower:.6g}, {cell.prv.upper:.6g}]")
    if cell.dpacc_pld.ok:
        diff = relative_difference(ours.upper, cell.dpacc_pld.upper)
        if diff is not None and abs(diff) > FAR_FROM_DPACC:
            problems.append(f"ours upper {ours.upper:.6g} is {diff:+.2%} from dp-accounting PLD "
                            f"{cell.dpacc_pld.upper:.6g}")
        if ours.lower > cell.dpacc_pld.upper:
            problems.append(f"ours lower {ours.lower:.6g} > dp-accounting PLD pessimistic "
                            f"{cell.dpacc_pld.upper:.6g}")
    if cell.dpacc_rdp.ok and ours.lower > cell.dpacc_rdp.upper:
        problems.append(f"ours lower {ours.lower:.6g} > dp-accounting RDP upper bound "
                        f"{cell.dpacc_rdp.upper:.6g}")
    return problems


def anchor_errors(cell: Cell) -> list[str]:
    return [f"{name}: error: {m.error}"
            for name, m in (("dp-accounting PLD", cell.dpacc_pld), ("prv-accountant", cell.prv),
                            ("dp-accounting RDP", cell.dpacc_rdp)) if m.error is not None]


# -- formatting ---------------------------------------------------------------------------------
def fmt(value: Optional[float], spec: str = ".5f", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def fmt_bound(m: Measurement, which: str) -> str:
    if m.error is not None:
        return "error"
    if m.skipped is not None:
        return "n/a"
    return fmt(getattr(m, which))


def fmt_seconds(m: Measurement) -> str:
    if m.skipped is not None:
        return "n/a"
    return fmt(m.seconds, ".3f")


TABLE_COLUMNS = (
    # header, width, cell -> text
    ("q", 6, lambda c: f"{c.sample_rate:g}"),
    ("sigma", 5, lambda c: f"{c.noise_multiplier:g}"),
    ("T", 6, lambda c: f"{c.steps:d}"),
    ("ours_lo", 9, lambda c: fmt_bound(c.ours, "lower")),
    ("ours_hi", 9, lambda c: fmt_bound(c.ours, "upper")),
    ("gap%", 6, lambda c: fmt(_percent(relative_gap(c.ours)), ".3f")),
    ("t_ours", 6, lambda c: fmt_seconds(c.ours)),
    ("dpPLD", 9, lambda c: fmt_bound(c.dpacc_pld, "upper")),
    ("t_dpPLD", 7, lambda c: fmt_seconds(c.dpacc_pld)),
    ("hi-dp/dp", 9, lambda c: fmt(relative_difference(
        c.ours.upper if c.ours.ok else None,
        c.dpacc_pld.upper if c.dpacc_pld.ok else None), "+.1e")),
    ("prv_lo", 9, lambda c: fmt_bound(c.prv, "lower")),
    ("prv_hi", 9, lambda c: fmt_bound(c.prv, "upper")),
    ("t_prv", 7, lambda c: fmt_seconds(c.prv)),
    ("RDP", 9, lambda c: fmt_bound(c.dpacc_rdp, "upper")),
    ("t_RDP", 6, lambda c: fmt_seconds(c.dpacc_rdp)),
    ("t/dpPLD", 7, lambda c: fmt(time_ratio(c.ours, c.dpacc_pld), ".3f")),
    ("t/prv", 6, lambda c: fmt(time_ratio(c.ours, c.prv), ".3f")),
)


def _percent(x: Optional[float]) -> Optional[float]:
    return None if x is None else 100.0 * x


def table_row(texts) -> str:
    return " ".join(text.rjust(width) for text, (_, width, _) in zip(texts, TABLE_COLUMNS))


def print_table(cells: list[Cell]) -> None:
    print(table_row([header for header, _, _ in TABLE_COLUMNS]))
    print(table_row(["-" * width for _, width, _ in TABLE_COLUMNS]))
    for cell in cells:
        print(table_row([render(cell) for _, _, render in TABLE_COLUMNS]))


def print_column_legend() -> None:
    print("columns: ours_lo/ours_hi = our certified bounds; gap% = 100*(hi-lo)/hi; "
          "dpPLD = dp-accounting PLD (pessimistic, vdi=1e-4);")
    print("         hi-dp/dp = (ours_hi - dpPLD)/dpPLD; prv_lo/prv_hi = prv-accountant bounds; "
          "RDP = dp-accounting RDP;")
    print("         t_* = seconds (one run, fresh accountant); t/dpPLD = t_ours/t_dpPLD; "
          "t/prv = t_ours/t_prv")


def target_line(name: str, measured: Optional[float], target_text: str,
                met: Optional[bool], measured_spec: str, reference_only: bool = False) -> str:
    status = ("(reference)" if reference_only else
              "n/a" if met is None else ("met" if met else "NOT MET"))
    return f"  {name:<34} {fmt(measured, measured_spec):>12}   target {target_text:<24} {status}"


def print_notes(cells: list[Cell]) -> None:
    problems = [(cell, p) for cell in cells for p in consistency_problems(cell)]
    errors = [(cell, e) for cell in cells for e in anchor_errors(cell)]
    print("consistency checks on our numbers:" + ("" if problems else " none flagged"))
    for cell, problem in problems:
        print(f"  [{cell.label()}] {problem}")
    print("anchor errors:" + ("" if errors else " none"))
    for cell, error in errors:
        print(f"  [{cell.label()}] {error}")


# -- sections -----------------------------------------------------------------------------------
def run_grid(prv_eps_error: float) -> None:
    print(f"== 1. grid (delta={DELTA:g}, prv eps_error={prv_eps_error:g}) ==")
    print_column_legend()
    cells = []
    for q in GRID_SAMPLE_RATES:
        for sigma in GRID_NOISE_MULTIPLIERS:
            for steps in GRID_STEPS:
                cells.append(measure_cell(q, sigma, steps, prv_eps_error))
    print_table(cells)
    print()
    print_notes(cells)
    ratios_dp = [r for r in (time_ratio(c.ours, c.dpacc_pld) for c in cells) if r is not None]
    ratios_prv = [r for r in (time_ratio(c.ours, c.prv) for c in cells) if r is not None]
    gaps = [g for g in (relative_gap(c.ours) for c in cells) if g is not None]
    diffs = [d for d in (relative_difference(c.ours.upper if c.ours.ok else None,
                                             c.dpacc_pld.upper if c.dpacc_pld.ok else None)
                         for c in cells) if d is not None]
    print("grid summary:")
    if gaps:
        print(f"  our relative gap: max {max(gaps):.3%}, median {median(gaps):.3%}")
    if diffs:
        print(f"  (ours_hi - dpPLD)/dpPLD: min {min(diffs):+.2e}, max {max(diffs):+.2e}")
    if ratios_dp:
        print(f"  time ours/dp-accounting PLD: median {median(ratios_dp):.3f}, "
              f"max {max(ratios_dp):.3f} over {len(ratios_dp)} cells")
    if ratios_prv:
        print(f"  time ours/prv-accountant: median {median(ratios_prv):.3f}, "
              f"max {max(ratios_prv):.3f} over {len(ratios_prv)} cells")
    print()


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])


def run_headline(prv_eps_error: float) -> None:
    q, sigma, steps = HEADLINE["sample_rate"], HEADLINE["noise_multiplier"], HEADLINE["steps"]
    print(f"== 2. headline case q={q:g}, sigma={sigma:g}, T={steps:d}, delta={DELTA:g} ==")
    cell = measure_cell(q, sigma, steps, prv_eps_error)
    print_table([cell])
    gap = relative_gap(cell.ours)
    prv_gap = relative_gap(cell.prv)
    diff = relative_difference(cell.ours.upper if cell.ours.ok else None,
                               cell.dpacc_pld.upper if cell.dpacc_pld.ok else None)
    r_dp = time_ratio(cell.ours, cell.dpacc_pld)
    r_prv = time_ratio(cell.ours, cell.prv)
    print(target_line("certified gap (hi-lo)/hi", _percent(gap), "<= 0.2 %",
                      None if gap is None else gap <= 2e-3, ".3f") + "  (%)")
    print(target_line("prv-accountant's gap (hi-lo)/hi", _percent(prv_gap), "about 0.33 %",
                      None, ".3f", reference_only=True) + "  (%)")
    print(target_line("(ours_hi - dpPLD)/dpPLD", diff, "<= 1e-4",
                      None if diff is None else diff <= 1e-4, "+.2e"))
    print(target_line("time ours / dp-accounting PLD", r_dp, "<= 0.5",
                      None if r_dp is None else r_dp <= 0.5, ".3f"))
    print(target_line("time ours / prv-accountant", r_prv, "<= 0.25",
                      None if r_prv is None else r_prv <= 0.25, ".3f"))
    for line in consistency_problems(cell) + anchor_errors(cell):
        print(f"  note: {line}")
    print()


def run_long(prv_eps_error: float) -> None:
    q, sigma, steps = LONG_RUN["sample_rate"], LONG_RUN["noise_multiplier"], LONG_RUN["steps"]
    print(f"== 3. long run q={q:g}, sigma={sigma:g}, T={steps:d}, delta={DELTA:g} "
          "(prv-accountant and RDP not run) ==")
    cell = measure_cell(q, sigma, steps, prv_eps_error, with_rdp=False, with_prv=False)
    ours, dp = cell.ours, cell.dpacc_pld
    if ours.ok:
        print(f"  ours:              eps in [{ours.lower:.6f}, {ours.upper:.6f}]  "
              f"gap {relative_gap(ours):.3%}  time {ours.seconds:.3f} s  "
              f"(target: well under 1 s -> {'met' if ours.seconds < 1.0 else 'NOT MET'})")
    else:
        print(f"  ours: error: {ours.error}")
    if dp.ok:
        print(f"  dp-accounting PLD: eps {dp.upper:.6f}                      "
              f"time {dp.seconds:.3f} s")
        diff = relative_difference(ours.upper if ours.ok else None, dp.upper)
        print(f"  (ours_hi - dpPLD)/dpPLD = {fmt(diff, '+.2e')}, "
              f"time ours/dpPLD = {fmt(time_ratio(ours, dp), '.3f')}")
    else:
        print(f"  dp-accounting PLD: {dp.skipped or 'error: ' + str(dp.error)}")
    for line in consistency_problems(cell):
        print(f"  note: {line}")
    print()


def run_calibration() -> None:
    print(f"== 4. calibration: find_noise_multiplier(target_epsilon="
          f"{CALIBRATION['target_epsilon']:g}, delta={CALIBRATION['delta']:g}, sample_rate="
          f"{CALIBRATION['sample_rate']:g}, steps={CALIBRATION['steps']:d}) ==")
    try:
        from dpplugins.calibration import find_noise_multiplier
    except ImportError:
        print("calibration: not available")
        print()
        return
    start = time.perf_counter()
    try:
        sigma = find_noise_multiplier(accountant="pld", **CALIBRATION)
    except Exception as error:  # noqa: BLE001
        print(f"  calibration: error: {short_message(error)}")
        print()
        return
    seconds = time.perf_counter() - start
    print(f"  sigma = {sigma:.6f}   time {seconds:.3f} s   "
          f"(target <= 1 s -> {'met' if seconds <= 1.0 else 'NOT MET'})")
    q, steps, delta = CALIBRATION["sample_rate"], CALIBRATION["steps"], CALIBRATION["delta"]
    ours = measure_ours(q, sigma, steps, delta)
    if ours.ok:
        within = ours.upper <= CALIBRATION["target_epsilon"]
        print(f"  ours at that sigma: eps in [{ours.lower:.6f}, {ours.upper:.6f}]  "
              f"(certified upper <= target {CALIBRATION['target_epsilon']:g}: "
              f"{'yes' if within else 'NO'})")
    else:
        print(f"  ours at that sigma: error: {ours.error}")
    dp = measure_dpacc_pld(q, sigma, steps, delta)
    if dp.ok:
        print(f"  dp-accounting PLD at that sigma: eps {dp.upper:.6f}")
    print()


def parse_arguments(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="run only the headline case, the long run and calibration")
    parser.add_argument("--prv-eps-error", type=float, default=0.01,
                        help="eps_error passed to prv-accountant (default 0.01)")
    parser.add_argument("--rounds", type=int, default=ROUNDS,
                        help="alternating rounds per cell; the median time is reported "
                             f"(default {ROUNDS})")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    global ROUNDS
    args = parse_arguments(argv)
    ROUNDS = max(1, args.rounds)
    report_missing_anchors()
    warm_up(args.prv_eps_error)
    if not args.quick:
        run_grid(args.prv_eps_error)
    run_headline(args.prv_eps_error)
    run_long(args.prv_eps_error)
    run_calibration()


if __name__ == "__main__":
    main()
