"""k-out-of-t random allocation (each example in k distinct uniform steps): the reduction's
first step by exact enumeration, k = t against the closed-form composed Gaussian, k = 1 against
random allocation, and the certified bracket around the exact divergence of the released pair
(quadrature at t = 3, Monte Carlo with its standard error at t = 20)."""

from __future__ import annotations

import itertools
import math
import warnings
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import integrate, special

from dpplugins.accountants import create
from dpplugins.amplification.allocation import random_allocation_pld
from dpplugins.amplification.allocation_participations import (k_out_of_t_pld,
                                                               participation_blocks)
from dpplugins.errors import ParameterError
from dpplugins.events import GaussianEvent, RandomAllocationEvent
from dpplugins.pld import AccuracyWarning


@pytest.mark.parametrize("t,k", [(5, 2), (6, 4), (4, 3)])
def test_random_partition_then_one_per_block_is_a_uniform_k_set(t, k):
    """Enumerate every ordering of the steps (a uniform random partition into the blocks of
    ``participation_blocks``) and every choice of one step per block."""
    sizes = [size for size, count in participation_blocks(t, k) for _ in range(count)]
    assert sum(sizes) == t and len(sizes) == k
    law = Counter()
    for order in itertools.permutations(range(t)):
        blocks, start = [], 0
        for size in sizes:
            blocks.append(order[start:start + size])
            start += size
        weight = Fraction(1, math.prod(sizes))
        for choice in itertools.product(*blocks):
            law[frozenset(choice)] += weight
    total = sum(law.values())
    assert len(law) == math.comb(t, k)
    assert all(v / total == Fraction(1, math.comb(t, k)) for v in law.values())


def _gaussian_delta(mu: float, epsilon: float) -> float:
    """Balle & Wang 2018, Thm 8."""
    return (special.ndtr(mu / 2 - epsilon / mu)
            - math.exp(epsilon + special.log_ndtr(-mu / 2 - epsilon / mu)))


def test_k_equals_t_is_the_composed_gaussian():
    sigma, t, epochs = 2.0, 6, 3
    pld = k_out_of_t_pld(sigma, t, t, epochs)
    mu = math.sqrt(t * epochs) / sigma
    for epsilon in (0.5, 2.0):
        exact = _gaussian_delta(mu, epsilon)
        b = pld.delta_for_epsilon(epsilon)
        assert b.lower <= exact <= b.upper
        assert b.upper - b.lower <= 1e-3 * exact


def test_one_participation_is_random_allocation():
    a = k_out_of_t_pld(1.0, 50, 1, 2).epsilon_for_delta(1e-5)
    b = random_allocation_pld(1.0, 50, 2).epsilon_for_delta(1e-5)
    assert a == b


def _positive_part_mean(alpha: float, beta: float, s: float) -> float:
    """``E[(alpha + beta Y)_+]``, ``Y = e^G``, ``G ~ N(0, s^2)``, ``beta > 0``, in closed form."""
    mean_y = math.exp(s * s / 2)
    if alpha >= 0:
        return alpha + beta * mean_y
    z = math.log(-alpha / beta) / s
    return alpha * special.ndtr(-z) + beta * mean_y * special.ndtr(s - z)


def _exact_remove_delta_two_of_three(sigma: float, epsilon: float) -> float:
    """``E_Q[(dP/dQ - e^eps)_+]`` for ``P = (1/3) sum_{|A|=2} N(1_A, sigma^2 I_3)``: ``dP/dQ =
    c e_2(Y)``, ``c = e^(-1/sigma^2) / 3``, linear in ``Y_3`` (closed form), the rest by
    quadrature."""
    s = 1.0 / sigma
    c = math.exp(-s * s) / 3
    g = math.exp(epsilon)

    def integrand(z2, z1):
        y1, y2 = math.exp(s * z1), math.exp(s * z2)
        weight = math.exp(-(z1 * z1 + z2 * z2) / 2) / (2 * math.pi)
        return weight * _positive_part_mean(c * y1 * y2 - g, c * (y1 + y2), s)

    return integrate.dblquad(integrand, -11, 11, -11, 11, epsabs=1e-13, epsrel=1e-9)[0]


def test_bracket_contains_the_exact_two_of_three_pair():
    """The pair released by one adversary (gradient e_j at step j) lower-bounds the mechanism,
    and the mechanism is below our upper bound: lower <= exact <= upper."""
    sigma = 1.0
    pld = k_out_of_t_pld(sigma, 3, 2, 1)
    for epsilon in (0.5, 2.0):
        exact = _exact_remove_delta_two_of_three(sigma, epsilon)
        b = pld.delta_for_epsilon(epsilon)
        assert b.lower <= exact * (1 + 1e-8) and exact <= b.upper * (1 + 1e-8), (b, exact)


