"""Replacement under overload: the overlapped handover, the sequential one and
stop-and-restart, several runs each, in the same run (issue 12's benchmark).

The operator is slowed on purpose (``--ms-per-record`` per record in every lane,
``bench/inject/sitecustomize.py``): a 1-lane topology runs while lines arrive faster
than it can process them; ``--switch-after`` seconds into the load it is replaced by
one with ``--to-lanes`` lanes, each run on a pipeline of its own:

- ``overlap`` and ``sequential``: the real replace operator
  (``BlueGreenReplaceOperator.execute`` with ``handover=...``, waits in the worker),
  whose one override starts green with ``spark-submit`` instead of a DAG run;
- ``stop_restart``: blue gets ``stop``; when it has exited the new topology is
  started on the same pipeline (it resumes from the durable checkpoint).

With ``--standby warm`` (the default) the blue-green methods find a warm standby: a
1-lane topology started ``--warm-standby`` once blue is ACTIVE and READY before the load
starts (as a deployment keeps one ahead of any decision); the operator takes it and gives
it ``--to-lanes`` lanes at activation. ``--standby cold`` starts green at the decision.

Figures of every run (all in the JSON; the summary holds the medians):

- ``pause_s``: the longest gap between consecutive committed micro-batches with
  output (blue's and green's together, Spark's commit logs, warm-up batches left
  out) from the last commit before the decision to the end of the run, against
  ``gap_before_s``, the median gap between committed batches in the ``--baseline-s``
  (60) seconds before the decision: target ``pause_s <= 1.2 x gap_before_s``;
- ``words_missing`` / ``words_duplicated``: stored word counts against the
  plain-Python count of every produced line, after the backlog drained (target 0);
- ``decision_to_done_s``: decision -> blue STOPPED (the operator's return; for
  stop-and-restart the new topology ACTIVE, which comes after the old one stopped);
  target: median <= 15 s;
- ``throughput_overlap`` vs ``throughput_before``: records made durable per second
  (committed offsets, sampled every 0.2 s; the flusher flushes at every batch end) from
  the handover (the operator's signals) to blue DRAINED, widened to
  ``--overlap-min-s`` (the overlap itself is about one batch, shorter than a batch's
  durable step), and in the ``--baseline-s`` before the decision;
- ``startup``: green's start-up phases from its log (``start-up ...: +X s after
  spark-submit``) and, from a 0.1 s watch of the control plane, when each state was
  first seen (s after the decision).

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.replacement \\
        [--runs 5] [--methods overlap,sequential,stop_restart] [--rate 2500] \\
        [--standby warm|cold]

Writes bench/results/<output>.json and <output>.png (``--output``; by default
``replacement`` with the warm standby, ``replacement_cold`` with ``--standby cold``, so
each form keeps its own result); exits 1 if a target of the overlapped handover is missed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
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
    BadArgument,
    experiment_parser,
    pyplot,
    run_experiment,
    save_figure,
    write_result,
)
from bench._measure import committed_total
from flowctl.adapters import kafka_log, results
from flowctl.config import PROJECT_ROOT
from flowctl.pipelines.wordcount import count_words
from flowctl.textgen import zipf_lines

sys.path.insert(0, str(PROJECT_ROOT / "plugins"))  # as Airflow loads its plugins folder

from flowctl_airflow.operators.blue_green import BlueGreenReplaceOperator

METHODS = ("overlap", "sequential", "stop_restart")
#: Issue 12's targets for the overlapped handover.
PAUSE_FACTOR = 1.2
DONE_TARGET_S = 15.0
#: Micro-batches whose Spark commit logs a job keeps (``[stream] spark_batches_to_retain``):
#: all of a run's, since :func:`batch_commits` reads their times after it.
KEPT_BATCHES = 100_000
STARTUP_LINE = re.compile(r"start-up (.+?): \+([0-9.]+) s after")


class DirectReplace(BlueGreenReplaceOperator):
    """The replace operator with green started by ``spark-submit`` (no DAG run)."""

    def __init__(self, *, plat: Platform, config: Path, env: dict[str, str], jobs: list[Job],
                 master: str, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self._bench = (plat, config, env, jobs, master)
        self.green_submitted_at: float | None = None

    def _start_green(self, context: Any, progress: Any, conf: dict[str, Any]) -> None:
        plat, config, env, jobs, master = self._bench
        self.green_submitted_at = time.monotonic()
        keep = kept_checkpoint(plat, conf["topology_id"])
        extra = ["--standby", "--colour", conf["colour"], *keep]
        jobs.append(submit(plat, config, conf["topology_id"], conf["parallelism"], extra=extra,
                           env=env, master=master))  # fmt: skip


def kept_checkpoint(plat: Platform, topology_id: str) -> list[str]:
    """``--checkpoint-dir`` at the job's default place: a job deletes its Spark checkpoint
    after a clean stop unless it was chosen, and :func:`batch_commits` reads the commit
    times from it after the run."""
    return ["--checkpoint-dir", str(plat.settings.home / "checkpoints" / topology_id)]


class StateWatch(threading.Thread):
    """When each (topology, state) of a pipeline was first seen, polled every 0.1 s."""

    def __init__(self, plat: Platform, pipeline: str, t0: float) -> None:
        super().__init__(daemon=True)
        self.plat, self.pipeline, self.t0 = plat, pipeline, t0
        self.seen: dict[tuple[str, str], float] = {}
        self.done = threading.Event()

    def run(self) -> None:
        plane = self.plat.plane
        while not self.done.is_set():
            try:
                for t in plane.topologies(self.pipeline):
                    key = (t.topology_id, t.state)
                    self.seen.setdefault(key, time.monotonic() - self.t0)
            except Exception:
                pass  # SQLite busy for a moment
            self.done.wait(0.1)

    def first(self, topology_id: str, state: str) -> float | None:
        return self.seen.get((topology_id, state))


def wait_state(plat: Platform, topology_id: str, states: set[str], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if plat.plane.get_topology(topology_id).state in states:
                return True
        except Exception:
            pass
        time.sleep(0.1)  # the replace operator's default poll interval
    return False


def steady_producer(plat: Platform, topic: str, lines: list[bytes], rate: float) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=plat.bootstrap, acks=1, linger_ms=5)
    start = time.time()
    for i, value in enumerate(lines):
        delay = start + i / rate - time.time()
        if delay > 0.02:
            time.sleep(delay)
        producer.send(topic, value)
    producer.flush()
    producer.close()


def one_method(
    plat: Platform,
    work: Path,
    method: str,
    args: argparse.Namespace,
    *,
    master: str = "local[2]",
    env: dict[str, str] | None = None,
) -> dict:
    """One replacement by ``method`` on ``master``; every figure of the module doc.

    ``blue_green`` (bench/cluster.py's name) is the operator with the config's handover.
    ``env`` replaces the lane slowdown's environment (which reaches only Python workers
    the driver starts: ``local[N]``)."""
    if env is None:
        env = {
            "FLOWCTL_BENCH_LANE_DELAY": f"{args.ms_per_record},0,1",
            "PYTHONPATH": f"{BENCH / 'inject'}:{PROJECT_ROOT}",
        }
    name = unique_name("rep")
    config = pipeline_config(
        work,
        name,
        partitions=args.partitions,
        # Every batch's commit kept (a run has a few hundred): the pause is read from them.
        stream={"tuple_size": 100, "spark_batches_to_retain": KEPT_BATCHES},
        flow={"latency_target_s": 1.0},
    )
    topic = f"{name}.eden"
    kafka_log.ensure_topics(plat.bootstrap, {topic: args.partitions})
    total = int(args.rate * args.seconds)
    lines = [line.encode() for line in zipf_lines(total, seed=args.seed)]
    blue_id = f"{name}-blue"
    blue = submit(plat, config, blue_id, args.from_lanes, env=env, master=master,
                  extra=kept_checkpoint(plat, blue_id))  # fmt: skip
    jobs: list[Job] = [blue]
    samples: list[tuple[float, int]] = []
    events: dict[str, float] = {}
    t0 = time.monotonic()
    watch = StateWatch(plat, name, t0)
    watch.start()
    try:
        if not wait_state(plat, blue.topology_id, {"ACTIVE"}, 180):
            raise RuntimeError(f"blue not ACTIVE; log:\n{blue.log_tail()}")
        if method != "stop_restart" and getattr(args, "standby", "cold") == "warm":
            # A warm standby, started ahead of any replacement (as a deployment keeps one
            # READY): the replace operator takes it instead of starting green.
            spare = submit(
                plat, config, f"{name}-standby", args.from_lanes, env=env, master=master,
                extra=["--warm-standby", "--colour", "green",
                       *kept_checkpoint(plat, f"{name}-standby")],
            )  # fmt: skip
            jobs.append(spare)
            if not wait_state(plat, spare.topology_id, {"READY"}, 180):
                raise RuntimeError(f"standby not READY; log:\n{spare.log_tail()}")
        producer = threading.Thread(
            target=steady_producer, args=(plat, topic, lines, args.rate), daemon=True
        )
        t0 = watch.t0 = time.monotonic()
        t0_wall = time.time()
        watch.seen.clear()
        producer.start()
        switcher: threading.Thread | None = None
        deadline = t0 + args.seconds + args.timeout
        while time.monotonic() < deadline:
            now = time.monotonic()
            samples.append((now - t0, committed_total(plat, name, topic)))
            # Done when everything is durable and the replacement is over: a run whose
            # backlog drains before green takes over measured no replacement at all.
            if samples[-1][1] >= total and switcher is not None and not switcher.is_alive():
                break
            if switcher is None and now - t0 >= args.switch_after:
                events["decision"] = now - t0
                switcher = threading.Thread(
                    target=lambda: events.update(
                        switch(plat, config, name, method, blue, jobs, args, env, t0, master)
                    ),
                    daemon=True,
                )
                switcher.start()
            time.sleep(0.2)
        producer.join(timeout=30)
    finally:
        watch.done.set()
        for job in jobs:
            stop(plat, job, timeout_s=60)
        for i, job in enumerate(jobs):
            save_log(job, f"replacement-{method}-{name}-{i}")
    green = jobs[-1] if len(jobs) > 1 else None
    commits = batch_commits(plat, [job.topology_id for job in jobs], t0_wall)
    stored = results.word_counts(plat.database_url, name)
    expected = count_words(lines)
    missing = sum(max(0, n - stored.get(w, 0)) for w, n in expected.items())
    extra = sum(max(0, n - expected.get(w, 0)) for w, n in stored.items())
    decision = events.get("decision")
    events.update(event_times(plat, name, t0_wall))
    states = {
        f"{'blue' if t == blue.topology_id else 'green'} {state}": round(at - (decision or 0), 2)
        for (t, state), at in sorted(watch.seen.items(), key=lambda kv: kv[1])
    }
    run = {
        "method": method,
        "pipeline": name,
        "events": {k: round(v, 2) for k, v in events.items()},
        "states_after_decision_s": states,
        "startup": None if green is None else startup_phases(green.log()),
        "words_missing": missing,
        "words_duplicated": extra,
        "complete": bool(samples) and samples[-1][1] >= total,
        "records": total,
        **batch_pause(commits, decision, getattr(args, "baseline_s", 60.0)),
        **overlap_throughput(samples, decision, events, states, args),
        **analyse(samples, decision),
        "samples": [(round(t, 2), n) for t, n in samples],
        "commits": commits,
    }
    done = events.get("done")
    run["decision_to_done_s"] = (
        None if done is None or decision is None else round(done - decision, 2)
    )
    return run


def event_times(plat: Platform, pipeline: str, t0_wall: float) -> dict[str, float]:
    """The replacement event's step times (s since t0): ``handover`` is when the operator
    sent blue ``deactivate`` (and, overlapped, green ``activate``)."""
    import datetime as dt

    from flowctl.adapters.replacements import ReplacementLog

    out: dict[str, float] = {}
    for e in ReplacementLog(plat.plane.engine).replacements(pipeline)[-1:]:
        for key, at in (("green_ready", e.ready_at), ("handover", e.deactivated_at),
                        ("blue_quiet", e.drained_at), ("finished", e.finished_at)):  # fmt: skip
            if at is not None:
                at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
                out[key] = round(at.timestamp() - t0_wall, 2)
    return out


def startup_phases(log_text: str) -> dict[str, float]:
    """``{phase: s after spark-submit}`` from a job's ``start-up ...`` log lines."""
    out: dict[str, float] = {}
    for m in STARTUP_LINE.finditer(log_text):
        out.setdefault(m.group(1), float(m.group(2)))
    return out


