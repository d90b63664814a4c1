"""k-out-of-t random allocation with Laplace noise or randomized response in every step
(:func:`dpplugins.amplification.allocation_mechanisms.k_out_of_t_mechanism_pld` and the
``balls_and_bins`` accountant), against exact enumeration of the worst-case pair (randomized
response, t <= 5) and Monte Carlo with its standard error (Laplace)."""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest

from dpplugins.accountants import create
from dpplugins.amplification.allocation_mechanisms import k_out_of_t_mechanism_pld
from dpplugins.events import LaplaceEvent, RandomAllocationEvent, RandomizedResponseEvent


def _zero_out(eps0: float, k: int):
    """Zero-out randomized response: P = (e/(e+k-1), (k-1)/(e+k-1)), Q = (1/k, (k-1)/k)."""
    e = math.exp(eps0)
    return np.array([e, k - 1.0]) / (e + k - 1), np.array([1.0, k - 1.0]) / k


def _rr_epoch(eps0, buckets, t, k, p):
    """The exact epoch pair over the 2^t outcomes: the example in a uniform k-subset A of the
    steps with probability p (P0 on A, Q0 elsewhere), absent (Q0 everywhere) otherwise."""
    p0, q0 = _zero_out(eps0, buckets)
    outcomes = list(itertools.product([0, 1], repeat=t))
    subsets = list(itertools.combinations(range(t), k))
    first, second = [], []
    for o in outcomes:
        q = math.prod(q0[x] for x in o)
        with_it = sum(math.prod(p0[o[j]] if j in a else q0[o[j]] for j in range(t))
                      for a in subsets) / len(subsets)
        first.append((1 - p) * q + p * with_it)
        second.append(q)
    return np.array(first), np.array(second)


def _exact_delta(first, second, epochs, eps):
    a, b = np.ones(1), np.ones(1)
    for _ in range(epochs):
        a, b = np.outer(a, first).ravel(), np.outer(b, second).ravel()
    g = math.exp(eps)
    return max(float(np.sum(np.maximum(a - g * b, 0))), float(np.sum(np.maximum(b - g * a, 0))))


CASES = [(1.0, 2, 3, 2, 2, 1.0), (1.0, 2, 4, 2, 2, 1.0), (2.0, 4, 4, 3, 1, 1.0),
         (1.0, 2, 4, 2, 2, 0.5), (0.5, 3, 5, 2, 2, 0.3), (2.0, 4, 4, 4, 2, 1.0)]


@pytest.mark.parametrize("eps0,buckets,t,k,epochs,p", CASES)
def test_randomized_response_k_out_of_t_brackets_exact_enumeration(eps0, buckets, t, k,
                                                                   epochs, p):
    first, second = _rr_epoch(eps0, buckets, t, k, p)
    pld = k_out_of_t_mechanism_pld(RandomizedResponseEvent(eps0, buckets), t, k, epochs,
                                   checkin_probability=p)
    for eps in (0.0, 0.5, 1.0):
        exact = _exact_delta(first, second, epochs, eps)
        lower, upper = pld.delta_for_epsilon(eps)
        assert lower <= exact * (1 + 1e-12) + 1e-15, (eps, lower, exact)
        assert exact <= upper * (1 + 1e-12) + 1e-15, (eps, exact, upper)
        if k == t and p == 1.0:  # t steps of the base mechanism: exact up to the grid
            assert upper - lower <= 1e-3 * max(exact, 1e-12) + 1e-12


