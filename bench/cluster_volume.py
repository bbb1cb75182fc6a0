"""The process cluster at volume: 2M records through a lost Spark worker and a rescale, exact.

``flowctl cluster up`` (Tansu on its memory engine, the cluster's default, or with
``--tansu-storage s3`` on the local moto S3; memcached, the PostgreSQL databases, Redis,
a Spark master and two workers, split Airflow with two Celery workers) in a temporary
home, on free ports and databases of its own, the shipped ``wordcount`` pipeline at its
defaults. Both rates compared are capacity, records/s with work waiting, and no ingest
runs beside either: first ``--records`` lines are ingested into the pipeline's Eden
(``flowctl ingest``'s code: the pipeline's synthetic Zipf text, its codec and producer)
with nothing reading it. Then the baselines, on the same machine, broker and log: the
flow job on ``local[2]`` (2 lanes), under a pipeline name of its own, drains the first
``--baseline-records`` of that same topic (default: the records the cluster's stream
makes durable before the kill), once with its results in a SQLite file (the embedded
default's database) and once in the cluster's PostgreSQL (the cluster's services, so that
only Spark's layout differs from the cluster's run: the target's baseline). Then, as a
user would, through the Airflow REST API:
the stream DAG triggered (parallelism 2) on the waiting backlog; when 30 % of the
records are durable (70 % still waiting), worker 1's JVM and its executors are
SIGKILLed; after the resume and 30 % more, ``flowctl cluster up`` restarts the worker
and the rescale DAG is triggered (``change`` = up, 2 -> 4 lanes) while the rest of the
backlog drains; once every record is durable the reconcile DAG runs, and the stored
counts are compared with the words of every line read back from the log. ``cluster
down --purge`` always ends the run.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.cluster_volume \\
        [--records 2000000] [--baseline-records 600000] [--tansu-storage memory|s3]

Durable records are the pipeline's committed offsets in the cluster's database, sampled
every 0.5 s. Targets: durable progress resumes within 60 s of the kill (the end of the
longest stall between durable advances that ends after the kill); records/s from the
kill to the rescale (the stall included; from the resume is reported too) >= 0.5x
records/s from the first durable batch to the kill; that rate before the kill >= 0.85x
the local[2] baseline's on the cluster's database (from its first durable batch to its
last record, the same stretch of the same log; the ratio to the SQLite run is reported
beside it); the rescale's outcome ok; the reconcile run succeeds and the
stored counts equal the log's words (0 lost, 0 doubled). Writes
bench/results/cluster_volume.json and .png.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import secrets
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from bench._common import Platform
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
from bench._measure import drain_run
from bench._profile import CpuPhases
from bench.lib.airflow_api import AirflowApi
from flowctl.adapters import kafka_ends, kafka_log, results
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.replacements import ReplacementLog
from flowctl.ingest import IngestRequest, ingest
from flowctl.pipelines.config import load_pipeline_config
from flowctl.pipelines.wordcount import count_words
from flowctl.services import cluster
from flowctl.services.airflow import airflow_home
from flowctl.services.cluster_layout import (
    DEFAULT_TANSU_STORAGE,
    STORAGE_VARIABLE,
    TANSU_STORAGES,
    ClusterLayout,
)
from flowctl.services.process import process_tree
from flowctl.textgen import zipf_lines

PIPELINE = "wordcount"
STREAM, RESCALE, RECONCILE = (f"{k}_{PIPELINE}" for k in ("stream", "rescale", "reconcile"))
KILL_AT = 0.3  # share of the records durable when worker 1 is killed
RESCALE_AFTER = 0.3  # share of the records made durable after the resume before the rescale
#: Where the machine's CPU goes on the cluster, by a piece of each process's command line.
CLUSTER_ROLES: tuple[tuple[str, str], ...] = (
    (
        "bench.cluster_volume",
        "this bench (sampling, the exact check)",
    ),  # first: its flags say tansu
    ("moto.server", "S3 (moto)"),
    ("kafka.Kafka", "brokers (Apache Kafka)"),
    ("tansu", "broker (Tansu)"),
    ("memcached", "memcached"),
    ("pyspark.daemon", "Spark Python workers"),
    ("streaming_source_runner", "planner (source runner)"),
    ("CoarseGrainedExecutorBackend", "executors (JVM)"),
    ("deploy.worker.Worker", "Spark workers"),
    ("deploy.master.Master", "Spark master"),
    ("SparkSubmit", "drivers (JVM)"),
    ("spark_jobs/", "drivers (Python)"),
    ("postgres", "PostgreSQL"),
    ("airflow", "Airflow"),
)
#: A backlog of at least one batch (``max_records_per_batch``): the stream is not waiting
#: for records. The whole run's records are ingested before the stream starts, so every
#: interval before the kill should have it; the figure checks that it did.
MIN_BACKLOG = 50_000
TARGETS = {
    "resume_s": 60.0,
    "after_over_before": 0.5,
    "before_over_local": 0.85,
}


# -- the cluster ----------------------------------------------------------------------------


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through cluster down --purge


@contextlib.contextmanager
def cluster_up(home: Path, tansu_storage: str) -> Iterator[ClusterLayout]:
    """``flowctl cluster up`` in ``home`` on free ports and databases of its own (the
    default ports and names may belong to another deployment on this machine); always
    ``cluster down --purge`` on the way out, SIGTERM and SIGINT included."""
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    tag = secrets.token_hex(4)
    layout = ClusterLayout.private(home, f"vol_{tag}", tansu_storage=tansu_storage)
    try:
        for message in cluster.up(layout):
            say(message)
        yield layout
    finally:
        for message in cluster.down(layout, purge=True):
            say(message)


def say(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


def kill_worker(layout: ClusterLayout, name: str = "spark-worker-1") -> list[int]:
    """SIGKILL a Spark worker's JVM and its executor JVMs; the pids killed."""
    worker = next(d for d in cluster.spark_daemons(layout) if d.name == name)
    record = worker.running()
    if record is None:
        raise RuntimeError(f"{name} is not running")
    tree = process_tree(record.pid)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return tree


