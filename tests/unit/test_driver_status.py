"""The rule a stream task's retry reattaches by: which evidence means "still running"."""

from __future__ import annotations

import pytest

from flowctl.core.driver_status import DriverEvidence, driver_status, is_running

LIVE_S = 5.0


def status(state: str | None, age: float | None, process: str, code: int | None = None) -> str:
    return driver_status(DriverEvidence(state, age, process, code), LIVE_S)


@pytest.mark.parametrize("process", ["alive", "exited", "gone", "elsewhere"])
@pytest.mark.parametrize("state", ["STOPPED", "FAILED"])
def test_a_final_state_is_the_answer_whatever_the_process(state: str, process: str) -> None:
    assert status(state, 100.0, process, 0) == state
    assert not is_running(state)


def test_a_live_local_process_is_running_registered_or_not() -> None:
    assert status(None, None, "alive") == "SUBMITTED"
    assert status("ACTIVE", 60.0, "alive") == "ACTIVE"  # a database hiccup ages the beat
    assert is_running("SUBMITTED") and is_running("ACTIVE") and is_running("DRAINED")


def test_an_exited_driver_without_a_final_state_is_lost_or_failed() -> None:
    assert status("ACTIVE", 1.0, "exited", 0) == "LOST"
    assert status("ACTIVE", 1.0, "exited", -9) == "FAILED"
    assert status(None, None, "exited", 2) == "FAILED"  # it never registered
    assert status(None, None, "exited", 0) == "FAILED"


def test_a_driver_seen_only_through_the_control_plane_runs_while_it_beats() -> None:
    assert status("ACTIVE", 1.0, "elsewhere") == "ACTIVE"
    assert status("READY", 1.0, "gone") == "READY"
    assert status("ACTIVE", 6.0, "elsewhere") == "LOST"
    assert status(None, None, "elsewhere") == "LOST"
    assert status("ACTIVE", 30.0, "gone") == "LOST"
    assert not is_running("LOST")


def test_an_unknown_process_word_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="process='running'"):
        status("ACTIVE", 1.0, "running")
