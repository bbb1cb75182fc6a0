"""The control plane on real SQLite and PostgreSQL: round trips and refused bad values."""

from __future__ import annotations

import datetime as dt

import pytest
import sqlalchemy as sa

from flowctl.adapters import schema, schema_setup
from flowctl.adapters.control_plane import AdmissionConflict, ControlPlane, UnknownTopology
from flowctl.adapters.db import DatabaseUnavailable, in_transaction

pytestmark = [pytest.mark.integration, pytest.mark.postgres]


@pytest.fixture
def plane(database_url: str) -> ControlPlane:
    cp = ControlPlane(database_url)
    cp.ensure_schema()
    return cp


def test_ensure_schema_is_idempotent_and_records_the_version(plane: ControlPlane) -> None:
    plane.ensure_schema()
    with plane.engine.connect() as conn:
        versions = conn.execute(sa.select(schema.schema_version.c.version)).scalars().all()
    assert versions == [schema.SCHEMA_VERSION]


def test_a_newer_schema_version_is_refused(plane: ControlPlane) -> None:
    with plane.engine.begin() as conn:
        conn.execute(schema.schema_version.update().values(version=schema.SCHEMA_VERSION + 1))
    version = schema.SCHEMA_VERSION
    with pytest.raises(
        schema_setup.SchemaVersionError,
        match=rf"schema version \[{version + 1}\].*knows version {version}",
    ):
        plane.ensure_schema()


def test_topology_lifecycle_round_trip(plane: ControlPlane) -> None:
    blue = plane.register_topology("wc-blue", "wordcount", "blue", 2, airflow_run_id="run-1")
    assert (blue.state, blue.generation, blue.parallelism, blue.airflow_run_id) == (
        "STARTING",
        1,
        2,
        "run-1",
    )
    assert blue.created_at.tzinfo is not None
    green = plane.register_topology("wc-green", "wordcount", "green", 4)
    assert green.generation == 2
    plane.register_topology("other-blue", "other", "blue", 1)

    plane.set_state("wc-blue", "ACTIVE")
    plane.set_spark_app_id("wc-blue", "local-123")
    before = plane.get_topology("wc-blue").heartbeat_at
    plane.heartbeat("wc-blue")
    after = plane.get_topology("wc-blue")
    assert after.heartbeat_at >= before
    assert (after.state, after.spark_app_id) == ("ACTIVE", "local-123")

    assert [t.topology_id for t in plane.topologies("wordcount")] == ["wc-blue", "wc-green"]
    active = plane.topologies("wordcount", states=["ACTIVE", "READY"])
    assert [t.topology_id for t in active] == ["wc-blue"]

    plane.set_state("wc-blue", "DRAINING")
    plane.set_state("wc-blue", "STOPPED")
    plane.set_state("wc-blue", "STOPPED")  # idempotent
    with pytest.raises(ValueError, match=r"'wc-blue' is STOPPED; state='ACTIVE' is not allowed"):
        plane.set_state("wc-blue", "ACTIVE")


def test_explicit_generation_and_duplicate_ids(plane: ControlPlane) -> None:
    assert plane.register_topology("a", "p", "blue", 1, generation=7).generation == 7
    assert plane.register_topology("b", "p", "green", 1).generation == 8
    with pytest.raises(ValueError, match=r"topology_id='a' is already registered"):
        plane.register_topology("a", "p", "blue", 1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"parallelism": 0}, r"parallelism=0 must be an integer >= 1"),
        ({"parallelism": "2"}, r"parallelism='2' must be an integer >= 1"),
        ({"topology_id": ""}, r"topology_id='' must be a non-empty string"),
        ({"colour": " "}, r"colour=' ' must be a non-empty string"),
        ({"generation": -1}, r"generation=-1 must be an integer >= 0"),
    ],
)
def test_register_rejects_bad_values(plane: ControlPlane, kwargs: dict, message: str) -> None:
    args = {"topology_id": "t", "pipeline": "p", "colour": "blue", "parallelism": 1, **kwargs}
    generation = args.pop("generation", None)
    with pytest.raises(ValueError, match=message):
        plane.register_topology(**args, generation=generation)
    assert plane.topologies("p") == []


def test_unknown_state_and_topology_are_refused(plane: ControlPlane) -> None:
    plane.register_topology("t", "p", "blue", 1)
    with pytest.raises(ValueError, match=r"state='RUNNING' is not one of STARTING"):
        plane.set_state("t", "RUNNING")
    with pytest.raises(ValueError, match=r"state='running' is not one of"):
        plane.topologies("p", states=["running"])
    with pytest.raises(UnknownTopology, match=r"topology_id='nope'"):
        plane.set_state("nope", "ACTIVE")
    with pytest.raises(UnknownTopology, match=r"topology_id='nope'"):
        plane.heartbeat("nope")
    with pytest.raises(UnknownTopology, match=r"topology_id='nope'"):
        plane.get_topology("nope")
    assert plane.get_topology("t").state == "STARTING"


