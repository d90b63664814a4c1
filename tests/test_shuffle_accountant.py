"""The shuffled-epochs accountant: its upper bound against the closed-form Gaussian composition
(no amplification), its lower bound against the Chua et al. "cube" test computed directly from
Gaussian CDFs, batch size 1 against the amplification functions, and its input checks."""

import json
import math

import numpy as np
import pytest
from scipy.special import log_ndtr

from conftest import epsilon_from_delta_curve, gaussian_delta_exact
from dpplugins.accountants.shuffle import ShuffleAccountant
from dpplugins.amplification import shuffle, swap
from dpplugins.errors import ParameterError


def gaussian_epsilon_exact(mu, delta):
    return epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)


def cube_test_epsilon(sigma, steps, delta, mean_p, mean_q):
    """One epoch: the largest eps at which some set {max_t y_t > C} (or its complement) has
    P(S) - e^eps Q(S) > delta, in either direction, with P, Q the Chua et al. mixtures; computed
    directly from Gaussian CDFs on a grid of C (independent of our binning and PLD code)."""
    caps = np.linspace(-6 * sigma, 14 * sigma + 2, 100_001)

    def out_cube(mean):
        return -np.expm1(log_ndtr((caps - mean) / sigma) + (steps - 1) * log_ndtr(caps / sigma))

    p, q = out_cube(mean_p), out_cube(mean_q)

    def delta_at(eps):
        x = math.exp(eps)
        return max(np.max(p - x * q), np.max(q - x * p), np.max((1 - q) - x * (1 - p)),
                   np.max((1 - p) - x * (1 - q)))

    lo, hi = 0.0, 50.0
    if delta_at(0.0) <= delta:
        return 0.0
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if delta_at(mid) > delta else (lo, mid)
    return lo


# ---------------------------------------------------------------------------------------------
# upper bound = no amplification for batches of b > 1
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("neighbouring,sens", [("add_remove", 1.0), ("replace_one", 2.0)])
def test_batches_upper_bound_is_the_gaussian_composition(neighbouring, sens):
    acc = ShuffleAccountant(batch_size=64, neighbouring=neighbouring)
    acc.step(noise_multiplier=1.2, sample_rate=1 / 50, count=50 * 8)  # 8 epochs
    for delta in [1e-5, 1e-8]:
        lower, upper = acc.get_epsilon_bounds(delta)
        exact = gaussian_epsilon_exact(sens * math.sqrt(8) / 1.2, delta)
        assert exact <= upper <= exact * (1 + 1e-6)
        assert 0 < lower <= upper
    for eps in [0.5, 3.0]:
        b = acc.get_delta_bounds(eps)
        exact = gaussian_delta_exact(eps, sens * math.sqrt(8) / 1.2)
        assert exact <= b.upper <= exact * (1 + 1e-9) + 1e-300
        assert b.lower <= b.upper


def test_composed_gaussian_mu_is_never_below_its_exact_value():
    """The upper bounds of batches b > 1 are the Gaussian composition's: ``mu = c sqrt(sum_e
    1/sigma_e^2)`` in floats was below its exact value at about half of the histories below
    (a few ulps); it is rounded up now.  Checked in 50-digit arithmetic from the exact float
    noise multipliers."""
    import mpmath

    rng = np.random.default_rng(3)
    below = 0
    for _ in range(40):
        acc = ShuffleAccountant(batch_size=10, neighbouring="replace_one")
        sigmas = [float(s) for s in 10 ** rng.uniform(-1, 1, size=3)]
        for sigma in sigmas:
            acc.step(noise_multiplier=sigma, sample_rate=0.01, count=int(rng.integers(1, 4)) * 100)
        plan = acc.plan()
        with mpmath.workdps(50):
            exact = 2 * mpmath.sqrt(sum(count / mpmath.mpf(smin) ** 2
                                        for (smin, _, _), count in plan.epochs.items()))
            mu = acc._mu_total(plan)
            assert mpmath.mpf(mu) >= exact
            assert mu <= exact * (1 + 2e-12)
            below += float(mpmath.mpf(float(exact)) < exact)
    assert below > 0   # the sweep has histories whose float mu rounds below the exact one


