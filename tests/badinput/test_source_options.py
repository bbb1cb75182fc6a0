"""The ``flowctl_kafka`` source's options: a missing or bad option is a SourceOptionError naming
the option and the value; what is accepted is usable (positive, finite numbers).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.spark.kafka_source import MODES, SourceOptionError, SourceOptions

PROPERTY = settings(max_examples=80, deadline=None)

PLAIN = {"bootstrap": "127.0.0.1:9092", "topic": "p.eden", "pipeline": "p", "database_url": "x"}
FLOW = {**PLAIN, "mode": "flow", "config": "p", "memcached": "127.0.0.1:11211", "topology_id": "t"}
NUMBERS = {"lanes": int, "max_rows": int, "read_timeout_s": float}

option_text = st.one_of(
    st.text(max_size=12),
    st.integers(-(2**40), 2**40).map(str),
    st.floats().map(repr),
    st.sampled_from(["0", "-1", "1.5", "nan", "inf", "NaN", "1e3", " 4 ", "", "true", "FLOW"]),
)


def _number(kind: type, text: str) -> float | int | None:
    try:
        return kind(text)
    except ValueError:
        return None


@PROPERTY
@given(key=st.sampled_from(sorted(FLOW)), upper=st.booleans())
def test_a_missing_required_option_is_named(key: str, upper: bool) -> None:
    if key == "mode":
        return
    options = {(k.upper() if upper else k): v for k, v in FLOW.items() if k != key}
    with pytest.raises(SourceOptionError, match=repr(key)):
        SourceOptions.parse(options)


@PROPERTY
@given(key=st.sampled_from(sorted(NUMBERS)), raw=option_text)
def test_a_number_option_is_positive_and_finite_or_named_with_its_value(key: str, raw: str) -> None:
    try:
        options = SourceOptions.parse({**PLAIN, key: raw})
    except SourceOptionError as exc:
        assert f"{key}={raw!r}" in str(exc), str(exc)
        number = _number(NUMBERS[key], raw)
        assert number is None or not math.isfinite(number) or number <= 0
    else:
        value = getattr(options, key)
        if raw == "":  # empty is the default, as when absent
            assert value == {"lanes": 2, "max_rows": None, "read_timeout_s": 30.0}[key]
            return
        assert value == _number(NUMBERS[key], raw) and math.isfinite(value) and value > 0


@PROPERTY
@given(raw=option_text)
def test_mode_is_plain_or_flow_or_named_with_its_value(raw: str) -> None:
    try:
        options = SourceOptions.parse({**FLOW, "mode": raw})
    except SourceOptionError as exc:
        assert f"mode={raw!r}" in str(exc), str(exc)
    else:
        assert options.mode in MODES and options.mode == (raw or "plain")


@PROPERTY
@given(raw=option_text)
def test_standby_is_true_or_false_or_named_with_its_value(raw: str) -> None:
    try:
        options = SourceOptions.parse({**FLOW, "standby": raw})
    except SourceOptionError as exc:
        assert f"standby={raw!r}" in str(exc), str(exc)
    else:
        assert options.standby is (raw.lower() == "true")


@PROPERTY
@given(key=st.sampled_from(sorted(k for k in FLOW if k != "mode")), raw=option_text)
def test_a_text_option_is_accepted_as_given_or_named_with_its_value(key: str, raw: str) -> None:
    try:
        options = SourceOptions.parse({**FLOW, key: raw})
    except SourceOptionError as exc:
        assert repr(key) in str(exc) and repr(raw) in str(exc), str(exc)
        assert not raw.strip()
    else:
        assert getattr(options, key) == raw and raw.strip()
