"""TensorFlow Privacy integration: TF-Privacy's offline DP-SGD privacy statement computed with
our accountants, and the import path of the whole dp_accounting side of the integration.

:func:`compute_dp_sgd_privacy_statement` has TF-Privacy's positional signature
(``tensorflow_privacy.compute_dp_sgd_privacy_statement``) plus ``accountant=`` and ``sampler=``;
every epsilon line names its accountant and its bound type, and ``max_examples_per_user`` gives
user-level lines by group privacy.  :func:`compute_dp_sgd_privacy` returns the same numbers.

The rest of the integration lives in modules with one job each, re-exported here so that
``from dpplugins.integrations.tf_privacy import X`` works for all of it:

* :mod:`dpplugins.integrations.dp_events` -- our dp_accounting events
  (:class:`ShuffledEpochsDpEvent`, :class:`RandomCheckInDpEvent`,
  :class:`RandomAllocationDpEvent`, :class:`PNSGDDpEvent`);
* :mod:`dpplugins.integrations.dp_accountants` -- our accountants as
  ``dp_accounting.PrivacyAccountant`` subclasses (:class:`PLDAccountant`, :class:`GDPAccountant`,
  :class:`ShuffleAccountant`, :class:`CheckInAccountant`, :class:`PNSGDAccountant`,
  :class:`RandomAllocationAccountant`) and :func:`events_to_history`;
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
from typing import Callable, Optional

try:
    import dp_accounting
except ImportError as _error:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError("the TF-Privacy integration needs dp_accounting: pip install "
                      "'dp-accounting>=0.4.3' (tensorflow-privacy installs it)") from _error

from dpplugins.accountants import create, get_class
from dpplugins.accountants.pld import PLDAccountant as _CorePLD, poisson_gaussian_pld
from dpplugins.accountants.shuffle import gaussian_epsilon
from dpplugins.amplification.allocation import random_allocation_pld
from dpplugins.errors import (NumericalError, ParameterError, check_choice, check_count,
                              check_open_unit, check_positive)
from dpplugins.integrations.dp_accountants import (CheckInAccountant,
                                                   DPPluginsPrivacyAccountant, GDPAccountant,
                                                   PLDAccountant, PNSGDAccountant,
                                                   RandomAllocationAccountant, ShuffleAccountant,
                                                   events_to_history)
from dpplugins.integrations.dp_events import (CheckInVariant, PNSGDDpEvent, PNSGDNoise,
                                              PNSGDVariant, RandomAllocationDpEvent,
                                              RandomCheckInDpEvent, ShuffledEpochsDpEvent)
from dpplugins.integrations.group_privacy import group_privacy_epsilon

__all__ = ["PLDAccountant", "GDPAccountant", "ShuffleAccountant", "CheckInAccountant",
           "PNSGDAccountant", "RandomAllocationAccountant", "DPPluginsPrivacyAccountant",
           "ShuffledEpochsDpEvent", "RandomCheckInDpEvent", "RandomAllocationDpEvent",
           "PNSGDDpEvent", "CheckInVariant", "PNSGDVariant", "PNSGDNoise", "events_to_history",
           "group_privacy_epsilon", "DpSgdPrivacy",
           "compute_dp_sgd_privacy", "compute_dp_sgd_privacy_statement",
           "STATEMENT_ACCOUNTANTS", "STATEMENT_SAMPLERS"]


# -- the DP-SGD privacy statement -----------------------------------------------------------------
STATEMENT_ACCOUNTANTS = ("pld", "fdp", "shuffle", "balls_and_bins", "rdp")
STATEMENT_SAMPLERS = ("poisson", "shuffled_epochs", "checkin")

#: the accountant of a sampler's own line; naming it as ``accountant=`` needs that sampler, and the
#: Poisson comparison line then uses ``"pld"``
_SAMPLER_ACCOUNTANT = {"shuffled_epochs": "shuffle", "checkin": "balls_and_bins"}
#: what the dpplugins accountants of the statement compute (their bound type is the class's)
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
    if accountant == "rdp":
        return _RDP_LABEL
    return (f"{accountant} accountant ({_DESCRIPTIONS[accountant]}), "
            f"{get_class(accountant).bound_type}")


@dataclass(frozen=True)
class DpSgdPrivacy:
    """The numbers behind :func:`compute_dp_sgd_privacy_statement`.

    ``shuffled_upper``/``shuffled_lower``: our shuffle accountant's certified interval for
    shuffled epochs (each example once per epoch).  ``poisson_epsilon``: the Poisson-sampling
    epsilon from ``poisson_accountant`` (``poisson_lower`` its certified lower bound, 0 if the
    accountant gives none).  ``allocation_upper``/``allocation_lower``: the ``balls_and_bins``
    accountant's certified interval for random check-ins (``sampler="checkin"``: each example in
    exactly one uniformly random of the ``steps_per_epoch`` steps of each epoch); ``None`` for
    the other samplers.  ``effective_noise_multiplier`` is the noise multiplier after
    microbatching's sensitivity doubling.  With ``max_examples_per_user`` set:
    ``user_shuffled_upper``, ``user_poisson_epsilon`` and ``user_allocation_upper`` are the
    user-level epsilons (group privacy; ``inf`` when the conversion gives no finite bound) and
    ``shuffled_mu`` the Gaussian DP parameter of the no-amplification bound of shuffled epochs
    and of random check-ins (each example in one step per epoch); ``user_poisson_note`` says why
    ``user_poisson_epsilon`` is ``inf`` when the example-level epsilon could not be certified at
    the (small) example-level delta the conversion needs.  ``user_allocation_upper`` is the
    smaller of ``user_allocation_vadhan`` (Vadhan's conversion of the ``balls_and_bins`` bound;
    ``inf`` with the reason in ``user_allocation_note`` when it fails) and
    ``user_allocation_gaussian`` (group privacy of the ``shuffled_mu``-GDP bound).
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


