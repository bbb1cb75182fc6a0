"""What the MRWQ flusher reports: one flush, a gap with what to dispatch again, a drain.

The values :class:`flowctl.adapters.mrwq_flusher.FlusherService` returns and passes to
``on_gap``; plain data, kept apart from the service that produces them.
"""

from __future__ import annotations

from dataclasses import dataclass

from flowctl.adapters.applied import PartitionReplay
from flowctl.adapters.mrwq_sink import FlushStats
from flowctl.core.flusher import FlushResult, Gap
from flowctl.core.tuples import TopicPartition, TupleRange

__all__ = ["DrainResult", "FlushReport", "GapReport"]


@dataclass(frozen=True)
class FlushReport:
    """One flush: the core's result (durable tuple ids, gap, pending), the database stats,
    how long it took and the queue length left."""

    result: FlushResult
    stats: FlushStats
    duration_s: float

    @property
    def durable_tuple_ids(self) -> tuple[str, ...]:
        return self.result.durable_tuple_ids

    @property
    def queue_length(self) -> int:
        return self.result.pending


@dataclass(frozen=True)
class GapReport:
    """MRWQ items were lost: what to dispatch again, per partition.

    For every partition: the holes of ``applied_ranges`` after the durable checkpoint, and
    everything admitted from ``applied_end`` on. Ranges durable after all are no-ops when
    they come back (``applied_ranges``).
    """

    pipeline: str
    namespace: str
    gap: Gap
    partitions: tuple[PartitionReplay, ...]

    def ranges(self, admitted_end: dict[TopicPartition, int]) -> list[TupleRange]:
        """The ranges to dispatch again, given how far the planner admitted per partition.

        Holes are exact complements of durable ranges, so any cut of them on the tuple
        grid (``k * tuple_size``) claims cleanly. A partition the database does not know
        (nothing of it ever durable) is dispatched from 0; a planner that started it
        elsewhere should use :func:`flowctl.adapters.applied.unapplied_gaps` with its start.
        """
        out: list[TupleRange] = []
        for p in self.partitions:
            for start, end in p.holes:
                out.append(TupleRange(p.topic, p.partition, start, end))
            end = admitted_end.get(p.topic_partition, p.applied_end)
            if end > p.applied_end:
                out.append(TupleRange(p.topic, p.partition, p.applied_end, end))
        for tp, end in admitted_end.items():
            if tp not in {p.topic_partition for p in self.partitions} and end > 0:
                out.append(TupleRange(tp.topic, tp.partition, 0, end))
        return out

    def __str__(self) -> str:
        parts = "; ".join(
            f"{p.topic}:{p.partition} checkpoint {p.checkpoint}, holes "
            f"{list(p.holes) or 'none'}, everything from {p.applied_end}"
            for p in self.partitions
        )
        return (
            f"MRWQ {self.namespace} of pipeline {self.pipeline!r}: {self.gap}; dispatch again: "
            f"{parts or 'everything admitted (nothing is durable yet)'}"
        )


@dataclass(frozen=True)
class DrainResult:
    """What :meth:`flowctl.adapters.mrwq_flusher.FlusherService.flush_all` did."""

    flushes: int
    items: int
    applied: int
    duplicates: int
    gap: GapReport | None