# -- what is durable, over time ---------------------------------------------------------------


@dataclass
class Sampler:
    """``(t, durable, produced)`` every ``every_s``: durable = the pipeline's committed
    offsets in the cluster's database, produced = records in Eden (every one ingested
    before the stream starts), so ``produced - durable`` is the work waiting."""

    plane: ControlPlane
    topic: str
    t0: float
    every_s: float = 0.5
    samples: list[tuple[float, int, int]] = field(default_factory=list)
    produced: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def durable(self) -> int:
        try:
            return sum(self.plane.committed_offsets(PIPELINE, self.topic).values())
        except Exception:  # the stream's schema not there yet, or a reconnect
            return self.samples[-1][1] if self.samples else 0

    def run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic() - self.t0, self.durable(), self.produced))
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def last(self) -> int:
        return self.samples[-1][1] if self.samples else 0

    def wait(self, what: str, check: Callable[[], bool], timeout_s: float) -> float:
        """Until ``check()``; the time it held. Raises after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: not within {timeout_s:.0f} s (durable {self.last()})")
            time.sleep(0.25)
        return self.now()


def advances(samples: list[tuple[float, int, int]]) -> list[tuple[float, int]]:
    """The samples at which the durable count moved: ``(t, durable)``."""
    out: list[tuple[float, int]] = []
    for t, n, _ in samples:
        if not out or n > out[-1][1]:
            out.append((t, n))
    return out


def resume_after(samples: list[tuple[float, int, int]], t_kill: float, until: float) -> float:
    """Seconds from the kill to the end of the longest stall between durable advances that
    ends after it (within ``until``): when durable progress resumed."""
    moves = [(t, n) for t, n in advances(samples) if t <= until]
    best_end, best_gap = None, -1.0
    for (t_a, _), (t_b, _) in itertools.pairwise(moves):
        if t_b > t_kill and t_b - t_a > best_gap:
            best_end, best_gap = t_b, t_b - t_a
    if best_end is None:
        raise RuntimeError("no durable advance after the kill")
    return best_end - t_kill


def durable_at(samples: list[tuple[float, int, int]], t: float) -> int:
    return max((n for s, n, _ in samples if s <= t), default=0)


def rate_between(samples: list[tuple[float, int, int]], t_a: float, t_b: float) -> float | None:
    n_a, n_b = durable_at(samples, t_a), durable_at(samples, t_b)
    return round((n_b - n_a) / (t_b - t_a)) if t_b > t_a else None


def backlogged_rate(
    samples: list[tuple[float, int, int]], t_a: float, t_b: float, min_backlog: int
) -> tuple[float | None, float]:
    """Records/s over the sample intervals in ``[t_a, t_b]`` that began with at least
    ``min_backlog`` records ingested and not durable (the stream's capacity, not the
    ingest's rate), and the seconds those intervals cover."""
    moved, seconds = 0, 0.0
    window = [s for s in samples if t_a <= s[0] <= t_b]
    for (t0, n0, p0), (t1, n1, _) in itertools.pairwise(window):
        if p0 - n0 >= min_backlog:
            moved += n1 - n0
            seconds += t1 - t0
    return (round(moved / seconds) if seconds else None), round(seconds, 1)


def stretch(samples: list[tuple[float, int, int]], t_a: float, t_b: float) -> dict[str, Any]:
    """What a rate between ``t_a`` and ``t_b`` covers: the seconds, the records made
    durable, and the fewest records waiting (ingested, not durable) at any sample in it,
    so a reader sees whether work waited the whole time (capacity) or not (pace)."""
    waiting = [p - n for t, n, p in samples if t_a <= t <= t_b]
    return {
        "from_s": round(t_a, 2),
        "to_s": round(t_b, 2),
        "seconds": round(t_b - t_a, 2),
        "records": durable_at(samples, t_b) - durable_at(samples, t_a),
        "min_waiting": min(waiting) if waiting else None,
    }


# -- the run -------------------------------------------------------------------------------


def ingest_backlog(layout: ClusterLayout, n: int, seed: int) -> dict[str, Any]:
    """``n`` lines into the pipeline's Eden before anything reads it (``flowctl ingest``'s
    code), so every rate measured afterwards is a drain with work waiting, with no
    producer beside it."""
    say(f"ingesting {n} lines into {load_pipeline_config(PIPELINE).eden_topic}, unread")
    request = IngestRequest.parse(pipeline=PIPELINE, lines=n, seed=seed)
    done = ingest(request, layout.settings.kafka_bootstrap)
    return {
        "records": done.records,
        "seconds": round(done.seconds, 1),
        "records_per_s": round(done.records / done.seconds) if done.seconds else None,
    }


def baseline_local(layout: ClusterLayout, work: Path, n: int, database: str) -> dict[str, Any]:
    """The flow job on ``local[2]`` (2 lanes) drains the first ``n`` records of the
    pipeline's Eden (already holding every record: the same log the cluster's stream
    then reads, at the same length) under a pipeline name of its own, its results in
    ``database`` (a SQLAlchemy URL; ``""``: a SQLite file, the embedded default's);
    records/s from its first durable batch to its ``n``-th record."""
    plat = Platform(layout.settings, work, database=database)
    plat.plane.ensure_schema()
    config = load_pipeline_config(PIPELINE)
    rate, info = drain_run(
        plat,
        work,
        config.eden_topic,
        n,
        2,
        label="volbase",
        baseline=False,
        partitions=config.partitions,
        timeout_s=900.0,
    )
    info.pop("settings", None)
    kind = sa.engine.make_url(database).get_backend_name() if database else "sqlite"
    return {"records": n, "records_per_s": rate, "database": kind, **info}


def task_log(layout: ClusterLayout, dag_id: str, run_id: str) -> str:
    logs = airflow_home(layout.settings) / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}"
    return "\n".join(p.read_text(errors="replace") for p in sorted(logs.glob("*/attempt=*.log")))


