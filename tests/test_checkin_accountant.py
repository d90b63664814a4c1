"""The check-in accountant: valid against exact composition of tiny protocols and of the Gaussian,
consistent with the theorems, and following the accountant contract."""

import json
import math

import numpy as np
import pytest

from conftest import epsilon_from_delta_curve, gaussian_delta_exact
from dpplugins.accountants import available, create
from dpplugins.accountants.checkin import CheckInAccountant
from dpplugins.amplification import checkin as C
from dpplugins.errors import ParameterError
from test_checkin_theorems import (averaged_pairs, exact_delta, fixed_window_pairs, rr_matrix,
                                   sliding_window_pairs)


def _composed_pairs(pairs, k):
    """k independent runs of each brute-force pair (a lower bound on the k-pass truth)."""
    out = []
    for P, Q in pairs:
        Pk, Qk = P, Q
        for _ in range(k - 1):
            Pk, Qk = np.outer(Pk, P).ravel(), np.outer(Qk, Q).ravel()
        out.append((Pk, Qk))
    return out


def test_registered_as_checkin():
    assert "checkin" in available()
    acc = create("checkin", num_examples=10, num_slots=5, eps0=1.0)
    assert isinstance(acc, CheckInAccountant)
    assert acc.name == "checkin" and acc.bound_type == "certified upper bound"
    assert "Thm 3.2" in acc.theorem and acc.neighbouring == "replace_one"


# -- validity against exact composition ------------------------------------------------------------
@pytest.mark.parametrize("variant,n,m,passes", [("fixed", 3, 2, 3), ("fixed", 4, 3, 2),
                                                ("sliding", 4, 2, 2), ("averaged", 3, 2, 2)])
def test_multi_pass_epsilon_dominates_exact_composition_of_tiny_protocols(variant, n, m, passes):
    eps0 = 0.8
    R = rr_matrix(eps0)
    if variant == "fixed":
        pairs = fixed_window_pairs(n, m, 0.5, R)
        acc = create("checkin", num_examples=n, num_slots=m, checkin_probability=0.5, eps0=eps0)
    elif variant == "sliding":
        pairs = sliding_window_pairs(n, m, R)
        acc = create("checkin", variant="sliding", num_examples=n, window=m, eps0=eps0)
    else:
        pairs = averaged_pairs(n, m, R)
        acc = create("checkin", variant="averaged", num_examples=n, num_slots=m, eps0=eps0)
    acc.step(noise_multiplier=1.0, sample_rate=1.0, count=passes * acc.steps_per_pass)
    composed = _composed_pairs(pairs, passes)
    for delta in [0.2, 1e-2, 1e-4]:
        assert exact_delta(composed, acc.get_epsilon(delta)) <= delta
    for eps in [0.1, 0.5, 1.5]:
        assert exact_delta(composed, eps) <= acc.get_delta(eps) + 1e-12


@pytest.mark.parametrize("sigma,passes", [(0.8, 1), (2.0, 5), (5.0, 30)])
def test_gaussian_single_slot_protocol_is_exactly_the_composed_gaussian(sigma, passes):
    """n = m = 1, p0 = 1: the only client fills the only slot, so a pass *is* one Gaussian
    mechanism with mu = 2/sigma (replace-one, clipping norm 1).  The accountant must be above the
    exact epsilon of mu sqrt(passes) (Dong, Roth, Su 2022, Cor. 3.3) and close to it."""
    acc = create("checkin", num_examples=1, num_slots=1)
    acc.step(noise_multiplier=sigma, sample_rate=1.0, count=passes)
    mu = 2.0 / sigma * math.sqrt(passes)
    for delta in [1e-3, 1e-6]:
        exact = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, mu), delta)
        eps = acc.get_epsilon(delta)
        assert exact <= eps <= exact * 1.01 + 1e-3


