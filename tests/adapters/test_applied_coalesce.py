"""Coalescing ``applied_ranges`` on real SQLite and PostgreSQL (and the real memcached MRWQ).

The rows below the checkpoint merge; exactness (every claim decided as before), the
checkpoint, the gaps and the reconcile's classification of every offset stay the same.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

import pytest
import sqlalchemy as sa

from flowctl.adapters import schema, schema_setup
from flowctl.adapters.applied import (
    Claim,
    advance_checkpoint,
    applied_rows,
    claim,
    read_checkpoints,
    replay_plan,
    unapplied_gaps,
)
from flowctl.adapters.applied_coalesce import coalesce
from flowctl.adapters.db import engine_for
from flowctl.adapters.durable_cut import read_durable_cut
from flowctl.adapters.memcached_store import MemcachedStore
from flowctl.adapters.mrwq_flusher import FlusherService
from flowctl.core.clock import FakeClock
from flowctl.core.flusher import FlushPolicy
from flowctl.core.persistence import MrwqWriter, item_key, mrwq_result
from flowctl.core.tuples import TopicPartition, TupleRange
from flowctl.spark.reconcile import Classifier

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

TOPIC = "co.eden"
TP = TopicPartition(TOPIC, 0)

sums_metadata = sa.MetaData()
sums = sa.Table(
    "coalesce_test_sums",
    sums_metadata,
    sa.Column("pipeline", sa.String(100), primary_key=True),
    sa.Column("n", sa.BigInteger, nullable=False),
)


def r(start: int, end: int) -> TupleRange:
    return TupleRange(TOPIC, 0, start, end)


def rows_of(url: str, pipeline: str) -> list[tuple[int, int, str]]:
    return [(t.start, t.end, o) for t, o in applied_rows(url, pipeline)]


def classes(url: str, pipeline: str, end: int) -> list[str]:
    """The reconcile's class of every offset below ``end``, from its durable cut."""
    checkpoints, rows, *_ = read_durable_cut(url, pipeline, TOPIC, lambda _c, _p: {})
    classify = Classifier(rows.get(0, []), checkpoints.get(0, 0))
    return [classify.outcome(o) for o in range(end)]


def test_a_merge_keeps_claims_gaps_and_the_reconcile_as_they_were(database_url: str) -> None:
    engine = engine_for(database_url)
    schema_setup.ensure_schema(engine)
    p = f"co{secrets.token_hex(3)}"
    history = [
        *(Claim(r(s, s + 5)) for s in (0, 5, 10, 15, 20)),
        Claim(r(12, 13), "dlq", isolated=True),  # a poison record isolated from [10, 15)
        Claim(r(25, 30), "replayed"),
        Claim(r(26, 27), "applied", replay=True),  # one of its records back
        Claim(r(30, 31)),  # a one-record tuple (a trailing partial one)
        Claim(r(31, 36)),
        Claim(r(36, 37)),  # another, inside a run: it merges like any other
        Claim(r(37, 41)),
        Claim(r(46, 51)),  # beyond a hole: the checkpoint stops at 41
    ]
    with engine.begin() as conn:
        assert claim(conn, p, history) == [True] * len(history)
        assert advance_checkpoint(conn, p, [TP]) == {TP: 41}
    before = classes(database_url, p, 51)
    with engine.begin() as conn:
        assert coalesce(conn, p, {}, {TP: 41}) == (5 - 1) + (4 - 1)
    assert rows_of(database_url, p) == [
        (0, 25, "applied"),
        (12, 13, "dlq"),
        (25, 30, "replayed"),
        (26, 27, "applied"),
        (30, 41, "applied"),
        (46, 51, "applied"),
    ]
    assert classes(database_url, p, 51) == before
    assert unapplied_gaps(engine, p, TOPIC, 0, 0, 51) == [(41, 46)]
    (plan,) = replay_plan(engine, p)
    assert (plan.checkpoint, plan.holes, plan.applied_end) == (41, ((41, 46),), 51)

    again = [
        *history,
        Claim(r(15, 20), "dlq"),  # a whole tuple dead-lettered by a re-run: still a repeat
        Claim(r(36, 37), "dlq"),  # a one-record tuple dead-lettered by a re-run: the same
        Claim(r(13, 14), "dlq"),  # a one-record dlq without the isolated mark: a repeat
        Claim(r(27, 28), "applied", replay=True),  # another record of the replayed tuple
        Claim(r(41, 46)),  # the hole
    ]
    with engine.begin() as conn:
        fresh = claim(conn, p, again)
        assert advance_checkpoint(conn, p, [TP]) == {TP: 51}
        assert coalesce(conn, p, {TP: 41}, {TP: 51}) == 2
        poison = claim(conn, p, [Claim(r(33, 34), "dlq", isolated=True)])
    assert fresh == [False] * (len(history) + 3) + [True, True]
    assert poison == [True]  # a poison record isolated from [31, 36), inside the merged row
    assert rows_of(database_url, p) == [
        (0, 25, "applied"),
        (12, 13, "dlq"),
        (25, 30, "replayed"),
        (26, 27, "applied"),
        (27, 28, "applied"),
        (30, 51, "applied"),
        (33, 34, "dlq"),
    ]
    after = classes(database_url, p, 51)
    assert (after[33], after[12], after[36]) == ("dlq", "dlq", "counted")
    assert unapplied_gaps(engine, p, TOPIC, 0, 0, 51) == []


