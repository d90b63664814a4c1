"""The accountant contract (DESIGN.md) on the PLD accountant, in the style of Opacus' own tests."""

import json
import math

import pytest

from dpplugins.accountants import PLDAccountant, available, create, get_class, register
from dpplugins.errors import ParameterError
from dpplugins.events import GaussianEvent, PoissonSampledEvent, SelfComposedEvent


def test_registry_names_and_unknown_name_lists_available():
    assert "pld" in available()
    assert get_class("pld") is PLDAccountant
    with pytest.raises(ParameterError) as info:
        create("no-such-accountant")
    assert "pld" in str(info.value) and "no-such-accountant" in str(info.value)


def test_register_refuses_to_shadow_another_class():
    class Other(PLDAccountant):
        pass
    register("pld", PLDAccountant)  # idempotent for the same class
    with pytest.raises(ParameterError):
        register("pld", Other)


def test_history_is_run_length_and_len_counts_steps():
    acc = create("pld")
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=4)
    acc.step(noise_multiplier=2.0, sample_rate=0.01, count=3)
    one, two = (PoissonSampledEvent(0.01, GaussianEvent(s)) for s in (1.0, 2.0))
    assert acc.history == [SelfComposedEvent(one, 5), SelfComposedEvent(two, 3)]
    assert len(acc) == 8


def test_history_can_be_assigned_as_opacus_does():
    acc = create("pld")
    acc.history = [(1.5, 0.02, 100)]
    assert len(acc) == 100
    with pytest.raises(ParameterError, match="sample_rate"):
        acc.history = [(1.5, 1.5, 100)]


def test_zero_noise_is_non_private_and_zero_rate_is_a_no_op():
    """As in dp_accounting and Opacus: sigma = 0 releases the data (epsilon inf, delta 1);
    q = 0 touches no example (epsilon 0)."""
    acc = create("pld")
    acc.step(noise_multiplier=1.0, sample_rate=0.0, count=10)
    assert acc.get_epsilon(1e-5) == 0.0 and len(acc) == 10
    acc.step(noise_multiplier=0.0, sample_rate=0.1)
    assert acc.get_epsilon(1e-5) == math.inf and acc.get_delta(5.0) == 1.0


@pytest.mark.parametrize("kwargs,name", [
    (dict(noise_multiplier=-1.0, sample_rate=0.1), "noise_multiplier"),
    (dict(noise_multiplier=math.nan, sample_rate=0.1), "noise_multiplier"),
    (dict(noise_multiplier=1.0, sample_rate=-0.1), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=1.01), "sample_rate"),
    (dict(noise_multiplier=1.0, sample_rate=0.1, count=-1), "count"),
])
def test_bad_steps_raise_parameter_error(kwargs, name):
    acc = create("pld")
    with pytest.raises(ParameterError, match=name):
        acc.step(**kwargs)
    assert len(acc) == 0


@pytest.mark.parametrize("delta", [1.0, -0.5, math.nan, 1.5])
def test_bad_delta(delta):
    acc = create("pld")
    acc.step(noise_multiplier=1.0, sample_rate=0.1, count=10)
    with pytest.raises(ParameterError, match="delta"):
        acc.get_epsilon(delta)


def test_bad_options():
    with pytest.raises(ParameterError, match="neighbouring"):
        create("pld", neighbouring="swap")
    with pytest.raises(ParameterError, match="eps_tolerance"):
        create("pld", eps_tolerance=0)


def test_empty_history_is_zero_epsilon():
    assert create("pld").get_epsilon(1e-5) == 0.0


def test_reading_does_not_mutate_and_is_cached():
    acc = create("pld")
    acc.step(noise_multiplier=1.0, sample_rate=0.05, count=200)
    before = acc.state_dict()
    first = acc.get_epsilon_bounds(1e-5)
    assert acc.state_dict() == before
    assert acc.get_epsilon_bounds(1e-5) is first  # cached
    assert acc.get_epsilon(1e-5) == first.upper
    assert first.lower <= first.upper


def test_state_dict_is_json_and_round_trips():
    acc = create("pld", eps_tolerance=2e-3)
    acc.step(noise_multiplier=1.1, sample_rate=0.02, count=300)
    acc.step(noise_multiplier=0.9, sample_rate=0.02, count=100)
    state = json.loads(json.dumps(acc.state_dict()))
    assert state["accountant"] == "pld" and "version" in state
    restored = create("pld", eps_tolerance=2e-3)
    restored.load_state_dict(state)
    assert restored.history == acc.history
    assert restored.get_epsilon(1e-5) == acc.get_epsilon(1e-5)
    mismatched = create("pld")
    with pytest.raises(ParameterError, match="eps_tolerance"):
        mismatched.load_state_dict(state)