def test_pure_local_randomizer_single_pass_is_at_most_the_theorem_and_eps0():
    acc = create("checkin", num_examples=10_000, num_slots=100, checkin_probability=0.01, eps0=1.0)
    acc.step(noise_multiplier=1.0, sample_rate=1e-4, count=100)
    for delta in [1e-3, 1e-6, 1e-9]:
        theorem = C.fixed_window_epsilon(1.0, delta, 100, 0.01).epsilon
        assert acc.get_epsilon(delta) <= min(theorem, 1.0) * 1.002
    tiny = create("checkin", num_examples=2, num_slots=1, eps0=1.0)   # theorem > eps0 here
    tiny.step(noise_multiplier=1.0, sample_rate=1.0, count=1)
    assert tiny.get_epsilon(1e-6) <= 1.0 + 2e-3


def test_many_passes_beat_the_optimal_composition_of_one_theorem_point():
    """The PLD of the per-pass profile is at most the optimal (KOV) composition of any single
    (eps, delta) point of Thm 3.2 (it uses all of them), up to discretisation."""
    n, m, p0, passes, delta = 10_000, 100, 0.01, 100, 1e-6
    acc = create("checkin", num_examples=n, num_slots=m, checkin_probability=p0, eps0=1.0)
    acc.step(noise_multiplier=1.0, sample_rate=1e-4, count=passes * m)
    eps = acc.get_epsilon(delta)
    point = C.fixed_window_epsilon(1.0, delta / (10 * passes), m, p0)
    kov = C.optimal_composition_epsilon(delta, point.epsilon, point.delta, passes)
    assert eps <= kov
    assert eps == pytest.approx(C.repeated_fixed_window_epsilon(1.0, delta, n, m).epsilon, rel=0.02)


def test_large_noise_shows_amplification_below_the_plain_gaussian():
    acc = create("checkin", num_examples=10_000, num_slots=100, checkin_probability=0.01)
    acc.step(noise_multiplier=200.0, sample_rate=1e-4, count=100 * 100)
    plain = epsilon_from_delta_curve(lambda e: gaussian_delta_exact(e, 2 / 200 * 10), 1e-6)
    assert acc.get_epsilon(1e-6) < 0.5 * plain


# -- passes, partial passes, noise bookkeeping -----------------------------------------------------
def test_partial_pass_is_charged_as_a_full_pass():
    full = create("checkin", num_examples=50, num_slots=10, checkin_probability=0.4, eps0=0.5)
    full.step(noise_multiplier=1.0, sample_rate=0.1, count=20)
    partial = create("checkin", num_examples=50, num_slots=10, checkin_probability=0.4, eps0=0.5)
    partial.step(noise_multiplier=1.0, sample_rate=0.1, count=11)
    assert partial.passes() == [(None, 2)]
    assert partial.get_epsilon(1e-5) == full.get_epsilon(1e-5)


def test_opacus_style_steps_accumulate_into_passes():
    a = create("checkin", num_examples=100, num_slots=10)
    b = create("checkin", num_examples=100, num_slots=10)
    for _ in range(30):
        a.step(noise_multiplier=3.0, sample_rate=0.1)
    b.step(noise_multiplier=3.0, sample_rate=0.1, count=30)
    assert a.history == b.history and a.passes() == [(3.0, 3)]
    assert a.get_epsilon(1e-5) == b.get_epsilon(1e-5)


def test_pass_with_mixed_noise_is_charged_with_the_smallest():
    acc = create("checkin", num_examples=100, num_slots=100)
    acc.step(noise_multiplier=2.0, sample_rate=0.01, count=50)
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=150)
    acc.step(noise_multiplier=4.0, sample_rate=0.01, count=100)
    assert acc.passes() == [(1.0, 2), (4.0, 1)]


def test_pass_bookkeeping_matches_a_step_by_step_count():
    """Run-length bookkeeping against walking through the steps one by one."""
    rng = np.random.default_rng(0)
    for _ in range(100):
        per = int(rng.integers(1, 8))
        history = [(float(rng.choice([1.0, 2.0, 3.0])), 0.1, int(rng.integers(1, 25)))
                   for _ in range(int(rng.integers(1, 6)))]
        expected, position, smallest = {}, 0, math.inf
        for sigma, _, steps in history:
            for _ in range(steps):
                smallest, position = min(smallest, sigma), position + 1
                if position == per:
                    expected[smallest] = expected.get(smallest, 0) + 1
                    position, smallest = 0, math.inf
        if position:
            expected[smallest] = expected.get(smallest, 0) + 1
        acc = create("checkin", num_examples=10, num_slots=per)
        acc.history = history
        assert acc.passes() == sorted(expected.items())


