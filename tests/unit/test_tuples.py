"""Tuple ranges and the batcher that cuts offsets into tuples."""

from __future__ import annotations

import pytest

from flowctl.core.tuples import TopicPartition, TupleBatcher, TupleRange, cut_range

TP0 = TopicPartition("words.eden", 0)
TP1 = TopicPartition("words.eden", 1)


def test_range_id_is_stable_and_parseable() -> None:
    t = TupleRange("a:b", 3, 100, 150)
    assert t.id == "a:b:3:100-150"
    assert TupleRange.parse_id(t.id) == t
    assert t.size == 50


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", 0, 0, 1), "topic"),
        (("t", -1, 0, 1), "partition"),
        (("t", 0, -5, 1), "start"),
        (("t", 0, 5, 5), "end"),
    ],
)
def test_bad_range_names_the_field(args: tuple, field: str) -> None:
    with pytest.raises(ValueError, match=f"TupleRange.{field}"):
        TupleRange(*args)


def test_parse_id_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="malformed tuple id 'nope'"):
        TupleRange.parse_id("nope")


def test_cut_range_makes_full_tuples_and_a_short_tail() -> None:
    assert [(t.start, t.end) for t in cut_range(TP0, 10, 35, 10)] == [(10, 20), (20, 30), (30, 35)]


def test_tuple_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="tuple_size must be an int >= 1, got 0"):
        TupleBatcher(0)


def test_batcher_takes_partitions_in_turn_up_to_the_budget() -> None:
    b = TupleBatcher(10)
    out = b.cut({TP0: 100, TP1: 15}, max_tuples=4)
    assert [(t.partition, t.start, t.end) for t in out] == [
        (0, 0, 10),
        (1, 0, 10),
        (0, 10, 20),
        (1, 10, 15),
    ]
    assert b.positions() == {TP0: 20, TP1: 15}
    assert b.pending_records({TP0: 100, TP1: 15}) == 80


def test_batcher_resumes_from_positions_and_never_rewinds() -> None:
    b = TupleBatcher(10, {TP0: 50})
    assert b.cut({TP0: 40}) == []
    assert [(t.start, t.end) for t in b.cut({TP0: 62})] == [(50, 60), (60, 62)]


def test_batcher_can_hold_back_short_tuples() -> None:
    b = TupleBatcher(10, allow_partial=False)
    assert [(t.start, t.end) for t in b.cut({TP0: 25})] == [(0, 10), (10, 20)]
    assert b.cut({TP0: 29}) == []
    assert [(t.start, t.end) for t in b.cut({TP0: 30})] == [(20, 30)]


def test_zero_budget_cuts_nothing() -> None:
    b = TupleBatcher(10)
    assert b.cut({TP0: 100}, max_tuples=0) == []
    assert b.positions() == {TP0: 0}
