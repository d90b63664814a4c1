"""The PNSGD accountant (registry name "pnsgd") against references built in this file from scipy:
one pass against the closed-form bound, several passes against the PLD engine fed with an
independently computed per-pass profile, and the accountant contract."""

import json
import math
import re

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

from conftest import epsilon_from_delta_curve, gaussian_delta_exact
from dpplugins.accountants import available, create, get_class
from dpplugins.accountants.pnsgd import PNSGDAccountant, split_into_passes
from dpplugins.errors import ParameterError
from dpplugins.pld import PrivacyLossDistribution as PLD

L, D, ETA, N = 0.5, 2.0, 0.3, 400
OPTIONS = dict(lipschitz=L, diameter=D, learning_rate=ETA, dataset_size=N)


def theta_ref(gamma, r):
    a = np.log(gamma) / r
    return stats.norm.sf(a - r / 2) - gamma * stats.norm.sf(a + r / 2)


def theta_complement_ref(gamma, r):
    a = np.log(gamma) / r
    return stats.norm.cdf(a - r / 2) + gamma * stats.norm.sf(a + r / 2)


def shuffled_profile_ref(noise_multiplier, *, n=N, lipschitz=L, diameter=D, eta=ETA, M=1.0,
                         noise="gaussian", steps=None):
    """delta(eps) = A (1 - B^r) / (n (1 - B)) of one (partial) shuffled pass, from scipy, with the
    paper's sigma (or Laplace scale) = noise_multiplier * lipschitz."""
    scale = noise_multiplier * lipschitz
    steps = n if steps is None else steps

    def profile(eps):
        eps = np.asarray(eps, dtype=float)
        g = np.exp(eps)
        if noise == "gaussian":
            a = theta_ref(g, 2 * lipschitz / scale)
            comp = theta_complement_ref(g, M * diameter / (eta * scale))
        else:
            a = np.maximum(0.0, -np.expm1(eps / 2 - lipschitz / scale))
            comp = np.exp(np.minimum(eps / 2 - M * diameter / (2 * eta * scale), 0.0))
        with np.errstate(divide="ignore"):
            geometric = -np.expm1(steps * np.log1p(-comp)) / comp
        return np.minimum(a * geometric / n, 1.0)

    return profile


def pld_of(profile, h, passes=1):
    return PLD.from_privacy_profile(profile, value_discretization_interval=h, profile_step=h,
                                    symmetric=True).self_compose(passes)


def accountant(**extra):
    return create("pnsgd", **{**OPTIONS, **extra})


# -- one pass ------------------------------------------------------------------------------------
@pytest.mark.parametrize("sigma", [1.0, 2.5])
@pytest.mark.parametrize("delta", [1e-5, 1e-9])
def test_single_pass_matches_the_closed_form_root(sigma, delta):
    acc = accountant()
    acc.step(noise_multiplier=sigma, sample_rate=1 / N, count=N)
    profile = shuffled_profile_ref(sigma)
    exact = brentq(lambda e: float(profile(e)) - delta, 0.0, 30.0, xtol=1e-14, rtol=1e-14)
    eps = acc.get_epsilon(delta)
    assert exact * (1 - 1e-12) <= eps <= exact * (1 + 1e-8)
    assert acc.get_delta(eps) <= delta
    assert acc.get_epsilon_bounds(delta) == (0.0, eps)  # no lower bound is claimed


def test_randomly_stopped_with_the_proof_factor_equals_shuffled():
    a, b = accountant(), accountant(variant="randomly_stopped")
    for acc in (a, b):
        acc.step(noise_multiplier=1.5, sample_rate=1 / N, count=N)
    assert a.get_epsilon(1e-6) == b.get_epsilon(1e-6)


