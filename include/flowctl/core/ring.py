"""Disruptor-style ring buffer (SPEC H; seed 001_61fde93b6fcf7afc).

JStorm passes messages between threads through LMAX's Disruptor: a
pre-allocated array whose size is a power of two (a slot is ``seq & mask``,
no modulo), one producer cursor, and one sequence per consumer. A consumer
does not take items one by one: it catches up in a batch, from its own
sequence to the cursor.

What happens when a slow consumer is lapped (the producer is a whole ring
ahead of it) depends on the mode:

* ``overwrite=False`` (Disruptor's gating, the default): the producer may not
  overwrite a slot some consumer has not read. ``publish`` raises
  :class:`RingFullError`; the caller backs off (pure code never blocks).
* ``overwrite=True`` (metric rings, where the newest data matters most): the
  producer overwrites; on its next ``poll`` a lapped consumer jumps to the
  oldest slot still held and the batch reports how many items it ``missed``.
  Nothing is skipped silently.

Single-owner: the Disruptor is lock-free through memory barriers that Python
does not expose; share a ring between threads only behind a lock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


class RingFullError(RuntimeError):
    """Publishing would overwrite a slot a gating consumer has not read yet."""


@dataclass(frozen=True)
class Batch(Generic[T]):
    """Items ``first_seq .. first_seq + len(items) - 1``; ``missed`` were overwritten."""

    first_seq: int
    items: tuple[T, ...]
    missed: int = 0

    @property
    def last_seq(self) -> int:
        return self.first_seq + len(self.items) - 1


class Consumer(Generic[T]):
    """One reader with its own sequence (the last sequence it has read)."""

    def __init__(self, ring: RingBuffer[T], name: str, sequence: int) -> None:
        self._ring = ring
        self.name = name
        self.sequence = sequence

    @property
    def lag(self) -> int:
        """Published items this consumer has not read."""
        return self._ring.cursor - self.sequence

    def poll(self, max_batch: int | None = None) -> Batch[T]:
        """Catch up: every item after ``sequence`` up to the cursor (or ``max_batch``)."""
        if max_batch is not None and (not isinstance(max_batch, int) or max_batch < 1):
            raise ValueError(f"Consumer.poll: max_batch must be an int >= 1, got {max_batch!r}")
        ring = self._ring
        oldest = ring.cursor - ring.capacity + 1
        missed = 0
        if self.sequence + 1 < oldest:
            missed = oldest - (self.sequence + 1)
            self.sequence = oldest - 1
        first = self.sequence + 1
        last = ring.cursor if max_batch is None else min(ring.cursor, self.sequence + max_batch)
        items = tuple(ring._slot(seq) for seq in range(first, last + 1))
        self.sequence = max(self.sequence, last)
        return Batch(first, items, missed)


class RingBuffer(Generic[T]):
    """A power-of-two ring with a producer cursor and consumer sequences."""

    def __init__(self, capacity: int, *, overwrite: bool = False) -> None:
        if (
            not isinstance(capacity, int)
            or isinstance(capacity, bool)
            or capacity < 1
            or capacity & (capacity - 1)
        ):
            raise ValueError(f"RingBuffer: capacity must be a power of two >= 1, got {capacity!r}")
        self.capacity = capacity
        self.overwrite = overwrite
        self._mask = capacity - 1
        self._slots: list[T | None] = [None] * capacity
        self.cursor = -1
        self._consumers: dict[str, Consumer[T]] = {}

    def consumer(self, name: str) -> Consumer[T]:
        """Register a consumer (it sees items published from now on), or return it."""
        if name not in self._consumers:
            self._consumers[name] = Consumer(self, name, self.cursor)
        return self._consumers[name]

    def remove_consumer(self, name: str) -> None:
        """Stop gating on ``name`` (a consumer that went away must not block the producer)."""
        self._consumers.pop(name, None)

    def remaining_capacity(self) -> int:
        """Items publishable now without lapping the slowest consumer."""
        if self.overwrite or not self._consumers:
            return self.capacity
        slowest = min(c.sequence for c in self._consumers.values())
        return self.capacity - (self.cursor - slowest)

    def publish(self, item: T) -> int:
        """Write ``item`` in the next slot; returns its sequence."""
        if self.remaining_capacity() <= 0:
            slowest = min(self._consumers.values(), key=lambda c: c.sequence)
            raise RingFullError(
                f"RingBuffer: full (capacity {self.capacity}); consumer {slowest.name!r} "
                f"is at sequence {slowest.sequence}, cursor {self.cursor}"
            )
        seq = self.cursor + 1
        self._slots[seq & self._mask] = item
        self.cursor = seq
        return seq

    def publish_all(self, items: Iterable[T]) -> int:
        """Publish in order; returns the last sequence (the cursor)."""
        for item in items:
            self.publish(item)
        return self.cursor

    def _slot(self, seq: int) -> T:
        return self._slots[seq & self._mask]  # type: ignore[return-value]
