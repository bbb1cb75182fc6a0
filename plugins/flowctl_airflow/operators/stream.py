"""Submit a pipeline's long-running streaming topology with ``spark-submit``, detached.

A thin layer over the Spark provider's ``SparkSubmitOperator``: it resolves
the platform's connections into the job's environment, names the topology,
and stops it the platform's way. The task runs as long as the topology does;
its log is the Spark driver's log. Stopping:

- a ``stop`` signal in the control plane (``flowctl stream stop``, the
  rescale operator) ends the job cleanly and the task succeeds;
- killing the task (marking it failed / cleared in the UI) sends the same
  signal first and waits ``stop_timeout`` seconds before killing the driver.

The driver outlives its task: ``spark-submit`` runs detached under a keeper
process (``flowctl.adapters.detached_driver``, started through
``spark_jobs/spark-submit-detached``), its output in a file the task relays
into its log. The operator is a ``ResumableJobMixin`` job (as the provider's is):
the topology is remembered in the task's ``task_state_store`` before the task
follows it, so a retry after a dead task runner or Celery worker reattaches to
the running topology (same id, same driver) instead of submitting a second
one, and submits again (from the durable checkpoint) only when the topology is
gone (``flowctl.core.driver_status``).

A blue-green replacement starts its green as a run of the same DAG with
``standby`` true: the job warms up, reports READY and admits nothing until
the replace operator sends ``activate``.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook
from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from flowctl.adapters.detached_driver import (
    DRIVER_DIR_ENV,
    SPARK_SUBMIT_ENV,
    DetachedDriver,
    LogTail,
    drivers_dir,
)
from flowctl.config import Settings
from flowctl.core.driver_status import is_running
from flowctl.core.validation import flag_from_text, parallelism
from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook
from flowctl_airflow.hooks.kafka import FlowctlKafkaHook
from flowctl_airflow.hooks.memcached import FlowctlMemcachedHook
from flowctl_airflow.metrics_relay import MetricsRelay
from flowctl_airflow.operators.driver_log import (
    DriverLogHook,
    LevelReader,
    quiet_driver_conf,
    relay_line,
)
from flowctl_airflow.run_conf import refuse_unknown_conf

if TYPE_CHECKING:
    from airflow.sdk import Context
    from pydantic import JsonValue

    from flowctl.adapters.control_plane import ControlPlane

SPARK_JOBS_DIR = Path(__file__).resolve().parents[3] / "spark_jobs"
#: The drivers' log4j2 configuration: warnings and errors only, from the JVM's start.
DRIVER_LOG4J = SPARK_JOBS_DIR / "log4j2.properties"
#: The Spark binary the operator runs: ``spark-submit``, detached from the task.
DETACHED_SUBMIT = SPARK_JOBS_DIR / "spark-submit-detached"
COLOURS = ("blue", "green")
#: Seconds between two looks at a followed topology (its log, its process, its state).
POLL_S = 1.0
#: A reattaching task relays at most this much of the driver's log written before it.
REATTACH_LOG_BYTES = 256 * 1024
#: Seconds a topology on another host may show no heartbeat before its task gives up on it.
LOST_AFTER_S = 30.0
#: Seconds a task waits for its driver's process to end after its final state.
EXIT_WAIT_S = 60.0
#: Seconds ``on_kill`` waits after SIGTERM to the driver before SIGKILL.
KILL_GRACE_S = 10.0


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
        ``<pipeline>-<colour>-<run id>-<try>``. A retry that reattaches keeps its try's
        id; one that submits again while the given id is taken registers ``<id>-<try>``.
        (templated)
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
    :param spark_binary: the ``spark-submit`` to run (default ``spark-submit``); it is
        started through ``spark_jobs/spark-submit-detached``.
    Other keyword arguments go to ``SparkSubmitOperator`` (``conn_id`` is the
    Spark connection, ``spark_default`` by default; ``durable=False`` turns the
    reattaching off: every try submits a new topology).
    """

    #: The task_state_store key of the followed topology (renaming it strands running tries).
    external_id_key = "flowctl_topology"

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
        spark_binary: str | None = None,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("name", f"flowctl-{pipeline}")
        super().__init__(
            application=application or default_application(pipeline),
            spark_binary=str(DETACHED_SUBMIT),
            **kwargs,
        )
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
        self.submit_binary = spark_binary or "spark-submit"
        self._database_url: str | None = None
        self._driver: DetachedDriver | None = None

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
            # the detaching launcher runs flowctl's keeper with this interpreter
            "FLOWCTL_PYTHON": sys.executable,
            SPARK_SUBMIT_ENV: self.submit_binary,
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

    def _plane(self) -> ControlPlane:
        return FlowctlDbHook(self.flowctl_conn_id).get_control_plane()

    def execute(self, context: Context) -> None:
        refuse_unknown_conf(context)  # before any Spark start or reattach
        self._validated_colour()
        self._validated_parallelism()
        self._validated_standby()
        self._database_url = FlowctlDbHook(self.flowctl_conn_id).sqlalchemy_url
        self.execute_resumable(context)

    # -- ResumableJobMixin: the external job is the topology and its detached driver -------

    def _new_topology_id(self, plane: ControlPlane, context: Context) -> str:
        """The id of a topology about to be submitted (see ``topology_id``)."""
        from flowctl.adapters.control_plane import UnknownTopology

        try_number = context["ti"].try_number
        if not self.topology_id:
            return f"{self.pipeline}-{self.colour}-{_slug(context['run_id'])}-{try_number}"
        if try_number <= 1:  # a first try keeps the id; a taken one is the job's clear error
            return self.topology_id
        try:
            plane.get_topology(self.topology_id)
        except UnknownTopology:
            return self.topology_id
        return f"{self.topology_id}-{try_number}"

    def _free_colour(self, plane: ControlPlane) -> str:
        """A warm standby's colour: the slot the ACTIVE topology does not hold, so that the
        replacement that takes it reads blue -> green (or back), never blue -> blue. A
        standby given its own ``topology_id`` keeps the colour it was given."""
        held = {t.colour for t in plane.topologies(self.pipeline, states=["ACTIVE"])}
        if self.colour not in held:
            return self.colour
        free = next((c for c in COLOURS if c not in held), self.colour)
        self.log.info("warm standby: colour %s (the ACTIVE topology holds %s)", free, self.colour)
        return free

    def submit_job(self, context: Context) -> dict[str, Any]:
        """Start the topology's driver detached; return what finds it again."""
        parallelism = self._validated_parallelism()
        standby = self._validated_standby()
        run_id = context["run_id"]
        plane = self._plane()
        if standby and not self.replaces and not self.topology_id:
            self.colour = self._free_colour(plane)
        topology_id = self._new_topology_id(plane, context)
        if not standby and (conflict := plane.admission_conflict(self.pipeline, topology_id)):
            # Every retry would start a driver only to be refused the same way.
            raise AirflowFailException(conflict)
        self.topology_id = topology_id
        directory = drivers_dir(Settings.from_env().home) / topology_id
        self.env_vars = {
            **(self.env_vars or {}),
            **self._job_env(),
            DRIVER_DIR_ENV: str(directory),
        }
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
        if standby:
            self.log.info(
                "standby: %s will report READY and admit nothing until activated%s",
                topology_id,
                f" (it replaces {self.replaces})" if self.replaces else "",
            )
        self.log.info(
            "submitting topology %s: pipeline=%s colour=%s "
            "parallelism=%d (stop it with `flowctl stream stop %s`)",
            topology_id,
            self.pipeline,
            self.colour,
            parallelism,
            topology_id,
        )
        self._hook = self._get_hook()
        self._hook.submit(self.application)
        driver = DetachedDriver.load(directory)
        if driver is None:
            raise AirflowException(f"spark-submit left no driver record in {directory}")
        return {"topology_id": topology_id, **driver.to_json()}

    def _followed(self, external_id: JsonValue) -> tuple[str, DetachedDriver]:
        if not isinstance(external_id, dict) or not external_id.get("topology_id"):
            raise ValueError(
                f"{self.external_id_key}={external_id!r} is not a followed topology "
                "(a mapping with topology_id and the driver's record)"
            )
        return str(external_id["topology_id"]), DetachedDriver.from_json(external_id)

    def get_job_status(self, external_id: JsonValue, context: Context) -> str:
        from flowctl.adapters.topology_driver import topology_status

        topology_id, driver = self._followed(external_id)
        return topology_status(self._plane(), topology_id, driver)

    def is_job_active(self, status: str) -> bool:
        return is_running(status)

    def is_job_succeeded(self, status: str) -> bool:
        return status == "STOPPED"

    def get_job_result(self, external_id: JsonValue, context: Context) -> None:
        return None

    def poll_until_complete(self, external_id: JsonValue, context: Context) -> None:
        """Relay the driver's log into the task log until the topology ends; fail unless
        it ended STOPPED."""
        from flowctl.adapters.topology_driver import topology_status

        topology_id, driver = self._followed(external_id)
        self.topology_id, self._driver = topology_id, driver
        context["ti"].xcom_push(key="topology_id", value=topology_id)
        plane = self._plane()
        reader = LevelReader()
        tail: LogTail | None = None
        if driver.local:
            tail = LogTail.last(driver.log_path, REATTACH_LOG_BYTES)
            if tail.offset:
                self.log.info("the driver's log from %s on (all of it: %s)", tail.offset, tail.path)
        else:
            self.log.warning(
                "topology %s runs on %s, not here: following it through the control plane "
                "(its log: %s on that host)",
                topology_id,
                driver.host,
                driver.log_path,
            )
        relay = self._start_metrics_relay(topology_id)
        lost_since: float | None = None
        try:
            while True:
                for line in tail.lines() if tail else ():
                    relay_line(self.log, reader, line)
                status = topology_status(plane, topology_id, driver)
                if status == "LOST" and not driver.local:
                    # another host's driver: only its heartbeat speaks; give it a while
                    lost_since = lost_since or time.monotonic()
                    if time.monotonic() - lost_since < LOST_AFTER_S:
                        status = "UNHEARD"
                else:
                    lost_since = None
                if status != "UNHEARD" and not is_running(status):
                    break
                time.sleep(POLL_S)
            # The job records its final state, then shuts Spark down: its last lines follow.
            deadline = time.monotonic() + EXIT_WAIT_S
            while tail and driver.keeper_alive() and time.monotonic() < deadline:
                for line in tail.lines():
                    relay_line(self.log, reader, line)
                time.sleep(POLL_S)
            for line in tail.rest() if tail else ():
                relay_line(self.log, reader, line)
        finally:
            if relay is not None:
                relay.stop()
        if status == "STOPPED":
            self.log.info("topology %s ended cleanly", topology_id)
            return
        code = driver.exit_code()
        raise AirflowException(
            f"topology {topology_id} ended {status}"
            + (f" (spark-submit exit code {code})" if code is not None else "")
            + f"; its driver's log: {driver.log_path}"
        )

    def _get_hook(self) -> SparkSubmitHook:
        """The provider's hook, relaying the launcher's lines tidied and levelled
        (see ``driver_log``)."""
        return DriverLogHook.adopt(super()._get_hook())

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
        """Ask the topology to stop cleanly; kill its driver only if it does not.

        The driver runs detached: Airflow's kill of the task's process group does not
        reach it, and a ``stop`` already sent is carried out even if this task is
        killed before the topology has stopped.
        """
        from flowctl.adapters.control_plane import TERMINAL_STATES

        if not self.topology_id or not self._database_url:
            return
        try:
            plane = FlowctlDbHook(self.flowctl_conn_id).get_control_plane()
            plane.send_signal(self.topology_id, "stop")
            self.log.info(
                "sent stop to %s; waiting up to %.0fs", self.topology_id, self.stop_timeout
            )
            deadline = time.monotonic() + self.stop_timeout
            while time.monotonic() < deadline:
                topo = plane.get_topology(self.topology_id)
                if topo.state in TERMINAL_STATES:
                    self.log.info("topology %s is %s", self.topology_id, topo.state)
                    return
                time.sleep(1.0)
            self.log.warning("topology %s did not stop in time: killing", self.topology_id)
        except Exception:
            self.log.exception("could not stop %s cleanly; killing its driver", self.topology_id)
        self._kill_driver()

    def _kill_driver(self) -> None:
        driver = self._driver
        if driver is None or not driver.kill(signal.SIGTERM):
            return
        deadline = time.monotonic() + KILL_GRACE_S
        while driver.keeper_alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        driver.kill(signal.SIGKILL)
