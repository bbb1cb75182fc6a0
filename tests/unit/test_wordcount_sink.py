"""The executor-side summary of a micro-batch and its merge on the driver (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa

from flowctl.adapters.results import PartitionSpan
from flowctl.pipelines.wordcount import count_words
from flowctl.spark.wordcount_sink import merge_summaries, summarize_batches


def _batch(rows: list[tuple[str, int, int, bytes]]) -> pa.RecordBatch:
    topics, partitions, offsets, values = (list(c) for c in zip(*rows, strict=True))
    return pa.RecordBatch.from_pydict(
        {"topic": topics, "partition": partitions, "offset": offsets, "value": values}
    )


def _rows(batch: pa.RecordBatch) -> list[dict]:
    return batch.to_pylist()


def test_lanes_summaries_merge_to_the_reference_counts_and_one_span_per_partition() -> None:
    lines = [f"Spark and Kafka, lane {i}: spark!".encode() for i in range(10)]
    # Lane 0 reads partition 0 offsets 0..3 and partition 1 offsets 0..1; lane 1 the rest.
    lane0 = [("t", 0, o, lines[o]) for o in range(4)] + [
        ("t", 1, o, lines[4 + o]) for o in range(2)
    ]
    lane1 = [("t", 1, 2 + o, lines[6 + o]) for o in range(4)]
    out0 = list(summarize_batches(iter([_batch(lane0[:3]), _batch(lane0[3:])])))
    out1 = list(summarize_batches(iter([_batch(lane1)])))
    rows = [r for b in out0 + out1 for r in _rows(b)]
    counts, spans = merge_summaries(rows)
    assert counts == dict(count_words(lines))
    assert spans == [PartitionSpan("t", 0, 0, 3, 4), PartitionSpan("t", 1, 0, 5, 6)]


def test_an_empty_task_summarizes_to_nothing() -> None:
    out = list(summarize_batches(iter([])))
    assert merge_summaries(_rows(out[0])) == ({}, [])