def _log_elementary_symmetric(log_y: np.ndarray, k: int) -> np.ndarray:
    """``log e_k(y)`` row-wise by the recursion ``e_j <- e_j + y_i e_(j-1)`` in logarithms."""
    n, t = log_y.shape
    e = np.full((n, k + 1), -np.inf)
    e[:, 0] = 0.0
    for i in range(t):
        e[:, 1:] = np.logaddexp(e[:, 1:], e[:, :-1] + log_y[:, i:i + 1])
    return e[:, k]


def test_monte_carlo_of_the_released_pair_is_inside_the_bracket():
    sigma, t, k, epsilon, n = 0.8, 20, 3, 1.0, 200_000
    s = 1.0 / sigma
    rng = np.random.default_rng(5)
    g = rng.normal(0.0, s, size=(n, t))
    g[:, :k] += s * s      # under P: the example in steps 0..k-1 (by symmetry)
    loss = (_log_elementary_symmetric(g, k) - k * s * s / 2
            - math.log(math.comb(t, k)))
    value = -np.expm1(np.minimum(epsilon - loss, 0.0))
    estimate, se = float(value.mean()), float(value.std(ddof=1) / math.sqrt(n))
    assert estimate > 10 * se
    b = k_out_of_t_pld(sigma, t, k, 1).delta_for_epsilon(epsilon)
    assert b.lower - 5 * se <= estimate <= b.upper + 5 * se, (b, estimate, se)


def test_bracket_is_narrow_for_many_steps_per_participation():
    b = k_out_of_t_pld(1.0, 1000, 4, 10).epsilon_for_delta(1e-5)
    assert 0 < b.lower <= b.upper <= b.lower * 1.01


def test_accountant_accepts_participations_with_any_checkin_probability():
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(200, 2, GaussianEvent(1.0), participations=3))
    with pytest.warns(AccuracyWarning, match="participations"):   # a 3 % gap, above 1 %
        ours = acc.get_epsilon_bounds(1e-5)
    direct = k_out_of_t_pld(1.0, 200, 3, 2).epsilon_for_delta(1e-5)
    assert ours.lower <= direct.upper and direct.lower <= ours.upper
    mixed = RandomAllocationEvent(200, 1, GaussianEvent(1.0), participations=3,
                                  checkin_probability=0.5)
    assert acc.supports(mixed)
    acc.compose(mixed)
    assert len(acc) == 600


def test_bad_parameters():
    with pytest.raises(ParameterError, match="participations"):
        k_out_of_t_pld(1.0, 5, 6)
    with pytest.raises(ParameterError, match="participations"):
        k_out_of_t_pld(1.0, 5, 0)
    with pytest.raises(ParameterError, match="noise_multiplier"):
        k_out_of_t_pld(-1.0, 5, 2)


# -- check-in probability below 1 with several participations (mixture identities) -------------
def _k_of_3_losses(rng, p: float, epochs: int, n: int):
    """Monte Carlo samples of the privacy loss of one adversary's pair for 2-out-of-3 allocation
    with check-in probability p, sigma = 1 (the example's gradient is 1 in each of its steps,
    everybody else's 0): under P (with the example) and under Q (without)."""
    subsets = np.array(list(itertools.combinations(range(3), 2)))

    def loss(y):
        s = sum(np.exp(y[:, a].sum(axis=1) - 1.0) for a in subsets) / len(subsets)
        return np.log((1 - p) + p * s)

    def sample_p():
        y = rng.normal(size=(n, 3))
        taking_part = rng.random(n) < p
        chosen = subsets[rng.integers(0, len(subsets), n)]
        for c in range(2):
            y[np.arange(n), chosen[:, c]] += taking_part
        return y
    under_p = sum(loss(sample_p()) for _ in range(epochs))
    under_q = sum(loss(rng.normal(size=(n, 3))) for _ in range(epochs))
    return under_p, under_q


