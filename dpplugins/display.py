"""Printing certified numbers: rounded outward, never in the user's favour.

A certified upper bound printed with fewer digits is rounded *up*, a certified lower bound
*down*, and a noise multiplier that meets a target *up* (more noise is the safe side).  Rounding
to nearest printed ``epsilon in [3.38693, 3.38693]`` where the exact value is 3.386933 (above
the printed interval), and a noise multiplier of 1.39059 whose certified epsilon is 3.0000085
for a target of 3 (found by a hostile sweep of the command line).

The value is rounded in decimal from its exact binary value (``decimal.Decimal(float)`` is
exact), so the printed number is on the stated side of the float, which is on the certified
side of the truth.

Example::

    >>> upper_text(3.386933188, digits=6), lower_text(3.386933188, digits=6)
    ('3.38694', '3.38693')
    >>> upper_text(0.123456789, decimals=4), lower_text(float("inf"))
    ('0.1235', 'inf')
"""

from __future__ import annotations

import math
from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal, localcontext

__all__ = ["upper_text", "lower_text", "interval_text"]


def _directed(value: float, rounding: str, digits: int | None, decimals: int | None) -> str:
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    exact = Decimal(value)
    with localcontext() as context:
        context.prec = 1200          # every float is exact in decimal within this many digits
        if decimals is not None:
            return f"{exact.quantize(Decimal(1).scaleb(-decimals), rounding=rounding):f}"
        digits = 6 if digits is None else digits
        if value == 0.0:
            return "0"
        rounded = exact.quantize(Decimal(1).scaleb(exact.adjusted() - (digits - 1)),
                                 rounding=rounding)
    if not 1e-300 <= abs(value) <= 1e300:
        # (subnormal floats are too coarse to carry it, and 2e308 is no float)
        return format(rounded, f".{digits}g")
    # printed through the nearest float: that float is within an ulp of the decimal of
    # ``digits`` <= 15 significant digits, so it prints as that decimal (in Python's style)
    return format(float(rounded), f".{digits}g")


def upper_text(value: float, *, digits: int | None = None, decimals: int | None = None) -> str:
    """``value`` printed with ``digits`` significant digits (default 6, at most 15), or ``decimals`` digits
    after the point, rounded up (towards +inf): for upper bounds and noise multipliers."""
    return _directed(value, ROUND_CEILING, digits, decimals)


def lower_text(value: float, *, digits: int | None = None, decimals: int | None = None) -> str:
    """``value`` printed as :func:`upper_text`, rounded down (towards -inf): for lower bounds."""
    return _directed(value, ROUND_FLOOR, digits, decimals)


def interval_text(lower: float, upper: float, *, digits: int | None = None,
                  decimals: int | None = None) -> str:
    """``[lower, upper]`` rounded outward."""
    return (f"[{lower_text(lower, digits=digits, decimals=decimals)}, "
            f"{upper_text(upper, digits=digits, decimals=decimals)}]")
