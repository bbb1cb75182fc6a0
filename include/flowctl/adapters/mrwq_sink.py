"""The MRWQ flush transaction: what one batch of outcome items does to the database.

:class:`SqlSink` is the core flusher's :class:`~flowctl.core.persistence.Sink`, used by
:class:`flowctl.adapters.mrwq_flusher.FlusherService`. In ONE transaction per batch it
claims each item's range in ``applied_ranges`` (a range already durable is a duplicate
and skipped), applies the new ``applied`` results with the pipeline's ``apply``,
advances the durable checkpoint over contiguous durable ranges, stores the flusher's
position (epoch, head) in ``mrwq_state`` and, once per ``coalesce_every_s`` for each
partition, merges the ``applied`` rows the checkpoint moved over since the last merge into one
(:mod:`flowctl.adapters.applied_coalesce` says why there and then).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.applied import Claim, advance_checkpoint, claim
from flowctl.adapters.applied_coalesce import coalesce, lookback_start
from flowctl.adapters.schema import dialect_insert, utcnow
from flowctl.core.clock import Clock, MonotonicClock
from flowctl.core.flusher import FlusherSnapshot
from flowctl.core.persistence import QueueItem, parse_outcome_key
from flowctl.core.tuples import TopicPartition, TupleRange

__all__ = ["FlushStats", "MrwqItemError", "SqlSink", "claim_of", "load_position", "save_position"]


class MrwqItemError(ValueError):
    """An MRWQ item that does not follow the item protocol (a writer bug, never data)."""


@dataclass(frozen=True)
class FlushStats:
    """What one database transaction did."""

    items: int = 0
    applied: int = 0
    replayed: int = 0
    dlq: int = 0
    duplicates: int = 0
    #: Records of the duplicate items: processed twice (a retried task, a rebuild's
    #: re-dispatch), applied once.
    duplicate_records: int = 0
    records: int = 0
    rows: int = 0
    checkpoint: dict[TopicPartition, int] = field(default_factory=dict)
    coalesced: int = 0  # applied_ranges rows the merge removed


def load_position(conn: sa.Connection, namespace: str) -> FlusherSnapshot | None:
    """The flusher position (epoch, head) last committed for the MRWQ ``namespace``."""
    s = schema.mrwq_state
    row = conn.execute(sa.select(s.c.epoch, s.c.head).where(s.c.namespace == namespace)).first()
    if row is None:
        return None
    return FlusherSnapshot(namespace, row.epoch, int(row.head), 0.0)


def save_position(
    conn: sa.Connection, namespace: str, pipeline: str, epoch: str | None, head: int
) -> None:
    """Store the flusher's position in the caller's transaction (with what it flushed)."""
    s = schema.mrwq_state
    stmt = dialect_insert(conn)(s).values(
        namespace=namespace, pipeline=pipeline, epoch=epoch, head=head, updated_at=utcnow()
    )
    conn.execute(
        stmt.on_conflict_do_update(
            index_elements=["namespace"],
            set_={
                "epoch": stmt.excluded.epoch,
                "head": stmt.excluded.head,
                "updated_at": stmt.excluded.updated_at,
            },
        )
    )


class SqlSink:
    """The core's :class:`~flowctl.core.persistence.Sink`: one transaction per batch.

    ``coalesce_every_s``: seconds between two merges of a partition's ``applied_ranges``
    rows (0: in every flush), timed by ``clock`` per partition; ``None`` never merges. A
    partition is merged in the first flush that touches it once its interval has passed:
    a flush touches only the partitions of its tuples, and one timer for all partitions
    left the partitions that were never in the flush where the interval ended unmerged
    for good (with a stream that keeps up with a steady feed, flushes and feed keep step).
    """

    def __init__(
        self,
        engine: sa.Engine,
        pipeline: str,
        namespace: str,
        apply: Callable[[sa.Connection, str, list[Any]], int | None],
        epoch: Callable[[], str | None],
        *,
        coalesce_every_s: float | None = None,
        clock: Clock | None = None,
    ) -> None:
        if coalesce_every_s is not None and (
            isinstance(coalesce_every_s, bool)
            or not isinstance(coalesce_every_s, int | float)
            or not coalesce_every_s >= 0
        ):
            raise ValueError(
                f"coalesce_every_s must be a number >= 0 or None, got {coalesce_every_s!r}"
            )
        self.engine = engine
        self.pipeline = pipeline
        self.namespace = namespace
        self.apply = apply
        self._epoch = epoch  # the flusher's epoch at write time (stored with the head)
        self.last: FlushStats | None = None
        self.coalesce_every_s = coalesce_every_s
        self._clock = clock if clock is not None else MonotonicClock()
        self._started = self._clock.now()
        #: Per partition: when this sink last merged it.
        self._coalesced_at: dict[TopicPartition, float] = {}
        #: Per partition: the checkpoint at this sink's last merge (rows ending at or after
        #: it are the next merge's window).
        self._coalesced_to: dict[TopicPartition, int] = {}

    def _coalesce_due(self, tps: set[TopicPartition]) -> set[TopicPartition]:
        """Those of ``tps`` whose interval since their last merge has passed."""
        every = self.coalesce_every_s
        if every is None:
            return set()
        now = self._clock.now()
        return {tp for tp in tps if now - self._coalesced_at.get(tp, self._started) >= every}

    def _coalesce(self, conn: sa.Connection, checkpoint: dict[TopicPartition, int]) -> int:
        before = {
            tp: self._coalesced_to[tp]
            if tp in self._coalesced_to
            else lookback_start(conn, self.pipeline, tp, cp)
            for tp, cp in checkpoint.items()
        }
        return coalesce(conn, self.pipeline, before, checkpoint)

    def write_batch(self, items: Sequence[QueueItem]) -> None:
        if not items:
            self.last = FlushStats()
            return
        claims = [claim_of(item) for item in items]
        head = max(item.seq for item in items) + 1
        epoch = self._epoch()

        def work(conn: sa.Connection) -> FlushStats:
            fresh = claim(conn, self.pipeline, claims)
            results = [
                item.value
                for item, c, new in zip(items, claims, fresh, strict=True)
                if new and c.outcome == "applied"
            ]
            rows = self.apply(conn, self.pipeline, results) if results else 0
            checkpoint = advance_checkpoint(
                conn, self.pipeline, {c.range.topic_partition for c in claims}
            )
            merged = {tp: cp for tp, cp in checkpoint.items() if tp in due}
            coalesced = self._coalesce(conn, merged) if merged else 0
            save_position(conn, self.namespace, self.pipeline, epoch, head)
            new_claims = [c for c, new in zip(claims, fresh, strict=True) if new]
            return FlushStats(
                items=len(items),
                applied=len(results),
                replayed=sum(1 for c in new_claims if c.outcome == "replayed"),
                dlq=sum(1 for c in new_claims if c.outcome == "dlq"),
                duplicates=len(items) - len(new_claims),
                duplicate_records=sum(
                    c.range.size for c, new in zip(claims, fresh, strict=True) if not new
                ),
                records=sum(c.range.size for c in claims),
                rows=int(rows or 0),
                checkpoint=checkpoint,
                coalesced=coalesced,
            )

        due = self._coalesce_due({c.range.topic_partition for c in claims})
        with self.engine.begin() as conn:
            self.last = work(conn)
        now = self._clock.now()
        for tp in due & set(self.last.checkpoint):  # committed: the next merge starts here
            self._coalesced_at[tp] = now
            self._coalesced_to[tp] = self.last.checkpoint[tp]


def claim_of(item: QueueItem) -> Claim:
    """The ``applied_ranges`` claim an outcome item makes; :class:`MrwqItemError` if it is
    off the item protocol."""
    where = f"MRWQ item seq {item.seq} (tuple {item.tuple_id!r}, key {item.key!r})"
    if not item.last:
        raise MrwqItemError(
            f"{where}: a tuple must have exactly one outcome item (build it with mrwq_result)"
        )
    try:
        outcome, replay, isolated = parse_outcome_key(item.key or "")
        return Claim(TupleRange.parse_id(item.tuple_id), outcome, replay, isolated)
    except ValueError as exc:
        raise MrwqItemError(f"{where}: {exc}") from exc
