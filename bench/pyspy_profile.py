"""Where the flow-controlled job spends its time: py-spy on the driver and the Spark workers.

Runs the throughput experiment's flow-controlled job alone (same data and settings as
``bench/throughput.py``) and, from the end of its first micro-batch, first reads for
``--cpu-seconds`` where the machine's CPU goes, by process role (lanes, planner, driver
Python and JVM, broker, memcached, other: ``/proc``, no profiler running), then samples
its Python driver and its Spark Python workers with py-spy for ``--seconds``. Give it
enough ``--records`` to last both (the job drains them at tens of thousands per second).

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.pyspy_profile \
        [--lanes 4] [--records 900000] [--name profile] [--reader librdkafka]

Writes bench/results/<name>.json (CPU shares; per process the samples' categories:
Kafka fetch, record unpacking, counting, JSON, memcached, SQL... as
``bench._profile.CATEGORIES`` sorts them, and the top frames by own and by inclusive
time; Spark's per-batch phases from the job's log: walCommit, latestOffset, addBatch,
commitOffsets); the raw stacks stay in bench/results/logs/.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench._common import Job, platform_up, produce, random_lines, unique_name
from bench._experiment import RESULTS, experiment_parser, run_experiment, write_result
from bench._measure import drain_run
from bench._profile import batch_phases, cpu_shares, py_spy
from flowctl.pipelines.config_sections import KAFKA_PYTHON, LANE_READERS


def given(settings: dict[str, int | None]) -> dict[str, int]:
    """The settings given on the command line (the others stay as shipped)."""
    return {k: v for k, v in settings.items() if v is not None}


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=1)
    p.add_argument("--records", type=int, default=300_000)
    p.add_argument("--lanes", type=int, default=4)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--batch", type=int, default=50_000)
    p.add_argument("--tuple-size", type=int, help="records per tuple (default: shipped)")
    p.add_argument("--w-init", type=int, help="initial window, tuples (default: shipped)")
    p.add_argument("--w-max", type=int, help="largest window, tuples (default: shipped)")
    p.add_argument("--seconds", type=float, default=8.0, help="seconds of py-spy sampling")
    p.add_argument("--cpu-seconds", type=float, default=5.0, help="seconds of CPU shares")
    p.add_argument("--name", default="profile", help="result file: bench/results/<name>.json")
    p.add_argument(
        "--reader",
        choices=LANE_READERS,
        default=KAFKA_PYTHON,
        help="the lanes' Kafka reader ([flow] reader; default: shipped)",
    )
    return p


def _run(args: argparse.Namespace) -> int:
    logs = RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    profile: dict[str, Any] = {}
    cpu: dict[str, Any] = {}

    def sample(job: Job) -> None:
        cpu.update(cpu_shares(args.cpu_seconds))
        profile.update(py_spy(job, args.seconds, logs, f"profile-flow-{args.lanes}"))

    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        topic = unique_name("prof") + ".eden"
        produced = produce(plat, topic, args.partitions, random_lines(args.records, args.seed))
        rate, info = drain_run(
            plat,
            Path(tmp),
            topic,
            produced,
            args.lanes,
            label=f"profile-flow-{args.lanes}",
            baseline=False,
            partitions=args.partitions,
            batch=args.batch,
            stream=given({"tuple_size": args.tuple_size}),
            flow={
                **given({"w_init": args.w_init, "w_max": args.w_max}),
                **({"reader": args.reader} if args.reader != KAFKA_PYTHON else {}),
            },
            on_first_batch=sample,
        )
    info.pop("series", None)
    spark_batches = batch_phases(logs / f"profile-flow-{args.lanes}.log")
    write_result(
        "profile",
        {
            "metric": "py-spy samples of the flow-controlled job (not a comparison)",
            "records_per_s": rate,
            "params": vars(args),
            "cpu": cpu,
            "profile": profile,
            "spark_batches_ms": spark_batches,
            "run": info,
        },
        name=args.name,
    )
    print(f"== CPU over {cpu['seconds']} s, {cpu['cores']} cores, busy {cpu['busy']:.0%}")
    for role, share in cpu["shares"].items():
        print(f"  {share:6.1%}  {role}")
    print(f"== Spark micro-batches, ms p50/p99: {spark_batches}")
    for kind, data in profile.items():
        print(f"== {kind}: {data['samples']} samples")
        for category, share in data["categories"].items():
            print(f"  {share:6.1%}  {category}")
        print("  -- top frames (own time):")
        for frame, share in data["top_leaf"]:
            print(f"  {share:6.1%}  {frame}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
