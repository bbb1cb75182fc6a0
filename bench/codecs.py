"""Throughput of the flow job on each record-batch codec against uncompressed, same run.

The same random lines (bench/throughput.py's fast word count: 50-100 bytes, words of a
fixed vocabulary) are produced once per codec, each into a topic of its own, by the
platform's producer (``kafka_log.produce(compression=...)``: kafka-python, what
``topics.compression`` sets); then the flow-controlled job (shipped ``[flow]`` settings)
reads each topic under a pipeline of its own. Uncompressed runs first and again last,
so a drift of the machine during the run shows in its two figures; each codec is
compared with their mean.

Metric: records/s made durable after the first micro-batch (``_common.drain_run``).

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.codecs \
        [--records 300000] [--lanes 2]

Writes bench/results/codecs.json (with the commit it ran on); exits 1 if a codec is
below 0.8x uncompressed (issue 25, item 7).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench._common import platform_up, random_lines, unique_name
from bench._experiment import experiment_parser, ratio, run_experiment, write_result
from bench._measure import drain_run
from flowctl.adapters import kafka_log
from flowctl.core.validation import COMPRESSION_CODECS

#: Issue 25: every codec at least this fraction of uncompressed.
TARGET = 0.8


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=1)
    p.add_argument("--records", type=int, default=300_000, help="records per codec")
    p.add_argument("--lanes", type=int, default=2)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    return p


def _run(args: argparse.Namespace) -> int:
    codecs = [c for c in COMPRESSION_CODECS if c != "none"]
    order = ["none", *codecs, "none"]

    with platform_up() as plat, tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        values = random_lines(args.records, args.seed)
        topics: dict[str, str] = {}
        produce_s: dict[str, float] = {}
        for codec in ["none", *codecs]:
            topic = unique_name(f"codec{codec}") + ".eden"
            kafka_log.ensure_topics(plat.bootstrap, {topic: args.partitions})
            t0 = time.monotonic()
            n = kafka_log.produce(
                plat.bootstrap, topic, values, progress_every=20_000, compression=codec
            )
            produce_s[codec] = round(time.monotonic() - t0, 2)
            assert n == args.records, (codec, n)
            topics[codec] = topic
            print(f"produced {n} records, {codec}, in {produce_s[codec]} s", flush=True)
        runs = []
        for i, codec in enumerate(order):
            rate, info = drain_run(
                plat,
                work,
                topics[codec],
                args.records,
                args.lanes,
                label=f"codecs-{codec}-{i}",
                baseline=False,
                partitions=args.partitions,
                timeout_s=args.timeout,
            )
            info.pop("series", None)
            runs.append({"codec": codec, "records_per_s": rate, "run": info})
            print(f"{codec}: {rate} records/s", flush=True)

    plain = [r["records_per_s"] for r in runs if r["codec"] == "none"]
    base = None if None in plain else sum(plain) / len(plain)
    per_codec = {r["codec"]: r["records_per_s"] for r in runs if r["codec"] != "none"}
    ratios = {c: ratio(v, base) for c, v in per_codec.items()}
    meets = all(v is not None and v >= TARGET for v in ratios.values())
    worst = min(ratios, key=lambda c: ratios[c] if ratios[c] is not None else -1.0)
    summary = {
        "metric": "records/s durable, first micro-batch excluded, flow job",
        "unit": "records/s",
        "candidate": "the flow job reading a topic written with each codec",
        "baseline": "the same job reading the same records uncompressed (mean of two runs)",
        "candidate_value": per_codec[worst],
        "worst_codec": worst,
        "baseline_value": None if base is None else round(base),
        "uncompressed_runs": plain,
        "records_per_s": per_codec,
        "ratio_per_codec": ratios,
        "ratio": ratios[worst],
        "produce_s": produce_s,
        "target": f"every codec >= {TARGET}x uncompressed",
        "meets_target": meets,
        "params": vars(args),
        "runs": runs,
    }
    write_result("codecs", summary)
    print("| codec | records/s | vs uncompressed |")
    print(f"| none | {summary['baseline_value']} (runs {plain}) | 1.0 |")
    for codec in codecs:
        print(f"| {codec} | {per_codec[codec]} | {ratios[codec]} |")
    return 0 if meets else 1


def main(argv: Sequence[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    sys.exit(main())
