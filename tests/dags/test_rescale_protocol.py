"""The replace operator drives the signals-and-states protocol: success, drain timeout,
a failing green, and a kill mid-way, through the real rescale DAG and control plane.

The stream job's side of docs/flow-control.md ("Signals and states") is played here by
:class:`JobSide`, a thread answering control signals through the real control plane, so
that timeouts and failures the real job produces only rarely are produced on demand. The
same protocol with real Spark topologies is tests/e2e/test_rescale_e2e.py.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from flowctl.adapters.control_plane import ControlPlane, UnknownTopology
from flowctl.adapters.replacements import ReplacementLog
from flowctl.pipelines.config import load_pipeline_config
from tests.dags.conftest import ACTIVE_BLUE

pytestmark = [pytest.mark.airflow, pytest.mark.integration]

BLUE = ACTIVE_BLUE


@pytest.fixture(autouse=True)
def _fail_green_runs_left_queued() -> Iterator[None]:
    """A green's DAG run that no scheduler ran stays queued: mark it failed afterwards.

    Otherwise a later test that does run queued stream runs would start these greens.
    """
    yield
    import sqlalchemy as sa
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    with create_session() as session:
        session.execute(
            sa.update(DagRun)
            .where(DagRun.dag_id == "stream_wordcount", DagRun.state == DagRunState.QUEUED)
            .values(state=DagRunState.FAILED)
        )


class JobSide(threading.Thread):
    """Answers signals like the stream job: registers green READY, moves states on signals.

    :param drains: a deactivated topology reaches DRAINED (else it stays DRAINING).
    :param green_fails: green reports FAILED instead of READY.
    :param kill_on_deactivate: send SIGTERM to this process once blue is deactivated (the
        task runner's handler then calls the running task's ``on_kill``).
    """

    def __init__(
        self, url: str, *, drains: bool = True, green_fails: bool = False,
        kill_on_deactivate: bool = False,
    ) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.plane = ControlPlane(url)
        self.events = ReplacementLog(url)
        self.drains = drains
        self.green_fails = green_fails
        self.kill_on_deactivate = kill_on_deactivate
        self.done = threading.Event()
        self.green: str | None = None
        self.spares: list[str] = []  # warm standbys that only beat

    def run(self) -> None:
        while not self.done.is_set():
            self._register_green()
            for topology_id in self.spares:
                self._beat(topology_id)
            for topology_id in (BLUE, self.green):
                if topology_id is not None:
                    self._answer(topology_id)
                    self._beat(topology_id)
            time.sleep(0.05)

    def _register_green(self) -> None:
        if self.green is not None:
            return
        running = [e for e in self.events.replacements("wordcount") if e.outcome == "running"]
        if not running:
            return
        event = running[-1]
        self.plane.register_topology(
            event.new_topology_id, "wordcount", "green", event.new_parallelism
        )
        self.plane.set_state(event.new_topology_id, "FAILED" if self.green_fails else "READY")
        self.green = event.new_topology_id

    def _beat(self, topology_id: str) -> None:
        """The jobs' heartbeat, while they run (the overlap checks green is alive)."""
        try:
            if self.plane.get_topology(topology_id).state not in ("STOPPED", "FAILED"):
                self.plane.heartbeat(topology_id)
        except UnknownTopology:
            pass

    def _answer(self, topology_id: str) -> None:
        try:
            pending = self.plane.pending_signals(topology_id)
        except UnknownTopology:
            return
        for sig in pending:
            state = self.plane.get_topology(topology_id).state
            if state not in ("STOPPED", "FAILED"):
                if sig.kind == "deactivate":
                    self.plane.set_state(topology_id, "DRAINING")
                    if self.drains:
                        self.plane.set_state(topology_id, "DRAINED")
                elif sig.kind == "activate":
                    self.plane.set_state(topology_id, "ACTIVE")
                elif sig.kind == "stop":
                    self.plane.set_state(topology_id, "STOPPED")
            self.plane.mark_signal_handled(sig.id)
            if sig.kind == "deactivate" and self.kill_on_deactivate:
                os.kill(os.getpid(), signal.SIGTERM)


