"""Real Opacus training (a few steps, CPU) with our accountants registered by name.

The adapters record events (dpplugins.events) read from the data loader make_private returns;
a loader an accountant cannot account for is refused at make_private.  Expected events are
written out by hand from the loader's parameters (not read back from the adapter).
"""

import copy
import math
import re
import warnings
from fractions import Fraction

import numpy as np
import pytest

torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")

from opacus import PrivacyEngine  # noqa: E402
from opacus.accountants import RDPAccountant, create_accountant  # noqa: E402

from dpplugins.accountants import UnsupportedEventError  # noqa: E402
from dpplugins.events import (GaussianEvent, NonPrivateEvent, PoissonSampledEvent,  # noqa: E402
                              RandomCheckInEvent, SelfComposedEvent, ShuffledEpochsEvent,
                              leaves)
from dpplugins.integrations.opacus import check_sampler, register  # noqa: E402
from conftest import legacy_history, legacy_step  # noqa: E402

DELTA = 1e-5


def ledger(accountant):
    """The adapter's events as (leaf event, count) runs in order (consecutive equal leaves
    merged), independent of how the ledger groups them."""
    out = []
    for event in accountant.history:
        for leaf, count in leaves(event):
            if out and out[-1][0] == leaf:
                out[-1] = (leaf, out[-1][1] + count)
            else:
                out.append((leaf, count))
    return out


def poisson_tuples(accountant):
    """(sigma, q, steps) of a ledger of Poisson-subsampled Gaussian steps, for Opacus' RDP."""
    return [(leaf.event.noise_multiplier, leaf.sample_rate, count)
            for leaf, count in ledger(accountant)]


def shuffled(n, b, sigma=1.0, drop_last=False):
    """One step of shuffled epochs of n examples in batches of b (what a loader releases)."""
    return ShuffledEpochsEvent(n, b, 1, GaussianEvent(sigma), drop_last).with_steps(1)


def get_noise_multiplier(**kwargs):
    """Opacus' ``opacus.accountants.utils.get_noise_multiplier`` as scripts reach it *after*
    register() (looked up at call time: a name imported before register() would be Opacus'
    original function)."""
    from opacus.accountants import utils
    return utils.get_noise_multiplier(**kwargs)


def tiny_setup(n=256, batch=32, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(n, 8)
    y = (x[:, 0] > 0).long()
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=batch)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer, loader


def make_private(engine, model, optimizer, loader, *, noise_multiplier=1.0,
                 poisson_sampling=False):
    """engine.make_private with the tests' clipping norm (1.0); our samplers need
    poisson_sampling=False, so that is the default here."""
    return engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                               noise_multiplier=noise_multiplier, max_grad_norm=1.0,
                               poisson_sampling=poisson_sampling)


def shuffled_shuffle_setup(n, batch=32):
    """Our ShuffledEpochs sampler + PrivacyEngine(accountant="shuffle") + attach()."""
    from dpplugins.integrations.opacus import attach, make_data_loader
    from dpplugins.samplers import ShuffledEpochs

    register()
    model, optimizer, loader = tiny_setup(n=n)
    loader = make_data_loader(loader.dataset, ShuffledEpochs(n, batch, rng=0))
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer, loader = make_private(engine, model, optimizer, loader)
    attach(engine, loader)
    return engine, model, optimizer, loader


def train(model, optimizer, loader, epochs=1):
    criterion = torch.nn.CrossEntropyLoss()
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()


def test_register_is_idempotent_and_keeps_opacus_accountants():
    names = register()
    assert "pld" in names and register() == names
    assert isinstance(create_accountant("rdp"), RDPAccountant)
    acc = create_accountant("pld")
    assert acc.mechanism() == "pld" and len(acc) == 0


def test_pld_flag_is_the_whole_change_and_is_at_most_opacus_rdp():
    register()
    engine = PrivacyEngine(accountant="pld")
    model, optimizer, loader = tiny_setup()
    model, optimizer, loader = make_private(engine, model, optimizer, loader,
                                            poisson_sampling=True)
    train(model, optimizer, loader, epochs=2)
    eps = engine.get_epsilon(DELTA)
    # Opacus' DPDataLoader: Poisson batches at q = 1 / len(loader) = 1/8, one step per batch
    assert ledger(engine.accountant) == [(PoissonSampledEvent(1 / 8, GaussianEvent(1.0)), 16)]
    assert len(engine.accountant) == 16
    rdp = RDPAccountant()
    rdp.history = poisson_tuples(engine.accountant)
    assert eps <= rdp.get_epsilon(DELTA)
    lower, upper = engine.accountant.get_epsilon_bounds(DELTA)
    assert lower <= eps == upper


def test_make_private_with_epsilon_reaches_target_with_our_calibration():
    register()
    engine = PrivacyEngine(accountant="pld")
    model, optimizer, loader = tiny_setup()
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader, target_epsilon=2.0,
        target_delta=DELTA, epochs=3, max_grad_norm=1.0)
    train(model, optimizer, loader, epochs=3)
    assert engine.get_epsilon(DELTA) <= 2.0
    # the noise is close to the smallest that meets the target (our Brent calibration)
    acc = create_accountant("pld")
    acc.history = [(optimizer.noise_multiplier * 0.99, 1 / len(loader), 3 * len(loader))]
    assert acc.get_epsilon_bounds(DELTA).lower > 2.0


def test_checkpoint_resume_equals_uninterrupted(tmp_path):
    register()
    path = tmp_path / "ckpt.pt"

    def fresh():
        engine = PrivacyEngine(accountant="pld")
        model, optimizer, loader = tiny_setup()
        return (engine, *engine.make_private(module=model, optimizer=optimizer,
                                              data_loader=loader, noise_multiplier=1.2,
                                              max_grad_norm=1.0))

    engine, model, optimizer, loader = fresh()
    train(model, optimizer, loader, epochs=2)
    uninterrupted = engine.get_epsilon(DELTA)

    engine, model, optimizer, loader = fresh()
    train(model, optimizer, loader, epochs=1)
    engine.save_checkpoint(path=path, module=model, optimizer=optimizer)
    engine, model, optimizer, loader = fresh()
    engine.load_checkpoint(path=path, module=model, optimizer=optimizer)
    train(model, optimizer, loader, epochs=1)
    assert engine.get_epsilon(DELTA) == pytest.approx(uninterrupted, rel=1e-12)


def test_poisson_accountant_on_a_shuffling_loader_is_refused_at_make_private():
    """PrivacyEngine(accountant='pld') with poisson_sampling=False used to train silently; our
    pld does not describe shuffled batches, so make_private refuses, naming the valid ones."""
    register()
    engine = PrivacyEngine(accountant="pld")
    model, optimizer, loader = tiny_setup()
    with pytest.raises(UnsupportedEventError, match=r"'pld' accountant.*support it: shuffle"):
        make_private(engine, model, optimizer, loader)
    assert len(engine.accountant) == 0
    assert not any(m._forward_hooks for m in model.modules())  # Opacus did not touch the model
    with pytest.raises(UnsupportedEventError, match="support it: shuffle"):
        check_sampler("pld", loader)


def test_opacus_accountant_on_a_shuffling_loader_warns_at_make_private():
    """Opacus' own rdp assumes Poisson: a warning (not a refusal) at make_private, without
    attach(), naming the valid accountants."""
    register()
    engine = PrivacyEngine(accountant="rdp")
    model, optimizer, loader = tiny_setup()
    with pytest.warns(UserWarning, match=r"accountant 'rdp' is not valid.*Valid: shuffle$"):
        make_private(engine, model, optimizer, loader)
    with pytest.warns(UserWarning, match="Valid: shuffle$"):
        check_sampler("rdp", loader)


def test_opacus_get_noise_multiplier_uses_our_calibration_for_our_names():
    register()
    sigma = get_noise_multiplier(target_epsilon=3.0, target_delta=DELTA, sample_rate=0.01,
                                 steps=500, accountant="pld")
    acc = create_accountant("pld")
    acc.history = [(sigma, 0.01, 500)]
    assert acc.get_epsilon(DELTA) <= 3.0
    # Opacus' own accountants still go through Opacus' search
    assert get_noise_multiplier(target_epsilon=3.0, target_delta=DELTA, sample_rate=0.01,
                                steps=500, accountant="rdp") > sigma


