"""The Kafka log: topics, exact offset-range reads, the platform's consumers.

Written for kafka-python 3 against Apache Kafka and the embedded Tansu broker,
whose quirks shape this module:

- A reused consumer that ``pause()``s a partition may never fetch it again, so
  :func:`read_range` never pauses: it reassigns and seeks, and raises when a
  read makes no progress instead of hanging.
- Group joins are slow and not needed: every consumer here uses
  ``assign`` + ``seek`` and no group.
- CreatePartitions is unsupported: :func:`ensure_topics` creates missing topics
  and reports (never changes) the partition count of existing ones.

Every consumer here reads committed records only (:data:`ISOLATION_LEVEL`), whoever
wrote the log; offsets without a record (transaction markers, compaction) are gaps
that :func:`read_range` and :func:`~flowctl.adapters.kafka_ends.latest_offsets` move
over. The exact end offsets (``end_offsets()`` under-reports on Tansu) are
:mod:`flowctl.adapters.kafka_ends`; producing is :mod:`flowctl.adapters.kafka_produce`
(its names are importable from here too).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError, KafkaTimeoutError, TopicAlreadyExistsError

# Producing lives in its own module; its names stay importable from here, where every
# caller has always found them.
from flowctl.adapters.kafka_network import NETWORK_CLIENT
from flowctl.adapters.kafka_produce import KafkaProduceError as KafkaProduceError
from flowctl.adapters.kafka_produce import produce as produce
from flowctl.adapters.process_cache import cached, forget
from flowctl.adapters.retry import retry_call

log = logging.getLogger(__name__)
# kafka-python logs every connect, API-version probe and metadata refresh at INFO (about 50
# lines per ingest task log); only its warnings mean something to a user. A level set by
# the user's own logging config is kept.
if logging.getLogger("kafka").level == logging.NOTSET:
    logging.getLogger("kafka").setLevel(logging.WARNING)

#: The per-worker consumer cache (:mod:`flowctl.adapters.process_cache`).
_CACHE = "flowctl._kafka_consumer_cache"


class KafkaReadTimeout(TimeoutError):
    """An offset-range read made no progress for ``timeout_s``: the broker or range is bad."""

    @classmethod
    def stuck(
        cls,
        reader: str,
        topic: str,
        partition: int,
        span: tuple[int, int],
        position: int,
        timeout_s: float,
    ) -> KafkaReadTimeout:
        """The error of a range read (by ``reader``) stuck at ``position`` of ``span``."""
        start, end = span
        return cls(
            f"{reader}: no progress reading {topic}/{partition} offsets [{start}, {end}) for "
            f"{timeout_s} s (stuck at offset {position}); is the broker up and is the range "
            f"below the partition's latest offset?"
        )


#: A new topic's replication factor: the broker's ``default.replication.factor`` (KIP-464).
DEFAULT_REPLICATION = -1


class KafkaUnavailable(ConnectionError):
    """A health check found no Kafka broker answering, or a failed metadata request."""


#: The isolation level of every consumer of the platform (lanes, the planner's end offsets,
#: reconcile, ``flowctl stream counts``): records of aborted transactions never reach a
#: definition, and a broker that implements transactions reports the last stable offset as
#: the end. Transaction markers are offsets no consumer is handed: gaps in the log. The
#: embedded Tansu does not report aborted ranges, so it hands aborted records over anyway
#: (docs/flow-control.md, "What is read").
ISOLATION_LEVEL = "read_committed"


def _consumer_config(bootstrap: str, **overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": None,
        "enable_auto_commit": False,
        # A read below the log's start (retention or DeleteRecords took records the
        # stream had not read) raises, never resets to the start: a silent reset would
        # read a range as empty and let the checkpoint pass records lost unread. The
        # planner's guard then names the loss and applies on_data_loss.
        "auto_offset_reset": "none",
        "isolation_level": ISOLATION_LEVEL,
        # A corrupted record batch is refused (CorruptRecordError), never counted; the
        # crc32c C extension (a dependency) keeps the check cheap (bench/crc.py).
        "check_crcs": True,
        # How long the broker may hold a fetch. Tansu on S3 answers a fetch of old data
        # only within this time (a reconcile from offset 0 never progressed at 10 ms);
        # the planner's end-offset reader, which fetches one record batch at the log's
        # end, asks for 10 ms (kafka_ends.PLANNER_FETCH_WAIT_MS).
        "fetch_max_wait_ms": 100,
        "request_timeout_ms": 30_000,
        # kafka-python 3 backs off up to 30 s between reconnects to a broker it lost; the
        # Java client's default is 1 s. A restarted broker is read again within a second.
        "reconnect_backoff_max_ms": 1_000,
        "kafka_client": NETWORK_CLIENT,
    }
    config.update(overrides)
    return config


def new_consumer(bootstrap: str, **overrides: Any) -> KafkaConsumer:
    """A group-less consumer for ``assign`` + ``seek`` reads (no slow group joins)."""
    return KafkaConsumer(**_consumer_config(bootstrap, **overrides))


def cached_consumer(bootstrap: str) -> KafkaConsumer:
    """The consumer for ``bootstrap`` reused by every task of this Python worker
    (:mod:`flowctl.adapters.process_cache`): connecting costs more than reading a small lane."""
    return cached(_CACHE, bootstrap, lambda: new_consumer(bootstrap))


def drop_cached_consumer(bootstrap: str) -> None:
    """Close and forget the cached consumer (after an error left it in doubt)."""
    close_quietly(forget(_CACHE, bootstrap))


def close_quietly(consumer: KafkaConsumer | None) -> None:
    """Close ``consumer`` (if any); a failure is logged at DEBUG, never raised: closing a
    broken consumer must not mask the error that made its owner drop it."""
    if consumer is None:
        return
    try:
        consumer.close()
    except Exception:
        log.debug("closing a consumer failed", exc_info=True)


def check_broker(bootstrap: str, timeout: float) -> None:
    """A Kafka-protocol round trip (metadata via ``list_topics``) within ``timeout``, no retry.

    The health check of ``flowctl services``: raises :class:`KafkaUnavailable`
    naming the bootstrap servers and the reason.
    """
    ms = max(int(timeout * 1000), 100)
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
            client_id="flowctl-health",
            request_timeout_ms=ms,
            bootstrap_timeout_ms=ms,
            kafka_client=NETWORK_CLIENT,
        )
    except KafkaError as exc:
        raise KafkaUnavailable(f"no Kafka broker answers at {bootstrap}: {exc}") from None
    try:
        admin.list_topics()
    except KafkaError as exc:
        raise KafkaUnavailable(f"Kafka at {bootstrap} failed a metadata request: {exc}") from None
    finally:
        admin.close()


def ensure_topics(
    bootstrap: str, topics: Mapping[str, int], *, timeout_s: float = 30.0
) -> dict[str, int]:
    """Create the missing ``{topic: partitions}`` and return every topic's actual partition count.

    Idempotent. An existing topic keeps its partition count (Tansu cannot add
    partitions); a count different from the one asked for is logged, not
    changed, and shows in the result.
    """
    for topic, partitions in topics.items():
        if not isinstance(partitions, int) or partitions < 1:
            raise ValueError(
                f"ensure_topics: partitions for {topic!r} must be >= 1, got {partitions!r}"
            )
    admin = retry_call(
        lambda: KafkaAdminClient(
            bootstrap_servers=bootstrap, request_timeout_ms=10_000, kafka_client=NETWORK_CLIENT
        ),
        what=f"connecting to Kafka at {bootstrap}",
        retry_on=(KafkaError, OSError),
    )
    try:
        existing = set(admin.list_topics())
        for topic, partitions in topics.items():
            if topic in existing:
                continue
            try:
                # Replication -1: the broker's default.replication.factor (1 on the
                # embedded broker, 3 on the cluster's, with its min.insync.replicas).
                admin.create_topics([NewTopic(topic, partitions, DEFAULT_REPLICATION)])
                log.info("created topic %s with %d partitions", topic, partitions)
            except TopicAlreadyExistsError:  # created concurrently: fine
                pass
    finally:
        admin.close()
    actual = _partition_counts(bootstrap, list(topics), timeout_s=timeout_s)
    for topic, wanted in topics.items():
        if actual[topic] != wanted:
            log.warning(
                "topic %s has %d partitions, not %d (partition counts are never changed)",
                topic,
                actual[topic],
                wanted,
            )
    return actual


def _partition_counts(bootstrap: str, topics: list[str], *, timeout_s: float) -> dict[str, int]:
    consumer = new_consumer(bootstrap)
    try:
        deadline = time.monotonic() + timeout_s
        counts: dict[str, int] = {}
        while True:
            for topic in topics:
                if topic not in counts:
                    parts = consumer.partitions_for_topic(topic)
                    if parts:
                        counts[topic] = len(parts)
            if len(counts) == len(topics):
                return counts
            if time.monotonic() > deadline:
                missing = sorted(set(topics) - set(counts))
                raise KafkaTimeoutError(
                    f"topics {missing} not visible in metadata at {bootstrap} after {timeout_s} s"
                )
            consumer.topics()  # refreshes the cluster metadata
            time.sleep(0.1)
    finally:
        consumer.close()


def partitions_of(consumer: KafkaConsumer, topic: str) -> list[int]:
    """The topic's partition ids, sorted; a clear error if the topic does not exist."""
    parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise ValueError(f"topic={topic!r} does not exist (or has no partitions)")
    return sorted(parts)