def batch_commits(plat: Platform, topologies: list[str], t0_wall: float) -> list[list[Any]]:
    """``[s since t0, topology, batch id]`` of every micro-batch with output.

    Read from each job's Spark checkpoint: ``commits/<id>`` is written when the batch
    has committed; a flow batch exists only when tuples were admitted, a plain one only
    when new records arrived, so every committed batch had output. Warm-up batches of a
    standby topology (a ``"warmup"`` number in the batch's offsets) are left out.
    """
    out = []
    for topology in topologies:
        root = plat.settings.home / "checkpoints" / topology
        if not (root / "commits").is_dir():
            continue
        for f in (root / "commits").iterdir():
            if not f.name.isdigit():
                continue
            try:
                source = json.loads((root / "offsets" / f.name).read_text().splitlines()[2])
            except (OSError, IndexError, ValueError):
                source = {}
            if isinstance(source, dict) and source.get("warmup"):
                continue
            out.append([round(f.stat().st_mtime - t0_wall, 2), topology, int(f.name)])
    return sorted(out)


def batch_pause(commits: list[list[Any]], decision: float | None, baseline_s: float) -> dict:
    """Issue 12's pause: the longest gap between consecutive committed batches with output
    (blue's and green's together), from the last commit before the decision to the end
    of the run (the backlog keeps every method busy until then), and the median gap in
    the ``baseline_s`` before the decision."""
    if decision is None:
        return {"batch_pause_s": None}
    times = [c[0] for c in commits]
    before = [t for t in times if decision - baseline_s <= t <= decision]
    span = [t for t in times if before and t >= before[-1]]
    gaps = [(b - a, a) for a, b in itertools.pairwise(span)]
    base = [b - a for a, b in itertools.pairwise(before)]
    gap_before = statistics.median(base) if base else None
    if not gaps:
        return {"batch_pause_s": None, "gap_before_s": gap_before}
    gap, at = max(gaps)
    return {
        "batch_pause_s": round(gap, 2),
        "batch_pause_from": round(at - decision, 2),
        "gap_before_s": None if gap_before is None else round(gap_before, 3),
        "gap_before_batches": len(before),
        "pause_ratio": None if not gap_before else round(gap / gap_before, 2),
    }


