"""Compare accountants for one training configuration: which are valid, and what they report.

The configuration (:class:`TrainingConfig`: sampler, noise, epochs) becomes **one event**
(:meth:`TrainingConfig.event`, built with our samplers' ``sampler.event(noise_multiplier,
epochs)``).  An accountant is *valid* for the configuration when it supports that event --
``create(name).supports(event)`` for every name in ``dpplugins.accountants.available()``, so an
accountant registered with ``dpplugins.accountants.register`` shows up without any change here.

Every accountant gets a row:

* it supports the event: its epsilon for the event, ``valid=True``;
* it does not, but it supports the **Poisson event** of the same configuration
  (:meth:`TrainingConfig.poisson_event`: sample rate ``batch_size / dataset_size``): its Poisson
  number, ``valid=False`` and the reason.  Invalid rows are shown, not hidden: a Poisson
  accountant on a shuffled loader is the common mistake this table exposes (Chua et al. 2024);
* otherwise: no number, the reason (from :class:`~dpplugins.accountants.UnsupportedEventError`)
  and, when one exists, the ``--sampler`` (or the flags) it would be valid for.

The installed external references (dp-accounting's RDP and PLD, Opacus' RDP and PRV) are
Poisson accountants: valid iff the event is Poisson, otherwise shown with the Poisson number.

Sampler names (one vocabulary, :data:`SAMPLERS`): ``"poisson"``, ``"shuffled_epochs"``,
``"random_allocation"`` (balls-and-bins: every example in one uniformly random step of each
epoch), ``"random_checkin"``, ``"sliding_window"``.  The command line's old names are aliases,
mapped here and nowhere else (:data:`SAMPLER_ALIASES`, :func:`canonical_sampler`).

Example::

    >>> from dpplugins.report import TrainingConfig, compare, format_table
    >>> config = TrainingConfig(dataset_size=60_000, batch_size=256, epochs=10,
    ...                         noise_multiplier=1.1, delta=1e-5, sampler="shuffled_epochs")
    >>> print(format_table(compare(config)))  # doctest: +SKIP
"""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import io
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable

from dpplugins.samplers import SAMPLER_ALIASES, SAMPLERS, canonical_sampler
from dpplugins.display import lower_text, upper_text
from dpplugins.errors import (ParameterError, check_choice, check_count, check_open_unit,
                              check_positive, check_probability)
from dpplugins.events import (Event, GaussianEvent, PNSGDEvent, PoissonSampledEvent,
                              SelfComposedEvent, leaves, PNSGD_VARIANTS)

__all__ = ["TrainingConfig", "ComparisonRow", "compare", "evaluate", "format_table", "to_json",
           "to_csv", "row_to_dict", "poisson_runs", "canonical_sampler", "SAMPLERS",
           "SAMPLER_ALIASES", "CHECKIN_VARIANTS", "REFERENCES"]

#: variants of ``RandomCheckIn`` the ``random_checkin`` sampler can run
CHECKIN_VARIANTS = ("fixed", "averaged")

#: the flags a PNSGD run needs (named in the reasons the table gives)
PNSGD_FLAGS = ("--sampler shuffled_epochs --batch-size 1 --lipschitz L --diameter D "
               "--learning-rate ETA")


#: TrainingConfig fields -> the parameter names errors use (the command line's flags)
_PARAMETER = {"num_slots": "steps_per_epoch", "poisson_sample_rate": "sample_rate",
              "num_steps": "steps"}


def _optional(check: Callable, name: str, value: Any, **kwargs) -> Any:
    return None if value is None else check(name, value, **kwargs)


