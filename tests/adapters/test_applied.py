"""Applied ranges and the durable checkpoint on real SQLite and PostgreSQL."""

from __future__ import annotations

import secrets

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowctl.adapters import schema, schema_setup
from flowctl.adapters.applied import (
    Claim,
    PartitionReplay,
    RangeConflict,
    advance_checkpoint,
    applied_rows,
    claim,
    ensure_checkpoint,
    read_checkpoints,
    replay_plan,
    unapplied_gaps,
)
from flowctl.adapters.db import engine_for
from flowctl.core.checkpoint import ContiguousAck
from flowctl.core.tuples import TopicPartition, TupleRange
from flowctl.pipelines.wordcount import apply_records

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

P = "wc"
TP = TopicPartition("wc.eden", 0)


def r(start: int, end: int, partition: int = 0) -> TupleRange:
    return TupleRange("wc.eden", partition, start, end)


@pytest.fixture
def engine(database_url: str) -> sa.Engine:
    engine = engine_for(database_url)
    schema_setup.ensure_schema(engine)
    return engine


def claim_tx(engine: sa.Engine, ranges: list[TupleRange | Claim]) -> list[bool]:
    with engine.begin() as conn:
        return claim(conn, P, ranges)


def advance_tx(engine: sa.Engine, *tps: TopicPartition) -> dict[TopicPartition, int]:
    with engine.begin() as conn:
        return advance_checkpoint(conn, P, tps or [TP])


def test_claim_is_true_once_per_range(engine: sa.Engine) -> None:
    assert claim_tx(engine, [r(0, 10), r(10, 20), r(0, 10)]) == [True, True, False]
    assert claim_tx(engine, [r(10, 20), r(20, 30)]) == [False, True]
    assert claim_tx(engine, [r(12, 13)]) == [False]  # covered by [10, 20)
    assert [(t.start, t.end, o) for t, o in applied_rows(engine, P)] == [
        (0, 10, "applied"),
        (10, 20, "applied"),
        (20, 30, "applied"),
    ]


def test_partial_overlap_raises_naming_both_and_writes_nothing(engine: sa.Engine) -> None:
    claim_tx(engine, [r(0, 10)])
    with pytest.raises(
        RangeConflict,
        match=r"range wc.eden:0:5-15 partially overlaps applied "
        r"range wc.eden:0:0-10 \(applied\)",
    ):
        claim_tx(engine, [r(20, 30), r(5, 15)])
    with pytest.raises(RangeConflict, match=r"wc.eden:0:0-20 partially overlaps .*0:0-10"):
        claim_tx(engine, [r(0, 20)])  # covers an applied range without being it
    assert [t for t, _ in applied_rows(engine, P)] == [r(0, 10)]  # [20, 30) rolled back


def test_checkpoint_moves_only_over_contiguous_ranges(engine: sa.Engine) -> None:
    # The seed's example with tuples 1..4 = [0,10), [10,20), [20,30), [30,40).
    claim_tx(engine, [r(0, 10), r(20, 30), r(30, 40)])
    assert advance_tx(engine) == {TP: 10}
    assert read_checkpoints(engine, P) == {TP: 10}
    claim_tx(engine, [r(10, 20)])
    assert advance_tx(engine) == {TP: 40}
    assert advance_tx(engine) == {TP: 40}
    other = TopicPartition("wc.eden", 1)
    assert advance_tx(engine, TP, other) == {TP: 40, other: 0}