def apply_sum(conn: sa.Connection, pipeline: str, results: Sequence[Any]) -> int:
    """Adds the results up (not idempotent: a tuple applied twice would show)."""
    total = sum(int(v["n"]) for v in results)
    stmt = schema.dialect_insert(conn)(sums).values(pipeline=pipeline, n=total)
    conn.execute(
        stmt.on_conflict_do_update(index_elements=["pipeline"], set_={"n": sums.c.n + total})
    )
    return 1


def stored_sum(url: str, pipeline: str) -> int:
    with engine_for(url).connect() as conn:
        return int(
            conn.execute(sa.select(sums.c.n).where(sums.c.pipeline == pipeline)).scalar() or 0
        )


def _started_flusher(
    memcached_address: str, database_url: str, max_length: int
) -> tuple[str, MemcachedStore, FakeClock, FlusherService, MrwqWriter]:
    """A new pipeline's real flusher (merging every 5 s of ``clock``) and its MRWQ writer."""
    sums_metadata.create_all(engine_for(database_url))
    p = f"co{secrets.token_hex(3)}"
    store = MemcachedStore(memcached_address)
    clock = FakeClock()
    service = FlusherService(
        store,
        database_url,
        p,
        apply_sum,
        policy=FlushPolicy(max_length=max_length, update_time_s=1.0),
        clock=clock,
        namespace=f"mrwq.{p}",
        sleep=lambda _s: None,
        coalesce_every_s=5.0,
    )
    assert service.start() is None
    return p, store, clock, service, MrwqWriter(store, f"mrwq.{p}")


def test_the_flusher_merges_once_per_interval_and_leaves_nothing_in_memcached(
    memcached_address: str, database_url: str
) -> None:
    """Through the real flusher: rows merge in a flush once ``coalesce_every_s`` passed,
    re-flushed tuples stay duplicates, and memcached holds no item once it is flushed."""
    p, store, clock, service, writer = _started_flusher(memcached_address, database_url, 10)
    ns = writer.namespace
    tuples = [r(10 * k, 10 * k + 10) for k in range(40)]

    def append(ts: list[TupleRange]) -> range:
        return writer.append_many([(t.id, [mrwq_result("applied", {"n": t.size})]) for t in ts])

    seqs = append(tuples[:20])
    service.flush_all(timeout_s=30)
    assert len(rows_of(database_url, p)) == 20  # not due yet
    clock.advance(5.0)
    seqs = range(seqs.start, append(tuples[20:]).stop)
    service.flush_all(timeout_s=30)  # two flushes of 10: the first one merges
    assert rows_of(database_url, p) == [(0, 300, "applied")] + [
        (t.start, t.end, "applied") for t in tuples[30:]
    ]
    assert read_checkpoints(database_url, p) == {TP: 400}
    assert stored_sum(database_url, p) == 400
    assert store.get_many([item_key(ns, s) for s in seqs]) == {}

    append(tuples[::3])  # a re-run batch: every tuple a duplicate inside the merged row
    clock.advance(5.0)
    drained = service.flush_all(timeout_s=30)
    assert (drained.applied, drained.duplicates) == (0, len(tuples[::3]))
    assert stored_sum(database_url, p) == 400
    assert rows_of(database_url, p) == [(0, 400, "applied")]


def test_a_partition_absent_from_the_flush_that_ends_an_interval_is_merged_later(
    memcached_address: str, database_url: str
) -> None:
    """Each partition has its own interval: partition 1's tuples are never in the flushes
    where partition 0's interval ends (a stream that keeps step with a steady feed flushes
    that way), yet partition 1's rows merge in its own next flush past its interval."""
    p, _, clock, service, writer = _started_flusher(memcached_address, database_url, 100)

    def flush(partition: int, first: int) -> None:
        ts = [TupleRange(TOPIC, partition, 10 * k, 10 * k + 10) for k in range(first, first + 5)]
        writer.append_many([(t.id, [mrwq_result("applied", {"n": t.size})]) for t in ts])
        service.flush_all(timeout_s=30)

    for step in range(4):
        flush(1, 5 * step)  # partition 1 alone, within the interval
        clock.advance(5.0)
        flush(0, 5 * step)  # partition 0 alone, where the interval ends
    ones = [
        (s, e)
        for t, o in applied_rows(database_url, p)
        if t.partition == 1
        for s, e in [(t.start, t.end)]
    ]
    assert ones == [(0, 200)]  # merged in its own flushes, the last one included
    assert read_checkpoints(database_url, p) == {TP: 200, TopicPartition(TOPIC, 1): 200}
    assert stored_sum(database_url, p) == 400
