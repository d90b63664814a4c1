"""The compare table over events: one event per configuration, validity from supports(), a
user-registered accountant in the table, the sampler vocabulary and its aliases, strict JSON."""

import json
import math
import sys
import types
from fractions import Fraction
from importlib.machinery import ModuleSpec

import pytest

from dpplugins import report
from dpplugins.accountants import available, create, registry
from dpplugins.accountants.base import Accountant
from dpplugins.events import (GaussianEvent, PNSGDEvent, PoissonSampledEvent,
                              SelfComposedEvent, ShuffledEpochsEvent)
from dpplugins.pld import Bounds
from dpplugins.report import TrainingConfig, canonical_sampler, compare
from dpplugins.samplers import RandomCheckIn, ShuffledEpochs, SlidingWindowCheckIn, balls_and_bins

SMALL = dict(dataset_size=600, batch_size=60, epochs=2, noise_multiplier=1.0, delta=1e-5)


def _gdp_epsilon(mu, delta):
    from scipy.optimize import brentq
    from scipy.stats import norm

    def excess(eps):
        return norm.cdf(mu / 2 - eps / mu) - math.exp(eps) * norm.cdf(-mu / 2 - eps / mu) - delta
    return brentq(excess, 0.0, 200.0, xtol=1e-13)


def _reject(token):
    raise AssertionError(f"non-strict JSON token {token}")


class ToyAccountant(Accountant):
    """Accounts for shuffled epochs only; epsilon = number of steps (lower bound 1)."""

    name = "toy_events"
    theorem = "a test accountant"

    def _supports_leaf(self, event):
        if isinstance(event, ShuffledEpochsEvent):
            return True
        return "shuffled epochs, for this test"

    def _epsilon_bounds(self, history, delta):
        return Bounds(1.0, float(sum(event.steps for event in history)))


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(registry._REGISTRY, ToyAccountant.name, ToyAccountant)
    return ToyAccountant.name


# -- the sampler vocabulary ---------------------------------------------------------------------
def test_aliases_map_to_canonical_names_in_one_place():
    assert report.SAMPLERS == ("poisson", "shuffled_epochs", "random_allocation",
                               "random_checkin", "sliding_window")
    assert report.SAMPLER_ALIASES == {"shuffle": "shuffled_epochs",
                                      "checkin": "random_allocation"}
    for alias, name in report.SAMPLER_ALIASES.items():
        assert canonical_sampler(alias) == name
        assert TrainingConfig(**SMALL, sampler=alias) == TrainingConfig(**SMALL, sampler=name)
    for name in report.SAMPLERS:
        assert canonical_sampler(name) == name
    with pytest.raises(ValueError, match="sampler"):
        canonical_sampler("shuffled")


def test_one_event_per_configuration_from_the_samplers():
    n, b, sigma = 600, 60, 1.0
    assert TrainingConfig(**SMALL).event() == SelfComposedEvent(
        PoissonSampledEvent(b / n, GaussianEvent(sigma)), 20)
    assert TrainingConfig(**SMALL, sampler="shuffled_epochs").event() == \
        ShuffledEpochs(n, b).event(sigma, 2)
    assert TrainingConfig(**SMALL, sampler="random_allocation").event() == \
        balls_and_bins(n, 10).event(sigma, 2)
    assert TrainingConfig(**SMALL, sampler="random_checkin", checkin_probability=0.5,
                          num_slots=20).event() == \
        RandomCheckIn(n, 20, checkin_probability=0.5).event(sigma, 2)
    sliding = dict(SMALL, batch_size=None)
    assert TrainingConfig(**sliding, sampler="sliding_window", window=500).event() == \
        SlidingWindowCheckIn(n, 500).event(sigma, 2)
    pnsgd = TrainingConfig(**dict(SMALL, batch_size=1), sampler="shuffled_epochs",
                           lipschitz=1.0, diameter=2.0, learning_rate=0.5).event()
    assert pnsgd == PNSGDEvent(n, 2, GaussianEvent(sigma), 1.0, 2.0, 0.5)
    # a fractional epoch is rounded to a whole step: 1.26 epochs of 10 steps -> 13 steps
    ra = TrainingConfig(**dict(SMALL, epochs=1.26), sampler="random_allocation").event()
    assert ra.passes == Fraction(13, 10)


def test_options_the_sampler_does_not_use_are_refused():
    with pytest.raises(ValueError, match="window"):
        TrainingConfig(**SMALL, window=5)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        TrainingConfig(**SMALL, sampler="shuffled_epochs", num_slots=5)
    with pytest.raises(ValueError, match="checkin_probability"):
        TrainingConfig(**SMALL, sampler="shuffled_epochs", checkin_probability=0.5)
    with pytest.raises(ValueError, match="participations"):
        TrainingConfig(**SMALL, sampler="poisson", participations=2)
    with pytest.raises(ValueError, match="window"):
        TrainingConfig(**SMALL, sampler="sliding_window")
    with pytest.raises(ValueError, match="batch size 1"):
        TrainingConfig(**SMALL, sampler="shuffled_epochs", lipschitz=1.0, diameter=1.0,
                       learning_rate=1.0)


