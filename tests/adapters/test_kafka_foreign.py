"""The log the world writes, read by flowctl's consumers against the real broker (Tansu).

Records from librdkafka (confluent-kafka) with every codec, idempotent or not, keyed, with
headers and tombstones; committed transactions, whose markers are offsets no consumer is
handed (gaps); kafka-python producers with every ``compression_type``. Each read is exact:
the latest offsets, the records of a range, their keys and headers. The range reads and
the exact ends run over both readers (``[flow] reader``: kafka-python and librdkafka).
"""

from __future__ import annotations

import pickle
import secrets

import pytest
from kafka.protocol.consumer.offsets import IsolationLevel

from flowctl.adapters import kafka_ends, kafka_log, kafka_read_rdkafka
from flowctl.core.validation import COMPRESSION_CODECS
from flowctl.pipelines.base import Record
from tests.lane_readers import LaneReader
from tests.librdkafka import CODECS, Rec, produce

pytestmark = pytest.mark.integration


def _topic(bootstrap: str, partitions: int = 1) -> str:
    name = f"foreign.{secrets.token_hex(4)}"
    kafka_log.ensure_topics(bootstrap, {name: partitions})
    return name


def _read_all(
    bootstrap: str, topic: str, reader: LaneReader
) -> tuple[dict[int, int], list[Record]]:
    """The log's ends and every record, both read by ``reader``'s client (the planner's
    exact-ends read and the lanes' range reads)."""
    client = reader.ends(bootstrap)
    try:
        ends = kafka_ends.latest_offsets(client, topic)
    finally:
        client.close()
    consumer = reader.consumer(bootstrap)
    try:
        records = [
            r
            for partition, end in sorted(ends.items())
            for r in reader.read(consumer, topic, partition, 0, end, timeout_s=10)
        ]
        return ends, records
    finally:
        reader.close(consumer)


def test_every_consumer_of_the_platform_reads_committed(kafka_bootstrap: str) -> None:
    """One setting (``_consumer_config``) for every consumer: the real consumers' fetchers
    ask the broker for committed records only."""
    owned = kafka_log.new_consumer(kafka_bootstrap, fetch_max_wait_ms=10)  # the planner's
    cached = kafka_log.cached_consumer(kafka_bootstrap)  # the lanes'
    try:
        for consumer in (owned, cached):
            assert consumer.config["isolation_level"] == "read_committed"
            assert consumer._fetcher._isolation_level is IsolationLevel.READ_COMMITTED
    finally:
        owned.close()
        kafka_log.drop_cached_consumer(kafka_bootstrap)


def test_the_librdkafka_reader_reads_committed_and_checks_crcs() -> None:
    """The lanes' other reader sets what ``_consumer_config`` sets, in librdkafka's names."""
    config = kafka_read_rdkafka.CONSUMER_CONFIG
    assert config["isolation.level"] == kafka_log.ISOLATION_LEVEL == "read_committed"
    assert config["check.crcs"] is True
    assert config["enable.auto.commit"] is False


def test_kafka_python_producers_write_every_codec_and_it_reads_back_exactly(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    assert set(COMPRESSION_CODECS) == set(CODECS)
    for codec in COMPRESSION_CODECS:
        topic = _topic(kafka_bootstrap, 2)
        values = [f"{codec} line {i}".encode() for i in range(700)]
        assert kafka_log.produce(kafka_bootstrap, topic, values, compression=codec) == 700
        ends, records = _read_all(kafka_bootstrap, topic, lane_reader)
        assert sum(ends.values()) == 700, codec
        assert sorted(r.value for r in records) == sorted(values), codec


def test_librdkafka_codecs_keys_headers_and_tombstones_read_exactly(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    for codec in CODECS:
        for idempotent in (False, True):
            topic = _topic(kafka_bootstrap)
            sent = [
                Rec(
                    None if i % 7 == 3 else (b"" if i % 11 == 5 else f"{codec} {i}".encode()),
                    key=None if i % 5 == 0 else f"k{i % 4}".encode(),
                    headers=(("source", b"librdkafka"), ("n", str(i).encode()), ("null", None))
                    if i % 2
                    else (),
                    partition=0,
                )
                for i in range(60)
            ]
            assert produce(
                kafka_bootstrap, topic, sent, compression=codec, idempotent=idempotent
            ) == len(sent)
            ends, records = _read_all(kafka_bootstrap, topic, lane_reader)
            what = f"{codec}, idempotent={idempotent}"
            assert ends == {0: 60}, what
            assert [(r.offset, r.value, r.key, r.headers) for r in records] == [
                (i, s.value, s.key, s.headers) for i, s in enumerate(sent)
            ], what
    assert pickle.loads(pickle.dumps(records[1])) == records[1]


def test_committed_transactions_leave_gaps_that_ends_and_reads_move_over(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    """Six transactions of five records: offsets 5, 11, ... 35 are commit markers. The
    latest offset is the log's end although its last offset is a marker (no record to
    fetch there), and a range read skips the markers, also a range of a marker alone."""
    topic = _topic(kafka_bootstrap)
    sent = [Rec(f"tx {i}".encode(), partition=0) for i in range(30)]
    txn = f"flowctl-test-{secrets.token_hex(4)}"
    produce(
        kafka_bootstrap, topic, sent, compression="lz4", transactional_id=txn, per_transaction=5
    )
    markers = {5, 11, 17, 23, 29, 35}
    ends, records = _read_all(kafka_bootstrap, topic, lane_reader)
    assert ends == {0: 36}
    assert [r.offset for r in records] == [o for o in range(36) if o not in markers]
    assert [r.value for r in records] == [s.value for s in sent]
    client = lane_reader.ends(kafka_bootstrap)
    try:
        known: kafka_ends.KnownEnds = {}
        for _ in range(2):  # read, then answered from ``known``
            assert kafka_ends.latest_offsets(client, topic, known=known) == {0: 36}
    finally:
        client.close()
    reading = lane_reader.consumer(kafka_bootstrap)
    try:
        ranges = [
            (5, 6, []),
            (4, 12, [4, 6, 7, 8, 9, 10]),
            (35, 36, []),
            (29, 36, [30, 31, 32, 33, 34]),
        ]
        for start, end, offsets in ranges:
            got = [r.offset for r in lane_reader.read(reading, topic, 0, start, end)]
            assert got == offsets, (start, end)
    finally:
        lane_reader.close(reading)
