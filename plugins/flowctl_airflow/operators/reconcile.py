"""Submit the reconcile batch job of a pipeline (``spark_jobs/reconcile.py``).

A ``SparkSubmitOperator`` with the platform's addresses resolved from the
Airflow connections into the job's environment (as the stream operator does).
The job exits 3 and prints the first differing keys when the stored results
differ from the reference of the durable Kafka log, and 4 when the stream made
no durable progress over a log that has records (records past the checkpoint
older than ``stall_minutes`` and no checkpoint moved within it): either fails
this task loudly, the reason in the task log (the Spark driver's log), which is
as quiet as the stream task's: Spark's start-up lines are left out, each line
has one timestamp and its own level (``driver_log``).

On a Spark cluster it takes the batch share of the slot plan
(:mod:`flowctl.core.slot_plan`): without a ``spark.cores.max`` of its own it
asked for a stream's share and, beside a stream and its green, got no executor.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook

from flowctl.core.slot_plan import DEFAULT_PLAN
from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook
from flowctl_airflow.hooks.kafka import FlowctlKafkaHook
from flowctl_airflow.operators.driver_log import DriverLogHook, quiet_driver_conf
from flowctl_airflow.operators.stream import DRIVER_LOG4J, SPARK_JOBS_DIR
from flowctl_airflow.run_conf import refuse_unknown_conf

if TYPE_CHECKING:
    from airflow.sdk import Context


class FlowctlReconcileOperator(SparkSubmitOperator):
    """Run ``spark_jobs/reconcile.py`` for ``pipeline``; fails when the results differ.

    :param pipeline: pipeline name. (templated)
    :param pipeline_config: path of its config file; default ``include/pipelines/<pipeline>.toml``.
    :param max_differences: how many differing keys the job prints. (templated)
    :param chunk_records: Kafka offsets per Spark task. (templated)
    :param stall_minutes: how old the first record past the durable checkpoint may be,
        with no checkpoint moved meanwhile, before the stream counts as stalled. (templated)
    :param flowctl_conn_id: connection of the flowctl database.
    :param kafka_conn_id: connection of the Kafka cluster.
    Other keyword arguments go to ``SparkSubmitOperator`` (``conn_id`` is the Spark
    connection, ``spark_default`` by default).
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "pipeline",
        "max_differences",
        "chunk_records",
        "stall_minutes",
    )
    ui_color = "#f3e5f5"

    def __init__(
        self,
        *,
        pipeline: str,
        pipeline_config: str | None = None,
        max_differences: int | str = 20,
        chunk_records: int | str = 100_000,
        stall_minutes: float | str = 10.0,
        flowctl_conn_id: str = FlowctlDbHook.default_conn_name,
        kafka_conn_id: str = FlowctlKafkaHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", f"flowctl-reconcile-{pipeline}")
        super().__init__(application=str(SPARK_JOBS_DIR / "reconcile.py"), **kwargs)
        self.pipeline = pipeline
        self.pipeline_config = pipeline_config
        self.max_differences = max_differences
        self.chunk_records = chunk_records
        self.stall_minutes = stall_minutes
        self.flowctl_conn_id = flowctl_conn_id
        self.kafka_conn_id = kafka_conn_id

    def _job_env(self) -> dict[str, str]:
        env = {
            "FLOWCTL_DATABASE_URL": FlowctlDbHook(self.flowctl_conn_id).sqlalchemy_url,
            "FLOWCTL_KAFKA_BOOTSTRAP": FlowctlKafkaHook(self.kafka_conn_id).bootstrap_servers,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        if os.environ.get("FLOWCTL_HOME"):
            env["FLOWCTL_HOME"] = os.environ["FLOWCTL_HOME"]
        if str(BaseHook.get_connection(self._conn_id).host or "").startswith("local"):
            env["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
            env["PYSPARK_PYTHON"] = sys.executable
            env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        return env

    def execute(self, context: Context) -> None:
        refuse_unknown_conf(context)  # before the Spark job
        for name in ("max_differences", "chunk_records"):
            value = getattr(self, name)
            try:
                number = int(value)
            except (TypeError, ValueError):
                number = 0
            if number < 1:
                raise ValueError(f"{name}={value!r} must be an integer >= 1")
            setattr(self, name, number)
        try:
            minutes = float(self.stall_minutes)
        except (TypeError, ValueError):
            minutes = 0.0
        if not 0 < minutes < float("inf"):
            raise ValueError(f"stall_minutes={self.stall_minutes!r} must be a number > 0")
        self.stall_minutes = minutes
        self.env_vars = {**(self.env_vars or {}), **self._job_env()}
        # The batch share of the slot plan (a local master ignores it); ``conf`` overrides.
        conf = {"spark.cores.max": str(DEFAULT_PLAN.batch_cores), **(self.conf or {})}
        self.conf = quiet_driver_conf(conf, DRIVER_LOG4J)
        self.application_args = [
            "--pipeline-config",
            self.pipeline_config or self.pipeline,
            "--max-differences",
            str(self.max_differences),
            "--chunk-records",
            str(self.chunk_records),
            "--stall-minutes",
            f"{self.stall_minutes:g}",
            *(self.application_args or []),
        ]
        self.log.info("reconciling %s (the job's log follows)", self.pipeline)
        super().execute(context)
        self.log.info("%s reconciled: stored results equal the durable reference", self.pipeline)

    def _get_hook(self) -> SparkSubmitHook:
        """The provider's hook, relaying the driver's lines tidied and levelled, as the
        stream task's are (see ``driver_log``)."""
        return DriverLogHook.adopt(super()._get_hook())
