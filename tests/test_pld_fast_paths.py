"""The PLD engine's fast numerical paths against independent references: component cumulants
against mpmath, the lower convex hull against an exact integer hull, cached spectra against
uncached compositions, the double-precision evaluation tables against an exact sum, the
closed-form start of the epsilon inversions against plain bisection, and the shared interval
masses against separate calls.  Core only (numpy, scipy, mpmath): runs on the numpy-2 leg."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpplugins.pld import PrivacyLossDistribution


def test_cumulants_are_certified_upper_bounds_against_mpmath():
    """cumulant_at (two tables of exponentials, truncation at e^-700) against mpmath at 30
    digits: K + 2 u M is never below the exact log-moment-generating function, and K is within
    1e-13 of it wherever the truncation cannot matter."""
    mpmath = pytest.importorskip("mpmath")
    from dpplugins.pld.compose import LAMBDA_GRID, cumulant_at
    from dpplugins.pld.grid import GridPMF

    mpmath.mp.dps = 30
    rng = np.random.default_rng(1)
    u = np.finfo(float).eps / 2
    for _ in range(10):
        n = int(rng.integers(1, 900))
        h = float(10 ** rng.uniform(-4, -1))
        lo = int(rng.integers(-n, n))
        pmf = rng.random(n) ** 3
        pmf[rng.random(n) < 0.2] = 0.0
        if rng.random() < 0.4:  # masses down to 1e-300: products below the normal range
            pmf *= 10.0 ** rng.uniform(-300, 0, size=n)
        pmf[int(rng.integers(n))] += 1e-3
        pmf /= pmf.sum()
        grid = GridPMF(h, lo, pmf, 0.0, 0.0)
        terms = [(mpmath.mpf(float(p)), (lo + i) * mpmath.mpf(h)) for i, p in enumerate(pmf)
                 if p > 0]
        for sign in (1.0, -1.0):
            for index in range(0, 64, 7):
                value, magnitude = cumulant_at(grid, sign, index)
                lam = mpmath.mpf(sign * float(LAMBDA_GRID[index]))
                exact = float(mpmath.log(mpmath.fsum(p * mpmath.exp(lam * s) for p, s in terms)))
                assert exact <= value + 2 * u * magnitude
                spread = float(lam) * (terms[-1][1] - terms[0][1]) * h
                if abs(float(spread)) < 600:  # no term below e^-700 relative to the largest
                    assert value - exact <= 1e-13 * max(abs(exact), 1.0)


@pytest.mark.parametrize("h", [1e-4, 3e-3, 0.05])
def test_batched_cumulants_are_certified_upper_bounds_against_mpmath(h):
    """CumulantBatch (all components in one matrix-vector product per tilt) against mpmath at
    30 digits, on components of lengths 1 to 3000 sharing one grid (one with no positive mass):
    K + 2 u M is never below the exact log-moment-generating function, K is within 1e-13 of
    it where no term is below e^-700 of the largest, and the sum over the components
    (_CumulantSum.at) is within its stated bound."""
    mpmath = pytest.importorskip("mpmath")
    from dpplugins.pld.compose import LAMBDA_GRID, CumulantBatch, _CumulantSum
    from dpplugins.pld.grid import GridPMF

    mpmath.mp.dps = 30
    rng = np.random.default_rng(int(h * 1e4))
    u = np.finfo(float).eps / 2
    grids = []
    for n in (1, 2, 7, 50, 333, 3000, 900, 17):
        lo = int(rng.integers(-n - 5, n + 5))
        pmf = rng.random(n) ** 3
        pmf[rng.random(n) < 0.2] = 0.0
        if rng.random() < 0.5:
            pmf *= 10.0 ** rng.uniform(-300, 0, size=n)
        pmf[int(rng.integers(n))] += 1e-3
        grids.append(GridPMF(h, lo, pmf / pmf.sum(), 0.0, 0.0))
    grids.append(GridPMF(h, 3, np.zeros(4), 0.5, 0.0))
    batch = CumulantBatch(grids)
    counts = [int(k) for k in rng.integers(1, 50, len(grids) - 1)]
    summed = _CumulantSum(list(zip(grids[:-1], counts)) * 2)  # 16 components: batched
    for sign in (1.0, -1.0):
        for index in range(0, 64, 5):
            values, magnitudes = batch.at(sign, index)
            lam = mpmath.mpf(sign * float(LAMBDA_GRID[index]))
            exact_all = []
            for grid, value, magnitude in zip(grids[:-1], values, magnitudes):
                terms = [(mpmath.mpf(float(p)), (grid.lo + i) * mpmath.mpf(h))
                         for i, p in enumerate(grid.pmf) if p > 0]
                exact = mpmath.log(mpmath.fsum(p * mpmath.exp(lam * s) for p, s in terms))
                exact_all.append(exact)
                assert float(exact) <= value + 2 * u * magnitude
                spread = abs(float(lam) * float(terms[-1][1] - terms[0][1]))
                if spread < 600:
                    assert value - float(exact) <= 1e-13 * max(abs(float(exact)), 1.0)
            assert math.isnan(values[-1]) and math.isnan(magnitudes[-1])
            _, total, magnitude = summed.at(sign, index)
            exact_total = float(2 * mpmath.fsum(k * e for k, e in zip(counts, exact_all)))
            assert exact_total <= total + 8 * u * magnitude


def test_cached_spectra_give_the_same_composition_and_stay_bounded():
    from dpplugins.pld import spectra
    from dpplugins.pld.compose import compose_grid_pmfs
    from dpplugins.pld.grid import GridPMF

    rng = np.random.default_rng(3)
    pmf = rng.random(6000)
    pmf /= pmf.sum() * 1.001
    component = GridPMF(1e-3, -3000, pmf, 0.0, 0.0)
    spectra.clear_spectra_cache()
    cold = compose_grid_pmfs([(component, 40)])
    warm = compose_grid_pmfs([(component, 40)])  # every spectral term from the cache
    assert np.array_equal(cold.pmf, warm.pmf) and cold.fp_error == warm.fp_error
    assert spectra._cache_bytes > 0
    # another object with equal masses is not confused with the first (keyed by identity)
    other = GridPMF(1e-3, -3000, pmf * 0.5, 0.0, 0.0)
    halved = compose_grid_pmfs([(other, 1)])
    assert np.isclose(halved.pmf.sum(), 0.5 * pmf.sum(), rtol=1e-9)
    # sizes: fast (factors 2, 3, 5, 7), at least the window and at most 1.2 times it
    for bins in list(range(1, 300)) + [76509, 10 ** 6 + 1]:
        size = spectra.transform_size(bins)
        assert bins <= size <= max(1.2 * bins, 16)
        rest = size if bins > 16 else 1  # (below 16 the window itself)
        for factor in (2, 3, 5, 7):
            while rest % factor == 0:
                rest //= factor
        assert rest == 1
    # bounded: many components never hold more than the cache limit
    for seed in range(40):
        c = GridPMF(1e-3, -3000, np.random.default_rng(seed).random(6000) / 6001, 0.0, 0.0)
        compose_grid_pmfs([(c, 50)])
        assert spectra._cache_bytes <= spectra.SPECTRA_CACHE_BYTES
    spectra.clear_spectra_cache()


def test_epsilon_inversions_return_the_verified_crossing_float():
    """The closed-form start of the bisection changes nothing: the upper epsilon is the smallest
    float with delta_upper <= delta (the next float down fails), the lower one the largest with
    delta_lower > delta, and both equal a plain bisection's."""
    pld = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        1.0, 0.02, value_discretization_interval=2e-3).self_compose(500)
    for delta in (1e-3, 1e-5, 1e-7):
        composed = pld._composed("remove", "upper")
        eps = composed.epsilon_upper(delta)
        assert composed.delta_upper(eps) <= delta
        assert composed.delta_upper(float(np.nextafter(eps, 0.0))) > delta
        j = int(np.searchsorted(composed._svals, eps, side="left"))
        plain = composed._bisect(lambda e: composed.delta_upper(e) <= delta,
                                 float(composed._svals[j - 1]), float(composed._svals[j]))
        assert plain == eps
        lower = pld._composed("remove", "lower")
        low = lower.epsilon_lower(delta)
        assert lower.delta_lower(low) > delta
        assert lower.delta_lower(float(np.nextafter(low, math.inf))) <= delta
        assert low <= eps


