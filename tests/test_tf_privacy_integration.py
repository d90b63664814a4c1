"""The TF-Privacy integration against dp_accounting's own accountants and TF-Privacy itself.

References (test dependencies, installed in the pinned test environment):

* dp_accounting's ``PLDAccountant`` (pessimistic connect-the-dots, grid 1e-4) and
  ``RdpAccountant`` on the same event sequences;
* TensorFlow Privacy 0.9.0's ``compute_dp_sgd_privacy_statement`` (its returned string is parsed).
  If tensorflow-privacy is not importable, the same numbers are computed the way its source does
  (``compute_dp_sgd_privacy_lib._compute_dp_sgd_example_privacy``: noise / 2 with microbatching,
  ``ceil(epochs / q)`` Poisson steps, ``ceil(epochs)`` unsampled Gaussian steps) with
  dp_accounting directly.
"""

import math
import re

import pytest

dp_accounting = pytest.importorskip("dp_accounting")

from dp_accounting.pld import pld_privacy_accountant  # noqa: E402
from dp_accounting.pld import privacy_loss_distribution as dpa_pld  # noqa: E402

from dpplugins.accountants import create  # noqa: E402
from dpplugins.errors import ParameterError  # noqa: E402
from dpplugins.integrations import tf_privacy  # noqa: E402
from dpplugins.integrations.tf_privacy import (GDPAccountant, PLDAccountant,  # noqa: E402
                                               compute_dp_sgd_privacy,
                                               compute_dp_sgd_privacy_statement,
                                               events_to_history)

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


def _dp_accounting_pld(events):
    acc = pld_privacy_accountant.PLDAccountant()
    for event in events:
        acc.compose(event)
    return acc


def _dp_accounting_pld_epsilon(events):
    return _dp_accounting_pld(events).get_epsilon(DELTA)


# -- events -> history ------------------------------------------------------------------------
def test_events_to_history_flattens_nested_compositions():
    runs, non_private = events_to_history(C(SEQUENCES["nested"][0]), 2)
    assert runs == [(1.2, 0.02, 400), (5.0, 1.0, 2), (1.2, 0.02, 100)]
    assert non_private is False


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
    assert a.history == b.history == [(1.0, 0.01, 500)]
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
UNSUPPORTED = [
    dp_accounting.LaplaceDpEvent(1.0),
    P(0.1, dp_accounting.LaplaceDpEvent(1.0)),
    dp_accounting.SampledWithoutReplacementDpEvent(1000, 10, G(1.0)),
    dp_accounting.SampledWithReplacementDpEvent(1000, 10, G(1.0)),
    dp_accounting.SingleEpochTreeAggregationDpEvent(1.0, 10),
    dp_accounting.UnsupportedDpEvent(),
    C([P(0.01, G(1.0)), dp_accounting.LaplaceDpEvent(1.0)]),
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


def test_noop_and_empty_give_zero():
    acc = PLDAccountant().compose(NOOP).compose(C([])).compose(P(0.0, G(1.0)), 100)
    assert acc.history == [] and acc.get_epsilon(DELTA) == 0.0 and acc.get_delta(1.0) == 0.0
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
    for bad in (0.0, 1.0, -1e-5, float("nan")):
        with pytest.raises(ParameterError, match="delta"):
            acc.get_epsilon(bad)


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
    numbers = compute_dp_sgd_privacy(n, b, epochs, sigma, DELTA, micro)
    assert 0 < numbers.shuffled_lower <= numbers.shuffled_upper
    assert numbers.effective_noise_multiplier == (sigma / 2 if micro else sigma)


@pytest.mark.parametrize("case", CASES)
def test_statement_rdp_line_equals_tf_privacy(case):
    n, b, epochs, sigma, micro = case
    text = compute_dp_sgd_privacy_statement(n, b, epochs, sigma, DELTA, micro, accountant="rdp")
    _, tf_poisson = _reference_epsilons(n, b, epochs, sigma, DELTA, micro, "RDP")
    assert _float_after("Poisson sampling (*):", text) == round(tf_poisson, 3)
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
    # profile via dp_accounting's Gaussian PLD with the same mu (std 0.8 / sqrt(2))
    closed = dpa_pld.from_gaussian_mechanism(
        standard_deviation=0.8 / math.sqrt(2), value_discretization_interval=1e-5
    ).get_epsilon_for_delta(DELTA)
    assert _float_after("once per epoch:", text) == pytest.approx(closed, rel=REL)


def test_fractional_epochs_count_steps_like_tf_privacy():
    numbers = compute_dp_sgd_privacy(1000, 30, 1.5, 1.0, DELTA, False)
    assert numbers.poisson_steps == math.ceil(1.5 / (30 / 1000))  # TF-Privacy's count: 50
    assert numbers.steps_per_epoch == 34 and numbers.shuffled_steps == 51
    # a partial epoch cannot cost more than TF-Privacy's ceil(epochs) whole epochs
    tf_shuffled, _ = _reference_epsilons(1000, 30, 1.5, 1.0, DELTA, False, "PLD")
    assert numbers.shuffled_upper <= tf_shuffled * (1 + REL)


def test_max_examples_per_user_one_is_example_level():
    a = compute_dp_sgd_privacy(10000, 100, 2, 0.8, DELTA, False, 1)
    b = compute_dp_sgd_privacy(10000, 100, 2, 0.8, DELTA, False, None)
    assert (a.poisson_epsilon, a.shuffled_upper) == (b.poisson_epsilon, b.shuffled_upper)


@pytest.mark.parametrize("kwargs, name", [
    (dict(max_examples_per_user=2), "max_examples_per_user"),
    (dict(accountant="shuffle"), "accountant"),
    (dict(accountant="prv"), "accountant"),
    (dict(sampler="checkin"), "sampler"),
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
