"""Blue-green replacement of a pipeline's topology with a new parallelism (SPEC E).

The protocol is docs/flow-control.md "Signals and states", driven step by step:

1. start green as a NEW DAG RUN of ``stream_<pipeline>`` with conf
   ``{parallelism, colour, standby: true, replaces, topology_id}`` (so green's
   Spark driver log is that run's task log; created through the Task SDK's
   ``DagRunTriggerException``, as ``TriggerDagRunOperator`` creates runs)
   and wait until green is READY;
2. ``deactivate`` blue and wait until it is DRAINED (on timeout: ``stop`` it;
   its unapplied tuples are gaps that green dispatches first);
3. ``activate`` green and wait until it is ACTIVE;
4. ``stop`` blue and wait until it is STOPPED;
5. complete the replacement event: the time of every step, the output pause
   (blue DRAINED -> green ACTIVE, read from the control plane: the span in which
   no topology had anything in flight) and the duplicates (0 by construction:
   every result is applied at most once under the durable checkpoint);
6. if green was the pipeline's warm standby, start the next one (``start_next_standby``):
   a new run of ``stream_<pipeline>`` with conf ``{parallelism, colour, standby: true,
   replaces: null, topology_id}``, created the same way as green's, so the next
   replacement finds a standby again.

Creating green's run is :mod:`.green_run`; the steps after green's run exists are
:mod:`.replacement_steps`; with ``deferrable`` every wait longer than ``DEFER_AFTER_S``
runs in the triggerer and the replacement holds no worker slot meanwhile. At most one
replacement per pipeline runs at a time: the event is opened (outcome ``running``)
before anything is touched and a second operator that finds an earlier running event
refuses with the id of the one in the way.
Any failure rolls back (``activate`` blue if it was deactivated, ``stop``
green); killing the task does the same or, once green is ACTIVE, finishes
forward: exactly one topology admits afterwards.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.sdk import BaseOperator

from flowctl.core.validation import parallelism
from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook
from flowctl_airflow.operators.green_run import GREEN_RUN_PREFIX, GreenRunSteps
from flowctl_airflow.operators.replacement_steps import ReplacementSteps
from flowctl_airflow.operators.standby import StandbySteps
from flowctl_airflow.replacement_state import (
    NEXT_STANDBY_RUN_PREFIX,
    Progress,
    ReplacementFailed,
    ReplacementRefused,
    roll_back,
    utcnow,
)
from flowctl_airflow.run_conf import refuse_unknown_conf
from flowctl_airflow.triggers.topology_state import (
    DEFER_AFTER_S,
    DEFER_SETTLE_S,
    StateWaitFailed,
    outcome_of,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from flowctl.adapters.control_plane import ControlPlane, Topology
    from flowctl.adapters.replacements import ReplacementEvent, ReplacementLog
    from flowctl.core.scaling import Decision
    from flowctl.pipelines.config import PipelineConfig

COLOURS = ("blue", "green")


def _running_message(pipeline: str, event: ReplacementEvent) -> str:
    return (
        f"a replacement of pipeline {pipeline!r} is already running (event {event.id}, "
        f"{event.old_topology_id} -> {event.new_topology_id}, started "
        f"{event.started_at:%Y-%m-%d %H:%M:%S} UTC); one replacement at a time: wait until its "
        f"outcome is ok, rolled_back or failed"
    )


def validate_parallelism(field: str, value: object, lo: int, hi: int) -> int:
    """``value`` as an int that is a power of two within ``[lo, hi]``, or a ValueError naming it.

    The platform's one parallelism rule, :func:`flowctl.core.validation.parallelism`.
    """
    return parallelism(field, value, lo, hi)


class BlueGreenReplaceOperator(StandbySteps, ReplacementSteps, GreenRunSteps, BaseOperator):
    """Replace ``pipeline``'s ACTIVE topology by one with another parallelism, blue-green.

    The new parallelism comes from ``decision`` (the failure-window sensor's XCom,
    ``Decision.to_dict()``) or from ``new_parallelism``. Returns the replacement
    event as a dict (XCom).

    Green is started the way ``TriggerDagRunOperator`` starts a run, Airflow's supported
    way for a task to create one (the Task SDK's ``DagRunTriggerException``; tasks have
    no metadata-database access). It waits for the
    new run to exist (``wait_for_completion`` on the states ``queued``/``running``, in the
    triggerer: ``DagStateTrigger``) and resumes this operator at :meth:`execute_complete`.
    With ``deferrable`` the waits for READY, DRAINED, ACTIVE and STOPPED that outlast
    ``DEFER_AFTER_S`` in the worker are deferred too (:class:`TopologyStateTrigger`): the
    replacement then holds no worker slot while a Spark job gets ready or drains. Without
    it they poll in the worker.

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
    :param handover: ``overlap`` (green admits from blue's frontier while blue finishes)
        or ``sequential`` (green admits once blue is DRAINED); default ``[scaling] handover``.
    :param poll_interval_s: seconds between two reads of a topology's state.
    :param use_standby: take the pipeline's warm standby as green when one is READY (a
        topology started ``--warm-standby`` ahead of any replacement: no start-up in the
        replacement's time); without one, green is started as a new run.
    :param start_next_standby: after a replacement that took a warm standby as green has
        finished (blue STOPPED), start the next warm standby: a new ``stream_<pipeline>``
        run with Standby on and Replaces empty, as many lanes as the taken one was started
        with, in the colour blue leaves free. Nothing is started when green was started
        for the replacement, or when the pipeline has a spare already (one standby, never
        two). A failure to start it is logged, not raised: the replacement is done.
        Text ``"true"``/``"false"`` is accepted (a rendered template). Default on. (templated)
    :param flowctl_conn_id: connection of the flowctl database.
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    :param defer_after_s: with ``deferrable``, how long a wait runs in the worker before it
        is deferred (``DEFER_AFTER_S``; 0: at once).
    :param defer_settle_s: with ``deferrable``, how long the trigger holds its event after
        the deferral (``DEFER_SETTLE_S``: Airflow's stale-SUCCESS race, see there).
    """

    template_fields: Sequence[str] = (
        "pipeline",
        "new_parallelism",
        "reason",
        "blue_topology_id",
        "decision",
        "start_next_standby",
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
        handover: str | None = None,
        poll_interval_s: float = 0.1,
        use_standby: bool = True,
        start_next_standby: bool | str = True,
        flowctl_conn_id: str = FlowctlDbHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        defer_after_s: float = DEFER_AFTER_S,
        defer_settle_s: float = DEFER_SETTLE_S,
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
        self.handover = handover
        self.poll_interval_s = poll_interval_s
        self.use_standby = use_standby
        self.start_next_standby = start_next_standby
        self.flowctl_conn_id = flowctl_conn_id
        self.deferrable = deferrable
        self.defer_after_s = defer_after_s
        self.defer_settle_s = defer_settle_s
        # This execution's view, for rollback and on_kill (rebuilt on every resume).
        self._plane: ControlPlane | None = None
        self._events: ReplacementLog | None = None
        self._progress: Progress | None = None
        self._finished = False
        self._killed = False
        self._rolled_back = False
        self._context: Context | None = None
        #: Resumed by a trigger that fired within seconds of the deferral (green's run
        #: created): the next wait defers at once instead of running here (DEFER_SETTLE_S).
        self._settling = False

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

    def _overlapped(self, config: PipelineConfig) -> bool:
        """Whether this replacement overlaps (the operator's choice, else the config's)."""
        from flowctl.pipelines.config_sections import HANDOVERS

        mode = self.handover or config.scaling.handover
        if mode not in HANDOVERS:
            raise ReplacementRefused(f"handover={mode!r} is not one of {', '.join(HANDOVERS)}")
        return mode == "overlap"

    def _connect(self) -> ControlPlane:
        from flowctl.adapters.replacements import ReplacementLog

        self._plane = plane = FlowctlDbHook(self.flowctl_conn_id).get_control_plane()
        self._events = ReplacementLog(plane.engine)
        return plane

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

    def _target(self, blue: Topology, config: PipelineConfig) -> tuple[int, str, Decision | None]:
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

    def _open_event(
        self, blue: Topology, target: int, reason: str, decision: Decision | None, green_id: str
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
            started_at=utcnow(),
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
                event_id, outcome="failed", error=f"refused: {message}", finished_at=utcnow()
            )
            raise ReplacementRefused(message)
        return event_id

    # -- execution entry points -------------------------------------------------------------

    def execute(self, context: Context) -> dict[str, Any]:
        refuse_unknown_conf(context)  # a conf key the DAG does not read: before anything
        self._context = context
        self._next_standby_wanted()  # a bad value is refused before anything is touched
        config = self._config()
        ready_s, drain_s, stop_s = self._timeouts(config)
        plane = self._connect()
        self._refuse_if_running(plane)
        blue = self._blue_topology(plane)
        target, reason, decision = self._target(blue, config)
        colour = "green" if blue.colour == "blue" else "blue"
        stamp = utcnow().strftime("%Y%m%dT%H%M%S%f")
        green_id = f"{self.pipeline}-{colour}-p{target}-{stamp}"
        standby = self._warm_standby(plane, blue) if self.use_standby else None
        if standby is not None:
            green_id, colour = standby.topology_id, standby.colour
        event_id = self._open_event(blue, target, reason, decision, green_id)
        self._progress = progress = Progress(
            event_id=event_id,
            blue=blue.topology_id,
            green=green_id,
            green_run_id=f"{GREEN_RUN_PREFIX}{green_id}",
            stream_dag_id=self.stream_dag_id or f"stream_{self.pipeline}",
            target=target,
            ready_s=ready_s,
            drain_s=drain_s,
            stop_s=stop_s,
            overlap=self._overlapped(config),
            standby_lanes=None if standby is None else standby.parallelism,
        )
        self.log.info(
            "replacement %d of %s: %s (%s, %d lanes) -> %s (%s, %d lanes); reason: %s",
            event_id,
            self.pipeline,
            blue.topology_id,
            blue.colour,
            blue.parallelism,
            green_id,
            colour,
            target,
            reason,
        )
        run_conf = {
            "parallelism": target,
            "colour": colour,
            "standby": True,
            "replaces": blue.topology_id,
            "topology_id": green_id,
        }
        with self._rolling_back_on_failure():
            if standby is not None:
                # A warm standby is READY already (JVM, workers, warm-up done): it takes
                # the new parallelism now and reads it at activation.
                plane.set_parallelism(green_id, target)
                self.log.info(
                    "step start green: warm standby %s taken (%d -> %d lanes at activation)",
                    green_id,
                    standby.parallelism,
                    target,
                )
                return self._finish_execute(self._drive("started", None))
            self._start_green(context, progress, run_conf)
            # Green's DAG run defers this task (it resumes at execute_complete); a subclass
            # that starts green itself (bench/autoscale_live.py: spark-submit, no scheduler)
            # returns, and the same protocol goes on here.
            result = self._drive("started", None)
        return self._finish_execute(result)

    def _finish_execute(self, result: dict[str, Any]) -> dict[str, Any]:
        self._finished = True
        return result

    def execute_complete(self, context: Context, event: Any) -> dict[str, Any]:
        """Resume after green's run was created (``DagStateTrigger``'s event, a pair) or
        after a deferred wait (:class:`TopologyStateTrigger`'s event: it carries the phase
        to resume at and the progress)."""
        self._connect()
        self._context = context
        if not isinstance(event, dict):
            _, data = event
            (run_id,) = data["run_ids"]
            if str(run_id).startswith(NEXT_STANDBY_RUN_PREFIX):
                return self._next_standby_created(str(run_id), data)
            with self._rolling_back_on_failure():
                self._progress = self._progress_after_start(event)
            phase, outcome = "started", None
            self._settling = True  # DagStateTrigger fires as soon as the run is queued
        else:
            self._progress = Progress.from_dict(event["progress"])
            phase = event["then"]
            try:
                outcome = outcome_of(event)
            except StateWaitFailed as exc:
                with self._rolling_back_on_failure():
                    raise ReplacementFailed(str(exc)) from None
        with self._rolling_back_on_failure():
            result = self._drive(phase, outcome)
        self._finished = True
        return result

    @contextlib.contextmanager
    def _rolling_back_on_failure(self) -> Iterator[None]:
        """Roll back on any failure; a deferral or the start of green's run is no failure."""
        from airflow.sdk.exceptions import DagRunTriggerException, TaskDeferred

        try:
            yield
        except (TaskDeferred, DagRunTriggerException):
            raise
        except BaseException as exc:
            self._rollback(f"{type(exc).__name__}: {exc}")
            raise

    # -- the protocol -----------------------------------------------------------------------

    def _rollback(self, error: str) -> None:
        """Back to blue (or forward to green once it admits); record the outcome, once."""
        if self._plane is None or self._events is None or self._progress is None:
            return
        if self._rolled_back:
            return
        self._rolled_back = True
        roll_back(self._plane, self._events, self._progress, error, self.log)

    def on_kill(self) -> None:
        """Killed mid-way: leave exactly one topology admitting, then record the outcome."""
        if self._finished or self._progress is None:
            return
        self._killed = True
        self._rollback("the replace task was killed")
