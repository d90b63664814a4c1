"""The TF-Privacy integration against dp_accounting's own accountants and TF-Privacy itself.

References (test dependencies, installed in the pinned test environment):

* dp_accounting's ``PLDAccountant`` (pessimistic connect-the-dots, grid 1e-4) and
  ``RdpAccountant`` on the same event sequences;
* TensorFlow Privacy 0.9.0's ``compute_dp_sgd_privacy_statement`` (its returned string is parsed)
  and ``_compute_dp_sgd_user_privacy`` (user-level epsilon by group privacy).
  If tensorflow-privacy is not importable, the same numbers are computed the way its source does
  (``compute_dp_sgd_privacy_lib._compute_dp_sgd_example_privacy``: noise / 2 with microbatching,
  ``ceil(epochs / q)`` Poisson steps, ``ceil(epochs)`` unsampled Gaussian steps) with
  dp_accounting directly;
* closed forms: the Gaussian mechanism's privacy profile (Balle & Wang 2018, Thm 8; in
  ``conftest.gaussian_delta_exact``) for shuffled epochs without amplification, for group privacy
  of Gaussian DP (``mu -> k mu``) and for Vadhan's group-privacy conversion (a dense grid search
  written here); the one-pass PNSGD profile ``A (1 - B^n) / (n (1 - B))`` (Sordello, Bu, Dong
  2021, Thm 2) with ``theta_gamma`` written here from scipy's normal tail;
* random allocation (``balls_and_bins``): with one step per epoch it is exactly the Gaussian
  mechanism (closed form above); with more steps it is a mixture over the step, so the Gaussian
  closed form bounds it from above.  The wrapper and the statement's check-in line are compared
  with the core accountant on the same history (its own tests check it against quadrature, Monte
  Carlo and published values); the user-level line's conversion is re-solved here by root
  finding.
"""

import math
import re

import numpy as np
import pytest
from scipy import optimize, stats

from conftest import epsilon_from_delta_curve, gaussian_delta_exact, legacy_step

dp_accounting = pytest.importorskip("dp_accounting")

from dp_accounting.pld import pld_privacy_accountant  # noqa: E402
from dp_accounting.pld import privacy_loss_distribution as dpa_pld  # noqa: E402

import attr  # noqa: E402

from dpplugins.accountants import available, create  # noqa: E402
from dpplugins.errors import NumericalError, ParameterError  # noqa: E402
from dpplugins.integrations import tf_privacy  # noqa: E402
from dpplugins.events import (ComposedEvent, GaussianEvent, NoOpEvent,  # noqa: E402
                              PoissonSampledEvent, RandomAllocationEvent, SelfComposedEvent)
from dpplugins.integrations.tf_privacy import (CheckInAccountant, GDPAccountant,  # noqa: E402
                                               PLDAccountant, PNSGDAccountant, PNSGDDpEvent,
                                               RandomAllocationAccountant,
                                               RandomAllocationDpEvent, RandomCheckInDpEvent,
                                               ShuffleAccountant, ShuffledEpochsDpEvent,
                                               compute_dp_sgd_privacy_numbers,
                                               compute_dp_sgd_privacy_statement, dp_sgd_event,
                                               group_privacy_epsilon, to_event)

G = dp_accounting.GaussianDpEvent
P = dp_accounting.PoissonSampledDpEvent
S = dp_accounting.SelfComposedDpEvent
C = dp_accounting.ComposedDpEvent
NOOP = dp_accounting.NoOpDpEvent()
DELTA = 1e-5
REL = 1e-3

# event sequence, equivalent history (noise_multiplier, sample_rate, steps)
SEQUENCES = {
    "gaussian": ([S(G(2.0), 10)], [(2.0, 1.0, 10)]),
    "poisson": ([S(P(0.01, G(1.0)), 1000)], [(1.0, 0.01, 1000)]),
    "nested": ([C([S(C([P(0.02, G(1.2)), NOOP]), 200), G(5.0)]), NOOP,
                S(S(P(0.02, G(1.2)), 10), 5)],
               [(1.2, 0.02, 200), (5.0, 1.0, 1), (1.2, 0.02, 50)]),
}



def _up3(value: float) -> float:
    """``value`` as the statement prints an upper bound: 3 decimals, rounded up."""
    from dpplugins.display import upper_text

    return float(upper_text(value, decimals=3))

def _dp_accounting_pld(events):
    acc = pld_privacy_accountant.PLDAccountant()
    for event in events:
        acc.compose(event)
    return acc


def _dp_accounting_pld_epsilon(events):
    return _dp_accounting_pld(events).get_epsilon(DELTA)


# -- events are translated, not flattened ------------------------------------------------------
def test_nested_compositions_are_translated_as_they_are():
    p, g = PoissonSampledEvent(0.02, GaussianEvent(1.2)), GaussianEvent(5.0)
    assert to_event(C(SEQUENCES["nested"][0])) == ComposedEvent((
        ComposedEvent((SelfComposedEvent(ComposedEvent((p, NoOpEvent())), 200), g)), NoOpEvent(),
        SelfComposedEvent(SelfComposedEvent(p, 10), 5)))
    # the wrapper's ledger is the core accountant's: the translated event, composed twice
    wrapper = PLDAccountant().compose(C(SEQUENCES["nested"][0]), 2)
    assert wrapper.history == [SelfComposedEvent(to_event(C(SEQUENCES["nested"][0])), 2)]
    core = create("pld")
    for sigma, q, steps in [(1.2, 0.02, 400), (5.0, 1.0, 2), (1.2, 0.02, 100)]:
        core.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    assert wrapper.get_epsilon(DELTA) == core.get_epsilon(DELTA)


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_pld_wrapper_equals_core_accountant_and_matches_dp_accounting(name):
    events, history = SEQUENCES[name]
    wrapper = PLDAccountant()
    for event in events:
        assert wrapper.supports(event)
        assert wrapper.compose(event) is wrapper
    core = create("pld")
    for sigma, q, steps in history:
        core.step(noise_multiplier=sigma, sample_rate=q, count=steps)
    assert wrapper.get_epsilon(DELTA) == core.get_epsilon(DELTA)
    assert wrapper.get_delta(2.0) == core.get_delta(2.0)
    reference = _dp_accounting_pld_epsilon(events)
    assert wrapper.get_epsilon(DELTA) == pytest.approx(reference, rel=REL)
    lower, upper = wrapper.get_epsilon_bounds(DELTA)
    assert lower <= reference * (1 + 1e-6) and lower <= upper
    # the ledger (dp_accounting's own bookkeeping) is the same as dp_accounting's accountant's
    assert wrapper.ledger == _dp_accounting_pld(events).ledger


def test_gdp_wrapper_matches_dp_accounting_pld():
    events, _ = SEQUENCES["poisson"]
    wrapper = GDPAccountant()
    for event in events:
        wrapper.compose(event)
    assert wrapper.get_epsilon(DELTA) == pytest.approx(_dp_accounting_pld_epsilon(events),
                                                       rel=REL)
    assert wrapper.inner.name == "fdp" and wrapper.bound_type == "certified upper bound"
    with pytest.raises(ParameterError, match="sampling"):
        GDPAccountant(sampling="uniform")


def test_compose_count_argument_multiplies_steps():
    a = PLDAccountant().compose(P(0.01, G(1.0)), 500)
    b = PLDAccountant().compose(S(P(0.01, G(1.0)), 500))
    assert a.history == b.history == [SelfComposedEvent(PoissonSampledEvent(0.01,
                                                                            GaussianEvent(1.0)),
                                                        500)]
    assert a.get_epsilon(DELTA) == b.get_epsilon(DELTA)


def test_replace_one_gaussian_uses_sensitivity_two():
    # GaussianDpEvent's noise multiplier is relative to the norm bound C; replacing a record
    # moves the sum by up to 2C.  Reference: dp_accounting's Gaussian PLD with sensitivity 2.
    wrapper = PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE).compose(G(3.0), 4)
    reference = dpa_pld.from_gaussian_mechanism(
        standard_deviation=3.0 / 2.0, sensitivity=2.0).get_epsilon_for_delta(DELTA)
    assert wrapper.get_epsilon(DELTA) == pytest.approx(reference, rel=REL)
    assert wrapper.inner.neighbouring == "replace_one"


