"""Live autoscaling: the real stream job, the autoscale DAG's decision logic and the real
replace operator, under a load that steps up 4x, steps down 4x, then wanders; the
``paper`` and ``adaptive`` policies in the same run, each on a pipeline of its own.

What runs is what the ``autoscale_<pipeline>`` DAG runs, without a scheduler:
every ``poke_interval_s`` the failure-window sensor's ``evaluate`` (the same function
its poke and its trigger call) reads the metrics windows; a decision is handed to
``BlueGreenReplaceOperator`` (the same class, ``execute`` with ``deferrable=False``),
whose one override starts green with ``spark-submit`` instead of a DAG run of
``stream_<pipeline>``. Every lane sleeps ``--ms-per-record`` per record
(``bench/inject/sitecustomize.py``), so a lane serves ``1000 / ms`` records/s and more
lanes add capacity on this 2-core machine.

Load (records/s): ``--rate`` for ``--warm`` s, ``4 x --rate`` for ``--step`` s,
``--rate`` for ``--step`` s, then ``--noisy-minutes`` of ``--rate`` +- 30 % (uniform,
a new level every ``--noise-every`` s). Figures per policy:

- ``up_decisions``: decisions after the step up until the first ``--settle`` s with the
  backlog not growing and no backpressure (target, adaptive: <= 2);
- ``down_decisions``: decisions after the step down until the parallelism is back
  to what it was before the step up (target, adaptive: <= 3);
- ``flaps``: decisions in the noisy phase that reverse the previous one within
  ``cooldown_s`` + one metrics window of its replacement finishing (target, adaptive: 0);
- ``exact``: stored word counts equal the produced lines' counts after the drain.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.autoscale_live \\
        [--rate 800] [--noisy-minutes 30] [--policies paper,adaptive]

Writes bench/results/autoscale_live.json; exits 1 if the adaptive policy misses a target.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench._common import (
    Job,
    Platform,
    pipeline_config,
    platform_up,
    save_log,
    stop,
    submit,
    unique_name,
)
from bench._experiment import (
    BENCH,
    RESULTS,
    experiment_parser,
    pyplot,
    run_experiment,
    save_figure,
    write_result,
)
from bench._measure import committed_total
from flowctl.adapters import kafka_log, results
from flowctl.adapters.window_evaluation import evaluate
from flowctl.config import PROJECT_ROOT
from flowctl.core.scaling_policy import WindowPolicy
from flowctl.pipelines.config import load_pipeline_config
from flowctl.pipelines.wordcount import count_words
from flowctl.textgen import zipf_lines

sys.path.insert(0, str(PROJECT_ROOT / "plugins"))  # the replace operator, as Airflow loads it

from bench.lib.direct_replace import DirectReplace, standby_args

#: The sensor's ``metrics_window_s``-long windows; short so a run sees many decisions.
METRICS_WINDOW_S = 5.0


class Load(threading.Thread):
    """Produces zipf lines at the profile's rate; counts what it sent and their words."""

    def __init__(self, plat: Platform, topic: str, profile: list[tuple[float, float]],
                 seed: int) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.plat, self.topic, self.profile = plat, topic, profile
        self.words: Counter[str] = Counter()
        self.sent = 0
        self.seed = seed
        self.started = 0.0
        self.halt = threading.Event()

    def start(self) -> None:
        """The profile's clock starts here, in the caller's thread: the caller times its
        phases from ``started`` at once (set in ``run`` it was still 0 when the caller
        first read it, and the run ended before it began)."""
        self.started = time.monotonic()
        super().start()

    def rate_at(self, t: float) -> float:
        for end, rate in self.profile:
            if t < end:
                return rate
        return 0.0

    def run(self) -> None:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.plat.bootstrap, acks=1, linger_ms=5)
        lines = zipf_lines(10**9, seed=self.seed)
        end = self.profile[-1][0]
        owed = 0.0
        last = self.started
        while (now := time.monotonic()) - self.started < end and not self.halt.is_set():
            owed += self.rate_at(now - self.started) * (now - last)
            last = now
            chunk = [next(lines).encode() for _ in range(int(owed))]
            owed -= len(chunk)
            for value in chunk:
                producer.send(self.topic, value)
            self.words.update(count_words(chunk))
            self.sent += len(chunk)
            time.sleep(0.05)
        producer.flush()
        producer.close()