def test_our_shuffled_sampler_with_the_shuffle_accountant():
    from dpplugins.accountants import create
    from dpplugins.integrations.opacus import attach, make_data_loader
    from dpplugins.samplers import ShuffledEpochs

    register()
    model, optimizer, loader = tiny_setup(n=200)
    loader = make_data_loader(loader.dataset, ShuffledEpochs(200, 32, rng=0))
    engine = PrivacyEngine(accountant="shuffle")  # created without arguments, as Opacus does
    model, optimizer, loader = make_private(engine, model, optimizer, loader)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # valid pairing: no warning
        attach(engine, loader)
    train(model, optimizer, loader, epochs=2)
    assert ledger(engine.accountant) == [(shuffled(200, 32), 14)]  # ceil(200/32) = 7 per epoch
    reference = create("shuffle", batch_size=32, dataset_size=200)  # version 0.1 meaning
    reference.step(noise_multiplier=1.0, sample_rate=1 / 7, count=14)
    assert engine.get_epsilon(DELTA) == reference.get_epsilon(DELTA)


def test_shuffle_accountant_without_protocol_says_what_to_call():
    """Opacus' step(noise_multiplier, sample_rate) is a Poisson step: shuffle refuses it and
    says what to compose instead."""
    register()
    acc = create_accountant("shuffle")
    with pytest.raises(UnsupportedEventError, match="ShuffledEpochsEvent"):
        acc.step(noise_multiplier=1.0, sample_rate=0.1)
    assert len(acc) == 0


def test_checkin_sampler_trains_through_empty_batches():
    from dpplugins.integrations.opacus import make_data_loader
    from dpplugins.samplers import RandomCheckIn

    register()
    model, optimizer, loader = tiny_setup(n=64)
    sampler = RandomCheckIn(64, 32, checkin_probability=0.3, variant="fixed", rng=1)
    loader = make_data_loader(loader.dataset, sampler)
    engine = PrivacyEngine(accountant="rdp")
    with pytest.warns(UserWarning, match="Valid: checkin$"):   # rdp assumes Poisson
        model, optimizer, loader = make_private(engine, model, optimizer, loader)
    sizes = []
    criterion = torch.nn.CrossEntropyLoss()
    before = [p.detach().clone() for p in model.parameters()]
    for x, y in loader:
        sizes.append(len(x))
        optimizer.zero_grad()
        out = model(x)
        # an empty batch still runs forward/backward (zero per-sample rows); noise is added
        (criterion(out, y) if len(y) else out.sum()).backward()
        optimizer.step()
    assert len(sizes) == 32 and 0 in sizes and max(sizes) <= 1
    # noise-only steps still move the weights (the dummy update is noise, as the protocol says)
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_checkin_accountant_with_a_poisson_loader_raises():
    register()
    engine = PrivacyEngine(accountant="rdp")
    model, optimizer, loader = tiny_setup()
    model, optimizer, loader = make_private(engine, model, optimizer, loader,
                                            poisson_sampling=True)
    with pytest.raises(ValueError, match=r"support it: .*\bpld\b"):
        check_sampler("checkin", loader)


def test_shuffle_flag_alone_with_a_plain_shuffling_loader():
    """PrivacyEngine(accountant="shuffle") + poisson_sampling=False and nothing else: the batch
    size comes from the optimizer; the result equals the no-amplification Gaussian bound."""
    from conftest import epsilon_from_delta_curve, gaussian_delta_exact

    register()
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer, loader = tiny_setup(n=256, batch=32)
    model, optimizer, loader = make_private(engine, model, optimizer, loader, noise_multiplier=2.0)
    train(model, optimizer, loader, epochs=3)
    eps = engine.get_epsilon(DELTA)
    # 3 epochs, each example in one step per epoch: a Gaussian with mu = sqrt(3) / 2
    exact = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, 3 ** 0.5 / 2), DELTA)
    assert exact <= eps <= exact * 1.001


def test_our_sampler_with_batch_memory_manager():
    """Physical batches of 8 from logical batches of 32: one optimizer step (and one accounted
    step) per logical batch."""
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    engine, model, optimizer, loader = shuffled_shuffle_setup(128)
    criterion = torch.nn.CrossEntropyLoss()
    with BatchMemoryManager(data_loader=loader, max_physical_batch_size=8,
                            optimizer=optimizer) as physical:
        sizes = []
        for x, y in physical:
            sizes.append(len(x))
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
    assert max(sizes) <= 8 and sum(sizes) == 128
    assert len(engine.accountant) == 4  # 128 / 32 logical steps, not 16 physical ones


@pytest.mark.parametrize("name,poisson", [("fdp", True), ("shuffle", False)])
def test_make_private_with_epsilon_for_other_accountants(name, poisson):
    register()
    engine = PrivacyEngine(accountant=name)
    model, optimizer, loader = tiny_setup()
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader, target_epsilon=4.0,
        target_delta=DELTA, epochs=2, max_grad_norm=1.0, poisson_sampling=poisson)
    train(model, optimizer, loader, epochs=2)
    assert engine.get_epsilon(DELTA) <= 4.0


# -- gradient accumulation -------------------------------------------------------------------
def private_with_sampler(sampler, accountant, noise_multiplier=1.0, do_attach=True):
    """make_private(poisson_sampling=False) over one of our samplers, then attach()."""
    from dpplugins.integrations.opacus import attach, make_data_loader

    register()
    model, optimizer, loader = tiny_setup(n=sampler.num_examples)
    loader = make_data_loader(loader.dataset, sampler)
    engine = PrivacyEngine(accountant=accountant)
    model, optimizer, loader = make_private(engine, model, optimizer, loader,
                                            noise_multiplier=noise_multiplier)
    if do_attach:
        attach(engine, loader)
    return engine, model, optimizer, loader


def train_accumulating(model, optimizer, loader, k, epochs=2, style="pass_end"):
    """Backward on every physical batch, ``optimizer.step()`` after every k-th one; returns the
    examples in each optimizer step.  ``style``: "pass_end" also steps after the last batch of a
    pass (the counter restarts every pass); "carry" restarts the counter every pass but does not
    step at its end (the leftover batches join the next pass's first step); "global" counts
    batches across passes."""
    criterion = torch.nn.CrossEntropyLoss()
    sizes, pending, count = [], 0, 0
    for _ in range(epochs):
        if style != "global":
            count = 0
        for i, (x, y) in enumerate(loader):
            out = model(x)
            (criterion(out, y) if len(y) else out.sum()).backward()  # empty: noise-only step
            pending, count = pending + len(x), count + 1
            if count % k == 0 or (style == "pass_end" and i + 1 == len(loader)):
                optimizer.step()
                optimizer.zero_grad()
                sizes.append(pending)
                pending = 0
    return sizes


@pytest.mark.parametrize("n", [256, 200])  # 8 batches per epoch (k divides), 7 (remainder 1)
def test_gradient_accumulation_with_shuffled_sampler_accounts_logical_batches(n):
    """k = 2 physical batches of 32 per optimizer step: the logical protocol is shuffled epochs
    with batches of 64 (the last one shorter), ceil(n / 64) steps per epoch."""
    from dpplugins.accountants import create
    from dpplugins.samplers import ShuffledEpochs

    engine, model, optimizer, loader = private_with_sampler(ShuffledEpochs(n, 32, rng=0),
                                                            "shuffle")
    sizes = train_accumulating(model, optimizer, loader, k=2, epochs=2)
    logical_steps = -(-n // 64)
    # the ground truth of the run: each epoch's optimizer steps take 64 examples, the last the rest
    per_epoch = [min(64, n - 64 * j) for j in range(logical_steps)]
    assert sizes == per_epoch * 2
    assert ledger(engine.accountant) == [(shuffled(n, 64), 2 * logical_steps)]
    # the same accountant configured by hand with the logical protocol
    reference = create("shuffle", batch_size=64, dataset_size=n)
    reference.step(noise_multiplier=1.0, sample_rate=1 / logical_steps, count=2 * logical_steps)
    assert engine.accountant.get_epsilon_bounds(DELTA) == reference.get_epsilon_bounds(DELTA)
    # and the physical protocol (batches of 32, 2 * ceil(n / 32) steps) has another lower bound,
    # so the test sees whether the accountant was re-described
    physical = create("shuffle", batch_size=32, dataset_size=n)
    physical.step(noise_multiplier=1.0, sample_rate=1 / len(loader), count=2 * len(loader))
    assert physical.get_epsilon_bounds(DELTA).lower != reference.get_epsilon_bounds(DELTA).lower
    # independent: each example is in one noisy step per epoch, 2 epochs -> mu = sqrt(2) / sigma
    from conftest import epsilon_from_delta_curve, gaussian_delta_exact
    exact = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, 2 ** 0.5), DELTA)
    assert exact <= engine.get_epsilon(DELTA) <= exact * 1.001


