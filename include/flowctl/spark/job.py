"""The plain stream job: the word count straight from the records into the database.

``spark_jobs/<pipeline>_stream.py`` calls :func:`flowctl.spark.entry.main`, which runs
:class:`StreamJob` when the pipeline's ``[flow] mode`` is ``plain``: the word count in
``foreachBatch`` (no windows, no MRWQ, no replay topics), the ``stop`` signal its only
control; the benchmarks' baseline job (``bench/lib/baseline.py``) builds on it. The
flow-controlled job of the default ``flow`` mode is
:class:`~flowctl.spark.flow.job.FlowStreamJob`. What both share (registration, the
heartbeat, the loop, stop and SIGTERM, the exit codes) is
:class:`~flowctl.spark.topology_job.TopologyJob`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from flowctl.config import Settings
from flowctl.spark.job_args import (  # re-exported: the job's command line
    COLOURS,
    JobArgs,
    build_parser,
    default_topology_id,
    parse_args,
)
from flowctl.spark.topology_job import (  # re-exported: every job's session and log
    PHASES_EVERY_S,
    TopologyJob,
    build_session,
    configure_logging,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = [
    "COLOURS",
    "PHASES_EVERY_S",
    "JobArgs",
    "StreamJob",
    "build_parser",
    "build_session",
    "configure_logging",
    "default_topology_id",
    "parse_args",
]

log = logging.getLogger("flowctl.job")


class StreamJob(TopologyJob):
    """One run of a plain topology: the plain ``flowctl_kafka`` source into the word count's
    idempotent sink, one transaction per micro-batch."""

    def __init__(self, args: JobArgs, settings: Settings) -> None:
        super().__init__(args, settings)
        #: Records per micro-batch of the plain query (the baseline may set its own).
        self.max_rows = self.config.max_records_per_batch
        self._ignored_signals: set[str] = set()

    def _on_batch(self, df: DataFrame, batch_id: int) -> None:
        from flowctl.adapters import results
        from flowctl.spark.wordcount_sink import write_batch

        report = write_batch(df, batch_id, self.database_url, self.config.name)
        self.startup.mark("first batch done")
        with self.progress.lock:
            self.progress.batches += 1
            self.progress.records += report.records
            self.progress.last_batch_at = time.monotonic()
            first = self.progress.batches == 1
        # The first batch (the data flows) and a fallback are news; the rest at DEBUG, and
        # then the total and the lag are not read at all.
        level = logging.INFO if first or report.fallback else logging.DEBUG
        if not log.isEnabledFor(level):
            return
        log.log(
            level,
            "batch %d: %d records (applied %d, skipped %d%s) in %.2f s = %.0f records/s; "
            "total counted %d words; lag %s records",
            report.batch_id,
            report.records,
            report.applied,
            report.skipped,
            ", record by record" if report.fallback else "",
            report.seconds,
            report.records_per_s,
            results.total(self.database_url, self.config.name),
            self._lag(),
        )

    def _start_query(self, spark: SparkSession) -> StreamingQuery:
        return self._write(self._read_stream(spark, self.max_rows).load())

    def _handle_signals(self) -> int | None:
        """Return the id of a pending ``stop`` signal, if any; log the kinds not handled yet."""
        for sig in self.control.pending_signals(self.topology_id):
            if sig.kind == "stop":
                return int(sig.id)
            if sig.kind not in self._ignored_signals:
                self._ignored_signals.add(sig.kind)
                log.warning(
                    "signal %s (%d) is not supported by this job; ignored", sig.kind, sig.id
                )
        return None
