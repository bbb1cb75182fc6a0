"""XOR acker: constant-size tracking of a tuple tree (SPEC B; seeds 004_2d41c2b7f9257789, 001).

Storm's acker keeps, per source tuple (root), one entry ``{ack_val,
source_task, failed, created}`` however large the tree the tuple spawns:

* ``ack_init(root, edge)``: the source emitted edge(s) of the tree:
  ``ack_val ^= edge``.
* an operator that consumed edge ``e`` and emitted children ``c1..ck`` sends
  ``ack(root, e ^ c1 ^ ... ^ ck)``: every edge id enters the value twice (once
  when emitted, once when acked), so ``ack_val == 0`` exactly when every edge
  was acked (up to a 2**-64 chance of a random cancellation).
* ``ack_val == 0`` -> the tree is complete -> the source is told ack(root).
  ``fail(root)`` -> the source is told fail(root).
* entries expire in a :class:`~flowctl.core.rotating_map.TimedRotatingMap`;
  an expired entry is reported as a timeout (a fail for the source). The
  timeout counts from ``ack_init``: acks update an entry in place and do not
  refresh its lifetime.

Ids are random 64-bit integers from an injectable ``random.Random`` (seeded in
tests and in the simulator). Every method returns the events it caused, timeouts
first; nothing calls back into the caller. In this platform the driver calls
``ack_init`` before it dispatches a tuple, so an ack or fail for an unknown root
means the tree already completed, failed or timed out: it is counted in
``stale`` and otherwise ignored (JStorm reads such a message as a timeout that
has already been reported).
"""

from __future__ import annotations

import random
from collections.abc import Hashable
from dataclasses import dataclass, replace
from enum import StrEnum

from .clock import Clock
from .rotating_map import TimedRotatingMap

MAX_ID = (1 << 64) - 1


class AckerEventKind(StrEnum):
    COMPLETE = "complete"
    FAILED = "failed"
    TIMED_OUT = "timed_out"


@dataclass(frozen=True)
class AckerEvent:
    """The outcome of one tuple tree, for its source task."""

    kind: AckerEventKind
    root: int
    source_task: Hashable
    created: float
    at: float


@dataclass(frozen=True)
class AckEntry:
    """The acker's constant-size record of one tuple tree.

    ``failed`` is set on the copy reported with a FAILED event: a fail is
    reported at once and the entry leaves the map, as in Storm's acker.
    """

    ack_val: int
    source_task: Hashable
    failed: bool
    created: float


@dataclass(frozen=True)
class AckerSnapshot:
    """Immutable, picklable state of an :class:`XorAcker`; ``created`` times are ages."""

    timeout_s: float
    buckets: tuple[tuple[tuple[int, AckEntry], ...], ...]
    next_rotation_in: float
    stale: int
    rng_state: tuple[object, ...]


def _check_id(name: str, value: int, *, allow_zero: bool) -> int:
    low = 0 if allow_zero else 1
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_ID:
        raise ValueError(f"XorAcker: {name} must be an int in [{low}, 2**64 - 1], got {value!r}")
    return value


class XorAcker:
    """Tracks tuple trees by XOR; reports complete / failed / timed out."""

    def __init__(
        self,
        clock: Clock,
        *,
        timeout_s: float = 30.0,
        buckets: int = 3,
        rng: random.Random | None = None,
    ) -> None:
        self._clock = clock
        self._rng = rng if rng is not None else random.Random()
        self._pending: TimedRotatingMap[int, AckEntry] = TimedRotatingMap(clock, timeout_s, buckets)
        self.stale = 0

    @property
    def pending(self) -> int:
        """Tuple trees not yet complete, failed or timed out."""
        return len(self._pending)

    def entry(self, root: int) -> AckEntry | None:
        """The entry of ``root``, or None if it is not pending."""
        return self._pending.get(root)

    def new_id(self) -> int:
        """A random non-zero 64-bit edge id."""
        while True:
            value = self._rng.getrandbits(64)
            if value:
                return value

    def new_root(self) -> int:
        """A random non-zero 64-bit root id not currently pending."""
        while True:
            root = self.new_id()
            if root not in self._pending:
                return root

    def ack_init(self, root: int, edge: int, source_task: Hashable = None) -> list[AckerEvent]:
        """Start tracking ``root``; ``edge`` is the XOR of the edges the source emitted."""
        _check_id("root", root, allow_zero=False)
        _check_id("edge", edge, allow_zero=True)
        events = self.expire()
        if root in self._pending:
            raise ValueError(f"XorAcker.ack_init: root {root} is already pending")
        entry = AckEntry(edge, source_task, False, self._clock.now())
        if edge == 0:  # nothing emitted: the tree is complete at once
            return [*events, self._event(AckerEventKind.COMPLETE, root, entry)]
        self._pending.put(root, entry)
        return events

    def ack(self, root: int, xor_val: int) -> list[AckerEvent]:
        """An operator acked its input edge; ``xor_val`` = input edge ^ emitted children."""
        _check_id("root", root, allow_zero=False)
        _check_id("xor_val", xor_val, allow_zero=True)
        events = self.expire()
        entry = self._pending.get(root)
        if entry is None:
            self.stale += 1
            return events
        entry = replace(entry, ack_val=entry.ack_val ^ xor_val)
        if entry.ack_val == 0:
            self._pending.pop(root)
            return [*events, self._event(AckerEventKind.COMPLETE, root, entry)]
        self._pending.update(root, entry)
        return events

    def fail(self, root: int) -> list[AckerEvent]:
        """An operator failed the tree: the source is told at once."""
        _check_id("root", root, allow_zero=False)
        events = self.expire()
        entry = self._pending.pop(root)
        if entry is None:
            self.stale += 1
            return events
        return [*events, self._event(AckerEventKind.FAILED, root, replace(entry, failed=True))]

    def expire(self) -> list[AckerEvent]:
        """Timeouts due now (entries whose bucket rotated out)."""
        return [
            self._event(AckerEventKind.TIMED_OUT, root, entry)
            for root, entry in self._pending.expire()
        ]

    def snapshot(self) -> AckerSnapshot:
        """Pending trees (creation times as ages), rotation phase and the id generator."""
        now = self._clock.now()
        return AckerSnapshot(
            timeout_s=self._pending.timeout_s,
            buckets=tuple(
                tuple((root, replace(e, created=now - e.created)) for root, e in bucket)
                for bucket in self._pending.bucket_items()
            ),
            next_rotation_in=self._pending.next_rotation_in(),
            stale=self.stale,
            rng_state=self._rng.getstate(),
        )

    @classmethod
    def from_snapshot(cls, snap: AckerSnapshot, clock: Clock) -> XorAcker:
        """Rebuild on ``clock`` (e.g. a fresh monotonic clock after a restart)."""
        rng = random.Random()
        rng.setstate(snap.rng_state)
        acker = cls(clock, timeout_s=snap.timeout_s, buckets=len(snap.buckets), rng=rng)
        now = clock.now()
        acker._pending.load_buckets(
            tuple(
                tuple((root, replace(e, created=now - e.created)) for root, e in bucket)
                for bucket in snap.buckets
            )
        )
        acker._pending.set_next_rotation_in(snap.next_rotation_in)
        acker.stale = snap.stale
        return acker

    def _event(self, kind: AckerEventKind, root: int, entry: AckEntry) -> AckerEvent:
        return AckerEvent(kind, root, entry.source_task, entry.created, self._clock.now())