def _poisson_event(sigma: float, q: float, steps: int):
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)


def _poisson_epsilon(accountant: str, sigma: float, q: float, steps: int,
                     delta: float) -> tuple[float, float]:
    """(lower, upper) epsilon of ``steps`` Poisson-subsampled Gaussian steps (add/remove)."""
    event = _poisson_event(sigma, q, steps)
    if accountant == "rdp":
        return 0.0, float(dp_accounting.rdp.RdpAccountant().compose(event).get_epsilon(delta))
    wrapper = PLDAccountant() if accountant == "pld" else GDPAccountant()
    lower, upper = wrapper.compose(event).get_epsilon_bounds(delta)
    return float(lower), float(upper)


def _poisson_epsilon_function(accountant: str, sigma: float, q: float,
                              steps: int) -> Callable[[float], float]:
    """delta -> epsilon upper bound of ``steps`` Poisson-subsampled Gaussian steps, for many
    deltas: dp_accounting's RDP accountant, or one PLD (the PLD accountant's first grid; its
    connect-the-dots bounds are certified on any grid) for ``"pld"`` and ``"fdp"`` (whose Poisson
    path is that PLD)."""
    if accountant == "rdp":
        rdp = dp_accounting.rdp.RdpAccountant().compose(_poisson_event(sigma, q, steps))
        return lambda d: float(rdp.get_epsilon(d))
    history = ((sigma, q, steps),)
    pld = poisson_gaussian_pld(history, _CorePLD().initial_grid_step(history))
    return lambda d: float(pld.epsilon_for_delta(d, lower=False).upper)


def _allocation_epsilon(sigma: float, steps_per_epoch: int, steps: int,
                        delta: float) -> tuple[float, float]:
    """(lower, upper) epsilon of ``steps`` random-allocation steps, ``steps_per_epoch`` per epoch
    (add/remove): the ``balls_and_bins`` accountant on the run ``(sigma, 1 / t, steps)``."""
    accountant = create("balls_and_bins")
    accountant.step(noise_multiplier=sigma, sample_rate=1.0 / steps_per_epoch, count=steps)
    lower, upper = accountant.get_epsilon_bounds(delta)
    return float(lower), float(upper)


def _allocation_epsilon_function(sigma: float, steps_per_epoch: int,
                                 epochs: int) -> Callable[[float], float]:
    """delta -> epsilon upper bound of ``epochs`` random-allocation epochs, for many deltas: one
    composed PLD on the ``balls_and_bins`` accountant's first grid
    (:func:`~dpplugins.amplification.allocation.random_allocation_pld`; its upper bound is
    certified on any grid, with the numerical slack charged)."""
    pld = random_allocation_pld(sigma, steps_per_epoch, epochs)
    return lambda d: float(pld.epsilon_for_delta(d).upper)


