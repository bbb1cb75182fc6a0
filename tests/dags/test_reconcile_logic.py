"""Reconcile logic: which records count, chunking, merging, comparing; the one-snapshot read.

The Spark run itself is in tests/e2e/test_reconcile_e2e.py; here the pieces it is built
from are checked on their own, the snapshot on real SQLite and PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
import sqlalchemy as sa

from flowctl.adapters import applied
from flowctl.adapters.db import engine_for
from flowctl.adapters.schema import word_counts
from flowctl.adapters.schema_setup import ensure_schema
from flowctl.core.tuples import TupleRange
from flowctl.pipelines.config import load_pipeline_config
from flowctl.pipelines.sinks import result_store
from flowctl.pipelines.wordcount import apply_records
from flowctl.spark.reconcile import (
    COUNTED,
    DLQ,
    NOT_DURABLE,
    PENDING,
    SKIPPED,
    Classifier,
    ReconcileReport,
    Snapshot,
    compare,
    describe,
    merge_references,
    plan_chunks,
    read_snapshot,
)
from flowctl.spark.reconcile_waiting import stalled, waiting

EDEN = "wordcount.eden"
#: The word count's apply/stored, routed as the flusher and reconcile route them ([sink]).
WORDCOUNT = result_store(load_pipeline_config("wordcount"))


def test_classifier_follows_rows_then_the_checkpoint() -> None:
    rows = [(10, 20, "applied"), (20, 30, "dlq"), (30, 40, "replayed"), (33, 34, "applied")]
    c = Classifier(rows, checkpoint=5)
    assert [c.outcome(o) for o in (0, 4, 5, 9)] == [COUNTED, COUNTED, NOT_DURABLE, NOT_DURABLE]
    assert [c.outcome(o) for o in (10, 19, 20, 29)] == [COUNTED, COUNTED, DLQ, DLQ]
    # A replayed range: its records wait in a replay topic until re-applied one by one.
    assert [c.outcome(o) for o in (30, 33, 34, 39, 40)] == [
        PENDING, COUNTED, PENDING, PENDING, NOT_DURABLE,
    ]  # fmt: skip


def test_a_dead_lettered_replay_inside_a_replayed_range_is_dlq() -> None:
    c = Classifier([(0, 10, "replayed"), (4, 5, "dlq")], checkpoint=10)
    assert [c.outcome(o) for o in (3, 4, 5)] == [PENDING, DLQ, PENDING]


def test_chunks_cover_each_partition_up_to_its_highest_durable_offset() -> None:
    snap = Snapshot({0: 25, 1: 0}, {1: [(40, 50, "applied")], 2: [(0, 3, "dlq")]}, {})
    chunks = plan_chunks(EDEN, snap, chunk_records=10)
    spans = [(c.partition, c.start, c.end) for c in chunks]
    assert spans == [
        (0, 0, 10), (0, 10, 20), (0, 20, 25),
        (1, 0, 10), (1, 10, 20), (1, 20, 30), (1, 30, 40), (1, 40, 50),
        (2, 0, 3),
    ]  # fmt: skip
    assert chunks[7].rows == ((40, 50, "applied"),) and chunks[6].rows == ()
    with pytest.raises(ValueError, match="chunk_records=0"):
        plan_chunks(EDEN, snap, 0)


def test_partial_references_merge_key_by_key() -> None:
    assert merge_references([{"a": 1, "b": 2}, {"b": 3, "c": 4}, {}]) == {"a": 1, "b": 5, "c": 4}
    nested = [{"rows": 2, "status": {"2xx": 2}}, {"rows": 1, "status": {"5xx": 1}}]
    assert merge_references(nested) == {"rows": 3, "status": {"2xx": 2, "5xx": 1}}
    assert merge_references([{"a": "text"}]) is None
    assert merge_references([{"a": 1}, {"a": {"x": 1}}]) is None


def test_compare_reports_every_differing_key_and_the_first_n() -> None:
    ref = {"a": 1, "b": 2, "c": 3, "d": 4}
    stored = {"a": 1, "b": 3, "d": 4, "e": 1}
    assert compare(ref, stored, 2) == (3, [("b", 2, 3), ("c", 3, None)])
    assert compare(ref, dict(ref), 5) == (0, [])


def test_describe_names_the_differences_and_the_excluded_records() -> None:
    report = ReconcileReport(
        "wordcount", {COUNTED: 10, DLQ: 2}, ["wordcount.eden/0/7"], [("the", 5, 6)], 1, 3, 3
    )
    text = describe(report)
    assert "MISMATCH: 1 key(s) differ" in text and "'the': 5 != 6" in text
    assert "excluded 2 dead-lettered record(s)" in text and "wordcount.eden/0/7" in text


class _FlushingDuringRead:
    """The word-count definition whose ``stored`` first lets a flusher commit elsewhere.

    That is the race a running stream creates: a flush between the reads of the
    checkpoint and of the results. The snapshot must not see it.
    """

    def __init__(self, url: str) -> None:
        self.url = url

    def stored(self, conn: sa.Connection, pipeline: str) -> dict[str, Any]:
        other = sa.create_engine(self.url)  # a separate pool: another session
        try:
            apply_records(other, pipeline, [(EDEN, 0, 3, b"late words")])
        finally:
            other.dispose()
        return WORDCOUNT.stored(conn, pipeline)


def test_the_snapshot_is_one_consistent_cut(database_url: str) -> None:
    engine = engine_for(database_url)
    ensure_schema(engine)
    apply_records(
        engine, "wordcount", [(EDEN, 0, 0, b"a b"), (EDEN, 0, 1, b"b"), (EDEN, 0, 2, b"c")]
    )
    with engine.begin() as conn:
        applied.claim(conn, "wordcount", [applied.Claim(TupleRange(EDEN, 1, 0, 5), "dlq")])
    snap = read_snapshot(database_url, "wordcount", EDEN, _FlushingDuringRead(database_url))
    assert snap.checkpoints == {0: 3, 1: 0}
    assert snap.rows == {1: [(0, 5, "dlq")]}
    assert snap.stored == {"a": 1, "b": 2, "c": 1}
    # The concurrent flush did land, after the snapshot.
    with engine.connect() as conn:
        late = conn.execute(
            sa.select(word_counts.c.count).where(word_counts.c.word == "late")
        ).scalar()
    assert late == 1


def test_a_poison_record_isolated_inside_an_applied_tuple_is_dlq() -> None:
    c = Classifier([(0, 10, "applied"), (4, 5, "dlq"), (7, 8, "dlq"), (10, 20, "dlq")], 0)
    assert [c.outcome(o) for o in (3, 4, 5, 7, 8, 9, 10, 19, 20)] == [
        COUNTED, DLQ, COUNTED, DLQ, COUNTED, COUNTED, DLQ, DLQ, NOT_DURABLE,
    ]  # fmt: skip


def test_chunks_leave_out_the_ranges_skipped_as_lost() -> None:
    snap = Snapshot({0: 40, 1: 30}, {}, {}, skipped={0: [(5, 20), (18, 25)], 1: [(0, 30)]})
    spans = [(c.partition, c.start, c.end) for c in plan_chunks(EDEN, snap, chunk_records=10)]
    assert spans == [(0, 0, 5), (0, 25, 35), (0, 35, 40)]


NOW = dt.datetime(2026, 11, 26, 6, 0, tzinfo=dt.UTC)
OLD_MS = int((NOW - dt.timedelta(minutes=30)).timestamp() * 1000)
NEW_MS = int((NOW - dt.timedelta(minutes=1)).timestamp() * 1000)


def test_a_stream_is_stalled_when_old_records_wait_and_no_checkpoint_moved() -> None:
    waiting = {0: 20_000, 1: 5}
    why = stalled({}, None, waiting, {0: OLD_MS, 1: NEW_MS}, NOW, 600.0)
    assert why == (
        "no durable progress for 10 minute(s) over a log that has records (no checkpoint "
        "yet): partition 0 has 20000 record(s) past the checkpoint 0"
    )
    moved_long_ago = NOW - dt.timedelta(minutes=20)
    assert "checkpoint last moved 2026-11-26T05:40:00+00:00" in str(
        stalled({0: 7}, moved_long_ago, waiting, {0: OLD_MS}, NOW, 600.0)
    )


def test_a_busy_stream_fresh_records_or_nothing_waiting_is_not_stalled() -> None:
    recently = NOW - dt.timedelta(minutes=2)
    assert stalled({0: 7}, recently, {0: 20_000}, {0: OLD_MS}, NOW, 600.0) is None  # moving
    assert stalled({}, None, {0: 20_000}, {0: NEW_MS}, NOW, 600.0) is None  # just written
    assert stalled({}, None, {}, {}, NOW, 600.0) is None  # the log is durable up to its end


def test_describe_lists_skipped_ranges_the_part_not_durable_and_a_stall() -> None:
    report = ReconcileReport("wordcount", {COUNTED: 10, SKIPPED: 150})
    report.skipped = ["wordcount.eden partition 0: offsets [100, 250) (150 record(s)) skipped"]
    report.not_durable = {0: 12, 2: 3}
    report.stall = "no durable progress for 10 minute(s) over a log that has records (...)"
    text = describe(report)
    assert "excluded 150 record(s) lost before processing and skipped" in text
    assert "  wordcount.eden partition 0: offsets [100, 250) (150 record(s)) skipped" in text
    assert (
        "not durable yet: 15 record(s) past the checkpoint (partition 0: 12, partition 2: 3)"
        in (text)
    )
    assert "NO DURABLE PROGRESS: no durable progress for 10 minute(s)" in text
    assert "OK: the stored results equal" in text
    assert "not durable yet: 0 record(s) past the checkpoint\n" in describe(
        ReconcileReport("wordcount")
    )


def test_the_snapshot_holds_the_skipped_ranges_and_when_a_checkpoint_moved(
    database_url: str,
) -> None:
    from flowctl.adapters.data_loss import record_skip
    from flowctl.core.data_loss import LossKind, LostRange

    engine = engine_for(database_url)
    ensure_schema(engine)
    snap = read_snapshot(database_url, "wordcount", EDEN, WORDCOUNT)
    assert (snap.skipped, snap.progressed_at) == ({}, None)
    before = dt.datetime.now(dt.UTC)
    lost = LostRange(EDEN, 1, 0, 40, LossKind.LOG_START, "the log now starts at 40")
    record_skip(database_url, "wordcount", "wordcount-blue-1", lost)
    snap = read_snapshot(database_url, "wordcount", EDEN, WORDCOUNT)
    assert snap.skipped == {1: [(0, 40)]} and snap.checkpoints == {1: 40}
    assert snap.progressed_at is not None and snap.progressed_at >= before - dt.timedelta(seconds=1)


@pytest.mark.integration
def test_the_part_not_durable_is_read_from_a_real_log_over_a_partial_checkpoint(
    kafka_bootstrap: str,
) -> None:
    """The motivating case: 20 records in the log, nothing durable on partition 0."""
    import secrets

    from flowctl.adapters import kafka_ends, kafka_log

    topic = f"t.{secrets.token_hex(4)}"
    kafka_log.ensure_topics(kafka_bootstrap, {topic: 2})
    kafka_log.produce(kafka_bootstrap, topic, [f"r{i}".encode() for i in range(40)])
    ends = kafka_ends.latest_offsets(kafka_bootstrap, topic)
    checkpoints = {1: ends[1]}  # partition 1 all durable, partition 0 nothing
    not_durable, first = waiting(kafka_bootstrap, topic, checkpoints)
    assert not_durable == {0: ends[0]} and set(first) == {0}
    produced_ms = first[0]
    assert produced_ms is not None
    later = dt.datetime.fromtimestamp(produced_ms / 1000, dt.UTC) + dt.timedelta(minutes=11)
    why = stalled(checkpoints, None, not_durable, first, later, 600.0)
    assert why is not None and f"partition 0 has {ends[0]} record(s) past the checkpoint 0" in why
    assert "partition 1" not in why
    assert (
        stalled(checkpoints, None, not_durable, first, later - dt.timedelta(minutes=5), 600.0)
        is None
    )


@pytest.mark.integration
def test_a_topic_not_created_yet_has_nothing_waiting(kafka_bootstrap: str) -> None:
    import secrets

    assert waiting(kafka_bootstrap, f"t.{secrets.token_hex(4)}", {}) == ({}, {})
