"""TopologyStateTrigger: serialize() round trip, one event per run, and on_kill's rollback,
on a real control plane."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import time

import pytest

from flowctl.adapters import schema
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.replacements import ReplacementLog
from flowctl_airflow.replacement_state import Progress, roll_back
from flowctl_airflow.triggers.topology_state import TopologyStateTrigger

pytestmark = pytest.mark.integration

BLUE, GREEN = "wc-blue-1", "wc-green-2"


@pytest.fixture
def plane(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> ControlPlane:
    """The control plane, named by the ``flowctl_test_db`` connection; blue ACTIVE."""
    conn = {"conn_type": "generic", "extra": {"sqlalchemy_url": sqlite_url}}
    monkeypatch.setenv("AIRFLOW_CONN_FLOWCTL_TEST_DB", json.dumps(conn))
    plane = ControlPlane(sqlite_url)
    plane.ensure_schema()
    plane.register_topology(BLUE, "wordcount", "blue", 2)
    plane.set_state(BLUE, "ACTIVE")
    return plane


def _trigger(
    topology_id: str, wanted: set[str], *, within_s: float = 5.0, **kw
) -> TopologyStateTrigger:
    return TopologyStateTrigger(
        flowctl_conn_id="flowctl_test_db",
        topology_id=topology_id,
        wanted=wanted,
        what=f"waiting for {topology_id} {'/'.join(sorted(wanted))}",
        end_at=time.time() + within_s,
        poll_interval=0.05,
        **kw,
    )


def _collect(trigger: TopologyStateTrigger) -> list:
    async def run() -> list:
        return [event async for event in trigger.run()]

    return asyncio.run(run())


def test_serialize_round_trips_and_carries_no_url(plane: ControlPlane) -> None:
    trigger = _trigger(GREEN, {"READY"}, progress={"event_id": 1})
    path, kwargs = trigger.serialize()
    assert path == "flowctl_airflow.triggers.topology_state.TopologyStateTrigger"
    from airflow.sdk._shared.module_loading import import_string

    again = import_string(path)(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert kwargs["flowctl_conn_id"] == "flowctl_test_db"
    assert not any("://" in json.dumps(value) for value in kwargs.values())


def test_a_topology_that_registers_later_and_gets_ready_yields_one_reached_event(
    plane: ControlPlane,
) -> None:
    async def run() -> list:
        async def green_job() -> None:
            await asyncio.sleep(0.2)  # green's job registers after the trigger started
            plane.register_topology(GREEN, "wordcount", "green", 4)
            plane.set_state(GREEN, "READY")

        job = asyncio.create_task(green_job())
        trigger = _trigger(GREEN, {"READY"}, progress={"event_id": 7}, then="ready")
        events = [event async for event in trigger.run()]
        await job
        return events

    (event,) = asyncio.run(run())
    assert event.payload["status"] == "reached"
    assert (event.payload["topology_id"], event.payload["state"]) == (GREEN, "READY")
    # The task resumes from the event alone: it carries the next phase and the progress.
    assert (event.payload["then"], event.payload["progress"]) == ("ready", {"event_id": 7})
    entered = dt.datetime.fromisoformat(event.payload["updated_at"])
    assert entered == plane.get_topology(GREEN).updated_at


def test_no_state_change_until_end_at_yields_one_timeout_event(plane: ControlPlane) -> None:
    (event,) = _collect(_trigger(BLUE, {"DRAINED"}, within_s=0.3))
    assert (event.payload["status"], event.payload["topology_id"]) == ("timeout", BLUE)


def test_a_green_that_fails_yields_one_error_event(plane: ControlPlane) -> None:
    plane.register_topology(GREEN, "wordcount", "green", 4)
    plane.set_state(GREEN, "FAILED")
    (event,) = _collect(_trigger(GREEN, {"READY"}))
    assert event.payload["status"] == "error"
    assert f"{GREEN} ended FAILED" in event.payload["message"]


def test_a_green_active_without_ready_yields_one_error_event(plane: ControlPlane) -> None:
    plane.register_topology(GREEN, "wordcount", "green", 4)
    plane.set_state(GREEN, "ACTIVE")
    (event,) = _collect(_trigger(GREEN, {"READY"}))
    assert event.payload["status"] == "error"
    assert "went ACTIVE without waiting in READY" in event.payload["message"]


def test_an_unknown_connection_yields_one_error_event_naming_it() -> None:
    trigger = TopologyStateTrigger(
        flowctl_conn_id="no_such_flowctl_conn",
        topology_id=GREEN,
        wanted={"READY"},
        what="waiting for green READY",
        end_at=time.time() + 5,
    )
    (event,) = _collect(trigger)
    assert event.payload["status"] == "error"
    assert "no_such_flowctl_conn" in event.payload["message"]


def test_on_kill_while_blue_drains_reactivates_blue_and_stops_green(plane: ControlPlane) -> None:
    """A person marks the deferred replace task failed while blue drains: the trigger's
    on_kill rolls back as the operator's on_kill would."""
    events = ReplacementLog(plane.engine)
    event_id = events.record_replacement(
        "wordcount", BLUE, GREEN, 2, 4, "load",
        started_at=dt.datetime.now(dt.UTC), outcome="running",
    )  # fmt: skip
    plane.register_topology(GREEN, "wordcount", "green", 4)
    plane.set_state(GREEN, "READY")
    plane.send_signal(BLUE, "deactivate")
    progress = Progress(
        event_id=event_id, blue=BLUE, green=GREEN, green_run_id=f"replace__{GREEN}",
        stream_dag_id="stream_wordcount", target=4, ready_s=5, drain_s=5, stop_s=5,
        deactivated=True,
    )  # fmt: skip
    trigger = _trigger(BLUE, {"DRAINED"}, progress=progress.to_dict())
    asyncio.run(trigger.on_kill())
    assert [s.kind for s in plane.signals(BLUE)] == ["deactivate", "activate"]
    assert [s.kind for s in plane.signals(GREEN)] == ["stop"]
    event = events.get_replacement(event_id)
    assert event.outcome == "rolled_back" and "killed while waiting for" in event.error


