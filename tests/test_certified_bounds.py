"""Certified lower and upper bounds are paired in one place (``certified_bounds``): a lower bound
above the upper one beyond rounding means one of them is not valid, and the query refuses
instead of reporting ``lower == upper`` (random allocation once reported 1.39e-4 for both where
the truth is 1.71e-4; a Poisson-subsampled Gaussian step reported 597.82 for both where the
truth is 597.80).  The wiring tests plant a lower bound above the truth in one source and check
that the query refuses; before ``certified_bounds`` each of them answered ``lower == upper``."""

import math

import pytest

from dpplugins.amplification import shuffle_model
from dpplugins.errors import NumericalError
from dpplugins.mechanisms.gaussian import gaussian_delta_upper
from dpplugins.pld import Bounds, PrivacyLossDistribution, certified_bounds
from dpplugins import full_batch
from tests.conftest import gaussian_delta_exact


def test_rounding_is_clipped_and_a_crossing_refuses():
    assert certified_bounds(0.5, 1.0, "epsilon") == Bounds(0.5, 1.0)
    assert certified_bounds(1.0 + 1e-9, 1.0, "epsilon") == Bounds(1.0, 1.0)
    assert certified_bounds(0.0, 0.0, "delta") == Bounds(0.0, 0.0)
    with pytest.raises(NumericalError) as info:
        certified_bounds(1.1, 1.0, "epsilon at delta=1e-05")
    message = str(info.value)
    assert "1.1" in message and "1.0" in message and "epsilon at delta=1e-05" in message
    assert "To fix" in message


def test_full_batch_refuses_a_planted_lower_bound_above_the_truth(monkeypatch):
    mu, eps = 1.0, 0.5
    truth = float(gaussian_delta_exact(eps, mu))
    before = full_batch.full_batch_delta_bounds((mu, mu), eps)
    assert before.lower <= truth <= before.upper
    # the closed form of Balle & Wang (2018, Thm 8), evaluated without our code, doubled: a
    # lower bound above the truth (and above the certified upper bound)
    monkeypatch.setattr(full_batch.fdp, "gdp_delta_for_epsilon", lambda m, e: 2 * truth)
    with pytest.raises(NumericalError, match="delta at epsilon=0.5"):
        full_batch.full_batch_delta_bounds((mu, mu), eps)


def test_shuffle_model_refuses_a_planted_lower_bound(monkeypatch):
    before = shuffle_model.delta_bounds(("krr", 1.0, 2), 1000, 0.2)
    assert 0 < before.upper < 0.5
    monkeypatch.setattr(shuffle_model, "fixed_dataset_delta_lower", lambda r, n, e: 0.9)
    monkeypatch.setattr(shuffle_model, "_MAX_EXACT_BINARY_N", 0)
    with pytest.raises(NumericalError, match="above the certified upper bound"):
        shuffle_model.delta_bounds(("krr", 1.0, 2), 1000, 0.2)


def test_pld_delta_query_refuses_a_planted_lower_bound(monkeypatch):
    pld = PrivacyLossDistribution.from_gaussian(1.0)
    eps = 1.0
    truth = float(gaussian_delta_exact(eps, 1.0))
    bounds = pld.delta_for_epsilon(eps)
    assert bounds.lower <= truth <= bounds.upper <= gaussian_delta_upper(eps, 1.0) * 1.01
    monkeypatch.setattr(PrivacyLossDistribution, "_delta_lower_certified",
                        lambda self, d, e, up, rtol=0.0: (2 * truth, 0.0))
    monkeypatch.setattr(PrivacyLossDistribution, "cached_delta_bounds",
                        lambda self, e, **options: None)
    with pytest.raises(NumericalError, match="delta at epsilon=1.0"):
        pld.delta_for_epsilon(eps)
    assert math.isfinite(truth)