def test_gradient_accumulation_with_the_shuffle_flag_alone():
    """A plain loader (batch_size=32): the logical batch is k times the loader's batch size."""
    from dpplugins.accountants import create

    register()
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer, loader = tiny_setup(n=256, batch=32)
    model, optimizer, loader = make_private(engine, model, optimizer, loader)
    train_accumulating(model, optimizer, loader, k=2, epochs=2)
    assert ledger(engine.accountant) == [(shuffled(256, 64), 8)]
    reference = create("shuffle")   # the whole run, written by hand: 2 epochs of batches of 64
    reference.compose(ShuffledEpochsEvent(256, 64, 2, GaussianEvent(1.0)))
    assert engine.accountant.get_epsilon_bounds(DELTA) == reference.get_epsilon_bounds(DELTA)
    from conftest import epsilon_from_delta_curve, gaussian_delta_exact
    exact = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, 2 ** 0.5), DELTA)
    assert exact <= engine.get_epsilon(DELTA) <= exact * 1.001  # 2 epochs, mu = sqrt(2)


@pytest.mark.parametrize("variant,cap,logical_cap", [("fixed", None, 2), ("averaged", 4, 8)])
def test_gradient_accumulation_with_checkin_sampler_is_averaged_checkin(variant, cap,
                                                                        logical_cap):
    """k = 2 consecutive slots of 8, every example checks in: each example is in exactly one of 4
    logical slots, a logical step sums at most 2 (fixed) / 2 * cap (averaged) examples -- the
    averaged protocol (Balle et al. 2020, Thm 4.1) with 4 slots."""
    from dpplugins.accountants import create
    from dpplugins.samplers import RandomCheckIn

    sampler = RandomCheckIn(64, 8, checkin_probability=1.0, variant=variant,
                            max_batch_size=cap, rng=3)
    engine, model, optimizer, loader = private_with_sampler(sampler, "checkin",
                                                            noise_multiplier=4.0)
    sizes = train_accumulating(model, optimizer, loader, k=2, epochs=2)
    assert len(sizes) == 8 and max(sizes) <= logical_cap
    logical = RandomCheckInEvent(64, GaussianEvent(4.0), "averaged", 4, None, 1.0, logical_cap,
                                 False, Fraction(1, 4))
    assert ledger(engine.accountant) == [(logical, 8)]
    reference = create("checkin", num_examples=64, variant="averaged", num_slots=4,
                       checkin_probability=1.0, max_batch_size=logical_cap)
    reference.step(noise_multiplier=4.0, sample_rate=1 / 4, count=8)
    assert engine.get_epsilon(DELTA) == reference.get_epsilon(DELTA)
    physical = create("checkin", num_examples=64, variant=variant, num_slots=8,
                      checkin_probability=1.0,
                      max_batch_size=cap if variant == "averaged" else None)
    physical.step(noise_multiplier=4.0, sample_rate=1 / 8, count=16)
    # the test can tell them apart: the physical slots are another protocol (both epsilons are
    # the 2/sigma-GDP bound per pass here, which is below the check-in theorems' bounds)
    assert physical.history != engine.accountant.history


def test_gradient_accumulation_resume_equals_uninterrupted(tmp_path):
    from dpplugins.samplers import ShuffledEpochs

    path = tmp_path / "ckpt.pt"
    from dpplugins.integrations.opacus import attach

    def run(epochs, do_attach=True):
        engine, model, optimizer, loader = private_with_sampler(
            ShuffledEpochs(200, 32, rng=0), "shuffle", do_attach=do_attach)
        train_accumulating(model, optimizer, loader, k=2, epochs=epochs)
        return engine, model, optimizer, loader

    def state(engine):
        return engine.accountant.history, engine.accountant.get_epsilon_bounds(DELTA)

    uninterrupted = state(run(epochs=2)[0])
    engine, model, optimizer, _ = run(epochs=1)
    saved = state(engine)
    engine.save_checkpoint(path=path, module=model, optimizer=optimizer)
    # resume: make_private, load (the accountant keeps k=2), attach (a no-op re-check), then
    # the second epoch
    engine, model, optimizer, loader = run(epochs=0, do_attach=False)
    engine.load_checkpoint(path=path, module=model, optimizer=optimizer)
    attach(engine, loader)
    assert state(engine) == saved
    train_accumulating(model, optimizer, loader, k=2, epochs=1)
    assert state(engine) == uninterrupted


def _sampler(kind):
    from dpplugins.samplers import RandomCheckIn, ShuffledEpochs, SlidingWindowCheckIn
    return {"shuffled_200": ShuffledEpochs(200, 32, rng=0),
            "shuffled_drop_last": ShuffledEpochs(200, 32, drop_last=True, rng=0),
            "checkin_p0": RandomCheckIn(64, 8, checkin_probability=0.5, rng=0),
            "checkin_m8": RandomCheckIn(64, 8, rng=0),
            "allocation_m8": RandomCheckIn(64, 8, variant="averaged", rng=0),
            "sliding": SlidingWindowCheckIn(20, 4, rng=0)}[kind]


@pytest.mark.parametrize("kind,accountant,k,style,match,valid_steps", [
    # the 7th batch of an epoch waits for the next epoch: that step mixes two epochs (refused
    # when the second pass begins, before its first batch is drawn)
    ("shuffled_200", "shuffle", 2, "carry", "a new pass begun after 6 of the 7 batches", 3),
    ("shuffled_200", "shuffle", 2, "global", "a new pass begun after 6 of the 7 batches", 3),
    # 6 batches per epoch with drop_last: the last accumulation of 2 is not a batch of 128
    ("shuffled_drop_last", "shuffle", 4, "pass_end", "drop_last", 0),
    ("checkin_p0", "checkin", 2, "pass_end", "checkin_probability = 1", 0),
    ("checkin_m8", "checkin", 3, "pass_end", "divisor of num_slots=8", 0),
    ("allocation_m8", "balls_and_bins", 3, "pass_end", "divisor of num_slots=8", 0),
    ("sliding", "checkin", 2, "pass_end", "Thm 4.3", 0),
])
def test_gradient_accumulation_outside_the_supported_protocols_is_refused(
        kind, accountant, k, style, match, valid_steps):
    from dpplugins.errors import ParameterError

    engine, model, optimizer, loader = private_with_sampler(_sampler(kind), accountant)
    with pytest.raises(ParameterError, match=match):
        train_accumulating(model, optimizer, loader, k=k, epochs=2, style=style)
    # nothing wrong was recorded: only the steps before the offending one
    expected = [(shuffled(200, 64), valid_steps)] if valid_steps else []
    assert ledger(engine.accountant) == expected


def test_a_pass_cut_short_then_a_fresh_permutation_is_refused():
    """One batch of each of 20 fresh permutations (a ``break`` after the first step of every
    epoch) was accounted as 10 full passes: 20 steps of shuffled epochs of 64 examples in
    batches of 63 gave the upper bound 7.51 at delta 1e-5, while the certified *lower* bound of
    what ran -- 20 steps in each of which an example is in the batch w.p. 63/64, i.e. (zero-out)
    Poisson steps at that rate -- is above it.  Now the second iteration is refused before any
    of its batches is drawn, and the ledger holds the one step that ran."""
    from dpplugins.accountants import create
    from dpplugins.errors import ParameterError

    register()
    model, optimizer, loader = tiny_setup(n=64)
    loader = torch.utils.data.DataLoader(loader.dataset, batch_size=63, shuffle=True)
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer, loader = make_private(engine, model, optimizer, loader,
                                            noise_multiplier=2.0)
    criterion = torch.nn.CrossEntropyLoss()
    with pytest.raises(ParameterError, match="a new pass begun after 1 of the 2 batches"):
        for _ in range(20):
            for x, y in loader:
                criterion(model(x), y).backward()
                optimizer.step()
                optimizer.zero_grad()
                break
    assert ledger(engine.accountant) == [(shuffled(64, 63, sigma=2.0), 1)]
    # what the old accounting claimed, against a certified lower bound of what ran
    claimed = create("shuffle").compose(shuffled(64, 63, sigma=2.0).with_steps(20))
    ran = create("pld").compose(SelfComposedEvent(
        PoissonSampledEvent(63 / 64, GaussianEvent(2.0)), 20))
    assert claimed.get_epsilon(1e-5) < ran.get_epsilon_bounds(1e-5).lower
    # whole epochs go on as before
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer, _ = tiny_setup(n=64)
    loader = torch.utils.data.DataLoader(loader.dataset, batch_size=16, shuffle=True)
    model, optimizer, loader = make_private(engine, model, optimizer, loader)
    train(model, optimizer, loader, epochs=3)
    assert ledger(engine.accountant) == [(shuffled(64, 16), 12)]
    copy.deepcopy(loader)   # the watched batch sampler still copies


