"""Replace-one neighbouring for Poisson-subsampled Gaussian steps.

The record v is replaced by v' (norms <= 1 after clipping); the step's outputs are
``q N(v, s^2 I) + (1-q) N(0, s^2 I)`` and the same with v'.  We use the antipodal pair v = -v'
in one dimension.  This test checks that choice numerically in the plane spanned by v and v'
(the pair only depends on that plane): over angles and norms, no configuration has a larger
hockey-stick divergence than the antipodal one, and our single-step bounds contain the antipodal
value computed by 2-D quadrature.
"""

import numpy as np
import pytest

from dpplugins.pld import PrivacyLossDistribution as PLD

SIGMA, Q = 1.0, 0.3
AXIS = np.linspace(-9, 9, 1201)
STEP = AXIS[1] - AXIS[0]
X, Y = np.meshgrid(AXIS, AXIS, indexing="ij")


def density(center):
    return np.exp(-((X - center[0]) ** 2 + (Y - center[1]) ** 2) / (2 * SIGMA ** 2)) / (
        2 * np.pi * SIGMA ** 2)


def hockey_stick_2d(v, w, eps):
    base = (1 - Q) * density((0.0, 0.0))
    p = Q * density(v) + base
    q = Q * density(w) + base
    both = [np.sum(np.maximum(a - np.exp(eps) * b, 0.0)) * STEP ** 2 for a, b in ((p, q), (q, p))]
    return max(both)


@pytest.mark.parametrize("eps", [0.0, 0.3, 0.8])
def test_antipodal_pair_is_the_worst_case_and_inside_our_bounds(eps):
    antipodal = hockey_stick_2d((1.0, 0.0), (-1.0, 0.0), eps)
    for angle in np.deg2rad([30, 60, 90, 120, 150]):
        for norm in (0.5, 1.0):
            other = hockey_stick_2d((1.0, 0.0), (norm * np.cos(angle), norm * np.sin(angle)), eps)
            assert other <= antipodal + 1e-9
    bounds = PLD.from_poisson_subsampled_gaussian(
        SIGMA, Q, neighbouring="replace_one",
        value_discretization_interval=1e-3).delta_for_epsilon(eps)
    # the 2-D Riemann sum (step 0.015) is accurate to about 1e-5 here
    assert bounds.lower - 1e-5 <= antipodal <= bounds.upper + 1e-5
