"""What becomes of an isolated Eden tuple (core.isolation.verdict): outcome, items, routes."""

from __future__ import annotations

import pytest

from flowctl.core.isolation import Failure, Isolation, Poisoned, short_trace, verdict
from flowctl.core.spout_contract import Outcome
from flowctl.core.tuples import TupleRange

T = TupleRange("p.eden", 1, 100, 105)
OFFSETS = [100, 101, 102, 103, 104]


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError)


def _found(good=(), poison=(), transient=(), result=None) -> Isolation:
    return Isolation(result, tuple(good), tuple(poison), tuple(transient), 1)


def one(offset: int) -> TupleRange:
    return TupleRange("p.eden", 1, offset, offset + 1)


def test_a_clean_tuple_is_one_applied_item() -> None:
    v = verdict(T, OFFSETS, _found(good=range(5), result=["r"]), is_timeout=_is_timeout)
    assert v.outcome is Outcome.ACKED and v.good == 5 and v.dead == 0
    assert [(i.range, i.outcome, i.value) for i in v.items] == [(T, "applied", ["r"])]
    assert v.routes == ()


def test_good_and_poison_ack_the_good_and_nest_a_dlq_row_per_poison_record() -> None:
    found = _found(good=(0, 1, 3), poison=(Poisoned(2, "bad ip"), Poisoned(4, "empty line")),
                   result=["r0", "r1", "r3"])  # fmt: skip
    v = verdict(T, OFFSETS, found, is_timeout=_is_timeout)
    assert v.outcome is Outcome.ACKED and v.good == 3 and v.dead == 2
    assert [(i.range, i.outcome, i.replay, i.isolated) for i in v.items] == [
        (T, "applied", False, False),
        (one(102), "dlq", False, True),  # marked: the claim rules tell it from a repeat
        (one(104), "dlq", False, True),
    ]
    assert v.items[0].value == ["r0", "r1", "r3"]
    assert [(r.index, r.dead, r.reason) for r in v.routes] == [
        (2, True, "poison: PoisonRecord: bad ip"),
        (4, True, "poison: PoisonRecord: empty line"),
    ]


def test_a_tuple_without_records_is_applied_with_its_result() -> None:
    v = verdict(T, [], _found(result=[]), is_timeout=_is_timeout)
    assert v.outcome is Outcome.ACKED and v.good == 0
    assert [(i.range, i.outcome, i.value) for i in v.items] == [(T, "applied", [])]


def test_an_all_poison_tuple_is_one_dlq_item() -> None:
    found = _found(poison=[Poisoned(i, "bad") for i in range(5)])
    v = verdict(T, OFFSETS, found, is_timeout=_is_timeout)
    assert v.outcome is Outcome.POISON and v.dead == 5 and v.good == 0
    assert [(i.range, i.outcome) for i in v.items] == [(T, "dlq")]


def test_a_transient_part_replays_the_tuple_but_dead_letters_proven_poison() -> None:
    found = _found(good=(0, 1), poison=(Poisoned(2, "bad"),),
                   transient=(Failure(3, 5, RuntimeError("db away")),), result=["x"])  # fmt: skip
    v = verdict(T, OFFSETS, found, is_timeout=_is_timeout)
    assert v.outcome is Outcome.REPLAYED and v.good == 0
    assert [(i.range, i.outcome, i.replay, i.isolated) for i in v.items] == [
        (T, "replayed", False, False),
        (one(102), "dlq", True, False),
    ]
    assert [(r.index, r.dead) for r in v.routes] == [
        (0, False), (1, False), (2, True), (3, False), (4, False),
    ]  # fmt: skip
    assert v.routes[3].reason == "RuntimeError: db away"
    assert v.routes[0].reason == "replayed with its tuple: RuntimeError: db away"


def _raised(exc: Exception) -> Exception:
    try:
        raise exc
    except Exception as caught:
        return caught


def test_a_transient_failure_carries_where_it_was_raised_and_a_clean_tuple_no_trace() -> None:
    found = _found(transient=(Failure(0, 5, _raised(KeyError("w"))),))
    v = verdict(T, OFFSETS, found, is_timeout=_is_timeout)
    assert v.trace.startswith("Traceback (most recent call last):")
    assert "test_isolation_verdict.py" in v.trace and v.trace.endswith("KeyError: 'w'")
    clean = verdict(T, OFFSETS, _found(good=range(5), result=["r"]), is_timeout=_is_timeout)
    assert clean.trace == ""


def test_a_long_trace_keeps_its_innermost_frames() -> None:
    def deep(n: int) -> None:
        if n:
            deep(n - 1)
        raise ValueError("the innermost")

    text = short_trace(_raised_by(lambda: deep(60)), limit=400)
    assert len(text) <= 400 and text.startswith("Traceback (most recent call last):\n  ...\n")
    assert text.endswith("ValueError: the innermost")
    assert 'raise ValueError("the innermost")' in text


def _raised_by(call) -> Exception:  # type: ignore[no-untyped-def]
    try:
        call()
    except Exception as caught:
        return caught
    raise AssertionError("did not raise")


def test_a_timed_out_part_makes_the_tuple_timed_out() -> None:
    found = _found(transient=(Failure(0, 5, TimeoutError("deadline")),))
    v = verdict(T, OFFSETS, found, is_timeout=_is_timeout)
    assert v.outcome is Outcome.TIMED_OUT
    assert all(not r.dead for r in v.routes) and len(v.routes) == 5


def test_offsets_that_do_not_match_the_isolation_are_refused() -> None:
    with pytest.raises(ValueError, match="4 offset"):
        verdict(T, OFFSETS[:4], _found(good=range(5)), is_timeout=_is_timeout)