def _check_accountant(accountant: object, sampler: str) -> str:
    """``accountant`` if valid for ``sampler`` (see :func:`compute_dp_sgd_privacy`)."""
    if accountant == "checkin":
        raise ParameterError(
            "accountant", accountant, "one of " + ", ".join(map(repr, STATEMENT_ACCOUNTANTS)),
            "the checkin accountant (Balle et al. 2020) needs replace-one adjacency and a cap on "
            "the batch size; sampler='checkin' (each example in one random step per epoch) is "
            "accounted by 'balls_and_bins'.  For a RandomCheckIn sampler use PrivacyCallback or "
            "CheckInAccountant")
    accountant = check_choice("accountant", accountant, STATEMENT_ACCOUNTANTS)
    own = _SAMPLER_ACCOUNTANT.get(sampler)
    if accountant in _SAMPLER_ACCOUNTANT.values() and accountant != own:
        home = next(s for s, a in _SAMPLER_ACCOUNTANT.items() if a == accountant)
        valid = ", ".join(repr(a) for a in STATEMENT_ACCOUNTANTS
                          if a not in _SAMPLER_ACCOUNTANT.values() or a == own)
        raise ParameterError("accountant", accountant, f"{valid} when sampler={sampler!r}",
                             f"the {accountant} accountant analyses sampler={home!r}, not "
                             f"{sampler!r}; pass sampler={home!r}")
    return accountant


