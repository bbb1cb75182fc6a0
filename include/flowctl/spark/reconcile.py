"""Reconcile a pipeline: recompute its results from the Kafka log and compare (PySpark batch).

What is compared is only what is *durable*, so a running stream never causes a
false alarm. In ONE database snapshot (a repeatable-read transaction), the job
reads the Eden checkpoint (``offsets``), the durable tuple outcomes
(``applied_ranges``) and what the pipeline stored (``DEFINITION.stored``): the
flusher writes all three in one transaction, so the snapshot is a consistent
cut. The Kafka log is immutable, so the records behind that cut can be read
later, in parallel: one Spark task per chunk of offsets reads its exact range
with :func:`flowctl.adapters.kafka_log.read_range` inside ``mapPartitions``.

Each Eden record is classified by the innermost durable row covering its
offset (docs/flow-control.md, :mod:`flowctl.adapters.applied`):

- ``applied`` row, or no row below the checkpoint (the direct sink advances the
  checkpoint without rows): its result is in the database -> **counted**;
- ``dlq`` row: it went to the dead-letter topic, nothing was stored ->
  **excluded and reported** (``dlq``);
- ``replayed`` row with no nested row for this record: it waits in a replay
  topic; a replay is applied under the record's *original* coordinates (a
  nested one-record row), so until then it is not durable -> **excluded and
  reported** (``pending_replay``). Replayed records are therefore counted once,
  under their Eden offset, never from the replay topics;
- beyond the checkpoint with no row: not durable yet -> not read;
- inside a range skipped as lost (``skipped_ranges``, ``[topics] on_data_loss = "skip"``):
  gone from the log before it was processed -> not read, **excluded and listed**
  (``skipped``), so the comparison stays exact on what remains.

Reconcile also prints what is **not durable yet**: per partition, the log's end minus the
durable checkpoint. When that part has not moved for a while, the stream is stuck, not
busy (:func:`~flowctl.spark.reconcile_waiting.stalled`): the report says so and the job
exits 4, naming the partitions.

The reference is the definition's ``reference(values)`` of the counted records,
or its ``reference_records(records)`` when it has one (a result that depends on
a record's Kafka timestamp: clickstream's lateness; see
:func:`flowctl.pipelines.base.reference_of`). Each task computes it for its chunk
and the driver merges the partial results key by key (numbers add, nested
mappings merge): exact for counts. A definition whose reference has other values
(not additive) is computed once on the driver from the counted records instead.
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowctl.spark.reconcile_waiting import STALL_MINUTES, stalled, waiting

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from flowctl.pipelines.base import PipelineDefinition
    from flowctl.pipelines.sinks import ResultStore

log = logging.getLogger("flowctl.reconcile")

#: Outcome classes of a record (see the module docstring).
COUNTED, DLQ, PENDING, NOT_DURABLE = "counted", "dlq", "pending_replay", "not_durable"
#: Offsets without a record (transaction markers, compaction): counted apart, never read.
GAP = "gap"
SKIPPED = "skipped"


class ReconcileMismatch(AssertionError):
    """The stored results differ from the reference; the message lists the first keys."""

    def __init__(self, message: str, report: ReconcileReport) -> None:
        super().__init__(message)
        self.report = report


@dataclass(frozen=True)
class Chunk:
    """One Spark task's work: Eden offsets ``[start, end)`` of one partition, and its rows."""

    topic: str
    partition: int
    start: int
    end: int
    checkpoint: int
    rows: tuple[tuple[int, int, str], ...]  # (start, end, outcome) overlapping the chunk


@dataclass(frozen=True)
class Snapshot:
    """The durable cut read in one transaction."""

    checkpoints: dict[int, int]
    rows: dict[int, list[tuple[int, int, str]]]
    stored: Mapping[str, Any]
    #: ``{partition: [(first, end), ...]}`` skipped as lost (never read: gone from the log).
    skipped: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    #: When a checkpoint of the topic last moved (``None``: never).
    progressed_at: dt.datetime | None = None


@dataclass
class ReconcileReport:
    """What was compared and what differed."""

    pipeline: str
    records: dict[str, int] = field(default_factory=dict)  # per outcome class
    dlq_offsets: list[str] = field(default_factory=list)  # first few, topic/partition/offset
    differences: list[tuple[str, Any, Any]] = field(default_factory=list)  # key, ref, stored
    differing_keys: int = 0
    reference_keys: int = 0
    stored_keys: int = 0
    #: Ranges skipped as lost, as lines (topic, partition, range, by whom, when, why).
    skipped: list[str] = field(default_factory=list)
    #: Per partition, the records past the durable checkpoint (log end - checkpoint).
    not_durable: dict[int, int] = field(default_factory=dict)
    #: Why the stream made no durable progress (``None``: it did, or nothing waits).
    stall: str | None = None

    @property
    def ok(self) -> bool:
        return self.differing_keys == 0


