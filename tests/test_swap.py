"""Amplification by swapping (Balle et al. 2020, Thm A.5 / 5.1) and the swap accountant.

References used: brute-force shuffled randomized response (every dataset of a few users) for
validity, the theorem's own admissibility condition re-evaluated independently, the closed-form
Gaussian composition (no amplification), and the basic composition theorem for multi-epoch
composition (PLD/FFT composition must never be worse than it)."""

import itertools
import math

import numpy as np
import pytest

from conftest import epsilon_from_delta_curve, gaussian_delta_exact
from dpplugins.accountants.swap import SwapAccountant
from dpplugins.amplification import shuffle, swap
from dpplugins.errors import ParameterError
from conftest import legacy_step  # noqa: E402


def shuffled_rr_worst_delta(eps0, n, eps):
    """Exact delta(eps) of shuffled binary RR, max over every pair of neighbouring datasets."""
    keep = math.exp(eps0) / (1 + math.exp(eps0))

    def count_dist(data):
        dist = {}
        for outs in itertools.product((0, 1), repeat=len(data)):
            pr = math.prod(keep if o == x else 1 - keep for x, o in zip(data, outs))
            dist[sum(outs)] = dist.get(sum(outs), 0.0) + pr
        return dist

    worst = 0.0
    for ones in range(n):
        others = (1,) * ones + (0,) * (n - 1 - ones)
        p, q = count_dist((0,) + others), count_dist((1,) + others)
        for a, b in ((p, q), (q, p)):
            worst = max(worst, sum(max(a[k] - math.exp(eps) * b.get(k, 0.0), 0.0) for k in a))
    return worst


@pytest.mark.parametrize("eps0", [0.05, 0.2])
@pytest.mark.parametrize("n", [4, 8])
def test_swap_bound_is_valid_for_brute_force_shuffled_rr(eps0, n):
    for delta in [0.3, 0.1, 0.01]:
        bound = swap.epsilon(eps0, n, delta).epsilon
        assert shuffled_rr_worst_delta(eps0, n, bound) <= delta + 1e-12


def test_profile_is_the_exact_inverse_of_epsilon():
    eps0, n = 0.8, 50_000
    profile = swap.pure_profile(eps0, n)
    for delta in [1e-3, 1e-6, 1e-10]:
        eps = swap.epsilon(eps0, n, delta).epsilon
        assert profile(np.array([eps]))[0] == pytest.approx(delta, rel=1e-9)
    a, _ = swap.coefficients(eps0, n)
    assert profile(np.array([0.0, a * 0.5]))[0] == 1.0


def test_minimal_delta1_satisfies_the_admissibility_condition_tightly():
    def allowed(eps0, delta1):  # the condition of Thm A.5 / 5.1, written out again
        return ((1 - math.exp(-eps0)) * delta1
                / (4 * math.exp(eps0) * (2 + math.log(2 / delta1)
                                         / math.log(1 / (1 - math.exp(-5 * eps0))))))
    for eps0, delta0 in [(0.05, 1e-20), (0.3, 1e-12), (1.0, 1e-9)]:
        d1 = swap.minimal_delta1(eps0, delta0)
        assert allowed(eps0, d1) >= delta0
        assert allowed(eps0, d1 * (1 - 1e-6)) < delta0
    assert swap.minimal_delta1(0.5, 0.0) == 0.0


@pytest.mark.parametrize("eps0,n", [(8.26617907227561, 10), (5.0, 10), (3.0, 1000), (1.0, 10**6),
                                    (0.3, 10**9)])
def test_pure_profile_and_epsilon_are_never_below_the_exact_formula(eps0, n):
    """Thm A.5 evaluated in 80-digit arithmetic (mpmath, exact float inputs): the epsilon was a
    few ulps below ``A + B sqrt(2 log(1/delta) / n)`` at about half of the inputs, and the profile
    cancels in ``eps - A`` (``A / B ~ e^(3 eps0 / 2)``): a relative 2.4e-6 below the exact
    ``exp(-n ((eps - A) / B)^2 / 2)`` at eps0 = 8.27, n = 10 (a hostile sweep)."""
    import mpmath

    profile = swap.pure_profile(eps0, n)
    with mpmath.workdps(80):
        e0 = mpmath.mpf(eps0)
        em1 = mpmath.expm1(e0)
        a, b = mpmath.exp(3 * e0) * em1 ** 2 / (2 * n), mpmath.exp(e0 * 3 / 2) * em1
        for z in [0.5, 1.0, 2.0, 3.0, 4.0, 5.0]:
            eps = float(a + b * z * mpmath.sqrt(mpmath.mpf(2) / n))
            exact = mpmath.exp(-n * ((eps - a) / b) ** 2 / 2)
            assert profile(np.array([eps]))[0] >= exact, (z, eps)
        for delta in [1e-12, 1e-7, 1e-5, 0.01, 0.5]:
            exact = a + b * mpmath.sqrt(2 * mpmath.log(1 / mpmath.mpf(delta)) / n)
            assert swap.epsilon(eps0, n, delta).epsilon >= exact, delta


