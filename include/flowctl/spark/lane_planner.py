"""Driver-side planning of a micro-batch: how far to read, and which lane reads what.

This is the seam where flow control plugs in. The source asks a planner two
questions per micro-batch:

1. :meth:`LanePlanner.admit` - given where each partition starts, where the
   log ends and a record budget, where does this batch end? (Later: as many
   tuples as the lanes' windows allow, replay topics first.)
2. :meth:`LanePlanner.assign` - given the batch's offset ranges, which lane
   reads which ranges? (Later: round robin or least loaded over windows.)

One lane = one Spark InputPartition = one task, so the lane count is the
topology's parallelism and is independent of the Kafka partition count: a
lane may read slices of several partitions, and one partition may be split
over several lanes. Pure standard library, so it is unit-tested without
Spark or Kafka.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


class OffsetsBeyondLog(ValueError):
    """A start offset is past the log's end: the log was reset or truncated."""


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``start <= offset < end`` of one topic partition."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class LanePlan:
    """What one lane reads in one micro-batch."""

    lane: int
    ranges: tuple[OffsetRange, ...]

    @property
    def records(self) -> int:
        return sum(r.records for r in self.ranges)


class LanePlanner:
    """Even admission over partitions and contiguous, evenly sized lane assignment."""

    def __init__(self, lanes: int) -> None:
        if isinstance(lanes, bool) or not isinstance(lanes, int) or lanes < 1:
            raise ValueError(f"lanes={lanes!r} must be an integer >= 1")
        self.lanes = lanes

    def admit(
        self,
        start: Mapping[int, int],
        latest: Mapping[int, int],
        max_rows: int | None,
    ) -> dict[int, int]:
        """End offsets of the next batch: everything available, or at most ``max_rows``.

        A budget is shared fairly: partitions with little backlog take all of
        it, the rest share what is left equally (water filling), so no
        partition starves behind a busy one. Partitions only in ``latest``
        (new ones) start at 0. Raises :class:`OffsetsBeyondLog` when a start is
        past the log's end.
        """
        if max_rows is not None and max_rows < 1:
            raise ValueError(f"max_rows={max_rows!r} must be >= 1")
        begin = {p: start.get(p, 0) for p in latest}
        for p, s in start.items():
            if p not in latest:
                raise OffsetsBeyondLog(f"partition {p} (start offset {s}) is no longer in the log")
        backlog = {}
        for p, s in begin.items():
            if s > latest[p]:
                raise OffsetsBeyondLog(
                    f"partition {p}: start offset {s} is past the log end {latest[p]} "
                    f"(was the broker's log reset?)"
                )
            backlog[p] = latest[p] - s
        if max_rows is None or sum(backlog.values()) <= max_rows:
            return dict(sorted(latest.items()))
        budget, left = max_rows, len(backlog)
        end = {}
        for p in sorted(backlog, key=lambda q: (backlog[q], q)):
            take = min(backlog[p], budget // left)
            end[p] = begin[p] + take
            budget -= take
            left -= 1
        return dict(sorted(end.items()))

    def assign(
        self, topic: str, start: Mapping[int, int], end: Mapping[int, int]
    ) -> list[LanePlan]:
        """Split ``start..end`` into at most ``lanes`` plans of nearly equal size (differ by <= 1).

        Partitions are walked in order and cut into consecutive slices, so
        each lane reads few, contiguous ranges. Empty lanes are left out (a
        task costs about 60 ms even when it reads nothing).
        """
        ranges = []
        for p in sorted(end):
            s = start.get(p, 0)
            if end[p] < s:
                raise ValueError(f"partition {p}: end offset {end[p]} is before start {s}")
            if end[p] > s:
                ranges.append(OffsetRange(topic, p, s, end[p]))
        total = sum(r.records for r in ranges)
        if total == 0:
            return []
        base, extra = divmod(total, self.lanes)
        sizes = [base + (1 if lane < extra else 0) for lane in range(self.lanes)]
        plans: list[LanePlan] = []
        queue = list(ranges)
        for lane, size in enumerate(sizes):
            if size == 0:
                continue
            taken: list[OffsetRange] = []
            while size > 0:
                head = queue[0]
                if head.records <= size:
                    taken.append(head)
                    queue.pop(0)
                    size -= head.records
                else:
                    taken.append(OffsetRange(topic, head.partition, head.start, head.start + size))
                    queue[0] = OffsetRange(topic, head.partition, head.start + size, head.end)
                    size = 0
            plans.append(LanePlan(lane, tuple(taken)))
        return plans
