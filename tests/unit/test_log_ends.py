"""When the planner does with ``end_offsets()`` (lower bounds on Tansu) instead of exact ends."""

from __future__ import annotations

from flowctl.spark.flow.log_ends import enough_below

EDEN = "demo.eden"


def test_bounds_do_while_eden_holds_more_below_them_than_the_windows_take() -> None:
    assert enough_below(EDEN, {0: 100, 1: 0}, 500, EDEN, {0: 400, 1: 300})
    assert not enough_below(EDEN, {0: 100, 1: 0}, 601, EDEN, {0: 400, 1: 300})
    assert not enough_below(EDEN, {}, 0, EDEN, {0: 0, 1: 0})  # nothing below: read exactly


def test_a_cut_past_a_bound_needs_the_exact_end() -> None:
    """A cut inside the last record batch (past its start, the bound) would look like a
    reset log: that partition's exact end is read, whatever waits elsewhere."""
    assert not enough_below(EDEN, {0: 5500, 1: 0}, 10, EDEN, {0: 5260, 1: 90_000})


def test_replay_topics_are_always_read_exactly() -> None:
    assert not enough_below(EDEN, {}, 0, "demo.replay.a", {0: 90_000})
