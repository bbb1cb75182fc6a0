"""Where a record's latency goes: the latency experiment's flow job, each step timed.

Runs the flow job of ``bench/latency.py`` once (same load: ``--rate`` lines/s for
``--seconds``, 2 lanes, the shipped settings or ``--set``) with the tracer of
``bench/lib/latency_trace.py`` in its processes, and cuts every record's latency (send
-> offset durable in the database, polled every 50 ms) into the steps it waited on:

- ``trigger wait``: sent -> the start of the planner's ``latestOffset`` that admitted it
  (the rest of the running micro-batch, then Spark's trigger);
- ``planning``: that ``latestOffset`` (feedback, durable state, log ends, admission);
- ``to the lane``: the plan's end -> its lane's task started in a Python worker
  (Spark's offset log ``walCommit``, ``queryPlanning``, the ``foreachBatch`` call, the
  collect's job and task launch);
- ``lane``: the task's start -> its tuple's outcome queued in the MRWQ (Kafka read,
  ``process``, the MRWQ write);
- ``to the flush``: queued -> the start of the flush that wrote the tuple's item;
- ``flush``: that flush's transaction;
- ``to the poll``: the flush's end -> the experiment's poll that saw the offset durable.

The steps' means add up to the mean latency (their percentiles do not add up). Also
per micro-batch: Spark's phases (its progress reports) and the batch's parts around
the lanes. The tracer's own writes cost a little: compare totals with
``bench/latency.py``'s, not with this run's; the parts are its point.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.latency_parts \\
        [--rate 2000] [--seconds 40] [--set flow.KEY=VALUE] [--output latency_parts]

Writes bench/results/<--output>.json (no target: a diagnosis).
"""

from __future__ import annotations

import argparse
import bisect
import itertools
import json
import statistics
import sys
import tempfile
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench._common import platform_up
from bench._experiment import percentile, run_experiment, write_result
from bench.latency import load_parser, measure, parse_overrides
from flowctl.config import PROJECT_ROOT

BENCH = Path(__file__).resolve().parent
#: The per-record steps, in the order a record goes through them.
STEPS = (
    "trigger wait",
    "planning",
    "to the lane",
    "lane",
    "to the flush",
    "flush",
    "to the poll",
)


def summary(values: Sequence[float]) -> dict[str, float]:
    """Mean, p50 and p99 of ``values`` (seconds) in ms."""
    return {
        "mean_ms": round(statistics.fmean(values) * 1000, 1),
        "p50_ms": round((percentile(values, 50) or 0.0) * 1000, 1),
        "p99_ms": round((percentile(values, 99) or 0.0) * 1000, 1),
    }


def load_events(path: Path) -> dict[str, list[dict[str, Any]]]:
    """The trace's events by kind."""
    events: dict[str, list[dict[str, Any]]] = defaultdict(list)
    if path.exists():
        for line in path.read_text().splitlines():
            event = json.loads(line)
            events[event["ev"]].append(event)
    return events


def decompose(
    events: Mapping[str, list[dict[str, Any]]],
    sent: Mapping[tuple[int, int], float],
    durable: Mapping[tuple[int, int], float],
    since: float,
) -> dict[str, Any]:
    """Every traced record's steps (:data:`STEPS`) and the batches' parts, summarised."""
    plans: dict[int, tuple[float, float]] = {}
    ranges: dict[int, list[tuple[int, int, int, int]]] = defaultdict(list)
    for e in events["plan"]:
        if e["rows"]:
            plans[e["seq"]] = (e["t0"], e["t"])
            for lane, _topic, p, start, end, *_ in e["rows"]:
                ranges[p].append((start, end, e["seq"], lane))
    for rows in ranges.values():
        rows.sort()
    reads = {(e["seq"], e["lane"]): (e["t0"], e["t"]) for e in events["read"]}
    queued: dict[tuple[int, int], tuple[float, int]] = {}
    for e in events["queued"]:
        for (p, start, _end), seq in zip(e["ranges"], e["seqs"], strict=True):
            queued[(p, start)] = (e["t"], seq)
    flushes = sorted((e["first"], e["last"], e["t0"], e["t"]) for e in events["flush"])
    firsts = [f[0] for f in flushes]
    steps: dict[str, list[float]] = defaultdict(list)
    total: list[float] = []
    for (p, offset), sent_at in sent.items():
        rows = ranges.get(p, [])
        i = bisect.bisect_right(rows, (offset, sys.maxsize)) - 1
        if (p, offset) not in durable or i < 0 or not rows[i][0] <= offset < rows[i][1]:
            continue
        start, _end, seq, lane = rows[i]
        read, q = reads.get((seq, lane)), queued.get((p, start))
        j = bisect.bisect_right(firsts, q[1]) - 1 if q else -1
        if read is None or q is None or j < 0 or flushes[j][1] < q[1]:
            continue
        plan_t0, plan_t = plans[seq]
        flush_t0, flush_t = flushes[j][2], flushes[j][3]
        at = durable[(p, offset)]
        parts = (
            plan_t0 - sent_at,
            plan_t - plan_t0,
            read[0] - plan_t,
            q[0] - read[0],
            # a flush may take the item between the lane's write and its trace line
            max(0.0, flush_t0 - q[0]),
            flush_t - max(flush_t0, q[0]),
            at - flush_t,
        )
        for name, value in zip(STEPS, parts, strict=True):
            steps[name].append(value)
        total.append(at - sent_at)
    return {
        "records": len(total),
        "of": len(sent),
        "latency": summary(total) if total else None,
        "steps": {name: summary(steps[name]) for name in STEPS if steps[name]},
        "batches": batch_parts(events, plans, since),
    }