def profile_of(args: argparse.Namespace, rng: random.Random) -> list[tuple[float, float]]:
    """``[(end s, records/s)]``: warm, 4x up, back down, then noisy levels."""
    t = args.warm
    out = [(t, args.rate)]
    t += args.step
    out.append((t, 4 * args.rate))
    t += args.step
    out.append((t, args.rate))
    noisy_end = t + 60 * args.noisy_minutes
    while t < noisy_end:
        t = min(noisy_end, t + args.noise_every)
        out.append((t, args.rate * rng.uniform(0.7, 1.3)))
    return out


def one_policy(plat: Platform, work: Path, policy: str, args: argparse.Namespace) -> dict:
    name = unique_name(f"as{policy[0]}")
    config = pipeline_config(
        work,
        name,
        partitions=args.partitions,
        stream={"parallelism": 1, "min_parallelism": 1, "max_parallelism": args.max_lanes,
                "tuple_size": 100},
        flow={"latency_target_s": 1.0, "metrics_window_s": METRICS_WINDOW_S},
        scaling={"policy": policy, "cooldown_s": args.cooldown, "history_windows": 6},
    )  # fmt: skip
    topic = f"{name}.eden"
    kafka_log.ensure_topics(plat.bootstrap, {topic: args.partitions})
    env = {
        "FLOWCTL_BENCH_LANE_DELAY": f"{args.ms_per_record},0,1",
        "PYTHONPATH": f"{BENCH / 'inject'}:{PROJECT_ROOT}",
    }
    os.environ["AIRFLOW_CONN_FLOWCTL_DB"] = json.dumps(
        {"conn_type": "generic", "extra": {"sqlalchemy_url": plat.database_url}}
    )
    pipeline = load_pipeline_config(str(config))
    window_policy = WindowPolicy.from_config(pipeline)
    jobs: list[Job] = [submit(plat, config, f"{name}-blue-1", 1, env=env)]
    load = Load(plat, topic, profile_of(args, random.Random(args.seed)), args.seed)
    samples: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    looks: list[dict[str, Any]] = []
    try:
        wait_active(plat, name, 180)
        load.start()
        end = load.profile[-1][0]
        next_poke = 0.0
        while (t := time.monotonic() - load.started) < end + args.drain:
            samples.append(sample(plat, name, topic, load, t))
            if t >= end and samples[-1]["backlog"] <= 0:
                break
            if t >= next_poke and t < end:
                next_poke = t + pipeline.scaling.poke_interval_s
                decided = autoscale_once(plat, name, config, env, jobs, window_policy, load, looks)
                if decided:
                    decisions.append(decided)
            time.sleep(2.0)
    finally:
        load.halt.set()  # a failed run stops producing before the services go
        for job in jobs:
            stop(plat, job, timeout_s=60)
            save_log(job, f"autoscale-live-{policy}-{jobs.index(job)}")
    load.join(timeout=30)
    stored = results.word_counts(plat.database_url, name)
    missing = sum(max(0, n - stored.get(w, 0)) for w, n in load.words.items())
    extra = sum(max(0, n - load.words.get(w, 0)) for w, n in stored.items())
    marks = {"up": args.warm, "down": args.warm + args.step, "noisy": args.warm + 2 * args.step}
    return {
        "pipeline": name,
        "records": load.sent,
        "words_missing": missing,
        "words_duplicated": extra,
        "exact": missing == 0 and extra == 0,
        "decisions": decisions,
        **figures(decisions, samples, marks, args),
        "samples": samples,
        "looks": looks,
    }


