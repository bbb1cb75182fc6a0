"""Heterogeneous lanes: one lane 4x slower; least_loaded vs round_robin vs the baseline.

The word count's counting sleeps ``--ms-per-record`` per record, ``--slow-factor``
times longer in lane 0 (``bench/inject/sitecustomize.py``, the same injection in the
flow lanes and in the baseline's Spark partitions): an operator whose time is
waiting, so lanes add capacity on this 2-core machine. One topic is produced once;
each job drains all of it under a pipeline of its own:

- ``baseline``: plain Structured Streaming, a fixed budget per batch split evenly
  over the lanes (``--batch``), direct writes: every batch waits for the slow lane;
- ``round_robin`` and ``least_loaded``: the flow-controlled topology, whose per-lane
  windows follow each lane's round-trip time against the latency target.

Metric: records/s made durable after the first micro-batch.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.heterogeneous \
        [--records 60000] [--lanes 2] [--ms-per-record 0.2] [--slow-factor 4]

Writes bench/results/heterogeneous.json and heterogeneous.png; exits 1 if the target
(least_loaded >= 1.3x the baseline) is missed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._common import platform_up, produce, random_lines, unique_name
from bench._experiment import (
    BENCH,
    RESULTS,
    experiment_parser,
    pyplot,
    ratio,
    run_experiment,
    save_figure,
    write_result,
)
from bench._measure import drain_run
from flowctl.config import PROJECT_ROOT

TARGET = 1.3


def plot(path: Path, runs: dict[str, dict[str, Any]], title: str) -> None:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    names = list(runs)
    ax1.bar(names, [runs[n]["records_per_s"] or 0 for n in names])
    ax1.set_ylabel("records/s (after the first batch)")
    ax1.set_title(title)
    for n in names:
        series = runs[n]["run"]["series"]
        ax2.plot([t for t, _ in series], [max(0, v) for _, v in series], label=n)
    ax2.set_xlabel("s since the job was submitted")
    ax2.set_ylabel("records durable")
    ax2.legend()
    save_figure(fig, path)


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=4)
    p.add_argument("--records", type=int, default=60_000)
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--ms-per-record", type=float, default=0.2)
    p.add_argument("--slow-factor", type=float, default=4.0)
    p.add_argument("--batch", type=int, default=10_000, help="baseline records per batch")
    p.add_argument("--tuple-size", type=int, default=500, help="flow: records per tuple")
    p.add_argument("--w-max", type=int, default=64, help="flow: largest window, tuples")
    p.add_argument("--w-init", type=int, default=6, help="flow: initial window, tuples")
    p.add_argument("--latency-target", type=float, default=1.0, help="flow: seconds")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    return p


def _run(args: argparse.Namespace) -> int:

    env = {
        "FLOWCTL_BENCH_LANE_DELAY": f"{args.ms_per_record},0,{args.slow_factor}",
        "PYTHONPATH": f"{BENCH / 'inject'}:{PROJECT_ROOT}",
    }
    flow = {
        "w_init": args.w_init,
        "w_max": args.w_max,
        "latency_target_s": args.latency_target,
    }
    stream = {"tuple_size": args.tuple_size}
    runs: dict[str, dict[str, Any]] = {}
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        topic = unique_name("het") + ".eden"
        produced = produce(plat, topic, args.partitions, random_lines(args.records, args.seed))
        for kind in ("baseline", "round_robin", "least_loaded"):
            rate, info = drain_run(
                plat,
                Path(tmp),
                topic,
                produced,
                args.lanes,
                label=f"het-{kind}",
                baseline=kind == "baseline",
                partitions=args.partitions,
                batch=args.batch if kind == "baseline" else None,
                stream=stream,
                flow=None if kind == "baseline" else {**flow, "dispatch": kind},
                env=env,
                timeout_s=args.timeout,
            )
            runs[kind] = {"records_per_s": rate, "run": info}
            print(f"{kind}: {rate} records/s", flush=True)

    base = runs["baseline"]["records_per_s"]
    ll = runs["least_loaded"]["records_per_s"]
    rr = runs["round_robin"]["records_per_s"]
    capacity = 1000 / args.ms_per_record * ((args.lanes - 1) + 1 / args.slow_factor)
    summary = {
        "metric": "records/s durable, first micro-batch excluded, lane 0 slower",
        "unit": "records/s",
        "candidate": "flow-controlled topology, least_loaded dispatch",
        "baseline": "plain Structured Streaming, even split (wordcount_baseline.py)",
        "candidate_value": ll,
        "baseline_value": base,
        "ratio": ratio(ll, base),
        "round_robin_value": rr,
        "round_robin_ratio": ratio(rr, base),
        "lanes_capacity_records_per_s": round(capacity),
        "target": f"least_loaded >= {TARGET}x baseline",
        "meets_target": bool(ratio(ll, base) is not None and ratio(ll, base) >= TARGET),
        "params": vars(args),
        "runs": runs,
    }
    write_result("heterogeneous", summary)
    plot(
        RESULTS / "heterogeneous.png",
        runs,
        f"{args.lanes} lanes, lane 0 {args.slow_factor:g}x slower",
    )
    print(f"least_loaded {summary['ratio']}x, round_robin {summary['round_robin_ratio']}x")
    return 0 if summary["meets_target"] else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
