"""The pipeline's warm standbys, seen from a replacement: which one to take as green, and
starting the next one once a replacement took one (``start_next_standby``).

Mixed into the replace operator, whose attributes it reads: ``pipeline``, ``_plane``,
``_events``, ``_context``, ``_finished``, ``start_next_standby``, ``log``, and its
``_config`` and ``_trigger_stream_run`` (the one way a ``stream_<pipeline>`` run is
created, for green and for the next standby alike).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from flowctl.core.validation import allowed_parallelisms, flag_from_text
from flowctl_airflow.operators.replacement_steps import Outcome, ReplacementSteps
from flowctl_airflow.replacement_state import (
    NEXT_STANDBY_RUN_PREFIX,
    Progress,
    next_standby_conf,
    utcnow,
)

if TYPE_CHECKING:
    import logging

    from airflow.sdk import Context

    from flowctl.adapters.control_plane import ControlPlane, Topology
    from flowctl.adapters.replacements import ReplacementLog
    from flowctl.pipelines.config import PipelineConfig


class StandbySteps(ReplacementSteps):
    """Taking a warm standby as green, and starting the next one after the replacement
    (its :meth:`_finish` extends the replacement's last step)."""

    pipeline: str
    start_next_standby: bool | str
    _plane: ControlPlane | None
    _events: ReplacementLog | None
    _context: Context | None
    _finished: bool
    log: logging.Logger
    _config: Callable[[], PipelineConfig]
    _trigger_stream_run: Callable[..., None]

    def _next_standby_wanted(self) -> bool:
        return flag_from_text("start_next_standby", self.start_next_standby)

    def _warm_standby(self, plane: ControlPlane, blue: Topology) -> Topology | None:
        """The pipeline's warm standby, if one is READY and alive: a topology started
        ``--warm-standby`` ahead of any replacement (no replacement event names it). The
        newest one is taken; a replacement without one starts green as before."""
        ready = self._spares(plane, {blue.topology_id}, ("READY",))
        return ready[-1] if ready else None

    def _spares(
        self, plane: ControlPlane, exclude: set[str], states: Sequence[str]
    ) -> list[Topology]:
        """The pipeline's live topologies in ``states`` that no replacement event named
        (warm standbys, READY or on their way), oldest first."""
        from flowctl.adapters.control_plane import LIVE_HEARTBEAT_S

        assert self._events is not None
        claimed = {e.new_topology_id for e in self._events.replacements(self.pipeline)}
        now = utcnow()
        return [
            t
            for t in plane.topologies(self.pipeline, states=list(states))
            if t.topology_id not in exclude
            and t.topology_id not in claimed
            and t.heartbeat_at is not None
            and (now - t.heartbeat_at).total_seconds() < LIVE_HEARTBEAT_S
        ]

    # -- the next warm standby ---------------------------------------------------------------

    def _finish(self, p: Progress, outcome: Outcome) -> dict[str, Any]:
        """Complete the event, then start the next warm standby if this one took one."""
        result = super()._finish(p, outcome)
        self._start_next_standby(p)
        return {**result, "next_standby": p.next_standby}

    def _start_next_standby(self, p: Progress) -> None:
        """Trigger the next warm standby's run (:func:`next_standby_conf` says whether).

        The run is created like green's (:meth:`_trigger_stream_run`): the task defers until
        it exists and resumes at :meth:`execute_complete`, which returns the event. Any
        failure here is logged only: the replacement finished ``ok``, and a rollback now
        would undo it.
        """
        from airflow.sdk.exceptions import DagRunTriggerException, TaskDeferred

        try:
            assert self._plane is not None
            config = self._config()
            conf, why = next_standby_conf(
                p,
                enabled=self._next_standby_wanted(),
                pipeline=self.pipeline,
                colour=self._plane.get_topology(p.blue).colour,
                spares=[
                    t.topology_id
                    for t in self._spares(self._plane, {p.blue, p.green}, ("STARTING", "READY"))
                ],
                allowed=allowed_parallelisms(config.min_parallelism, config.max_parallelism),
                stamp=utcnow().strftime("%Y%m%dT%H%M%S%f"),
            )
            self.log.info("%s", why)
            if conf is None:
                return
            p.next_standby = conf["topology_id"]
            self._finished = True  # the replacement is done: nothing left for on_kill
            self._trigger_stream_run(
                self._context or {},
                dag_id=p.stream_dag_id,
                run_id=f"{NEXT_STANDBY_RUN_PREFIX}{p.event_id}__{p.next_standby}",
                conf=conf,
                note=f"warm standby started by replacement {p.event_id} (it took {p.green})",
            )
        except (TaskDeferred, DagRunTriggerException):
            raise
        except Exception as exc:
            p.next_standby = None
            self.log.warning(
                "next standby not started: %s: %s; the replacement is ok. Start one by hand: "
                "trigger %s with Standby on and Replaces empty",
                type(exc).__name__,
                exc,
                p.stream_dag_id,
            )

    def _next_standby_created(self, run_id: str, data: Mapping[str, Any]) -> dict[str, Any]:
        """Resume after the next standby's run was created: the finished event (XCom)."""
        assert self._events is not None
        event_id, _, standby = run_id.removeprefix(NEXT_STANDBY_RUN_PREFIX).partition("__")
        state = data.get(run_id)
        if state == "failed":
            self.log.warning("next standby %s: its run %s failed at once", standby, run_id)
        else:
            self.log.info("next standby %s: run %s is %s", standby, run_id, state)
        self._finished = True
        event = self._events.get_replacement(int(event_id)).to_dict()
        return {**event, "next_standby": standby}
