"""The Opacus adapters on events: which event a loader is, refusal at make_private, a
user-registered accountant, accumulation, zero noise, state dicts and pickling.

Independent references: expected events are written out from the loaders' parameters; epsilons
are compared with a core accountant fed those events by hand (never with the adapter's own
ledger).
"""

import copy
import io
import json
import math
import re
import warnings
from fractions import Fraction

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("opacus")

from opacus import PrivacyEngine  # noqa: E402
from opacus.data_loader import DPDataLoader  # noqa: E402

from dpplugins.accountants import (PLDAccountant, UnsupportedEventError, create,  # noqa: E402
                                   supporting)
from dpplugins.events import (GaussianEvent, PoissonSampledEvent, RandomCheckInEvent,  # noqa: E402
                              ShuffledEpochsEvent, SelfComposedEvent, UnsupportedEvent)
from dpplugins.integrations.opacus import loader_event, register  # noqa: E402

DELTA = 1e-5
PER_PASS = ("shuffle", "swap", "balls_and_bins", "checkin", "pnsgd")


def dataset(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=g)
    return torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long())


def model_and_optimizer(seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def private(accountant, loader, *, noise_multiplier=1.0, poisson_sampling=False):
    register()
    engine = PrivacyEngine(accountant=accountant)
    model, optimizer = model_and_optimizer()
    return (engine, *engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                                         noise_multiplier=noise_multiplier, max_grad_norm=1.0,
                                         poisson_sampling=poisson_sampling))


def train_steps(model, optimizer, loader, steps, k=1):
    """``steps`` optimizer steps, each over ``k`` batches; returns the steps taken."""
    criterion = torch.nn.CrossEntropyLoss()
    taken, batches = 0, 0
    while taken < steps:
        for x, y in loader:
            out = model(x)
            (criterion(out, y) if len(y) else out.sum()).backward()
            batches += 1
            if batches % k == 0:
                optimizer.step()
                optimizer.zero_grad()
                taken += 1
                if taken == steps:
                    break
    return taken


@pytest.fixture(autouse=True)
def quiet_opacus():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Secure RNG turned off.*")
        warnings.filterwarnings("ignore", message=".*Full backward hook.*")
        yield


@pytest.fixture
def my_pld():
    """A user's accountant: a PLDAccountant subclass registered in dpplugins as 'my_pld' and
    then in Opacus by register() -- no table anywhere knows its name."""
    from dpplugins.accountants import registry as ours
    from opacus.accountants import registry as theirs

    class MyPLD(PLDAccountant):
        pass

    ours.register("my_pld", MyPLD)
    register()
    yield "my_pld"
    ours._REGISTRY.pop("my_pld", None)
    theirs._ACCOUNTANTS.pop("my_pld", None)


# -- which event a loader is ----------------------------------------------------------------------
def test_loader_event_rules():
    from dpplugins.integrations.opacus import make_data_loader
    from dpplugins.samplers import RandomCheckIn, ShuffledEpochs

    data = dataset(200)
    g = GaussianEvent(1.5)
    plain = torch.utils.data.DataLoader(data, batch_size=32)
    assert loader_event(plain, 1.5) == ShuffledEpochsEvent(200, 32, Fraction(1, 7), g)
    shuffled = torch.utils.data.DataLoader(data, batch_size=32, shuffle=True, drop_last=True)
    assert loader_event(shuffled, 1.5) == ShuffledEpochsEvent(200, 32, Fraction(1, 6), g, True)
    # the whole run, and what make_private(poisson_sampling=True) will make of the loader
    assert loader_event(plain, 1.5, epochs=3) == ShuffledEpochsEvent(200, 32, 3, g)
    assert loader_event(plain, 1.5, poisson_sampling=True) == PoissonSampledEvent(1 / 7, g)
    assert loader_event(plain, 1.5, epochs=2, poisson_sampling=True) == SelfComposedEvent(
        PoissonSampledEvent(1 / 7, g), 14)
    assert loader_event(DPDataLoader.from_data_loader(plain), 1.5) == PoissonSampledEvent(1 / 7, g)
    ours = make_data_loader(data, RandomCheckIn(200, 10, variant="averaged", rng=0))
    assert loader_event(ours, 1.5) == RandomCheckInEvent(200, g, "averaged", 10,
                                                         passes=Fraction(1, 10))
    ours = make_data_loader(data, ShuffledEpochs(200, 50, rng=0))
    assert loader_event(ours, 1.5, epochs=2) == ShuffledEpochsEvent(200, 50, 2, g)
    # not described: every accountant refuses
    for loader in (torch.utils.data.DataLoader(data, batch_size=1),       # fixed order, b = 1
                   torch.utils.data.DataLoader(data, batch_size=8, sampler=torch.utils.data.
                                               RandomSampler(data, replacement=True)),
                   torch.utils.data.DataLoader(data, batch_size=8, sampler=torch.utils.data.
                                               WeightedRandomSampler([1.0] * 200, 200))):
        event = loader_event(loader, 1.0)
        assert isinstance(event, UnsupportedEvent) and event.reason
        assert supporting(event) == ()


