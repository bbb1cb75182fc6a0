"""The shared value checks: one rule per kind of value, errors as ``field=value why``."""

from __future__ import annotations

import argparse
import math

import pytest

from flowctl.core.validation import (
    InvalidValue,
    allowed_parallelisms,
    argparse_type,
    choice,
    integer,
    integer_from_text,
    number,
    number_from_text,
    parallelism,
)


def test_allowed_parallelisms_are_the_powers_of_two_within_the_bounds() -> None:
    assert allowed_parallelisms(1, 16) == [1, 2, 4, 8, 16]
    assert allowed_parallelisms(3, 20) == [4, 8, 16]
    assert allowed_parallelisms(5, 7) == []


@pytest.mark.parametrize("value", [True, 2.0, "2", None, [2]])
def test_integer_refuses_what_is_not_an_int(value: object) -> None:
    with pytest.raises(InvalidValue) as info:
        integer("stream.parallelism", value, lo=1)
    assert str(info.value) == f"stream.parallelism={value!r} must be an integer >= 1"
    assert (info.value.field, info.value.value) == ("stream.parallelism", value)


@pytest.mark.parametrize("value", [math.inf, math.nan, False, "1", -0.5, 1.5])
def test_number_refuses_non_finite_bool_text_and_out_of_bounds(value: object) -> None:
    with pytest.raises(InvalidValue, match=r"^f=.* must be a number >= 0 and <= 1$"):
        number("f", value, lo=0, hi=1)
    assert number("f", 1, lo=0, hi=1) == 1.0


def test_open_bounds_say_so() -> None:
    with pytest.raises(InvalidValue, match=r"must be a number > 0 and < 1$"):
        number("f", 0, lo=0, hi=1, lo_open=True, hi_open=True)


def test_choice_lists_the_allowed_values() -> None:
    assert choice("mode", "flow", ("flow", "plain")) == "flow"
    with pytest.raises(InvalidValue, match=r"^mode='x' must be one of flow, plain$"):
        choice("mode", "x", ("flow", "plain"))


def test_text_is_read_and_shown_as_given() -> None:
    assert integer_from_text("lanes", " 4 ") == 4
    assert integer_from_text("lanes", 4.0) == 4
    for text, why in (
        ("four", "is not an integer"),
        ("0", "must be >= 1"),
        (2.5, "is not an integer"),
    ):
        with pytest.raises(InvalidValue) as info:
            integer_from_text("lanes", text, lo=1)
        assert str(info.value) == f"lanes={text!r} {why}"
    assert number_from_text("t", "0.5", lo=0, lo_open=True) == 0.5
    with pytest.raises(InvalidValue, match=r"^t='inf' is not a finite number$"):
        number_from_text("t", "inf")


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            3,
            "p=3 is not allowed: it must be a power of two within [1, 16], "
            "i.e. one of [1, 2, 4, 8, 16]",
        ),
        ("32", "p=32 is not allowed"),
        ("x", "p='x' is not an integer; allowed values: [1, 2, 4, 8, 16]"),
        (True, "p=True is not an integer"),
    ],
)
def test_parallelism_names_the_field_the_value_and_the_allowed_values(
    value: object, message: str
) -> None:
    with pytest.raises(InvalidValue) as info:
        parallelism("p", value, 1, 16)
    assert message in str(info.value)


def test_parallelism_without_bounds_is_any_power_of_two() -> None:
    assert parallelism("p", "1024") == 1024
    with pytest.raises(InvalidValue, match=r"within >= 1, i\.e\. one of 1, 2, 4, 8, \.\.\."):
        parallelism("p", 12)


def test_argparse_type_lets_argparse_name_the_option() -> None:
    parser = argparse.ArgumentParser(prog="x", exit_on_error=False)
    parser.add_argument("--n", type=argparse_type(lambda f, t: integer_from_text(f, t, lo=1)))
    with pytest.raises(argparse.ArgumentError, match=r"argument --n: '0' must be >= 1"):
        parser.parse_args(["--n", "0"])