def test_online_pass_protects_the_last_record_only_by_its_own_noise():
    """Fixed order, constant noise: the worst record is the last one, delta = A = the Gaussian
    mechanism with sensitivity 2L and noise sigma L (mu = 2 / noise_multiplier)."""
    sigma, delta = 2.0, 1e-6
    acc = accountant(variant="online")
    acc.step(noise_multiplier=sigma, sample_rate=1 / N, count=N)
    exact = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, 2 / sigma), delta)
    assert acc.get_epsilon(delta) == pytest.approx(exact, rel=1e-8)
    assert acc.get_epsilon(delta) >= exact * (1 - 1e-12)


def test_laplace_single_pass():
    sigma, delta = 1.2, 1e-6
    acc = accountant(noise="laplace")
    acc.step(noise_multiplier=sigma, sample_rate=1 / N, count=N)
    profile = shuffled_profile_ref(sigma, noise="laplace")
    exact = brentq(lambda e: float(profile(e)) - delta, 0.0, 30.0, xtol=1e-14, rtol=1e-14)
    assert acc.get_epsilon(delta) == pytest.approx(exact, rel=1e-8)


def test_opacus_style_single_steps_equal_one_run():
    one, many = accountant(), accountant()
    one.step(noise_multiplier=1.3, sample_rate=1 / N, count=N)
    for _ in range(N):
        many.step(noise_multiplier=1.3, sample_rate=1 / N)
    assert many.history == one.history
    assert many.get_epsilon(1e-5) == one.get_epsilon(1e-5)


# -- several passes ------------------------------------------------------------------------------
@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
@pytest.mark.parametrize("passes", [2, 5])
def test_passes_compose_as_the_profile_pld(noise, passes):
    """E passes = the PLD of the per-pass profile (computed here from scipy) composed E times."""
    sigma, delta, eps = 1.5, 1e-6, 1.0
    acc = accountant(noise=noise)
    acc.step(noise_multiplier=sigma, sample_rate=1 / N, count=passes * N)
    reference = pld_of(shuffled_profile_ref(sigma, noise=noise),
                       acc.value_discretization_interval, passes)
    assert acc.get_epsilon(delta) == pytest.approx(
        reference.epsilon_for_delta(delta, lower=False).upper, rel=1e-9)
    assert acc.get_delta(eps) == pytest.approx(reference.delta_for_epsilon(eps).upper, rel=1e-9)


@pytest.mark.parametrize("variant", ["shuffled", "randomly_stopped", "online"])
def test_more_passes_never_lower_epsilon(variant):
    acc = accountant(variant=variant)
    epsilons, deltas = [], []
    for _ in range(4):
        acc.step(noise_multiplier=1.5, sample_rate=1 / N, count=N)
        epsilons.append(acc.get_epsilon(1e-6))
        deltas.append(acc.get_delta(1.0))
    assert all(b >= a for a, b in zip(epsilons, epsilons[1:]))
    assert all(b >= a for a, b in zip(deltas, deltas[1:]))
    assert epsilons[1] > epsilons[0]


def test_passes_with_different_noise_compose_their_own_profiles():
    h = accountant().value_discretization_interval
    acc = accountant()
    acc.step(noise_multiplier=1.0, sample_rate=1 / N, count=N)
    acc.step(noise_multiplier=3.0, sample_rate=1 / N, count=2 * N)
    reference = pld_of(shuffled_profile_ref(1.0), h).compose(
        pld_of(shuffled_profile_ref(3.0), h, 2))
    assert acc.get_epsilon(1e-6) == pytest.approx(
        reference.epsilon_for_delta(1e-6, lower=False).upper, rel=1e-9)


