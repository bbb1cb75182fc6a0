"""A lane's reads: every tuple's Kafka records, in as few range reads as possible.

Split from :mod:`flowctl.spark.flow.lane` (the lane's processing): what a lane reads is
exactly its tuples' offset ranges, whoever wrote them. Offsets without a record
(transaction markers, compaction) are gaps the range reads move over, so a tuple may hold
fewer records than its range, or none.

Two readers read the ranges, chosen by the pipeline's ``[flow] reader``: ``kafka-python``
(:func:`flowctl.adapters.kafka_log.read_range`, the default) and ``librdkafka``
(:func:`flowctl.adapters.kafka_read_rdkafka.read_range`). Both hand the lane
:class:`~flowctl.core.record.Record`, so nothing after the read knows which one ran.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from flowctl.core.record import Record
from flowctl.core.tuples import TupleRange
from flowctl.pipelines.config_sections import KAFKA_PYTHON, LIBRDKAFKA
from flowctl.spark.flow.plan import PlanEntry

#: Records a librdkafka read moves over, between two of a lane's tuples of one partition,
#: rather than assign again: an ``assign`` drops what librdkafka fetched ahead and waits
#: for a fetch round trip (several ms), where it parses a record in C in well under a
#: microsecond. With round-robin dispatch a lane's tuples of a partition are every
#: ``lanes``-th: at 2 lanes (tuples of 500) one read per partition instead of one per
#: tuple. kafka-python parses every record it moves over in Python: it never does.
LIBRDKAFKA_MAX_SKIP = 2_000


def prefetch(
    entries: Sequence[PlanEntry],
    bootstrap: str,
    timeout_s: float,
    reader: str = KAFKA_PYTHON,
    ends: dict[tuple[str, int], int] | None = None,
) -> dict[str, list[Record] | Exception]:
    """Every tuple's records, read in as few range reads as possible.

    ``ends``, when given, gets the log end each read partition's last fetch reported
    (``{(topic, partition): end}``, the fetch's high watermark): the lane hands them to the
    planner, which then needs no ListOffsets request for a partition being appended to.

    A lane's tuples of one partition are often contiguous (a window's worth of one
    partition, or a run of replayed records): one read per contiguous span instead of one
    assign + seek + fetch round trip per tuple; the librdkafka reader also reads across
    gaps of up to :data:`LIBRDKAFKA_MAX_SKIP` records between them and drops what lies in
    the gaps. A span that cannot be read fails its tuples only (the spout dispatches them
    again), never the task.
    """
    out: dict[str, list[Record] | Exception] = {}
    max_skip = LIBRDKAFKA_MAX_SKIP if reader == LIBRDKAFKA else 0
    for span in _spans(entries, max_skip):
        try:
            out.update(_read_span(span, bootstrap, timeout_s, reader))
        except Exception as exc:
            # A consumer that failed mid-read is in doubt: the next read gets a fresh one.
            _drop_consumer(bootstrap, reader)
            for t in span:
                out[t.id] = exc
            continue
        if ends is not None:
            tp = (span[0].topic, span[0].partition)
            end = _highwater(reader, bootstrap, *tp)
            if end is not None and end > ends.get(tp, -1):
                ends[tp] = end
    if reader == LIBRDKAFKA:
        _idle(bootstrap)
    return out


def _spans(entries: Sequence[PlanEntry], max_skip: int = 0) -> list[list[TupleRange]]:
    """The entries' tuples, grouped into runs per topic partition, each run's tuples at
    most ``max_skip`` offsets apart (0: contiguous)."""
    by_tp: dict[tuple[str, int], list[TupleRange]] = {}
    for e in entries:
        by_tp.setdefault((e.tuple.topic, e.tuple.partition), []).append(e.tuple)
    spans: list[list[TupleRange]] = []
    for _, tuples in sorted(by_tp.items()):
        tuples.sort()
        first = len(spans)
        for t in tuples:
            if len(spans) > first and t.start - spans[-1][-1].end <= max_skip:
                spans[-1].append(t)
            else:
                spans.append([t])
    return spans


def _read_span(
    span: list[TupleRange], bootstrap: str, timeout_s: float, reader: str
) -> dict[str, list[Record]]:
    """The records of a run of tuples, in one range read, by tuple id.

    The records come in offset order, so each lands in the tuple at hand or a later one,
    or between two tuples (a gap the read moved over: not the lane's); a comparison or two
    per record finds it.
    """
    out: dict[str, list[Record]] = {t.id: [] for t in span}
    first, last = span[0], span[-1]
    i = 0
    current, start, end = out[first.id], first.start, first.end
    for record in _read_range(reader, bootstrap, first, last.end, timeout_s):
        offset = record.offset
        if offset >= end:
            while offset >= span[i].end:
                i += 1
            current, start, end = out[span[i].id], span[i].start, span[i].end
        if offset >= start:
            current.append(record)
    return out


def _read_range(
    reader: str, bootstrap: str, first: TupleRange, end: int, timeout_s: float
) -> Iterator[Record]:
    """The records of ``first``'s partition in ``[first.start, end)``, by ``reader``, over
    the worker's cached consumer of that client."""
    topic, partition, start = first.topic, first.partition, first.start
    if reader == LIBRDKAFKA:
        from flowctl.adapters import kafka_read_rdkafka as rdkafka

        consumer = rdkafka.cached_consumer(bootstrap)
        return rdkafka.read_range(consumer, topic, partition, start, end, timeout_s=timeout_s)
    from flowctl.adapters import kafka_log

    records = kafka_log.read_range(
        kafka_log.cached_consumer(bootstrap), topic, partition, start, end, timeout_s=timeout_s
    )
    return map(Record.of, records)


def _highwater(reader: str, bootstrap: str, topic: str, partition: int) -> int | None:
    """The log end that ``reader``'s cached consumer's last fetch of the partition
    reported, right after its range read (the consumer is still assigned to it)."""
    if reader == LIBRDKAFKA:
        from flowctl.adapters import kafka_read_rdkafka as rdkafka

        return rdkafka.highwater(rdkafka.cached_consumer(bootstrap), topic, partition)
    from flowctl.adapters import kafka_ends, kafka_log

    return kafka_ends.highwater(kafka_log.cached_consumer(bootstrap), topic, partition)


def _idle(bootstrap: str) -> None:
    """Unassign the worker's cached librdkafka consumer: nothing is fetched until the
    worker's next task (:func:`flowctl.adapters.kafka_read_rdkafka.idle`)."""
    try:
        from flowctl.adapters import kafka_read_rdkafka as rdkafka
    except ImportError:  # confluent-kafka missing: every read failed, no consumer was made
        return
    rdkafka.idle(bootstrap)


def _drop_consumer(bootstrap: str, reader: str) -> None:
    """Close the worker's cached consumer of ``reader`` (it failed a read)."""
    if reader == LIBRDKAFKA:
        try:
            from flowctl.adapters import kafka_read_rdkafka as rdkafka
        except ImportError:  # confluent-kafka missing: the read failed before any consumer
            return
        rdkafka.drop_cached_consumer(bootstrap)
        return
    from flowctl.adapters import kafka_log

    kafka_log.drop_cached_consumer(bootstrap)
