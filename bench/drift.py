"""Drift: one lane suddenly slows down, then recovers, in one run; the flow-control rules
of this version vs the rules before it, on the same data.

The word count sleeps ``--ms-per-record`` per record in every lane
(``bench/inject/sitecustomize.py``), and lane 0 ``--slow-factor`` times longer while a
file exists: ``--before`` seconds after the first durable batch the bench creates it,
``--slow`` seconds later removes it. Each rule set drains the same backlog under a
pipeline of its own:

- ``previous``: ``growth = "one"`` (the seed's +1 a round), no lane time budget;
- ``current``: ``growth = "to_target"`` and ``lane_budget = 1.25`` (the shipped defaults;
  docs/flow-control.md, "Lane time budget").

Measured (times from the Spark commit log, watched during the run; windows from 1 s
metrics windows):

- ``worst_batch_s``: the longest micro-batch after the first one that saw the slowdown,
  until 10 s after it ended (target <= 2x the latency target);
- ``recovery_batches``: micro-batches after the slowdown ended until lane 0's window is
  back to >= 90 % of its median over the 10 s before the slowdown (target <= 10);
- ``rate_after / rate_before``: records/s made durable over ``--after`` seconds after the
  slowdown vs ``--before`` seconds before it (target >= 0.9).

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.drift \\
        [--records 450000] [--ms-per-record 0.5] [--slow-factor 4] [--slow 30]

Writes bench/results/drift.json; exits 1 if ``current`` misses a target.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import itertools
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench._common import Job, Platform, platform_up, produce, random_lines, unique_name
from bench._experiment import BENCH, experiment_parser, ratio, run_experiment, write_result
from bench._measure import drain_run
from flowctl.config import PROJECT_ROOT

RULES: dict[str, dict[str, object]] = {
    "previous": {"growth": "one", "lane_budget": 0},
    "current": {"growth": "to_target", "lane_budget": 1.25},
}


def one_rule(
    plat: Platform, work: Path, topic: str, total: int, rule: str, args: argparse.Namespace
) -> dict[str, Any]:
    """Drain ``topic`` with ``rule``'s settings while lane 0 slows down and recovers."""
    drift = work / f"drift-{rule}"
    drift.unlink(missing_ok=True)
    events: dict[str, float] = {}
    commits: dict[int, float] = {}
    done = threading.Event()

    def slow_down_then_recover(job: Job) -> None:
        root = plat.settings.home / "checkpoints" / job.topology_id / "commits"
        threading.Thread(target=watch_commits, args=(root, commits, done), daemon=True).start()
        time.sleep(args.before)
        drift.touch()
        events["slow_start"], events["slow_start_wall"] = time.monotonic(), time.time()
        time.sleep(args.slow)
        drift.unlink(missing_ok=True)
        events["slow_end"] = time.monotonic()

    env = {
        "FLOWCTL_BENCH_LANE_DELAY": f"{args.ms_per_record},0,{args.slow_factor}",
        "FLOWCTL_BENCH_LANE_DRIFT": str(drift),
        "PYTHONPATH": f"{BENCH / 'inject'}:{PROJECT_ROOT}",
    }
    flow = {"latency_target_s": args.latency_target, "metrics_window_s": 1.0, **RULES[rule]}
    try:
        _rate, info = drain_run(
            plat,
            work,
            topic,
            total,
            args.lanes,
            label=f"drift-{rule}",
            baseline=False,
            partitions=args.partitions,
            stream={"tuple_size": args.tuple_size},
            flow=flow,
            env=env,
            timeout_s=args.timeout,
            on_first_batch=slow_down_then_recover,
        )
    finally:
        done.set()
        drift.unlink(missing_ok=True)
    if "slow_end" not in events:
        return {"complete": False, "events": events, "run": info}
    topology = f"{info['pipeline']}-1"
    wall0 = events["slow_start_wall"]
    times = sorted(t - wall0 for t in commits.values())
    windows = lane0_windows(plat, topology, wall0)
    start = events["slow_start"]
    series = [(info["series_t0"] + t - start, n) for t, n in info["series"]]
    return {
        "complete": bool(info.get("complete")),
        "slow_s": round(events["slow_end"] - start, 2),
        **analyse(times, windows, series, events["slow_end"] - start, args),
        "commits_s": [round(t, 2) for t in times],
        "lane0_windows": windows,
        "run": info,
    }


def watch_commits(root: Path, seen: dict[int, float], done: threading.Event) -> None:
    """Every committed batch's commit time (``root/<batch id>``'s mtime), until ``done``:
    Spark keeps only the last 100 commit files, fewer than a run writes."""
    while not done.wait(0.5):
        try:
            for f in root.iterdir():
                if f.name.isdigit() and int(f.name) not in seen:
                    seen[int(f.name)] = f.stat().st_mtime
        except OSError:
            pass  # not created yet, or a file removed between listing and stat