@pytest.mark.parametrize("accountant,poisson", [("shuffle", False), ("pld", True)])
def test_a_step_on_batches_not_drawn_from_the_returned_loader_is_refused(accountant, poisson):
    """The hook records every optimizer step as a batch of the loader make_private returned.
    Sixteen full-batch steps on 64 examples with the ``shuffle`` accountant (batches of 8, the
    loader never iterated) were accounted as two shuffled epochs, 6.57 at delta 1e-5, while the
    16 Gaussian steps on every example that ran have a certified lower bound above 24; now the
    first such step is refused before the parameters move, and nothing is recorded."""
    from dpplugins.accountants import create
    from dpplugins.errors import ParameterError

    register()
    model, optimizer, loader = tiny_setup(n=64, batch=8)
    if not poisson:
        loader = torch.utils.data.DataLoader(loader.dataset, batch_size=8, shuffle=True)
    engine = PrivacyEngine(accountant=accountant)
    model, optimizer, loader = make_private(engine, model, optimizer, loader,
                                            poisson_sampling=poisson)
    x, y = loader.dataset.tensors
    criterion = torch.nn.CrossEntropyLoss()
    start = [p.detach().clone() for p in model.parameters()]
    optimizer.zero_grad()
    criterion(model(x), y).backward()
    with pytest.raises(ParameterError, match="before the loader was iterated"):
        optimizer.step()
    assert len(engine.accountant) == 0
    assert all(torch.equal(p.detach(), s) for p, s in zip(model.parameters(), start))
    if not poisson:   # what the old accounting claimed, against what ran
        claimed = create("shuffle").compose(shuffled(64, 8).with_steps(16))
        ran = create("pld").compose(SelfComposedEvent(GaussianEvent(1.0), 16))
        assert claimed.get_epsilon(DELTA) < ran.get_epsilon_bounds(DELTA).lower
    # one epoch on the loader, then steps on another loader (batch size changed mid-training):
    # refused at the first step past the batches the returned loader drew
    train(model, optimizer, loader)
    steps = len(engine.accountant)
    assert steps == len(loader)
    other = torch.utils.data.DataLoader(loader.dataset, batch_size=32, shuffle=True)
    with pytest.raises(ParameterError, match=f"a step of 1 batch after {steps} trained, while "
                                             f"the loader has drawn {steps}"):
        train(model, optimizer, other)
    assert len(engine.accountant) == steps
    # the returned loader goes on as before; a copy of it is not watched, and steps on it are
    # refused (its batches are not counted)
    train(model, optimizer, loader, epochs=2)
    assert len(engine.accountant) == 3 * steps
    copied = copy.deepcopy(loader)
    assert not getattr(type(copied.batch_sampler), "_dpplugins_watched", False)
    with pytest.raises(ParameterError, match="while the loader has drawn"):
        train(model, optimizer, copied)
    # the loader is read again as it was (a second stage on it, valid_accountants)
    from dpplugins.integrations.opacus import loader_event
    assert loader_event(loader, 1.0) == loader_event(copied, 1.0)


def test_each_optimizer_is_checked_against_its_own_loader():
    """A hostile sweep: the batch count belonged to the accountant, so after a second
    make_private stage (another loader, batches of 32) the first stage's optimizer stepped on
    the second loader's batches and was recorded at its own rate 1/8 (3.17 reported, where the
    8 steps at rate 1/2 that ran have 9.34).  Each optimizer now counts against the loader it
    was made with."""
    from dpplugins.errors import ParameterError

    register()
    engine = PrivacyEngine(accountant="pld")
    first = make_private(engine, *tiny_setup(n=64, batch=8), poisson_sampling=True)
    second = make_private(engine, *tiny_setup(n=64, batch=32), poisson_sampling=True)
    (model1, optimizer1, _), (_, _, loader2) = first, second
    criterion = torch.nn.CrossEntropyLoss()
    x, y = next((x, y) for x, y in loader2 if len(y))
    criterion(model1(x), y).backward()
    with pytest.raises(ParameterError, match="before the loader was iterated"):
        optimizer1.step()
    assert len(engine.accountant) == 0
    train(*second)                       # each stage on its own loader goes on
    train(*first)
    assert len(engine.accountant) == len(first[2]) + len(second[2])


def test_every_batch_of_a_pass_trained_without_finishing_the_iteration_is_a_whole_pass():
    """A hostile sweep: ``zip(range(len(loader)), loader)`` over one of our samplers trains every
    batch of the pass but never resumes the loader after the last one; the next epoch was
    refused ("the sampler continues its pass at batch 8 of 8 while 0 were trained")."""
    from dpplugins.samplers import ShuffledEpochs

    engine, model, optimizer, loader = private_with_sampler(ShuffledEpochs(256, 32, rng=0),
                                                            "shuffle")
    criterion = torch.nn.CrossEntropyLoss()
    for _ in range(2):
        for _, (x, y) in zip(range(len(loader)), loader):
            optimizer.zero_grad()
            criterion(model(x), y).backward()
            optimizer.step()
    assert ledger(engine.accountant) == [(shuffled(256, 32), 16)]


def test_with_gradient_accumulation_a_step_on_other_data_is_refused_too():
    """Steps of k = 2 batches each: every step trains two drawn batches, so after a whole pass
    no drawn batch is left for a step on other data (counting steps instead of batches left
    half a pass of room for them)."""
    from dpplugins.errors import ParameterError
    from dpplugins.samplers import ShuffledEpochs

    engine, model, optimizer, loader = private_with_sampler(ShuffledEpochs(256, 32, rng=0),
                                                            "shuffle")
    train_accumulating(model, optimizer, loader, k=2, epochs=1)
    assert len(engine.accountant) == 4
    x, y = loader.dataset.tensors
    torch.nn.functional.cross_entropy(model(x[:32]), y[:32]).backward()
    with pytest.raises(ParameterError, match="a step of 1 batch after 8 trained, while the "
                                             "loader has drawn 8"):
        optimizer.step()
    assert len(engine.accountant) == 4