def compute_dp_sgd_privacy(number_of_examples: int, batch_size: int, num_epochs: float,
                           noise_multiplier: float, delta: float, used_microbatching: bool = True,
                           max_examples_per_user: Optional[int] = None, *,
                           accountant: str = "pld", sampler: str = "poisson") -> DpSgdPrivacy:
    """The epsilons of :func:`compute_dp_sgd_privacy_statement`, as numbers.

    Step counts follow TF-Privacy 0.9.0 (``compute_dp_sgd_privacy_lib``): Poisson sampling with
    ``q = batch_size / number_of_examples`` for ``ceil(num_epochs / q)`` steps.  Shuffled epochs
    and random check-ins: ``T = ceil(number_of_examples / batch_size)`` steps per epoch for
    ``ceil(num_epochs * T)`` steps (a partial last epoch is a prefix of a full one; TF-Privacy
    rounds up to ``ceil(num_epochs)`` whole epochs, which can only be larger).  Random check-ins
    (``sampler="checkin"``) put each example in exactly one uniformly random of the ``T`` steps of
    each epoch, independently (random allocation; batches of random size, ``n / T <=
    batch_size`` on average): ``RandomCheckIn(n, num_slots=T, checkin_probability=1.0,
    variant="averaged")``.  With microbatching the noise multiplier is halved before accounting,
    as TF-Privacy does (a microbatch of several examples is clipped as a unit, so in
    add/remove adjacency one example can move the sum by twice the clipping norm; Ponomareva et
    al. 2023, "How to DP-fy ML", Sec. 5.6); this holds for every sampler here, since the example
    changes the clipped sum of one step in each of them.

    ``accountant`` chooses the Poisson line's accountant (``"pld"``, ``"fdp"``, ``"rdp"``), or
    names the accountant of the sampler's own line -- ``"shuffle"`` (needs
    ``sampler="shuffled_epochs"``) or ``"balls_and_bins"`` (needs ``sampler="checkin"``) -- and
    the Poisson line then uses ``"pld"``.  The shuffled-epochs line is always the ``shuffle``
    accountant's; the random check-in line (``sampler="checkin"`` only) is always the
    ``balls_and_bins`` accountant's.  ``"checkin"`` (Balle et al.'s accountant) is refused: it
    analyses replace-one adjacency with capped batches, not this sampler.

    User level (``max_examples_per_user = k``; add or remove one user's ``<= k`` examples), by
    group privacy:

    * shuffled epochs: the shuffle accountant's no-amplification bound is ``mu``-GDP with
      ``mu = sqrt(E) / sigma`` (``E`` epochs begun; each example in one step per epoch), and a
      ``mu``-GDP mechanism is ``k mu``-GDP for groups of ``k`` (Dong, Roth, Su 2022, Thm 2.14);
      epsilon from the Gaussian profile (Balle & Wang 2018, Thm 8).  This is exact group privacy
      of the Gaussian bound; for batch size 1 it does not use the amplified example-level bound.
    * random check-ins: the smaller of two valid bounds -- :func:`group_privacy_epsilon` (Vadhan
      2017, Lemma 2.2) on the ``balls_and_bins`` PLD of the ``E`` epochs begun, and the same
      ``k mu``-GDP bound as for shuffled epochs (one epoch of random allocation is ``1 /
      sigma``-GDP: given the other examples' steps, it is a mixture over the step the example
      lands in of pairs dominated by the Gaussian mechanism, and the hockey-stick divergence is
      jointly convex).
    * Poisson sampling: :func:`group_privacy_epsilon` on the example-level epsilon of the chosen
      accountant -- with ``"rdp"`` exactly TF-Privacy's user-level computation; with
      ``"pld"``/``"fdp"`` on our certified PLD (which TF-Privacy refuses for its PLD accountant).

    ``k = 1`` gives the example-level values.

    Example::

        >>> r = compute_dp_sgd_privacy(1000, 100, 1, 2.0, 1e-5, False, sampler="checkin",
        ...                            accountant="balls_and_bins")
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
    sampler = check_choice("sampler", sampler, STATEMENT_SAMPLERS)
    accountant = _check_accountant(accountant, sampler)
    k = (None if max_examples_per_user is None
         else check_count("max_examples_per_user", max_examples_per_user, minimum=1))
    return _dp_sgd_privacy(n, b, epochs, sigma, delta, used_microbatching, k, accountant, sampler)


@functools.lru_cache(maxsize=32)
def _dp_sgd_privacy(n: int, b: int, epochs: float, sigma: float, delta: float,
                    used_microbatching: bool, k: Optional[int], accountant: str,
                    sampler: str) -> DpSgdPrivacy:
    """:func:`compute_dp_sgd_privacy` on validated arguments (a pure function, cached: the
    statement and the numbers of the same run are computed once)."""
    effective_sigma = sigma / 2.0 if used_microbatching else sigma

    q = b / n
    poisson_steps = int(math.ceil(epochs / q))
    steps_per_epoch = int(math.ceil(n / b))
    shuffled_steps = int(math.ceil(epochs * steps_per_epoch))

    poisson_name = "pld" if accountant in _SAMPLER_ACCOUNTANT.values() else accountant
    poisson_lower, poisson_eps = _poisson_epsilon(poisson_name, effective_sigma, q,
                                                  poisson_steps, delta)
    shuffle = create("shuffle", batch_size=b, dataset_size=n)
    shuffle.step(noise_multiplier=effective_sigma, sample_rate=1.0 / steps_per_epoch,
                 count=shuffled_steps)
    shuffled_lower, shuffled_upper = shuffle.get_epsilon_bounds(delta)
    allocation_lower = allocation_upper = None
    if sampler == "checkin":
        allocation_lower, allocation_upper = _allocation_epsilon(
            effective_sigma, steps_per_epoch, shuffled_steps, delta)
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
                _poisson_epsilon_function(poisson_name, effective_sigma, q, poisson_steps), k,
                delta)
        except NumericalError as error:
            user.update(user_poisson_epsilon=math.inf, user_poisson_note=error.what)
        if sampler == "checkin":
            try:
                vadhan = group_privacy_epsilon(_allocation_epsilon_function(
                    effective_sigma, steps_per_epoch, epochs_begun), k, delta)
            except NumericalError as error:
                vadhan = math.inf
                user["user_allocation_note"] = error.what
            user.update(user_allocation_vadhan=vadhan,
                        user_allocation_gaussian=user["user_shuffled_upper"],
                        user_allocation_upper=min(vadhan, user["user_shuffled_upper"]))
    return DpSgdPrivacy(n, b, epochs, sigma, delta, used_microbatching, k,
                        sampler, poisson_name, effective_sigma, q, poisson_steps,
                        shuffled_steps, steps_per_epoch, float(shuffled_lower),
                        float(shuffled_upper), poisson_lower, poisson_eps, mu,
                        allocation_lower=allocation_lower, allocation_upper=allocation_upper,
                        **user)


def _epsilon_text(value: float) -> str:
    return "    inf (**)" if math.isinf(value) else f"{value:12.3f}"


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
    notes = {"shuffled_epochs": ("shuffle accountant's "
                                 + _gaussian_group_text(r.shuffled_mu, k, " (zero-out)")),
             "poisson": f"{_label(r.poisson_accountant)}, {_VADHAN}"}
    if r.user_allocation_upper is None:
        return notes
    if r.user_allocation_vadhan <= r.user_allocation_gaussian:
        notes["checkin"] = (f"{_label('balls_and_bins')}, {_VADHAN}; the Gaussian bound gives "
                            f"{r.user_allocation_gaussian:.3f}")
    else:
        other = ("cannot be certified" if math.isinf(r.user_allocation_vadhan)
                 else f"gives {r.user_allocation_vadhan:.3f}")
        notes["checkin"] = (f"random allocation's {gaussian}; {_VADHAN} on the balls_and_bins "
                            f"accountant's bound {other}")
    return notes


def compute_dp_sgd_privacy_statement(number_of_examples: int, batch_size: int, num_epochs: float,
                                     noise_multiplier: float, delta: float,
                                     used_microbatching: bool = True,
                                     max_examples_per_user: Optional[int] = None, *,
                                     accountant: str = "pld", sampler: str = "poisson") -> str:
    """A privacy statement for DP-SGD like TF-Privacy's, computed with our accountants.

    Same positional parameters as ``tensorflow_privacy.compute_dp_sgd_privacy_statement``
    (TF-Privacy 0.9.0); ``accountant`` in ``"pld"`` (default), ``"fdp"``, ``"rdp"``
    (dp_accounting's ``RdpAccountant``, what TF-Privacy uses by default), ``"shuffle"`` or
    ``"balls_and_bins"``; ``sampler`` is the sampler the training used: ``"poisson"``,
    ``"shuffled_epochs"`` (each example once per epoch, what Keras ``fit`` does) or
    ``"checkin"`` (random check-ins: each example in exactly one uniformly random of the
    ``ceil(n / batch_size)`` steps of each epoch).  The epsilon lines:

    * each example once per epoch: our ``shuffle`` accountant's certified upper bound, with its
      certified lower bound (Chua et al. 2024) beside it as a diagnostic;
    * random check-ins (``sampler="checkin"`` only): our ``balls_and_bins`` accountant's
      certified upper bound for ``ceil(n / batch_size)`` steps per epoch, with its certified
      lower bound beside it;
    * Poisson sampling: the accountant named by ``accountant`` (``"pld"`` when it is
      ``"shuffle"`` or ``"balls_and_bins"``, which require their sampler).

    The line of the sampler used in training is marked; every line names its accountant and
    bound type.  With ``max_examples_per_user`` (an integer >= 1) user-level lines follow (add
    or remove all of one user's examples), computed by group privacy as described in
    :func:`compute_dp_sgd_privacy`; each names its conversion.  Returns the statement
    (TF-Privacy's function also returns it rather than printing).  See
    :func:`compute_dp_sgd_privacy` for step counts and microbatching.

    Example::

        >>> print(compute_dp_sgd_privacy_statement(60000, 256, 15, 1.1, 1e-5))  # doctest: +SKIP
        >>> text = compute_dp_sgd_privacy_statement(1000, 100, 1, 2.0, 1e-5, False,
        ...                                         sampler="checkin")
        >>> "<= Epsilon with random check-ins (one step per epoch)" in text
        True
    """
    r = compute_dp_sgd_privacy(number_of_examples, batch_size, num_epochs, noise_multiplier,
                               delta, used_microbatching, max_examples_per_user,
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
    poisson_extra = (f"; lower bound {r.poisson_lower:.3f}" if r.poisson_accountant != "rdp"
                     else "")
    notes = {"shuffled_epochs": (f"{_label('shuffle')}; lower bound {r.shuffled_lower:.3f} "
                                 "(Chua et al. 2024)"),
             "poisson": f"{_label(r.poisson_accountant)}{poisson_extra}"}
    if r.allocation_upper is not None:
        notes["checkin"] = (f"{_label('balls_and_bins')}; {steps}; "
                            f"lower bound {r.allocation_lower:.3f}")
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
