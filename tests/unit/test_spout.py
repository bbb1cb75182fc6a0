"""The spout (core.spout): admission, dispatch, feedback and replay on a fake clock."""

from __future__ import annotations

import random

import pytest

from flowctl.core.clock import FakeClock
from flowctl.core.replay import ReplaySnapshot
from flowctl.core.spout import OffsetsBeyondLog, Spout
from flowctl.core.spout_contract import Dispatch, LaneResult, Outcome, SpoutConfig
from flowctl.core.tuples import TopicPartition, TupleRange
from flowctl.core.window import LaneState

EDEN = "p.eden"
A, B = "p.replay.a", "p.replay.b"
P0, P1 = TopicPartition(EDEN, 0), TopicPartition(EDEN, 1)


def make(clock: FakeClock, **kw: object) -> Spout:
    positions = kw.pop("positions", None)
    gaps = kw.pop("gaps", ())
    replay = kw.pop("replay", None)
    config = SpoutConfig(
        **{
            "pipeline": "p",
            "lanes": 2,
            "tuple_size": 100,
            "w_init": 2,
            "linger_s": 1.0,
            "tuple_timeout_s": 30.0,
            **kw,
        }  # type: ignore[arg-type]
    )
    return Spout(config, clock, positions=positions, gaps=gaps, replay=replay, rng=random.Random(7))


def ack(d: Dispatch, rt: float = 0.01, **kw: object) -> LaneResult:
    return LaneResult(d.tuple.id, Outcome.ACKED, xor=d.edge, rt=rt, records=d.tuple.size, **kw)  # type: ignore[arg-type]


def report(spout: Spout, results: list[tuple[Dispatch, LaneResult]]) -> None:
    by_lane: dict[int, list[LaneResult]] = {}
    for d, r in results:
        by_lane.setdefault(d.lane, []).append(r)
    for lane, rs in by_lane.items():
        spout.on_lane_results(lane, rs)


def test_admits_what_the_windows_allow_in_aligned_tuples_round_robin() -> None:
    clock = FakeClock()
    spout = make(clock)
    plan = spout.plan({P0: 1000, P1: 1000}, {}, 0.0)
    assert len(plan) == 4  # 2 lanes x window 2
    assert [d.lane for d in plan] == [0, 1, 0, 1]
    assert [d.tuple.id for d in plan] == [
        "p.eden:0:0-100",
        "p.eden:1:0-100",
        "p.eden:0:100-200",
        "p.eden:1:100-200",
    ]
    assert spout.plan({P0: 1000, P1: 1000}, {}, 0.0) == []  # windows full
    assert spout.in_flight == 4 and spout.counters["admitted"] == 4


def test_a_partial_tuple_waits_for_linger_and_boundaries_stay_aligned() -> None:
    clock = FakeClock()
    spout = make(clock, lanes=1, w_init=4)
    plan = spout.plan({P0: 250}, {}, 0.0)
    assert [d.tuple.id for d in plan] == ["p.eden:0:0-100", "p.eden:0:100-200"]
    report(spout, [(d, ack(d)) for d in plan])
    assert spout.plan({P0: 250}, {}, 0.0) == []  # [200, 250) is partial and not idle yet
    clock.advance(1.0)
    [late] = spout.plan({P0: 250}, {}, 0.0)
    assert late.tuple.id == "p.eden:0:200-250"
    report(spout, [(late, ack(late))])
    [rest] = spout.plan({P0: 300}, {}, 0.0)
    assert rest.tuple.id == "p.eden:0:250-300"  # the rest of tuple 2, ending on its boundary


