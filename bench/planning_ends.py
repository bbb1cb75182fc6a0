"""Where the planner's read of the exact ends goes at the log's end: the broker or the client.

``bench.planning``'s tail regime (a planner at the log's end, a few new records in every
partition before each batch) misses its 20 ms p99 at 64 partitions, and its per-phase
line puts the slowest batches in ``log_ends``: the read of Eden's and both replay
topics' exact ends (one ListOffsets request for all their partitions, then a fetch of
every moved partition's last record batch, parsed by kafka-python). This reads the ends
as the planner's reader does (``kafka_ends.latest_offsets_of`` on a consumer with the
planner's short fetch hold, ``known`` kept between reads, the three topics together),
with ``--tail-records`` new records in every Eden partition before each read (untimed),
``--reads`` times per partition count, on a fresh Tansu (memory engine), and splits
each read's wall time:

- the fetch round (``on_fetch``: seek, polls until every moved partition answered) and
  the rest (ListOffsets and the bookkeeping around it);
- the client's CPU (this process's ``time.process_time``: kafka-python's encoding,
  parsing and the read's own Python) against the wall: what is not the client's CPU is
  waiting on the broker;
- the broker's CPU over the same reads (Tansu's ``/proc`` ticks, ``bench._profile``);
- one more pass under ``cProfile``: the client's time by part (record parsing, the rest
  of kafka-python, the selector wait, flowctl's own), each builtin counted where its
  main caller is.

The switch that lets a costly log's tails wait a batch (``log_ends.DEFER_TAIL_AFTER_MS``)
is not applied: every read here is an exact one, which a light stream's latency needs.

``--readers kafka-python librdkafka`` also reads the same ends with the planner's
librdkafka client (``[flow] reader = "librdkafka"``:
``flowctl.adapters.kafka_ends_rdkafka.RdkafkaEnds``), on the same topics and feed, right
after: the same read (``kafka_ends.latest_offsets_of`` over the other client), the
fetching and parsing done in C.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.planning_ends \\
        [--partitions 4 16 64] [--reads 60] [--tail-records 5] \\
        [--readers kafka-python librdkafka]

Writes bench/results/planning_ends.json: the widest cell's read p99 on librdkafka against
kafka-python's (report only, no target).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import signal
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from bench._common import _terminate, unique_name
from bench._experiment import experiment_parser, percentile, run_experiment, write_result
from bench._profile import CpuPhases
from bench.broker_cost import broker
from bench.planning import TailFeed, _round
from flowctl.adapters import kafka_ends, kafka_log
from flowctl.pipelines.config_sections import KAFKA_PYTHON, LANE_READERS
from flowctl.spark.flow.log_ends import open_client

#: Parts of the client's profiled time, by the file a function (or a builtin's main
#: caller) lives in; the first that matches.
PARTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("kafka-python record parsing", ("kafka/record/",)),
    ("waiting in the selector", ("selectors.py",)),
    ("kafka-python client and protocol", ("kafka/",)),
    ("flowctl (kafka_ends)", ("flowctl/",)),
)


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 2)


def _summary(values: list[float]) -> dict[str, float | None]:
    return {
        "p50": _round(percentile(values, 50)),
        "p99": _round(percentile(values, 99)),
        "max": _round(max(values) if values else None),
    }


def profile_parts(profile: cProfile.Profile) -> dict[str, float]:
    """The profiled time (each function's own time) by :data:`PARTS`, as shares."""
    stats = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    parts: Counter[str] = Counter()
    for (filename, _line, _name), (_cc, _nc, own, _cum, callers) in stats.items():
        where = filename
        if filename == "~" and callers:  # a builtin: where it was mostly called from
            where = max(callers.items(), key=lambda kv: kv[1][2])[0][0]
        part = next((n for n, keys in PARTS if any(k in where for k in keys)), "other")
        parts[part] += own
    total = sum(parts.values())
    return {n: round(t / total, 3) for n, t in parts.most_common()} if total else {}


def measure(
    bootstrap: str, partitions: int, reads: int, tail_records: int, reader: str = KAFKA_PYTHON
) -> dict[str, Any]:
    """The reads at one partition count, on topics of their own, with ``reader``."""
    eden = unique_name(f"ends{partitions}")
    topics = [eden, f"{eden}.replay-a", f"{eden}.replay-b"]
    kafka_log.ensure_topics(bootstrap, {t: partitions for t in topics})
    feed = TailFeed(bootstrap, eden, partitions, tail_records)
    client = open_client(bootstrap, reader, kafka_ends.PLANNER_FETCH_WAIT_MS)
    known: kafka_ends.KnownEnds = {}
    fetches: list[float] = []

    fed = [0]

    def read() -> dict[int, int]:
        """Eden's ends, as the reader read them."""
        return kafka_ends.latest_offsets_of(
            client,
            topics,
            known=known,
            on_fetch=lambda _topics, ms: fetches.append(ms),
        )[eden]

    def check(ends: dict[int, int]) -> None:
        """Every partition's end is what the feed wrote: a wrong read is no measurement."""
        want = {p: fed[0] * tail_records for p in range(partitions)}
        if ends != want:
            wrong = {p: (ends.get(p), n) for p, n in want.items() if ends.get(p) != n}
            raise AssertionError(f"{reader} read wrong ends (read, written): {wrong}")

    def feed_once() -> None:
        feed.feed()
        fed[0] += 1

    try:
        for _ in range(3):  # connections, metadata, the first fetch: not counted
            feed_once()
            check(read())
        walls: list[float] = []
        cpus: list[float] = []
        fetched: list[float] = []
        cpu = CpuPhases()  # marked around the reads alone: the feed's produce is not theirs
        for _ in range(reads):
            cpu.mark("feed")
            feed_once()
            fetches.clear()
            cpu.mark("read")
            t0, c0 = time.perf_counter(), time.process_time()
            ends = read()
            wall, used = time.perf_counter() - t0, time.process_time() - c0
            check(ends)
            walls.append(_ms(wall))
            cpus.append(_ms(used))
            fetched.append(round(sum(fetches), 2))
        cpu.mark("end")
        profile = cProfile.Profile()
        for _ in range(reads):
            feed_once()
            profile.enable()
            ends = read()
            profile.disable()
            check(ends)
    finally:
        client.close()
        feed.close()
    broker_s = cpu.cpu_seconds("broker (Tansu)", "read")
    return {
        "reader": reader,
        "partitions": partitions,
        "reads": reads,
        "read_ms": _summary(walls),
        "fetch_round_ms": _summary(fetched),
        "list_offsets_and_rest_ms": _summary([w - f for w, f in zip(walls, fetched, strict=True)]),
        "client_cpu_ms": _summary(cpus),
        "client_cpu_share_of_read": _round(sum(cpus) / sum(walls)) if sum(walls) else None,
        "broker_cpu_ms_per_read": _round(broker_s * 1000.0 / reads),
        # librdkafka's work runs in its own threads, in C: cProfile sees none of it
        "client_parts_profiled": profile_parts(profile) if reader == KAFKA_PYTHON else None,
    }


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=1)
    p.add_argument("--partitions", type=int, nargs="+", default=[4, 16, 64])
    p.add_argument("--reads", type=int, default=60)
    p.add_argument("--tail-records", type=int, default=5)
    p.add_argument("--readers", nargs="+", choices=LANE_READERS, default=[KAFKA_PYTHON])
    return p


def _run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _terminate)  # unwinds: broker stopped, home removed
    signal.signal(signal.SIGINT, _terminate)
    cells = []
    with broker("memory") as bootstrap:
        for partitions in args.partitions:
            for reader in args.readers:
                cell = measure(bootstrap, partitions, args.reads, args.tail_records, reader)
                print(cell, flush=True)
                cells.append(cell)
    widest = [c for c in cells if c["partitions"] == args.partitions[-1]]
    base = next(c for c in widest if c["reader"] == args.readers[0])
    cand = widest[-1]
    path = write_result(
        "planning_ends",
        {
            "metric": f"exact ends' read p99 at {cand['partitions']} partitions",
            "unit": "ms",
            "candidate": f"the planner's read ({cand['reader']})",
            "baseline": None if cand is base else f"the planner's read ({base['reader']})",
            "candidate_value": cand["read_ms"]["p99"],
            "baseline_value": None if cand is base else base["read_ms"]["p99"],
            "ratio": None
            if cand is base
            else _round(cand["read_ms"]["p99"] / base["read_ms"]["p99"]),
            "target": None,
            "meets_target": None,
            "params": vars(args),
            "cells": cells,
        },
    )
    print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
