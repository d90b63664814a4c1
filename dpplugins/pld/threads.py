"""The threads of the PLD engine: how many, and a map over them whose result does not depend on
that number.

The spectral terms of the components of one composition (a transform and a few vector
operations on arrays of the window's length each) are independent numpy and scipy calls that
release the GIL while they run, so a few threads shorten them on a machine with several cores
(measured on 2 cores: 1000 distinct components 1.4 times faster).  Discretising a step is not
worth it: its arrays are short and its Python overhead holds the GIL (no gain measured).  Every
function here returns exactly what the plain loop returns, in the same order.
"""

from __future__ import annotations

import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator, Sequence, TypeVar

__all__ = ["engine_threads", "ordered_map"]

T = TypeVar("T")
R = TypeVar("R")


def engine_threads() -> int:
    """Threads the engine may use: the environment variable ``DPPLUGINS_THREADS`` if set (1:
    none), else the processors this process may run on, at most 4."""
    value = os.environ.get("DPPLUGINS_THREADS")
    if value:
        try:
            return max(int(value), 1)
        except ValueError:
            return 1
    try:
        available = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        available = os.cpu_count() or 1
    return max(min(available, 4), 1)


def ordered_map(function: Callable[[T], R], items: Sequence[T],
                threads: int | None = None) -> Iterator[R]:
    """``map(function, items)``, run on ``threads`` threads (default :func:`engine_threads`)
    with at most that many results waiting to be consumed, yielded in the order of ``items``.
    With one thread (or one item) it is the plain ``map``.  An exception of ``function`` is
    raised where its result would have been yielded."""
    threads = engine_threads() if threads is None else max(int(threads), 1)
    threads = min(threads, len(items))
    if threads <= 1:
        yield from map(function, items)
        return
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="dpplugins") as pool:
        pending: deque = deque()
        for item in items:
            pending.append(pool.submit(function, item))
            if len(pending) >= threads:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
