"""Faults during an overlapped blue-green handover (issue 12; docs/flow-control.md,
"Overlapped handover", the table "A crash at each step").

Each test runs blue (2 lanes) under the suite's feeder, then the real replace operator
(:class:`~bench.lib.direct_replace.DirectReplace`: ``execute`` with
``deferrable=False`` in a thread, green started ``--standby`` by ``spark-submit``) to 4
lanes, and injects one fault *during the overlap*: blue's frontier published, green
admitting from it, blue not yet gone (the ``handovers`` row says so, blue is DRAINING and
the operator has seen green ACTIVE). Each ends with exactly one topology admitting and
exact counts (:meth:`FaultRun.settle`, the reconcile job's comparison, the tally).

Why the results table is locked: Spark calls the planner's ``latestOffset`` only between
micro-batches, so when blue publishes its frontier its last batch is done and what is
left of blue is its final MRWQ flush; with nothing slowing it, blue is DRAINED a few
milliseconds later and the overlap is too short to hit. :class:`FlushGate` holds a
``SHARE`` lock on ``word_counts`` (PostgreSQL; reads go on, every flush waits) from green's
start until the fault is in, so the overlap lasts exactly as long as the test needs. It
is released well within ``handover_lease_s``: a blue whose loop waits on its flush longer
than that is taken for gone by green (the lease's known trade-off, not under test here).

The SIGKILL of blue runs in CI; green SIGKILLed, the replace task killed and memcached
restarted are ``deep`` (``scripts/test -m deep``).
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sqlalchemy as sa

from bench.lib.direct_replace import DirectReplace, standby_args
from bench.lib.submit import LocalJob
from flowctl.adapters.handovers import Handover, HandoverLog
from flowctl.adapters.replacements import ReplacementLog
from flowctl_airflow.replacement_state import alive
from tests.faults.conftest import FaultRun, Tally, check
from tests.spark.flow_harness import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.integration,
]

#: [scaling] sized for a test: a dead blue is waited for ``drain_timeout_s`` (then
#: stopped, ``stop_timeout_s``), a silent one taken for gone after ``handover_lease_s``.
#: A SIGKILLed blue sits out both timeouts in full, so they are kept short: the drain
#: timeout just long enough for green to take blue for gone by the lease first (it counts
#: from green ACTIVE, the lease from blue's last heartbeat), the stop timeout a live
#: blue's final batch and flush.
SCALING = {
    "handover": "overlap",
    "handover_lease_s": 10.0,
    "ready_timeout_s": 240.0,
    "drain_timeout_s": 16.0,
    "stop_timeout_s": 8.0,
}
#: Seconds a replacement may take end to end (green's start-up dominates).
REPLACE_S = 420.0


class ReplaceTask:
    """The replace operator's ``execute`` in a thread, the way a worker runs the task.

    :meth:`kill` is what Airflow does to a killed task: it calls ``on_kill`` (which rolls
    back, or forward once green admits) and ``execute`` makes no further step (its waits
    raise on the operator's kill flag, as the task runner's exception would end them).
    """

    def __init__(self, run: FaultRun, lanes: int, reason: str, blue_id: str) -> None:
        self.run = run
        self.green: LocalJob | None = None
        self.next_standby: LocalJob | None = None  # started after a standby was taken
        self.result: dict[str, Any] | None = None
        self.error: BaseException | None = None
        self.op = DirectReplace(
            task_id=f"replace_{run.name}",
            pipeline=run.name,
            pipeline_config=str(run.config),
            new_parallelism=lanes,
            reason=reason,
            blue_topology_id=blue_id,
            deferrable=False,
            start_green=self._start_green,
        )
        self.thread = threading.Thread(target=self._execute, name="replace-task", daemon=True)

    def _start_green(self, conf: dict[str, Any]) -> None:
        """Green (``replaces`` set) or, after a standby was taken, the next warm standby."""
        job = self.run.flow.submit(
            self.run.config, conf["topology_id"], conf["parallelism"], *standby_args(conf)
        )
        if conf.get("replaces"):
            self.green = job
        else:
            self.next_standby = job

    def _execute(self) -> None:
        try:
            self.result = self.op.execute(context={})  # type: ignore[arg-type]
        except BaseException as exc:  # the test reads it
            self.error = exc

    @property
    def green_id(self) -> str | None:
        progress = self.op._progress
        return None if progress is None else progress.green

    def saw_green_active(self) -> bool:
        progress = self.op._progress
        return progress is not None and progress.green_active

    def kill(self) -> None:
        self.op.on_kill()

    def join(self) -> None:
        self.thread.join(timeout=REPLACE_S)
        assert not self.thread.is_alive(), "the replace task did not end"


class FlushGate:
    """A ``SHARE`` lock on ``word_counts`` while held: every MRWQ flush waits, reads go on."""

    def __init__(self, database_url: str) -> None:
        self.engine = sa.create_engine(database_url)
        self.conn: sa.Connection | None = None

    def hold(self) -> None:
        self.conn = self.engine.connect()
        self.conn.begin()
        self.conn.execute(sa.text("LOCK TABLE word_counts IN SHARE MODE"))

    def release(self) -> None:
        if self.conn is not None:
            self.conn.rollback()
            self.conn.close()
            self.conn = None

    def close(self) -> None:
        self.release()
        self.engine.dispose()


@contextlib.contextmanager
def replacing(
    run: FaultRun, blue_id: str, lanes: int, reason: str
) -> Iterator[tuple[ReplaceTask, FlushGate]]:
    """Start the replacement of ``blue_id`` with flushes held from green's registration on
    (named: a green SIGKILLed earlier keeps its ACTIVE row, so "the one ACTIVE" is no
    way to find blue)."""
    gate = FlushGate(run.flow.database_url)
    task = ReplaceTask(run, lanes, reason, blue_id)
    try:
        task.thread.start()
        deadline = time.monotonic() + REPLACE_S
        while task.green_id is None or run.flow.state(task.green_id) is None:
            assert task.error is None, f"the replacement failed early: {task.error!r}"
            assert time.monotonic() < deadline, "green never registered"
            time.sleep(0.05)
        gate.hold()
        yield task, gate
    finally:
        gate.close()


def wait_for_overlap(run: FaultRun, task: ReplaceTask, blue: LocalJob, blue_id: str) -> Handover:
    """The handover row once blue published its frontier, green admits from it and blue
    is not gone yet (DRAINING); the operator has seen green ACTIVE."""
    log = HandoverLog(run.flow.database_url)
    seen: list[Handover] = []

    def overlapping() -> bool:
        assert task.error is None, f"the replacement failed before the overlap: {task.error!r}"
        h = log.for_blue(blue_id)
        if h is None or h.frontier_at is None or h.green_admitting_at is None:
            return False
        assert h.blue_gone_at is None, f"blue was gone before the overlap could be hit: {h}"
        if run.flow.state(blue_id) != "DRAINING" or not task.saw_green_active():
            return False
        seen.append(h)
        return True

    wait_for(overlapping, timeout_s=REPLACE_S, job=blue, what="the overlap")
    return seen[-1]


def admitting(run: FaultRun) -> list[str]:
    """The pipeline's topologies that admit: ACTIVE with a live heartbeat, and the same
    list from the ``topologies`` states alone (what the sensor and the replace operator
    count), or the two views apart, which the caller's comparison then shows."""
    plane = run.flow.plane
    rows = [t.topology_id for t in plane.topologies(run.name, states=["ACTIVE"])]
    live = [t for t in rows if alive(plane, t)]
    return live if live == rows else [f"live {live}", f"ACTIVE rows {rows}"]


