"""Adding an accountant or a sampler is one class plus one registry line; it then works in the
command line, the compare table, the TF-Privacy statement and Opacus without touching them.

The toy accountant here accounts Poisson-subsampled Gaussian steps at rates q <= 0.5 by
delegating to the PLD accountant, so every number it gives must be the PLD accountant's; the toy
sampler is a batch sampler that emits a shuffled-epochs event.  (Keras: see
``test_tf_keras.py::test_user_registered_accountant_works_in_the_callback``.)
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpplugins import report
from dpplugins.accountants import UnsupportedEventError, create, register, supporting, unregister
from dpplugins.accountants.base import Accountant
from dpplugins.accountants.pld import PLDAccountant
from dpplugins.cli import main
from dpplugins.events import GaussianEvent, PoissonSampledEvent, SelfComposedEvent, \
    ShuffledEpochsEvent

NAME = "toy_half_poisson"


class HalfPoisson(Accountant):
    """Poisson steps with q <= 0.5, accounted by the PLD accountant."""

    name = NAME
    theorem = "the PLD accountant's, for q <= 0.5"

    def _supports_leaf(self, event):
        return isinstance(event, PoissonSampledEvent) and event.sample_rate <= 0.5 or \
            "Poisson steps with q <= 0.5"

    def _epsilon_bounds(self, history, delta):
        return PLDAccountant()._epsilon_bounds(history, delta)

    def _delta_bounds(self, history, epsilon):
        return PLDAccountant()._delta_bounds(history, epsilon)


@pytest.fixture
def toy():
    register(NAME, HalfPoisson)
    try:
        yield NAME
    finally:
        unregister(NAME)


def _pld_epsilon(q, sigma, steps, delta=1e-5):
    return create("pld").compose(
        SelfComposedEvent(PoissonSampledEvent(q, GaussianEvent(sigma)), steps)).get_epsilon(delta)


def test_cli_epsilon_and_compare_know_the_new_accountant(toy, capsys):
    argv = ["--noise-multiplier", "1", "--sample-rate", "0.01", "--steps", "100",
            "--delta", "1e-5"]
    assert main(["epsilon", "--accountant", toy, *argv]) == 0
    out = capsys.readouterr().out
    assert f"accountant {toy}" in out
    assert f"{_pld_epsilon(0.01, 1.0, 100):.4f}"[:5] in out
    assert main(["compare", "--noise-multiplier", "1", "--dataset-size", "600",
                 "--batch-size", "60", "--epochs", "1", "--delta", "1e-5", "--json",
                 "--accountants", f"{toy},shuffle"]) == 0
    rows = {r["accountant"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[toy]["valid"] and rows[toy]["epsilon"] == pytest.approx(
        _pld_epsilon(0.1, 1.0, 10), rel=1e-12)
    assert not rows["shuffle"]["valid"]
    # refused where it does not apply, and named where others refuse
    assert main(["epsilon", "--accountant", toy, "--noise-multiplier", "1", "--sample-rate",
                 "0.9", "--steps", "3", "--delta", "1e-5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "q <= 0.5" in err[0]
    assert toy in supporting(PoissonSampledEvent(0.01, GaussianEvent(1.0)))
    with pytest.raises(UnsupportedEventError, match=toy):
        create("shuffle").compose(PoissonSampledEvent(0.01, GaussianEvent(1.0)))


def test_compare_table_has_a_row_for_it(toy):
    config = report.TrainingConfig(dataset_size=600, batch_size=60, epochs=1,
                                   noise_multiplier=1.0, delta=1e-5, sampler="poisson")
    rows = {r.accountant: r for r in report.compare(config, references=False)}
    assert rows[toy].valid and rows[toy].epsilon == pytest.approx(rows["pld"].epsilon, rel=1e-12)


def test_tf_privacy_statement_takes_it_by_name(toy):
    pytest.importorskip("tensorflow_privacy")
    from dpplugins.integrations.tf_privacy import compute_dp_sgd_privacy_statement

    text = compute_dp_sgd_privacy_statement(1000, 10, 1, 1.0, 1e-5, False, accountant=toy)
    assert toy in text
    from dpplugins.display import upper_text

    assert upper_text(_pld_epsilon(0.01, 1.0, 100), decimals=3) in text   # rounded up


class ToyShuffledSampler:
    """A user's batch sampler: fixed-size shuffled batches, a fresh permutation per pass; it says
    what it does by emitting its event -- nothing else is registered anywhere."""

    def __init__(self, num_examples: int, batch_size: int, seed: int = 0) -> None:
        self.num_examples, self.batch_size = num_examples, batch_size
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return -(-self.num_examples // self.batch_size)

    def __iter__(self):
        order = self._rng.permutation(self.num_examples)
        for start in range(0, self.num_examples, self.batch_size):
            yield order[start:start + self.batch_size].tolist()

    def event(self, noise_multiplier: float, epochs=1):
        return ShuffledEpochsEvent(self.num_examples, self.batch_size, epochs,
                                   GaussianEvent(noise_multiplier))


def test_opacus_accepts_a_user_sampler_and_a_user_accountant(toy):
    torch = pytest.importorskip("torch")
    pytest.importorskip("opacus")
    from opacus import PrivacyEngine
    from opacus.data_loader import DPDataLoader

    from dpplugins.integrations.opacus import loader_event, register as register_opacus

    from opacus.accountants import registry as opacus_registry

    register_opacus()                       # picks up the accountant registered just now
    try:
        _train_with_opacus(toy, torch, PrivacyEngine, DPDataLoader, loader_event)
    finally:                                # leave Opacus' registry as the other tests expect
        opacus_registry._ACCOUNTANTS.pop(toy, None)


def _train_with_opacus(toy, torch, PrivacyEngine, DPDataLoader, loader_event):
    data = torch.utils.data.TensorDataset(torch.randn(120, 4), torch.randint(0, 2, (120,)))
    loader = torch.utils.data.DataLoader(data, batch_sampler=ToyShuffledSampler(120, 12))
    event = loader_event(loader, 1.0, epochs=2)
    assert event == ShuffledEpochsEvent(120, 12, 2, GaussianEvent(1.0))
    assert "shuffle" in supporting(event) and toy not in supporting(event)

    def private(accountant, data_loader, poisson):
        model = torch.nn.Linear(4, 2)
        engine = PrivacyEngine(accountant=accountant)
        return engine, engine.make_private(
            module=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1),
            data_loader=data_loader, noise_multiplier=1.0, max_grad_norm=1.0,
            poisson_sampling=poisson)

    engine, (model, optimizer, private_loader) = private("shuffle", loader, False)
    for x, y in private_loader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    offline = create("shuffle").compose(ShuffledEpochsEvent(120, 12, 1, GaussianEvent(1.0)))
    assert engine.get_epsilon(1e-5) == offline.get_epsilon(1e-5)
    with pytest.raises(UnsupportedEventError, match="shuffle"):   # refused at set-up
        private(toy, loader, False)
    base = torch.utils.data.DataLoader(data, batch_size=12)
    engine, (model, optimizer, poisson_loader) = private(toy, base, True)
    assert isinstance(poisson_loader, DPDataLoader)
    x, y = next(iter(poisson_loader))
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
    assert engine.get_epsilon(1e-5) == pytest.approx(_pld_epsilon(0.1, 1.0, 1), rel=1e-12)
