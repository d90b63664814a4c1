"""Errors and input validation shared by every module.

Two error types, one place for their messages:

* :class:`ParameterError` (a ``ValueError``) names the parameter, the value it got and the valid
  range, so a user can fix the call without reading our code.
* :class:`NumericalError` (an ``ArithmeticError``) says what could not be certified and which
  option to change.  We raise it instead of returning a number we cannot vouch for.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from numbers import Integral, Real
from typing import Any

__all__ = [
    "ParameterError",
    "NumericalError",
    "integer_text",
    "check_real",
    "check_float_count",
    "check_positive",
    "check_nonnegative",
    "check_probability",
    "check_open_unit",
    "check_count",
    "check_choice",
]


class ParameterError(ValueError):
    """A parameter is outside its valid range.

    The message always has the form ``"<name>=<value> is invalid: must be <range>"`` and, where it
    helps, a hint on how to fix the call.
    """

    def __init__(self, name: str, value: Any, valid: str, hint: str = "") -> None:
        self.name = name
        self.value = value
        self.valid = valid
        self.hint = hint
        message = f"{name}={_short_repr(value)} is invalid: must be {valid}"
        if hint:
            message += f". {hint}"
        super().__init__(message)


def integer_text(n: int, max_bits: int = 64) -> str:
    """``str(n)``, or ``about 10^k`` (``k`` the exponent of its leading digit) for an integer of
    more than ``max_bits`` bits: ``str()`` of one of more than 4,300 digits raises ValueError.

    Example::

        >>> integer_text(10 ** 5000)
        'about 10^5000'
    """
    if n.bit_length() <= max_bits:
        return str(n)
    return ("-" if n < 0 else "") + f"about 10^{int(math.log10(abs(n)))}"


def _short_repr(value: Any) -> str:
    """``repr(value)``; an int of more than 13,000 bits (about 3,900 digits) as ``about 10^k``."""
    if isinstance(value, int) and not isinstance(value, bool):
        return integer_text(value, 13000) if value.bit_length() > 13000 else repr(value)
    try:
        return repr(value)
    except ValueError:   # e.g. a Fraction or container holding such an int
        return f"<{type(value).__name__} too large to print>"


class NumericalError(ArithmeticError):
    """A numerical method could not certify its result.

    ``what`` says what could not be certified, ``fix`` which option to change.
    """

    def __init__(self, what: str, fix: str) -> None:
        self.what = what
        self.fix = fix
        super().__init__(f"{what}. To fix: {fix}")


def larger_delta_advice(floor: float, otherwise: str = "account fewer steps or use more "
                        "noise") -> str:
    """The fix of a refusal below an error floor on delta: "ask for delta above <floor>", or,
    when the floor is 1 or more (or not finite), ``otherwise`` -- no delta below 1 can be
    certified then (a refusal advised "delta above 8.11", and "above inf")."""
    if floor < 1.0:
        return f"ask for delta above {floor:.3g}"
    return f"{otherwise} (no delta below 1 can be certified for this history)"


def check_real(name: str, value: Any) -> float:
    """Return ``value`` as a finite float or raise :class:`ParameterError`."""
    if isinstance(value, bool) or not isinstance(value, Real):
        # numpy scalars are Real; strings and None are not.
        raise ParameterError(name, value, "a finite real number")
    try:
        value = float(value)
    except OverflowError:  # e.g. an int or Fraction beyond the float range
        raise ParameterError(name, value, "a finite real number of magnitude at most "
                             f"{sys.float_info.max:.4g} (the float range)") from None
    if not math.isfinite(value):
        raise ParameterError(name, value, "a finite real number (not NaN or infinity)")
    return value


def check_positive(name: str, value: Any) -> float:
    """A finite real number > 0."""
    value = check_real(name, value)
    if value <= 0:
        raise ParameterError(name, value, "a finite number > 0")
    return value


#: the largest privacy-loss grid step an accountant option accepts: a coarser grid certifies
#: nothing useful (every loss is rounded up to a multiple of it), and a step of 1e300 overflowed
#: the engine's loss arithmetic; the engine itself coarsens further where a history's losses
#: are huge (the window budget), which this does not limit
MAX_GRID_STEP = 1.0


def check_grid_step(name: str, value: Any) -> float:
    """A privacy-loss grid step (an accountant's ``value_discretization_interval``) in ``(0,
    MAX_GRID_STEP]``."""
    value = check_real(name, value)
    if not 0 < value <= MAX_GRID_STEP:
        raise ParameterError(name, value, f"in (0, {MAX_GRID_STEP:g}]",
                             "leave it unset for the accountant's own choice")
    return value


def check_nonnegative(name: str, value: Any) -> float:
    """A finite real number >= 0."""
    value = check_real(name, value)
    if value < 0:
        raise ParameterError(name, value, "a finite number >= 0")
    return value


def check_probability(name: str, value: Any, *, allow_zero: bool = False) -> float:
    """A sampling rate in (0, 1] (or [0, 1] with ``allow_zero``)."""
    value = check_real(name, value)
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value <= 1):
        raise ParameterError(name, value, "in [0, 1]" if allow_zero else "in (0, 1]")
    return value


def check_open_unit(name: str, value: Any) -> float:
    """A number strictly between 0 and 1 (a delta, for example)."""
    value = check_real(name, value)
    if not 0 < value < 1:
        raise ParameterError(name, value, "in the open interval (0, 1)")
    return value


def check_count(name: str, value: Any, *, minimum: int = 0) -> int:
    """An integer >= ``minimum`` (floats with an integral value are accepted)."""
    if isinstance(value, bool):
        raise ParameterError(name, value, f"an integer >= {minimum}")
    if isinstance(value, Integral):
        value = int(value)
    elif isinstance(value, Fraction) and value.denominator == 1:
        value = int(value)     # (float() of Fraction(10**400) raised OverflowError)
    elif isinstance(value, Real) and _finite_integral(value):
        value = int(value)
    else:
        raise ParameterError(name, value, f"an integer >= {minimum}")
    if value < minimum:
        raise ParameterError(name, value, f"an integer >= {minimum}")
    return value


def check_float_count(name: str, value: Any, *, minimum: int = 0) -> int:
    """:func:`check_count` that is also at most the largest float, for counts that enter
    floating-point formulas (10**400 slots raised OverflowError there)."""
    value = check_count(name, value, minimum=minimum)
    if value > sys.float_info.max:
        raise ParameterError(name, value, f"an integer in [{minimum}, {sys.float_info.max:.4g}] "
                             "(it enters floating-point formulas)")
    return value


def _finite_integral(value: Real) -> bool:
    try:
        as_float = float(value)
    except (OverflowError, ValueError):
        return False
    return math.isfinite(as_float) and as_float.is_integer()


def check_flag(name: str, value: Any) -> bool:
    """True or False (a numpy bool too; not 0, 1 or a string)."""
    if isinstance(value, bool):
        return value
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, numpy.bool_):
        return bool(value)
    raise ParameterError(name, value, "True or False")


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings."""
    if value not in choices:
        raise ParameterError(name, value, "one of " + ", ".join(repr(c) for c in choices))
    return value
