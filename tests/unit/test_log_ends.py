"""When the planner does with ``end_offsets()`` (lower bounds on Tansu) instead of exact ends
(on Apache Kafka ``end_offsets()`` are the exact ends: tests/adapters/test_kafka_ends_exact.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence

import pytest

from flowctl.spark.flow.log_ends import (
    DEFER_JUDGED_FETCHES,
    DEFER_TAIL_AFTER_MS,
    KafkaEnds,
    enough_below,
)

EDEN = "demo.eden"


@pytest.fixture(autouse=True)
def _tansu(monkeypatch: pytest.MonkeyPatch) -> None:
    """These are the reads of a broker whose ``end_offsets()`` are bounds (Tansu)."""
    monkeypatch.setenv("FLOWCTL_BROKER", "tansu")


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


def test_only_a_topic_whose_exact_ends_proved_costly_to_fetch_may_defer_its_tails(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The switch follows the median of each topic's latest fetches (one slow fetch says
    nothing), says so in the log once, and has no way back: the fetches a deferring topic
    still makes (its quiet partitions, the broker asked less) cost about half of the exact
    reads', and a switch back on them turned it back and forth every few seconds."""
    ends = KafkaEnds("127.0.0.1:1")  # never connects: no read is made here
    assert ends.costly(["eden", "replay"]) == []  # nothing fetched yet: exact ends
    ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS * 9)  # the first fetch opens connections
    for _ in range(DEFER_JUDGED_FETCHES):
        ends._fetched({"eden", "replay"}, DEFER_TAIL_AFTER_MS / 5)
    ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS * 9)  # one slow fetch: a pause, not the log
    assert ends.costly(["eden", "replay"]) == []
    with caplog.at_level(logging.INFO, logger="flowctl.spark.flow.log_ends"):
        for _ in range(DEFER_JUDGED_FETCHES // 2):
            ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS * 1.2)
        assert ends.costly(["eden"]) == ["eden"]  # 3 of the last 5 were costly
        for _ in range(DEFER_JUDGED_FETCHES * 2):
            ends._fetched({"eden"}, DEFER_TAIL_AFTER_MS / 2.2)  # quiet partitions only
    assert ends.costly(["eden", "replay"]) == ["eden"]
    assert caplog.text.count("its appended tails wait a batch from now on") == 1


class SlowListOffsets:
    """The requests of a one-partition log whose ListOffsets request is costly (as Tansu's
    on a long log) and whose fetch round is not: every read fetches 5 new records."""

    def __init__(self) -> None:
        self.end = 0

    def partitions(self, topic: str) -> list[int]:
        return [0]

    def bounds(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        time.sleep(DEFER_TAIL_AFTER_MS * 1.2 / 1000.0)
        self.end += 5
        return {key: self.end - 1 for key in keys}

    def fetch_ends(
        self, first: Mapping[tuple[str, int], int], bounds: object, timeout_s: float
    ) -> dict[tuple[str, int], int]:
        return {key: self.end for key in first}

    def starts(self, topic: str) -> dict[int, int]:
        return {0: 0}

    def close(self) -> None:
        pass


def test_the_switch_judges_the_whole_read_not_the_fetch_round_alone() -> None:
    """What the planner waits on is the read: a costly ListOffsets request turns the switch
    although every fetch round is quick (librdkafka's on a long log)."""
    ends = KafkaEnds("127.0.0.1:1")
    ends._client = SlowListOffsets()  # never connects
    for _ in range(DEFER_JUDGED_FETCHES + 1):  # the first read opens connections: not judged
        assert ends.costly([EDEN]) == []
        ends.latest_offsets_of([EDEN], may_defer=[EDEN])
    assert ends.costly([EDEN]) == [EDEN]