class Classifier:
    """The outcome class of an Eden offset from the durable rows of its partition.

    Rows other than ``replayed`` overlap each other only by nesting (``applied.claim``
    refuses anything else): a one-record ``dlq`` row of a poison record isolated from its
    tuple lies inside the tuple's ``applied`` row; one-record rows of replays nest inside
    their ``replayed`` row. So an offset is classified by its innermost covering
    non-replayed row, else by a covering replayed row, else by the checkpoint.
    """

    def __init__(self, rows: Sequence[tuple[int, int, str]], checkpoint: int) -> None:
        self.checkpoint = checkpoint
        outer: list[tuple[int, int, str]] = []
        nested: list[tuple[int, int, str]] = []
        for row in sorted((r for r in rows if r[2] != "replayed"), key=lambda r: (r[0], -r[1])):
            (nested if outer and row[1] <= outer[-1][1] else outer).append(row)
        self._levels = [(rs, [s for s, _, _ in rs]) for rs in (nested, outer)]
        self._replayed = sorted((s, e) for s, e, o in rows if o == "replayed")
        self._replayed_starts = [s for s, _ in self._replayed]

    def outcome(self, offset: int) -> str:
        for solid, starts in self._levels:  # innermost first
            i = bisect.bisect_right(starts, offset) - 1
            if i >= 0 and offset < solid[i][1]:
                return COUNTED if solid[i][2] == "applied" else DLQ
        j = bisect.bisect_right(self._replayed_starts, offset) - 1
        if j >= 0 and offset < self._replayed[j][1]:
            return PENDING
        return COUNTED if offset < self.checkpoint else NOT_DURABLE


def plan_chunks(topic: str, snapshot: Snapshot, chunk_records: int) -> list[Chunk]:
    """Split every partition's durable span (up to the highest durable offset) into chunks."""
    if chunk_records < 1:
        raise ValueError(f"chunk_records={chunk_records!r} must be >= 1")
    chunks: list[Chunk] = []
    for partition in sorted(set(snapshot.checkpoints) | set(snapshot.rows)):
        checkpoint = snapshot.checkpoints.get(partition, 0)
        rows = sorted(snapshot.rows.get(partition, []))
        end = max([checkpoint, *(e for _, e, _ in rows)])
        for lo, hi in _outside(snapshot.skipped.get(partition, []), end):
            for start in range(lo, hi, chunk_records):
                stop = min(start + chunk_records, hi)
                overlapping = tuple(r for r in rows if r[0] < stop and r[1] > start)
                chunks.append(Chunk(topic, partition, start, stop, checkpoint, overlapping))
    return chunks


def _outside(skipped: Sequence[tuple[int, int]], end: int) -> list[tuple[int, int]]:
    """The spans of ``[0, end)`` outside the ``skipped`` ranges (sorted, disjoint)."""
    spans, position = [], 0
    for first, stop in sorted(skipped):
        if first > position:
            spans.append((position, min(first, end)))
        position = max(position, stop)
    if position < end:
        spans.append((position, end))
    return [(lo, hi) for lo, hi in spans if hi > lo]


