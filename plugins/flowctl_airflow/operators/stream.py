"""Submit a pipeline's long-running streaming topology with ``spark-submit``.

A thin layer over the Spark provider's ``SparkSubmitOperator``: it resolves
the platform's connections into the job's environment, names the topology,
and stops it the platform's way. The task runs as long as the topology does;
its log is the Spark driver's log. Stopping:

- a ``stop`` signal in the control plane (``flowctl stream stop``, the
  rescale operator) ends the job cleanly and the task succeeds;
- killing the task (marking it failed / cleared in the UI) sends the same
  signal first and waits ``stop_timeout`` seconds before killing spark-submit.

A blue-green replacement starts its green as a run of the same DAG with
``standby`` true: the job warms up, reports READY and admits nothing until
the replace operator sends ``activate``.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook

from flowctl.core.validation import flag_from_text, parallelism
from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook
from flowctl_airflow.hooks.kafka import FlowctlKafkaHook
from flowctl_airflow.hooks.memcached import FlowctlMemcachedHook
from flowctl_airflow.metrics_relay import MetricsRelay
from flowctl_airflow.operators.driver_log import DriverLogHook, quiet_driver_conf, topology_label

if TYPE_CHECKING:
    from airflow.sdk import Context

SPARK_JOBS_DIR = Path(__file__).resolve().parents[3] / "spark_jobs"
#: The drivers' log4j2 configuration: warnings and errors only, from the JVM's start.
DRIVER_LOG4J = SPARK_JOBS_DIR / "log4j2.properties"
COLOURS = ("blue", "green")


def default_application(pipeline: str) -> str:
    """``spark_jobs/<pipeline>_stream.py`` if the pipeline has one, else the generic job."""
    own = SPARK_JOBS_DIR / f"{pipeline}_stream.py"
    return str(own if own.exists() else SPARK_JOBS_DIR / "stream.py")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:60]


class FlowctlStreamOperator(SparkSubmitOperator):
    """Run ``spark_jobs/<pipeline>_stream.py`` as one topology until it is told to stop.

    :param pipeline: pipeline name; selects the job file and its config. (templated)
    :param pipeline_config: path of the config file; default ``include/pipelines/<pipeline>.toml``.
    :param colour: ``blue`` or ``green``, the blue-green slot. (templated)
    :param parallelism: number of lanes (the topology's parallelism). (templated)
    :param topology_id: id in the control plane; default
        ``<pipeline>-<colour>-<run id>-<try>``. (templated)
    :param standby: start in standby (``--standby``): READY, admitting nothing until an
        ``activate`` signal; a green of a replacement, or without ``replaces`` a warm
        standby (``--warm-standby``: it may start beside the ACTIVE topology, and the
        next replacement takes it instead of starting green). Text ``"true"``/``"false"``
        is accepted (a rendered template). (templated)
    :param replaces: the topology a standby green is about to replace (logged). (templated)
    :param flowctl_conn_id: connection of the flowctl database.
    :param kafka_conn_id: connection of the Kafka cluster.
    :param memcached_conn_id: connection of memcached.
    :param stop_timeout: seconds ``on_kill`` waits for a clean stop before killing.
    :param pyspark_python: Python for Spark's workers; default this interpreter
        when the Spark master is ``local[...]``, Spark's default otherwise.
    Other keyword arguments go to ``SparkSubmitOperator`` (``conn_id`` is the
    Spark connection, ``spark_default`` by default).
    """

    template_fields: Sequence[str] = (
        *SparkSubmitOperator.template_fields,
        "pipeline",
        "colour",
        "parallelism",
        "topology_id",
        "standby",
        "replaces",
    )
    ui_color = "#d9ecff"

    def __init__(
        self,
        *,
        pipeline: str,
        pipeline_config: str | None = None,
        colour: str = "blue",
        parallelism: int | str = 2,
        topology_id: str | None = None,
        standby: bool | str = False,
        replaces: str | None = None,
        flowctl_conn_id: str = FlowctlDbHook.default_conn_name,
        kafka_conn_id: str = FlowctlKafkaHook.default_conn_name,
        memcached_conn_id: str = FlowctlMemcachedHook.default_conn_name,
        stop_timeout: float = 120.0,
        pyspark_python: str | None = None,
        application: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", f"flowctl-{pipeline}")
        super().__init__(application=application or default_application(pipeline), **kwargs)
        self.pipeline = pipeline
        self.pipeline_config = pipeline_config
        self.colour = colour
        self.parallelism = parallelism
        self.topology_id = topology_id
        self.standby = standby
        self.replaces = replaces
        self.flowctl_conn_id = flowctl_conn_id
        self.kafka_conn_id = kafka_conn_id
        self.memcached_conn_id = memcached_conn_id
        self.stop_timeout = stop_timeout
        self.pyspark_python = pyspark_python
        self._database_url: str | None = None

    def _validated_parallelism(self) -> int:
        """The rendered ``parallelism`` (text) as the lane count the platform allows.

        The bounds are the job's to check (it reads the config); here the rule every
        boundary shares: a power of two, a bool or a fraction refused, not rounded.
        """
        return parallelism("parallelism", self.parallelism)

    def _validated_colour(self) -> str:
        if self.colour not in COLOURS:
            raise ValueError(f"colour={self.colour!r} must be one of {', '.join(COLOURS)}")
        return self.colour

    def _validated_standby(self) -> bool:
        return flag_from_text("standby", self.standby)

    def _job_env(self) -> dict[str, str]:
        db = FlowctlDbHook(self.flowctl_conn_id)
        self._database_url = db.sqlalchemy_url
        env = {
            "FLOWCTL_DATABASE_URL": db.sqlalchemy_url,
            "FLOWCTL_KAFKA_BOOTSTRAP": FlowctlKafkaHook(self.kafka_conn_id).bootstrap_servers,
            "FLOWCTL_MEMCACHED": FlowctlMemcachedHook(self.memcached_conn_id).address,
            # spark-submit and the job's Python come from the environment Airflow runs in.
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        for name in ("FLOWCTL_HOME", "FLOWCTL_METRICS_RAW_HOURS"):  # platform settings
            if os.environ.get(name):
                env[name] = os.environ[name]
        python = self.pyspark_python
        local = str(BaseHook.get_connection(self._conn_id).host or "").startswith("local")
        if local:
            # Loopback only in local mode; on a cluster executors must reach the driver.
            env["SPARK_LOCAL_IP"] = os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")
            if python is None:
                python = sys.executable
        if python:
            env["PYSPARK_PYTHON"] = python
            env["PYSPARK_DRIVER_PYTHON"] = python
        return env

    def execute(self, context: Context) -> None:
        self._validated_colour()
        parallelism = self._validated_parallelism()
        standby = self._validated_standby()
        ti = context["ti"]
        run_id = context["run_id"]
        topology_id = self.topology_id or (
            f"{self.pipeline}-{self.colour}-{_slug(run_id)}-{ti.try_number}"
        )
        self.topology_id = topology_id
        self.env_vars = {**(self.env_vars or {}), **self._job_env()}
        self.conf = quiet_driver_conf(self.conf, DRIVER_LOG4J)
        self.application_args = [
            "--pipeline-config",
            self.pipeline_config or self.pipeline,
            "--topology-id",
            topology_id,
            "--colour",
            self.colour,
            "--parallelism",
            str(parallelism),
            "--airflow-run-id",
            run_id,
            # A standby that replaces nobody yet is a warm standby: it starts beside the
            # ACTIVE topology and the next replacement takes it (no start-up then).
            *([("--standby" if self.replaces else "--warm-standby")] if standby else []),
            *(self.application_args or []),
        ]
        ti.xcom_push(key="topology_id", value=topology_id)
        if standby:
            self.log.info(
                "standby: %s will report READY and admit nothing until activated%s",
                topology_id,
                f" (it replaces {self.replaces})" if self.replaces else "",
            )
        self.log.info(
            "submitting topology %s (shown as %s below): pipeline=%s colour=%s "
            "parallelism=%d (stop it with `flowctl stream stop %s`)",
            topology_id,
            topology_label(self.pipeline, self.colour),
            self.pipeline,
            self.colour,
            parallelism,
            topology_id,
        )
        relay = self._start_metrics_relay(topology_id)
        try:
            super().execute(context)
        finally:
            if relay is not None:
                relay.stop()
        self.log.info("topology %s ended cleanly", topology_id)

    def _get_hook(self) -> SparkSubmitHook:
        """The provider's hook, relaying the driver's lines tidied and levelled
        (see ``driver_log``)."""
        label = topology_label(self.pipeline, self.colour)
        return DriverLogHook.adopt(super()._get_hook(), self.topology_id, label)

    def _start_metrics_relay(self, topology_id: str) -> MetricsRelay | None:
        """Relay the topology's metrics windows to Airflow's StatsD/OpenTelemetry, if any."""
        if self._database_url is None:
            return None
        from flowctl.adapters.control_plane import ControlPlane

        plane = ControlPlane(self._database_url)
        # On a fresh database the job creates the tables only once Spark is up; without them
        # every early poll logged five retries and an ERROR with the SQL into the task log.
        plane.ensure_schema()
        return MetricsRelay(plane, topology_id, pipeline=self.pipeline).start()

    def on_kill(self) -> None:
        """Ask the topology to stop cleanly; kill spark-submit only if it does not."""
        if self.topology_id and self._database_url:
            try:
                plane = FlowctlDbHook(self.flowctl_conn_id).get_control_plane()
                plane.send_signal(self.topology_id, "stop")
                self.log.info(
                    "sent stop to %s; waiting up to %.0fs", self.topology_id, self.stop_timeout
                )
                deadline = time.monotonic() + self.stop_timeout
                while time.monotonic() < deadline:
                    topo = plane.get_topology(self.topology_id)
                    if topo is not None and topo.state in ("STOPPED", "FAILED"):
                        self.log.info("topology %s is %s", self.topology_id, topo.state)
                        break
                    time.sleep(1.0)
                else:
                    self.log.warning("topology %s did not stop in time: killing", self.topology_id)
            except Exception:
                self.log.exception(
                    "could not stop %s cleanly; killing spark-submit", self.topology_id
                )
        super().on_kill()