def test_poisson_rate_given_with_a_dataset_size_is_refused_not_ignored():
    with pytest.raises(ValueError, match="dataset_size"):
        TrainingConfig(600, None, 2, 1.0, 1e-5, poisson_sample_rate=0.1)
    assert TrainingConfig(None, None, 2, 1.0, 1e-5, poisson_sample_rate=0.1).sample_rate == 0.1


def test_random_checkin_poisson_line_has_the_samplers_participation_rate():
    """The Poisson comparison of random check-ins with p0 < 1 uses the rate at which the
    sampler itself puts an example in a step (it used b / n, the rate of p0 = 1): measured on
    the averaged sampler, Monte Carlo within 5 standard errors."""
    config = TrainingConfig(600, 60, 1, 1.0, 1e-5, sampler="random_checkin",
                            checkin_probability=0.3, checkin_variant="averaged")
    sampler = RandomCheckIn(600, 10, checkin_probability=0.3, variant="averaged", rng=1)
    hits = trials = 0
    for epoch in range(300):
        sampler.set_epoch(epoch)
        for batch in sampler:
            hits += len(batch)
            trials += 600
    rate = hits / trials
    se = math.sqrt(rate * (1 - rate) / trials)
    assert abs(config.sample_rate - rate) < 5 * se
    assert abs(config.sample_rate - 60 / 600) > 50 * se   # the old b / n


# -- validity is supports() -------------------------------------------------------------------
def test_validity_is_supports_for_every_registered_accountant():
    config = TrainingConfig(**SMALL, sampler="shuffled_epochs")
    event, poisson = config.event(), config.poisson_event()
    rows = {r.accountant: r for r in compare(config, references=False)}
    assert list(rows) == available()
    for name, row in rows.items():
        acc = create(name)
        assert row.valid == acc.supports(event), name
        if not row.valid and acc.supports(poisson):
            assert row.number_for == "poisson" and row.epsilon is not None
            assert "Poisson" in row.reason
        elif not row.valid:
            assert row.epsilon is None and row.number_for == "" and row.reason
    assert rows["shuffle"].valid and rows["pld"].number_for == "poisson"
    assert "--lipschitz" in rows["pnsgd"].reason          # what pnsgd needs
    assert "--batch-size 1" in rows["swap"].reason         # where swap is valid


def test_pnsgd_and_swap_rows_with_their_events():
    base = dict(SMALL, batch_size=1, dataset_size=200, epochs=1)
    swap = {r.accountant: r for r in compare(
        TrainingConfig(**base, sampler="shuffled_epochs"), accountants=["swap", "shuffle"],
        references=False)}
    assert swap["swap"].valid and swap["shuffle"].valid
    assert swap["swap"].epsilon == pytest.approx(swap["shuffle"].epsilon, rel=1e-12)
    config = TrainingConfig(**base, sampler="shuffled_epochs", lipschitz=1.0, diameter=2.0,
                            learning_rate=0.5)
    rows = {r.accountant: r for r in compare(config, accountants=["pnsgd", "swap", "pld"],
                                             references=False)}
    direct = create("pnsgd").compose(config.event()).get_epsilon(1e-5)
    assert rows["pnsgd"].valid and rows["pnsgd"].epsilon == direct
    assert not rows["swap"].valid and rows["swap"].epsilon is None
    assert not rows["pld"].valid and rows["pld"].number_for == "poisson"


def test_a_registered_accountant_appears_in_the_table(toy):
    shuffled = TrainingConfig(**SMALL, sampler="shuffled_epochs")
    rows = {r.accountant: r for r in compare(shuffled, references=False)}
    assert rows[toy].valid and rows[toy].epsilon == 20.0 and rows[toy].lower == 1.0
    rows = {r.accountant: r for r in compare(TrainingConfig(**SMALL), references=False)}
    assert not rows[toy].valid and rows[toy].epsilon is None
    assert "shuffled epochs, for this test" in rows[toy].reason
    assert "valid with --sampler shuffled_epochs" in rows[toy].reason


def test_a_registered_accountant_appears_in_the_cli_table(toy, capsys):
    from dpplugins.cli import main
    argv = ["compare", "--dataset-size", "600", "--batch-size", "60", "--epochs", "2",
            "--noise-multiplier", "1", "--delta", "1e-5", "--sampler", "shuffled_epochs",
            "--no-references", "--json"]
    assert main(argv) == 0
    rows = {r["accountant"]: r for r in json.loads(capsys.readouterr().out,
                                                   parse_constant=_reject)}
    assert rows[toy]["valid"] and rows[toy]["epsilon"] == 20.0
    assert main(argv[:-1]) == 0
    assert toy in capsys.readouterr().out


