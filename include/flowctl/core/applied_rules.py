"""The rules of ``applied_ranges``, without the database: claim decisions and coalescing.

:mod:`flowctl.adapters.applied` reads the rows of a partition near the ranges being
claimed, and this module decides each claim (its module docstring states the rules);
:func:`coalesce_runs` says which rows below the durable checkpoint merge into one, so the
table stays bounded (docs/flow-control.md, "Bookkeeping that stays bounded"). Both are
pure, so a property test can drive any interleaving of claims and coalescing without a
database (tests/unit/test_applied_rules.py).

A row is ``(start, end, outcome)`` of one partition.

Coalescing: contiguous *top-level* ``applied`` rows, wholly below the checkpoint, become
one row; one-record rows among them stay, nested in it. Every claim is then decided as it
was before:

- a range inside such a run was a duplicate (an exact row, or a range inside one, is a
  duplicate), and the merged row covering it still makes it one, because a ``dlq`` claim
  from Eden inside an ``applied`` row is new only when it is one record (rule 4: a poison
  record isolated from its tuple, always one record); a whole tuple's ``dlq`` claim equal
  to a merged row's part stays a duplicate;
- one-record ``applied`` rows are never replaced: an Eden ``dlq`` claim equal to one is a
  duplicate of that row, which would otherwise read as an isolated poison record. A run
  goes on across them and they stay, nested in the merged row (as an isolated poison
  record's row does), so the claim still meets its exact row: one row per one-record
  tuple, where cutting the run would leave two (the row and the next run's merged row);
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

from .tuples import TupleRange

__all__ = [
    "ClaimRequest",
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
class ClaimRequest:
    """What :func:`decide` needs of a claim: its range, outcome and origin."""

    range: TupleRange
    outcome: str
    replay: bool


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


def decide(pipeline: str, c: ClaimRequest, rows: PartitionRows, checkpoint: int) -> str:
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
        isolated = c.outcome == "dlq" and not c.replay and r.size == 1
        if isolated and all(row[2] != "dlq" for row in covering):
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
    nesting one of them end inside the window too, so nesting is decided right). A run is
    a maximal sequence of contiguous top-level ``applied`` rows wholly below
    ``checkpoint``; its span goes from its first row of more than one record to its last
    row. The merged row replaces the run's rows of more than one record in the span
    (:func:`replaced_by`) and keeps its one-record rows, nested (see the module docstring
    for why exactly these). A span is made when it replaces two rows or more, or extends
    one over one-record rows after it: so the merged row ends where the run does, which
    a later merge's window (rows ending at or after this checkpoint) finds again.
    """
    ordered = sorted(set(rows), key=lambda row: (row[0], -row[1]))
    top: list[Row] = []
    outer_end = -1
    for row in ordered:
        if row[1] <= outer_end:
            continue  # nested in an earlier row
        top.append(row)
        outer_end = row[1]
    spans: list[tuple[int, int]] = []
    run: list[Row] = []  # from the run's first row of more than one record

    def close() -> None:
        if len(run) > 1:
            spans.append((run[0][0], run[-1][1]))
        run.clear()

    for start, end, outcome in top:
        mergeable = outcome == "applied" and end <= checkpoint
        if not mergeable or (run and run[-1][1] != start):
            close()
        if mergeable and (run or end - start > 1):
            run.append((start, end, outcome))
    close()
    return spans


def replaced_by(row: Row, span: tuple[int, int]) -> bool:
    """Whether the merged row of ``span`` (one of :func:`coalesce_runs`) replaces ``row``:
    the ``applied`` rows of more than one record inside it; its one-record rows stay."""
    start, end, outcome = row
    return outcome == "applied" and span[0] <= start and end <= span[1] and end - start > 1