# -- unsupported and special events -------------------------------------------------------------
UNSUPPORTED = [   # by both wrappers (add/remove): no core accountant of theirs accounts them
    dp_accounting.SampledWithoutReplacementDpEvent(1000, 10, G(1.0)),
    dp_accounting.SampledWithReplacementDpEvent(1000, 10, G(1.0)),
    dp_accounting.SingleEpochTreeAggregationDpEvent(1.0, 10),
    dp_accounting.UnsupportedDpEvent(),
    C([P(0.01, G(1.0)), dp_accounting.SampledWithReplacementDpEvent(1000, 10, G(1.0))]),
    S(dp_accounting.SampledWithoutReplacementDpEvent(1000, 10, G(1.0)), 3),
]


@pytest.mark.parametrize("accountant_class", [PLDAccountant, GDPAccountant])
@pytest.mark.parametrize("event", UNSUPPORTED, ids=lambda e: type(e).__name__)
def test_unsupported_events_rejected_like_dp_accounting(accountant_class, event):
    acc = accountant_class()
    assert acc.supports(event) is False
    with pytest.raises(dp_accounting.UnsupportedEventError):
        acc.compose(event)
    # nothing was composed, not even the supported part of a composition
    assert acc.history == []
    assert acc.ledger == pld_privacy_accountant.PLDAccountant().ledger
    assert acc.get_epsilon(DELTA) == 0.0
    # dp_accounting's RDP accountant rejects the non-Gaussian-family samplers the same way
    if isinstance(event, (dp_accounting.SampledWithReplacementDpEvent,
                          dp_accounting.UnsupportedDpEvent)):
        assert dp_accounting.rdp.RdpAccountant().supports(event) is False


@pytest.mark.parametrize("accountant_class", [PLDAccountant, GDPAccountant])
@pytest.mark.parametrize("event", [dp_accounting.LaplaceDpEvent(1.0),
                                   P(0.1, dp_accounting.LaplaceDpEvent(1.0)),
                                   C([P(0.01, G(1.0)), dp_accounting.LaplaceDpEvent(1.0)])],
                         ids=["Laplace", "Poisson Laplace", "composed"])
def test_laplace_is_supported_exactly_when_the_core_accountant_supports_it(accountant_class,
                                                                          event):
    acc = accountant_class()
    assert acc.supports(event) is acc.inner.supports(to_event(event))
    if not acc.supports(event):
        with pytest.raises(dp_accounting.UnsupportedEventError):
            acc.compose(event)
        assert acc.history == [] and acc.get_epsilon(DELTA) == 0.0


def test_noop_and_empty_give_zero():
    acc = PLDAccountant().compose(NOOP).compose(C([])).compose(P(0.0, G(1.0)), 100)
    assert acc.history == [NoOpEvent(), ComposedEvent(()), SelfComposedEvent(
        PoissonSampledEvent(0.0, GaussianEvent(1.0)), 100)]      # released nothing
    assert acc.get_epsilon(DELTA) == 0.0 and acc.get_delta(1.0) == 0.0
    assert pld_privacy_accountant.PLDAccountant().compose(P(0.0, G(1.0)), 100).get_epsilon(
        DELTA) == 0.0


@pytest.mark.parametrize("event", [dp_accounting.NonPrivateDpEvent(), G(0.0), P(0.1, G(0.0))],
                         ids=["NonPrivate", "zero noise", "zero noise sampled"])
def test_non_private_events_give_infinite_epsilon_like_dp_accounting(event):
    ours = PLDAccountant().compose(P(0.01, G(1.0)), 10).compose(event)
    theirs = pld_privacy_accountant.PLDAccountant().compose(P(0.01, G(1.0)), 10).compose(event)
    assert ours.get_epsilon(DELTA) == theirs.get_epsilon(DELTA) == math.inf
    assert ours.get_delta(1.0) == theirs.get_delta(1.0) == 1


@pytest.mark.parametrize("event, name", [
    (G(-1.0), "GaussianDpEvent.noise_multiplier"),
    (G(float("nan")), "GaussianDpEvent.noise_multiplier"),
    (P(1.5, G(1.0)), "PoissonSampledDpEvent.sampling_probability"),
    (P(-0.1, G(1.0)), "PoissonSampledDpEvent.sampling_probability"),
])
def test_invalid_event_parameters_raise_parameter_error(event, name):
    with pytest.raises(ParameterError, match=re.escape(name)):
        PLDAccountant().compose(event)


def test_invalid_delta_raises_parameter_error():
    acc = PLDAccountant().compose(G(1.0))
    for bad in (1.5, -1e-5, float("nan")):
        with pytest.raises(ParameterError, match="delta"):
            acc.get_epsilon(bad)
    # dp_accounting's range is [0, 1]: every mechanism is (0, 1)-DP; the Gaussian has no finite
    # pure-DP epsilon
    assert acc.get_epsilon(1.0) == 0.0 and acc.get_epsilon(0.0) == math.inf
    for bad in (-1.0, float("nan"), "1"):
        with pytest.raises(ParameterError, match="target_epsilon"):
            acc.get_delta(bad)


# -- the privacy statement ----------------------------------------------------------------------
def _tf_privacy_lib():
    try:
        from tensorflow_privacy.privacy.analysis import compute_dp_sgd_privacy_lib
    except ImportError:
        return None
    return compute_dp_sgd_privacy_lib


def _float_after(label, text):
    match = re.search(re.escape(label) + r"\s+([0-9.]+|inf)", text)
    assert match, f"{label!r} not in\n{text}"
    return float(match.group(1))


def _reference_epsilons(n, b, epochs, sigma, delta, microbatching, kind):
    """TF-Privacy's (once-per-epoch, Poisson) epsilons for accountant ``kind`` ("PLD"/"RDP"),
    parsed from its statement; without TF-Privacy, computed as its source does."""
    lib = _tf_privacy_lib()
    if lib is not None:
        text = lib.compute_dp_sgd_privacy_statement(
            n, b, epochs, sigma, delta, microbatching,
            accountant_type=lib.AccountantType[kind])
        return (_float_after("once per epoch:", text),
                _float_after("Poisson sampling (*):", text))
    sigma = sigma / 2 if microbatching else sigma
    q = b / n

    def epsilon(event):
        acc = (pld_privacy_accountant.PLDAccountant() if kind == "PLD"
               else dp_accounting.rdp.RdpAccountant())
        return acc.compose(event).get_epsilon(delta)

    return (epsilon(S(G(sigma), math.ceil(epochs))),
            epsilon(S(P(q, G(sigma)), math.ceil(epochs / q))))


CASES = [  # n, batch, epochs, noise multiplier, microbatching
    (60000, 256, 3, 1.1, True),
    (10000, 100, 2, 0.8, False),
]


@pytest.mark.parametrize("case", CASES)
def test_statement_poisson_pld_line_matches_tf_privacy(case):
    n, b, epochs, sigma, micro = case
    text = compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, micro)
    tf_shuffled, tf_poisson = _reference_epsilons(n, b, epochs, sigma, DELTA, micro, "PLD")
    ours = _float_after("Poisson sampling (*):", text)
    assert tf_poisson > 1.0  # three printed decimals resolve 1e-3 relative
    assert ours == pytest.approx(tf_poisson, rel=REL)
    assert "pld accountant (dpplugins PLD), certified upper bound" in text
    # shuffled epochs with batches > 1 get no amplification: our certified upper bound is the
    # Gaussian composition TF-Privacy's once-per-epoch line computes (integer epochs)
    assert _float_after("once per epoch:", text) == pytest.approx(tf_shuffled, rel=REL)
    numbers = compute_dp_sgd_privacy_numbers(n, b, epochs, sigma, DELTA, micro)
    assert 0 < numbers.shuffled_lower <= numbers.shuffled_upper
    assert numbers.effective_noise_multiplier == (sigma / 2 if micro else sigma)


