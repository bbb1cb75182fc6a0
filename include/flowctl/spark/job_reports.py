"""What a stream job tells the reader of its log between its batches.

The lag behind the log, the "no batch finished" line and Spark's micro-batch
phases: reporting only, never a reason for the job to stop. A mixin of
:class:`flowctl.spark.topology_job.TopologyJob`, which holds the state these read
(``settings``, ``config``, ``control``, ``progress``, the lag consumer); the batch thread
fills :class:`BatchProgress`, the control loop reads it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from flowctl.spark.progress import batch_phases

if TYPE_CHECKING:
    from kafka import KafkaConsumer
    from pyspark.sql.streaming.query import StreamingQuery

    from flowctl.adapters.control_plane import ControlPlane
    from flowctl.config import Settings
    from flowctl.pipelines.config import PipelineConfig

log = logging.getLogger("flowctl.job")


class BatchProgress:
    """Per-batch reports handed from the foreachBatch thread to the control loop."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches = 0
        self.records = 0
        self.last_batch_at = time.monotonic()


class JobReports:
    """The job's reporting lines (see the module docstring)."""

    settings: Settings
    config: PipelineConfig
    control: ControlPlane
    progress: BatchProgress
    topology_id: str
    _lag_consumer: KafkaConsumer | None
    _lag_lock: threading.Lock
    _phases_after: int

    def _lag(self) -> int | None:
        """Records in the log not yet in the durable checkpoint (None if Kafka is unreachable)."""
        from flowctl.adapters import kafka_ends, kafka_log

        try:
            with self._lag_lock:  # a KafkaConsumer is not thread-safe: batch thread vs loop
                if self._lag_consumer is None:
                    self._lag_consumer = kafka_log.new_consumer(self.settings.kafka_bootstrap)
                latest = kafka_ends.latest_offsets(self._lag_consumer, self.config.eden_topic)
        except Exception as exc:  # lag is informative only; never fail a batch over it
            log.warning("lag unknown: %s", exc)
            with self._lag_lock:  # a consumer stuck after a broker or worker loss: a new one
                consumer, self._lag_consumer = self._lag_consumer, None
            kafka_log.close_quietly(consumer)
            return None
        committed = self.control.committed_offsets(self.config.name, self.config.eden_topic)
        return int(sum(max(0, n - committed.get(p, 0)) for p, n in latest.items()))

    def _log_batch_phases(self, query: StreamingQuery) -> None:
        """One line: Spark's micro-batch phases since the last line (:mod:`.progress`)."""
        try:
            self._phases_after, phases = batch_phases(query.recentProgress, self._phases_after)
        except Exception as exc:  # a diagnostic: never let it stop the loop
            log.debug("reading the query's progress failed: %s", exc)
            return
        if phases:
            log.info(
                "topology %s: Spark micro-batches up to batch %d, ms p50/p99: %s",
                self.topology_id,
                self._phases_after,
                ", ".join(f"{name} {p50:g}/{p99:g}" for name, (p50, p99) in phases.items()),
            )

    def _standing_by(self) -> bool:
        """Whether the topology is a warm standby (READY): its batches wait for activation."""
        try:
            return self.control.get_topology(self.topology_id).state == "READY"
        except Exception:  # the database may be away: the other wordings then
            return False

    def _report_no_batch(self, seconds: float) -> None:
        """No batch finished for ``seconds``: idle if the log holds nothing more, else
        waiting (a first batch, a slow batch: records are there to read)."""
        try:
            lag: int | str | None = self._lag()
        except Exception as exc:  # the database may be away: report, go on
            lag = f"unknown ({type(exc).__name__})"
        with self.progress.lock:
            so_far = f"{self.progress.batches} batches, {self.progress.records} records so far"
        if self._standing_by():  # a warm standby reads nothing until it is activated: one wording
            log.info(
                "topology %s standing by (READY): it reads nothing until a replacement "
                "activates it; %s records wait in the log for the ACTIVE topology (%s)",
                self.topology_id,
                "an unknown number of" if lag is None else lag,
                so_far,
            )
            return
        if lag == 0:
            log.info(
                "topology %s idle: caught up with the log, no batch for %.0f s (%s)",
                self.topology_id,
                seconds,
                so_far,
            )
            return
        log.info(
            "topology %s: no batch finished for %.0f s while %s records wait in the log (%s)",
            self.topology_id,
            seconds,
            "an unknown number of" if lag is None else lag,
            so_far,
        )
