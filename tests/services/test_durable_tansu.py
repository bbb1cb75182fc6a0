"""Tansu on S3: records survive a broker restart when stored in (local moto) S3 (not a
restart of moto, which keeps them in memory)."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

from flowctl.adapters import kafka_ends, kafka_log, kafka_read_rdkafka
from flowctl.config import Settings
from flowctl.services import manager, s3
from flowctl.services.base import UP
from flowctl.services.ports import free_port
from flowctl.spark.flow.log_ends import KafkaEnds
from tests.lane_readers import LaneReader

from .helpers import pid_gone

pytestmark = [pytest.mark.tansu, pytest.mark.integration]


@pytest.fixture
def durable_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    # moto[server] is an optional extra: without it this mode is not available at all.
    pytest.importorskip("moto.server", reason="moto[server] not installed (Tansu's S3 mode)")
    for name in ("AWS_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(s3.PORT_ENV, str(free_port()))
    settings = Settings(
        home=tmp_path / "home",
        kafka_port=free_port(),
        tansu_storage="s3",
        tansu_s3_url=f"s3://flowctl-{secrets.token_hex(3)}/",
    )
    try:
        yield settings
    finally:
        manager.down(settings)


def _read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        while len(values) < expected and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in batch)
        return values
    finally:
        consumer.close()


def test_records_survive_a_tansu_restart(durable_settings: Settings) -> None:
    manager.up(durable_settings, only="tansu")  # pulls in the local S3 store
    rows = {s.name: s for s in manager.status(durable_settings)}
    states = {name: row.state for name, row in rows.items()}
    assert states["s3"] == UP and states["tansu"] == UP
    assert rows["s3"].detail.endswith("moto, in memory: not durable")  # a test double of S3
    bootstrap = durable_settings.kafka_bootstrap

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    admin.create_topics([NewTopic("durable", num_partitions=1, replication_factor=1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    sent = [f"v{i}".encode() for i in range(20)]
    for value in sent:
        producer.send("durable", value=value, partition=0)
    producer.flush(timeout=20)
    producer.close()

    broker_pid = {s.name: s.pid for s in manager.status(durable_settings)}["tansu"]
    manager.down(durable_settings, only="tansu")
    assert broker_pid is not None and pid_gone(broker_pid)
    manager.up(durable_settings, only="tansu")

    assert _read_all(bootstrap, "durable", len(sent)) == sent
    # The lanes' librdkafka reader, whose fetch hold is 10 ms, reads them from S3 too.
    consumer = kafka_read_rdkafka.new_consumer(bootstrap)
    try:
        read = kafka_read_rdkafka.read_range(consumer, "durable", 0, 0, len(sent), timeout_s=10)
        assert [r.value for r in read] == sent
    finally:
        consumer.close()


def test_the_planners_log_ends_stay_exact_on_tansu_with_s3(
    durable_settings: Settings, lane_reader: LaneReader
) -> None:
    """On S3 storage ``end_offsets()`` can stay put across an append and a short fetch hold
    is answered with nothing: the planner's reader still sees every record, batch after
    batch and once the writes stop (a stale end once left a test's last records unread),
    on either reader's client."""
    manager.up(durable_settings, only="tansu")
    bootstrap = durable_settings.kafka_bootstrap
    topic = f"ends-{secrets.token_hex(3)}"
    kafka_log.ensure_topics(bootstrap, {topic: 2})
    ends = KafkaEnds(bootstrap, lane_reader.name)
    try:
        for burst in range(6):
            kafka_log.produce(bootstrap, topic, [f"b{burst} r{i}" for i in range(40)])
            seen = ends.latest_offsets_of([topic])[topic]
            exact = kafka_ends.latest_offsets(bootstrap, topic)
            assert all(seen[p] <= exact[p] for p in exact), (seen, exact)
        time.sleep(kafka_ends.KNOWN_MAX_AGE_S + 0.2)  # writes stopped: only the age limit helps
        assert ends.latest_offsets_of([topic])[topic] == kafka_ends.latest_offsets(bootstrap, topic)
        assert sum(ends.latest_offsets_of([topic])[topic].values()) == 6 * 40
    finally:
        ends.close()
