"""Pipeline config files: a wrong type, an out-of-range number, an unknown or missing key, a
name that does not match the file, a file that is not TOML: a PipelineConfigError naming the
file, the field and the value. A valid file round-trips.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.pipelines.config import (
    PIPELINES_DIR,
    PipelineConfig,
    PipelineConfigError,
    load_pipeline_config,
)
from flowctl.pipelines.config_sections import (
    DISPATCH_POLICIES,
    RTT_MODES,
    SCALING_POLICIES,
    SOURCE_MODES,
)

PROPERTY = settings(max_examples=60, deadline=None)

BASE: dict[str, Any] = tomllib.loads((PIPELINES_DIR / "wordcount.toml").read_text())
SECTIONS = ("topics", "stream", "scaling", "flow")
# [sink] is optional as a whole, its keys are not: tests/badinput/test_sink_config.py.
ALL_FIELDS = [k for k in BASE if k not in SECTIONS and k != "sink"] + [
    f"{section}.{key}" for section in SECTIONS for key in BASE[section]
]


def _base(field: str) -> Any:
    return BASE[field] if "." not in field else BASE[field.split(".")[0]][field.split(".")[1]]


# flow.w_init is "auto" or an integer (tests/badinput: test_w_init_...), neither kind.
TEXT_FIELDS = [f for f in ALL_FIELDS if isinstance(_base(f), str) and f != "flow.w_init"]
FLAG_FIELDS = [f for f in ALL_FIELDS if isinstance(_base(f), bool)]
NUMBER_FIELDS = [f for f in ALL_FIELDS if f not in TEXT_FIELDS + FLAG_FIELDS and f != "flow.w_init"]


# --- writing TOML -----------------------------------------------------------------------------


def _string(text: str) -> str:
    # JSON's escapes are TOML's, except that TOML also wants DEL escaped.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    assert isinstance(value, dict)
    return "{" + ", ".join(f"{_string(k)} = {_value(v)}" for k, v in value.items()) + "}"


def to_toml(doc: dict[str, Any]) -> str:
    lines = [f"{_string(k)} = {_value(v)}" for k, v in doc.items() if not _is_section(doc, k)]
    for key, table in doc.items():
        if _is_section(doc, key):
            lines.append(f"[{_string(key)}]")
            lines += [f"{_string(k)} = {_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def _is_section(doc: dict[str, Any], key: str) -> bool:
    return key in SECTIONS and isinstance(doc[key], dict)


def _with(field: str, value: Any) -> dict[str, Any]:
    doc = {k: dict(v) if isinstance(v, dict) else v for k, v in BASE.items()}
    if "." in field:
        section, key = field.split(".", 1)
        doc[section][key] = value
    else:
        doc[field] = value
    return doc


def _loaded(config: PipelineConfig, field: str) -> Any:
    if "." not in field:
        return getattr(config, field)
    section, key = field.split(".", 1)
    if section in ("topics", "stream"):
        return getattr(config, {"eden": "eden_topic"}.get(key, key))
    return getattr(getattr(config, section), key)


# --- values -----------------------------------------------------------------------------------

toml_int = st.integers(-(2**63), 2**63 - 1)
toml_float = st.floats(allow_nan=True, allow_infinity=True)
toml_text = st.text(max_size=15)
toml_scalar = st.one_of(st.booleans(), toml_int, toml_float, toml_text)
toml_any = st.recursive(
    toml_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(toml_text, inner, max_size=2)
    ),
    max_leaves=4,
)
not_text = st.one_of(
    st.booleans(),
    toml_int,
    toml_float,
    st.lists(toml_scalar, max_size=2),
    st.dictionaries(toml_text, toml_scalar, max_size=2),
)
not_number = st.one_of(
    st.booleans(),
    toml_text,
    st.lists(toml_scalar, max_size=2),
    st.dictionaries(toml_text, toml_scalar, max_size=2),
)
numbers = st.one_of(
    toml_int,
    st.integers(-3, 70),
    toml_float,
    st.floats(-2, 3),
    st.sampled_from([math.nan, math.inf, -math.inf, -0.0, 0, 1e300]),
)


@pytest.fixture(scope="module")
def write(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    folder = tmp_path_factory.mktemp("pipelines")

    def write(doc: dict[str, Any] | str | bytes, stem: str = "wordcount") -> Path:
        path = folder / f"{stem}.toml"
        if isinstance(doc, bytes):
            path.write_bytes(doc)
        else:
            path.write_text(doc if isinstance(doc, str) else to_toml(doc))
        return path

    yield write


def _refused(path: Path, field: str, *shown: Any) -> str:
    with pytest.raises(PipelineConfigError) as info:
        load_pipeline_config(path)
    message = str(info.value)
    assert str(path) in message, message
    assert field in message, message
    if shown:
        assert any(repr(v) in message for v in shown), (message, shown)
    return message


# --- properties -------------------------------------------------------------------------------


def test_the_generated_base_file_is_the_shipped_config(write: Any) -> None:
    path = write(BASE)
    shipped = load_pipeline_config("wordcount")
    from dataclasses import replace

    assert load_pipeline_config(path) == replace(shipped, source=path)


@PROPERTY
@given(
    partitions=st.integers(1, 64),
    bounds=st.lists(st.integers(1, 1024), min_size=3, max_size=3).map(sorted),
    tuple_size=st.integers(1, 10_000),
    trigger=st.floats(0, 3600),
    windows=st.lists(st.integers(1, 512), min_size=3, max_size=3).map(sorted),
    latency=st.floats(0.001, 600),
    policy=st.sampled_from(SCALING_POLICIES),
    mode=st.sampled_from(SOURCE_MODES),
    rtt=st.sampled_from(RTT_MODES),
    dispatch=st.sampled_from(DISPATCH_POLICIES),
)
def test_a_valid_config_round_trips(
    write: Any,
    partitions: int,
    bounds: list[int],
    tuple_size: int,
    trigger: float,
    windows: list[int],
    latency: float,
    policy: str,
    mode: str,
    rtt: str,
    dispatch: str,
) -> None:
    min_p, parallelism, max_p = bounds
    w_min, w_init, w_max = windows
    values = {
        "topics.partitions": partitions,
        "stream.min_parallelism": min_p,
        "stream.parallelism": parallelism,
        "stream.max_parallelism": max_p,
        "stream.tuple_size": tuple_size,
        "stream.trigger_interval_s": trigger,
        "scaling.policy": policy,
        "flow.w_min": w_min,
        "flow.w_init": w_init,
        "flow.w_max": w_max,
        "flow.latency_target_s": latency,
        "flow.mode": mode,
        "flow.rtt": rtt,
        "flow.dispatch": dispatch,
    }
    doc = _with("name", "wordcount")
    for field, value in values.items():
        section, key = field.split(".")
        doc[section][key] = value
    config = load_pipeline_config(write(doc))
    for field, value in values.items():
        assert _loaded(config, field) == value, field


@PROPERTY
@given(field=st.sampled_from(TEXT_FIELDS), value=not_text)
def test_a_text_field_of_another_type_is_named_with_its_value(
    write: Any, field: str, value: Any
) -> None:
    _refused(write(_with(field, value)), f"{field}=", value)


@PROPERTY
@given(
    field=st.sampled_from(FLAG_FIELDS),
    value=st.one_of(toml_int, toml_float, toml_text, st.lists(toml_scalar, max_size=2)),
)
def test_a_flag_of_another_type_is_named_with_its_value(write: Any, field: str, value: Any) -> None:
    _refused(write(_with(field, value)), f"{field}=", value)


@PROPERTY
@given(field=st.sampled_from(NUMBER_FIELDS), value=not_number)
def test_a_number_field_of_another_type_is_named_with_its_value(
    write: Any, field: str, value: Any
) -> None:
    _refused(write(_with(field, value)), f"{field}=", value)


@PROPERTY
@given(field=st.sampled_from(NUMBER_FIELDS), value=numbers)
def test_a_number_is_accepted_as_written_or_named_with_its_value(
    write: Any, field: str, value: int | float
) -> None:
    path = write(_with(field, value))
    try:
        config = load_pipeline_config(path)
    except PipelineConfigError as exc:
        message = str(exc)
        assert str(path) in message, message
        # The field itself, or the bound it crosses (w_min > w_max names both).
        assert field.split(".")[-1] in message, message
        assert repr(value) in message or repr(float(value)) in message, message
    else:
        loaded = _loaded(config, field)
        assert math.isfinite(loaded) and loaded >= 0, f"{field}={value!r} was accepted"
        assert loaded == (float(value) if isinstance(_base(field), float) else value)


@PROPERTY
@given(
    section=st.sampled_from(("", *SECTIONS)),
    key=st.text(min_size=1, max_size=12),
    value=toml_any,
)
def test_an_unknown_key_is_named_with_its_value(
    write: Any, section: str, key: str, value: Any
) -> None:
    known = set(BASE) if not section else set(BASE[section])
    if key in known or (not section and key in SECTIONS):
        return
    field = f"{section}.{key}" if section else key
    doc = _with("name", "wordcount")
    (doc[section] if section else doc)[key] = value
    _refused(write(doc), f"{field}={value!r}")


@PROPERTY
@given(
    field=st.sampled_from([f for f in ALL_FIELDS if f not in ("name", "definition")]),
    more=st.lists(st.sampled_from(ALL_FIELDS[2:]), max_size=5),
)
def test_optional_keys_left_out_take_their_defaults(
    write: Any, field: str, more: list[str]
) -> None:
    doc = _with("name", "wordcount")
    for gone in {field, *more}:
        section, key = gone.split(".")
        doc[section].pop(key, None)
    load_pipeline_config(write(doc))


@pytest.mark.parametrize("field", ["name", "definition"])
def test_a_missing_required_key_is_named(write: Any, field: str) -> None:
    doc = _with("name", "wordcount")
    del doc[field]
    _refused(write(doc), f"{field}=None")


@PROPERTY
@given(name=st.text(min_size=1, max_size=20))
def test_a_name_that_does_not_match_the_file_is_named_with_its_value(write: Any, name: str) -> None:
    if name == "wordcount":
        return
    _refused(write(_with("name", name)), f"name={name!r}")


@PROPERTY
@given(
    definition=st.one_of(
        st.text(max_size=15).map(lambda s: "." + s),
        st.text(max_size=15).map(lambda s: s + ".."),
        st.text(max_size=15).map(lambda s: "flowctl_no_such_module_" + s),
        st.sampled_from(["", ".", "..x", "a..b", "flowctl..pipelines", "x\x00y", " "]),
    )
)
def test_a_definition_that_cannot_be_imported_is_named_with_its_value(
    write: Any, definition: str
) -> None:
    _refused(write(_with("definition", definition)), f"definition={definition!r}")


@PROPERTY
@given(st.binary(max_size=200))
def test_a_file_that_is_not_toml_is_refused_naming_the_file(write: Any, data: bytes) -> None:
    path = write(data)
    with pytest.raises(PipelineConfigError) as info:
        load_pipeline_config(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("name", ["nul\x00name", "no/such/dir/x.toml", "\x00"])
def test_a_config_path_that_cannot_exist_is_named(name: str) -> None:
    with pytest.raises(PipelineConfigError, match="pipeline config"):
        load_pipeline_config(name)


@pytest.mark.parametrize("value", ["half", 2.5, True, [1]])
def test_w_init_is_auto_or_an_integer_and_names_a_bad_value(write: Any, value: Any) -> None:
    _refused(write(_with("flow.w_init", value)), "flow.w_init=", value)


@pytest.mark.parametrize("value", ["ignore", "FAIL", "", "skip ", 1])
def test_on_data_loss_is_fail_or_skip_and_names_a_bad_value(write: Any, value: Any) -> None:
    _refused(write(_with("topics.on_data_loss", value)), "topics.on_data_loss=", value)


@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_on_data_loss_takes_each_policy_and_defaults_to_fail(write: Any, policy: str) -> None:
    assert load_pipeline_config(write(_with("topics.on_data_loss", policy))).on_data_loss == policy
    doc = _with("name", "wordcount")
    del doc["topics"]["on_data_loss"]
    assert load_pipeline_config(write(doc)).on_data_loss == "fail"
