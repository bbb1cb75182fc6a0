"""Round trips through the real embedded services with their plain client libraries.

These pin down what the adapters build on: Tansu speaks enough Kafka for
create-topic / produce / assign+seek consume, memcached for set/get/incr, and
both databases for create/insert/select through SQLAlchemy.
"""

from __future__ import annotations

import secrets
import time

import pytest
import sqlalchemy as sa
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from pymemcache.client.base import Client

pytestmark = pytest.mark.integration

N_RECORDS = 500
PARTITIONS = 2


def _consume_all(consumer: KafkaConsumer, expected: int, timeout_s: float = 20.0) -> list:
    """Poll until ``expected`` records arrived; fail (never hang) after ``timeout_s``."""
    records: list = []
    deadline = time.monotonic() + timeout_s
    while len(records) < expected and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500, max_records=1000).values():
            records.extend(batch)
    assert len(records) == expected, f"got {len(records)} of {expected} records in {timeout_s} s"
    return records


def test_kafka_produce_then_consume_from_offset_zero(kafka_bootstrap: str) -> None:
    topic = f"roundtrip.{secrets.token_hex(4)}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])
        assert topic in admin.list_topics()
    finally:
        admin.close()

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    sent, futures = [], []
    try:
        for i in range(N_RECORDS):
            key, value = f"k{i % 7}".encode(), f"record-{i}".encode()
            partition = i % PARTITIONS
            futures.append(producer.send(topic, key=key, value=value, partition=partition))
            sent.append((partition, key, value))
        producer.flush(timeout=20)
        assert all(f.get(timeout=1).partition == s[0] for f, s in zip(futures, sent, strict=True))
    finally:
        producer.close()

    partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    consumer = KafkaConsumer(
        bootstrap_servers=kafka_bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1000,
    )
    try:
        consumer.assign(partitions)  # no group join: Tansu's joins are slow
        for tp in partitions:
            consumer.seek(tp, 0)
        records = _consume_all(consumer, N_RECORDS)
        # highwater after a fetch is exact on Tansu (end_offsets() under-reports).
        assert sum(consumer.highwater(tp) for tp in partitions) == N_RECORDS
    finally:
        consumer.close()

    for p in range(PARTITIONS):
        got = [(r.partition, r.key, r.value) for r in records if r.partition == p]
        assert got == [s for s in sent if s[0] == p]  # per-partition order kept
        assert [r.offset for r in records if r.partition == p] == list(range(len(got)))


def test_memcached_set_get_incr(memcached_address: str) -> None:
    host, port = memcached_address.rsplit(":", 1)
    client = Client((host, int(port)), connect_timeout=2, timeout=2)
    prefix = secrets.token_hex(4)
    try:
        assert client.set(f"{prefix}:item", b"payload", noreply=False)
        assert client.get(f"{prefix}:item") == b"payload"
        assert client.get(f"{prefix}:absent") is None
        assert client.incr(f"{prefix}:seq", 1) is None  # incr needs an existing key
        assert client.add(f"{prefix}:seq", b"0", noreply=False)
        assert [client.incr(f"{prefix}:seq", 1) for _ in range(3)] == [1, 2, 3]
        assert client.delete(f"{prefix}:item", noreply=False)
        assert client.get(f"{prefix}:item") is None
    finally:
        client.close()


def test_database_create_insert_select(database_url: str) -> None:
    engine = sa.create_engine(database_url)
    meta = sa.MetaData()
    table = sa.Table(
        "roundtrip",
        meta,
        sa.Column("word", sa.String(64), primary_key=True),
        sa.Column("count", sa.BigInteger, nullable=False),
    )
    try:
        meta.create_all(engine)
        rows = [{"word": f"w{i}", "count": i * i} for i in range(50)]
        with engine.begin() as conn:
            conn.execute(table.insert(), rows)
        with engine.connect() as conn:
            got = conn.execute(sa.select(table.c.word, table.c.count).order_by(table.c.count))
            assert [dict(r._mapping) for r in got] == rows
            total = conn.execute(sa.select(sa.func.sum(table.c.count))).scalar_one()
        assert total == sum(i * i for i in range(50))
        with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:
            conn.execute(table.insert(), [{"word": "w1", "count": 0}])
    finally:
        engine.dispose()