def log_starts(consumer: KafkaConsumer, topic: str) -> dict[int, int]:
    """``{partition: first offset still in the log}`` of ``topic``, in one ListOffsets
    request. The start moves past 0 when retention or DeleteRecords removed records; the
    planner compares it with the durable checkpoint (:mod:`flowctl.core.data_loss`)."""
    tps = [TopicPartition(topic, p) for p in partitions_of(consumer, topic)]
    starts = consumer.beginning_offsets(tps)
    return {tp.partition: int(starts.get(tp) or 0) for tp in tps}


def read_range(
    consumer: KafkaConsumer,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    timeout_s: float = 30.0,
    max_records: int = 2_000,
) -> Iterator[ConsumerRecord]:
    """Yield exactly the records of ``topic``/``partition`` with ``start <= offset < end``.

    Assigns and seeks (no group, never ``pause``). ``max_records`` bounds each
    poll so a small range does not parse a whole fetch. If ``timeout_s`` passes
    without the read position moving, raises :class:`KafkaReadTimeout` naming
    the range: a stuck read must fail the task, not hang the query.
    Offsets missing from the log (compaction, transaction markers) are skipped.
    """
    if start < 0 or end < start:
        raise ValueError(f"read_range: bad range [{start}, {end}) for {topic}/{partition}")
    if start == end:
        return
    tp = TopicPartition(topic, partition)
    consumer.assign([tp])
    consumer.seek(tp, start)
    position = start
    last_progress = time.monotonic()
    while position < end:
        fetched = consumer.poll(timeout_ms=200, max_records=min(max_records, end - position))
        moved = False
        for record in fetched.get(tp, ()):
            if record.offset < position:
                continue
            if record.offset >= end:
                return
            yield record
            position = record.offset + 1
            moved = True
        if not moved:
            # Nothing new: the log may have a hole at the end of the range.
            broker_position = consumer.position(tp)
            if broker_position is not None and broker_position > position:
                position = broker_position
                moved = True
        if moved:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > timeout_s:
            raise KafkaReadTimeout.stuck(
                "read_range", topic, partition, (start, end), position, timeout_s
            )