def test_our_sampler_resumes_where_it_stands_and_a_drawn_untrained_batch_is_refused():
    """Ours continue their pass: a break after 3 trained steps and a new iteration go on at
    batch 4, as one uninterrupted epoch would (the same ledger).  A batch drawn but not trained
    (or set_epoch in mid-pass) breaks that correspondence and is refused."""
    from dpplugins.errors import ParameterError
    from dpplugins.samplers import ShuffledEpochs

    criterion = torch.nn.CrossEntropyLoss()

    def step(model, optimizer, x, y):
        criterion(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()

    sampler = ShuffledEpochs(64, 8, rng=0)
    engine, model, optimizer, loader = private_with_sampler(sampler, "shuffle")
    for i, (x, y) in enumerate(loader):
        step(model, optimizer, x, y)
        if i == 2:
            break
    for x, y in loader:
        step(model, optimizer, x, y)
    assert sampler.position == 0 and ledger(engine.accountant) == [(shuffled(64, 8), 8)]
    batches = iter(loader)
    next(batches)
    step(model, optimizer, *next(batches))   # two drawn, one trained
    with pytest.raises(ParameterError, match="continues its pass at batch 2 of 8 while 1"):
        iter(loader)
    sampler.set_epoch(5)                      # a new pass while one step of the old one ran
    with pytest.raises(ParameterError, match="a new pass begun after 1 of the 8"):
        iter(loader)
    assert ledger(engine.accountant) == [(shuffled(64, 8), 9)]


def test_gradient_accumulation_changed_midway_is_refused():
    from dpplugins.errors import ParameterError

    engine, model, optimizer, loader = private_with_sampler(_sampler("shuffled_200"), "shuffle")
    train_accumulating(model, optimizer, loader, k=2, epochs=1)
    with pytest.raises(ParameterError, match="2 at logical step 1 of 4"):
        train_accumulating(model, optimizer, loader, k=1, epochs=1)
    assert ledger(engine.accountant) == [(shuffled(200, 64), 4)]


def test_gradient_accumulation_is_refused_for_one_example_per_step_accountants():
    """swap: two accumulated batches of 1 are a batch of 2, which swapping does not describe;
    a fixed order with batch size 1 is not described at all (no amplification by shuffling)."""
    register()
    engine = PrivacyEngine(accountant="swap")
    model, optimizer, loader = tiny_setup(n=16, batch=1)
    with pytest.raises(UnsupportedEventError, match="batch size 1 in a fixed order"):
        make_private(engine, model, optimizer, loader)
    loader = torch.utils.data.DataLoader(loader.dataset, batch_size=1, shuffle=True)
    model, optimizer, loader = make_private(engine, model, optimizer, loader)
    with pytest.raises(UnsupportedEventError, match=r"batch size 1 .*support it: shuffle"):
        train_accumulating(model, optimizer, loader, k=2, epochs=1)
    assert len(engine.accountant) == 0


def test_configured_by_hand_the_loader_still_decides():
    """configure() changes the accountant's options (e.g. its version-0.1 protocol for step());
    what the hook records is still the loader's event, accumulated."""
    from dpplugins.integrations.opacus import configure

    register()
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer, loader = tiny_setup(n=256, batch=32)
    model, optimizer, loader = make_private(engine, model, optimizer, loader)
    configure(engine.accountant, batch_size=32, dataset_size=256)
    train_accumulating(model, optimizer, loader, k=2, epochs=1)
    assert ledger(engine.accountant) == [(shuffled(256, 64), 4)]


def test_accumulation_plan_and_logical_sampler():
    """The pure mapping, against hand-written protocols."""
    from dpplugins.errors import ParameterError
    from dpplugins.integrations.opacus import accumulation_plan, logical_sampler
    from dpplugins.samplers import RandomCheckIn, ShuffledEpochs

    assert accumulation_plan(8, 2) == (2, 2, 2, 2)
    assert accumulation_plan(7, 2) == (2, 2, 2, 1)
    assert accumulation_plan(3, 5) == (3,)
    shuffled = ShuffledEpochs(200, 32, rng=0)
    assert logical_sampler(shuffled, 1) is shuffled
    logical = logical_sampler(shuffled, 3)  # 7 batches -> 3 steps of 96, 96, 8 examples
    assert (logical.num_examples, logical.batch_size, len(logical)) == (200, 96, 3)
    assert [len(b) for b in logical] == [96, 96, 8]
    drop = logical_sampler(ShuffledEpochs(200, 32, drop_last=True, rng=0), 3)  # 6 batches
    assert (drop.batch_size, drop.drop_last, [len(b) for b in drop]) == (96, True, [96, 96])
    checkin = logical_sampler(RandomCheckIn(64, 8, variant="averaged", rng=0), 4)
    assert (checkin.num_slots, checkin.variant, checkin.max_batch_size) == (2, "averaged", 64)
    with pytest.raises(ParameterError, match="accumulation"):
        logical_sampler(shuffled, 0)
    with pytest.raises(ParameterError, match="physical_steps"):
        accumulation_plan(0, 2)


def test_pnsgd_under_opacus_per_sample_gradients():
    """Opacus clips and noises one example per step, we project; the accountant is configured
    from the same constants and agrees with an offline PNSGD accountant."""
    from dpplugins.accountants import create
    from dpplugins.integrations.opacus import make_private_pnsgd

    register()
    torch.manual_seed(0)
    n = 40
    x = torch.randn(n, 5)
    y = (x[:, 0] > 0).long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=1,
                                         shuffle=True)
    model = torch.nn.Linear(5, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    engine = PrivacyEngine(accountant="pnsgd")
    model, optimizer, loader = make_private_pnsgd(engine, module=model, optimizer=optimizer,
                                                  data_loader=loader, noise_multiplier=3.0,
                                                  max_grad_norm=1.0, diameter=1.0)
    criterion = torch.nn.CrossEntropyLoss()
    for _ in range(2):
        for xb, yb in loader:
            optimizer.zero_grad()
            criterion(model(xb), yb).backward()
            optimizer.step()
            norm = torch.sqrt(sum(torch.sum(p.detach() ** 2) for p in model.parameters()))
            assert float(norm) <= 0.5  # inside the ball after every step
    assert len(engine.accountant) == 2 * n
    from dpplugins.events import PNSGDEvent
    step = PNSGDEvent(n, Fraction(1, n), GaussianEvent(3.0), lipschitz=1.0, diameter=1.0,
                      learning_rate=0.5)
    assert ledger(engine.accountant) == [(step, 2 * n)]
    offline = create("pnsgd", lipschitz=1.0, diameter=1.0, learning_rate=0.5, dataset_size=n)
    offline.step(noise_multiplier=3.0, sample_rate=1 / n, count=2 * n)
    assert engine.get_epsilon(DELTA) == offline.get_epsilon(DELTA)


def test_pnsgd_refuses_a_changed_learning_rate_and_momentum():
    """The step event fixes eta at set-up: a StepLR scheduler (gamma 0.1) drove the rate to
    5e-13 while every step was recorded at 0.5 (epsilon 3.79, where the accountant's own bound
    at eta <= 0.01 is 6.57); momentum, Nesterov, weight decay and maximisation are not the
    analysed algorithm and were accepted.  Both are refused now, before the offending step."""
    from dpplugins.errors import ParameterError
    from dpplugins.integrations.opacus import make_private_pnsgd

    register()
    torch.manual_seed(0)
    n = 8
    data = torch.utils.data.TensorDataset(torch.randn(n, 5), torch.randint(0, 2, (n,)))
    criterion = torch.nn.CrossEntropyLoss()

    def setup(**sgd):
        loader = torch.utils.data.DataLoader(data, batch_size=1, shuffle=True)
        model = torch.nn.Linear(5, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5, **sgd)
        engine = PrivacyEngine(accountant="pnsgd")
        return (engine, *make_private_pnsgd(engine, module=model, optimizer=optimizer,
                                            data_loader=loader, noise_multiplier=3.0,
                                            max_grad_norm=1.0, diameter=1.0))

    for option, value in (("momentum", 0.9), ("weight_decay", 1e-4), ("maximize", True)):
        with pytest.raises(ParameterError, match=f"optimizer {option}"):
            setup(**{option: value})
    engine, model, optimizer, loader = setup()
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.1)
    with pytest.raises(ParameterError, match="lr=0.05.*recorded, 0.5"):
        for xb, yb in loader:
            optimizer.zero_grad()
            criterion(model(xb), yb).backward()
            optimizer.step()
            scheduler.step()
    assert len(engine.accountant) == 2       # the two steps taken at lr 0.5
    engine, model, optimizer, loader = setup()
    optimizer.param_groups[0]["momentum"] = 0.9   # changed after set-up
    xb, yb = next(iter(loader))
    criterion(model(xb), yb).backward()
    with pytest.raises(ParameterError, match="optimizer momentum"):
        optimizer.step()
    assert len(engine.accountant) == 0
    # the clipping norm is the recorded Lipschitz constant: changed after set-up, refused
    engine, model, optimizer, loader = setup()
    optimizer.max_grad_norm = 0.01
    xb, yb = next(iter(loader))
    criterion(model(xb), yb).backward()
    with pytest.raises(ParameterError, match="optimizer.max_grad_norm=0.01"):
        optimizer.step()
    assert len(engine.accountant) == 0


def test_helpers_refuse_bad_input_by_name():
    """Found by a hostile sweep: each of these raised a TypeError, ZeroDivisionError,
    OverflowError or ValueError from inside, or was accepted (epochs=0 calibrated one step)."""
    from dpplugins.errors import ParameterError
    from dpplugins.integrations.opacus import configure, steps_for_epochs

    for epochs, rate, name in ((1, 0, "sample_rate"), (math.inf, 0.1, "epochs"),
                               (0, 0.1, "epochs"), (-1, 0.1, "epochs"),
                               (math.nan, 0.1, "epochs"), (1e308, 1e-10, "epochs")):
        with pytest.raises(ParameterError) as info:
            steps_for_epochs(epochs, rate)
        assert info.value.name == name
    assert steps_for_epochs(1, 1 / 93) == 93
    register()
    engine = PrivacyEngine(accountant="pld")
    with pytest.raises(ParameterError, match="foo=1 .*takes neighbouring, eps_tolerance"):
        configure(engine.accountant, foo=1)
    model, optimizer, loader = tiny_setup()
    with pytest.raises(ParameterError, match="epochs=0"):
        engine.make_private_with_epsilon(module=model, optimizer=optimizer, data_loader=loader,
                                         target_epsilon=3.0, target_delta=DELTA, epochs=0,
                                         max_grad_norm=1.0)
    state = engine.accountant.state_dict()
    for key, value, match in (("options", {"bogus": 1}, "bogus=1"),
                              ("accumulation", "x", "accumulation")):
        bad = dict(state, dpplugins=dict(state["dpplugins"], **{key: value}))
        with pytest.raises(ParameterError, match=match):
            engine.accountant.load_state_dict(bad)
    with pytest.raises(ParameterError, match="accountant_name='bogus'"):
        check_sampler("bogus", loader)


