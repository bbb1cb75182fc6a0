"""Producing to the Kafka log: the platform's own producers (ingest, the feed, the lanes'
replay and DLQ records) and their record-batch codec.

Every codec of :data:`~flowctl.core.validation.COMPRESSION_CODECS` is written and read
(kafka-python encodes and decodes them with python-snappy, lz4 and zstandard, which the
project depends on); which one a pipeline's producers write is its config's
``topics.compression`` (``flowctl ingest --compression`` for one load).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from kafka import KafkaProducer
from kafka.errors import KafkaError

from flowctl.adapters.kafka_network import NETWORK_CLIENT
from flowctl.adapters.retry import RetriesExhausted, retry_call
from flowctl.core.validation import DEFAULT_COMPRESSION
from flowctl.core.validation import compression as valid_compression

#: How long a record batch waits to fill (ms) and how large it grows (bytes): with 50-100 B
#: lines about 2,500-5,000 records a batch, where linger 5 ms gave about 50.
LINGER_MS = 250
BATCH_BYTES = 512 * 1024


class KafkaProduceError(RuntimeError):
    """Records could not be produced after all retries."""


def compression_type(name: Any) -> str | None:
    """kafka-python's ``compression_type`` for a codec name (``none`` is ``None``); a name
    not in :data:`COMPRESSION_CODECS` raises naming it, and a codec whose library is missing
    raises before a record is sent (never an unreadable batch)."""
    codec = valid_compression("compression", name)
    if codec == "none":
        return None
    from kafka import codec as kafka_codec

    if not getattr(kafka_codec, f"has_{codec}")():
        raise ValueError(
            f"compression={codec!r}: kafka-python finds no library for it "
            f"(the project depends on python-snappy, lz4 and zstandard; reinstall it)"
        )
    return codec


def produce(
    bootstrap: str,
    topic: str,
    values: Iterable[bytes | str | tuple[bytes | str, int]],
    *,
    on_progress: Callable[[int], None] | None = None,
    progress_every: int = 10_000,
    attempts: int = 6,
    compression: str = DEFAULT_COMPRESSION,
) -> int:
    """Produce ``values`` to ``topic`` and return how many were acknowledged.

    Strings are UTF-8 encoded. Each record carries the producer's wall-clock
    timestamp (end-to-end latency is measured from it), unless the value comes as
    ``(value, timestamp_ms)``: a generator that simulates a feed over time
    (clickstream's, whose lateness is judged by the arrival in the log) sets each
    record's Kafka timestamp itself. Records are sent in
    chunks of ``progress_every``; a chunk's failed sends are retried with
    backoff up to ``attempts`` times, then :class:`KafkaProduceError` is raised
    naming how many were lost so far. ``on_progress(count)`` is called after
    every flushed chunk. Ends with a flush: when this returns, every record is
    acknowledged. ``compression`` is the record batches' codec (one of
    :data:`~flowctl.core.validation.COMPRESSION_CODECS`; a pipeline's ``topics.compression``).
    """
    if progress_every < 1:
        raise ValueError(f"progress_every={progress_every!r} must be >= 1")
    codec = compression_type(compression)
    producer = retry_call(
        lambda: KafkaProducer(
            bootstrap_servers=bootstrap,
            # Acknowledged means in every in-sync replica (min.insync.replicas of the
            # cluster's brokers), and a retried send is never written twice.
            acks="all",
            enable_idempotence=True,
            # Few, large record batches: fewer requests, and the Tansu broker's ListOffsets
            # and fetch cost grow with a partition's batch count (bench/broker_cost.py).
            # Every chunk ends with a flush, so the linger only waits while a chunk is sent.
            linger_ms=LINGER_MS,
            batch_size=BATCH_BYTES,
            max_request_size=2 * BATCH_BYTES,
            retries=3,
            compression_type=codec,
            kafka_client=NETWORK_CLIENT,
        ),
        what=f"connecting a producer to {bootstrap}",
        retry_on=(KafkaError, OSError),
    )
    sent = 0
    try:
        chunk: list[tuple[bytes, int | None]] = []
        for index, value in enumerate(values):
            chunk.append(_timed(index, value))
            if len(chunk) >= progress_every:
                sent += _send_chunk(producer, topic, chunk, attempts)
                chunk = []
                if on_progress is not None:
                    on_progress(sent)
        if chunk:
            sent += _send_chunk(producer, topic, chunk, attempts)
            if on_progress is not None:
                on_progress(sent)
    finally:
        producer.close()
    return sent


def _timed(index: int, value: object) -> tuple[bytes, int | None]:
    """A value and its timestamp (``None``: stamp it when sent)."""
    if isinstance(value, tuple):
        if len(value) != 2 or isinstance(value[1], bool) or not isinstance(value[1], int):
            raise TypeError(f"values[{index}]={value!r} must be (value, timestamp_ms: int)")
        if value[1] < 0:
            raise ValueError(f"values[{index}]: timestamp_ms={value[1]!r} must be >= 0")
        return _as_bytes(index, value[0]), value[1]
    return _as_bytes(index, value), None


def _as_bytes(index: int, value: object) -> bytes:
    """A record value as bytes; anything but text or bytes is refused (never ``bytes(5)``)."""
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"values[{index}]={value!r} must be bytes or str, not {type(value).__name__}")


def _send_chunk(
    producer: KafkaProducer, topic: str, chunk: list[tuple[bytes, int | None]], attempts: int
) -> int:
    """Send and flush ``chunk``; resend only the failed records (same timestamps), with backoff."""
    todo = chunk

    def attempt() -> None:
        nonlocal todo
        futures = [
            (
                (value, ts),
                producer.send(
                    topic, value=value, timestamp_ms=int(time.time() * 1000) if ts is None else ts
                ),
            )
            for value, ts in todo
        ]
        producer.flush()
        failed = [value for value, future in futures if future.failed()]
        if failed:
            errors = {repr(future.exception) for _, future in futures if future.failed()}
            todo = failed
            raise KafkaProduceError(
                f"{len(failed)} of {len(futures)} records to {topic!r} failed: {sorted(errors)[:3]}"
            )

    try:
        retry_call(
            attempt,
            what=f"producing {len(chunk)} records to {topic!r}",
            retry_on=(KafkaProduceError, KafkaError),
            attempts=attempts,
        )
    except RetriesExhausted as exc:
        raise KafkaProduceError(f"{exc} ({len(todo)} of this chunk not acknowledged)") from exc
    return len(chunk)