@dataclass(frozen=True)
class TrainingConfig:
    """One DP-SGD configuration in the library's vocabulary.

    ``sampler`` (:data:`SAMPLERS`; aliases :data:`SAMPLER_ALIASES` are accepted and stored
    canonical):

    * ``"poisson"``: each example independently with rate ``batch_size / dataset_size`` (or
      ``poisson_sample_rate``); ``round(dataset_size / batch_size)`` steps per epoch;
    * ``"shuffled_epochs"``: a fresh permutation per epoch cut into batches of ``batch_size``
      (``ShuffledEpochs``; ``ceil(n / b)`` steps per epoch, ``floor`` with ``drop_last``);
    * ``"random_allocation"``: each example in one uniformly random step of every epoch of
      ``t`` steps (``samplers.balls_and_bins(n, t)``), ``t = num_slots`` or ``ceil(n / b)``;
      with ``participations = k`` and ``checkin_probability = p`` each example takes part with
      probability ``p`` and then in ``k`` distinct uniform steps, and the Poisson comparison
      uses the same expected participation, rate ``p k / t``;
    * ``"random_checkin"``: ``RandomCheckIn(n, t, checkin_probability, checkin_variant)``;
      with ``checkin_probability = p < 1`` the Poisson comparison uses rate ``p / t`` (the
      expected participation of the averaged variant);
    * ``"sliding_window"``: ``SlidingWindowCheckIn(n, window)``, ``n - window + 1`` steps per
      pass.

    With ``lipschitz``, ``diameter`` and ``learning_rate`` the run is projected noisy SGD with
    hidden iterates (``PNSGDEvent``; needs ``sampler="shuffled_epochs"`` and batch size 1).

    Length: ``epochs`` (rounded to the nearest whole step, at least one) or ``num_steps``.
    Options that the sampler does not use are refused rather than ignored.
    """

    dataset_size: int | None
    batch_size: int | None
    epochs: float | None
    noise_multiplier: float
    delta: float
    sampler: str = "poisson"
    num_steps: int | None = None
    poisson_sample_rate: float | None = None
    num_slots: int | None = None
    checkin_probability: float | None = None
    checkin_variant: str | None = None
    window: int | None = None
    participations: int | None = None
    drop_last: bool = False
    lipschitz: float | None = None
    diameter: float | None = None
    learning_rate: float | None = None
    pnsgd_variant: str | None = None
    contraction: float | None = None
    smoothness: float | None = None

    def __post_init__(self) -> None:
        put = lambda field, value: object.__setattr__(self, field, value)  # noqa: E731
        sampler = canonical_sampler(self.sampler)
        put("sampler", sampler)
        n = _optional(check_count, "dataset_size", self.dataset_size, minimum=1)
        b = _optional(check_count, "batch_size", self.batch_size, minimum=1)
        put("dataset_size", n)
        put("batch_size", b)
        if n is not None and b is not None and b > n:
            raise ParameterError("batch_size", b, f"<= dataset_size ({n})")
        if (self.epochs is None) == (self.num_steps is None):
            raise ParameterError("epochs", self.epochs, "given, or the number of steps instead "
                                 "(exactly one of epochs and steps)")
        put("epochs", _optional(check_positive, "epochs", self.epochs))
        put("num_steps", _optional(check_count, "steps", self.num_steps, minimum=1))
        put("noise_multiplier", check_positive("noise_multiplier", self.noise_multiplier))
        put("delta", check_open_unit("delta", self.delta))
        put("poisson_sample_rate", _optional(check_probability, "sample_rate",
                                             self.poisson_sample_rate))
        put("num_slots", _optional(check_count, "steps_per_epoch", self.num_slots, minimum=1))
        put("checkin_probability", _optional(check_probability, "checkin_probability",
                                             self.checkin_probability))
        if self.checkin_variant is not None:
            check_choice("checkin_variant", self.checkin_variant, CHECKIN_VARIANTS)
        put("participations", _optional(check_count, "participations", self.participations,
                                        minimum=1))
        put("window", _optional(check_count, "window", self.window, minimum=1))
        if not isinstance(self.drop_last, bool):
            raise ParameterError("drop_last", self.drop_last, "True or False")
        for field in ("lipschitz", "diameter", "learning_rate", "contraction", "smoothness"):
            put(field, _optional(check_positive, field, getattr(self, field)))
        if self.pnsgd_variant is not None:
            check_choice("pnsgd_variant", self.pnsgd_variant, PNSGD_VARIANTS)
        self._check_sampler_options()

    def _refuse(self, field: str, used_by: str) -> None:
        value = getattr(self, field)
        if value not in (None, False):
            raise ParameterError(_PARAMETER.get(field, field), value,
                                 f"not given for sampler={self.sampler!r} (it is used by "
                                 f"{used_by})")

    def _check_sampler_options(self) -> None:
        s, n, b = self.sampler, self.dataset_size, self.batch_size
        slots_users = ("random_allocation", "random_checkin")
        if s != "poisson":
            self._refuse("poisson_sample_rate", "sampler 'poisson'")
            if n is None:
                raise ParameterError("dataset_size", None, f"an integer >= 1 for sampler={s!r}")
        if s not in slots_users:
            self._refuse("num_slots", "samplers 'random_allocation' and 'random_checkin'")
        if s not in slots_users:
            self._refuse("checkin_probability", "samplers 'random_allocation' and "
                         "'random_checkin'")
        if s != "random_allocation":
            self._refuse("participations", "sampler 'random_allocation'")
        if s != "random_checkin":
            self._refuse("checkin_variant", "sampler 'random_checkin'")
        if s != "sliding_window":
            self._refuse("window", "sampler 'sliding_window'")
        if s != "shuffled_epochs":
            self._refuse("drop_last", "sampler 'shuffled_epochs'")
        pnsgd = (self.lipschitz, self.diameter, self.learning_rate)
        if any(v is not None for v in pnsgd):
            if any(v is None for v in pnsgd):
                raise ParameterError("lipschitz, diameter, learning_rate", pnsgd,
                                     "all three given for projected noisy SGD (or none)")
            if s != "shuffled_epochs" or b not in (None, 1) or self.drop_last:
                raise ParameterError("sampler", s, "'shuffled_epochs' with batch size 1 for "
                                     "projected noisy SGD (one record per step, a fresh order "
                                     "every pass)")
        else:
            for field in ("pnsgd_variant", "contraction", "smoothness"):
                self._refuse(field, "projected noisy SGD: " + PNSGD_FLAGS)
        if s == "poisson":
            if self.poisson_sample_rate is not None and b is not None:
                raise ParameterError("sample_rate", self.poisson_sample_rate,
                                     "given without batch_size (the rate is batch_size / "
                                     "dataset_size otherwise)")
            if self.poisson_sample_rate is not None and n is not None:
                # (it was accepted and ignored: the rate alone sets the run)
                raise ParameterError("dataset_size", n, "not given with sample_rate for "
                                     "sampler='poisson' (the rate replaces batch_size / "
                                     "dataset_size; give dataset_size with batch_size instead)")
            if self.poisson_sample_rate is None and (n is None or b is None):
                raise ParameterError("batch_size", b, "given with dataset_size (or give the "
                                     "sample rate) for sampler='poisson'")
        elif s == "shuffled_epochs":
            if b is None and not self.is_pnsgd:
                raise ParameterError("batch_size", None, "an integer >= 1 for "
                                     "sampler='shuffled_epochs'")
        elif s in slots_users:
            if b is None and self.num_slots is None:
                raise ParameterError("batch_size", None, f"given (steps per epoch ceil(n / b)) "
                                     f"or the steps per epoch for sampler={s!r}")
            if self.num_slots is not None and self.num_slots > n:
                raise ParameterError("steps_per_epoch", self.num_slots, f"<= dataset_size ({n})")
            if self.participations is not None and self.participations > self.steps_per_epoch:
                raise ParameterError("participations", self.participations,
                                     f"<= steps per epoch ({self.steps_per_epoch})")
        elif s == "sliding_window":
            if self.window is None:
                raise ParameterError("window", None, "an integer in [1, dataset_size] for "
                                     "sampler='sliding_window'")
            if self.window > n:
                raise ParameterError("window", self.window, f"<= dataset_size ({n})")

    # -- derived quantities --------------------------------------------------------------------
    @property
    def is_pnsgd(self) -> bool:
        """Projected noisy SGD (the PNSGD constants are given)."""
        return self.lipschitz is not None

    @property
    def sample_rate(self) -> float:
        """Sample rate of the Poisson event: ``poisson_sample_rate``, else the expected
        participation per step of random allocation (``p k / t``) or random check-ins with
        ``checkin_probability = p < 1`` (``p / t``), else ``batch_size / dataset_size``, else
        ``1 / steps_per_epoch``."""
        if self.poisson_sample_rate is not None:
            return self.poisson_sample_rate
        if self.sampler == "random_allocation" and self._allocation_shape != (1, 1.0):
            k, p = self._allocation_shape
            return min(1.0, p * k / self.steps_per_epoch)
        if self.sampler == "random_checkin" and self.checkin_probability not in (None, 1.0):
            # the same expected participation: an example checks in w.p. p, into one of the
            # epoch's steps (b / n ignored p: the Poisson line was that of p = 1)
            return self.checkin_probability / self.steps_per_epoch
        if self.batch_size is not None and not self.is_pnsgd:
            return self.batch_size / self.dataset_size
        return 1.0 / self.steps_per_epoch

    @property
    def _allocation_shape(self) -> tuple[int, float]:
        """``(participations, checkin_probability)`` of random allocation (defaults 1, 1)."""
        return (1 if self.participations is None else self.participations,
                1.0 if self.checkin_probability is None else self.checkin_probability)

    @property
    def steps_per_epoch(self) -> int:
        """Steps of one pass of the configured sampler."""
        n, b, s = self.dataset_size, self.batch_size, self.sampler
        if s == "poisson":
            return self._poisson_steps_per_epoch
        if self.is_pnsgd:
            return n
        if s == "shuffled_epochs":
            return n // b if self.drop_last else -(-n // b)
        if s in ("random_allocation", "random_checkin"):
            return self.num_slots if self.num_slots is not None else -(-n // b)
        return n - self.window + 1   # sliding_window

    @property
    def _poisson_steps_per_epoch(self) -> int:
        if self.batch_size is not None and self.dataset_size is not None and not self.is_pnsgd:
            return max(1, round(self.dataset_size / self.batch_size))
        if self.poisson_sample_rate is not None:
            # exact (1 / 1e-320 is inf in floats, and round(inf) raised an OverflowError)
            return max(1, round(1 / Fraction(self.poisson_sample_rate)))
        return self.steps_per_epoch

    @property
    def steps(self) -> int:
        """Noisy steps of the run: ``num_steps``, or ``epochs`` passes rounded to a whole step."""
        if self.num_steps is not None:
            return self.num_steps
        # exact: epochs = 1e308 made the float product inf (an OverflowError); a count beyond
        # what the accountants compose is refused by them, naming the limit
        return max(1, round(Fraction(self.epochs) * self.steps_per_epoch))

    @property
    def poisson_steps(self) -> int:
        """Steps of the Poisson event (``round(dataset_size / batch_size)`` per epoch)."""
        if self.num_steps is not None:
            return self.num_steps
        return max(1, round(Fraction(self.epochs) * self._poisson_steps_per_epoch))

    # -- events --------------------------------------------------------------------------------
    def sampler_object(self):
        """The dpplugins sampler of the configuration (``None`` for Poisson sampling)."""
        from dpplugins import samplers

        s, n = self.sampler, self.dataset_size
        if s == "poisson":
            return None
        if s == "shuffled_epochs":
            return samplers.ShuffledEpochs(n, self.batch_size or 1, drop_last=self.drop_last)
        if s == "random_allocation":
            k, p = self._allocation_shape
            return samplers.balls_and_bins(n, self.steps_per_epoch, participations=k,
                                           checkin_probability=p)
        if s == "random_checkin":
            return samplers.RandomCheckIn(
                n, self.steps_per_epoch, checkin_probability=(
                    1.0 if self.checkin_probability is None else self.checkin_probability),
                variant=self.checkin_variant or "fixed")
        return samplers.SlidingWindowCheckIn(n, self.window)

    def event(self, noise_multiplier: float | None = None) -> Event:
        """The one event the configured run releases (with ``noise_multiplier`` instead of the
        configured one if given): the Poisson-subsampled Gaussian composed ``steps`` times,
        ``sampler.event(noise_multiplier, epochs)`` of the configured sampler, or the
        ``PNSGDEvent``."""
        sigma = self._sigma(noise_multiplier)
        if self.sampler == "poisson":
            return self.poisson_event(sigma)
        epochs = Fraction(self.steps, self.steps_per_epoch)
        if self.is_pnsgd:
            return PNSGDEvent(self.dataset_size, epochs, GaussianEvent(sigma), self.lipschitz,
                              self.diameter, self.learning_rate, self.pnsgd_variant or "shuffled",
                              1.0 if self.contraction is None else self.contraction,
                              self.smoothness)
        return self.sampler_object().event(sigma, epochs)

    def poisson_event(self, noise_multiplier: float | None = None) -> Event:
        """The same configuration with Poisson sampling: ``poisson_steps`` steps at
        ``sample_rate`` -- what a Poisson accountant reports for this run."""
        sigma = self._sigma(noise_multiplier)
        return SelfComposedEvent(PoissonSampledEvent(self.sample_rate, GaussianEvent(sigma)),
                                 self.poisson_steps)

    def _sigma(self, noise_multiplier: float | None) -> float:
        if noise_multiplier is None:
            return self.noise_multiplier
        return check_positive("noise_multiplier", noise_multiplier)

    def describe(self) -> str:
        """One line: sampler, steps, Poisson comparison."""
        what = "projected noisy SGD, " if self.is_pnsgd else ""
        text = (f"sampler {self.sampler} ({what}{_count_text(self.steps)} steps, "
                f"{_count_text(self.steps_per_epoch)} per epoch), noise multiplier "
                f"{self.noise_multiplier:g}, delta {self.delta!r}")
        if self.sampler != "poisson" or self.is_pnsgd:
            text += (f"; Poisson numbers: sample rate {self.sample_rate:.6g}, "
                     f"{_count_text(self.poisson_steps)} steps")
        else:
            text += f"; sample rate {self.sample_rate:.6g}"
        return text


def _count_text(count: int) -> str:
    """A count as digits, or in ``e`` notation beyond 10^15 (a sample rate of 1e-300 has 1e300
    steps per epoch: 301 digits in a one-line summary)."""
    if count < 10**15:
        return str(count)
    if count < 10**300:
        return f"{float(count):.6g}"
    digits = str(count)   # (float(count) overflows beyond 1.8e308; truncated, not rounded)
    fraction = digits[1:6].rstrip("0")
    return f"{digits[0]}{'.' + fraction if fraction else ''}e+{len(digits) - 1}"


@dataclass
class ComparisonRow:
    """One line of the comparison table.

    ``epsilon`` / ``lower``: the upper and lower bound at ``delta`` (``None``: not computed;
    ``inf``: no finite epsilon).  ``valid``: the accountant supports the configuration's event.
    ``number_for``: which event the number is for -- ``"sampler"`` (the configuration's),
    ``"poisson"`` (its Poisson event; then ``valid`` is False) or ``""`` (no number).
    ``kind``: ``"accountant"`` (a registered dpplugins accountant) or ``"reference"``.
    """

    accountant: str
    epsilon: float | None
    lower: float | None
    bound_type: str
    neighbouring: str
    valid: bool
    reason: str
    seconds: float
    error: str = ""
    number_for: str = ""
    kind: str = "accountant"


# -- Poisson events and the external references -------------------------------------------------
def poisson_runs(event: Event) -> list[tuple[float, float, int]] | None:
    """``(noise_multiplier, sample_rate, steps)`` runs of a Poisson-subsampled Gaussian event
    (a plain Gaussian has rate 1), or ``None`` when the event is anything else."""
    runs: list[tuple[float, float, int]] = []
    for leaf, count in leaves(event):
        if isinstance(leaf, GaussianEvent):
            sigma, q = leaf.noise_multiplier, 1.0
        elif isinstance(leaf, PoissonSampledEvent) and isinstance(leaf.event, GaussianEvent):
            sigma, q = leaf.event.noise_multiplier, leaf.sample_rate
        else:
            return None
        if runs and runs[-1][:2] == (sigma, q):
            runs[-1] = (sigma, q, runs[-1][2] + count)
        else:
            runs.append((sigma, q, count))
    return runs


def _dp_accounting(kind: str):
    def run(runs, delta: float):
        import dp_accounting
        if kind == "rdp":
            from dp_accounting.rdp import rdp_privacy_accountant
            acc = rdp_privacy_accountant.RdpAccountant()
        else:
            from dp_accounting.pld import pld_privacy_accountant
            acc = pld_privacy_accountant.PLDAccountant()
        for sigma, q, steps in runs:
            acc.compose(dp_accounting.SelfComposedDpEvent(
                dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)),
                steps))
        return acc.get_epsilon(delta)
    return run


