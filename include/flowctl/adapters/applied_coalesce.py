"""Coalescing ``applied_ranges``: contiguous applied rows below the checkpoint become one.

Without it the table gains a row per tuple forever (at 10k records/s and tuple_size 500,
about 1.7M rows a day). :func:`coalesce` runs in a flush's own transaction
(:class:`flowctl.adapters.mrwq_sink.SqlSink`), right after the checkpoint advanced, once
per ``[flow] coalesce_every_s`` (default 10 s):

- the transaction already holds the partition's checkpoint row (claims lock it first,
  ``lock_offsets``), so no claim interleaves with a half-merged partition and no extra
  lock, thread or timer is needed;
- the rows to merge are those the checkpoint moved over since the last merge, plus the
  merged row that ends where it was then: one indexed read (``end`` between the two
  checkpoints), one delete and one insert per run, however old the table;
- a failed flush rolls the merge back with everything else;
- once per interval rather than in every flush: a flush at every micro-batch end stays
  claim, apply, advance; the merge's statements are paid once per interval, and the table
  holds at most one interval of rows per partition above its merged row.

Which rows merge, and why every claim is decided as before, is
:func:`flowctl.core.applied_rules.coalesce_runs`. Rows that were below the checkpoint
more than :data:`LOOKBACK_ROWS` rows below a flusher's first checkpoint (an older
database) stay as they are; they are read as before.
"""

from __future__ import annotations

from collections.abc import Mapping

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.schema import utcnow
from flowctl.core.applied_rules import coalesce_runs
from flowctl.core.tuples import TopicPartition

__all__ = ["LOOKBACK_ROWS", "coalesce", "lookback_start"]

#: A flusher's first merge looks this many rows back below the checkpoint: what earlier
#: flushers left unmerged since their last merge (one ``coalesce_every_s`` of rows each),
#: without reading a whole unmerged history (an older database) in one transaction.
LOOKBACK_ROWS = 50_000


def lookback_start(conn: sa.Connection, pipeline: str, tp: TopicPartition, checkpoint: int) -> int:
    """Where a flusher's first merge of ``tp`` starts: the ``end`` of the
    :data:`LOOKBACK_ROWS`-th row below ``checkpoint`` counted down, or 0 if there are fewer."""
    a = schema.applied_ranges
    end = conn.execute(
        sa.select(a.c.end)
        .where(
            a.c.pipeline == pipeline,
            a.c.topic == tp.topic,
            a.c.partition == tp.partition,
            a.c.end <= checkpoint,
        )
        .order_by(a.c.end.desc())
        .offset(LOOKBACK_ROWS - 1)
        .limit(1)
    ).scalar()
    return int(end) if end is not None else 0


def coalesce(
    conn: sa.Connection,
    pipeline: str,
    before: Mapping[TopicPartition, int],
    after: Mapping[TopicPartition, int],
) -> int:
    """Merge the contiguous ``applied`` rows ending in ``[before, after]`` of each partition.

    ``before`` / ``after``: each partition's checkpoint before and after the flush advanced
    it, in the caller's transaction (which must hold the checkpoint rows, as
    :func:`flowctl.adapters.applied.claim` and ``advance_checkpoint`` take them). Returns
    how many rows the merge removed (rows deleted minus rows inserted).
    """
    a = schema.applied_ranges
    removed = 0
    for tp, checkpoint in sorted(after.items()):
        lo = before.get(tp, 0)
        if checkpoint <= lo:
            continue
        where = (a.c.pipeline == pipeline, a.c.topic == tp.topic, a.c.partition == tp.partition)
        rows = conn.execute(
            sa.select(a.c.start, a.c.end, a.c.outcome).where(
                *where, a.c.end >= lo, a.c.end <= checkpoint
            )
        ).all()
        spans = coalesce_runs(((int(s), int(e), str(o)) for s, e, o in rows), checkpoint)
        if not spans:
            continue
        now = utcnow()
        for start, end in spans:
            # core.applied_rules.replaced_by, in SQL: the 'applied' rows inside the span (a
            # dlq row nested in it, an isolated poison record, stays).
            deleted = conn.execute(
                a.delete().where(
                    *where, a.c.outcome == "applied", a.c.start >= start, a.c.end <= end
                )
            ).rowcount
            conn.execute(
                sa.insert(a),
                [
                    {
                        "pipeline": pipeline,
                        "topic": tp.topic,
                        "partition": tp.partition,
                        "start": start,
                        "end": end,
                        "outcome": "applied",
                        "applied_at": now,
                    }
                ],
            )
            removed += int(deleted) - 1
    return removed