def _event_of(line: str) -> str:
    """A task log line's message (Airflow writes JSON lines with it under ``event``)."""
    with contextlib.suppress(ValueError, TypeError, KeyError):
        return str(json.loads(line)["event"])
    return line.strip()


def compare_with_log(layout: ClusterLayout, eden: str, n: int, seed: int) -> dict[str, Any]:
    """The stored counts against the words of every line read back from ``eden`` (as the
    cluster tests' ``_exact``): lines missing from the log, lines the producer wrote twice,
    words short (lost) and in excess (doubled)."""
    consumer = kafka_log.new_consumer(layout.settings.kafka_bootstrap)
    try:
        ends = kafka_ends.latest_offsets(consumer, eden, timeout_s=120.0)
        in_log = [
            r.value.decode()
            for partition, end in ends.items()
            for r in kafka_log.read_range(consumer, eden, partition, 0, end)
        ]
    finally:
        kafka_log.close_quietly(consumer)
    produced, logged = Counter(zipf_lines(n, seed=seed)), Counter(in_log)
    expected = count_words(in_log)
    stored = results.word_counts(layout.settings.resolved_database_url, PIPELINE)
    return {
        "lines_in_log": len(in_log),
        "lines_missing_from_log": sum((produced - logged).values()),
        "lines_written_twice": sum((logged - produced).values()),
        "words_expected": sum(expected.values()),
        "words_stored": sum(stored.values()),
        "words_lost": sum(max(0, c - stored.get(w, 0)) for w, c in expected.items()),
        "words_doubled": sum(max(0, c - expected.get(w, 0)) for w, c in stored.items()),
    }