def test_an_accountant_that_needs_options_is_a_row_with_the_reason(monkeypatch):
    class NeedsOptions(ToyAccountant):
        name = "toy_needs_options"

        def __init__(self, *, constant):
            super().__init__()
    monkeypatch.setitem(registry._REGISTRY, NeedsOptions.name, NeedsOptions)
    row = report.evaluate(TrainingConfig(**SMALL, sampler="shuffled_epochs"), NeedsOptions.name)
    assert not row.valid and row.epsilon is None and "default options" in row.reason


def test_poisson_numbers_for_invalid_rows_are_the_poisson_configuration():
    rows = {r.accountant: r for r in compare(TrainingConfig(**SMALL, sampler="shuffle"),
                                             accountants=["pld"], references=False)}
    poisson = {r.accountant: r for r in compare(TrainingConfig(**SMALL),
                                                accountants=["pld"], references=False)}
    assert rows["pld"].epsilon == poisson["pld"].epsilon and poisson["pld"].valid


# -- output -----------------------------------------------------------------------------------
def test_json_is_strict_with_infinite_and_missing_numbers():
    config = TrainingConfig(**dict(SMALL, dataset_size=1000, batch_size=10),
                            sampler="random_allocation")   # 100 steps per epoch: fast
    rows = compare(config, accountants=["checkin", "shuffle", "balls_and_bins"],
                   references=False)
    by_name = {r.accountant: r for r in rows}
    # check-ins with central noise: each pass is a post-processing of one Gaussian mechanism of
    # replace-one sensitivity 2, i.e. 2/sigma-GDP per pass, composed over 2 passes (Dong, Roth,
    # Su 2022, Cor. 3.3); closed-form epsilon of mu-GDP (Balle & Wang 2018, Thm 8) by brentq
    assert by_name["checkin"].epsilon == pytest.approx(_gdp_epsilon(2 * math.sqrt(2), 1e-5),
                                                       rel=1e-6)
    data = {r["accountant"]: r for r in json.loads(report.to_json(rows), parse_constant=_reject)}
    assert data["shuffle"]["epsilon"] is None and data["shuffle"]["infinite"] == []
    assert data["balls_and_bins"]["epsilon"] == by_name["balls_and_bins"].epsilon
    text = report.to_csv(rows).splitlines()
    assert text[0].startswith("accountant,epsilon") and len(text) == 4
    # an infinite bound: no noise at all (sigma = 1e-300 is valid) -> inf, written as null
    tiny = TrainingConfig(**dict(SMALL, noise_multiplier=1e-300), sampler="poisson")
    rows = compare(tiny, accountants=["pld"], references=False)
    assert math.isinf(rows[0].epsilon)
    data = json.loads(report.to_json(rows), parse_constant=_reject)[0]
    # (closed form: a Poisson step at q = 0.1 with disjoint outputs has delta(eps) >= q for
    # every eps, so the truth is infinite too; the certified lower bound is finite, since the
    # PLD grid ends near loss 600 and its lower constructions round larger losses down to it)
    assert data["epsilon"] is None and data["lower"] is not None and data["lower"] >= 0
    assert data["infinite"] == ["epsilon"]
    assert "infinite" in data["reason"]
    assert ",inf," in report.to_csv(rows).splitlines()[1]


def test_progress_uses_tqdm_when_importable(monkeypatch):
    seen = []

    class FakeTqdm:
        def __init__(self, iterable, **kwargs):
            seen.append(kwargs)
            self.iterable = list(iterable)

        def __iter__(self):
            return iter(self.iterable)

        def set_postfix_str(self, text):
            seen.append(text)

    fake = types.ModuleType("tqdm")
    fake.tqdm = FakeTqdm
    fake.__spec__ = ModuleSpec("tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm", fake)
    rows = compare(TrainingConfig(**SMALL), accountants=["pld", "shuffle"], references=False,
                   progress=True)
    assert [r.accountant for r in rows] == ["pld", "shuffle"]
    assert seen[0]["file"] is sys.stderr and "pld" in seen
    monkeypatch.delitem(sys.modules, "tqdm")
    monkeypatch.setattr(report, "_installed", lambda module: module != "tqdm")
    assert len(compare(TrainingConfig(**SMALL), accountants=["pld"], references=False,
                       progress=True)) == 1


def test_the_summary_line_writes_huge_counts_compactly():
    """A sample rate of 1e-300 has 1e300 steps per epoch: the summary printed all 301 digits."""
    from dpplugins.report import TrainingConfig
    config = TrainingConfig(None, None, None, 1.0, 1e-5, "poisson", num_steps=1000,
                            poisson_sample_rate=1e-300)
    line = config.describe()
    assert "1e+300 per epoch" in line and "1000 steps" in line and len(line) < 200