@pytest.fixture
def job_side(flowctl_db: str, request: pytest.FixtureRequest) -> Iterator[JobSide]:
    side = JobSide(flowctl_db, **getattr(request, "param", {}))
    side.start()
    yield side
    side.done.set()
    side.join(timeout=5)


def _rescale(conf: dict, *, deferrable: bool = False, defer_after_s: float = 0.0, **scaling: float):
    from flowctl_airflow.dag_factory import rescale_dag

    config = load_pipeline_config("wordcount")
    short = dataclasses.replace(
        config.scaling, **{"ready_timeout_s": 10.0, "drain_timeout_s": 10.0,
                           "stop_timeout_s": 5.0, "handover": "sequential", **scaling},
    )  # fmt: skip
    dag = rescale_dag(dataclasses.replace(config, scaling=short))
    replace = dag.get_task("replace")
    replace.poll_interval_s = 0.1
    replace.deferrable = deferrable
    replace.defer_after_s = defer_after_s  # 0: every wait deferred, the trigger's path tested
    replace.defer_settle_s = 0.2
    return dag.test(run_conf=conf)


def _kinds(plane: ControlPlane, topology_id: str) -> list[str]:
    return [s.kind for s in plane.signals(topology_id)]


def _xcom(run, key: str = "return_value"):
    """The replace task's XCom ``key``; ``return_value`` is the replacement event (with
    ``next_standby``), ``trigger_run_id`` the last stream run it created."""
    import sqlalchemy as sa
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        value = session.scalars(
            sa.select(XComModel.value).where(
                XComModel.dag_id == run.dag_id,
                XComModel.run_id == run.run_id,
                XComModel.task_id == "replace",
                XComModel.key == key,
            )
        ).one()
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _stream_runs(prefix: str) -> dict[str, dict]:
    """``stream_wordcount``'s runs whose id starts with ``prefix``: run id -> conf."""
    import sqlalchemy as sa
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        runs = session.scalars(
            sa.select(DagRun).where(
                DagRun.dag_id == "stream_wordcount", DagRun.run_id.startswith(prefix)
            )
        ).all()
        return {r.run_id: dict(r.conf or {}) for r in runs}


def test_a_replacement_runs_every_step_in_order(flowctl_db: str, job_side: JobSide) -> None:
    run = _rescale({"change": 8, "reason": "more lanes"})
    assert str(run.state).endswith("success")
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "ok" and event.error is None
    assert event.started_at <= event.ready_at <= event.deactivated_at
    assert event.deactivated_at <= event.drained_at <= event.finished_at
    assert event.pause_ms is not None and event.pause_ms >= 0 and event.duplicates == 0
    plane = ControlPlane(flowctl_db)
    green = plane.get_topology(job_side.green)
    assert (green.state, green.parallelism, green.colour) == ("ACTIVE", 8, "green")
    assert plane.get_topology(BLUE).state == "STOPPED"
    assert _kinds(plane, BLUE) == ["deactivate", "stop"]
    assert _kinds(plane, job_side.green) == ["activate"]
    assert [t.topology_id for t in plane.topologies("wordcount", states=["ACTIVE"])] == [
        job_side.green
    ]


def test_an_overlapped_replacement_activates_green_with_the_deactivate(
    flowctl_db: str, job_side: JobSide
) -> None:
    from flowctl.adapters.handovers import HandoverLog

    run = _rescale({"change": 8, "reason": "more lanes"}, handover="overlap")
    assert str(run.state).endswith("success")
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "ok" and event.deactivated_at <= event.drained_at
    plane = ControlPlane(flowctl_db)
    assert _kinds(plane, BLUE) == ["deactivate", "stop"]
    assert _kinds(plane, job_side.green) == ["activate"]
    handover = HandoverLog(flowctl_db).for_green(job_side.green)
    assert handover is not None and (handover.event_id, handover.blue) == (event.id, BLUE)
    assert [t.topology_id for t in plane.topologies("wordcount", states=["ACTIVE"])] == [
        job_side.green
    ]


