"""Twenty Spark workers lost at random moments on the process cluster, exact throughout.

The hunt for the broken tuple-cut invariant (docs/flow-control.md, "A rebuild waits for
the queue"): ``flowctl cluster up`` (three Apache Kafka brokers, memcached, PostgreSQL,
a Spark master and two workers, Airflow with Celery) in a temporary home, on free ports
and databases of its own, the shipped ``wordcount`` pipeline at its defaults. A feeder
writes a pool of the pipeline's synthetic text (cycled; librdkafka where it is installed,
bench/lib/steady_feed.py) into Eden at ``--rate`` lines/s (about a quarter of
the cluster's capacity, so that a kill's backlog drains before the next one) while the
stream DAG, triggered through the Airflow REST API at parallelism 2, reads it. After
``--kills`` seeded pauses of ``--min-gap``..``--max-gap`` s, a worker (1 and 2 in turn)
is SIGKILLed with its executors and brought back by ``flowctl cluster up``, as an
operator would. Then the feeder stops, every record becomes durable, the topology is
stopped, the reconcile DAG runs, and the stored counts are compared with the words of every line
the broker acknowledged.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.worker_kills \\
        [--kills 20] [--rate 10000] [--min-gap 10] [--max-gap 30]

From the stream task's log: invariant errors (a range partially overlapping an applied
one, a batch the MRWQ cannot apply), MRWQ gaps and their rebuilds, and per kill the
records the flusher found already applied (``duplicate of N record(s)``: processed twice,
applied once), attributed to the kill they follow. From the database: durable records
sampled every 0.5 s, so each kill's resume (the end of the longest stall between
durable advances after it, before the next kill) and the health the topology showed.
Targets: 0 invariant errors, 0 words lost, 0 doubled, the reconcile run succeeds, every
kill resumed. Writes bench/results/worker_kills.json.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import random
import re
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench._experiment import BadArgument, experiment_parser, run_experiment, write_result
from bench.cluster_volume import (
    PIPELINE,
    RECONCILE,
    STREAM,
    Sampler,
    cluster_up,
    kill_worker,
    resume_after,
    say,
    task_log,
)
from bench.lib.airflow_api import AirflowApi
from bench.lib.steady_feed import SteadyFeed, default_client
from flowctl.adapters import kafka_ends, kafka_log, results
from flowctl.adapters.control_plane import ControlPlane
from flowctl.pipelines.config import load_pipeline_config
from flowctl.services import cluster
from flowctl.services.cluster_layout import DEFAULT_TANSU_STORAGE, ClusterLayout
from flowctl.textgen import zipf_lines

#: What an invariant error says in the driver's log (a producer of tuple boundaries cut
#: wrongly, or a batch the flusher refuses).
INVARIANT = re.compile(r"partially overlaps|cannot apply the batch")
GAP = re.compile(r"MRWQ gap repaired by re-dispatch \(rebuild (\d+)\)")
DUPLICATE = re.compile(r"(\d+) duplicate of (\d+) record\(s\)")
STOPPED = re.compile(r"STOPPED after (\d+) batches, (\d+) records")
#: The timestamp the driver's log format puts first on each line.
STAMP = re.compile(r"(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?)")
#: Lines of the feed's pool, cycled (bench/lib/steady_feed.py): the words sent are known
#: exactly however long the run.
POOL_LINES = 100_000


def _event(line: str) -> tuple[float | None, str]:
    """A task log line's time (epoch s; the driver's own stamp, else Airflow's) and text."""
    text, stamp = line.strip(), None
    try:
        data = json.loads(line)
        text, stamp = str(data.get("event", "")), data.get("timestamp")
    except (ValueError, AttributeError):
        pass
    found = STAMP.search(text) or (STAMP.search(stamp) if isinstance(stamp, str) else None)
    if found is None:
        return None, text
    when = dt.datetime.fromisoformat(found.group(1).replace(",", ".").replace(" ", "T"))
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)  # the machine's logs are in UTC
    return when.timestamp(), text


