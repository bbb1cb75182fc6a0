"""The claim rules with coalescing: every claim decided as without it (pure, no database)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.applied_rules import (
    ClaimRequest,
    PartitionRows,
    RangeConflict,
    coalesce_runs,
    decide,
    replaced_by,
)
from flowctl.core.tuples import TupleRange
from flowctl.spark.reconcile import Classifier

T = "wc.eden"


def r(start: int, end: int) -> TupleRange:
    return TupleRange(T, 0, start, end)


@dataclass
class Partition:
    """One partition's rows and checkpoint, as applied.claim, advance_checkpoint and the
    flush's coalesce change them (the database's part left out)."""

    coalescing: bool
    rows: set[tuple[int, int, str]] = field(default_factory=set)
    checkpoint: int = 0

    def flush(self, claims: list[ClaimRequest]) -> list[bool | str]:
        """One flush transaction: its claims in order, the checkpoint, the merge."""
        rows = PartitionRows(self.rows)
        out: list[bool | str] = []
        for c in claims:
            try:
                decision = decide("p", c, rows, self.checkpoint)
            except RangeConflict:
                out.append("conflict")
                continue
            out.append(decision != "duplicate")
            if decision != "duplicate":
                rows.put((c.range.start, c.range.end, c.outcome))
        self.rows = set(rows.rows)
        before, moved = self.checkpoint, self.checkpoint
        for start, end, _ in sorted(self.rows):
            if end <= moved:
                continue
            if start > moved:
                break
            moved = end
        self.checkpoint = moved
        if self.coalescing and moved > before:
            window = [row for row in self.rows if before <= row[1] <= moved]
            for start, end in coalesce_runs(window, moved):
                self.rows = {row for row in self.rows if not replaced_by(row, (start, end))}
                self.rows.add((start, end, "applied"))
        return out

    def outcome_of(self, offset: int) -> str:
        return Classifier(sorted(self.rows), self.checkpoint).outcome(offset)


@st.composite
def histories(draw: st.DrawFn) -> tuple[int, list[list[ClaimRequest]]]:
    """Tuples cut by fixed boundaries (some one record long), and batches of the claims a
    topology, a re-run, a handover and the replays of replayed records can make."""
    sizes = draw(st.lists(st.sampled_from([1, 3, 4, 4]), min_size=2, max_size=7))
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    tuples = [r(s, e) for s, e in itertools.pairwise(bounds)]
    eden = st.builds(  # a re-run may time out or dead-letter where the first run applied
        ClaimRequest,
        st.sampled_from(tuples),
        st.sampled_from(["applied", "applied", "applied", "replayed", "dlq"]),
        st.just(False),
    )
    poison = st.builds(  # a poison record isolated from its Eden tuple
        lambda t, i: ClaimRequest(r(t.start + i % t.size, t.start + i % t.size + 1), "dlq", False),
        st.sampled_from(tuples),
        st.integers(0, 3),
    )
    replay = st.builds(  # a record back from a replay topic under its original coordinates
        lambda t, i, o: ClaimRequest(r(t.start + i % t.size, t.start + i % t.size + 1), o, True),
        st.sampled_from(tuples),
        st.integers(0, 3),
        st.sampled_from(["applied", "replayed", "dlq"]),
    )
    # The whole log in order first (the usual flush), then anything in any order.
    first = draw(st.lists(eden, min_size=len(tuples), max_size=len(tuples)))
    first = [ClaimRequest(t, c.outcome, False) for t, c in zip(tuples, first, strict=True)]
    claim = st.one_of(eden, eden, poison, replay)
    skip = draw(st.sets(st.integers(0, len(first) - 1), max_size=2))
    claims = [c for i, c in enumerate(first) if i not in skip]
    claims += draw(st.lists(claim, min_size=1, max_size=20))
    cuts = sorted(draw(st.sets(st.integers(1, max(1, len(claims) - 1)), max_size=6)))
    batches = [claims[a:b] for a, b in zip([0, *cuts], [*cuts, len(claims)], strict=False)]
    return bounds[-1], [b for b in batches if b]


@settings(max_examples=300, deadline=None)
@given(histories())
def test_coalescing_decides_every_claim_as_without_it(history: tuple[int, list]) -> None:
    """Any interleaving of flushes (claims, checkpoint, merge): the same decisions, the same
    checkpoint, the same reconcile class of every offset, and no record applied twice."""
    end, batches = history
    plain, merged = Partition(coalescing=False), Partition(coalescing=True)
    applied_per_offset = [0] * end
    for batch in batches:
        decisions = merged.flush(batch)
        assert decisions == plain.flush(batch)
        # (a conflict, e.g. a poison record's row before its tuple's, is one in both)
        assert merged.checkpoint == plain.checkpoint
        for c, new in zip(batch, decisions, strict=True):
            if new is True and c.outcome == "applied":
                for offset in range(c.range.start, c.range.end):
                    applied_per_offset[offset] += 1
        assert [merged.outcome_of(o) for o in range(end)] == [
            plain.outcome_of(o) for o in range(end)
        ]
    assert max(applied_per_offset) <= 1
    assert len(merged.rows) <= len(plain.rows)


def test_runs_merge_top_level_applied_rows_and_keep_one_record_rows_nested() -> None:
    rows = [
        (0, 4, "applied"),
        (4, 8, "applied"),
        (5, 6, "dlq"),  # an isolated poison record: nested, stays
        (8, 12, "applied"),
        (12, 13, "applied"),  # one record: stays, nested in the merged row
        (13, 17, "applied"),
        (17, 21, "replayed"),  # ends the run
        (18, 19, "applied"),  # a replay inside its replayed row
        (21, 22, "applied"),  # one record at a run's start: stays outside the span
        (22, 26, "applied"),
        (26, 30, "applied"),
        (30, 31, "applied"),  # one record at a run's end: inside the span, nested
        (31, 35, "applied"),  # beyond the checkpoint
    ]
    assert coalesce_runs(rows, 34) == [(0, 17), (22, 31)]
    assert coalesce_runs(rows, 4) == []
    # one row extended over the one-record rows after it, so a later merge's window
    # (rows ending at or after this checkpoint) meets it again; one-record rows alone stay
    ones = [(4, 5, "applied"), (5, 6, "applied")]
    assert coalesce_runs([(0, 4, "applied"), *ones], 6) == [(0, 6)]
    assert coalesce_runs([(0, 4, "applied")], 6) == []
    assert coalesce_runs(ones, 6) == []


def test_one_record_tuples_leave_one_row_each_however_often_the_flusher_merges() -> None:
    """A trailing one-record tuple now and then (a plan ending inside the broker's last
    record batch): the partition keeps one merged row plus one row per such tuple."""
    sizes = [4, 4, 1, 4, 4, 4, 1, 1, 4, 4, 1, 4, 4]
    bounds = list(itertools.accumulate(sizes, initial=0))
    tuples = [r(s, e) for s, e in itertools.pairwise(bounds)]
    p = Partition(coalescing=True)
    for i in range(0, len(tuples), 2):
        p.flush([ClaimRequest(t, "applied", False) for t in tuples[i : i + 2]])
    ones = [(t.start, t.end, "applied") for t in tuples if t.size == 1]
    assert p.checkpoint == bounds[-1]
    assert sorted(p.rows) == sorted([(0, bounds[-1], "applied"), *ones])
    rows = PartitionRows(p.rows)
    for t in tuples:  # a re-run's claims are repeats; a poison record inside a tuple is new
        for outcome in ("applied", "dlq"):
            assert decide("p", ClaimRequest(t, outcome, False), rows, p.checkpoint) == "duplicate"
        poison = ClaimRequest(r(t.start, t.start + 1), "dlq", False)
        assert decide("p", poison, rows, p.checkpoint) == ("insert" if t.size > 1 else "duplicate")


def test_a_whole_tuple_dlq_claim_inside_a_merged_row_stays_a_duplicate() -> None:
    rows = PartitionRows([(0, 8, "applied")])  # tuples [0, 4) and [4, 8) merged
    assert decide("p", ClaimRequest(r(4, 8), "dlq", False), rows, 8) == "duplicate"
    assert decide("p", ClaimRequest(r(5, 6), "dlq", False), rows, 8) == "insert"
    with pytest.raises(RangeConflict, match=r"wc.eden:0:6-10 partially overlaps .*0-8"):
        decide("p", ClaimRequest(r(6, 10), "applied", False), rows, 8)
