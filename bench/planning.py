"""The planner's cost per micro-batch, alone: 1, 4 and 16 lanes x 4, 16 and 64 partitions.

Every micro-batch waits for its plan (Spark calls the source's ``latestOffset`` and then
``partitions`` before it starts a task), so the planner's time is on every batch's
critical path. This bench measures it without Spark, so that each cell of the grid is
cheap and nothing else competes with the planning.

What runs, for real: the flow source's reader (``flowctl.spark.flow.reader
.FlowStreamReader``) and everything under it, called as Spark's source runner calls it:
``initialOffset`` once, then per micro-batch ``latestOffset(start, limit)``,
``partitions(start, end)`` and ``commit(end)``: the planner (``spark/flow/planner*.py``,
its ends thread, log guard, health, metrics) and the core (spout, windows, acker,
replay, backpressure chain), against a private Tansu broker (Eden and both replay topics
of the cell's partitions), memcached (call mark, control key, lanes' feedback, the
published state and metrics rows, the MRWQ length) and SQLite (the durable checkpoint
and flusher position, the replay pointer), as in a topology. Batches start every
``trigger_interval_s`` of the pipeline (0.25 s shipped): the admission budget depends
on the time between batches.

What is simulated around it, outside the timing: the lanes (for each lane of a batch,
one feedback entry per tuple, every tuple acked with its acker edge, a round-trip time
and 8 latency samples as a lane reports them, written with the lanes' own
``LaneFeedback`` store) and the MRWQ flusher (the acked ranges claimed and the
checkpoint advanced in SQLite with the flusher's adapters, ``applied.claim`` and
``applied.advance_checkpoint``, after each batch).

Not included: Spark itself (the JVM's side of the source runner protocol, its offset and
commit logs: walCommit and commitOffsets, measured by ``bench.throughput``'s job logs),
the lanes' reading and processing, MRWQ contents (the queue is empty), replays (no tuple
fails) and the driver's work.

Two regimes per cell, each with a planner of its own:

- ``backlog``: the topic holds more records than the batches can take (a drain, as in
  ``bench.throughput``): every batch is full;
- ``tail``: the planner starts at the log's end and, before each batch, ``--tail-records``
  new records per partition arrive: every batch's cut reaches the log's end (as in
  ``bench.latency``), so the planner needs the partitions' exact ends.

The pipeline is the shipped word count renamed, with tuples of 10 records and batches of
at most 1,000 records: a full batch is 100 tuples, as with the shipped 500 and 50,000,
with 50x fewer records to produce (the planner's work is per tuple, lane and partition,
never per record).

Metric: per batch, the wall time of ``latestOffset`` plus ``partitions`` (what a
micro-batch waits for), p50, p99 and max in ms over ``--batches`` batches per regime;
also the planner's own per-phase timings. Target: p99 <= 20 ms in every cell and
regime.

``--readers``: the pipeline's ``[flow] reader`` (the client of the planner's exact-ends
read, and of the lanes', which do not run here), each cell run once per reader, one
after the other, each reader on topics of its own with the same history; the last reader
is the candidate, the first its baseline in the same run (``--readers kafka-python
librdkafka``).

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.planning \\
        [--lanes 1,4,16] [--partitions 4,16,64] [--batches 100] [--tail-batches 50] \\
        [--readers kafka-python [librdkafka]] [--name planning]

Writes bench/results/<name>.json and <name>.png; exits 1 if a cell of the candidate
reader misses the target.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import Platform, pipeline_config, platform_up, produce, unique_name
from bench._experiment import (
    RESULTS,
    BadArgument,
    exit_code,
    experiment_parser,
    percentile,
    pyplot,
    run_experiment,
    save_figure,
    write_result,
)
from flowctl.pipelines.config_sections import KAFKA_PYTHON, LANE_READERS

#: Issue "Past the kafka-python ceiling", item 5: planning per batch within this (ms).
TARGET_P99_MS = 20.0
#: Records per tuple and per batch of the bench's pipeline (a full batch: 100 tuples).
TUPLE_SIZE = 10
BATCH_RECORDS = 1000
#: What a lane reports per tuple besides its outcome (``flowctl.spark.flow.lane``).
RT_S = 0.05


def _lanes_report(feedback: Any, parts: list[Any]) -> list[Any]:
    """Every lane of the batch acks all its tuples (as ``run_lane`` reports them); returns
    the tuples' ranges."""
    from flowctl.core.spout_contract import LaneResult, Outcome
    from flowctl.spark.flow.channels import LaneFeedback
    from flowctl.spark.flow.lane import LATENCY_SAMPLES

    ranges = []
    for part in parts:
        results = tuple(
            LaneResult(
                e.tuple.id,
                Outcome.ACKED,
                xor=e.edge,
                rt=RT_S,
                records=e.tuple.size,
                latencies=(0.1,) * LATENCY_SAMPLES,
            )
            for e in part.entries
        )
        feedback.put(part.seq, part.lane, LaneFeedback(results).encode())
        ranges.extend(e.tuple for e in part.entries)
    return ranges