def batch_parts(
    events: Mapping[str, list[dict[str, Any]]],
    plans: Mapping[int, tuple[float, float]],
    since: float,
) -> dict[str, Any]:
    """Per micro-batch with input after ``since``: Spark's phases, the parts around the
    lanes, the time between two admitting plans, the flushes."""
    by_seq: dict[int, int] = {}
    phases: dict[str, list[float]] = defaultdict(list)
    for e in events["progress"]:
        progress = e["p"]
        end = progress["sources"][0]["endOffset"] if progress.get("sources") else None
        end = json.loads(end) if isinstance(end, str) else end
        if isinstance(end, dict) and "seq" in end:
            by_seq.setdefault(int(end["seq"]), int(progress["batchId"]))
        if progress.get("numInputRows"):
            for phase, ms in progress["durationMs"].items():
                phases[phase].append(float(ms) / 1000.0)
    calls = {e["batch"]: (e["t0"], e["t"]) for e in events["batch"]}
    lanes: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events["read"]:
        lanes[e["seq"]].append((e["t0"], e["t"]))
    parts: dict[str, list[float]] = defaultdict(list)
    for seq, (plan_t0, plan_t) in plans.items():
        call, reads = calls.get(by_seq.get(seq, -1)), lanes.get(seq)
        if plan_t0 < since or call is None or not reads:
            continue
        parts["plan end -> foreachBatch called"].append(call[0] - plan_t)
        first_lane = min(r[0] for r in reads)
        parts["foreachBatch called -> first lane started"].append(first_lane - call[0])
        parts["slowest lane"].append(max(r[1] - r[0] for r in reads))
        parts["last lane done -> foreachBatch done"].append(call[1] - max(r[1] for r in reads))
    starts = sorted(t0 for t0, _ in plans.values() if t0 >= since)
    cycle = [b - a for a, b in itertools.pairwise(starts)]
    flushes = [e["t"] - e["t0"] for e in events["flush"] if e["t0"] >= since]
    return {
        "spark_phases": {k: summary(v) for k, v in sorted(phases.items())},
        "around_the_lanes": {k: summary(v) for k, v in parts.items()},
        "cycle": summary(cycle) if cycle else None,
        "batches": len(starts),
        "flushes": len(flushes),
        "flush": summary(flushes) if flushes else None,
    }


def _parser() -> argparse.ArgumentParser:
    p = load_parser(__doc__)
    p.add_argument("--output", default="latency_parts", help="result name in bench/results/")
    return p


def _run(args: argparse.Namespace) -> int:
    overrides = parse_overrides(args.set)
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        trace = Path(tmp) / "trace.jsonl"
        env = {
            "PYTHONPATH": f"{BENCH / 'inject'}:{PROJECT_ROOT}",
            "FLOWCTL_BENCH_TRACE": str(trace),
        }
        run = measure(
            plat,
            Path(tmp),
            "parts",
            args.lanes,
            baseline=False,
            rate=args.rate,
            seconds=args.seconds,
            seed=args.seed,
            stream=overrides["stream"],
            flow=overrides["flow"],
            env=env,
            offsets=True,
        )
        events = load_events(trace)
    sent = {(p, o): t for p, o, t in run["sent"]}
    durable = {(p, o): t for p, o, t in run["durable"]}
    parts = decompose(events, sent, durable, run["load_started_epoch"])
    result = {
        "metric": "end-to-end latency (send -> offset durable), cut into the steps it waited on",
        "unit": "ms",
        "candidate": "flow-controlled topology, traced",
        "baseline": None,
        "candidate_value": (parts["latency"] or {}).get("p50_ms"),
        "baseline_value": None,
        "ratio": None,
        "target": "none (a diagnosis)",
        "meets_target": None,
        "run": {k: run[k] for k in ("records", "expected", "p50_ms", "p99_ms", "max_ms")},
        **parts,
        "params": vars(args),
        "settings": run["settings"],
    }
    path = write_result("latency_parts", result, name=args.output)
    print(json.dumps({k: parts[k] for k in ("latency", "steps")}, indent=1))
    print(f"wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
