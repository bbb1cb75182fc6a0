"""A bad ``[sink]`` in a pipeline config: a PipelineConfigError naming the file, the field
(``sink.<key>``) and the value, like every other section; a good one round-trips."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.pipelines.config import PIPELINES_DIR, PipelineConfigError, load_pipeline_config

SHIPPED = (PIPELINES_DIR / "wordcount.toml").read_text()


def _write(tmp_path: Path, old: str, new: str) -> Path:
    assert SHIPPED.count(old) == 1, old
    path = tmp_path / "wordcount.toml"
    path.write_text(SHIPPED.replace(old, new))
    return path


@pytest.mark.parametrize(
    ("old", "new", "shown"),
    [
        ('merge = "sum"', 'merge = "average"', "sink.merge='average' must be one of sum, insert"),
        ('table = "word_counts"', 'table = "Word Counts"', "sink.table='Word Counts' must be"),
        ('key = ["word"]', 'key = "word"', "sink.key='word' must be a non-empty list"),
        ('values = ["count"]', "values = []", "sink.values=[] must be a non-empty list"),
        ("nullable = []", 'nullable = ["count"]', "sink.columns.count='bigint >= 1' merge = 'sum'"),
        ('count = "bigint >= 1"', 'count = "number"', "sink.columns.count='number' must be one of"),
        ('count = "bigint >= 1"', 'counts = "bigint"', "sink.columns=['counts', 'word'] must give"),
        ("nullable = []", 'nullable = []\nevent_time = "count"', "sink.event_time='count' applies"),
        ("nullable = []", "nullable = []\ncolour = 1", "sink.colour=1 is not a known field"),
    ],
)
def test_a_bad_sink_key_is_named_with_the_file_and_value(
    tmp_path: Path, old: str, new: str, shown: str
) -> None:
    path = _write(tmp_path, old, new)
    with pytest.raises(PipelineConfigError) as caught:
        load_pipeline_config(path)
    assert str(caught.value).startswith(f"{path}: {shown}"), str(caught.value)


def test_a_sink_that_is_not_a_table_is_named(tmp_path: Path) -> None:
    path = tmp_path / "wordcount.toml"
    path.write_text('name = "wordcount"\ndefinition = "flowctl.pipelines.wordcount"\nsink = 3\n')
    with pytest.raises(PipelineConfigError, match=r"wordcount\.toml: sink=3 must be a table"):
        load_pipeline_config(path)


def test_sink_is_optional_and_the_shipped_one_loads(tmp_path: Path) -> None:
    path = tmp_path / "wordcount.toml"
    path.write_text('name = "wordcount"\ndefinition = "flowctl.pipelines.wordcount"\n')
    assert load_pipeline_config(path).sink is None
    sink = load_pipeline_config("wordcount").sink
    assert sink is not None and (sink.table, sink.key, sink.merge) == (
        "word_counts",
        ("word",),
        "sum",
    )