@pytest.mark.parametrize("sigma,k", [(1e-12, 0.0), (1e-14, 0.0), (1e-14, -1.0), (1e-10, 0.5)])
def test_batches_upper_delta_is_above_the_exact_gaussian_at_a_tiny_noise(sigma, k):
    """At ``eps = mu^2/2 + k mu`` the argument ``-eps/mu + mu/2`` of the Gaussian profile cancels,
    and for ``mu = 1/sigma = 1e12`` its rounding moved the upper bound below the exact delta
    (0.5000000000005 where it is 0.5000033466; at ``sigma = 1e-14`` 0.50000 where it is
    0.50083).  Checked against the profile in 200-digit arithmetic (mpmath, exact float inputs),
    not against our own Gaussian code."""
    import mpmath

    acc = ShuffleAccountant(batch_size=256)
    acc.step(noise_multiplier=sigma, sample_rate=1 / 200, count=200)   # one epoch, zero-out
    with mpmath.workdps(200):
        mu = 1 / mpmath.mpf(sigma)
        eps = float(mu) ** 2 / 2 + k * float(mu)
        e = mpmath.mpf(eps)
        ncdf = lambda x: mpmath.erfc(-x / mpmath.sqrt(2)) / 2  # noqa: E731
        exact = ncdf(-e / mu + mu / 2) - mpmath.exp(e) * ncdf(-e / mu - mu / 2)
    assert acc.get_delta_bounds(eps).upper >= exact


@pytest.mark.parametrize("sigma", [3.0, 30.0, 300.0, 1e4])
def test_batch_size_one_epoch_profile_is_never_below_the_exact_gaussian(sigma):
    """The per-epoch profile of batch size 1 is the minimum of the amplified one and the plain
    Gaussian ``delta(eps)``; that was the log-space value times ``1 + 1e-12``, which cancels for
    small ``mu`` and was below the exact profile from noise 3 on (a relative 2.8e-9 at noise 300,
    a hostile sweep).  Reference: 80-digit arithmetic (mpmath, exact float inputs)."""
    import mpmath

    acc = ShuffleAccountant(batch_size=1)
    profile, amplified = acc._epoch_profile(sigma, 2)   # two users: little amplification
    eps = np.geomspace(1e-5, 20.0, 120)
    values, other = profile(eps), amplified(eps)
    with mpmath.workdps(80):
        mu = 1 / mpmath.mpf(sigma)   # zero-out: sensitivity 1
        ncdf = lambda x: mpmath.erfc(-x / mpmath.sqrt(2)) / 2  # noqa: E731
        for e, v, w in zip(eps, values, other):
            x = mpmath.mpf(e)
            exact = ncdf(-x / mu + mu / 2) - mpmath.exp(x) * ncdf(-x / mu - mu / 2)
            assert v >= min(exact, w), e   # the Gaussian part is never below its exact value


def test_mixed_noise_and_partial_epoch_use_the_smallest_noise_of_each_epoch():
    acc = ShuffleAccountant(batch_size=10)
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=250)  # epochs 1, 2 and half of 3
    acc.step(noise_multiplier=2.0, sample_rate=0.01, count=160)  # rest of 3, epoch 4, 10 steps
    # epochs: sigma_min = 1, 1, 1 (mixed), 2, 2 (partial)
    mu = math.sqrt(3 / 1.0 + 2 / 4.0)
    upper = acc.get_epsilon(1e-6)
    exact = gaussian_epsilon_exact(mu, 1e-6)
    assert exact <= upper <= exact * (1 + 1e-6)
    plan = acc.plan()
    assert plan.steps_per_epoch == 100
    assert plan.epochs == {(1.0, 1.0, 100): 2, (1.0, 2.0, 100): 1, (2.0, 2.0, 100): 1,
                           (2.0, 2.0, 10): 1}


