"""Transactions on Apache Kafka, as the platform reads them (read_committed everywhere).

The log's end a plan may cut up to is ``end_offsets()``: one ListOffsets request, no
fetch, and at read_committed the last stable offset, so an open transaction's records
are never planned; aborted records are never handed to a reader, in any codec.
"""

from __future__ import annotations

import secrets
import time

import pytest
from confluent_kafka import Producer

from flowctl.adapters import kafka_ends, kafka_log
from tests.lane_readers import LaneReader, SpyEnds
from tests.librdkafka import Rec, committed_of, produce

pytestmark = pytest.mark.integration


def _topic(partitions: int, bootstrap: str) -> str:
    name = f"txn.{secrets.token_hex(4)}"
    kafka_log.ensure_topics(bootstrap, {name: partitions})
    return name


def test_the_ends_are_one_list_offsets_request_and_no_fetch(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    topic = _topic(3, kafka_bootstrap)
    kafka_log.produce(kafka_bootstrap, topic, [f"r{i}" for i in range(1_000)])
    client = SpyEnds(lane_reader.ends(kafka_bootstrap))
    try:
        ends = kafka_ends.latest_offsets_of(client, [topic], known={})[topic]
    finally:
        client.close()
    assert sum(ends.values()) == 1_000 and sorted(ends) == [0, 1, 2]
    assert len(client.asked) == 1 and client.fetched == []


def test_an_open_transaction_ends_the_log_before_its_first_record(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    """Records of a transaction still open lie past the last stable offset: the end stays
    below them (a plan never takes them), and moves past them and their commit marker once
    the transaction commits."""
    topic = _topic(1, kafka_bootstrap)
    kafka_log.produce(kafka_bootstrap, topic, [f"before {i}" for i in range(20)])
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"open-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=f"open {i}".encode(), partition=0)
    producer.flush(30)  # written to the log, not committed
    client = lane_reader.ends(kafka_bootstrap)
    try:
        assert kafka_ends.latest_offsets_of(client, [topic])[topic] == {0: 20}
        producer.commit_transaction(30)
        # The coordinator writes the commit marker after it answers: the end follows it.
        deadline = time.monotonic() + 30
        while (ends := kafka_ends.latest_offsets_of(client, [topic])[topic]) == {0: 20}:
            assert time.monotonic() < deadline, "the end never moved past the commit"
            time.sleep(0.05)
        assert ends == {0: 31}  # the ten records and the marker
    finally:
        client.close()
    consumer = lane_reader.consumer(kafka_bootstrap)
    try:
        got = [r.value for r in lane_reader.read(consumer, topic, 0, 0, 31, timeout_s=10)]
    finally:
        lane_reader.close(consumer)
    assert got == [f"before {i}".encode() for i in range(20)] + [
        f"open {i}".encode() for i in range(10)
    ]


@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_aborted_records_never_reach_a_reader(
    kafka_bootstrap: str, lane_reader: LaneReader, compression: str
) -> None:
    """A third of the transactions aborted: a read of the whole log hands over exactly the
    committed records, in order; the aborted ones and every marker are gaps it moves over."""
    topic = _topic(2, kafka_bootstrap)
    sent = [Rec(f"v{i}".encode(), partition=i % 2) for i in range(600)]
    produce(
        kafka_bootstrap,
        topic,
        sent,
        compression=compression,
        transactional_id=f"abort-{topic}",
        per_transaction=20,
        abort_every=3,
    )
    want = committed_of(sent, per_transaction=20, abort_every=3)
    ends = kafka_ends.latest_offsets(kafka_bootstrap, topic)
    consumer = lane_reader.consumer(kafka_bootstrap)
    try:
        got = {
            p: [r.value for r in lane_reader.read(consumer, topic, p, 0, end, timeout_s=10)]
            for p, end in ends.items()
        }
    finally:
        lane_reader.close(consumer)
    for p in (0, 1):
        assert got[p] == [r.value for r in want if r.partition == p]
    assert sum(ends.values()) > len(sent)  # aborted records and markers hold offsets
