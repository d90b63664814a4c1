"""TensorFlow Privacy integration: TF-Privacy's offline DP-SGD privacy statement computed with
our accountants, and the import path of the whole dp_accounting side of the integration.

:func:`compute_dp_sgd_privacy_statement` has TF-Privacy 0.9.0's signature
(``tensorflow_privacy.compute_dp_sgd_privacy_statement``, including its eighth parameter
``accountant_type``) plus ``accountant=`` and ``sampler=``; every epsilon line names its
accountant and its bound type, and ``max_examples_per_user`` gives user-level lines by group
privacy.  :func:`compute_dp_sgd_privacy_numbers` returns the same numbers.  What the training
released is one event (:func:`dp_sgd_event`, from our samplers), and an accountant is valid for
it exactly when ``create(name).supports(event)``: any accountant registered in
:mod:`dpplugins.accountants` can be named.

The rest of the integration lives in modules with one job each, re-exported here so that
``from dpplugins.integrations.tf_privacy import X`` works for all of it:

* :mod:`dpplugins.integrations.dp_accounting_events` -- dp_accounting's events to ours and back
  (:func:`to_event`, :func:`to_dp_event`);
* :mod:`dpplugins.integrations.dp_events` -- dp_accounting views of our events
  (:class:`ShuffledEpochsDpEvent`, :class:`RandomCheckInDpEvent`,
  :class:`RandomAllocationDpEvent`, :class:`PNSGDDpEvent`, :class:`DPPluginsDpEvent`, and
  :class:`RandomizedResponseDpEvent` / :class:`EpsilonDeltaDpEvent` where dp_accounting lacks
  them);
* :mod:`dpplugins.integrations.dp_accountants` -- our accountants as
  ``dp_accounting.PrivacyAccountant`` subclasses (:class:`PLDAccountant`, :class:`GDPAccountant`,
  :class:`ShuffleAccountant`, :class:`CheckInAccountant`, :class:`PNSGDAccountant`,
  :class:`RandomAllocationAccountant`);
* :mod:`dpplugins.integrations.group_privacy` -- :func:`group_privacy_epsilon`.

Example::

    import dp_accounting
    from dpplugins.integrations.tf_privacy import PLDAccountant, compute_dp_sgd_privacy_statement

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 1000)
    eps = PLDAccountant().compose(event).get_epsilon(1e-5)    # certified upper bound
    print(compute_dp_sgd_privacy_statement(60000, 256, 3, 1.1, 1e-5, sampler="shuffled_epochs"))

Only dp_accounting (a dependency of tensorflow-privacy) and attrs (a dependency of dp_accounting)
are imported; TensorFlow is not.
"""

from __future__ import annotations

import functools
import math
import textwrap
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Optional

try:
    import dp_accounting
except ImportError as _error:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError("the TF-Privacy integration needs dp_accounting: pip install "
                      "'dp-accounting>=0.4.3' (tensorflow-privacy installs it)") from _error

from dpplugins.accountants import create, get_class, supporting
from dpplugins.accountants.balls_and_bins import RandomAllocationAccountant as _CoreAllocation
from dpplugins.accountants.fdp import GDPAccountant as _CoreGDP
from dpplugins.accountants.pld import PLDAccountant as _CorePLD, poisson_gaussian_pld
from dpplugins.accountants.shuffle import gaussian_epsilon
from dpplugins.display import lower_text, upper_text
from dpplugins.amplification.allocation import random_allocation_pld
from dpplugins.errors import (NumericalError, ParameterError, check_count, check_open_unit,
                              check_positive)
from dpplugins.events import Event, GaussianEvent, PoissonSampledEvent, SelfComposedEvent
from dpplugins.integrations.dp_accountants import (CheckInAccountant,
                                                   DPPluginsPrivacyAccountant, GDPAccountant,
                                                   PLDAccountant, PNSGDAccountant,
                                                   RandomAllocationAccountant, ShuffleAccountant)
from dpplugins.integrations.dp_accounting_events import to_dp_event, to_event
from dpplugins.integrations.dp_events import (CheckInVariant, DPPluginsDpEvent,
                                              EpsilonDeltaDpEvent, PNSGDDpEvent, PNSGDNoise,
                                              PNSGDVariant, RandomAllocationDpEvent,
                                              RandomCheckInDpEvent, RandomizedResponseDpEvent,
                                              ShuffledEpochsDpEvent)
from dpplugins.integrations.group_privacy import group_privacy_epsilon
from dpplugins.samplers import ShuffledEpochs, balls_and_bins

__all__ = ["PLDAccountant", "GDPAccountant", "ShuffleAccountant", "CheckInAccountant",
           "PNSGDAccountant", "RandomAllocationAccountant", "DPPluginsPrivacyAccountant",
           "ShuffledEpochsDpEvent", "RandomCheckInDpEvent", "RandomAllocationDpEvent",
           "PNSGDDpEvent", "RandomizedResponseDpEvent", "EpsilonDeltaDpEvent",
           "DPPluginsDpEvent", "CheckInVariant", "PNSGDVariant", "PNSGDNoise", "to_event",
           "to_dp_event", "group_privacy_epsilon", "DpSgdPrivacy", "dp_sgd_event",
           "statement_accountants", "compute_dp_sgd_privacy_numbers", "compute_dp_sgd_privacy",
           "compute_dp_sgd_privacy_statement"]