@pytest.mark.parametrize("case", CASES)
def test_statement_rdp_line_equals_tf_privacy(case):
    n, b, epochs, sigma, micro = case
    text = compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, micro, accountant="rdp")
    _, tf_poisson = _reference_epsilons(n, b, epochs, sigma, DELTA, micro, "RDP")
    # printed rounded up (dpplugins.display), where TF-Privacy rounds to nearest
    assert _float_after("Poisson sampling (*):", text) == _up3(tf_poisson)
    assert "rdp accountant (dp_accounting RdpAccountant" in text


def test_statement_fdp_line_matches_tf_privacy_pld():
    n, b, epochs, sigma, micro = CASES[1]
    text = compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, micro, accountant="fdp")
    _, tf_poisson = _reference_epsilons(n, b, epochs, sigma, DELTA, micro, "PLD")
    assert _float_after("Poisson sampling (*):", text) == pytest.approx(tf_poisson, rel=REL)
    assert "fdp accountant" in text


def test_statement_shuffled_epochs_marks_the_shuffle_line():
    text = compute_dp_sgd_privacy_statement(10000, 100, 2, 0.8, DELTA, False,
                                            accountant="shuffle", sampler="shuffled_epochs")
    assert "<= Epsilon with each example occurring once per epoch" in text
    assert "shuffle accountant (dpplugins), certified upper bound; lower bound" in text
    # closed form for no amplification: 2 epochs of a Gaussian with sensitivity 1 and noise 0.8
    # is mu-GDP with mu = sqrt(2) / 0.8 (Dong, Roth, Su 2022, Cor. 3.3); epsilon from its exact
    # profile (Balle & Wang 2018, Thm 8)
    closed = _gaussian_epsilon_exact(math.sqrt(2) / 0.8, DELTA)
    assert _float_after("once per epoch:", text) == pytest.approx(closed, rel=REL)


def test_statement_checkin_line_equals_the_balls_and_bins_accountant():
    # random check-ins: each example in one uniformly random of t = ceil(4000 / 100) = 40 steps
    # per epoch; 1.5 epochs = 60 steps; microbatching halves the noise multiplier 2 -> 1
    n, b, epochs, sigma, micro = 4000, 100, 1.5, 2.0, True
    text = compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, micro,
                                            accountant="balls_and_bins", sampler="checkin")
    core = create("balls_and_bins")
    core.compose(legacy_step(core, 1.0, 1 / 40), 60)
    lower, upper = core.get_epsilon_bounds(DELTA)
    numbers = compute_dp_sgd_privacy_numbers(n, b, epochs, sigma, DELTA, micro,
                                     accountant="balls_and_bins", sampler="checkin")
    assert (numbers.allocation_lower, numbers.allocation_upper) == (lower, upper)
    assert numbers.steps_per_epoch == 40 and numbers.shuffled_steps == 60
    assert _float_after("(one step per epoch):", text) == _up3(upper)
    flat = _flat(text)
    assert "<= Epsilon with random check-ins (one step per epoch):" in text
    assert ("[balls_and_bins accountant (dpplugins random allocation, Chua et al. 2025), "
            "certified upper bound; 40 steps per epoch; lower bound "
            f"{lower:.3f}]") in flat
    assert "Sampler used in training: random check-ins" in flat
    assert "the training used random check-ins" in flat     # the Poisson line is a comparison
    # the Poisson line uses the pld accountant when accountant names the sampler's own
    assert numbers.poisson_accountant == "pld"
    assert "pld accountant (dpplugins PLD), certified upper bound" in flat
    # independent: each example is in one step per epoch, so the 2 epochs begun are at worst
    # two sensitivity-1 Gaussians at sigma 1 (mu = sqrt(2)).  The upper bound counts the partial
    # epoch as a whole one; the certified lower bound leaves it out, so it cannot exceed one
    # whole epoch's epsilon
    assert upper < _gaussian_epsilon_exact(math.sqrt(2), DELTA)
    one_epoch = create("balls_and_bins")
    one_epoch.compose(legacy_step(one_epoch, 1.0, 1 / 40), 40)
    assert lower <= one_epoch.get_epsilon(DELTA) < upper


def test_statement_checkin_with_one_step_per_epoch_is_the_gaussian_mechanism():
    # batch = dataset: t = 1, every example in every step; 3 epochs at sigma 2 are mu-GDP with
    # mu = sqrt(3) / 2 exactly (Balle & Wang 2018, Thm 8), as is the shuffled-epochs line
    text = compute_dp_sgd_privacy_statement(1000, 1000, 3, 2.0, DELTA, False, sampler="checkin")
    exact = _gaussian_epsilon_exact(math.sqrt(3) / 2.0, DELTA)
    assert _float_after("(one step per epoch):", text) == pytest.approx(exact, abs=1.5e-3)
    assert _float_after("once per epoch:", text) == pytest.approx(exact, abs=1.5e-3)
    assert "balls_and_bins accountant" in text and "; 1 step per epoch;" in _flat(text)
    # accountant="pld" with sampler="checkin": the Poisson line is pld, the check-in line the same
    numbers = compute_dp_sgd_privacy_numbers(1000, 1000, 3, 2.0, DELTA, False, sampler="checkin")
    assert numbers.poisson_accountant == "pld"
    assert exact * (1 - 1e-9) <= numbers.allocation_upper <= exact * (1 + 1e-4)


def test_fractional_epochs_count_steps_like_tf_privacy():
    numbers = compute_dp_sgd_privacy_numbers(1000, 30, 1.5, 1.0, DELTA, False)
    assert numbers.poisson_steps == math.ceil(1.5 / (30 / 1000))  # TF-Privacy's count: 50
    assert numbers.steps_per_epoch == 34 and numbers.shuffled_steps == 51
    # a partial epoch cannot cost more than TF-Privacy's ceil(epochs) whole epochs
    tf_shuffled, _ = _reference_epsilons(1000, 30, 1.5, 1.0, DELTA, False, "PLD")
    assert numbers.shuffled_upper <= tf_shuffled * (1 + REL)


@pytest.mark.parametrize("sampler, n, batch, epochs, exact", [
    # 1e-18 is not a double: 1 / q rounded down to 999999999999999872
    ("poisson", 10 ** 18, 1, 1.0, 10 ** 18),
    # 2^53 + 1 steps per epoch: epochs x steps rounded to 2^53 in floating point
    ("shuffled_epochs", 2 ** 53 + 1, 1, 1.0, 2 ** 53 + 1),
    ("random_checkin", 2 ** 53 + 1, 1, 1.0, 2 ** 53 + 1),
    # ordinary inputs keep TF-Privacy's count; 0.1 epochs is 1/10 (the double is above it)
    ("poisson", 1000, 30, 1.5, 50),
    ("shuffled_epochs", 1000, 100, 0.1, 1),
    ("poisson", 1000, 10, 0.3, 30),
])
def test_step_counts_are_never_below_the_exact_count(sampler, n, batch, epochs, exact):
    """dp_sgd_event counted steps in floating point: from about 10^16 steps on it could count
    fewer than ceil(epochs n / b) (Poisson) or ceil(epochs T) (epochs; T = ceil(n / b)) --
    fewer steps, a smaller epsilon.  Checked against the exact integer count of the decimal
    inputs."""
    assert dp_sgd_event(sampler, n, batch, epochs, 1.0).steps == exact


def test_max_examples_per_user_one_is_example_level():
    a = compute_dp_sgd_privacy_numbers(10000, 100, 2, 0.8, DELTA, False, 1)
    b = compute_dp_sgd_privacy_numbers(10000, 100, 2, 0.8, DELTA, False, None)
    assert (a.poisson_epsilon, a.shuffled_upper) == (b.poisson_epsilon, b.shuffled_upper)


