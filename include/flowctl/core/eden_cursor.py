"""Where the spout is in Eden: the next offset to cut per partition, and the cutting.

Eden is cut into tuples aligned on ``tuple_size`` boundaries (a replayed or re-read range
always falls on the same tuple ids); a partial tuple at a partition's end is cut once its
oldest record has waited ``linger_s`` for the tuple to fill (Kafka's ``linger.ms``): a
steady trickle is not cut into one-record tuples, and no record waits for a tuple that
a slow feed would take long to fill. Split from :mod:`flowctl.core.spout`, which decides
how many tuples to cut and where they go.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from .tuples import TopicPartition, TupleRange


def aligned(tp: TopicPartition, start: int, end: int, size: int) -> list[TupleRange]:
    """``[start, end)`` of ``tp`` as tuples split on multiples of ``size``."""
    out = []
    pos = start
    while pos < end:
        stop = min((pos // size + 1) * size, end)
        out.append(TupleRange(tp.topic, tp.partition, pos, stop))
        pos = stop
    return out


class EdenCursor:
    """Next offset to cut per Eden partition, and when each partition's end last moved."""

    def __init__(
        self,
        tuple_size: int,
        linger_s: float,
        positions: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
    ) -> None:
        self._size = tuple_size
        self._linger_s = linger_s
        self._next: dict[TopicPartition, int] = {
            TopicPartition(*tp): int(o) for tp, o in positions.items()
        }
        self._seen_end: dict[TopicPartition, int] = {}
        #: Per partition, each end seen and when it was first seen, oldest first, back to
        #: the first end beyond the cursor: the uncut record at the cursor appeared with
        #: the first of them (:meth:`_tail_age`).
        self._ends_seen: dict[TopicPartition, deque[tuple[int, float]]] = {}

    def positions(self) -> dict[TopicPartition, int]:
        """Next Eden offset to cut, per partition."""
        return dict(self._next)

    def position(self, tp: tuple[str, int]) -> int | None:
        return self._next.get(TopicPartition(*tp))

    def waiting(self, latest: Mapping[TopicPartition, int]) -> int:
        """Records in Eden not yet cut."""
        return sum(max(0, end - self._next.get(tp, 0)) for tp, end in latest.items())

    def demand(self, latest: Mapping[TopicPartition, int], now: float) -> int:
        """Tuples :meth:`cut` would cut with no budget (a partial tail only once its
        partition is idle)."""
        size = self._size
        demand = 0
        for tp, end in latest.items():
            key = TopicPartition(*tp)
            start = self._next.get(key, 0)
            if end <= start:
                continue
            demand += (end - 1) // size - start // size + 1
            self._observe(key, end, now)
            if end % size and not self._lingered(key, now):
                demand -= 1
        return demand

    def _observe(self, tp: TopicPartition, end: int, now: float) -> None:
        if self._seen_end.get(tp) != end:
            self._seen_end[tp] = end
            self._ends_seen.setdefault(tp, deque()).append((end, now))

    def _tail_age(self, tp: TopicPartition, now: float) -> float:
        """Seconds since the record at the cursor (the oldest uncut one) was first seen."""
        seen = self._ends_seen.get(tp)
        position = self._next.get(tp, 0)
        while seen and seen[0][0] <= position:
            seen.popleft()
        return now - seen[0][1] if seen else 0.0

    def _lingered(self, tp: TopicPartition, now: float) -> bool:
        """Whether the partition's trailing partial tuple may be cut now (see the module)."""
        return self._tail_age(tp, now) >= self._linger_s

    def cut(
        self, latest: Mapping[TopicPartition, int], now: float, budget: int
    ) -> list[TupleRange]:
        """Up to ``budget`` tuples, round-robin over the partitions, advancing the cursor."""
        size = self._size
        live = sorted(TopicPartition(*tp) for tp in latest)
        for tp in live:
            self._next.setdefault(tp, 0)
            self._observe(tp, latest[tp], now)
        out: list[TupleRange] = []
        while live and len(out) < budget:
            still = []
            for tp in live:
                if len(out) >= budget:
                    break
                start, end = self._next[tp], latest[tp]
                if end <= start:
                    continue
                boundary = (start // size + 1) * size
                stop = min(boundary, end)
                if stop < boundary and not self._lingered(tp, now):
                    continue  # a partial tuple waits for more records, up to linger_s
                out.append(TupleRange(tp.topic, tp.partition, start, stop))
                self._next[tp] = stop
                still.append(tp)
            live = still
        return out
