"""Latency at low load against latency at half of capacity, in one run (issue 47, item 5).

At the demo's 50 lines/s the metrics page showed p50 about 600 ms and p99 850-1,400 ms,
against 324 / 489 ms in the latency benchmark at half of capacity: a record waited longest
when there was least to do. This run measures the flow-controlled word count (the shipped
settings, or ``--set`` overrides) at ``--low`` and at ``--high`` records/s, one job each on
a pipeline of its own, on the same private services (bench/latency.py's ``measure``: send
-> offset durable in the database, the job's first micro-batch not measured).

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.latency_load \\
        [--low 40] [--high 2000] [--seconds 40] [--set flow.flush_as_queued=true]

``--high`` defaults to half of the 2-lane capacity on the 2-core dev machine (the
latency benchmark's rate), ``--low`` to 1 % of that capacity. Target: p99 at the low
rate <= p99 at the high rate. Writes bench/results/<name>.json (``latency_load``).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._common import platform_up
from bench._experiment import BadArgument, ratio, run_experiment, write_result
from bench.latency import for_json, load_parser, measure, parse_overrides


def _parser() -> argparse.ArgumentParser:
    p = load_parser(__doc__)
    p.set_defaults(rate=None)
    p.add_argument("--low", type=float, default=40.0, help="records/s at low load (1 %%)")
    p.add_argument("--high", type=float, default=2000.0, help="records/s at half capacity")
    p.add_argument("--name", default="latency_load", help="result file: bench/results/<name>")
    return p


def _run(args: argparse.Namespace) -> int:
    if args.rate is not None:
        raise BadArgument(f"--rate={args.rate}: this run takes two rates, --low and --high")
    overrides = parse_overrides(args.set)
    runs: dict[str, dict[str, Any]] = {}
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        for label, rate in (("low", args.low), ("high", args.high)):
            runs[label] = measure(
                plat,
                Path(tmp),
                f"lat{label}",
                args.lanes,
                baseline=False,
                rate=rate,
                seconds=args.seconds,
                seed=args.seed,
                stream=overrides["stream"],
                flow=overrides["flow"],
            )
            r = runs[label]
            print(
                f"{label} ({rate:g}/s): {r['records']}/{r['expected']} records, "
                f"p50 {r['p50_ms']} ms, p99 {r['p99_ms']} ms",
                flush=True,
            )
    low, high = runs["low"], runs["high"]
    complete = all(r["records"] >= r["expected"] for r in runs.values())
    p99_ratio = ratio(low["p99_ms"], high["p99_ms"])
    summary = {
        "metric": "end-to-end latency p99 at 1 % of capacity against p99 at 50 %",
        "unit": "ms",
        "candidate": "flow-controlled topology at the low rate (shipped settings"
        + (f"; {', '.join(args.set)})" if args.set else ")"),
        "baseline": "the same topology at the high rate, in the same run",
        "candidate_value": low["p99_ms"],
        "baseline_value": high["p99_ms"],
        "ratio": p99_ratio,
        "p50_ms": {"low": low["p50_ms"], "high": high["p50_ms"]},
        "all_records_durable": complete,
        "target": "p99 at the low rate <= p99 at the high rate (ratio <= 1.0)",
        "meets_target": bool(complete and p99_ratio is not None and p99_ratio <= 1.0),
        "params": vars(args),
        "runs": for_json(runs),
    }
    write_result("latency_load", summary, name=args.name)
    print(f"p99 low {low['p99_ms']} ms vs high {high['p99_ms']} ms: ratio {p99_ratio}")
    return 0 if summary["meets_target"] else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