@pytest.mark.slow
@pytest.mark.parametrize("p", [0.3, 0.8])
@pytest.mark.parametrize("epochs", [1, 2])
def test_checkin_below_one_with_participations_brackets_monte_carlo(p, epochs):
    """2-out-of-3 allocation, p < 1: the certified upper bound is at least, and the lower bound
    at most, the delta of one concrete adversary's pair (Monte Carlo, 4e5 samples, 5 standard
    errors): a worst case is never below a concrete case, and the lower bound is a
    post-processing of this very adversary's output (module docstring)."""
    rng = np.random.default_rng(7)
    n = 400_000
    under_p, under_q = _k_of_3_losses(rng, p, epochs, n)
    bracket = k_out_of_t_pld(1.0, 3, 2, epochs, checkin_probability=p)
    for eps in (0.25, 0.5, 1.0):
        remove = np.maximum(1 - np.exp(eps - under_p), 0.0)
        add = np.maximum(1 - np.exp(eps + under_q), 0.0)
        se = max(remove.std(), add.std()) / math.sqrt(n)
        truth = max(remove.mean(), add.mean())
        lower, upper = bracket.delta_for_epsilon(eps)
        assert lower <= remove.mean() + 5 * se
        assert upper >= truth - 5 * se


@pytest.mark.slow
def test_checkin_below_one_with_participations_is_monotone_in_p():
    """Taking part with a smaller probability is a post-processing-free mixture towards the
    absent case: the upper bounds grow with p, and p < 1 is never above p = 1 (module
    docstring); each is below the closed form of k Gaussian steps per epoch (mu^2 = epochs k /
    sigma^2, Balle & Wang 2018)."""
    uppers = [k_out_of_t_pld(1.0, 16, 2, 2, checkin_probability=p, lower=False)
              .epsilon_for_delta(1e-5).upper for p in (0.2, 0.5, 0.9, 1.0)]
    assert all(a <= b for a, b in zip(uppers, uppers[1:]))
    from conftest import epsilon_from_delta_curve, gaussian_delta_exact
    assert uppers[-1] <= epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, 2.0), 1e-5)


@pytest.mark.slow
def test_small_noise_with_participations_answers_without_the_summand_grid():
    """sigma = 0.3, 4-out-of-1000: the dominated construction's summands need 6e13 grid cells
    (before: NumericalError advising other methods); the lower bound falls back to the Gaussian
    one, and both bounds lie below the closed form of 4 Gaussian steps (Balle & Wang 2018)."""
    from conftest import epsilon_from_delta_curve, gaussian_delta_exact
    plain = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, 2.0 / 0.3), 1e-5)
    for p in (1.0, 0.5):
        acc = create("balls_and_bins").compose(
            RandomAllocationEvent(1000, 1, GaussianEvent(0.3), participations=4,
                                  checkin_probability=p))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lower, upper = acc.get_epsilon_bounds(1e-5)
        assert 0 < lower <= upper <= plain * (1 + 1e-9)


def test_huge_noise_with_participations_and_checkin_uses_the_closed_form(monkeypatch):
    """sigma = 1e6, p < 1: the profile grid would need 2e7 bins below eps = 0.25 (before: a
    ParameterError about a value_discretization_interval nobody set); the closed form of k
    Gaussian steps answers, without building the profile PLD."""
    from dpplugins.pld import PrivacyLossDistribution
    monkeypatch.setattr(PrivacyLossDistribution, "from_privacy_profile",
                        lambda *a, **k: pytest.fail("the profile PLD was built"))
    from conftest import gaussian_delta_exact
    acc = create("balls_and_bins").compose(
        RandomAllocationEvent(2, 1, GaussianEvent(1e6), participations=2, checkin_probability=0.5))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lower, upper = acc.get_epsilon_bounds(1e-5)
    # 2 Gaussian steps at mu = sqrt(2) / 1e6 have delta(0) = 2 Phi(mu / 2) - 1 < 1e-5: the true
    # epsilon is 0, and a certified closed form may round it up only a little
    assert gaussian_delta_exact(0.0, math.sqrt(2) / 1e6) < 1e-5
    assert 0.0 <= lower <= upper <= 1e-4


@pytest.mark.slow
def test_checkin_below_one_lower_bound_is_a_mixture_pair_at_twenty_steps():
    """2-out-of-20 allocation, p = 0.5, sigma = 1, 3 epochs.  The lower bound is the sum
    observation of the mixture ``(1 - p) Q + p P`` (a post-processing of this adversary's
    output), so it is at most the adversary's remove delta (Monte Carlo, 4e5 samples, 5
    standard errors; the likelihood ratio ``(1 - p) + p e_2(y) / C(20, 2)``, ``y_j = e^(x_j -
    1/2)``, evaluated here from first principles); and it is informative: within 10 % of the
    upper bound at delta = 1e-3 (the old construction, a factor p per epoch: 0.21 of 1.77)."""
    rng = np.random.default_rng(11)
    t, k, p, epochs, n = 20, 2, 0.5, 3, 400_000

    def loss(x):
        y = np.exp(x - 0.5)
        e2 = (y.sum(axis=1) ** 2 - (y * y).sum(axis=1)) / 2
        return np.log((1 - p) + p * e2 / math.comb(t, k))
    under_p = np.zeros(n)
    for _ in range(epochs):
        x = rng.normal(size=(n, t))
        taking_part = rng.random(n) < p
        first = rng.integers(0, t, n)
        second = (first + rng.integers(1, t, n)) % t  # a uniform pair of distinct steps
        x[np.arange(n), first] += taking_part
        x[np.arange(n), second] += taking_part
        under_p += loss(x)
    bracket = k_out_of_t_pld(1.0, t, k, epochs, checkin_probability=p)
    for eps in (0.1, 0.3, 0.6):
        remove = np.maximum(1 - np.exp(eps - under_p), 0.0)
        se = remove.std() / math.sqrt(n)
        lower, upper = bracket.delta_for_epsilon(eps)
        assert 0 < lower <= remove.mean() + 5 * se
        assert upper >= remove.mean() - 5 * se
    b = bracket.epsilon_for_delta(1e-3)
    assert 0.9 * b.upper <= b.lower <= b.upper


