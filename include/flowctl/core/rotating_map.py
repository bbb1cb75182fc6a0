"""Rotating-bucket map: entries that expire without a timer each (SPEC B; seeds 001, 004).

Storm's and JStorm's ackers keep pending tuple trees in a ``RotatingMap``: N
buckets, new entries go into the newest; every ``timeout / N`` the oldest
bucket is dropped and whatever is still in it has expired. Expiry costs
nothing per entry, and the map never scans.

With N buckets rotated every ``period = timeout / N``, an entry expires
between ``timeout - period`` and ``timeout`` after it entered its bucket:
never later than the timeout, at most one period early. More buckets give
more precision for a little more memory.

:class:`RotatingMap` is the bare structure (the caller rotates);
:class:`TimedRotatingMap` rotates on a :class:`~flowctl.core.clock.Clock`
whenever it is touched and returns what expired.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from .clock import Clock

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class RotatingMap(Generic[K, V]):
    """N buckets, newest first. ``put`` refreshes an entry; ``update`` does not."""

    def __init__(self, buckets: int) -> None:
        if not isinstance(buckets, int) or isinstance(buckets, bool) or buckets < 2:
            raise ValueError(f"RotatingMap: buckets must be an int >= 2, got {buckets!r}")
        self._buckets: deque[dict[K, V]] = deque({} for _ in range(buckets))

    @property
    def buckets(self) -> int:
        return len(self._buckets)

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets)

    def __contains__(self, key: object) -> bool:
        return any(key in b for b in self._buckets)

    def __iter__(self) -> Iterator[K]:
        for b in self._buckets:
            yield from b

    def get(self, key: K, default: V | None = None) -> V | None:
        for b in self._buckets:
            if key in b:
                return b[key]
        return default

    def put(self, key: K, value: V) -> None:
        """Insert or replace ``key`` in the newest bucket (its lifetime restarts)."""
        for b in self._buckets:
            b.pop(key, None)
        self._buckets[0][key] = value

    def update(self, key: K, value: V) -> None:
        """Replace the value of an existing key in place: its lifetime does not restart."""
        for b in self._buckets:
            if key in b:
                b[key] = value
                return
        raise KeyError(key)

    def pop(self, key: K) -> V | None:
        """Remove ``key``; its value, or None if absent."""
        for b in self._buckets:
            if key in b:
                return b.pop(key)
        return None

    def bucket_items(self) -> tuple[tuple[tuple[K, V], ...], ...]:
        """Every bucket's entries, newest bucket first (for snapshots)."""
        return tuple(tuple(b.items()) for b in self._buckets)

    def load_buckets(self, buckets: tuple[tuple[tuple[K, V], ...], ...]) -> None:
        """Replace the content with :meth:`bucket_items` output of the same bucket count."""
        if len(buckets) != len(self._buckets):
            raise ValueError(
                f"RotatingMap.load_buckets: expected {len(self._buckets)} buckets, "
                f"got {len(buckets)}"
            )
        self._buckets = deque(dict(b) for b in buckets)

    def rotate(self) -> dict[K, V]:
        """Drop the oldest bucket and return its entries: they have expired."""
        expired = self._buckets.pop()
        self._buckets.appendleft({})
        return expired


class TimedRotatingMap(RotatingMap[K, V]):
    """A :class:`RotatingMap` rotated every ``timeout_s / buckets`` on a clock.

    ``expire()`` performs every rotation due since the last call (a gap of
    several periods rotates several times; more than N periods empties the map)
    and returns the expired entries, oldest bucket first.
    """

    def __init__(self, clock: Clock, timeout_s: float, buckets: int = 3) -> None:
        super().__init__(buckets)
        if not isinstance(timeout_s, int | float) or not timeout_s > 0:
            raise ValueError(f"TimedRotatingMap: timeout_s must be > 0, got {timeout_s!r}")
        self._clock = clock
        self.timeout_s = float(timeout_s)
        self.period_s = self.timeout_s / buckets
        self._next_rotation = clock.now() + self.period_s

    def next_rotation_in(self) -> float:
        """Seconds until the next rotation, negative when rotations are overdue (a
        phase that survives a clock change; overdue rotations happen at the next
        :meth:`expire` after a restore, so no timeout is lost)."""
        return self._next_rotation - self._clock.now()

    def set_next_rotation_in(self, seconds: float) -> None:
        """Restore the rotation phase on this map's clock."""
        if not seconds <= self.period_s:
            raise ValueError(
                f"TimedRotatingMap: next rotation must be <= {self.period_s} s away, "
                f"got {seconds!r}"
            )
        self._next_rotation = self._clock.now() + seconds

    def expire(self) -> list[tuple[K, V]]:
        now = self._clock.now()
        if now < self._next_rotation:
            return []
        due = int((now - self._next_rotation) // self.period_s) + 1
        expired: list[tuple[K, V]] = []
        for _ in range(min(due, self.buckets)):  # beyond N rotations the map is empty
            expired.extend(self.rotate().items())
        self._next_rotation += due * self.period_s
        return expired
