"""The flow planner's durable state in the database: what is durable, and the replay pointer.

The planner reads, every batch, the Eden checkpoint and the MRWQ flusher's position
(:func:`read_durable`); it stores the replay queues' state in the ``offsets`` table: the
read position of each replay topic partition (as for Eden), and the From/To pointer as
the swap count in the row of the pseudo topic ``<pipeline>.replay.swaps`` (even: From is
``replay.a``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import sqlalchemy as sa

from flowctl.adapters import applied, schema
from flowctl.adapters.data_loss import record_skip
from flowctl.adapters.db import engine_for
from flowctl.adapters.mrwq_sink import load_position
from flowctl.core.data_loss import LostRange
from flowctl.core.flusher import FlusherSnapshot
from flowctl.core.handover import Frontier
from flowctl.core.persistence import mrwq_namespace
from flowctl.core.replay import ReplaySnapshot, ReplayTopics
from flowctl.core.tuples import TopicPartition, TupleRange


def swaps_topic(pipeline: str) -> str:
    """The pseudo topic whose ``offsets`` row holds the replay pointer (swap count)."""
    return f"{pipeline}.replay.swaps"


@dataclass(frozen=True)
class Durable:
    """What the database says is durable: the Eden checkpoint and the flusher position."""

    checkpoints: Mapping[TopicPartition, int]
    flushed: FlusherSnapshot | None


def read_durable(url: str | sa.Engine, pipeline: str, eden: str) -> Durable:
    """One attempt on one connection: a database that is away must cost the planner's
    batch nothing (the flusher retries with backoff; the planner reads again next batch)."""
    with engine_for(url).connect() as conn:
        checkpoints = applied.read_checkpoints(conn, pipeline, eden)
        flushed = load_position(conn, mrwq_namespace(pipeline))
    return Durable(checkpoints, flushed)


def read_replay_snapshot(url: str | sa.Engine, pipeline: str) -> ReplaySnapshot | None:
    """The replay pointer and positions last stored (``None``: never stored)."""
    topics = ReplayTopics(pipeline)
    rows = applied.read_checkpoints(url, pipeline)
    swaps = rows.get(TopicPartition(swaps_topic(pipeline), 0))
    positions = tuple(
        sorted(
            (tp.topic, tp.partition, n)
            for tp, n in rows.items()
            if tp.topic in (topics.replay_a, topics.replay_b)
        )
    )
    if swaps is None and not positions:
        return None
    swaps = swaps or 0
    from_topic = topics.replay_a if swaps % 2 == 0 else topics.replay_b
    return ReplaySnapshot(pipeline, from_topic, positions, swaps)


def store_replay_snapshot(url: str | sa.Engine, snap: ReplaySnapshot) -> None:
    """Store the replay pointer and committed positions (a position never moves back)."""
    rows = [(t, p, o) for t, p, o in snap.positions]
    rows.append((swaps_topic(snap.pipeline), 0, snap.swaps))
    now = schema.utcnow()
    with engine_for(url).begin() as conn:
        stmt = schema.dialect_insert(conn)(schema.offsets).values(
            [
                {
                    "pipeline": snap.pipeline,
                    "topic": t,
                    "partition": p,
                    "next_offset": o,
                    "updated_at": now,
                }
                for t, p, o in rows
            ]
        )
        conn.execute(
            stmt.on_conflict_do_update(
                index_elements=["pipeline", "topic", "partition"],
                set_={"next_offset": stmt.excluded.next_offset, "updated_at": now},
                where=schema.offsets.c.next_offset <= stmt.excluded.next_offset,
            )
        )


@dataclass(frozen=True)
class StartState:
    """What a new or rebuilt spout starts from: the Eden checkpoint, the position past the
    last durable range of each partition, the gaps below it (holes of ``applied_ranges``,
    dispatched first) and the replay pointer."""

    checkpoints: dict[TopicPartition, int]
    positions: dict[TopicPartition, int]
    gaps: list[TupleRange]
    replay: ReplaySnapshot | None


class FlowState:
    """The planner's database, for one pipeline and its Eden topic."""

    def __init__(self, url: str | sa.Engine, pipeline: str, eden: str) -> None:
        self.url = url
        self.pipeline = pipeline
        self.eden = eden

    def start_state(self) -> StartState:
        checkpoints = dict(applied.read_checkpoints(self.url, self.pipeline, self.eden))
        positions = dict(checkpoints)
        gaps: list[TupleRange] = []
        for p in applied.replay_plan(self.url, self.pipeline):
            if p.topic != self.eden:
                continue
            positions[p.topic_partition] = max(p.applied_end, p.checkpoint)
            gaps.extend(TupleRange(p.topic, p.partition, s, e) for s, e in p.holes)
        replay = read_replay_snapshot(self.url, self.pipeline)
        return StartState(checkpoints, positions, gaps, replay)

    def unapplied_below(
        self, frontier: Frontier
    ) -> tuple[dict[TopicPartition, int], list[TupleRange]]:
        """The Eden checkpoints and the unapplied ranges below ``frontier`` (the sweep's
        input once blue is gone)."""
        checkpoints = dict(applied.read_checkpoints(self.url, self.pipeline, self.eden))
        holes: list[TupleRange] = []
        for partition, end in frontier.eden:
            for s, e in applied.unapplied_gaps(
                self.url, self.pipeline, self.eden, partition, 0, end
            ):
                holes.append(TupleRange(self.eden, partition, s, e))
        return checkpoints, holes

    def durable(self) -> Durable:
        return read_durable(self.url, self.pipeline, self.eden)

    def store_replay(self, snap: ReplaySnapshot) -> None:
        store_replay_snapshot(self.url, snap)

    def skip(self, topology_id: str, lost: LostRange) -> int:
        """Record ``lost`` as skipped, the checkpoint moved over it (``on_data_loss = skip``)."""
        return record_skip(self.url, self.pipeline, topology_id, lost)
