"""Opacus' own accountant tests (``opacus/tests/accountants_test.py``, Opacus 1.5) run against
our Opacus adapters.

Each check of that file that applies to an accountant registered under a new name is repeated
here, parametrised over our accountants that account Opacus' own loader (Poisson sampling; the
others must refuse it, which is tested too).  Where Opacus compares with its own number we check
a certified statement against independent implementations instead, and say so in the test:

* ``test_rdp_accountant`` / ``test_prv_accountant`` (epsilon 7.32911 and 6.77740 for
  sigma = 1.5, q = 0.04, 2250 steps, delta = 1e-5): ours is a certified interval, so we check
  ``lower <= upper <= RDP`` (RDP is a valid upper bound; ours is at least as tight) and that our
  interval meets the PRV accountant's own ``[eps_lower, eps_upper]`` (prv-accountant, Gopi, Lee,
  Wutschitz 2021, arXiv:2106.02848).
* ``test_get_noise_multiplier_*`` (1.416 for RDP, 1.34765625 for PRV, target 8, 90 epochs):
  our sigma is checked to be at most RDP's (a tighter certified accountant needs no more noise)
  and at least PRV's estimate less its stated accuracy, and the certified epsilon at our sigma
  is at most the target (Opacus' "overshoot" property), also over Opacus' hypothesis grid.
* The state-dict and registry checks are Opacus' own, unchanged.
"""

from __future__ import annotations

import math

import pytest

pytest.importorskip("opacus")
prv_accountant = pytest.importorskip("prv_accountant")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from opacus.accountants import (IAccountant, RDPAccountant, create_accountant,  # noqa: E402
                                register_accountant, registry)
from opacus.accountants.utils import get_noise_multiplier  # noqa: E402

from dpplugins.accountants import available, create  # noqa: E402
from dpplugins.accountants.base import UnsupportedEventError  # noqa: E402
from dpplugins.events import GaussianEvent, PoissonSampledEvent  # noqa: E402
from dpplugins.integrations import opacus as ours  # noqa: E402

ours.register()
_POISSON = PoissonSampledEvent(0.04, GaussianEvent(1.5))
#: our accountants that account Opacus' Poisson loader, asked of the accountants themselves
POISSON = [name for name in available() if create(name).supports(_POISSON)]
OTHERS = [name for name in available() if name not in POISSON]
SIGMA, RATE, DELTA = 1.5, 0.04, 1e-5
STEPS = int(90 / 0.04)


def _prv_interval(sigma: float, rate: float, steps: int, delta: float) -> tuple[float, float]:
    """prv-accountant's certified ``[eps_lower, eps_upper]`` (eps_error 0.01, as Opacus)."""
    accountant = prv_accountant.Accountant(noise_multiplier=sigma, sampling_probability=rate,
                                           delta=delta, eps_error=0.01, max_compositions=steps)
    lower, _, upper = accountant.compute_epsilon(num_compositions=steps)
    return lower, upper


def _stepped(name: str, steps: int):
    accountant = create_accountant(name)
    for _ in range(steps):
        accountant.step(noise_multiplier=SIGMA, sample_rate=RATE)
    return accountant


def test_the_peer_list_is_not_empty():
    assert POISSON == ["fdp", "pld"] or set(POISSON) >= {"pld"}


# -- AccountantRegistryTest ---------------------------------------------------------------------
@pytest.mark.parametrize("name", available())
def test_our_names_create_our_adapters(name):
    accountant = create_accountant(name)
    assert isinstance(accountant, ours.DPPluginsAccountant)
    assert isinstance(accountant, IAccountant) and accountant.mechanism() == name


def test_registering_over_an_existing_name_still_raises():
    class Dummy(IAccountant):
        def __init__(self):
            pass

        def __len__(self):
            return 0

        def step(self, **kwargs):
            pass

        def get_epsilon(self, **kwargs):
            return 0.0

        @classmethod
        def mechanism(cls):
            return "dummy"

    try:
        register_accountant("dummy", Dummy)
        for name in ["rdp", *available()]:
            with pytest.raises(ValueError):
                register_accountant(name, Dummy)
        assert isinstance(create_accountant("dummy"), Dummy)
    finally:
        registry._ACCOUNTANTS.pop("dummy", None)
    with pytest.raises(ValueError):
        create_accountant("not_registered")


# -- AccountingTest -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", POISSON)
def test_epsilon_of_opacus_reference_run_is_certified_and_tighter_than_rdp(name):
    accountant = _stepped(name, STEPS)
    assert len(accountant) == STEPS
    rdp = RDPAccountant()
    rdp.history = [(SIGMA, RATE, STEPS)]
    rdp_epsilon = rdp.get_epsilon(delta=DELTA)
    assert rdp_epsilon == pytest.approx(7.32911117143)       # Opacus' own number
    lower, upper = accountant.get_epsilon_bounds(DELTA)
    assert 0 <= lower <= upper <= rdp_epsilon
    assert accountant.get_epsilon(delta=DELTA) == upper
    prv_lower, prv_upper = _prv_interval(SIGMA, RATE, STEPS, DELTA)
    assert lower <= prv_upper and prv_lower <= upper           # the two certified intervals meet
    assert prv_lower <= 6.777395712150674 <= prv_upper         # Opacus' PRV number is inside