def test_randomized_response_k_out_of_t_through_the_accountant():
    first, second = _rr_epoch(1.0, 2, 4, 2, 0.5)
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(4, 2, RandomizedResponseEvent(1.0, 2), participations=2,
                                      checkin_probability=0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the k > 1 gap is reported with an AccuracyWarning
        lower, upper = acc.get_delta_bounds(0.5)
    exact = _exact_delta(first, second, 2, 0.5)
    assert lower <= exact <= upper


def _laplace_monte_carlo(b, t, k, p, epochs, eps, samples=200_000, seed=7):
    """Both directions' hockey-stick by plain Monte Carlo of the worst-case pair: the loss of
    an epoch is ``log((1 - p) + p e_k(r) / C(t, k))`` with ``r_j = exp((|x_j| - |x_j - 1|)/b)``
    (P: the example in a uniform k-subset with probability p); returns (max estimate, its
    standard error)."""
    rng = np.random.default_rng(seed)
    out = []
    for direction in ("remove", "add"):
        loss = np.zeros(samples)
        for _ in range(epochs):
            x = rng.laplace(0.0, b, size=(samples, t))
            if direction == "remove":
                present = rng.random(samples) < p
                chosen = np.argsort(rng.random((samples, t)), axis=1)[:, :k]
                shift = np.zeros((samples, t))
                np.put_along_axis(shift, chosen, 1.0, axis=1)
                x += shift * present[:, None]
            r = np.exp((np.abs(x) - np.abs(x - 1.0)) / b)
            # e_k of the r_j by the recurrence over j (k small)
            e = np.zeros((samples, k + 1))
            e[:, 0] = 1.0
            for j in range(t):
                e[:, 1:] = e[:, 1:] + e[:, :-1] * r[:, j:j + 1]
            loss += np.log((1 - p) + p * e[:, k] / math.comb(t, k))
        signed = loss if direction == "remove" else -loss
        value = -np.expm1(np.minimum(eps - signed, 0.0))
        out.append((float(value.mean()), float(value.std()) / math.sqrt(samples)))
    return max(out)


@pytest.mark.parametrize("p", [1.0, 0.5])
def test_laplace_k_out_of_t_brackets_monte_carlo(p):
    b, t, k, epochs, eps = 1.0, 6, 2, 2, 0.5
    estimate, se = _laplace_monte_carlo(b, t, k, p, epochs, eps)
    lower, upper = k_out_of_t_mechanism_pld(LaplaceEvent(b), t, k, epochs,
                                            checkin_probability=p).delta_for_epsilon(eps)
    assert lower <= estimate + 5 * se
    assert estimate - 5 * se <= upper


def test_laplace_k_out_of_t_monotone_in_checkin_probability_and_below_k_steps():
    """Upper bounds never increase as p falls (a post-processing argument: module docstring
    of allocation), and never exceed k Laplace steps per epoch (the k = t epoch, exact:
    revealing the blocks' steps is a finer observation)."""
    eps = 0.5
    uppers = [k_out_of_t_mechanism_pld(LaplaceEvent(2.0), 10, 3, 2, checkin_probability=p)
              .delta_for_epsilon(eps).upper for p in (0.3, 0.7, 1.0)]
    assert uppers[0] <= uppers[1] <= uppers[2]
    k_steps = k_out_of_t_mechanism_pld(LaplaceEvent(2.0), 3, 3, 2).delta_for_epsilon(eps)
    assert uppers[2] <= k_steps.upper


def test_a_million_steps_per_epoch_answers_below_k_base_steps():
    """Long fuzz: 3-out-of-10^6 with Laplace scale 200.  The loss step suits the tiny
    per-epoch loss, and the sum-observation pair's loss range needed 5.3 M grid bins: a
    ParameterError about ``value_discretization_interval``, which the user never set.  Now the
    lower construction certifies nothing there (0) and the upper bound answers, below 3 steps
    of the Laplace mechanism (each example is in 3 steps: a post-processing of 3 base steps),
    as dp-accounting's pessimistic Laplace PLD computes them."""
    pld_module = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    delta = 6.608668790624392e-07
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(10**6, 1, LaplaceEvent(200.0), participations=3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the gap is reported with an AccuracyWarning
        lower, upper = acc.get_epsilon_bounds(delta)
    three_steps = pld_module.from_laplace_mechanism(
        200.0, sensitivity=1, pessimistic_estimate=True,
        value_discretization_interval=1e-5).self_compose(3)
    assert 0.0 <= lower <= upper <= three_steps.get_epsilon_for_delta(delta)


@pytest.mark.parametrize("t", [1, 100])
def test_a_loss_beyond_the_engine_grid_has_no_false_lower_bound(t):
    """Laplace scale 1e-3 (a loss of 1000 per step) is accounted by the base mechanism's PLD,
    whose grid ends near a loss of 600; its lower construction once treated what lies beyond
    as infinite (it certified epsilon = inf at delta 1e-15, delta(2000) = 1).  Three such steps
    are 3000-DP (pure-DP composition, closed form), so every certified lower epsilon is at most
    3000 and delta(3000) is 0."""
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(t, 3, LaplaceEvent(1e-3)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for delta in (1e-15, 1e-5):
            assert acc.get_epsilon_bounds(delta).lower <= 3000.0
        assert acc.get_delta_bounds(2000.0).lower < 1.0
        assert acc.get_delta_bounds(3000.0).lower == 0.0


def test_composed_epochs_keep_one_pld_for_directions_that_share_it():
    """A privacy-profile epoch holds both directions in one PLD; its composition over epochs
    was built once per direction (about 92 MB and 1.7 s of a 10^6-bucket query), now once.
    The values are those of the exact enumeration tests above, which run through it."""
    event = RandomizedResponseEvent(2.0, 100)
    one = k_out_of_t_mechanism_pld(event, 10, 3, 1, checkin_probability=0.5).upper
    assert one.plds["remove"] is one.plds["add"]
    for composed in (one.self_compose(3), one.compose(one),
                     k_out_of_t_mechanism_pld(event, 10, 3, 3, checkin_probability=0.5).upper):
        assert composed.plds["remove"] is composed.plds["add"]
