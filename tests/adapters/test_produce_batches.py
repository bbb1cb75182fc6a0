"""The platform's producer writes few, large record batches: the embedded Tansu's ListOffsets
and fetch cost grow with a partition's batch count (bench/broker_cost.py)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest
from kafka import TopicPartition
from kafka.record import memory_records

from flowctl.adapters import kafka_log

RECORDS = 20_000


@pytest.fixture
def batch_offsets(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[int]]:
    """Base offsets of the record batches kafka-python decodes (the real broker's batches)."""
    seen: set[int] = set()
    original = memory_records.MemoryRecords.next_batch

    def next_batch(self: memory_records.MemoryRecords, *args: object, **kwargs: object) -> object:
        batch = original(self, *args, **kwargs)
        if batch is not None:
            seen.add(batch.base_offset)
        return batch

    monkeypatch.setattr(memory_records.MemoryRecords, "next_batch", next_batch)
    yield seen


def test_produce_writes_thousands_of_records_per_batch(
    kafka_bootstrap: str, batch_offsets: set[int]
) -> None:
    topic = f"batches-{secrets.token_hex(4)}"
    kafka_log.ensure_topics(kafka_bootstrap, {topic: 1})
    lines = [f"line {i} {'w' * (i % 50)}" for i in range(RECORDS)]
    assert kafka_log.produce(kafka_bootstrap, topic, lines) == RECORDS
    tp = TopicPartition(topic, 0)
    consumer = kafka_log.new_consumer(kafka_bootstrap)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values: list[bytes] = []
        for _ in range(60):
            polled = consumer.poll(timeout_ms=1000).get(tp, [])
            values += [r.value for r in polled]
            if len(values) >= RECORDS:
                break
    finally:
        consumer.close()
    assert values == [line.encode() for line in lines]  # every record, in order
    # Two 10,000-record chunks, each flushed: a few batches each (linger 5 ms gave ~400).
    assert len(batch_offsets) <= 20, sorted(batch_offsets)