@pytest.mark.parametrize("name", OTHERS)
def test_accountants_of_other_samplers_refuse_opacus_poisson_steps(name):
    """What Opacus' Poisson loader releases is refused by the accountants of other samplers
    (their ``step(noise_multiplier, sample_rate)`` keeps its version-0.1 meaning -- their own
    protocol at ``1 / sample_rate`` steps per pass -- and the Opacus hook records the loader's
    event, never that tuple)."""
    accountant = create_accountant(name)
    with pytest.raises(UnsupportedEventError) as info:
        accountant.compose(_POISSON)
    assert len(accountant) == 0 and accountant.history == []
    assert "pld" in str(info.value)


@pytest.mark.parametrize("name,how", [("pld", {"epochs": 90}), ("fdp", {"steps": 2000})])
def test_get_noise_multiplier_is_between_prv_and_rdp_and_meets_the_target(name, how):
    steps = how.get("steps") or ours.steps_for_epochs(how["epochs"], RATE)
    sigma = get_noise_multiplier(target_epsilon=8, target_delta=DELTA, sample_rate=RATE,
                                 accountant=name, **how)
    rdp_sigma = get_noise_multiplier(target_epsilon=8, target_delta=DELTA, sample_rate=RATE,
                                     accountant="rdp", **how)
    prv_sigma = get_noise_multiplier(target_epsilon=8, target_delta=DELTA, sample_rate=RATE,
                                     accountant="prv", **how)
    # Opacus' own expectations for its accountants
    assert rdp_sigma == pytest.approx(1.416 if "epochs" in how else 1.3562, abs=1e-4)
    assert prv_sigma == pytest.approx(1.34765625 if "epochs" in how else 1.2915, abs=1e-4)
    assert sigma <= rdp_sigma
    # PRV's sigma is an estimate (its epsilon tolerance 0.01); ours may not be far below it
    assert sigma >= 0.98 * prv_sigma
    accountant = create_accountant(name)
    accountant.step(noise_multiplier=sigma, sample_rate=RATE, count=steps)
    assert accountant.get_epsilon(delta=DELTA) <= 8
    # independent: the PRV accountant's certified lower bound at our sigma is below the target
    assert _prv_interval(sigma, RATE, steps, DELTA)[0] <= 8


@pytest.mark.slow
@pytest.mark.parametrize("name", ["pld"])     # fdp's calibration over 10^6 steps takes minutes
@given(epsilon=st.floats(1.0, 10.0), epochs=st.integers(10, 100),
       sample_rate=st.sampled_from([1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2, 2e-2, 5e-2, 1e-1]),
       delta=st.sampled_from([1e-4, 1e-5, 1e-6]))
@settings(deadline=None, max_examples=2, database=None, derandomize=True)
def test_get_noise_multiplier_overshoot(name, epsilon, epochs, sample_rate, delta):
    """Opacus' overshoot test: the calibrated sigma's epsilon is below the target -- here the
    certified upper bound, and (independently) the PRV accountant's lower bound."""
    sigma = get_noise_multiplier(target_epsilon=epsilon, target_delta=delta,
                                 sample_rate=sample_rate, epochs=epochs, accountant=name)
    steps = int(epochs / sample_rate)
    accountant = create_accountant(name)
    accountant.history = [(sigma, sample_rate, steps)]
    assert accountant.get_epsilon(delta=delta) < epsilon
    assert _prv_interval(sigma, sample_rate, steps, delta)[0] <= epsilon


@pytest.mark.parametrize("name", POISSON)
def test_accountant_state_dict(name):
    accountant = _stepped(name, 50)
    destination = {"dummy_k": "dummy_v"}
    state = accountant.state_dict()
    assert state["history"] == accountant.state_dict()["history"]
    assert state["history"] is not accountant.state_dict()["history"]
    assert accountant.state_dict(destination)["mechanism"] == accountant.mechanism()
    assert accountant.state_dict(destination)["dummy_k"] == "dummy_v"


@pytest.mark.parametrize("name", POISSON)
def test_accountant_load_state_dict(name):
    steps = 300
    accountant = _stepped(name, steps - 100)
    fresh = create_accountant(name)
    for bad in ({}, {"1": 2}, {"history": []}):
        with pytest.raises(ValueError):
            fresh.load_state_dict(bad)
    rdp = RDPAccountant()
    with pytest.raises(ValueError):              # another mechanism's state, both ways
        rdp.load_state_dict(accountant.state_dict())
    rdp.step(noise_multiplier=SIGMA, sample_rate=RATE)
    with pytest.raises(ValueError):
        fresh.load_state_dict(rdp.state_dict())
    assert fresh.state_dict() != accountant.state_dict()
    fresh.load_state_dict(accountant.state_dict())
    assert fresh.state_dict() == accountant.state_dict()
    for _ in range(100):
        fresh.step(noise_multiplier=SIGMA, sample_rate=RATE)
    resumed = fresh.get_epsilon_bounds(DELTA)
    # the resumed run is the uninterrupted run: same certified interval, and it meets PRV's
    straight = _stepped(name, steps).get_epsilon_bounds(DELTA)
    assert resumed.lower == pytest.approx(straight.lower, rel=1e-12)
    assert resumed.upper == pytest.approx(straight.upper, rel=1e-12)
    prv_lower, prv_upper = _prv_interval(SIGMA, RATE, steps, DELTA)
    assert resumed.lower <= prv_upper and prv_lower <= resumed.upper
    assert math.isfinite(resumed.upper)
