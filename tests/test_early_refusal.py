"""Queries that no composition can answer are refused before any transform (reliability issue).

An epsilon query at ``delta`` needs every error term of the composed PLD below ``delta``.  Two of
them are known before composing: the construction error of the grid PMFs (``sum count x
fp_error``) and the frequency-0 part of the FFT's floating-point term.  The long fuzz profile
found queries that spent 15-30 s composing (twice: double, then extended precision) only to
refuse with one of these terms.  The tests forbid the transforms (a monkeypatched FFT that
raises) and check each early refusal against the outcome of the full composition.
"""

import math

import numpy as np
import pytest
from fractions import Fraction

import dpplugins.pld.compose as compose
from dpplugins.accountants import create
from dpplugins.errors import NumericalError
from dpplugins.events import GaussianEvent, PNSGDEvent
from dpplugins.pld import PrivacyLossDistribution as PLD
from dpplugins.pld.compose import _frequency_zero_error, compose_grid_pmfs
from dpplugins.pld.grid import GridPMF


def _no_transform(*args, **kwargs):
    raise AssertionError("a transform was computed for a query that cannot be answered")


def _component(h=1e-3, sigma=2.0, q=0.1):
    pld = PLD.from_poisson_subsampled_gaussian(sigma, q, value_discretization_interval=h)
    return pld._directions["remove"][0][0].upper


@pytest.mark.parametrize("count", [1, 10, 10_000, 100_000])
@pytest.mark.parametrize("extended", [False, True])
def test_the_frequency_zero_floor_is_below_the_computed_term(count, extended):
    """The floor is a lower bound on the fp_error the full composition certifies."""
    c = _component()
    full = compose_grid_pmfs([(c, count)], extended=extended, extended_inverse=extended)
    size = len(full.pmf)
    u = float(np.finfo(np.longdouble if extended else float).eps) / 2
    # the transform size is at least the window: log2 of the window bounds log2 of the size
    floor = _frequency_zero_error([(c, count)], u, math.log2(max(size, 2))) + count * c.fp_error
    assert 0 < floor <= full.fp_error
    if count >= 10_000:
        assert floor >= 0.1 * full.fp_error  # and it is the dominant part at large counts


def test_compose_refuses_only_above_the_floor(monkeypatch):
    c = _component()
    full = compose_grid_pmfs([(c, 10_000)])
    # a limit above the computed term composes as before
    again = compose_grid_pmfs([(c, 10_000)], fp_limit=2 * full.fp_error)
    assert again.fp_error == full.fp_error
    monkeypatch.setattr(compose.sp_fft, "rfft", _no_transform)
    with pytest.raises(NumericalError, match="floating-point error term of composing 10,000"):
        compose_grid_pmfs([(c, 10_000)], fp_limit=0.01 * full.fp_error)


def test_a_component_without_finite_mass_has_no_floor():
    c = GridPMF(1e-3, 0, np.zeros(3), 1.0, 0.0)
    assert _frequency_zero_error([(c, 5)], 1e-16, 10.0) == 0.0


def test_fdp_million_steps_refuses_a_delta_below_the_fft_floor(monkeypatch):
    """Found by the long fuzz profile: fdp (replace-one, Poisson q = 1/e, sigma 0.1, 10^6
    steps) at delta 1e-12 composed a 22 M-bin window in extended precision (15 s) to refuse
    with a floating-point term of 2.9e-11.  On that grid (pinned here; no tilt of the grid of
    tilts fits it) the floor (1.3e-11 at frequency 0) refuses it before the transforms."""
    from dpplugins.events import PoissonSampledEvent
    acc = create("fdp", neighbouring="replace_one",
                 value_discretization_interval=0.018581361171917516)
    acc.compose(PoissonSampledEvent(0.36787944117144233, GaussianEvent(0.1)), 10 ** 6)
    monkeypatch.setattr(compose.sp_fft, "rfft", _no_transform)
    with pytest.raises(NumericalError, match="ask for delta above 1.3"):
        acc.get_epsilon_bounds(1e-12)


