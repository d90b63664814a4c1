"""The summand laws of random allocation with Laplace noise or randomized response
(:mod:`dpplugins.amplification.allocation_mechanisms`), checked against quadrature in the
mechanism's own coordinates: the law of ``Y = dP0/dQ0(X)`` under ``Q0``, its closed-form cell
masses, and the convex-order property of the dominating spread (every convex function of the
summand has a larger mean under the spread, increasing or decreasing)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import integrate, stats

from dpplugins.amplification import allocation_mechanisms as am
from dpplugins.events import LaplaceEvent, RandomizedResponseEvent


def _laplace_ratio(x, b):
    return np.exp((np.abs(x) - np.abs(x - 1.0)) / b)


def _laplace_expectation(f, b, under="q"):
    """``E[f(Y)]`` for ``Y = r(X)``, ``X ~ Lap(0, b)`` (``under="q"``) or ``Lap(1, b)``, by
    quadrature in x (split at the kinks 0 and 1; the loss is constant outside)."""
    loc = 0.0 if under == "q" else 1.0
    dist = stats.laplace(loc=loc, scale=b)
    left = f(math.exp(-1.0 / b)) * dist.cdf(0.0)
    right = f(math.exp(1.0 / b)) * dist.sf(1.0)
    middle, _ = integrate.quad(lambda x: f(float(_laplace_ratio(x, b))) * dist.pdf(x), 0.0, 1.0,
                               epsabs=1e-14, epsrel=1e-12, limit=200)
    return left + middle + right


@pytest.mark.parametrize("b", [0.3, 1.0, 5.0])
def test_laplace_law_mass_mean_and_chi_square(b):
    law = am._summand_law(LaplaceEvent(b))
    c, lo, hi = law.density, law.lo, law.hi
    mass = law.atom_mass.sum() + 2 * c * (1 / math.sqrt(lo) - 1 / math.sqrt(hi))
    mean = float(law.atoms @ law.atom_mass) + 2 * c * (math.sqrt(hi) - math.sqrt(lo))
    assert mass == pytest.approx(1.0, rel=1e-13)
    assert mean == pytest.approx(1.0, rel=1e-13)
    assert law.chi2 == pytest.approx(_laplace_expectation(lambda y: y * y, b) - 1.0, rel=1e-8)


@pytest.mark.parametrize("b", [0.3, 1.0, 5.0])
def test_laplace_cell_masses_against_quadrature(b):
    """Q-mass, P-mass and the two end moments of every cell of a coarse grid, against
    quadrature in x: a summand in ``[u, v]`` is ``x`` in ``[(b log u + 1)/2, (b log v + 1)/2]``."""
    law = am._summand_law(LaplaceEvent(b))
    grid = am._grid(law, 10, (law.hi - law.lo) / 7.3, 1 << 30)
    q_mass, p_mass, above, below = am._density_cells(law, grid.edges)
    for k in range(grid.n):
        u, v = max(grid.edges[k], law.lo), min(grid.edges[k + 1], law.hi)
        if v <= u:
            assert q_mass[k] == p_mass[k] == above[k] == below[k] == 0.0
            continue
        xu, xv = (b * math.log(u) + 1) / 2, (b * math.log(v) + 1) / 2
        q_ref = stats.laplace(0, b).cdf(xv) - stats.laplace(0, b).cdf(xu)
        p_ref = stats.laplace(1, b).cdf(xv) - stats.laplace(1, b).cdf(xu)
        e_k, e_next = grid.edges[k], grid.edges[k + 1]
        pdf = stats.laplace(0, b).pdf
        above_ref = integrate.quad(lambda x: (float(_laplace_ratio(x, b)) - e_k) * pdf(x),
                                   xu, xv, epsabs=1e-15, epsrel=1e-12)[0]
        below_ref = integrate.quad(lambda x: (e_next - float(_laplace_ratio(x, b))) * pdf(x),
                                   xu, xv, epsabs=1e-15, epsrel=1e-12)[0]
        assert q_mass[k] == pytest.approx(q_ref, rel=1e-10, abs=1e-15)
        assert p_mass[k] == pytest.approx(p_ref, rel=1e-10, abs=1e-15)
        assert above[k] == pytest.approx(above_ref, rel=1e-9, abs=1e-14)
        assert below[k] == pytest.approx(below_ref, rel=1e-9, abs=1e-14)


@pytest.mark.parametrize("event", [pytest.param(LaplaceEvent(0.5), marks=pytest.mark.slow),
                                   pytest.param(LaplaceEvent(2.0), marks=pytest.mark.slow),
                                   RandomizedResponseEvent(1.0, 2),
                                   RandomizedResponseEvent(3.0, 5)])
def test_spread_dominates_in_convex_order(event):
    """The spread measure on the grid points has at least the exact mass, and a larger mean of
    ``(y - c)_+`` and of ``(c - y)_+`` for every ``c`` (both convex, one increasing, one
    decreasing): what makes its sum a dominating pair in both directions."""
    law = am._summand_law(event)
    grid = am._grid(law, 10, am._default_step(law, 10) * 3, 1 << 30)
    weights = am._upper_summand(law, grid)
    points = grid.edges
    if isinstance(event, LaplaceEvent):
        def exact(f):
            return _laplace_expectation(f, event.scale)
    else:
        def exact(f):
            return float(sum(q * f(y) for y, q in zip(law.atoms, law.atom_mass)))
    assert weights.sum() >= 1.0
    assert float(weights @ points) >= 1.0
    assert float(weights @ points) <= 1.0 + 1e-9
    for c in np.linspace(law.lo * 0.9, law.hi * 1.1, 23):
        up = float(weights @ np.maximum(points - c, 0.0))
        down = float(weights @ np.maximum(c - points, 0.0))
        assert up >= exact(lambda y: max(y - c, 0.0)) * (1 - 1e-9) - 1e-13
        assert down >= exact(lambda y: max(c - y, 0.0)) * (1 - 1e-9) - 1e-13


@pytest.mark.parametrize("event", [LaplaceEvent(0.7), RandomizedResponseEvent(2.0, 3)])
def test_lower_cells_are_the_law_rounded_to_cells(event):
    """The dominated pair's cells hold the whole law under Q and under P (P-mass = E_Q[Y]),
    each atom in the cell that contains it."""
    law = am._summand_law(event)
    grid = am._grid(law, 10, am._default_step(law, 10), 1 << 30)
    plain, special = am._lower_cells(law, grid)
    assert plain.sum() == pytest.approx(1.0, rel=1e-12)
    assert special.sum() == pytest.approx(1.0, rel=1e-12)
    for y in law.atoms:
        k = grid.cell_of(y)
        assert grid.edges[k] <= y <= grid.edges[k + 1]


def test_randomized_response_law_is_the_zero_out_pair():
    """Zero-out randomized response: ``Y = k e^eps0 / (e^eps0 + k - 1)`` with Q-mass ``1/k``
    and ``Y = k / (e^eps0 + k - 1)`` with Q-mass ``(k - 1)/k``."""
    eps0, k = 1.3, 4
    law = am._summand_law(RandomizedResponseEvent(eps0, k))
    e = math.exp(eps0)
    assert law.atoms.tolist() == pytest.approx([k / (e + k - 1), k * e / (e + k - 1)], rel=1e-15)
    assert law.atom_mass.tolist() == pytest.approx([(k - 1) / k, 1 / k], rel=1e-15)
    assert float(law.atoms @ law.atom_mass) == pytest.approx(1.0, rel=1e-15)
