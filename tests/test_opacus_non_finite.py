"""An example whose gradient is not finite, in real Opacus training with our accountants.

Opacus clips with ``C / (norm + 1e-6)``: for an infinite or NaN per-example norm the update
becomes NaN, and NaN appears only when that example is in the batch.  With our accountants the
example counts as zero (a valid clipped value).  The expected parameters are computed here with
plain autograd, one example at a time (no Opacus, no dpplugins), and clipped by hand.
"""

import types
import warnings

import pytest

torch = pytest.importorskip("torch")
opacus = pytest.importorskip("opacus")

from opacus import PrivacyEngine  # noqa: E402

from dpplugins.errors import NumericalError  # noqa: E402
from dpplugins.integrations.opacus import register, zero_non_finite_examples  # noqa: E402

INF, NAN = float("inf"), float("nan")
CLIP, LR = 1.0, 0.1


def data(bad):
    """Five examples of a regression; ``bad`` replaces the second example's first input."""
    x = torch.tensor([[1.0, 2.0], [bad, 0.0], [0.5, 0.5], [1.0, -1.0], [3.0, 1.0]])
    y = torch.tensor([[1.0], [0.0], [1.0], [0.0], [2.0]])
    return x, y


def clipped_sum(model, x, y):
    """Sum over the finite examples of their gradients clipped to norm CLIP, by plain autograd
    on a copy of ``model``, one example at a time; a non-finite example adds nothing."""
    total = [torch.zeros_like(p) for p in model.parameters()]
    for i in range(len(x)):
        model.zero_grad()
        torch.nn.functional.mse_loss(model(x[i:i + 1]), y[i:i + 1]).backward()
        grads = [p.grad.detach().clone() for p in model.parameters()]
        if not all(bool(torch.isfinite(g).all()) for g in grads):
            continue
        norm = torch.sqrt(sum((g ** 2).sum() for g in grads))
        factor = min(1.0, CLIP / (float(norm) + 1e-6))
        total = [t + factor * g for t, g in zip(total, grads)]
    return total


def private(accountant, x, y, noise, max_grad_norm=CLIP, **options):
    register()
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    start = [p.detach().clone() for p in model.parameters()]
    reference = torch.nn.Linear(2, 1)
    reference.load_state_dict(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y),
                                         batch_size=len(x))
    engine = PrivacyEngine(accountant=accountant)
    made = engine.make_private(module=model, optimizer=optimizer, data_loader=loader,
                               noise_multiplier=noise, max_grad_norm=max_grad_norm,
                               poisson_sampling=True, **options)
    return engine, made, start, reference


@pytest.mark.parametrize("bad", [INF, NAN])
def test_a_diverged_example_counts_as_zero_and_the_update_is_the_others_clipped_sum(bad):
    x, y = data(bad)
    engine, (model, optimizer, loader), start, reference = private("pld", x, y, 0.0)
    with pytest.warns(RuntimeWarning, match="1 example"):
        optimizer.zero_grad()
        # sample rate 1: the Poisson batch is the whole data, in order
        (xb, yb), = loader
        assert torch.allclose(xb, x, equal_nan=True)
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
    expected = [s - LR * g / len(x) for s, g in zip(start, clipped_sum(reference, x, y))]
    for p, e in zip(model.parameters(), expected):
        assert torch.allclose(p.detach(), e, rtol=1e-5, atol=1e-6), (p, e)


def test_accumulated_batches_zero_the_diverged_example_of_the_batch_it_is_in():
    """Two batches of a fixed order, one optimizer step (Opacus keeps ``grad_sample`` as a list
    of the two batches); the shuffle accountant takes the step as one batch of 10."""
    register()
    clean_x, clean_y = data(0.25)
    x, y = data(INF)
    torch.manual_seed(0)
    model = torch.nn.Linear(2, 1)
    start = [p.detach().clone() for p in model.parameters()]
    reference = torch.nn.Linear(2, 1)
    reference.load_state_dict(model.state_dict())
    loader = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.cat([clean_x, x]), torch.cat([clean_y, y])),
        batch_size=len(x))
    engine = PrivacyEngine(accountant="shuffle")
    model, optimizer, loader = engine.make_private(
        module=model, optimizer=torch.optim.SGD(model.parameters(), lr=LR), data_loader=loader,
        noise_multiplier=0.0, max_grad_norm=CLIP, poisson_sampling=False)
    optimizer.zero_grad()
    with pytest.warns(RuntimeWarning, match="1 example"):
        for xb, yb in loader:   # both batches, then one optimizer step
            torch.nn.functional.mse_loss(model(xb), yb).backward()
        assert isinstance(next(model.parameters()).grad_sample, list)
        optimizer.step()
    summed = [a + b for a, b in zip(clipped_sum(reference, clean_x, clean_y),
                                    clipped_sum(reference, x, y))]
    expected = [s - LR * g / (2 * len(x)) for s, g in zip(start, summed)]
    for p, e in zip(model.parameters(), expected):
        assert torch.allclose(p.detach(), e, rtol=1e-5, atol=1e-6), (p, e)
    assert engine.accountant.inner.steps == 1


ADAPTIVE = {"clipping": "adaptive", "target_unclipped_quantile": 0.5,
            "clipbound_learning_rate": 0.2, "max_clipbound": 10.0, "min_clipbound": 0.1,
            "unclipped_num_std": 1.0}