def test_double_precision_tables_bracket_an_exact_sum():
    """Untilted compositions evaluate delta from double-precision suffix sums: the certified
    bounds bracket the window sum computed exactly (math.fsum of the stored masses)."""
    pld = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        0.8, 0.05, value_discretization_interval=1e-3).self_compose(200)
    composed = pld._composed("remove", "upper")
    s = (composed.lo + np.arange(len(composed.pmf))) * composed.h
    mass = np.maximum(composed.pmf, 0.0)
    for epsilon in (0.0, 0.3, 1.0, 2.5, 4.0):
        keep = s > epsilon
        exact = math.fsum((mass[keep] * -np.expm1(epsilon - s[keep])).tolist())
        assert composed.delta_lower(epsilon) <= exact + composed.inf_mass
        assert composed.delta_upper(epsilon) >= exact + composed.inf_mass
        assert composed.delta_upper(epsilon) - exact <= 1e-9 + composed.additive_error(epsilon)


def test_shared_interval_masses_equal_separate_calls():
    from dpplugins.mechanisms.distributions import Gaussian, Mixture, interval_masses

    a = np.linspace(-8.0, 8.0, 2001)
    b = a + 0.01
    p = Mixture((0.03, 0.97), (Gaussian(1.0, 1.3), Gaussian(0.0, 1.3)))
    q = Gaussian(0.0, 1.3)
    shared = interval_masses((p, q), a, b)
    assert np.array_equal(shared[0], p.interval_mass(a, b))
    assert np.array_equal(shared[1], q.interval_mass(a, b))


