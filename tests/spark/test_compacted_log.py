"""A compacted Eden on Apache Kafka: the log cleaner leaves gaps between offsets, and the
topology's tuples are cut over them (a tuple is an offset range, whatever it holds).

The topic is created compacted with segments that roll at once, keyed records are written
in rounds (each key again in every round), and the test waits for the broker's log
cleaner to remove the older versions: the log then holds fewer records than its offsets
span. The topology must count exactly the records the log holds, its checkpoint must
reach the log's end, and reconcile must count every record once and name the rest gaps.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient, NewTopic

from flowctl.adapters import kafka_ends, kafka_log
from flowctl.pipelines.wordcount import count_values
from tests.librdkafka import Rec, produce
from tests.local_spark import local_session
from tests.spark.flow_harness import Flow, counted, flow_config, lines, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]

NAME = "compacted"
EDEN = f"{NAME}.eden"
#: Compact, and let the cleaner take every segment but the active one at once.
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "100",
    "min.cleanable.dirty.ratio": "0.001",
    "min.compaction.lag.ms": "0",
    "max.compaction.lag.ms": "100",
}


def _kept(bootstrap: str) -> list[bytes]:
    """The values the log holds now, every partition from its start to its end."""
    ends = kafka_ends.latest_offsets(bootstrap, EDEN)
    consumer = kafka_log.new_consumer(bootstrap)
    try:
        starts = kafka_log.log_starts(consumer, EDEN)
        return [
            r.value
            for p, end in ends.items()
            for r in kafka_log.read_range(consumer, EDEN, p, starts[p], end, timeout_s=30)
        ]
    finally:
        consumer.close()


def _write_rounds(bootstrap: str, rounds: int) -> None:
    """Each round writes every key once more, with a line of its own."""
    for r in range(rounds):
        batch = [
            Rec(f"{line} round{chr(97 + r)}".encode(), key=f"key-{i}".encode())
            for i, line in enumerate(lines(60, seed=70 + r))
        ]
        produce(bootstrap, EDEN, batch)
        time.sleep(0.3)  # past segment.ms: the next round rolls a new segment


def test_a_compacted_log_with_gaps_counts_exactly_and_reconciles(
    flow: Flow, tmp_path: Path
) -> None:
    from flowctl.spark.reconcile import COUNTED, GAP, describe, reconcile

    bootstrap = flow.settings.kafka_bootstrap
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(EDEN, 2, -1, topic_configs=COMPACTED)])
    finally:
        admin.close()
    _write_rounds(bootstrap, rounds=5)
    deadline = time.monotonic() + 120
    while True:  # the cleaner runs every 15 s (log.cleaner.backoff.ms)
        kept = _kept(bootstrap)
        span = sum(kafka_ends.latest_offsets(bootstrap, EDEN).values())
        if len(kept) < span:
            break
        assert time.monotonic() < deadline, "the log cleaner left no gap within 120 s"
        produce(bootstrap, EDEN, [Rec(b"roll", key=b"key-0")])  # rolls the active segment
        time.sleep(2)
    # The cleaner may still be at work: the log is read until two reads a cleaner's round
    # apart (log.cleaner.backoff.ms, 15 s) agree, so the stream reads what the test expects.
    for _ in range(6):
        time.sleep(16)
        again = _kept(bootstrap)
        if again == kept:
            break
        kept = again
    else:
        pytest.fail("the log cleaner never settled")
    config = flow_config(tmp_path, NAME, partitions=2, tuple_size=20)
    expected = dict(count_values(kept))
    job = flow.submit(config, f"{NAME}-blue-1", 2)
    wait_for(lambda: counted(flow, NAME) == expected, timeout_s=240, job=job, what="the counts")
    latest = kafka_ends.latest_offsets(bootstrap, EDEN)
    wait_for(
        lambda: flow.plane.committed_offsets(NAME, EDEN) == latest,
        timeout_s=60,
        job=job,
        what="the checkpoint at the log's end, over the cleaner's gaps",
    )
    flow.stop(job, f"{NAME}-blue-1")
    assert counted(flow, NAME) == expected
    gaps = sum(latest.values()) - len(kept)
    assert gaps > 0
    with local_session("flowctl-test-compacted-reconcile") as spark:
        report = reconcile(
            spark,
            pipeline_config=str(config),
            database_url=flow.database_url,
            bootstrap=bootstrap,
            chunk_records=300,
        )
    text = describe(report)
    assert report.ok, text
    assert report.records == {COUNTED: len(kept), GAP: gaps}, text
    print(f"compacted log: {len(kept)} records kept, {gaps} offsets cleaned away; {text}")