def start_blue(
    fault_run: Callable[..., FaultRun],
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    seed: int,
    postgres_url: str,
) -> tuple[FaultRun, LocalJob, str]:
    """A pipeline on PostgreSQL (:class:`FlushGate` locks a table) with blue counting; the
    operator's ``flowctl_db`` connection names the same database."""
    conn = {"conn_type": "generic", "extra": {"sqlalchemy_url": postgres_url}}
    monkeypatch.setenv("AIRFLOW_CONN_FLOWCTL_DB", json.dumps(conn))
    run = fault_run(name, seed=seed, database_url=postgres_url, scaling=SCALING)
    run.produce(2_000)
    blue_id = f"{name}-blue-1"
    blue = run.submit(blue_id, 2)
    wait_for(lambda: run.counted() > 0, timeout_s=180, job=blue, what="blue's first results")
    return run, blue, blue_id


def test_blue_sigkilled_during_the_overlap(
    fault_run: Callable[..., FaultRun],
    spark: Any,
    tallies: list[Tally],
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Blue's in-flight work and its flusher die: after the lease green takes the flusher
    (its first flush takes what blue queued) and sweeps the holes below the frontier; the
    operator's drain wait times out and it stops blue; green is the one admitting. Half the
    input comes in transactions, a third of them aborted: no aborted record is counted."""
    run, blue, blue_id = start_blue(fault_run, monkeypatch, "hoblue", 404, postgres_url)
    reason = "fault test: blue SIGKILLed in the overlap"
    # Half the input from librdkafka in transactions, a third of them aborted, before,
    # during and across the handover: aborted records reach neither blue nor green.
    with run.feeding(transactions=True), replacing(run, blue_id, 4, reason) as (task, gate):
        overlap = wait_for_overlap(run, task, blue, blue_id)
        blue.kill_hard()
        gate.release()
        task.join()
    assert task.error is None, repr(task.error)
    assert task.result is not None and task.result["outcome"] == "ok", task.result
    green_id, green = task.green_id, task.green
    assert green_id is not None and green is not None
    assert admitting(run) == [green_id]
    h = HandoverLog(run.flow.database_url).get(overlap.id)
    assert h.frontier_at and h.green_admitting_at and h.blue_gone_at, h
    assert h.frontier_at <= h.green_admitting_at <= h.blue_gone_at, h
    assert h.note == "blue DRAINING", h  # gone by the lease: it never reached DRAINED
    assert "flusher taken over" in green.log(), green.log_tail()
    run.settle(green, green_id)
    assert run.aborted > 0, "no transaction was aborted"
    check(run, "blue SIGKILLed in an overlapped handover, aborted transactions", spark, tallies)


@pytest.mark.deep  # warm greens taken with new lanes: the rescale e2e; the next standby's
# run and conf: tests/dags/test_rescale_protocol.py
def test_a_warm_standby_takes_over_with_the_lanes_given_at_activation(
    fault_run: Callable[..., FaultRun],
    spark: Any,
    tallies: list[Tally],
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A warm standby (``--warm-standby``, 1 lane, READY beside the ACTIVE blue) is what
    the overlapped replacement takes: no green is started, the standby plans 4 lanes from
    its activation on, and the counts stay exact. Once blue is stopped the operator starts
    the next warm standby (1 lane, blue's colour, ``--warm-standby``): it reaches READY
    beside the new ACTIVE topology, admitting nothing."""
    run, _blue, blue_id = start_blue(fault_run, monkeypatch, "howarm", 405, postgres_url)
    spare_id = f"{run.name}-green-standby"
    spare = run.flow.submit(run.config, spare_id, 1, "--warm-standby", "--colour", "green")
    wait_for(lambda: run.flow.state(spare_id) == "READY", timeout_s=240, job=spare, what="READY")
    task = ReplaceTask(run, 4, "test: a warm standby takes over", blue_id)
    with run.feeding():
        task.thread.start()
        task.join()
    assert task.error is None, repr(task.error)
    assert task.result is not None and task.result["outcome"] == "ok", task.result
    assert task.green is None and task.green_id == spare_id  # no green was started
    assert admitting(run) == [spare_id]
    assert run.flow.plane.get_topology(spare_id).parallelism == 4
    # the standby was used up: the operator started the next one, and only one
    next_id, nxt = task.result["next_standby"], task.next_standby
    assert next_id and nxt is not None and nxt.topology_id == next_id, task.result
    wait_for(lambda: run.flow.state(next_id) == "READY", timeout_s=240, job=nxt, what="READY")
    standby = run.flow.plane.get_topology(next_id)
    assert (standby.colour, standby.parallelism) == ("blue", 1), standby
    ready = [t.topology_id for t in run.flow.plane.topologies(run.name, states=["READY"])]
    assert ready == [next_id] and admitting(run) == [spare_id]
    run.flow.stop(nxt, next_id)  # admitted nothing: the counts below are the taken one's
    run.settle(spare, spare_id)
    log = spare.log()
    assert "4 lane(s) from activation on (started with 1)" in log, spare.log_tail()
    assert "4 lane(s) from now on (was 1)" in log, spare.log_tail()
    # Its spout is rebuilt with the 4 lanes: from blue's frontier, or from the database
    # when blue was already stopped and swept before the standby's next plan read the
    # control key (a short replacement, 0.3 s in one CI run; planner_handover.build_spout).
    built = re.search(r"spout built from (blue's frontier|the database): 4 lane\(s\)", log)
    assert built, spare.log_tail()
    check(run, "a warm standby taken by an overlapped handover, 1 -> 4 lanes", spark, tallies)


def handover_of(run: FaultRun, overlap: Handover) -> Handover:
    """The row of ``overlap`` as it is now, its stamps in their order."""
    h = HandoverLog(run.flow.database_url).get(overlap.id)
    assert h.frontier_at and h.green_admitting_at, h
    assert h.frontier_at <= h.green_admitting_at, h
    return h


@pytest.mark.deep
def test_green_killed_task_killed_memcached_restarted_during_overlaps(
    fault_run: Callable[..., FaultRun],
    spark: Any,
    tallies: list[Tally],
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    _session_services: Any,
) -> None:
    """Three replacements of one stream, one fault in each overlap (one topology run and
    one reconcile for the three):

    1. green SIGKILLed: blue drains, the operator finds green silent and rolls back:
       blue re-activated (rebuilt from the database), the event ``rolled_back``;
    2. the replace task killed (``on_kill``) once it saw green ACTIVE: it finishes
       forward (blue stopped, the event ``failed``), green takes over when blue is gone;
    3. memcached restarted: blue's held flush and green's planner see the new MRWQ
       epoch; green rebuilds from the database; the replacement completes ``ok``.
    """
    run, blue, blue_id = start_blue(fault_run, monkeypatch, "hodeep", 505, postgres_url)
    with run.feeding():
        # 1. green SIGKILLed in the overlap: back to blue
        reason = "fault test: green SIGKILLed in the overlap"
        with replacing(run, blue_id, 4, reason) as (task, gate):
            overlap = wait_for_overlap(run, task, blue, blue_id)
            assert task.green is not None
            task.green.kill_hard()
            gate.release()
            task.join()
        assert task.error is not None and "silent" in str(task.error), repr(task.error)
        event = ReplacementLog(run.flow.database_url).get_replacement(overlap.event_id or 0)
        assert event.outcome == "rolled_back", event
        h = handover_of(run, overlap)
        assert h.blue_gone_at is None, h  # green died before it saw blue go
        before = run.counted()
        wait_for(
            lambda: admitting(run) == [blue_id] and run.counted() > before,
            timeout_s=120,
            job=blue,
            what="blue alone admitting again, and counting",
        )

        # 2. the replace task killed in the overlap: forward to green
        reason = "fault test: the replace task killed in the overlap"
        with replacing(run, blue_id, 4, reason) as (task, gate):
            overlap = wait_for_overlap(run, task, blue, blue_id)
            task.kill()
            gate.release()
            task.join()
        assert task.error is not None, "execute went on after on_kill"
        event = ReplacementLog(run.flow.database_url).get_replacement(overlap.event_id or 0)
        assert event.outcome == "failed" and "killed" in (event.error or ""), event
        second, second_id = task.green, task.green_id
        assert second is not None and second_id is not None
        assert blue.wait(timeout_s=120) == 0, blue.log_tail()
        assert run.flow.state(blue_id) == "STOPPED"
        assert admitting(run) == [second_id]
        wait_for(
            lambda: handover_of(run, overlap).blue_gone_at is not None,
            timeout_s=60,
            job=second,
            what="green taking over once blue is gone",
        )

        # 3. memcached restarted in the overlap: green rebuilds, the replacement completes
        reason = "fault test: memcached restarted in the overlap"
        with replacing(run, second_id, 2, reason) as (task, gate):
            overlap = wait_for_overlap(run, task, second, second_id)
            _session_services.stop("memcached")
            time.sleep(1.0)
            _session_services.start("memcached", "memcached_port")
            gate.release()
            task.join()
        assert task.error is None, repr(task.error)
        assert task.result is not None and task.result["outcome"] == "ok", task.result
        third, third_id = task.green, task.green_id
        assert third is not None and third_id is not None
        assert admitting(run) == [third_id]
        assert handover_of(run, overlap).blue_gone_at is not None
    run.settle(third, third_id)
    check(
        run,
        "green SIGKILLed, the replace task killed, memcached restarted: one per overlapped "
        "handover, three in one stream",
        spark,
        tallies,
    )