def test_signals_round_trip(plane: ControlPlane) -> None:
    plane.register_topology("t", "p", "blue", 1)
    first = plane.send_signal("t", "drain")
    second = plane.send_signal("t", "stop")
    assert [(s.id, s.kind) for s in plane.pending_signals("t")] == [
        (first, "drain"),
        (second, "stop"),
    ]
    plane.mark_signal_handled(second)
    plane.mark_signal_handled(second)  # idempotent
    assert [s.id for s in plane.pending_signals("t")] == [first]
    handled = next(s for s in plane.signals("t") if s.id == second)
    assert handled.handled_at is not None and handled.handled_at >= handled.created_at


def test_bad_signals_are_refused(plane: ControlPlane) -> None:
    plane.register_topology("t", "p", "blue", 1)
    with pytest.raises(
        ValueError, match=r"kind='kill' is not one of activate, deactivate, drain, stop"
    ):
        plane.send_signal("t", "kill")
    with pytest.raises(UnknownTopology, match=r"topology_id='ghost'"):
        plane.send_signal("ghost", "stop")
    with pytest.raises(ValueError, match=r"signal_id=999 does not exist"):
        plane.mark_signal_handled(999)
    assert plane.signals("t") == []


def test_committed_offsets_are_empty_before_any_batch(plane: ControlPlane) -> None:
    assert plane.committed_offsets("wordcount", "wordcount.eden") == {}


def test_metrics_windows_round_trip(plane: ControlPlane) -> None:
    t0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
    for i in range(3):
        plane.write_metrics_window(
            "t",
            t0 + dt.timedelta(seconds=10 * i),
            t0 + dt.timedelta(seconds=10 * (i + 1)),
            admitted=100 + i,
            acked=90,
            failed=i,
            records=1000,
            records_per_s=100.5,
            latency_p50_ms=12.5,
            latency_p99_ms=80.0,
            backlog=5,
            backpressure_level=0.5,
            lanes=[{"lane": 0, "window": 4}],
        )
    windows = plane.metrics_windows("t")
    assert [w.failed for w in windows] == [0, 1, 2]
    assert windows[0].window_start == t0
    assert windows[0].lanes == [{"lane": 0, "window": 4}]
    assert (windows[2].admitted, windows[2].latency_p99_ms) == (102, 80.0)
    assert [w.failed for w in plane.metrics_windows("t", limit=2)] == [1, 2]
    since = plane.metrics_windows("t", since=t0 + dt.timedelta(seconds=25))
    assert [w.failed for w in since] == [2]
    assert plane.metrics_windows("other") == []


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"failed": -1}, r"failed=-1 must be an integer >= 0"),
        ({"records_per_s": -0.5}, r"records_per_s=-0.5 must be a number >= 0"),
        ({"window_start": dt.datetime(2026, 1, 1)}, r"window_start=.* must be a timezone-aware"),
    ],
)
def test_metrics_windows_reject_bad_values(plane: ControlPlane, kwargs: dict, message: str) -> None:
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    args = {"window_start": t0, "window_end": t0, **kwargs}
    with pytest.raises(ValueError, match=message):
        plane.write_metrics_window("t", **args)
    assert plane.metrics_windows("t") == []


def test_operational_errors_are_retried_then_reported(plane: ControlPlane) -> None:
    calls = []

    def flaky(conn: sa.Connection) -> int:
        calls.append(1)
        if len(calls) < 3:
            raise sa.exc.OperationalError("SELECT 1", {}, Exception("database is locked"))
        return 42

    assert in_transaction(plane.engine, flaky, what="flaky work") == 42
    assert len(calls) == 3

    def broken(conn: sa.Connection) -> None:
        raise sa.exc.OperationalError("SELECT 1", {}, Exception("server closed the connection"))

    with pytest.raises(DatabaseUnavailable, match=r"broken work: gave up after 2 attempt"):
        in_transaction(plane.engine, broken, what="broken work", attempts=2)


# -- one admitting topology per pipeline --------------------------------------------------------


def _active(plane: ControlPlane, topology_id: str, pipeline: str = "wordcount") -> None:
    plane.register_topology(topology_id, pipeline, "blue", 2)
    plane.set_state(topology_id, "ACTIVE")


