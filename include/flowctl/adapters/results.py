"""The idempotent word-count sink: results and the durable checkpoint in one transaction.

A micro-batch may be applied more than once (a Spark retry, a restart that
replays the last batch, an overlapping blue-green handover). The sink makes
that harmless: for every topic partition it keeps ``offsets.next_offset``
and, in the same transaction that adds the counts, applies only records at or
after it and then advances it. Counts and checkpoint never disagree, so a
crash repeats work and never loses or double-counts it.

Two entry points:

- :func:`apply_new_records` takes the raw records ``(topic, partition, offset,
  value)`` and a counting function (the word count's tokeniser,
  :func:`flowctl.pipelines.wordcount.apply_records`) and does everything
  (filter, count, upsert, advance). It is always correct.
- :func:`apply_counted_spans` takes counts already aggregated elsewhere (on
  Spark executors) together with the exact offset span each partition
  contributed. Aggregated counts cannot be filtered record by record, so a
  batch is applied whole or skipped whole; a batch that is only partly applied
  already raises :class:`PartialOverlap`, and the caller falls back to
  :func:`apply_new_records`.

The flow-controlled topologies write their results through declarative sinks
(:mod:`flowctl.adapters.sink_sql`); :func:`word_counts` and :func:`total` read
``word_counts`` whichever path wrote it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.db import engine_for, in_transaction
from flowctl.adapters.schema import dialect_insert, utcnow

#: One log record as the sink needs it: (topic, partition, offset, value).
Record = tuple[str, int, int, bytes | str]


class PartialOverlap(RuntimeError):
    """Pre-aggregated counts overlap the durable checkpoint only in part."""


@dataclass(frozen=True)
class PartitionSpan:
    """The offsets one topic partition contributed to a batch: ``first..last`` inclusive."""

    topic: str
    partition: int
    first_offset: int
    last_offset: int
    records: int

    def __post_init__(self) -> None:
        if self.first_offset < 0 or self.last_offset < self.first_offset:
            raise ValueError(
                f"PartitionSpan {self.topic}/{self.partition}: bad offsets "
                f"first_offset={self.first_offset!r}, last_offset={self.last_offset!r}"
            )
        if self.records < 1 or self.records > self.last_offset - self.first_offset + 1:
            raise ValueError(
                f"PartitionSpan {self.topic}/{self.partition}: records={self.records!r} does not "
                f"fit offsets {self.first_offset}..{self.last_offset}"
            )


@dataclass(frozen=True)
class BatchOutcome:
    """What one application of a batch did."""

    applied_records: int
    skipped_records: int
    words_added: int
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)


def lock_offsets(
    conn: sa.Connection, pipeline: str, keys: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """Read (and lock, where the database can) the checkpoint of ``keys``.

    Missing rows are first inserted at 0 (= "nothing applied yet"), so two
    writers racing on a new partition serialise on the row instead of both
    applying the same records.
    """
    o = schema.offsets
    keys = sorted(set(keys))
    if not keys:
        return {}
    now = utcnow()
    conn.execute(
        dialect_insert(conn)(o)
        .values(
            [
                {
                    "pipeline": pipeline,
                    "topic": t,
                    "partition": p,
                    "next_offset": 0,
                    "updated_at": now,
                }
                for t, p in keys
            ]
        )
        .on_conflict_do_nothing(index_elements=["pipeline", "topic", "partition"])
    )
    topics = sorted({t for t, _ in keys})
    rows = conn.execute(
        sa.select(o.c.topic, o.c.partition, o.c.next_offset)
        .where(o.c.pipeline == pipeline, o.c.topic.in_(topics))
        .order_by(o.c.topic, o.c.partition)  # one lock order for every writer: no deadlock
        .with_for_update()
    ).all()
    stored = {(t, int(p)): int(n) for t, p, n in rows}
    return {k: stored[k] for k in keys}


def add_counts(conn: sa.Connection, pipeline: str, counts: Mapping[str, int]) -> None:
    """Add ``counts`` to ``word_counts`` (portable upsert) in the caller's transaction."""
    if not counts:
        return
    w = schema.word_counts
    stmt = dialect_insert(conn)(w)
    stmt = stmt.on_conflict_do_update(
        index_elements=["pipeline", "word"], set_={"count": w.c.count + stmt.excluded.count}
    )
    conn.execute(stmt, [{"pipeline": pipeline, "word": k, "count": n} for k, n in counts.items()])


def _advance(
    conn: sa.Connection,
    pipeline: str,
    stored: Mapping[tuple[str, int], int],
    last_applied: Mapping[tuple[str, int], int],
) -> dict[tuple[str, int], int]:
    o = schema.offsets
    now = utcnow()
    result = dict(stored)
    for (topic, partition), last in last_applied.items():
        nxt = max(stored[(topic, partition)], last + 1)
        result[(topic, partition)] = nxt
        conn.execute(
            o.update()
            .where(o.c.pipeline == pipeline, o.c.topic == topic, o.c.partition == partition)
            .values(next_offset=nxt, updated_at=now)
        )
    return result


def _check_pipeline(pipeline: str) -> None:
    if not isinstance(pipeline, str) or not pipeline:
        raise ValueError(f"pipeline={pipeline!r} must be a non-empty string")


