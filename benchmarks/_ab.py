"""Alternating A/B timing shared by the benchmarks: every round runs each candidate once, in a
rotated order, so slow drift of a busy machine hits all candidates alike; the report gives each
candidate's median, its spread and the ratio of medians to a baseline -- no verdict from a single
block of runs."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def alternate(candidates: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds per call of every candidate over ``rounds`` rounds, alternating."""
    names = list(candidates)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for name in order:
            start = time.perf_counter()
            candidates[name]()
            samples[name].append(time.perf_counter() - start)
    return samples


def clear_caches(*modules) -> int:
    """Clear every ``functools`` cache held at module level in ``modules`` (found by looking,
    not listed by hand, so a cache added later cannot make a timed call free); returns how
    many were cleared."""
    cleared = 0
    for module in modules:
        for value in vars(module).values():
            if callable(getattr(value, "cache_clear", None)):
                value.cache_clear()
                cleared += 1
    return cleared


def report(samples: dict[str, list[float]], baseline: str, unit: str = "s") -> str:
    """A table: median, min-max and median ratio to ``baseline`` per candidate."""
    base = statistics.median(samples[baseline])
    lines = [f"{'candidate':28s} {'median ' + unit:>12s} {'min':>9s} {'max':>9s} "
             f"{'ratio':>7s}"]
    for name, values in samples.items():
        med = statistics.median(values)
        lines.append(f"{name:28s} {med:12.4f} {min(values):9.4f} {max(values):9.4f} "
                     f"{med / base:7.3f}")
    return "\n".join(lines)


def dp_accounting_pld_epsilon(event, count: int, delta: float) -> float:
    """dp-accounting's PLD accountant (its defaults) on ``count`` compositions of the
    dp-accounting ``event``: epsilon at ``delta`` (the anchor of the Poisson columns)."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    acc = pld_privacy_accountant.PLDAccountant()
    acc.compose(dp_accounting.SelfComposedDpEvent(event, count))
    return acc.get_epsilon(delta)
