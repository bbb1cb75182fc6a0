"""kafka_log against the real embedded broker (Apache Kafka): topics, exact offsets, range reads
(the range reads over both of the lanes' readers, kafka-python and librdkafka)."""

from __future__ import annotations

import functools
import secrets
import threading
import time

import pytest
from kafka import KafkaProducer

from flowctl.adapters import kafka_ends, kafka_log
from flowctl.core.record import Record
from tests.lane_readers import LaneReader, SpyEnds

pytestmark = pytest.mark.integration


def _topic(partitions: int, bootstrap: str) -> str:
    name = f"t.{secrets.token_hex(4)}"
    kafka_log.ensure_topics(bootstrap, {name: partitions})
    return name


def test_ensure_topics_is_idempotent_and_reports_actual_partitions(kafka_bootstrap: str) -> None:
    name = f"t.{secrets.token_hex(4)}"
    assert kafka_log.ensure_topics(kafka_bootstrap, {name: 3}) == {name: 3}
    assert kafka_log.ensure_topics(kafka_bootstrap, {name: 3}) == {name: 3}
    # An existing topic is never changed: the actual count is reported.
    assert kafka_log.ensure_topics(kafka_bootstrap, {name: 5}) == {name: 3}


def test_ensure_topics_rejects_bad_partitions(kafka_bootstrap: str) -> None:
    with pytest.raises(ValueError, match=r"partitions for 'x' must be >= 1, got 0"):
        kafka_log.ensure_topics(kafka_bootstrap, {"x": 0})


def test_produce_counts_reports_progress_and_stamps_time(kafka_bootstrap: str) -> None:
    topic = _topic(2, kafka_bootstrap)
    progress: list[int] = []
    before_ms = int(time.time() * 1000)
    n = kafka_log.produce(
        kafka_bootstrap,
        topic,
        [f"line {i}" if i % 2 else f"line {i}".encode() for i in range(2500)],
        on_progress=progress.append,
        progress_every=1000,
    )
    assert n == 2500
    assert progress == [1000, 2000, 2500]
    latest = kafka_ends.latest_offsets(kafka_bootstrap, topic)
    assert sum(latest.values()) == 2500
    consumer = kafka_log.new_consumer(kafka_bootstrap)
    try:
        values = set()
        for partition, end in latest.items():
            for record in kafka_log.read_range(consumer, topic, partition, 0, end, timeout_s=10):
                assert record.timestamp >= before_ms
                values.add(record.value)
    finally:
        consumer.close()
    assert values == {f"line {i}".encode() for i in range(2500)}


def test_produce_refuses_values_that_are_not_text_or_bytes(kafka_bootstrap: str) -> None:
    topic = _topic(1, kafka_bootstrap)
    with pytest.raises(TypeError, match=r"values\[1\]=5 must be bytes or str, not int"):
        kafka_log.produce(kafka_bootstrap, topic, ["ok", 5], progress_every=1)
    # What came before the bad value was produced and acknowledged, nothing after it.
    assert kafka_ends.latest_offsets(kafka_bootstrap, topic) == {0: 1}


def test_produce_keeps_the_timestamps_a_generator_sets(kafka_bootstrap: str) -> None:
    """``(value, timestamp_ms)`` values: the log keeps each record's own Kafka timestamp
    (clickstream's simulated arrivals); plain values get the wall clock."""
    topic = _topic(1, kafka_bootstrap)
    before_ms = int(time.time() * 1000)
    stamps = [1_767_225_600_000, 1_000, 1_600_000_000_000]  # in the past: Kafka refuses a
    # timestamp more than an hour ahead (log.message.timestamp.after.max.ms)
    values = [("a", stamps[0]), (b"b", stamps[1]), ("c", stamps[2]), "d"]
    assert kafka_log.produce(kafka_bootstrap, topic, values) == 4
    consumer = kafka_log.new_consumer(kafka_bootstrap)
    try:
        got = [(r.value, r.timestamp) for r in kafka_log.read_range(consumer, topic, 0, 0, 4)]
    finally:
        consumer.close()
    assert got[:3] == [(b"a", stamps[0]), (b"b", stamps[1]), (b"c", stamps[2])]
    assert got[3][0] == b"d" and got[3][1] >= before_ms


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (("a", "noon"), TypeError, r"values\[0\]=\('a', 'noon'\) must be \(value, timestamp_ms"),
        (("a", 1, 2), TypeError, r"must be \(value, timestamp_ms: int\)"),
        (("a", -5), ValueError, r"values\[0\]: timestamp_ms=-5 must be >= 0"),
    ],
)
def test_produce_refuses_a_bad_timestamp_naming_it(
    kafka_bootstrap: str, value: tuple, error: type, message: str
) -> None:
    with pytest.raises(error, match=message):
        kafka_log.produce(kafka_bootstrap, _topic(1, kafka_bootstrap), [value])