def test_configured_noise_multiplier_refuses_other_steps():
    acc = create("checkin", num_examples=100, num_slots=10, noise_multiplier=2.0)
    acc.step(noise_multiplier=2.0, sample_rate=0.1, count=10)
    with pytest.raises(ParameterError, match="noise_multiplier"):
        acc.step(noise_multiplier=1.0, sample_rate=0.1)
    with pytest.raises(ParameterError, match="noise_multiplier"):  # refused when assigned
        acc.history = [(1.0, 0.1, 10)]
    assert len(acc) == 10


def test_averaged_central_noise_is_divided_by_the_batch_cap():
    acc = create("checkin", variant="averaged", num_examples=1000, num_slots=100, max_batch_size=16)
    assert acc.local_noise_multiplier(8.0) == pytest.approx(2.0)
    local = create("checkin", variant="averaged", num_examples=1000, num_slots=100,
                   per_example_noise=True)
    assert local.local_noise_multiplier(8.0) == 8.0
    uncapped = create("checkin", variant="averaged", num_examples=100, num_slots=10)
    assert uncapped.local_noise_multiplier(10.0) == pytest.approx(1.0)
    fixed = create("checkin", num_examples=100, num_slots=10, max_batch_size=16)
    assert fixed.local_noise_multiplier(8.0) == 8.0       # one example per slot


def test_expected_dummy_updates():
    acc = create("checkin", num_examples=1000, num_slots=100, checkin_probability=0.2, eps0=1.0)
    assert acc.expected_dummy_updates() == pytest.approx(100 * (1 - 0.2 / 100) ** 1000, rel=1e-12)
    sliding = create("checkin", variant="sliding", num_examples=30, window=5, eps0=1.0)
    assert sliding.steps_per_pass == 26
    assert sliding.expected_dummy_updates() == pytest.approx(26 * (1 - 1 / 5) ** 5, rel=1e-12)


# -- contract --------------------------------------------------------------------------------------
def test_empty_history_reading_does_not_mutate_and_state_round_trips():
    acc = create("checkin", variant="sliding", num_examples=200, window=20, eps0=0.5, delta0=0.0)
    assert acc.get_epsilon(1e-5) == 0.0
    acc.step(noise_multiplier=1.0, sample_rate=0.005, count=500)
    before = acc.state_dict()
    eps = acc.get_epsilon(1e-5)
    assert acc.state_dict() == before
    state = json.loads(json.dumps(before))
    restored = create("checkin", variant="sliding", num_examples=200, window=20, eps0=0.5)
    restored.load_state_dict(state)
    assert restored.history == acc.history and restored.get_epsilon(1e-5) == eps
    other = create("checkin", variant="sliding", num_examples=200, window=10, eps0=0.5)
    with pytest.raises(ParameterError, match="window"):
        other.load_state_dict(state)
    bounds = acc.get_epsilon_bounds(1e-5)
    assert bounds.lower == 0.0 and bounds.upper == eps
    assert acc.get_delta(eps) <= 1e-5 * (1 + 1e-6)


@pytest.mark.parametrize("options,name", [
    (dict(num_slots=5), "num_examples"),
    (dict(num_examples=0, num_slots=5), "num_examples"),
    (dict(num_examples=10), "num_slots"),
    (dict(num_examples=10, num_slots=5, window=3), "window"),
    (dict(num_examples=10, variant="sliding"), "window"),
    (dict(num_examples=10, variant="sliding", window=11), "window"),
    (dict(num_examples=10, variant="sliding", window=0), "window"),
    (dict(num_examples=10, variant="sliding", window=3, num_slots=3), "num_slots"),
    (dict(num_examples=10, num_slots=5, checkin_probability=0.0), "checkin_probability"),
    (dict(num_examples=10, num_slots=5, checkin_probability=1.2), "checkin_probability"),
    (dict(num_examples=10, num_slots=5, variant="averaged", checkin_probability=0.5),
     "checkin_probability"),
    (dict(num_examples=10, num_slots=5, variant="poisson"), "variant"),
    (dict(num_examples=10, num_slots=5, eps0=1.0, noise_multiplier=1.0), "noise_multiplier"),
    (dict(num_examples=10, num_slots=5, eps0=-1.0), "eps0"),
    (dict(num_examples=10, num_slots=5, delta0=1e-6), "delta0"),
    (dict(num_examples=10, num_slots=5, eps0=1.0, delta0=1.0), "delta0"),
    (dict(num_examples=10, num_slots=5, noise_multiplier=0.0), "noise_multiplier"),
    (dict(num_examples=10, num_slots=5, neighbouring="add_remove"), "neighbouring"),
    (dict(num_examples=10, num_slots=5, max_batch_size=0), "max_batch_size"),
])
def test_bad_options_raise_parameter_error(options, name):
    with pytest.raises(ParameterError, match=name):
        create("checkin", **options)


