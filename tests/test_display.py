"""Printed certified numbers are rounded outward (``dpplugins.display``), checked against exact
decimal arithmetic and, through the command line, against the Gaussian closed form in 50-digit
arithmetic (mpmath)."""

from __future__ import annotations

import math
import re
from decimal import Decimal

import mpmath
import numpy as np
import pytest

from dpplugins.display import interval_text, lower_text, upper_text
from test_cli import run


def test_directed_rounding_against_exact_decimals():
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.lognormal(0, 6, 2000), [1.0, 3.386933188, 9.9999995, 5e-324,
                                                         1e308, 2.2250738585072014e-308]])
    for value in values:
        value = float(value)
        for digits in (1, 4, 6, 12):
            up, down = upper_text(value, digits=digits), lower_text(value, digits=digits)
            assert Decimal(up) >= Decimal(value) >= Decimal(down), (value, digits, up, down)
            assert len(up.split("e")[0].replace(".", "").lstrip("0")) <= digits + 1
        for decimals in (0, 3, 4):
            up, down = upper_text(value, decimals=decimals), lower_text(value, decimals=decimals)
            assert Decimal(up) >= Decimal(value) >= Decimal(down)
            assert Decimal(up) - Decimal(down) <= Decimal(10) ** -decimals
    assert upper_text(math.inf) == lower_text(math.inf) == "inf"
    assert interval_text(3.386933188, 3.386933188) == "[3.38693, 3.38694]"


def _gaussian_epsilon(mu: float, delta: float) -> mpmath.mpf:
    with mpmath.workdps(50):
        m, d = mpmath.mpf(mu), mpmath.mpf(delta)

        def profile(e):
            return mpmath.ncdf(-e / m + m / 2) - mpmath.exp(e) * mpmath.ncdf(-e / m - m / 2)
        lo, hi = mpmath.mpf(0), m * m + 50
        for _ in range(200):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if profile(mid) > d else (lo, mid)
        return hi


@pytest.mark.parametrize("sigma", [1.0, 1.15, 1.25])
def test_printed_intervals_hold_the_exact_epsilon(sigma):
    """(hostile sweep) one full-batch Gaussian step: ``epsilon`` printed [3.38693, 3.38693]
    where the exact value is 3.386933 and ``compare`` an upper bound 3.7260 below the exact
    3.72603; printed bounds are now rounded outward."""
    exact = _gaussian_epsilon(1 / sigma, 1e-5)
    out = run("epsilon", "--accountant", "pld", "--sample-rate", "1", "--steps", "1",
              "--noise-multiplier", str(sigma), "--delta", "1e-5").stdout
    low, high = re.search(r"epsilon in \[([0-9.e+-]+), ([0-9.e+-]+)\]", out).groups()
    assert mpmath.mpf(low) <= exact <= mpmath.mpf(high), (out, exact)
    table = run("compare", "--sample-rate", "1", "--steps", "1", "--noise-multiplier",
                str(sigma), "--delta", "1e-5", "--accountants", "pld,fdp").stdout
    for name in ("pld", "fdp"):
        row = next(line for line in table.splitlines() if line.startswith(name + " "))
        upper, lower = row.split()[1:3]
        assert mpmath.mpf(lower) <= exact <= mpmath.mpf(upper), (row, exact)


@pytest.mark.parametrize("target,steps", [(3.0, 1), (8.0, 5)])
def test_the_printed_noise_multiplier_meets_the_target(target, steps):
    """(hostile sweep) ``noise`` printed 1.39059, rounded down from 1.3905935, whose exact
    epsilon is 3.0000085 > 3."""
    out = run("noise", "--accountant", "pld", "--sample-rate", "1", "--steps", str(steps),
              "--target-epsilon", str(target), "--delta", "1e-5").stdout
    sigma = re.search(r"noise multiplier ([0-9.e+-]+)", out).group(1)
    assert _gaussian_epsilon(math.sqrt(steps) / float(sigma), 1e-5) <= target
