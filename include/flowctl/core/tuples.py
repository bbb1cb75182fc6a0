"""Tuple batching: offset ranges of one topic partition (SPEC A; seed 000_7245d8bf028e7bc3).

The seed packs several records into one tuple so that acks and fails cost
less. Here a tuple is a half-open offset range ``[start, end)`` of up to
``tuple_size`` consecutive records of one Kafka topic partition. A range is
its own identity: the same records always give the same :attr:`TupleRange.id`,
so a replayed tuple (after a fail, a timeout or a restart) is recognisably the
same tuple, and an executor can re-read it deterministically (assign + seek).

:class:`TupleBatcher` remembers, per partition, the next offset not yet cut
into a tuple, and cuts new tuples up to the latest offsets on demand: per
micro-batch the source asks for at most "total free window slots" tuples.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple


class TopicPartition(NamedTuple):
    """A Kafka topic partition."""

    topic: str
    partition: int


def _check_offset(field: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{field} must be an int >= 0, got {value!r}")
    return value


@dataclass(frozen=True, order=True)
class TupleRange:
    """Records ``start <= offset < end`` of ``topic``/``partition``."""

    topic: str
    partition: int
    start: int
    end: int

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError(f"TupleRange.topic must be a non-empty str, got {self.topic!r}")
        _check_offset("TupleRange.partition", self.partition)
        _check_offset("TupleRange.start", self.start)
        _check_offset("TupleRange.end", self.end)
        if self.end <= self.start:
            raise ValueError(
                f"TupleRange.end must be > start={self.start}, got {self.end} "
                f"({self.topic}[{self.partition}])"
            )

    @property
    def id(self) -> str:
        """Stable id ``topic:partition:start-end`` (the same records, the same id)."""
        return f"{self.topic}:{self.partition}:{self.start}-{self.end}"

    @property
    def size(self) -> int:
        """Number of records."""
        return self.end - self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    @classmethod
    def parse_id(cls, tuple_id: str) -> TupleRange:
        """Inverse of :attr:`id`; topics may contain ':' (split from the right)."""
        try:
            topic, partition, span = tuple_id.rsplit(":", 2)
            start, end = span.split("-")
            return cls(topic, int(partition), int(start), int(end))
        except (ValueError, AttributeError) as exc:
            raise ValueError(f"TupleRange.parse_id: malformed tuple id {tuple_id!r}") from exc


def cut_range(tp: TopicPartition, start: int, end: int, tuple_size: int) -> list[TupleRange]:
    """Cut ``[start, end)`` into consecutive tuples of ``tuple_size`` (the last may be short)."""
    _check_tuple_size(tuple_size)
    _check_offset("cut_range.start", start)
    _check_offset("cut_range.end", end)
    return [
        TupleRange(tp.topic, tp.partition, s, min(s + tuple_size, end))
        for s in range(start, end, tuple_size)
    ]


def _check_tuple_size(tuple_size: int) -> None:
    if not isinstance(tuple_size, int) or isinstance(tuple_size, bool) or tuple_size < 1:
        raise ValueError(f"tuple_size must be an int >= 1, got {tuple_size!r}")


class TupleBatcher:
    """Cuts pending offsets into tuples, fairly across partitions.

    ``positions`` are the next offsets not yet cut (on start: the durable
    checkpoint, :mod:`flowctl.core.checkpoint`). ``cut(latest, max_tuples)``
    takes one tuple per partition in turn, so one busy partition cannot starve
    the others. With ``allow_partial`` (default) a partition whose pending
    records are fewer than ``tuple_size`` still yields a short tuple, so a slow
    trickle is not held back forever.
    """

    def __init__(
        self,
        tuple_size: int,
        positions: Mapping[TopicPartition, int] | None = None,
        *,
        allow_partial: bool = True,
    ) -> None:
        _check_tuple_size(tuple_size)
        self.tuple_size = tuple_size
        self.allow_partial = allow_partial
        self._next: dict[TopicPartition, int] = {}
        for tp, offset in (positions or {}).items():
            self.set_position(tp, offset)

    def set_position(self, tp: TopicPartition, offset: int) -> None:
        """Resume ``tp`` at ``offset`` (the next record to cut)."""
        self._next[TopicPartition(*tp)] = _check_offset(f"position of {tp}", offset)

    def positions(self) -> dict[TopicPartition, int]:
        """A copy of the next offset to cut, per partition."""
        return dict(self._next)

    def pending_records(self, latest: Mapping[TopicPartition, int]) -> int:
        """Records not yet cut into tuples (the backlog), given the latest offsets."""
        return sum(max(0, end - self._next.get(tp, 0)) for tp, end in latest.items())

    def cut(
        self, latest: Mapping[TopicPartition, int], max_tuples: int | None = None
    ) -> list[TupleRange]:
        """Cut up to ``max_tuples`` new tuples below ``latest`` (exclusive end offsets).

        A partition seen for the first time starts at offset 0 unless a
        position was set. Latest offsets below a position are ignored (a
        broker may under-report, never rewind us).
        """
        if max_tuples is not None and (not isinstance(max_tuples, int) or max_tuples < 0):
            raise ValueError(
                f"TupleBatcher.cut: max_tuples must be an int >= 0, got {max_tuples!r}"
            )
        budget = max_tuples if max_tuples is not None else None
        out: list[TupleRange] = []
        live = sorted(TopicPartition(*tp) for tp in latest)
        for tp in live:
            _check_offset(f"latest offset of {tp}", latest[tp])
            self._next.setdefault(tp, 0)
        while live and (budget is None or len(out) < budget):
            still: list[TopicPartition] = []
            for tp in live:
                if budget is not None and len(out) >= budget:
                    break
                start, end = self._next[tp], latest[tp]
                available = end - start
                if available <= 0 or (available < self.tuple_size and not self.allow_partial):
                    continue
                stop = min(start + self.tuple_size, end)
                out.append(TupleRange(tp.topic, tp.partition, start, stop))
                self._next[tp] = stop
                still.append(tp)
            live = still
        return out

    def extend_positions(self, tuples: Iterable[TupleRange]) -> None:
        """Advance positions past tuples cut elsewhere (e.g. restored in flight)."""
        for t in tuples:
            tp = t.topic_partition
            self._next[tp] = max(self._next.get(tp, 0), t.end)
