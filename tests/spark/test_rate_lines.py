"""The rate-source records (the throughput benchmark's "Spark without Kafka" ceiling).

One in-process local Spark session, batch DataFrames standing in for the rate
source's micro-batches: the records must be the benchmark's line shape and go
through the real word-count sink exactly (counts and dense offsets), or the
ceiling would measure something else than the other rows.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from bench.lib.rate_lines import VOCABULARY_SIZE, as_records, rate_topic
from flowctl.adapters import results
from flowctl.adapters.control_plane import ControlPlane
from flowctl.pipelines.wordcount import count_values
from flowctl.spark.wordcount_sink import write_batch
from flowctl.textgen import vocabulary
from tests.local_spark import local_session

pytestmark = [pytest.mark.spark, pytest.mark.slow]

TOPIC = rate_topic("ratewc.eden")
PARTITIONS = 3


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    with local_session("flowctl-test-rate-lines") as session:
        yield session


def _batch(spark: Any, start: int, end: int) -> Any:
    """Rows ``start..end-1`` shaped like the rate source's (``timestamp``, ``value``)."""
    from pyspark.sql import functions as F

    rows = spark.range(start, end, numPartitions=2).withColumnRenamed("id", "value")
    return as_records(rows.withColumn("timestamp", F.current_timestamp()), PARTITIONS, TOPIC)


def test_lines_have_the_benchmark_shape_and_are_deterministic(spark: Any) -> None:
    rows = _batch(spark, 0, 3000).collect()
    again = {
        r["offset"] * PARTITIONS + r["partition"]: r["value"]
        for r in _batch(spark, 0, 3000).collect()
    }
    vocab = set(vocabulary(VOCABULARY_SIZE, 1))
    for r in rows:
        line = bytes(r["value"]).decode()
        assert 49 <= len(line) <= 100, line  # the cut then rtrim, as random_lines does
        assert set(line.split()[:-1]) <= vocab, line  # the last word may be cut
        assert again[r["offset"] * PARTITIONS + r["partition"]] == r["value"]
    assert len({r["value"] for r in rows}) > 2900


def test_two_batches_through_the_sink_count_exactly_with_dense_offsets(
    spark: Any, sqlite_url: str
) -> None:
    ControlPlane(sqlite_url).ensure_schema()
    expected: Counter[str] = Counter()
    for batch_id, (start, end) in enumerate([(0, 1000), (1000, 2500)]):
        df = _batch(spark, start, end)
        expected.update(count_values(bytes(r["value"]) for r in df.collect()))
        report = write_batch(df, batch_id, sqlite_url, "ratewc")
        assert (report.records, report.applied, report.fallback) == (
            end - start,
            end - start,
            False,
        )
    assert results.word_counts(sqlite_url, "ratewc") == dict(expected)
    # 2500 values over 3 pseudo-partitions: 834, 833, 833 consecutive offsets each
    assert ControlPlane(sqlite_url).committed_offsets("ratewc", TOPIC) == {0: 834, 1: 833, 2: 833}
