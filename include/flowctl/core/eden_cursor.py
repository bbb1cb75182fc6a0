"""Where the spout is in Eden: the next offset to cut per partition, and the cutting.

Eden is cut into tuples aligned on ``tuple_size`` boundaries (a replayed or re-read range
always falls on the same tuple ids); a partial tuple at a partition's end is cut only
once the partition has been idle for ``linger_s``. Split from :mod:`flowctl.core.spout`,
which decides how many tuples to cut and where they go.
"""

from __future__ import annotations

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
        self, tuple_size: int, linger_s: float, positions: Mapping[tuple[str, int], int]
    ) -> None:
        self._size = tuple_size
        self._linger_s = linger_s
        self._next: dict[TopicPartition, int] = {
            TopicPartition(*tp): int(o) for tp, o in positions.items()
        }
        self._seen_end: dict[TopicPartition, int] = {}
        self._changed_at: dict[TopicPartition, float] = {}

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
            if end % size:
                idle = self._seen_end.get(key) == end and (
                    now - self._changed_at.get(key, now) >= self._linger_s
                )
                demand -= 0 if idle else 1
        return demand

    def cut(
        self, latest: Mapping[TopicPartition, int], now: float, budget: int
    ) -> list[TupleRange]:
        """Up to ``budget`` tuples, round-robin over the partitions, advancing the cursor."""
        size = self._size
        live = sorted(TopicPartition(*tp) for tp in latest)
        for tp in live:
            end = latest[tp]
            if self._seen_end.get(tp) != end:
                self._seen_end[tp] = end
                self._changed_at[tp] = now
            self._next.setdefault(tp, 0)
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
                if stop < boundary and now - self._changed_at[tp] < self._linger_s:
                    continue  # a partial tuple waits until the partition is idle
                out.append(TupleRange(tp.topic, tp.partition, start, stop))
                self._next[tp] = stop
                still.append(tp)
            live = still
        return out
