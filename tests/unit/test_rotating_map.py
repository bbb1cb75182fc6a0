"""Rotating-bucket map: rotation, refresh vs in-place update, timed expiry."""

from __future__ import annotations

import pytest

from flowctl.core.clock import FakeClock
from flowctl.core.rotating_map import RotatingMap, TimedRotatingMap


def test_entry_expires_after_n_rotations() -> None:
    m: RotatingMap[str, int] = RotatingMap(3)
    m.put("a", 1)
    assert m.rotate() == {}
    assert m.rotate() == {}
    assert m.rotate() == {"a": 1}
    assert "a" not in m


def test_put_refreshes_but_update_does_not() -> None:
    m: RotatingMap[str, int] = RotatingMap(2)
    m.put("a", 1)
    m.put("b", 1)
    m.rotate()
    m.put("a", 2)  # back into the newest bucket
    m.update("b", 2)  # stays in the older bucket
    assert m.rotate() == {"b": 2}
    assert m.get("a") == 2


def test_update_of_missing_key_raises() -> None:
    m: RotatingMap[str, int] = RotatingMap(2)
    with pytest.raises(KeyError):
        m.update("x", 1)


def test_pop_and_len() -> None:
    m: RotatingMap[str, int] = RotatingMap(2)
    m.put("a", 1)
    m.rotate()
    m.put("b", 2)
    assert len(m) == 2
    assert m.pop("a") == 1
    assert m.pop("a") is None
    assert list(m) == ["b"]


def test_needs_at_least_two_buckets() -> None:
    with pytest.raises(ValueError, match="buckets must be an int >= 2, got 1"):
        RotatingMap(1)


def test_timed_map_expires_within_one_period_before_the_timeout() -> None:
    clock = FakeClock()
    m: TimedRotatingMap[str, int] = TimedRotatingMap(clock, timeout_s=3.0, buckets=3)
    clock.set(0.5)
    m.put("a", 1)  # enters between rotations at 1, 2, 3
    clock.set(2.99)
    assert m.expire() == []
    clock.set(3.0)
    assert m.expire() == [("a", 1)]  # lived 2.5 s: in (timeout - period, timeout]


def test_timed_map_catches_up_after_a_long_gap() -> None:
    clock = FakeClock()
    m: TimedRotatingMap[str, int] = TimedRotatingMap(clock, timeout_s=2.0, buckets=2)
    m.put("a", 1)
    clock.set(1000.0)
    assert m.expire() == [("a", 1)]
    m.put("b", 2)
    clock.set(1001.0)  # next rotation is on the 1 s grid: 1001
    m.expire()
    clock.set(1002.0)
    assert m.expire() == [("b", 2)]


def test_timed_map_rejects_bad_timeout() -> None:
    with pytest.raises(ValueError, match="timeout_s must be > 0, got 0"):
        TimedRotatingMap(FakeClock(), timeout_s=0)


def test_buckets_and_phase_round_trip_onto_another_clock() -> None:
    clock = FakeClock(100.0)
    m: TimedRotatingMap[str, int] = TimedRotatingMap(clock, timeout_s=3.0, buckets=3)
    m.put("old", 1)
    clock.advance(1.5)
    m.expire()
    m.put("new", 2)
    other = FakeClock(0.0)
    back: TimedRotatingMap[str, int] = TimedRotatingMap(other, timeout_s=3.0, buckets=3)
    back.load_buckets(m.bucket_items())
    back.set_next_rotation_in(m.next_rotation_in())
    assert back.bucket_items() == m.bucket_items()
    other.advance(1.5)  # rotations at 0.5 and 1.5: "old" entered two periods ago
    assert back.expire() == [("old", 1)]