@pytest.mark.parametrize("cached", [False, True], ids=["read", "known-ends"])
def test_latest_offsets_is_exact_under_concurrent_producing(
    kafka_bootstrap: str, cached: bool, lane_reader: LaneReader
) -> None:
    """Every answer lies between what was acknowledged before and after, and is readable,
    with and without the ``known`` ends the planner keeps between batches, on either
    reader's client."""
    topic = _topic(3, kafka_bootstrap)
    known: kafka_ends.KnownEnds | None = {} if cached else None
    acked = [0]
    stop = threading.Event()

    def producer() -> None:
        while not stop.is_set():
            kafka_log.produce(
                kafka_bootstrap,
                topic,
                (f"x{i}" for i in range(300)),
                on_progress=lambda n, base=acked[0]: acked.__setitem__(0, base + n),
                progress_every=100,
            )

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    client = lane_reader.ends(kafka_bootstrap)
    answers = []
    try:
        deadline = time.monotonic() + 60
        while len(answers) < 40 and time.monotonic() < deadline:
            before = acked[0]
            latest = kafka_ends.latest_offsets(client, topic, known=known)
            after_total = acked[0]
            answers.append((before, sum(latest.values()), latest))
            assert before <= sum(latest.values()), (before, latest)
            assert sum(latest.values()) <= after_total + 300 * 3, (after_total, latest)
            time.sleep(0.02)
    finally:
        stop.set()
        thread.join(timeout=30)
    assert len(answers) == 40
    assert answers[-1][1] > answers[0][1], "the producer made no progress during the test"
    # The last answer is readable exactly: no missing record below it, nothing at or above it.
    _, _, latest = answers[-1]
    consumer = lane_reader.consumer(kafka_bootstrap)
    try:
        for partition, end in latest.items():
            offsets = [
                r.offset for r in lane_reader.read(consumer, topic, partition, 0, end, timeout_s=10)
            ]
            assert offsets == list(range(end))
    finally:
        lane_reader.close(consumer)
        client.close()
    # After the producer stopped, the answer equals everything acknowledged.
    final = kafka_ends.latest_offsets(kafka_bootstrap, topic)
    assert sum(final.values()) == acked[0]