def test_a_second_topology_is_refused_while_one_is_active(plane: ControlPlane) -> None:
    _active(plane, "wc-blue-1")
    with pytest.raises(AdmissionConflict) as info:
        plane.register_topology("wc-blue-2", "wordcount", "blue", 4, wait_s=0)
    message = str(info.value)
    assert "topology_id='wc-blue-2' refused" in message and "'wc-blue-1'" in message, message
    assert [t.topology_id for t in plane.topologies("wordcount")] == ["wc-blue-1"]
    plane.register_topology("other-blue-1", "other", "blue", 1, wait_s=0)  # another pipeline
    plane.set_state("wc-blue-1", "DRAINED")
    assert plane.register_topology("wc-blue-2", "wordcount", "blue", 4, wait_s=0).state == (
        "STARTING"
    )


def test_the_green_of_a_running_replacement_registers(plane: ControlPlane) -> None:
    from flowctl.adapters.replacements import ReplacementLog

    _active(plane, "wc-blue-1")
    events = ReplacementLog(plane.engine)
    event = events.record_replacement(
        "wordcount", "wc-blue-1", "wc-green-p4", 2, 4, "load", outcome="running",
        started_at=dt.datetime.now(dt.UTC),
    )  # fmt: skip
    with pytest.raises(AdmissionConflict):  # not the event's green
        plane.register_topology("wc-green-other", "wordcount", "green", 4, wait_s=0)
    # Asked before a job starts (the stream operator): the same answer, nothing registered.
    assert "already has the ACTIVE topology 'wc-blue-1'" in (
        plane.admission_conflict("wordcount", "wc-green-other") or ""
    )
    assert plane.admission_conflict("wordcount", "wc-green-p4") is None
    assert plane.admission_conflict("other", "other-blue-1") is None
    assert plane.register_topology("wc-green-p4", "wordcount", "green", 4, wait_s=0)
    events.update_replacement(event, outcome="ok", finished_at=dt.datetime.now(dt.UTC))
    with pytest.raises(AdmissionConflict):  # the replacement is over: no more greens
        plane.register_topology("wc-green-late", "wordcount", "green", 4, wait_s=0)


def test_a_warm_standby_registers_beside_the_active_topology_and_takes_lanes_later(
    plane: ControlPlane,
) -> None:
    _active(plane, "wc-blue-1")
    spare = plane.register_topology("wc-standby", "wordcount", "green", 2, wait_s=0,
                                    warm_standby=True)  # fmt: skip
    assert spare.state == "STARTING" and spare.parallelism == 2
    plane.set_parallelism("wc-standby", 8)
    assert plane.get_topology("wc-standby").parallelism == 8
    with pytest.raises(ValueError, match="parallelism=0"):
        plane.set_parallelism("wc-standby", 0)
    with pytest.raises(UnknownTopology):
        plane.set_parallelism("nobody", 2)


def test_a_dead_active_topology_does_not_block_a_restart(plane: ControlPlane) -> None:
    _active(plane, "wc-blue-1")
    t = schema.topologies
    with plane.engine.begin() as conn:  # its driver was SIGKILLed a minute ago
        conn.execute(
            t.update()
            .where(t.c.topology_id == "wc-blue-1")
            .values(heartbeat_at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
        )
    assert plane.register_topology("wc-blue-2", "wordcount", "blue", 2, wait_s=0)


def test_registration_waits_for_a_silent_heartbeat_to_go_stale(plane: ControlPlane) -> None:
    _active(plane, "wc-blue-1")  # registered just now, never beats again (killed)
    assert plane.register_topology("wc-blue-2", "wordcount", "blue", 2).state == "STARTING"
    assert plane.get_topology("wc-blue-1").state == "ACTIVE"


def test_live_topologies_are_the_beating_ones_of_every_pipeline(plane: ControlPlane) -> None:
    _active(plane, "wc-blue-1")
    plane.register_topology("logs-blue-1", "logetl", "blue", 2)
    plane.heartbeat("logs-blue-1")  # STARTING and beating
    plane.register_topology("clicks-blue-1", "clickstream", "blue", 2)
    plane.heartbeat("clicks-blue-1")
    plane.set_state("clicks-blue-1", "STOPPED")
    t = schema.topologies
    with plane.engine.begin() as conn:  # wc's driver was SIGKILLed a minute ago
        conn.execute(
            t.update()
            .where(t.c.topology_id == "wc-blue-1")
            .values(heartbeat_at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1))
        )
    assert [x.topology_id for x in plane.live_topologies()] == ["logs-blue-1"]
