"""The flowctl_kafka reader driven directly (no Spark): planning and reading are exact.

As in Spark's own tests, ``partitions()`` and ``read()`` are called by hand;
the reader and its partitions go through pickle as they do to executors.
"""

from __future__ import annotations

import pickle
import secrets

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from flowctl.adapters import kafka_log
from flowctl.adapters.control_plane import ControlPlane
from flowctl.pipelines.wordcount import apply_records
from flowctl.spark.kafka_source import (
    LanePartition,
    SourceOptionError,
    arrow_schema,
    decode_offsets,
)
from flowctl.spark.source import FlowctlKafkaDataSource

pytestmark = pytest.mark.integration


def _source(bootstrap: str, topic: str, url: str, **extra: str) -> FlowctlKafkaDataSource:
    options = {
        "bootstrap": bootstrap,
        "topic": topic,
        "pipeline": "p",
        "database_url": url,
        "lanes": "3",
        **extra,
    }
    return FlowctlKafkaDataSource(options)


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    name = f"src.{secrets.token_hex(4)}"
    kafka_log.ensure_topics(kafka_bootstrap, {name: 4})
    kafka_log.produce(kafka_bootstrap, name, (f"line {i}" for i in range(3001)))
    return name


@pytest.fixture
def url(sqlite_url: str) -> str:
    ControlPlane(sqlite_url).ensure_schema()
    return sqlite_url


def _read_all(reader, parts: list[LanePartition]) -> list[tuple]:
    """Read every lane through pickled copies, as an executor would; rows as tuples."""
    snapshot = pickle.loads(pickle.dumps(reader))
    schema = arrow_schema()
    rows = []
    for part in pickle.loads(pickle.dumps(parts)):
        for batch in snapshot.read(part):
            assert batch.schema.equals(schema)  # what Spark checks before using a batch
            rows.extend(tuple(row.values()) for row in batch.to_pylist())
    return rows


def test_batches_are_planned_in_lanes_and_read_exactly(
    kafka_bootstrap: str, topic: str, url: str
) -> None:
    source = _source(kafka_bootstrap, topic, url, max_rows="1000")
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    assert decode_offsets(start, topic) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert reader.getDefaultReadLimit() == ReadMaxRows(1000)

    seen: list[tuple] = []
    for _ in range(10):
        end = reader.latestOffset(start, reader.getDefaultReadLimit())
        if end == start:
            break
        parts = reader.partitions(start, end)
        assert 1 <= len(parts) <= 3
        assert sorted(p.lane for p in parts) == list(range(len(parts)))
        planned = {(r.partition, o) for p in parts for r in p.ranges for o in range(r.start, r.end)}
        rows = _read_all(reader, parts)
        assert len(rows) <= 1000
        assert {(row[1], row[2]) for row in rows} == planned
        assert len(rows) == len(planned)
        reader.commit(end)
        seen.extend(rows)
        start = end
    assert sorted(row[4] for row in seen) == sorted(f"line {i}".encode() for i in range(3001))
    assert all(row[0] == topic and row[3].tzinfo is not None for row in seen)
    assert reader.latestOffset(start, ReadAllAvailable()) == start  # nothing new
    assert reader.reportLatestOffset() == start
    reader.stop()


def test_a_new_run_starts_at_the_durable_checkpoint(
    kafka_bootstrap: str, topic: str, url: str
) -> None:
    """Not from zero, not from the end: from where the sink stopped."""
    apply_records(url, "p", [(topic, 0, o, b"x") for o in range(7)])
    source = _source(kafka_bootstrap, topic, url)
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    assert decode_offsets(start, topic) == {0: 7, 1: 0, 2: 0, 3: 0}
    end = reader.latestOffset(start, ReadAllAvailable())
    rows = _read_all(reader, reader.partitions(start, end))
    assert len(rows) == 3001 - 7
    assert min(row[2] for row in rows if row[1] == 0) == 7


def test_planning_errors_fail_the_next_batch_loudly(
    kafka_bootstrap: str, topic: str, url: str
) -> None:
    source = _source(kafka_bootstrap, topic, url)
    reader = source.streamReader(source.schema())
    start = reader.initialOffset()
    with pytest.raises(ValueError, match=r"belongs to topic 'other'"):
        reader.partitions({"topic": "other", "offsets": {}}, start)
    with pytest.raises(RuntimeError, match=r"planning the previous batch failed"):
        reader.latestOffset(start, ReadAllAvailable())


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"topic": ""}, r"option 'topic' is required"),
        ({"lanes": "0"}, r"option lanes='0' must be > 0"),
        ({"max_rows": "many"}, r"option max_rows='many' is not an integer"),
    ],
)
def test_bad_options_are_named(options: dict[str, str], message: str) -> None:
    base = {"bootstrap": "b:1", "topic": "t", "pipeline": "p", "database_url": "sqlite://"}
    source = FlowctlKafkaDataSource({**base, **options})
    with pytest.raises(SourceOptionError, match=message):
        source.streamReader(source.schema())
