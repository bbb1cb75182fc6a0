"""Time for the pure core: a protocol, the real monotonic clock, a fake one.

The core never calls ``time.time()`` itself: every component takes a
``Clock`` so a test can drive it with :class:`FakeClock` and assert exact
values. Seconds are floats.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Protocol


class Clock(Protocol):
    """Anything with ``now() -> float`` (seconds, monotonic)."""

    def now(self) -> float: ...


class MonotonicClock:
    """The real clock: ``time.monotonic()``."""

    def now(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to; for tests and the simulator."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> float:
        """Move forward by ``seconds`` (>= 0) and return the new time."""
        if seconds < 0:
            raise ValueError(f"FakeClock.advance: seconds must be >= 0, got {seconds!r}")
        self._now += seconds
        return self._now

    def set(self, now: float) -> None:
        """Jump to ``now``; time never goes backwards."""
        if now < self._now:
            raise ValueError(f"FakeClock.set: now={now!r} is before the current time {self._now!r}")
        self._now = float(now)


def utc_text(moment: dt.datetime | float) -> str:
    """A wall-clock time as every output of flowctl shows it: UTC, to the second
    (``2026-11-28 17:36:52 UTC``), as the metrics page does (Airflow's default zone).
    ``moment``: an aware datetime, a naive one taken as UTC (SQLite returns those), or
    epoch seconds."""
    if not isinstance(moment, dt.datetime):
        moment = dt.datetime.fromtimestamp(moment, dt.UTC)
    elif moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return f"{moment.astimezone(dt.UTC):%Y-%m-%d %H:%M:%S} UTC"