def apply_new_records(
    url_or_engine: str | sa.Engine,
    pipeline: str,
    records: Iterable[Record],
    count: Callable[[list[bytes | str]], Mapping[str, int]],
) -> BatchOutcome:
    """Count the records not yet applied, add them, advance the checkpoint: one transaction.

    Records below a partition's stored ``next_offset`` are skipped, so
    applying the same records twice counts them once. ``count`` turns the new
    records' values into counts (the pipeline's tokeniser: no text rules here).
    """
    _check_pipeline(pipeline)
    batch = list(records)
    for record in batch:
        if len(record) != 4 or not isinstance(record[2], int) or record[2] < 0:
            raise ValueError(f"record={record!r} must be (topic, partition, offset >= 0, value)")
    engine = engine_for(url_or_engine)

    def work(conn: sa.Connection) -> BatchOutcome:
        stored = lock_offsets(conn, pipeline, ((t, p) for t, p, _, _ in batch))
        values: list[bytes | str] = []
        last: dict[tuple[str, int], int] = {}
        seen: set[tuple[str, int, int]] = set()
        for topic, partition, offset, value in batch:
            if offset < stored[(topic, partition)] or (topic, partition, offset) in seen:
                continue
            seen.add((topic, partition, offset))
            values.append(value)
            last[(topic, partition)] = max(last.get((topic, partition), -1), offset)
        applied = len(values)
        counts = Counter(count(values)) if values else Counter()
        add_counts(conn, pipeline, counts)
        next_offsets = _advance(conn, pipeline, stored, last)
        return BatchOutcome(applied, len(batch) - applied, sum(counts.values()), next_offsets)

    return in_transaction(engine, work, what=f"applying {len(batch)} records to {pipeline!r}")


def apply_counted_spans(
    url_or_engine: str | sa.Engine,
    pipeline: str,
    counts: Mapping[str, int],
    spans: Sequence[PartitionSpan],
) -> BatchOutcome:
    """Add counts aggregated from exactly ``spans``, unless that batch is already applied.

    All spans new (stored ``next_offset <= first_offset``): the counts are
    added and the checkpoint advances past each span. All spans already applied
    (stored ``next_offset > last_offset``): nothing changes. Anything else
    raises :class:`PartialOverlap` with nothing written.
    """
    _check_pipeline(pipeline)
    keys = [(s.topic, s.partition) for s in spans]
    if len(set(keys)) != len(keys):
        raise ValueError(f"spans={list(spans)!r} name a topic partition more than once")
    for word, n in counts.items():
        if not isinstance(n, int) or n < 1:
            raise ValueError(f"count of word={word!r} is {n!r}; counts must be integers >= 1")
    if counts and not spans:
        raise ValueError("counts without spans: the offsets they came from must be given")
    engine = engine_for(url_or_engine)
    total_records = sum(s.records for s in spans)

    def work(conn: sa.Connection) -> BatchOutcome:
        stored = lock_offsets(conn, pipeline, keys)
        new = [s for s in spans if stored[(s.topic, s.partition)] <= s.first_offset]
        done = [s for s in spans if stored[(s.topic, s.partition)] > s.last_offset]
        if len(done) == len(spans):
            return BatchOutcome(0, total_records, 0, stored)
        if len(new) != len(spans):
            partly = [
                f"{s.topic}/{s.partition} stored={stored[(s.topic, s.partition)]} "
                f"span={s.first_offset}..{s.last_offset}"
                for s in spans
                if s not in new
            ]
            raise PartialOverlap(
                f"batch for {pipeline!r} is partly applied already ({'; '.join(partly)}): "
                f"apply its records one by one"
            )
        add_counts(conn, pipeline, counts)
        next_offsets = _advance(
            conn, pipeline, stored, {(s.topic, s.partition): s.last_offset for s in spans}
        )
        return BatchOutcome(total_records, 0, sum(counts.values()), next_offsets)

    return in_transaction(engine, work, what=f"applying a counted batch to {pipeline!r}")


def stored_word_counts(conn: sa.Connection, pipeline: str) -> dict[str, int]:
    """Every word's count for the pipeline, read in the caller's transaction."""
    w = schema.word_counts
    query = sa.select(w.c.word, w.c.count).where(w.c.pipeline == pipeline)
    return {word: int(n) for word, n in conn.execute(query).all()}


def word_counts(url_or_engine: str | sa.Engine, pipeline: str) -> dict[str, int]:
    """Every word's count for the pipeline."""
    engine = engine_for(url_or_engine)
    return in_transaction(
        engine, lambda c: stored_word_counts(c, pipeline), what="reading word counts"
    )


def total(url_or_engine: str | sa.Engine, pipeline: str) -> int:
    """The sum of the pipeline's word counts (0 when nothing is counted yet)."""
    w = schema.word_counts
    engine = engine_for(url_or_engine)
    query = sa.select(sa.func.coalesce(sa.func.sum(w.c.count), 0)).where(w.c.pipeline == pipeline)
    return int(
        in_transaction(engine, lambda c: c.execute(query).scalar_one(), what="reading total")
    )