def test_tiny_noise_is_an_infinite_bound_not_an_overflow():
    """sigma = 1e-300 is valid (> 0): the 2/sigma-GDP fallback's mu overflows to inf, which is
    the answer (no finite epsilon at delta = 1e-5; delta(1) <= 1); it used to raise
    OverflowError from (2 / sigma) ** 2."""
    from dpplugins.samplers import balls_and_bins

    acc = create("checkin").compose(balls_and_bins(100, 10).event(1e-300, 1))
    assert acc.get_epsilon_bounds(1e-5) == (0.0, math.inf)
    assert acc.get_delta_bounds(1.0).upper == 1.0


# -- passes the theorems do not amplify (reliability issue: minutes per query before) -----------
def test_unamplified_passes_skip_the_pld_and_match_the_exact_gaussian_composition(monkeypatch):
    """Sliding-window passes with central Gaussian noise: the pass profile is the plain
    ``G_{2/sigma}`` profile, so the answer is the exact composition of 11588 such passes,
    ``mu = 2 sqrt(11588) / sigma`` (40-digit reference), without a PLD (before: 31 s)."""
    from dpplugins.samplers import SlidingWindowCheckIn
    from test_shuffle_reliability import _gdp_epsilon
    monkeypatch.setattr(CheckInAccountant, "_pld",
                        lambda self, history: pytest.fail("the PLD was built"))
    acc = create("checkin").compose(SlidingWindowCheckIn(1, 1).event(0.1, 11588))
    assert not acc.amplifies()
    mu = 2 * math.sqrt(11588) / 0.1
    exact = _gdp_epsilon(mu, 1e-15)
    upper = acc.get_epsilon(1e-15)
    assert exact <= upper <= exact * (1 + 1e-9)
    assert acc.get_delta(upper) <= 1e-15
    assert gaussian_delta_exact(mu, 0.5 * exact) <= acc.get_delta(0.5 * exact)


def test_amplified_passes_still_use_the_pld():
    """Fixed check-ins with large noise and a small check-in probability are amplified (Balle et
    al. 2020, Thm 3.2): the PLD path stays, and it beats the plain Gaussian composition (40
    digits)."""
    from dpplugins.samplers import RandomCheckIn
    from test_shuffle_reliability import _gdp_epsilon
    acc = create("checkin").compose(RandomCheckIn(10**6, 100, 0.01).event(50.0, 3))
    assert acc.amplifies()
    assert acc.get_epsilon(1e-5) < _gdp_epsilon(acc.gaussian_mu(), 1e-5)


# -- no amplification: the optimal composition of the passes' (eps0, delta0) ----------------------
def _kov_delta_mp(epsilon, eps0, delta0, k):
    """Optimal composition of k (eps0, delta0)-DP mechanisms (Kairouz, Oh, Viswanath 2015, Thm
    3.3), summed in 60-digit arithmetic: the exact delta(epsilon) of k randomized responses."""
    import mpmath
    with mpmath.workdps(60):
        e, eps = mpmath.mpf(eps0), mpmath.mpf(epsilon)
        pure = sum(mpmath.binomial(k, l) * max(mpmath.mpf(0), mpmath.exp((k - l) * e)
                                               - mpmath.exp(eps + l * e))
                   for l in range(k + 1)) / (1 + mpmath.exp(e)) ** k
        survive = (1 - mpmath.mpf(delta0)) ** k
        return 1 - survive + survive * pure