def test_replayed_tuple_is_durable_and_its_records_apply_once(engine: sa.Engine) -> None:
    replayed = Claim(r(0, 10), "replayed")
    assert claim_tx(engine, [replayed]) == [True]
    assert advance_tx(engine) == {TP: 10}
    # The same tuple processed again from Eden (a re-run batch): its records come back
    # through the replay topic, so this copy is a duplicate.
    assert claim_tx(engine, [r(0, 10)]) == [False]
    # The replayed records, one per tuple under their original coordinates.
    assert claim_tx(engine, [Claim(r(3, 4), replay=True), Claim(r(4, 5), replay=True)]) == [
        True,
        True,
    ]
    assert claim_tx(engine, [Claim(r(3, 4), replay=True)]) == [False]
    # A record that fails again goes back to the replay topic, then succeeds.
    assert claim_tx(engine, [Claim(r(5, 6), "replayed", replay=True)]) == [True]
    assert claim_tx(engine, [Claim(r(5, 6), "replayed", replay=True)]) == [False]
    assert claim_tx(engine, [Claim(r(5, 6), "applied", replay=True)]) == [True]
    assert claim_tx(engine, [Claim(r(5, 6), "applied", replay=True)]) == [False]
    assert [(t.start, t.end, o) for t, o in applied_rows(engine, P)] == [
        (0, 10, "replayed"),
        (3, 4, "applied"),
        (4, 5, "applied"),
        (5, 6, "applied"),
    ]
    assert advance_tx(engine) == {TP: 10}


def test_a_poison_record_isolated_from_an_applied_tuple_nests_once(engine: sa.Engine) -> None:
    def isolated(start: int) -> Claim:
        return Claim(r(start, start + 1), "dlq", isolated=True)

    assert claim_tx(engine, [r(0, 10), isolated(4), isolated(7)]) == [True, True, True]
    # The same tuple again (a re-run batch): every row is a duplicate.
    assert claim_tx(engine, [r(0, 10), isolated(4)]) == [False, False]
    # Only an isolated record nests: a replay, another outcome, or a one-record dlq
    # without the mark (a one-record tuple's re-run) is covered.
    assert claim_tx(engine, [Claim(r(5, 6), "dlq", replay=True), r(6, 7)]) == [False, False]
    assert claim_tx(engine, [Claim(r(5, 6), "replayed"), Claim(r(5, 6), "dlq")]) == [False] * 2
    # Inside a dlq row (an all-poison tuple) a record's own dlq row is a duplicate.
    assert claim_tx(engine, [Claim(r(10, 20), "dlq"), isolated(12)]) == [True, False]
    assert [(t.start, t.end, o) for t, o in applied_rows(engine, P)] == [
        (0, 10, "applied"),
        (4, 5, "dlq"),
        (7, 8, "dlq"),
        (10, 20, "dlq"),
    ]
    assert advance_tx(engine) == {TP: 20}


