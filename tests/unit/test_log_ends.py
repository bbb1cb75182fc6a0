"""When the planner does with ``end_offsets()`` (lower bounds on Tansu) instead of exact ends."""

from __future__ import annotations

import logging

import pytest

from flowctl.spark.flow.log_ends import DEFER_TAIL_AFTER_MS, KafkaEnds, enough_below

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


def test_only_a_topic_whose_exact_ends_were_costly_to_fetch_may_defer_its_tails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The switch follows each topic's fetches, both ways with a margin (no flapping on a
    cost near the threshold), and says so in the log each time it turns."""
    ends = KafkaEnds("127.0.0.1:1")  # never connects: no read is made here
    assert ends.costly(["eden", "replay"]) == []  # nothing fetched yet: exact ends
    ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS * 3, {"eden"})  # the first opens connections
    assert ends.costly(["eden"]) == []
    ends._fetched({"eden", "replay"}, DEFER_TAIL_AFTER_MS / 5, {"eden", "replay"})
    assert ends.costly(["eden"]) == []
    with caplog.at_level(logging.INFO, logger="flowctl.spark.flow.log_ends"):
        ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS * 2, {"eden"})
        ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS * 0.8, {"eden"})  # below, within the margin
    assert ends.costly(["eden", "replay"]) == ["eden"]
    assert caplog.text.count("its appended tails now wait a batch") == 1
    with caplog.at_level(logging.INFO, logger="flowctl.spark.flow.log_ends"):
        ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS * 0.4, {"eden"})
    assert ends.costly(["eden"]) == [] and "its ends are exact again" in caplog.text


def test_a_cheap_fetch_of_a_few_quiet_partitions_leaves_the_tails_waiting() -> None:
    """While Eden defers, its fetches are of the partitions that went quiet for a batch:
    a few partitions cost less than the topic, so such a fetch says nothing of the log.
    Only a cheap fetch of every partition turns the switch back (it flapped in the
    half-hour soak before: bench/README.md)."""
    ends = KafkaEnds("127.0.0.1:1")
    ends._fetched({"eden"}, 5.0, {"eden"})  # the first fetch opens connections
    ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS * 2, {"eden"})
    for _ in range(5):
        ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS / 5, set())  # some partitions only
        ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS * 2, {"eden"})
    assert ends.costly(["eden"]) == ["eden"]
    ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS / 5, set())
    assert ends.costly(["eden"]) == ["eden"]
    ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS / 5, {"eden"})
    assert ends.costly(["eden"]) == []
