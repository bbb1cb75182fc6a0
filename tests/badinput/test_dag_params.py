"""DAG params: the rescale request, the stream operator's parallelism / colour / standby and the
ingest request accept a value only when it is valid, else raise a ValueError naming the field
and the value.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.ingest import MAX_SYNTHETIC_LINES, SOURCES, IngestRequest
from flowctl_airflow.operators.rescale import DIRECTIONS, RescaleRequestError, validate_request
from flowctl_airflow.operators.stream import COLOURS, FlowctlStreamOperator

PROPERTY = settings(max_examples=80, deadline=None)

# What a Params form, a templated field or an API-triggered conf can carry.
raw_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.integers(-64, 64).map(str),
    st.integers(-64, 64).map(lambda n: f" {n} "),
    st.sampled_from(["up", "down", "UP", " up", "blue", "green", "Blue", "", "None", "true"]),
    st.lists(st.integers(), max_size=2),
)


def _names_field_and_value(message: str, field: str, value: Any) -> None:
    """The message names ``field`` and shows ``value`` (as given, or as the integer it read)."""
    assert field in message, message
    shown = [repr(value)]
    with contextlib.suppress(TypeError, ValueError, OverflowError):
        shown.append(f"{field}={int(value)}")
    assert any(s in message for s in shown), (message, shown)


def _integral(value: Any) -> int | None:
    """``value`` as the integer it exactly denotes (no rounding, no bools), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float):
        return int(value) if math.isfinite(value) and value.is_integer() else None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return None
    return None


# --- rescale ----------------------------------------------------------------------------------

LO, HI = 1, 16


@PROPERTY
@given(direction=raw_values, target=raw_values, reason=raw_values)
def test_a_rescale_request_is_accepted_only_when_valid_else_names_the_field_and_value(
    direction: Any, target: Any, reason: Any
) -> None:
    try:
        wanted, number, why = validate_request(
            direction=direction,
            target_parallelism=target,
            reason=reason,
            min_parallelism=LO,
            max_parallelism=HI,
        )
    except RescaleRequestError as exc:
        message = str(exc)
        fields = [f for f in ("reason", "direction", "target_parallelism") if f in message]
        assert fields, message
        if message.startswith("reason="):
            _names_field_and_value(message, "reason", reason)
        elif message.startswith("give exactly one"):
            assert repr(direction) in message and repr(target) in message
        elif message.startswith("direction="):
            _names_field_and_value(message, "direction", direction)
        else:
            _names_field_and_value(message, "target_parallelism", target)
    else:
        assert isinstance(why, str) and why and why == why.strip()
        assert (wanted is None) != (number is None)
        if wanted is not None:
            assert wanted in DIRECTIONS and wanted == direction
        else:
            assert number in (1, 2, 4, 8, 16) and number == _integral(target)


# --- the stream operator ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def operator() -> FlowctlStreamOperator:
    return FlowctlStreamOperator(task_id="stream", pipeline="wordcount")


@PROPERTY
@given(value=raw_values)
def test_stream_parallelism_is_a_power_of_two_as_given_or_named_with_its_value(
    operator: FlowctlStreamOperator, value: Any
) -> None:
    operator.parallelism = value
    try:
        parallelism = operator._validated_parallelism()
    except ValueError as exc:
        _names_field_and_value(str(exc), "parallelism", value)
    else:
        assert parallelism >= 1 and parallelism & (parallelism - 1) == 0
        assert parallelism == _integral(value), f"{value!r} was read as {parallelism}"


@PROPERTY
@given(value=raw_values)
def test_stream_colour_is_blue_or_green_or_named_with_its_value(
    operator: FlowctlStreamOperator, value: Any
) -> None:
    operator.colour = value
    try:
        colour = operator._validated_colour()
    except ValueError as exc:
        _names_field_and_value(str(exc), "colour", value)
    else:
        assert colour in COLOURS and colour == value


@PROPERTY
@given(value=raw_values)
def test_stream_standby_is_a_boolean_or_named_with_its_value(
    operator: FlowctlStreamOperator, value: Any
) -> None:
    operator.standby = value
    try:
        standby = operator._validated_standby()
    except ValueError as exc:
        _names_field_and_value(str(exc), "standby", value)
    else:
        assert isinstance(standby, bool)


# --- the ingest request -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def text_file(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("ingest") / "book.txt"
    path.write_text("one line\n")
    return str(path)


def _parse_or_check_message(field: str, value: Any, **kwargs: Any) -> IngestRequest | None:
    try:
        return IngestRequest.parse(pipeline="wordcount", **{field: value}, **kwargs)
    except ValueError as exc:
        _names_field_and_value(str(exc), field, value)
        return None


@PROPERTY
@given(lines=st.one_of(raw_values, st.integers(-5, 2 * MAX_SYNTHETIC_LINES)))
def test_ingest_lines_are_a_count_as_given_or_named_with_their_value(lines: Any) -> None:
    request = _parse_or_check_message("lines", lines)
    if request is not None:
        assert request.lines == _integral(lines), f"lines={lines!r} was read as {request.lines}"
        assert 1 <= request.lines <= MAX_SYNTHETIC_LINES


@PROPERTY
@given(seed=raw_values)
def test_ingest_seed_is_an_integer_as_given_or_named_with_its_value(seed: Any) -> None:
    request = _parse_or_check_message("seed", seed)
    if request is not None:
        assert request.seed == _integral(seed), f"seed={seed!r} was read as {request.seed}"


@PROPERTY
@given(source=st.one_of(raw_values, st.sampled_from(SOURCES)))
def test_ingest_source_is_known_or_named_with_its_value(text_file: str, source: Any) -> None:
    request = _parse_or_check_message("source", source, path=text_file)
    if request is not None:
        assert request.source in SOURCES and request.source == source


@PROPERTY
@given(path=st.one_of(st.none(), st.text(max_size=10), st.just("FILE")))
def test_ingest_path_is_a_readable_file_or_named_with_its_value(text_file: str, path: Any) -> None:
    path = text_file if path == "FILE" else path
    request = _parse_or_check_message("path", path, source="file")
    if request is not None:
        assert request.path is not None and Path(request.path).is_file()


@pytest.mark.parametrize("value", [0, -1, "0", "soon", None, float("inf"), float("nan"), ""])
def test_reconcile_stall_minutes_must_be_a_number_above_zero(value: Any) -> None:
    from flowctl_airflow.operators.reconcile import FlowctlReconcileOperator

    op = FlowctlReconcileOperator(task_id="reconcile", pipeline="wordcount", stall_minutes=value)
    with pytest.raises(ValueError, match=r"stall_minutes=.* must be a number > 0") as info:
        op.execute({})  # type: ignore[arg-type]
    assert repr(value) in str(info.value)
