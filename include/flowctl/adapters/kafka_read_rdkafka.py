"""Exact offset-range reads on librdkafka (confluent-kafka): the lanes' other reader.

``[flow] reader = "librdkafka"`` (docs/flow-control.md, "Lane readers") reads a lane's
ranges with this module instead of :func:`flowctl.adapters.kafka_log.read_range`: the
fetching, decompression, CRC checks and record parsing then run in C, where kafka-python
does them in Python (about 42 % of the lanes' time at 2 lanes, bench/README.md). The
semantics are :func:`~flowctl.adapters.kafka_log.read_range`'s, record for record:

- ``assign`` at the range's start offset, no group join, no commits;
- committed records only (:data:`~flowctl.adapters.kafka_log.ISOLATION_LEVEL`), CRCs
  checked;
- exactly the offsets ``[start, end)``; offsets without a record (transaction markers,
  compaction) are gaps it moves over, also at the log's end: librdkafka reports the end
  it reached past them (``enable.partition.eof``), a position no record carries;
- a read that makes no progress for ``timeout_s`` raises
  :class:`~flowctl.adapters.kafka_log.KafkaReadTimeout` naming the range.

It yields :class:`flowctl.core.record.Record`, built straight from librdkafka's
``Message``, so the lane sees one record type whichever reader ran. The planner's exact
ends on librdkafka are :mod:`flowctl.adapters.kafka_ends_rdkafka`; producing, reconcile
and the admin client stay on kafka-python, the platform's dependency; confluent-kafka is
the optional extra ``flowctl[librdkafka]``.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterator
from typing import Any

from flowctl.adapters.kafka_log import ISOLATION_LEVEL, KafkaReadTimeout
from flowctl.adapters.process_cache import cached, entries, forget
from flowctl.core.record import Record

try:
    from confluent_kafka import (
        TIMESTAMP_NOT_AVAILABLE,
        Consumer,
        KafkaError,
        KafkaException,
        TopicPartition,
    )
except ImportError as exc:  # the optional extra is not installed
    raise ImportError(
        '[flow] reader = "librdkafka" needs confluent-kafka, which is not installed in '
        f"{sys.executable}: install it with `pip install 'flowctl[librdkafka]'` (or "
        '`pip install confluent-kafka`), or set [flow] reader = "kafka-python"'
    ) from exc

log = logging.getLogger(__name__)

#: The per-worker consumer cache (:mod:`flowctl.adapters.process_cache`).
_CACHE = "flowctl._rdkafka_consumer_cache"

#: Records asked of librdkafka per ``consume`` call: its queue is filled ahead by its own
#: fetcher thread, so one call hands over a batch in C, and the lane's Python loops once.
BATCH_RECORDS = 5_000
#: Seconds one ``consume`` call waits for its batch: it returns early once the batch is
#: full, which a range below the log's end always is; at the log's end it waits this long
#: for the end-of-partition report (the read's progress past trailing gaps).
POLL_S = 0.2

#: The consumer's settings beside the bootstrap address: what the kafka-python reader's
#: ``_consumer_config`` sets, in librdkafka's names.
CONSUMER_CONFIG: dict[str, Any] = {
    # librdkafka wants a group id, even for a consumer that only assigns: it joins no group
    # and commits nothing.
    "group.id": "flowctl-lanes",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    # A read below the log's start raises (kafka_log's reader says why), never resets.
    "auto.offset.reset": "error",
    "isolation.level": ISOLATION_LEVEL,
    # A corrupted record batch is refused, never counted (kafka-python's check_crcs).
    "check.crcs": True,
    # The end of the log is reported with the offset reached: a range whose last offsets
    # are transaction markers is read to its end by that report.
    "enable.partition.eof": True,
    # How long the broker may hold a fetch at the log's end. librdkafka keeps one fetch in
    # flight per broker, and its fetcher asks again as soon as an answer comes: a read of
    # another partition (the next span, the next task) waits for a fetch held at the end
    # of the last one. At 100 ms (kafka-python's fetch_max_wait_ms) four spans at the log's
    # end took 386 ms to read, at 10 ms 43 ms (a one-off timing on Tansu); librdkafka reads
    # old data from Tansu on S3 at 10 ms too (where kafka-python never progressed).
    "fetch.wait.max.ms": 10,
    "socket.timeout.ms": 30_000,
    # How far librdkafka fetches ahead of the application (default 100,000 records): what
    # lies past a range's end is parsed and then dropped by the next assign, so a short
    # lead; a few fetches' worth keeps a long range streaming.
    "queued.min.messages": 10_000,
    # How long a fetch waits once that lead is queued (default 1 s): at the default a
    # range read longer than the lead stalled for up to a second on every refill (a
    # one-off timing on Tansu: ranges of 12,000 records read at 35k/s, 140-200k/s at 10 ms).
    "fetch.queue.backoff.ms": 10,
}


def new_consumer(bootstrap: str) -> Consumer:
    """A group-less librdkafka consumer for ``assign`` reads (:data:`CONSUMER_CONFIG`)."""
    return Consumer({"bootstrap.servers": bootstrap, **CONSUMER_CONFIG})


def cached_consumer(bootstrap: str) -> Consumer:
    """The consumer for ``bootstrap`` reused by every task of this Python worker
    (:mod:`flowctl.adapters.process_cache`). Created in the worker itself, never before a fork
    (librdkafka's threads do not survive one)."""
    return cached(_CACHE, bootstrap, lambda: new_consumer(bootstrap))


def idle(bootstrap: str) -> None:
    """Unassign the worker's cached consumer, if any, after a task's reads: assigned at the
    log's end, its fetcher would ask the broker again every ``fetch.wait.max.ms`` until the
    worker's next task."""
    consumer = entries(_CACHE).get(bootstrap)
    if consumer is not None:
        consumer.unassign()


def drop_cached_consumer(bootstrap: str) -> None:
    """Close and forget the cached consumer (after an error left it in doubt)."""
    consumer = forget(_CACHE, bootstrap)
    if consumer is None:
        return
    try:
        consumer.close()
    except Exception:  # closing a broken consumer must not mask why it was dropped
        log.debug("closing a librdkafka consumer failed", exc_info=True)


def highwater(consumer: Consumer, topic: str, partition: int) -> int | None:
    """The log end librdkafka's last fetch of ``topic``/``partition`` reported (its cached
    high watermark: no request), or ``None`` when it fetched none; see
    :func:`flowctl.adapters.kafka_ends.highwater`."""
    _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)
    return high if high >= 0 else None