def _flush(url: str, pipeline: str, ranges: list[Any]) -> None:
    """What the MRWQ flusher makes durable of a batch: its ranges, the checkpoint moved."""
    from flowctl.adapters import applied
    from flowctl.adapters.db import engine_for

    with engine_for(url).begin() as conn:
        applied.claim(conn, pipeline, [applied.Claim(r) for r in ranges])
        applied.advance_checkpoint(conn, pipeline, {r.topic_partition for r in ranges})


def _start_at_end(url: str, pipeline: str, topic: str, ends: dict[int, int]) -> None:
    """A pipeline whose checkpoint starts at the log's end (the ``tail`` regime)."""
    from flowctl.adapters import applied
    from flowctl.adapters.db import engine_for

    with engine_for(url).begin() as conn:
        for p, end in ends.items():
            applied.ensure_checkpoint(conn, pipeline, topic, p, end)


class TailFeed:
    """New records at the log's end before each ``tail`` batch: ``per_partition`` records in
    every partition, acknowledged before the batch is planned (not timed)."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
        from kafka import KafkaProducer

        self.topic = topic
        self.partitions = partitions
        self.per_partition = per_partition
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)

    def feed(self) -> None:
        for p in range(self.partitions):
            for _ in range(self.per_partition):
                self.producer.send(self.topic, b"a tail record of the planning bench", partition=p)
        self.producer.flush(timeout=30)

    def close(self) -> None:
        self.producer.close(timeout=10)


def run_planner(
    plat: Platform,
    work: Path,
    topic: str,
    lanes: int,
    partitions: int,
    batches: int,
    *,
    tail_records: int | None = None,
    reader: str = KAFKA_PYTHON,
) -> dict[str, Any]:
    """One planner over ``topic`` for ``batches`` micro-batches (``tail_records``: the
    ``tail`` regime, that many new records per partition before each batch), its
    ``[flow] reader`` ``reader``."""
    from flowctl.adapters import kafka_ends, kafka_log
    from flowctl.adapters.memcached_store import LaneFeedback as FeedbackStore
    from flowctl.adapters.memcached_store import MemcachedStore
    from flowctl.pipelines.config import load_pipeline_config
    from flowctl.spark.flow.reader import FlowStreamReader
    from flowctl.spark.flow.settings import FlowSettings

    name = unique_name(f"plan{lanes}x{partitions}")
    config = pipeline_config(
        work,
        name,
        partitions=partitions,
        stream={"tuple_size": TUPLE_SIZE, "max_records_per_batch": BATCH_RECORDS},
        flow={"reader": reader},
    )
    config.write_text(config.read_text().replace(f'eden = "{name}.eden"', f'eden = "{topic}"'))
    loaded = load_pipeline_config(str(config))
    kafka_log.ensure_topics(
        plat.bootstrap, {t: partitions for t in (*loaded.replay_topics, loaded.dlq_topic)}
    )
    tail = None
    if tail_records is not None:
        ends = kafka_ends.latest_offsets(plat.bootstrap, topic)
        _start_at_end(plat.database_url, name, topic, ends)
        tail = TailFeed(plat.bootstrap, topic, partitions, tail_records)
    settings = FlowSettings(
        bootstrap=plat.bootstrap,
        topic=topic,
        pipeline=name,
        database_url=plat.database_url,
        memcached=plat.settings.memcached_address,
        topology_id=f"{name}-blue-1",
        lanes=lanes,
        config_path=str(config),
        max_rows=BATCH_RECORDS,
        read_timeout_s=30.0,
        standby=False,
    )
    reader = FlowStreamReader(settings)
    feedback = FeedbackStore(MemcachedStore(settings.memcached), settings.ns)
    costs: list[float] = []
    tuples: list[int] = []
    empty = 0
    trigger = loaded.trigger_interval_s
    try:
        start = reader.initialOffset()
        limit = reader.getDefaultReadLimit()
        planner = reader.planner()
        next_at = time.monotonic()
        while len(costs) < batches:
            if tail is not None:  # new records at the log's end (not timed)
                tail.feed()
            next_at += trigger
            time.sleep(max(0.0, next_at - time.monotonic()))
            t0 = time.perf_counter()
            end = reader.latestOffset(start, limit)
            if end == start:  # nothing admitted: Spark runs no batch and asks again
                empty += 1
                if empty > 10 * batches:
                    raise RuntimeError(f"{name}: the planner admits nothing ({empty} rounds)")
                continue
            parts = reader.partitions(start, end)
            costs.append((time.perf_counter() - t0) * 1000.0)
            tuples.append(sum(len(p.entries) for p in parts))
            _flush(plat.database_url, name, _lanes_report(feedback, parts))
            reader.commit(end)
            start = end
        phases = planner.timings.summary()
    finally:
        reader.stop()
        if tail is not None:
            tail.close()
    return {
        "pipeline": name,
        "batches": len(costs),
        "rounds_without_batch": empty,
        "p50_ms": _round(percentile(costs, 50)),
        "p99_ms": _round(percentile(costs, 99)),
        "max_ms": _round(max(costs)),
        "tuples_per_batch_p50": percentile(tuples, 50),
        "planner_phases_ms": phases,
        "costs_ms": [round(c, 2) for c in costs],
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def plot(path: Path, cells: list[dict[str, Any]]) -> None:
    """p99 per cell and regime, one line per reader and lane count, the target as a line."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 4), sharey=True)
    readers = list(dict.fromkeys(c["reader"] for c in cells))
    for ax, regime in zip(axes, ("backlog", "tail"), strict=True):
        parts = sorted({c["partitions"] for c in cells})
        for reader, style in zip(readers, ("-", "--"), strict=False):
            for lanes in sorted({c["lanes"] for c in cells}):
                ys = [
                    next(
                        (c[regime]["p99_ms"] for c in cells
                         if c["reader"] == reader and c["lanes"] == lanes
                         and c["partitions"] == p and c.get(regime)),
                        None,
                    )
                    for p in parts
                ]  # fmt: skip
                ax.plot(parts, ys, marker="o", linestyle=style, label=f"{reader}, {lanes} lane(s)")
        ax.axhline(TARGET_P99_MS, color="grey", linestyle=":", label="target p99")
        ax.set_xscale("log", base=2)
        ax.set_xticks(parts, [str(p) for p in parts])
        ax.set_xlabel("partitions")
        ax.set_title(f"{regime}: planning p99 per batch")
    axes[0].set_ylabel("ms (latestOffset + partitions)")
    axes[0].legend(fontsize="small")
    save_figure(fig, path)


