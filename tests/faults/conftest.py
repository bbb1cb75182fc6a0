"""The fault-injection suite: faults during a running stream, then the reconcile.

One module per fault, each running one flow-controlled topology (spark-submit) at a
time: the driver SIGKILLed three times (``test_driver_killed``), memcached restarted
(``test_memcached_restart``), the database away for 20 s (``test_database_outage``),
the broker restarted with its log in S3 (``test_broker_restart``), 1% poison records
(``test_poison_records``), and faults during an overlapped blue-green handover (blue or
green SIGKILLed, the replace task killed, memcached restarted: ``test_handover_faults``).
The replace operator killed mid-way under Airflow is the third part of
``tests/e2e/test_rescale_e2e.py`` (one blue-green end-to-end run for the whole suite).

:class:`FaultRun` is one pipeline of its own (a renamed copy of a shipped config, so its
topics never meet another test's on the session broker) with a feeder that keeps
producing while the fault happens, so every fault hits a *running* stream. At the end
the stream is drained (exact results, the durable checkpoint at the log's end) and
stopped, and :meth:`FaultRun.reconcile` runs the reconcile job's own function
(:func:`flowctl.spark.reconcile.reconcile`, what ``reconcile_<pipeline>`` submits) over a
Spark batch read of the whole Eden topic. Then :meth:`FaultRun.tally` counts records:

- word count: every line carries a word unique to it (its *tag*), so a lost line is a
  tag counted 0 times and a line counted twice is a tag counted twice;
- log ETL: one ``log_events`` row per Eden offset; every malformed line must be in the
  DLQ exactly once and nothing else;
- clickstream (``test_clickstream_windows``): its input is ``(line, Kafka timestamp)``
  pairs and the test tallies the windows itself.

The tallies of a run are printed and written to ``<basetemp>/faults-tally.json``; the
README's "Faults survived" table comes from them.
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from bench.lib.submit import LocalJob
from flowctl.adapters import kafka_ends, kafka_log, results
from flowctl.adapters.db import engine_for
from flowctl.config import Settings
from flowctl.core.replay import decode_envelope
from flowctl.pipelines.wordcount import count_words
from tests.spark.flow_harness import WORDS, Flow, flow_config, read_topic, wait_for

#: Seconds to wait for a drained stream: exact results, then the checkpoint at the end.
SETTLE_S = 180


def tag(i: int) -> str:
    """The word unique to line ``i``: ``rec`` and ``i`` in base 26 written with letters."""
    letters = ""
    while True:
        i, digit = divmod(i, 26)
        letters = chr(ord("a") + digit) + letters
        if i == 0:
            return "rec" + letters


def tagged_lines(seed: int) -> Iterator[str]:
    """Endless word-count lines, line ``i`` ending with :func:`tag` ``(i)``."""
    rng = random.Random(seed)
    i = 0
    while True:
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 10)))
        yield f"{words} {tag(i)}"
        i += 1


@dataclass
class Tally:
    """Records of one fault run, for the README's table."""

    fault: str
    records_in: int
    records_out: int
    lost: int
    duplicated: int
    dlq: int = 0
    reconcile: dict[str, int] = field(default_factory=dict)


