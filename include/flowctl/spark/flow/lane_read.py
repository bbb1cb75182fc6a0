"""A lane's reads: every tuple's Kafka records, in as few range reads as possible.

Split from :mod:`flowctl.spark.flow.lane` (the lane's processing): what a lane reads is
exactly its tuples' offset ranges, whoever wrote them. Offsets without a record
(transaction markers, compaction) are gaps :func:`flowctl.adapters.kafka_log.read_range`
moves over, so a tuple may hold fewer records than its range, or none.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING

from flowctl.core.tuples import TupleRange
from flowctl.spark.flow.plan import PlanEntry

if TYPE_CHECKING:
    from kafka.consumer.fetcher import ConsumerRecord


def prefetch(
    entries: Sequence[PlanEntry], bootstrap: str, timeout_s: float
) -> dict[str, list[ConsumerRecord] | Exception]:
    """Every tuple's records, read in as few ``read_range`` calls as possible.

    A lane's tuples of one partition are often contiguous (a window's worth of one
    partition, or a run of replayed records): one read per contiguous span instead of one
    assign + seek + fetch round trip per tuple. A span that cannot be read fails its
    tuples only (the spout dispatches them again), never the task.
    """
    out: dict[str, list[ConsumerRecord] | Exception] = {}
    for span in _spans(entries):
        try:
            out.update(_read_span(span, bootstrap, timeout_s))
        except Exception as exc:
            from flowctl.adapters import kafka_log

            # A consumer that failed mid-read is in doubt: the next read gets a fresh one.
            kafka_log.drop_cached_consumer(bootstrap)
            for t in span:
                out[t.id] = exc
    return out


def _spans(entries: Sequence[PlanEntry]) -> list[list[TupleRange]]:
    """The entries' tuples, grouped into contiguous runs per topic partition."""
    by_tp: dict[tuple[str, int], list[TupleRange]] = {}
    for e in entries:
        by_tp.setdefault((e.tuple.topic, e.tuple.partition), []).append(e.tuple)
    spans: list[list[TupleRange]] = []
    for _, tuples in sorted(by_tp.items()):
        tuples.sort()
        first = len(spans)
        for t in tuples:
            if len(spans) > first and spans[-1][-1].end == t.start:
                spans[-1].append(t)
            else:
                spans.append([t])
    return spans


def _read_span(
    span: list[TupleRange], bootstrap: str, timeout_s: float
) -> dict[str, list[ConsumerRecord]]:
    """The records of a contiguous run of tuples, in one ``read_range``, by tuple id."""
    from flowctl.adapters import kafka_log

    out: dict[str, list[ConsumerRecord]] = {t.id: [] for t in span}
    starts = [t.start for t in span]
    consumer = kafka_log.cached_consumer(bootstrap)
    first, last = span[0], span[-1]
    for record in kafka_log.read_range(
        consumer, first.topic, first.partition, first.start, last.end, timeout_s=timeout_s
    ):
        out[span[bisect.bisect_right(starts, record.offset) - 1].id].append(record)
    return out