@pytest.mark.parametrize(
    ("handover", "deferrable"), [("overlap", False), ("sequential", False), ("overlap", True)]
)
def test_a_warm_standby_is_taken_as_green_with_the_new_parallelism(
    flowctl_db: str, job_side: JobSide, handover: str, deferrable: bool
) -> None:
    plane = ControlPlane(flowctl_db)
    standby = "wordcount-green-standby"
    plane.register_topology(standby, "wordcount", "green", 2, warm_standby=True)
    plane.set_state(standby, "READY")
    job_side.green = standby  # the job side answers its signals; nothing new registers
    run = _rescale({"change": 8, "reason": "more lanes"}, handover=handover, deferrable=deferrable)
    assert str(run.state).endswith("success")
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert (event.outcome, event.new_topology_id, event.new_parallelism) == ("ok", standby, 8)
    green = plane.get_topology(standby)
    assert (green.state, green.parallelism) == ("ACTIVE", 8)
    assert _kinds(plane, standby) == ["activate"]
    assert [t.topology_id for t in plane.topologies("wordcount")] == [BLUE, standby]
    # the standby was used up: the next one is a new stream run, created like green's
    result = _xcom(run)
    assert (result["outcome"], result["id"]) == ("ok", event.id)
    spare = result["next_standby"]
    assert spare and spare.startswith("wordcount-blue-standby-"), result
    runs = _stream_runs(f"next_standby__{event.id}__{spare}")
    assert list(runs.values()) == [
        {"parallelism": 2, "colour": "blue", "standby": True, "replaces": None,
         "topology_id": spare}
    ]  # fmt: skip


@pytest.mark.parametrize("why", ["the form turns it off", "a spare is there already"])
def test_no_next_standby_when(flowctl_db: str, job_side: JobSide, why: str) -> None:
    plane = ControlPlane(flowctl_db)
    standby, spare = "wordcount-green-standby", "wordcount-blue-spare"
    if why == "a spare is there already":  # started by hand while the replacement ran
        plane.register_topology(spare, "wordcount", "blue", 1, warm_standby=True)
        job_side.spares.append(spare)
    plane.register_topology(standby, "wordcount", "green", 1, warm_standby=True)
    plane.set_state(standby, "READY")  # the newest READY one is the one taken
    job_side.green = standby
    before = _stream_runs("next_standby__")
    conf = {"change": 8, "reason": "r"}
    if why == "the form turns it off":
        conf["start_next_standby"] = False
    run = _rescale(conf)
    assert str(run.state).endswith("success")
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert (event.outcome, event.new_topology_id) == ("ok", standby)
    assert _xcom(run)["next_standby"] is None
    assert _stream_runs("next_standby__") == before


def test_a_standby_some_replacement_already_named_is_not_taken(
    flowctl_db: str, job_side: JobSide
) -> None:
    plane = ControlPlane(flowctl_db)
    old = "wordcount-green-old"
    plane.register_topology(old, "wordcount", "green", 2, warm_standby=True)
    plane.set_state(old, "READY")
    ReplacementLog(flowctl_db).record_replacement(
        "wordcount", BLUE, old, 2, 4, "earlier", outcome="failed", error="it failed",
        started_at=dt.datetime.now(dt.UTC), finished_at=dt.datetime.now(dt.UTC),
    )  # fmt: skip
    run = _rescale({"change": 8, "reason": "more lanes"})
    assert str(run.state).endswith("success")
    event = ReplacementLog(flowctl_db).replacements("wordcount")[-1]
    assert event.new_topology_id not in (old, BLUE) and event.new_topology_id == job_side.green


@pytest.mark.parametrize("job_side", [{"drains": False}], indirect=True)
def test_a_blue_that_does_not_drain_is_stopped_and_green_takes_over(
    flowctl_db: str, job_side: JobSide
) -> None:
    run = _rescale({"change": "up", "reason": "r"}, drain_timeout_s=1.0)
    assert str(run.state).endswith("success")
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "ok" and event.drained_at is not None
    plane = ControlPlane(flowctl_db)
    assert plane.get_topology(BLUE).state == "STOPPED"
    assert _kinds(plane, BLUE) == ["deactivate", "stop"]
    assert plane.get_topology(job_side.green).state == "ACTIVE"


