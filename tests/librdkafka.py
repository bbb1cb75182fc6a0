"""A foreign producer for the tests: librdkafka (confluent-kafka), as the world writes the log.

flowctl's own producers are kafka-python's; the log a pipeline reads may come from anyone.
:func:`produce` writes with librdkafka's codecs, idempotence and transactions, so the
tests read what such producers really put into the broker (record batches of another
client's layout, transaction markers) instead of what flowctl writes itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaException, Producer

#: Every codec librdkafka writes (``none``: uncompressed).
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclass(frozen=True)
class Rec:
    """One record to produce: ``value`` ``None`` is a tombstone."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    partition: int = -1  # -1: librdkafka's partitioner (by key)


def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Rec],
    *,
    compression: str = "none",
    idempotent: bool = False,
    transactional_id: str | None = None,
    per_transaction: int = 0,
    abort_every: int = 0,
) -> int:
    """Produce ``records`` and wait for every delivery; returns how many were delivered.

    With ``transactional_id``, the records go in committed transactions of
    ``per_transaction`` records each (every commit writes one marker per partition it
    touched: an offset no consumer is handed). ``abort_every`` k: every k-th transaction
    (the k-th, 2k-th, ...) is aborted instead, its records written and never committed
    (:func:`committed_of` says which records a reader gets). A failed delivery raises
    naming it.
    """
    config: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "compression.type": compression,
        "enable.idempotence": idempotent or transactional_id is not None,
        "linger.ms": 5,
        "message.timeout.ms": 30_000,
    }
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
    producer = Producer(config)
    errors: list[str] = []
    delivered = 0

    def on_delivery(err: object, _msg: object) -> None:
        nonlocal delivered
        if err is None:
            delivered += 1
        else:
            errors.append(str(err))

    def send(batch: Sequence[Rec]) -> None:
        for r in batch:
            producer.produce(
                topic,
                value=r.value,
                key=r.key,
                headers=list(r.headers) or None,
                partition=r.partition,
                on_delivery=on_delivery,
            )
            producer.poll(0)

    if transactional_id is None:
        send(records)
    else:
        producer.init_transactions(30)
        size = per_transaction or len(records) or 1
        for number, start in enumerate(range(0, len(records), size), start=1):
            producer.begin_transaction()
            send(records[start : start + size])
            if abort_every and number % abort_every == 0:
                producer.flush(30)  # written to the log, then aborted
                producer.abort_transaction(30)
            else:
                producer.commit_transaction(30)
    left = producer.flush(30)
    if left or errors:
        raise KafkaException(f"{left} record(s) undelivered, errors {errors[:3]} to {topic!r}")
    return delivered


def committed_of(records: Sequence[Rec], per_transaction: int, abort_every: int) -> list[Rec]:
    """The records of :func:`produce` with those arguments that a read_committed reader gets."""
    size = per_transaction or len(records) or 1
    kept: list[Rec] = []
    for number, start in enumerate(range(0, len(records), size), start=1):
        if not (abort_every and number % abort_every == 0):
            kept.extend(records[start : start + size])
    return kept
