"""How often a long-running topology repeats itself in its task log.

A stream runs for days; a line per micro-batch or per flush buries what
matters (a warning, a state change) and grows the log forever while nothing
happens. The rule: an event that repeats is counted, and one line sums up
what was counted at most every :data:`QUIET_EVERY_S`; what is news (a state
change, a failure, the first occurrence) is the caller's to log at once.
"""

from __future__ import annotations

#: Seconds between two lines of the same recurring kind (a status, a summary).
QUIET_EVERY_S = 60.0


class Tally:
    """Counts of a recurring event between two summary lines.

    ``add(now, **counts)`` adds to the counts; it returns them, with the seconds they
    cover, when the last summary is at least ``every_s`` old (the first event is due
    at once), and starts counting again. Otherwise it returns None. Time is passed in.
    """

    def __init__(self, every_s: float = QUIET_EVERY_S) -> None:
        if every_s <= 0:
            raise ValueError(f"every_s={every_s!r} must be > 0")
        self.every_s = every_s
        self._since: float | None = None  # the last summary's time
        self._counts: dict[str, int] = {}
        self._events = 0

    def add(self, now: float, **counts: int) -> tuple[int, dict[str, int], float] | None:
        """``(events, counts, seconds covered)`` if a summary is due now, else None."""
        self._events += 1
        for name, value in counts.items():
            self._counts[name] = self._counts.get(name, 0) + value
        if self._since is not None and now - self._since < self.every_s:
            return None
        covered = 0.0 if self._since is None else now - self._since
        due = (self._events, self._counts, covered)
        self._since, self._counts, self._events = now, {}, 0
        return due