def test_loader_event_of_torch_distributed_sampler():
    """torch's DistributedSampler in a world of one process is shuffled epochs; a sampler for a
    larger world outside such a process group, and a size the world does not divide, are
    refused with the reason (the real multi-process case is in tests/test_ddp.py)."""
    from torch.utils.data import DataLoader, DistributedSampler

    data, g = dataset(200), GaussianEvent(1.0)
    alone = DataLoader(data, batch_size=32, sampler=DistributedSampler(data, 1, 0, seed=3))
    assert loader_event(alone, 1.0) == ShuffledEpochsEvent(200, 32, Fraction(1, 7), g)
    assert loader_event(alone, 1.0, epochs=2) == ShuffledEpochsEvent(200, 32, 2, g)
    cases = {"process group of 1": DataLoader(data, batch_size=16,
                                              sampler=DistributedSampler(data, 2, 0)),
             "single": DataLoader(data, batch_size=1, sampler=DistributedSampler(data, 1, 0))}
    for words, loader in cases.items():
        event = loader_event(loader, 1.0)
        assert isinstance(event, UnsupportedEvent) and supporting(event) == ()
        assert words in event.reason or words == "single"
    odd = dataset(201)
    event = loader_event(DataLoader(odd, batch_size=8, sampler=DistributedSampler(odd, 1, 0)),
                         1.0)
    assert event == ShuffledEpochsEvent(201, 8, Fraction(1, 26), g)   # 1 divides everything


# -- refusal at set-up --------------------------------------------------------------------------
@pytest.mark.parametrize("api", ["make_private", "make_private_with_epsilon"])
@pytest.mark.parametrize("name", PER_PASS)
def test_flag_alone_on_the_default_poisson_loader_is_refused_at_set_up(name, api):
    """PrivacyEngine(accountant=name) with Opacus' default poisson_sampling=True: refused
    before Opacus touches the model and before any calibration, naming the valid accountants."""
    register()
    engine = PrivacyEngine(accountant=name)
    model, optimizer = model_and_optimizer()
    loader = torch.utils.data.DataLoader(dataset(), batch_size=32)
    common = dict(module=model, optimizer=optimizer, data_loader=loader, max_grad_norm=1.0)
    with pytest.raises(UnsupportedEventError) as info:
        if api == "make_private":
            engine.make_private(noise_multiplier=1.0, **common)
        else:
            engine.make_private_with_epsilon(target_epsilon=3.0, target_delta=DELTA, epochs=2,
                                             **common)
    message = str(info.value)
    assert f"the {name!r} accountant" in message and "poisson_sampling=False" in message
    assert re.search(r"support it: .*\bpld\b", message)
    assert {"fdp", "pld"} <= set(info.value.supported_by)
    assert isinstance(info.value.event, PoissonSampledEvent)
    assert len(engine.accountant) == 0 and engine.dataset is None
    assert not any(m._forward_hooks for m in model.modules())


