"""ProjectedNoisySGD (integrations/pnsgd.py) against a hand-written numpy PNSGD step, and the
breast-cancer example end to end.

Independent references: the update is recomputed in numpy from its definition (clip to L ->
add N(0, (sigma L)^2) -> step -> project onto the ball of radius D/2), with the noise drawn from a
second torch.Generator seeded identically (so only the draws, not the arithmetic, come from
torch); the ball constraint is checked by recomputing the norm; the accountant's history is
compared with the number of calls.
"""

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from dpplugins.accountants.pnsgd import PNSGDAccountant  # noqa: E402
from dpplugins.errors import ParameterError  # noqa: E402
from dpplugins.integrations.pnsgd import (ProjectedNoisySGD, make_pnsgd_accountant,  # noqa: E402
                                          project_onto_ball, shuffled_order)

ROOT = Path(__file__).resolve().parents[1]
SHAPES = [(3, 2), (2,)]


def numpy_pnsgd_step(weights, grads, noises, *, lr, sigma, clip, diameter):
    """One PNSGD step from its definition, all parameters as one vector."""
    w = np.concatenate([a.ravel() for a in weights])
    g = np.concatenate([a.ravel() for a in grads])
    z = np.concatenate([a.ravel() for a in noises])
    norm = np.sqrt(np.sum(g ** 2))
    if norm > clip:
        g = g * (clip / norm)
    w = w - lr * (g + sigma * clip * z)
    radius = diameter / 2
    if np.linalg.norm(w) > radius:
        w = w * (radius / np.linalg.norm(w))
    out, start = [], 0
    for a in weights:
        out.append(w[start:start + a.size].reshape(a.shape))
        start += a.size
    return out


@pytest.mark.parametrize("lr, grad_scale, diameter", [
    (0.3, 5.0, 1.5),     # clipping and projection both active
    (0.01, 0.05, 50.0),  # neither active
    (0.2, 0.05, 1.0),    # projection only
])
def test_update_matches_numpy_clip_noise_step_project(lr, grad_scale, diameter):
    rng = np.random.default_rng(7)
    sigma, clip = 1.3, 0.8
    weights = [rng.normal(size=s) * 0.2 for s in SHAPES]
    params = [torch.tensor(w, requires_grad=True) for w in weights]
    opt = ProjectedNoisySGD(params, lr=lr, noise_multiplier=sigma, max_grad_norm=clip,
                            diameter=diameter, generator=torch.Generator().manual_seed(11))
    replay = torch.Generator().manual_seed(11)
    for _ in range(4):
        grads = [rng.normal(size=s) * grad_scale for s in SHAPES]
        for p, g in zip(params, grads):
            p.grad = torch.tensor(g)
        noises = [torch.randn(s, generator=replay, dtype=torch.float64).numpy() for s in SHAPES]
        weights = numpy_pnsgd_step(weights, grads, noises, lr=lr, sigma=sigma, clip=clip,
                                   diameter=diameter)
        opt.step()
        for p, w in zip(params, weights):
            np.testing.assert_allclose(p.detach().numpy(), w, rtol=1e-12, atol=1e-14)


def test_noise_has_the_stated_standard_deviation():
    # zero gradient, no projection: w_T - w_0 = -lr * sigma * L * (sum of T standard normals)
    w = torch.zeros(20_000, dtype=torch.float64, requires_grad=True)
    opt = ProjectedNoisySGD([w], lr=0.5, noise_multiplier=3.0, max_grad_norm=2.0, diameter=1e9,
                            generator=torch.Generator().manual_seed(0))
    w.grad = torch.zeros_like(w)
    opt.step()
    std = float(w.detach().std())
    expected = 0.5 * 3.0 * 2.0
    # sample std of 20000 normals: relative standard error 1/sqrt(2 * 20000) = 0.5 %
    assert abs(std / expected - 1) < 0.03


def test_iterate_stays_inside_the_ball_even_for_a_large_step():
    torch.manual_seed(0)
    params = [torch.zeros(s, dtype=torch.float32, requires_grad=True) for s in SHAPES]
    radius = 0.75
    opt = ProjectedNoisySGD(params, lr=10.0, noise_multiplier=1.0, max_grad_norm=1.0,
                            diameter=2 * radius, generator=torch.Generator().manual_seed(3))
    for _ in range(200):
        for p in params:
            p.grad = torch.randn(p.shape) * 10
        opt.step()
        norm = math.sqrt(sum(float(torch.sum(p.detach().double() ** 2)) for p in params))
        assert norm <= radius
        assert norm > 0.99 * radius  # the step would leave the ball: the projection acted