def test_never_above_no_amplification_and_never_below_lower_bound():
    for sigma, T, epochs in [(0.8, 20, 3), (1.5, 100, 2), (4.0, 10, 10)]:
        acc = ShuffleAccountant(batch_size=32, dataset_size=32 * T)
        acc.step(noise_multiplier=sigma, sample_rate=1 / T, count=T * epochs)
        lower, upper = acc.get_epsilon_bounds(1e-6)
        assert lower <= upper <= acc.no_amplification_epsilon(1e-6)
        assert lower == pytest.approx(
            shuffle.shuffle_lower_bound(sigma, T, epochs, 1e-6), rel=1e-9)


def test_unknown_dataset_size_assumes_drop_last_for_the_lower_bound():
    """Without dataset_size an example may be dropped (N up to T b + b - 1), so the lower bound
    must use a smaller chance that the example is used; with dataset_size = T b it is 1."""
    sigma, T, b = 1.0, 20, 32
    known = ShuffleAccountant(batch_size=b, dataset_size=T * b)
    unknown = ShuffleAccountant(batch_size=b)
    dropped = ShuffleAccountant(batch_size=b, dataset_size=T * b + b - 1)
    for acc in (known, unknown, dropped):
        acc.step(noise_multiplier=sigma, sample_rate=1 / T, count=2 * T)
    lk, uk = known.get_epsilon_bounds(1e-6)
    lu, uu = unknown.get_epsilon_bounds(1e-6)
    ld, _ = dropped.get_epsilon_bounds(1e-6)
    assert uk == uu
    assert ld == pytest.approx(lu, rel=1e-9)
    assert 0 < lu < lk <= uk


# ---------------------------------------------------------------------------------------------
# lower bound
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sigma,steps", [(1.0, 100), (0.8, 1000), (2.0, 50)])
def test_single_epoch_lower_bound_matches_the_cube_test(sigma, steps):
    ours = shuffle.shuffle_lower_bound(sigma, steps, 1, 1e-5)
    cube = max(cube_test_epsilon(sigma, steps, 1e-5, 2.0, 1.0),
               cube_test_epsilon(sigma, steps, 1e-5, 1.0, 0.0))
    # the max statistic's likelihood ratio is monotone, so its best test is a cube set: the two
    # agree up to the PLD grid (ours is certified, hence never above the exact value)
    assert ours == pytest.approx(cube, rel=2e-3, abs=1e-3)
    no_amp = gaussian_epsilon_exact(1.0 / sigma, 1e-5)
    assert ours <= no_amp


def test_lower_bound_grows_with_epochs_and_replace_one_is_larger():
    one = shuffle.shuffle_lower_bound(1.0, 100, 1, 1e-6)
    five = shuffle.shuffle_lower_bound(1.0, 100, 5, 1e-6)
    assert 0 < one < five <= gaussian_epsilon_exact(math.sqrt(5), 1e-6)
    replace = shuffle.shuffle_lower_bound(1.0, 100, 5, 1e-6, neighbouring="replace_one")
    assert five < replace <= gaussian_epsilon_exact(2 * math.sqrt(5), 1e-6)


def test_partial_epoch_lower_bound_uses_only_released_steps():
    full = shuffle.max_statistic_pair(1.0, 100, 2.0, 1.0)
    half = shuffle.max_statistic_pair(1.0, 100, 2.0, 1.0, released_steps=50)
    for p, q in (full, half):
        assert abs(p.sum() - 1) < 1e-12 and abs(q.sum() - 1) < 1e-12
    # fewer released steps and a 1/2 chance of holding the record: less distinguishable
    tv_full = 0.5 * np.abs(full[0] - full[1]).sum()
    tv_half = 0.5 * np.abs(half[0] - half[1]).sum()
    assert tv_half < tv_full