def overlap_throughput(
    samples: list[tuple[float, int]],
    decision: float | None,
    events: dict[str, float],
    states: dict[str, float],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """Durable records/s in the overlap vs in the ``baseline_s`` before the decision.

    The overlap runs from the handover's signals to blue DRAINED (first seen), widened to
    ``overlap_min_s``: durable progress moves in steps of one batch (about 1.5 s here).
    """
    if decision is None:
        return {"throughput_before": None, "throughput_overlap": None}

    def rate(a: float, b: float) -> float | None:
        pts = [(t, n) for t, n in samples if a <= t <= b and n >= 0]
        if len(pts) < 2 or pts[-1][0] <= pts[0][0]:
            return None
        return round((pts[-1][1] - pts[0][1]) / (pts[-1][0] - pts[0][0]))

    first = next((t for t, n in samples if n > 0), decision)
    before = rate(max(first, decision - getattr(args, "baseline_s", 60.0)), decision)
    start = events.get("handover")
    drained = states.get("blue DRAINED")
    if start is None or drained is None:
        return {"throughput_before": before, "throughput_overlap": None}
    end = max(decision + drained, start + getattr(args, "overlap_min_s", 5.0))
    during = rate(start, end)
    return {
        "throughput_before": before,
        "throughput_overlap": during,
        "overlap_window_s": [round(start - decision, 2), round(end - decision, 2)],
        "throughput_ratio": None if not before or during is None else round(during / before, 2),
    }


def switch(plat, config, name, method, blue, jobs, args, env, t0, master) -> dict[str, float]:
    """Replace ``blue`` by a topology of ``--to-lanes`` lanes; returns event times
    (s since t0): ``done`` is blue STOPPED (the operator's return) or, for
    stop-and-restart, the new topology ACTIVE."""
    ev: dict[str, float] = {}
    if method in ("overlap", "sequential", "blue_green"):
        # The replace operator reads the flowctl database through its Airflow connection
        # (set here, not in main: bench/cluster.py calls one_method too).
        os.environ["AIRFLOW_CONN_FLOWCTL_DB"] = json.dumps(
            {"conn_type": "generic", "extra": {"sqlalchemy_url": plat.database_url}}
        )
        op = DirectReplace(
            task_id="replace", pipeline=name, pipeline_config=str(config),
            new_parallelism=args.to_lanes, reason=f"bench: replacement ({method})",
            handover=None if method == "blue_green" else method, deferrable=False,
            start_next_standby=False,  # one replacement measured: no spare started after it
            plat=plat, config=config, env=env, jobs=jobs, master=master,
        )  # fmt: skip
        op.execute(context={})  # type: ignore[arg-type]
        ev["done"] = time.monotonic() - t0
        if op.green_submitted_at is not None:
            ev["green_submitted"] = op.green_submitted_at - t0
    else:
        stop(plat, blue, timeout_s=120)
        ev["old_stopped"] = time.monotonic() - t0
        new = submit(plat, config, f"{name}-restart", args.to_lanes, env=env, master=master,
                     extra=kept_checkpoint(plat, f"{name}-restart"))  # fmt: skip
        ev["green_submitted"] = time.monotonic() - t0
        jobs.append(new)
        wait_state(plat, new.topology_id, {"ACTIVE"}, 180)
        ev["done"] = time.monotonic() - t0
    return ev


def analyse(samples: list[tuple[float, int]], decision: float | None) -> dict[str, Any]:
    """Output pause and time to recover after ``decision``.

    Pause: the longest span after the decision without durable progress. Recover: from
    the decision until, after that pause, the durable rate over 3 s first reaches the
    rate of the 8 s before the decision.
    """
    if decision is None or not samples:
        return {"pause_s": None, "recover_s": None, "rate_before": None}
    before = [(t, n) for t, n in samples if decision - 8 <= t <= decision and n >= 0]
    rate_before = (
        (before[-1][1] - before[0][1]) / (before[-1][0] - before[0][0])
        if len(before) > 1 and before[-1][0] > before[0][0]
        else None
    )
    after = [(t, n) for t, n in samples if t >= decision and n >= 0]
    pause, pause_end = 0.0, decision
    last_t, last_n = after[0] if after else (decision, 0)
    for t, n in after[1:]:
        if n > last_n:
            if t - last_t > pause:
                pause, pause_end = t - last_t, t
            last_t, last_n = t, n
    recover = None
    if rate_before:
        for i, (t, _n) in enumerate(after):
            window = [(tt, nn) for tt, nn in after[: i + 1] if tt >= t - 3]
            if t >= pause_end + 3 and len(window) > 1:
                rate = (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0])
                if rate >= rate_before:
                    recover = round(t - decision, 2)
                    break
    return {
        "pause_s": round(pause, 2),
        "pause_ended_at": round(pause_end, 2),
        "recover_s": recover,
        "rate_before": None if rate_before is None else round(rate_before),
    }