def test_partial_pass_is_charged_as_a_full_pass():
    """1.5 passes at constant noise cost as much as 2 passes (the completed pass dominates the
    r steps actually run: A(1 - B^r) <= A(1 - B^n)), and more than one pass."""
    one, partial, two = accountant(), accountant(), accountant()
    one.step(noise_multiplier=1.5, sample_rate=1 / N, count=N)
    partial.step(noise_multiplier=1.5, sample_rate=1 / N, count=N + N // 2)
    two.step(noise_multiplier=1.5, sample_rate=1 / N, count=2 * N)
    assert partial.get_epsilon(1e-6) == two.get_epsilon(1e-6)
    assert partial.get_epsilon(1e-6) > one.get_epsilon(1e-6)
    # a lone partial pass: at least the bound of the steps actually run
    short = accountant()
    short.step(noise_multiplier=1.5, sample_rate=1 / N, count=N // 4)
    ran = shuffled_profile_ref(1.5, steps=N // 4)
    assert short.get_delta(0.5) >= float(ran(0.5))
    assert short.get_delta(0.5) == pytest.approx(float(shuffled_profile_ref(1.5)(0.5)), rel=1e-9)


def test_split_into_passes():
    history = [(1.0, 0.1, 7), (2.0, 0.1, 8)]
    assert split_into_passes(history, 5) == [((1.0, 5),), ((1.0, 2), (2.0, 3)), ((2.0, 5),)]


# -- contract, options, errors --------------------------------------------------------------------
def test_registered_under_pnsgd():
    assert "pnsgd" in available()
    assert get_class("pnsgd") is PNSGDAccountant
    acc = accountant()
    assert acc.neighbouring == "replace_one" and acc.bound_type == "certified upper bound"
    assert "Thm 2" in acc.theorem


def test_state_dict_round_trip():
    acc = accountant(variant="online", smoothness=4.0)
    acc.step(noise_multiplier=2.0, sample_rate=1 / N, count=N + 10)
    state = json.loads(json.dumps(acc.state_dict()))
    restored = accountant(variant="online", smoothness=4.0)
    restored.load_state_dict(state)
    assert restored.get_epsilon(1e-5) == acc.get_epsilon(1e-5)
    with pytest.raises(ParameterError, match="variant"):
        accountant().load_state_dict(state)


def test_smoothness_precondition():
    accountant(smoothness=2 / ETA)  # eta = 2 / beta is allowed
    with pytest.raises(ParameterError, match="learning_rate") as info:
        accountant(smoothness=3 / ETA)  # eta = 3 / beta > 2 / beta with M = 1
    assert "2/smoothness" in str(info.value)
    accountant(smoothness=3 / ETA, contraction=2.0)  # M >= eta beta - 1 = 2 is a valid claim


@pytest.mark.parametrize("options,name", [
    (dict(lipschitz=0.0), "lipschitz"),
    (dict(lipschitz=-1.0), "lipschitz"),
    (dict(diameter=0.0), "diameter"),
    (dict(diameter=math.nan), "diameter"),
    (dict(learning_rate=-0.1), "learning_rate"),
    (dict(dataset_size=0), "dataset_size"),
    (dict(dataset_size=2.5), "dataset_size"),
    (dict(variant="poisson"), "variant"),
    (dict(noise="cauchy"), "noise"),
    (dict(contraction=0.0), "contraction"),
    (dict(smoothness=-1.0), "smoothness"),
    (dict(neighbouring="add_remove"), "neighbouring"),
])
def test_bad_options_name_the_parameter(options, name):
    with pytest.raises(ParameterError, match=name):
        accountant(**options)


@pytest.mark.parametrize("kwargs,name", [
    (dict(noise_multiplier=1.0, sample_rate=0.01), "sample_rate"),  # batch of 4 records
    (dict(noise_multiplier=1.0, sample_rate=1.5), "sample_rate"),
    (dict(noise_multiplier=0.0, sample_rate=1 / N), "noise_multiplier"),
    (dict(noise_multiplier=1.0, sample_rate=1 / N, count=-1), "count"),
])
def test_bad_steps_name_the_parameter(kwargs, name):
    acc = accountant()
    with pytest.raises(ParameterError, match=name):
        acc.step(**kwargs)
    assert len(acc) == 0


def test_assigned_history_with_wrong_sample_rate_is_refused_when_assigned():
    acc = accountant()
    with pytest.raises(ParameterError, match="sample_rate"):
        acc.history = [(1.0, 0.5, 10)]  # Opacus may assign the history directly
    assert len(acc) == 0


def test_a_dataset_size_beyond_float_range_refuses_steps_with_the_parameter():
    """dataset_size = 10**400 (a valid integer): step() raised OverflowError computing
    1.0 / dataset_size; no float sample rate is 1/10**400, so every step is refused, naming
    sample_rate.  A rate within 1e-9 relative of 1/dataset_size is still accepted."""
    acc = PNSGDAccountant(lipschitz=L, diameter=D, learning_rate=ETA, dataset_size=10**400)
    with pytest.raises(ParameterError, match="sample_rate"):
        acc.step(noise_multiplier=2.0, sample_rate=0.01, count=3)
    near = PNSGDAccountant(**OPTIONS)
    near.step(noise_multiplier=2.0, sample_rate=(1 / N) * (1 + 1e-12), count=3)
    assert len(near) == 3
    with pytest.raises(ParameterError, match="sample_rate"):
        near.step(noise_multiplier=2.0, sample_rate=(1 / N) * (1 + 1e-8))


def test_calibration_finds_noise_for_a_target():
    from dpplugins.calibration import find_noise_multiplier

    sigma = find_noise_multiplier(target_epsilon=2.0, delta=1e-5, sample_rate=1 / N, steps=N,
                                  accountant="pnsgd", **OPTIONS)
    acc = accountant()
    acc.step(noise_multiplier=sigma, sample_rate=1 / N, count=N)
    assert acc.get_epsilon(1e-5) <= 2.0
    assert acc.get_epsilon(1e-5) > 1.95


def test_a_profile_cut_off_by_its_grid_refuses_instead_of_infinity():
    """Found by the long fuzz tests: 172,308 passes of one record with little noise; each pass's
    profile is still positive where its grid ends, and that mass, composed, sits at infinite
    loss (3.6e-15).  Below it the query returned epsilon = inf for a mechanism whose epsilon is
    finite at every delta > 0; it now refuses like the deltas just above it, and the delta its
    message advises is answered."""
    from dpplugins.errors import NumericalError
    from dpplugins.events import GaussianEvent, PNSGDEvent

    event = PNSGDEvent(1, 172308, GaussianEvent(1.224259860746218), 0.4702482429838126,
                       0.017232568643972192, 0.16871289671434825, "online", 0.5280323263454494,
                       None)
    acc = create("pnsgd").compose(event)
    for delta in (1e-15, 1e-20):
        with pytest.raises(NumericalError, match="infinite privacy loss") as raised:
            acc.get_epsilon_bounds(delta)
    advised = float(re.search(r"delta above ([0-9.e+-]+)", str(raised.value)).group(1))
    assert 1e-15 < advised < 1e-6
    assert math.isfinite(acc.get_epsilon(advised * 1.01))


def test_delta_at_infinity_composes_as_the_complement_product():
    """An (eps, delta)-DP profile keeps delta beyond eps: composed k times, the mass at infinite
    loss is 1 - (1 - delta)^k (closed form), rounded up by at most a relative 1e-11."""
    delta, k = 1e-4, 37
    one = PLD.from_privacy_profile(lambda e: np.where(np.asarray(e) >= 0.5, delta, 1.0),
                                   epsilon_max=1.0, value_discretization_interval=0.01)
    exact = -math.expm1(k * math.log1p(-delta))
    assert exact <= one.self_compose(k).delta_at_infinity() <= exact * (1 + 1e-11)


def test_a_refusal_never_advises_a_delta_of_one_or_more():
    """10^15 epochs of one-example batches put all the mass at infinite loss: the refusal
    advised "ask for delta above 8.11" (and elsewhere "above inf"), which no delta < 1 meets.
    The advice is now to change the history (errors.larger_delta_advice)."""
    from dpplugins.errors import NumericalError, larger_delta_advice
    from dpplugins.events import GaussianEvent, PNSGDEvent

    assert larger_delta_advice(1e-9) == "ask for delta above 1e-09"
    for floor in (1.0, 8.11, math.inf):
        assert "delta above" not in larger_delta_advice(floor)
    acc = create("pnsgd").compose(PNSGDEvent(6000, 10**15, GaussianEvent(1.1), 1.0, 1.0, 0.1,
                                             "shuffled"))
    with pytest.raises(NumericalError, match="no delta below 1 can be certified") as raised:
        acc.get_epsilon_bounds(1e-5)
    assert "delta above" not in str(raised.value)


def test_an_accountant_with_version_0_1_options_accounts_a_composed_event_by_its_constants():
    """Found by a hostile sweep: an accountant created with 0.1 options accounted a composed
    PNSGDEvent with its own constants whenever lipschitz, dataset_size and variant agreed --
    diameter 100 as 1 (7.58 where the event's run is 9.997) and Gaussian noise as the options'
    Laplace noise (3.998 where it is 19.6).  The events-mode accountant (no options) is the
    reference; the two must agree."""
    from dpplugins.events import GaussianEvent, LaplaceEvent, PNSGDEvent

    cases = [
        ({}, PNSGDEvent(100, 1, GaussianEvent(1.0), lipschitz=1.0, diameter=100.0,
                        learning_rate=0.01)),
        ({"noise": "laplace"}, PNSGDEvent(100, 1, GaussianEvent(0.5), lipschitz=1.0,
                                          diameter=1.0, learning_rate=1.0)),
        ({}, PNSGDEvent(100, 1, LaplaceEvent(1.0), lipschitz=1.0, diameter=1.0,
                        learning_rate=1.0)),
    ]
    for extra, event in cases:
        legacy = create("pnsgd", lipschitz=1.0, diameter=1.0, learning_rate=1.0,
                        dataset_size=100, **extra)
        reference = create("pnsgd").compose(event).get_epsilon(1e-5)
        assert legacy.compose(event).get_epsilon(1e-5) == reference
    # and the first case is the larger diameter's epsilon, not the options'
    small = PNSGDEvent(100, 1, GaussianEvent(1.0), lipschitz=1.0, diameter=1.0, learning_rate=1.0)
    assert create("pnsgd").compose(cases[0][1]).get_epsilon(1e-5) > \
        create("pnsgd").compose(small).get_epsilon(1e-5)


@pytest.mark.parametrize("options", [dict(lipschitz=1.0, diameter=1e-300, learning_rate=0.1),
                                     dict(lipschitz=1.0, diameter=1.0, learning_rate=1e308),
                                     dict(lipschitz=1.0, diameter=1.0, learning_rate=0.1,
                                          contraction=1e-300)])
def test_extreme_constants_answer_without_numpy_warnings(options):
    """A hostile sweep: these valid constants answered, but with numpy's "invalid value
    encountered in subtract" from the hockey-stick of two Gaussians whose tails both underflow
    (a NaN the code then replaced).  The answer is the same without the warning, and it is an
    ordered pair, and the upper bound is below the no-amplification bound of the 200 steps (each
    example in 2 of them, each (2L/sigma)-GDP on it under replace-one; Gaussian composition,
    Dong, Roth, Su 2019, Cor. 3.3: the exact Gaussian curve is above delta there)."""
    import warnings

    acc = create("pnsgd", dataset_size=100, **options)
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=200)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lower, upper = acc.get_epsilon_bounds(1e-5)
    assert 0.0 <= lower <= upper and math.isfinite(upper)
    # two passes: each example is in 2 steps, each 2-GDP under replace-one: mu = 2 sqrt(2)
    assert gaussian_delta_exact(upper, 2 * math.sqrt(2)) > 1e-5