def test_partial_epoch_pair_tail_is_exact():
    """The mixture's log-CDF kept its tail (it was rounded to multiples of 1.1e-16, and the
    pair of half an epoch of n = 2 at sigma = 1 certified 11.95 at delta = 1e-12).  Exact value
    of P = N(2,1)/2 + N(0,1)/2 against Q = N(1,1)/2 + N(0,1)/2: 7.13855 (mpmath)."""
    from dpplugins.pld import PrivacyLossDistribution
    p, q = shuffle.max_statistic_pair(1.0, 2, 2.0, 1.0, released_steps=1)
    pld = PrivacyLossDistribution.from_pmfs(p, q, symmetric=False,
                                            value_discretization_interval=1e-3)
    assert 7.1 < pld.epsilon_for_delta(1e-12).lower <= 7.13856


# ---------------------------------------------------------------------------------------------
# batch size 1: agrees with the amplification functions
# ---------------------------------------------------------------------------------------------
def test_batch_size_one_agrees_with_amplification_functions():
    sigma, n, delta = 300.0, 10**6, 1e-6
    acc = ShuffleAccountant(batch_size=1)
    acc.step(noise_multiplier=sigma, sample_rate=1 / n, count=n)
    upper = acc.get_epsilon(delta)
    plain = gaussian_epsilon_exact(1 / sigma, delta)
    # the amplified profile (Balle et al. 2020 Thm 5.1 over a grid of (eps0, delta0) splits),
    # inverted directly, and one split evaluated through shuffle.epsilon
    profile = swap.gaussian_profile(sigma, n)
    direct = epsilon_from_delta_curve(lambda e: float(profile(np.array([e]))[0]), delta, hi=0.1)
    assert direct < plain
    assert upper == pytest.approx(direct, rel=1e-3)
    eps0 = 0.0623
    delta0 = float(swap.gaussian_local_delta(np.array([eps0]), sigma)[0])
    split = shuffle.epsilon(eps0, n, delta, delta0=delta0, method="balle2020").epsilon
    assert upper <= split * (1 + 1e-3)


def test_batch_size_one_with_little_noise_is_no_amplification():
    acc = ShuffleAccountant(batch_size=1, dataset_size=1000)
    acc.step(noise_multiplier=1.0, sample_rate=1e-3, count=2000)
    lower, upper = acc.get_epsilon_bounds(1e-6)
    assert upper == pytest.approx(gaussian_epsilon_exact(math.sqrt(2), 1e-6), rel=1e-6)
    assert 0 < lower <= upper
    assert "Poisson" in acc.summary(1e-6)


# ---------------------------------------------------------------------------------------------
# options, input checks, state
# ---------------------------------------------------------------------------------------------
def test_batch_size_is_required_and_alias_works():
    with pytest.raises(ParameterError, match="batch_size"):  # step() needs the protocol
        ShuffleAccountant().step(noise_multiplier=1.0, sample_rate=0.01)
    assert ShuffleAccountant(examples_per_step=8).batch_size == 8
    with pytest.raises(ParameterError, match="examples_per_step"):
        ShuffleAccountant(batch_size=4, examples_per_step=8)
    with pytest.raises(ParameterError, match="batch_size"):
        ShuffleAccountant(batch_size=0)
    with pytest.raises(ParameterError, match="dataset_size"):
        ShuffleAccountant(batch_size=10, dataset_size=5)
    with pytest.raises(ParameterError, match="neighbouring"):
        ShuffleAccountant(batch_size=10, neighbouring="swap_one")


