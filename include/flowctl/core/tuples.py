"""Tuples: offset ranges of one topic partition (SPEC A; seed 000_7245d8bf028e7bc3).

The seed packs several records into one tuple so that acks and fails cost
less. Here a tuple is a half-open offset range ``[start, end)`` of up to
``tuple_size`` consecutive records of one Kafka topic partition. A range is
its own identity: the same records always give the same :attr:`TupleRange.id`,
so a replayed tuple (after a fail, a timeout or a restart) is recognisably the
same tuple, and an executor can re-read it deterministically (assign + seek).
The spout (:mod:`flowctl.core.spout`) cuts the tuples, aligned to ``tuple_size``.
"""

from __future__ import annotations

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
