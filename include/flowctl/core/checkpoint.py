"""Cumulative-ack checkpoint and the processed/durable ledger (SPEC A; seed 000_7245d8bf028e7bc3).

Acks arrive in any order, but a restart can only resume from one position per
partition, so only the highest *contiguous* acked position is recorded. The
seed's worked example, with tuples numbered from 1:

    ack 1, 3, 4  -> checkpoint 1   (2 is missing: 3 and 4 wait)
    ack 2        -> checkpoint 4   (1..4 are now contiguous)

For Kafka a tuple is an offset range ``[start, end)``; the committed offset of a
partition is the ``end`` of the highest contiguous acked tuple, i.e. the next
offset to read after a restart (Kafka's convention).

Two acks, two purposes. The *processed* ack (the result was handed to the
persistence queue) frees a window slot and gives an rt
(:mod:`flowctl.core.window`). The *durable* ack (the result was flushed to
the database, or the tuple was written to a replay/DLQ topic: its outcome can
no longer be lost) drives the checkpoint. :class:`AckLedger` keeps both per
tuple, so a crash between the two repeats the processed-not-durable tuples;
it never skips them.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from .tuples import TopicPartition, TupleRange


class CheckpointError(ValueError):
    """An ack that contradicts the ranges already seen (overlap or unknown tuple)."""


@dataclass(frozen=True)
class ContiguousSnapshot:
    """Immutable state of a :class:`ContiguousAck`."""

    position: int
    pending: tuple[tuple[int, int], ...]


class ContiguousAck:
    """Highest contiguous acked position over half-open ranges ``[start, end)``.

    Everything in ``[base, position)`` has been acked; acked ranges beyond the
    first gap wait in ``pending`` until the gap closes.
    """

    def __init__(self, base: int = 0) -> None:
        if not isinstance(base, int) or isinstance(base, bool) or base < 0:
            raise ValueError(f"ContiguousAck: base must be an int >= 0, got {base!r}")
        self._position = base
        self._pending: dict[int, int] = {}
        self._starts: list[int] = []

    @property
    def position(self) -> int:
        """First position not known to be acked (the Kafka offset to commit)."""
        return self._position

    @property
    def pending(self) -> list[tuple[int, int]]:
        """Acked ranges waiting behind a gap, in order."""
        return [(s, self._pending[s]) for s in self._starts]

    def ack(self, start: int, end: int) -> bool:
        """Record an acked range; True if the position advanced.

        A range already covered is a duplicate and is ignored (at-least-once
        delivery repeats acks). A range overlapping another differently is a
        bug upstream and raises :class:`CheckpointError`.
        """
        if not (isinstance(start, int) and isinstance(end, int)) or end <= start or start < 0:
            raise CheckpointError(f"ContiguousAck.ack: bad range start={start!r} end={end!r}")
        if end <= self._position:
            return False
        if start < self._position:
            raise CheckpointError(
                f"ContiguousAck.ack: range [{start}, {end}) straddles position {self._position}"
            )
        if self._pending.get(start) == end:
            return False
        i = bisect.bisect_left(self._starts, start)
        clash = None
        if i < len(self._starts) and self._starts[i] < end:
            clash = self._starts[i]
        elif i > 0 and self._pending[self._starts[i - 1]] > start:
            clash = self._starts[i - 1]
        if clash is not None:
            raise CheckpointError(
                f"ContiguousAck.ack: range [{start}, {end}) overlaps "
                f"[{clash}, {self._pending[clash]})"
            )
        if start != self._position:
            self._starts.insert(i, start)
            self._pending[start] = end
            return False
        self._position = end
        while self._starts and self._starts[0] == self._position:
            self._position = self._pending.pop(self._starts.pop(0))
        return True

    def snapshot(self) -> ContiguousSnapshot:
        return ContiguousSnapshot(self._position, tuple(self.pending))

    @classmethod
    def from_snapshot(cls, snap: ContiguousSnapshot) -> ContiguousAck:
        c = cls(snap.position)
        for start, end in snap.pending:
            c.ack(start, end)
        return c


class SequenceCheckpoint:
    """The seed's view: tuples numbered ``first, first+1, ...``; the checkpoint
    is the highest number up to which every tuple is acked (``first - 1`` when
    none is)."""

    def __init__(self, first: int = 1) -> None:
        self._acks = ContiguousAck(first)

    def ack(self, number: int) -> int:
        """Ack tuple ``number``; returns the checkpoint after it."""
        self._acks.ack(number, number + 1)
        return self.checkpoint

    @property
    def checkpoint(self) -> int:
        return self._acks.position - 1


class TupleStatus(StrEnum):
    """Where a tuple is between admission and the checkpoint."""

    ADMITTED = "ADMITTED"  # cut and sent (or buffered); no outcome yet
    PROCESSED = "PROCESSED"  # processed ack: result handed to the persistence queue
    DURABLE = "DURABLE"  # durable ack: its outcome can no longer be lost


@dataclass(frozen=True)
class LedgerSnapshot:
    """Immutable, picklable state of an :class:`AckLedger`."""

    partitions: tuple[tuple[TopicPartition, ContiguousSnapshot], ...]
    tuples: tuple[tuple[TupleRange, TupleStatus], ...]


class AckLedger:
    """Processed vs durable per tuple, and the durable checkpoint per partition.

    ``admit`` a tuple when it is cut; ``processed`` on the lane's ack;
    ``failed`` when it must be processed again; ``durable`` once its outcome is
    safe. ``checkpoint()`` is the offset per partition to commit, and the
    offset a restart resumes from; it never passes a tuple that is not durable.
    """

    def __init__(self, positions: Mapping[TopicPartition, int] | None = None) -> None:
        self._acks: dict[TopicPartition, ContiguousAck] = {}
        self._tuples: dict[str, tuple[TupleRange, TupleStatus]] = {}
        for tp, offset in (positions or {}).items():
            self._acks[TopicPartition(*tp)] = ContiguousAck(offset)

    def admit(self, t: TupleRange) -> None:
        """Start tracking ``t``; it must lie at or beyond its partition's checkpoint."""
        acks = self._acks.setdefault(t.topic_partition, ContiguousAck(t.start))
        if t.start < acks.position:
            raise CheckpointError(
                f"AckLedger.admit: tuple {t.id} starts before the checkpoint {acks.position}"
            )
        if t.id in self._tuples:
            return  # re-admitting a tuple being retried changes nothing
        self._tuples[t.id] = (t, TupleStatus.ADMITTED)

    def processed(self, tuple_id: str) -> TupleRange:
        """The processed ack; the tuple still blocks the checkpoint until durable."""
        t, status = self._get(tuple_id, "processed")
        if status is TupleStatus.ADMITTED:
            self._tuples[tuple_id] = (t, TupleStatus.PROCESSED)
        return t

    def failed(self, tuple_id: str) -> TupleRange:
        """The tuple must be processed again (fail, timeout, lost result)."""
        t, _ = self._get(tuple_id, "failed")
        self._tuples[tuple_id] = (t, TupleStatus.ADMITTED)
        return t

    def durable(self, tuple_id: str) -> bool:
        """The durable ack; True if its partition's checkpoint advanced.

        A repeated durable ack of a tuple already below the checkpoint is
        ignored (flushes are at-least-once).
        """
        entry = self._tuples.pop(tuple_id, None)
        if entry is None:
            t = TupleRange.parse_id(tuple_id)
            acks = self._acks.get(t.topic_partition)
            if acks is not None and t.end <= acks.position:
                return False
            raise CheckpointError(f"AckLedger.durable: unknown tuple {tuple_id!r}")
        t, _ = entry
        return self._acks[t.topic_partition].ack(t.start, t.end)

    def status(self, tuple_id: str) -> TupleStatus:
        """Status of a tracked tuple; DURABLE once it has left the ledger."""
        entry = self._tuples.get(tuple_id)
        if entry is not None:
            return entry[1]
        t = TupleRange.parse_id(tuple_id)
        acks = self._acks.get(t.topic_partition)
        if acks is not None and (t.end <= acks.position or (t.start, t.end) in acks.pending):
            return TupleStatus.DURABLE
        raise CheckpointError(f"AckLedger.status: unknown tuple {tuple_id!r}")

    def checkpoint(self) -> dict[TopicPartition, int]:
        """Offset to commit per partition: the end of the highest contiguous durable tuple."""
        return {tp: acks.position for tp, acks in self._acks.items()}

    def at_risk(self) -> list[TupleRange]:
        """Processed but not durable: what a crash now would make us repeat."""
        return sorted(t for t, s in self._tuples.values() if s is TupleStatus.PROCESSED)

    def outstanding(self) -> int:
        """Tuples admitted and not yet durable."""
        return len(self._tuples)

    def snapshot(self) -> LedgerSnapshot:
        return LedgerSnapshot(
            partitions=tuple((tp, acks.snapshot()) for tp, acks in sorted(self._acks.items())),
            tuples=tuple(sorted(self._tuples.values())),
        )

    @classmethod
    def from_snapshot(cls, snap: LedgerSnapshot) -> AckLedger:
        ledger = cls()
        for tp, acks in snap.partitions:
            ledger._acks[TopicPartition(*tp)] = ContiguousAck.from_snapshot(acks)
        ledger._tuples = {t.id: (t, TupleStatus(s)) for t, s in snap.tuples}
        return ledger

    def _get(self, tuple_id: str, action: str) -> tuple[TupleRange, TupleStatus]:
        entry = self._tuples.get(tuple_id)
        if entry is None:
            raise CheckpointError(f"AckLedger.{action}: unknown tuple {tuple_id!r}")
        return entry