def test_sample_rate_must_match_shuffled_epochs():
    # refused when recorded (the ledger is left untouched), no longer at the first query
    acc = ShuffleAccountant(batch_size=10)
    with pytest.raises(ParameterError, match="sample_rate"):
        acc.step(noise_multiplier=1.0, sample_rate=0.3, count=5)  # 1/0.3 is not an integer
    assert len(acc) == 0
    acc = ShuffleAccountant(batch_size=10)
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=5)
    with pytest.raises(ParameterError, match="protocol"):
        acc.step(noise_multiplier=1.0, sample_rate=0.02, count=5)  # the epoch length changed
    assert len(acc) == 5
    acc = ShuffleAccountant(batch_size=10, dataset_size=1000)
    with pytest.raises(ParameterError, match="sample_rate"):
        acc.step(noise_multiplier=1.0, sample_rate=1 / 50, count=5)  # 1000 / 10 = 100 steps
    ok = ShuffleAccountant(batch_size=10, dataset_size=1005)  # ceil -> 101, drop_last -> 100
    for steps in (100, 101):
        ok.history = [(1.0, 1 / steps, steps)]
        assert ok.get_epsilon(1e-5) > 0


def test_state_dict_round_trip_and_options():
    acc = ShuffleAccountant(batch_size=16, dataset_size=1600, neighbouring="replace_one")
    acc.step(noise_multiplier=1.1, sample_rate=0.01, count=300)
    state = json.loads(json.dumps(acc.state_dict()))
    assert state["accountant"] == "shuffle"
    fresh = ShuffleAccountant(batch_size=16, dataset_size=1600, neighbouring="replace_one")
    fresh.load_state_dict(state)
    assert fresh.get_epsilon(1e-5) == acc.get_epsilon(1e-5)
    with pytest.raises(ParameterError):
        ShuffleAccountant(batch_size=32).load_state_dict(state)


def test_bad_queries_raise_parameter_error():
    acc = ShuffleAccountant(batch_size=4)
    acc.step(noise_multiplier=1.0, sample_rate=0.1, count=10)
    for delta in (-0.1, 1.0, math.nan):
        with pytest.raises(ParameterError, match="delta"):
            acc.get_epsilon(delta)
    assert acc.get_epsilon(0.0) == math.inf   # delta = 0: Gaussian noise has no pure-DP epsilon
    with pytest.raises(ParameterError, match="epsilon"):
        acc.get_delta(-1.0)
    with pytest.raises(ParameterError, match="noise_multiplier"):
        shuffle.shuffle_lower_bound(-1.0, 10, 1, 1e-5)
    with pytest.raises(ParameterError, match="epochs"):
        shuffle.shuffle_lower_bound(1.0, 10, 0, 1e-5)


@pytest.mark.parametrize("delta", [1e-12, 1e-14])
def test_lower_bound_far_in_the_tail_comes_from_a_larger_delta(delta):
    """60,000 examples, batches of 600, 100 epochs, sigma 1: the lower-bound pairs certify
    nothing below about 1e-11 (their error terms), and the lower bound was 0 there (44.08 at
    1e-10).  epsilon(delta) does not increase with delta, so the lower bound certified at a
    larger delta holds.  Independent check: it stays below the closed-form epsilon of 100
    Gaussian steps without amplification (mu = 10, an upper bound on the truth: each epoch is
    a post-processing of one Gaussian step)."""
    from dpplugins.events import GaussianEvent, ShuffledEpochsEvent
    from scipy.optimize import brentq

    acc = ShuffleAccountant()
    acc.compose(ShuffledEpochsEvent(60_000, 600, 100, GaussianEvent(1.0)))
    bounds = acc.get_epsilon_bounds(delta)
    no_amplification = brentq(lambda e: gaussian_delta_exact(e, 10.0) - delta, 1.0, 500.0)
    assert 40.0 < bounds.lower <= bounds.upper
    assert bounds.lower <= no_amplification