def _kov_epsilon_mp(delta, eps0, delta0, k):
    import mpmath
    with mpmath.workdps(60):
        if _kov_delta_mp(0, eps0, delta0, k) <= delta:
            return 0.0
        if _kov_delta_mp(k * eps0, eps0, delta0, k) > delta:   # 1 - (1 - delta0)^k > delta
            return math.inf
        lo, hi = mpmath.mpf(0), mpmath.mpf(k * eps0)
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if _kov_delta_mp(mid, eps0, delta0, k) <= delta else (mid, hi)
        return float(hi)


@pytest.mark.parametrize("eps0,delta0,passes", [(299.0, 0.0, 1), (40.0, 0.0, 3), (40.0, 1e-9, 2),
                                                (1e-300, 0.0, 1), (1e-300, 0.0, 5),
                                                (1.0, 1e-8, 4), (2.0, 1e-3, 3)])
def test_one_slot_one_client_is_the_optimal_composition_of_the_randomizer(eps0, delta0, passes):
    """n = m = 1, p0 = 1: a pass is the local randomizer itself, and randomized response with
    eps0 (and delta0) is the worst (eps0, delta0)-DP randomizer, so the exact epsilon of the
    history is the optimal composition (mpmath).  The grid of the amplified PLD cannot resolve a
    large or a tiny eps0: it reported 299.008 for eps0 = 299 and 7.85e-5 for eps0 = 1e-300,
    where the exact value is 298.999999 and 0.  A delta0 above the theorems' admissible bound
    (eps0 = 40 with any delta0 > 0; eps0 = 2, delta0 = 1e-3) was refused at set-up; without
    amplification it is this composition."""
    acc = create("checkin", num_examples=1, num_slots=1, eps0=eps0, delta0=delta0)
    acc.step(noise_multiplier=1.0, sample_rate=1.0, count=passes)
    for delta in [1e-3, 1e-6]:
        exact = _kov_epsilon_mp(delta, eps0, delta0, passes)
        eps = acc.get_epsilon(delta)
        assert exact * (1 - 1e-9) <= eps <= exact * (1 + 1e-8)
        if 0 < exact < math.inf:
            probe = exact * 0.999
            assert float(_kov_delta_mp(probe, eps0, delta0, passes)) <= acc.get_delta(probe)
            assert acc.get_delta(probe) <= float(_kov_delta_mp(probe, eps0, delta0, passes)) \
                * (1 + 1e-8)


def test_beyond_a_million_passes_the_local_cap_is_basic_composition():
    """k (eps0, delta0)-DP mechanisms are (k eps0, k delta0)-DP (Dwork & Roth 2014, Thm 3.16)."""
    from dpplugins.accountants.checkin import composed_local_delta, composed_local_epsilon
    k = 2 * 10**6
    assert composed_local_epsilon(1e-6, 1e-3, 1e-13, k) == pytest.approx(2000.0, rel=1e-11)
    assert composed_local_epsilon(1e-6, 1e-3, 1e-12, k) == math.inf   # k delta0 = 2e-6 > delta
    assert composed_local_delta(2000.1, 1e-3, 1e-13, k) == pytest.approx(2e-7, rel=1e-11)
    assert composed_local_delta(1999.0, 1e-3, 1e-13, k) == 1.0


def test_inadmissible_delta0_is_accounted_without_amplification_on_any_protocol():
    """eps0 = 2, delta0 = 1e-3 is above the admissible bound of Thm 3.2 (refused before): each
    pass is still (eps0, delta0)-DP, so the history is within the optimal composition of the
    passes (the worst case over protocols of one client per slot: n = m = 1)."""
    acc = create("checkin", num_examples=1000, num_slots=10, checkin_probability=0.5, eps0=2.0,
                 delta0=1e-3)
    acc.step(noise_multiplier=1.0, sample_rate=0.01, count=10 * 4)
    exact = _kov_epsilon_mp(1e-2, 2.0, 1e-3, 4)
    assert acc.get_epsilon(1e-2) <= exact * (1 + 1e-8)
    f = C.pass_privacy_profile("fixed", num_clients=1000, num_slots=10, checkin_probability=0.5,
                               eps0=2.0, delta0=1e-3)
    eps = np.array([0.0, 1.0, 2.0, 3.0])
    assert np.allclose(f(eps), C.single_participation_profile(2.0, 1e-3)(eps), rtol=0, atol=0)