def run_volume(
    layout: ClusterLayout, args: argparse.Namespace, events: dict[str, float], in_eden: int
) -> dict[str, Any]:
    """The cluster's part, on ``in_eden`` records already waiting: stream, kill, resume,
    rescale, drain, reconcile."""
    api = AirflowApi(f"http://127.0.0.1:{layout.airflow_port}", *cluster.admin_login(layout))
    url = layout.settings.resolved_database_url
    eden, n = load_pipeline_config(PIPELINE).eden_topic, args.records
    for dag_id in (STREAM, RESCALE, RECONCILE):
        api.wait_for_dag(dag_id, timeout=180)
        api.unpause(dag_id)
    plane = ControlPlane(url)
    plane.ensure_schema()

    cpu = CpuPhases(CLUSTER_ROLES)
    sampler = Sampler(plane, eden, time.monotonic(), produced=in_eden)
    threading.Thread(target=sampler.run, daemon=True).start()
    out: dict[str, Any] = {"samples": sampler.samples}
    try:
        cpu.mark("stream triggered")
        api.trigger(STREAM, "volume-blue", {"parallelism": 2, "colour": "blue"})

        def active() -> bool:
            return bool(plane.topologies(PIPELINE, states=["ACTIVE"]))

        events["stream_active"] = sampler.wait("the stream ACTIVE", active, 300)
        say(f"stream ACTIVE on a backlog of {in_eden} records")
        events["first_durable"] = sampler.wait(
            "a first durable batch", lambda: sampler.last() > 0, 300
        )
        cpu.mark("first durable")  # the stretch the before-kill rate is measured over
        events["kill"] = sampler.wait(
            "the kill point", lambda: sampler.last() >= KILL_AT * n, args.timeout
        )
        cpu.mark("kill")
        killed = kill_worker(layout)
        say(f"spark-worker-1 and its executors SIGKILLed: pids {killed}")
        at_kill = sampler.last()
        sampler.wait(
            "the resume and the stretch after it",
            lambda: sampler.last() >= at_kill + RESCALE_AFTER * n,
            args.timeout,
        )
        events["rescale"] = sampler.now()
        cpu.mark("rescale")
        events["resume"] = events["kill"] + resume_after(
            sampler.samples, events["kill"], events["rescale"]
        )
        for message in cluster.up(layout):  # an operator brings the lost worker back
            say(message)
        events["worker_back"] = sampler.now()
        api.trigger(RESCALE, "volume-up", {"change": "up", "reason": "cluster_volume bench"})
        events["rescale_requested"] = sampler.now()
        say("rescale up requested")
        rescale_state = api.wait_run(RESCALE, "volume-up", timeout=args.timeout)
        events["rescale_done"] = sampler.now()
        out["rescale"] = {
            "run_state": rescale_state,
            "events": [e.to_dict() for e in ReplacementLog(url).replacements(PIPELINE)],
        }
        say(f"rescale {rescale_state}: {[e['outcome'] for e in out['rescale']['events']]}")
        ends = kafka_ends.latest_offsets(layout.settings.kafka_bootstrap, eden, timeout_s=120.0)
        in_log = sum(ends.values())
        events["all_durable"] = sampler.wait(
            "every record durable", lambda: sampler.last() >= in_log, args.timeout
        )
        say(f"all {in_log} records durable")
    finally:
        sampler.stop()
        cpu.mark("all durable")
        out["cpu"] = cpu.shares()
    api.trigger(RECONCILE, "volume-reconcile", {})
    out["reconcile_state"] = api.wait_run(RECONCILE, "volume-reconcile", timeout=args.timeout)
    events["reconciled"] = sampler.now()
    log = task_log(layout, RECONCILE, "volume-reconcile")
    out["reconcile_report"] = [
        _event_of(line)
        for line in log.splitlines()
        if "records by outcome" in line or "OK:" in line or "MISMATCH" in line
    ]
    say(f"reconcile {out['reconcile_state']}: {out['reconcile_report']}")
    out["exact"] = compare_with_log(layout, eden, n, args.seed)
    say(f"stored counts against the log: {out['exact']}")
    return out


# -- figures ---------------------------------------------------------------------------------