def read_range(
    consumer: Consumer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    timeout_s: float = 30.0,
    max_records: int = BATCH_RECORDS,
) -> Iterator[Record]:
    """Yield exactly the records of ``topic``/``partition`` with ``start <= offset < end``.

    The semantics of :func:`flowctl.adapters.kafka_log.read_range` (see the module
    docstring). A record batch librdkafka cannot read (a CRC mismatch, a codec it lacks)
    raises :class:`confluent_kafka.KafkaException`.
    """
    if start < 0 or end < start:
        raise ValueError(f"read_range: bad range [{start}, {end}) for {topic}/{partition}")
    if start == end:
        return
    consumer.assign([TopicPartition(topic, partition, start)])
    eof = KafkaError._PARTITION_EOF
    position = start
    last_progress = time.monotonic()
    while position < end:
        batch = consumer.consume(num_messages=min(max_records, end - position), timeout=POLL_S)
        moved = False
        for m in batch:
            error = m.error()
            if error is not None:
                if error.code() != eof:
                    raise KafkaException(error)
                # The log's end, past any gap before it: nothing more to read below it.
                reached = m.offset()
                if reached is not None and reached > position:
                    position, moved = reached, True
                continue
            offset = m.offset()
            if offset is None or offset < position:  # a record always has an offset
                continue
            if offset >= end:
                return
            kind, stamp = m.timestamp()
            headers = m.headers()
            yield Record(
                topic,
                partition,
                offset,
                None if kind == TIMESTAMP_NOT_AVAILABLE else stamp,
                m.value(),
                m.key(),
                # A consumed record's headers are a list of (str, bytes | None) pairs; the
                # stubs also allow the dict and str values a producer may be given.
                tuple(headers) if headers else (),  # type: ignore[arg-type]
            )
            position, moved = offset + 1, True
        if moved:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > timeout_s:
            raise KafkaReadTimeout.stuck(
                "read_range (librdkafka)", topic, partition, (start, end), position, timeout_s
            )
