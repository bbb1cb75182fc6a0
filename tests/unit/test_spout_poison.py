"""The spout and poison records: proven poison is data, not load (core.spout, fake clock)."""

from __future__ import annotations

from flowctl.core.clock import FakeClock
from flowctl.core.spout_contract import LaneResult, Outcome
from flowctl.core.window import LaneState

from .test_spout import P0, A, B, ack, make, report


def poison(d, records: int = 1) -> LaneResult:
    """Every record of the tuple proven poison: all of them dead-lettered."""
    return LaneResult(
        d.tuple.id, Outcome.POISON, xor=d.edge, rt=0.01, routed_records=records,
        dead_records=records,
    )  # fmt: skip


def test_an_all_poison_tuple_keeps_the_window_like_an_ack() -> None:
    clock = FakeClock()
    spout = make(clock, w_init=3)
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    report(spout, [(d, poison(d, 100) if d.lane == 0 else ack(d)) for d in plan])
    assert spout.windows[0].size == 4  # a full round of non-load outcomes grows it
    assert spout.state_of(0) is LaneState.NORMAL


def test_an_all_poison_tuple_counts_its_records_dead_and_no_failure() -> None:
    clock = FakeClock()
    spout = make(clock, w_init=3)
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    report(spout, [(plan[0], poison(plan[0], 100))])
    assert spout.counters["dlq"] == 100 and spout.counters["replayed"] == 0
    assert spout.counters["failed"] == 0 and spout.counters["timed_out"] == 0
    assert spout.counters["acked"] == 0 and spout.counters["requeued"] == 0


def test_an_isolated_tuple_acks_its_good_records_and_dead_letters_the_poison() -> None:
    clock = FakeClock()
    spout = make(clock, w_init=3)
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    isolated = LaneResult(
        plan[0].tuple.id, Outcome.ACKED, xor=plan[0].edge, rt=0.01, records=97,
        routed_records=3, dead_records=3,
    )  # fmt: skip
    report(spout, [(plan[0], isolated)])
    assert spout.counters["acked"] == 1 and spout.counters["records"] == 97
    assert spout.counters["dlq"] == 3 and spout.counters["failed"] == 0
    assert spout.windows[0].size == 3 and spout.state_of(0) is LaneState.NORMAL


def test_a_replayed_record_proven_poison_is_no_repeat_failure_and_is_durable_at_once() -> None:
    clock = FakeClock()
    spout = make(clock, w_init=4)
    spout.plan({P0: 0}, {(A, 0): 2, (B, 0): 0}, 100.0)  # To is empty: swap, From is B
    plan = spout.plan({P0: 0}, {(A, 0): 2, (B, 0): 0}, 100.0)
    assert [d.tuple.id for d in plan] == ["p.replay.a:0:0-1", "p.replay.a:0:1-2"]
    report(spout, [(d, poison(d)) for d in plan])
    assert spout.counters["repeat_failures"] == 0 and spout.counters["failed"] == 0
    assert spout.counters["dlq"] == 2
    assert spout.replay.committed(A, 0) == 2  # in the DLQ topic: nothing left to confirm


def test_a_transient_failure_still_shrinks_the_window() -> None:
    clock = FakeClock()
    spout = make(clock, w_init=3)
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    replayed = LaneResult(plan[0].tuple.id, Outcome.REPLAYED, xor=plan[0].edge, routed_records=100)
    report(spout, [(plan[0], replayed)])
    assert spout.windows[0].size == 2 and spout.state_of(0) is LaneState.BUSY
    assert spout.counters["failed"] == 1
