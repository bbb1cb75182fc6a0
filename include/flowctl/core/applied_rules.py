"""The rules of ``applied_ranges``, without the database: claim decisions and coalescing.

:mod:`flowctl.adapters.applied` reads the rows of a partition near the ranges being
claimed, and this module decides each claim (its module docstring states the rules);
:func:`coalesce_runs` says which rows below the durable checkpoint merge into one, so the
table stays bounded (docs/flow-control.md, "Bookkeeping that stays bounded"). Both are
pure, so a property test can drive any interleaving of claims and coalescing without a
database (tests/unit/test_applied_rules.py).

A row is ``(start, end, outcome)`` of one partition.

Coalescing: contiguous *top-level* ``applied`` rows, wholly below the checkpoint, become
one row. Every claim is then decided as it was before:

- a range inside such a run was a duplicate (an exact row, or a range inside one, is a
  duplicate), and the merged row covering it still makes it one. The one exception, a
  poison record the lane isolated from its tuple (rule 4: its one-record ``dlq`` claim
  inside an ``applied`` row is new), is marked by the lane (:attr:`Claim.isolated`), so it
  is told apart from a repeat of a one-record tuple by its mark, never by the rows it
  meets: an unmarked one-record ``dlq`` claim inside an ``applied`` row is a repeat
  whether that row is its own or a merged one, and one-record rows merge like any other.
  The lane isolates records only from tuples of two records or more
  (:func:`flowctl.core.isolation.verdict`), so a marked claim never equals a tuple's row;
- rows nested in others (isolated poison records, replays inside a ``replayed`` row) and
  ``replayed`` and ``dlq`` rows never merge, so replays of a replayed tuple are still
  claimed inside its row, and the reconcile still classifies every offset by its
  innermost row.

A claim straddling two tuples merged into one row is a duplicate where it was a
:class:`RangeConflict` before: tuple boundaries are a pure function of the offset, so only
a writer bug cuts such a range, and below the checkpoint the boundaries are not kept (the
checkpoint already answers "durable" for ranges without rows there).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass

from .persistence import OUTCOMES
from .tuples import TupleRange

__all__ = [
    "Claim",
    "PartitionRows",
    "RangeConflict",
    "coalesce_runs",
    "decide",
    "replaced_by",
]

#: ``(start, end, outcome)`` of one partition's ``applied_ranges`` row.
Row = tuple[int, int, str]


class RangeConflict(ValueError):
    """A range overlaps an applied range (or the checkpoint) without either covering the other.

    Tuple boundaries are a pure function of the offset, so this never happens unless a
    producer of tuple ids is wrong; nothing of the transaction is written.
    """

    def __init__(self, pipeline: str, new: TupleRange, existing: str) -> None:
        super().__init__(
            f"pipeline {pipeline!r}: range {new.id} partially overlaps {existing}; tuple "
            f"boundaries must be a pure function of the offset, so one of them was cut wrongly"
        )
        self.pipeline = pipeline
        self.new = new
        self.existing = existing


@dataclass(frozen=True)
class Claim:
    """One range to claim: its range, outcome (one of :data:`OUTCOMES`) and origin.

    ``replay``: the records came from a replay topic (the range is their original
    coordinates). ``isolated``: a poison record the lane isolated from its Eden tuple and
    dead-lettered under its own one-record ``dlq`` row nested in the tuple's ``applied``
    row (rule 4 of :mod:`flowctl.adapters.applied`); so one record, ``dlq``, from Eden.
    """

    range: TupleRange
    outcome: str = "applied"
    replay: bool = False
    isolated: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.range, TupleRange):
            raise ValueError(f"Claim.range must be a TupleRange, got {self.range!r}")
        if self.outcome not in OUTCOMES:
            raise ValueError(
                f"Claim.outcome={self.outcome!r} of {self.range.id} is not one of "
                f"{', '.join(OUTCOMES)}"
            )
        for name in ("replay", "isolated"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(
                    f"Claim.{name} of {self.range.id} must be a bool, got {getattr(self, name)!r}"
                )
        if self.isolated and (self.outcome != "dlq" or self.replay or self.range.size != 1):
            raise ValueError(
                f"Claim.isolated of {self.range.id} marks an isolated poison record: a "
                f"one-record 'dlq' claim from Eden, got outcome={self.outcome!r}, "
                f"replay={self.replay!r}, {self.range.size} record(s)"
            )


class PartitionRows:
    """The rows of one partition near the ranges being claimed, kept sorted as they grow."""

    def __init__(self, rows: Iterable[Row]) -> None:
        self.rows = sorted(set(rows))
        self.starts = [r[0] for r in self.rows]
        self.longest = max((e - s for s, e, _ in self.rows), default=0)

    def overlapping(self, start: int, end: int) -> list[Row]:
        """Rows with ``row.start < end`` and ``row.end > start``.

        A row overlapping ``[start, end)`` starts after ``start - longest``, so the scan
        back from ``end`` stops there: a few rows, since tuples are at most ``tuple_size``
        (a merged row is long, but only the rows near the claims are loaded).
        """
        out = []
        i = bisect.bisect_left(self.starts, end)
        while i > 0:
            i -= 1
            row = self.rows[i]
            if row[0] + self.longest <= start:
                break
            if row[1] > start:
                out.append(row)
        return out

    def put(self, row: Row) -> None:
        """Add ``row``, replacing a row with the same span (an updated outcome)."""
        i = bisect.bisect_left(self.rows, (row[0], row[1], ""))
        if i < len(self.rows) and self.rows[i][:2] == row[:2]:
            del self.rows[i]
            del self.starts[i]
        self.rows.insert(i, row)
        self.starts.insert(i, row[0])
        self.longest = max(self.longest, row[1] - row[0])


def decide(pipeline: str, c: Claim, rows: PartitionRows, checkpoint: int) -> str:
    """``"insert"``, ``"update"`` (an exact 'replayed' row takes the replay's outcome) or
    ``"duplicate"``; raises :class:`RangeConflict`."""
    r = c.range
    overlapping = rows.overlapping(r.start, r.end)
    covering = [row for row in overlapping if row[0] <= r.start and row[1] >= r.end]
    exact = next((row for row in covering if row[0] == r.start and row[1] == r.end), None)
    if exact is not None:
        if exact[2] == "replayed" and c.replay and c.outcome != "replayed":
            return "update"
        return "duplicate"
    blocking = next((row for row in covering if row[2] != "replayed"), None)
    if blocking is not None:
        if c.isolated and all(row[2] != "dlq" for row in covering):
            return "insert"  # a poison record isolated from its applied tuple (rule 4)
        return "duplicate"
    clash = next((row for row in overlapping if row not in covering), None)
    if clash is not None:
        existing = TupleRange(r.topic, r.partition, clash[0], clash[1])
        raise RangeConflict(pipeline, r, f"applied range {existing.id} ({clash[2]})")
    if not covering:
        if r.end <= checkpoint:
            return "duplicate"
        if r.start < checkpoint:
            raise RangeConflict(
                pipeline, r, f"the durable checkpoint {checkpoint} of {r.topic}:{r.partition}"
            )
    return "insert"


def coalesce_runs(rows: Iterable[Row], checkpoint: int) -> list[tuple[int, int]]:
    """The spans ``[start, end)`` whose merged rows replace rows of ``rows``.

    ``rows``: every row of one partition ending in some window ``[lo, checkpoint]`` (rows
    nesting one of them end inside the window too, so nesting is decided right). A span is
    a maximal run of two or more contiguous top-level ``applied`` rows wholly below
    ``checkpoint``; its merged row replaces the ``applied`` rows inside it
    (:func:`replaced_by`), so it ends where the run does and a later merge's window (rows
    ending at or after this checkpoint) finds it again.
    """
    ordered = sorted(set(rows), key=lambda row: (row[0], -row[1]))
    spans: list[tuple[int, int]] = []
    run: list[Row] = []
    outer_end = -1

    def close() -> None:
        if len(run) > 1:
            spans.append((run[0][0], run[-1][1]))
        run.clear()

    for start, end, outcome in ordered:
        if end <= outer_end:
            continue  # nested in an earlier row
        outer_end = end
        if outcome != "applied" or end > checkpoint or (run and run[-1][1] != start):
            close()
        if outcome == "applied" and end <= checkpoint:
            run.append((start, end, outcome))
    close()
    return spans


def replaced_by(row: Row, span: tuple[int, int]) -> bool:
    """Whether the merged row of ``span`` (one of :func:`coalesce_runs`) replaces ``row``:
    the ``applied`` rows inside it (the run's rows, and one-record rows an earlier merge
    kept nested; a ``dlq`` row nested in it stays)."""
    start, end, outcome = row
    return outcome == "applied" and span[0] <= start and end <= span[1]