def test_one_protocol_per_ledger_is_still_enforced_after_no_ops_and_non_private_steps():
    """The compose-time checks look at the newest event and the last relevant leaf before it
    (``base.leaves_to_check``; the whole ledger was scanned at every compose: 6,000 distinct
    per-step events took 54 s to record).  A no-op or a non-private step between two protocols
    must not hide the first one."""
    from dpplugins.accountants import UnsupportedEventError, create
    from dpplugins.accountants.base import leaves_to_check
    from dpplugins.events import (GaussianEvent, NonPrivateEvent, NoOpEvent, ShuffledEpochsEvent,
                                  ShuffleEvent, RandomizedResponseEvent, SwapEvent)

    first = ShuffledEpochsEvent(100, 10, 1, GaussianEvent(1.0))
    acc = create("shuffle")
    for i in range(50):   # a noise schedule: 50 distinct events of one protocol
        acc.compose(first.with_event(GaussianEvent(1.0 + i / 100)).with_steps(1))
    acc.compose(NoOpEvent())
    acc.compose(NonPrivateEvent())
    with pytest.raises(UnsupportedEventError, match="one shuffled-epochs protocol"):
        acc.compose(ShuffledEpochsEvent(200, 10, 1, GaussianEvent(1.0)))
    assert len(acc.history) == 52
    rounds = create("shuffle").compose(ShuffleEvent(100, RandomizedResponseEvent(1.0, 2)))
    rounds.compose(NonPrivateEvent())
    with pytest.raises(UnsupportedEventError, match="shuffle-model rounds"):
        rounds.compose(first)
    swap = create("swap").compose(SwapEvent(100, 1, GaussianEvent(1.0)))
    swap.compose(NoOpEvent())
    with pytest.raises(UnsupportedEventError, match="one shuffled-epochs protocol"):
        swap.compose(SwapEvent(101, 1, GaussianEvent(1.0)))
    # what the check looks at: the newest event's leaves and the last relevant leaf before it
    history = (first, NonPrivateEvent(), NoOpEvent(), first.with_steps(3))
    got = leaves_to_check(history, lambda e: isinstance(e, ShuffledEpochsEvent))
    assert [leaf for leaf, _ in got] == [first, first.with_steps(3)]
    assert [leaf for leaf, _ in leaves_to_check(history)] == [NonPrivateEvent(),
                                                              first.with_steps(3)]


def test_summary_of_an_empty_or_non_private_ledger():
    """``summary`` of an empty ``shuffle`` or ``swap`` ledger raised an AttributeError, and of
    one with a non-private step a TypeError (found by a hostile sweep)."""
    from dpplugins.accountants import create
    from dpplugins.events import GaussianEvent, NonPrivateEvent, NoOpEvent, SwapEvent

    for name in ("shuffle", "swap"):
        acc = create(name)
        assert "no private step recorded, epsilon in [0, 0]" in acc.summary(1e-5)
        acc.compose(NoOpEvent())
        assert "no private step recorded, epsilon in [0, 0]" in acc.summary(1e-5)
        with pytest.raises(ParameterError, match="delta"):
            acc.summary(2.0)
        acc.compose(NonPrivateEvent())
        assert "a non-private step recorded, epsilon in [inf, inf]" in acc.summary(1e-5)
        assert acc.no_amplification_epsilon(1e-5) == math.inf
    acc = create("swap").compose(SwapEvent(100, 1, GaussianEvent(1.0)))
    assert "epsilon in [" in acc.summary(1e-5) and acc.no_amplification_epsilon(1e-5) > 0


def test_noise_near_the_float_limit_answers_without_numpy_warnings():
    """A hostile sweep: noise_multiplier = 1e308 overflowed the lower-bound pair's window
    (numpy's "invalid value encountered in multiply" from linspace).  The pair is now the
    trivial one-bin statistic (a post-processing, lower bound 0), and the answer is ordered."""
    import warnings

    from dpplugins.accountants import create
    from dpplugins.samplers import ShuffledEpochs

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p, q = shuffle.max_statistic_pair(1e308, 10, 1.0, 0.0)
        bounds = create("shuffle").compose(ShuffledEpochs(1000, 10).event(1e308, 2)) \
            .get_epsilon_bounds(1e-5)
    assert p.tolist() == q.tolist() == [1.0]
    assert 0.0 == bounds.lower <= bounds.upper