def test_noise_multipliers_whose_inverse_square_underflows_answer():
    """Beyond sigma of about 1e162, ``(2 / sigma)^2`` underflowed to 0: the history's Gaussian
    mu became 0 and ``get_delta`` divided by it (ZeroDivisionError; found by a hostile sweep).
    mu is now the scaled square root, ``2 sqrt(passes) / sigma > 0``, and the bounds hold the
    exact Gaussian delta at that mu (Balle & Wang 2018, closed form: ``2 Phi(mu / 2) - 1`` at
    eps = 0, about ``mu / sqrt(2 pi)`` here)."""
    from dpplugins.events import GaussianEvent, RandomCheckInEvent
    from dpplugins.mechanisms.gaussian import gaussian_delta, gaussian_delta_upper

    for sigma in (1e170, 1e300):
        acc = create("checkin")
        acc.compose(RandomCheckInEvent(1, GaussianEvent(sigma), "fixed", 1), 4)
        mu = acc.gaussian_mu()
        assert mu == pytest.approx(4.0 / sigma, rel=1e-14) and mu > 0
        exact = math.sqrt(2 / math.pi) * (mu / 2)        # 2 Phi(mu/2) - 1 to first order
        assert acc.get_delta_bounds(0.0).upper >= exact
        assert acc.get_delta(1.0) >= 0.0
        assert acc.get_epsilon_bounds(1e-5) == (0.0, 0.0)
    # mu = 0 itself: two equal laws, delta(eps) = (1 - e^eps)_+ exactly
    for eps in (-1.0, 0.0, 0.5):
        exact = max(0.0, -math.expm1(eps))
        assert exact <= gaussian_delta_upper(eps, 0.0) <= exact * (1 + 1e-11)
        assert float(gaussian_delta(eps, 0.0)) == pytest.approx(exact, rel=1e-15, abs=0)
        assert math.copysign(1.0, float(gaussian_delta(eps, 0.0))) == 1.0   # no -0.0


def test_a_pass_mixing_gaussian_and_eps_delta_randomizers_is_refused_at_compose():
    """Half a pass of (eps0, delta0) randomizers, then half a pass of Gaussian ones: accepted,
    and every query then raised an AttributeError (found by a hostile sweep).  The mix is now
    refused when composed, the ledger untouched; a change of randomizer at a pass boundary is
    still accepted."""
    from fractions import Fraction

    from dpplugins.accountants import UnsupportedEventError
    from dpplugins.events import EpsilonDeltaEvent, GaussianEvent, RandomCheckInEvent

    half = RandomCheckInEvent(10, EpsilonDeltaEvent(1.0), "fixed", 10, passes=Fraction(1, 2))
    for first, second in ((half, half.with_event(GaussianEvent(1.0))),
                          (half.with_event(GaussianEvent(1.0)), half)):
        acc = create("checkin").compose(first)
        before = acc.history
        with pytest.raises(UnsupportedEventError, match="one kind of local randomizer per pass"):
            acc.compose(second)
        assert acc.history == before and math.isfinite(acc.get_epsilon(1e-5))
        acc.compose(first)                        # completes the pass
        acc.compose(second, 2)                    # a whole pass of the other kind
        lower, upper = acc.get_epsilon_bounds(1e-5)
        assert 0.0 <= lower <= upper < math.inf
    # a non-private step before the mix: the passes are cut from the check-in events only
    # (a TypeError from the pass cutter before)
    from dpplugins.events import NonPrivateEvent
    acc = create("checkin").compose(NonPrivateEvent()).compose(half)
    with pytest.raises(UnsupportedEventError, match="one kind of local randomizer per pass"):
        acc.compose(half.with_event(GaussianEvent(1.0)))
    assert acc.get_epsilon(1e-5) == math.inf
