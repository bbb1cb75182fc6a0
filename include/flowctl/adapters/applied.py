"""Applied ranges and the durable checkpoint: tuple outcomes applied exactly once (SPEC A, F).

A tuple is an offset range ``[start, end)`` of one topic partition whose boundaries are a
pure function of the offset (docs/flow-control.md), so the same records always form the
same range, whichever topology (blue, green, a restart) processed them. The flusher
records every durable tuple outcome as a row of ``applied_ranges`` *in the same
transaction* as its results; a tuple flushed twice (a crash between the database commit
and the MRWQ delete, a batch Spark re-ran, an overlapping blue-green handover) finds its
row and is skipped. Three outcomes:

- ``applied``: the tuple's results are in the database;
- ``replayed``: its records went to the replay topic; they come back one record per
  tuple under their *original* coordinates (``core.replay`` envelopes), and each of those
  is claimed inside the ``replayed`` row;
- ``dlq``: the records went to the dead-letter topic; nothing to apply.

Every outcome makes the range durable, so the checkpoint (``offsets.next_offset``, the
Kafka offset a restart resumes from) moves over contiguous rows of any outcome, exactly the
cumulative ack of SPEC A: rows 1, 3, 4 leave it after 1; row 2 moves it past 4.

The rules :func:`claim` applies to a new range ``r`` of a partition:

1. a row equal to ``r`` or covering it is a duplicate (``False``), except that a
   ``replayed`` row never makes its own records' replays duplicates: a range inside it,
   or equal to it when the claim comes from the replay topic (``Claim.replay``), is new
   (an exact ``replayed`` row is then updated to the new outcome);
2. a row that overlaps ``r`` without covering it is a :class:`RangeConflict`: boundaries
   are a pure function of the offset, so this means a bug upstream, never data to guess at;
3. without a covering ``replayed`` row, a range wholly below the checkpoint is a
   duplicate (the checkpoint says it is durable: the sink of :mod:`flowctl.adapters.results`
   advances it without rows), and one straddling it is a conflict;
4. an isolated poison record's claim (``Claim.isolated``: one record, ``dlq``, from Eden)
   inside an ``applied`` row is new: the lane isolated the record from its tuple
   (``flowctl.core.isolation``), applied the tuple's good records under the tuple's row
   and dead-lettered that record under its own one-record row nested in it (the reconcile
   classifies an offset by its innermost row). Any other claim inside an ``applied`` row,
   a one-record ``dlq`` without the mark included, is a repeat (rule 1).

The decisions themselves are pure (:mod:`flowctl.core.applied_rules`). Contiguous
``applied`` rows below the checkpoint are merged into one row by
:mod:`flowctl.adapters.applied_coalesce` in each flush's transaction; the rules above
decide every claim as they did on the separate rows (the core module says why).

Functions taking ``conn`` run inside the caller's transaction; those taking
``conn_or_url`` also accept a URL or an engine and then run their own short, retried
transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.db import engine_for, in_transaction
from flowctl.adapters.results import lock_offsets
from flowctl.adapters.schema import dialect_insert, utcnow
from flowctl.core.applied_rules import Claim, PartitionRows, RangeConflict, decide
from flowctl.core.tuples import TopicPartition, TupleRange

__all__ = [
    "Claim",
    "PartitionReplay",
    "RangeConflict",
    "advance_checkpoint",
    "applied_rows",
    "claim",
    "ensure_checkpoint",
    "read_checkpoints",
    "replay_plan",
    "unapplied_gaps",
]

T = TypeVar("T")

#: Ranges of one partition further apart than this are looked up by separate queries, so a
#: replayed record from long ago does not drag every row in between into one read.
_CLUSTER_SPAN = 1 << 16


@dataclass(frozen=True)
class PartitionReplay:
    """What a restarted topology (or one that lost MRWQ items) must dispatch again for
    one partition: every hole in ``[checkpoint, applied_end)``, then everything admitted
    at or after ``applied_end`` (the flusher cannot know how far the planner admitted)."""

    topic: str
    partition: int
    checkpoint: int
    holes: tuple[tuple[int, int], ...]
    applied_end: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


def _check_pipeline(pipeline: str) -> str:
    if not isinstance(pipeline, str) or not pipeline or len(pipeline) > 100:
        raise ValueError(f"pipeline={pipeline!r} must be a non-empty string of <= 100 characters")
    return pipeline


def _check_offset(field: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{field} must be an int >= 0, got {value!r}")
    return value


def _tp(value: TopicPartition | tuple[str, int]) -> TopicPartition:
    try:
        topic, partition = value
    except (TypeError, ValueError):
        raise ValueError(f"topic partition must be (topic, partition), got {value!r}") from None
    if not isinstance(topic, str) or not topic:
        raise ValueError(f"topic must be a non-empty str, got {topic!r}")
    _check_offset("partition", partition)
    return TopicPartition(topic, partition)


def _run(conn_or_url: sa.Connection | sa.Engine | str, what: str, work: Callable[..., T]) -> T:
    if isinstance(conn_or_url, sa.Connection):
        return work(conn_or_url)
    return in_transaction(engine_for(conn_or_url), work, what=what)


def _lock_checkpoints(
    conn: sa.Connection, pipeline: str, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """Read, and lock where the database can, the checkpoint rows of ``tps``.

    A missing row is first inserted at 0 ("nothing durable yet", as the sink of
    :mod:`flowctl.adapters.results` does), so concurrent flushers serialise on the row
    (PostgreSQL: ``FOR UPDATE``; SQLite: the insert takes the database's write lock first).
    """
    locked = lock_offsets(conn, pipeline, [(tp.topic, tp.partition) for tp in tps])
    return {TopicPartition(t, p): n for (t, p), n in locked.items()}


def ensure_checkpoint(
    conn: sa.Connection, pipeline: str, topic: str, partition: int, offset: int
) -> int:
    """Start a partition's checkpoint at ``offset`` if it has none; return the stored one.

    A topology whose first tuple of a partition does not start at 0 (a trimmed topic, a
    start at "latest") must call this before dispatching, or the checkpoint, starting at
    0, could never reach its first applied range.
    """
    _check_pipeline(pipeline)
    tp = _tp((topic, partition))
    _check_offset("offset", offset)
    o = schema.offsets
    conn.execute(
        dialect_insert(conn)(o)
        .values(
            pipeline=pipeline,
            topic=tp.topic,
            partition=tp.partition,
            next_offset=offset,
            updated_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["pipeline", "topic", "partition"])
    )
    return _lock_checkpoints(conn, pipeline, [tp])[tp]


def _rows_overlapping(
    conn: sa.Connection, pipeline: str, tp: TopicPartition, lo: int, hi: int
) -> list[tuple[int, int, str]]:
    a = schema.applied_ranges
    rows = conn.execute(
        sa.select(a.c.start, a.c.end, a.c.outcome)
        .where(
            a.c.pipeline == pipeline,
            a.c.topic == tp.topic,
            a.c.partition == tp.partition,
            a.c.start < hi,
            a.c.end > lo,
        )
        .order_by(a.c.start, a.c.end)
    ).all()
    return [(int(s), int(e), str(o)) for s, e, o in rows]


def _clusters(ranges: list[TupleRange]) -> list[tuple[int, int]]:
    """Spans ``[lo, hi)`` covering the sorted ranges, split where they are far apart."""
    spans: list[tuple[int, int]] = []
    for r in ranges:
        if spans and r.start - spans[-1][1] <= _CLUSTER_SPAN:
            spans[-1] = (spans[-1][0], max(spans[-1][1], r.end))
        else:
            spans.append((r.start, r.end))
    return spans


def claim(conn: sa.Connection, pipeline: str, ranges: Sequence[TupleRange | Claim]) -> list[bool]:
    """Record each range's outcome unless it is already durable; True where it is new.

    Call it in the transaction that applies the new ranges' results: the rows and the
    results then commit (or roll back) together. Ranges are decided in order, so the
    same range twice in one call is True then False. A partial overlap raises
    :class:`RangeConflict` naming both ranges (the caller's transaction must roll back).
    """
    _check_pipeline(pipeline)
    claims = [c if isinstance(c, Claim) else Claim(c) for c in ranges]
    if not claims:
        return []
    by_tp: dict[TopicPartition, list[TupleRange]] = {}
    for c in claims:
        by_tp.setdefault(c.range.topic_partition, []).append(c.range)
    checkpoints = _lock_checkpoints(conn, pipeline, by_tp)
    rows: dict[TopicPartition, PartitionRows] = {}
    for tp, rs in by_tp.items():
        found: list[tuple[int, int, str]] = []
        for lo, hi in _clusters(sorted(rs)):
            found.extend(_rows_overlapping(conn, pipeline, tp, lo, hi))
        rows[tp] = PartitionRows(found)
    a = schema.applied_ranges
    now = utcnow()
    inserts: list[dict[str, object]] = []
    out: list[bool] = []
    for c in claims:
        r = c.range
        tp_rows = rows[r.topic_partition]
        decision = decide(pipeline, c, tp_rows, checkpoints[r.topic_partition])
        if decision == "duplicate":
            out.append(False)
            continue
        if decision == "update":
            conn.execute(
                a.update()
                .where(
                    a.c.pipeline == pipeline,
                    a.c.topic == r.topic,
                    a.c.partition == r.partition,
                    a.c.start == r.start,
                    a.c.end == r.end,
                )
                .values(outcome=c.outcome, applied_at=now)
            )
        else:
            inserts.append(
                {
                    "pipeline": pipeline,
                    "topic": r.topic,
                    "partition": r.partition,
                    "start": r.start,
                    "end": r.end,
                    "outcome": c.outcome,
                    "applied_at": now,
                }
            )
        tp_rows.put((r.start, r.end, c.outcome))
        out.append(True)
    if inserts:
        conn.execute(sa.insert(a), inserts)
    return out


def advance_checkpoint(
    conn: sa.Connection,
    pipeline: str,
    topic_partitions: Iterable[TopicPartition | tuple[str, int]],
) -> dict[TopicPartition, int]:
    """Move each partition's ``offsets.next_offset`` to the end of the highest contiguous
    durable range, and return the checkpoint of each (moved or not).

    Only the contiguous prefix counts (SPEC A's cumulative ack): a range beyond a hole
    waits until the hole is durable.
    """
    _check_pipeline(pipeline)
    tps = [_tp(tp) for tp in topic_partitions]
    checkpoints = _lock_checkpoints(conn, pipeline, tps)
    a = schema.applied_ranges
    o = schema.offsets
    now = utcnow()
    result: dict[TopicPartition, int] = {}
    for tp, position in sorted(checkpoints.items()):
        rows = conn.execute(
            sa.select(a.c.start, a.c.end)
            .where(
                a.c.pipeline == pipeline,
                a.c.topic == tp.topic,
                a.c.partition == tp.partition,
                a.c.end > position,
            )
            .order_by(a.c.start)
        ).all()
        moved = position
        for start, end in rows:
            if int(start) > moved:
                break
            moved = max(moved, int(end))
        if moved != position:
            conn.execute(
                o.update()
                .where(
                    o.c.pipeline == pipeline, o.c.topic == tp.topic, o.c.partition == tp.partition
                )
                .values(next_offset=moved, updated_at=now)
            )
        result[tp] = moved
    return result


def read_checkpoints(
    conn_or_url: sa.Connection | sa.Engine | str, pipeline: str, topic: str | None = None
) -> dict[TopicPartition, int]:
    """The durable checkpoint of every partition of the pipeline (of one topic if given)."""
    _check_pipeline(pipeline)
    o = schema.offsets
    query = sa.select(o.c.topic, o.c.partition, o.c.next_offset).where(o.c.pipeline == pipeline)
    if topic is not None:
        query = query.where(o.c.topic == topic)

    def work(conn: sa.Connection) -> dict[TopicPartition, int]:
        return {TopicPartition(t, int(p)): int(n) for t, p, n in conn.execute(query).all()}

    return _run(conn_or_url, f"reading the checkpoints of {pipeline!r}", work)


def _complement(spans: Iterable[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    holes: list[tuple[int, int]] = []
    position = lo
    for start, end in spans:
        if start > position:
            holes.append((position, min(start, hi)))
        position = max(position, end)
        if position >= hi:
            break
    if position < hi:
        holes.append((position, hi))
    return [(s, e) for s, e in holes if s < e]


def unapplied_gaps(
    conn_or_url: sa.Connection | sa.Engine | str,
    pipeline: str,
    topic: str,
    partition: int,
    start: int,
    end: int,
) -> list[tuple[int, int]]:
    """The offset ranges in ``[max(start, checkpoint), end)`` no durable range covers.

    This is what a restarted topology dispatches first: tuples admitted before the crash
    (or whose MRWQ items were lost) and never made durable. ``end`` is the planner's
    admitted end (exclusive).
    """
    _check_pipeline(pipeline)
    tp = _tp((topic, partition))
    _check_offset("start", start)
    _check_offset("end", end)

    def work(conn: sa.Connection) -> list[tuple[int, int]]:
        checkpoint = read_checkpoints(conn, pipeline, tp.topic).get(tp, 0)
        lo = max(start, checkpoint)
        if lo >= end:
            return []
        rows = _rows_overlapping(conn, pipeline, tp, lo, end)
        return _complement(((s, e) for s, e, _ in rows), lo, end)

    return _run(conn_or_url, f"reading the unapplied ranges of {pipeline!r} {tp}", work)


def applied_rows(
    conn_or_url: sa.Connection | sa.Engine | str, pipeline: str
) -> list[tuple[TupleRange, str]]:
    """Every durable range of the pipeline with its outcome, in order (for reports, tests)."""
    _check_pipeline(pipeline)
    a = schema.applied_ranges
    query = (
        sa.select(a.c.topic, a.c.partition, a.c.start, a.c.end, a.c.outcome)
        .where(a.c.pipeline == pipeline)
        .order_by(a.c.topic, a.c.partition, a.c.start, a.c.end)
    )

    def work(conn: sa.Connection) -> list[tuple[TupleRange, str]]:
        return [
            (TupleRange(t, int(p), int(s), int(e)), str(o))
            for t, p, s, e, o in conn.execute(query).all()
        ]

    return _run(conn_or_url, f"reading the applied ranges of {pipeline!r}", work)


def replay_plan(
    conn_or_url: sa.Connection | sa.Engine | str, pipeline: str
) -> list[PartitionReplay]:
    """Per partition: the checkpoint, the holes up to the highest durable end, and that end.

    After the MRWQ lost items the flusher cannot know which tuples they were; everything
    not durable must be dispatched again: the holes, and everything admitted from
    ``applied_end`` on. ``applied_ranges`` makes the part that was durable after all a
    no-op.
    """
    _check_pipeline(pipeline)
    a = schema.applied_ranges

    def work(conn: sa.Connection) -> list[PartitionReplay]:
        checkpoints = read_checkpoints(conn, pipeline)
        rows = conn.execute(
            sa.select(a.c.topic, a.c.partition, a.c.start, a.c.end)
            .where(a.c.pipeline == pipeline)
            .order_by(a.c.topic, a.c.partition, a.c.start)
        ).all()
        spans: dict[TopicPartition, list[tuple[int, int]]] = {}
        for t, p, s, e in rows:
            tp = TopicPartition(t, int(p))
            if int(e) > checkpoints.get(tp, 0):
                spans.setdefault(tp, []).append((int(s), int(e)))
        plans = []
        for tp in sorted(set(checkpoints) | set(spans)):
            checkpoint = checkpoints.get(tp, 0)
            beyond = spans.get(tp, [])
            applied_end = max([checkpoint, *(e for _, e in beyond)])
            holes = _complement(beyond, checkpoint, applied_end)
            plans.append(
                PartitionReplay(tp.topic, tp.partition, checkpoint, tuple(holes), applied_end)
            )
        return plans

    return _run(conn_or_url, f"planning the replay of {pipeline!r}", work)
