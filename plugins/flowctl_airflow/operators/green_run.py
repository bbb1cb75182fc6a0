"""Green's DAG run: created from a replacement, and the replacement resumed once it exists.

Mixed into the replace operator, whose attributes it reads: ``pipeline``, ``_events``,
``_progress``, ``log``, and its ``_config``, ``_timeouts`` and ``_overlapped``. A run of
``stream_<pipeline>`` is created through the Task SDK's ``DagRunTriggerException`` (as
``TriggerDagRunOperator`` does): the task defers until the run exists and resumes at the
operator's ``execute_complete``, which rebuilds the progress here
(:meth:`GreenRunSteps._progress_after_start`). The next warm standby's run is created the
same way (:mod:`.standby`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowctl_airflow.replacement_state import Progress, ReplacementFailed

if TYPE_CHECKING:
    import logging

    from airflow.sdk import Context

    from flowctl.adapters.replacements import ReplacementLog
    from flowctl.pipelines.config import PipelineConfig

#: Green's DAG run id is this prefix and green's topology id.
GREEN_RUN_PREFIX = "replace__"


class GreenRunSteps:
    """Creating green's run of the stream DAG, and the progress once it exists."""

    pipeline: str
    _events: ReplacementLog | None
    _progress: Progress | None
    log: logging.Logger
    _config: Callable[[], PipelineConfig]
    _timeouts: Callable[[PipelineConfig], tuple[float, float, float]]
    _overlapped: Callable[[PipelineConfig], bool]

    def _start_green(self, context: Context, progress: Progress, conf: dict[str, Any]) -> None:
        """Create green's DAG run (:meth:`_trigger_stream_run`); resumes at execute_complete."""
        self.log.info(
            "step start green (%s run %s) ...", progress.stream_dag_id, progress.green_run_id
        )
        self._trigger_stream_run(
            context,
            dag_id=progress.stream_dag_id,
            run_id=progress.green_run_id,
            conf=conf,
            note=f"green of replacement {progress.event_id}: replaces {progress.blue}",
        )

    def _trigger_stream_run(
        self, context: Context, *, dag_id: str, run_id: str, conf: dict[str, Any], note: str
    ) -> None:
        """Create a run of the stream DAG; resumes at execute_complete once it exists
        (green's, and the next warm standby's).

        Why this way: an Airflow 3 task has no metadata-database access, and the public
        ways to create a run are the REST API (an api-server URL and credentials in every
        worker, and none under ``dag.test()``) and the Task SDK's ``DagRunTriggerException``
        (what ``TriggerDagRunOperator.execute`` raises): the task runner creates the run
        and, with ``wait_for_completion`` and ``deferrable``, defers this task on
        ``DagStateTrigger`` until the run is in ``allowed_states`` (a new run is queued at
        once) or ``failed_states``, then resumes it at :meth:`execute_complete`. Raised
        here, not through a nested ``TriggerDagRunOperator``: Airflow warns about every
        operator executed inside another ("cannot be called outside of the Task Runner"),
        a warning in every successful replacement's log that asked nothing of its reader.
        """
        from airflow.sdk.exceptions import DagRunTriggerException
        from airflow.sdk.timezone import utcnow

        self._check_stream_dag(context, dag_id)
        now = utcnow()
        raise DagRunTriggerException(
            trigger_dag_id=dag_id,
            dag_run_id=run_id,
            conf=conf,
            logical_date=now,
            run_after=now,
            reset_dag_run=False,
            skip_when_already_exists=False,
            wait_for_completion=True,
            allowed_states=["queued", "running", "success"],
            failed_states=["failed"],
            poke_interval=1,
            deferrable=True,
            note=note,
        )

    @staticmethod
    def _check_stream_dag(context: Context, dag_id: str) -> None:
        """Fail here if the stream DAG is unknown (green's start then rolls back).

        The task runner turns a failed ``DagRunTriggerException`` into a failed task
        without this operator's rollback, which would leave the event ``running``.
        """
        ti = context.get("ti")
        if ti is None:
            return
        try:
            found = ti.get_dag(dag_id)
        except Exception as exc:
            raise ReplacementFailed(f"cannot create a run of DAG {dag_id!r}: {exc}") from None
        if getattr(found, "dag_id", None) != dag_id:
            raise ReplacementFailed(f"cannot create a run of DAG {dag_id!r}: not found ({found})")

    def _progress_after_start(self, event: Any) -> Progress:
        """The progress of the replacement whose green run ``DagStateTrigger`` saw created."""
        assert self._events is not None
        _, data = event
        (run_id,) = data["run_ids"]
        green = str(run_id).removeprefix(GREEN_RUN_PREFIX)
        ours = [e for e in self._events.replacements(self.pipeline) if e.new_topology_id == green]
        if not ours:
            raise ReplacementFailed(f"no replacement event of {self.pipeline} starts green {green}")
        e = ours[-1]
        config = self._config()
        ready_s, drain_s, stop_s = self._timeouts(config)
        progress = Progress(
            event_id=e.id,
            blue=e.old_topology_id,
            green=green,
            green_run_id=str(run_id),
            stream_dag_id=data["dag_id"],
            target=e.new_parallelism,
            ready_s=ready_s,
            drain_s=drain_s,
            stop_s=stop_s,
            overlap=self._overlapped(config),
        )
        self._progress = progress
        if e.outcome != "running":
            raise ReplacementFailed(f"replacement {e.id} is {e.outcome} already: {e.error}")
        state = data.get(run_id)
        if state == "failed":
            raise ReplacementFailed(f"green's run {run_id} of {data['dag_id']} failed at once")
        self.log.info("step start green done: run %s is %s", run_id, state)
        return progress
