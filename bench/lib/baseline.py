"""The baseline: the word count as plain Structured Streaming, the way a user would write it.

The benchmarks (SPEC "Experiments to reproduce") compare the flow-controlled
topology against this job on the same data, in the same run. It is what one
writes without the platform:

- a fixed budget per micro-batch (``ReadMaxRows``, ``--max-records-per-batch``)
  spread evenly over a fixed number of Spark tasks (``--parallelism``): no
  windows, no feedback, no replay topics, no MRWQ;
- database writes directly in ``foreachBatch``: the batch's counts are
  computed on the executors with the pipeline's own counting function and
  added in one transaction together with the per-partition offsets, so a
  replayed batch is skipped (the usual "idempotent sink" recipe; the very
  sink :mod:`flowctl.spark.wordcount_sink` the first stream job used);
- a failure fails the query (no per-record isolation): that is the baseline's
  honest behaviour and what the platform improves on.

Everything else is the stream job's (:class:`flowctl.spark.job.StreamJob`):
registration in the control plane, heartbeats, the ``stop`` signal and
SIGTERM, the exit codes, the log format. So the two jobs differ only in what
is being compared. One metrics row per micro-batch goes to ``metrics_windows``
(records, records/s over the whole batch cycle, end-to-end latency p50/p99
from the records' producer timestamps to the commit, backlog), the same table
the flow-controlled topology writes, so a benchmark reads both the same way.

The source is ``flowctl_kafka`` in its plain mode (the even
:class:`~flowctl.spark.lane_planner.LanePlanner`); Spark's own Kafka source
needs a jar that is not available offline. ``--source rate`` replaces it with
Spark's built-in rate source (:mod:`bench.lib.rate_lines`): the same
budget, tasks and sink without Kafka, the throughput benchmark's ceiling for
Spark's per-batch machinery.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import logging
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any

from flowctl.config import Settings
from flowctl.spark.job import StreamJob, configure_logging
from flowctl.spark.job_args import JobArgs, _positive_int, build_parser, default_topology_id

log = logging.getLogger("flowctl.baseline")

PROG = "wordcount_baseline.py"

#: The definition module the baseline can run: its sink is the word count's.
SUPPORTED_DEFINITION = "flowctl.pipelines.wordcount"
#: ``--source``: the Eden topic through ``flowctl_kafka``, or Spark's rate source.
SOURCES = ("kafka", "rate")


@dataclasses.dataclass(frozen=True)
class BaselineArgs(JobArgs):
    """The stream job's arguments plus the fixed micro-batch budget and the source."""

    max_records_per_batch: int | None = None
    source: str = "kafka"


def _add_max_records(parser: argparse.ArgumentParser) -> None:
    # If the stream job's parser has the flag already, it has the same meaning: keep it.
    with contextlib.suppress(argparse.ArgumentError):
        parser.add_argument(
            "--max-records-per-batch",
            type=_positive_int,
            help="records per micro-batch (default: the config's max_records_per_batch)",
        )


def build_baseline_parser() -> argparse.ArgumentParser:
    """The stream job's command line (same flags, same meaning) plus ``--max-records-per-batch``."""
    parser = build_parser(prog=PROG)
    parser.description = (
        "Run the baseline word count (plain Structured Streaming, direct database "
        "writes) until a stop signal arrives."
    )
    _add_max_records(parser)
    parser.add_argument(
        "--source",
        choices=SOURCES,
        default="kafka",
        help="kafka: the pipeline's Eden topic (default); rate: Spark's rate source, "
        "generated lines of the same shape, offsets under '<eden>.rate' (a benchmark ceiling)",
    )
    return parser


def parse_baseline_args(argv: Sequence[str] | None = None) -> BaselineArgs:
    """Parse a baseline command line."""
    ns = vars(build_baseline_parser().parse_args(argv))
    names = {f.name for f in dataclasses.fields(BaselineArgs)}
    return BaselineArgs(**{k: v for k, v in ns.items() if k in names})


def _observe_timestamps(df: Any, batch_id: int) -> tuple[Any, Any]:
    """``df`` observed for its records' timestamp percentiles, computed by the batch's action.

    ``DataFrame.observe`` rides on the action the sink runs anyway: a second
    action would read the batch from Kafka a second time and distort the very
    throughput the baseline is there to measure.
    """
    from pyspark.sql import Observation
    from pyspark.sql import functions as F

    observation = Observation(f"baseline_batch_{batch_id}")
    millis = F.col("timestamp").cast("double") * 1000
    quantiles = F.array(F.lit(0.01), F.lit(0.5))
    observed = df.observe(
        observation, F.percentile_approx(millis, quantiles, 1000).alias("timestamp_ms")
    )
    return observation, observed