def test_accountant_records_one_step_per_call_with_rate_one_over_n():
    w = torch.zeros(3, requires_grad=True)
    opt = ProjectedNoisySGD([w], lr=0.1, noise_multiplier=2.0, max_grad_norm=1.0, diameter=2.0)
    accountant = make_pnsgd_accountant(opt, dataset_size=40)
    assert opt.accountant is accountant
    for calls in range(1, 101):
        w.grad = torch.ones(3)
        opt.step()
        assert len(accountant) == calls
    # the PNSGD step of these constants, written out: one record of 40 per step, 100 steps
    from fractions import Fraction

    from dpplugins.events import GaussianEvent, PNSGDEvent, SelfComposedEvent
    step = PNSGDEvent(40, Fraction(1, 40), GaussianEvent(2.0), lipschitz=1.0, diameter=2.0,
                      learning_rate=0.1)
    assert accountant.history == [SelfComposedEvent(step, 100)]


def test_make_pnsgd_accountant_copies_the_optimizer_constants():
    opt = ProjectedNoisySGD([torch.zeros(2, requires_grad=True)], lr=0.37,
                            noise_multiplier=1.5, max_grad_norm=0.6, diameter=3.2)
    acc = make_pnsgd_accountant(opt, dataset_size=123, variant="online", smoothness=1.0,
                                attach=False)
    assert isinstance(acc, PNSGDAccountant)
    assert (acc.lipschitz, acc.diameter, acc.learning_rate) == (0.6, 3.2, 0.37)
    assert (acc.dataset_size, acc.variant, acc.smoothness, acc.noise) == (
        123, "online", 1.0, "gaussian")
    assert opt.accountant is None
    # the accountant's precondition eta <= 2/beta is enforced through the optimizer's lr
    with pytest.raises(ParameterError) as info:
        make_pnsgd_accountant(opt, dataset_size=10, smoothness=10.0)
    assert info.value.name == "learning_rate"


def test_a_mismatched_accountant_is_refused():
    opt = ProjectedNoisySGD([torch.zeros(2, requires_grad=True)], lr=0.1,
                            noise_multiplier=1.0, max_grad_norm=1.0, diameter=2.0)
    other = PNSGDAccountant(lipschitz=1.0, diameter=2.0, learning_rate=0.2, dataset_size=10)
    with pytest.raises(ParameterError) as info:
        opt.accountant = other
    assert info.value.name == "accountant.learning_rate"
    laplace = PNSGDAccountant(lipschitz=1.0, diameter=2.0, learning_rate=0.1, dataset_size=10,
                              noise="laplace")
    with pytest.raises(ParameterError) as info:
        opt.accountant = laplace
    assert info.value.name == "accountant.noise"
    make_pnsgd_accountant(opt, dataset_size=10)
    with pytest.raises(ParameterError) as info:
        make_pnsgd_accountant(opt, dataset_size=10)  # already has one
    assert info.value.name == "optimizer"


@pytest.mark.parametrize("change", ["diameter", "max_grad_norm", "lr"])
def test_constants_changed_after_the_accountant_was_attached_are_refused(change):
    """A hostile sweep: the diameter raised to 1000 after make_pnsgd_accountant (D = 1) kept
    being accounted at D = 1 (9.38 at delta 1e-5, where the accountant of what ran, D = 1000,
    says 15.46); so did a changed clipping norm, or lr changed on the optimizer and in its
    group together.  The step is refused before the parameters move."""
    w = torch.zeros(3, requires_grad=True)
    opt = ProjectedNoisySGD([w], lr=0.5, noise_multiplier=1.0, max_grad_norm=1.0, diameter=1.0)
    accountant = make_pnsgd_accountant(opt, dataset_size=50)
    w.grad = torch.ones(3)
    opt.step()
    setattr(opt, change, 1000.0 if change == "diameter" else 0.01)
    if change == "lr":
        opt.param_groups[0]["lr"] = 0.01
    before = w.detach().clone()
    w.grad = torch.ones(3)
    with pytest.raises(ParameterError, match="changed after its accountant was attached"):
        opt.step()
    assert torch.equal(w.detach(), before) and len(accountant) == 1


GOOD = dict(lr=0.1, noise_multiplier=1.0, max_grad_norm=1.0, diameter=2.0)


@pytest.mark.parametrize("name, value", [
    ("lr", 0.0), ("lr", -1.0), ("lr", float("nan")),
    ("noise_multiplier", 0.0), ("noise_multiplier", -2.0),
    ("max_grad_norm", float("inf")), ("max_grad_norm", 0.0),
    ("diameter", 0.0), ("diameter", "2"),
])
def test_bad_input_names_the_parameter(name, value):
    with pytest.raises(ParameterError) as info:
        ProjectedNoisySGD([torch.zeros(2, requires_grad=True)], **{**GOOD, name: value})
    assert info.value.name == name
    assert name in str(info.value) and "must be" in str(info.value)


