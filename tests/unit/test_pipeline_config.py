"""Pipeline config files and the word-count definition."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowctl.pipelines import wordcount
from flowctl.pipelines.config import PipelineConfigError, load_pipeline_config, resolve_path

VALID = """
name = "demo"
definition = "flowctl.pipelines.wordcount"
[topics]
partitions = 3
[stream]
parallelism = 2
min_parallelism = 1
max_parallelism = 4
max_records_per_batch = 1000
trigger_interval_s = 0.5
tuple_size = 10
"""


def _write(tmp_path: Path, text: str, name: str = "demo") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_the_shipped_wordcount_config_loads_by_name() -> None:
    config = load_pipeline_config("wordcount")
    assert config.name == "wordcount"
    assert config.eden_topic == "wordcount.eden"
    assert config.partitions == 4
    assert config.parallelism == 2
    assert config.min_parallelism <= config.parallelism <= config.max_parallelism
    assert config.load_definition() is wordcount
    assert config.replay_topics == ("wordcount.replay.a", "wordcount.replay.b")
    assert config.dlq_topic == "wordcount.dlq"
    assert config.source == resolve_path("wordcount")


def test_every_key_of_the_shipped_config_is_documented() -> None:
    lines = resolve_path("wordcount").read_text().splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.lstrip().startswith("#"):
            assert lines[i - 1].lstrip().startswith("#"), f"undocumented key: {line!r}"


def test_a_path_loads_with_defaults(tmp_path: Path) -> None:
    config = load_pipeline_config(
        _write(tmp_path, 'name = "demo"\ndefinition = "flowctl.pipelines.wordcount"\n')
    )
    assert (config.eden_topic, config.partitions, config.parallelism) == ("demo.eden", 4, 2)
    full = load_pipeline_config(str(_write(tmp_path, VALID)))
    assert (full.max_records_per_batch, full.trigger_interval_s, full.tuple_size) == (1000, 0.5, 10)
    assert (full.spark_batches_to_retain, full.flow.coalesce_every_s) == (10, 10.0)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("partitions = 3", "partitions = 0", r"topics.partitions=0 must be an integer >= 1"),
        ("parallelism = 2", "parallelism = 9", r"stream.parallelism=9 must lie in \[min"),
        ("tuple_size = 10", 'tuple_size = "10"', r"stream.tuple_size='10' must be an integer"),
        ("trigger_interval_s = 0.5", "trigger_interval_s = -1", r"trigger_interval_s=-1"),
        ("tuple_size = 10", "tuple_sise = 10", r"stream.tuple_sise=10 is not a known field"),
        (
            "tuple_size = 10",
            "tuple_size = 10\nspark_batches_to_retain = 0",
            r"stream.spark_batches_to_retain=0 must be an integer >= 1",
        ),
        (
            "tuple_size = 10",
            "tuple_size = 10\n[flow]\ncoalesce_every_s = -1",
            r"flow.coalesce_every_s=-1",
        ),
        (
            "tuple_size = 10",
            'tuple_size = 10\n[flow]\nflush_as_queued = "yes"',
            r"flow.flush_as_queued='yes' must be true or false",
        ),
        (
            "tuple_size = 10",
            "tuple_size = 10\n[flow]\nflush_poll_s = 0",
            r"flow.flush_poll_s=0",
        ),
        (
            "tuple_size = 10",
            'tuple_size = 10\n[flow]\nreader = "rdkafka"',
            r"flow.reader='rdkafka' must be one of kafka-python, librdkafka",
        ),
        ('name = "demo"', 'name = "other"', r"name='other' must match the file name"),
        ('"flowctl.pipelines.wordcount"', '"no.such.module"', r"definition='no.such.module'"),
    ],
)
def test_bad_fields_name_the_file_field_and_value(
    tmp_path: Path, old: str, new: str, message: str
) -> None:
    path = _write(tmp_path, VALID.replace(old, new))
    with pytest.raises(PipelineConfigError, match=message) as info:
        load_pipeline_config(path)
    assert str(path) in str(info.value)


def test_the_lane_reader_is_kafka_python_unless_librdkafka_is_asked_for(tmp_path: Path) -> None:
    assert load_pipeline_config(_write(tmp_path, VALID)).flow.reader == "kafka-python"
    rd = load_pipeline_config(_write(tmp_path, VALID + '[flow]\nreader = "librdkafka"\n'))
    assert rd.flow.reader == "librdkafka"


def test_librdkafka_without_confluent_kafka_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "confluent_kafka" else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    path = _write(tmp_path, VALID + '[flow]\nreader = "librdkafka"\n')
    with pytest.raises(PipelineConfigError) as info:
        load_pipeline_config(path)
    message = str(info.value)
    assert "flow.reader='librdkafka' needs confluent-kafka" in message, message
    assert "pip install 'flowctl[librdkafka]'" in message, message
    assert str(path) in message
    assert load_pipeline_config(_write(tmp_path, VALID)).flow.reader == "kafka-python"


def test_auto_initial_window_is_each_lanes_share_of_the_batch_budget(tmp_path: Path) -> None:
    config = load_pipeline_config(_write(tmp_path, VALID))  # 1000 records, tuples of 10
    assert config.flow.w_init is None
    assert [config.initial_window(lanes) for lanes in (1, 3, 4, 200)] == [100, 34, 25, 1]
    wide = load_pipeline_config(_write(tmp_path, VALID.replace("= 1000", "= 100000")))
    assert wide.initial_window(1) == wide.flow.w_max == 256
    fixed = load_pipeline_config(_write(tmp_path, VALID + "[flow]\nw_init = 7\n"))
    assert [fixed.initial_window(lanes) for lanes in (1, 4)] == [7, 7]
    for bad in ('"big"', "2.5", "true", "0"):
        with pytest.raises(PipelineConfigError, match=r"flow.w_init="):
            load_pipeline_config(_write(tmp_path, VALID + f"[flow]\nw_init = {bad}\n"))


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(PipelineConfigError, match=r"'nosuchpipeline'.*does not exist"):
        load_pipeline_config("nosuchpipeline")
    with pytest.raises(PipelineConfigError, match=r"not valid TOML"):
        load_pipeline_config(_write(tmp_path, "name = "))


def test_words_are_lowercased_runs_of_letters() -> None:
    assert wordcount.words("Hello, WORLD! it's 2024_x-ray déjà-vu") == [
        "hello",
        "world",
        "it",
        "s",
        "x",
        "ray",
        "déjà",
        "vu",
    ]
    assert wordcount.words("") == []


def test_count_words_accepts_text_and_raw_values() -> None:
    counts = wordcount.count_words(["a b A", b"b c", b"\xff\xfec"])
    assert counts == {"a": 2, "b": 2, "c": 2}


def test_invalid_utf8_is_a_separator_not_an_error() -> None:
    assert wordcount.decode(b"ab\xffcd") == "ab\ufffdcd"
    assert wordcount.words(wordcount.decode(b"ab\xffcd")) == ["ab", "cd"]


@given(st.lists(st.binary(max_size=30) | st.text(max_size=30).map(str.encode) | st.none()))
def test_counting_values_at_once_equals_the_line_by_line_reference(
    values: list[bytes | None],
) -> None:
    expected = wordcount.count_words(v for v in values if v is not None)
    assert wordcount.count_values(values) == expected
