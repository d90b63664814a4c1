import math

import pytest

from dpplugins.errors import (NumericalError, ParameterError, check_count, check_open_unit,
                              check_positive, check_probability)


def test_parameter_error_names_parameter_value_and_range():
    with pytest.raises(ParameterError) as info:
        check_positive("noise_multiplier", -1.0)
    message = str(info.value)
    assert "noise_multiplier" in message and "-1.0" in message and "> 0" in message
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5, math.nan, math.inf, "0.1", None, True])
def test_probability_rejects(value):
    with pytest.raises(ParameterError):
        check_probability("sample_rate", value)


@pytest.mark.parametrize("value", [0.0, 1.0, -1e-9])
def test_open_unit_rejects(value):
    with pytest.raises(ParameterError, match="open interval"):
        check_open_unit("delta", value)


def test_nan_is_named_in_the_message():
    with pytest.raises(ParameterError, match="NaN"):
        check_open_unit("delta", math.nan)


def test_count_accepts_integral_floats_and_rejects_others():
    assert check_count("count", 3.0) == 3
    for bad in (-1, 2.5, math.nan, "3"):
        with pytest.raises(ParameterError):
            check_count("count", bad)


def test_numerical_error_says_what_to_change():
    err = NumericalError("could not certify", "raise memory_limit")
    assert isinstance(err, ArithmeticError)
    assert "To fix: raise memory_limit" in str(err)
