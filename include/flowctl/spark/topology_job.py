"""What every stream job is, from registration to a clean stop: :class:`TopologyJob`.

Two jobs derive from it, chosen by the pipeline's ``[flow] mode``
(:func:`flowctl.spark.entry.make_job`): the flow-controlled
:class:`~flowctl.spark.flow.job.FlowStreamJob` and the plain
:class:`~flowctl.spark.job.StreamJob`. Each brings its query (source and batch) and
its signals; this class holds what they share.

A job loads the pipeline config, ensures the schema and topics, registers the
topology (STARTING), starts the query, loops (signals, progress lines; the heartbeat
has its own thread, :mod:`flowctl.spark.heartbeat`) and on ``stop`` or SIGTERM stops
between batches, records STOPPED, deletes its Spark checkpoint and returns 0; if the
query fails: FAILED, the cause in the log, return 1. Log lines go to stderr, which
becomes the Airflow task log.

Killing spark-submit's JVM takes the Spark context down at once: the driver then records
FAILED (or nothing, under SIGKILL); the durable offsets stay consistent and a rerun
resumes from them.
"""

from __future__ import annotations

import abc
import logging
import os
import shutil
import sys
import threading
import time
from typing import TYPE_CHECKING

from flowctl.config import Settings
from flowctl.core.log_pacing import QUIET_EVERY_S
from flowctl.pipelines.health_callback import HealthCallback
from flowctl.spark.executor_watch import watch_session
from flowctl.spark.heartbeat import Heartbeat
from flowctl.spark.job_args import JobArgs, default_topology_id
from flowctl.spark.job_reports import BatchProgress, JobReports
from flowctl.spark.niceness import yield_shutdown
from flowctl.spark.startup import SessionStarter, StartupClock

if TYPE_CHECKING:
    from kafka import KafkaConsumer
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery
    from pyspark.sql.streaming.readwriter import DataStreamReader

log = logging.getLogger("flowctl.job")

#: Seconds between two lines of Spark's micro-batch phases (:mod:`flowctl.spark.progress`).
PHASES_EVERY_S = QUIET_EVERY_S
#: Seconds without a finished batch before the job says so (then once a minute).
NO_BATCH_AFTER_S = 10.0


#: The Spark SQL setting that chooses how a streaming query writes its offset and commit logs.
CHECKPOINT_FILE_MANAGER_KEY = "spark.sql.streaming.checkpointFileManagerClass"
#: Hadoop's ``FileSystem`` API for them, not Spark's default ``FileContext`` one. Every batch
#: writes two log files, each a temporary file renamed into place. Through ``FileContext``
#: each rename first asks whether the file is a symbolic link, and without Hadoop's native
#: library (the pip-installed Spark has none) the local file system answers by running
#: ``readlink`` in a child process of the driver JVM; ``FileSystem.rename`` renames directly.
#: Measured on a rate-source query at a 250 ms trigger, 2 cores (bench/README.md, "The
#: checkpoint's renames"): ``walCommit`` 31 -> 8 ms and ``commitOffsets`` 35 -> 10 ms p50.
#: What ``FileContext`` adds is an atomic rename that refuses an existing target; a
#: topology's checkpoint directory has one writer (its own query: each topology id has its
#: own directory), so the check-then-rename of ``FileSystem`` loses nothing here.
CHECKPOINT_FILE_MANAGER = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)


def build_session(app_name: str) -> SparkSession:
    """A SparkSession tuned for small local clusters (see DESIGN "Measured on this machine")."""
    from pyspark.sql import SparkSession

    # Local executors must run the driver's interpreter (the one with flowctl installed).
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    cores = os.cpu_count() or 2
    spark = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.python.worker.reuse", "true")
        .config("spark.ui.showConsoleProgress", "false")
        # An ephemeral port for the driver's web UI (its address is logged at start): two
        # drivers run at once in every replacement, and the second warned "Service
        # 'SparkUI' could not bind on port 4040" before it took 4041.
        .config("spark.ui.port", "0")
        # The session runs streaming queries only, where AQE does not apply: left on, Spark
        # warns "spark.sql.adaptive.enabled is not supported in streaming" at every start.
        .config("spark.sql.adaptive.enabled", "false")
        .config(CHECKPOINT_FILE_MANAGER_KEY, CHECKPOINT_FILE_MANAGER)
        .getOrCreate()
    )
    # Stopping a query cancels its job group; between micro-batches the group has no job and
    # the DAGScheduler warns "Failed to cancel job group" at every clean stop. Not a fault.
    jvm = spark.sparkContext._jvm
    if jvm is None:  # a Spark Connect session has no JVM gateway; the jobs run classic Spark
        raise RuntimeError("the Spark session has no JVM gateway (a Spark Connect session?)")
    jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(
        "org.apache.spark.scheduler.DAGScheduler", jvm.org.apache.logging.log4j.Level.ERROR
    )
    # On a cluster, a job that gets no executor says so (flowctl.spark.executor_watch).
    watch_session(spark)
    return spark