def test_other_bad_input():
    with pytest.raises(ParameterError) as info:
        ProjectedNoisySGD([torch.zeros(2, requires_grad=True)], **GOOD, generator=0)
    assert info.value.name == "generator"
    with pytest.raises(ParameterError) as info:
        shuffled_order(0)
    assert info.value.name == "n"
    with pytest.raises(ParameterError) as info:
        make_pnsgd_accountant(torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), 10)
    assert info.value.name == "optimizer"
    w = torch.zeros(2, requires_grad=True)
    opt = ProjectedNoisySGD([w], **GOOD)
    opt.param_groups[0]["lr"] = 0.05  # e.g. a scheduler: the accountant's eta would be wrong
    w.grad = torch.ones(2)
    with pytest.raises(ParameterError) as info:
        opt.step()
    assert info.value.name == "lr"


def test_shuffled_order_is_a_fresh_permutation_each_pass():
    g = torch.Generator().manual_seed(5)
    orders = [shuffled_order(50, g).tolist() for _ in range(3)]
    for order in orders:
        assert sorted(order) == list(range(50))
    assert orders[0] != orders[1] != orders[2]
    again = torch.Generator().manual_seed(5)
    assert shuffled_order(50, again).tolist() == orders[0]


def test_example_runs_end_to_end():
    pytest.importorskip("sklearn")
    pytest.importorskip("opacus")
    result = subprocess.run(
        [sys.executable, "examples/pnsgd_logistic_regression.py", "--passes", "2",
         "--noise-multiplier", "2", "--seed", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    pnsgd = [l for l in result.stdout.splitlines() if l.startswith("shuffled PNSGD")]
    dpsgd = [l for l in result.stdout.splitlines() if l.startswith("DP-SGD")]
    assert len(pnsgd) == len(dpsgd) == 1
    assert "'pnsgd' accountant" in pnsgd[0] and "RDPAccountant" in dpsgd[0]
    for line in pnsgd + dpsgd:
        accuracy = float(re.search(r"test accuracy ([0-9.]+)", line).group(1))
        epsilon = float(re.search(r"epsilon ([0-9.eE+-]+|inf|nan)", line).group(1))
        assert accuracy > 0.8
        assert math.isfinite(epsilon) and epsilon > 0


def test_projection_refuses_a_bad_diameter_and_no_parameters():
    """``project_onto_ball(p, -1)`` flipped the sign of every parameter (a negative radius
    times the norm) and ``project_onto_ball([], 2)`` raised a TypeError; both are refused, and
    a valid projection lands inside the ball along the same direction."""
    p = torch.tensor([3.0, 4.0])
    for diameter in (-1.0, 0.0, math.nan, math.inf):
        with pytest.raises(ParameterError, match="diameter"):
            project_onto_ball([p], diameter)
    assert torch.equal(p, torch.tensor([3.0, 4.0]))
    with pytest.raises(ParameterError, match="params"):
        project_onto_ball([], 2.0)
    project_onto_ball([p], 2.0)
    assert float(torch.linalg.norm(p)) <= 1.0 and float(p[1] / p[0]) == pytest.approx(4 / 3)


def test_a_saved_optimizer_keeps_its_constants_and_accountant():
    """A hostile sweep: torch pickles only an optimizer's defaults, state and param groups, so
    a ``torch.save``d ProjectedNoisySGD lost lr, the noise, the clipping norm, the diameter and
    its accountant, and its first step raised AttributeError.  The copy steps as the original
    would (same noise from the saved generator) and records in its copy of the accountant."""
    import io

    w = torch.zeros(3, requires_grad=True)
    opt = ProjectedNoisySGD([w], lr=0.5, noise_multiplier=1.0, max_grad_norm=1.0, diameter=1.0,
                            generator=torch.Generator().manual_seed(0))
    accountant = make_pnsgd_accountant(opt, dataset_size=10)
    w.grad = torch.ones(3)
    opt.step()
    buffer = io.BytesIO()
    torch.save(opt, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=False)
    (copy_w,) = restored.param_groups[0]["params"]
    copy_w.grad = torch.ones(3)
    w.grad = torch.ones(3)
    restored.step()
    opt.step()
    assert torch.equal(copy_w.detach(), w.detach())
    assert (restored.lr, restored.diameter, len(restored.accountant)) == (0.5, 1.0, 2)
    assert len(accountant) == 2
