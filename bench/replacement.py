"""Replacement under overload: blue-green (the platform) vs stop-and-restart (rebalance).

SPEC "Experiments to reproduce" 4 on this machine: the operator is slowed on purpose
(``--ms-per-record`` per record in every lane, ``bench/inject/sitecustomize.py``), the
topology runs with ``--from-lanes`` lanes while lines arrive faster than it can
process them; ``--switch-after`` seconds into the load it is replaced by one with
``--to-lanes`` lanes, in two ways on the same data (each on a pipeline of its own):

- ``blue_green``: the control-plane protocol of the replace operator
  (``plugins/flowctl_airflow/operators/blue_green.py``) driven directly: green is
  started ``--standby``, waits READY; blue gets ``deactivate`` and reports DRAINED;
  green gets ``activate``; blue gets ``stop``;
- ``stop_restart``: blue gets ``stop``; when it has exited, the new topology is
  started on the same pipeline (it resumes from the durable checkpoint).

Two pauses. The *batch pause* (issue 5's definition): the longest gap between
consecutive committed micro-batches with output, blue's and green's together, read
from the jobs' Spark commit logs. The *durable pause*: the longest span after the
decision with no durable progress (committed offsets, sampled every 0.2 s; for the
flow job it includes the MRWQ flush delay). Also the time to recover (decision ->
the 3 s durable rate first reaches the rate before the decision) and, after the
backlog is drained, duplicates and loss of words (stored word counts vs the
plain-Python count of every produced line).

    flock /tmp/flowctl-heavy.lock .venv/bin/python bench/replacement.py \
        [--rate 2500] [--seconds 45] [--switch-after 15] [--ms-per-record 0.6]

Writes bench/results/replacement.json and replacement.png; exits 1 if the target
(blue-green batch pause <= 2 trigger intervals, durable pause <= 0.5x
stop-and-restart's, nothing lost, no duplicates) is missed.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import (
    BENCH,
    RESULTS,
    Job,
    Platform,
    committed_total,
    pipeline_config,
    platform_up,
    pyplot,
    ratio,
    save_figure,
    save_log,
    stop,
    submit,
    unique_name,
    write_result,
)

from flowctl.adapters import kafka_log, results
from flowctl.adapters.replacements import ReplacementLog
from flowctl.adapters.schema import utcnow
from flowctl.config import PROJECT_ROOT
from flowctl.pipelines.config import load_pipeline_config
from flowctl.pipelines.wordcount import count_words
from flowctl.textgen import zipf_lines

TARGET_PAUSE_RATIO = 0.5
#: Issue 5's bound on the pause between committed batches: two trigger intervals.
TRIGGER_S = load_pipeline_config("wordcount").trigger_interval_s


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
    """One replacement by ``method`` on ``master``. ``env`` replaces the lane slowdown's
    environment (which reaches only Python workers the driver starts: ``local[N]``)."""
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
        stream={"tuple_size": 100},
        flow={"w_init": 8, "w_max": 64, "latency_target_s": 1.0},
    )
    topic = f"{name}.eden"
    kafka_log.ensure_topics(plat.bootstrap, {topic: args.partitions})
    total = int(args.rate * args.seconds)
    lines = [line.encode() for line in zipf_lines(total, seed=args.seed)]
    blue = submit(plat, config, f"{name}-blue", args.from_lanes, env=env, master=master)
    jobs: list[Job] = [blue]
    samples: list[tuple[float, int]] = []
    events: dict[str, float] = {}
    try:
        if not wait_state(plat, blue.topology_id, {"ACTIVE"}, 180):
            raise RuntimeError(f"blue not ACTIVE; log:\n{blue.log_tail()}")
        producer = threading.Thread(
            target=steady_producer, args=(plat, topic, lines, args.rate), daemon=True
        )
        t0 = time.monotonic()
        t0_wall = time.time()
        producer.start()
        switcher: threading.Thread | None = None
        deadline = t0 + args.seconds + args.timeout
        green: Job | None = None
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
        green = jobs[-1]
    finally:
        for job in jobs:
            stop(plat, job, timeout_s=60)
        for i, job in enumerate(jobs):
            save_log(job, f"replacement-{method}-{i}")
    commits = batch_commits(plat, [job.topology_id for job in jobs], t0_wall)
    stored = results.word_counts(plat.database_url, name)
    expected = count_words(lines)
    missing = sum(max(0, n - stored.get(w, 0)) for w, n in expected.items())
    extra = sum(max(0, n - expected.get(w, 0)) for w, n in stored.items())
    return {
        "samples": [(round(t, 2), n) for t, n in samples],
        "events": {k: round(v, 2) for k, v in events.items()},
        "words_missing": missing,
        "words_duplicated": extra,
        "complete": bool(samples) and samples[-1][1] >= total,
        "records": total,
        "green_log": None if green is None else str(green.log_path),
        **analyse(samples, events.get("decision")),
        "commits": commits,
        **batch_pause(commits, events.get("decision")),
    }


def batch_commits(plat: Platform, topologies: list[str], t0_wall: float) -> list[list[Any]]:
    """``[s since t0, topology, batch id]`` of every micro-batch with output, in time order.

    Read from each job's Spark checkpoint: ``commits/<id>`` is written when the batch
    has committed; a flow batch exists only when tuples were admitted, a plain one only
    when new records arrived, so every committed batch had output. Warm-up batches of
    a standby topology (a ``"warmup"`` number in the batch's offsets) are left out.
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


def batch_pause(commits: list[list[Any]], decision: float | None) -> dict:
    """Issue 5's pause: the longest gap between consecutive committed batches with output
    (blue's and green's together), from the last commit before the decision to the end
    of the run (the backlog keeps both methods busy until then)."""
    if decision is None:
        return {"batch_pause_s": None}
    times = [t for t, _, _ in commits]
    before = [t for t in times if t <= decision]
    span = [t for t in times if before and t >= before[-1]]
    gaps = [(b - a, a) for a, b in itertools.pairwise(span)]
    if not gaps:
        return {"batch_pause_s": None}
    gap, at = max(gaps)
    return {"batch_pause_s": round(gap, 2), "batch_pause_from": round(at, 2)}


def switch(plat, config, name, method, blue, jobs, args, env, t0, master) -> dict[str, float]:
    """Replace ``blue`` by a topology of ``--to-lanes`` lanes; returns event times."""
    ev: dict[str, float] = {}
    if method == "blue_green":
        # As the replace operator does: the running event names green, so the control
        # plane lets it register beside the ACTIVE blue (one admitting topology at a time).
        events = ReplacementLog(plat.plane.engine)
        event = events.record_replacement(
            name, blue.topology_id, f"{name}-green", args.from_lanes, args.to_lanes,
            "bench: replacement under overload", started_at=utcnow(), outcome="running",
        )  # fmt: skip
        green = submit(
            plat, config, f"{name}-green", args.to_lanes, extra=["--standby"], env=env,
            master=master,
        )  # fmt: skip
        jobs.append(green)
        wait_state(plat, green.topology_id, {"READY"}, 180)
        ev["green_ready"] = time.monotonic() - t0
        plat.plane.send_signal(blue.topology_id, "deactivate")
        if not wait_state(plat, blue.topology_id, {"DRAINED"}, 120):
            plat.plane.send_signal(blue.topology_id, "stop")
        ev["blue_drained"] = time.monotonic() - t0
        plat.plane.send_signal(green.topology_id, "activate")
        wait_state(plat, green.topology_id, {"ACTIVE"}, 120)
        ev["green_active"] = time.monotonic() - t0
        stop(plat, blue, timeout_s=60)
        ev["blue_stopped"] = time.monotonic() - t0
        events.update_replacement(event, outcome="ok", finished_at=utcnow())
    else:
        stop(plat, blue, timeout_s=120)
        ev["old_stopped"] = time.monotonic() - t0
        new = submit(plat, config, f"{name}-restart", args.to_lanes, env=env, master=master)
        jobs.append(new)
        wait_state(plat, new.topology_id, {"ACTIVE"}, 180)
        ev["new_active"] = time.monotonic() - t0
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


def plot(path: Path, runs: dict[str, dict[str, Any]]) -> None:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(7, 4))
    for method, run in runs.items():
        pts = [(t, n) for t, n in run["samples"] if n >= 0]
        line = ax.plot([t for t, _ in pts], [n for _, n in pts], label=method)[0]
        if "decision" in run["events"]:
            ax.axvline(run["events"]["decision"], color=line.get_color(), linestyle=":")
    ax.set_xlabel("s since the load started")
    ax.set_ylabel("records durable")
    ax.set_title("Replacement under overload (dotted: decision)")
    ax.legend()
    save_figure(fig, path)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=float, default=2500.0, help="records/s produced")
    p.add_argument("--seconds", type=float, default=45.0, help="seconds of load")
    p.add_argument("--switch-after", type=float, default=15.0)
    p.add_argument("--ms-per-record", type=float, default=0.6)
    p.add_argument("--from-lanes", type=int, default=1)
    p.add_argument("--to-lanes", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--timeout", type=float, default=180.0, help="seconds to drain after load")
    p.add_argument("--seed", type=int, default=5)
    args = p.parse_args(argv)

    runs: dict[str, dict[str, Any]] = {}
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        for method in ("stop_restart", "blue_green"):
            runs[method] = one_method(plat, Path(tmp), method, args)
            r = runs[method]
            print(
                f"{method}: batch pause {r['batch_pause_s']} s, durable pause {r['pause_s']} s, "
                f"recover {r['recover_s']} s, "
                f"missing {r['words_missing']} words, duplicated {r['words_duplicated']}, "
                f"events {r['events']}",
                flush=True,
            )

    bg, sr = runs["blue_green"], runs["stop_restart"]
    pause_ratio = ratio(bg["pause_s"], sr["pause_s"])
    exact = all(r["words_missing"] == 0 and r["words_duplicated"] == 0 for r in runs.values())
    summary = {
        "metric": "output pause after the decision (longest span without durable progress)",
        "unit": "s",
        "candidate": "blue-green replacement (standby green, deactivate/drain, activate)",
        "baseline": "stop and restart with the new parallelism",
        "candidate_value": bg["pause_s"],
        "baseline_value": sr["pause_s"],
        "ratio": pause_ratio,
        "batch_pause_s": {"blue_green": bg["batch_pause_s"], "stop_restart": sr["batch_pause_s"]},
        "batch_pause_target_s": 2 * TRIGGER_S,
        "recover_s": {"blue_green": bg["recover_s"], "stop_restart": sr["recover_s"]},
        "words_missing": {k: r["words_missing"] for k, r in runs.items()},
        "words_duplicated": {k: r["words_duplicated"] for k, r in runs.items()},
        "target": (
            f"blue-green batch pause <= {2 * TRIGGER_S:g} s (2 trigger intervals), durable "
            f"pause ratio <= {TARGET_PAUSE_RATIO}, nothing lost or duplicated"
        ),
        "meets_target": bool(
            exact
            and pause_ratio is not None
            and pause_ratio <= TARGET_PAUSE_RATIO
            and bg["batch_pause_s"] is not None
            and bg["batch_pause_s"] <= 2 * TRIGGER_S
        ),
        "params": vars(args),
        "runs": runs,
    }
    write_result("replacement", summary)
    plot(RESULTS / "replacement.png", runs)
    print(f"pause ratio {pause_ratio}; recover {summary['recover_s']}")
    return 0 if summary["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
