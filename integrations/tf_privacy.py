"""TensorFlow Privacy integration: our accountants behind dp_accounting's interface, and
TF-Privacy's offline privacy statement computed with our accountants.

1. :class:`PLDAccountant` and :class:`GDPAccountant` are ``dp_accounting.PrivacyAccountant``
   subclasses (same names as the core classes they wrap).  A dp_accounting workflow swaps the
   accountant object and nothing else::

       import dp_accounting
       from dpplugins.integrations.tf_privacy import PLDAccountant

       event = dp_accounting.SelfComposedDpEvent(
           dp_accounting.PoissonSampledDpEvent(0.01, dp_accounting.GaussianDpEvent(1.1)), 1000)
       eps = PLDAccountant().compose(event).get_epsilon(1e-5)    # certified upper bound

2. :func:`compute_dp_sgd_privacy_statement` has TF-Privacy's positional signature
   (``tensorflow_privacy.compute_dp_sgd_privacy_statement``) plus ``accountant=`` and
   ``sampler=``; every epsilon line names its accountant and its bound type.

Only dp_accounting (a dependency of tensorflow-privacy) is imported; TensorFlow is not.  The
interface used is the one common to dp-accounting 0.4.3 (what TF-Privacy 0.9.0 pins) and 0.6.x:
``PrivacyAccountant.__init__(neighboring_relation)``, ``_maybe_compose(event, count,
do_compose)`` returning ``None`` or ``CompositionErrorDetails``, ``get_epsilon``, ``get_delta``,
and the event classes ``NoOpDpEvent``, ``NonPrivateDpEvent``, ``GaussianDpEvent``,
``PoissonSampledDpEvent``, ``SelfComposedDpEvent``, ``ComposedDpEvent``.

Not provided here (issue 9, later parts): a Keras callback, tf.data samplers, our own event
classes for shuffled epochs / check-ins / random allocation / PN-SGD, and Laplace or randomized
response events (our accountants' histories hold Gaussian steps only; such events are rejected
with ``UnsupportedEventError``).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

try:
    import dp_accounting
    from dp_accounting import dp_event
    from dp_accounting.privacy_accountant import NeighboringRelation, PrivacyAccountant
except ImportError as _error:  # pragma: no cover - exercised only without dp_accounting
    raise ImportError("the TF-Privacy integration needs dp_accounting: pip install "
                      "'dp-accounting>=0.4.3' (tensorflow-privacy installs it)") from _error

from dpplugins.accountants import create
from dpplugins.errors import (ParameterError, check_choice, check_count, check_open_unit,
                              check_positive, check_real)
from dpplugins.pld import Bounds

__all__ = ["PLDAccountant", "GDPAccountant", "DPPluginsPrivacyAccountant", "events_to_history",
           "DpSgdPrivacy", "compute_dp_sgd_privacy", "compute_dp_sgd_privacy_statement",
           "STATEMENT_ACCOUNTANTS", "STATEMENT_SAMPLERS"]

_Details = PrivacyAccountant.CompositionErrorDetails

#: dp_accounting's neighbouring relations -> ours.  REPLACE_SPECIAL (zero-out: the record is
#: replaced by one with zero clipped gradient) gives exactly the add/remove pair for Gaussian and
#: Poisson-subsampled Gaussian steps, whose sums differ by one clipped gradient either way.
_RELATIONS = {
    NeighboringRelation.ADD_OR_REMOVE_ONE: "add_remove",
    NeighboringRelation.REPLACE_SPECIAL: "add_remove",
    NeighboringRelation.REPLACE_ONE: "replace_one",
}


# -- events -> history ------------------------------------------------------------------------
def _noise(name: str, value: Any) -> float:
    value = check_real(name, value)
    if value < 0:
        raise ParameterError(name, value, "a finite number >= 0 (0 means no noise: not private)")
    return value


def _rate(name: str, value: Any) -> float:
    value = check_real(name, value)
    if not 0.0 <= value <= 1.0:
        raise ParameterError(name, value, "a probability in [0, 1]")
    return value


def events_to_history(event, count: int = 1) -> tuple[list[tuple[float, float, int]], bool] | _Details:
    """Translate a dp_accounting event into our run-length history.

    Returns ``(runs, non_private)`` where ``runs`` is a list of ``(noise_multiplier, sample_rate,
    steps)`` (Opacus' format, the history our accountants keep) and ``non_private`` says whether
    the event contains a step without privacy (``NonPrivateDpEvent`` or a zero noise multiplier:
    epsilon is then infinite, as in dp_accounting).  Unsupported events give a
    ``PrivacyAccountant.CompositionErrorDetails`` naming the offending sub-event, exactly what
    ``_maybe_compose`` must return.

    The translation: ``GaussianDpEvent(s)`` composed ``c`` times is ``(s, 1.0, c)``;
    ``PoissonSampledDpEvent(q, GaussianDpEvent(s))`` is ``(s, q, c)`` (``q = 0`` releases nothing
    about anyone and adds no run); ``SelfComposedDpEvent`` multiplies the count;
    ``ComposedDpEvent`` concatenates; ``NoOpDpEvent`` adds nothing.

    Example::

        >>> import dp_accounting as dpa
        >>> events_to_history(dpa.SelfComposedDpEvent(
        ...     dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 100))
        ([(1.0, 0.01, 100)], False)
    """
    runs: list[tuple[float, float, int]] = []
    result = _collect(event, check_count("count", count, minimum=0), runs)
    if isinstance(result, _Details):
        return result
    return runs, result


def _collect(event, count: int, runs: list) -> bool | _Details:
    """Append the runs of ``event`` (composed ``count`` times) to ``runs``; return whether a
    non-private step occurred, or the error details of the first unsupported sub-event."""
    if isinstance(event, dp_event.NoOpDpEvent):
        return False
    if isinstance(event, dp_event.NonPrivateDpEvent):
        return True
    if isinstance(event, dp_event.SelfComposedDpEvent):
        inner = check_count("SelfComposedDpEvent.count", event.count, minimum=0)
        return _collect(event.event, count * inner, runs)
    if isinstance(event, dp_event.ComposedDpEvent):
        non_private = False
        for sub in event.events:
            result = _collect(sub, count, runs)
            if isinstance(result, _Details):
                return result
            non_private = non_private or result
        return non_private
    if isinstance(event, dp_event.GaussianDpEvent):
        sigma = _noise("GaussianDpEvent.noise_multiplier", event.noise_multiplier)
        if sigma == 0:
            return True
        if count:
            runs.append((sigma, 1.0, count))
        return False
    if isinstance(event, dp_event.PoissonSampledDpEvent):
        q = _rate("PoissonSampledDpEvent.sampling_probability", event.sampling_probability)
        if not isinstance(event.event, dp_event.GaussianDpEvent):
            return _Details(invalid_event=event, error_message=(
                "dpplugins accountants support PoissonSampledDpEvent only around a "
                f"GaussianDpEvent. Found {event.event}."))
        sigma = _noise("GaussianDpEvent.noise_multiplier", event.event.noise_multiplier)
        if q == 0:
            return False
        if sigma == 0:
            return True
        if count:
            runs.append((sigma, q, count))
        return False
    return _Details(invalid_event=event, error_message="Unsupported event.")


# -- accountants --------------------------------------------------------------------------------
class DPPluginsPrivacyAccountant(PrivacyAccountant):
    """A dp_accounting ``PrivacyAccountant`` that accounts with one of our accountants.

    Supported events are listed in :func:`events_to_history`; every other event (Laplace, sampling
    with or without replacement, tree aggregation, ``UnsupportedDpEvent``, ...) makes
    ``supports(event)`` False and ``compose(event)`` raise ``UnsupportedEventError``, as
    dp_accounting's own accountants do.  ``get_epsilon``/``get_delta`` return the wrapped
    accountant's values (see :attr:`bound_type`); ``get_epsilon_bounds`` gives its certified
    ``(lower, upper)`` pair.  The wrapped accountant is :attr:`inner`.

    Neighbouring relations: ``ADD_OR_REMOVE_ONE`` (default) and ``REPLACE_SPECIAL`` use our
    ``"add_remove"`` analysis; ``REPLACE_ONE`` uses our ``"replace_one"`` analysis, in which a
    ``GaussianDpEvent``'s sum moves by up to twice the clipping norm (dp_accounting's PLD
    accountant uses sensitivity 1 there and refuses Poisson events under ``REPLACE_ONE``).
    """

    _registry_name: ClassVar[str] = ""

    def __init__(self, neighboring_relation: NeighboringRelation =
                 NeighboringRelation.ADD_OR_REMOVE_ONE, **options: Any) -> None:
        if neighboring_relation not in _RELATIONS:
            raise ParameterError("neighboring_relation", neighboring_relation,
                                 "a dp_accounting.NeighboringRelation")
        super().__init__(neighboring_relation)
        self.inner = create(self._registry_name, neighbouring=_RELATIONS[neighboring_relation],
                            **options)
        self._non_private = False

    @property
    def bound_type(self) -> str:
        """``"certified upper bound"`` or ``"estimate"``, from the wrapped accountant."""
        return self.inner.bound_type

    @property
    def theorem(self) -> str:
        """The result the wrapped accountant implements, with its source."""
        return self.inner.theorem

    @property
    def history(self) -> list[tuple[float, float, int]]:
        """The composed events as our ``(noise_multiplier, sample_rate, steps)`` history."""
        return self.inner.history

    def _maybe_compose(self, event, count: int, do_compose: bool) -> Optional[_Details]:
        result = events_to_history(event, count)
        if isinstance(result, _Details):
            return result
        if do_compose:
            runs, non_private = result
            self._non_private = self._non_private or non_private
            for sigma, q, steps in runs:
                self.inner.step(noise_multiplier=sigma, sample_rate=q, count=steps)
        return None

    def get_epsilon_bounds(self, target_delta: float):
        """Our accountant's ``(lower, upper)`` bounds on epsilon; ``(inf, inf)`` if a non-private
        event was composed."""
        if self._non_private:
            check_open_unit("target_delta", target_delta)
            return Bounds(math.inf, math.inf)
        return self.inner.get_epsilon_bounds(target_delta)

    def get_epsilon(self, target_delta: float) -> float:
        """Epsilon at ``target_delta`` (upper bound, see :attr:`bound_type`)."""
        return self.get_epsilon_bounds(target_delta).upper

    def get_delta(self, target_epsilon: float) -> float:
        """Delta at ``target_epsilon`` (upper bound); 1 if a non-private event was composed."""
        if self._non_private:
            return 1.0
        return self.inner.get_delta(target_epsilon)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.neighboring_relation.name}; {self.inner!r})"


class PLDAccountant(DPPluginsPrivacyAccountant):
    """Our certified PLD accountant (:class:`dpplugins.accountants.pld.PLDAccountant`) behind
    dp_accounting's interface.  Options (``eps_tolerance``, ``value_discretization_interval``,
    ``tail_mass``, ``memory_limit``) go to the core accountant.

    Example::

        >>> import dp_accounting as dpa
        >>> acc = PLDAccountant().compose(dpa.SelfComposedDpEvent(
        ...     dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 10_000))
        >>> round(acc.get_epsilon(1e-5), 2)   # certified upper bound
        6.19
    """

    _registry_name = "pld"


class GDPAccountant(DPPluginsPrivacyAccountant):
    """Our f-DP accountant (:class:`dpplugins.accountants.fdp.GDPAccountant`, certified exact
    composition; ``inner.get_mu()`` gives the CLT estimate) behind dp_accounting's interface.

    dp_accounting events describe Poisson sampling, so the core option ``sampling`` is fixed to
    ``"poisson"``; the other options go to the core accountant.
    """

    _registry_name = "fdp"

    def __init__(self, neighboring_relation: NeighboringRelation =
                 NeighboringRelation.ADD_OR_REMOVE_ONE, **options: Any) -> None:
        if "sampling" in options and options["sampling"] != "poisson":
            raise ParameterError("sampling", options["sampling"], "'poisson'",
                                 "dp_accounting events describe Poisson sampling "
                                 "(PoissonSampledDpEvent)")
        options.pop("sampling", None)
        super().__init__(neighboring_relation, sampling="poisson", **options)


# -- the DP-SGD privacy statement ---------------------------------------------------------------
STATEMENT_ACCOUNTANTS = ("pld", "fdp", "shuffle", "rdp")
STATEMENT_SAMPLERS = ("poisson", "shuffled_epochs")

_LABELS = {
    "pld": "pld accountant (dpplugins PLD), certified upper bound",
    "fdp": "fdp accountant (dpplugins f-DP, exact composition), certified upper bound",
    "rdp": ("rdp accountant (dp_accounting RdpAccountant, RDP-to-DP conversion), upper bound "
            "(not certified by dpplugins)"),
    "shuffle": "shuffle accountant (dpplugins), certified upper bound",
}


@dataclass(frozen=True)
class DpSgdPrivacy:
    """The numbers behind :func:`compute_dp_sgd_privacy_statement`.

    ``shuffled_upper``/``shuffled_lower``: our shuffle accountant's certified interval for
    shuffled epochs (each example once per epoch).  ``poisson_epsilon``: the Poisson-sampling
    epsilon from ``poisson_accountant`` (``poisson_lower`` its certified lower bound, 0 if the
    accountant gives none).  ``effective_noise_multiplier`` is the noise multiplier after
    microbatching's sensitivity doubling.
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