def test_an_events_state_without_its_relation_is_refused():
    """Events do not carry the neighbouring relation: a replace-one state with its options
    removed loaded into an add/remove accountant and reported 0.718 for the saved run's 0.895
    (a hostile sweep).  Refused; the whole state loads."""
    saved = create("pld", neighbouring="replace_one")
    saved.step(noise_multiplier=1.0, sample_rate=0.01, count=100)
    state = json.loads(json.dumps(saved.state_dict()))
    bare = {key: value for key, value in state.items() if key != "options"}
    for target in (create("pld"), create("pld", neighbouring="replace_one")):
        with pytest.raises(ParameterError, match="'neighbouring' relation"):
            target.load_state_dict(bare)
        assert target.steps == 0
    restored = create("pld", neighbouring="replace_one")
    restored.load_state_dict(state)
    assert restored.get_epsilon(1e-5) == saved.get_epsilon(1e-5)


def test_delta_and_epsilon_are_consistent():
    acc = create("pld")
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=1000)
    eps = acc.get_epsilon(1e-5)
    bounds = acc.get_delta_bounds(eps)
    # at the certified epsilon, even the upper bound on delta is (about) the target
    assert bounds.upper <= 1e-5 * (1 + 1e-6)
    assert bounds.lower <= bounds.upper


def test_stepping_in_pieces_equals_one_run():
    a, b = create("pld"), create("pld")
    for _ in range(10):
        a.step(noise_multiplier=1.0, sample_rate=0.01, count=100)
    b.step(noise_multiplier=1.0, sample_rate=0.01, count=1000)
    assert a.history == b.history
    assert a.get_epsilon(1e-5) == b.get_epsilon(1e-5)


def test_no_subsampling_is_the_gaussian_mechanism():
    from conftest import epsilon_from_delta_curve, gaussian_delta_exact
    acc = create("pld")
    acc.step(noise_multiplier=4.0, sample_rate=1.0, count=16)  # mu = 4 / 4 = 1
    exact = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, 1.0), 1e-5)
    lower, upper = acc.get_epsilon_bounds(1e-5)
    assert lower <= exact <= upper
    assert (upper - lower) / upper <= 1e-3


def test_replace_one_is_less_private_than_add_remove():
    a, r = create("pld"), create("pld", neighbouring="replace_one")
    for acc in (a, r):
        acc.step(noise_multiplier=1.0, sample_rate=0.01, count=1000)
    assert r.get_epsilon_bounds(1e-5).lower > a.get_epsilon_bounds(1e-5).upper


@pytest.mark.parametrize("name", available())
@pytest.mark.parametrize("entry", [5, None, "abc", (1.0, 0.01)])
def test_a_legacy_history_entry_that_is_not_a_triple_is_named(name, entry):
    """From a hostile sweep: a version-0.1 history entry that is not iterable raised
    "TypeError: 'int' object is not iterable"; it is a ParameterError naming the entry."""
    acc = create(name)
    with pytest.raises(ParameterError, match=r"history\[0\]"):
        acc.load_state_dict({"history": [entry]})
    assert acc.history == []


def test_integers_too_long_to_print_still_give_a_parameter_error():
    """From a hostile sweep: an integer of more than 4,300 digits made the error message itself
    fail (Python refuses str() of such an int: ValueError); the message gives its size."""
    from dpplugins.events import GaussianEvent, SelfComposedEvent

    with pytest.raises(ParameterError, match=r"about 10\^5000") as raised:
        GaussianEvent(10 ** 5000)
    assert "noise_multiplier" in str(raised.value)
    with pytest.raises(ParameterError, match=r"-about 10\^5000"):
        SelfComposedEvent(GaussianEvent(1.0), -10 ** 5000)
    from dpplugins.errors import NumericalError

    for name in ("pld", "fdp"):
        acc = create(name)
        acc.compose(SelfComposedEvent(GaussianEvent(1.0), 10 ** 5000))
        assert "about 10^5000 steps" in repr(acc)
        with pytest.raises(NumericalError, match=r"about 10\^5000 compositions"):
            acc.get_epsilon(1e-5)