def _opacus(kind: str):
    def run(runs, delta: float):
        from opacus.accountants import create_accountant
        acc = create_accountant(kind)
        acc.history = [tuple(r) for r in runs]
        return acc.get_epsilon(delta)
    return run


@dataclass(frozen=True)
class Reference:
    """An external Poisson accountant: ``run(runs, delta) -> epsilon``."""

    module: str
    bound_type: str
    run: Callable
    install: str


#: external anchors (Poisson accountants), used when their package is installed
REFERENCES: dict[str, Reference] = {
    "dp_accounting.rdp": Reference("dp_accounting", "upper bound (RDP)", _dp_accounting("rdp"),
                                   "pip install dp-accounting"),
    "dp_accounting.pld": Reference("dp_accounting", "estimate (pessimistic PLD)",
                                   _dp_accounting("pld"), "pip install dp-accounting"),
    "opacus.rdp": Reference("opacus", "upper bound (RDP)", _opacus("rdp"), "pip install opacus"),
    "opacus.prv": Reference("opacus", "estimate (PRV)", _opacus("prv"), "pip install opacus"),
}

#: seconds a reference accountant (another library) may take for one number; past it the row
#: records a TimeoutError and the table goes on (dp-accounting's PLD took minutes for 200
#: steps at noise 0.05).  The reference runs in a child process, killed at the limit.
REFERENCE_TIME_LIMIT = 15.0
#: private memory a reference's child process may grow by (Linux, where ``/proc``
#: shows it; checked ten times a second, the child is killed past it and its row says so).
#: dp-accounting's PLD at 10^8 Poisson steps (noise 0.5, rate 0.01) reached 4.3 GB within its
#: 15 s.  (A cap on the address space would also count reserved, unused memory -- thread
#: stacks and allocator arenas, many on a machine with many cores.)
REFERENCE_MEMORY_LIMIT = 1 << 30


