"""Real Opacus training (a few steps, CPU) with our accountants registered by name."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")

from opacus import PrivacyEngine  # noqa: E402
from opacus.accountants import RDPAccountant, create_accountant  # noqa: E402
from opacus.accountants.utils import get_noise_multiplier  # noqa: F401,E402

from dpplugins.integrations.opacus import check_sampler, register  # noqa: E402

DELTA = 1e-5


def tiny_setup(n=256, batch=32, seed=0):
    torch.manual_seed(seed)
    x = torch.randn(n, 8)
    y = (x[:, 0] > 0).long()
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=batch)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return model, optimizer, loader


def shuffled_shuffle_setup(n, batch=32):
    """Our ShuffledEpochs sampler + PrivacyEngine(accountant="shuffle") + attach()."""
    from dpplugins.integrations.opacus import attach, make_data_loader
    from dpplugins.samplers import ShuffledEpochs

    register()
    model, optimizer, loader = tiny_setup(n=n)
    loader = make_data_loader(loader.dataset, ShuffledEpochs(n, batch, rng=0))
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer,
                                                   data_loader=loader, noise_multiplier=1.0,
                                                   max_grad_norm=1.0, poisson_sampling=False)
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
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer,
                                                   data_loader=loader, noise_multiplier=1.0,
                                                   max_grad_norm=1.0)
    train(model, optimizer, loader, epochs=2)
    eps = engine.get_epsilon(DELTA)
    history = engine.accountant.history
    assert len(engine.accountant) == sum(h[2] for h in history) > 0
    rdp = RDPAccountant()
    rdp.history = list(history)
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


def test_poisson_accountant_on_a_shuffling_loader_warns():
    register()
    engine = PrivacyEngine(accountant="pld")
    model, optimizer, loader = tiny_setup()
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer,
                                                   data_loader=loader, noise_multiplier=1.0,
                                                   max_grad_norm=1.0, poisson_sampling=False)
    with pytest.warns(UserWarning, match="not valid"):
        check_sampler("pld", loader)


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
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer,
                                                   data_loader=loader, noise_multiplier=1.0,
                                                   max_grad_norm=1.0, poisson_sampling=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # valid pairing: no warning
        attach(engine, loader)
    train(model, optimizer, loader, epochs=2)
    assert engine.accountant.history == [(1.0, 1 / 7, 14)]  # ceil(200/32) = 7 steps per epoch
    reference = create("shuffle", batch_size=32, dataset_size=200)
    reference.step(noise_multiplier=1.0, sample_rate=1 / 7, count=14)
    assert engine.get_epsilon(DELTA) == reference.get_epsilon(DELTA)


def test_shuffle_accountant_without_protocol_says_what_to_call():
    register()
    acc = create_accountant("shuffle")
    acc.step(noise_multiplier=1.0, sample_rate=0.1)
    with pytest.raises(ValueError, match="attach"):
        acc.get_epsilon(DELTA)


def test_checkin_sampler_trains_through_empty_batches():
    from dpplugins.integrations.opacus import make_data_loader
    from dpplugins.samplers import RandomCheckIn

    register()
    model, optimizer, loader = tiny_setup(n=64)
    sampler = RandomCheckIn(64, 32, checkin_probability=0.3, variant="fixed", rng=1)
    loader = make_data_loader(loader.dataset, sampler)
    engine = PrivacyEngine(accountant="rdp")
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer,
                                                   data_loader=loader, noise_multiplier=1.0,
                                                   max_grad_norm=1.0, poisson_sampling=False)
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
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer,
                                                   data_loader=loader, noise_multiplier=1.0,
                                                   max_grad_norm=1.0)
    with pytest.raises(ValueError, match="pld"):
        check_sampler("checkin", loader)


def test_shuffle_flag_alone_with_a_plain_shuffling_loader():
    """PrivacyEngine(accountant="shuffle") + poisson_sampling=False and nothing else: the batch
    size comes from the optimizer; the result equals the no-amplification Gaussian bound."""
    from conftest import epsilon_from_delta_curve, gaussian_delta_exact

    register()
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer, loader = tiny_setup(n=256, batch=32)
    model, optimizer, loader = engine.make_private(module=model, optimizer=optimizer,
                                                   data_loader=loader, noise_multiplier=2.0,
                                                   max_grad_norm=1.0, poisson_sampling=False)
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


def test_gradient_accumulation_with_shuffled_sampler_is_refused_clearly():
    """Accumulating 2 physical batches per step doubles the logical batch; the shuffle accountant
    configured for the physical batch refuses the resulting history instead of mis-accounting."""
    from dpplugins.errors import ParameterError

    engine, model, optimizer, loader = shuffled_shuffle_setup(256)
    criterion = torch.nn.CrossEntropyLoss()
    for i, (x, y) in enumerate(loader):
        criterion(model(x), y).backward()
        if i % 2 == 1:
            optimizer.step()
            optimizer.zero_grad()
    assert engine.accountant.history == [(1.0, 0.25, 4)]  # Opacus: rate * accumulated iterations
    with pytest.raises(ParameterError, match="sample_rate"):
        engine.get_epsilon(DELTA)


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
    offline = create("pnsgd", lipschitz=1.0, diameter=1.0, learning_rate=0.5, dataset_size=n)
    offline.step(noise_multiplier=3.0, sample_rate=1 / n, count=2 * n)
    assert engine.get_epsilon(DELTA) == offline.get_epsilon(DELTA)