def test_few_steps_build_the_lower_construction_once_on_a_bounded_grid(monkeypatch):
    """2-out-of-3 allocation through the accountant took 23 s: the lower construction (the sum
    observation) needed 2.3 M summand cells on the first grid and 4.6 M on the next.  It is now
    built once, on at most 2^18 cells (a coarser rounding is still a post-processing), and the
    finer grids refine the upper bound only.  The bracket still contains the exact delta of the
    released pair (two-dimensional quadrature, as above)."""
    import dpplugins.amplification.allocation_participations as participations
    calls = []
    original = participations.sum_observation_lower_pair

    def counted(*args, **kwargs):
        pair = original(*args, **kwargs)
        calls.append(pair)
        return pair
    monkeypatch.setattr(participations, "sum_observation_lower_pair", counted)
    acc = create("balls_and_bins")
    acc.compose(RandomAllocationEvent(3, 1, GaussianEvent(1.0), participations=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        bounds = acc.get_delta_bounds(2.0)
    assert len(calls) == 1
    assert len(calls[0].pairs["remove"][0]) <= 3 * participations._LOWER_CELLS
    exact = _exact_remove_delta_two_of_three(1.0, 2.0)
    assert bounds.lower <= exact * (1 + 1e-8) and exact <= bounds.upper * (1 + 1e-8)
    assert bounds.lower >= 0.6 * exact  # the sum observation keeps 0.66 of it, on any grid


def test_the_full_epoch_profile_is_certified_once_and_reused_on_coarser_grids():
    """``checkin_profile_epoch`` with a ``profile_key``: the ``p = 1`` epoch's profile (hundreds
    of certified queries) is computed on the first grid and reused on coarser ones (the window
    budget of the accountants builds those), not on finer ones; the coarser epoch built from
    the reused profile answers within 1 % of one built from its own, and every answer is above
    the ``p = 1`` epoch's certified lower bound carried through the mixture identity (exact
    for the remove direction)."""
    from dpplugins.amplification import allocation_participations as ap
    calls = []
    sigma, t, k, p = 1.0, 6, 2, 0.5

    def epoch_for(h, key):
        def full():
            calls.append(h)
            return k_out_of_t_pld(sigma, t, k, 1, value_discretization_interval=h,
                                  lower=False).upper
        return ap.checkin_profile_epoch(full, p, h, "test epoch", tail_mass=1e-15,
                                        memory_limit=1 << 30, gaussian_mu2=k / sigma ** 2,
                                        profile_key=key)
    key = ("test", sigma, t, k, object())  # a key no other test shares
    fine, coarse = 2e-3, 5e-3
    answers = [epoch_for(fine, key).delta_for_epsilon(0.5).upper]
    reused = epoch_for(coarse, key).delta_for_epsilon(0.5).upper
    assert calls == [fine]
    fresh = epoch_for(coarse, None).delta_for_epsilon(0.5).upper
    assert calls == [fine, coarse]
    epoch_for(fine / 2, key).delta_for_epsilon(0.5)  # finer than the cached grid: computed
    assert calls == [fine, coarse, fine / 2]
    assert abs(reused - fresh) <= 0.01 * fresh
    # the remove direction of the p < 1 epoch is p H_full(log(1 + (e^eps - 1)/p)) exactly; the
    # p = 1 epoch's certified lower bound there bounds it from below
    full = k_out_of_t_pld(sigma, t, k, 1, value_discretization_interval=1e-3)
    inner = math.log1p(math.expm1(0.5) / p)
    lower = p * full.delta_for_epsilon(inner).lower
    assert lower > 0 and all(lower <= value for value in answers + [reused, fresh])