def _private_bytes(pid: int) -> tuple[str, int] | None:
    """Memory process ``pid`` holds on its own, with the file it was read from (Linux
    ``/proc``; None where it cannot be read): its private pages (``Private_Clean +
    Private_Dirty`` of ``smaps_rollup``), else its resident pages less those backed by files or
    shared memory (``statm``).  Only values read from the same file are compared.

    A forked child shares every page of its parent until it writes to one, and it maps its
    parent's file pages lazily; so neither its whole resident size (hundreds of MB below the
    parent's with TensorFlow and torch loaded) nor that less its file pages (``statm``: a
    page copied on write replaces the shared one, so a child writing 120 MiB into its
    parent's memory showed no change there) shows what it allocated; its private pages do.
    Growth is measured from the child's own value before the reference runs (see
    :func:`_within_time_limit`)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as rollup:
            kib = sum(int(line.split()[1]) for line in rollup
                      if line.startswith(("Private_Clean:", "Private_Dirty:")))
        return "smaps_rollup", kib * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm") as statm:
            fields = statm.read().split()
        return "statm", (int(fields[1]) - int(fields[2])) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class _ReferenceFailure(Exception):
    """The reference raised (its type and message, as text: not every exception pickles)."""


def _within_time_limit(name: str, compute: Callable[[], float], seconds: float) -> float:
    """``compute()`` run in a forked child process, its result; TimeoutError when it has not
    finished after ``seconds`` (the child is killed), :class:`_ReferenceFailure` when it
    raised or died.  Its warnings are issued again here.

    (A daemon thread was used and left running: at exit the interpreter stopped it inside the
    reference's C++ code and the process aborted -- "terminate called without an active
    exception", exit status 134, after the table was printed -- and until then it kept
    computing, and allocating, next to the other rows.)"""
    import multiprocessing
    import warnings

    def outcome() -> tuple:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")   # (the caller's filters decide, when re-issued)
            try:
                result: tuple = ("value", float(compute()))
            except BaseException as error:  # noqa: BLE001 -- passed on to the caller
                result = ("error", f"{type(error).__name__}: {error}")
        return result + ([(str(w.message), w.category, w.filename, w.lineno)
                          for w in caught],)

    try:
        context = multiprocessing.get_context("fork")
    except ValueError:   # no fork on this platform: in this process, without a time limit
        kind, value, caught = outcome()
    else:
        receive, send = context.Pipe(duplex=False)

        def child() -> None:
            # the child's own private memory before the reference runs: the baseline its
            # growth is measured from (not the parent's: see _private_bytes)
            send.send(("start", _private_bytes(os.getpid())))
            result = outcome()
            try:
                send.send(result)
            except Exception:  # noqa: BLE001 -- a warning category that does not pickle
                send.send(result[:2] + ([],))

        process = context.Process(target=child, name=f"dpplugins-{name}", daemon=True)
        process.start()
        send.close()
        try:
            deadline = time.monotonic() + seconds
            start = None
            while True:
                if receive.poll(min(0.1, max(deadline - time.monotonic(), 0.0))):
                    try:
                        message = receive.recv()
                    except EOFError:   # killed, e.g. out of memory
                        process.join(1)
                        message = ("error", "its process ended without an answer (exit "
                                   f"code {process.exitcode})", [])
                    if message[0] != "start":
                        kind, value, caught = message
                        break
                    start = message[1]
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{name} gave no answer within {seconds:g} s (the "
                                       "reference's own computation; ours are not limited "
                                       "this way)")
                now = _private_bytes(process.pid)
                if start is not None and now is not None and now[0] == start[0] \
                        and now[1] > start[1] + REFERENCE_MEMORY_LIMIT:
                    raise _ReferenceFailure(
                        f"its process grew beyond {REFERENCE_MEMORY_LIMIT >> 20:,} MiB of memory "
                        "and was stopped")
        finally:
            if process.is_alive():
                process.kill()
            process.join()
            receive.close()
    for message, category, filename, lineno in caught:
        warnings.warn_explicit(message, category, filename, lineno)
    if kind == "error":
        raise _ReferenceFailure(value)
    return value


def _reference_number(name: str, ref: "Reference", runs, delta: float) -> float:
    """The reference's epsilon for ``runs``, within :data:`REFERENCE_TIME_LIMIT`; counts it
    cannot take are refused first (10^30 steps reached numpy as Python integers: a
    UFuncTypeError), and its own failures are a NumericalError naming it (the command line
    said "unexpected ValueError" for a failure inside Opacus)."""
    from dpplugins.accountants.base import MAX_COMPOSITIONS
    from dpplugins.errors import NumericalError

    total = sum(steps for _, _, steps in runs)
    if total > MAX_COMPOSITIONS:
        raise NumericalError(f"{name} is given {_count_text(total)} steps, more than the 2**53 "
                             "that counts as floats represent exactly",
                             "account for fewer steps")
    importlib.import_module(ref.module)   # once, here: not again in every child process
    try:
        return float(_within_time_limit(name, lambda: ref.run(runs, delta),
                                        REFERENCE_TIME_LIMIT))
    except _ReferenceFailure as failure:  # said to be the other library's failure
        raise NumericalError(f"{name} (another library's accountant) failed: {failure}",
                             "use a dpplugins accountant, e.g. pld, for these inputs") from None


_POISSON_REASON = ("assumes Poisson sampling; with {sampler} batches this is not a valid bound "
                   "(Chua et al. 2024) -- shown: the number for Poisson sampling at sample rate "
                   "{rate:.6g}")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _error_text(error: BaseException) -> str:
    return _one_line(f"{type(error).__name__}: {error}")


# -- rows -----------------------------------------------------------------------------------------
def _alternatives(config: TrainingConfig) -> list[tuple[str, Event]]:
    """Events of the same run under the other samplers (for the hint "valid with ..."): only the
    ones that can be built from the configuration."""
    if config.dataset_size is None:
        return []
    base = dict(dataset_size=config.dataset_size, batch_size=config.batch_size,
                epochs=config.epochs, num_steps=config.num_steps,
                noise_multiplier=config.noise_multiplier, delta=config.delta)
    slots = dict(num_slots=config.num_slots)
    allocation = [("--sampler random_allocation", dict(base, sampler="random_allocation", **slots))]
    if config.sampler == "random_allocation" and config._allocation_shape != (1, 1.0):
        # the same run with one of its two options dropped, named as such
        k, p = config._allocation_shape
        allocation = [
            ("--sampler random_allocation --checkin-probability 1",
             dict(base, sampler="random_allocation", participations=k, **slots)),
            ("--sampler random_allocation --participations 1",
             dict(base, sampler="random_allocation", checkin_probability=p, **slots))]
    candidates = [
        ("--sampler shuffled_epochs", dict(base, sampler="shuffled_epochs")),
        *allocation,
        ("--sampler random_checkin", dict(base, sampler="random_checkin", **slots)),
        ("--sampler random_checkin --checkin-variant averaged",
         dict(base, sampler="random_checkin", checkin_variant="averaged", **slots)),
        ("--sampler shuffled_epochs --batch-size 1",
         dict(base, sampler="shuffled_epochs", batch_size=1)),
    ]
    if config.window is not None:
        candidates.append(("--sampler sliding_window",
                           dict(base, sampler="sliding_window", window=config.window)))
    if not config.is_pnsgd:  # placeholder constants: only which accountants accept the event
        candidates.append((PNSGD_FLAGS,
                           dict(base, sampler="shuffled_epochs", batch_size=1, lipschitz=1.0,
                                diameter=1.0, learning_rate=1.0)))
    out = []
    for label, kwargs in candidates:
        try:
            candidate = TrainingConfig(**kwargs)
            if candidate != config:
                out.append((label, candidate.event()))
        except (ParameterError, ArithmeticError):
            continue
    return out


def _hint(accountant, alternatives) -> str:
    found = []
    for label, event in alternatives:
        try:
            if any(label.startswith(f) for f in found):
                continue   # a narrower variant of a sampler already named
            if accountant.supports(event):
                found.append(label)
        except Exception:  # a broken supports() only loses the hint
            continue
    return "; valid with " + " or with ".join(found) if found else ""


def _bounds(accountant, event: Event, delta: float) -> tuple[float, float]:
    accountant.compose(event)
    bounds = accountant.get_epsilon_bounds(delta)
    return float(bounds.upper), float(bounds.lower)


def _row_ours(name: str, config: TrainingConfig, event: Event, poisson: Event | None,
              alternatives) -> tuple[ComparisonRow, Callable | None]:
    """The row before computing and the computation (``None``: nothing to compute)."""
    from dpplugins.accountants import UnsupportedEventError, create

    def row(**kw):
        fields = dict(accountant=name, epsilon=None, lower=None, bound_type="", neighbouring="",
                      valid=False, reason="", seconds=0.0)
        fields.update(kw)
        return ComparisonRow(**fields)
    try:
        accountant = create(name)
    except Exception as error:
        return row(reason="cannot be created with default options: "
                   + _error_text(error)), None
    info = dict(bound_type=getattr(accountant, "bound_type", ""),
                neighbouring=getattr(accountant, "neighbouring", ""))
    try:
        accountant.check(event)
        return (row(valid=True, reason="valid for this sampler", number_for="sampler", **info),
                lambda: _bounds(accountant, event, config.delta))
    except UnsupportedEventError as error:
        needs = error.reason or f"does not support {type(error.event).__name__}"
    except Exception as error:  # a broken check() is that accountant's error, not the table's
        return row(reason="could not check the event", error=_error_text(error), **info), None
    what = "projected noisy SGD" if config.is_pnsgd else config.sampler
    if poisson is not None and poisson != event:
        try:
            fresh = create(name)
            if fresh.supports(poisson):
                reason = (f"not valid for {what} -- {name}'s reason: {needs}; shown: its number "
                          f"for Poisson sampling at sample rate {config.sample_rate:.6g}")
                return (row(reason=_one_line(reason), number_for="poisson", **info),
                        lambda: _bounds(fresh, poisson, config.delta))
        except Exception:
            pass
    reason = (f"cannot account for {what} -- {name}'s reason: {needs}"
              f"{_hint(accountant, alternatives)}")
    return row(reason=_one_line(reason), **info), None


def _row_reference(name: str, config: TrainingConfig, event: Event, poisson: Event | None
                   ) -> tuple[ComparisonRow, Callable | None]:
    ref = REFERENCES[name]
    row = ComparisonRow(name, None, None, ref.bound_type, "add_remove", False, "", 0.0,
                        kind="reference")
    if not _installed(ref.module):
        row.reason = f"not installed ({ref.install})"
        return row, None
    runs = poisson_runs(event)
    if runs is not None:
        row.valid, row.reason, row.number_for = True, "valid for this sampler", "sampler"
    else:
        runs = poisson_runs(poisson) if poisson is not None else None
        what = "projected noisy SGD" if config.is_pnsgd else config.sampler
        row.reason = _POISSON_REASON.format(sampler=what, rate=config.sample_rate)
        if runs is None:
            return row, None
        row.number_for = "poisson"
    return row, lambda: (_reference_number(name, ref, runs, config.delta), None)


def _finish(row: ComparisonRow, compute: Callable | None, catch: bool) -> ComparisonRow:
    if compute is None:
        return row
    start = time.perf_counter()
    try:
        row.epsilon, row.lower = compute()
    except Exception as error:  # a failing accountant is a row, not a crash of the table
        if not catch:
            raise
        row.epsilon = row.lower = None
        row.error = _error_text(error)
    row.seconds = time.perf_counter() - start
    return row


def _check_names(names: list[str]) -> None:
    from dpplugins.accountants import available

    known = list(available()) + list(REFERENCES)
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise ParameterError("accountants", names, "a list of names from " + ", ".join(known))
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ParameterError("accountants", unknown, "names from " + ", ".join(known))


def evaluate(config: TrainingConfig, name: str, *, catch: bool = True) -> ComparisonRow:
    """The comparison row of one accountant (a registry name or a key of :data:`REFERENCES`)
    for ``config``; with ``catch=False`` a failing computation raises instead of filling
    ``row.error``."""
    _check_names([name])
    event, poisson = config.event(), config.poisson_event()
    if name in REFERENCES:
        row, compute = _row_reference(name, config, event, poisson)
    else:
        row, compute = _row_ours(name, config, event, poisson, _alternatives(config))
    return _finish(row, compute, catch)


def compare(config: TrainingConfig, *, accountants: list[str] | None = None,
            references: bool = True, progress: bool = False) -> list[ComparisonRow]:
    """One row per accountant for ``config`` (module docstring).

    ``accountants``: registry names and/or reference names (default: every registered
    accountant, ``dpplugins.accountants.available()``); ``references`` adds the installed
    external references.  Rows that are not valid for the sampler are kept and marked.
    ``progress=True`` shows a tqdm bar on stderr when tqdm is installed (and stderr is a
    terminal); nothing otherwise.
    """
    from dpplugins.accountants import available

    names = list(available()) if accountants is None else list(accountants)
    _check_names(names)
    if references:
        names += [n for n in REFERENCES if n not in names and _installed(REFERENCES[n].module)]
    event, poisson = config.event(), config.poisson_event()
    alternatives = _alternatives(config)
    iterator: Any = names
    if progress and _installed("tqdm"):
        from tqdm import tqdm
        iterator = tqdm(names, desc="accountants", file=sys.stderr, disable=None, leave=False)
    rows = []
    for name in iterator:
        if hasattr(iterator, "set_postfix_str"):
            iterator.set_postfix_str(name)
        if name in REFERENCES:
            row, compute = _row_reference(name, config, event, poisson)
        else:
            row, compute = _row_ours(name, config, event, poisson, alternatives)
        rows.append(_finish(row, compute, catch=True))
    return rows


# -- output ---------------------------------------------------------------------------------------
def _fmt(value: float | None, side: str = "upper") -> str:
    """4 decimals, rounded outward (``side``: "upper" rounds up, "lower" down)."""
    if value is None or math.isnan(value):
        return "-"
    return (upper_text if side == "upper" else lower_text)(value, decimals=4)


def format_table(rows: list[ComparisonRow]) -> str:
    """Plain-text table, one row per accountant, then the reasons of the invalid rows and the
    errors."""
    header = ("accountant", "epsilon", "lower", "bound type", "neighbouring", "valid", "seconds")
    lines = [header]
    for r in rows:
        lines.append((r.accountant, _fmt(r.epsilon) if not r.error else "error",
                      _fmt(r.lower, "lower"),
                      r.bound_type, r.neighbouring, "yes" if r.valid else "NO",
                      f"{r.seconds:.2f}"))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    out = ["  ".join(str(v).ljust(w) for v, w in zip(line, widths)).rstrip() for line in lines]
    notes = [f"  {r.accountant}: {r.reason}" for r in rows if not r.valid]
    errors = [f"  {r.accountant}: {r.error}" for r in rows if r.error]
    if notes:
        out += ["", "not valid for this sampler:"] + notes
    if errors:
        out += ["", "errors:"] + errors
    return "\n".join(out)


def _json_number(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def row_to_dict(row: ComparisonRow) -> dict[str, Any]:
    """A row as a strict-JSON dict (the fields of :class:`ComparisonRow` plus ``infinite``).

    No non-finite number is ever written: ``epsilon`` / ``lower`` are ``null`` when they were
    not computed (then ``reason`` or ``error`` says why) **or infinite**; the list
    ``infinite`` names the fields whose value is +infinity (e.g. ``["epsilon"]``: no finite
    epsilon at this delta) and ``reason`` says so too."""
    out = dataclasses.asdict(row)
    infinite = [k for k in ("epsilon", "lower") if isinstance(out[k], float)
                and math.isinf(out[k])]
    for key in ("epsilon", "lower", "seconds"):
        out[key] = _json_number(out[key])
    if infinite:
        out["reason"] = (out["reason"] + "; " if out["reason"] else "") + (
            " and ".join(infinite) + " infinite (no finite bound at this delta; written as "
            "null)")
    out["infinite"] = infinite
    return out


def to_json(rows: list[ComparisonRow]) -> str:
    """The rows as a strict JSON list of objects, one per accountant (:func:`row_to_dict`):
    infinity is written as ``null`` with the ``infinite`` field and the ``reason`` saying so;
    there are never bare ``Infinity`` / ``NaN`` tokens."""
    return json.dumps([row_to_dict(r) for r in rows], indent=2, allow_nan=False)


def to_csv(rows: list[ComparisonRow]) -> str:
    """The rows as CSV with a header line (``inf`` for an infinite bound, empty when not
    computed)."""
    buffer = io.StringIO()
    fields = [f.name for f in dataclasses.fields(ComparisonRow)]
    writer = csv.DictWriter(buffer, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in dataclasses.asdict(r).items()})
    return buffer.getvalue()