def summarise(
    run: dict[str, Any],
    events: dict[str, float],
    local: dict[str, Any],
    local_sqlite: dict[str, Any],
) -> dict[str, Any]:
    """The measured figures and each target's pass/fail: ``local`` is the local[2] run on
    the cluster's services (the target's), ``local_sqlite`` the one on SQLite (reported)."""
    samples = run["samples"]
    before = rate_between(samples, events["first_durable"], events["kill"])
    after = rate_between(samples, events["kill"], events["rescale"])  # the stall included
    after_resume = rate_between(samples, events["resume"], events["rescale"])
    backlogged, backlogged_s = backlogged_rate(
        samples, events["first_durable"], events["kill"], MIN_BACKLOG
    )
    resume_s = round(events["resume"] - events["kill"], 2)
    stretches = {
        "before_kill": {"between": "first_durable -> kill"}
        | stretch(samples, events["first_durable"], events["kill"]),
        "after_kill": {"between": "kill -> rescale (the stall included)"}
        | stretch(samples, events["kill"], events["rescale"]),
        "resume_to_rescale": {"between": "resume -> rescale"}
        | stretch(samples, events["resume"], events["rescale"]),
        "local2": {
            "between": "local[2]'s first durable batch -> its last record, the same Eden, "
            "the cluster's PostgreSQL",
            "seconds": local.get("measured_s"),
            "records": local.get("measured_records"),
        },
        "local2_sqlite": {
            "between": "the same on a SQLite file (the embedded default's database)",
            "seconds": local_sqlite.get("measured_s"),
            "records": local_sqlite.get("measured_records"),
        },
    }
    rescale_ok = run["rescale"]["run_state"] == "success" and [
        (e["outcome"], e["old_parallelism"], e["new_parallelism"]) for e in run["rescale"]["events"]
    ] == [("ok", 2, 4)]
    exact = run["exact"]
    reconcile_exact = (
        run["reconcile_state"] == "success"
        and exact["words_lost"] == 0
        and exact["words_doubled"] == 0
        and exact["lines_missing_from_log"] == 0
    )
    met = {
        "resume_within_60s": resume_s <= TARGETS["resume_s"],
        "after_kill_ge_0.5x_before": (ratio(after, before) or 0) >= TARGETS["after_over_before"],
        "before_kill_ge_0.85x_local2": (ratio(before, local["records_per_s"]) or 0)
        >= TARGETS["before_over_local"],
        "rescale_ok": rescale_ok,
        "reconcile_exact": reconcile_exact,
    }
    return {
        "records_per_s_before_kill": before,
        "records_per_s_after_kill": after,
        "records_per_s_local2": local["records_per_s"],
        "records_per_s_local2_sqlite": local_sqlite["records_per_s"],
        "records_per_s_resume_to_rescale": after_resume,
        "records_per_s_before_kill_backlogged": backlogged,
        "backlogged_s_before_kill": backlogged_s,
        "backlogged_over_local2": ratio(backlogged, local["records_per_s"]),
        "after_over_before": ratio(after, before),
        "before_over_local2": ratio(before, local["records_per_s"]),
        "before_over_local2_sqlite": ratio(before, local_sqlite["records_per_s"]),
        "resume_s": resume_s,
        "backlog_at_kill": _backlog(samples, events["kill"]),
        "backlog_at_rescale": _backlog(samples, events["rescale"]),
        "before_kill_backlogged_throughout": (stretches["before_kill"]["min_waiting"] or 0)
        >= MIN_BACKLOG,
        "stretches": stretches,
        "rescale_s": round(events["rescale_done"] - events["rescale_requested"], 1),
        "targets_met": met,
    }


def _backlog(samples: list[tuple[float, int, int]], t: float) -> int:
    """Records acknowledged by the ingest and not yet durable, at ``t`` (the producer
    reports in chunks of 10,000: a lower bound)."""
    _, n, produced = max((s for s in samples if s[0] <= t), key=lambda s: s[0])
    return produced - n


