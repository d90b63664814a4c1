"""One Poisson-subsampled Gaussian step at small noise and tiny delta: the grid bins' Q-masses
fall below double's normal range (2^-1022) where epsilon exceeds about 540, and are known there
only to a few units of 2^-1074, which e^epsilon amplifies beyond the P-masses.  The upper bound on
epsilon was below the truth (sigma = 0.05, q = 1e-6, delta = 1e-80: 550.5100 for 550.5112) and
the lower bound above it (598.45 for 597.80 at 1e-100); such queries were refused.  Reference:
the closed form of the remove direction in mpmath at 60 digits (the add direction's loss is at
most -log(1 - q), so its delta is 0 at these epsilons)."""

import mpmath as mp
import pytest

from dpplugins.accountants import create


def _exact_epsilon(sigma, q, delta):
    """epsilon(delta) of P = (1-q) N(0, s^2) + q N(1, s^2) vs Q = N(0, s^2): with u the output
    where the loss equals eps, delta(eps) = q Phi_c((u-1)/s) - (e^eps - 1 + q) Phi_c(u/s)."""
    mp.mp.dps = 60
    s, q = mp.mpf(sigma), mp.mpf(q)

    def delta_at(eps):
        u = s ** 2 * mp.log((mp.e ** eps - 1 + q) / q) + mp.mpf(1) / 2
        return q * mp.ncdf(-(u - 1) / s) - (mp.e ** eps - 1 + q) * mp.ncdf(-u / s)
    lo, hi = mp.mpf(1), mp.mpf(2000)
    for _ in range(200):
        mid = (lo + hi) / 2
        if delta_at(mid) > delta:
            lo = mid
        else:
            hi = mid
    return float(lo)


@pytest.mark.parametrize("sigma,q,delta", [(0.05, 1e-6, 1e-80), (0.05, 1e-6, 1e-100),
                                           (0.2, 1e-6, 1e-250), (0.1, 1e-4, 1e-200)])
def test_tiny_delta_bounds_contain_the_exact_epsilon(sigma, q, delta):
    exact = _exact_epsilon(sigma, q, delta)
    acc = create("pld")
    acc.step(noise_multiplier=sigma, sample_rate=q)
    lower, upper = acc.get_epsilon_bounds(delta)
    assert lower <= exact <= upper
    assert upper - lower <= 0.05 * exact