@pytest.mark.parametrize("kwargs, name", [
    (dict(max_examples_per_user=0), "max_examples_per_user"),
    (dict(max_examples_per_user=1.5), "max_examples_per_user"),
    (dict(accountant="shuffle"), "accountant"),
    (dict(accountant="prv"), "accountant"),
    (dict(sampler="random"), "sampler"),
    (dict(accountant="checkin"), "accountant"),
    (dict(accountant="checkin", sampler="checkin"), "accountant"),
    (dict(accountant="balls_and_bins"), "accountant"),
    (dict(accountant="balls_and_bins", sampler="shuffled_epochs"), "accountant"),
    (dict(accountant="shuffle", sampler="checkin"), "accountant"),
    (dict(delta=1.0), "delta"),
    (dict(noise_multiplier=-1.0), "noise_multiplier"),
    (dict(batch_size=20000), "batch_size"),
    (dict(num_epochs=0), "num_epochs"),
    (dict(number_of_examples=0), "number_of_examples"),
])
def test_statement_bad_parameters_raise_parameter_error(kwargs, name):
    args = dict(number_of_examples=10000, batch_size=100, num_epochs=2, noise_multiplier=0.8,
                delta=DELTA)
    args.update(kwargs)
    with pytest.raises(ParameterError, match=re.escape(name)):
        compute_dp_sgd_privacy_statement(**args)


def test_module_exports():
    assert set(tf_privacy.__all__) >= {"PLDAccountant", "GDPAccountant",
                                       "compute_dp_sgd_privacy_statement"}
    assert issubclass(PLDAccountant, dp_accounting.PrivacyAccountant)


# -- our events -----------------------------------------------------------------------------------
def _gaussian_epsilon_exact(mu, delta):
    """Closed-form epsilon of a mu-GDP mechanism (Balle & Wang 2018, Thm 8) by bisection."""
    return epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)


SHUFFLED = ShuffledEpochsDpEvent(noise_multiplier=1.0, dataset_size=1000, batch_size=100,
                                 num_epochs=2)
CHECKIN = RandomCheckInDpEvent(noise_multiplier=4.0, num_examples=1000, num_slots=100,
                               checkin_probability=0.1)
ALLOCATION = RandomAllocationDpEvent(noise_multiplier=1.0, steps_per_epoch=10, num_epochs=3)
PNSGD = PNSGDDpEvent(noise_multiplier=2.0, lipschitz=1.0, diameter=2.0, learning_rate=0.5,
                     dataset_size=1000)
OUR_EVENTS = [SHUFFLED, CHECKIN, ALLOCATION, PNSGD]


@pytest.mark.parametrize("event", OUR_EVENTS, ids=lambda e: type(e).__name__)
def test_our_events_are_frozen_dp_events_like_dp_accountings(event):
    assert isinstance(event, dp_accounting.DpEvent) and attr.has(type(event))
    with pytest.raises(attr.exceptions.FrozenInstanceError):
        event.noise_multiplier = 0.5
    assert event == attr.evolve(event) and hash(event) == hash(attr.evolve(event))
    # dp_accounting's serialisation and ledger handle them as their own events
    assert dp_accounting.DpEvent.from_named_tuple(event.to_named_tuple()) == event
    if hasattr(event, "variant"):   # a choice given by its value is stored as the enum member
        assert attr.evolve(event, variant=event.variant.value) == event
    builder = dp_accounting.DpEventBuilder()
    builder.compose(event, 2)
    assert builder.build() == S(event, 2)


@pytest.mark.parametrize("event", OUR_EVENTS, ids=lambda e: type(e).__name__)
def test_dp_accountings_accountants_and_ours_reject_foreign_events(event):
    # dp_accounting's own accountants do not know our events
    for theirs in (dp_accounting.rdp.RdpAccountant(), pld_privacy_accountant.PLDAccountant()):
        assert theirs.supports(event) is False
        with pytest.raises(dp_accounting.UnsupportedEventError):
            theirs.compose(event)
    # each of our accountants accepts exactly its own event: the core accountants decide
    ours = [PLDAccountant(), GDPAccountant(), ShuffleAccountant(), CheckInAccountant(),
            PNSGDAccountant(), RandomAllocationAccountant()]
    home = {SHUFFLED: ShuffleAccountant, CHECKIN: CheckInAccountant,
            ALLOCATION: RandomAllocationAccountant, PNSGD: PNSGDAccountant}[event]
    for accountant in ours:
        assert accountant.supports(event) is accountant.inner.supports(event.to_event())
        if type(accountant) is home:
            assert accountant.supports(event)
            continue
        assert accountant.supports(event) is False
        with pytest.raises(dp_accounting.UnsupportedEventError, match="Unsupported event"):
            accountant.compose(C([event]))
        assert accountant.history == [] and accountant.get_epsilon(DELTA) == 0.0


@pytest.mark.parametrize("accountant_class", [ShuffleAccountant, CheckInAccountant,
                                              PNSGDAccountant, RandomAllocationAccountant])
@pytest.mark.parametrize("event", [G(1.0), P(0.01, G(1.0)), dp_accounting.LaplaceDpEvent(1.0),
                                   dp_accounting.UnsupportedDpEvent()],
                         ids=["Gaussian", "Poisson", "Laplace", "Unsupported"])
def test_protocol_accountants_reject_standard_events(accountant_class, event):
    acc = accountant_class()
    assert acc.supports(event) is False
    with pytest.raises(dp_accounting.UnsupportedEventError):
        acc.compose(event)


@pytest.mark.parametrize("make, name", [
    (lambda: ShuffledEpochsDpEvent(-1.0, 100, 10), "ShuffledEpochsDpEvent.noise_multiplier"),
    (lambda: ShuffledEpochsDpEvent(1.0, 1, 1), "ShuffledEpochsDpEvent.dataset_size"),
    (lambda: ShuffledEpochsDpEvent(1.0, 100, 101), "ShuffledEpochsDpEvent.batch_size"),
    (lambda: ShuffledEpochsDpEvent(1.0, 100, 10, 0), "ShuffledEpochsDpEvent.num_epochs"),
    (lambda: ShuffledEpochsDpEvent(1.0, 100, 10, 1, "no"), "ShuffledEpochsDpEvent.drop_last"),
    (lambda: RandomCheckInDpEvent(1.0, 100), "RandomCheckInDpEvent.num_slots"),
    (lambda: RandomCheckInDpEvent(1.0, 100, 10, 1.5), "RandomCheckInDpEvent.checkin_probability"),
    (lambda: RandomCheckInDpEvent(1.0, 100, 10, variant="thrifty"), "RandomCheckInDpEvent.variant"),
    (lambda: RandomCheckInDpEvent(1.0, 100, 10, window=5), "RandomCheckInDpEvent.num_slots"),
    (lambda: RandomCheckInDpEvent(1.0, 100, variant="sliding", window=101),
     "RandomCheckInDpEvent.window"),
    (lambda: RandomCheckInDpEvent(1.0, 100, 10, num_passes=0), "RandomCheckInDpEvent.num_passes"),
    (lambda: RandomAllocationDpEvent(float("nan"), 10), "RandomAllocationDpEvent.noise_multiplier"),
    (lambda: RandomAllocationDpEvent(1.0, 0), "RandomAllocationDpEvent.steps_per_epoch"),
    (lambda: RandomAllocationDpEvent(1.0, 10, 1.5), "RandomAllocationDpEvent.num_epochs"),
    (lambda: PNSGDDpEvent(1.0, 0.0, 1.0, 0.1, 10), "PNSGDDpEvent.lipschitz"),
    (lambda: PNSGDDpEvent(1.0, 1.0, 1.0, 0.1, 10, variant="fixed"), "PNSGDDpEvent.variant"),
    (lambda: PNSGDDpEvent(1.0, 1.0, 1.0, 0.1, 10, noise="uniform"), "PNSGDDpEvent.noise"),
])
def test_event_bad_parameters_raise_parameter_error(make, name):
    with pytest.raises(ParameterError) as info:
        make()
    assert info.value.name == name


