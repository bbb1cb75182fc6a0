"""Poison storm: good-record throughput during a storm of malformed lines, and the drain after.

The log-ETL pipeline reads access-log lines sent at a steady ``--rate`` of good lines per
second. After ``--before`` seconds, malformed lines are sent *in addition* for
``--storm`` seconds, so that ``--bad-share`` (a fifth by default) of the lines are
malformed; then good lines only for ``--after`` seconds, and nothing more. A job that
keeps up stores good rows at the same rate throughout.

Measured from outside the job, by the same code for both candidates, every 0.5 s: the
good rows stored (``log_events`` rows of the pipeline) and the DLQ topic's end offsets.

- *storm ratio*: good rows/s stored during the storm over good rows/s before it (the
  first 10 s of the run excluded); target >= 0.8;
- *drain*: from the end of the storm until every good line sent by then is stored and
  every malformed line is in the DLQ; target <= 30 s.

Both run in the same invocation on one platform: this tree (``candidate``, or the tree
``--candidate-tree`` names) and ``main`` at ``--base`` (3b2f8e8 by default), exported
with ``git archive`` into a temporary directory and run from there (its
``spark_jobs/stream.py``, its package first on ``PYTHONPATH``).

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.poison \\
        [--rate 300] [--before 40] [--storm 30] [--after 30] [--lanes 2]

Writes bench/results/poison.json and poison.png; exits 1 if the candidate misses a target.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench._common import (
    Job,
    Platform,
    export_tree,
    old_tree_config,
    pipeline_config,
    platform_up,
    save_log,
    settings_of,
    stop,
    unique_name,
)
from bench._experiment import (
    RESULTS,
    BadArgument,
    experiment_parser,
    pyplot,
    ratio,
    run_experiment,
    save_figure,
    write_result,
)
from bench.lib.submit import spark_submit
from flowctl import loggen
from flowctl.adapters import kafka_ends, kafka_log, schema
from flowctl.config import PROJECT_ROOT

BASE = "3b2f8e8"
WARMUP = 500
SKIP_S = 10.0  # the first seconds of the run are not part of "before"
STORM_TARGET = 0.8
DRAIN_TARGET_S = 30.0
PLOT_BIN_S = 5.0


def lines(count: int, seed: int, malformed: bool) -> list[bytes]:
    fraction = 1.0 if malformed else 0.0
    return [
        line.text.encode()
        for line in loggen.labelled_lines(count, seed=seed, malformed_fraction=fraction)
    ]


class StormProducer:
    """Sends good lines at ``rate``/s, plus malformed ones during the storm (20 ms slices)."""

    def __init__(self, plat: Platform, topic: str, args: Any) -> None:
        self.plat, self.topic, self.args = plat, topic, args
        total_s = args.before + args.storm + args.after
        self.good = lines(int(args.rate * total_s) + 1, args.seed, malformed=False)
        bad_rate = args.rate * args.bad_share / (1 - args.bad_share)
        self.bad = lines(int(bad_rate * args.storm) + 1, args.seed + 1, malformed=True)
        self.bad_rate = bad_rate
        self.sent_good = 0
        self.sent_bad = 0
        self.good_at_storm_end: int | None = None
        self.started = 0.0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self.started = time.monotonic()
        self.thread.start()

    def _run(self) -> None:
        from kafka import KafkaProducer

        a = self.args
        producer = KafkaProducer(bootstrap_servers=self.plat.bootstrap, acks=1, linger_ms=5)
        storm_from, storm_to = a.before, a.before + a.storm
        end = storm_to + a.after
        while True:
            t = time.monotonic() - self.started
            due_good = min(len(self.good), int(min(t, end) * a.rate))
            due_bad = 0 if t < storm_from else int((min(t, storm_to) - storm_from) * self.bad_rate)
            due_bad = min(due_bad, len(self.bad))
            for value in self.good[self.sent_good : due_good]:
                producer.send(self.topic, value)
            for value in self.bad[self.sent_bad : due_bad]:
                producer.send(self.topic, value)
            producer.flush()
            self.sent_good, self.sent_bad = due_good, due_bad
            if t >= storm_to and self.good_at_storm_end is None:
                self.good_at_storm_end = self.sent_good
            if t >= end:
                break
            time.sleep(0.02)
        producer.close()


def stored_rows(engine: sa.Engine, pipeline: str) -> int:
    e = schema.log_events
    try:
        with engine.connect() as conn:
            query = sa.select(sa.func.count()).where(e.c.pipeline == pipeline)
            return int(conn.execute(query).scalar_one())
    except sa.exc.SQLAlchemyError:  # the table not there yet, or SQLite busy for a moment
        return -1


def dead_lettered(plat: Platform, topic: str) -> int:
    try:
        return sum(kafka_ends.latest_offsets(plat.bootstrap, topic, timeout_s=5.0).values())
    except Exception:  # the topic not created yet, or a slow read: no sample
        return -1


def start_job(plat: Platform, tree: Path, config: Path, topology: str, lanes: int) -> Job:
    """``spark-submit`` ``tree``'s generic stream job, with ``tree``'s package first."""
    env = plat.env({"PYTHONPATH": f"{tree / 'include'}:{tree}"})
    return spark_submit(
        tree / "spark_jobs" / "stream.py",
        ["--pipeline-config", str(config), "--topology-id", topology, "--parallelism", str(lanes)],
        env=env,
        log_path=plat.work_dir / f"{topology}.log",
        topology_id=topology,
    )


def wait_warm(plat: Platform, engine: sa.Engine, job: Job, name: str) -> None:
    kafka_log.ensure_topics(plat.bootstrap, {f"{name}.eden": 4})
    kafka_log.produce(plat.bootstrap, f"{name}.eden", lines(WARMUP, 99, malformed=False))
    deadline = time.monotonic() + 300
    while stored_rows(engine, name) < WARMUP:
        if not job.alive() or time.monotonic() > deadline:
            raise RuntimeError(f"warm-up not stored; log:\n{job.log_tail()}")
        time.sleep(0.5)


def measure(
    plat: Platform, work: Path, tree: Path, label: str, args: Any, *, old_tree: bool = False
) -> dict[str, Any]:
    """One job on its own pipeline: warm up, before / storm / after, drain, stop.

    ``old_tree``: ``tree`` is an older export (the baseline), run with its own shipped
    log-ETL config and on a database of its own: it knows neither this tree's config keys
    (``[sink]``) nor its schema version."""
    name = unique_name("psn")
    if old_tree:
        plat = dataclasses.replace(plat, work_dir=work / f"{name}-db")
        plat.work_dir.mkdir()
        config = old_tree_config(tree, work, name, f"{name}.eden", shipped="logetl")
    else:
        config = pipeline_config(work, name, shipped="logetl")
    engine = sa.create_engine(plat.database_url)
    job = start_job(plat, tree, config, f"{name}-1", args.lanes)
    samples: list[tuple[float, int, int, int, int]] = []  # t, stored, dlq, good, bad sent
    try:
        wait_warm(plat, engine, job, name)
        producer = StormProducer(plat, f"{name}.eden", args)
        producer.start()
        storm_end = args.before + args.storm
        deadline = storm_end + args.after + args.drain_timeout
        while job.alive():
            t = time.monotonic() - producer.started
            stored = stored_rows(engine, name) - WARMUP
            dlq = dead_lettered(plat, f"{name}.dlq")
            samples.append((round(t, 2), stored, dlq, producer.sent_good, producer.sent_bad))
            done = not producer.thread.is_alive()
            if done and stored >= producer.sent_good and dlq >= producer.sent_bad:
                break
            if t > deadline:
                break
            time.sleep(0.5)
        producer.thread.join(timeout=30)
    finally:
        code = stop(plat, job)
        save_log(job, f"poison-{label}")
        engine.dispose()
    return summarize(samples, producer, args) | {
        "pipeline": name,
        "exit_code": code,
        "settings": settings_of(config),
        "series": samples,
    }


def _stored_at(samples: list[tuple[float, int, int, int, int]], t: float) -> int | None:
    before = [s for s in samples if s[0] <= t and s[1] >= 0]
    return before[-1][1] if before else None


def summarize(samples: list, producer: StormProducer, args: Any) -> dict[str, Any]:
    storm_from, storm_to = args.before, args.before + args.storm
    a, b = _stored_at(samples, SKIP_S), _stored_at(samples, storm_from)
    c = _stored_at(samples, storm_to)
    before = None if a is None or b is None else (b - a) / (storm_from - SKIP_S)
    storm = None if b is None or c is None else (c - b) / args.storm
    good_by_end = producer.good_at_storm_end
    drain_s = None
    for t, stored, dlq, _good, _bad in samples:
        if t < storm_to or good_by_end is None:
            continue
        if stored >= good_by_end and dlq >= producer.sent_bad:
            drain_s = round(t - storm_to, 1)
            break
    last = samples[-1] if samples else (0, 0, 0, 0, 0)
    return {
        "good_rows_per_s_before": None if before is None else round(before, 1),
        "good_rows_per_s_storm": None if storm is None else round(storm, 1),
        "storm_ratio": ratio(storm, before),
        "drain_s": drain_s,
        "good_sent": producer.sent_good,
        "bad_sent": producer.sent_bad,
        "good_stored_at_end": last[1],
        "dlq_at_end": last[2],
    }


def plot(path: Path, runs: dict[str, dict[str, Any]], args: Any) -> None:
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for label, run in runs.items():
        series = [s for s in run["series"] if s[1] >= 0]
        xs, rates = [], []
        last = None
        for sample in series:  # the rate over PLOT_BIN_S bins: batches make single samples spiky
            if last is None or sample[0] - last[0] >= PLOT_BIN_S:
                if last is not None:
                    xs.append(sample[0])
                    rates.append((sample[1] - last[1]) / (sample[0] - last[0]))
                last = sample
        ax1.plot(xs, rates, "o-", label=label, markersize=3)
        ax2.plot([s[0] for s in series], [s[3] - s[1] for s in series], label=label)
    for ax in (ax1, ax2):
        ax.axvspan(args.before, args.before + args.storm, color="red", alpha=0.1)
        ax.set_xlabel("s since the run started (storm shaded)")
        ax.legend()
    ax1.set_ylabel(f"good rows stored / s ({PLOT_BIN_S:g} s bins)")
    ax2.set_ylabel("good lines sent and not stored")
    fig.suptitle(
        f"log ETL, {args.rate:g} good lines/s, {args.bad_share:.0%} malformed in the storm"
    )
    save_figure(fig, path)


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=11)
    p.add_argument("--rate", type=float, default=300.0, help="good lines per second")
    p.add_argument("--bad-share", type=float, default=0.2, help="malformed share in the storm")
    p.add_argument("--before", type=float, default=40.0, help="seconds of good lines first")
    p.add_argument("--storm", type=float, default=30.0, help="seconds of the storm")
    p.add_argument("--after", type=float, default=30.0, help="seconds of good lines after")
    p.add_argument("--drain-timeout", type=float, default=120.0, help="seconds to wait after")
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--base", default=BASE, help="commit of the baseline (main)")
    p.add_argument(
        "--candidate-tree",
        type=Path,
        default=PROJECT_ROOT,
        help="project tree the candidate job runs from (default: this one)",
    )
    return p


def _run(args: argparse.Namespace) -> int:
    for field in ("rate", "storm", "after", "drain_timeout"):
        if getattr(args, field) <= 0:
            raise BadArgument(f"--{field.replace('_', '-')}={getattr(args, field)!r} must be > 0")
    if args.before <= SKIP_S:
        raise BadArgument(
            f"--before={args.before!r} must be > {SKIP_S:g} (the first seconds are skipped)"
        )
    if not 0 < args.bad_share < 1:
        raise BadArgument(f"--bad-share={args.bad_share!r} must lie in (0, 1)")
    if args.lanes < 1:
        raise BadArgument(f"--lanes={args.lanes!r} must be >= 1")
    if not (args.candidate_tree / "spark_jobs" / "stream.py").is_file():
        raise BadArgument(
            f"--candidate-tree={str(args.candidate_tree)!r} has no spark_jobs/stream.py"
        )

    runs: dict[str, dict[str, Any]] = {}
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        base_tree = export_tree(args.base, Path(tmp) / "base")
        for label, tree in ((f"main@{args.base}", base_tree), ("candidate", args.candidate_tree)):
            with contextlib.suppress(FileExistsError):
                (Path(tmp) / label).mkdir()
            base = tree == base_tree
            run = measure(plat, Path(tmp) / label, tree, label.split("@")[0], args, old_tree=base)
            runs[label] = run
            print(
                f"{label}: good rows/s before {run['good_rows_per_s_before']}, storm "
                f"{run['good_rows_per_s_storm']} (ratio {run['storm_ratio']}), drain "
                f"{run['drain_s']} s; stored {run['good_stored_at_end']}/{run['good_sent']}, "
                f"DLQ {run['dlq_at_end']}/{run['bad_sent']}",
                flush=True,
            )

    cand, base = runs["candidate"], runs[f"main@{args.base}"]
    meets = bool(
        cand["storm_ratio"] is not None
        and cand["storm_ratio"] >= STORM_TARGET
        and cand["drain_s"] is not None
        and cand["drain_s"] <= DRAIN_TARGET_S
    )
    summary = {
        "metric": "good-record throughput during the storm / before it",
        "unit": "ratio",
        "candidate": "this tree (shipped logetl settings)",
        "baseline": f"main at {args.base}, same settings",
        "candidate_value": cand["storm_ratio"],
        "baseline_value": base["storm_ratio"],
        "ratio": ratio(cand["storm_ratio"], base["storm_ratio"]),
        "drain_s": {k: r["drain_s"] for k, r in runs.items()},
        "target": (
            f"storm good-record throughput >= {STORM_TARGET}x before, backlog drained within "
            f"{DRAIN_TARGET_S:g} s after the storm"
        ),
        "meets_target": meets,
        "params": vars(args),
        "runs": runs,
    }
    write_result("poison", summary)
    plot(RESULTS / "poison.png", runs, args)
    print(
        f"storm ratio candidate {cand['storm_ratio']} vs main {base['storm_ratio']}; drain "
        f"candidate {cand['drain_s']} s vs main {base['drain_s']} s"
    )
    return 0 if meets else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