def test_the_trailing_run_is_counted_from_the_new_events_only_and_stays_exact():
    """The steps of the trailing run (the pass position of every optimizer step) were counted
    by flattening the whole ledger at every step: O(steps^2) for a noise schedule (4,000 steps
    took 29 s).  The count is now carried over between steps; it must equal a count over the
    whole ledger after appends, another protocol in between, a replaced ledger and a loaded
    state."""
    from opacus.accountants import create_accountant

    register()
    adapter = create_accountant("shuffle")
    step = shuffled(64, 8)

    def brute(history):
        total = 0
        for event in history:
            for leaf, count in leaves(event):
                same = (isinstance(leaf, ShuffledEpochsEvent)
                        and leaf.protocol_key() == step.protocol_key())
                total = total + leaf.steps * count if same else 0
        return total

    other = NonPrivateEvent()      # (the shuffle accountant takes one protocol per ledger)
    plan = [step.with_event(GaussianEvent(1.0 + i / 10)) for i in range(7)] + [other, other] \
        + [step.with_steps(3), step.with_event(GaussianEvent(2.0))]
    for event in plan:
        adapter.compose(event)
        assert adapter._trailing_run_steps(step) == brute(adapter.history)
    assert adapter._trailing_run_steps(step) == 4
    adapter.history = adapter.history[:5]          # a replaced ledger
    assert adapter._trailing_run_steps(step) == brute(adapter.history) == 5
    fresh = create_accountant("shuffle")
    fresh.load_state_dict(adapter.state_dict())
    fresh.compose(step)
    assert fresh._trailing_run_steps(step) == 6


