"""The topology over the log the world writes: librdkafka producers, every codec, transactions.

One topology run (two cores: one run covers every case). Before it starts (backlog) and
while it runs (live), librdkafka (confluent-kafka) writes into the wordcount copy's Eden:
every codec (none, gzip, snappy, lz4, zstd), idempotent and not, keyed records with
headers, tombstones and empty values among them, and transactions, a third of them
aborted, whose markers and aborted records are offsets a read_committed reader is never
handed, inside tuples and at the end of the log. The
counts must be exact, the checkpoint must reach the log's end over the markers, and
reconcile must find no difference, counting every record and naming the markers gaps.
The run is made once per reader (``[flow] reader``: kafka-python, librdkafka, for the lanes'
reads and the planner's exact ends): the same log, the same exact counts, whichever client
reads it. Reconcile
(which reads the log with its own reader, whatever the lanes use) runs after the
kafka-python run only: a Spark session of its own costs about 10 s, and the librdkafka
run's counts are proven exact record by record (each record's tag word counted once).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from flowctl.adapters import kafka_ends, kafka_log
from flowctl.pipelines.config_sections import KAFKA_PYTHON, LANE_READERS, LIBRDKAFKA
from flowctl.pipelines.wordcount import count_values
from tests.librdkafka import CODECS, Rec, committed_of, produce
from tests.local_spark import local_session
from tests.spark.flow_harness import Flow, counted, flow_config, lines, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]

#: The pipeline of each reader's run (its own topics, offsets and results).
NAMES = {KAFKA_PYTHON: "foreign", LIBRDKAFKA: "foreignrd"}


@contextlib.contextmanager
def _spark() -> Iterator[Any]:
    """A local Spark session for the reconcile batch, started once the topology has
    stopped (two JVMs at once would share the machine's two cores)."""
    with local_session("flowctl-test-foreign-reconcile") as session:
        yield session


def _tag(n: int) -> str:
    """A word of its own for record ``n`` (letters only): counted once per record."""
    letters = ""
    while True:
        n, digit = divmod(n, 26)
        letters += chr(ord("a") + digit)
        if not n:
            return f"rec{letters}"


def _records(n: int, seed: int) -> list[Rec]:
    """Keyed lines with headers, each with its tag word; every 9th a tombstone, every 13th
    an empty value."""
    out = []
    for i, line in enumerate(lines(n, seed)):
        text = f"{line} {_tag(seed * 1000 + i)}"
        value = None if i % 9 == 4 else b"" if i % 13 == 6 else text.encode()
        headers = (("producer", b"librdkafka"), ("seq", str(i).encode()), ("empty", None))
        out.append(Rec(value, key=f"user-{i % 17}".encode(), headers=headers if i % 3 else ()))
    return out


def _write_round(bootstrap: str, eden: str, seed: int) -> list[Rec]:
    """Every codec, idempotent and not, then transactions of 15 records, a third of them
    aborted; returns the records a read_committed reader gets."""
    written: list[Rec] = []
    for c, codec in enumerate(CODECS):
        for idempotent in (False, True):
            batch = _records(120, 100 * seed + 10 * c + idempotent)
            produce(bootstrap, eden, batch, compression=codec, idempotent=idempotent)
            written += batch
    txn = _records(150, 100 * seed + 99)
    produce(
        bootstrap,
        eden,
        txn,
        compression="zstd",
        transactional_id=f"flowctl-test-{secrets.token_hex(4)}",
        per_transaction=15,
        abort_every=3,  # a third aborted: read_committed never hands them over
    )
    return written + committed_of(txn, per_transaction=15, abort_every=3)


# The librdkafka reader's run is deep: its reads of every codec, aborted transactions and
# markers are proven through both readers at the adapter (tests/adapters/test_kafka_log.py,
# test_kafka_transactions.py); the kafka-python run keeps the whole topology in CI.
@pytest.mark.parametrize(
    "reader",
    [r if r == KAFKA_PYTHON else pytest.param(r, marks=pytest.mark.deep) for r in LANE_READERS],
)
def test_foreign_producers_codecs_and_transactions_count_exactly_and_reconcile(
    flow: Flow, tmp_path: Path, reader: str
) -> None:
    from flowctl.spark.reconcile import COUNTED, GAP, describe, reconcile

    name = NAMES[reader]
    eden = f"{name}.eden"
    config = flow_config(tmp_path, name, partitions=2, tuple_size=20, flow={"reader": reader})
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {eden: 2})
    written = _write_round(bootstrap, eden, seed=1)  # the backlog
    expected = dict(count_values(r.value for r in written))
    job = flow.submit(config, f"{name}-blue-1", 2)
    wait_for(lambda: counted(flow, name) == expected, timeout_s=240, job=job, what="the backlog")
    written += _write_round(bootstrap, eden, seed=2)  # live
    expected = dict(count_values(r.value for r in written))
    wait_for(lambda: counted(flow, name) == expected, timeout_s=180, job=job, what="live records")
    latest = kafka_ends.latest_offsets(bootstrap, eden)
    gaps = sum(latest.values()) - len(written)
    assert gaps >= 20, latest  # two rounds of 10 transactions: a marker per partition touched
    wait_for(
        lambda: flow.plane.committed_offsets(name, eden) == latest,
        timeout_s=60,
        job=job,
        what="the checkpoint at the log's end, over the trailing markers",
    )
    flow.stop(job, f"{name}-blue-1")
    stored = counted(flow, name)
    assert stored == expected
    tags = [r.value.rsplit(b" ", 1)[1].decode() for r in written if r.value]
    lost = sum(1 for t in tags if stored.get(t, 0) == 0)
    duplicated = sum(stored.get(t, 0) - 1 for t in tags if stored.get(t, 0) > 1)
    assert (lost, duplicated) == (0, 0)
    windows = flow.plane.metrics_windows(f"{name}-blue-1")
    assert sum(w.failed + w.timed_out + w.dlq for w in windows) == 0
    assert f"log ends: exact ends read with {reader}" in job.log()  # the planner's too
    if reader != KAFKA_PYTHON:
        return
    with _spark() as spark:
        report = reconcile(
            spark,
            pipeline_config=str(config),
            database_url=flow.database_url,
            bootstrap=bootstrap,
            chunk_records=700,
        )
    text = describe(report)
    assert report.ok, text
    assert report.records == {COUNTED: len(written), GAP: gaps}, text
    empty = len(written) - len(tags)
    print(
        f"foreign producers, {reader} reader: {len(written)} records in ({empty} tombstones "
        f"or empty), "
        f"{len(tags)} tagged lines counted once each, {gaps} markers; {text}"
    )
