"""Subprocess worker of the fuzz suite (``tests/test_fuzz.py``, reliability issue item 8).

Every accountant query of the fuzz suite runs in a separate process, so that the parent can hold
each query to a wall-clock limit and kill a computation that hangs (``signal.alarm`` cannot
interrupt a long FFT or a loop inside numpy/scipy).  The worker is started once and reused; it
is replaced only after a timeout.

A *job* is a list of operations run in order on one accountant:

* ``("create", name, options)`` -- ``dpplugins.accountants.create(name, **options)``;
* ``("compose", event, count)`` -- ``accountant.compose(evaluate(event), count)``;
* ``("step", kwargs)`` -- ``accountant.step(**kwargs)``;
* ``("supports", event)`` -- ``accountant.supports(evaluate(event))``;
* ``("query", method, argument)`` -- e.g. ``("query", "get_epsilon_bounds", 1e-5)``;
* ``("roundtrip", delta)`` -- ``eps = get_epsilon(delta)`` and, if finite, ``get_delta(eps)``
  on the same accountant (value ``(eps, delta_back or None)``).

Events travel as :class:`Call` trees (``Call(GaussianEvent, 1.0)``) and are built inside the
worker, so that constructing an event from a bad input is tested exactly like a query.  Each
operation answers with one :class:`Outcome`; the job stops at the first error in setting up the
accountant (a failing query does not stop it) and at a timeout.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import time
import traceback
from typing import Any, Callable


@dataclasses.dataclass(frozen=True)
class Call:
    """A picklable, lazily evaluated call ``fn(*args, **kwargs)`` (arguments may be Calls)."""

    fn: Callable
    args: tuple = ()
    kwargs: tuple = ()          # ((name, value), ...) so that the Call stays hashable

    @staticmethod
    def of(fn: Callable, *args, **kwargs) -> "Call":
        return Call(fn, args, tuple(sorted(kwargs.items())))

    def evaluate(self) -> Any:
        args = [evaluate(a) for a in self.args]
        kwargs = {k: evaluate(v) for k, v in self.kwargs}
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        name = getattr(self.fn, "__qualname__", repr(self.fn))
        return f"{name}({', '.join(parts)})"


def method(obj: Any, name: str, *args, **kwargs) -> Any:
    """``getattr(obj, name)(*args, **kwargs)``: a sampler's ``event`` as a picklable callable."""
    return getattr(obj, name)(*args, **kwargs)


def pack(*values: Any) -> tuple:
    """``values`` as a tuple: a tuple of Calls as one picklable, lazily evaluated argument."""
    return values


def total_users(*counts: Any) -> Any:
    """The sum of ``counts`` (a round's users over its groups); a bad value (not an int) is
    passed on unchanged, so the library, not this harness, is what refuses it."""
    for count in counts:
        if isinstance(count, bool) or not isinstance(count, int):
            return count
    return sum(counts)


def evaluate(value: Any) -> Any:
    return value.evaluate() if isinstance(value, Call) else value


@dataclasses.dataclass
class Outcome:
    """What one operation did: ``kind`` is ``"ok"``, ``"error"`` or ``"timeout"``."""

    kind: str
    seconds: float
    value: Any = None
    error_type: str = ""
    error_category: str = ""   # "parameter", "numerical" or "other"
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == "ok"


def _category(error: BaseException) -> str:
    from dpplugins.errors import NumericalError, ParameterError

    if isinstance(error, ParameterError):
        return "parameter"
    if isinstance(error, NumericalError):
        return "numerical"
    return "other"


def _plain(value: Any) -> Any:
    """Results as plain Python objects (Bounds -> tuple); the type is kept in the name."""
    if isinstance(value, tuple):
        return tuple(value)
    return value


