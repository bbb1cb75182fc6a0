"""FailureWindowTrigger: serialize() round trip and one event per run, on a real database."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

import pytest

from flowctl.adapters.control_plane import ControlPlane
from flowctl.core.scaling_policy import WindowPolicy
from flowctl_airflow.triggers.failure_window import FailureWindowTrigger
from tests.unit.window_policies import PAPER

pytestmark = pytest.mark.integration

POLICY = PAPER


@pytest.fixture
def conn_of(monkeypatch: pytest.MonkeyPatch):
    """Name a database by an Airflow connection (the trigger carries its id, not the URL)."""

    def use(url: str, conn_id: str = "flowctl_test_db") -> str:
        conn = {"conn_type": "generic", "extra": {"sqlalchemy_url": url}}
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))
        return conn_id

    return use


def _collect(trigger: FailureWindowTrigger) -> list:
    async def run() -> list:
        return [event async for event in trigger.run()]

    return asyncio.run(run())


def _topology(url: str, failures: list[int], parallelism: int = 2) -> str:
    plane = ControlPlane(url)
    plane.ensure_schema()
    plane.register_topology("wc-blue-1", "wordcount", "blue", parallelism)
    plane.set_state("wc-blue-1", "ACTIVE")
    start = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for i, failed in enumerate(failures):
        plane.write_metrics_window(
            "wc-blue-1",
            start + dt.timedelta(seconds=10 * i),
            start + dt.timedelta(seconds=10 * (i + 1)),
            failed=failed,
        )
    return "wc-blue-1"


def test_serialize_round_trips_to_an_equal_trigger() -> None:
    trigger = FailureWindowTrigger(
        flowctl_conn_id="flowctl_db",
        pipeline="wordcount",
        policy=POLICY.to_dict(),
        topology_id="wc-blue-1",
        poke_interval=3.0,
        end_at=1234.5,
    )
    path, kwargs = trigger.serialize()
    assert path == "flowctl_airflow.triggers.failure_window.FailureWindowTrigger"
    from airflow.sdk._shared.module_loading import import_string

    again = import_string(path)(**kwargs)
    assert again.serialize() == (path, kwargs)
    assert WindowPolicy.from_dict(kwargs["policy"]) == POLICY
    # The kwargs land in the trigger table: a connection id, never a URL with a password.
    assert kwargs["flowctl_conn_id"] == "flowctl_db"
    assert not any("://" in str(value) for value in kwargs.values())


def test_a_spike_yields_exactly_one_decision_event(database_url: str, conn_of) -> None:
    tid = _topology(database_url, [0, 0, 0, 9])
    trigger = FailureWindowTrigger(
        flowctl_conn_id=conn_of(database_url),
        pipeline="wordcount",
        policy=POLICY.to_dict(),
        poke_interval=0.1,
    )
    (event,) = _collect(trigger)
    assert event.payload["status"] == "decision"
    assert event.payload["topology_id"] == tid
    decision = event.payload["decision"]
    assert (decision["direction"], decision["old_parallelism"], decision["new_parallelism"]) == (
        "up",
        2,
        4,
    )


def test_no_decision_until_end_at_yields_one_timeout_event(sqlite_url: str, conn_of) -> None:
    _topology(sqlite_url, [1, 1, 1, 1])
    trigger = FailureWindowTrigger(
        flowctl_conn_id=conn_of(sqlite_url),
        pipeline="wordcount",
        policy=POLICY.to_dict(),
        poke_interval=0.05,
        end_at=time.time() + 0.2,
    )
    (event,) = _collect(trigger)
    assert event.payload["status"] == "timeout"
    assert "stable" in event.payload["reason"]


def test_a_bad_policy_yields_one_error_event_naming_the_key(sqlite_url: str, conn_of) -> None:
    trigger = FailureWindowTrigger(
        flowctl_conn_id=conn_of(sqlite_url),
        pipeline="wordcount",
        policy={**POLICY.to_dict(), "policy": "magic"},
    )
    (event,) = _collect(trigger)
    assert event.payload["status"] == "error"
    assert "policy='magic'" in event.payload["message"]
    assert "paper, adaptive" in event.payload["message"]


def test_the_schema_is_ensured_once_per_run_not_per_look(
    sqlite_url: str, conn_of, monkeypatch: pytest.MonkeyPatch
) -> None:
    _topology(sqlite_url, [1, 1, 1, 1])
    ensured: list[str] = []
    real = ControlPlane.ensure_schema

    def counting(self: ControlPlane) -> None:
        ensured.append("ensure_schema")
        real(self)

    monkeypatch.setattr(ControlPlane, "ensure_schema", counting)
    looks: list[str] = []
    from flowctl_airflow.triggers import failure_window

    real_evaluate = failure_window.evaluate

    def counting_evaluate(*args, **kwargs):
        looks.append("look")
        if len(looks) == 3:  # three looks, then time is up (however slow the machine)
            trigger.end_at = time.time()
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(failure_window, "evaluate", counting_evaluate)
    trigger = FailureWindowTrigger(
        flowctl_conn_id=conn_of(sqlite_url),
        pipeline="wordcount",
        policy=POLICY.to_dict(),
        poke_interval=0.02,
        end_at=time.time() + 600,
    )
    (event,) = _collect(trigger)
    assert event.payload["status"] == "timeout"
    assert len(looks) > 1 and ensured == ["ensure_schema"]


def test_an_unknown_connection_yields_one_error_event_naming_it() -> None:
    trigger = FailureWindowTrigger(
        flowctl_conn_id="no_such_flowctl_conn", pipeline="wordcount", policy=POLICY.to_dict()
    )
    (event,) = _collect(trigger)
    assert event.payload["status"] == "error"
    assert "no_such_flowctl_conn" in event.payload["message"]
