"""A lane's reads (``flowctl.spark.flow.lane_read.prefetch``) over both readers against the
real broker (Apache Kafka): contiguous tuples read as one span and split back by offset, tuples
over transaction markers, a tuple of markers only, a read that fails its span only, and
librdkafka's consumer left unassigned after a task's reads."""

from __future__ import annotations

import secrets

import pytest

from flowctl.adapters import kafka_log
from flowctl.core.record import Record
from flowctl.core.tuples import TupleRange
from flowctl.spark.flow.lane_read import prefetch
from flowctl.spark.flow.plan import PlanEntry
from tests.lane_readers import LaneReader
from tests.librdkafka import Rec, produce

pytestmark = pytest.mark.integration


def _entry(topic: str, partition: int, start: int, end: int) -> PlanEntry:
    return PlanEntry(TupleRange(topic, partition, start, end), 1, False, f"{topic}.from")


def test_prefetch_splits_spans_into_tuples_exactly_over_gaps(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    """Partition 0: 30 records in transactions of five (markers at 5, 11, ..., 35);
    partition 1: 12 plain records. The lane's tuples, out of order, some contiguous."""
    topic = f"lane.{secrets.token_hex(4)}"
    kafka_log.ensure_topics(kafka_bootstrap, {topic: 2})
    sent = [Rec(f"tx {i}".encode(), key=b"k", partition=0) for i in range(30)]
    txn = f"flowctl-test-{secrets.token_hex(4)}"
    produce(kafka_bootstrap, topic, sent, transactional_id=txn, per_transaction=5)
    produce(kafka_bootstrap, topic, [Rec(f"p{i}".encode(), partition=1) for i in range(12)])
    markers = {5, 11, 17, 23, 29, 35}
    tuples = [(0, 12, 24), (1, 4, 8), (0, 0, 6), (0, 6, 12), (0, 35, 36), (1, 0, 4), (0, 30, 35)]
    entries = [_entry(topic, p, s, e) for p, s, e in tuples]
    ends: dict[tuple[str, int], int] = {}
    got = prefetch(entries, kafka_bootstrap, 10.0, lane_reader.name, ends=ends)
    assert ends == {(topic, 0): 36, (topic, 1): 12}  # the fetches' high watermarks
    for p, s, e in tuples:
        records = got[TupleRange(topic, p, s, e).id]
        assert not isinstance(records, Exception), records
        assert all(isinstance(r, Record) and r.partition == p for r in records)
        want = [o for o in range(s, e) if p == 1 or o not in markers]
        assert [r.offset for r in records] == want, (p, s, e)
    first = got[TupleRange(topic, 0, 0, 6).id]
    assert not isinstance(first, Exception)
    assert [(r.value, r.key) for r in first] == [(f"tx {i}".encode(), b"k") for i in range(5)]
    if lane_reader.rdkafka:  # idle between tasks: its fetcher asks the broker nothing
        assert lane_reader.cached(kafka_bootstrap).assignment() == []


def test_a_span_that_cannot_be_read_fails_its_tuples_only(
    kafka_bootstrap: str, lane_reader: LaneReader
) -> None:
    topic = f"lane.{secrets.token_hex(4)}"
    kafka_log.ensure_topics(kafka_bootstrap, {topic: 2})
    produce(kafka_bootstrap, topic, [Rec(b"a", partition=0), Rec(b"b", partition=0)])
    entries = [_entry(topic, 0, 0, 2), _entry(topic, 1, 0, 5)]  # partition 1 is empty
    ends: dict[tuple[str, int], int] = {}
    got = prefetch(entries, kafka_bootstrap, 1.0, lane_reader.name, ends=ends)
    assert ends == {(topic, 0): 2}  # a span that failed reports no end
    read = got[TupleRange(topic, 0, 0, 2).id]
    assert not isinstance(read, Exception)
    assert [r.value for r in read] == [b"a", b"b"]
    failed = got[TupleRange(topic, 1, 0, 5).id]
    assert isinstance(failed, kafka_log.KafkaReadTimeout), failed
    assert f"{topic}/1 offsets [0, 5)" in str(failed)
