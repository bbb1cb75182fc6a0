"""Wait until a topology's failure-rate windows call for a new parallelism (SPEC E).

The sensor of the ``autoscale_<pipeline>`` DAG. Each look runs
:func:`flowctl.adapters.window_evaluation.evaluate`: the last ``A``
metrics windows of the pipeline's ACTIVE topology, E(M) and the weighted S^2
of their failure counts, the pipeline's policy (``paper`` or ``adaptive``),
no decision while a replacement runs or during the cooldown after one. The
sensor succeeds with the decision as its XCom (``Decision.to_dict()``, plus
the topology under the XCom key ``topology_id``); with no decision it keeps
waiting until its timeout, then fails, or skips with ``soft_fail=True`` (the
autoscale DAG's default: the next scheduled run looks again).

Deferrable: the waiting happens in the triggerer (:class:`FailureWindowTrigger`)
and no worker slot is held; without a triggerer, ``mode="reschedule"`` frees
the slot between pokes instead.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, PokeReturnValue

from flowctl.adapters.window_evaluation import evaluate
from flowctl.core.scaling_policy import WindowPolicy
from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook
from flowctl_airflow.run_conf import refuse_unknown_conf
from flowctl_airflow.triggers.failure_window import FailureWindowTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context


class FailureWindowSensorError(RuntimeError):
    """The trigger could not evaluate the windows (database error, bad policy)."""


class FailureRateWindowSensor(BaseSensorOperator):
    """Succeed with a scaling decision for ``pipeline``'s topology; wait while there is none.

    :param pipeline: the pipeline (its config gives the policy and bounds). (templated)
    :param pipeline_config: path of its config file; default ``include/pipelines/<pipeline>.toml``.
    :param topology_id: watch this topology; default the pipeline's ACTIVE one. (templated)
    :param policy: ``paper`` or ``adaptive``; default ``[scaling] policy``.
    :param history_windows: ``A``; default ``[scaling] history_windows``.
    :param threshold_c: ``C``; default ``[scaling] threshold_c``.
    :param cooldown_s: default ``[scaling] cooldown_s``.
    :param flowctl_conn_id: connection of the flowctl database.
    :param deferrable: wait in the triggerer (default ``[operators] default_deferrable``).
    Other keyword arguments go to ``BaseSensorOperator`` (``poke_interval``,
    ``timeout``, ``soft_fail``, ``mode``).
    """

    template_fields: Sequence[str] = ("pipeline", "topology_id")
    ui_color = "#fff3cd"

    def __init__(
        self,
        *,
        pipeline: str,
        pipeline_config: str | None = None,
        topology_id: str | None = None,
        policy: str | None = None,
        history_windows: int | None = None,
        threshold_c: float | None = None,
        cooldown_s: float | None = None,
        flowctl_conn_id: str = FlowctlDbHook.default_conn_name,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.pipeline_config = pipeline_config
        self.topology_id = topology_id
        self.policy = policy
        self.history_windows = history_windows
        self.threshold_c = threshold_c
        self.cooldown_s = cooldown_s
        self.flowctl_conn_id = flowctl_conn_id
        self.deferrable = deferrable

    def _window_policy(self) -> WindowPolicy:
        from flowctl.pipelines.config import load_pipeline_config

        return WindowPolicy.from_config(
            load_pipeline_config(self.pipeline_config or self.pipeline),
            policy=self.policy,
            history_windows=self.history_windows,
            threshold_c=self.threshold_c,
            cooldown_s=self.cooldown_s,
        )

    def _database_url(self) -> str:
        return FlowctlDbHook(self.flowctl_conn_id).sqlalchemy_url

    def _succeed(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        decision: dict[str, Any] = event["decision"]
        context["ti"].xcom_push(key="topology_id", value=event["topology_id"])
        self.log.info(
            "decision for %s (topology %s): %s %d -> %d, cause %s; E(M)=%g S^2=%g C=%g; %s",
            self.pipeline,
            event["topology_id"],
            decision["direction"],
            decision["old_parallelism"],
            decision["new_parallelism"],
            decision["cause"],
            decision["mean"],
            decision["s2"],
            decision["threshold_c"],
            decision["reason"],
        )
        return decision

    def poke(self, context: Context) -> PokeReturnValue | bool:
        result = evaluate(
            self._database_url(),
            self.pipeline,
            self._window_policy(),
            topology_id=self.topology_id or None,
        )
        if not result.decided:
            self.log.info("no decision for %s: %s", self.pipeline, result.reason)
            return False
        return PokeReturnValue(is_done=True, xcom_value=self._succeed(context, result.to_event()))

    def execute(self, context: Context) -> Any:
        # Here, not in poke: a poke's AirflowFailException is a skip under soft_fail.
        refuse_unknown_conf(context)
        if not self.deferrable:
            return super().execute(context)
        # One look first: a decision that is already there needs no trigger round trip.
        done = self.poke(context)
        if isinstance(done, PokeReturnValue):
            return done.xcom_value
        trigger = FailureWindowTrigger(
            flowctl_conn_id=self.flowctl_conn_id,
            pipeline=self.pipeline,
            policy=self._window_policy().to_dict(),
            topology_id=self.topology_id or None,
            poke_interval=float(self.poke_interval),
            end_at=time.time() + float(self.timeout),
        )
        # The trigger ends itself at end_at; the deferral timeout is a backstop only.
        self.defer(
            trigger=trigger,
            method_name="execute_complete",
            timeout=timedelta(seconds=float(self.timeout) + 60),
        )

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume after the trigger: the decision, a timeout (fail or skip), or an error."""
        from airflow.sdk.exceptions import AirflowSensorTimeout, AirflowSkipException

        status = event.get("status")
        if status == "decision":
            return self._succeed(context, event)
        if status == "timeout":
            message = (
                f"no scaling decision for {self.pipeline} within {self.timeout:g} s: "
                f"{event.get('reason')}"
            )
            if self.soft_fail:
                raise AirflowSkipException(message)
            raise AirflowSensorTimeout(message)
        raise FailureWindowSensorError(
            f"failure-window trigger for {self.pipeline}: {event.get('message', event)}"
        )