def test_latest_offsets_of_empty_and_missing_topics(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    topic = _topic(2, kafka_bootstrap)
    client = lane_reader.ends(kafka_bootstrap)
    try:
        assert kafka_ends.latest_offsets(client, topic) == {0: 0, 1: 0}
        assert client.starts(topic) == {0: 0, 1: 0}
        with pytest.raises(ValueError, match=r"topic='no.such.topic' does not exist"):
            kafka_ends.latest_offsets(client, "no.such.topic", timeout_s=2)
    finally:
        client.close()


def test_read_range_yields_exactly_the_range(kafka_bootstrap: str, lane_reader: LaneReader) -> None:
    topic = _topic(1, kafka_bootstrap)
    kafka_log.produce(kafka_bootstrap, topic, (f"r{i}" for i in range(1000)))
    consumer = lane_reader.consumer(kafka_bootstrap)
    try:
        got = list(lane_reader.read(consumer, topic, 0, 137, 911, timeout_s=10, max_records=50))
        assert [r.offset for r in got] == list(range(137, 911))
        assert [r.value for r in got] == [f"r{i}".encode() for i in range(137, 911)]
        assert all(isinstance(r, Record) and r.topic == topic for r in got)
        # The same consumer reused for another range (no pause/resume) is exact again.
        again = list(lane_reader.read(consumer, topic, 0, 0, 3, timeout_s=10))
        assert [r.value for r in again] == [b"r0", b"r1", b"r2"]
        assert list(lane_reader.read(consumer, topic, 0, 5, 5)) == []
        # A range ending at the log's end, and one past a range read further on.
        tail = list(lane_reader.read(consumer, topic, 0, 990, 1000, timeout_s=10))
        assert [r.offset for r in tail] == list(range(990, 1000))
        assert [r.offset for r in lane_reader.read(consumer, topic, 0, 10, 12)] == [10, 11]
    finally:
        lane_reader.close(consumer)


def test_read_range_raises_when_no_progress(kafka_bootstrap: str, lane_reader: LaneReader) -> None:
    topic = _topic(1, kafka_bootstrap)
    kafka_log.produce(kafka_bootstrap, topic, ["only", "two"])
    consumer = lane_reader.consumer(kafka_bootstrap)
    try:
        reader = lane_reader.read(consumer, topic, 0, 0, 10, timeout_s=1.0)
        with pytest.raises(
            kafka_log.KafkaReadTimeout, match=r"offsets \[0, 10\).*stuck at offset 2"
        ):
            list(reader)
    finally:
        lane_reader.close(consumer)


def test_read_range_rejects_a_reversed_range(kafka_bootstrap: str, lane_reader: LaneReader) -> None:
    consumer = lane_reader.consumer(kafka_bootstrap)
    try:
        with pytest.raises(ValueError, match=r"bad range \[5, 3\)"):
            list(lane_reader.read(consumer, "t", 0, 5, 3))
    finally:
        lane_reader.close(consumer)


def test_cached_consumer_is_reused_per_worker_and_can_be_dropped(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    first = lane_reader.cached(kafka_bootstrap)
    assert lane_reader.cached(kafka_bootstrap) is first
    lane_reader.drop_cached(kafka_bootstrap)
    second = lane_reader.cached(kafka_bootstrap)
    assert second is not first
    lane_reader.drop_cached(kafka_bootstrap)


def _batch_with_a_flipped_byte() -> bytes:
    """A real v2 record batch whose second record had one byte changed after sealing."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
    for i in range(3):
        builder.append(timestamp=None, key=None, value=b"hello world %d" % i, headers=[])
    builder.close()
    raw = bytearray(builder.buffer())
    raw[raw.find(b"world 1")] = ord("W")
    return bytes(raw)


def test_flowctl_consumers_refuse_a_corrupted_record_batch() -> None:
    from kafka.consumer.fetcher import Fetcher
    from kafka.errors import CorruptRecordError
    from kafka.record.memory_records import MemoryRecords
    from kafka.structs import TopicPartition

    check = kafka_log._consumer_config("127.0.0.1:9")["check_crcs"]
    records = Fetcher.PartitionRecords(
        0, TopicPartition("t", 0), MemoryRecords(_batch_with_a_flipped_byte()), check_crcs=check
    )
    with pytest.raises(CorruptRecordError, match="failed crc check"):
        records.take(10)


def test_record_checksums_use_the_c_extension() -> None:
    from kafka.record import util

    assert util._crc32c is not util.crc32c_py, "crc32c is not installed: CRCs run in Python"


@pytest.mark.tansu  # the exact-ends read of a broker whose bounds under-report
def test_latest_offsets_reads_no_record_for_a_partition_whose_bound_did_not_move(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    """With ``known``, an unchanged partition is answered from it (no fetch), a partition
    written since is fetched again, and both answers are exact, on either reader's client."""
    fresh = 3600.0  # every answer in ``known`` young enough to be trusted
    topic = _topic(2, kafka_bootstrap)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for value, partition in [(b"a", 0), (b"b", 0), (b"c", 1)]:
        producer.send(topic, value, partition=partition)
    producer.flush()
    client = SpyEnds(lane_reader.ends(kafka_bootstrap))
    known: kafka_ends.KnownEnds = {}
    try:
        read = functools.partial(
            kafka_ends.latest_offsets, client, topic, known=known, known_max_age_s=fresh
        )
        assert read() == {0: 2, 1: 1}
        assert client.fetched == [{(topic, 0), (topic, 1)}]
        assert read() == {0: 2, 1: 1}
        assert len(client.fetched) == 1  # nothing fetched
        for value in (b"d", b"e"):
            producer.send(topic, value, partition=1)
        producer.flush()
        assert read() == {0: 2, 1: 3}
        assert client.fetched[-1] == {(topic, 1)}
        # past the age limit every partition is read again, moved bound or not
        assert read(known_max_age_s=0.0) == {0: 2, 1: 3}
        assert client.fetched[-1] == {(topic, 0), (topic, 1)}
    finally:
        client.close()
        producer.close()


def test_latest_offsets_of_several_topics_reads_them_together_exactly(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    """One call answers every topic (an empty one, one whose last batch holds several
    records, one only known from an earlier call) as reading each alone does."""
    eden, replay_a, replay_b = (_topic(2, kafka_bootstrap) for _ in range(3))
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=50)
    for i in range(7):  # one record batch per partition: end_offsets() alone under-reports
        producer.send(eden, f"e{i}".encode(), partition=i % 2)
    producer.send(replay_b, b"r", partition=1)
    producer.flush()
    client = lane_reader.ends(kafka_bootstrap)
    known: kafka_ends.KnownEnds = {}
    try:
        topics = [eden, replay_a, replay_b]
        together = kafka_ends.latest_offsets_of(client, topics, known=known)
        alone = {t: kafka_ends.latest_offsets(kafka_bootstrap, t) for t in topics}
        assert (
            together
            == alone
            == {eden: {0: 4, 1: 3}, replay_a: {0: 0, 1: 0}, replay_b: {0: 0, 1: 1}}
        )
        producer.send(eden, b"late", partition=1)
        producer.flush()
        again = kafka_ends.latest_offsets_of(client, topics, known=known)
        assert again[eden] == {0: 4, 1: 4} and again[replay_b] == {0: 0, 1: 1}
    finally:
        client.close()
        producer.close()


@pytest.mark.tansu  # the exact-ends read of a broker whose bounds under-report
def test_latest_offsets_of_returns_the_bounds_a_caller_accepts_without_fetching(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    topic = _topic(2, kafka_bootstrap)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=50)
    for i in range(6):
        producer.send(topic, f"r{i}".encode(), partition=0)
    producer.flush()
    client = SpyEnds(lane_reader.ends(kafka_bootstrap))
    asked: list[dict[str, dict[int, int]]] = []
    try:
        bounds = kafka_ends.latest_offsets_of(
            client, [topic], bounds_suffice=lambda t, b: asked.append({t: b}) is None
        )
        assert bounds == asked[0] and client.fetched == []  # nothing fetched
        assert bounds[topic][0] <= 6 and bounds[topic][1] == 0  # end_offsets(): a lower bound
        exact = kafka_ends.latest_offsets_of(client, [topic], bounds_suffice=lambda t, b: False)
        assert exact == {topic: {0: 6, 1: 0}}
    finally:
        client.close()
        producer.close()


def test_log_starts_of_a_topic_deleted_and_recreated_under_a_reader(kafka_bootstrap: str) -> None:
    """What the planner sees of a reset log: starts at 0 and an end below the old one."""
    from kafka.admin import KafkaAdminClient

    topic = _topic(2, kafka_bootstrap)
    kafka_log.produce(kafka_bootstrap, topic, [f"r{i}".encode() for i in range(40)])
    consumer = kafka_log.new_consumer(kafka_bootstrap)
    try:
        assert kafka_log.log_starts(consumer, topic) == {0: 0, 1: 0}
        before = kafka_ends.latest_offsets(consumer, topic)
        assert sum(before.values()) == 40
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        try:
            admin.delete_topics([topic])
        finally:
            admin.close()
        kafka_log.ensure_topics(kafka_bootstrap, {topic: 2})
        kafka_log.produce(kafka_bootstrap, topic, [b"new"] * 4)
        consumer.poll(timeout_ms=0)  # the reader's metadata as a long-lived one has it
        assert kafka_log.log_starts(consumer, topic) == {0: 0, 1: 0}
        after = kafka_ends.latest_offsets(consumer, topic)
        assert sum(after.values()) == 4
        assert all(after[p] < before[p] for p in before if before[p] > 4)
    finally:
        consumer.close()


@pytest.mark.tansu  # the exact-ends read of a broker whose bounds under-report
def test_latest_offsets_of_defers_a_moving_tail_and_reads_it_exactly_once_quiet(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    """With ``defer_tails``, a partition whose bound moved since the last read is answered
    without a fetch: its last batch waits, and the answer is the start of a record batch
    (Tansu's bound lies one record into the last batch: a plan cut there would make that
    record a tuple of its own), never below the last answer; a caller's ``bounds_suffice``
    is shown the same; once the bound stops moving the next read is exact, and a topic not
    named stays exact."""
    topic, other = _topic(2, kafka_bootstrap), _topic(1, kafka_bootstrap)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=50)
    client = lane_reader.ends(kafka_bootstrap)
    known: kafka_ends.KnownEnds = {}
    fetched: list[set[str]] = []
    read = functools.partial(
        kafka_ends.latest_offsets_of,
        client,
        [topic, other],
        known=known,
        defer_tails=[topic],
        on_fetch=lambda topics, ms: fetched.append(set(topics)),
    )

    def send(n: int, partition: int, to: str = topic) -> None:
        for i in range(n):  # one record batch of n records
            producer.send(to, f"r{i}".encode(), partition=partition)
        producer.flush()

    try:
        send(5, 0)
        assert read() == {topic: {0: 5, 1: 0}, other: {0: 0}}  # nothing known yet: exact
        assert fetched == [{topic}]
        answers = []
        for _ in range(3):
            send(4, 0)
            send(2, 0, other)
            answers.append(read())
        # the moving tail is a batch's start (the last batch waits), never going back
        ends = [a[topic][0] for a in answers]
        assert all(e in (5, 9, 13, 17) and e >= 5 + 4 * i for i, e in enumerate(ends)), ends
        assert ends == sorted(ends)
        shown: list[dict[int, int]] = []
        read(bounds_suffice=lambda t, b: t == topic and shown.append(dict(b)) is None)
        assert shown[0][0] in (13, 17), shown  # a batch's start too: 17 is the end
        assert [a[other][0] for a in answers] == [2, 4, 6]  # not deferred: exact each time
        assert all(f == {other} for f in fetched[1:]), fetched
        # quiet: the bound did not move since the last read, which fetches the exact end
        assert read()[topic] == {0: 17, 1: 0}
        assert fetched[-1] == {topic}
    finally:
        client.close()
        producer.close()


@pytest.mark.tansu  # the exact-ends read of a broker whose bounds under-report
def test_latest_offsets_of_answers_a_reported_end_that_moved_without_asking_the_broker(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    """A ``defer_tails`` partition whose ``reported`` end (a lane's fetch) moved past the
    last answer is answered with it and left out of the ListOffsets request; a reported
    end that did not move, or one of a topic not deferred, changes nothing."""
    topic, other = _topic(2, kafka_bootstrap), _topic(1, kafka_bootstrap)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=50)
    client = SpyEnds(lane_reader.ends(kafka_bootstrap))
    asked = client.asked
    read = functools.partial(
        kafka_ends.latest_offsets_of, client, [topic, other], known={}, defer_tails=[topic]
    )

    def send(n: int, to: str = topic) -> None:
        for i in range(n):
            producer.send(to, f"r{i}".encode(), partition=0)
        producer.flush()

    try:
        send(5)
        send(2, other)
        assert read() == {topic: {0: 5, 1: 0}, other: {0: 2}}
        send(4)
        send(1, other)
        seen = {(topic, 0): 9, (other, 0): 3}  # other's end is not taken: not deferred
        assert read(reported=seen) == {topic: {0: 9, 1: 0}, other: {0: 3}}
        assert asked[-1] == {(topic, 1), (other, 0)}  # Eden's partition 0: no ListOffsets
        for stale in (9, 7):  # unmoved, or below the last answer: the broker is asked
            assert read(reported={(topic, 0): stale}) == {topic: {0: 9, 1: 0}, other: {0: 3}}
            assert (topic, 0) in asked[-1]
    finally:
        client.close()
        producer.close()


@pytest.mark.tansu  # the exact-ends read of a broker whose bounds under-report
def test_latest_offsets_read_after_read_is_exact_on_every_partition(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    """One consumer reads the ends again and again, every read fetching (no known end is
    trusted), with batches of thousands of records appended between some reads: each read
    is exact on all four partitions, once it fetches from the bound (Tansu's bound is the
    start of the last batch: only a record proves an answer is this read's, not one left
    from the read before)."""
    topic = _topic(4, kafka_bootstrap)
    client = lane_reader.ends(kafka_bootstrap, kafka_ends.PLANNER_FETCH_WAIT_MS)
    known: kafka_ends.KnownEnds = {}
    try:
        for i in range(10):
            if i % 3 != 2:  # two reads of three follow an append; the third finds it quiet
                lines = [f"read {i} line {j}".encode() for j in range(6_000)]
                kafka_log.produce(kafka_bootstrap, topic, lines, progress_every=len(lines))
            got = kafka_ends.latest_offsets(client, topic, known=known, known_max_age_s=0.0)
            assert got == kafka_ends.latest_offsets(kafka_bootstrap, topic), i
        assert all(entry[3] for entry in known.values())  # Tansu's bounds under-report
    finally:
        client.close()


def test_a_read_below_the_log_start_raises_and_never_reads_as_empty(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    """Records deleted before they were read (DeleteRecords; retention alike): reading their
    range fails, so no tuple of them is acked as empty and the planner's guard names the
    loss (a reset to the log's start would pass them silently)."""
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient

    topic = _topic(1, kafka_bootstrap)
    kafka_log.produce(kafka_bootstrap, topic, [f"r{i}" for i in range(100)])
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, 0): 50})
    finally:
        admin.close()
    consumer = lane_reader.consumer(kafka_bootstrap)
    try:
        with pytest.raises(Exception, match=r"(?i)out of range|offset"):
            list(lane_reader.read(consumer, topic, 0, 10, 20, timeout_s=10))
        kept = list(lane_reader.read(consumer, topic, 0, 50, 60, timeout_s=10))
    finally:
        lane_reader.close(consumer)
    assert [r.offset for r in kept] == list(range(50, 60))