def plot(path: Path, runs: dict[str, list[dict[str, Any]]]) -> None:
    """Records durable over time around the decision, one panel per method; committed
    batches as ticks."""
    plt = pyplot()

    fig, axes = plt.subplots(len(runs), 1, figsize=(7, 2.4 * len(runs)), sharex=True)
    axes = axes if len(runs) > 1 else [axes]
    for ax, (method, method_runs) in zip(axes, runs.items(), strict=True):
        for k, run in enumerate(method_runs):
            decision = run["events"].get("decision")
            if decision is None:
                continue
            pts = [(t - decision, n) for t, n in run["samples"] if n >= 0]
            line = ax.plot([t for t, _ in pts], [n for _, n in pts], lw=1, label=f"run {k + 1}")
            ticks = [c[0] - decision for c in run["commits"]]
            ax.plot(ticks, [0] * len(ticks), "|", color=line[0].get_color(), ms=6)
        ax.axvline(0, color="grey", linestyle=":")
        ax.set_title(method, fontsize=9)
        ax.set_ylabel("records durable")
    axes[-1].set_xlabel("s after the decision (dotted)")
    axes[0].legend(fontsize=7, ncol=5)
    save_figure(fig, path)


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def summarise(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Per method: the median and every run's value of each figure."""
    keys = (
        "batch_pause_s", "gap_before_s", "pause_ratio", "decision_to_done_s",
        "throughput_before", "throughput_overlap", "throughput_ratio", "pause_s", "recover_s",
        "words_missing", "words_duplicated",
    )  # fmt: skip
    return {
        method: {
            key: {"median": median_of(rs, key), "runs": [r.get(key) for r in rs]} for key in keys
        }
        for method, rs in runs.items()
    }


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=5)
    p.add_argument("--runs", type=int, default=5, help="runs per method (interleaved)")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--rate", type=float, default=2500.0, help="records/s produced")
    p.add_argument("--seconds", type=float, default=70.0, help="seconds of load")
    p.add_argument("--switch-after", type=float, default=40.0)
    p.add_argument("--baseline-s", type=float, default=60.0, help="window before the decision")
    p.add_argument("--overlap-min-s", type=float, default=5.0)
    p.add_argument("--ms-per-record", type=float, default=0.6)
    p.add_argument("--from-lanes", type=int, default=1)
    p.add_argument("--to-lanes", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to drain after load")
    p.add_argument(
        "--standby",
        choices=("warm", "cold"),
        default="warm",
        help="blue-green methods: take a warm standby started before the load (warm) or "
        "start green at the decision (cold)",
    )
    p.add_argument(
        "--output",
        default=None,
        help="result name under bench/results/ (default: replacement, or replacement_cold "
        "with --standby cold)",
    )
    return p


def output_name(args: argparse.Namespace) -> str:
    """The result's name: ``--output``, else one per standby form (both are kept)."""
    name = args.output or ("replacement_cold" if args.standby == "cold" else "replacement")
    if not re.fullmatch(r"[a-z0-9_]+", name):
        raise BadArgument(f"--output={name!r}: lower-case letters, digits and '_' only")
    return name


def _run(args: argparse.Namespace) -> int:
    output = output_name(args)
    methods = [m for m in args.methods.split(",") if m]
    for m in methods:
        if m not in METHODS:
            raise BadArgument(f"--methods: {m!r} is not one of {', '.join(METHODS)}")

    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        for k in range(args.runs):
            for method in methods:
                r = one_method(plat, Path(tmp), method, args)
                runs[method].append(r)
                print(
                    f"run {k + 1} {method}: pause {r['batch_pause_s']} s vs gap before "
                    f"{r.get('gap_before_s')} s (x{r.get('pause_ratio')}); decision-to-done "
                    f"{r['decision_to_done_s']} s; throughput overlap/before "
                    f"{r.get('throughput_overlap')}/{r.get('throughput_before')}; missing "
                    f"{r['words_missing']}, duplicated {r['words_duplicated']}; states "
                    f"{r['states_after_decision_s']}; green start-up {r['startup']}",
                    flush=True,
                )

    figures = summarise(runs)
    ov = figures.get("overlap", {})
    sr = figures.get("stop_restart", {})

    def med(fig: dict[str, Any], key: str) -> float | None:
        return fig.get(key, {}).get("median")

    exact = all(
        r["words_missing"] == 0 and r["words_duplicated"] == 0 and r["complete"]
        for rs in runs.values()
        for r in rs
    )
    ov_runs = runs.get("overlap", [])
    pause_ok = bool(ov_runs) and all(
        r.get("pause_ratio") is not None and r["pause_ratio"] <= PAUSE_FACTOR for r in ov_runs
    )
    done = med(ov, "decision_to_done_s")
    tput = med(ov, "throughput_ratio")
    checks = {
        f"overlap pause <= {PAUSE_FACTOR}x the median gap before, every run": pause_ok,
        "duplicates 0 and lost 0, every run of every method": exact,
        f"overlap decision-to-done median <= {DONE_TARGET_S:g} s": (
            done is not None and done <= DONE_TARGET_S
        ),
        "overlap throughput during the overlap >= before (median)": (
            tput is not None and tput >= 1.0
        ),
    }
    summary = {
        "metric": "output pause across a replacement (longest gap between committed batches "
        "with output), median of runs",
        "unit": "s",
        "candidate": "overlapped handover (the replace operator, handover=overlap)",
        "baseline": "stop and restart with the new parallelism",
        "candidate_value": med(ov, "batch_pause_s"),
        "baseline_value": med(sr, "batch_pause_s"),
        "ratio": None
        if not med(sr, "batch_pause_s") or med(ov, "batch_pause_s") is None
        else round(med(ov, "batch_pause_s") / med(sr, "batch_pause_s"), 3),
        "figures": figures,
        "checks": checks,
        "target": "; ".join(checks),
        "meets_target": all(checks.values()),
        "params": vars(args),
        "runs": runs,
    }
    write_result("replacement", summary, name=output)
    plot(RESULTS / f"{output}.png", runs)
    for method, fig in figures.items():
        print(method, {k: v["median"] for k, v in fig.items()})
    print("checks", checks)
    return 0 if summary["meets_target"] else 1


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