def wait_active(plat: Platform, pipeline: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if plat.plane.topologies(pipeline, states=["ACTIVE"]):
            return
        time.sleep(0.5)
    raise RuntimeError(f"no ACTIVE topology of {pipeline} within {timeout_s:g} s")


def sample(plat: Platform, pipeline: str, topic: str, load: Load, t: float) -> dict[str, Any]:
    active = plat.plane.topologies(pipeline, states=["ACTIVE"])
    level = None
    if active:
        rows = plat.plane.metrics_windows(active[0].topology_id, limit=1)
        level = rows[-1].backpressure_level if rows else None
    durable = committed_total(plat, pipeline, topic)
    return {
        "t": round(t, 1),
        "rate": round(load.rate_at(t)),
        "sent": load.sent,
        "durable": durable,
        "backlog": load.sent - max(0, durable),
        "parallelism": active[0].parallelism if len(active) == 1 else None,
        "backpressure": level,
    }


def autoscale_once(
    plat: Platform,
    name: str,
    config: Path,
    env: dict[str, str],
    jobs: list[Job],
    window_policy: WindowPolicy,
    load: Load,
    looks: list[dict[str, Any]],
) -> dict | None:
    """One sensor look (kept in ``looks``: what it saw and why it did or did not decide);
    on a decision, the replace operator's whole protocol."""
    seen = evaluate(plat.database_url, name, window_policy)
    looks.append(
        {
            "t": round(time.monotonic() - load.started, 1),
            "decided": seen.decided,
            "reason": seen.reason,
            "figures": None if seen.decision is None else dict(seen.decision.figures),
        }
    )
    if not seen.decided:
        return None
    decision = seen.decision
    t = round(time.monotonic() - load.started, 1)
    started = time.monotonic()

    def start_green(conf: dict[str, Any]) -> None:
        jobs.append(submit(plat, config, conf["topology_id"], conf["parallelism"],
                           extra=standby_args(conf), env=env))  # fmt: skip

    op = DirectReplace(
        task_id="replace", pipeline=name, pipeline_config=str(config),
        decision=decision.to_dict(), deferrable=False, start_green=start_green,
    )  # fmt: skip
    outcome = "ok"
    try:
        op.execute(context={})  # type: ignore[arg-type]
    except Exception as exc:
        outcome = f"failed: {exc}"
    print(f"t={t} s {decision.direction} {decision.old_parallelism} -> "
          f"{decision.new_parallelism} ({decision.cause}): {outcome}", flush=True)  # fmt: skip
    return {
        "t": t,
        "direction": decision.direction,
        "old": decision.old_parallelism,
        "new": decision.new_parallelism,
        "cause": decision.cause,
        "reason": decision.reason,
        "figures": dict(decision.figures),
        "outcome": outcome,
        "took_s": round(time.monotonic() - started, 1),
    }


def figures(decisions: list[dict], samples: list[dict], marks: dict[str, float],
            args: argparse.Namespace) -> dict[str, Any]:  # fmt: skip
    """The module doc's figures from the decisions and the 2 s samples."""

    def between(a: float, b: float) -> list[dict]:
        return [d for d in decisions if a <= d["t"] < b and d["outcome"] == "ok"]

    settled = None
    up_samples = [s for s in samples if marks["up"] <= s["t"] < marks["down"]]
    for s in up_samples:
        if s["t"] + args.settle - 2 > marks["down"]:
            break  # not settle s of the step left
        span = [x for x in up_samples if s["t"] <= x["t"] <= s["t"] + args.settle]
        if span[-1]["t"] - s["t"] < args.settle - 2:
            continue  # no samples while a replacement ran: a later start may still settle
        calm = all(not x["backpressure"] for x in span)
        if calm and span[-1]["backlog"] <= span[0]["backlog"]:
            settled = s["t"]
            break
    before_up = [s["parallelism"] for s in samples if s["t"] < marks["up"] and s["parallelism"]]
    back = None
    if before_up:
        downs = between(marks["down"], marks["noisy"])
        for k, d in enumerate(downs, start=1):
            if d["new"] <= before_up[-1]:
                back = k
                break
    noisy = between(marks["noisy"], float("inf"))
    applied = between(0.0, float("inf"))
    # A flap: a noisy-phase decision reversing the one before it within the cooldown plus
    # one window, counted from when that one's replacement finished (the sensor's cooldown
    # runs from there; counted from the decision, a replacement longer than a window would
    # hide every flap).
    flaps = sum(
        1
        for a, b in itertools.pairwise(applied)
        if b["t"] >= marks["noisy"]
        and a["direction"] != b["direction"]
        and b["t"] - (a["t"] + a["took_s"]) <= args.cooldown + METRICS_WINDOW_S
    )
    return {
        "settled_at_s": settled,
        "up_decisions": len(
            between(marks["up"], settled if settled is not None else marks["down"])
        ),
        "down_decisions": back,
        "noisy_decisions": len(noisy),
        "flaps": flaps,
        "marks": marks,
    }


def settled_decisions(run: dict[str, Any] | None) -> int | None:
    """The up figure, or None when the run never settled within the step."""
    if run is None or run["settled_at_s"] is None:
        return None
    return run["up_decisions"]


def meets(run: dict[str, Any]) -> bool:
    return bool(
        run["exact"]
        and run["settled_at_s"] is not None
        and run["up_decisions"] <= 2
        and run["down_decisions"] is not None
        and run["down_decisions"] <= 3
        and run["flaps"] == 0
    )


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    """Per policy: the offered rate, the backlog and the parallelism over time, decisions marked."""
    plt = pyplot()
    fig, axes = plt.subplots(len(runs), 1, figsize=(9, 3.2 * len(runs)), squeeze=False)
    for ax, (policy, run) in zip(axes[:, 0], runs.items(), strict=True):
        t = [s["t"] for s in run["samples"]]
        ax.plot(t, [s["rate"] for s in run["samples"]], label="offered records/s", lw=1)
        ax.plot(t, [s["backlog"] for s in run["samples"]], label="backlog (records)", lw=1)
        ax.set_ylabel("records, records/s")
        lanes = ax.twinx()
        lanes.step(t, [s["parallelism"] or float("nan") for s in run["samples"]], "k", where="post",
                   lw=1.5, label="parallelism")  # fmt: skip
        lanes.set_ylabel("lanes")
        for d in run["decisions"]:
            lanes.axvline(d["t"], color="r" if d["direction"] == "up" else "g", ls=":", lw=1)
        for mark in run["marks"].values():
            ax.axvline(mark, color="grey", lw=0.5)
        ax.set_title(f"{policy}: {len(run['decisions'])} decisions (red up, green down), "
                     f"{run['flaps']} flaps, exact {run['exact']}")  # fmt: skip
        ax.legend(loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("s since the load began")
    save_figure(fig, path)


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=3)
    p.add_argument("--rate", type=float, default=800.0, help="base records/s")
    p.add_argument("--ms-per-record", type=float, default=0.5)
    p.add_argument("--warm", type=float, default=120.0, help="s at the base rate first")
    p.add_argument("--step", type=float, default=300.0, help="s at 4x, then s back at 1x")
    p.add_argument("--noisy-minutes", type=float, default=30.0)
    p.add_argument("--noise-every", type=float, default=20.0, help="s per noisy level")
    p.add_argument("--settle", type=float, default=60.0, help="s of calm that ends the step")
    p.add_argument("--cooldown", type=float, default=60.0, help="scaling.cooldown_s")
    p.add_argument("--max-lanes", type=int, default=4)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--drain", type=float, default=240.0, help="s to drain after the load")
    p.add_argument("--policies", default="paper,adaptive")
    return p


def _run(args: argparse.Namespace) -> int:

    runs: dict[str, dict[str, Any]] = {}
    summary: dict[str, Any] = {}
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        for policy in args.policies.split(","):
            runs[policy] = one_policy(plat, Path(tmp), policy, args)
            r = runs[policy]
            print(f"{policy}: up {r['up_decisions']} decisions (settled at {r['settled_at_s']} s),"
                  f" down {r['down_decisions']}, noisy {r['noisy_decisions']} decisions, "
                  f"{r['flaps']} flaps, exact {r['exact']}", flush=True)  # fmt: skip
            # written after every policy: a run stopped during the next keeps this one's
            summary = save(runs, args)
    return 0 if summary.get("meets_target") else 1


def save(runs: dict[str, dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """Write the JSON and the figure of the policies run so far; returns the summary."""
    adaptive = runs.get("adaptive")
    paper = runs.get("paper")
    summary = {
        "metric": "decisions after a 4x step up until no backlog growth and no backpressure",
        "unit": "decisions",
        "candidate": "adaptive policy",
        "baseline": "paper policy (SPEC E, Algorithm 2)",
        # None: never settled within the step (the decisions alone would flatter it)
        "candidate_value": settled_decisions(adaptive),
        "baseline_value": settled_decisions(paper),
        "ratio": None,
        "figures": {
            k: {f: r[f] for f in ("up_decisions", "down_decisions", "flaps", "exact")}
            for k, r in runs.items()
        },
        "target": "adaptive: <= 2 decisions up, <= 3 down, 0 flaps, exact counts",
        "meets_target": bool(adaptive and meets(adaptive)),
        "params": vars(args),
        "runs": runs,
    }
    write_result("autoscale_live", summary)
    plot(runs, RESULTS / "autoscale_live.png")
    return summary


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
