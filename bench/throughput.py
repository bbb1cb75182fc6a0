"""Throughput of the fast word count: flow-controlled job vs baseline vs plain kafka-python.

SPEC "Experiments to reproduce" 1 scaled to this machine: random strings of 50-100
bytes, split into words, counted, for several lane counts. One topic is produced
once; every run reads all of it under a pipeline name of its own (own offsets and
results), so every candidate sees the same data in the same run:

- ``flow``: the flow-controlled topology (``spark_jobs/wordcount_stream.py``, the
  shipped ``[flow]`` settings);
- ``baseline``: plain Structured Streaming with direct writes
  (``spark_jobs/wordcount_baseline.py``, ``--max-records-per-batch``);
- ``kafka-python``: one consumer reading the topic and counting words in a loop, CRC checks
  on as in flowctl's consumers (``_common.read_loop``), no
  Spark, no database (the machine's upper bound for a Python reader).

Metric: records/s made durable (sum of committed offsets) from the end of the first
micro-batch to the last record, so Spark's 4-7 s first batch is excluded. Also per lane
count: the flow job vs the kafka-python loop, and the planner's cost per micro-batch
(the driver log's "planning per batch" lines: p50, p99 and max in ms, and by phase).

    flock /tmp/flowctl-heavy.lock .venv/bin/python bench/throughput.py \
        [--records 300000] [--lanes 1,2,4] [--batch 50000]

Writes bench/results/throughput.json and throughput.png; exits 1 if the target
(flow >= 0.9x the baseline at every lane count: the runtime costs little) is missed.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

from _common import (
    RESULTS,
    drain_run,
    platform_up,
    produce,
    pyplot,
    random_lines,
    ratio,
    read_loop,
    save_figure,
    unique_name,
    write_result,
)

#: Issue 4: on a balanced pipeline without faults the runtime costs little.
TARGET = 0.9
#: The planner's log line (flowctl.spark.flow.planner.FlowPlanner.planned).
PLANNING = re.compile(
    r"planning per batch over (\d+) batch\(es\), ms: p50 ([\d.]+), p99 ([\d.]+), "
    r"max ([\d.]+); by phase p50/p99: (.*)$"
)


def planning_cost(log: Path) -> dict[str, object] | None:
    """The planner's per-batch cost lines of a run's driver log: batches, the worst p50,
    p99 and max over the lines, and each line's per-phase p50/p99."""
    lines = []
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        m = PLANNING.search(line)
        if m:
            n, p50, p99, most, phases = m.groups()
            lines.append({"batches": int(n), "p50": float(p50), "p99": float(p99),
                          "max": float(most), "phases": phases})  # fmt: skip
    if not lines:
        return None
    return {
        "batches": sum(x["batches"] for x in lines),
        "p50_ms_worst": max(x["p50"] for x in lines),
        "p99_ms_worst": max(x["p99"] for x in lines),
        "max_ms": max(x["max"] for x in lines),
        "lines": lines,
    }


def given(settings: dict[str, int | None]) -> dict[str, int]:
    """The settings given on the command line (the others stay as shipped)."""
    return {k: v for k, v in settings.items() if v is not None}


def plot(path: Path, lanes: list[int], flow: list, base: list, upper: float) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.38
    xs = range(len(lanes))
    ax.bar([x - width / 2 for x in xs], [v or 0 for v in flow], width, label="flow-controlled")
    ax.bar([x + width / 2 for x in xs], [v or 0 for v in base], width, label="baseline")
    ax.axhline(upper, color="grey", linestyle="--", label="kafka-python loop")
    ax.set_xticks(list(xs), [f"{n} lanes" for n in lanes])
    ax.set_ylabel("records/s (after the first batch)")
    ax.set_title("Fast word count throughput")
    ax.legend()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--lanes", default="1,2,4", help="comma-separated lane counts")
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--batch", type=int, default=50_000, help="baseline records per batch")
    p.add_argument("--timeout", type=float, default=240.0, help="seconds per run")
    p.add_argument("--tuple-size", type=int, help="flow: records per tuple (default: shipped)")
    p.add_argument("--w-init", type=int, help="flow: initial window, tuples (default: shipped)")
    p.add_argument("--w-max", type=int, help="flow: largest window, tuples (default: shipped)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    lanes = [int(v) for v in args.lanes.split(",")]

    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        topic = unique_name("fastwc") + ".eden"
        values = random_lines(args.records, args.seed)
        t0 = time.monotonic()
        produced = produce(plat, topic, args.partitions, values)
        print(f"produced {produced} records in {time.monotonic() - t0:.1f} s", flush=True)
        upper = read_loop(plat.bootstrap, topic, produced)
        print(f"kafka-python loop: {upper:.0f} records/s", flush=True)
        cases = []
        for n in lanes:
            row = {"lanes": n}
            for kind in ("baseline", "flow"):
                rate, info = drain_run(
                    plat,
                    work,
                    topic,
                    produced,
                    n,
                    label=f"throughput-{kind}-{n}",
                    baseline=kind == "baseline",
                    partitions=args.partitions,
                    batch=args.batch,
                    stream=given({"tuple_size": args.tuple_size}),
                    flow=given({"w_init": args.w_init, "w_max": args.w_max}),
                    timeout_s=args.timeout,
                )
                row[kind] = rate
                row[f"{kind}_run"] = info
                if kind == "flow":
                    row["planning"] = planning_cost(RESULTS / "logs" / f"throughput-flow-{n}.log")
                print(f"lanes {n} {kind}: {row[kind]} records/s", flush=True)
            row["ratio"] = ratio(row["flow"], row["baseline"])
            row["flow_vs_read_loop"] = ratio(row["flow"], upper)
            cases.append(row)

    ratios = [c["ratio"] for c in cases]
    meets = all(r is not None and r >= TARGET for r in ratios)
    # the headline is the lane count with the lowest ratio (the target holds at every one)
    best = min(cases, key=lambda c: c["ratio"] if c["ratio"] is not None else -1.0)
    summary = {
        "metric": "records/s durable, first micro-batch excluded (lowest-ratio lane count)",
        "unit": "records/s",
        "candidate": "flow-controlled topology (shipped settings unless given in params)",
        "baseline": "plain Structured Streaming, direct writes (wordcount_baseline.py)",
        "candidate_value": best["flow"],
        "baseline_value": best["baseline"],
        "ratio": best["ratio"],
        "ratio_per_lanes": {c["lanes"]: c["ratio"] for c in cases},
        "flow_vs_read_loop_per_lanes": {c["lanes"]: c["flow_vs_read_loop"] for c in cases},
        "planning_ms_per_lanes": {
            c["lanes"]: None
            if not c.get("planning")
            else {k: c["planning"][k] for k in ("batches", "p50_ms_worst", "p99_ms_worst")}
            for c in cases
        },
        "upper_bound_kafka_python": round(upper),
        "target": f"flow >= {TARGET}x baseline at every lane count",
        "meets_target": meets,
        "params": vars(args),
        "cases": cases,
    }
    write_result("throughput", summary)
    plot(
        RESULTS / "throughput.png",
        lanes,
        [c["flow"] for c in cases],
        [c["baseline"] for c in cases],
        upper,
    )
    print("| lanes | flow rec/s | baseline rec/s | ratio | kafka-python rec/s |")
    for c in cases:
        print(f"| {c['lanes']} | {c['flow']} | {c['baseline']} | {c['ratio']} | {upper:.0f} |")
    return 0 if meets else 1


if __name__ == "__main__":
    sys.exit(main())
