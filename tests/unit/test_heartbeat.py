"""The driver's heartbeat thread: it beats while the caller is busy, survives errors, stops."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from flowctl.spark.heartbeat import Heartbeat


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def test_it_beats_at_start_and_on_its_own_while_the_caller_is_blocked() -> None:
    beats: list[str] = []
    heartbeat = Heartbeat(lambda: beats.append(threading.current_thread().name), "t1", 0.01)
    heartbeat.start()
    assert beats == [threading.current_thread().name]  # at once, in the caller
    # The caller does nothing more (as if stuck on a stop waiting for a long batch).
    wait_until(lambda: len(beats) >= 4, "beats from the thread")
    assert set(beats[1:]) == {"heartbeat-t1"}
    heartbeat.stop()
    assert not heartbeat.alive
    after = len(beats)
    time.sleep(0.05)
    assert len(beats) == after  # nothing after stop


def test_a_failed_beat_is_logged_and_the_next_one_still_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = {"n": 0}

    def beat() -> None:
        calls["n"] += 1
        if calls["n"] <= 3:
            raise ConnectionError("database away")

    heartbeat = Heartbeat(beat, "t2", 0.01)
    heartbeat.start()
    wait_until(lambda: heartbeat.beats >= 2, "beats after the database came back")
    heartbeat.stop()
    assert heartbeat.failures == 3
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["topology t2: heartbeat not written (retrying): database away"]


@pytest.mark.parametrize("every_s", [0, -1, True, "1"])
def test_a_bad_interval_is_refused_by_name(every_s: object) -> None:
    with pytest.raises(ValueError, match=r"Heartbeat every_s must be a number > 0, got"):
        Heartbeat(lambda: None, "t3", every_s)  # type: ignore[arg-type]


def test_stop_before_start_and_twice_is_harmless() -> None:
    heartbeat = Heartbeat(lambda: None, "t4", 0.01)
    heartbeat.stop()
    heartbeat.start()  # a stopped heartbeat's thread ends at once
    heartbeat.stop()
    heartbeat.stop()
    assert not heartbeat.alive


def test_beat_now_beats_in_the_caller_and_not_after_stop() -> None:
    beats: list[str] = []
    heartbeat = Heartbeat(lambda: beats.append(threading.current_thread().name), "t2", 60)
    heartbeat.start()
    heartbeat.beat_now()
    assert beats == [threading.current_thread().name] * 2  # no wait for the thread's beat
    heartbeat.stop()
    heartbeat.beat_now()
    assert len(beats) == 2  # a stopped heartbeat stays silent
