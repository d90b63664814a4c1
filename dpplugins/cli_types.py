"""Argument types of the command line, shared by its subcommands: finite numbers only (1e400 and
NaN are refused while parsing, so every failure stays one line with exit status 2)."""

from __future__ import annotations

import argparse
import math
from typing import Iterable

from dpplugins.errors import ParameterError

__all__ = ["finite_number", "integer", "named_by_flag"]


def named_by_flag(error: ParameterError, names: Iterable[str]) -> ParameterError:
    """``error`` naming the flag that sets its parameter (``dataset_size=0 is invalid`` ->
    ``--dataset-size=0 is invalid``) where the parameter is one of ``names``; any other error
    as it is.

    Example::

        >>> str(named_by_flag(ParameterError("eps0", -1.0, ">= 0"), ["eps0"]))
        '--eps0=-1.0 is invalid: must be >= 0'
    """
    if error.name in names and str(error).startswith(error.name):
        return ParameterError("--" + error.name.replace("_", "-"), error.value, error.valid,
                              error.hint)
    return error


def finite_number(text: str) -> float:
    """``float(text)`` if it is finite, else ``argparse.ArgumentTypeError``.

    Example::

        >>> finite_number("1e-5")
        1e-05
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text!r}")
    return value


def integer(text: str) -> int:
    """An integer written as ``"1000"`` or ``"1e3"`` (at most 2**53 in the second form).

    Example::

        >>> integer("1e5")
        100000
    """
    try:
        return int(text)
    except ValueError:
        pass
    value = finite_number(text)
    if not value.is_integer() or abs(value) > 2 ** 53:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}")
    return int(value)
