"""Replacement events on real SQLite and PostgreSQL: round trips, step updates, refusals."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.replacements import ReplacementLog, UnknownReplacement
from flowctl.core.scaling import paper_decision

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

T0 = dt.datetime(2026, 1, 5, 12, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


@pytest.fixture
def log(database_url: str) -> ReplacementLog:
    events = ReplacementLog(database_url)
    events.ensure_schema()
    return events


def test_a_finished_replacement_round_trips_with_its_decision(log: ReplacementLog) -> None:
    decision = paper_decision([0, 0, 1, 9], parallelism=2, threshold_c=1.0)
    assert decision.direction == "up"
    event_id = log.record_replacement(
        "wordcount",
        "wc-blue-1",
        "wc-green-2",
        2,
        4,
        decision.reason,
        decision=decision,
        started_at=at(0),
        ready_at=at(6.5),
        deactivated_at=at(6.6),
        drained_at=at(9),
        finished_at=at(9.25),
        pause_ms=120.5,
        duplicates=3,
        outcome="ok",
    )
    [event] = log.replacements("wordcount")
    assert event.id == event_id
    assert (event.old_topology_id, event.new_topology_id) == ("wc-blue-1", "wc-green-2")
    assert (event.old_parallelism, event.new_parallelism) == (2, 4)
    assert event.decision == decision.to_dict()
    assert (event.ready_at, event.finished_at) == (at(6.5), at(9.25))
    assert event.started_at.tzinfo is not None
    assert (event.pause_ms, event.duplicates, event.outcome, event.error) == (120.5, 3, "ok", None)
    assert event.duration_s == 9.25
    data = event.to_dict()
    assert data["started_at"] == "2026-01-05T12:00:00+00:00"
    assert data["duration_s"] == 9.25


def test_replacements_are_per_pipeline_in_start_order_and_limit_keeps_the_latest(
    log: ReplacementLog,
) -> None:
    for i, start in enumerate([30, 10, 20]):
        log.record_replacement(
            "wordcount",
            f"old-{i}",
            f"new-{i}",
            1,
            2,
            "load",
            started_at=at(start),
            finished_at=at(start + 5),
            outcome="ok",
        )
    log.record_replacement(
        "other", "o", "n", 4, 2, "idle", started_at=at(0), finished_at=at(1), outcome="ok"
    )
    assert [e.old_topology_id for e in log.replacements("wordcount")] == ["old-1", "old-2", "old-0"]
    assert [e.old_topology_id for e in log.replacements("wordcount", limit=2)] == [
        "old-2",
        "old-0",
    ]
    assert [e.old_topology_id for e in log.replacements("wordcount", since=at(20))] == [
        "old-2",
        "old-0",
    ]
    assert log.replacements("nothing") == []


def test_a_running_replacement_is_completed_step_by_step_then_frozen(
    log: ReplacementLog,
) -> None:
    event_id = log.record_replacement(
        "wordcount", "wc-blue-1", None, 4, 2, "lanes idle", started_at=at(0), outcome="running"
    )
    log.update_replacement(event_id, new_topology_id="wc-green-2", ready_at=at(5))
    log.update_replacement(event_id, deactivated_at=at(5.1), drained_at=at(8))
    event = log.update_replacement(
        event_id, finished_at=at(8.5), pause_ms=0.0, duplicates=0, outcome="ok"
    )
    assert (event.new_topology_id, event.outcome, event.pause_ms) == ("wc-green-2", "ok", 0.0)
    assert event.drained_at == at(8)
    with pytest.raises(ValueError, match=r"already 'ok'; a finished replacement is not changed"):
        log.update_replacement(event_id, duplicates=5)


def test_a_rolled_back_replacement_keeps_its_error(log: ReplacementLog) -> None:
    event_id = log.record_replacement(
        "wordcount", "b", "g", 2, 4, "load", started_at=at(0), outcome="running"
    )
    with pytest.raises(ValueError, match=r"outcome='rolled_back' needs an error message"):
        log.update_replacement(event_id, finished_at=at(30), outcome="rolled_back")
    event = log.update_replacement(
        event_id, finished_at=at(30), outcome="rolled_back", error="green not ready in 30 s"
    )
    assert (event.outcome, event.error) == ("rolled_back", "green not ready in 30 s")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"old_parallelism": 0}, r"old_parallelism=0 must be an integer >= 1"),
        ({"new_parallelism": True}, r"new_parallelism=True must be an integer >= 1"),
        ({"pipeline": " "}, r"pipeline=' ' must be a non-empty string"),
        ({"outcome": "done"}, r"outcome='done' is not one of running, ok, rolled_back, failed"),
        ({"pause_ms": -1.0}, r"pause_ms=-1.0 must be a finite number >= 0"),
        ({"pause_ms": float("nan")}, r"pause_ms=nan must be a finite number >= 0"),
        ({"duplicates": -2}, r"duplicates=-2 must be an integer >= 0"),
        ({"started_at": dt.datetime(2026, 1, 1)}, r"started_at=.* must be a timezone-aware"),
        ({"ready_at": at(-1)}, r"ready_at=2026-01-05T11:59:59\+00:00 is before started_at"),
        ({"outcome": "ok", "finished_at": None}, r"outcome='ok' is final and needs finished_at"),
        ({"error": "boom"}, r"outcome='ok' cannot carry error='boom'"),
        ({"outcome": "failed"}, r"outcome='failed' needs an error message, got error=None"),
        ({"decision": ["up"]}, r"decision=\['up'\] must be a mapping"),
        ({"decision": {"x": {1, 2}}}, r"decision=.* is not JSON-serialisable"),
    ],
)
def test_bad_values_are_refused_naming_the_field(
    log: ReplacementLog, kwargs: dict[str, object], message: str
) -> None:
    args: dict[str, object] = {
        "pipeline": "wordcount",
        "old_topology_id": "b",
        "new_topology_id": "g",
        "old_parallelism": 2,
        "new_parallelism": 4,
        "reason": "load",
        "started_at": at(0),
        "finished_at": at(10),
        "outcome": "ok",
        **kwargs,
    }
    with pytest.raises(ValueError, match=message):
        log.record_replacement(**args)  # type: ignore[arg-type]
    assert log.replacements("wordcount") == []


def test_update_refuses_unknown_fields_and_unknown_events(log: ReplacementLog) -> None:
    with pytest.raises(ValueError, match=r"field\(s\) \['pipeline'\] cannot be changed"):
        log.update_replacement(1, pipeline="x")
    with pytest.raises(UnknownReplacement, match=r"event_id=99 does not exist"):
        log.update_replacement(99, ready_at=at(1))
    with pytest.raises(UnknownReplacement, match=r"event_id=42 does not exist"):
        log.get_replacement(42)


def test_the_table_joins_an_existing_version_1_database(database_url: str) -> None:
    """A control database created before the table existed gains it without a version bump."""
    plane = ControlPlane(database_url)
    engine = plane.engine
    tables = [t for t in schema.metadata.sorted_tables if t.name != "replacement_events"]
    schema.metadata.create_all(engine, tables=tables)
    with engine.begin() as conn:
        conn.execute(
            schema.schema_version.insert().values(
                id=1, version=schema.SCHEMA_VERSION, updated_at=schema.utcnow()
            )
        )
    assert "replacement_events" not in sa.inspect(engine).get_table_names()
    log = ReplacementLog(database_url)
    log.ensure_schema()
    assert "replacement_events" in sa.inspect(engine).get_table_names()
    assert log.replacements("wordcount") == []
