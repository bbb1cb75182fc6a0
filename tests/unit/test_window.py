"""AdaptiveWindow: the seed's NORMAL / SLOW / BUSY rules, rounds, bounds, snapshot."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.clock import FakeClock
from flowctl.core.rtt import RttEstimator
from flowctl.core.window import AdaptiveWindow, LaneState, WindowFullError


def make(clock: FakeClock, *, w_init: int = 4, w_min: int = 1, w_max: int = 10) -> AdaptiveWindow:
    return AdaptiveWindow(
        0, clock, w_min=w_min, w_max=w_max, w_init=w_init, rtt=RttEstimator(fixed_threshold=1.0)
    )


def fill(win: AdaptiveWindow, prefix: str = "t") -> list[str]:
    ids = [f"{prefix}{i}" for i in range(win.free_slots)]
    for tid in ids:
        win.on_send(tid)
    return ids


def test_additive_increase_exactly_once_per_round() -> None:
    clock = FakeClock()
    win = make(clock, w_init=4)
    ids = fill(win, "a")
    clock.advance(0.5)
    sizes = [win.on_ack(tid).window for tid in ids]  # type: ignore[union-attr]
    assert sizes == [4, 4, 4, 5]
    assert win.rounds == 1
    ids = fill(win, "b")
    assert len(ids) == 5
    sizes = [win.on_ack(tid).window for tid in ids]  # type: ignore[union-attr]
    assert sizes == [5, 5, 5, 5, 6]
    assert win.state is LaneState.NORMAL


def test_slow_decreases_at_most_once_per_round() -> None:
    clock = FakeClock()
    win = make(clock, w_init=6)
    ids = fill(win)
    clock.advance(2.0)  # over the fixed threshold of 1 s
    sizes = [win.on_ack(tid).window for tid in ids]  # type: ignore[union-attr]
    assert sizes == [5, 5, 5, 5, 5, 5]
    assert win.state is LaneState.SLOW
    ids = fill(win, "b")
    clock.advance(2.0)
    sizes = [win.on_ack(tid).window for tid in ids]  # type: ignore[union-attr]
    assert sizes == [4, 4, 4, 4, 4]


def _to_target(
    clock: FakeClock, w_init: int, w_max: int = 64, growth: str = "one"
) -> AdaptiveWindow:
    return AdaptiveWindow(
        0,
        clock,
        w_max=w_max,
        w_init=w_init,
        rtt=RttEstimator(fixed_threshold=1.0),
        slow_decrease="to_target",
        growth=growth,
    )


def _grows_to_target(clock: FakeClock, w_init: int) -> AdaptiveWindow:
    return _to_target(clock, w_init, w_max=256, growth="to_target")


def _acks(win: AdaptiveWindow, ids: list[str], rts: list[float]) -> list[int]:
    outs = [win.on_ack(tid, rt=rt) for tid, rt in zip(ids, rts, strict=True)]
    return [out.window for out in outs if out is not None]


def test_to_target_ends_a_slow_round_at_what_the_lane_serves_within_the_threshold() -> None:
    """A micro-batch lane reports cumulative rt: tuple k of a batch ends at 0.1 + k * 0.25 s
    (0.1 s of reading first), threshold 1 s. The seed's -1 comes at the first SLOW ack;
    at the round's end the window is cut to floor(50 * 1 / 12.6) = 3 (the longest queue's
    Little's-law window), where the seed's rule would need 46 more batches."""
    clock = FakeClock()
    win = _to_target(clock, w_init=50)
    ids = fill(win)
    sizes = _acks(win, ids, [0.1 + 0.25 * (k + 1) for k in range(50)])
    assert sizes[:3] == [50] * 3 and set(sizes[3:-1]) == {49} and sizes[-1] == 3
    assert win.state is LaneState.SLOW
    ids = fill(win, "b")  # 3 tuples: 0.85 s, within the threshold: the window grows again
    assert _acks(win, ids, [0.1 + 0.25 * (k + 1) for k in range(3)]) == [3, 3, 4]


def test_to_target_just_over_the_threshold_is_the_seeds_minus_one() -> None:
    clock = FakeClock()
    win = _to_target(clock, w_init=6, w_max=10)
    ids = fill(win)
    assert _acks(win, ids, [1.01] * 6) == [5] * 6  # longest queue 6: floor(6 / 1.01) = 5


def test_the_seeds_rule_is_still_selectable_and_named_when_wrong() -> None:
    clock = FakeClock()
    seed = AdaptiveWindow(0, clock, w_max=64, w_init=50, rtt=RttEstimator(fixed_threshold=1.0))
    ids = fill(seed)
    assert _acks(seed, ids, [0.1 + 0.25 * (k + 1) for k in range(50)])[-1] == 49
    with pytest.raises(ValueError, match=r"slow_decrease must be one of one, to_target, got 'x'"):
        AdaptiveWindow(0, clock, slow_decrease="x")


def _batch(win: AdaptiveWindow, prefix: str, per_tuple_s: float) -> list[int]:
    """One micro-batch: fill the window, ack tuple k at ``0.1 + (k + 1) * per_tuple_s``."""
    ids = fill(win, prefix)
    return _acks(win, ids, [0.1 + per_tuple_s * (k + 1) for k in range(len(ids))])


def test_growth_to_target_doubles_toward_the_room_the_acks_measured() -> None:
    """A window cut to 3 during a slowdown, the lane fast again (4 ms a tuple, 1 s
    threshold): each NORMAL round at most doubles it, up to the room it measured."""
    clock = FakeClock()
    win = _grows_to_target(clock, w_init=3)
    sizes = [_batch(win, f"r{i}", 0.004)[-1] for i in range(7)]
    assert sizes == [6, 12, 24, 48, 96, 192, 221]  # 192 tuples end at 0.868 s: room 221


def test_growth_to_target_stops_at_the_room_not_beyond() -> None:
    """10 ms a tuple after 0.1 s of reading: the last of 64 acks at 0.74 s gives room
    floor(64 / 0.74) = 86, under the doubling; the next round (86 tuples, last at
    0.96 s) has room 89: growth there is the seed's +1 territory, not a leap into SLOW."""
    clock = FakeClock()
    win = _grows_to_target(clock, w_init=64)
    assert _batch(win, "a", 0.01)[-1] == 86
    assert _batch(win, "b", 0.01)[-1] == 89
    assert win.state is LaneState.NORMAL