def test_opacus_get_noise_multiplier_refuses_poisson_for_a_shuffle_accountant():
    from opacus.accountants import utils

    register()
    with pytest.raises(UnsupportedEventError, match=r"support it: .*\bpld\b"):
        utils.get_noise_multiplier(target_epsilon=3.0, target_delta=DELTA, sample_rate=0.01,
                                   steps=100, accountant="shuffle")


def test_make_private_with_epsilon_calibrates_shuffle_on_the_real_batch_size():
    """The run is the loader's: 2 shuffled epochs of 256 examples in batches of 32."""
    from dpplugins.calibration import find_noise_multiplier

    loader = torch.utils.data.DataLoader(dataset(), batch_size=32)
    register()
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer = model_and_optimizer()
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader, target_epsilon=4.0,
        target_delta=DELTA, epochs=2, max_grad_norm=1.0, poisson_sampling=False)
    by_hand = find_noise_multiplier(
        target_epsilon=4.0, delta=DELTA, accountant="shuffle",
        event_for_noise=lambda s: ShuffledEpochsEvent(256, 32, 2, GaussianEvent(s)))
    assert optimizer.noise_multiplier == by_hand
    reference = create("shuffle").compose(ShuffledEpochsEvent(256, 32, 2, GaussianEvent(by_hand)))
    assert reference.get_epsilon(DELTA) <= 4.0


# -- a user-registered accountant ---------------------------------------------------------------
def test_user_accountant_gets_safe_poisson_accumulation(my_pld):
    """The issue's case: 4 accumulated Poisson batches (sigma=1, q=0.01) in one optimizer step,
    delta=1e-5.  Opacus' convention (one step at rate 4q) reports 0.857; the event is 4 Poisson
    steps at sigma/2, which is what 'pld' reports (3.825)."""
    base = torch.utils.data.DataLoader(dataset(200), batch_size=2)    # 100 batches: q = 0.01
    loader = DPDataLoader.from_data_loader(base, generator=torch.Generator().manual_seed(0))
    engine, model, optimizer, loader = private(my_pld, loader)
    assert type(engine.accountant.inner).__name__ == "MyPLD"
    train_steps(model, optimizer, loader, steps=1, k=4)
    eps = engine.get_epsilon(DELTA)
    by_hand = create("pld").compose(SelfComposedEvent(
        PoissonSampledEvent(0.01, GaussianEvent(math.nextafter(0.5, 0.0))), 4))
    assert eps == by_hand.get_epsilon(DELTA)
    assert round(eps, 3) == 3.825
    opacus_convention = create("pld")
    opacus_convention.step(noise_multiplier=1.0, sample_rate=0.04)
    assert round(opacus_convention.get_epsilon(DELTA), 3) == 0.857 < eps


def test_user_accountant_refuses_a_shuffled_loader_and_is_named(my_pld):
    loader = torch.utils.data.DataLoader(dataset(), batch_size=32, shuffle=True)
    with pytest.raises(UnsupportedEventError, match=r"the 'my_pld' accountant.*support it: "
                                                    r"shuffle$"):
        private(my_pld, loader)
    # and it is named where it is valid
    poisson = DPDataLoader.from_data_loader(loader)
    from dpplugins.integrations.opacus import valid_accountants
    assert valid_accountants(poisson)[:3] == ("fdp", "my_pld", "pld")
    assert {"rdp", "prv", "gdp"} <= set(valid_accountants(poisson))


# -- adapter == core accountant fed the events by hand ----------------------------------------
def test_pld_adapter_equals_the_core_accountant_on_the_same_events():
    base = torch.utils.data.DataLoader(dataset(), batch_size=32)     # q = 1/8
    engine, model, optimizer, loader = private("pld", base, noise_multiplier=1.2,
                                               poisson_sampling=True)
    steps = train_steps(model, optimizer, loader, steps=12)
    by_hand = create("pld").compose(PoissonSampledEvent(1 / 8, GaussianEvent(1.2)), steps)
    assert engine.accountant.get_epsilon_bounds(DELTA) == by_hand.get_epsilon_bounds(DELTA)