def run_operation(state: dict, op: tuple) -> Outcome:
    import warnings

    from dpplugins.accountants import create

    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            kind = op[0]
            if kind == "create":
                state["accountant"] = create(op[1], **dict(op[2]))
                value = None
            elif kind == "compose":
                state["accountant"].compose(evaluate(op[1]), op[2])
                value = None
            elif kind == "supports":
                value = state["accountant"].supports(evaluate(op[1]))
            elif kind == "roundtrip":
                import math

                eps = state["accountant"].get_epsilon(op[1])
                back = state["accountant"].get_delta(eps) if math.isfinite(eps) else None
                value = (eps, back)
            elif kind == "step":
                state["accountant"].step(**dict(op[1]))
                value = None
            elif kind == "query":
                result = getattr(state["accountant"], op[1])(op[2])
                value = (type(result).__name__, _plain(result))
            else:  # pragma: no cover - a bug in the test
                raise AssertionError(f"unknown operation {op!r}")
    except Exception as error:  # the category is what the suite checks
        message = f"{error}"
        if _category(error) == "other":
            message += "\n" + traceback.format_exc(limit=8)
        return Outcome("error", time.perf_counter() - start, error_type=type(error).__name__,
                       error_category=_category(error), message=message[:4000])
    return Outcome("ok", time.perf_counter() - start, value=value)


def stops(op: tuple, outcome: Outcome) -> bool:
    """Whether a job ends after ``op``: when setting up the accountant failed (a query that
    fails leaves the accountant as it was, so the next queries still run)."""
    return not outcome.ok and (outcome.kind == "timeout" or op[0] not in ("query", "roundtrip"))


def serve(conn) -> None:
    """Worker loop: receive a job (list of operations), answer one Outcome per operation."""
    import dpplugins.accountants  # noqa: F401 - import once, before the first timed query

    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        state: dict = {}
        for op in job:
            try:
                outcome = run_operation(state, op)
            except BaseException as error:  # pragma: no cover - e.g. pickling of a result
                outcome = Outcome("error", 0.0, error_type=type(error).__name__,
                                  error_category="other", message=repr(error))
            conn.send(outcome)
            if stops(op, outcome):
                break


class Worker:
    """Parent side: run jobs in a child process, each operation under ``timeout`` seconds
    (twice that for a ``roundtrip``, which is two queries).

    On a timeout the child (only the one this object started) is terminated and a fresh one is
    started for the next job.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._context = multiprocessing.get_context("spawn")
        self._process = None
        self._conn = None

    def _start(self) -> None:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(target=serve, args=(child,), daemon=True)
        self._process.start()
        child.close()
        self._conn = parent

    def _stop(self) -> None:
        if self._process is None:
            return
        try:
            self._conn.close()
        except OSError:  # pragma: no cover
            pass
        if self._process.is_alive():
            self._process.terminate()
            self._process.join(5)
            if self._process.is_alive():  # pragma: no cover
                self._process.kill()
                self._process.join(5)
        self._process = None
        self._conn = None

    def close(self) -> None:
        if self._process is not None and self._process.is_alive():
            try:
                self._conn.send(None)
            except OSError:  # pragma: no cover
                pass
            self._process.join(5)
        self._stop()

    def run(self, job: list) -> list[Outcome]:
        """The outcomes of ``job``'s operations, up to and including the first that ends the job
        (:func:`stops`; a timeout is an Outcome of kind ``"timeout"``)."""
        if self._process is None or not self._process.is_alive():
            self._start()
            # the first answer also pays for the imports: allow for them separately
            self._conn.send([("create", "pld", ())])
            try:
                started = self._conn.poll(120)
                if started:
                    self._conn.recv()
            except (EOFError, OSError):  # pragma: no cover
                started = False
            if not started:  # pragma: no cover
                self._stop()
                raise RuntimeError("the fuzz worker did not start within 120 s")
        self._conn.send(job)
        outcomes = []
        for op in job:
            limit = self.timeout * (2 if op[0] == "roundtrip" else 1)  # two queries
            try:
                answered = self._conn.poll(limit)
            except (EOFError, OSError):  # the child died: recv below reports it
                answered = True
            if not answered:
                outcomes.append(Outcome("timeout", limit))
                self._stop()
                break
            try:
                outcome = self._conn.recv()
            except (EOFError, OSError):  # the child died (e.g. out of memory)
                outcomes.append(Outcome("error", 0.0, error_type="WorkerDied",
                                        error_category="other",
                                        message="the worker process exited"))
                self._stop()
                break
            outcomes.append(outcome)
            if stops(op, outcome):
                break
        return outcomes