# -- what the training released -------------------------------------------------------------------
def _sampler_name(sampler: Any) -> str:
    """The statement's key of a sampler given by its canonical name
    (:func:`dpplugins.samplers.canonical_sampler`): ``"poisson"``, ``"shuffled_epochs"`` or
    ``"random_allocation"`` (key ``"checkin"``; the aliases ``"checkin"`` and, as in version
    0.1 of this statement, ``"random_checkin"`` are accepted for it)."""
    from dpplugins.samplers import canonical_sampler

    name = canonical_sampler("random_allocation" if sampler == "random_checkin" else sampler)
    if name in ("poisson", "shuffled_epochs"):
        return name
    if name == "random_allocation":
        return "checkin"
    raise ParameterError("sampler", sampler, "'poisson', 'shuffled_epochs' or "
                         "'random_allocation' (aliases 'checkin', 'random_checkin')")


def _ceil(epochs: float, numerator: int, denominator: int) -> int:
    """``ceil(epochs numerator / denominator)`` in exact arithmetic, ``epochs`` read as the
    decimal it prints as (what was typed: 0.1 is 1/10, not the double just above it, which
    would add a step to 0.1 epochs of 10 steps)."""
    return int(-((-Fraction(str(float(epochs))) * numerator) // denominator))


def dp_sgd_event(sampler: str, number_of_examples: int, batch_size: int, num_epochs: float,
                 noise_multiplier: float) -> Event:
    """The event of DP-SGD on ``number_of_examples`` examples with ``batch_size`` examples per
    step (expected, for Poisson) for ``num_epochs`` epochs, Gaussian noise ``noise_multiplier``
    on every step's sum: the one place the statement's sampler names become events.

    Step counts follow TF-Privacy 0.9.0 (``compute_dp_sgd_privacy_lib``):

    * ``"poisson"``: ``ceil(num_epochs / q)`` steps of
      ``PoissonSampledEvent(q, GaussianEvent(noise_multiplier))``, ``q = batch_size /
      number_of_examples`` (in floating point, as TF-Privacy; at least the exact
      ``ceil(num_epochs * number_of_examples / batch_size)``, ``num_epochs`` read as the
      decimal it prints as);
    * ``"shuffled_epochs"``: ``ShuffledEpochs(n, batch_size).event(noise_multiplier, epochs)``,
      ``T = ceil(n / batch_size)`` steps per epoch for ``ceil(num_epochs * T)`` steps (a partial
      last epoch is a prefix of a full one; TF-Privacy rounds up to ``ceil(num_epochs)`` whole
      epochs, which can only be larger);
    * ``"random_checkin"`` (or ``"checkin"``): ``balls_and_bins(n, T).event(noise_multiplier,
      epochs)`` for the same steps -- each example in exactly one uniformly random of the ``T``
      steps of each epoch, independently (random allocation; batches of random size, ``n / T <=
      batch_size`` on average).

    Example::

        >>> dp_sgd_event("shuffled_epochs", 1000, 30, 1.5, 1.0).steps
        51
    """
    sampler = _sampler_name(sampler)
    n = check_count("number_of_examples", number_of_examples, minimum=1)
    b = check_count("batch_size", batch_size, minimum=1)
    if b > n:
        raise ParameterError("batch_size", batch_size, f"<= number_of_examples={n}")
    epochs = check_positive("num_epochs", num_epochs)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    if sampler == "poisson":
        q = b / n
        # TF-Privacy's count in floating point, but never below the exact ceil(epochs n / b):
        # from about 10^16 steps on the float quotient can round down to the integer below
        # (10^18 examples, batch 1, one epoch gave 999999999999999872 steps)
        return SelfComposedEvent(PoissonSampledEvent(q, GaussianEvent(sigma)),
                                 max(int(math.ceil(epochs / q)), _ceil(epochs, n, b)))
    steps_per_epoch = -(-n // b)   # exact (n / b in floating point rounds above 2^53)
    steps = max(int(math.ceil(epochs * steps_per_epoch)),   # never below the exact count
                _ceil(epochs, steps_per_epoch, 1))
    passes = Fraction(steps, steps_per_epoch)
    passes = int(passes) if passes.denominator == 1 else passes
    if sampler == "shuffled_epochs":
        return ShuffledEpochs(n, b, rng=0).event(sigma, passes)
    return balls_and_bins(n, steps_per_epoch, rng=0).event(sigma, passes)


# -- which accountant computes which line ---------------------------------------------------------
#: the accountant of a line when ``accountant=`` does not name one for it: the first of these
#: that supports the line's event (then any registered one that does, in registry order)
_PREFERRED = ("pld", "shuffle", "balls_and_bins")
_RDP = "rdp"


def _accountant_name(accountant_type: Any, accountant: Optional[str]) -> str:
    """The accountant named by ``accountant_type`` (TF-Privacy's ``AccountantType.RDP`` /
    ``.PLD``, or ``"RDP"``/``"PLD"``) and/or ``accountant`` (default ``"pld"``)."""
    from_type = None
    if accountant_type is not None:
        label = getattr(accountant_type, "value", accountant_type)
        if not (isinstance(label, str) and label.upper() in ("RDP", "PLD")):
            raise ParameterError("accountant_type", accountant_type,
                                 "TF-Privacy's AccountantType.RDP or AccountantType.PLD (or "
                                 "'RDP', 'PLD')", "name any other accountant with accountant=")
        from_type = label.lower()
    if accountant is None:
        return from_type or "pld"
    if from_type is not None and accountant != from_type:
        raise ParameterError("accountant", accountant, f"None or {from_type!r} with "
                             f"accountant_type={accountant_type!r}")
    return accountant


def _add_remove(name: str):
    """A new accountant ``name`` for add-or-remove-one adjacency (the statement's), or
    :class:`ParameterError` naming ``accountant``."""
    accountant = create(name)            # ParameterError("accountant", ...) if unknown
    if accountant.neighbouring == "add_remove":
        return accountant
    try:
        return create(name, neighbouring="add_remove")
    except ParameterError as error:
        raise ParameterError(
            "accountant", name, "an accountant for add-or-remove-one adjacency (the "
            "statement's)", f"the {name} accountant analyses {accountant.neighbouring!r} "
            f"neighbours ({error.valid}); for such a sampler use PrivacyCallback or the "
            "dp_accounting wrappers of dpplugins.integrations.dp_accountants") from None


def _valid(name: str, event: Event) -> bool:
    try:
        return _add_remove(name).supports(event)
    except (ParameterError, TypeError):
        return False


def _default(event: Event) -> str:
    for name in _PREFERRED + tuple(supporting(event)):
        if _valid(name, event):
            return name
    raise ParameterError("sampler", event, "a sampler some registered accountant supports for "
                         "add-or-remove-one adjacency")


def _events(sampler: str, n: int, b: int, epochs: float, sigma: float) -> dict[str, Event]:
    """The events of the statement's lines: shuffled epochs and Poisson always, random
    check-ins when the training used them."""
    lines = ("shuffled_epochs", "checkin", "poisson") if sampler == "checkin" else (
        "shuffled_epochs", "poisson")
    return {line: dp_sgd_event(line, n, b, epochs, sigma) for line in lines}


def _line_accountants(name: str, sampler: str, events: dict[str, Event]) -> dict[str, str]:
    """The accountant of every line: ``name`` for the training's sampler when it supports its
    event, and for the Poisson line when it supports Poisson sampling; the first of
    ``_PREFERRED`` (then of the registry) that supports a line's event for the others."""
    chosen = {line: None for line in events}
    if name == _RDP:
        chosen["poisson"] = _RDP
    else:
        accountant = _add_remove(name)
        own = sampler != "poisson" and accountant.supports(events[sampler])
        poisson = accountant.supports(events["poisson"])
        if not (own or poisson):
            names = ", ".join(supporting(events[sampler])) or "none"
            raise ParameterError(
                "accountant", name, f"an accountant that supports the training's sampler "
                f"(sampler={sampler!r}) or Poisson sampling",
                f"the {name} accountant supports neither; accountants that support "
                f"sampler={sampler!r}: {names}")
        if own:
            chosen[sampler] = name
        if poisson:
            chosen["poisson"] = name
    for line, event in events.items():
        if chosen[line] is None:
            chosen[line] = _default(event)
    return chosen


def statement_accountants(number_of_examples: int, batch_size: int, num_epochs: float,
                          noise_multiplier: float, *, accountant: Optional[str] = None,
                          sampler: str = "poisson", accountant_type: Any = None) -> dict:
    """Which accountant computes which line of :func:`compute_dp_sgd_privacy_statement`:
    ``{"shuffled_epochs": name, "checkin": name (random check-ins only), "poisson": name}``.
    Raises :class:`ParameterError` (naming ``accountant``) when ``accountant`` supports neither
    the training's sampler nor Poisson sampling, or analyses another adjacency.

    Example::

        >>> statement_accountants(1000, 100, 1, 2.0, accountant="fdp", sampler="checkin")
        {'shuffled_epochs': 'shuffle', 'checkin': 'balls_and_bins', 'poisson': 'fdp'}
    """
    sampler = _sampler_name(sampler)
    name = _accountant_name(accountant_type, accountant)
    return _line_accountants(name, sampler, _events(sampler, number_of_examples, batch_size,
                                                    num_epochs, noise_multiplier))


_DESCRIPTIONS = {
    "pld": "dpplugins PLD",
    "fdp": "dpplugins f-DP, exact composition",
    "shuffle": "dpplugins",
    "balls_and_bins": "dpplugins random allocation, Chua et al. 2025",
}
_RDP_LABEL = ("rdp accountant (dp_accounting RdpAccountant, RDP-to-DP conversion), upper bound "
              "(not certified by dpplugins)")


def _label(accountant: str) -> str:
    """``"<name> accountant (<what>), <bound type>"`` for a line of the statement."""
    if accountant == _RDP:
        return _RDP_LABEL
    cls = get_class(accountant)
    what = _DESCRIPTIONS.get(accountant, f"{cls.__module__}.{cls.__qualname__}")
    return f"{accountant} accountant ({what}), {cls.bound_type}"


@dataclass(frozen=True)
class DpSgdPrivacy:
    """The numbers behind :func:`compute_dp_sgd_privacy_statement`.

    ``shuffled_upper``/``shuffled_lower``: the certified interval of ``shuffled_accountant``
    (``"shuffle"`` unless ``accountant=`` named another for ``sampler="shuffled_epochs"``) for
    shuffled epochs (each example once per epoch).  ``poisson_epsilon``: the Poisson-sampling
    epsilon from ``poisson_accountant`` (``poisson_lower`` its certified lower bound, 0 if the
    accountant gives none).  ``allocation_upper``/``allocation_lower``: the certified interval of
    ``allocation_accountant`` (``"balls_and_bins"`` by default) for random check-ins
    (``sampler="checkin"``: each example in exactly one uniformly random of the
    ``steps_per_epoch`` steps of each epoch); ``None`` for the other samplers.
    ``effective_noise_multiplier`` is the noise multiplier after microbatching's sensitivity
    doubling.  With ``max_examples_per_user`` set: ``user_shuffled_upper``,
    ``user_poisson_epsilon`` and ``user_allocation_upper`` are the user-level epsilons (group
    privacy; ``inf`` when the conversion gives no finite bound) and ``shuffled_mu`` the Gaussian
    DP parameter of the no-amplification bound of shuffled epochs and of random check-ins (each
    example in one step per epoch); ``user_poisson_note`` says why ``user_poisson_epsilon`` is
    ``inf`` when the example-level epsilon could not be certified at the (small) example-level
    delta the conversion needs.  ``user_allocation_upper`` is the smaller of
    ``user_allocation_vadhan`` (Vadhan's conversion of the check-in line's bound; ``inf`` with the
    reason in ``user_allocation_note`` when it fails) and ``user_allocation_gaussian`` (group
    privacy of the ``shuffled_mu``-GDP bound).
    """

    number_of_examples: int
    batch_size: int
    num_epochs: float
    noise_multiplier: float
    delta: float
    used_microbatching: bool
    max_examples_per_user: Optional[int]
    sampler: str
    poisson_accountant: str
    effective_noise_multiplier: float
    sampling_probability: float
    poisson_steps: int
    shuffled_steps: int
    steps_per_epoch: int
    shuffled_lower: float
    shuffled_upper: float
    poisson_lower: float
    poisson_epsilon: float
    shuffled_mu: float = 0.0
    user_shuffled_upper: Optional[float] = None
    user_poisson_epsilon: Optional[float] = None
    user_poisson_note: str = ""
    allocation_lower: Optional[float] = None
    allocation_upper: Optional[float] = None
    user_allocation_upper: Optional[float] = None
    user_allocation_vadhan: Optional[float] = None
    user_allocation_gaussian: Optional[float] = None
    user_allocation_note: str = ""
    shuffled_accountant: str = "shuffle"
    allocation_accountant: Optional[str] = None


def _composed(name: str, event: Event):
    accountant = _add_remove(name)
    accountant.compose(event)
    return accountant


def _poisson_epsilon_function(name: str, event: SelfComposedEvent,
                              accountant) -> Callable[[float], float]:
    """delta -> epsilon upper bound of the Poisson line's event, for many deltas: dp_accounting's
    RDP accountant; for our ``pld`` and ``fdp`` accountants (whose Poisson path is that PLD) one
    PLD on the PLD accountant's first grid (its connect-the-dots bounds are certified on any
    grid); for any other accountant its ``get_epsilon``."""
    if name == _RDP:
        rdp = dp_accounting.rdp.RdpAccountant().compose(to_dp_event(event))
        return lambda d: float(rdp.get_epsilon(d))
    if type(accountant) in (_CorePLD, _CoreGDP):
        step = event.event
        history = ((step.event.noise_multiplier, step.sample_rate, event.count),)
        pld = poisson_gaussian_pld(history, _CorePLD().initial_grid_step(history))
        return lambda d: float(pld.epsilon_for_delta(d, lower=False).upper)
    return lambda d: float(accountant.get_epsilon(d))


def _allocation_epsilon_function(event: Event, accountant,
                                 epochs: int) -> Callable[[float], float]:
    """delta -> epsilon upper bound of the random check-in line over the ``epochs`` epochs begun,
    for many deltas: for our ``balls_and_bins`` accountant one composed PLD on its first grid
    (:func:`~dpplugins.amplification.allocation.random_allocation_pld`; its upper bound is
    certified on any grid, with the numerical slack charged); for any other accountant its
    ``get_epsilon`` on the whole epochs begun."""
    if type(accountant) is _CoreAllocation:
        pld = random_allocation_pld(event.event.noise_multiplier, event.steps_per_epoch, epochs)
        return lambda d: float(pld.epsilon_for_delta(d).upper)
    whole = type(accountant)(**accountant.options()).compose(event.with_steps(
        epochs * event.steps_per_epoch))
    return lambda d: float(whole.get_epsilon(d))


def compute_dp_sgd_privacy_numbers(number_of_examples: int, batch_size: int, num_epochs: float,
                                   noise_multiplier: float, delta: float,
                                   used_microbatching: bool = True,
                                   max_examples_per_user: Optional[int] = None,
                                   accountant_type: Any = None, *,
                                   accountant: Optional[str] = None,
                                   sampler: str = "poisson") -> DpSgdPrivacy:
    """The epsilons of :func:`compute_dp_sgd_privacy_statement`, as numbers (same parameters).

    The lines' events are :func:`dp_sgd_event`'s (step counts as TF-Privacy 0.9.0).  With
    microbatching the noise multiplier is halved before accounting, as TF-Privacy does (a
    microbatch of several examples is clipped as a unit, so in add/remove adjacency one example
    can move the sum by twice the clipping norm; Ponomareva et al. 2023, "How to DP-fy ML",
    Sec. 5.6); this holds for every sampler here, since the example changes the clipped sum of
    one step in each of them.

    Accountants (:func:`statement_accountants`): ``accountant`` (or TF-Privacy's
    ``accountant_type``: ``AccountantType.RDP`` is ``"rdp"``, dp_accounting's
    ``RdpAccountant``, TF-Privacy's default; ``AccountantType.PLD`` is our ``"pld"``; default
    ``"pld"``) is any registered accountant for add-or-remove-one adjacency: it computes the
    line of the training's sampler when ``create(accountant).supports(event)`` for that
    sampler's event, and the Poisson line when it supports Poisson sampling -- at least one of
    the two, else :class:`ParameterError`.  The other lines use ``"pld"`` (Poisson),
    ``"shuffle"`` (shuffled epochs) and ``"balls_and_bins"`` (random check-ins).  So
    ``"shuffle"`` needs ``sampler="shuffled_epochs"``, ``"balls_and_bins"`` needs
    ``sampler="checkin"``, and ``"checkin"`` (Balle et al.'s accountant, replace-one adjacency
    with capped batches) is refused.

    User level (``max_examples_per_user = k``; add or remove one user's ``<= k`` examples), by
    group privacy:

    * shuffled epochs: the no-amplification bound is ``mu``-GDP with ``mu = sqrt(E) / sigma``
      (``E`` epochs begun; each example in one step per epoch), and a ``mu``-GDP mechanism is
      ``k mu``-GDP for groups of ``k`` (Dong, Roth, Su 2022, Thm 2.14); epsilon from the Gaussian
      profile (Balle & Wang 2018, Thm 8).  This is exact group privacy of the Gaussian bound;
      for batch size 1 it does not use the amplified example-level bound.
    * random check-ins: the smaller of two valid bounds -- :func:`group_privacy_epsilon` (Vadhan
      2017, Lemma 2.2) on the check-in line's accountant over the ``E`` epochs begun, and the
      same ``k mu``-GDP bound as for shuffled epochs (one epoch of random allocation is ``1 /
      sigma``-GDP: given the other examples' steps, it is a mixture over the step the example
      lands in of pairs dominated by the Gaussian mechanism, and the hockey-stick divergence is
      jointly convex).
    * Poisson sampling: :func:`group_privacy_epsilon` on the example-level epsilon of the Poisson
      line's accountant -- with ``"rdp"`` exactly TF-Privacy's user-level computation; with
      ``"pld"``/``"fdp"`` on our certified PLD (which TF-Privacy refuses for its PLD accountant).

    ``k = 1`` gives the example-level values.

    Example::

        >>> r = compute_dp_sgd_privacy_numbers(1000, 100, 1, 2.0, 1e-5, False, sampler="checkin",
        ...                                    accountant="balls_and_bins")
        >>> r.steps_per_epoch, r.poisson_accountant, r.allocation_upper < r.shuffled_upper
        (10, 'pld', True)
    """
    n = check_count("number_of_examples", number_of_examples, minimum=2)
    b = check_count("batch_size", batch_size, minimum=1)
    if b > n:
        raise ParameterError("batch_size", batch_size, f"<= number_of_examples={n}")
    epochs = check_positive("num_epochs", num_epochs)
    sigma = check_positive("noise_multiplier", noise_multiplier)
    delta = check_open_unit("delta", delta)
    if not isinstance(used_microbatching, bool):
        raise ParameterError("used_microbatching", used_microbatching, "True or False")
    sampler = _sampler_name(sampler)
    name = _accountant_name(accountant_type, accountant)
    k = (None if max_examples_per_user is None
         else check_count("max_examples_per_user", max_examples_per_user, minimum=1))
    effective_sigma = sigma / 2.0 if used_microbatching else sigma
    lines = _line_accountants(name, sampler, _events(sampler, n, b, epochs, effective_sigma))
    # the classes are part of the key: a name registered again is another accountant
    classes = tuple((line, acc, None if acc == _RDP else get_class(acc))
                    for line, acc in lines.items())
    return _dp_sgd_privacy(n, b, epochs, sigma, delta, used_microbatching, k, sampler, classes)


@functools.lru_cache(maxsize=32)
def _dp_sgd_privacy(n: int, b: int, epochs: float, sigma: float, delta: float,
                    used_microbatching: bool, k: Optional[int], sampler: str,
                    classes: tuple) -> DpSgdPrivacy:
    """:func:`compute_dp_sgd_privacy_numbers` on validated arguments and resolved accountants (a
    pure function, cached: the statement and the numbers of the same run are computed once)."""
    lines = {line: name for line, name, _ in classes}
    effective_sigma = sigma / 2.0 if used_microbatching else sigma
    events = _events(sampler, n, b, epochs, effective_sigma)
    poisson_event, shuffled_event = events["poisson"], events["shuffled_epochs"]
    steps_per_epoch = shuffled_event.steps_per_epoch
    shuffled_steps = shuffled_event.steps

    poisson_name = lines["poisson"]
    poisson = None
    if poisson_name == _RDP:
        rdp = dp_accounting.rdp.RdpAccountant().compose(to_dp_event(poisson_event))
        poisson_lower, poisson_eps = 0.0, float(rdp.get_epsilon(delta))
    else:
        poisson = _composed(poisson_name, poisson_event)
        poisson_lower, poisson_eps = map(float, poisson.get_epsilon_bounds(delta))
    shuffled_lower, shuffled_upper = _composed(lines["shuffled_epochs"],
                                               shuffled_event).get_epsilon_bounds(delta)
    allocation_lower = allocation_upper = allocation = None
    if "checkin" in events:
        allocation = _composed(lines["checkin"], events["checkin"])
        allocation_lower, allocation_upper = map(float, allocation.get_epsilon_bounds(delta))
    epochs_begun = math.ceil(shuffled_steps / steps_per_epoch)
    mu = math.sqrt(epochs_begun) / effective_sigma      # zero-out: sensitivity 1
    user = dict(user_shuffled_upper=None, user_poisson_epsilon=None, user_poisson_note="",
                user_allocation_upper=None, user_allocation_vadhan=None,
                user_allocation_gaussian=None, user_allocation_note="")
    if k == 1:
        user.update(user_shuffled_upper=float(shuffled_upper), user_poisson_epsilon=poisson_eps,
                    user_allocation_upper=allocation_upper)
    elif k is not None:
        user["user_shuffled_upper"] = gaussian_epsilon(k * mu, delta)
        try:
            user["user_poisson_epsilon"] = group_privacy_epsilon(
                _poisson_epsilon_function(poisson_name, poisson_event, poisson), k, delta)
        except NumericalError as error:
            user.update(user_poisson_epsilon=math.inf, user_poisson_note=error.what)
        if allocation is not None:
            try:
                vadhan = group_privacy_epsilon(_allocation_epsilon_function(
                    events["checkin"], allocation, epochs_begun), k, delta)
            except NumericalError as error:
                vadhan = math.inf
                user["user_allocation_note"] = error.what
            user.update(user_allocation_vadhan=vadhan,
                        user_allocation_gaussian=user["user_shuffled_upper"],
                        user_allocation_upper=min(vadhan, user["user_shuffled_upper"]))
    return DpSgdPrivacy(n, b, epochs, sigma, delta, used_microbatching, k,
                        sampler, poisson_name, effective_sigma, b / n, poisson_event.count,
                        shuffled_steps, steps_per_epoch, float(shuffled_lower),
                        float(shuffled_upper), poisson_lower, poisson_eps, mu,
                        allocation_lower=allocation_lower, allocation_upper=allocation_upper,
                        shuffled_accountant=lines["shuffled_epochs"],
                        allocation_accountant=lines.get("checkin"), **user)


#: TF-Privacy 0.9.0's parameter names of its (deprecated) ``compute_dp_sgd_privacy``
_TF_PRIVACY_NAMES = ("n", "epochs")


def compute_dp_sgd_privacy(*args: Any, **kwargs: Any) -> DpSgdPrivacy:
    """Keyword-only alias of :func:`compute_dp_sgd_privacy_numbers` (its former name).

    TF-Privacy's ``compute_dp_sgd_privacy(n, batch_size, noise_multiplier, epochs, delta)`` takes
    the noise multiplier before the epochs and returns ``(epsilon, rdp_order)``; ours took the
    epochs first, so a positional call written for TF-Privacy would have computed another
    training.  Positional arguments (and TF-Privacy's names ``n``, ``epochs``) therefore raise
    ``TypeError``; call :func:`compute_dp_sgd_privacy_numbers`, or this alias with keywords.
    """
    if args or any(name in kwargs for name in _TF_PRIVACY_NAMES):
        raise TypeError(
            "dpplugins' compute_dp_sgd_privacy takes keyword arguments only: it is not "
            "TF-Privacy's compute_dp_sgd_privacy(n, batch_size, noise_multiplier, epochs, delta) "
            "(which puts the noise multiplier before the epochs and returns (epsilon, "
            "rdp_order)). Call compute_dp_sgd_privacy_numbers(number_of_examples, batch_size, "
            "num_epochs, noise_multiplier, delta, ...) or "
            "compute_dp_sgd_privacy_statement(...) with TF-Privacy's statement signature")
    return compute_dp_sgd_privacy_numbers(**kwargs)


def _epsilon_text(value: float) -> str:
    return "    inf (**)" if math.isinf(value) else f"{upper_text(value, decimals=3):>12s}"


def _bracket(text: str) -> str:
    """``[text]`` wrapped to 80 columns under an epsilon line."""
    return textwrap.fill(f"[{text}]", width=80, initial_indent=" " * 7,
                         subsequent_indent=" " * 8)


#: the epsilon lines of the statement, by sampler (same width: the numbers line up)
_LINE_TEXT = {"shuffled_epochs": "Epsilon with each example occurring once per epoch:  ",
              "checkin": "Epsilon with random check-ins (one step per epoch):  ",
              "poisson": "Epsilon assuming Poisson sampling (*):               "}
_SAMPLER_TEXT = {
    "shuffled_epochs": "shuffled epochs",
    "checkin": ("random check-ins (each example in exactly one uniformly random step of each "
                "epoch)"),
    "poisson": "Poisson sampling",
}


def _epsilon_lines(r: DpSgdPrivacy, values: dict, notes: dict) -> str:
    """The epsilon lines (shuffled epochs, random check-ins when computed, Poisson), the
    training's sampler marked ``<=``; ``values``/``notes`` by sampler."""
    lines = []
    for sampler in ("shuffled_epochs", "checkin", "poisson"):
        if values.get(sampler) is None:
            continue
        mark = "<=" if sampler == r.sampler else "  "
        lines.append(f"  {mark} {_LINE_TEXT[sampler]}{_epsilon_text(values[sampler])}\n"
                     + _bracket(notes[sampler]))
    return "\n".join(lines)


_VADHAN = "group privacy of (eps, delta)-DP (Vadhan 2017, Lemma 2.2)"


def _gaussian_group_text(mu: float, k: int, adjacency: str = "") -> str:
    """How a user-level line from the no-amplification ``mu``-GDP bound was obtained."""
    return (f"Gaussian bound without amplification{adjacency}, mu = {mu:.4g}, group privacy of "
            f"Gaussian DP: mu -> {k} mu (Dong, Roth, Su 2022, Thm 2.14)")


def _user_level_notes(r: DpSgdPrivacy, example_notes: dict) -> dict:
    """The bracketed notes of the user-level lines: which conversion gave each epsilon."""
    k = r.max_examples_per_user
    if k == 1:
        return dict.fromkeys(example_notes, "one example per user: the example-level bound")
    gaussian = _gaussian_group_text(r.shuffled_mu, k)
    whose = "shuffle accountant's " if r.shuffled_accountant == "shuffle" else ""
    notes = {"shuffled_epochs": whose + _gaussian_group_text(r.shuffled_mu, k, " (zero-out)"),
             "poisson": f"{_label(r.poisson_accountant)}, {_VADHAN}"}
    if r.user_allocation_upper is None:
        return notes
    if r.user_allocation_vadhan <= r.user_allocation_gaussian:
        notes["checkin"] = (f"{_label(r.allocation_accountant)}, {_VADHAN}; the Gaussian "
                            "bound gives "
                            f"{r.user_allocation_gaussian:.3f}")
    else:
        other = ("cannot be certified" if math.isinf(r.user_allocation_vadhan)
                 else f"gives {r.user_allocation_vadhan:.3f}")
        notes["checkin"] = (f"random allocation's {gaussian}; {_VADHAN} on the "
                            f"{r.allocation_accountant} accountant's bound {other}")
    return notes


def compute_dp_sgd_privacy_statement(number_of_examples: int, batch_size: int, num_epochs: float,
                                     noise_multiplier: float, delta: float,
                                     used_microbatching: bool = True,
                                     max_examples_per_user: Optional[int] = None,
                                     accountant_type: Any = None, *,
                                     accountant: Optional[str] = None,
                                     sampler: str = "poisson") -> str:
    """A privacy statement for DP-SGD like TF-Privacy's, computed with our accountants.

    Same parameters, in the same order, as TF-Privacy 0.9.0's
    ``compute_dp_sgd_privacy_statement(number_of_examples, batch_size, num_epochs,
    noise_multiplier, delta, used_microbatching=True, max_examples_per_user=None,
    accountant_type=AccountantType.RDP)``: ``accountant_type`` takes TF-Privacy's
    ``AccountantType`` (``RDP`` is dp_accounting's ``RdpAccountant``, TF-Privacy's figure;
    ``PLD`` is our certified ``"pld"``) and is the same as ``accountant=``, which names any
    registered accountant (default ``"pld"``; see :func:`compute_dp_sgd_privacy_numbers`).
    ``sampler`` is the sampler the training used: ``"poisson"``, ``"shuffled_epochs"`` (each
    example once per epoch, what Keras ``fit`` does) or ``"random_checkin"`` / ``"checkin"``
    (each example in exactly one uniformly random of the ``ceil(n / batch_size)`` steps of each
    epoch); its event is :func:`dp_sgd_event`'s.  The epsilon lines:

    * each example once per epoch: the ``shuffle`` accountant's certified upper bound (or the one
      ``accountant`` names, if it supports shuffled epochs and the training used them), with its
      certified lower bound (Chua et al. 2024) beside it as a diagnostic;
    * random check-ins (``sampler="checkin"`` only): the ``balls_and_bins`` accountant's (or
      ``accountant``'s) certified upper bound for ``ceil(n / batch_size)`` steps per epoch, with
      its certified lower bound beside it;
    * Poisson sampling: ``accountant`` when it supports Poisson sampling, else ``"pld"``.

    The line of the sampler used in training is marked; every line names its accountant and
    bound type.  With ``max_examples_per_user`` (an integer >= 1) user-level lines follow (add
    or remove all of one user's examples), computed by group privacy as described in
    :func:`compute_dp_sgd_privacy_numbers`; each names its conversion.  Returns the statement
    (TF-Privacy's function also returns it rather than printing).  See
    :func:`dp_sgd_event` for step counts and :func:`compute_dp_sgd_privacy_numbers` for
    microbatching.

    Example::

        >>> print(compute_dp_sgd_privacy_statement(60000, 256, 15, 1.1, 1e-5))  # doctest: +SKIP
        >>> text = compute_dp_sgd_privacy_statement(1000, 100, 1, 2.0, 1e-5, False,
        ...                                         sampler="checkin")
        >>> "<= Epsilon with random check-ins (one step per epoch)" in text
        True
    """
    r = compute_dp_sgd_privacy_numbers(number_of_examples, batch_size, num_epochs,
                                       noise_multiplier, delta, used_microbatching,
                                       max_examples_per_user, accountant_type,
                                       accountant=accountant, sampler=sampler)
    first = (f"DP-SGD on {r.number_of_examples} examples, {r.batch_size} examples per step, "
             f"noise multiplier {r.noise_multiplier:g}, {r.num_epochs:g} epochs, "
             f"{'with' if r.used_microbatching else 'without'} microbatching")
    first += (", no bound on the examples per user." if r.max_examples_per_user is None
              else f", at most {r.max_examples_per_user} example(s) per user.")
    if r.used_microbatching:
        first += (f" Microbatching doubles the sensitivity: accounted with noise multiplier "
                  f"{r.effective_noise_multiplier:g}.")
    used = _SAMPLER_TEXT[r.sampler]
    steps = f"{r.steps_per_epoch} step{'s' if r.steps_per_epoch > 1 else ''} per epoch"
    if r.sampler == "checkin":
        used += f", {steps}"
    paragraphs = [
        textwrap.fill(first, width=80),
        textwrap.fill("The guarantee covers every released checkpoint (all noisy steps), not "
                      "only the final model.", width=80),
        textwrap.fill(f"Sampler used in training: {used} (marked <=).", width=80),
    ]
    poisson_extra = (f"; lower bound {lower_text(r.poisson_lower, decimals=3)}"
                     if r.poisson_accountant != "rdp"
                     else "")
    chua = " (Chua et al. 2024)" if r.shuffled_accountant == "shuffle" else ""
    notes = {"shuffled_epochs": (f"{_label(r.shuffled_accountant)}; lower bound "
                                 f"{lower_text(r.shuffled_lower, decimals=3)}{chua}"),
             "poisson": f"{_label(r.poisson_accountant)}{poisson_extra}"}
    if r.allocation_upper is not None:
        notes["checkin"] = (f"{_label(r.allocation_accountant)}; {steps}; "
                            f"lower bound {lower_text(r.allocation_lower, decimals=3)}")
    values = {"shuffled_epochs": r.shuffled_upper, "checkin": r.allocation_upper,
              "poisson": r.poisson_epsilon}
    paragraphs.append(textwrap.fill(f"Example-level DP with add-or-remove-one adjacency at delta "
                                    f"= {r.delta}:", width=80)
                      + "\n" + _epsilon_lines(r, values, notes))
    infinite = False
    if r.max_examples_per_user is None:
        paragraphs.append(textwrap.fill("User-level privacy: none without a bound on the "
                                        "examples per user.", width=80))
    else:
        k = r.max_examples_per_user
        notes = _user_level_notes(r, notes)
        values = {"shuffled_epochs": r.user_shuffled_upper, "checkin": r.user_allocation_upper,
                  "poisson": r.user_poisson_epsilon}
        infinite = any(v is not None and math.isinf(v) for v in values.values())
        paragraphs.append(textwrap.fill(
            f"User-level DP with add-or-remove-one-user adjacency (at most {k} example(s) per "
            f"user) at delta = {r.delta}, by group privacy:", width=80)
            + "\n" + _epsilon_lines(r, values, notes))
    paragraphs.append(textwrap.fill(
        "(*) The training used Poisson sampling (each example in each batch independently with "
        f"probability {r.sampling_probability:.4g}), which this line assumes." if r.sampler ==
        "poisson" else
        f"(*) Shown for comparison only: the training used {_SAMPLER_TEXT[r.sampler]}, to which "
        "the Poisson line does not apply; the marked line is the guarantee of the training.",
        width=80))
    if infinite:
        if r.user_poisson_note:
            why = (f"(**) Poisson line: {r.user_poisson_note}. accountant='rdp' gives "
                   "TF-Privacy's figure (not certified by dpplugins).")
        else:
            why = ("(**) The group-privacy conversion found no finite user-level epsilon at "
                   "this delta (it finds one at a larger delta or with more noise).")
        paragraphs.append(textwrap.fill(why, width=80))
    return "\n\n".join(paragraphs) + "\n"