def test_a_hook_attached_by_hand_warns_that_it_assumes_poisson():
    """An optimizer hook attached without make_private does not know the loader: it records
    Opacus' Poisson reading of the sample rate (as Opacus' own accountants do) and says so,
    once."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    register()
    accountant = create_accountant("pld")
    model = GradSampleModule(torch.nn.Linear(4, 2))
    optimizer = DPOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), noise_multiplier=1.0,
                            max_grad_norm=1.0, expected_batch_size=8)
    optimizer.attach_step_hook(accountant.get_optimizer_hook_fn(sample_rate=8 / 64))
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    with pytest.warns(RuntimeWarning, match="does not know its data loader") as caught:
        for _ in range(3):
            torch.nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
            optimizer.zero_grad()
    assert sum("does not know its data loader" in str(w.message) for w in caught) == 1
    assert ledger(accountant) == [(PoissonSampledEvent(0.125, GaussianEvent(1.0)), 3)]


# -- balls_and_bins (random allocation) --------------------------------------------------------
ALLOCATION_N, ALLOCATION_SLOTS = 32, 16   # about 2 empty slots per pass: noise-only steps


def allocation_step(sigma=1.0, n=ALLOCATION_N, slots=ALLOCATION_SLOTS):
    """One step of RandomCheckIn(n, slots, checkin_probability=1.0, variant="averaged")."""
    return RandomCheckInEvent(n, GaussianEvent(sigma), "averaged", slots,
                              passes=Fraction(1, slots))


def allocation_engine(do_attach=True, seed=5):
    """PrivacyEngine(accountant="balls_and_bins") over our RandomCheckIn(p=1, averaged) loader;
    attach() must not warn for this pairing."""
    from dpplugins.samplers import RandomCheckIn

    sampler = RandomCheckIn(ALLOCATION_N, ALLOCATION_SLOTS, checkin_probability=1.0,
                            variant="averaged", rng=seed)
    engine, model, optimizer, loader = private_with_sampler(sampler, "balls_and_bins",
                                                            do_attach=False)
    if do_attach:
        from dpplugins.integrations.opacus import attach
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            attach(engine, loader)
    return engine, model, optimizer, loader


@pytest.fixture(scope="module")
def allocation_two_epochs_epsilon():
    """The offline accountant on the history of 2 epochs of allocation_engine() at sigma = 1."""
    from dpplugins.accountants import create

    reference = create("balls_and_bins")
    reference.compose(legacy_step(reference, 1.0, 1 / ALLOCATION_SLOTS), 2 * ALLOCATION_SLOTS)
    return reference.get_epsilon(DELTA)


def test_balls_and_bins_training_runs_empty_steps_and_is_below_rdp_on_poisson(
        allocation_two_epochs_epsilon):
    """Real training with random allocation: every example in one step per epoch, empty slots
    run as noise-only steps and are accounted; epsilon equals the offline accountant's and lies
    below Opacus' RDP for a Poisson run with the same sigma and q = 1 / slots."""
    from dpplugins.accountants import create

    engine, model, optimizer, loader = allocation_engine()
    criterion = torch.nn.CrossEntropyLoss()
    sizes, empty_step_moved = [], []
    for _ in range(2):
        for x, y in loader:
            before = [p.detach().clone() for p in model.parameters()]
            optimizer.zero_grad()
            out = model(x)
            (criterion(out, y) if len(y) else out.sum()).backward()
            optimizer.step()
            sizes.append(len(x))
            if len(x) == 0:
                empty_step_moved.append(
                    any(not torch.equal(a, b) for a, b in zip(before, model.parameters())))
    T = ALLOCATION_SLOTS
    assert len(sizes) == 2 * T
    assert sum(sizes[:T]) == sum(sizes[T:]) == ALLOCATION_N  # each example once per epoch
    assert empty_step_moved and all(empty_step_moved)         # noise-only steps were run
    assert ledger(engine.accountant) == [(allocation_step(), 2 * T)]  # ... and accounted
    eps = engine.get_epsilon(DELTA)
    assert eps == allocation_two_epochs_epsilon

    # a Poisson run with the same sigma and sample rate, accounted by Opacus' RDP
    poisson = PrivacyEngine(accountant="rdp")
    model, optimizer, loader = tiny_setup(n=ALLOCATION_N, batch=ALLOCATION_N // T)
    model, optimizer, loader = poisson.make_private(module=model, optimizer=optimizer,
                                                    data_loader=loader, noise_multiplier=1.0,
                                                    max_grad_norm=1.0)
    train_accumulating(model, optimizer, loader, k=1, epochs=2)
    assert poisson.accountant.history == [(1.0, 1 / T, 2 * T)]
    rdp = poisson.get_epsilon(DELTA)
    pld = create("pld")
    pld.history = poisson.accountant.history
    poisson_pld = pld.get_epsilon(DELTA)
    assert eps < poisson_pld < rdp  # sanity: about as private as Poisson (2.27 < 2.80 < 3.34)
    assert eps > 0.5 * poisson_pld


def test_balls_and_bins_checkpoint_resume_equals_uninterrupted(tmp_path,
                                                               allocation_two_epochs_epsilon):
    from dpplugins.integrations.opacus import attach, configure

    path = tmp_path / "ckpt.pt"
    engine, model, optimizer, loader = allocation_engine()
    configure(engine.accountant, eps_tolerance=5e-3)    # a non-default option travels too
    train_accumulating(model, optimizer, loader, k=1, epochs=1)
    state = engine.accountant.state_dict()
    assert state["mechanism"] == "balls_and_bins"
    from dpplugins.events import SelfComposedEvent, from_dict
    assert [from_dict(e) for e in state["history"]] == [
        SelfComposedEvent(allocation_step(), ALLOCATION_SLOTS)]
    engine.save_checkpoint(path=path, module=model, optimizer=optimizer)

    engine, model, optimizer, loader = allocation_engine(do_attach=False, seed=6)
    engine.load_checkpoint(path=path, module=model, optimizer=optimizer)
    attach(engine, loader)
    assert engine.accountant.inner.eps_tolerance == 5e-3
    train_accumulating(model, optimizer, loader, k=1, epochs=1)
    assert ledger(engine.accountant) == [(allocation_step(), 2 * ALLOCATION_SLOTS)]
    # the uninterrupted run's epsilon (previous test: engine == offline accountant)
    assert engine.get_epsilon(DELTA) == allocation_two_epochs_epsilon


def test_balls_and_bins_make_private_with_epsilon_reaches_target():
    """Opacus asks for sigma (1 / len(loader), epochs); our Brent calibration answers."""
    from dpplugins.accountants import create
    from dpplugins.integrations.opacus import attach, make_data_loader
    from dpplugins.samplers import RandomCheckIn

    register()
    model, optimizer, loader = tiny_setup(n=64)
    loader = make_data_loader(loader.dataset, RandomCheckIn(64, 4, checkin_probability=1.0,
                                                            variant="averaged", rng=2))
    engine = PrivacyEngine(accountant="balls_and_bins")
    model, optimizer, loader = engine.make_private_with_epsilon(
        module=model, optimizer=optimizer, data_loader=loader, target_epsilon=4.0,
        target_delta=DELTA, epochs=2, max_grad_norm=1.0, poisson_sampling=False)
    attach(engine, loader)
    train_accumulating(model, optimizer, loader, k=1, epochs=2)
    sigma = optimizer.noise_multiplier
    assert ledger(engine.accountant) == [(allocation_step(sigma, 64, 4), 8)]
    assert engine.get_epsilon(DELTA) <= 4.0
    # close to the smallest sigma that meets the target
    below = create("balls_and_bins")
    below.history = legacy_history(below, [(sigma * 0.99, 1 / 4, 8)])
    assert below.get_epsilon_bounds(DELTA).lower > 4.0


def _mismatch_sampler(kind):
    from dpplugins.samplers import RandomCheckIn, ShuffledEpochs
    return {"shuffled": lambda: ShuffledEpochs(64, 8, rng=0),
            "allocation": lambda: RandomCheckIn(64, 8, variant="averaged", rng=0),
            "p_half": lambda: RandomCheckIn(64, 8, checkin_probability=0.5, variant="averaged",
                                            rng=0),
            "fixed": lambda: RandomCheckIn(64, 8, variant="fixed", rng=0),
            "capped": lambda: RandomCheckIn(64, 8, variant="averaged", max_batch_size=4,
                                            rng=0)}[kind]()


@pytest.mark.parametrize("accountant,kind,match", [
    ("balls_and_bins", "shuffled", r"random allocation .*support it: shuffle$"),
    ("balls_and_bins", "fixed", r"variant='fixed' uses one example .*support it: checkin$"),
    ("balls_and_bins", "capped", r"max_batch_size=4 drops .*support it: checkin$"),
    # a Poisson accountant on our random-allocation sampler: both valid ones are named
    ("pld", "allocation", r"'pld' accountant.*support it: balls_and_bins, checkin$"),
    # averaged check-ins with checkin_probability < 1: random allocation with p < 1
    ("pld", "p_half", r"support it: balls_and_bins$"),
    ("checkin", "p_half", r"checkin_probability=1 for variant='averaged'"),
])
def test_sampler_mismatch_is_refused_at_make_private_naming_the_valid_accountants(
        accountant, kind, match):
    with pytest.raises(UnsupportedEventError, match=match):
        private_with_sampler(_mismatch_sampler(kind), accountant, do_attach=False)


def test_opacus_accountant_on_our_sampler_warns_once_naming_the_valid_accountants():
    from dpplugins.integrations.opacus import attach

    with pytest.warns(UserWarning) as record:
        engine, model, optimizer, loader = private_with_sampler(
            _mismatch_sampler("allocation"), "rdp", do_attach=False)
    ours = [str(w.message) for w in record if "is not valid for" in str(w.message)]
    assert len(ours) == 1 and re.search(r"Valid: balls_and_bins, checkin$", ours[0])
    assert "accountant 'rdp'" in ours[0]
    with pytest.warns(UserWarning, match="Valid: balls_and_bins, checkin$"):
        attach(engine, loader)   # the re-check says the same


def test_balls_and_bins_with_a_poisson_loader_raises():
    register()
    engine = PrivacyEngine(accountant="balls_and_bins")
    model, optimizer, loader = tiny_setup()
    with pytest.raises(ValueError, match=r"poisson_sampling=False.*support it: .*pld"):
        make_private(engine, model, optimizer, loader, poisson_sampling=True)  # Poisson


def test_attach_refuses_a_loader_other_than_the_one_make_private_returned():
    """make_private saw 8 slots, attach() gets a loader with 4: refused, instead of accounting
    a protocol the training does not run."""
    from dpplugins.errors import ParameterError
    from dpplugins.integrations.opacus import attach, make_data_loader
    from dpplugins.samplers import RandomCheckIn

    engine, model, optimizer, loader = private_with_sampler(_mismatch_sampler("allocation"),
                                                            "balls_and_bins", do_attach=False)
    other = make_data_loader(loader.dataset, RandomCheckIn(64, 4, variant="averaged", rng=1))
    with pytest.raises(ParameterError, match=r"data_loader=.*the loader make_private returned"):
        attach(engine, other)   # a valid sampler, but not the one make_private saw
    attach(engine, loader)      # the right one: a no-op re-check
    assert engine.accountant.history == []


def test_balls_and_bins_training_without_attach_is_accounted():
    """The loader is known from make_private: no attach(), no warning, the right events."""
    engine, model, optimizer, loader = allocation_engine(do_attach=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", message=".*Full backward hook.*")
        train_accumulating(model, optimizer, loader, k=1, epochs=1)
    assert ledger(engine.accountant) == [(allocation_step(), ALLOCATION_SLOTS)]


def test_gradient_accumulation_with_balls_and_bins_is_allocation_into_merged_slots():
    """k = 2 of 8 slots per optimizer step: each example in exactly one of 4 merged steps, all
    of them summed -- random allocation with t = 4."""
    from dpplugins.accountants import create

    engine, model, optimizer, loader = private_with_sampler(_mismatch_sampler("allocation"),
                                                            "balls_and_bins")
    sizes = train_accumulating(model, optimizer, loader, k=2, epochs=2)
    assert len(sizes) == 8 and sum(sizes[:4]) == sum(sizes[4:]) == 64
    merged = RandomCheckInEvent(64, GaussianEvent(1.0), "averaged", 4, None, 1.0,
                                max_batch_size=64, passes=Fraction(1, 4))   # 64 = no cap
    assert ledger(engine.accountant) == [(merged, 8)]
    reference = create("balls_and_bins")
    reference.compose(legacy_step(reference, 1.0, 1 / 4), 8)
    assert engine.get_epsilon(DELTA) == reference.get_epsilon(DELTA)
    physical = create("balls_and_bins")
    physical.compose(legacy_step(physical, 1.0, 1 / 8), 16)
    assert physical.get_epsilon(DELTA) < engine.get_epsilon(DELTA)  # the test can tell them


# -- Poisson sampling with gradient accumulation -------------------------------------------------
def poisson_accumulating_engine(accountant):
    """A Poisson DPDataLoader passed with poisson_sampling=False: the one way Opacus lets
    Poisson batches be accumulated (make_private(poisson_sampling=True) forbids it)."""
    from opacus.data_loader import DPDataLoader

    register()
    model, optimizer, loader = tiny_setup(n=256, batch=32)
    loader = DPDataLoader.from_data_loader(loader)   # q = 1/8
    engine = PrivacyEngine(accountant=accountant)
    model, optimizer, loader = make_private(engine, model, optimizer, loader)
    return engine, model, optimizer, loader


def test_poisson_accumulation_is_recorded_as_k_steps_with_sigma_over_sqrt_k():
    from dpplugins.accountants import create
    from dpplugins.integrations.opacus import attach, poisson_accumulation_noise

    engine, model, optimizer, loader = poisson_accumulating_engine("pld")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attach(engine, loader, optimizer=optimizer)   # pld is valid for Poisson: no warning
    train_accumulating(model, optimizer, loader, k=2, epochs=1)   # 4 steps of 2 batches
    sigma_k = poisson_accumulation_noise(1.0, 2)
    assert sigma_k <= 2 ** -0.5 and sigma_k == pytest.approx(2 ** -0.5, rel=1e-15)
    # not Opacus' (1.0, 2/8, 4)
    assert ledger(engine.accountant) == [(PoissonSampledEvent(1 / 8, GaussianEvent(sigma_k)), 8)]
    reference = create("pld")
    reference.history = [(sigma_k, 1 / 8, 8)]
    assert engine.get_epsilon(DELTA) == reference.get_epsilon(DELTA)


def merged_poisson_step_delta(sigma, q, k, epsilon):
    """delta(eps) of one optimizer step over k accumulated Poisson(q) batches when one example's
    gradient (norm C = 1) is in m ~ Binomial(k, q) of them: the pair
    (sum_m Bin(m; k, q) N(m, sigma^2), N(0, sigma^2)), both directions, by adaptive quadrature.
    One pair of neighbouring datasets, so a lower bound on the step's true delta(eps)."""
    from conftest import hockey_stick_by_quadrature
    from scipy import stats

    m = np.arange(k + 1)
    weights = stats.binom.pmf(m, k, q)
    with_example = lambda x: float(np.sum(weights * stats.norm.pdf(x, loc=m, scale=sigma)))
    without = lambda x: float(stats.norm.pdf(x, scale=sigma))
    lo, hi = -12 * sigma, k + 12 * sigma
    return max(hockey_stick_by_quadrature(with_example, without, epsilon, lo, hi, list(m)),
               hockey_stick_by_quadrature(without, with_example, epsilon, lo, hi, list(m)))


@pytest.mark.parametrize("k", [2, 4])
def test_poisson_accumulation_bound_is_above_the_merged_step_by_quadrature(k):
    """Ours (k steps at sigma / sqrt(k)) >= the quadrature lower reference of the merged step;
    Opacus' convention (one step at rate k q) falls below it (sigma=1, q=0.1, k=4, eps=2:
    reference 0.0071, ours 0.032, Opacus' convention 0.0010)."""
    from dpplugins.accountants import create
    from dpplugins.integrations.opacus import poisson_accumulation_noise

    sigma, q = 1.0, 0.1
    ours = create("pld")
    ours.history = [(poisson_accumulation_noise(sigma, k), q, k)]
    opacus_convention = create("pld")
    opacus_convention.history = [(sigma, k * q, 1)]
    for epsilon in (0.5, 1.0, 2.0):
        reference = merged_poisson_step_delta(sigma, q, k, epsilon)
        assert ours.get_delta_bounds(epsilon).upper >= reference
    assert opacus_convention.get_delta_bounds(2.0).upper < reference  # under-reports


def test_opacus_accountant_with_accumulated_poisson_batches_warns_once_naming_pld():
    from dpplugins.integrations.opacus import attach

    engine, model, optimizer, loader = poisson_accumulating_engine("rdp")  # watches already
    attach(engine, loader, optimizer=optimizer)
    attach(engine, loader, optimizer=optimizer)   # idempotent: one watcher
    with pytest.warns(UserWarning) as record:
        train_accumulating(model, optimizer, loader, k=2, epochs=2)
    ours = [str(w.message) for w in record if "accumulated Poisson batches" in str(w.message)]
    assert len(ours) == 1 and "accountant='pld'" in ours[0] and "'rdp'" in ours[0]
    # Opacus' own accountant is left as it is: one step at 2 q per optimizer step
    assert engine.accountant.history == [(1.0, 2 / 8, 8)]


def test_steps_for_epochs_never_undercounts():
    """Opacus' int(epochs / q) gives 92 for one epoch of 93 steps; calibration must use 93."""
    from dpplugins.integrations.opacus import steps_for_epochs

    assert int(1 / (1 / 93)) == 92
    assert steps_for_epochs(1, 1 / 93) == 93 and steps_for_epochs(2, 1 / 8) == 16
    assert steps_for_epochs(0.5, 1 / 7) == 4   # a partial epoch is counted in full
    register()
    by_epochs = get_noise_multiplier(target_epsilon=3.0, target_delta=DELTA, sample_rate=1 / 93,
                                     epochs=1, accountant="fdp")
    by_steps = [get_noise_multiplier(target_epsilon=3.0, target_delta=DELTA,
                                     sample_rate=1 / 93, steps=s, accountant="fdp")
                for s in (92, 93)]
    assert by_epochs == by_steps[1] != by_steps[0]
    from dpplugins.calibration import find_noise_multiplier   # ours answered, not Opacus' search
    assert by_steps[1] == find_noise_multiplier(target_epsilon=3.0, delta=DELTA,
                                                sample_rate=1 / 93, steps=93, accountant="fdp")


def test_a_state_without_its_relation_is_refused():
    """From hostile sweeps: a state whose options were {} re-created the adapter's accountant
    with its defaults (replace_one became add_remove: epsilon 2.84 -> 1.83 for the same
    ledger); keeping the adapter's own options instead gave the saved events whatever relation
    the loading adapter had.  The events do not carry it: refused, the ledger untouched."""
    from dpplugins.errors import ParameterError
    from dpplugins.integrations.opacus import configure

    register()
    saved = create_accountant("pld")
    configure(saved, neighbouring="replace_one")
    saved.history = [(1.0, 0.01, 1000)]
    state = saved.state_dict()
    for options in ({}, None):
        state["dpplugins"]["options"] = options
        loaded = create_accountant("pld")
        configure(loaded, neighbouring="replace_one")
        with pytest.raises(ParameterError, match="'neighbouring' relation"):
            loaded.load_state_dict(state)
        assert loaded.history == []
    state["dpplugins"]["options"] = saved.inner.options()
    loaded = create_accountant("pld")
    loaded.load_state_dict(state)
    assert loaded.get_epsilon(1e-5) == saved.get_epsilon(1e-5)
    # an empty or version-0.1 history without the relation keeps this adapter's (a review:
    # {} re-created the accountant with its defaults, replace_one -> add_remove, 2.84 -> 1.83)
    for history in ([], [(1.0, 0.01, 1000)]):
        for options in ({}, {"eps_tolerance": 1e-3}):
            target = create_accountant("pld")
            configure(target, neighbouring="replace_one")
            target.load_state_dict({"history": history, "mechanism": "pld",
                                    "dpplugins": {"options": options}})
            assert target.inner.options()["neighbouring"] == "replace_one"
    assert target.get_epsilon(1e-5) == pytest.approx(saved.get_epsilon(1e-5), rel=1e-12)


def test_a_copied_adapter_has_its_own_ledger():
    """A review: copy.copy of the Opacus adapter shared the inner accountant, so a what-if
    step composed into the copy was in the original's epsilon (0.199 -> 0.718)."""
    import copy

    register()
    original = create_accountant("pld")
    original.history = [(1.0, 0.01, 1)]
    before = original.get_epsilon(1e-5)
    what_if = copy.copy(original)
    what_if.history = [(1.0, 0.01, 100)]
    assert original.get_epsilon(1e-5) == before and what_if.inner is not original.inner
    assert len(original) == 1 and len(what_if) == 100


@pytest.mark.parametrize("change", [
    {"dpplugins": [1]}, {"dpplugins": "x"}, {"dpplugins": {"options": [1, 2]}},
    {"history": 5}, {"history": [5]}, {"history": [None]},
])
def test_hostile_adapter_states_are_parameter_errors(change):
    """From a hostile sweep: these raised AttributeError or TypeError."""
    from dpplugins.errors import ParameterError

    register()
    acc = create_accountant("pld")
    acc.step(noise_multiplier=1.0, sample_rate=0.01)
    state = {**acc.state_dict(), **change}
    with pytest.raises(ParameterError):
        create_accountant("pld").load_state_dict(state)


@pytest.mark.parametrize("norm", [float("nan"), float("inf"), 0.0, -1.0, [1.0, float("nan")], []])
def test_a_bad_clipping_norm_is_refused_at_make_private(norm):
    """NaN was accepted at set-up; the first step then failed with a NumericalError that named
    neither max_grad_norm nor its value (a hostile sweep)."""
    from dpplugins.errors import ParameterError

    register()
    model, optimizer, loader = tiny_setup(n=64, batch=8)
    engine = PrivacyEngine(accountant="pld")
    with pytest.raises(ParameterError, match=r"max_grad_norm(\[1\])?="):
        engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                            noise_multiplier=1.0, max_grad_norm=norm, poisson_sampling=True,
                            **({"clipping": "per_layer"} if isinstance(norm, list) else {}))
    # a one-element tensor is read as its number, as Opacus reads it
    model, optimizer, loader = tiny_setup(n=64, batch=8)
    engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                        noise_multiplier=1.0, max_grad_norm=torch.tensor(1.0),
                        poisson_sampling=True)