class TopologyJob(JobReports, abc.ABC):
    """One run of a stream topology; :meth:`run` returns the process exit code.

    A job supplies its query (:meth:`_start_query`, :meth:`_on_batch`) and its signals
    (:meth:`_handle_signals`); the hooks below :meth:`run` do nothing unless it has work
    there.
    """

    #: The last batch whose Spark phases were logged (set when the loop starts).
    _phases_after: int

    def __init__(self, args: JobArgs, settings: Settings) -> None:
        from flowctl.adapters.control_plane import ControlPlane
        from flowctl.pipelines.config import load_pipeline_config

        self.args = args
        self.settings = settings
        self.config = load_pipeline_config(args.pipeline_config)
        self.database_url = settings.resolved_database_url
        self.control = ControlPlane(self.database_url)
        self.parallelism = args.parallelism or self.config.parallelism
        if not self.config.min_parallelism <= self.parallelism <= self.config.max_parallelism:
            raise ValueError(
                f"--parallelism={self.parallelism} is outside [{self.config.min_parallelism}, "
                f"{self.config.max_parallelism}] of {self.config.source}"
            )
        self.topology_id = args.topology_id or default_topology_id(self.config.name, args.colour)
        self.alerts = HealthCallback(
            self.config.name, self.topology_id, self.config.on_health_callback
        )
        self.checkpoint_dir = args.checkpoint_dir or str(
            settings.home / "checkpoints" / self.topology_id
        )
        self.progress = BatchProgress()
        self._terminate = threading.Event()
        self._lag_consumer: KafkaConsumer | None = None
        self._lag_lock = threading.Lock()
        #: Written from its own thread: a stop or a drain that waits on a long micro-batch
        #: must not make the topology look dead (:mod:`flowctl.spark.heartbeat`).
        self.heartbeat = Heartbeat(
            lambda: self.control.heartbeat(self.topology_id), self.topology_id
        )
        self.final_state: str | None = None  # STOPPED or FAILED, once recorded
        self.startup = StartupClock(self.topology_id)
        self.startup.mark("job built (imports, config)")

    # -- pieces -----------------------------------------------------------------------------

    def _prepare(self) -> None:
        from flowctl.adapters import kafka_log

        self.control.ensure_schema()
        kafka_log.ensure_topics(
            self.settings.kafka_bootstrap, {self.config.eden_topic: self.config.partitions}
        )
        self.control.register_topology(
            self.topology_id,
            self.config.name,
            self.args.colour,
            self.parallelism,
            airflow_run_id=self.args.airflow_run_id,
            warm_standby=self.args.warm_standby,
        )
        log.info(
            "topology %s registered: pipeline=%s colour=%s parallelism=%d topic=%s db=%s",
            self.topology_id,
            self.config.name,
            self.args.colour,
            self.parallelism,
            self.config.eden_topic,
            self._safe_db_url(),
        )

    def _safe_db_url(self) -> str:
        from flowctl.adapters.db import masked_url

        return masked_url(self.database_url)

    @abc.abstractmethod
    def _start_query(self, spark: SparkSession) -> StreamingQuery:
        """Register the source and start the query into :meth:`_write`; the query."""

    @abc.abstractmethod
    def _on_batch(self, df: DataFrame, batch_id: int) -> None:
        """One finished micro-batch (``foreachBatch``): record its progress."""

    @abc.abstractmethod
    def _handle_signals(self) -> int | None:
        """Act on the pending signals; the id of a pending ``stop`` signal, if any."""

    def _read_stream(self, spark: SparkSession, max_rows: int) -> DataStreamReader:
        """The ``flowctl_kafka`` source on this topology's topic, lanes and database, at most
        ``max_rows`` records a batch: what both jobs read (each adds its mode's options)."""
        from flowctl.spark.kafka_source import SOURCE_NAME
        from flowctl.spark.source import FlowctlKafkaDataSource

        spark.dataSource.register(FlowctlKafkaDataSource)
        return (
            spark.readStream.format(SOURCE_NAME)
            .option("bootstrap", self.settings.kafka_bootstrap)
            .option("topic", self.config.eden_topic)
            .option("pipeline", self.config.name)
            .option("database_url", self.database_url)
            .option("lanes", str(self.parallelism))
            .option("max_rows", str(max_rows))
        )

    def _write(self, stream: DataFrame) -> StreamingQuery:
        """Start ``stream`` into this job's ``_on_batch`` on its trigger and checkpoint
        (every job's sink: the jobs differ in their source and their batch).

        Spark keeps the offset and commit logs of ``[stream] spark_batches_to_retain``
        micro-batches: the job restarts from the database's durable checkpoint, so its
        Spark checkpoint only serves the running query."""
        stream.sparkSession.conf.set(
            "spark.sql.streaming.minBatchesToRetain", str(self.config.spark_batches_to_retain)
        )
        return (
            stream.writeStream.queryName(self.topology_id)
            .foreachBatch(self._on_batch)
            .option("checkpointLocation", self.checkpoint_dir)
            .trigger(processingTime=f"{self.config.trigger_interval_s} seconds")
            .start()
        )

    def _stop_query(self, query: StreamingQuery, grace_s: float = 20.0) -> None:
        """Stop between micro-batches when possible (a cut batch is replayed harmlessly anyway)."""
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and query.isActive:
            if not query.status.get("isTriggerActive", False):
                break
            time.sleep(0.05)
        query.stop()

    # -- the run ----------------------------------------------------------------------------

    def run(self, session: SessionStarter | None = None) -> int:
        """Run until stopped; 0 on a requested stop, 1 if it could not start or the query failed.

        ``session``: the SparkSession already being built (``entry.main`` starts it before
        the job's imports); else it is started here, built while :meth:`_prepare` runs.
        """
        session = session or SessionStarter(f"flowctl-{self.topology_id}", build_session)
        try:
            self._prepare()
        except Exception as exc:  # nothing registered yet: only the log can tell
            log.error("topology %s cannot start: %s", self.topology_id, exc, exc_info=True)
            session.discard()
            return 1
        self.startup.mark("registered (schema, topics)")
        self.heartbeat.start()
        spark: SparkSession | None = None
        query = None
        try:
            spark = session.result()
            spark.sparkContext.setLogLevel("WARN")  # keep the task log readable
            self.startup.mark("SparkSession built")
            self.control.set_spark_app_id(self.topology_id, spark.sparkContext.applicationId)
            self._before_query(spark)
            query = self._start_query(spark)
            self.startup.mark("query started")
            state = self._initial_state()
            self.control.set_state(self.topology_id, state)
            self.startup.mark(state)
            log.info(
                "topology %s %s (query %s, checkpoint %s, Spark UI %s)",
                self.topology_id,
                state,
                query.id,
                self.checkpoint_dir,
                spark.sparkContext.uiWebUrl or "off",
            )
            return self._loop(query)
        except BaseException as exc:
            log.error("topology %s failed: %s", self.topology_id, exc, exc_info=True)
            self._set_final("FAILED")
            if isinstance(exc, KeyboardInterrupt | SystemExit):
                raise
            return 1
        finally:
            self.heartbeat.stop()
            if query is not None and query.isActive:
                query.stop()
            self._cleanup()
            if self._lag_consumer is not None:
                self._lag_consumer.close()
            if spark is not None:
                # After STOPPED: the operator does not wait for the JVM's shutdown, and
                # it must not slow the topology that replaced this one (niceness 19).
                yield_shutdown(spark)
                started = time.monotonic()
                spark.stop()
                log.info("Spark stopped in %.2f s", time.monotonic() - started)
            self._drop_spark_checkpoint()

    def _before_query(self, spark: SparkSession) -> None:
        """Work to start beside the query's start (the flow job warms its Python workers)."""

    def _initial_state(self) -> str:
        """The state once the query runs (a flow job in standby reports READY)."""
        return "ACTIVE"

    def _tick(self) -> None:
        """Per-poll work of a subclass (the flow job: control key, metrics, draining)."""

    def _before_stop(self) -> None:
        """After the query stopped on request, before STOPPED (the flow job flushes)."""

    def _cleanup(self) -> None:
        """Whatever the run started besides the query (the flow job's flusher thread)."""

    def _loop(self, query: StreamingQuery) -> int:
        last_idle_log = time.monotonic()
        quiet_s = NO_BATCH_AFTER_S  # the first line after 10 s, then once a minute
        last_phases_log = time.monotonic()
        self._phases_after = -1
        last_db_warning = -1e9
        while True:
            if not query.isActive:
                error = query.exception()
                cause = error if error is not None else "the query ended without a stop request"
                log.error("topology %s: query terminated: %s", self.topology_id, cause)
                self._set_final("FAILED")
                self._record_cause(str(cause))
                return 1
            stop_id = None
            try:
                stop_id = self._handle_signals()
            except Exception as exc:  # the database may be away; the stream goes on
                if time.monotonic() - last_db_warning > 10:
                    last_db_warning = time.monotonic()
                    log.warning(
                        "topology %s: signals unavailable (retrying): %s",
                        self.topology_id,
                        exc,
                    )
            self._tick()
            if stop_id is not None or self._terminate.is_set():
                reason = f"stop signal {stop_id}" if stop_id is not None else "SIGTERM"
                log.info("topology %s: stopping on %s", self.topology_id, reason)
                started = time.monotonic()
                self._log_batch_phases(query)
                self._stop_query(query)
                stopped = time.monotonic()
                self._before_stop()
                self._set_final("STOPPED")
                if stop_id is not None:
                    self.control.mark_signal_handled(stop_id)
                log.info(
                    "topology %s STOPPED after %d batches, %d records (query stopped in %.2f "
                    "s, then %.2f s to flush and record the state)",
                    self.topology_id,
                    self.progress.batches,
                    self.progress.records,
                    stopped - started,
                    time.monotonic() - stopped,
                )
                return 0
            now = time.monotonic()
            if now - last_phases_log >= PHASES_EVERY_S:
                last_phases_log = now
                self._log_batch_phases(query)
            with self.progress.lock:
                idle_for = now - self.progress.last_batch_at
            if idle_for > NO_BATCH_AFTER_S and now - last_idle_log >= quiet_s:
                last_idle_log, quiet_s = now, QUIET_EVERY_S
                self._report_no_batch(idle_for)
            self._terminate.wait(self.args.poll_seconds)

    def _drop_spark_checkpoint(self) -> None:
        """Delete the query's Spark checkpoint after a clean stop, unless ``--checkpoint-dir``
        chose it: topology ids are unique and every job starts from the database's durable
        checkpoint, so nothing reads it again, and one directory per topology would pile up
        with every restart and replacement. A failed topology's stays for its post-mortem."""
        if self.final_state != "STOPPED" or self.args.checkpoint_dir is not None:
            return
        try:
            shutil.rmtree(self.checkpoint_dir)
        except FileNotFoundError:
            return
        except OSError as exc:
            log.warning("could not delete the Spark checkpoint %s: %s", self.checkpoint_dir, exc)
            return
        log.info("deleted the Spark checkpoint %s (stopped cleanly)", self.checkpoint_dir)

    def _record_cause(self, error: str) -> None:
        """Store why the query failed, for the metrics page: the planner's cause (records
        lost, a read error that persisted) when it raised one, else the error's first line."""
        from flowctl.adapters.data_loss import record_cause
        from flowctl.core.data_loss import failure_cause

        cause = failure_cause(error)
        if cause is not None:
            log.error("topology %s FAILED: %s", self.topology_id, cause)
        else:
            cause = next((line.strip() for line in error.splitlines() if line.strip()), error)
        try:
            record_cause(self.database_url, self.topology_id, cause)
        except Exception:  # the database may be the reason we are failing
            log.exception("could not record the cause of %s's failure", self.topology_id)

    def _set_final(self, state: str) -> None:
        self.heartbeat.stop()  # a topology in a final state never beats again
        self.final_state = state
        try:
            self.control.set_state(self.topology_id, state)
        except Exception:  # the database may be the reason we are failing
            log.exception("could not record state %s for %s", state, self.topology_id)
        if state == "FAILED":
            self.alerts.failed("see the stream task's log", time.time())

    def request_stop(self, *_: object) -> None:
        """SIGTERM handler: stop like a ``stop`` signal, from the control loop."""
        self._terminate.set()


def configure_logging() -> None:
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("kafka", "py4j"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