def test_growth_to_target_in_steady_state_is_the_seeds_plus_one() -> None:
    """Acks just under the threshold: the room is the window itself, so +1 a round."""
    clock = FakeClock()
    win = _grows_to_target(clock, w_init=20)
    ids = fill(win)
    assert _acks(win, ids, [0.99] * 20)[-1] == 21


def test_growth_needs_a_full_window_whatever_the_rule() -> None:
    clock = FakeClock()
    win = _grows_to_target(clock, w_init=8)
    win.on_send("only")  # never window-limited this round
    for k in range(8):
        win.on_ack("only", rt=0.01)
        if k < 7:
            win.on_send("only")
    assert win.size == 8


def test_the_seeds_growth_is_selectable_and_named_when_wrong() -> None:
    clock = FakeClock()
    seed = AdaptiveWindow(0, clock, w_max=256, w_init=3, rtt=RttEstimator(fixed_threshold=1.0))
    assert _batch(seed, "a", 0.004)[-1] == 4
    with pytest.raises(ValueError, match=r"growth must be one of one, to_target, got 'fast'"):
        AdaptiveWindow(0, clock, growth="fast")


def test_a_return_cuts_the_window_to_what_the_lane_served_once_per_batch() -> None:
    clock = FakeClock()
    win = _grows_to_target(clock, w_init=40)
    ids = fill(win)
    for tid in ids[:6]:
        win.on_ack(tid, rt=0.5)
    returned = [win.on_return(tid, served=6) for tid in ids[6:]]
    assert returned == ids[6:]  # every one handed back to be requeued
    assert win.size == 6 and win.state is LaneState.BUSY
    assert win.in_flight == 0 and win.on_return(ids[-1], served=6) is None  # unknown now
    ids = fill(win, "b")
    assert win.on_return(ids[-1], served=9) == ids[-1]
    assert win.size == 5  # a later batch's return: at least -1


def test_a_slow_minus_one_in_the_same_batch_does_not_hide_the_return_cut() -> None:
    """Served tuples acked past the threshold (SLOW: the seed's -1) before the lane ran
    out of time: the returns still cut the window to what the lane served."""
    clock = FakeClock()
    win = _grows_to_target(clock, w_init=100)
    ids = fill(win)
    _acks(win, ids[:29], [0.05 * (k + 1) for k in range(29)])  # the last 9 are SLOW
    assert win.size == 99
    for tid in ids[29:]:
        win.on_return(tid, served=29)
    assert win.size == 29


