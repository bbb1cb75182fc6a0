"""The word-count ``foreachBatch`` sink: count on executors, apply idempotently on the driver.

Shipping every line to the driver would make the driver the bottleneck, so
each Spark task counts its lines with the pipeline's own Python definition
(the very function the reference :func:`~flowctl.pipelines.wordcount.count_words`
uses, so results match it exactly) and reports the offset span it covered.
The driver merges those small summaries and hands them to
:func:`~flowctl.adapters.results.apply_counted_spans`, which adds the counts
and advances the durable checkpoint in one transaction. If the batch is only
partly applied already (an overlapping run), the sink falls back to applying
the raw records one by one, which is always exact.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flowctl.adapters import results
from flowctl.adapters.results import PartialOverlap, PartitionSpan
from flowctl.pipelines.wordcount import apply_records

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Row

log = logging.getLogger(__name__)

#: One output row per distinct word (span columns null) or per partition span (word null).
SUMMARY_SCHEMA = (
    "word string, count long, topic string, partition int, "
    "first_offset long, last_offset long, records long"
)


def summarize_batches(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: word counts and offset spans of one Spark task's records."""
    import pyarrow as pa

    from flowctl.pipelines import wordcount

    counts: Counter[str] = Counter()
    spans: dict[tuple[str, int], list[int]] = {}
    for batch in batches:
        topics = batch.column("topic").to_pylist()
        partitions = batch.column("partition").to_pylist()
        offsets = batch.column("offset").to_pylist()
        values = batch.column("value").to_pylist()
        counts.update(wordcount.count_values(values))
        for topic, partition, offset in zip(topics, partitions, offsets, strict=True):
            span = spans.get((topic, partition))
            if span is None:
                spans[(topic, partition)] = [offset, offset, 1]
            else:
                span[0] = min(span[0], offset)
                span[1] = max(span[1], offset)
                span[2] += 1
    words = list(counts)
    none_w = [None] * len(words)
    keys = list(spans)
    none_s = [None] * len(keys)
    yield pa.RecordBatch.from_pydict(
        {
            "word": words + none_s,
            "count": [counts[w] for w in words] + none_s,
            "topic": none_w + [t for t, _ in keys],
            "partition": none_w + [p for _, p in keys],
            "first_offset": none_w + [spans[k][0] for k in keys],
            "last_offset": none_w + [spans[k][1] for k in keys],
            "records": none_w + [spans[k][2] for k in keys],
        },
        schema=pa.schema(
            [
                ("word", pa.string()),
                ("count", pa.int64()),
                ("topic", pa.string()),
                ("partition", pa.int32()),
                ("first_offset", pa.int64()),
                ("last_offset", pa.int64()),
                ("records", pa.int64()),
            ]
        ),
    )


def merge_summaries(rows: list[Row]) -> tuple[dict[str, int], list[PartitionSpan]]:
    """Driver side: add up the tasks' word counts and join their spans per partition.

    A partition split over several lanes yields one span per lane; the lanes
    cover consecutive offsets of the batch, so their union is one span.
    """
    counts: Counter[str] = Counter()
    spans: dict[tuple[str, int], list[int]] = {}
    for row in rows:
        if row["word"] is not None:
            counts[row["word"]] += int(row["count"])
            continue
        key = (row["topic"], int(row["partition"]))
        first, last, n = int(row["first_offset"]), int(row["last_offset"]), int(row["records"])
        span = spans.get(key)
        if span is None:
            spans[key] = [first, last, n]
        else:
            span[0], span[1], span[2] = min(span[0], first), max(span[1], last), span[2] + n
    merged = [PartitionSpan(t, p, s[0], s[1], s[2]) for (t, p), s in sorted(spans.items())]
    return dict(counts), merged


@dataclass(frozen=True)
class BatchReport:
    """What one micro-batch did, for the progress log."""

    batch_id: int
    records: int
    applied: int
    skipped: int
    words_added: int
    seconds: float
    fallback: bool

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def write_batch(df: DataFrame, batch_id: int, database_url: str, pipeline: str) -> BatchReport:
    """Apply one micro-batch DataFrame (``flowctl_kafka`` schema) to the results, idempotently."""
    started = time.monotonic()
    rows = df.mapInArrow(summarize_batches, SUMMARY_SCHEMA).collect()
    counts, spans = merge_summaries(rows)
    records = sum(s.records for s in spans)
    fallback = False
    try:
        outcome = results.apply_counted_spans(database_url, pipeline, counts, spans)
    except PartialOverlap as exc:
        log.warning("batch %d: %s; applying record by record", batch_id, exc)
        fallback = True
        raw = df.select("topic", "partition", "offset", "value").collect()
        outcome = apply_records(
            database_url,
            pipeline,
            ((r["topic"], int(r["partition"]), int(r["offset"]), r["value"]) for r in raw),
        )
    return BatchReport(
        batch_id=batch_id,
        records=records,
        applied=outcome.applied_records,
        skipped=outcome.skipped_records,
        words_added=outcome.words_added,
        seconds=time.monotonic() - started,
        fallback=fallback,
    )