def test_shuffle_adapter_with_accumulation_equals_the_whole_run_written_by_hand():
    """Our ShuffledEpochs(200, 32) sampler, 2 batches per optimizer step, 2 epochs: the run is
    shuffled epochs of batches of 64, 2 epochs -- one event for the whole run."""
    from dpplugins.integrations.opacus import make_data_loader
    from dpplugins.samplers import ShuffledEpochs

    loader = make_data_loader(dataset(200), ShuffledEpochs(200, 32, rng=0))
    engine, model, optimizer, loader = private("shuffle", loader)
    criterion = torch.nn.CrossEntropyLoss()
    for _ in range(2):
        for i, (x, y) in enumerate(loader):
            criterion(model(x), y).backward()
            if i % 2 == 1 or i + 1 == len(loader):   # 7 batches: steps of 2, 2, 2, 1
                optimizer.step()
                optimizer.zero_grad()
    by_hand = create("shuffle").compose(ShuffledEpochsEvent(200, 64, 2, GaussianEvent(1.0)))
    assert engine.accountant.get_epsilon_bounds(DELTA) == by_hand.get_epsilon_bounds(DELTA)
    assert len(engine.accountant) == 8


def test_opacus_accountant_with_accumulated_poisson_batches_is_watched_without_attach():
    base = torch.utils.data.DataLoader(dataset(), batch_size=32)
    engine, model, optimizer, loader = private("rdp", DPDataLoader.from_data_loader(base))
    with pytest.warns(UserWarning, match=r"2 accumulated Poisson batches.*accountant='pld'"):
        train_steps(model, optimizer, loader, steps=2, k=2)


# -- zero noise ------------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["pld", "shuffle", "balls_and_bins"])
def test_zero_noise_records_non_private_steps(name):
    """Opacus trains with noise_multiplier=0 (its own tests do): recorded, epsilon inf (pld
    with 2 accumulated Poisson batches per step)."""
    from dpplugins.integrations.opacus import make_data_loader
    from dpplugins.samplers import balls_and_bins

    plain = torch.utils.data.DataLoader(dataset(), batch_size=32)
    loader = {"pld": lambda: DPDataLoader.from_data_loader(plain),
              "shuffle": lambda: plain,
              "balls_and_bins": lambda: make_data_loader(dataset(64),
                                                         balls_and_bins(64, 4, rng=0))}[name]()
    engine, model, optimizer, loader = private(name, loader, noise_multiplier=0.0)
    train_steps(model, optimizer, loader, steps=3, k=2 if name == "pld" else 1)
    assert len(engine.accountant) == (6 if name == "pld" else 3)
    assert engine.get_epsilon(DELTA) == math.inf


# -- state dicts and pickling ----------------------------------------------------------------
def test_load_state_dict_corner_cases_raise_like_opacus():
    register()
    acc = PrivacyEngine(accountant="pld").accountant
    for bad in ({}, {"1": 2}, {"history": []}, {"mechanism": "pld"}):
        with pytest.raises(ValueError):
            acc.load_state_dict(bad)
    rdp = PrivacyEngine(accountant="rdp").accountant
    rdp.step(noise_multiplier=1.0, sample_rate=0.01)
    with pytest.raises(ValueError, match="cannot be loaded"):
        acc.load_state_dict(rdp.state_dict())
    with pytest.raises(ValueError):
        rdp.load_state_dict(acc.state_dict())
    assert len(acc) == 0


def test_state_dict_is_json_and_round_trips_events():
    base = torch.utils.data.DataLoader(dataset(), batch_size=32)
    engine, model, optimizer, loader = private("pld", base, poisson_sampling=True)
    train_steps(model, optimizer, loader, steps=5)
    state = json.loads(json.dumps(engine.accountant.state_dict()))
    fresh = PrivacyEngine(accountant="pld").accountant
    fresh.load_state_dict(state)
    assert fresh.history == engine.accountant.history
    assert fresh.get_epsilon(DELTA) == engine.get_epsilon(DELTA)


