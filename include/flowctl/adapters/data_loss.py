"""Records lost before processing, in the database: skipped ranges and a topology's cause.

* ``skipped_ranges``: under ``[topics] on_data_loss = "skip"`` the planner records each
  lost range and moves the durable checkpoint over it in ONE transaction
  (:func:`record_skip`), under the checkpoint row's lock the flusher takes too, so the
  checkpoint never moves back and a reader never sees the move without its reason.
  Reconcile lists them (:func:`skipped_ranges`) and leaves them out of its comparison.
* ``topology_causes``: why a topology FAILED when the platform knows (the lost ranges, a
  read error that persisted), shown on the metrics page beside its state.
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.db import engine_for, in_transaction
from flowctl.adapters.results import lock_offsets
from flowctl.core.data_loss import LostRange

#: A cause longer than this is cut (a Java stack trace is not a cause).
CAUSE_MAX_CHARS = 2000


@dataclass(frozen=True)
class SkippedRange:
    """One stored row of ``skipped_ranges``."""

    topic: str
    partition: int
    first: int
    end: int
    topology_id: str
    reason: str
    skipped_at: str  # ISO 8601, UTC

    @property
    def records(self) -> int:
        return self.end - self.first

    def describe(self) -> str:
        return (
            f"{self.topic} partition {self.partition}: offsets [{self.first}, {self.end}) "
            f"({self.records} record(s)) skipped by {self.topology_id} at {self.skipped_at}: "
            f"{self.reason}"
        )


def record_skip(url: str | sa.Engine, pipeline: str, topology_id: str, lost: LostRange) -> int:
    """Record ``lost`` as skipped and move the checkpoint of its partition to its end (never
    back); returns the checkpoint after the move. A range already covered by the
    checkpoint (the flusher got there first) records nothing."""
    if lost.records <= 0:
        raise ValueError(f"record_skip: {lost.describe()}: an empty range is not a skip")
    o = schema.offsets

    def work(conn: sa.Connection) -> int:
        key = (lost.topic, lost.partition)
        checkpoint = lock_offsets(conn, pipeline, [key])[key]
        if checkpoint >= lost.end:
            return checkpoint
        now = schema.utcnow()
        conn.execute(
            schema.skipped_ranges.insert().values(
                pipeline=pipeline,
                topic=lost.topic,
                partition=lost.partition,
                first=checkpoint,
                end=lost.end,
                topology_id=topology_id,
                reason=lost.detail,
                skipped_at=now,
            )
        )
        conn.execute(
            o.update()
            .where(
                o.c.pipeline == pipeline,
                o.c.topic == lost.topic,
                o.c.partition == lost.partition,
            )
            .values(next_offset=lost.end, updated_at=now)
        )
        return lost.end

    return in_transaction(engine_for(url), work, what=f"skipping {lost.describe()}")


def skipped_ranges(
    conn_or_url: sa.Connection | str | sa.Engine, pipeline: str, topic: str
) -> list[SkippedRange]:
    """Every skipped range of ``topic``, by partition and offset."""
    s = schema.skipped_ranges
    query = (
        sa.select(s)
        .where(s.c.pipeline == pipeline, s.c.topic == topic)
        .order_by(s.c.partition, s.c.first)
    )

    def read(conn: sa.Connection) -> list[SkippedRange]:
        return [
            SkippedRange(
                r.topic,
                int(r.partition),
                int(r.first),
                int(r.end),
                r.topology_id,
                r.reason,
                r.skipped_at.isoformat(),
            )
            for r in conn.execute(query).all()
        ]

    if isinstance(conn_or_url, sa.Connection):
        return read(conn_or_url)
    with engine_for(conn_or_url).connect() as conn:
        return read(conn)


def record_cause(url: str | sa.Engine, topology_id: str, cause: str) -> None:
    """Store why ``topology_id`` failed (the latest cause wins)."""
    c = schema.topology_causes
    text = cause if len(cause) <= CAUSE_MAX_CHARS else cause[: CAUSE_MAX_CHARS - 3] + "..."

    def work(conn: sa.Connection) -> None:
        stmt = schema.dialect_insert(conn)(c).values(
            topology_id=topology_id, cause=text, recorded_at=schema.utcnow()
        )
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["topology_id"],
                set_={"cause": stmt.excluded.cause, "recorded_at": stmt.excluded.recorded_at},
            )
        )

    in_transaction(engine_for(url), work, what=f"recording the cause of {topology_id!r}")


def causes(conn: sa.Connection, topology_ids: list[str]) -> dict[str, str]:
    """The recorded cause of each of ``topology_ids`` that has one."""
    if not topology_ids:
        return {}
    c = schema.topology_causes
    rows = conn.execute(
        sa.select(c.c.topology_id, c.c.cause).where(c.c.topology_id.in_(topology_ids))
    ).all()
    return {tid: cause for tid, cause in rows}