def test_a_steady_trickle_cuts_its_partial_tuple_once_the_oldest_record_waited_linger() -> None:
    """The linger is the age of the oldest uncut record, not the partition's idle time: a
    partition that never stops trickling still gets its records cut within ``linger_s``."""
    clock = FakeClock()
    spout = make(clock, lanes=1, w_init=8)
    assert spout.plan({P0: 10}, {}, 0.0) == []  # records 0-9 seen at t=0
    clock.advance(0.6)
    assert spout.plan({P0: 20}, {}, 0.0) == []  # the oldest waited 0.6 s < 1.0
    clock.advance(0.6)
    [first] = spout.plan({P0: 30}, {}, 0.0)  # the oldest waited 1.2 s: all of it goes
    assert first.tuple.id == "p.eden:0:0-30"
    report(spout, [(first, ack(first))])
    clock.advance(0.6)
    assert spout.plan({P0: 40}, {}, 0.0) == []  # record 30 appears now
    clock.advance(0.5)
    assert spout.plan({P0: 45}, {}, 0.0) == []  # ... and waited 0.5 s
    clock.advance(0.5)
    [second] = spout.plan({P0: 45}, {}, 0.0)
    assert second.tuple.id == "p.eden:0:30-45"


def test_acks_free_slots_and_a_full_round_of_normal_acks_grows_the_window() -> None:
    clock = FakeClock()
    spout = make(clock)
    first = spout.plan({P0: 10_000}, {}, 0.0)
    report(spout, [(d, ack(d)) for d in first])
    assert [w.size for w in spout.windows] == [3, 3]
    assert spout.counters["acked"] == 4 and spout.counters["records"] == 400
    assert len(spout.plan({P0: 10_000}, {}, 0.0)) == 6


def test_slow_acks_shrink_only_the_slow_lanes_window() -> None:
    clock = FakeClock()
    spout = make(clock, w_init=4, rtt_threshold_s=0.5)
    for _ in range(3):
        plan = spout.plan({P0: 100_000}, {}, 0.0)
        report(spout, [(d, ack(d, rt=2.0 if d.lane == 0 else 0.01)) for d in plan])
    sizes = [w.size for w in spout.windows]
    assert sizes[0] < 4 < sizes[1]
    assert spout.state_of(0) is LaneState.SLOW and spout.state_of(1) is LaneState.NORMAL


def test_a_tuple_without_outcome_is_requeued_to_another_lane_before_fresh_data() -> None:
    clock = FakeClock()
    spout = make(clock)
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    lost = plan[0]
    failed = LaneResult(lost.tuple.id, Outcome.FAILED, error="read failed")
    report(spout, [(lost, failed)] + [(d, ack(d)) for d in plan[1:]])
    assert spout.counters["failed"] == 1
    again = spout.plan({P0: 10_000}, {}, 0.0)
    assert again[0].tuple == lost.tuple and again[0].lane != lost.lane
    assert spout.counters["requeued"] == 1


def test_tuples_a_lane_returns_unstarted_go_to_another_lane_and_are_not_failures() -> None:
    """Lane 0 served 2 of its 6 tuples within its time budget and returned 4: they are
    dispatched again to lane 1 before fresh data, its window is cut to 2 at once, and
    neither the failure count (the autoscaler's signal) nor lane 0's rate moves."""
    clock = FakeClock()
    spout = make(clock, w_init=6, growth="to_target")
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    lane0 = [d for d in plan if d.lane == 0]
    report(spout, [(d, ack(d, rt=0.5)) for d in plan if d.lane == 1])
    served, back = lane0[:2], lane0[2:]
    results = [ack(d, rt=0.5) for d in served]
    results += [LaneResult(d.tuple.id, Outcome.RETURNED, xor=d.edge) for d in back]
    twin = make(FakeClock(), w_init=6, growth="to_target")  # the same acks, no returns
    twin.plan({P0: 10_000}, {}, 0.0)
    twin.on_lane_results(0, results[:2])
    summary = spout.on_lane_results(0, results)
    assert (summary.acked, summary.returned, summary.requeued) == (2, 4, 4)
    assert spout.counters["returned"] == 4 and spout.counters["failed"] == 0
    assert spout.lane_gauges()[0]["window"] == 2
    assert spout.state_of(0) is LaneState.BUSY
    assert spout.lane_gauges()[0]["rate"] == twin.lane_gauges()[0]["rate"] is not None
    again = spout.plan({P0: 10_000}, {}, 0.0)
    assert [d.tuple for d in again[:4]] == [d.tuple for d in back]
    assert {d.lane for d in again[:4]} == {1}