def _worst(cells: list[dict[str, Any]], reader: str) -> dict[str, Any]:
    """``reader``'s cell and regime of the highest p99 (the cell's figures, where it is)."""
    return max(
        (c[r] | {"lanes": c["lanes"], "partitions": c["partitions"], "regime": r}
         for c in cells if c["reader"] == reader for r in ("backlog", "tail") if r in c),
        key=lambda x: x["p99_ms"],
    )  # fmt: skip


def _ints(flag: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise BadArgument(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise BadArgument(f"{flag} must be integers >= 1, got {text!r}")
    return values


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=1)
    p.add_argument("--lanes", default="1,4,16", help="comma-separated lane counts")
    p.add_argument("--partitions", default="4,16,64", help="comma-separated partition counts")
    p.add_argument("--batches", type=int, default=100, help="batches timed per cell (backlog)")
    p.add_argument("--tail-batches", type=int, default=50, help="batches per cell (tail); 0: none")
    p.add_argument(
        "--tail-records", type=int, default=5, help="records per partition before a tail batch"
    )
    p.add_argument(
        "--readers",
        nargs="+",
        default=[KAFKA_PYTHON],
        choices=LANE_READERS,
        help="[flow] reader of each run of a cell (last: the candidate; first: its baseline)",
    )
    p.add_argument("--name", default="planning", help="result files: bench/results/<name>.*")
    return p


def _run(args: argparse.Namespace) -> int:
    lanes_list = _ints("--lanes", args.lanes)
    partitions_list = _ints("--partitions", args.partitions)
    if args.batches < 1 or args.tail_batches < 0 or args.tail_records < 1:
        raise BadArgument(
            f"--batches >= 1, --tail-batches >= 0, --tail-records >= 1, got {args.batches}, "
            f"{args.tail_batches}, {args.tail_records}"
        )
    cells = []
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for partitions in partitions_list:
            # A topic per reader, each written alike: Tansu's reads cost more as a
            # partition's record batches grow (the tail regime appends one per partition
            # per batch), so a reader on the other's longer log would be judged unfairly.
            # More records than the batches can take: a backlog until the last batch.
            records = (args.batches + 20) * BATCH_RECORDS
            topics = {r: unique_name(f"planning{partitions}p") + ".eden" for r in args.readers}
            for topic in topics.values():
                produce(plat, topic, partitions, [b"x"] * records)
            for lanes, reader in itertools.product(lanes_list, args.readers):
                topic = topics[reader]
                cell: dict[str, Any] = {"reader": reader, "lanes": lanes, "partitions": partitions}
                cell["backlog"] = run_planner(
                    plat, work, topic, lanes, partitions, args.batches, reader=reader
                )
                if args.tail_batches:
                    cell["tail"] = run_planner(
                        plat, work, topic, lanes, partitions, args.tail_batches,
                        tail_records=args.tail_records, reader=reader,
                    )  # fmt: skip
                cells.append(cell)
                print(
                    f"{reader:>12}, {lanes:>2} lanes x {partitions:>2} partitions: "
                    + "; ".join(
                        f"{r} p50 {cell[r]['p50_ms']} p99 {cell[r]['p99_ms']} "
                        f"max {cell[r]['max_ms']} ms ({cell[r]['tuples_per_batch_p50']} tuples)"
                        for r in ("backlog", "tail")
                        if r in cell
                    ),
                    flush=True,
                )
    worst = {reader: _worst(cells, reader) for reader in args.readers}
    candidate, baseline = args.readers[-1], args.readers[0]
    summary = {
        "metric": "planning per micro-batch (latestOffset + partitions), p99 of the worst cell",
        "unit": "ms",
        "candidate": f"flow planner (FlowStreamReader), [flow] reader = {candidate!r}, on "
        "Tansu, memcached and SQLite, no Spark",
        "baseline": None if baseline == candidate else f"the same, reader = {baseline!r}",
        "candidate_value": worst[candidate]["p99_ms"],
        "baseline_value": None if baseline == candidate else worst[baseline]["p99_ms"],
        "worst_cell": {
            k: worst[candidate][k] for k in ("lanes", "partitions", "regime", "p50_ms", "max_ms")
        },
        "worst_cell_per_reader": {
            reader: {k: w[k] for k in ("lanes", "partitions", "regime", "p50_ms", "p99_ms")}
            for reader, w in worst.items()
        },
        "target": f"p99 <= {TARGET_P99_MS} ms in every cell and regime",
        "meets_target": worst[candidate]["p99_ms"] <= TARGET_P99_MS,
        "params": vars(args),
        "tuple_size": TUPLE_SIZE,
        "max_records_per_batch": BATCH_RECORDS,
        "cells": cells,
    }
    write_result("planning", summary, name=args.name)
    plot(RESULTS / f"{args.name}.png", cells)
    print("| reader | lanes | partitions | regime | p50 | p99 | max | tuples/batch |")
    for c in cells:
        for r in ("backlog", "tail"):
            if r in c:
                x = c[r]
                print(
                    f"| {c['reader']} | {c['lanes']} | {c['partitions']} | {r} | {x['p50_ms']} "
                    f"| {x['p99_ms']} "
                    f"| {x['max_ms']} | {x['tuples_per_batch_p50']} |"
                )
    return exit_code(summary)


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