def test_a_poisson_sample_rate_changed_in_place_is_refused():
    """A hostile sweep: ``loader.batch_sampler.sample_rate = 0.5`` after make_private at rate
    1/8 (64 examples, batches of 8) trained 2 epochs at 0.5, accounted as 16 steps at 1/8.  The
    first batch drawn at the new rate is refused before it is trained; the ledger keeps the
    steps that ran at the rate make_private read."""
    from dpplugins.errors import ParameterError

    register()
    model, optimizer, loader = tiny_setup(n=64, batch=8)
    engine = PrivacyEngine(accountant="pld")
    model, optimizer, loader = make_private(engine, model, optimizer, loader,
                                            poisson_sampling=True)
    criterion = torch.nn.CrossEntropyLoss()

    def train_steps():
        for x, y in loader:
            optimizer.zero_grad()
            if len(y):
                criterion(model(x), y).backward()
            optimizer.step()

    train_steps()
    assert ledger(engine.accountant) == [(PoissonSampledEvent(1 / 8, GaussianEvent(1.0)), 8)]
    loader.batch_sampler.sample_rate = 0.5
    with pytest.raises(ParameterError, match="sample_rate=0.5"):
        train_steps()
    assert len(engine.accountant) == 8
    loader.batch_sampler.sample_rate = 1 / 8   # back to the rate make_private read
    train_steps()
    assert len(engine.accountant) == 16