def test_lower_convex_hull_matches_an_exact_hull():
    """The vectorised hull (every concave vertex deleted per pass) checked in exact rational
    arithmetic on random integer point sets, including long concave cascades: the polyline
    through the kept points is convex and no point lies below it.  With its vertices among the
    points and its ends at the first and last point, that makes it the lower convex hull (the
    largest convex function below the points lies below such a polyline and above it)."""
    from fractions import Fraction

    from dpplugins.pld.grid import lower_convex_hull

    rng = np.random.default_rng(5)
    for trial in range(60):
        n = int(rng.integers(3, 400))
        xs = np.sort(rng.choice(10 ** 4, size=n, replace=False)).astype(int)
        if trial % 3 == 0:  # a concave arc with noise: removals cascade
            ys = (-(xs - 5000) ** 2 // 5000 + rng.integers(0, 3, n)).astype(int)
        elif trial % 6 == 1:  # convex with a few dents (what the constructions produce)
            ys = ((xs - 4000) ** 2 // 2000).astype(int)
            dents = rng.choice(n, size=min(n, 4), replace=False)
            ys[dents] += rng.integers(1, 20000, len(dents))
        else:
            ys = rng.integers(0, 1000, n).astype(int)
        keep = lower_convex_hull(xs.astype(float), ys.astype(float)).tolist()
        assert keep[0] == 0 and keep[-1] == n - 1 and keep == sorted(set(keep))
        x, y = xs.tolist(), ys.tolist()
        slopes = [Fraction(y[b] - y[a], x[b] - x[a]) for a, b in zip(keep, keep[1:])]
        assert all(s0 <= s1 for s0, s1 in zip(slopes, slopes[1:]))
        segment = 0
        for i in range(n):
            while x[keep[segment + 1]] < x[i]:
                segment += 1
            a = keep[segment]
            assert y[i] >= y[a] + slopes[segment] * (x[i] - x[a])


def test_lower_convex_hull_with_equal_x_keeps_the_lowest_point():
    """Points with equal x (grid points e^(j h) rounded to one float once h is below an ulp):
    the divisions by zero leaked numpy warnings, and a pair of equal points was a zero-width
    segment.  The hull is checked in exact rational arithmetic as above, on integer point sets
    with repeated x; of each repeated x at most the lowest point is kept."""
    import warnings
    from fractions import Fraction

    from dpplugins.pld.grid import lower_convex_hull

    rng = np.random.default_rng(8)
    for _ in range(60):
        n = int(rng.integers(2, 200))
        xs = np.sort(rng.integers(0, max(2, n // 2), n))
        ys = rng.integers(0, 1000, n)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            keep = lower_convex_hull(xs.astype(float), ys.astype(float)).tolist()
        x, y = xs.tolist(), ys.tolist()
        assert len({x[k] for k in keep}) == len(keep) and keep == sorted(keep)
        assert x[keep[0]] == x[0] and x[keep[-1]] == x[-1]
        for k in keep:
            assert y[k] == min(y[i] for i in range(n) if x[i] == x[k])
        slopes = [Fraction(y[b] - y[a], x[b] - x[a]) for a, b in zip(keep, keep[1:])]
        assert all(s0 <= s1 for s0, s1 in zip(slopes, slopes[1:]))
        for i in range(n):
            segment = max(j for j in range(len(keep)) if x[keep[j]] <= x[i])
            if segment == len(keep) - 1:
                assert y[i] >= y[keep[-1]]
                continue
            a = keep[segment]
            assert y[i] >= y[a] + slopes[segment] * (x[i] - x[a])


def test_a_grid_finer_than_an_ulp_answers_without_warnings():
    """h = 1e-16: neighbouring grid points share one e^(j h).  Reference: the exact total
    variation q (1 - e^(-D/2)) of the Poisson-subsampled Laplace pair (scale 1, q = 1/2,
    sensitivity D = 1e-13; the total variation of Lap(0, 1) and Lap(D, 1) is 1 - e^(-D/2))."""
    import warnings

    from dpplugins import mechanisms

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pld = PrivacyLossDistribution.from_mechanism(
            mechanisms.poisson_subsampled_laplace(1.0, 0.5, 1e-13),
            value_discretization_interval=1e-16)
        bounds = pld.delta_for_epsilon(0.0)
    exact = 0.5 * -math.expm1(-0.5e-13)
    assert bounds.lower <= exact <= bounds.upper


@pytest.mark.parametrize("sigma,q,h", [(1.0, 0.01, 1e-3), (0.5, 0.3, 1e-2), (5.0, 1e-4, 1e-5),
                                       (1.2, 0.0125, 3.45e-4), (0.1, 0.5, 0.02)])
def test_mirrored_bins_equal_the_add_direction_computed_directly(sigma, q, h):
    """The Poisson-subsampled Gaussian's add bins, read backwards from the remove direction's
    (LossBins.mirrored), against the add pair's own interval masses (another inverse loss and
    other distributions): equal to a few units of round-off, bin by bin and in the tails."""
    from dpplugins import mechanisms
    from dpplugins.mechanisms.pairs import grid_range

    pairs = mechanisms.poisson_subsampled_gaussian(sigma, q)
    assert pairs.mirrored
    add, remove = pairs.pairs["add"], pairs.pairs["remove"]
    lo, hi = grid_range(*add.loss_range(1e-24), h)
    direct = add.loss_bins(h, lo, hi)
    wide = remove.loss_bins(h, -hi - 3, -lo + 2)  # a wider grid, restricted: sums move out
    via = wide.restricted(-hi, -lo).mirrored()
    assert (via.lo, via.hi) == (lo, hi)
    for name in ("p", "q"):
        ours, theirs = getattr(via, name), getattr(direct, name)
        assert np.all(np.abs(ours - theirs) <= 1e-14 * theirs + 1e-300), name
    for name in ("p_below", "q_below", "p_above", "q_above"):
        ours, theirs = getattr(via, name), getattr(direct, name)
        assert abs(ours - theirs) <= 1e-13 * theirs + 1e-300, name
    total = math.fsum(via.p.tolist()) + via.p_below + via.p_above
    assert abs(total - 1.0) <= 1e-13


def test_restricted_bins_keep_every_mass():
    from dpplugins import mechanisms

    remove = mechanisms.poisson_subsampled_gaussian(0.9, 0.05).pairs["remove"]
    bins = remove.loss_bins(1e-2, -20, 300)
    part = bins.restricted(-5, 100)
    assert part.p_below == pytest.approx(bins.p_below + bins.p[:15].sum(), rel=1e-15)
    assert part.q_above == pytest.approx(bins.q_above + bins.q[120:].sum(), rel=1e-15)
    assert np.array_equal(part.p, bins.p[15:120])
    with pytest.raises(ValueError):
        bins.restricted(-30, 100)


def test_loss_range_tail_costs_at_most_its_mass():
    """A shorter loss range (the grid of an epsilon query at a large delta) moves at most the
    left-out tail to loss +inf, and the bounds it certifies overlap those of the default range
    and are about as tight."""
    from dpplugins.accountants.pld import loss_range_tail_for
    from dpplugins.errors import ParameterError

    tail = loss_range_tail_for(1e-5, 10_000)
    assert tail == 1e-13
    assert loss_range_tail_for(1e-300, 10) == 1e-300 and loss_range_tail_for(0.5, 1) == 1e-10
    assert loss_range_tail_for(1e-30, 10_000) == 1e-38
    assert loss_range_tail_for(0.0, 10) == 1e-24 and loss_range_tail_for(1e-5, 0) == 1e-24
    short = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        1.0, 0.01, value_discretization_interval=1e-3, loss_range_tail=tail)
    full = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        1.0, 0.01, value_discretization_interval=1e-3)
    for direction in ("remove", "add"):
        (comp_short, _), = short._directions[direction]
        (comp_full, _), = full._directions[direction]
        assert len(comp_short.upper.pmf) < 0.75 * len(comp_full.upper.pmf)
        assert 0.0 <= comp_short.upper.inf_mass <= 2 * tail
    a = short.self_compose(10_000).epsilon_for_delta(1e-5)
    b = full.self_compose(10_000).epsilon_for_delta(1e-5)
    assert a.lower <= b.upper and b.lower <= a.upper
    assert a.upper <= b.upper * (1 + 1e-5)
    for bad in (0.0, -1.0, 1e-3, math.nan, math.inf):
        with pytest.raises(ParameterError, match="loss_range_tail"):
            PrivacyLossDistribution.from_poisson_subsampled_gaussian(
                1.0, 0.01, value_discretization_interval=1e-3, loss_range_tail=bad)


def test_composition_in_one_pass_equals_chained_compose():
    parts = [PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        sigma, q, value_discretization_interval=2e-3).self_compose(k)
        for sigma, q, k in [(1.0, 0.01, 30), (1.5, 0.02, 20), (0.9, 0.005, 50)]]
    chained = parts[0].compose(parts[1]).compose(parts[2]).compose(parts[0])
    at_once = PrivacyLossDistribution.composition(parts + [parts[0]])
    for direction in ("remove", "add"):
        assert [(id(c), k) for c, k in chained._directions[direction]] == \
            [(id(c), k) for c, k in at_once._directions[direction]]
    assert chained.epsilon_for_delta(1e-5) == at_once.epsilon_for_delta(1e-5)
    from dpplugins.errors import ParameterError
    with pytest.raises(ParameterError, match="plds"):
        PrivacyLossDistribution.composition([])
    with pytest.raises(ParameterError, match=r"plds\[2\]=.*a PrivacyLossDistribution"):
        PrivacyLossDistribution.composition([parts[0], parts[1], 3.0])
    coarser = PrivacyLossDistribution.from_gaussian(2.0, value_discretization_interval=1e-2)
    with pytest.raises(ParameterError, match=r"plds\[1\].value_discretization_interval"):
        PrivacyLossDistribution.composition([parts[0], coarser])
    with pytest.raises(ParameterError, match=r"other=.*a PrivacyLossDistribution"):
        parts[0].compose("not a PLD")


def test_memoised_windows_equal_fresh_ones():
    from dpplugins.pld import compose

    pld = PrivacyLossDistribution.from_poisson_subsampled_gaussian(
        0.8, 0.05, value_discretization_interval=1e-3).self_compose(300)
    parts = [(c.upper, k) for c, k in pld._directions["remove"]]
    first = compose._window(parts, 1e-15, 2 ** 40)
    assert compose._window(parts, 1e-15, 2 ** 40) is first
    assert first == compose._window_edges(parts, 1e-15)
    with pytest.raises(compose.NumericalError):
        compose._window(parts, 1e-15, 10)
