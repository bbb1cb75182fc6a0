"""Blue-green replacement of a pipeline's topology with a new parallelism (SPEC E).

The protocol is docs/flow-control.md "Signals and states", driven step by step:

1. start green as a NEW DAG RUN of ``stream_<pipeline>`` with conf
   ``{parallelism, colour, standby: true, replaces, topology_id}`` (so green's
   Spark driver log is that run's task log) and wait until green is READY;
2. ``deactivate`` blue and wait until it is DRAINED (on timeout: ``stop`` it;
   its unapplied tuples are gaps that green dispatches first);
3. ``activate`` green and wait until it is ACTIVE;
4. ``stop`` blue and wait until it is STOPPED;
5. complete the replacement event: the time of every step, the output pause
   (blue DRAINED -> green ACTIVE, read from the control plane: the span in which
   no topology had anything in flight) and the duplicates (0 by construction:
   every result is applied at most once under the durable checkpoint).

At most one replacement per pipeline runs at a time: the event is opened
(outcome ``running``) before anything is touched and a second operator that
finds an earlier running event refuses with the id of the one in the way.
Any failure rolls back (``activate`` blue if it was deactivated, ``stop``
green); killing the task does the same or, once green is ACTIVE, finishes
forward: exactly one topology admits afterwards.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from flowctl.core.validation import parallelism
from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook

if TYPE_CHECKING:
    from airflow.sdk import Context

    from flowctl.adapters.control_plane import ControlPlane, Topology
    from flowctl.adapters.replacements import ReplacementLog
    from flowctl.pipelines.config import PipelineConfig

COLOURS = ("blue", "green")


class ReplacementRefused(RuntimeError):
    """A replacement cannot start (another one runs, no single active topology, bad target)."""


class ReplacementFailed(RuntimeError):
    """A step of the replacement failed or timed out; the message names the step."""


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _running_message(pipeline: str, event: Any) -> str:
    return (
        f"a replacement of pipeline {pipeline!r} is already running (event {event.id}, "
        f"{event.old_topology_id} -> {event.new_topology_id}, started "
        f"{event.started_at:%Y-%m-%d %H:%M:%S} UTC); one replacement at a time: wait until its "
        f"outcome is ok, rolled_back or failed"
    )


def validate_parallelism(field: str, value: Any, lo: int, hi: int) -> int:
    """``value`` as an int that is a power of two within ``[lo, hi]``, or a ValueError naming it.

    The platform's one parallelism rule, :func:`flowctl.core.validation.parallelism`.
    """
    return parallelism(field, value, lo, hi)


def trigger_dag_run(dag_id: str, run_id: str, conf: Mapping[str, Any], note: str) -> None:
    """Create a DAG run from inside a running task and keep going.

    Airflow 3 tasks have no metadata-database access; ``TriggerDagRunOperator``
    asks its task runner to send the ``TriggerDagRun`` request to the execution
    API and then *ends* its task. A replacement must keep running after starting
    green, so it sends the same request itself, through the same channel.
    """
    from airflow.sdk.execution_time import task_runner
    from airflow.sdk.execution_time.comms import ErrorResponse, TriggerDagRun

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if comms is None:
        raise ReplacementFailed(
            f"cannot trigger {dag_id}: not running inside an Airflow task (no supervisor channel)"
        )
    response = comms.send(TriggerDagRun(dag_id=dag_id, run_id=run_id, conf=dict(conf), note=note))
    if isinstance(response, ErrorResponse):
        raise ReplacementFailed(
            f"triggering {dag_id} run {run_id!r} failed: {response.error} {response.detail}"
        )


class BlueGreenReplaceOperator(BaseOperator):
    """Replace ``pipeline``'s ACTIVE topology by one with another parallelism, blue-green.

    The new parallelism comes from ``decision`` (the failure-window sensor's XCom,
    ``Decision.to_dict()``) or from ``new_parallelism``. Returns the replacement
    event as a dict (XCom).

    :param pipeline: the pipeline. (templated)
    :param pipeline_config: path of its config file; default ``include/pipelines/<pipeline>.toml``.
    :param decision: a scaling decision dict; its ``old_parallelism`` must still be blue's.
    :param new_parallelism: the target when there is no decision (a power of two within
        the pipeline's bounds). (templated)
    :param reason: why (stored with the event; defaults to the decision's reason). (templated)
    :param blue_topology_id: the topology to replace; default the pipeline's single ACTIVE
        one. (templated)
    :param stream_dag_id: the DAG whose new run is green; default ``stream_<pipeline>``.
    :param ready_timeout_s: seconds for green to reach READY (and later ACTIVE);
        default ``[scaling] ready_timeout_s``.
    :param drain_timeout_s: seconds for blue to reach DRAINED; default
        ``[scaling] drain_timeout_s``.
    :param stop_timeout_s: seconds for a stopped topology to reach STOPPED; default
        ``[scaling] stop_timeout_s``.
    :param poll_interval_s: seconds between two reads of a topology's state.
    :param flowctl_conn_id: connection of the flowctl database.
    """

    template_fields: Sequence[str] = (
        "pipeline",
        "new_parallelism",
        "reason",
        "blue_topology_id",
        "decision",
    )
    ui_color = "#cfe8d5"

    def __init__(
        self,
        *,
        pipeline: str,
        pipeline_config: str | None = None,
        decision: Mapping[str, Any] | None = None,
        new_parallelism: int | str | None = None,
        reason: str | None = None,
        blue_topology_id: str | None = None,
        stream_dag_id: str | None = None,
        ready_timeout_s: float | None = None,
        drain_timeout_s: float | None = None,
        stop_timeout_s: float | None = None,
        poll_interval_s: float = 0.1,
        flowctl_conn_id: str = FlowctlDbHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.pipeline_config = pipeline_config
        self.decision = decision
        self.new_parallelism = new_parallelism
        self.reason = reason
        self.blue_topology_id = blue_topology_id
        self.stream_dag_id = stream_dag_id
        self.ready_timeout_s = ready_timeout_s
        self.drain_timeout_s = drain_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.poll_interval_s = poll_interval_s
        self.flowctl_conn_id = flowctl_conn_id
        # Progress, for rollback and on_kill.
        self._plane: ControlPlane | None = None
        self._events: ReplacementLog | None = None
        self._event_id: int | None = None
        self._blue: str | None = None
        self._green: str | None = None
        self._green_run_id: str | None = None
        self._deactivated = False
        self._green_active = False
        self._blue_stopped = False
        self._finished = False
        self._killed = False
        self._rolled_back = False
        self._started = time.monotonic()

    # -- inputs -----------------------------------------------------------------------------

    def _config(self) -> PipelineConfig:
        from flowctl.pipelines.config import load_pipeline_config

        return load_pipeline_config(self.pipeline_config or self.pipeline)

    def _timeouts(self, config: PipelineConfig) -> tuple[float, float, float]:
        s = config.scaling
        return (
            float(self.ready_timeout_s or s.ready_timeout_s),
            float(self.drain_timeout_s or s.drain_timeout_s),
            float(self.stop_timeout_s or s.stop_timeout_s),
        )

    def _refuse_if_running(self, plane: ControlPlane) -> None:
        """Refuse while a replacement of the pipeline is running (one at a time)."""
        from flowctl.adapters.replacements import ReplacementLog

        events = ReplacementLog(plane.engine).replacements(self.pipeline, limit=20)
        running = [e for e in events if e.outcome == "running"]
        if running:
            raise ReplacementRefused(_running_message(self.pipeline, running[-1]))

    def _blue_topology(self, plane: ControlPlane) -> Topology:
        if self.blue_topology_id:
            blue = plane.get_topology(self.blue_topology_id)
            if blue.state != "ACTIVE":
                raise ReplacementRefused(
                    f"blue_topology_id={blue.topology_id!r} is {blue.state}, not ACTIVE: "
                    f"only an admitting topology can be replaced"
                )
            return blue
        active = plane.topologies(self.pipeline, states=["ACTIVE"])
        if len(active) != 1:
            ids = [t.topology_id for t in active]
            raise ReplacementRefused(
                f"pipeline {self.pipeline!r} has {len(active)} ACTIVE topologies {ids}; a "
                f"replacement needs exactly one (start one with the stream_{self.pipeline} DAG)"
            )
        return active[0]

    def _target(self, blue: Topology, config: PipelineConfig) -> tuple[int, str, Any]:
        """The new parallelism, the reason and the decision stored with the event."""
        lo, hi = config.min_parallelism, config.max_parallelism
        decision = None
        if self.decision:
            from flowctl.core.scaling import Decision

            decision = Decision.from_dict(self.decision)
            if decision.old_parallelism != blue.parallelism:
                raise ReplacementRefused(
                    f"stale decision: it was taken at parallelism {decision.old_parallelism} "
                    f"but {blue.topology_id} runs {blue.parallelism} lanes"
                )
            target = validate_parallelism(
                "decision.new_parallelism", decision.new_parallelism, lo, hi
            )
            reason = self.reason or decision.reason
        else:
            if self.new_parallelism in (None, ""):
                raise ReplacementRefused("either decision or new_parallelism must be given")
            target = validate_parallelism("new_parallelism", self.new_parallelism, lo, hi)
            reason = self.reason or ""
        if not reason.strip():
            raise ReplacementRefused("reason must be a non-empty text (why this replacement)")
        if target == blue.parallelism:
            raise ReplacementRefused(
                f"new parallelism {target} equals {blue.topology_id}'s current parallelism: "
                f"nothing to replace"
            )
        return target, reason, decision

    # -- steps ------------------------------------------------------------------------------

    def _step(self, name: str, work: Callable[[], Any]) -> Any:
        """Run one step, logging its duration (the task log is the replacement's record)."""
        if self._killed:
            raise ReplacementFailed(f"killed before step {name}")
        self.log.info("step %s ...", name)
        started = time.monotonic()
        result = work()
        self.log.info("step %s done in %.2f s", name, time.monotonic() - started)
        return result

    def _wait_state(
        self, topology_id: str, wanted: set[str], timeout_s: float, what: str
    ) -> Topology | None:
        """Poll until ``topology_id`` is in ``wanted``; None on timeout, an error on FAILED."""
        from flowctl.adapters.control_plane import UnknownTopology

        assert self._plane is not None
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                topo = self._plane.get_topology(topology_id)
            except UnknownTopology:
                topo = None  # green's job has not registered yet
            if topo is not None:
                if topo.state in wanted:
                    return topo
                if topo.state in ("FAILED", "STOPPED") and not wanted & {"FAILED", "STOPPED"}:
                    raise ReplacementFailed(
                        f"{what}: {topology_id} ended {topo.state} (see its stream task log)"
                    )
                if "READY" in wanted and topo.state == "ACTIVE":
                    # A green that admits at once would make two admitting topologies.
                    raise ReplacementFailed(
                        f"{what}: {topology_id} went ACTIVE without waiting in READY (was it "
                        f"started without standby?)"
                    )
            if self._killed:
                raise ReplacementFailed(f"{what}: the replace task was killed")
            if time.monotonic() >= deadline:
                return None
            time.sleep(self.poll_interval_s)

    def _update(self, **changes: Any) -> None:
        assert self._events is not None and self._event_id is not None
        self._events.update_replacement(self._event_id, **changes)

    def _open_event(
        self, blue: Topology, target: int, reason: str, decision: Any, green_id: str
    ) -> int:
        """Open the ``running`` event, then make sure no earlier one is still running."""
        assert self._events is not None
        event_id = self._events.record_replacement(
            self.pipeline,
            blue.topology_id,
            green_id,
            blue.parallelism,
            target,
            reason,
            started_at=_utcnow(),
            outcome="running",
            decision=decision,
        )
        earlier = [
            e
            for e in self._events.replacements(self.pipeline)
            if e.outcome == "running" and e.id < event_id
        ]
        if earlier:
            message = _running_message(self.pipeline, earlier[-1])
            self._events.update_replacement(
                event_id, outcome="failed", error=f"refused: {message}", finished_at=_utcnow()
            )
            raise ReplacementRefused(message)
        return event_id

    def execute(self, context: Context) -> dict[str, Any]:
        from flowctl.adapters.replacements import ReplacementLog

        config = self._config()
        ready_s, drain_s, stop_s = self._timeouts(config)
        self._plane = plane = FlowctlDbHook(self.flowctl_conn_id).get_control_plane()
        self._events = ReplacementLog(plane.engine)
        self._refuse_if_running(plane)
        blue = self._blue_topology(plane)
        target, reason, decision = self._target(blue, config)
        colour = "green" if blue.colour == "blue" else "blue"
        stamp = _utcnow().strftime("%Y%m%dT%H%M%S%f")
        green_id = f"{self.pipeline}-{colour}-p{target}-{stamp}"
        self._blue, self._green = blue.topology_id, green_id
        self._event_id = self._open_event(blue, target, reason, decision, green_id)
        self._started = time.monotonic()
        self.log.info(
            "replacement %d of %s: %s (%s, %d lanes) -> %s (%s, %d lanes); reason: %s",
            self._event_id,
            self.pipeline,
            blue.topology_id,
            blue.colour,
            blue.parallelism,
            green_id,
            colour,
            target,
            reason,
        )
        try:
            result = self._replace(blue, green_id, colour, target, ready_s, drain_s, stop_s)
        except BaseException as exc:
            self._rollback(f"{type(exc).__name__}: {exc}", stop_s)
            raise
        self._finished = True
        return result

    def _replace(
        self,
        blue: Topology,
        green_id: str,
        colour: str,
        target: int,
        ready_s: float,
        drain_s: float,
        stop_s: float,
    ) -> dict[str, Any]:
        assert self._plane is not None and self._events is not None
        plane = self._plane
        dag_id = self.stream_dag_id or f"stream_{self.pipeline}"
        self._green_run_id = f"replace__{green_id}"
        conf = {
            "parallelism": target,
            "colour": colour,
            "standby": True,
            "replaces": blue.topology_id,
            "topology_id": green_id,
        }
        self._step(
            f"start green ({dag_id} run {self._green_run_id})",
            lambda: trigger_dag_run(
                dag_id,
                self._green_run_id,  # type: ignore[arg-type]
                conf,
                note=f"green of replacement {self._event_id}: replaces {blue.topology_id}",
            ),
        )
        ready = self._step(
            "wait green READY",
            lambda: self._wait_state(green_id, {"READY"}, ready_s, "waiting for green READY"),
        )
        if ready is None:
            raise ReplacementFailed(
                f"green {green_id} not READY within ready_timeout_s={ready_s:g} "
                f"(is the {dag_id} run {self._green_run_id} running?)"
            )
        self._update(ready_at=_utcnow())

        self._step("deactivate blue", lambda: plane.send_signal(blue.topology_id, "deactivate"))
        self._deactivated = True
        deactivated_at = _utcnow()
        self._update(deactivated_at=deactivated_at)
        drained = self._step(
            "wait blue DRAINED",
            lambda: self._wait_state(
                blue.topology_id, {"DRAINED"}, drain_s, "waiting for blue DRAINED"
            ),
        )
        if drained is None:
            self.log.warning(
                "blue %s not DRAINED within drain_timeout_s=%g: stopping it; green dispatches "
                "its unapplied tuples first",
                blue.topology_id,
                drain_s,
            )
            self._stop(blue.topology_id, stop_s)
            self._blue_stopped = True
            quiet_since = plane.get_topology(blue.topology_id).updated_at
        else:
            quiet_since = drained.updated_at
        quiet_since = max(quiet_since, deactivated_at)
        self._update(drained_at=quiet_since)

        self._step("activate green", lambda: plane.send_signal(green_id, "activate"))
        active = self._step(
            "wait green ACTIVE",
            lambda: self._wait_state(green_id, {"ACTIVE"}, ready_s, "waiting for green ACTIVE"),
        )
        if active is None:
            raise ReplacementFailed(
                f"green {green_id} not ACTIVE within {ready_s:g} s after activate"
            )
        self._green_active = True
        pause_ms = max(0.0, (active.updated_at - quiet_since).total_seconds() * 1000.0)

        if not self._blue_stopped:
            self._step("stop blue", lambda: self._stop(blue.topology_id, stop_s))
            self._blue_stopped = True
        finished = _utcnow()
        self._update(finished_at=finished, pause_ms=pause_ms, duplicates=0, outcome="ok")
        event = self._events.get_replacement(self._event_id)  # type: ignore[arg-type]
        self.log.info(
            "replacement %d ok in %.1f s: %s ACTIVE with %d lanes, %s stopped; output pause "
            "%.0f ms (blue quiet -> green ACTIVE), duplicates 0",
            event.id,
            time.monotonic() - self._started,
            green_id,
            target,
            blue.topology_id,
            pause_ms,
        )
        return event.to_dict()

    def _stop(self, topology_id: str, stop_s: float) -> None:
        """Send ``stop`` and wait for STOPPED (a topology that ignores it is only logged)."""
        assert self._plane is not None
        topo = self._plane.get_topology(topology_id)
        if topo.state in ("STOPPED", "FAILED"):
            return
        self._plane.send_signal(topology_id, "stop")
        done = self._wait_state(topology_id, {"STOPPED", "FAILED"}, stop_s, "waiting for STOPPED")
        if done is None:
            self.log.warning("%s did not reach STOPPED within %g s", topology_id, stop_s)

    # -- failure paths ----------------------------------------------------------------------

    def _rollback(self, error: str, stop_s: float) -> None:
        """Back to blue: activate it if it was deactivated, stop green; record the outcome."""
        from flowctl.adapters.control_plane import UnknownTopology

        if self._plane is None or self._event_id is None or self._rolled_back:
            return
        self._rolled_back = True
        plane = self._plane
        outcome = "rolled_back"
        self.log.error("replacement %d failed: %s; rolling back", self._event_id, error)
        try:
            # Signals only, no waiting: this may run in on_kill, and the job acts on a signal
            # within its poll interval whether or not anyone waits for it.
            if self._green_active:
                # Green already admits: keep it, finish blue instead (exactly one admitting).
                outcome = "failed"
                if self._blue and not self._blue_stopped:
                    plane.send_signal(self._blue, "stop")
                    self.log.info("green is ACTIVE: stop sent to blue %s", self._blue)
            elif self._blue_stopped and self._green:
                # Blue did not drain and was stopped: green is the only topology left.
                outcome = "failed"
                plane.send_signal(self._green, "activate")
                self.log.error(
                    "blue %s is stopped; activate sent to green %s again (the only topology "
                    "left): check it admits",
                    self._blue,
                    self._green,
                )
            else:
                if self._deactivated and self._blue:
                    plane.send_signal(self._blue, "activate")
                    self.log.info("rollback: activate sent to blue %s", self._blue)
                if self._green:
                    try:
                        plane.send_signal(self._green, "stop")
                        self.log.info("rollback: stop sent to green %s", self._green)
                    except UnknownTopology:
                        self.log.error(
                            "rollback: green %s never registered; if its run %s starts later, "
                            "mark it failed in the UI (it would only wait in READY)",
                            self._green,
                            self._green_run_id,
                        )
        finally:
            try:
                self._update(outcome=outcome, error=error[:2000], finished_at=_utcnow())
            except Exception:
                self.log.exception("could not record the outcome of replacement %d", self._event_id)

    def on_kill(self) -> None:
        """Killed mid-way: leave exactly one topology admitting, then record the outcome."""
        if self._finished or self._event_id is None:
            return
        self._killed = True
        _, _, stop_s = self._timeouts(self._config())
        self._rollback("the replace task was killed", min(stop_s, 30.0))
