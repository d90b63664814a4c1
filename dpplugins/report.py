"""Compare accountants for one training configuration: which are valid, and what they report.

``compare(config)`` computes epsilon with every accountant we have *and* the built-in references
that are installed (dp-accounting's RDP and PLD, Opacus' RDP and PRV), and marks each row valid or
invalid for the configured sampler -- invalid rows are shown, not hidden: a Poisson accountant on a
shuffled loader is the common mistake this table exposes (Chua et al. 2024).

Example::

    >>> from dpplugins.report import TrainingConfig, compare, format_table
    >>> config = TrainingConfig(dataset_size=60_000, batch_size=256, epochs=10,
    ...                         noise_multiplier=1.1, delta=1e-5, sampler="poisson")
    >>> print(format_table(compare(config)))  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import math
import time
from dataclasses import asdict, dataclass
from typing import Callable

from dpplugins.errors import (ParameterError, check_choice, check_count, check_open_unit,
                              check_positive)

__all__ = ["TrainingConfig", "ComparisonRow", "compare", "format_table", "to_json", "to_csv",
           "SAMPLERS"]

SAMPLERS = ("poisson", "shuffle", "checkin")


@dataclass(frozen=True)
class TrainingConfig:
    """One DP-SGD configuration in the library's vocabulary.

    ``sampler``: ``"poisson"`` (each example independently with rate batch_size/dataset_size),
    ``"shuffle"`` (shuffled fixed-size batches, each example once per epoch), ``"checkin"``
    (each example picks one uniformly random step of the epoch: random check-in / balls-and-bins).
    """

    dataset_size: int
    batch_size: int
    epochs: float
    noise_multiplier: float
    delta: float
    sampler: str = "poisson"

    def __post_init__(self) -> None:
        n = check_count("dataset_size", self.dataset_size, minimum=1)
        b = check_count("batch_size", self.batch_size, minimum=1)
        if b > n:
            raise ParameterError("batch_size", b, f"<= dataset_size ({n})")
        check_positive("epochs", self.epochs)
        check_positive("noise_multiplier", self.noise_multiplier)
        check_open_unit("delta", self.delta)
        check_choice("sampler", self.sampler, SAMPLERS)

    @property
    def sample_rate(self) -> float:
        return self.batch_size / self.dataset_size

    @property
    def steps_per_epoch(self) -> int:
        return max(1, round(self.dataset_size / self.batch_size))

    @property
    def steps(self) -> int:
        return max(1, round(self.epochs * self.steps_per_epoch))


@dataclass
class ComparisonRow:
    """One line of the comparison table."""

    accountant: str
    epsilon: float | None
    lower: float | None
    bound_type: str
    neighbouring: str
    valid: bool
    reason: str
    seconds: float
    error: str = ""


# -- our accountants ------------------------------------------------------------------------------
def _ours_poisson(name: str) -> Callable[[TrainingConfig], tuple]:
    def run(config: TrainingConfig):
        from dpplugins.accountants import create
        acc = create(name)
        acc.step(noise_multiplier=config.noise_multiplier, sample_rate=config.sample_rate,
                 count=config.steps)
        bounds = acc.get_epsilon_bounds(config.delta)
        return bounds.upper, bounds.lower, acc.bound_type, acc.neighbouring
    return run


def _ours_shuffle(name: str) -> Callable[[TrainingConfig], tuple]:
    """Shuffled epochs: ceil(n / b) steps per epoch (the last batch may be smaller)."""
    def run(config: TrainingConfig):
        from dpplugins.accountants import create
        acc = create(name, **({"batch_size": config.batch_size, "dataset_size": config.dataset_size}
                              if name == "shuffle" else {"dataset_size": config.dataset_size}))
        steps_per_epoch = math.ceil(config.dataset_size / config.batch_size)
        acc.step(noise_multiplier=config.noise_multiplier, sample_rate=1 / steps_per_epoch,
                 count=max(1, round(config.epochs * steps_per_epoch)))
        bounds = acc.get_epsilon_bounds(config.delta)
        return bounds.upper, bounds.lower, acc.bound_type, acc.neighbouring
    return run


def _ours_checkin(config: TrainingConfig):
    """Random check-in with probability 1 (each example picks one uniformly random step of the
    epoch; every checked-in example is used: the averaged variant), one pass per epoch."""
    from dpplugins.accountants import create
    steps_per_epoch = math.ceil(config.dataset_size / config.batch_size)
    acc = create("checkin", num_examples=config.dataset_size, variant="averaged",
                 num_slots=steps_per_epoch, checkin_probability=1.0)
    acc.step(noise_multiplier=config.noise_multiplier, sample_rate=1 / steps_per_epoch,
             count=max(1, round(config.epochs * steps_per_epoch)))
    bounds = acc.get_epsilon_bounds(config.delta)
    return bounds.upper, bounds.lower, acc.bound_type, acc.neighbouring


def _ours_balls_and_bins(config: TrainingConfig):
    """Random allocation (balls-and-bins): each example in exactly one uniformly random step of
    each epoch of ceil(n / b) steps; the check-in sampler with probability 1."""
    from dpplugins.accountants import create
    steps_per_epoch = math.ceil(config.dataset_size / config.batch_size)
    acc = create("balls_and_bins")
    acc.step(noise_multiplier=config.noise_multiplier, sample_rate=1 / steps_per_epoch,
             count=max(1, round(config.epochs * steps_per_epoch)))
    bounds = acc.get_epsilon_bounds(config.delta)
    return bounds.upper, bounds.lower, acc.bound_type, acc.neighbouring


#: name -> (samplers it is valid for, runner, reason when invalid)
_POISSON_REASON = ("assumes Poisson sampling; with {sampler} batches this is not a valid bound "
                   "(Chua et al. 2024)")
OURS: dict[str, tuple[tuple[str, ...], Callable[[TrainingConfig], tuple], str]] = {
    "pld": (("poisson",), _ours_poisson("pld"), _POISSON_REASON),
    "fdp": (("poisson",), _ours_poisson("fdp"), _POISSON_REASON),
    "shuffle": (("shuffle",), _ours_shuffle("shuffle"),
                "assumes shuffled fixed-size batches (each example once per epoch)"),
    "checkin": (("checkin",), _ours_checkin,
                "assumes random check-ins (each example picks its own step)"),
    "balls_and_bins": (("checkin",), _ours_balls_and_bins,
                       "assumes random allocation (each example in exactly one random step of "
                       "every epoch: the check-in sampler with probability 1)"),
}


# -- references (installed anchors) ---------------------------------------------------------------
def _dp_accounting(kind: str):
    def run(config: TrainingConfig):
        import dp_accounting
        if kind == "rdp":
            from dp_accounting.rdp import rdp_privacy_accountant
            acc = rdp_privacy_accountant.RdpAccountant()
        else:
            from dp_accounting.pld import pld_privacy_accountant
            acc = pld_privacy_accountant.PLDAccountant()
        event = dp_accounting.PoissonSampledDpEvent(
            config.sample_rate, dp_accounting.GaussianDpEvent(config.noise_multiplier))
        acc.compose(dp_accounting.SelfComposedDpEvent(event, config.steps))
        bound = "upper bound (RDP)" if kind == "rdp" else "estimate (pessimistic PLD)"
        return acc.get_epsilon(config.delta), None, bound, "add_remove"
    return run


def _opacus(kind: str):
    def run(config: TrainingConfig):
        from opacus.accountants import create_accountant
        acc = create_accountant(kind)
        acc.history = [(config.noise_multiplier, config.sample_rate, config.steps)]
        bound = "upper bound (RDP)" if kind == "rdp" else "estimate (PRV)"
        return acc.get_epsilon(config.delta), None, bound, "add_remove"
    return run


REFERENCES: dict[str, tuple[str, Callable[[TrainingConfig], tuple]]] = {
    "dp_accounting.rdp": ("dp_accounting", _dp_accounting("rdp")),
    "dp_accounting.pld": ("dp_accounting", _dp_accounting("pld")),
    "opacus.rdp": ("opacus", _opacus("rdp")),
    "opacus.prv": ("opacus", _opacus("prv")),
}


def _timed_row(name: str, runner, config: TrainingConfig, valid: bool, reason: str
               ) -> ComparisonRow:
    start = time.perf_counter()
    try:
        eps, lower, bound, neighbouring = runner(config)
        error = ""
    except Exception as exc:  # a failing accountant is a row, not a crash of the table
        eps, lower, bound, neighbouring, error = None, None, "", "", f"{type(exc).__name__}: {exc}"
    return ComparisonRow(name, eps, lower, bound, neighbouring, valid, reason,
                         time.perf_counter() - start, error)


def compare(config: TrainingConfig, *, accountants: list[str] | None = None,
            references: bool = True, progress: bool = False) -> list[ComparisonRow]:
    """Epsilon of every accountant (ours and installed references) for ``config``.

    Rows for accountants that are not valid for ``config.sampler`` are kept and marked.
    ``progress=True`` shows a tqdm bar when tqdm is installed.
    """
    names = list(OURS) if accountants is None else accountants
    unknown = [n for n in names if n not in OURS]
    if unknown:
        raise ParameterError("accountants", unknown, "names from " + ", ".join(OURS))
    jobs = []
    for name in names:
        samplers, runner, reason = OURS[name]
        valid = config.sampler in samplers
        jobs.append((name, runner, valid,
                     "valid for this sampler" if valid else reason.format(sampler=config.sampler)))
    if references:
        for name, (module, runner) in REFERENCES.items():
            if importlib.util.find_spec(module) is None:
                continue
            valid = config.sampler == "poisson"
            jobs.append((name, runner, valid, "valid for this sampler" if valid else
                         _POISSON_REASON.format(sampler=config.sampler)))
    iterator = jobs
    if progress and importlib.util.find_spec("tqdm") is not None:
        from tqdm import tqdm
        iterator = tqdm(jobs, desc="accountants")
    return [_timed_row(name, runner, config, valid, reason)
            for name, runner, valid, reason in iterator]


def _fmt(value: float | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    return "inf" if math.isinf(value) else f"{value:.4f}"


def format_table(rows: list[ComparisonRow]) -> str:
    """Plain-text table, one row per accountant."""
    header = ("accountant", "epsilon", "lower", "bound type", "neighbouring", "valid", "seconds")
    lines = [header]
    for r in rows:
        lines.append((r.accountant, _fmt(r.epsilon) if not r.error else "error", _fmt(r.lower),
                      r.bound_type, r.neighbouring, "yes" if r.valid else "NO", f"{r.seconds:.2f}"))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    out = ["  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines]
    notes = [f"  {r.accountant}: {r.reason}" for r in rows if not r.valid]
    errors = [f"  {r.accountant}: {r.error}" for r in rows if r.error]
    if notes:
        out += ["", "not valid for this sampler:"] + notes
    if errors:
        out += ["", "errors:"] + errors
    return "\n".join(out)


def to_json(rows: list[ComparisonRow]) -> str:
    """The rows as a JSON list of objects (one per accountant)."""
    return json.dumps([asdict(r) for r in rows], indent=2)


def to_csv(rows: list[ComparisonRow]) -> str:
    """The rows as CSV with a header line."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=list(asdict(rows[0]).keys()) if rows else [])
    writer.writeheader()
    for r in rows:
        writer.writerow(asdict(r))
    return buffer.getvalue()
