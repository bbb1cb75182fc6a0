"""Whether a finished replacement starts the next warm standby, and with what run conf
(:func:`~flowctl_airflow.replacement_state.next_standby_conf`; issue 12's
leftover). Pure: no Airflow, no database; the operator's use of it is
tests/dags/test_rescale_protocol.py and tests/faults/test_handover_faults.py."""

from __future__ import annotations

from typing import Any

import pytest

from bench.lib.direct_replace import standby_args
from flowctl_airflow.replacement_state import Progress, next_standby_conf

ALLOWED = [1, 2, 4, 8, 16]


def _progress(**changes: Any) -> Progress:
    done = {"green_active": True, "blue_stopped": True, "standby_lanes": 1}
    return Progress(
        event_id=7, blue="wc-blue-1", green="wc-green-standby", green_run_id="r",
        stream_dag_id="stream_wc", target=4, ready_s=1.0, drain_s=1.0, stop_s=1.0,
        **{**done, **changes},
    )  # fmt: skip


def _conf(p: Progress, **changes: Any) -> tuple[dict[str, Any] | None, str]:
    kwargs: dict[str, Any] = {
        "enabled": True, "pipeline": "wc", "colour": "blue", "spares": [],
        "allowed": ALLOWED, "stamp": "20260101T000000000000",
    }  # fmt: skip
    return next_standby_conf(p, **{**kwargs, **changes})


def test_a_replacement_that_took_a_standby_starts_the_next_one_like_the_first() -> None:
    conf, why = _conf(_progress())
    assert conf == {
        "parallelism": 1,  # the lanes the taken standby was started with, not green's 4
        "colour": "blue",  # the slot blue leaves free
        "standby": True,
        "replaces": None,  # a warm standby, not a green
        "topology_id": "wc-blue-standby-20260101T000000000000",
    }
    assert "starting wc-blue-standby-" in why
    # what the stream DAG's operator (and DirectReplace) submit for it
    assert standby_args(conf) == ["--warm-standby", "--colour", "blue"]


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"standby_lanes": None}, "no standby taken"),
        ({"blue_stopped": False}, "did not finish"),
        ({"green_active": False}, "did not finish"),
    ],
)
def test_nothing_is_started_unless_a_standby_was_taken_and_the_replacement_finished(
    changes: dict[str, Any], reason: str
) -> None:
    conf, why = _conf(_progress(**changes))
    assert conf is None and reason in why


def test_the_knob_turns_it_off() -> None:
    conf, why = _conf(_progress(), enabled=False)
    assert conf is None and "start_next_standby=False" in why


def test_never_two_standbys_a_spare_already_there_is_kept() -> None:
    conf, why = _conf(_progress(), spares=["wc-green-standby-2"])
    assert conf is None and "wc-green-standby-2" in why


def test_lanes_no_longer_allowed_fall_back_to_the_smallest_allowed() -> None:
    conf, _ = _conf(_progress(standby_lanes=1), allowed=[2, 4, 8])
    assert conf is not None and conf["parallelism"] == 2


def test_green_of_a_replacement_keeps_its_standby_flag() -> None:
    green = {"colour": "green", "replaces": "wc-blue-1", "standby": True}
    assert standby_args(green) == ["--standby", "--colour", "green"]


def test_the_progress_carries_it_through_a_deferral() -> None:
    p = _progress(next_standby="wc-blue-standby-x")
    assert Progress.from_dict(p.to_dict()) == p
