"""Replays share the window with fresh input (core.replay.replay_quota, core.spout; fake clock)."""

from __future__ import annotations

import pytest

from flowctl.core.clock import FakeClock
from flowctl.core.replay import replay_quota
from flowctl.core.spout_contract import SpoutConfig

from .test_spout import P0, A, B, ack, make, report


def test_with_eden_idle_replays_take_every_slot() -> None:
    assert replay_quota(8, 0, 0.25) == 8


def test_with_eden_busy_replays_take_their_share() -> None:
    assert replay_quota(8, 100, 0.25) == 2
    assert replay_quota(8, 100, 0.5) == 4


def test_replays_take_what_eden_cannot_use() -> None:
    assert replay_quota(8, 3, 0.25) == 5


def test_replays_always_get_a_slot_of_two_or_more() -> None:
    assert replay_quota(3, 100, 0.1) == 1


def test_a_single_slot_goes_to_fresh_input() -> None:
    assert replay_quota(1, 100, 0.9) == 0


def test_no_room_no_replays() -> None:
    assert replay_quota(0, 0, 0.5) == 0


BAD_SHARES = [0, -0.5, 1.5, True, "half"]


@pytest.mark.parametrize("share", BAD_SHARES)
def test_a_bad_share_is_refused_naming_it(share: object) -> None:
    with pytest.raises(ValueError, match="share"):
        replay_quota(4, 1, share)  # type: ignore[arg-type]


@pytest.mark.parametrize("share", BAD_SHARES)
def test_a_bad_replay_share_setting_names_the_field(share: object) -> None:
    with pytest.raises(ValueError, match="replay_share"):
        SpoutConfig(pipeline="p", lanes=1, tuple_size=10, replay_share=share)  # type: ignore[arg-type]


def _swapped(w_init: int, **kw: object):
    """A spout whose From is B, so the records failed into A are To and readable."""
    clock = FakeClock()
    spout = make(clock, w_init=w_init, **kw)
    assert spout.plan({P0: 0}, {(A, 0): 50, (B, 0): 0}, 100.0) == []  # To empty: swap
    return clock, spout


def test_the_spout_gives_eden_its_slots_while_replays_wait() -> None:
    _, spout = _swapped(4)  # 2 lanes x 4 = 8 slots
    plan = spout.plan({P0: 10_000}, {(A, 0): 50, (B, 0): 0}, 100.0)
    assert sum(d.replay for d in plan) == 4
    assert sum(not d.replay for d in plan) == 4


def test_the_share_is_a_setting() -> None:
    _, spout = _swapped(4, replay_share=0.25)
    plan = spout.plan({P0: 10_000}, {(A, 0): 50, (B, 0): 0}, 100.0)
    assert sum(d.replay for d in plan) == 2


def test_a_lingering_partial_tuple_leaves_the_slots_to_replays() -> None:
    _, spout = _swapped(4)
    plan = spout.plan({P0: 50}, {(A, 0): 50, (B, 0): 0}, 100.0)  # [0, 50) not idle yet
    assert sum(d.replay for d in plan) == 8


def test_an_idle_partial_tuple_is_eden_input() -> None:
    clock, spout = _swapped(4)
    spout.plan({P0: 50}, {(A, 0): 0, (B, 0): 0}, 100.0)  # sees the tail; nothing to replay
    clock.advance(2.0)
    plan = spout.plan({P0: 50}, {(A, 0): 50, (B, 0): 0}, 100.0)
    assert [d.tuple.id for d in plan if not d.replay] == ["p.eden:0:0-50"]
    assert sum(d.replay for d in plan) == 7


def test_gaps_count_as_eden_input() -> None:
    from flowctl.core.tuples import TupleRange

    clock = FakeClock()
    gap = TupleRange("p.eden", 0, 0, 3000)
    spout = make(clock, w_init=4, positions={P0: 3000}, gaps=[gap])
    first = spout.plan({P0: 3000}, {(A, 0): 50, (B, 0): 0}, 100.0)  # To empty: swap; 8 gaps
    assert not any(d.replay for d in first) and spout.replay.from_topic == B
    report(spout, [(d, ack(d)) for d in first])  # windows 5 + 5
    plan = spout.plan({P0: 3000}, {(A, 0): 50, (B, 0): 0}, 100.0)
    assert sum(d.replay for d in plan) == 5
    assert next(d.tuple.id for d in plan if not d.replay) == "p.eden:0:800-900"