def test_shuffled_epochs_event_counts_steps():
    assert (SHUFFLED.steps_per_epoch, SHUFFLED.num_steps) == (10, 20)
    assert ShuffledEpochsDpEvent(1.0, 1000, 30, 1.5).num_steps == 51          # ceil(1.5 * 34)
    assert ShuffledEpochsDpEvent(1.0, 1000, 30, 51 / 34).num_steps == 51      # not 52
    assert ShuffledEpochsDpEvent(1.0, 1000, 30, 1.01).num_steps == 35
    assert ShuffledEpochsDpEvent(1.0, 1000, 30, drop_last=True).steps_per_epoch == 33


# -- ShuffleAccountant ----------------------------------------------------------------------------
def test_shuffle_wrapper_matches_core_and_gaussian_closed_form():
    # batch size > 1: no amplification; E epochs of a sensitivity-1 Gaussian (zero-out), i.e.
    # mu = sqrt(sum_e 1 / sigma_e^2); REPLACE_ONE doubles the sensitivity
    events = [SHUFFLED, ShuffledEpochsDpEvent(2.0, 1000, 100, 1)]
    for relation, sensitivity in [(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE, 1.0),
                                  (dp_accounting.NeighboringRelation.REPLACE_SPECIAL, 1.0),
                                  (dp_accounting.NeighboringRelation.REPLACE_ONE, 2.0)]:
        acc = ShuffleAccountant(relation, lower_bound=False)
        for event in events:
            assert acc.supports(event)
            acc.compose(event)
        assert acc.history == [event.to_event() for event in events]
        assert [e.steps for e in acc.history] == [20, 10]
        mu = sensitivity * math.sqrt(2 / 1.0 ** 2 + 1 / 2.0 ** 2)
        exact = _gaussian_epsilon_exact(mu, DELTA)
        assert exact * (1 - 1e-9) <= acc.get_epsilon(DELTA) <= exact * (1 + 1e-6)
        assert acc.get_delta(1.0) == pytest.approx(gaussian_delta_exact(1.0, mu), rel=1e-6)
        assert acc.inner.neighbouring == ("replace_one" if sensitivity == 2 else "add_remove")
    core = create("shuffle", batch_size=100, dataset_size=1000, lower_bound=False)
    core.step(noise_multiplier=1.0, sample_rate=0.1, count=20)
    core.step(noise_multiplier=2.0, sample_rate=0.1, count=10)
    assert acc.get_epsilon(DELTA) > core.get_epsilon(DELTA)   # replace-one costs more
    zero_out = ShuffleAccountant(lower_bound=False).compose(C(events))
    assert zero_out.get_epsilon(DELTA) == core.get_epsilon(DELTA)
    builder = dp_accounting.DpEventBuilder()     # dp_accounting's own bookkeeping
    builder.compose(C(events))
    assert zero_out.ledger == builder.build()


def test_shuffle_wrapper_lower_bound_and_self_composition():
    acc = ShuffleAccountant().compose(ShuffledEpochsDpEvent(1.0, 1000, 100, 1), 2)
    assert acc.history == [SelfComposedEvent(ShuffledEpochsDpEvent(1.0, 1000, 100, 1).to_event(),
                                             2)] and len(acc.inner) == 20
    lower, upper = acc.get_epsilon_bounds(DELTA)
    assert 0 < lower <= upper
    assert upper == ShuffleAccountant().compose(SHUFFLED).get_epsilon(DELTA)
    assert acc.bound_type == "certified upper bound" and "Chua" in acc.theorem


def test_shuffle_wrapper_consecutive_events_continue_the_epoch():
    # the core accountant's contract: consecutive events of one protocol continue its step
    # sequence, so 2 + 0.5 + 1 epochs are the first 119 = 3.5 * 34 steps of one run, whichever
    # way they are composed (the old wrapper refused an event after a partial epoch)
    acc = ShuffleAccountant(lower_bound=False)
    acc.compose(ShuffledEpochsDpEvent(1.0, 1000, 30, 2)).compose(
        ShuffledEpochsDpEvent(1.0, 1000, 30, 0.5))
    assert [e.steps for e in acc.history] == [68, 17]
    nxt = ShuffledEpochsDpEvent(1.0, 1000, 30, 1)
    assert acc.supports(nxt) and acc.compose(nxt).history[-1] == nxt.to_event()
    whole = ShuffleAccountant(lower_bound=False).compose(ShuffledEpochsDpEvent(1.0, 1000, 30,
                                                                               3.5))
    assert whole.history[0].steps == len(acc.inner) == 119
    assert acc.get_epsilon(DELTA) == whole.get_epsilon(DELTA)
    # two half epochs self-composed are one epoch, as in a composition
    halves = ShuffleAccountant(lower_bound=False).compose(
        ShuffledEpochsDpEvent(1.0, 1000, 30, 0.5), 2)
    assert halves.get_epsilon(DELTA) == ShuffleAccountant(lower_bound=False).compose(
        ShuffledEpochsDpEvent(1.0, 1000, 30, 1)).get_epsilon(DELTA)
    assert halves.get_epsilon(DELTA) == ShuffleAccountant(lower_bound=False).compose(
        C([ShuffledEpochsDpEvent(1.0, 1000, 30, 0.5)] * 2)).get_epsilon(DELTA)


def test_shuffle_wrapper_one_protocol_per_accountant():
    acc = ShuffleAccountant(lower_bound=False).compose(SHUFFLED)
    for other in (ShuffledEpochsDpEvent(1.0, 1000, 50), ShuffledEpochsDpEvent(1.0, 999, 100),
                  ShuffledEpochsDpEvent(1.0, 1050, 100, drop_last=True)):
        assert acc.supports(other) is False
        with pytest.raises(dp_accounting.UnsupportedEventError,
                           match="one shuffled-epochs protocol"):
            acc.compose(other)
    assert acc.history == [SHUFFLED.to_event()]


@pytest.mark.parametrize("event", [dp_accounting.NonPrivateDpEvent(),
                                   ShuffledEpochsDpEvent(0.0, 1000, 100)],
                         ids=["NonPrivate", "zero noise"])
def test_shuffle_wrapper_non_private_gives_infinite_epsilon(event):
    acc = ShuffleAccountant().compose(SHUFFLED).compose(event)
    assert acc.get_epsilon(DELTA) == math.inf and acc.get_delta(1.0) == 1.0