def test_a_return_after_slow_acks_cuts_to_what_the_lane_serves_within_the_threshold() -> None:
    """12 tuples served, the last acked at 1.5 s (threshold 1 s): 8 fit the threshold."""
    clock = FakeClock()
    win = _grows_to_target(clock, w_init=40)
    ids = fill(win)
    _acks(win, ids[:12], [0.125 * (k + 1) for k in range(12)])
    win.on_return(ids[12], served=12, rt=1.5)
    assert win.size == 8


def test_growth_to_target_survives_a_snapshot() -> None:
    clock = FakeClock()
    win = _grows_to_target(clock, w_init=4)
    ids = fill(win)
    win.on_ack(ids[0], rt=0.01)
    snap = pickle.loads(pickle.dumps(win.snapshot()))
    back = AdaptiveWindow.from_snapshot(snap, FakeClock(3.0))
    assert back.snapshot() == snap
    assert [back.on_ack(tid, rt=0.01).window for tid in ids[1:]][-1] == 8  # type: ignore[union-attr]


def test_one_slow_ack_spoils_the_rounds_increase() -> None:
    clock = FakeClock()
    win = make(clock, w_init=3)
    ids = fill(win)
    clock.advance(2.0)
    assert win.on_ack(ids[0]).slow  # type: ignore[union-attr]
    win.on_ack(ids[1], rt=0.1)
    out = win.on_ack(ids[2], rt=0.1)
    assert out is not None and not out.slow
    assert win.size == 2
    assert win.state is LaneState.NORMAL


def test_ack_measures_rt_from_send_time() -> None:
    clock = FakeClock(100.0)
    win = make(clock)
    win.on_send("x")
    clock.advance(0.25)
    win.on_send("y")
    out = win.on_ack("y")
    assert out is not None and (out.rt, out.ahead) == (0.0, 1)
    clock.advance(0.5)
    out = win.on_ack("x")
    assert out is not None and (out.rt, out.ahead) == (0.75, 0)


def test_fail_is_busy_and_decreases_at_once() -> None:
    clock = FakeClock()
    win = make(clock, w_init=5)
    ids = fill(win)
    assert win.on_fail(ids[0]) == ids[0]
    assert (win.size, win.state) == (4, LaneState.BUSY)
    assert win.on_timeout(ids[1]) == ids[1]
    assert (win.size, win.state) == (3, LaneState.BUSY)
    assert win.in_flight == 3


def test_slow_after_busy_in_the_same_round_does_not_decrease_again() -> None:
    clock = FakeClock()
    win = make(clock, w_init=5)
    ids = fill(win)
    win.on_fail(ids[0])
    clock.advance(2.0)
    win.on_ack(ids[1])
    assert win.size == 4


def test_unknown_tuple_changes_nothing() -> None:
    clock = FakeClock()
    win = make(clock, w_init=4)
    win.on_send("a")
    win.on_timeout("a")
    size = win.size
    assert win.on_ack("a") is None
    assert win.on_fail("a") is None
    assert win.on_timeout("nope") is None
    assert win.size == size


def test_any_ack_frees_a_slot_whatever_the_order() -> None:
    clock = FakeClock()
    win = make(clock, w_init=3)
    ids = fill(win)
    assert win.free_slots == 0
    win.on_ack(ids[2], rt=0.1)
    assert win.free_slots == 1


def test_full_window_rejects_send() -> None:
    clock = FakeClock()
    win = make(clock, w_init=1)
    win.on_send("a")
    with pytest.raises(WindowFullError, match="window 1 is full"):
        win.on_send("b")


def test_duplicate_send_is_rejected() -> None:
    win = make(FakeClock())
    win.on_send("a")
    with pytest.raises(ValueError, match="already in flight"):
        win.on_send("a")


def test_window_stays_at_w_min_under_failures() -> None:
    clock = FakeClock()
    win = make(clock, w_init=2, w_min=2)
    for i in range(5):
        win.on_send(f"t{i}")
        win.on_fail(f"t{i}")
    assert win.size == 2