def test_a_green_dead_in_the_overlap_is_rolled_back_and_marked_failed(
    plane: ControlPlane,
) -> None:
    """Green SIGKILLed while admitting from blue's frontier keeps its ACTIVE row (nobody
    records its end): the rollback re-activates blue and marks green FAILED, or the
    sensor and the next replacement would find two ACTIVE topologies."""
    events = ReplacementLog(plane.engine)
    event_id = events.record_replacement(
        "wordcount", BLUE, GREEN, 2, 4, "load",
        started_at=dt.datetime.now(dt.UTC), outcome="running",
    )  # fmt: skip
    plane.register_topology(GREEN, "wordcount", "green", 4)
    plane.set_state(GREEN, "ACTIVE")
    plane.set_state(BLUE, "DRAINED")
    stale = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=60)  # its driver is dead
    t = schema.topologies
    with plane.engine.begin() as conn:
        conn.execute(t.update().where(t.c.topology_id == GREEN).values(heartbeat_at=stale))
    progress = Progress(
        event_id=event_id, blue=BLUE, green=GREEN, green_run_id=f"replace__{GREEN}",
        stream_dag_id="stream_wordcount", target=4, ready_s=5, drain_s=5, stop_s=5,
        deactivated=True, green_active=True, overlap=True, handover_id=1,
    )  # fmt: skip
    outcome = roll_back(plane, events, progress, "green went silent", logging.getLogger(__name__))
    assert outcome == "rolled_back"
    assert [s.kind for s in plane.signals(BLUE)] == ["activate"]
    assert plane.get_topology(GREEN).state == "FAILED"
    # what the sensor counts: no dead ACTIVE row (blue turns ACTIVE once its job acts)
    assert plane.topologies("wordcount", states=["ACTIVE"]) == []


def test_an_event_is_held_until_not_before(plane: ControlPlane) -> None:
    """The stale SUCCESS of the deferring try must reach the scheduler before the task
    resumes (DEFER_SETTLE_S): a state reached at once is reported only at not_before."""
    plane.register_topology(GREEN, "wordcount", "green", 4)
    plane.set_state(GREEN, "READY")
    not_before = time.time() + 0.5
    (event,) = _collect(_trigger(GREEN, {"READY"}, not_before=not_before))
    assert event.payload["status"] == "reached"
    assert time.time() >= not_before
    _, kwargs = _trigger(GREEN, {"READY"}, not_before=not_before).serialize()
    assert kwargs["not_before"] == not_before