def _latency_ms(
    observed: Mapping[str, Any], committed: dt.datetime
) -> tuple[float | None, float | None]:
    """``(p50, p99)`` of commit time minus record timestamp (the producer's clock), in ms.

    A record's latency falls as its timestamp rises, so latency p99 is
    ``committed`` minus the timestamps' 1st percentile. ``None`` when the
    records carry no timestamps. Approximate (``percentile_approx``, 1/1000).
    """
    stamps = observed.get("timestamp_ms")
    if not stamps or stamps[0] is None or stamps[1] is None:
        return None, None
    now_ms = committed.timestamp() * 1000
    return max(0.0, now_ms - stamps[1]), max(0.0, now_ms - stamps[0])


class BaselineJob(StreamJob):
    """A stream job whose query is the plain one: fixed batches, direct idempotent writes."""

    def __init__(self, args: BaselineArgs, settings: Settings) -> None:
        super().__init__(args, settings)
        if self.config.definition != SUPPORTED_DEFINITION:
            raise ValueError(
                f"{self.config.source}: definition={self.config.definition!r} is not supported "
                f"by the baseline (it runs {SUPPORTED_DEFINITION!r} only)"
            )
        self.max_rows = args.max_records_per_batch or self.config.max_records_per_batch
        self.source = args.source
        if args.topology_id is None:  # tell baseline runs apart in the control plane
            self.topology_id = default_topology_id(f"{self.config.name}-baseline", args.colour)
            if args.checkpoint_dir is None:
                self.checkpoint_dir = str(settings.home / "checkpoints" / self.topology_id)
        self._cycle_started = dt.datetime.now(dt.UTC)

    def _start_query(self, spark: Any) -> Any:
        """The stream job's plain query (``max_rows`` fixed) -> this ``_on_batch``; with
        ``--source rate`` the same sink and trigger behind Spark's rate source."""
        log.info(
            "baseline %s: source %s, %d tasks per batch, at most %d records per batch",
            self.topology_id,
            self.source,
            self.parallelism,
            self.max_rows,
        )
        self._cycle_started = dt.datetime.now(dt.UTC)
        if self.source == "kafka":
            return super()._start_query(spark)
        from bench.lib.rate_lines import rate_records, rate_topic

        stream = rate_records(
            spark, self.max_rows, self.parallelism, rate_topic(self.config.eden_topic)
        )
        return self._write(stream)

    def _lag(self) -> int | None:
        """The Kafka lag; ``None`` behind the rate source, which has no log to lag behind
        (and so no Kafka round trip per batch: the point of that ceiling)."""
        return super()._lag() if self.source == "kafka" else None

    def _on_batch(self, df: Any, batch_id: int) -> None:
        """Apply the batch to the database now, in this thread: the direct write under test."""
        from flowctl.adapters import results
        from flowctl.spark.wordcount_sink import write_batch

        if self.source == "rate":  # its timestamps are synthetic: no latency to observe
            report = write_batch(df, batch_id, self.database_url, self.config.name)
            ended = dt.datetime.now(dt.UTC)
            p50 = p99 = None
        else:
            observation, observed = _observe_timestamps(df, batch_id)
            report = write_batch(observed, batch_id, self.database_url, self.config.name)
            ended = dt.datetime.now(dt.UTC)
            # Only a batch with records ran the action that fills the observation (blocks).
            p50, p99 = _latency_ms(observation.get, ended) if report.records else (None, None)
        started, self._cycle_started = self._cycle_started, ended
        cycle_s = (ended - started).total_seconds()
        lag = self._lag()
        with self.progress.lock:
            self.progress.batches += 1
            self.progress.records += report.records
            self.progress.last_batch_at = time.monotonic()
        try:
            self.control.write_metrics_window(
                self.topology_id,
                started,
                ended,
                admitted=report.records,
                acked=report.records,
                records=report.records,
                records_per_s=report.records / cycle_s if cycle_s > 0 else 0.0,
                latency_p50_ms=p50,
                latency_p99_ms=p99,
                backlog=lag or 0,
            )
        except Exception:  # metrics are informative; the batch itself is applied
            log.warning("batch %d: could not write its metrics row", batch_id, exc_info=True)
        log.info(
            "batch %d: %d records (applied %d, skipped %d%s) in %.2f s = %.0f records/s; "
            "latency p50 %s ms, p99 %s ms; total counted %d words; lag %s records",
            report.batch_id,
            report.records,
            report.applied,
            report.skipped,
            ", record by record" if report.fallback else "",
            report.seconds,
            report.records_per_s,
            "-" if p50 is None else f"{p50:.0f}",
            "-" if p99 is None else f"{p99:.0f}",
            results.total(self.database_url, self.config.name),
            lag,
        )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``bench/jobs/wordcount_baseline.py``: returns the exit code."""
    args = parse_baseline_args(argv)
    configure_logging()
    try:
        job = BaselineJob(args, Settings.from_env())
    except ValueError as exc:
        log.error("cannot start: %s", exc)
        return 2
    signal.signal(signal.SIGTERM, job.request_stop)
    return job.run()