def test_protocol_accountant_options_are_checked():
    with pytest.raises(ParameterError) as info:
        ShuffleAccountant(batch_size=100)
    assert info.value.name == "batch_size"
    with pytest.raises(ParameterError) as info:
        ShuffleAccountant(eps_tolerance=1e-3)
    assert info.value.name == "eps_tolerance"
    with pytest.raises(ParameterError) as info:
        PNSGDAccountant(dataset_size=10)
    assert info.value.name == "dataset_size"
    with pytest.raises(ParameterError) as info:
        CheckInAccountant(dp_accounting.NeighboringRelation.ADD_OR_REMOVE_ONE)
    assert info.value.name == "neighboring_relation"
    with pytest.raises(ParameterError) as info:
        PNSGDAccountant(dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    assert info.value.name == "neighboring_relation"


# -- CheckInAccountant ----------------------------------------------------------------------------
def test_checkin_wrapper_matches_core_and_single_participation_bound():
    acc = CheckInAccountant()
    assert acc.neighboring_relation == dp_accounting.NeighboringRelation.REPLACE_ONE
    acc.compose(CHECKIN).compose(attr.evolve(CHECKIN, num_passes=2))
    assert acc.history == [CHECKIN.to_event(), attr.evolve(CHECKIN, num_passes=2).to_event()]
    assert len(acc.inner) == 300
    core = create("checkin", num_examples=1000, num_slots=100, checkin_probability=0.1)
    core.step(noise_multiplier=4.0, sample_rate=0.01, count=300)
    assert acc.get_epsilon(DELTA) == core.get_epsilon(DELTA)
    assert S(CHECKIN, 3) and CheckInAccountant().compose(S(CHECKIN, 3)).get_epsilon(DELTA) == \
        acc.get_epsilon(DELTA)
    # independent: each example takes part in at most one step per pass, so three passes are at
    # worst a Gaussian with sensitivity 2 (replace one) composed 3 times: mu = 2 sqrt(3) / sigma
    # (the accountant's PLD of that profile may exceed the closed form by its grid error only)
    gaussian = _gaussian_epsilon_exact(2 * math.sqrt(3) / 4.0, DELTA)
    assert acc.get_epsilon(DELTA) <= gaussian * 1.01
    assert acc.bound_type == "certified upper bound" and "Thm 3.2" in acc.theorem


def test_checkin_wrapper_refuses_what_the_core_refuses():
    # averaged updates need every example to check in (Balle et al. 2020, Thm 4.1): a valid
    # event that the check-in accountant refuses, ledger untouched
    event = RandomCheckInDpEvent(4.0, 1000, 100, checkin_probability=0.1, variant="averaged")
    acc = CheckInAccountant().compose(CHECKIN)
    before = (acc.ledger, acc.history)
    assert acc.supports(event) is False is acc.inner.supports(event.to_event())
    with pytest.raises(dp_accounting.UnsupportedEventError, match="checkin_probability=1"):
        acc.compose(event)
    assert (acc.ledger, acc.history) == before
    other = attr.evolve(CHECKIN, num_slots=50)      # another protocol: the core decides
    assert acc.supports(other) is acc.inner.supports(other.to_event())
    sliding = CheckInAccountant().compose(
        RandomCheckInDpEvent(4.0, 100, variant="sliding", window=10))
    assert sliding.history[0].steps == 91 and sliding.history[0].variant == "sliding"


# -- PNSGDAccountant ------------------------------------------------------------------------------
def _theta(gamma, r):
    """E_gamma(N(r, 1) || N(0, 1)) = Q(log(gamma)/r - r/2) - gamma Q(log(gamma)/r + r/2)."""
    log_gamma = math.log(gamma)
    return stats.norm.sf(log_gamma / r - r / 2) - gamma * stats.norm.sf(log_gamma / r + r / 2)


def test_pnsgd_wrapper_one_pass_equals_closed_form():
    # Sordello, Bu, Dong 2021, Thm 2: A (1 - B^n) / (n (1 - B)), A = theta(2 / sigma),
    # B = theta(D / (eta sigma L)) (L = 1, M = 1)
    acc = PNSGDAccountant().compose(PNSGD)
    assert acc.history == [PNSGD.to_event()] and len(acc.inner) == 1000
    for eps in (0.1, 0.5, 1.0):
        gamma = math.exp(eps)
        a, b = _theta(gamma, 2 / 2.0), _theta(gamma, 2.0 / (0.5 * 2.0))
        assert acc.get_delta(eps) == pytest.approx(a * (1 - b ** 1000) / (1000 * (1 - b)),
                                                   rel=1e-9)
    two = PNSGDAccountant().compose(PNSGD, 2)
    core = create("pnsgd", lipschitz=1.0, diameter=2.0, learning_rate=0.5, dataset_size=1000)
    core.step(noise_multiplier=2.0, sample_rate=0.001, count=2000)
    assert two.get_epsilon(DELTA) == core.get_epsilon(DELTA) > acc.get_epsilon(DELTA)
    # the core's smoothness precondition: learning rate 0.5 > 2 / 10
    assert PNSGDAccountant().supports(attr.evolve(PNSGD, smoothness=10.0)) is False
    with pytest.raises(dp_accounting.UnsupportedEventError, match="learning_rate <= 2/smoothness"):
        PNSGDAccountant().compose(attr.evolve(PNSGD, smoothness=10.0))


# -- RandomAllocationAccountant ------------------------------------------------------------------
def test_random_allocation_wrapper():
    """The wrapper equals the core ``balls_and_bins`` accountant on the same history and is below
    the no-amplification Gaussian bound (closed form)."""
    assert "balls_and_bins" in available()
    acc = RandomAllocationAccountant()
    assert acc.supports(ALLOCATION)
    acc.compose(ALLOCATION).compose(attr.evolve(ALLOCATION, noise_multiplier=2.0, num_epochs=1))
    second = RandomAllocationEvent(10, 1, GaussianEvent(2.0))
    assert acc.history == [RandomAllocationEvent(10, 3, GaussianEvent(1.0)), second]
    core = create("balls_and_bins")
    core.compose(legacy_step(core, 1.0, 0.1), 30)
    core.compose(legacy_step(core, 2.0, 0.1), 10)
    bounds = acc.get_epsilon_bounds(DELTA)
    assert bounds == core.get_epsilon_bounds(DELTA) and acc.get_epsilon(DELTA) == bounds.upper
    assert acc.get_delta(1.0) == core.get_delta(1.0)
    assert acc.bound_type == core.bound_type == "certified upper bound"
    assert acc.theorem == core.theorem
    builder = dp_accounting.DpEventBuilder()     # dp_accounting's own bookkeeping
    builder.compose(ALLOCATION)
    builder.compose(attr.evolve(ALLOCATION, noise_multiplier=2.0, num_epochs=1))
    assert acc.ledger == builder.build()
    # each example is in exactly one step per epoch: every epoch is at worst the Gaussian
    # mechanism with sensitivity 1 (the allocation is a mixture over the step), so 3 epochs at
    # sigma 1 and one at sigma 2 are mu-GDP with mu = sqrt(3 + 1/4) (Dong, Roth, Su 2022,
    # Cor. 3.3); with 10 steps per epoch random allocation amplifies (about 3.44 vs 8.80)
    gaussian = _gaussian_epsilon_exact(math.sqrt(3 / 1.0 ** 2 + 1 / 2.0 ** 2), DELTA)
    assert 0 < bounds.lower <= bounds.upper < 0.6 * gaussian
    for event in (G(1.0), P(0.1, G(1.0)), SHUFFLED, CHECKIN):
        assert acc.supports(event) is False
        with pytest.raises(dp_accounting.UnsupportedEventError, match="Unsupported event"):
            acc.compose(event)
    assert acc.history == [ALLOCATION.to_event(), second]


def test_random_allocation_wrapper_one_step_per_epoch_is_the_gaussian_mechanism():
    # t = 1: every example is in the only step of each epoch, so E epochs are E runs of the
    # Gaussian mechanism with sensitivity 1: mu = sqrt(E) / sigma, profile in closed form
    # (Balle & Wang 2018, Thm 8)
    single = RandomAllocationAccountant().compose(RandomAllocationDpEvent(1.0, 1, 4))
    assert single.history == [RandomAllocationEvent(1, 4, GaussianEvent(1.0))]
    exact = _gaussian_epsilon_exact(math.sqrt(4) / 1.0, DELTA)
    lower, upper = single.get_epsilon_bounds(DELTA)
    assert lower <= exact * (1 + 1e-9) and exact * (1 - 1e-9) <= upper <= exact * (1 + 1e-4)
    for eps in (0.5, 2.0):
        delta = single.get_delta(eps)
        assert gaussian_delta_exact(eps, 2.0) * (1 - 1e-9) <= delta
        assert delta == pytest.approx(gaussian_delta_exact(eps, 2.0), rel=1e-4)


def test_random_allocation_wrapper_steps_per_epoch_may_change_between_events():
    # every event is whole epochs, and the core accountant accepts a new t between epochs
    acc = RandomAllocationAccountant(dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
    acc.compose(RandomAllocationDpEvent(2.0, 4, 1)).compose(RandomAllocationDpEvent(2.0, 1))
    assert acc.history == [RandomAllocationEvent(4, 1, GaussianEvent(2.0)),
                           RandomAllocationEvent(1, 1, GaussianEvent(2.0))]
    assert acc.inner.neighbouring == "add_remove"
    core = create("balls_and_bins")
    core.compose(legacy_step(core, 2.0, 0.25), 4)
    core.compose(legacy_step(core, 2.0, 1.0), 1)
    assert acc.get_epsilon_bounds(DELTA) == core.get_epsilon_bounds(DELTA)
    # at most two sensitivity-1 Gaussians at sigma 2 (mu = sqrt(2) / 2), at least the t = 1 one
    assert _gaussian_epsilon_exact(0.5, DELTA) < acc.get_epsilon(DELTA) < _gaussian_epsilon_exact(
        math.sqrt(2) / 2.0, DELTA)
    with pytest.raises(ParameterError) as info:   # the dominating pair is for add/remove
        RandomAllocationAccountant(dp_accounting.NeighboringRelation.REPLACE_ONE)
    assert info.value.name == "neighboring_relation"
    with pytest.raises(ParameterError) as info:   # the protocol is the event's, not an option
        RandomAllocationAccountant(steps_per_epoch=10)
    assert info.value.name == "steps_per_epoch"


def test_random_allocation_event_is_rejected_by_the_other_accountants():
    for accountant in (PLDAccountant(), ShuffleAccountant(), CheckInAccountant()):
        with pytest.raises(dp_accounting.UnsupportedEventError,
                           match="support it: RandomAllocationAccountant"):
            accountant.compose(ALLOCATION)


# -- group privacy --------------------------------------------------------------------------------
def _vadhan_by_grid(mu, k, delta):
    """min over a dense eps grid of k eps subject to delta_G(eps) sum_{i<k} e^(i eps) <= delta
    (Vadhan 2017, Lemma 2.2), with the exact Gaussian profile: the best the conversion can give
    for a mu-GDP mechanism, up to the grid step."""
    eps = np.arange(0.0, 20.0, 1e-4)
    factor = np.exp(eps[:, None] * np.arange(k)).sum(axis=1)
    feasible = gaussian_delta_exact(eps, mu) * factor <= delta
    return k * eps[np.argmax(feasible)]


@pytest.mark.parametrize("mu, k", [(0.5, 2), (1.0, 3), (0.2, 10)])
def test_group_privacy_epsilon_matches_vadhans_conversion_on_the_gaussian(mu, k):
    exact_inverse = lambda d: _gaussian_epsilon_exact(mu, d)   # noqa: E731
    ours = group_privacy_epsilon(exact_inverse, k, DELTA)
    reference = _vadhan_by_grid(mu, k, DELTA)
    assert reference - k * 1e-4 <= ours <= reference * (1 + 1e-9)
    # the returned point is feasible: delta(eps) (e^(k eps) - 1) / (e^eps - 1) <= delta
    eps = ours / k
    assert gaussian_delta_exact(eps, mu) * math.expm1(k * eps) / math.expm1(eps) <= DELTA * (
        1 + 1e-9)
    # exact group privacy of Gaussian DP (mu -> k mu, Dong, Roth, Su 2022, Thm 2.14) is tighter
    assert _gaussian_epsilon_exact(k * mu, DELTA) <= ours
    assert group_privacy_epsilon(exact_inverse, 1, DELTA) == exact_inverse(DELTA)


def _vadhan_by_root(epsilon_for_delta, k, delta):
    """Vadhan's conversion as TF-Privacy 0.9.0 solves it: the example-level delta' at which
    delta' (e^(k eps) - 1) / (e^eps - 1) = delta, by brentq in log delta'; k eps(delta')."""
    def gap(log_d):
        e = epsilon_for_delta(math.exp(log_d))
        return log_d + math.log(sum(math.exp(i * e) for i in range(k))) - math.log(delta)
    low = math.log(delta) - math.log(10)
    while gap(low) > 0:
        low -= math.log(10)
    root = optimize.brentq(gap, low, math.log(delta), xtol=1e-12)
    return k * epsilon_for_delta(math.exp(root))


def _tf_privacy_user_level(n, b, epochs, sigma, micro, k):
    """TF-Privacy's user-level Poisson epsilon (RDP, group privacy); without TF-Privacy,
    computed as its source does."""
    lib = _tf_privacy_lib()
    if lib is not None:
        return lib._compute_dp_sgd_user_privacy(epochs, sigma, DELTA, k, micro,
                                                poisson_subsampling_probability=b / n)
    s = sigma / 2 if micro else sigma
    rdp = dp_accounting.rdp.RdpAccountant().compose(S(P(b / n, G(s)), math.ceil(epochs * n / b)))
    return _vadhan_by_root(rdp.get_epsilon, k, DELTA)


@pytest.mark.parametrize("n, b, epochs, sigma, micro, k", [
    (60000, 256, 3, 1.1, False, 2), (10000, 100, 2, 1.6, True, 4)])
def test_group_privacy_epsilon_equals_tf_privacys_user_level_rdp(n, b, epochs, sigma, micro, k):
    s = sigma / 2 if micro else sigma
    rdp = dp_accounting.rdp.RdpAccountant().compose(S(P(b / n, G(s)), math.ceil(epochs * n / b)))
    ours = group_privacy_epsilon(rdp.get_epsilon, k, DELTA)
    theirs = _tf_privacy_user_level(n, b, epochs, sigma, micro, k)
    assert ours == pytest.approx(theirs, rel=1e-6) and ours <= theirs * (1 + 1e-9)


def test_group_privacy_epsilon_infinite_and_uncertified_cases():
    # eps(delta') = 2 log(1/delta'): delta' e^eps = 1/delta' never falls below delta
    assert group_privacy_epsilon(lambda d: 2 * math.log(1 / d), 2, DELTA) == math.inf

    def uncertified(d):
        if d < 1e-8:
            raise NumericalError("delta too small", "use a finer grid")
        return 3 * math.log(1 / d)
    with pytest.raises(NumericalError, match="group privacy for 5 examples per user"):
        group_privacy_epsilon(uncertified, 5, DELTA)
    for kwargs, name in [(dict(group_size=0), "group_size"), (dict(delta=1.0), "delta"),
                         (dict(group_size=2.5), "group_size")]:
        args = dict(epsilon_for_delta=lambda d: 1.0, group_size=2, delta=DELTA)
        args.update(kwargs)
        with pytest.raises(ParameterError) as info:
            group_privacy_epsilon(**args)
        assert info.value.name == name


def test_group_privacy_epsilon_ends_at_any_tolerance():
    """From a hostile sweep: tolerance=1e-300 (accepted) looped for ever once the bisection's
    ends were adjacent floats.  mu = 1 Gaussian, k = 2: the same answer as at the default
    tolerance, checked against Vadhan's conversion on a grid."""
    exact_inverse = lambda d: _gaussian_epsilon_exact(1.0, d)   # noqa: E731
    fine = group_privacy_epsilon(exact_inverse, 2, DELTA, tolerance=1e-300)
    assert fine == pytest.approx(group_privacy_epsilon(exact_inverse, 2, DELTA), rel=1e-9)
    reference = _vadhan_by_grid(1.0, 2, DELTA)
    assert reference - 2e-4 <= fine <= reference * (1 + 1e-9)


@pytest.mark.parametrize("k", [65, 1000, 10 ** 6, 10 ** 9])
@pytest.mark.parametrize("eps", [0.0, 1e-300, 1e-12, 1e-6, 0.01, 0.5, 3.0, 50.0])
def test_the_group_factor_of_a_large_group_is_never_below_its_exact_value(k, eps):
    """From a hostile sweep: the factor log sum_{i<k} e^(i eps) summed an array of k terms
    (10^9 examples per user: MemoryError; 10^8: 32 s).  Above 64 it is the closed form log((e^(k
    eps) - 1) / (e^eps - 1)), rounded up; checked against 60-digit arithmetic (mpmath)."""
    import mpmath

    from dpplugins.integrations.group_privacy import _log_group_factor

    mpmath.mp.dps = 60
    e = mpmath.mpf(eps)
    exact = mpmath.log(k) if eps == 0 else mpmath.log(mpmath.expm1(k * e) / mpmath.expm1(e))
    ours = _log_group_factor(eps, k)
    assert ours >= exact and ours <= exact * (1 + 2e-12)


def test_a_huge_group_is_infinite_at_once():
    """k = 10^9 examples per user at an example-level epsilon of 1e-3: k eps = 10^6, so no
    user-level epsilon below inf exists (it raised MemoryError)."""
    assert group_privacy_epsilon(lambda d: 0.001, 10 ** 9, DELTA) == math.inf


# -- user-level statement -------------------------------------------------------------------------
def _flat(text):
    return " ".join(text.split())


def _user_level(text):
    head, _, user = text.partition("User-level DP")
    assert user, text
    return user


@pytest.mark.parametrize("case, k", [(CASES[0], 2), (CASES[1], 3)])
def test_user_level_rdp_statement_equals_tf_privacys(case, k):
    n, b, epochs, sigma, micro = case
    text = compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, micro, k,
                                            accountant="rdp")
    lib = _tf_privacy_lib()
    if lib is not None:    # TF-Privacy's printed statement
        theirs = _float_after("Poisson sampling (*):", _user_level(
            lib.compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, micro, k)))
    else:
        theirs = round(_tf_privacy_user_level(n, b, epochs, sigma, micro, k), 3)
    ours = _float_after("Poisson sampling (*):", _user_level(text))
    # the same number, printed rounded up where TF-Privacy rounds to nearest
    assert math.isfinite(ours) and theirs <= ours <= theirs + 0.001 + 1e-12
    assert "group privacy of (eps, delta)-DP (Vadhan 2017, Lemma 2.2)" in _flat(text)