def test_a_failure_routed_to_the_replay_topic_shrinks_the_window_but_is_not_requeued() -> None:
    clock = FakeClock()
    spout = make(clock, w_init=3)
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    bad = plan[0]
    routed = LaneResult(bad.tuple.id, Outcome.REPLAYED, xor=bad.edge, routed_records=100)
    dead = LaneResult(plan[2].tuple.id, Outcome.DLQ, xor=plan[2].edge, routed_records=100,
                      dead_records=100)  # fmt: skip
    report(spout, [(bad, routed), (plan[2], dead)])
    assert spout.windows[0].size == 1  # each fail: BUSY, -1 at once
    assert spout.counters["replayed"] == 100 and spout.counters["dlq"] == 100
    assert spout.counters["failed"] == 2 and spout.counters["requeued"] == 0
    assert all(d.tuple != bad.tuple for d in spout.plan({P0: 10_000}, {}, 0.0))


def test_no_report_within_the_timeout_is_a_timeout_and_a_requeue() -> None:
    clock = FakeClock()
    spout = make(clock, tuple_timeout_s=10.0)
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    clock.advance(11.0)
    again = spout.plan({P0: 10_000}, {}, 0.0)
    assert spout.counters["timed_out"] == 4
    assert [w.size for w in spout.windows] == [1, 1]  # a timeout is a fail: -1 at once
    assert len(again) == 2 and {d.tuple for d in again} <= {d.tuple for d in plan}
    late = ack(plan[0])
    summary = spout.on_lane_results(plan[0].lane, [late])
    assert summary.stale == 1  # the tuple now belongs to another lane's flight


def test_replay_topic_first_swap_when_read_up_and_holds_for_backoff() -> None:
    clock = FakeClock()
    spout = make(clock, w_init=4)
    assert spout.replay.from_topic == A
    # failures went to From (A); To (B) is empty: this batch reads Eden and swaps ...
    assert spout.plan({P0: 0}, {(A, 0): 3, (B, 0): 0}, 100.0) == []
    assert spout.replay.from_topic == B
    # ... so what failed in the last period is read (first) by the next one
    plan = spout.plan({P0: 0}, {(A, 0): 3, (B, 0): 0}, 100.0)
    assert [d.tuple.id for d in plan] == [
        "p.replay.a:0:0-1",
        "p.replay.a:0:1-2",
        "p.replay.a:0:2-3",
    ]
    assert all(d.replay and d.from_topic == B for d in plan)
    held = [LaneResult(d.tuple.id, Outcome.HELD, xor=d.edge, not_before=200.0) for d in plan[1:]]
    report(
        spout,
        [(plan[0], ack(plan[0], mrwq_epoch="e1", mrwq_seq=5)), *zip(plan[1:], held, strict=True)],
    )
    assert spout.counters["held"] == 2
    assert spout.plan({P0: 0}, {(A, 0): 3, (B, 0): 0}, 150.0) == []  # not before 200
    again = spout.plan({P0: 0}, {(A, 0): 3, (B, 0): 0}, 200.0)
    assert [d.tuple.id for d in again] == ["p.replay.a:0:1-2", "p.replay.a:0:2-3"]
    # the acked record is durable once the flusher passed its MRWQ item in the same epoch
    assert spout.replay.committed(A, 0) == 0
    assert spout.confirm_replays("other-epoch", 100) == 0
    assert spout.confirm_replays("e1", 6) == 1
    assert spout.replay.committed(A, 0) == 1
    routed = [LaneResult(d.tuple.id, Outcome.REPLAYED, xor=d.edge) for d in again]
    report(spout, list(zip(again, routed, strict=True)))  # re-routed records are durable in Kafka
    assert spout.replay.snapshot().positions == ((A, 0, 3),)


