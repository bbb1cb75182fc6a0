"""Records gone from the log before they were processed, and read errors that persist.

Two decisions of the planner (docs/flow-control.md, "Data loss and read errors"), pure
so that a test drives them with exact offsets and a fake clock:

* :func:`lost_ranges`: which offsets of Eden are gone before they were durable. The
  durable checkpoint is the reference: what lies below it has its outcome in the
  database; what lies at or past it must still be in the log, or it can never be
  processed again. Two ways to lose it:

  - the log's **start** moved past the checkpoint (retention, DeleteRecords): the
    records ``[checkpoint, start)`` are gone;
  - the log's **end** is below the spout's position (the topic was deleted and
    recreated, the broker's log was reset): the old log's records
    ``[checkpoint, old end)`` are gone, and the new log's offsets start again below
    what the spout has cut, so reading on would skip the new records too.

* :class:`LossWatch`: a start past the checkpoint is declared only when two reads of
  the start, ``checkpoint`` re-read in between, agree: a record processed just before
  retention took it is durable a flush later, and must not stop a topology. A reset
  log is declared when two reads of the ends in a row find it (flushing never brings
  the old log back, but a broker may misreport an end once: Tansu answered a
  partition's end as 0 while a producer's transactions were being written to it).

* :class:`ReadErrors`: per partition, since when its reads fail without a success in
  between; an error that persists past the bound is the topology's cause of failure,
  never an idle topology.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from .clock import Clock

__all__ = [
    "DataLossError",
    "LossKind",
    "LossWatch",
    "LostRange",
    "ReadErrors",
    "ReadFailure",
    "ReadPathError",
    "failure_cause",
    "lost_ranges",
]


class DataLossError(RuntimeError):
    """Records were lost before processing and the topology stops (``on_data_loss``)."""

    def __init__(self, lost: Sequence[LostRange], why: str) -> None:
        super().__init__(
            f"records lost before processing ({why}): " + "; ".join(r.describe() for r in lost)
        )
        self.lost = list(lost)


class ReadPathError(RuntimeError):
    """A read error persisted past ``[flow] read_error_timeout_s``: never an idle topology."""

    def __init__(self, failures: Sequence[ReadFailure], bound_s: float) -> None:
        super().__init__(
            f"read errors persisted past read_error_timeout_s={bound_s:g}: "
            + "; ".join(f.describe() for f in failures)
        )
        self.failures = list(failures)


_CAUSE = re.compile(r"\b(DataLossError|ReadPathError): ([^\n]+)")


def failure_cause(text: str) -> str | None:
    """The cause a failed query's error text carries, when the planner raised one of this
    module's errors (Spark wraps it in its own exception: the line is found in the text)."""
    found = _CAUSE.search(text)
    return None if found is None else found.group(2).strip()


class LossKind(StrEnum):
    """How records were lost (see the module docstring)."""

    LOG_START = "log start"
    LOG_RESET = "log reset"


@dataclass(frozen=True)
class LostRange:
    """Offsets ``[first, end)`` of ``topic``/``partition`` gone before they were durable."""

    topic: str
    partition: int
    first: int
    end: int
    kind: LossKind
    #: What the log said: its start, or its end below the position.
    detail: str

    @property
    def records(self) -> int:
        return max(0, self.end - self.first)

    def describe(self) -> str:
        """One line naming the partition, the range and why (the task log, the cause)."""
        return (
            f"{self.topic} partition {self.partition}: offsets [{self.first}, {self.end}) "
            f"({self.records} record(s)) lost before processing: {self.detail}"
        )


