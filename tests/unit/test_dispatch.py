"""Dispatcher: round robin, least loaded, requeue in front to a different lane."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.clock import FakeClock
from flowctl.core.dispatch import Dispatcher, make_policy
from flowctl.core.rtt import RttEstimator
from flowctl.core.tuples import TopicPartition, TupleRange, cut_range
from flowctl.core.window import AdaptiveWindow, LaneState

TP = TopicPartition("t", 0)


def lanes(clock: FakeClock, sizes: list[int]) -> list[AdaptiveWindow]:
    return [
        AdaptiveWindow(i, clock, w_min=1, w_max=16, w_init=w, rtt=RttEstimator(fixed_threshold=10))
        for i, w in enumerate(sizes)
    ]


def tuples(n: int, start: int = 0) -> list[TupleRange]:
    return cut_range(TP, start, start + n, 1)


def test_round_robin_cycles_over_lanes_with_room() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [2, 1, 2]), clock, policy="round_robin")
    d.enqueue(tuples(6))
    out = d.dispatch()
    assert [a.lane for a in out] == [0, 1, 2, 0, 2]
    assert d.buffered == 1
    assert d.capacity() == {0: 0, 1: 0, 2: 0}


def test_capacity_is_free_slots_per_lane() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [3, 1]), clock)
    d.enqueue(tuples(2))
    d.dispatch()
    assert d.capacity() == {0: 2, 1: 0}
    assert d.total_free() == 2


def test_least_loaded_sends_to_the_lowest_expected_completion_time() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [8, 8]), clock, policy="least_loaded")
    d.enqueue(tuples(2))
    first = d.dispatch()
    assert [a.lane for a in first] == [0, 1]  # no rates yet: fewest in flight, lowest index
    d.on_ack(first[0].tuple.id, rt=0.25)  # lane 0: 1 / 0.25 = 4 tuples/s
    d.on_ack(first[1].tuple.id, rt=1.0)  # lane 1: 1 tuple/s
    assert (d.rate(0), d.rate(1)) == (4.0, 1.0)
    d.enqueue(tuples(5, start=2))
    out = d.dispatch()
    # lane 0 completes (k+1)/4, lane 1 (k+1)/1: lane 0 takes 4 before lane 1 ties at 1 s
    assert [a.lane for a in out] == [0, 0, 0, 1, 0]


def test_least_loaded_rate_uses_littles_law() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [4]), clock, policy="least_loaded")
    d.enqueue(tuples(2))
    a, b = d.dispatch()
    clock.advance(1.0)
    d.on_ack(a.tuple.id)
    clock.advance(1.0)
    d.on_ack(b.tuple.id)  # found 1 ahead, took 2 s: (1 + 1) / 2 = 1 tuple/s
    assert d.rate(0) == 1.0


def test_failed_tuple_goes_to_the_front_and_to_another_lane() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [2, 2]), clock, policy="round_robin")
    d.enqueue(tuples(3))
    out = d.dispatch()
    failed = next(a for a in out if a.lane == 0).tuple
    assert d.on_fail(failed.id) == failed
    w0 = d.windows[0]
    assert (w0.size, w0.state) == (1, LaneState.BUSY)
    d.enqueue(tuples(2, start=10))
    again = d.dispatch()
    assert again[0].tuple == failed
    assert again[0].lane == 1


def test_retry_waits_when_only_the_failing_lane_has_room() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [3, 1]), clock, policy="round_robin")
    d.enqueue(tuples(2))
    out = d.dispatch()
    on0 = next(a for a in out if a.lane == 0).tuple
    d.on_fail(on0.id)
    d.enqueue(tuples(1, start=10))
    again = d.dispatch()
    assert [(a.lane, a.tuple.start) for a in again] == [(0, 10)]
    assert d.buffered == 1  # the retry still waits for lane 1


def test_single_lane_retries_on_itself() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [2]), clock)
    d.enqueue(tuples(1))
    (a,) = d.dispatch()
    d.on_timeout(a.tuple.id)
    (b,) = d.dispatch()
    assert (b.lane, b.tuple) == (0, a.tuple)


def test_expire_times_out_old_tuples_and_requeues_them() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [2, 2]), clock)
    d.enqueue(tuples(2))
    d.dispatch()
    clock.advance(30)
    expired = d.expire(30)
    assert sorted(t.start for t in expired) == [0, 1]
    assert d.in_flight == 0 and d.buffered == 2
    assert all(w.state is LaneState.BUSY for w in d.windows)


def test_late_ack_after_timeout_is_ignored() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [2, 2]), clock)
    d.enqueue(tuples(1))
    (a,) = d.dispatch()
    d.on_timeout(a.tuple.id)
    assert d.on_ack(a.tuple.id, rt=1.0) is None


def test_unknown_policy_lists_the_known_ones() -> None:
    with pytest.raises(
        ValueError, match="unknown name 'fastest'; choose one of least_loaded, round"
    ):
        make_policy("fastest")


def test_lanes_must_be_numbered_from_zero() -> None:
    clock = FakeClock()
    with pytest.raises(ValueError, match=r"windows\[0\] has lane=3"):
        Dispatcher([AdaptiveWindow(3, clock)], clock)


def test_snapshot_round_trip_keeps_buffer_in_flight_and_rates() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [2, 2]), clock, policy="least_loaded")
    d.enqueue(tuples(6))
    out = d.dispatch()
    d.on_ack(out[0].tuple.id, rt=0.5)
    d.on_fail(out[1].tuple.id)
    snap = pickle.loads(pickle.dumps(d.snapshot()))
    back = Dispatcher.from_snapshot(snap, FakeClock(50.0))
    assert back.snapshot().retry == snap.retry
    assert back.snapshot().fresh == snap.fresh
    assert back.policy == "least_loaded"
    assert back.rate(0) == d.rate(0)
    assert back.in_flight == d.in_flight
    assert back.buffered == d.buffered


def test_lane_report_applies_acks_and_fails_and_flags_stale_ids() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [2, 2]), clock)
    d.enqueue(tuples(4))
    out = d.dispatch()
    on0 = [a.tuple.id for a in out if a.lane == 0]
    on1 = [a.tuple.id for a in out if a.lane == 1]
    report = d.on_lane_report(0, acked=[(on0[0], 0.5), (on1[0], 0.5)], failed=[on0[1]])
    assert [a.tuple.id for a in report.acked] == [on0[0]]
    assert [t.id for t in report.requeued] == [on0[1]]
    assert report.stale == (on1[0],)  # in flight, but on lane 1: not lane 0's to report
    assert d.lane_of(on1[0]) == 1


def test_lane_report_rejects_an_unknown_lane() -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, [1, 1]), clock)
    with pytest.raises(ValueError, match=r"lane must be in 0\.\.1, got 5"):
        d.on_lane_report(5)


@settings(max_examples=100, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    policy=st.sampled_from(["round_robin", "least_loaded"]),
    script=st.lists(
        st.tuples(st.sampled_from(["ack", "fail", "timeout", "more"]), st.integers(0, 50)),
        max_size=80,
    ),
)
def test_every_tuple_is_buffered_in_flight_or_acked_exactly_once(
    sizes: list[int], policy: str, script: list[tuple[str, int]]
) -> None:
    clock = FakeClock()
    d = Dispatcher(lanes(clock, sizes), clock, policy=policy)
    made, acked = 0, []
    for kind, pick in script:
        clock.advance(0.1)
        if kind == "more":
            d.enqueue(tuples(3, start=made))
            made += 3
        for a in d.dispatch():
            if a.tuple.id in {r.tuple.id for r in d.snapshot().retry}:
                raise AssertionError("a dispatched tuple is still in the buffer")
        flying = [t for t, _ in d.snapshot().in_flight]
        if not flying or kind == "more":
            continue
        t = flying[pick % len(flying)]
        lane = d.lane_of(t.id)
        if kind == "ack":
            assert d.on_ack(t.id, rt=0.5) is not None
            acked.append(t.start)
        else:
            (d.on_fail if kind == "fail" else d.on_timeout)(t.id)
            if len(sizes) > 1:
                (again,) = [a for a in d.dispatch() if a.tuple == t] or [None]
                assert again is None or again.lane != lane
    snap = d.snapshot()
    places = (
        [r.tuple.start for r in snap.retry]
        + [t.start for t in snap.fresh]
        + [t.start for t, _ in snap.in_flight]
        + acked
    )
    assert sorted(places) == list(range(made))