def _poisson_epsilon(accountant: str, sigma: float, q: float, steps: int,
                     delta: float) -> tuple[float, float]:
    """(lower, upper) epsilon of ``steps`` Poisson-subsampled Gaussian steps (add/remove)."""
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    if accountant == "rdp":
        return 0.0, float(dp_accounting.rdp.RdpAccountant().compose(event).get_epsilon(delta))
    wrapper = PLDAccountant() if accountant == "pld" else GDPAccountant()
    lower, upper = wrapper.compose(event).get_epsilon_bounds(delta)
    return float(lower), float(upper)


def compute_dp_sgd_privacy(number_of_examples: int, batch_size: int, num_epochs: float,
                           noise_multiplier: float, delta: float, used_microbatching: bool = True,
                           max_examples_per_user: Optional[int] = None, *,
                           accountant: str = "pld", sampler: str = "poisson") -> DpSgdPrivacy:
    """The epsilons of :func:`compute_dp_sgd_privacy_statement`, as numbers.

    Step counts follow TF-Privacy 0.9.0 (``compute_dp_sgd_privacy_lib``): Poisson sampling with
    ``q = batch_size / number_of_examples`` for ``ceil(num_epochs / q)`` steps.  Shuffled epochs:
    ``T = ceil(number_of_examples / batch_size)`` batches per epoch for ``ceil(num_epochs * T)``
    steps (a partial last epoch is a prefix of a full one; TF-Privacy rounds up to
    ``ceil(num_epochs)`` whole epochs, which can only be larger).  With microbatching the
    noise multiplier is halved before accounting, as TF-Privacy does (a microbatch of several
    examples is clipped as a unit, so in add/remove adjacency one example can move the sum by
    twice the clipping norm; Ponomareva et al. 2023, "How to DP-fy ML", Sec. 5.6).
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
    accountant = check_choice("accountant", accountant, STATEMENT_ACCOUNTANTS)
    sampler = check_choice("sampler", sampler, STATEMENT_SAMPLERS)
    if accountant == "shuffle" and sampler != "shuffled_epochs":
        raise ParameterError("accountant", accountant,
                             "'pld', 'fdp' or 'rdp' when sampler='poisson'",
                             "the shuffle accountant analyses shuffled epochs, not Poisson "
                             "sampling; pass sampler='shuffled_epochs'")
    if max_examples_per_user is not None:
        k = check_count("max_examples_per_user", max_examples_per_user, minimum=1)
        if k > 1:
            raise ParameterError(
                "max_examples_per_user", max_examples_per_user, "None or 1",
                "user-level (group) privacy is not computed by dpplugins: TF-Privacy's "
                "conversion (Vadhan 2017, Lemma 2.2) multiplies epsilon by the group size and "
                "needs a line search over example-level delta with an accountant evaluation at "
                "every point; use TF-Privacy's RDP statement for a user-level figure")
    effective_sigma = sigma / 2.0 if used_microbatching else sigma

    q = b / n
    poisson_steps = int(math.ceil(epochs / q))
    steps_per_epoch = int(math.ceil(n / b))
    shuffled_steps = int(math.ceil(epochs * steps_per_epoch))

    poisson_name = "pld" if accountant == "shuffle" else accountant
    poisson_lower, poisson_eps = _poisson_epsilon(poisson_name, effective_sigma, q,
                                                  poisson_steps, delta)
    shuffle = create("shuffle", batch_size=b, dataset_size=n)
    shuffle.step(noise_multiplier=effective_sigma, sample_rate=1.0 / steps_per_epoch,
                 count=shuffled_steps)
    shuffled_lower, shuffled_upper = shuffle.get_epsilon_bounds(delta)
    return DpSgdPrivacy(n, b, epochs, sigma, delta, used_microbatching, max_examples_per_user,
                        sampler, poisson_name, effective_sigma, q, poisson_steps,
                        shuffled_steps, steps_per_epoch, float(shuffled_lower),
                        float(shuffled_upper), poisson_lower, poisson_eps)


def compute_dp_sgd_privacy_statement(number_of_examples: int, batch_size: int, num_epochs: float,
                                     noise_multiplier: float, delta: float,
                                     used_microbatching: bool = True,
                                     max_examples_per_user: Optional[int] = None, *,
                                     accountant: str = "pld", sampler: str = "poisson") -> str:
    """A privacy statement for DP-SGD like TF-Privacy's, computed with our accountants.

    Same positional parameters as ``tensorflow_privacy.compute_dp_sgd_privacy_statement``
    (TF-Privacy 0.9.0); ``accountant`` in ``"pld"`` (default), ``"fdp"``, ``"rdp"`` (dp_accounting's
    ``RdpAccountant``, what TF-Privacy uses by default) or ``"shuffle"``; ``sampler`` is the
    sampler the training used, ``"poisson"`` or ``"shuffled_epochs"`` (each example once per
    epoch, what Keras ``fit`` does).  Like TF-Privacy's, the statement has two epsilon lines:

    * each example once per epoch: our ``shuffle`` accountant's certified upper bound, with its
      certified lower bound (Chua et al. 2024) beside it as a diagnostic;
    * Poisson sampling: the accountant named by ``accountant`` (``"pld"`` when it is
      ``"shuffle"``, which requires ``sampler="shuffled_epochs"``).

    The line of the sampler used in training is marked; every line names its accountant and
    bound type.  ``max_examples_per_user`` > 1 raises :class:`ParameterError` (see
    :func:`compute_dp_sgd_privacy`); 1 is example-level privacy, as in TF-Privacy.  Returns the
    statement (TF-Privacy's function also returns it rather than printing).

    Example::

        >>> print(compute_dp_sgd_privacy_statement(60000, 256, 15, 1.1, 1e-5))  # doctest: +SKIP
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
    used = "shuffled epochs" if r.sampler == "shuffled_epochs" else "Poisson sampling"
    paragraphs = [
        textwrap.fill(first, width=80),
        textwrap.fill("The guarantee covers every released checkpoint (all noisy steps), not "
                      "only the final model.", width=80),
        textwrap.fill(f"Sampler used in training: {used} (marked <=).", width=80),
    ]
    mark_shuffled = "<=" if r.sampler == "shuffled_epochs" else "  "
    mark_poisson = "<=" if r.sampler == "poisson" else "  "
    poisson_extra = (f"; lower bound {r.poisson_lower:.3f}" if r.poisson_accountant != "rdp"
                     else "")
    lines = textwrap.fill(f"Example-level DP with add-or-remove-one adjacency at delta = "
                          f"{r.delta}:", width=80)
    lines += (f"\n  {mark_shuffled} Epsilon with each example occurring once per epoch:  "
              f"{r.shuffled_upper:12.3f}\n"
              f"       [{_LABELS['shuffle']}; lower bound {r.shuffled_lower:.3f} "
              f"(Chua et al. 2024)]\n"
              f"  {mark_poisson} Epsilon assuming Poisson sampling (*):               "
              f"{r.poisson_epsilon:12.3f}\n"
              f"       [{_LABELS[r.poisson_accountant]}{poisson_extra}]")
    paragraphs.append(lines)
    if r.max_examples_per_user is None:
        paragraphs.append(textwrap.fill("User-level privacy: none without a bound on the "
                                        "examples per user.", width=80))
    paragraphs.append(textwrap.fill(
        "(*) Shown for comparison only: the training used shuffled epochs, to which the Poisson "
        "line does not apply; the marked line is the guarantee of the training.", width=80)
        if r.sampler == "shuffled_epochs" else textwrap.fill(
        "(*) The training used Poisson sampling (each example in each batch independently with "
        f"probability {r.sampling_probability:.4g}), which this line assumes.", width=80))
    return "\n\n".join(paragraphs) + "\n"