def test_ranges_below_the_checkpoint_without_rows(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        assert ensure_checkpoint(conn, P, "wc.eden", 0, 100) == 100
        assert ensure_checkpoint(conn, P, "wc.eden", 0, 5) == 100  # never moves it back
    assert claim_tx(engine, [r(50, 60)]) == [False]
    with pytest.raises(RangeConflict, match=r"wc.eden:0:95-105 .*durable checkpoint 100"):
        claim_tx(engine, [r(95, 105)])
    assert claim_tx(engine, [r(100, 110)]) == [True]
    assert advance_tx(engine) == {TP: 110}


def test_compatible_with_the_record_sink_checkpoint(engine: sa.Engine) -> None:
    apply_records(engine, P, [("wc.eden", 0, o, "a b") for o in range(10)])
    assert read_checkpoints(engine, P) == {TP: 10}
    assert claim_tx(engine, [r(0, 10), r(10, 20)]) == [False, True]
    assert advance_tx(engine) == {TP: 20}


def test_unapplied_gaps_are_the_complement_after_the_checkpoint(engine: sa.Engine) -> None:
    assert unapplied_gaps(engine, P, "wc.eden", 0, 0, 30) == [(0, 30)]
    claim_tx(engine, [r(0, 10), r(20, 30), r(40, 45), Claim(r(45, 50), "dlq")])
    advance_tx(engine)
    assert unapplied_gaps(engine, P, "wc.eden", 0, 0, 60) == [(10, 20), (30, 40), (50, 60)]
    assert unapplied_gaps(engine, P, "wc.eden", 0, 25, 42) == [(30, 40)]
    assert unapplied_gaps(engine, P, "wc.eden", 0, 0, 10) == []
    assert unapplied_gaps(engine, P, "wc.eden", 0, 40, 50) == []
    with engine.connect() as conn:  # inside a caller's connection too
        assert unapplied_gaps(conn, P, "wc.eden", 0, 0, 25) == [(10, 20)]


def test_replay_plan_names_holes_and_the_applied_end(engine: sa.Engine) -> None:
    claim_tx(engine, [r(0, 10), r(20, 30), r(0, 5, partition=1)])
    advance_tx(engine, TP, TopicPartition("wc.eden", 1))
    with engine.begin() as conn:
        ensure_checkpoint(conn, P, "wc.eden", 2, 7)
    assert replay_plan(engine, P) == [
        PartitionReplay("wc.eden", 0, 10, ((10, 20),), 30),
        PartitionReplay("wc.eden", 1, 5, (), 5),
        PartitionReplay("wc.eden", 2, 7, (), 7),
    ]


def test_bad_values_are_refused_by_name(engine: sa.Engine) -> None:
    with pytest.raises(ValueError, match=r"Claim.outcome='done' of wc.eden:0:0-1 is not one of"):
        Claim(r(0, 1), "done")
    with pytest.raises(ValueError, match=r"pipeline='' must be a non-empty string"):
        unapplied_gaps(engine, "", "wc.eden", 0, 0, 1)
    with pytest.raises(ValueError, match=r"end must be an int >= 0, got -1"):
        unapplied_gaps(engine, P, "wc.eden", 0, 0, -1)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    order=st.permutations(range(8)),
    repeats=st.lists(st.integers(0, 7), max_size=4),
    split=st.integers(1, 8),
)
def test_checkpoint_and_gaps_match_the_cumulative_ack_model(
    sqlite_url: str, order: list[int], repeats: list[int], split: int
) -> None:
    """Any arrival order, with duplicates, in any batching: the checkpoint is the core's
    ContiguousAck position and the unapplied gaps are exactly the tuples not yet claimed."""
    engine = engine_for(sqlite_url)
    schema_setup.ensure_schema(engine)
    pipeline = f"prop{secrets.token_hex(4)}"
    tuples = [r(5 * k, 5 * k + 5) for k in range(8)]
    arrivals = [tuples[k] for k in order[:split]] + [tuples[k] for k in repeats]
    model = ContiguousAck(0)
    seen: set[TupleRange] = set()
    for batch_start in range(0, len(arrivals), 3):
        batch = arrivals[batch_start : batch_start + 3]
        with engine.begin() as conn:
            fresh = claim(conn, pipeline, batch)
            position = advance_checkpoint(conn, pipeline, [TP])[TP]
        expected_fresh = []
        for t in batch:
            expected_fresh.append(t not in seen)
            seen.add(t)
            model.ack(t.start, t.end)
        assert fresh == expected_fresh
        assert position == model.position
    expected: list[tuple[int, int]] = []
    for t in sorted(t for t in tuples if t not in seen and t.start >= model.position):
        if expected and expected[-1][1] == t.start:
            expected[-1] = (expected[-1][0], t.end)
        else:
            expected.append((t.start, t.end))
    assert unapplied_gaps(engine, pipeline, "wc.eden", 0, 0, 40) == expected


def test_the_tables_join_an_existing_version_1_database(sqlite_url: str) -> None:
    """A results database created before these tables existed gains them, same version."""
    engine = engine_for(sqlite_url)
    mine = {"applied_ranges", "mrwq_state"}
    schema.metadata.create_all(
        engine, tables=[t for t in schema.metadata.sorted_tables if t.name not in mine]
    )
    apply_records(engine, P, [("wc.eden", 0, 0, "a")])
    assert not mine & set(sa.inspect(engine).get_table_names())
    schema_setup.ensure_schema(engine)
    assert mine <= set(sa.inspect(engine).get_table_names())
    assert claim_tx(engine, [r(0, 1), r(1, 2)]) == [False, True]
    assert advance_tx(engine) == {TP: 2}