def read_stream_log(log: str, kills: list[dict[str, Any]]) -> dict[str, Any]:
    """Invariant errors, gaps, and records processed twice (per kill: those flushed
    between it and the next kill) from the stream task's log."""
    invariant: list[str] = []
    gaps: list[float | None] = []
    twice = [0] * len(kills)
    before_first = 0
    stopped: tuple[int, int] | None = None
    starts = [k["at_epoch"] for k in kills]
    for line in log.splitlines():
        when, text = _event(line)
        if INVARIANT.search(text):
            invariant.append(text[:400])
        if GAP.search(text):
            gaps.append(when)
        if (m := STOPPED.search(text)) is not None:
            stopped = (int(m.group(1)), int(m.group(2)))
        if (m := DUPLICATE.search(text)) is not None and int(m.group(2)):
            i = sum(1 for s in starts if when is not None and when >= s) - 1
            if i < 0:
                before_first += int(m.group(2))
            else:
                twice[i] += int(m.group(2))
    return {
        "invariant_errors": invariant,
        "gap_rebuilds": len(gaps),
        "records_processed_twice_per_kill": twice,
        "records_processed_twice_before_first_kill": before_first,
        "stopped": None if stopped is None else {"batches": stopped[0], "records": stopped[1]},
    }


def _first_advance(sampler: Sampler, at_kill: int, t_kill: float, timeout_s: float) -> float:
    """Seconds from a kill to the first durable advance after it (a batch that was
    running may complete at once: :func:`resume_after` finds the stall the kill caused)."""
    sampler.wait("durable progress after the kill", lambda: sampler.last() > at_kill, timeout_s)
    first = next(t for t, durable, _ in list(sampler.samples) if t > t_kill and durable > at_kill)
    return round(first - t_kill, 2)


def run_kills(layout: ClusterLayout, args: argparse.Namespace) -> dict[str, Any]:
    api = AirflowApi(f"http://127.0.0.1:{layout.airflow_port}", *cluster.admin_login(layout))
    url, bootstrap = layout.settings.resolved_database_url, layout.settings.kafka_bootstrap
    eden = load_pipeline_config(PIPELINE).eden_topic
    for dag_id in (STREAM, RECONCILE):
        api.wait_for_dag(dag_id, timeout=180)
        api.unpause(dag_id)
    plane = ControlPlane(url)
    plane.ensure_schema()
    kafka_log.ensure_topics(bootstrap, {eden: load_pipeline_config(PIPELINE).partitions})
    pool = [line.encode() for line in zipf_lines(POOL_LINES, seed=args.seed)]
    feeder = SteadyFeed(bootstrap, eden, pool, args.rate, client=default_client())
    sampler = Sampler(plane, eden, time.monotonic())
    threading.Thread(target=sampler.run, daemon=True).start()
    feeder.start()
    api.trigger(STREAM, "kills-blue", {"parallelism": 2, "colour": "blue"})
    sampler.wait("a first durable batch", lambda: sampler.last() > 0, 600)
    (topology,) = plane.topologies(PIPELINE, states=["ACTIVE"])
    say(f"{topology.topology_id} ACTIVE and durable; {args.kills} kills to go")
    rng = random.Random(args.seed)
    kills: list[dict[str, Any]] = []
    for i in range(args.kills):
        time.sleep(rng.uniform(args.min_gap, args.max_gap))
        name = f"spark-worker-{1 + i % 2}"
        at_kill, t_kill, at_epoch = sampler.last(), sampler.now(), time.time()
        pids = kill_worker(layout, name)
        for message in cluster.up(layout):  # an operator brings the lost worker back
            say(message)
        back = round(sampler.now() - t_kill, 2)
        first = _first_advance(sampler, at_kill, t_kill, args.timeout)
        kills.append(
            {
                "n": i + 1,
                "worker": name,
                "pids": len(pids),
                "at_s": round(t_kill, 2),
                "at_epoch": at_epoch,
                "durable_at_kill": at_kill,
                "worker_back_s": back,
                "first_durable_s": first,
            }
        )
        say(f"kill {i + 1}: {name} ({len(pids)} JVMs); back in {back} s, durable +{first} s")
    produced = feeder.finish()
    if feeder.error is not None:
        raise RuntimeError(f"the feed failed: {feeder.error!r}")
    in_log = sum(kafka_ends.latest_offsets(bootstrap, eden, timeout_s=120.0).values())
    say(f"feeder stopped: {produced} lines ({in_log} records in the log)")
    sampler.wait("every record durable", lambda: sampler.last() >= in_log, args.timeout)
    sampler.stop()
    # Each kill's resume: the end of the longest stall between durable advances after it
    # and before the next kill.
    ends = [k["at_s"] for k in kills[1:]] + [sampler.now()]
    for kill, until in zip(kills, ends, strict=True):
        kill["resume_s"] = round(resume_after(sampler.samples, kill["at_s"], until), 2)
    windows = plane.metrics_windows(topology.topology_id)
    starts = [k["at_epoch"] for k in kills] + [time.time()]
    for kill, (start, end) in zip(kills, itertools.pairwise(starts), strict=True):
        # The windows that ended between this kill and the next: what the page showed.
        shown = [w for w in windows if start <= w.window_end.timestamp() < end]
        kill["health_windows"] = dict(Counter(w.health for w in shown))
        kill["rebuilds_after"] = max((w.rebuilds or 0 for w in shown), default=None)
    plane.send_signal(topology.topology_id, "stop")
    state = api.wait_run(STREAM, "kills-blue", timeout=600)
    say(f"topology stopped; stream run {state}")
    api.trigger(RECONCILE, "kills-reconcile", {})
    reconciled = api.wait_run(RECONCILE, "kills-reconcile", timeout=args.timeout)
    read = read_stream_log(task_log(layout, STREAM, "kills-blue"), kills)
    return {
        "produced": produced,
        "in_log": in_log,
        "stream_run": state,
        "reconcile_state": reconciled,
        "kills": kills,
        "health_windows_after_kills": dict(
            sum((Counter(k["health_windows"]) for k in kills), Counter())
        ),
        "rebuilds_last_window": windows[-1].rebuilds if windows else None,
        "feed": {"client": feeder.client, "behind_s_max": round(feeder.behind_s, 2)},
        "exact": exact(feeder.expected_counts(), results.word_counts(url, PIPELINE)),
        **read,
    }


