"""What the embedded Tansu's ListOffsets and a tail fetch cost against a partition's log length.

Tansu's memory engine walks a partition's record batches, and its S3 engine lists the
partition's whole object prefix (upstream nisshi-io/nisshi issue 684), on every
ListOffsets and fetch: the cost grows with the number of record batches a partition
holds, not with the records asked for. On a fresh broker per storage engine (memory;
s3 on a local moto server), one partition is grown to each of ``--batches`` one-record
batches (the baseline: the worst producer) and, on another partition, the same number of
records in ``--records-per-batch`` batches (the candidate: what batching producers
write); at each size ListOffsets (``end_offsets``) and a fetch of the last 500 records are
timed ``--rounds`` times (medians). The ratio is the candidate's tail-fetch time over the
baseline's at the largest size.

Then the platform's own producer (``kafka_log.produce``, used by ingest, the feed, replay
and the DLQ) writes ``--platform-records`` lines to a 4-partition topic, with its shipped
linger and batch size and with the previous ones (5 ms, 256 KiB), and the record batches
per partition are counted as read back.

    flock /tmp/flowctl-heavy.lock .venv/bin/python -m bench.broker_cost \
        [--batches 1000 10000 40000] [--s3-batches 100 200 300]

Writes bench/results/broker_cost.json.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import signal
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from kafka import KafkaProducer, TopicPartition
from kafka.record import memory_records

from bench._common import _terminate, random_lines, unique_name
from bench._experiment import experiment_parser, ratio, run_experiment, write_result
from flowctl.adapters import kafka_log, kafka_produce
from flowctl.config import Settings
from flowctl.services import manager
from flowctl.services.ports import free_port

TAIL = 500
TAIL_TIMEOUT_S = 60.0
#: The platform producer's linger (ms) and batch size (bytes) before they were raised.
PREVIOUS_BATCHING = (5, 256 * 1024)


@contextlib.contextmanager
def broker(storage: str) -> Iterator[str]:
    """A fresh Tansu (and, for s3, a local moto server) on free ports; its bootstrap."""
    home = Path(tempfile.mkdtemp(prefix="flowctl-bench-broker-"))
    settings = Settings(
        home=home, kafka_port=free_port(), s3_port=free_port(), tansu_storage=storage
    )
    try:
        manager.up(settings, only="tansu")
        yield settings.kafka_bootstrap
    finally:
        with contextlib.suppress(Exception):
            manager.down(settings, only=["tansu", "s3"])
        shutil.rmtree(home, ignore_errors=True)


def grow(bootstrap: str, tp: TopicPartition, records: int, per_batch: int) -> None:
    """Append ``records`` records to ``tp`` in batches of ``per_batch`` (1: one per request)."""
    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        acks=1,
        enable_idempotence=False,
        linger_ms=0 if per_batch == 1 else 50,
        batch_size=1 if per_batch == 1 else per_batch * 80,
        max_in_flight_requests_per_connection=1,
    )
    try:
        value = b"x" * 60
        for start in range(0, records, per_batch):
            for _ in range(min(per_batch, records - start)):
                producer.send(tp.topic, value=value, partition=tp.partition)
            producer.flush()
    finally:
        producer.close()


def timed(fn: Callable[[], Any], rounds: int) -> float:
    """Median milliseconds of ``fn`` over ``rounds`` calls."""
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def measure(bootstrap: str, tp: TopicPartition, records: int, rounds: int) -> dict[str, Any]:
    """ListOffsets and a fetch of the last ``TAIL`` of ``records`` records on ``tp``, median
    ms (the partition's length is known: Tansu's ``end_offsets`` under-reports)."""
    consumer = kafka_log.new_consumer(bootstrap)
    want = min(TAIL, records)
    try:
        consumer.assign([tp])

        short: list[int] = []

        def tail() -> None:
            consumer.seek(tp, records - want)
            got = 0
            deadline = time.monotonic() + TAIL_TIMEOUT_S
            while got < want and time.monotonic() < deadline:
                got += sum(len(v) for v in consumer.poll(timeout_ms=1000).values())
            if got < want:
                short.append(got)

        return {
            "list_offsets_ms": timed(lambda: consumer.end_offsets([tp]), rounds),
            "tail_fetch_ms": timed(tail, rounds),
            # Fetches cut off at TAIL_TIMEOUT_S: their time is a lower bound.
            "tail_fetches_cut_off": len(short),
        }
    finally:
        consumer.close()


def engine_series(storage: str, sizes: list[int], per_batch: int, rounds: int) -> dict[str, Any]:
    """Cost at each size, one-record batches (partition 0) and batched (partition 1)."""
    series: dict[str, Any] = {"one_record_batches": [], "batched": []}
    with broker(storage) as bootstrap:
        topic = unique_name("cost")
        kafka_log.ensure_topics(bootstrap, {topic: 2})
        single, batched = TopicPartition(topic, 0), TopicPartition(topic, 1)
        have = 0
        for size in sorted(sizes):
            t0 = time.perf_counter()
            grow(bootstrap, single, size - have, 1)
            grow(bootstrap, batched, size - have, per_batch)
            have = size
            grew_s = round(time.perf_counter() - t0, 1)
            for key, tp, batches in (
                ("one_record_batches", single, size),
                ("batched", batched, -(-size // per_batch)),
            ):
                row = {"records": size, "batches": batches, **measure(bootstrap, tp, size, rounds)}
                series[key].append(row)
                print(storage, key, row, f"(grown in {grew_s} s)", flush=True)
    return series


@contextlib.contextmanager
def counting_batches() -> Iterator[set[int]]:
    """Base offsets of every record batch kafka-python decodes inside this block."""
    seen: set[int] = set()
    original = memory_records.MemoryRecords.next_batch

    def next_batch(self: Any, *args: Any, **kwargs: Any) -> Any:
        batch = original(self, *args, **kwargs)
        if batch is not None:
            seen.add(batch.base_offset)
        return batch

    memory_records.MemoryRecords.next_batch = next_batch  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        memory_records.MemoryRecords.next_batch = original  # type: ignore[method-assign]


@contextlib.contextmanager
def producer_batching(linger_ms: int, batch_bytes: int) -> Iterator[None]:
    """The platform producer with another linger and batch size inside this block."""
    saved = kafka_produce.LINGER_MS, kafka_produce.BATCH_BYTES
    kafka_produce.LINGER_MS, kafka_produce.BATCH_BYTES = linger_ms, batch_bytes
    try:
        yield
    finally:
        kafka_produce.LINGER_MS, kafka_produce.BATCH_BYTES = saved


def platform_batches(records: int, partitions: int = 4) -> dict[str, Any]:
    """Record batches per partition that ``kafka_log.produce`` writes for ``records`` lines."""
    with broker("memory") as bootstrap:
        topic = unique_name("platform")
        kafka_log.ensure_topics(bootstrap, {topic: partitions})
        kafka_log.produce(bootstrap, topic, random_lines(records, 1))
        per_partition = {}
        consumer = kafka_log.new_consumer(bootstrap)
        try:
            for p in range(partitions):
                tp = TopicPartition(topic, p)
                consumer.assign([tp])
                consumer.seek_to_beginning(tp)
                read = 0
                with counting_batches() as seen:
                    deadline = time.monotonic() + 120
                    while time.monotonic() < deadline:
                        got = sum(len(v) for v in consumer.poll(timeout_ms=1000).values())
                        if not got:
                            break
                        read += got
                per_partition[p] = {"records": read, "batches": len(seen)}
        finally:
            consumer.close()
    total = sum(v["batches"] for v in per_partition.values())
    return {"records": records, "per_partition": per_partition, "batches": total}


def _parser() -> argparse.ArgumentParser:
    p = experiment_parser(__doc__, seed=1)
    p.add_argument("--batches", type=int, nargs="+", default=[1000, 10000, 40000])
    p.add_argument("--s3-batches", type=int, nargs="*", default=[100, 200, 300])
    p.add_argument("--records-per-batch", type=int, default=500)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--platform-records", type=int, default=100_000)
    return p


def _run(args: argparse.Namespace) -> int:
    signal.signal(signal.SIGTERM, _terminate)  # unwinds: brokers stopped, homes removed
    signal.signal(signal.SIGINT, _terminate)

    engines = {"memory": engine_series("memory", args.batches, args.records_per_batch, args.rounds)}
    if args.s3_batches:
        engines["s3-moto"] = engine_series(
            "s3", args.s3_batches, args.records_per_batch, args.rounds
        )
    shipped = {"linger_ms": kafka_produce.LINGER_MS, "batch_bytes": kafka_produce.BATCH_BYTES}
    produced = {"shipped": {**shipped, **platform_batches(args.platform_records)}}
    with producer_batching(*PREVIOUS_BATCHING):
        produced["previous"] = {
            "linger_ms": PREVIOUS_BATCHING[0],
            "batch_bytes": PREVIOUS_BATCHING[1],
            **platform_batches(args.platform_records),
        }
    print("platform producer", produced, flush=True)
    last = engines["memory"]
    candidate = last["batched"][-1]["tail_fetch_ms"]
    baseline = last["one_record_batches"][-1]["tail_fetch_ms"]
    path = write_result(
        "broker_cost",
        {
            "metric": f"tail fetch of {TAIL} records at {max(args.batches)} records, memory engine",
            "unit": "ms",
            "candidate": f"{args.records_per_batch}-record batches",
            "baseline": "one-record batches",
            "candidate_value": candidate,
            "baseline_value": baseline,
            "ratio": ratio(candidate, baseline),
            "target": "report only: cost against log length per engine",
            "meets_target": None,
            "params": vars(args),
            "engines": engines,
            "platform_producer": produced,
        },
    )
    print(path)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return run_experiment(_parser(), _run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