def test_user_level_pld_statement_matches_dp_accounting_pld_with_vadhans_conversion():
    n, b, epochs, sigma, micro, k = 10000, 100, 2, 0.8, False, 2
    numbers = compute_dp_sgd_privacy_numbers(n, b, epochs, sigma, DELTA, micro, k)
    # independent: dp_accounting's PLD for the example-level epsilon, Vadhan's conversion solved
    # here by root finding on the example-level delta
    theirs = pld_privacy_accountant.PLDAccountant().compose(
        S(P(b / n, G(sigma)), math.ceil(epochs * n / b)))
    reference = _vadhan_by_root(theirs.get_epsilon, k, DELTA)
    assert numbers.user_poisson_epsilon == pytest.approx(reference, rel=REL)
    # the PLD route gives less than the RDP route of TF-Privacy
    rdp = compute_dp_sgd_privacy_numbers(n, b, epochs, sigma, DELTA, micro, k, accountant="rdp")
    assert numbers.user_poisson_epsilon < rdp.user_poisson_epsilon
    text = compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, micro, k)
    assert _float_after("Poisson sampling (*):", _user_level(text)) == _up3(
        numbers.user_poisson_epsilon)


def test_user_level_shuffled_line_is_group_privacy_of_gaussian_dp():
    n, b, epochs, sigma, micro, k = 10000, 100, 1.5, 1.6, True, 3
    text = compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, micro, k,
                                            accountant="shuffle", sampler="shuffled_epochs")
    # 2 epochs begun, noise 1.6 / 2 after microbatching: mu = sqrt(2) / 0.8, groups of 3
    exact = _gaussian_epsilon_exact(3 * math.sqrt(2) / 0.8, DELTA)
    user = _user_level(text)
    assert _float_after("once per epoch:", user) == pytest.approx(exact, abs=1e-3)
    assert "<= Epsilon with each example occurring once per epoch" in user
    assert "mu -> 3 mu (Dong, Roth, Su 2022, Thm 2.14)" in _flat(user)
    numbers = compute_dp_sgd_privacy_numbers(n, b, epochs, sigma, DELTA, micro, k,
                                     accountant="shuffle", sampler="shuffled_epochs")
    assert numbers.shuffled_mu == pytest.approx(math.sqrt(2) / 0.8)
    assert exact * (1 - 1e-9) <= numbers.user_shuffled_upper <= exact * (1 + 1e-6)