def merge_references(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Key-wise sum of partial references; None if a value is neither a number nor a mapping."""

    def add(into: dict[str, Any], part: Mapping[str, Any]) -> bool:
        for key, value in part.items():
            if isinstance(value, Mapping):
                inner = into.setdefault(key, {})
                if not isinstance(inner, dict) or not add(inner, value):
                    return False
            elif isinstance(value, int | float) and not isinstance(value, bool):
                current = into.get(key, 0)
                if isinstance(current, dict):
                    return False
                into[key] = current + value
            else:
                return False
        return True

    merged: dict[str, Any] = {}
    for part in parts:
        if not add(merged, part):
            return None
    return merged


def compare(
    reference: Mapping[str, Any], stored: Mapping[str, Any], first_n: int
) -> tuple[int, list[tuple[str, Any, Any]]]:
    """``(number of differing keys, the first first_n of them sorted)``; absent counts as None."""
    keys = sorted(k for k in set(reference) | set(stored) if reference.get(k) != stored.get(k))
    return len(keys), [(k, reference.get(k), stored.get(k)) for k in keys[:first_n]]


def read_snapshot(database_url: str, pipeline: str, topic: str, store: ResultStore) -> Snapshot:
    """Checkpoints, durable rows and stored results in ONE repeatable-read transaction.

    ``store``'s ``stored(conn, pipeline)`` reads the results (the definition's own or its
    ``[sink]``'s).
    """
    from flowctl.adapters.durable_cut import read_durable_cut

    return Snapshot(*read_durable_cut(database_url, pipeline, topic, store.stored))


def _reference_of_chunks(
    bootstrap: str, definition: PipelineDefinition, collect_records: bool, chunks: Iterator[Chunk]
) -> Iterator[tuple[str, Any]]:
    """Executor side: read each chunk's exact range, classify, reference the counted records.

    ``definition`` is the configured definition object (its ``[params]`` applied), pickled
    to the executors.
    """
    from flowctl.adapters import kafka_log
    from flowctl.pipelines.base import Record, reference_of

    consumer = kafka_log.new_consumer(bootstrap)
    try:
        for chunk in chunks:
            classify = Classifier(chunk.rows, chunk.checkpoint)
            records: list[Record] = []
            tally: dict[str, int] = {}
            dlq: list[str] = []
            for r in kafka_log.read_range(
                consumer, chunk.topic, chunk.partition, chunk.start, chunk.end
            ):
                outcome = classify.outcome(r.offset)
                tally[outcome] = tally.get(outcome, 0) + 1
                if outcome == COUNTED:
                    records.append(Record.of(r))
                elif outcome == DLQ and len(dlq) < 20:
                    dlq.append(f"{chunk.topic}/{chunk.partition}/{r.offset}")
            # Offsets of the chunk no record came from: transaction markers, compacted-away
            # records (docs/flow-control.md, "What is read"); nothing to count, but said.
            gaps = chunk.end - chunk.start - sum(tally.values())
            if gaps:
                tally[GAP] = gaps
            yield "tally", tally
            yield "dlq", dlq
            if collect_records:
                yield "records", records
            else:
                yield "reference", dict(reference_of(definition, records))
    finally:
        consumer.close()


def reconcile(
    spark: SparkSession,
    *,
    pipeline_config: str,
    database_url: str,
    bootstrap: str,
    chunk_records: int = 100_000,
    max_differences: int = 20,
    stall_minutes: float = STALL_MINUTES,
) -> ReconcileReport:
    """Compare the durable reference with the stored results; a report, never a raise
    (also: the skipped ranges, the part not durable yet and whether it is stuck)."""
    from flowctl.pipelines.base import reference_of
    from flowctl.pipelines.config import load_pipeline_config
    from flowctl.pipelines.sinks import result_store

    config = load_pipeline_config(pipeline_config)
    definition = config.pipeline_definition()
    store = result_store(config, definition)  # stored: the definition's own or its [sink]'s
    snapshot = read_snapshot(database_url, config.name, config.eden_topic, store)
    chunks = plan_chunks(config.eden_topic, snapshot, chunk_records)
    log.info(
        "reconciling %s: %d chunks over %d partitions of %s; checkpoints %s",
        config.name,
        len(chunks),
        len({c.partition for c in chunks}),
        config.eden_topic,
        snapshot.checkpoints,
    )

    def run(collect_records: bool) -> list[tuple[str, Any]]:
        if not chunks:
            return []
        work = functools.partial(_reference_of_chunks, bootstrap, definition, collect_records)
        rdd = spark.sparkContext.parallelize(chunks, len(chunks))
        return rdd.mapPartitions(work).collect()

    report = ReconcileReport(config.name)
    report.not_durable, first = waiting(bootstrap, config.eden_topic, snapshot.checkpoints)
    report.stall = stalled(
        snapshot.checkpoints,
        snapshot.progressed_at,
        report.not_durable,
        first,
        dt.datetime.now(dt.UTC),
        stall_minutes * 60.0,
    )
    _report_skipped(report, snapshot, database_url, config.eden_topic)
    out = run(collect_records=False)
    parts = [v for k, v in out if k == "reference"]
    reference = merge_references(parts)
    if reference is None:
        log.info("%s's reference is not additive: computing it once on the driver", config.name)
        out = run(collect_records=True)
        records = [r for k, rs in out if k == "records" for r in rs]
        reference = dict(reference_of(definition, records))
    for kind, value in out:
        if kind == "tally":
            for outcome, n in value.items():
                report.records[outcome] = report.records.get(outcome, 0) + n
        elif kind == "dlq":
            report.dlq_offsets.extend(value[: max(0, 20 - len(report.dlq_offsets))])
    if not chunks:
        reference = dict(reference_of(definition, []))
    report.reference_keys, report.stored_keys = len(reference), len(snapshot.stored)
    report.differing_keys, report.differences = compare(reference, snapshot.stored, max_differences)
    return report


def _report_skipped(
    report: ReconcileReport, snapshot: Snapshot, database_url: str, topic: str
) -> None:
    from flowctl.adapters.data_loss import skipped_ranges

    n = sum(e - f for spans in snapshot.skipped.values() for f, e in spans)
    if n:
        report.records[SKIPPED] = n
        report.skipped = [
            r.describe() for r in skipped_ranges(database_url, report.pipeline, topic)
        ]


def describe(report: ReconcileReport) -> str:
    """The report as log lines: figures, excluded records, the first differences."""
    lines = [
        f"pipeline {report.pipeline}: records by outcome {dict(sorted(report.records.items()))}; "
        f"reference keys {report.reference_keys}, stored keys {report.stored_keys}",
    ]
    if report.records.get(DLQ):
        lines.append(
            f"excluded {report.records[DLQ]} dead-lettered record(s) (nothing stored for "
            f"them), e.g. {', '.join(report.dlq_offsets[:5])}"
        )
    if report.records.get(PENDING):
        lines.append(
            f"excluded {report.records[PENDING]} record(s) waiting in a replay topic (not "
            f"durable yet)"
        )
    if report.skipped:
        lines.append(
            f"excluded {report.records.get(SKIPPED, 0)} record(s) lost before processing and "
            f"skipped (on_data_loss = skip):"
        )
        lines.extend(f"  {line}" for line in report.skipped)
    waiting = report.not_durable
    lines.append(
        f"not durable yet: {sum(waiting.values())} record(s) past the checkpoint"
        + (
            " (" + ", ".join(f"partition {p}: {n}" for p, n in sorted(waiting.items())) + ")"
            if waiting
            else ""
        )
    )
    if report.stall is not None:
        lines.append(f"NO DURABLE PROGRESS: {report.stall}")
    if report.ok:
        lines.append("OK: the stored results equal the reference of the durable input")
    else:
        lines.append(
            f"MISMATCH: {report.differing_keys} key(s) differ; first {len(report.differences)} "
            f"(key: reference != stored):"
        )
        lines.extend(f"  {k!r}: {ref!r} != {got!r}" for k, ref, got in report.differences)
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``spark_jobs/reconcile.py``: 0 when equal, 3 on a mismatch, 4 when
    equal but the stream made no durable progress over a log that has records
    (:func:`~flowctl.spark.reconcile_waiting.stalled`), 2 bad args."""
    import argparse
    import sys

    from flowctl.config import Settings
    from flowctl.pipelines.config import load_pipeline_config
    from flowctl.spark.job import build_session, configure_logging

    parser = argparse.ArgumentParser(
        prog="reconcile.py",
        description="Recompute a pipeline's results from its durable Kafka log and compare.",
    )
    parser.add_argument("--pipeline-config", default="wordcount", help="pipeline name or path")
    parser.add_argument(
        "--max-differences", type=int, default=20, help="differing keys to print (default 20)"
    )
    parser.add_argument(
        "--chunk-records", type=int, default=100_000, help="offsets per Spark task (default 100000)"
    )
    parser.add_argument(
        "--stall-minutes",
        type=float,
        default=STALL_MINUTES,
        help=(
            "exit 4 when records past the durable checkpoint were written longer ago than this "
            f"and no checkpoint moved within it (default {STALL_MINUTES:g})"
        ),
    )
    args = parser.parse_args(argv)
    configure_logging()
    if args.max_differences < 1 or args.chunk_records < 1:
        log.error("--max-differences and --chunk-records must be >= 1")
        return 2
    if not args.stall_minutes > 0 or args.stall_minutes == float("inf"):
        log.error("--stall-minutes=%r must be a number > 0", args.stall_minutes)
        return 2
    settings = Settings.from_env()
    # The pipeline's name, not the config's path, names the Spark application (and its UI).
    pipeline = load_pipeline_config(args.pipeline_config).name
    spark = build_session(f"flowctl-reconcile-{pipeline}")
    spark.sparkContext.setLogLevel("WARN")
    try:
        report = reconcile(
            spark,
            pipeline_config=args.pipeline_config,
            database_url=settings.resolved_database_url,
            bootstrap=settings.kafka_bootstrap,
            chunk_records=args.chunk_records,
            max_differences=args.max_differences,
            stall_minutes=args.stall_minutes,
        )
    finally:
        spark.stop()
    text = describe(report)
    if report.ok and report.stall is None:
        log.info("%s", text)
        return 0
    log.error("%s", text)
    print(text, file=sys.stderr)
    return 3 if not report.ok else 4
