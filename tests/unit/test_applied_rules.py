"""The claim rules with coalescing: every claim decided as without it (pure, no database)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.applied_rules import (
    Claim,
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

    def flush(self, claims: list[Claim]) -> list[bool | str]:
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
def histories(draw: st.DrawFn) -> tuple[int, list[list[Claim]]]:
    """Tuples cut by fixed boundaries (some one record long), and batches of the claims a
    topology, a re-run, a handover and the replays of replayed records can make."""
    sizes = draw(st.lists(st.sampled_from([1, 3, 4, 4]), min_size=2, max_size=7))
    bounds = [0]
    for size in sizes:
        bounds.append(bounds[-1] + size)
    tuples = [r(s, e) for s, e in itertools.pairwise(bounds)]
    eden = st.builds(  # a re-run may time out or dead-letter where the first run applied
        Claim,
        st.sampled_from(tuples),
        st.sampled_from(["applied", "applied", "applied", "replayed", "dlq"]),
        st.just(False),
    )
    # A poison record isolated from its Eden tuple: the lane isolates only from tuples of
    # two records or more (core.isolation.verdict) and marks the claim.
    big = [t for t in tuples if t.size > 1] or tuples[:1]
    poison = st.builds(
        lambda t, i: Claim(
            r(t.start + i % t.size, t.start + i % t.size + 1), "dlq", isolated=t.size > 1
        ),
        st.sampled_from(big),
        st.integers(0, 3),
    )
    unmarked = st.builds(  # a one-record dlq claim without the mark (an older lane's item)
        lambda t, i: Claim(r(t.start + i % t.size, t.start + i % t.size + 1), "dlq"),
        st.sampled_from(tuples),
        st.integers(0, 3),
    )
    replay = st.builds(  # a record back from a replay topic under its original coordinates
        lambda t, i, o: Claim(r(t.start + i % t.size, t.start + i % t.size + 1), o, True),
        st.sampled_from(tuples),
        st.integers(0, 3),
        st.sampled_from(["applied", "replayed", "dlq"]),
    )
    # The whole log in order first (the usual flush), then anything in any order.
    first = draw(st.lists(eden, min_size=len(tuples), max_size=len(tuples)))
    first = [Claim(t, c.outcome) for t, c in zip(tuples, first, strict=True)]
    claim = st.one_of(eden, eden, poison, poison, unmarked, replay)
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


def test_runs_merge_top_level_applied_rows_of_any_size() -> None:
    rows = [
        (0, 4, "applied"),
        (4, 8, "applied"),
        (5, 6, "dlq"),  # an isolated poison record: nested, stays
        (8, 12, "applied"),
        (12, 13, "applied"),  # one record: merges like any other
        (13, 17, "applied"),
        (17, 21, "replayed"),  # ends the run
        (18, 19, "applied"),  # a replay inside its replayed row
        (21, 22, "applied"),
        (22, 26, "applied"),
        (26, 30, "applied"),
        (30, 31, "applied"),
        (31, 35, "applied"),  # beyond the checkpoint
    ]
    assert coalesce_runs(rows, 34) == [(0, 17), (21, 31)]
    assert coalesce_runs(rows, 4) == []
    assert coalesce_runs([(4, 5, "applied"), (5, 6, "applied")], 6) == [(4, 6)]
    assert coalesce_runs([(0, 4, "applied")], 6) == []
    # what a merged row replaces: applied rows inside it, an earlier merge's nested
    # one-record rows too; never the dlq row of an isolated poison record
    assert [row for row in rows if replaced_by(row, (0, 17))] == [
        (0, 4, "applied"), (4, 8, "applied"), (8, 12, "applied"), (12, 13, "applied"),
        (13, 17, "applied"),
    ]  # fmt: skip


def test_one_record_tuples_merge_however_often_the_flusher_merges() -> None:
    """A trailing one-record tuple now and then (a plan ending inside the broker's last
    record batch): the partition keeps one merged row, and every claim is decided as on
    the separate rows."""
    sizes = [4, 4, 1, 4, 4, 4, 1, 1, 4, 4, 1, 4, 4]
    bounds = list(itertools.accumulate(sizes, initial=0))
    tuples = [r(s, e) for s, e in itertools.pairwise(bounds)]
    p = Partition(coalescing=True)
    for i in range(0, len(tuples), 2):
        p.flush([Claim(t, "applied") for t in tuples[i : i + 2]])
    assert p.checkpoint == bounds[-1]
    assert sorted(p.rows) == [(0, bounds[-1], "applied")]
    rows = PartitionRows(p.rows)
    for t in tuples:  # a re-run's claims are repeats, a one-record dlq without the mark too
        for outcome in ("applied", "dlq"):
            assert decide("p", Claim(t, outcome), rows, p.checkpoint) == "duplicate"
        assert decide("p", Claim(r(t.start, t.start + 1), "dlq"), rows, p.checkpoint) == (
            "duplicate"
        )
        if t.size > 1:  # a poison record isolated from its tuple is new
            poison = Claim(r(t.start, t.start + 1), "dlq", isolated=True)
            assert decide("p", poison, rows, p.checkpoint) == "insert"


def test_a_whole_tuple_dlq_claim_inside_a_merged_row_stays_a_duplicate() -> None:
    rows = PartitionRows([(0, 8, "applied")])  # tuples [0, 4) and [4, 8) merged
    assert decide("p", Claim(r(4, 8), "dlq"), rows, 8) == "duplicate"
    assert decide("p", Claim(r(5, 6), "dlq", isolated=True), rows, 8) == "insert"
    assert decide("p", Claim(r(5, 6), "dlq"), rows, 8) == "duplicate"
    with pytest.raises(RangeConflict, match=r"wc.eden:0:6-10 partially overlaps .*0-8"):
        decide("p", Claim(r(6, 10), "applied"), rows, 8)


@pytest.mark.parametrize(
    ("claim", "field"),
    [
        (lambda: Claim(r(0, 1), "applied", isolated=True), "outcome='applied'"),
        (lambda: Claim(r(0, 1), "dlq", replay=True, isolated=True), "replay=True"),
        (lambda: Claim(r(0, 2), "dlq", isolated=True), "2 record(s)"),
        (lambda: Claim(r(0, 1), "kept"), "Claim.outcome='kept'"),
        (lambda: Claim(r(0, 1), "dlq", isolated=1), "Claim.isolated"),
    ],
)
def test_a_claim_off_the_rules_is_refused_naming_the_field(claim: object, field: str) -> None:
    with pytest.raises(ValueError, match=re.escape(field)):
        claim()  # type: ignore[operator]