def lane0_windows(plat: Platform, topology: str, t0_wall: float) -> list[tuple[float, int]]:
    """``(s since the slowdown began, lane 0's window)`` of every metrics window."""
    out = []
    for row in plat.plane.metrics_windows(topology):
        end = row.window_end
        if end.tzinfo is None:
            end = end.replace(tzinfo=dt.UTC)
        for lane in row.lane_list:
            if lane.get("lane") == 0 and lane.get("window") is not None:
                out.append((round(end.timestamp() - t0_wall, 2), int(lane["window"])))
    return out


def durable_at(series: list[tuple[float, int]], t: float) -> int | None:
    """Records durable at ``t`` (the last sample at or before it)."""
    times = [s for s, _ in series]
    i = bisect.bisect_right(times, t) - 1
    return series[i][1] if i >= 0 and series[i][1] >= 0 else None


def analyse(
    commits: list[float],
    windows: list[tuple[float, int]],
    series: list[tuple[float, int]],
    slow_end: float,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The three figures of the module doc (times relative to the slowdown's start)."""
    durations = [(b, b - a) for a, b in itertools.pairwise(commits)]
    seen = [(end, d) for end, d in durations if end > 0 and end <= slow_end + 10]
    worst = max((d for _, d in seen[1:]), default=None)  # seen[0] saw the slowdown first
    before = [w for t, w in windows if -10 <= t < 0]
    w_before = statistics.median(before) if before else None
    recovery = None
    if w_before is not None:
        after = [c for c in commits if c > slow_end]
        for k, c in enumerate(after, start=1):
            now = [w for t, w in windows if t <= c]
            if now and now[-1] >= 0.9 * w_before:
                recovery = k
                break

    def rate(a: float, b: float) -> float | None:
        na, nb = durable_at(series, a), durable_at(series, b)
        return None if na is None or nb is None else round((nb - na) / (b - a))

    rate_before = rate(-args.before, 0.0)
    rate_after = rate(slow_end, slow_end + args.after)
    return {
        "worst_batch_s": None if worst is None else round(worst, 2),
        "first_slow_batch_s": round(seen[0][1], 2) if seen else None,
        "lane0_window_before": w_before,
        "recovery_batches": recovery,
        "rate_before": rate_before,
        "rate_after": rate_after,
        "rate_ratio": ratio(rate_after, rate_before),
        "drained_before_after_window": (series[-1][0] if series else 0) < slow_end + args.after,
    }


def meets(run: dict[str, Any], target_s: float) -> bool:
    return bool(
        run.get("complete")
        and not run.get("drained_before_after_window")
        and run.get("worst_batch_s") is not None
        and run["worst_batch_s"] <= 2 * target_s
        and run.get("recovery_batches") is not None
        and run["recovery_batches"] <= 10
        and run.get("rate_ratio") is not None
        and run["rate_ratio"] >= 0.9
    )


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=11)
    p.add_argument("--records", type=int, default=450_000)
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--ms-per-record", type=float, default=0.5)
    p.add_argument("--slow-factor", type=float, default=4.0)
    p.add_argument("--tuple-size", type=int, default=100)
    p.add_argument("--latency-target", type=float, default=1.0, help="seconds")
    p.add_argument("--before", type=float, default=30.0, help="s of load before the slowdown")
    p.add_argument("--slow", type=float, default=30.0, help="s the lane stays slow")
    p.add_argument("--after", type=float, default=30.0, help="s measured after it")
    p.add_argument("--timeout", type=float, default=400.0, help="seconds per run")
    return p


def _run(args: argparse.Namespace) -> int:

    runs: dict[str, dict[str, Any]] = {}
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        topic = unique_name("drift") + ".eden"
        produced = produce(plat, topic, args.partitions, random_lines(args.records, args.seed))
        for rule in RULES:
            runs[rule] = one_rule(plat, Path(tmp), topic, produced, rule, args)
            r = runs[rule]
            print(
                f"{rule}: worst batch {r.get('worst_batch_s')} s "
                f"(first {r.get('first_slow_batch_s')} s), "
                f"recovery {r.get('recovery_batches')} batches, rate after/before "
                f"{r.get('rate_after')}/{r.get('rate_before')} = {r.get('rate_ratio')}",
                flush=True,
            )
    cur, prev = runs["current"], runs["previous"]
    summary = {
        "metric": "adaptation to a lane that slows down and recovers",
        "candidate": "growth = to_target, lane_budget = 1.25",
        "baseline": "growth = one, no lane budget (the rules before)",
        "worst_batch_s": {k: r.get("worst_batch_s") for k, r in runs.items()},
        "worst_batch_ratio": ratio(cur.get("worst_batch_s"), prev.get("worst_batch_s")),
        "recovery_batches": {k: r.get("recovery_batches") for k, r in runs.items()},
        "rate_ratio_after_vs_before": {k: r.get("rate_ratio") for k, r in runs.items()},
        "target": (
            f"current: worst batch <= {2 * args.latency_target:g} s (2x the latency target), "
            "lane 0's window >= 90% of before within 10 batches, rate after >= 0.9x before"
        ),
        "meets_target": meets(cur, args.latency_target),
        "previous_meets_target": meets(prev, args.latency_target),
        "params": vars(args),
        "runs": runs,
    }
    write_result("drift", summary)
    return 0 if summary["meets_target"] else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
