"""Powers of spectra from log-modulus and phase (``dpplugins.pld.spectra``), as random
allocation's t-fold sums use them, against closed forms: the t-fold sum of a fair coin is
Binomial(t, 1/2) (scipy's pmf, relative error near 1e-15, far below the bounds checked), and a
phase of ``k pi`` reduces to ``pi`` (odd ``k``) or ``0``."""

import math

import numpy as np
import pytest
from scipy import stats

from dpplugins.amplification.allocation import _fft_size, _inverse, _Product, _spectrum
from dpplugins.pld.spectra import from_log_polar, log_polar, power_rounding, reduce_phase

LONG_DOUBLE = np.finfo(np.longdouble).eps < 1e-18


def _binomial_half(t: int, size: int) -> tuple[np.ndarray, float]:
    """Binomial(t, 1/2) on 0 .. size - 1 and a bound on the l1 error of the reference itself
    (besides the comparison's own rounding to double): exact integers up to t = 3000 (each
    rounded once, relative 2^-53), scipy beyond (relative error of its pmf taken as 1e-13)."""
    out = np.zeros(size)
    if t <= 3000:
        out[: t + 1] = [math.comb(t, j) / 2 ** t for j in range(t + 1)]
        relative = 2.0 ** -53
    else:
        out[: t + 1] = stats.binom.pmf(np.arange(t + 1), t, 0.5)
        relative = 1e-13
    # the computed window is converted to double for the comparison: 2^-53 relative more
    return out, 2 * (relative + 2.0 ** -53)


@pytest.mark.parametrize("t", [1, 2, 1000, 100_003, 326_049])
def test_t_fold_sum_of_a_fair_coin_is_binomial_within_its_certified_error(t):
    size = _fft_size(t + 1, 2 ** 31, "test")
    spectrum = _spectrum(np.array([0.5, 0.5]), size)
    x, l1, l2 = _inverse(_Product(size // 2 + 1).times(spectrum, t), size)
    exact, reference_error = _binomial_half(t, size)
    error = np.abs(np.asarray(x, dtype=float) - exact)
    assert float(np.sum(error)) <= l1 + reference_error
    assert float(np.sqrt(np.sum(error * error))) <= l2 + reference_error
    # the certificate is a real bound, not a vacuous one (the deltas it is charged to are 1e-12
    # and above)
    assert l1 < 1e-8


def test_product_of_two_spectra_is_the_convolution():
    """(coin)^(t - 3) times (biased coin)^3: the sum of independent Bernoullis (exact pmf by
    direct convolution of the two binomials in double)."""
    t, k, p = 5000, 3, 0.25
    size = _fft_size(t + 1, 2 ** 31, "test")
    fair, biased = _spectrum(np.array([0.5, 0.5]), size), _spectrum(np.array([1 - p, p]), size)
    x, l1, _ = _inverse(_Product(size // 2 + 1).times(fair, t - k).times(biased, k), size)
    exact = np.convolve(stats.binom.pmf(np.arange(t - k + 1), t - k, 0.5),
                        stats.binom.pmf(np.arange(k + 1), k, p))
    assert float(np.sum(np.abs(np.asarray(x[: t + 1], dtype=float) - exact))) <= l1


@pytest.mark.skipif(not LONG_DOUBLE, reason="needs a long double wider than double (x86)")
def test_phase_of_k_pi_reduces_to_pi_in_long_double():
    """2 pi must be known to long-double accuracy: with ``2 * np.longdouble(np.pi)`` (double
    accuracy) a phase of 10^6 pi reduces with an error near 1e-10."""
    pi = np.longdouble("3.14159265358979323846264338327950288")
    for k in (10 ** 6 + 1, 3 * 10 ** 7 + 1):
        reduced = reduce_phase(np.array([k * pi], dtype=np.longdouble))
        assert abs(float(reduced[0] - pi)) < 1e-19 * k * 8


def test_power_from_log_polar_matches_repeated_products():
    """y^k from (log|y|, arg y) against Python's complex power in double, on random points of
    the unit disc; the error is within the charged c u k (|log y| + 0.2) (c = 10)."""
    rng = np.random.default_rng(7)
    radius = rng.uniform(0.5, 1.0, 200)
    angle = rng.uniform(-math.pi, math.pi, 200)
    y = (radius * np.exp(1j * angle)).astype(np.clongdouble)
    k = 37
    log_modulus, phase, _ = log_polar(y)
    power = from_log_polar(k * log_modulus, k * phase)
    exact = np.array([complex(v) ** k for v in y.astype(complex)])
    bound = 10 * np.finfo(np.longdouble).eps / 2 * k * power_rounding(log_modulus, phase)
    # the reference itself (double) is off by about k u_double relative
    slack = 4 * k * np.finfo(float).eps
    assert np.all(np.abs(power.astype(complex) - exact) <= (bound + slack) * np.abs(exact))
    # zero coefficients stay finite in the rounding term and give a zero power
    lm, ph, _ = log_polar(np.zeros(3, dtype=np.clongdouble))
    assert np.all(np.isfinite(power_rounding(lm, ph, 1e-18)))
    assert np.all(from_log_polar(5 * lm, 5 * ph) == 0)