def test_window_stays_at_w_max_under_normal_acks() -> None:
    clock = FakeClock()
    win = make(clock, w_init=3, w_max=4)
    for r in range(5):
        for tid in fill(win, f"r{r}-"):
            win.on_ack(tid, rt=0.1)
    assert win.size == 4


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"w_min": 0, "w_max": 4, "w_init": 1}, "w_min"),
        ({"w_min": 3, "w_max": 2, "w_init": 3}, "w_max"),
        ({"w_min": 1, "w_max": 4, "w_init": 5}, "w_init"),
        ({"w_min": 1.5, "w_max": 4, "w_init": 2}, "w_min"),
    ],
)
def test_bad_bounds_name_the_field(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        AdaptiveWindow(0, FakeClock(), **kwargs)


def test_overdue_lists_old_tuples_first() -> None:
    clock = FakeClock()
    win = make(clock)
    win.on_send("old")
    clock.advance(5)
    win.on_send("new")
    clock.advance(5)
    assert win.overdue(10) == ["old"]
    assert win.overdue(5) == ["old", "new"]


def test_snapshot_survives_a_restart_on_another_clock() -> None:
    clock = FakeClock(1000.0)
    win = make(clock, w_init=4)
    win.on_send("a")
    clock.advance(3.0)
    win.on_send("b")
    win.on_ack("b", rt=0.2)
    snap = pickle.loads(pickle.dumps(win.snapshot()))
    restarted = FakeClock(7.0)  # a fresh monotonic clock after a process restart
    back = AdaptiveWindow.from_snapshot(snap, restarted)
    assert back.snapshot() == snap
    assert back.in_flight_ids() == ["a"]
    restarted.advance(1.0)
    out = back.on_ack("a")
    assert out is not None and out.rt == 4.0


events = st.lists(
    st.tuples(st.sampled_from(["send", "ack", "fail", "timeout", "return"]), st.floats(0, 3)),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(
    w_min=st.integers(1, 4),
    extra=st.integers(0, 6),
    init_off=st.integers(0, 6),
    fixed=st.booleans(),
    decrease=st.sampled_from(["one", "to_target"]),
    growth=st.sampled_from(["one", "to_target"]),
    script=events,
)
def test_window_stays_in_bounds_under_any_events(
    w_min: int,
    extra: int,
    init_off: int,
    fixed: bool,
    decrease: str,
    growth: str,
    script: list[tuple[str, float]],
) -> None:
    w_max = w_min + extra
    clock = FakeClock()
    rtt = RttEstimator(fixed_threshold=1.0) if fixed else RttEstimator()
    win = AdaptiveWindow(
        0,
        clock,
        w_min=w_min,
        w_max=w_max,
        w_init=min(w_max, w_min + init_off),
        rtt=rtt,
        slow_decrease=decrease,
        growth=growth,
    )
    n = 0
    for kind, dt in script:
        clock.advance(dt)
        ids = win.in_flight_ids()
        if kind == "send" and win.free_slots:
            win.on_send(n)
            n += 1
        elif ids and kind == "ack":
            win.on_ack(ids[-1])
        elif ids and kind == "fail":
            win.on_fail(ids[0])
        elif ids and kind == "return":
            win.on_return(ids[-1], served=int(dt))
        elif ids:
            win.on_timeout(ids[0])
        assert w_min <= win.size <= w_max
        assert 0 <= win.free_slots <= win.size


def test_slow_ack_of_a_tuple_sent_before_the_last_decrease_is_an_echo() -> None:
    clock = FakeClock()
    win = make(clock, w_init=3)
    for tid in ("a0", "a1", "a2"):
        win.on_send(tid)
    for old, new in (("a1", "a3"), ("a3", "a4")):
        win.on_ack(old, rt=0.1)
        win.on_send(new)
    win.on_ack("a4", rt=0.1)  # a full round of NORMAL acks
    assert win.size == 4
    win.on_send("a5")
    win.on_send("a6")
    win.on_ack("a5", rt=2.0)  # SLOW: the decrease of this round
    assert win.size == 3
    win.on_ack("a6", rt=0.1)
    win.on_send("a7")
    win.on_ack("a7", rt=0.1)
    win.on_ack("a2", rt=0.1)  # 4th ack: the round ends, a new one starts
    out = win.on_ack("a0", rt=2.0)  # sent before the decrease: an echo
    assert out is not None and out.slow
    assert (win.size, win.state) == (3, LaneState.SLOW)
    win.on_send("b0")
    win.on_ack("b0", rt=2.0)  # sent after the decrease: a new signal
    assert win.size == 2


def test_a_round_that_never_filled_the_window_does_not_grow_it() -> None:
    clock = FakeClock()
    win = make(clock, w_init=4)
    for i in range(8):  # one tuple at a time: the source, not the window, is the limit
        win.on_send(f"t{i}")
        win.on_ack(f"t{i}", rt=0.1)
    assert win.rounds == 2
    assert win.size == 4