def test_user_level_checkin_line_vadhan_on_balls_and_bins():
    n, b, epochs, sigma, k = 4000, 100, 2, 1.0, 2          # t = 40 steps per epoch
    numbers = compute_dp_sgd_privacy_numbers(n, b, epochs, sigma, DELTA, False, k,
                                             sampler="checkin")
    # independent conversion: Vadhan's condition solved here by root finding on the core
    # accountant's epsilon curve
    core = create("balls_and_bins")
    core.compose(legacy_step(core, 1.0, 1 / 40), 80)
    reference = _vadhan_by_root(core.get_epsilon, k, DELTA)
    assert numbers.user_allocation_vadhan == pytest.approx(reference, rel=1e-6)
    # the point is feasible for the core's certified delta: delta(eps) (1 + e^eps) <= delta
    eps = numbers.user_allocation_vadhan / k
    assert core.get_delta(eps) * (1 + math.exp(eps)) <= DELTA * (1 + 1e-6)
    # exact group privacy of the no-amplification Gaussian bound (mu -> 2 sqrt(2)) is far worse
    gaussian = _gaussian_epsilon_exact(k * math.sqrt(2), DELTA)
    assert numbers.user_allocation_gaussian == pytest.approx(gaussian, rel=1e-6)
    assert numbers.user_allocation_upper == numbers.user_allocation_vadhan < gaussian
    text = compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, False, k,
                                            sampler="checkin")
    user = _user_level(text)
    assert _float_after("(one step per epoch):", user) == _up3(numbers.user_allocation_upper)
    assert "<= Epsilon with random check-ins (one step per epoch)" in user
    assert ("balls_and_bins accountant (dpplugins random allocation, Chua et al. 2025), certified "
            "upper bound, group privacy of (eps, delta)-DP (Vadhan 2017, Lemma 2.2)") in _flat(user)


def test_user_level_checkin_line_takes_the_gaussian_bound_when_smaller():
    # t = 1 (batch = dataset): the example-level bound is the Gaussian with mu = sqrt(3) / 2;
    # exact group privacy of Gaussian DP (mu -> 2 mu) beats Vadhan's conversion of it
    numbers = compute_dp_sgd_privacy_numbers(1000, 1000, 3, 2.0, DELTA, False, 2, sampler="checkin")
    mu = math.sqrt(3) / 2.0
    gaussian = _gaussian_epsilon_exact(2 * mu, DELTA)
    vadhan = _vadhan_by_grid(mu, 2, DELTA)                 # the conversion on the exact profile
    assert vadhan - 2e-4 <= numbers.user_allocation_vadhan <= vadhan * (1 + 1e-3)
    assert numbers.user_allocation_upper == numbers.user_allocation_gaussian
    assert numbers.user_allocation_gaussian == pytest.approx(gaussian, rel=1e-6)
    assert gaussian < vadhan
    user = _flat(_user_level(compute_dp_sgd_privacy_statement(
        1000, 1000, 3, 2.0, DELTA, False, 2, sampler="checkin")))
    assert ("random allocation's Gaussian bound without amplification, mu = 0.866, "
            "group privacy of Gaussian DP: mu -> 2 mu (Dong, Roth, Su 2022, Thm 2.14); group "
            "privacy of (eps, delta)-DP (Vadhan 2017, Lemma 2.2) on the balls_and_bins "
            f"accountant's bound gives {numbers.user_allocation_vadhan:.3f}") in user


def test_user_level_one_example_per_user_is_the_example_level():
    numbers = compute_dp_sgd_privacy_numbers(10000, 100, 2, 0.8, DELTA, False, 1)
    assert numbers.user_shuffled_upper == numbers.shuffled_upper
    assert numbers.user_poisson_epsilon == numbers.poisson_epsilon


def test_user_level_uncertifiable_pld_is_reported_infinite_with_the_reason():
    # noise 0.4 after microbatching: example-level epsilon ~ 15, so the conversion k eps,
    # k e^((k-1) eps) delta' (Vadhan 2017, Lemma 2.2) needs delta' ~ 1e-12 or below, where
    # epsilon(delta') grows faster than log(1/delta'): no finite user-level epsilon exists at
    # this delta by that conversion (the PLD certifies such small delta' since the reliability
    # work; it used to refuse them); TF-Privacy's RDP route reports ~390
    text = compute_dp_sgd_privacy_statement(10000, 100, 2, 0.8, DELTA, True, 2)
    user = _user_level(text)
    assert "inf (**)" in user and "no finite user-level epsilon" in _flat(text)
    assert math.isfinite(_float_after("once per epoch:", user))
