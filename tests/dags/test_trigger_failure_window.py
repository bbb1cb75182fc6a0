"""FailureWindowTrigger: serialize() round trip and one event per run, on a real database."""

from __future__ import annotations

import asyncio
import datetime as dt
import time

import pytest

from flowctl.adapters.control_plane import ControlPlane
from flowctl_airflow.triggers.failure_window import FailureWindowTrigger, WindowPolicy

pytestmark = pytest.mark.integration

POLICY = WindowPolicy(
    policy="paper",
    history_windows=4,
    threshold_c=1.0,
    cooldown_s=60.0,
    min_parallelism=1,
    max_parallelism=16,
)


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
        database_url="sqlite:///x.db",
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


def test_a_spike_yields_exactly_one_decision_event(database_url: str) -> None:
    tid = _topology(database_url, [0, 0, 0, 9])
    trigger = FailureWindowTrigger(
        database_url=database_url, pipeline="wordcount", policy=POLICY.to_dict(), poke_interval=0.1
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


def test_no_decision_until_end_at_yields_one_timeout_event(sqlite_url: str) -> None:
    _topology(sqlite_url, [1, 1, 1, 1])
    trigger = FailureWindowTrigger(
        database_url=sqlite_url,
        pipeline="wordcount",
        policy=POLICY.to_dict(),
        poke_interval=0.05,
        end_at=time.time() + 0.2,
    )
    (event,) = _collect(trigger)
    assert event.payload["status"] == "timeout"
    assert "stable" in event.payload["reason"]


def test_a_bad_policy_yields_one_error_event_naming_the_key(sqlite_url: str) -> None:
    trigger = FailureWindowTrigger(
        database_url=sqlite_url,
        pipeline="wordcount",
        policy={**POLICY.to_dict(), "policy": "magic"},
    )
    (event,) = _collect(trigger)
    assert event.payload["status"] == "error"
    assert "policy='magic'" in event.payload["message"]
    assert "paper, adaptive" in event.payload["message"]
