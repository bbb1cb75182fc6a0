"""The flow-controlled stream job: the driver side of docs/flow-control.md.

:class:`FlowStreamJob` is a :class:`~flowctl.spark.topology_job.TopologyJob` (registration,
heartbeat, the loop, stop and SIGTERM, exit codes) with what the driver's main process
owns in a flow-controlled topology:

- the MRWQ **flusher** thread (:class:`~flowctl.adapters.mrwq_flusher.FlusherService`):
  it is the only long-lived process of a topology Spark does not restart behind our
  back, so it is where database I/O leaves the processing path (SPEC F). On start it
  first flushes whatever earlier generations left in the MRWQ; a database outage is
  retried with backoff while the lanes keep filling the MRWQ; a gap (lost items) is
  resynced at once and the planner is told to rebuild its spout from the database, which
  dispatches everything not durable again;
- the control key the planner reads every batch (``admit``, ``rebuild``), rewritten
  every poll so it survives a memcached restart;
- ``metrics_windows``: the planner closes one metrics window per ``metrics_window_s``
  and publishes it in memcached; only this process writes it to the database (one row
  per topology per window, SPEC H), so a database outage delays rows, never loses the
  planner's batch;
- the signals: ``activate`` (READY or DRAINED -> ACTIVE: flush, rebuild, admit),
  ``deactivate`` / ``drain`` (ACTIVE -> DRAINING: admit nothing, wait until no tuple is
  in flight, flush the MRWQ -> DRAINED), ``stop`` (flush what it can, STOPPED).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from flowctl.config import Settings
from flowctl.core.clock import MonotonicClock
from flowctl.core.handover import GreenHandover
from flowctl.core.log_pacing import QUIET_EVERY_S
from flowctl.core.metrics_row import MetricsRow
from flowctl.pipelines.sinks import result_store
from flowctl.spark.flow import channels
from flowctl.spark.flow.channels import CallMark, Control, SpoutState
from flowctl.spark.flow.driver_health import DriverHealth
from flowctl.spark.flow.job_flusher import FlusherThread
from flowctl.spark.flow.job_handover import HandoverSides
from flowctl.spark.flow.job_windows import WindowPublishing
from flowctl.spark.flow.lane import WARMUP
from flowctl.spark.job_args import JobArgs
from flowctl.spark.topology_job import TopologyJob

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from flowctl.adapters.handovers import HandoverLog
    from flowctl.adapters.kafka_group_offsets import GroupCheckpoint
    from flowctl.adapters.mrwq_flusher import FlusherService

log = logging.getLogger("flowctl.job")

#: Seconds between status lines in the log (the story between them: state changes,
#: backpressure, replays, failures and signals, each logged when it happens).
STATUS_EVERY_S = QUIET_EVERY_S
#: Seconds between rewrites of the control key (it survives a memcached restart that
#: way) and copies of the planner's closed metrics windows to the database.
UPKEEP_EVERY_S = 1.0
#: A standby topology reports READY after its first warm-up batch (see
#: ``flowctl.spark.flow.planner.WARMUP_EVERY_S``), at once when the log is empty (nothing to
#: warm up with), and after this many seconds in any case (a warm-up that fails).
WARMUP_READY_TIMEOUT_S = 60.0


class FlowStreamJob(FlusherThread, HandoverSides, WindowPublishing, TopologyJob):
    """One run of a flow-controlled topology; :meth:`run` returns the exit code."""

    def __init__(self, args: JobArgs, settings: Settings) -> None:
        from flowctl.adapters.memcached_store import MemcachedStore

        super().__init__(args, settings)
        self.flow = self.config.flow
        self.definition = self.config.pipeline_definition()  # with its [params] applied
        if not callable(getattr(self.definition, "process", None)):
            raise ValueError(
                f"{self.config.source}: definition={self.config.definition!r} has no DEFINITION "
                f"with process(records)"
            )
        # The definition's apply, else its [sink]'s: refused here, before anything starts.
        self.results = result_store(self.config, self.definition)
        self.memcached = settings.memcached_address
        self.store = MemcachedStore(self.memcached)
        self.ns = channels.namespace(self.topology_id)
        self.standby = args.standby
        self.admit = not args.standby
        self.rebuild_no = 0
        self.state_error: BaseException | None = None  # why the planner's state was unread
        #: Rebuilds asked for because MRWQ items were lost, and why the last one was.
        self.gaps = 0
        self.gap: str | None = None
        self.state = "STARTING"
        self.flusher: FlusherService | None = None
        self._flusher_stop = threading.Event()
        self._flusher_thread: threading.Thread | None = None
        self._flusher_lock = threading.Lock()
        # The control loop and the flusher's gap repair both write the control key: each
        # write builds its value under this lock, so a stale rebuild number never lands last.
        self._ctl_lock = threading.Lock()
        self._group_checkpoint: GroupCheckpoint | None = None
        self._last_row_end = 0.0
        self._last_row: MetricsRow | None = None
        self.driver_health = DriverHealth(
            self.topology_id,
            MonotonicClock(),
            stall_after_s=self.config.flow.stall_after_s,
            window_s=self.config.flow.metrics_window_s,
        )
        self._draining_since: float | None = None
        self._drain_signals: set[int] = set()
        self._last_status = 0.0
        self._last_upkeep = -1e9
        self._warned: dict[str, float] = {}
        self.totals: dict[str, int] = {}
        self._batch_ends: collections.deque[float] = collections.deque(maxlen=500)
        self._warming_since: float | None = None
        self._warmed: str | None = None  # why the warm-up is over (set by _on_batch)
        # Overlapped handover (docs/flow-control.md): as blue, the handover whose frontier
        # is still to publish; as green, its state machine, blue's frontier for the planner
        # and the sweep number.
        self._handover_log: HandoverLog | None = None
        self._blue_handover: int | None = None
        self._fence: CallMark | None = None  # the planner's CallMark seen after admission went off
        self._green: GreenHandover | None = None
        self._green_handover: int | None = None
        self.frontier: dict[str, Any] | None = None
        self.sweep_no: int | None = None

    # -- start ------------------------------------------------------------------------------

    def _prepare(self) -> None:
        from flowctl.adapters import kafka_log

        super()._prepare()
        topics = {t: self.config.partitions for t in self.config.replay_topics}
        topics[self.config.dlq_topic] = self.config.partitions
        kafka_log.ensure_topics(self.settings.kafka_bootstrap, topics)
        self._write_ctl(required=True)
        if not self.standby:
            self._start_flusher()
        log.info(
            "topology %s: flow control: %s dispatch, windows [%d, %d] from %d, %s, tuple "
            "timeout %g s, %d attempt(s) then %s; MRWQ at %s flushed at %d items or %g s",
            self.topology_id,
            self.flow.dispatch,
            self.flow.w_min,
            self.flow.w_max,
            self.config.initial_window(self.parallelism),
            f"fixed latency target {self.flow.latency_target_s:g} s"
            if self.flow.rtt == "fixed"
            else "adaptive RTT threshold",
            self.flow.tuple_timeout_s,
            self.flow.max_attempts,
            self.config.dlq_topic,
            self.memcached,
            self.flow.flush_max_length,
            self.flow.flush_update_time_s,
        )

    def _before_query(self, spark: SparkSession) -> None:
        """Warm the Python workers beside the query's start (its first batch is the slow
        one: for a green, the warm-up batch that READY waits for)."""
        from flowctl.spark.flow.preload import warm_workers

        warm_workers(
            spark,
            self.config.definition,
            self.topology_id,
            on_done=lambda: self.startup.mark("Python workers warmed"),
        )

    def _initial_state(self) -> str:
        """ACTIVE, or for a standby topology STARTING until it has warmed up (then READY)."""
        if self.standby:
            self._warming_since = time.monotonic()
            log.info("topology %s: standby, warming up before READY", self.topology_id)
        self.state = "STARTING" if self.standby else "ACTIVE"
        return self.state

    def _check_warm(self, state: SpoutState | None) -> None:
        """STARTING -> READY once a warm-up batch ran (or there is nothing to warm up with)."""
        since = self._warming_since
        if since is None:
            return
        why = self._warmed
        if why is None and state is not None and state.log_empty:
            why = "the log is empty, nothing to warm up with"
        if why is None and time.monotonic() - since > WARMUP_READY_TIMEOUT_S:
            why = f"no warm-up batch within {WARMUP_READY_TIMEOUT_S:g} s"
        if why is None:
            return
        self._warming_since = None
        log.info("topology %s: warm-up over (%s)", self.topology_id, why)
        self._set_state("READY")
        self.startup.mark("READY")

    def _start_query(self, spark: SparkSession) -> StreamingQuery:
        stream = (
            self._read_stream(spark, self.config.max_records_per_batch)
            .option("mode", "flow")
            .option("config", str(self.config.source))
            .option("memcached", self.memcached)
            .option("topology_id", self.topology_id)
            .option("standby", "true" if self.standby else "false")
            .option("slots", str(max(1, int(spark.sparkContext.defaultParallelism))))
            .load()
        )
        # The data source's lookup and schema each run in a Python worker of their own.
        self.startup.mark("source loaded")
        return self._write(stream)

    # -- the planner's channels --------------------------------------------------------------

    def _warn(self, what: str, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._warned.get(what, -1e9) > 10:
            self._warned[what] = now
            log.warning("topology %s: %s failed (retrying): %s", self.topology_id, what, exc)

    def _write_ctl(self, *, required: bool = False) -> None:
        try:
            with self._ctl_lock:
                control = Control(
                    self.admit,
                    self.rebuild_no,
                    self.frontier,
                    self.sweep_no,
                    self.parallelism,
                    gaps=self.gaps,
                    gap=self.gap,
                )
                # Rewritten every second; it expires like the planner's keys once nobody does.
                self.store.set_json(
                    channels.control_key(self.ns), control.encode(), expire_s=channels.STATE_TTL_S
                )
        except Exception as exc:
            if required:
                raise
            self._warn("writing the control key", exc)

    def _spout_state(self) -> SpoutState | None:
        """The planner's last state (``None``: none yet, or :attr:`state_error` says why)."""
        self.state_error = None
        try:
            raw = self.store.get_json(channels.state_key(self.ns))
            return None if raw is None else SpoutState.decode(raw)
        except Exception as exc:
            self.state_error = exc
            self._warn("reading the spout state", exc)
            return None

    def _checkpoint(self) -> dict[int, int] | str:
        try:
            return self.control.committed_offsets(self.config.name, self.config.eden_topic)
        except Exception as exc:
            return f"unknown ({type(exc).__name__})"

    # -- the loop -----------------------------------------------------------------------------

    def _tick(self) -> None:
        try:
            self._tick_once()
        except Exception as exc:  # the database may be away: the stream goes on
            self._warn("the control loop's work", exc)

    def _tick_once(self) -> None:
        # Signals are checked every poll (0.1 s); rewriting the control key (every change
        # is written at once) and copying closed metrics windows can wait a second.
        now = time.monotonic()
        if now - self._last_upkeep >= UPKEEP_EVERY_S:
            self._last_upkeep = now
            self._write_ctl()
            self._publish_metrics()
        state = self._spout_state()
        self._watch_health(state)
        if self.state == "STARTING":
            self._check_warm(state)
        if self._green is not None:
            self._step_handover()
        if self.state == "DRAINING":
            self._publish_frontier(state)
            self._check_drained(state)
        now = time.monotonic()
        if now - self._last_status >= STATUS_EVERY_S and state is not None:
            self._last_status = now
            lanes = state.lanes
            log.info(
                "topology %s %s: windows %s (%s), %d in flight, %d buffered; MRWQ %s items; "
                "backpressure %s; durable checkpoint %s; totals %s",
                self.topology_id,
                self.state,
                [lane["window"] for lane in lanes],
                ",".join(lane["state"] for lane in lanes),
                state.in_flight,
                state.buffered,
                state.mrwq,
                state.levels,
                self._checkpoint(),
                {
                    k: v
                    for k, v in state.counters.items()
                    if k in ("acked", "failed", "timed_out", "replayed", "dlq", "requeued")
                },
            )

    def _check_drained(self, state: SpoutState | None) -> None:
        since = self._draining_since
        if state is None or since is None or state.at <= since:
            return
        if state.admit or state.in_flight or state.pending_batches:
            return
        self._stop_flusher(flush=True)
        self._set_state("DRAINED")
        for signal_id in sorted(self._drain_signals):
            self.control.mark_signal_handled(signal_id)
        self._drain_signals.clear()
        self._draining_since = None

    def _set_state(self, state: str) -> None:
        self.control.set_state(self.topology_id, state)
        log.info("topology %s: %s -> %s", self.topology_id, self.state, state)
        self.state = state

    def _handle_signals(self) -> int | None:
        """Apply pending signals in order; returns the id of a ``stop`` signal, if any."""
        for sig in self.control.pending_signals(self.topology_id):
            if sig.kind == "stop":
                return sig.id
            if sig.id in self._drain_signals:
                continue
            log.info(
                "topology %s: signal %s (%d) in state %s",
                self.topology_id,
                sig.kind,
                sig.id,
                self.state,
            )
            if sig.kind == "activate":
                waiting = self._green is not None
                if self.state in ("STARTING", "READY") and not waiting:
                    self._take_parallelism()
                    if not self._begin_green():
                        self._activate()
                elif self.state in ("DRAINED", "DRAINING"):
                    self._activate()
                self.control.mark_signal_handled(sig.id)
            elif sig.kind in ("deactivate", "drain"):
                if self.state == "ACTIVE":
                    h = self._handovers().for_blue(self.topology_id)
                    if h is not None and h.frontier is None:
                        self._blue_handover = h.id
                    self.admit = False
                    self._write_ctl()
                    self._fence_admission()
                    self._draining_since = time.time()
                    self._set_state("DRAINING")
                if self.state in ("DRAINED", "READY", "STARTING"):
                    self.control.mark_signal_handled(sig.id)
                else:
                    self._drain_signals.add(sig.id)
        return None

    def _activate(self) -> None:
        """READY/DRAINED -> ACTIVE: flush the MRWQ, rebuild (gaps first), admit."""
        self._blue_handover = None  # a rollback: this blue admits again, from the database
        self._start_flusher()
        self.rebuild_no += 1
        self.admit = True
        self._write_ctl()
        for signal_id in sorted(self._drain_signals):  # a drain overtaken by activate
            self.control.mark_signal_handled(signal_id)
        self._drain_signals.clear()
        self._draining_since = None
        self._warming_since = None
        self._set_state("ACTIVE")

    def _on_batch(self, df: DataFrame, batch_id: int) -> None:
        """Count the lanes' status rows (one per tuple) and log the batch in one line."""
        # Planned (the planner's first reads done); the lanes' tasks run in collect().
        self.startup.mark("first batch planned")
        rows = df.collect()
        if rows and all(row["outcome"] == WARMUP for row in rows):
            warmup_errors = {row["error"] for row in rows if row["error"]}
            log.info(
                "batch %d: warm-up, %d record(s) read and processed on %d lane(s) in %.2f s, "
                "results discarded%s",
                batch_id,
                sum(int(row["records"] or 0) for row in rows),
                len(rows),
                max(float(row["rt"] or 0.0) for row in rows),
                f"; errors: {'; '.join(sorted(warmup_errors))}" if warmup_errors else "",
            )
            if self._warmed is None:
                self._warmed = f"warm-up batch {batch_id} ran"
                self.startup.mark("first warm-up batch done")
            return
        counts: dict[str, int] = {}
        records = 0
        rt_max = 0.0
        errors: list[str] = []
        lanes = set()
        for row in rows:
            counts[row["outcome"]] = counts.get(row["outcome"], 0) + 1
            records += int(row["records"] or 0) if row["outcome"] == "acked" else 0
            rt_max = max(rt_max, float(row["rt"] or 0.0))
            lanes.add(row["lane"])
            if row["error"] and len(errors) < 2:
                errors.append(f"{row['tuple_id']}: {row['error']}")
        self.startup.mark("first batch done")
        flusher = self.flusher
        if self.flow.flush_at_batch_end and flusher is not None:
            flusher.batch_ended()
        with self.progress.lock:
            self.progress.batches += 1
            self.progress.records += records
            self.progress.last_batch_at = time.monotonic()
        for k, v in counts.items():
            self.totals[k] = self.totals.get(k, 0) + v
        self._batch_ends.append(time.time())
        # A batch where every tuple was acked is the normal case: after the first one (the
        # data flows) only the others tell a reader of the task log something (failures,
        # replays, the DLQ, errors).
        notable = self.progress.batches == 1 or errors or any(k != "acked" for k in counts)
        log.log(
            logging.INFO if notable else logging.DEBUG,
            "batch %d: %d tuple(s) on %d lane(s): %s; %d records processed; slowest lane %.2f s%s",
            batch_id,
            len(rows),
            len(lanes),
            ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "none",
            records,
            rt_max,
            f"; e.g. {'; '.join(errors)}" if errors else "",
        )

    def _before_stop(self) -> None:
        self.admit = False
        self._write_ctl()
        self._stop_flusher(flush=True)
        self._publish_metrics()

    def _cleanup(self) -> None:
        self._flusher_stop.set()