def plot(run: dict[str, Any], events: dict[str, float], path: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    t = [s[0] for s in run["samples"]]
    ax.plot(t, [s[2] for s in run["samples"]], label="ingested (acknowledged)", color="grey")
    ax.plot(t, [s[1] for s in run["samples"]], label="durable (committed offsets)", color="C0")
    for name, colour in (
        ("kill", "red"),
        ("resume", "green"),
        ("worker_back", "orange"),
        ("rescale_requested", "purple"),
        ("rescale_done", "purple"),
    ):
        if name in events:
            ax.axvline(events[name], color=colour, linestyle="--", linewidth=1, label=name)
    ax.set_xlabel("s since the stream was triggered")
    ax.set_ylabel("records")
    ax.set_title("process cluster: worker 1 SIGKILLed, rescale 2 -> 4, then reconcile")
    ax.legend(loc="upper left", fontsize=8)
    save_figure(fig, path)


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=11)
    p.add_argument("--records", type=int, default=2_000_000, help="lines ingested (default 2M)")
    p.add_argument(
        "--baseline-records",
        type=int,
        default=None,
        help=(
            "records of the same Eden the local[2] run drains (default: the share durable "
            f"at the kill, {round(KILL_AT * 100)} %% of --records)"
        ),
    )
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds any one wait may take")
    p.add_argument(
        "--output",
        default="cluster_volume",
        help="result name: bench/results/<output>.json and .png (default cluster_volume)",
    )
    p.add_argument(
        "--tansu-storage",
        choices=TANSU_STORAGES,
        default=DEFAULT_TANSU_STORAGE,
        help=f"the cluster's Tansu engine ({STORAGE_VARIABLE}; default "
        f"{DEFAULT_TANSU_STORAGE}; s3 runs it on a local moto server)",
    )
    return p


def check_args(args: argparse.Namespace) -> None:
    """``--records`` >= 10,000 and ``--baseline-records`` within 10,000..``--records``
    (the baseline drains part of the same log); the default baseline filled in."""
    if args.records < 10_000:
        raise BadArgument(f"--records={args.records} must be >= 10000")
    if args.baseline_records is None:
        args.baseline_records = round(KILL_AT * args.records)
    if not 10_000 <= args.baseline_records <= args.records:
        raise BadArgument(
            f"--baseline-records={args.baseline_records} must be >= 10000 and <= "
            f"--records ({args.records}): the baseline drains part of the same log"
        )


def _run(args: argparse.Namespace) -> int:
    check_args(args)
    events: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="flowctl-volume-") as tmp:
        work = Path(tmp)
        t_up = time.monotonic()
        with cluster_up(work / "cluster", args.tansu_storage) as layout:
            up_s = round(time.monotonic() - t_up, 1)
            ingested = ingest_backlog(layout, args.records, args.seed)
            say(f"ingested: {ingested}")
            local_sqlite = baseline_local(layout, work, args.baseline_records, "")
            say(f"local[2] baseline on SQLite: {local_sqlite['records_per_s']} records/s")
            url = layout.settings.resolved_database_url
            local = baseline_local(layout, work, args.baseline_records, url)
            say(f"local[2] baseline on the cluster's database: {local['records_per_s']} records/s")
            run = run_volume(layout, args, events, ingested["records"])
            run["ingest"] = ingested
    summary = summarise(run, events, local, local_sqlite)
    met = all(summary["targets_met"].values())
    path = write_result(
        "cluster_volume",
        {
            "metric": (
                "records/s durable on the process cluster before a worker is killed, "
                "draining a backlog ingested beforehand"
            ),
            "unit": "records/s",
            "candidate": "stream_wordcount on flowctl cluster (2 lanes, 2 Spark workers)",
            "baseline": (
                "the same flow job on local[2] (2 lanes) draining the first records of the "
                "same ready Eden on the cluster's services (same broker, same log, same "
                "PostgreSQL, same memcached), no ingest beside it; the same on a SQLite "
                "file reported beside it"
            ),
            "candidate_value": summary["records_per_s_before_kill"],
            "baseline_value": local["records_per_s"],
            "ratio": summary["before_over_local2"],
            "target": (
                "durable progress resumes <= 60 s after the kill; records/s after >= 0.5x "
                "before; before >= 0.85x local[2]; rescale 2 -> 4 ok; reconcile exact"
            ),
            "meets_target": met,
            **summary,
            "cluster_up_s": up_s,
            "events_s": {k: round(v, 2) for k, v in events.items()},
            "ingest": run.get("ingest"),
            "rescale": run["rescale"],
            "reconcile_state": run["reconcile_state"],
            "reconcile_report": run["reconcile_report"],
            "exact": run["exact"],
            "cpu": run["cpu"],
            "local2": {k: v for k, v in local.items() if k != "series"},
            "local2_sqlite": {k: v for k, v in local_sqlite.items() if k != "series"},
            "params": vars(args),
            "series": [(round(t, 1), d, p) for t, d, p in run["samples"]],
        },
        name=args.output,
    )
    plot(run, events, RESULTS / f"{args.output}.png")
    say(f"{path}: {summary}")
    return 0 if met else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