@dataclass
class FaultRun:
    """One pipeline under a fault: its config, its input, its topologies."""

    flow: Flow
    name: str
    config: Path
    source: Iterator[Any]  # lines, or (line, timestamp_ms) pairs (clickstream)
    shipped: str = "wordcount"
    produced: list[Any] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def bootstrap(self) -> str:
        return self.flow.settings.kafka_bootstrap

    @property
    def eden(self) -> str:
        return f"{self.name}.eden"

    #: Lines written in transactions that were aborted (:meth:`produce_transactions`).
    aborted: int = 0

    def produce(self, n: int) -> None:
        with self.lock:
            batch = [next(self.source) for _ in range(n)]
            kafka_log.produce(self.bootstrap, self.eden, batch)
            self.produced.extend(batch)

    def produce_transactions(self, n: int, per_transaction: int = 10) -> None:
        """``n`` lines from librdkafka in transactions, every third aborted: only the
        committed ones are input (``produced``); the rest, and the markers, are gaps."""
        from tests.librdkafka import Rec, committed_of
        from tests.librdkafka import produce as produce_foreign

        with self.lock:
            lines = [next(self.source) for _ in range(n)]
            records = [Rec(line.encode()) for line in lines]
            produce_foreign(
                self.bootstrap,
                self.eden,
                records,
                transactional_id=f"{self.name}-txn",
                per_transaction=per_transaction,
                abort_every=3,
            )
            kept = committed_of(records, per_transaction, 3)
            self.produced.extend(r.value.decode() for r in kept if r.value is not None)
            self.aborted += len(records) - len(kept)

    @contextlib.contextmanager
    def feeding(
        self, per_tick: int = 50, tick_s: float = 0.5, transactions: bool = False
    ) -> Iterator[None]:
        """Produce ``per_tick`` lines every ``tick_s`` seconds while the block runs
        (``transactions``: every other tick's in transactions, a third of them aborted)."""
        stop = threading.Event()
        errors: list[BaseException] = []

        def feed() -> None:
            tick = 0
            while not stop.wait(tick_s):
                tick += 1
                try:
                    if transactions and tick % 2:
                        self.produce_transactions(per_tick)
                    else:
                        self.produce(per_tick)
                except Exception as exc:  # reported by the test below
                    errors.append(exc)
                    return

        thread = threading.Thread(target=feed, name=f"feeder-{self.name}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(timeout=60)
        assert not thread.is_alive(), "the feeder did not stop"
        assert not errors, f"producing failed: {errors[0]!r}"

    def submit(self, topology_id: str, lanes: int, *, master: str = "local[2]") -> LocalJob:
        return self.flow.submit(self.config, topology_id, lanes, master=master)

    def expected(self) -> dict[str, Any]:
        with self.lock:
            values = list(self.produced)
        if self.shipped == "wordcount":
            return dict(count_words(values))
        if self.shipped == "clickstream":
            from flowctl.pipelines.base import Record
            from flowctl.pipelines.clickstream import DEFINITION as CLICKS

            return CLICKS.reference_records(
                Record(self.eden, 0, i, ts, v.encode()) for i, (v, ts) in enumerate(values)
            )
        from flowctl.pipelines.logetl import DEFINITION

        return DEFINITION.reference(v.encode() for v in values)

    def stored(self) -> dict[str, Any]:
        if self.shipped == "wordcount":
            return results.word_counts(self.flow.database_url, self.name)
        from flowctl.pipelines.config import load_pipeline_config
        from flowctl.pipelines.sinks import result_store

        store = result_store(load_pipeline_config(self.config))  # the [sink]'s or its own
        with engine_for(self.flow.database_url).connect() as conn:
            return dict(store.stored(conn, self.name))

    def counted(self) -> int:
        """Lines counted so far (word count: tags with a count; clickstream: clicks)."""
        stored = self.stored()
        if self.shipped == "wordcount":
            return sum(n for word, n in stored.items() if word.startswith("rec"))
        if self.shipped == "clickstream":
            return sum(stored.values())
        return int(stored["rows"])

    def settle(self, job: LocalJob, topology_id: str) -> None:
        """Wait for exact results and the checkpoint at the log's end, then stop the job."""
        expected = self.expected()
        wait_for(lambda: self.stored() == expected, timeout_s=SETTLE_S, job=job, what="exact")
        latest = kafka_ends.latest_offsets(self.bootstrap, self.eden)
        wait_for(
            lambda: self.flow.plane.committed_offsets(self.name, self.eden) == latest,
            timeout_s=60,
            job=job,
            what="the durable checkpoint at the log's end",
        )
        self.flow.stop(job, topology_id)

    def reconcile(self, spark: Any) -> Any:
        """The reconcile job's comparison over the whole Eden topic; it must find no difference."""
        from flowctl.spark.reconcile import COUNTED, DLQ, GAP, describe, reconcile

        report = reconcile(
            spark,
            pipeline_config=str(self.config),
            database_url=self.flow.database_url,
            bootstrap=self.bootstrap,
            chunk_records=2_000,
        )
        text = describe(report)
        print(text)
        assert report.ok, text
        # the whole Eden input was durable: every record counted or dead-lettered, and
        # the offsets of aborted transactions and markers gaps, never records
        assert set(report.records) <= {COUNTED, DLQ, GAP}, text
        offsets = sum(kafka_ends.latest_offsets(self.bootstrap, self.eden).values())
        assert report.records.get(GAP, 0) == offsets - len(self.produced), text
        assert report.records.get(COUNTED, 0) + report.records.get(DLQ, 0) == len(self.produced), (
            text
        )
        return report

    def tally(self, fault: str, report: Any) -> Tally:
        if self.shipped == "wordcount":
            stored = self.stored()
            tags = [line.rsplit(" ", 1)[1] for line in self.produced]
            counts = [stored.get(t, 0) for t in tags]
            out = Tally(
                fault,
                records_in=len(self.produced),
                records_out=sum(counts),
                lost=sum(1 for n in counts if n == 0),
                duplicated=sum(n - 1 for n in counts if n > 1),
            )
            extra = {w for w in stored if w.startswith("rec")} - set(tags)
            out.duplicated += len(extra)  # a tag never produced cannot come from this input
        else:
            out = self._log_tally(fault)
        out.reconcile = dict(report.records)
        return out

    def _log_tally(self, fault: str) -> Tally:
        from flowctl.adapters.schema import log_events
        from flowctl.pipelines.logetl import parse_line

        good: set[tuple[int, int]] = set()
        bad: dict[tuple[int, int], bytes] = {}
        consumer = kafka_log.new_consumer(self.bootstrap)
        try:
            for partition, end in kafka_ends.latest_offsets(consumer, self.eden).items():
                for r in kafka_log.read_range(consumer, self.eden, partition, 0, end):
                    try:
                        parse_line(r.value)
                        good.add((partition, r.offset))
                    except Exception:  # whatever the parser refuses is poison
                        bad[(partition, r.offset)] = r.value
        finally:
            consumer.close()
        q = sa.select(log_events.c.partition, log_events.c.offset).where(
            log_events.c.pipeline == self.name
        )
        with engine_for(self.flow.database_url).connect() as conn:
            rows = [(int(p), int(o)) for p, o in conn.execute(q).all()]
        dead = [decode_envelope(v) for v in read_topic(self.bootstrap, f"{self.name}.dlq")]
        dead_at = [(e.partition, e.offset) for e in dead]
        # every malformed line in the DLQ exactly once, with its error; nothing else there
        assert sorted(dead_at) == sorted(bad), (sorted(dead_at), sorted(bad))
        for e in dead:
            assert e.topic == self.eden
            assert e.payload == bad[(e.partition, e.offset)]
            assert e.error.startswith("poison: PoisonRecord"), e.error
        return Tally(
            fault,
            records_in=len(good) + len(bad),
            records_out=len(rows) + len(dead_at),
            lost=len(good - set(rows)) + len(set(bad) - set(dead_at)),
            duplicated=(len(rows) - len(set(rows)))
            + len(set(rows) - good)
            + (len(dead_at) - len(set(dead_at))),
            dlq=len(dead_at),
        )


def check(run: FaultRun, fault: str, spark: Any, tallies: list[Tally]) -> Tally:
    """Reconcile and tally ``run``: no difference, nothing lost, nothing duplicated."""
    report = run.reconcile(spark)
    tally = run.tally(fault, report)
    tallies.append(tally)
    print(tally)
    assert (tally.lost, tally.duplicated) == (0, 0), tally
    assert tally.records_out == tally.records_in, tally
    return tally


@pytest.fixture(scope="package")
def spark() -> Iterator[Any]:
    """One local Spark session for the suite's reconcile batches."""
    from tests.local_spark import local_session

    with local_session("flowctl-faults-reconcile") as session:
        yield session


@pytest.fixture(scope="package")
def tallies(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Tally]]:
    """The suite's tallies, written to ``<basetemp>/faults-tally.json`` at the end."""
    collected: list[Tally] = []
    yield collected
    path = tmp_path_factory.getbasetemp() / "faults-tally.json"
    path.write_text(json.dumps([asdict(t) for t in collected], indent=2))
    for t in collected:
        print(
            f"fault tally | {t.fault} | in {t.records_in} | out {t.records_out} | "
            f"lost {t.lost} | duplicated {t.duplicated} | dlq {t.dlq}"
        )


@pytest.fixture
def fault_run(
    flowctl_settings: Settings, sqlite_url: str, tmp_path: Path
) -> Iterator[Callable[..., FaultRun]]:
    """Makes the test's :class:`FaultRun` (defaults: the session's services, SQLite); kills
    whatever job a failed test left running."""
    harnesses: list[Flow] = []

    def make(
        name: str,
        *,
        settings: Settings | None = None,
        database_url: str | None = None,
        shipped: str = "wordcount",
        source: Iterator[str] | None = None,
        seed: int = 1,
        **config: Any,
    ) -> FaultRun:
        flow = Flow(settings or flowctl_settings, database_url or sqlite_url, tmp_path)
        harnesses.append(flow)
        flow.plane.ensure_schema()  # results are read before the first job is up
        path = flow_config(tmp_path, name, shipped=shipped, **config)
        run = FaultRun(flow, name, path, source or tagged_lines(seed), shipped=shipped)
        partitions = config.get("partitions", 3)
        kafka_log.ensure_topics(run.bootstrap, {run.eden: partitions})
        return run

    yield make
    for flow in harnesses:
        flow.kill_leftovers()