@pytest.mark.parametrize("options", [{}, {"clipping": "per_layer", "max_grad_norm": [1.0, 1.0]},
                                     ADAPTIVE], ids=["flat", "per_layer", "adaptive"])
def test_with_noise_the_released_model_stays_finite(options):
    x, y = data(INF)
    engine, (model, optimizer, loader), start, reference = private("pld", x, y, 1.0, **options)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(3):
            for xb, yb in loader:
                optimizer.zero_grad()
                torch.nn.functional.mse_loss(model(xb), yb).backward()
                optimizer.step()
    assert all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert engine.get_epsilon(1e-5) > 0


def test_ghost_clipping_refuses_the_step_before_noise_is_drawn():
    x, y = data(INF)
    criterion = torch.nn.MSELoss()
    engine, (model, optimizer, criterion, loader), start, reference = private(
        "pld", x, y, 1.0, grad_sample_mode="ghost", criterion=criterion)
    optimizer.zero_grad()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # Opacus' own hook warnings
        criterion(model(x), y).backward()
    with pytest.raises(NumericalError, match="grad_sample_mode='hooks'"):
        optimizer.step()
    for p, s in zip(model.parameters(), start):
        assert torch.equal(p.detach(), s)
    assert engine.accountant.inner.steps == 0


def fake(*samples):
    return [types.SimpleNamespace(grad_sample=s) for s in samples]


def test_zero_non_finite_examples_zeros_whole_rows_across_parameters_and_batches():
    a = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    b = [torch.tensor([1.0, INF]), torch.tensor([2.0])]     # a list: two accumulated batches
    c = torch.tensor([[[1.0]], [[2.0]], [[NAN]]])
    params = fake(a, b, c)
    assert zero_non_finite_examples(params) == 2
    assert params[0].grad_sample.tolist() == [[1.0, 2.0], [0.0, 0.0], [0.0, 0.0]]
    assert [t.tolist() for t in params[1].grad_sample] == [[1.0, 0.0], [0.0]]
    assert params[2].grad_sample.tolist() == [[[1.0]], [[0.0]], [[0.0]]]
    # finite rows: nothing changes, the very tensors are kept
    clean = fake(torch.ones(4, 3), torch.ones(4))
    before = [p.grad_sample for p in clean]
    assert zero_non_finite_examples(clean) == 0
    assert all(p.grad_sample is t for p, t in zip(clean, before))
    # an empty batch and a parameter without per-example gradients
    assert zero_non_finite_examples(fake(torch.zeros(0, 3), None, [])) == 0


def test_zero_non_finite_examples_leaves_processed_batches_to_opacus():
    processed = torch.tensor([[INF]])
    processed._processed = True
    params = fake(processed)
    assert zero_non_finite_examples(params) == 0
    assert params[0].grad_sample is processed


def test_a_skipped_physical_batch_keeps_its_sum_when_the_next_one_is_undone():
    """Opacus' BatchMemoryManager pattern: a physical batch clipped and summed, its step skipped
    (``signal_skip_step``), then the rest of the logical batch, which holds the diverged example:
    the first batch's clipped sum is kept, the diverged example counts as zero."""
    clean_x, clean_y = data(0.25)
    x, y = data(INF)
    engine, (model, optimizer, loader), start, reference = private("pld", x, y, 0.0)
    (xb, yb), = loader                    # the logical batch (sample rate 1: all of x, y)
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(clean_x), clean_y).backward()
    optimizer.signal_skip_step(do_skip=True)
    optimizer.step()                      # clipped and summed, no release
    optimizer.zero_grad()                 # keeps the summed gradients of a skipped step
    with pytest.warns(RuntimeWarning, match="1 example"):
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
    summed = [a + b for a, b in zip(clipped_sum(reference, clean_x, clean_y),
                                    clipped_sum(reference, x, y))]
    expected = [s - LR * g / len(x) for s, g in zip(start, summed)]
    for p, e in zip(model.parameters(), expected):
        assert torch.allclose(p.detach(), e, rtol=1e-5, atol=1e-6), (p, e)


def test_attach_installs_the_guard_on_an_optimizer_made_without_make_private():
    from opacus import GradSampleModule
    from opacus.data_loader import DPDataLoader
    from opacus.optimizers import DPOptimizer

    from dpplugins.integrations.opacus import attach

    register()
    x, y = data(NAN)
    loader = DPDataLoader.from_data_loader(
        torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=len(x)))
    engine = PrivacyEngine(accountant="pld")
    torch.manual_seed(0)
    reference = torch.nn.Linear(2, 1)
    model = GradSampleModule(torch.nn.Linear(2, 1))
    model._module.load_state_dict(reference.state_dict())
    start = [p.detach().clone() for p in reference.parameters()]
    optimizer = DPOptimizer(torch.optim.SGD(model.parameters(), lr=LR), noise_multiplier=0.0,
                            max_grad_norm=CLIP, expected_batch_size=len(x))
    optimizer.attach_step_hook(engine.accountant.get_optimizer_hook_fn(sample_rate=1.0))
    attach(engine, loader, optimizer)
    with pytest.warns(RuntimeWarning, match="1 example"):
        for xb, yb in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            optimizer.step()
    assert len(engine.accountant) == 1
    expected = [s - LR * g / len(x) for s, g in zip(start, clipped_sum(reference, x, y))]
    for p, e in zip(model.parameters(), expected):
        assert torch.allclose(p.detach(), e, rtol=1e-5, atol=1e-6), (p, e)