@pytest.mark.slow
def test_fdp_million_steps_default_grid_answers_small_deltas():
    """The same history on the default grid: the first grid's window is capped at 2^21 bins
    (:func:`~dpplugins.pld.distribution.within_window_budget`), a coarser step whose tilted
    composition certifies delta = 1e-12 (3 s instead of a refusal after 15 s).  Check: the
    true epsilon(1e-12) is at least epsilon(1e-5), which is at least the certified lower bound
    at 1e-5, so the upper bound at 1e-12 must be too."""
    from dpplugins.events import PoissonSampledEvent
    acc = create("fdp", neighbouring="replace_one")
    acc.compose(PoissonSampledEvent(0.36787944117144233, GaussianEvent(0.1)), 10 ** 6)
    with pytest.warns(Warning):
        loose = acc.get_epsilon_bounds(1e-5)
    tight = acc.get_epsilon_bounds(1e-12)
    assert 0 < loose.lower <= loose.upper <= tight.upper < math.inf


def test_pnsgd_refuses_a_delta_below_the_construction_error(monkeypatch):
    """Found by the long fuzz profile (25 s): 333,334 composed grid steps each carry a
    construction error of about 7e-15, so no composition can certify delta = 2.66e-10."""
    event = PNSGDEvent(3, Fraction(1000000, 3), GaussianEvent(1.0), 36.78794411714425, 1.0,
                       1.0, "online", 0.11618037990412387, 0.017402369483306455)
    acc = create("pnsgd")
    acc.compose(event)
    monkeypatch.setattr(compose.sp_fft, "rfft", _no_transform)
    with pytest.raises(NumericalError, match="construction error of the 333,334") as error:
        acc.get_epsilon_bounds(2.66e-10)
    floor = float(str(error.value).rsplit("ask for delta above ", 1)[1].rstrip(". "))
    assert floor > 2.66e-10


def test_the_construction_error_is_part_of_every_delta_bound():
    """Why the construction floor refuses: the certified delta of a composition is never below
    the summed construction error of its grid PMFs, at any epsilon, tilted or not."""
    c = _component()
    c = GridPMF(c.h, c.lo, c.pmf, c.inf_mass, 1e-9)
    for tilt in (0.0, 2.0):
        composed = compose_grid_pmfs([(c, 1000)], tilt=tilt)
        for epsilon in (0.0, 1.0, 10.0, 1e3):
            assert composed.delta_upper(epsilon) >= 1000 * 1e-9
        with pytest.raises(NumericalError):
            composed.epsilon_upper(0.9e-6)


# -- delta queries far below the untilted floating-point floor -----------------------------------
def _recording(monkeypatch):
    import dpplugins.pld.distribution as distribution
    calls = []
    original = distribution.compose_grid_pmfs

    def record(components, **options):
        calls.append((options.get("tilt", 0.0), options.get("extended", False)))
        return original(components, **options)
    monkeypatch.setattr(distribution, "compose_grid_pmfs", record)
    return calls


@pytest.mark.parametrize("epsilon", [7.5, 8.0])
def test_a_tiny_delta_skips_the_untilted_extended_composition(monkeypatch, epsilon):
    """10^4 Gaussian steps (sigma 100: mu = 1) at deltas near 1e-13 and 1e-14: the untilted
    extended-precision floor (about 6e-14 here) is above a thousandth of the Chernoff bound, so
    only tilted compositions are computed; the bounds contain the closed form (Balle & Wang 2018,
    Thm 8), and the skipped level would have changed nothing (fuzz: 34 s -> 10 s at 10^6
    steps)."""
    from conftest import gaussian_delta_exact
    calls = _recording(monkeypatch)
    pld = PLD.from_gaussian(100.0, value_discretization_interval=1e-3).self_compose(10_000)
    bounds = pld.delta_for_epsilon(epsilon)
    exact = gaussian_delta_exact(epsilon, 1.0)
    assert 1e-15 < exact < 1e-10
    assert bounds.lower <= exact <= bounds.upper
    assert bounds.upper - bounds.lower <= 0.5 * exact  # the grid (h = 1e-3), not the levels
    assert calls and all(tilt > 0 for tilt, _ in calls)


