"""Throughput of the flow job on the process cluster's Spark vs ``local[2]``, same data.

The Spark part of ``flowctl cluster`` (a standalone master and two workers, 2 slots and
1 GB each, their own JVMs and work dirs; flowctl shipped to the executors as a zip by the
drivers' spark-defaults.conf, as on the cluster) runs on free ports in a temporary home,
beside the bench's private Tansu, memcached and SQLite. One topic is produced once; the
flow-controlled job reads all of it on the cluster (executors in the worker JVMs) and on
``local[2]`` (tasks in the driver's JVM), each run under a pipeline of its own,
alternately for ``--rounds``.

Then the replacement pause on the cluster: ``bench/replacement.py``'s two methods
(blue-green through the control plane vs stop-and-restart), 1 -> 2 lanes under a steady
``--rate``, blue and green each an application of the cluster (one single-core executor
per worker each, so they run side by side). The lane slowdown of replacement.py is not
injected: its environment reaches only Python workers the driver starts.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.cluster \\
        [--records 200000] [--lanes 2] [--rounds 2] [--rate 2500] [--seconds 90]

Writes bench/results/cluster.json: records/s after the first batch, the ratio cluster /
local[2] per round and of the medians; the replacement's batch and durable pauses of
both methods, their ratio, and the words lost or doubled. No target: on one 2-core
machine the cluster adds JVMs and loopback hops and no cores, so the ratio is the cost
of the distributed path, not a speed-up.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench._common import platform_up, produce, random_lines, unique_name
from bench._experiment import experiment_parser, ratio, run_experiment, write_result
from bench._measure import drain_run
from bench.replacement import one_method
from flowctl.services.cluster import ClusterDaemon, ship_code, spark_daemons
from flowctl.services.cluster_layout import ClusterLayout
from flowctl.services.ports import free_port


@contextlib.contextmanager
def spark_cluster(home: Path) -> Iterator[ClusterLayout]:
    """The cluster's Spark master and workers on free ports; stopped on exit."""
    layout = ClusterLayout(
        home=home,
        spark_master_port=free_port(),
        spark_master_ui_port=free_port(),
        spark_worker_ui_ports=(free_port(), free_port()),
    )
    print(ship_code(layout), flush=True)
    started: list[ClusterDaemon] = []
    try:
        for daemon in spark_daemons(layout):
            print(daemon.up(), flush=True)
            started.append(daemon)
        yield layout
    finally:
        for daemon in reversed(started):
            with contextlib.suppress(Exception):
                daemon.down()


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=7)
    p.add_argument("--records", type=int, default=200_000)
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--rate", type=float, default=2500.0, help="records/s in the replacement")
    p.add_argument("--seconds", type=float, default=90.0, help="seconds of load, replacement")
    return p


def _run(args: argparse.Namespace) -> int:
    replacement_args = argparse.Namespace(
        rate=args.rate, seconds=args.seconds, switch_after=15.0, ms_per_record=0.0,
        from_lanes=1, to_lanes=2, partitions=4, timeout=180.0, seed=args.seed,
    )  # fmt: skip

    rates: dict[str, list[float | None]] = {"cluster": [], "local[2]": []}
    runs: list[dict[str, object]] = []
    replacements: dict[str, dict[str, object]] = {}
    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        topic = unique_name("cluster") + ".eden"
        produced = produce(plat, topic, 4, random_lines(args.records, args.seed))
        with spark_cluster(work / "cluster") as layout:
            conf_env = {"SPARK_CONF_DIR": str(layout.spark_conf_dir)}
            for r in range(args.rounds):
                for kind, master, env in (
                    ("cluster", layout.spark_master_url, conf_env),
                    ("local[2]", "local[2]", None),
                ):
                    rate, info = drain_run(
                        plat,
                        work,
                        topic,
                        produced,
                        args.lanes,
                        label=f"cl{kind[0]}{r}",
                        baseline=False,
                        env=env,
                        master=master,
                        timeout_s=600.0,
                    )
                    rates[kind].append(rate)
                    runs.append({"round": r, "kind": kind, "records_per_s": rate, **info})
                    print(f"round {r} {kind}: {rate} records/s", flush=True)
            for method in ("stop_restart", "blue_green"):
                run = one_method(
                    plat, work, method, replacement_args,
                    master=layout.spark_master_url, env=conf_env,
                )  # fmt: skip
                replacements[method] = run
                print(
                    f"cluster {method}: batch pause {run['batch_pause_s']} s, durable pause "
                    f"{run['pause_s']} s, missing {run['words_missing']}, duplicated "
                    f"{run['words_duplicated']}, events {run['events']}",
                    flush=True,
                )

    def median(kind: str) -> float | None:
        values = [v for v in rates[kind] if v is not None]
        return round(statistics.median(values)) if values else None

    cluster, local = median("cluster"), median("local[2]")
    write_result(
        "cluster",
        {
            "metric": "records/s made durable after the first batch (median of rounds)",
            "unit": "records/s",
            "candidate": f"flow job on the standalone cluster (2 workers), {args.lanes} lanes",
            "baseline": f"flow job on local[2], {args.lanes} lanes",
            "candidate_value": cluster,
            "baseline_value": local,
            "ratio": ratio(cluster, local),
            "round_ratios": [
                ratio(c, lo) for c, lo in zip(rates["cluster"], rates["local[2]"], strict=True)
            ],
            "target": None,
            "meets_target": None,
            "replacement": replacement_summary(replacements),
            "params": vars(args),
            "runs": runs,
        },
    )
    print(f"cluster {cluster} records/s vs local[2] {local}: ratio {ratio(cluster, local)}")
    return 0 if cluster is not None and local is not None else 1


def replacement_summary(runs: dict[str, dict]) -> dict[str, object]:
    """The cluster's replacement figures, shaped as replacement.json's."""
    bg, sr = runs.get("blue_green", {}), runs.get("stop_restart", {})
    return {
        "metric": "output pause after the decision on the cluster",
        "batch_pause_s": {k: r.get("batch_pause_s") for k, r in runs.items()},
        "durable_pause_s": {k: r.get("pause_s") for k, r in runs.items()},
        "durable_pause_ratio": ratio(bg.get("pause_s"), sr.get("pause_s")),
        "events": {k: r.get("events") for k, r in runs.items()},
        "words_missing": {k: r.get("words_missing") for k, r in runs.items()},
        "words_duplicated": {k: r.get("words_duplicated") for k, r in runs.items()},
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