@pytest.mark.parametrize("job_side", [{"green_fails": True}], indirect=True)
def test_a_green_that_fails_is_rolled_back_and_blue_never_touched(
    flowctl_db: str, job_side: JobSide
) -> None:
    run = _rescale({"change": "up", "reason": "r"})
    assert str(run.state).endswith("failed")
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "rolled_back" and "ended FAILED" in event.error
    plane = ControlPlane(flowctl_db)
    assert plane.get_topology(BLUE).state == "ACTIVE" and _kinds(plane, BLUE) == []


@pytest.mark.parametrize("job_side", [{"drains": False, "kill_on_deactivate": True}], indirect=True)
def test_killing_the_task_mid_way_leaves_blue_the_only_admitting_topology(
    flowctl_db: str, job_side: JobSide
) -> None:
    previous = signal.getsignal(signal.SIGTERM)
    try:
        run = _rescale({"change": "up", "reason": "r"}, drain_timeout_s=60.0)
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert str(run.state).endswith("failed")
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "rolled_back" and "killed" in event.error
    assert event.deactivated_at is not None
    plane = ControlPlane(flowctl_db)
    assert _kinds(plane, BLUE) == ["deactivate", "activate"]
    assert _kinds(plane, job_side.green) == ["stop"]
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and plane.get_topology(job_side.green).state != "STOPPED":
        time.sleep(0.05)
    states = {t.topology_id: t.state for t in plane.topologies("wordcount")}
    assert states == {BLUE: "ACTIVE", job_side.green: "STOPPED"}


# -- green's run, and the waits in the triggerer ---------------------------------------------


