"""The embedded broker: Apache Kafka (the default) against Tansu (the former stand-in).

For each broker, on a fresh home and free ports: ``flowctl services up --only <broker>``
is timed ``--rounds`` times (the first Kafka round formats its log; the median is
reported), the broker's resident memory (its process tree's VmRSS) is read idle, then
``--records`` lines of 50-100 bytes are written with the platform's own producer
(``kafka_log.produce``: what ingest, the feed, replay and the DLQ use) to a 4-partition
topic, read back whole with the platform's consumer, and the memory and the log's size on
disk (Kafka; Tansu keeps it in memory) are read again. Ratios are Kafka's over Tansu's.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.broker [--records 2000000]

Writes bench/results/broker.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._common import _terminate, random_lines, read_loop, unique_name
from bench._experiment import experiment_parser, ratio, run_experiment, write_result
from bench.lib.probe import descendants, rss_kb
from flowctl.adapters import kafka_log
from flowctl.config import Settings
from flowctl.services import kafka, manager
from flowctl.services.ports import free_port

BROKERS = ("kafka", "tansu")
PARTITIONS = 4


def rss_mb(pid: int) -> float:
    """Resident memory of ``pid`` and its descendants, MB."""
    return round(sum(rss_kb(p) for p in descendants(pid)) / 1024, 1)


def measure(broker: str, records: int, rounds: int, seed: int) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"flowctl-bench-{broker}-"))
    settings = Settings(
        home=home, kafka_port=free_port(), kafka_controller_port=free_port(), broker=broker
    )
    starts: list[float] = []
    try:
        for _ in range(rounds):
            began = time.monotonic()
            manager.up(settings, only=broker)
            starts.append(time.monotonic() - began)
            manager.down(settings, only=broker)
        manager.up(settings, only=broker)
        pid = next(s.pid for s in manager.status(settings, only=broker))
        assert pid is not None
        idle = rss_mb(pid)
        topic = unique_name("broker")
        kafka_log.ensure_topics(settings.kafka_bootstrap, {topic: PARTITIONS})
        lines = random_lines(records, seed)
        began = time.monotonic()
        kafka_log.produce(settings.kafka_bootstrap, topic, lines, progress_every=50_000)
        produce_s = time.monotonic() - began
        loaded = rss_mb(pid)
        read_rate = read_loop(settings.kafka_bootstrap, topic, records)  # records/s
        on_disk = kafka.log_size(settings) if broker == "kafka" else None
        after_read = rss_mb(pid)
        print(
            f"{broker}: up in {statistics.median(starts):.2f} s, {idle} MB idle, "
            f"{records / produce_s:,.0f} records/s produced, {loaded} MB loaded, "
            f"{read_rate:,.0f} records/s read, log on disk {on_disk}"
        )
        return {
            "start_s": [round(s, 2) for s in starts],
            "start_s_median": round(statistics.median(starts), 2),
            "rss_idle_mb": idle,
            "rss_loaded_mb": loaded,
            "rss_after_read_mb": after_read,
            "produce_records_per_s": round(records / produce_s),
            "read_records_per_s": round(read_rate),
            "log_on_disk_mb": None if on_disk is None else round(on_disk / 1e6, 1),
            "heap": settings.kafka_heap if broker == "kafka" else None,
        }
    finally:
        manager.down(dataclasses.replace(settings), only=broker)
        shutil.rmtree(home, ignore_errors=True)


def run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _terminate)
    result = {b: measure(b, args.records, args.rounds, args.seed) for b in BROKERS}
    k, t = result["kafka"], result["tansu"]
    summary = {
        "records": args.records,
        "kafka_vs_tansu": {
            "start_s": ratio(k["start_s_median"], t["start_s_median"]),
            "rss_idle": ratio(k["rss_idle_mb"], t["rss_idle_mb"]),
            "rss_loaded": ratio(k["rss_loaded_mb"], t["rss_loaded_mb"]),
            "produce_records_per_s": ratio(k["produce_records_per_s"], t["produce_records_per_s"]),
            "read_records_per_s": ratio(k["read_records_per_s"], t["read_records_per_s"]),
        },
    }
    path = write_result("broker", {"summary": summary, "brokers": result})
    print(f"{summary}\nwrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = experiment_parser(__doc__, seed=45)
    parser.add_argument("--records", type=int, default=2_000_000, help="lines produced")
    parser.add_argument("--rounds", type=int, default=3, help="timed starts per broker")
    return run_experiment(parser, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