def test_approximate_version_splits_delta_as_stated():
    eps0, n, delta0, delta = 0.05, 10**7, 1e-20, 1e-6
    res = swap.epsilon(eps0, n, delta, delta0=delta0)
    assert res.delta1 == swap.minimal_delta1(eps0, delta0)
    a, b = swap.coefficients(8 * eps0, n)
    inner = math.exp(-0.5 * n * ((res.epsilon - a) / b) ** 2)
    assert inner + n * (math.exp(res.epsilon) + 1) * res.delta1 <= delta * (1 + 1e-9)
    assert res.epsilon > swap.epsilon(eps0, n, delta).epsilon  # the 8 eps0 price


@pytest.mark.parametrize("kwargs,name", [
    (dict(eps0=-1.0, n=10, delta=1e-6), "eps0"),
    (dict(eps0=1.0, n=1, delta=1e-6), "n"),
    (dict(eps0=1.0, n=10, delta=2.0), "delta"),
    (dict(eps0=1.0, n=10, delta=1e-6, delta0=1.5), "delta0"),
    (dict(eps0=0.5, n=1000, delta=1e-6, delta0=1e-3), "delta0"),  # no admissible split
])
def test_bad_input_raises_parameter_error(kwargs, name):
    with pytest.raises(ParameterError, match=name):
        swap.epsilon(**kwargs)


def test_shuffle_balle_bound_is_the_swap_bound():
    assert shuffle.balle2020_epsilon(0.7, 20_000, 1e-7).epsilon == \
        swap.epsilon(0.7, 20_000, 1e-7).epsilon


# ---------------------------------------------------------------------------------------------
# the accountant
# ---------------------------------------------------------------------------------------------
def gaussian_epsilon_exact(mu, delta):
    return epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)


def test_swap_accountant_one_epoch_is_the_amplified_profile():
    sigma, n, delta = 300.0, 10**6, 1e-6
    acc = SwapAccountant()
    acc.compose(legacy_step(acc, sigma, 1 / n), n)
    profile = swap.gaussian_profile(sigma, n)
    direct = epsilon_from_delta_curve(lambda e: float(profile(np.array([e]))[0]), delta, hi=0.1)
    lower, upper = acc.get_epsilon_bounds(delta)
    assert upper == pytest.approx(direct, rel=1e-3)
    assert 0 <= lower <= upper < gaussian_epsilon_exact(1 / sigma, delta)


def test_swap_accountant_composes_epochs_no_worse_than_basic_composition():
    sigma, n, epochs = 300.0, 10**6, 3
    one = SwapAccountant()
    one.compose(legacy_step(one, sigma, 1 / n), n)
    many = SwapAccountant()
    many.compose(legacy_step(many, sigma, 1 / n), epochs * n)
    eps1 = one.get_epsilon(1e-7)
    upper = many.get_epsilon(epochs * 1e-7)
    assert one.get_epsilon(1e-6) < upper <= epochs * eps1  # basic composition theorem
    assert upper <= many.no_amplification_epsilon(epochs * 1e-7)


def test_swap_accountant_with_little_noise_is_no_amplification_and_checks_input():
    acc = SwapAccountant(dataset_size=500, neighbouring="replace_one")
    acc.compose(legacy_step(acc, 2.0, 1 / 500), 1000)
    upper = acc.get_epsilon(1e-5)
    assert upper == pytest.approx(gaussian_epsilon_exact(2 * math.sqrt(2) / 2.0, 1e-5), rel=1e-6)
    assert acc.state_dict()["accountant"] == "swap"
    bad = SwapAccountant(dataset_size=500)
    with pytest.raises(ParameterError, match="sample_rate"):  # refused when recorded
        bad.compose(legacy_step(bad, 2.0, 1 / 400), 10)


def test_lower_bound_of_many_epochs_is_at_least_one_epochs():
    """One epoch's outputs are a marginal of the run's on the lower-bound pair's fixed
    datasets, so a run's lower bound is at least its most revealing epoch's.  The run's own
    composition is held on a grid that coarsens with the number of epochs: n = 10^6, sigma =
    1 gave 0.0204 for one epoch and 0 for 1000 epochs (found by a hostile sweep); the single
    epoch is now asked as well."""
    from dpplugins.accountants import create
    from dpplugins.events import GaussianEvent, SwapEvent

    one = create("swap").compose(SwapEvent(10**6, 1, GaussianEvent(1.0)))
    single = one.get_epsilon_bounds(1e-5).lower
    single_delta = one.get_delta_bounds(1.0).lower
    assert single > 0 and single_delta > 0
    for epochs in (10, 1000):
        run = create("swap").compose(SwapEvent(10**6, epochs, GaussianEvent(1.0)))
        lower, upper = run.get_epsilon_bounds(1e-5)
        assert single <= lower <= upper
        # and below the truth's independent upper bound: each epoch is a post-processing of
        # one Gaussian step (mu = 1 at sigma = 1), so mu = sqrt(epochs) in closed form
        mu = math.sqrt(epochs)
        assert gaussian_delta_exact(lower, mu) >= 1e-5
        lower, upper = run.get_delta_bounds(1.0)
        assert single_delta <= lower <= upper and lower <= gaussian_delta_exact(1.0, mu)
