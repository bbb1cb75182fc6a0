"""The batch plan, stored as the end offset in Spark's offset log.

The whole plan of a micro-batch (which tuple, which lane, its acker edge, its From topic)
is the end offset Spark stores, so ``partitions`` and a re-run of the batch after a
restart read exactly the same plan. A standby topology's warm-up batch is an offset too
(:func:`encode_warmup`): it admits nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from flowctl.core.replay import ReplayTopics
from flowctl.core.spout_contract import Dispatch
from flowctl.core.tuples import TopicPartition, TupleRange

#: Version of the offset JSON (the batch plan) this module writes.
PLAN_VERSION = 1


def initial_offset(topic: str) -> dict[str, Any]:
    """The offset of a topology before its first batch (an empty plan)."""
    return {"v": PLAN_VERSION, "topic": topic, "seq": 0, "plan": []}


def encode_plan(
    topic: str, seq: int, dispatches: Sequence[Dispatch], pipeline: str
) -> dict[str, Any]:
    """The offset of batch ``seq``: one row per dispatched tuple."""
    topics = ReplayTopics(pipeline)
    rows = [
        [
            d.lane,
            d.tuple.topic,
            d.tuple.partition,
            d.tuple.start,
            d.tuple.end,
            d.edge,
            1 if d.replay else 0,
            0 if d.from_topic == topics.replay_a else 1,
        ]
        for d in dispatches
    ]
    return {"v": PLAN_VERSION, "topic": topic, "seq": seq, "plan": rows}


@dataclass(frozen=True)
class PlanEntry:
    """One tuple of a lane's share of a batch (decoded from the offset JSON)."""

    tuple: TupleRange
    edge: int
    replay: bool
    from_topic: str


class FlowPartition(InputPartition):
    """One lane's share of one micro-batch: its tuples, in dispatch order."""

    def __init__(
        self, lane: int, seq: int, entries: tuple[PlanEntry, ...], *, warmup: bool = False
    ) -> None:
        super().__init__(lane)
        self.lane = lane
        self.seq = seq
        self.entries = entries
        self.warmup = warmup

    def __repr__(self) -> str:
        kind = ", warm-up" if self.warmup else ""
        return f"FlowPartition(lane={self.lane}, seq={self.seq}, tuples={len(self.entries)}{kind})"


def encode_warmup(
    topic: str, seq: int, number: int, ranges: Sequence[TupleRange]
) -> dict[str, Any]:
    """A warm-up batch's offset: ``ranges[i]`` is read by lane ``i``; nothing is admitted.

    ``number`` makes each warm-up a new offset (Spark runs a batch only when the end
    offset differs from the start); ``seq`` stays the last admitted batch's.
    """
    rows = [[lane, r.topic, r.partition, r.start, r.end] for lane, r in enumerate(ranges)]
    return {
        "v": PLAN_VERSION,
        "topic": topic,
        "seq": seq,
        "plan": [],
        "warmup": number,
        "ranges": rows,
    }


def decode_plan(offset: Mapping[str, Any], topic: str, pipeline: str) -> list[FlowPartition]:
    """The batch's partitions, one per lane with tuples; refuses a foreign offset."""
    if offset.get("v") != PLAN_VERSION or offset.get("topic") != topic:
        raise ValueError(
            f"offset {str(dict(offset))[:200]!r} is not a flow plan of topic {topic!r} "
            f"(a checkpoint of another source mode or topic?)"
        )
    topics = ReplayTopics(pipeline)
    seq = int(offset["seq"])
    if offset.get("warmup"):
        return [
            FlowPartition(
                int(lane),
                seq,
                (PlanEntry(TupleRange(t, int(p), int(s), int(e)), 0, False, topics.replay_a),),
                warmup=True,
            )
            for lane, t, p, s, e in offset["ranges"]
        ]
    lanes: dict[int, list[PlanEntry]] = {}
    for row in offset["plan"]:
        lane, t, p, start, end, edge, replay, from_idx = row
        lanes.setdefault(int(lane), []).append(
            PlanEntry(
                TupleRange(t, int(p), int(start), int(end)),
                int(edge),
                bool(replay),
                topics.replay_a if from_idx == 0 else topics.replay_b,
            )
        )
    return [FlowPartition(lane, seq, tuple(es)) for lane, es in sorted(lanes.items())]


def warmup_ranges(
    latest: Mapping[TopicPartition, int], lanes: int, tuple_size: int
) -> list[TupleRange]:
    """One tuple of the newest Eden records per lane (partitions round robin); ``[]`` when
    the log is empty (nothing to warm up with)."""
    filled = sorted(tp for tp, end in latest.items() if end > 0)
    if not filled:
        return []
    ranges = []
    for lane in range(lanes):
        tp = filled[lane % len(filled)]
        end = latest[tp]
        ranges.append(TupleRange(tp.topic, tp.partition, max(0, end - tuple_size), end))
    return ranges