def test_version_0_1_adapter_state_dicts_load_with_their_meaning():
    """0.1 adapters saved (sigma, q, steps) tuples and the accountant's options."""
    register()
    shuffle = PrivacyEngine(accountant="shuffle").accountant
    shuffle.load_state_dict({
        "history": [(1.0, 1 / 7, 14)], "mechanism": "shuffle",
        "dpplugins": {"options": {"neighbouring": "add_remove", "batch_size": 32,
                                  "dataset_size": 200, "value_discretization_interval": None,
                                  "lower_bound": True},
                      "version": "0.1.0.dev0", "accumulation": 1}})
    by_hand = create("shuffle").compose(ShuffledEpochsEvent(200, 32, 2, GaussianEvent(1.0)))
    assert shuffle.get_epsilon_bounds(DELTA) == by_hand.get_epsilon_bounds(DELTA)
    pld = PrivacyEngine(accountant="pld").accountant
    pld.load_state_dict({"history": [(1.2, 0.125, 16)], "mechanism": "pld"})  # Opacus' format
    by_hand = create("pld").compose(PoissonSampledEvent(0.125, GaussianEvent(1.2)), 16)
    assert pld.get_epsilon(DELTA) == by_hand.get_epsilon(DELTA)


def test_adapters_pickle_and_deepcopy():
    from dpplugins.integrations.opacus import make_data_loader
    from dpplugins.samplers import ShuffledEpochs

    loader = make_data_loader(dataset(200), ShuffledEpochs(200, 32, rng=0))
    engine, model, optimizer, loader = private("shuffle", loader)
    train_steps(model, optimizer, loader, steps=3, k=2)
    accountant = engine.accountant
    buffer = io.BytesIO()
    torch.save(accountant, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    for other in (loaded, copy.deepcopy(accountant)):
        assert type(other) is type(accountant) and other.mechanism() == "shuffle"
        assert other.history == accountant.history and other is not accountant
        assert other.get_epsilon_bounds(DELTA) == accountant.get_epsilon_bounds(DELTA)
        assert other._accumulation == 2
    # the copy keeps accounting on its own
    loaded.compose(ShuffledEpochsEvent(200, 64, Fraction(1, 4), GaussianEvent(1.0)))
    assert len(loaded) == len(accountant) + 1


# -- random allocation with k participations / a check-in probability ---------------------------
@pytest.mark.parametrize("participations,checkin_probability", [(2, 1.0), (1, 0.5)])
def test_random_allocation_sampler_trains_under_opacus_with_its_event(participations,
                                                                      checkin_probability):
    """``RandomAllocation`` through ``make_data_loader``: the accountant named by the user
    accounts the sampler's event (every step, empty ones as noise-only steps); a Poisson
    accountant on this loader is refused at set-up with the valid accountants named."""
    from dpplugins.integrations.opacus import make_data_loader, valid_accountants
    from dpplugins.samplers import RandomAllocation
    sampler = RandomAllocation(64, 8, participations=participations,
                               checkin_probability=checkin_probability, rng=0)
    loader = make_data_loader(dataset(64), sampler)
    assert "balls_and_bins" in valid_accountants(loader)
    assert "pld" not in valid_accountants(loader)
    engine, model, optimizer, loader = private("balls_and_bins", loader)
    train_steps(model, optimizer, loader, steps=16)
    # one step at a time: an eighth of a pass each, 16 of them (two passes)
    assert engine.accountant.history == [SelfComposedEvent(sampler.event(1.0, Fraction(1, 8)),
                                                           16)]
    assert len(engine.accountant) == 16
    # independent: at most k steps per example and pass, so eps is at most that of 2k Gaussian
    # steps (Balle & Wang 2018): their delta at our eps is at least DELTA
    from dpplugins.mechanisms.gaussian import gaussian_delta
    eps = engine.get_epsilon(DELTA)
    assert 0 < eps and gaussian_delta(eps, math.sqrt(2 * participations)) >= DELTA * (1 - 1e-9)
    with pytest.raises(Exception, match="balls_and_bins"):
        private("pld", make_data_loader(dataset(64), sampler))