def test_tables_built_from_the_query_epsilon_give_the_full_tables_values():
    """Delta queries build the evaluation tables from their epsilon up; evaluating at a smaller
    epsilon later rebuilds them from lower down.  Both orders give the full tables' values and
    bracket the closed form (5 Gaussian steps, sigma 2)."""
    from conftest import gaussian_delta_exact
    c = PLD.from_gaussian(2.0, value_discretization_interval=1e-3)._directions["remove"][0][0]
    full = compose_grid_pmfs([(c.upper, 5)])
    full._ensure_tables(0.0)
    for order in ([0.5, 2.0, 4.0], [4.0, 2.0, 0.5]):
        partial = compose_grid_pmfs([(c.upper, 5)])
        lower_part = compose_grid_pmfs([(c.lower, 5)])
        for epsilon in order:
            exact = gaussian_delta_exact(epsilon, math.sqrt(5) / 2.0)
            assert partial.delta_upper(epsilon) == pytest.approx(full.delta_upper(epsilon),
                                                                 rel=1e-12)
            assert lower_part.delta_lower(epsilon) <= exact <= partial.delta_upper(epsilon)
        # an inversion after partial tables uses the whole stored part again
        assert partial.epsilon_upper(1e-3) == pytest.approx(full.epsilon_upper(1e-3), rel=1e-12)


# -- the first grid's window budget ---------------------------------------------------------------
def test_within_window_budget_coarsens_a_huge_window_and_stays_certified():
    """10^5 Gaussian steps with noise 0.1 (mu = 3162, epsilon ~ 5 * 10^6): on a 1e-3 grid the
    composed window would have tens of millions of bins.  The budget raises the step until it
    has at most 2^21; the bounds on that grid contain the closed form (Balle & Wang 2018,
    Thm 8) and are within 1 % of it."""
    from conftest import gaussian_delta_exact
    from dpplugins.pld.distribution import within_window_budget

    def build(h):
        return PLD.from_gaussian(0.1, value_discretization_interval=h).self_compose(100_000)
    assert build(1e-3).composed_window_bins() > 2 ** 24
    h, pld = within_window_budget(build, 1e-3, 2 ** 21)
    assert h > 1e-3 and pld.composed_window_bins() <= 2 ** 21
    mu = math.sqrt(100_000) / 0.1
    for epsilon in (mu * mu / 2, mu * mu / 2 + 3 * mu):
        exact = gaussian_delta_exact(epsilon, mu)
        bounds = pld.delta_for_epsilon(epsilon)
        assert bounds.lower <= exact <= bounds.upper <= 1.01 * exact + 1e-12


def test_within_window_budget_keeps_a_small_window_as_it_is():
    from dpplugins.pld.distribution import within_window_budget
    built = []

    def build(h):
        built.append(h)
        return PLD.from_gaussian(1.0, value_discretization_interval=h).self_compose(100)
    h, _ = within_window_budget(build, 1e-3, 2 ** 21)
    assert h == 1e-3 and built == [1e-3]


def test_pnsgd_passes_are_composed_within_the_window_budget():
    """The long-fuzz PNSGD history (333,334 online passes at sigma 1): on the default grid
    (1e-3) its composed window has about 19 M bins (47 s per query); the grid is coarsened
    until it has at most 2^21 (no transform is needed to check this)."""
    from dpplugins.pld.distribution import FIRST_WINDOW_BINS as FIRST_WINDOW
    event = PNSGDEvent(3, Fraction(1000000, 3), GaussianEvent(1.0), 36.78794411714425, 1.0,
                       1.0, "online", 0.11618037990412387, 0.017402369483306455)
    acc = create("pnsgd")
    acc.compose(event)
    configured, runs = acc._configured(tuple(acc.history))
    passes = configured.passes_of(runs)
    pld = configured._pld(passes)
    assert pld.value_discretization_interval > configured.value_discretization_interval
    assert pld.composed_window_bins() <= FIRST_WINDOW
