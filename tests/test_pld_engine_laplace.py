"""Regression tests for the PLD engine on Laplace histories (reliability issue: a 14 s query).

The slow case of the long fuzz profile: 685,161 Laplace(1) steps at delta 2.58e-9.  Its lower
bound was 2.7 % off on the first grid because the tangent construction rounded the atom at the
top of the Laplace loss down by a whole grid step (a first-order error), so three grids of up to
3.6 million bins were composed, each four times (untilted extended precision and tilted, upper
and lower).  Checked here without timing anything: against the closed-form Laplace profile, the
exact rational position of the atom, dp-accounting's Laplace PLD, and by counting grids and
compositions with monkeypatched counters.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction

import numpy as np
import pytest

from dpplugins import mechanisms
from dpplugins.accountants import create
from dpplugins.accountants import pld as pld_accountant_module
from dpplugins.events import LaplaceEvent, SelfComposedEvent
from dpplugins.pld import AccuracyWarning, PrivacyLossDistribution
from dpplugins.pld import distribution as distribution_module
from dpplugins.pld.compose import _norm_upper
from dpplugins.pld.distribution import atom_grid_step, laplace_top_atom

SLOW_STEPS, SLOW_DELTA = 685_161, 2.5771069189899487e-09


def _laplace_profile(epsilon: float, epsilon0: float) -> float:
    """Exact privacy profile of one Laplace step with epsilon0 = sensitivity / scale:
    ``delta(eps) = 1 - exp((eps - eps0) / 2)`` on ``[0, eps0]``, 0 above (the hockey-stick
    divergence of Lap(d, b) and Lap(0, b); e.g. Koskela et al. 2021, Sec. 6)."""
    return 1.0 - math.exp((epsilon - epsilon0) / 2) if epsilon < epsilon0 else 0.0


@pytest.mark.parametrize("scale,sensitivity", [(1.0, 1.0), (10.0, 1.0), (0.1, 1.0), (0.1, 2.0)])
def test_atom_grid_step_puts_the_top_atom_on_a_grid_point(scale, sensitivity):
    pair = mechanisms.laplace(scale, sensitivity).pairs["remove"]
    loss, q_mass = laplace_top_atom(pair)
    assert loss == Fraction(sensitivity) / Fraction(scale)  # exact rational of the floats
    assert q_mass <= 0.5 * math.exp(-float(loss))
    for h0 in (0.02, 0.0031, 1e-3):
        h = atom_grid_step(loss, h0)
        assert h <= h0
        j = math.ceil(float(loss) / h0 - 1e-9)
        assert Fraction(j * h) <= loss  # the stored grid point is at or below the atom
        assert loss - Fraction(j * h) <= Fraction(1e-9) * Fraction(h)


@pytest.mark.parametrize("scale,sensitivity,bins", [(1.0, 1.0, 50), (10.0, 1.0, 50),
                                                    (0.1, 2.0, 50), (1.0, 1.0, 7)])
def test_laplace_constructions_bracket_the_closed_form_to_second_order(scale, sensitivity, bins):
    epsilon0 = sensitivity / scale
    loss = laplace_top_atom(mechanisms.laplace(scale, sensitivity).pairs["remove"])[0]
    h = atom_grid_step(loss, epsilon0 / bins)
    component = PrivacyLossDistribution.from_laplace(
        scale, sensitivity, value_discretization_interval=h)._directions["remove"][0][0]
    worst = 0.0
    for epsilon in np.linspace(0.0, 1.02 * epsilon0, 211):
        exact = _laplace_profile(float(epsilon), epsilon0)
        lower, upper = component.lower.delta(float(epsilon)), component.upper.delta(float(epsilon))
        assert lower <= exact + 1e-15 and exact <= upper + 1e-15
        worst = max(worst, exact - lower)
    # second order in h (the first-order loss at the top atom was about h/2 of mean loss)
    assert worst <= 0.2 * h * h
    mean = lambda g: float(np.dot(g.pmf, g.losses()))  # noqa: E731
    kl = epsilon0 - 1 + math.exp(-epsilon0)  # E_P[L] of the Laplace pair
    assert abs(mean(component.lower) - kl) <= 0.5 * h * h


def test_the_first_grid_certifies_the_slow_fuzz_case():
    # was [249048, 255980] on the first grid (h = 0.02): 2.7 % gap from the lower bound alone
    pld = PrivacyLossDistribution.from_laplace(1.0, value_discretization_interval=0.02)
    bounds = pld.self_compose(SLOW_STEPS).epsilon_for_delta(SLOW_DELTA)
    assert bounds.lower <= bounds.upper
    assert (bounds.upper - bounds.lower) <= 3e-4 * bounds.upper
    # the mean privacy loss alone (SLOW_STEPS * KL) is a floor any epsilon at this delta exceeds
    assert bounds.lower > SLOW_STEPS * math.exp(-1.0)


@pytest.mark.slow
def test_the_slow_fuzz_case_uses_few_grids_and_compositions(monkeypatch):
    grids, compositions = [], []
    real_pld = pld_accountant_module.PLDAccountant._generic_pld
    real_compose = distribution_module.compose_grid_pmfs

    def counting_pld(self, counts, h):
        grids.append(h)
        return real_pld(self, counts, h)

    def counting_compose(parts, **options):
        compositions.append((options.get("extended"), options.get("tilt")))
        return real_compose(parts, **options)
    monkeypatch.setattr(pld_accountant_module.PLDAccountant, "_generic_pld", counting_pld)
    monkeypatch.setattr(distribution_module, "compose_grid_pmfs", counting_compose)
    acc = create("pld")
    acc.compose(SelfComposedEvent(LaplaceEvent(1.0), SLOW_STEPS))
    with warnings.catch_warnings():
        warnings.simplefilter("error", AccuracyWarning)
        bounds = acc.get_epsilon_bounds(SLOW_DELTA)
    # was three grids (h = 0.02, 0.0031, 0.0024) of four compositions each, 3.6M-bin windows
    assert len(set(grids)) <= 2
    assert len(compositions) <= 4 * len(set(grids))
    # the untilted compositions cannot certify this delta (floating-point floor): not computed
    assert all(tilt for _, tilt in compositions)
    assert (bounds.upper - bounds.lower) <= acc.eps_tolerance * bounds.upper
    # pure DP caps epsilon at SLOW_STEPS * 1, and the mean loss is below every epsilon here
    assert SLOW_STEPS * math.exp(-1.0) < bounds.lower <= bounds.upper < SLOW_STEPS


@pytest.mark.parametrize("neighbouring,scale", [("add_remove", 1.0), ("replace_one", 2.0)])
def test_laplace_composition_against_dp_accounting(neighbouring, scale):
    pld_module = pytest.importorskip("dp_accounting.pld.privacy_loss_distribution")
    acc = create("pld", neighbouring=neighbouring)
    acc.compose(SelfComposedEvent(LaplaceEvent(scale), 300))
    bounds = acc.get_epsilon_bounds(1e-5)
    sensitivity = 2.0 if neighbouring == "replace_one" else 1.0
    theirs = pld_module.from_laplace_mechanism(
        scale, sensitivity=sensitivity, value_discretization_interval=1e-4
    ).self_compose(300).get_epsilon_for_delta(1e-5)  # 167.26731, connect-the-dots, fine grid
    assert bounds.lower <= theirs <= bounds.upper * (1 + 1e-5)
    assert bounds.upper - bounds.lower <= 1e-3 * bounds.upper


@pytest.mark.slow
def test_an_unreachable_tolerance_on_a_laplace_history_warns_with_certified_bounds():
    acc = create("pld", eps_tolerance=1e-12)
    acc.compose(SelfComposedEvent(LaplaceEvent(1.0), 300))
    with pytest.warns(AccuracyWarning, match="eps_tolerance"):
        bounds = acc.get_epsilon_bounds(1e-5)
    reference = create("pld")
    reference.compose(SelfComposedEvent(LaplaceEvent(1.0), 300))
    loose = reference.get_epsilon_bounds(1e-5)
    # both certified: they overlap, and the harder target is at least as tight
    assert bounds.lower <= loose.upper and loose.lower <= bounds.upper
    assert bounds.upper - bounds.lower <= loose.upper - loose.lower


def test_norm_bound_is_an_upper_bound():
    rng = np.random.default_rng(0)
    for values in (rng.standard_normal(10_001) * 1e-17, np.full(4096, 5e-324),
                   np.concatenate([np.ones(3), np.full(100, 1e-310)])):
        assert _norm_upper(values) >= float(np.linalg.norm(values))


def _two_laplace_steps_delta(epsilon: float, scale: float) -> float:
    """delta(eps) of two Laplace(scale) steps (sensitivity 1) by quadrature, independently of
    the library: under P = Lap(1, b) the loss (|x| - |x - 1|) / b has an atom 1/b of mass 1/2,
    an atom -1/b of mass e^(-1/b) / 2 and the density e^(-|x - 1| / b) / (2b) of (2x - 1) / b
    on (0, 1); delta = E[(1 - e^(eps - L1 - L2))_+] over two independent copies."""
    from scipy import integrate
    a = 1.0 / scale
    atoms = [(a, 0.5), (-a, 0.5 * math.exp(-a))]

    def density(x):
        return math.exp(-abs(x - 1) / scale) / (2 * scale)

    def gain(s):
        return max(0.0, -math.expm1(epsilon - s))
    total = sum(m1 * m2 * gain(l1 + l2) for l1, m1 in atoms for l2, m2 in atoms)
    for l1, m1 in atoms:
        total += 2 * m1 * integrate.quad(lambda x: density(x) * gain(l1 + (2 * x - 1) / scale),
                                         0, 1, epsabs=1e-14, epsrel=1e-12, limit=200)[0]
    total += integrate.dblquad(lambda y, x: density(x) * density(y)
                               * gain((2 * x - 1) / scale + (2 * y - 1) / scale),
                               0, 1, 0, 1, epsabs=1e-13, epsrel=1e-11)[0]
    return total


@pytest.mark.parametrize("scale", [0.5, 1.0, 3.0])
def test_two_laplace_steps_are_bracketed_by_exact_quadrature(scale):
    """The certified bounds (the atom-aware lower construction included) contain the exact
    delta of two composed Laplace steps, and the epsilon bounds invert it consistently."""
    acc = create("pld").compose(SelfComposedEvent(LaplaceEvent(scale), 2))
    for eps in (0.1, 0.5, 1.0, 1.8 / scale):
        exact = _two_laplace_steps_delta(eps, scale)
        lower, upper = acc.get_delta_bounds(eps)
        assert lower <= exact * (1 + 1e-9) + 1e-15
        assert upper >= exact * (1 - 1e-9) - 1e-15
    for delta in (1e-3, 1e-6):
        lower, upper = acc.get_epsilon_bounds(delta)
        assert _two_laplace_steps_delta(lower, scale) >= delta * (1 - 1e-6)
        assert _two_laplace_steps_delta(upper, scale) <= delta * (1 + 1e-6)


@pytest.mark.slow
def test_round_trip_at_a_tiny_delta_after_an_upper_only_grid():
    """10^6 Laplace(1) steps, delta 1e-15 (long fuzz profile): the epsilon was certified on the
    extra upper-only grid, whose composition is not kept, and the delta query's own grids gave
    1.008e-15 at it.  Delta queries now also use what the epsilon queries certified
    (``Accountant._with_epsilon_certificates``), so the round trip holds."""
    acc = create("pld").compose(SelfComposedEvent(LaplaceEvent(1.0), 10**6))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        epsilon = acc.get_epsilon(1e-15)
        lower, upper = acc.get_delta_bounds(epsilon)
    assert 0.0 <= lower <= upper <= 1e-15


@pytest.mark.parametrize("scale", [1e308, 1e16])
def test_laplace_with_a_huge_scale_answers(scale):
    """Scale 1e308 (long fuzz profile): the loss (|x| - |x - 1|) / b at the range ends x = +-inf
    was inf - inf = NaN, and the grid raised a bare ValueError.  Three steps are (3 / b)-DP
    (Dwork & Roth 2014, Thm 3.6 and composition), so every bound is at most that."""
    acc = create("pld").compose(SelfComposedEvent(LaplaceEvent(scale), 3))
    lower, upper = acc.get_epsilon_bounds(1e-5)
    assert 0.0 <= lower <= upper <= 3.0 / scale * (1 + 1e-9)
    assert acc.get_delta_bounds(3.0 / scale * (1 + 1e-9)).upper == 0.0


def test_subsampled_laplace_at_the_largest_scale():
    """Scale 1e308: the pair's x range was ``scale * log(1 / tail)``, which overflowed to inf,
    and the loss range became NaN (a bare ValueError from the grid).  The loss is constant
    outside [0, 1], so the range is capped; the answer is (about) no privacy loss: the
    largest loss of a step is ``log(1 + q (e^(1/b) - 1))``, below 1e-307."""
    from dpplugins.events import PoissonSampledEvent
    acc = create("pld")
    acc.compose(PoissonSampledEvent(0.5, LaplaceEvent(1e308)), 5)
    lower, upper = acc.get_epsilon_bounds(1e-5)
    assert lower == 0.0 and 0.0 <= upper <= 5 * math.log1p(0.5 * math.expm1(1e-308)) + 1e-300
    pair = mechanisms.poisson_subsampled_laplace(1e308, 0.5)
    for direction in ("remove", "add"):
        lo, hi = pair.pairs[direction].loss_range(1e-15)
        assert math.isfinite(lo) and math.isfinite(hi)


@pytest.mark.parametrize("scale", [1e-3, 1.2e-3, 1 / 700, 1 / 580])
@pytest.mark.parametrize("step", [1e-2, 0.05])
def test_laplace_losses_beyond_the_grid_are_bracketed_by_the_closed_form(scale, step):
    """Losses above the grid's cap (``MAX_ABS_LOSS`` = 600): scale 1e-3 has losses up to 1000
    with Q-mass ``e^-1000 / 2`` there, which underflows.  The tangent construction ended flat and
    put that P-mass at loss +inf, a lower bound of 1 - 1e-13 at every epsilon, 2000 included
    (where the truth is 0); scale 1.2e-3 raised an OverflowError (``v / Q`` overflowed).  Now
    both constructions bracket the closed-form profile everywhere and the lower bound is 0 above
    the largest loss ``1 / scale``."""
    pld = PrivacyLossDistribution.from_laplace(scale, value_discretization_interval=step)
    epsilon0 = 1.0 / scale
    for epsilon in (1.0, 300.0, 550.0, 599.0, 601.0, 650.0, 700.0, epsilon0 - 1.0, epsilon0,
                    epsilon0 + 1.0, 2000.0):
        exact = _laplace_profile(epsilon, epsilon0)
        lower, upper = pld.delta_for_epsilon(epsilon)
        assert 0.0 <= lower <= exact + 1e-12, (epsilon, lower, exact)
        assert upper >= exact - 1e-12, (epsilon, upper, exact)
        if epsilon >= epsilon0:
            assert lower == 0.0
    lower, upper = pld.epsilon_for_delta(1e-15)
    assert 0.0 <= lower <= epsilon0 <= upper


@pytest.mark.parametrize("count", [1, 3])
def test_composed_laplace_beyond_the_grid_has_no_lower_bound_above_pure_dp(count):
    """``count`` Laplace(1e-3) steps are ``1000 count``-DP (Dwork & Roth 2014, Thm 3.6 and
    composition): every certified lower delta above that is 0 and the lower epsilon at any delta
    is at most it.  Before the fix the lower bounds were ``delta(2000) >= 1`` and
    ``epsilon(1e-15) >= inf``.  The same for Poisson-subsampled Laplace (rate 1/2), whose loss
    is at most ``log(1 + q (e^1000 - 1))`` per step (Koskela et al. 2021, Sec. 6)."""
    pure = 1000.0 * count
    pld = PrivacyLossDistribution.from_laplace(1e-3, value_discretization_interval=1e-2)
    pld = pld.self_compose(count)
    for epsilon in (pure, pure + 1.0, 2.0 * pure, 1e4):
        assert pld.delta_for_epsilon(epsilon).lower == 0.0
    assert pld.epsilon_for_delta(1e-15).lower <= pure
    assert pld.delta_for_epsilon(pure * (1 + 1e-9)).upper >= 0.0
    sampled_loss = 1000.0 + math.log(0.5)  # log(1 + 0.5 (e^1000 - 1)) to double precision
    sampled = PrivacyLossDistribution.from_mechanism(
        mechanisms.poisson_subsampled_laplace(1e-3, 0.5), value_discretization_interval=1e-2)
    sampled = sampled.self_compose(count)
    for epsilon in (count * sampled_loss + 1e-6, 2.0 * pure):
        assert sampled.delta_for_epsilon(epsilon).lower == 0.0
    assert sampled.epsilon_for_delta(1e-15).lower <= count * sampled_loss + 1e-6


@pytest.mark.parametrize("rate", [0.5, 1e-3])
def test_subsampled_laplace_with_a_loss_beyond_float_exp_answers(rate):
    """Poisson-subsampled Laplace at scale 1e-3 (1/b = 1000 > 709): the accountant's largest
    loss ``log1p(q expm1(1/b))`` overflowed, and every query raised a NumericalError blaming
    "a size or count of the history".  The pure-DP epsilon of three steps is
    ``3 log(1 - q + q e^1000)`` (Koskela et al. 2021, Sec. 6), computed here with mpmath; the
    bounds at delta 1e-5 lie below it and delta is 0 just above it."""
    import mpmath
    from dpplugins.events import PoissonSampledEvent
    mpmath.mp.dps = 40
    exact = float(3 * mpmath.log(1 - mpmath.mpf(rate) + mpmath.mpf(rate) * mpmath.e ** 1000))
    acc = create("pld").compose(PoissonSampledEvent(rate, LaplaceEvent(1e-3)), 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        pure = acc.get_epsilon_bounds(0.0)
        assert pure.lower <= exact <= pure.upper <= exact * (1 + 1e-9)
        lower, upper = acc.get_epsilon_bounds(1e-5)
        assert 0.0 <= lower <= exact and exact <= upper * (1 + 1e-9)
        assert acc.get_delta_bounds(exact * (1 + 1e-9)) == (0.0, 0.0)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_queries_on_a_pure_dp_history_leak_no_floating_point_warning():
    """Three Lap(1) and two Lap(2) steps (dp_accounting's own Laplace test history): the pure-DP
    epsilon is 3 / 1 + 2 / 2 = 4 (Dwork & Roth 2014, Thms 3.6 and 3.16), so delta(4) = 0 and
    epsilon(1e-14) <= 4.  The epsilon query reused a composition tilted towards the delta query
    and cast its tables to double with an overflow warning."""
    accountant = create("pld")
    accountant.compose(SelfComposedEvent(LaplaceEvent(1.0), 3))
    accountant.compose(SelfComposedEvent(LaplaceEvent(2.0), 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", AccuracyWarning)
        assert accountant.get_delta_bounds(4.0).upper <= 1e-12
        bounds = accountant.get_epsilon_bounds(1e-14)
    assert 0.0 <= bounds.lower <= bounds.upper <= 4.0 * (1 + 1e-9)