@pytest.fixture
def trigger_waits(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every TopologyStateTrigger run: (topology, what it waited for), in order."""
    from flowctl_airflow.triggers.topology_state import TopologyStateTrigger

    runs: list[tuple[str, str]] = []
    real_run = TopologyStateTrigger.run

    def run(self: TopologyStateTrigger):
        runs.append((self.topology_id, self.what))
        return real_run(self)

    monkeypatch.setattr(TopologyStateTrigger, "run", run)
    return runs


def test_green_is_a_new_run_of_the_stream_dag_created_by_trigger_dag_run(
    flowctl_db: str, job_side: JobSide
) -> None:
    """The public DagRunTriggerException path (TriggerDagRunOperator's) creates the run in
    the metadata database (run
    type ``operator_triggered``; the task runner's ``trigger_run_id`` XCom on the replace
    task): if that interface changes, green's run does not appear and this test fails."""
    import sqlalchemy as sa
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        run = _rescale({"change": 8, "reason": "more lanes"})
    assert str(run.state).endswith("success")
    # The replace task's own log, without Airflow's warning about nested operators.
    events = [str(entry.get("event")) for entry in logs]
    assert any(e.startswith("step start green") for e in events), events
    assert not [e for e in events if "cannot be called outside of the Task Runner" in e]
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    run_id = f"replace__{event.new_topology_id}"
    with create_session() as session:
        green = session.scalars(sa.select(DagRun).where(DagRun.run_id == run_id)).one()
        assert (green.dag_id, str(green.run_type)) == ("stream_wordcount", "operator_triggered")
        assert green.conf == {
            "parallelism": 8,
            "colour": "green",
            "standby": True,
            "replaces": BLUE,
            "topology_id": event.new_topology_id,
        }
    assert _xcom(run, "trigger_run_id") == run_id
    assert _xcom(run)["next_standby"] is None  # green was started cold: no standby taken


def test_a_deferred_replacement_waits_in_the_trigger_and_runs_every_step(
    flowctl_db: str, job_side: JobSide, trigger_waits: list[tuple[str, str]]
) -> None:
    run = _rescale({"change": 8, "reason": "more lanes"}, deferrable=True)
    assert str(run.state).endswith("success")
    green_id = job_side.green
    assert trigger_waits == [
        (green_id, "waiting for green READY"),
        (BLUE, "waiting for blue DRAINED"),
        (green_id, "waiting for green ACTIVE"),
        (BLUE, "waiting for STOPPED"),
    ]
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "ok" and event.error is None
    assert event.started_at <= event.ready_at <= event.deactivated_at
    assert event.deactivated_at <= event.drained_at <= event.finished_at
    assert event.pause_ms is not None and event.pause_ms >= 0 and event.duplicates == 0
    plane = ControlPlane(flowctl_db)
    assert plane.get_topology(BLUE).state == "STOPPED"
    assert _kinds(plane, BLUE) == ["deactivate", "stop"]
    assert _kinds(plane, green_id) == ["activate"]
    assert [t.topology_id for t in plane.topologies("wordcount", states=["ACTIVE"])] == [green_id]


@pytest.mark.parametrize("deferrable", [False, True])
def test_the_wait_after_greens_run_was_created_is_deferred_at_once(
    flowctl_db: str, job_side: JobSide, trigger_waits: list[tuple[str, str]], deferrable: bool
) -> None:
    """Green's run created, the task resumes within a second (DagStateTrigger fires once
    the run is queued). Polling for green READY in the worker then, the task was RUNNING
    when the scheduler handled the SUCCESS its worker had reported on ``defer()``, and
    Airflow killed it (apache/airflow#72716: 1 to 3 in 8 rescales of bench.rescale_loop
    rolled back so). The READY wait is deferred at once, to the triggerer's settle, whether the
    operator is deferrable or not (the default, whose waits all ran in the worker); the
    later waits, which end within ``defer_after_s``, run in the worker."""
    run = _rescale(
        {"change": 8, "reason": "more lanes"}, deferrable=deferrable, defer_after_s=15.0,
        ready_timeout_s=60.0, drain_timeout_s=60.0, stop_timeout_s=60.0,
    )  # fmt: skip
    assert str(run.state).endswith("success")
    assert trigger_waits == [(job_side.green, "waiting for green READY")]
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "ok"


@pytest.mark.parametrize("job_side", [{"drains": False}], indirect=True)
def test_a_deferred_replacement_stops_a_blue_that_does_not_drain(
    flowctl_db: str, job_side: JobSide, trigger_waits: list[tuple[str, str]]
) -> None:
    run = _rescale({"change": "up", "reason": "r"}, deferrable=True, drain_timeout_s=1.0)
    assert str(run.state).endswith("success")
    assert [what for _, what in trigger_waits] == [
        "waiting for green READY",
        "waiting for blue DRAINED",
        "waiting for STOPPED",
        "waiting for green ACTIVE",
    ]
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "ok" and event.drained_at is not None
    plane = ControlPlane(flowctl_db)
    assert plane.get_topology(BLUE).state == "STOPPED"
    assert _kinds(plane, BLUE) == ["deactivate", "stop"]
    assert plane.get_topology(job_side.green).state == "ACTIVE"


@pytest.mark.parametrize("job_side", [{"green_fails": True}], indirect=True)
def test_a_deferred_replacement_rolls_back_a_green_that_fails(
    flowctl_db: str, job_side: JobSide, trigger_waits: list[tuple[str, str]]
) -> None:
    run = _rescale({"change": "up", "reason": "r"}, deferrable=True)
    assert str(run.state).endswith("failed")
    assert [what for _, what in trigger_waits] == ["waiting for green READY"]
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "rolled_back" and "ended FAILED" in event.error
    plane = ControlPlane(flowctl_db)
    assert plane.get_topology(BLUE).state == "ACTIVE" and _kinds(plane, BLUE) == []


def test_a_missing_stream_dag_is_rolled_back_before_blue_is_touched(flowctl_db: str) -> None:
    from flowctl_airflow.dag_factory import rescale_dag

    dag = rescale_dag(load_pipeline_config("wordcount"))
    dag.get_task("replace").stream_dag_id = "stream_nowhere"
    run = dag.test(run_conf={"change": "up", "reason": "r"})
    assert str(run.state).endswith("failed")
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "rolled_back" and "'stream_nowhere'" in event.error
    plane = ControlPlane(flowctl_db)
    assert plane.get_topology(BLUE).state == "ACTIVE" and _kinds(plane, BLUE) == []