def test_a_restart_dispatches_gaps_first_and_resumes_from_the_durable_state() -> None:
    clock = FakeClock()
    gap = TupleRange(EDEN, 0, 100, 300)
    snap = ReplaySnapshot("p", B, ((A, 0, 5),), 1)
    spout = make(clock, w_init=4, positions={P0: 500}, gaps=[gap], replay=snap)
    plan = spout.plan({P0: 800}, {(A, 0): 5, (B, 0): 0}, 0.0)
    assert [d.tuple.id for d in plan[:4]] == [
        "p.eden:0:100-200",
        "p.eden:0:200-300",
        "p.eden:0:500-600",
        "p.eden:0:600-700",
    ]
    assert spout.replay.from_topic == B and spout.counters["gaps_admitted"] == 2


def test_a_position_past_the_log_end_fails_loudly() -> None:
    spout = make(FakeClock(), positions={P0: 120})
    with pytest.raises(OffsetsBeyondLog, match="start offset 120 is past the log end 100"):
        spout.plan({P0: 100}, {}, 0.0)


def test_least_loaded_prefers_the_faster_lane() -> None:
    clock = FakeClock()
    spout = make(clock, policy="least_loaded", w_init=8)
    plan = spout.plan({P0: 100_000}, {}, 0.0)
    report(spout, [(d, ack(d, rt=0.1 if d.lane == 1 else 1.5)) for d in plan])
    plan = spout.plan({P0: 100_000}, {}, 0.0, budget=6)
    assert [d.lane for d in plan] == [1] * 6


def test_durable_checkpoints_close_the_ledger() -> None:
    clock = FakeClock()
    spout = make(clock)
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    report(spout, [(d, ack(d)) for d in plan])
    assert spout.at_risk() == 4
    assert spout.durable({P0: 300}) == 3  # [300, 400) is not durable yet
    assert spout.at_risk() == 1
    assert spout.durable({P0: 400}) == 1
    assert spout.at_risk() == 0


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ValueError, match=r"SpoutConfig.w_init=9 must lie in \[w_min=1, w_max=4\]"):
        SpoutConfig(pipeline="p", lanes=1, tuple_size=10, w_max=4, w_init=9)
    with pytest.raises(ValueError, match="unknown name 'fastest'"):
        SpoutConfig(pipeline="p", lanes=1, tuple_size=10, policy="fastest")
    with pytest.raises(ValueError, match=r"lane must be in 0\.\.1"):
        make(FakeClock()).on_lane_results(2, [])


def test_each_tuple_goes_to_the_next_lane_in_cyclic_order_that_has_a_free_slot() -> None:
    spout = make(FakeClock(), lanes=3, w_init=2)
    first = spout.plan({P0: 10_000}, {}, 0.0, budget=4)
    assert [d.lane for d in first] == [0, 1, 2, 0]
    # lane 0's window is full: the next two go to lanes 1 and 2, then every window is
    assert [d.lane for d in spout.plan({P0: 10_000}, {}, 0.0)] == [1, 2]


def test_a_single_lane_takes_its_own_failed_tuple_again() -> None:
    spout = make(FakeClock(), lanes=1, w_init=2)
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    lost = plan[0]
    failed = LaneResult(lost.tuple.id, Outcome.FAILED, error="read failed")
    report(spout, [(lost, failed)] + [(d, ack(d)) for d in plan[1:]])
    again = spout.plan({P0: 10_000}, {}, 0.0)
    assert again[0].tuple == lost.tuple and again[0].lane == 0


def test_least_loaded_skips_full_windows_and_the_lane_that_failed_a_tuple() -> None:
    spout = make(FakeClock(), lanes=3, w_init=2, policy="least_loaded")
    plan = spout.plan({P0: 10_000}, {}, 0.0)
    assert sorted(d.lane for d in plan) == [0, 0, 1, 1, 2, 2]
    lost = next(d for d in plan if d.lane == 1)
    failed = LaneResult(lost.tuple.id, Outcome.FAILED, error="read failed")
    report(spout, [(lost, failed)] + [(d, ack(d)) for d in plan if d is not lost])
    again = spout.plan({P0: 10_000}, {}, 0.0)
    assert again[0].tuple == lost.tuple and again[0].lane != 1
