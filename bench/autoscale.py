"""Autoscaling after a 4x load step: decisions until the topology keeps up, paper vs adaptive.

The scaling core (:class:`flowctl.core.scaling.Autoscaler`, the code the autoscale DAG
runs) is driven window by window by a fluid model of the topology; the per-lane
processing rate is a measured one: by default the rate of the one-lane topology
saturated before the decision in ``bench/results/replacement.json`` (else
``replacement_cold.json``; a real run with the same injected per-record delay), or
``--lane-rate``.

Model, per metrics window of ``--window`` s: ``P`` lanes serve at most ``P x
lane_rate`` records/s; the arrival rate is ``--load`` x one lane's rate, then ``--step``
times that from window ``--step-at``. Records beyond the capacity join the backlog
and, as in the paper's Storm topology (no admission control), that many tuples time
out: ``fail_num`` = overflow / ``tuple_size``, with +-``--noise`` relative noise
(seeded). The adaptive policy also sees saturation (arrival / capacity, at most 1),
backlog and its change, batch duration (trigger x arrival / capacity) and both rates. A
decision is applied at the end of its window (the replacement takes one window); the
shipped ``[scaling]`` settings (history, C, cooldown, target utilisation) are used, and
the DAG's cooldown also holds the paper policy.

Stable: from some window on, to the end of the run, capacity >= arrival (no failures,
no growing backlog). Metric: decisions (applied changes) after the step until stable.

    .venv/bin/python -m bench.autoscale [--windows 60] [--step 4] [--lane-rate 1700]

Repeated over ``--repeats`` noise seeds (the spread of decisions per policy). Writes
bench/results/autoscale.json and autoscale.png; exits 1 if the target (adaptive stable
within 3 decisions, every seed) is missed. Pure computation: no Spark, a second.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench._experiment import (
    RESULTS,
    experiment_parser,
    pyplot,
    ratio,
    run_experiment,
    save_figure,
    write_result,
)
from bench.lib.autoscaler import Autoscaler
from flowctl.core.adaptive_scaling import AdaptiveConfig
from flowctl.core.clock import FakeClock
from flowctl.core.scaling import WindowStats
from flowctl.pipelines.config import load_pipeline_config

TARGET_DECISIONS = 3


#: Replacement results that measured the saturated one-lane rate, the first found is read
#: (the warm form's, else the cold form's: blue is the same one-lane topology in both).
LANE_RATE_RESULTS = ("replacement.json", "replacement_cold.json")


def measured_lane_rate() -> tuple[float | None, str]:
    """One lane's records/s: the median over every run (every method) of a replacement
    result of the durable rate blue kept in the 8 s before the decision, per lane."""
    for name in LANE_RATE_RESULTS:
        path = RESULTS / name
        try:
            data = json.loads(path.read_text())
            rates = [
                float(run["rate_before"])
                for runs in data["runs"].values()
                for run in runs
                if run.get("rate_before")
            ]
            lanes = int(data["params"]["from_lanes"])
        except (OSError, KeyError, TypeError, ValueError, AttributeError):
            continue
        if rates and lanes > 0:
            rate = statistics.median(rates) / lanes
            return rate, f"{name} at {data.get('commit', '?')}: median rate before the decision"
    return None, "none"


def run_policy(policy: str, args: argparse.Namespace, lane_rate: float) -> dict[str, Any]:
    config = load_pipeline_config("wordcount")
    sc = config.scaling
    adaptive = AdaptiveConfig(
        **asdict(sc.thresholds()),
        min_parallelism=config.min_parallelism,
        max_parallelism=config.max_parallelism,
    )
    clock = FakeClock()
    scaler = Autoscaler(
        parallelism=args.start_lanes,
        history_windows=sc.history_windows,
        clock=clock,
        policy=policy,
        threshold_c=sc.threshold_c,
        config=adaptive,
    )
    rng = random.Random(args.seed)
    backlog = 0.0
    trace = []
    decisions = 0
    decisions_at: list[int] = []
    last_change: float | None = None
    for w in range(args.windows):
        clock.advance(args.window)
        p = scaler.parallelism
        arrival = lane_rate * args.load * (args.step if w >= args.step_at else 1.0)
        capacity = p * lane_rate
        before = backlog
        backlog = max(0.0, backlog + (arrival - capacity) * args.window)
        overflow = max(0.0, arrival - capacity) * args.window
        fails = overflow / args.tuple_size
        if fails:
            fails *= 1 + rng.uniform(-args.noise, args.noise)
        stats = WindowStats(
            fail_num=round(fails),
            saturation=min(1.0, arrival / capacity),
            backlog=round(backlog),
            backlog_delta=round(backlog - before),
            batch_duration_s=round(args.trigger * arrival / capacity, 3),
            trigger_s=args.trigger,
            arrival_rate=arrival,
            lane_rate=lane_rate,
        )
        decision = scaler.observe(stats)
        in_cooldown = last_change is not None and clock.now() - last_change < sc.cooldown_s
        applied = decision.changes and not (policy == "paper" and in_cooldown)
        if applied:
            scaler.applied(decision)
            last_change = clock.now()
            if w >= args.step_at:
                decisions += 1
                decisions_at.append(w)
        trace.append(
            {
                "window": w,
                "lanes": p,
                "arrival": round(arrival),
                "capacity": round(capacity),
                "fail_num": stats.fail_num,
                "backlog": stats.backlog,
                "decision": decision.direction if applied else "none",
                "new_lanes": scaler.parallelism,
                "reason": decision.reason,
            }
        )
    stable_from = None
    for w in range(args.windows - 1, args.step_at - 1, -1):
        if trace[w]["capacity"] < trace[w]["arrival"]:
            break
        stable_from = w
    decisions_to_stable = (
        None if stable_from is None else sum(1 for d in decisions_at if d < stable_from)
    )
    return {
        "stable_from_window": stable_from,
        "windows_to_stable": None if stable_from is None else stable_from - args.step_at,
        "decisions_to_stable": decisions_to_stable,
        "decisions_after_step": decisions,
        "final_lanes": scaler.parallelism,
        "peak_backlog": max(t["backlog"] for t in trace),
        "trace": trace,
    }


def plot(path: Path, runs: dict[str, dict[str, Any]], step_at: int) -> None:
    plt = pyplot()

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    for policy, run in runs.items():
        ws = [t["window"] for t in run["trace"]]
        ax1.step(ws, [t["lanes"] for t in run["trace"]], where="post", label=policy)
        ax2.plot(ws, [t["backlog"] for t in run["trace"]], label=policy)
    first = next(iter(runs.values()))["trace"]
    need = [t["arrival"] / (t["capacity"] / t["lanes"]) for t in first]
    ax1.plot([t["window"] for t in first], need, "k:", label="lanes needed")
    for ax in (ax1, ax2):
        ax.axvline(step_at, color="grey", linestyle="--")
        ax.set_xlabel("metrics window")
        ax.legend()
    ax1.set_ylabel("lanes")
    ax1.set_title("Parallelism after a load step")
    ax2.set_ylabel("backlog (records)")
    save_figure(fig, path)


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=6)
    p.add_argument("--windows", type=int, default=60)
    p.add_argument("--window", type=float, default=10.0, help="seconds per metrics window")
    p.add_argument("--step-at", type=int, default=8)
    p.add_argument("--step", type=float, default=4.0)
    p.add_argument("--load", type=float, default=0.6, help="arrival / one lane's rate")
    p.add_argument("--start-lanes", type=int, default=1)
    p.add_argument("--lane-rate", type=float, default=None, help="records/s of one lane")
    p.add_argument("--tuple-size", type=int, default=100)
    p.add_argument("--trigger", type=float, default=1.0)
    p.add_argument("--noise", type=float, default=0.1)
    p.add_argument("--repeats", type=int, default=20, help="noise seeds for the spread")
    return p


def _run(args: argparse.Namespace) -> int:
    lane_rate, source = (args.lane_rate, "--lane-rate") if args.lane_rate else (None, "")
    if lane_rate is None:
        lane_rate, source = measured_lane_rate()
    if lane_rate is None:
        lane_rate, source = 1000 / 0.6, "default: 0.6 ms per record (no measured run)"

    runs = {policy: run_policy(policy, args, lane_rate) for policy in ("paper", "adaptive")}
    spread: dict[str, list[int | None]] = {}
    for policy in runs:
        spread[policy] = [
            run_policy(policy, argparse.Namespace(**{**vars(args), "seed": s}), lane_rate)[
                "decisions_to_stable"
            ]
            for s in range(args.repeats)
        ]
    for policy, run in runs.items():
        print(
            f"{policy}: stable after {run['decisions_to_stable']} decision(s), "
            f"{run['windows_to_stable']} window(s); final {run['final_lanes']} lanes; "
            f"peak backlog {run['peak_backlog']}; over {args.repeats} seeds: "
            f"{spread[policy]}",
            flush=True,
        )
    ad, pa = runs["adaptive"], runs["paper"]
    meets = all(d is not None and d <= TARGET_DECISIONS for d in spread["adaptive"])
    summary = {
        "metric": "decisions after a 4x load step until the topology keeps up",
        "unit": "decisions",
        "candidate": "adaptive policy (DS2 target from measured rates)",
        "baseline": "paper policy (Algorithm 2)",
        "candidate_value": ad["decisions_to_stable"],
        "baseline_value": pa["decisions_to_stable"],
        "ratio": ratio(ad["decisions_to_stable"], pa["decisions_to_stable"]),
        "windows_to_stable": {k: r["windows_to_stable"] for k, r in runs.items()},
        "decisions_to_stable_per_seed": spread,
        "peak_backlog": {k: r["peak_backlog"] for k, r in runs.items()},
        "lane_rate": round(lane_rate),
        "lane_rate_source": source,
        "target": f"adaptive stable within {TARGET_DECISIONS} decisions",
        "meets_target": bool(meets),
        "params": vars(args),
        "runs": runs,
    }
    write_result("autoscale", summary)
    plot(RESULTS / "autoscale.png", runs, args.step_at)
    return 0 if meets else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