def lost_ranges(
    topic: str,
    *,
    checkpoints: Mapping[int, int],
    ends: Mapping[int, int],
    positions: Mapping[int, int],
    starts: Mapping[int, int] | None = None,
    seen_ends: Mapping[int, int] | None = None,
) -> list[LostRange]:
    """The ranges of ``topic`` gone before they were durable, one per partition at most.

    ``checkpoints``: the durable checkpoint per partition (absent: 0); ``ends``: the
    log's end offsets now; ``positions``: the first offset the spout has not cut yet;
    ``starts``: the log's start offsets (``None``: not read this time, no start check);
    ``seen_ends``: the ends read before (the old log's end, for a reset log).
    """
    out: list[LostRange] = []
    for p, end in sorted(ends.items()):
        checkpoint = checkpoints.get(p, 0)
        position = max(positions.get(p, checkpoint), checkpoint)
        if end < position:
            old_end = max((seen_ends or {}).get(p, 0), position)
            detail = (
                f"the log ends at {end}, below the position {position} the topology had "
                f"reached (start offset {position} is past the log end {end}: the topic was "
                f"deleted and recreated, or the broker's log was reset)"
            )
            out.append(LostRange(topic, p, checkpoint, old_end, LossKind.LOG_RESET, detail))
            continue
        start = None if starts is None else starts.get(p)
        if start is not None and start > checkpoint:
            detail = (
                f"the log now starts at {start}, past the durable checkpoint {checkpoint} "
                f"(retention or DeleteRecords removed them)"
            )
            out.append(LostRange(topic, p, checkpoint, start, LossKind.LOG_START, detail))
    return out


class LossWatch:
    """Declares a lost range when the evidence is final (see the module docstring)."""

    def __init__(self) -> None:
        self._suspects: dict[int, LostRange] = {}
        self._resets: set[int] = set()

    def declare(self, found: list[LostRange], *, starts_read: bool) -> list[LostRange]:
        """The ranges of ``found`` to act on now. A reset log is declared when the previous
        check (the previous read of the ends) found the same partition reset too; a
        log-start loss when the previous start read found the same partition lost too;
        ``starts_read``: whether this check had the log's starts (only then do those
        suspicions change)."""
        resets = {r.partition: r for r in found if r.kind is LossKind.LOG_RESET}
        declared = [r for p, r in resets.items() if p in self._resets]
        self._resets = set(resets)
        if not starts_read:
            return declared
        current = {r.partition: r for r in found if r.kind is LossKind.LOG_START}
        declared += [r for p, r in current.items() if p in self._suspects]
        self._suspects = current
        return declared

    def forget(self, partition: int) -> None:
        """A loss that was acted on (skipped) is no longer a suspicion."""
        self._suspects.pop(partition, None)
        self._resets.discard(partition)


@dataclass(frozen=True)
class ReadFailure:
    """A read error of one partition (``None``: the read of the whole topic) that persists."""

    topic: str
    partition: int | None
    error: str
    failing_for_s: float

    def describe(self) -> str:
        where = "every partition" if self.partition is None else f"partition {self.partition}"
        return (
            f"{self.topic} {where}: reads failing for {self.failing_for_s:.0f} s, "
            f"last error: {self.error}"
        )


class ReadErrors:
    """Since when each partition's reads fail; a success clears the partition."""

    def __init__(self, clock: Clock, bound_s: float) -> None:
        self._clock = clock
        self.bound_s = bound_s
        self._since: dict[tuple[str, int | None], float] = {}
        self._last: dict[tuple[str, int | None], str] = {}

    def failed(self, topic: str, partition: int | None, error: str) -> None:
        key = (topic, partition)
        self._since.setdefault(key, self._clock.now())
        self._last[key] = error

    def succeeded(self, topic: str, partition: int | None) -> None:
        """A read of ``partition`` worked (``None``: the whole topic's read, which also
        clears nothing of a single partition's failures)."""
        self._since.pop((topic, partition), None)
        self._last.pop((topic, partition), None)

    def failing(self) -> bool:
        return bool(self._since)

    def persistent(self) -> list[ReadFailure]:
        """The failures older than the bound, oldest first."""
        now = self._clock.now()
        late = sorted(((since, key) for key, since in self._since.items()), key=lambda x: x[0])
        return [
            ReadFailure(key[0], key[1], self._last[key], now - since)
            for since, key in late
            if now - since > self.bound_s
        ]
