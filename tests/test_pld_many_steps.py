"""Histories of many distinct steps (issue 19): the work the engine leaves out must not change
what it certifies.

* A query builds the lower-bound PMF of one direction only (the one that decides the upper
  bound): the other direction's tangent construction is never built.
* A direction whose Chernoff bound shows it cannot raise the maximum is not composed
  (:meth:`PrivacyLossDistribution._chernoff_delta`): the bound is checked against closed forms
  (composed Gaussian; one Poisson-subsampled Gaussian step, add direction), and answers with and
  without the shortcut against exact enumeration of an asymmetric discrete pair, in a case where
  each direction decides.
* The spectral terms of many components are summed in fixed chunks on threads: the composition
  is the same, bit for bit, whatever the number of threads.

Every expected value is independent of our code (closed forms written out here, enumeration) or
a bit-for-bit comparison of two paths of it.  No timed assertions.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy.special import log_ndtr, ndtr

import dpplugins.pld.grid as grid
from dpplugins.accountants import create
from dpplugins.accountants import pld as pld_accountant
from dpplugins.pld import PrivacyLossDistribution as PLD
from dpplugins.pld.compose import compose_grid_pmfs


def _gaussian_delta(epsilon: float, mu: float) -> float:
    """N(mu, 1) vs N(0, 1): Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (Balle & Wang 2018,
    Thm 8), in log space."""
    a = log_ndtr(-epsilon / mu + mu / 2)
    b = epsilon + log_ndtr(-epsilon / mu - mu / 2)
    return float(np.exp(a) * -np.expm1(b - a))


def _subsampled_add_delta(epsilon: float, sigma: float, q: float) -> float:
    """The add direction of one Poisson-subsampled Gaussian step: P = N(0, s^2), Q = (1 - q)
    N(0, s^2) + q N(1, s^2).  The loss -log(1 - q + q e^((2x - 1) / (2 s^2))) decreases in x and
    exceeds eps iff x < t = s^2 log((e^-eps - 1 + q) / q) + 1/2 (possible iff e^-eps > 1 - q),
    so delta = P(X < t) - e^eps Q(X < t)."""
    if not math.exp(-epsilon) > 1 - q:
        return 0.0
    t = sigma * sigma * math.log((math.expm1(-epsilon) + q) / q) + 0.5
    return float(ndtr(t / sigma) - math.exp(epsilon) * ((1 - q) * ndtr(t / sigma)
                                                         + q * ndtr((t - 1) / sigma)))


@pytest.mark.parametrize("steps,sigma", [(1, 1.0), (10, 2.0), (300, 5.0)])
def test_chernoff_bound_of_a_composed_gaussian_is_above_the_closed_form(steps, sigma):
    pld = PLD.from_gaussian(sigma, value_discretization_interval=1e-3).self_compose(steps)
    mu = math.sqrt(steps) / sigma
    for epsilon in (0.0, 0.5, 1.0, 2.0, 4.0, 8.0):
        bound = pld._chernoff_delta("remove", epsilon)
        assert _gaussian_delta(epsilon, mu) <= bound <= 1.0
    # three standard deviations above the mean loss, the factor c(lam) of the conversion makes
    # it tighter than the plain Chernoff bound on P(S > eps) (S ~ N(mu^2 / 2, mu^2))
    epsilon = mu * mu / 2 + 3 * mu
    exact = _gaussian_delta(epsilon, mu)
    plain = math.exp(-(epsilon - mu * mu / 2) ** 2 / (2 * mu * mu))  # P(S > eps) <= this
    assert exact <= pld._chernoff_delta("remove", epsilon) < plain


@pytest.mark.parametrize("sigma,q", [(1.0, 0.01), (0.8, 0.2), (2.0, 0.5)])
def test_chernoff_bound_of_the_add_direction_is_above_the_closed_form(sigma, q):
    pld = PLD.from_poisson_subsampled_gaussian(sigma, q, value_discretization_interval=1e-3)
    for epsilon in (0.0, 0.001, 0.01, 0.05, 0.2, 0.5):
        assert _subsampled_add_delta(epsilon, sigma, q) <= pld._chernoff_delta("add", epsilon)


def test_a_query_builds_one_lower_pmf_and_leaves_out_a_dominated_direction(monkeypatch):
    """40 distinct Poisson-subsampled Gaussian steps: the add direction's epsilon is far below
    the remove direction's, so the query composes the remove direction's upper and lower PMFs
    only; the answer is that of composing both directions (computed here on a second copy of
    the history), and the Chernoff certificate at the answer is at most delta."""
    built = []
    original = grid.optimistic_from_bins

    def spy(*args, **kwargs):
        built.append(1)
        return original(*args, **kwargs)
    monkeypatch.setattr(grid, "optimistic_from_bins", spy)
    import dpplugins.pld.distribution as distribution
    monkeypatch.setattr(distribution, "optimistic_from_bins", spy)
    rng = np.random.default_rng(3)
    history = [(float(rng.uniform(0.8, 1.6)), float(rng.uniform(0.005, 0.02)), 25)
               for _ in range(40)]
    pld_accountant.clear_step_cache()
    pld = pld_accountant.poisson_gaussian_pld(history, 2 ** -10)
    assert built == []  # nothing built with the PLD
    delta = 1e-5
    bounds = pld.epsilon_for_delta(delta)
    assert len(built) == 40  # one direction's tangent constructions
    assert not any(key[0] == "add" for key in pld._cache)
    assert pld._chernoff_delta("add", bounds.upper) <= delta
    both = pld_accountant.poisson_gaussian_pld(history, 2 ** -10)
    uppers = {d: both._epsilon_upper_certified(d, delta)[0] for d in ("remove", "add")}
    assert uppers["add"] < uppers["remove"] == bounds.upper
    # the roundtrip uses the certificate: delta at the certified epsilon is at most delta
    assert pld.delta_for_epsilon(bounds.upper).upper <= delta


def _composed_delta_exact(p, q, steps, epsilon):
    """delta(eps) of the `steps`-fold product of the pair (p, q) on a few outcomes, by
    enumerating the counts of every outcome (multinomial), in log space."""
    p, q = np.asarray(p, float), np.asarray(q, float)
    total = 0.0
    for counts in itertools.product(range(steps + 1), repeat=len(p) - 1):
        last = steps - sum(counts)
        if last < 0:
            continue
        n = np.array(list(counts) + [last])
        log_multi = math.lgamma(steps + 1) - sum(math.lgamma(k + 1) for k in n)
        with np.errstate(divide="ignore"):
            log_p = log_multi + float(np.sum(n * np.log(p)))
            log_q = log_multi + float(np.sum(n * np.log(q)))
        if log_p == -math.inf:
            continue
        if log_q == -math.inf or log_p - log_q > epsilon:
            total += math.exp(log_p) - (math.exp(epsilon + log_q) if log_q > -math.inf else 0.0)
    return total


@pytest.mark.parametrize("p,q", [
    ((0.5, 0.3, 0.2), (0.3, 0.3, 0.4)),     # the directions differ
    ((0.3, 0.3, 0.4), (0.5, 0.3, 0.2)),     # the same pair swapped: the other one decides
])
def test_both_directions_against_exact_enumeration(p, q):
    """An asymmetric pair composed 12 times: the maximum over both directions of the exact
    delta, by enumeration, lies between the bounds, whichever direction decides (in one order
    the Chernoff shortcut can apply, in the other it cannot)."""
    steps = 12
    pld = PLD.from_pmfs(p, q, value_discretization_interval=1e-3).self_compose(steps)
    for epsilon in (0.2, 0.8, 1.5):
        exact = max(_composed_delta_exact(p, q, steps, epsilon),
                    _composed_delta_exact(q, p, steps, epsilon))
        bounds = pld.delta_for_epsilon(epsilon)
        assert bounds.lower - 1e-12 <= exact <= bounds.upper + 1e-12
    for delta in (1e-2, 1e-4):
        bounds = PLD.from_pmfs(p, q, value_discretization_interval=1e-3).self_compose(
            steps).epsilon_for_delta(delta)
        for direction in ((p, q), (q, p)):
            # delta at the certified upper epsilon is at most delta in both directions
            assert _composed_delta_exact(*direction, steps, bounds.upper) <= delta * (1 + 1e-9)
        # and at the lower epsilon one direction's delta is at least delta
        assert max(_composed_delta_exact(p, q, steps, bounds.lower),
                   _composed_delta_exact(q, p, steps, bounds.lower)) >= delta * (1 - 1e-9)


def test_the_composition_does_not_depend_on_the_number_of_threads(monkeypatch):
    rng = np.random.default_rng(5)
    parts = [(pld_accountant.poisson_gaussian_step(
        float(rng.uniform(0.8, 1.6)), float(rng.uniform(0.005, 0.02)), 2 ** -9
    )._directions["remove"][0][0].upper, int(rng.integers(1, 20))) for _ in range(100)]
    from dpplugins.pld import spectra, threads as engine
    monkeypatch.setattr(spectra, "_THREADED_MIN_WORK", 0)  # threads even for this small case
    started = []
    original = engine.ThreadPoolExecutor

    def counting(*args, **kwargs):
        started.append(kwargs.get("max_workers"))
        return original(*args, **kwargs)
    monkeypatch.setattr(engine, "ThreadPoolExecutor", counting)
    results = []
    for threads in ("1", "3"):
        monkeypatch.setenv("DPPLUGINS_THREADS", threads)
        spectra.clear_spectra_cache()
        results.append(compose_grid_pmfs(parts))
    assert started == [3]  # one thread: no pool; three: a pool of three
    one, three = results
    assert one.lo == three.lo and np.array_equal(one.pmf, three.pmf)
    assert one.fp_error == three.fp_error and one.tail_above == three.tail_above


def test_an_accountant_with_many_distinct_steps_agrees_with_the_gaussian_closed_form():
    """64 distinct noise multipliers, full batches (q = 1): the composition is Gaussian with
    mu = sqrt(sum steps / sigma^2); the accountant's bounds contain its epsilon, computed here
    by bisection on the closed form."""
    rng = np.random.default_rng(7)
    history = [(float(rng.uniform(2.0, 6.0)), 3) for _ in range(64)]
    acc = create("pld")
    for sigma, steps in history:
        acc.step(noise_multiplier=sigma, sample_rate=1.0, count=steps)
    mu = math.sqrt(sum(steps / sigma ** 2 for sigma, steps in history))
    lo, hi = 0.0, 50.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _gaussian_delta(mid, mu) > 1e-5 else (lo, mid)
    bounds = acc.get_epsilon_bounds(1e-5)
    assert bounds.lower <= hi * (1 + 1e-9) and lo <= bounds.upper * (1 + 1e-9)


def test_ordered_map_keeps_the_order_and_raises_where_the_item_failed():
    from dpplugins.pld.threads import ordered_map

    def slow_square(i):
        if i == 7:
            raise ValueError("seven")
        return i * i
    assert list(ordered_map(slow_square, list(range(7)), threads=3)) == [i * i for i in range(7)]
    seen = []
    with pytest.raises(ValueError, match="seven"):
        for value in ordered_map(slow_square, list(range(10)), threads=3):
            seen.append(value)
    assert seen == [i * i for i in range(7)]


def test_a_delta_the_grid_cannot_certify_warns_with_the_capped_bounds():
    """Found by a hostile sweep: 1e12 steps of randomized response at eps0 = 1e-9 answered
    [0, 1000] (basic composition) without a word, where the Gaussian limit puts epsilon(1e-5)
    near 0.002 (mu = 1e-9 sqrt(1e12) = 1e-3): the PLD's NumericalError was swallowed.  The
    bounds stay (they are valid); an AccuracyWarning now says why they are so wide."""
    from dpplugins.events import RandomizedResponseEvent, SelfComposedEvent
    from dpplugins.pld import AccuracyWarning

    acc = create("pld", neighbouring="replace_one").compose(
        SelfComposedEvent(RandomizedResponseEvent(1e-9), 10**12))
    with pytest.warns(AccuracyWarning, match="could not certify this delta"):
        b = acc.get_epsilon_bounds(1e-5)
    assert b.lower == 0.0 and b.upper == pytest.approx(1000.0, rel=1e-9)