def exact(expected: Counter[str], stored: dict[str, int]) -> dict[str, int]:
    """The stored counts against the words of every line the feed had acknowledged."""
    return {
        "words_expected": sum(expected.values()),
        "words_stored": sum(stored.values()),
        "words_lost": sum(max(0, n - stored.get(w, 0)) for w, n in expected.items()),
        "words_doubled": sum(max(0, n - expected.get(w, 0)) for w, n in stored.items()),
    }


def summarise(run: dict[str, Any]) -> dict[str, Any]:
    exact, kills = run["exact"], run["kills"]
    twice = run["records_processed_twice_per_kill"]
    stopped = run["stopped"]
    targets = {
        "no_invariant_error": not run["invariant_errors"],
        "nothing_lost": exact["words_lost"] == 0 and run["in_log"] == run["produced"],
        "nothing_doubled": exact["words_doubled"] == 0,
        "reconcile_success": run["reconcile_state"] == "success",
        "every_kill_resumed": len(kills) == len(twice),
    }
    resumes = sorted(k["resume_s"] for k in kills)
    return {
        "metric": "invariant errors over worker SIGKILLs at random moments",
        "unit": "errors",
        "candidate_value": len(run["invariant_errors"]),
        "target": "0 invariant errors, 0 lost, 0 doubled, reconcile success",
        "meets_target": all(targets.values()),
        "targets_met": targets,
        "kills": len(kills),
        "records": run["in_log"],
        "resume_s_median": resumes[len(resumes) // 2] if resumes else None,
        "resume_s_max": resumes[-1] if resumes else None,
        "records_processed_twice": sum(twice) + run["records_processed_twice_before_first_kill"],
        "records_processed_twice_per_kill_max": max(twice, default=0),
        "acked_records_beyond_the_log": None
        if stopped is None
        else stopped["records"] - run["in_log"],
        **run,
    }


def run(args: argparse.Namespace) -> int:
    if args.kills < 1 or args.rate <= 0 or not 0 < args.min_gap <= args.max_gap:
        raise BadArgument(
            f"--kills={args.kills} must be >= 1, --rate={args.rate} > 0, and "
            f"0 < --min-gap={args.min_gap} <= --max-gap={args.max_gap}"
        )
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="flowctl-kills-") as tmp,
        cluster_up(Path(tmp) / "cluster", DEFAULT_TANSU_STORAGE) as layout,
    ):
        result = summarise(run_kills(layout, args))
    result["params"] = {k: v for k, v in vars(args).items() if k != "func"}
    result["wall_s"] = round(time.monotonic() - started, 1)
    path = write_result("worker_kills", result)
    say(f"{path}: meets target {result['meets_target']} {result['targets_met']}")
    return 0 if result["meets_target"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__, seed=13)
    parser.add_argument("--kills", type=int, default=20, help="worker SIGKILLs")
    parser.add_argument("--rate", type=int, default=10_000, help="lines/s written to Eden")
    parser.add_argument("--min-gap", type=float, default=10.0, help="least s between kills")
    parser.add_argument("--max-gap", type=float, default=30.0, help="most s between kills")
    parser.add_argument("--timeout", type=float, default=900.0, help="s per wait")
    return run_experiment(parser, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
