"""The MRWQ flusher end to end: real memcached, real SQLite and PostgreSQL.

The test pipeline counts words: ``apply`` upserts into its own table, so a result applied
twice would show as a doubled count.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.applied import PartitionReplay, applied_rows, read_checkpoints
from flowctl.adapters.db import engine_for
from flowctl.adapters.memcached_store import MemcachedStore
from flowctl.adapters.mrwq_flusher import (
    FlusherService,
    FlushTimeout,
    GapReport,
)
from flowctl.adapters.mrwq_sink import MrwqItemError
from flowctl.config import Settings
from flowctl.core.backoff import FlumeBackoff
from flowctl.core.clock import FakeClock
from flowctl.core.flusher import FlushPolicy
from flowctl.core.persistence import MrwqWriter, mrwq_result
from flowctl.core.tuples import TopicPartition, TupleRange
from flowctl.pipelines.base import Record
from flowctl.services import manager
from flowctl.services.base import PortInUseError
from flowctl.services.ports import free_port

pytestmark = [pytest.mark.integration]

PIPELINE = "flushtest"
TOPIC = "flushtest.eden"
TP = TopicPartition(TOPIC, 0)

test_metadata = sa.MetaData()
test_counts = sa.Table(
    "flusher_test_counts",
    test_metadata,
    sa.Column("pipeline", sa.String(100), primary_key=True),
    sa.Column("word", sa.String(100), primary_key=True),
    sa.Column("n", sa.BigInteger, nullable=False),
)


class CountDefinition:
    """A word count whose ``apply`` adds to a table (not idempotent on purpose)."""

    name = PIPELINE

    def process(self, records: Sequence[Record]) -> dict[str, int]:
        return dict(Counter(w for r in records for w in (r.value or b"").decode().split()))

    def apply(self, conn: sa.Connection, pipeline: str, results: Sequence[Any]) -> int:
        total: Counter[str] = Counter()
        for result in results:
            total.update(result)
        stmt = schema.dialect_insert(conn)(test_counts)
        stmt = stmt.on_conflict_do_update(
            index_elements=["pipeline", "word"], set_={"n": test_counts.c.n + stmt.excluded.n}
        )
        if total:
            conn.execute(
                stmt, [{"pipeline": pipeline, "word": w, "n": n} for w, n in total.items()]
            )
        return len(total)

    def reference(self, values: Iterable[bytes | None]) -> Mapping[str, Any]:
        return dict(Counter(w for v in values for w in (v or b"").decode().split()))

    def stored(self, conn: sa.Connection, pipeline: str) -> Mapping[str, Any]:
        query = sa.select(test_counts.c.word, test_counts.c.n).where(
            test_counts.c.pipeline == pipeline
        )
        return {w: int(n) for w, n in conn.execute(query).all()}


DEFINITION = CountDefinition()


def t(start: int, end: int) -> TupleRange:
    return TupleRange(TOPIC, 0, start, end)


def counts(url: str) -> dict[str, int]:
    with engine_for(url).connect() as conn:
        return dict(DEFINITION.stored(conn, PIPELINE))


def append(writer: MrwqWriter, *tuples: tuple[TupleRange, dict[str, int]]) -> range:
    return writer.append_many([(r.id, [mrwq_result("applied", c)]) for r, c in tuples])


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def namespace() -> str:
    return f"mrwq.t{secrets.token_hex(4)}"


@pytest.fixture
def store(memcached_address: str) -> MemcachedStore:
    return MemcachedStore(memcached_address)


def make_service(
    store: Any, url: str, namespace: str, clock: FakeClock, **kwargs: Any
) -> FlusherService:
    engine = engine_for(url)
    test_metadata.create_all(engine)
    kwargs.setdefault("policy", FlushPolicy(max_length=3, update_time_s=10.0))
    kwargs.setdefault("retry_policy", FlumeBackoff(0.25, 4.0))
    kwargs.setdefault("sleep", lambda _s: None)
    return FlusherService(
        store, url, PIPELINE, DEFINITION.apply, clock=clock, namespace=namespace, **kwargs
    )


@pytest.mark.postgres
def test_flushes_on_max_length_then_on_update_time(
    store: MemcachedStore, database_url: str, namespace: str
) -> None:
    clock = FakeClock()
    service = make_service(store, database_url, namespace, clock)
    assert service.start() is None
    writer = MrwqWriter(store, namespace)
    append(writer, (t(0, 2), {"a": 1}), (t(2, 4), {"a": 1, "b": 1}))
    assert service.poll() is None  # 2 < max_length, no time passed
    append(writer, (t(4, 6), {"c": 2}))
    report = service.poll()
    assert report is not None and report.result.trigger == "length"
    assert report.durable_tuple_ids == (t(0, 2).id, t(2, 4).id, t(4, 6).id)
    assert (report.stats.items, report.stats.applied, report.stats.records) == (3, 3, 6)
    assert report.stats.checkpoint == {TP: 6}
    assert counts(database_url) == {"a": 2, "b": 1, "c": 2}
    assert service.queue_length() == 0

    append(writer, (t(6, 8), {"d": 1}))
    clock.advance(9.9)
    assert service.poll() is None
    clock.advance(0.1)
    report = service.poll()
    assert report is not None and report.result.trigger == "time"
    assert counts(database_url) == {"a": 2, "b": 1, "c": 2, "d": 1}
    assert read_checkpoints(database_url, PIPELINE) == {TP: 8}


def test_out_of_order_tuples_hold_the_checkpoint(
    store: MemcachedStore, sqlite_url: str, namespace: str
) -> None:
    service = make_service(store, sqlite_url, namespace, FakeClock())
    service.start()
    writer = MrwqWriter(store, namespace)
    append(writer, (t(0, 2), {"a": 1}), (t(4, 6), {"a": 1}), (t(6, 8), {"a": 1}))
    assert service.flush().stats.checkpoint == {TP: 2}
    append(writer, (t(2, 4), {"a": 1}))
    assert service.flush().stats.checkpoint == {TP: 8}
    assert counts(sqlite_url) == {"a": 4}


class CrashOnPositionUpdate:
    """The store as seen by a flusher that dies right after its database commit: the
    first write of the queue's head key (done after the commit, before the delete) kills it."""

    def __init__(self, store: MemcachedStore, namespace: str) -> None:
        self.store = store
        self.head_key = f"{namespace}:head"
        self.crashed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)

    def set_many(self, mapping: Mapping[str, bytes]) -> list[str]:
        if self.head_key in mapping and not self.crashed:
            self.crashed = True
            raise KeyboardInterrupt("simulated crash after the commit")
        return self.store.set_many(mapping)


def test_items_flushed_twice_are_applied_once(
    store: MemcachedStore, sqlite_url: str, namespace: str
) -> None:
    clock = FakeClock()
    writer = MrwqWriter(store, namespace)
    first = make_service(store, sqlite_url, namespace, clock)
    first.start()
    crashing = make_service(CrashOnPositionUpdate(store, namespace), sqlite_url, namespace, clock)
    crashing.start()
    seqs = append(writer, (t(0, 5), {"x": 1}), (t(5, 10), {"x": 1, "y": 3}))
    with pytest.raises(KeyboardInterrupt):
        crashing.flush()
    assert counts(sqlite_url) == {"x": 2, "y": 3}  # committed
    items = [f"{namespace}:item:{s}" for s in seqs]
    assert len(store.get_many(items)) == 2  # ... but never deleted from memcached

    # The restarted flusher resumes from the position committed with the results.
    restarted = make_service(store, sqlite_url, namespace, clock)
    assert restarted.start() is None
    assert restarted.queue_length() == 0
    assert store.get_many(items) == {}  # the stale items are cleaned up
    assert restarted.flush().result.first_seq is None

    # The flusher that did not see the crash still holds the old position: it flushes the
    # same items again (they are still there for it) and every one is a duplicate.
    store.set_many({f"{namespace}:head": b"1"})
    for seq, (r, c) in zip(seqs, [(t(0, 5), {"x": 1}), (t(5, 10), {"x": 1, "y": 3})], strict=True):
        body = {"e": first._flusher.epoch, "t": r.id, "k": "applied", "v": c, "l": True}
        store.set_many({f"{namespace}:item:{seq}": json.dumps(body).encode()})
    again = first.flush()
    assert (again.stats.items, again.stats.applied, again.stats.duplicates) == (2, 0, 2)
    assert again.stats.duplicate_records == 10  # [0, 5) and [5, 10) processed twice
    # A batch Spark re-ran appends the same tuples once more: duplicates again.
    append(writer, (t(5, 10), {"x": 1, "y": 3}), (t(10, 12), {"z": 1}))
    third = first.flush()
    assert (third.stats.applied, third.stats.duplicates, third.stats.duplicate_records) == (1, 1, 5)
    assert counts(sqlite_url) == {"x": 2, "y": 3, "z": 1}
    assert [r for r, _ in applied_rows(sqlite_url, PIPELINE)] == [t(0, 5), t(5, 10), t(10, 12)]


def test_replayed_and_dlq_outcomes(store: MemcachedStore, sqlite_url: str, namespace: str) -> None:
    service = make_service(store, sqlite_url, namespace, FakeClock(), max_batch=10)
    service.start()
    writer = MrwqWriter(store, namespace)
    writer.append_many(
        [
            (t(0, 3).id, [mrwq_result("replayed", {"error": "timeout"})]),
            (t(3, 6).id, [mrwq_result("applied", {"a": 1})]),
            (t(1, 2).id, [mrwq_result("applied", {"b": 1}, replay=True)]),
            (t(2, 3).id, [mrwq_result("dlq", {"error": "poison"}, replay=True)]),
            (t(1, 2).id, [mrwq_result("applied", {"b": 1}, replay=True)]),
        ]
    )
    report = service.flush()
    s = report.stats
    assert (s.applied, s.replayed, s.dlq, s.duplicates) == (2, 1, 1, 1)
    assert s.checkpoint == {TP: 6}
    assert counts(sqlite_url) == {"a": 1, "b": 1}


def test_an_isolated_poison_record_is_nested_and_an_unmarked_one_a_repeat(
    store: MemcachedStore, sqlite_url: str, namespace: str
) -> None:
    """The lane marks a poison record it isolated from its tuple (``dlq+isolated``): its
    row nests in the tuple's ``applied`` row; a one-record ``dlq`` item without the mark
    inside an ``applied`` row is a repeat (a re-run dead-lettering a one-record tuple), and
    an isolated mark on two records is off the protocol: a loud gap."""
    service = make_service(store, sqlite_url, namespace, FakeClock(), max_batch=10)
    service.start()
    writer = MrwqWriter(store, namespace)
    writer.append_many(
        [
            (t(0, 4).id, [mrwq_result("applied", {"a": 3})]),
            (t(2, 3).id, [mrwq_result("dlq", {"error": "poison"}, isolated=True)]),
            (t(1, 2).id, [mrwq_result("dlq", {"error": "poison"})]),
        ]
    )
    s = service.flush().stats
    assert (s.applied, s.dlq, s.duplicates) == (1, 1, 1)
    assert [(r.start, r.end, o) for r, o in applied_rows(sqlite_url, PIPELINE)] == [
        (0, 4, "applied"),
        (2, 3, "dlq"),
    ]
    writer.append_many([(t(4, 6).id, [("dlq+isolated", {"error": "poison"})])])
    result = service.flush().result
    assert result.gap is not None and "Claim.isolated of flushtest.eden:0:4-6" in result.gap.reason


def test_a_missing_item_becomes_a_gap_after_the_grace_period(
    store: MemcachedStore, sqlite_url: str, namespace: str
) -> None:
    clock = FakeClock()
    reports: list[GapReport] = []
    service = make_service(
        store, sqlite_url, namespace, clock, gap_grace_s=5.0, on_gap=reports.append
    )
    service.start()
    writer = MrwqWriter(store, namespace)
    seqs = append(writer, (t(0, 2), {"a": 1}), (t(2, 4), {"b": 1}), (t(4, 6), {"c": 1}))
    store.delete_many([f"{namespace}:item:{seqs[1]}"])  # evicted
    first = service.flush()
    assert first.durable_tuple_ids == (t(0, 2).id,) and first.result.gap is None
    clock.advance(4.9)
    assert service.flush().result.gap is None and reports == []
    clock.advance(0.1)
    assert service.flush().result.gap is not None
    assert len(reports) == 1
    assert reports[0].gap.seq == seqs[1]
    assert reports[0].partitions == (PartitionReplay(TOPIC, 0, 2, (), 2),)
    assert reports[0].ranges({TP: 6}) == [t(2, 6)]
    service.flush()
    assert len(reports) == 1  # reported once per gap
    assert counts(sqlite_url) == {"a": 1}  # [4, 6) was not skipped past the hole

    # The planner re-dispatches from the report, the flusher resyncs, results come again.
    skipped = service.resync()
    assert list(skipped) == [seqs[1], seqs[2]]
    append(writer, (t(2, 4), {"b": 1}), (t(4, 6), {"c": 1}))
    assert service.flush().stats.checkpoint == {TP: 6}
    assert counts(sqlite_url) == {"a": 1, "b": 1, "c": 1}


@pytest.fixture
def private_memcached(tmp_path: Path) -> Iterator[Settings]:
    """A memcached of its own (the test restarts it), on a free port with a tmp home."""
    settings = Settings(home=tmp_path / "home", memcached_port=free_port(), memcached_memory_mb=16)
    manager.up(settings, only="memcached")
    try:
        yield settings
    finally:
        manager.down(settings, only="memcached")


def restart_memcached(settings: Settings) -> None:
    """Down, then up on the same port: the port may take a moment to be free again."""
    manager.down(settings, only="memcached")
    deadline = time.monotonic() + 15.0
    while True:
        try:
            manager.up(settings, only="memcached")
            return
        except PortInUseError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_memcached_restart_mid_queue_is_reported_with_the_ranges_to_replay(
    private_memcached: Settings, sqlite_url: str, namespace: str
) -> None:
    store = MemcachedStore(
        private_memcached.memcached_address, retry_policy=FlumeBackoff(0.05, 0.2, max_attempts=3)
    )
    reports: list[GapReport] = []
    service = make_service(store, sqlite_url, namespace, FakeClock(), on_gap=reports.append)
    service.start()
    writer = MrwqWriter(store, namespace)
    append(writer, (t(0, 2), {"a": 1}), (t(2, 4), {"b": 1}))
    service.flush()
    append(writer, (t(4, 6), {"c": 1}), (t(6, 8), {"d": 1}))  # queued, not flushed

    restart_memcached(private_memcached)
    store.close()
    append(writer, (t(8, 10), {"e": 1}))  # a lane writes into the new, empty memcached
    result = service.flush().result
    assert result.gap is not None and "epoch changed" in result.gap.reason
    assert len(reports) == 1
    assert reports[0].partitions == (PartitionReplay(TOPIC, 0, 4, (), 4),)
    assert reports[0].ranges({TP: 10}) == [t(4, 10)]
    assert counts(sqlite_url) == {"a": 1, "b": 1}  # nothing after the loss was applied

    service.resync()
    append(writer, (t(4, 6), {"c": 1}), (t(6, 8), {"d": 1}), (t(8, 10), {"e": 1}))
    assert service.flush().stats.checkpoint == {TP: 10}
    assert counts(sqlite_url) == {"a": 1, "b": 1, "c": 1, "d": 1, "e": 1}

    # memcached restarts while no flusher runs: the epoch stored in the database tells.
    append(writer, (t(10, 12), {"f": 1}))
    restart_memcached(private_memcached)
    store.close()
    append(writer, (t(12, 14), {"g": 1}))
    later: list[GapReport] = []
    restarted = make_service(store, sqlite_url, namespace, FakeClock(), on_gap=later.append)
    report = restarted.start()
    assert report is not None and later == [report]
    assert report.partitions == (PartitionReplay(TOPIC, 0, 10, (), 10),)


class TcpProxy:
    """Forwards a local port to PostgreSQL; stopping it makes the database unreachable
    (refused connections, dropped sessions) exactly as a server going away would."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def stop(self) -> None:
        with self._lock:
            if self._listener is not None:
                # shutdown wakes the thread blocked in accept(); close alone would not.
                with contextlib.suppress(OSError):
                    self._listener.shutdown(socket.SHUT_RDWR)
                self._listener.close()
                self._listener = None
            for conn in self._conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
                conn.close()
            self._conns.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)


@pytest.mark.postgres
def test_database_unreachable_is_retried_with_backoff_and_flushed_once(
    store: MemcachedStore, postgres_url: str, namespace: str
) -> None:
    url = sa.make_url(postgres_url)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432))
    proxy.start()
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    delays: list[float] = []
    writer = MrwqWriter(store, namespace)
    queued_during_outage: list[int | None] = []

    def sleep(delay: float) -> None:
        delays.append(delay)
        queued_during_outage.append(service.queue_length())
        if len(delays) == 3:
            proxy.start()  # the database comes back

    try:
        service = make_service(store, proxied, namespace, FakeClock(), sleep=sleep)
        service.start()
        append(writer, (t(0, 4), {"a": 2}), (t(4, 8), {"b": 1}))
        service.flush()
        proxy.stop()
        append(writer, (t(8, 12), {"c": 1}), (t(12, 16), {"d": 1}))
        report = service.flush()
        assert delays == [0.25, 0.5, 1.0]  # Flume: 250 ms, doubling
        assert queued_during_outage == [2, 2, 2]  # the items stayed in memcached
        assert service.totals["failures"] == 3
        assert (report.stats.applied, report.stats.duplicates) == (2, 0)
        assert counts(postgres_url) == {"a": 2, "b": 1, "c": 1, "d": 1}
        assert read_checkpoints(postgres_url, PIPELINE) == {TP: 16}

        # Down for good: a drain gives up at its deadline with a clear error, items kept.
        proxy.stop()
        append(writer, (t(16, 20), {"e": 1}))
        service._sleep = time.sleep
        service.retry_policy = FlumeBackoff(0.05, 0.1)
        with pytest.raises(FlushTimeout, match=rf"MRWQ {namespace}: not drained within 0.5 s"):
            service.flush_all(timeout_s=0.5)
        assert service.queue_length() == 1
        proxy.start()
        drained = service.flush_all(timeout_s=30)
        assert (drained.applied, drained.gap) == (1, None)
        assert counts(postgres_url) == {"a": 2, "b": 1, "c": 1, "d": 1, "e": 1}
    finally:
        proxy.stop()
        engine_for(proxied).dispose()


def test_run_flushes_in_a_thread_until_stopped(
    store: MemcachedStore, sqlite_url: str, namespace: str
) -> None:
    service = FlusherService(
        store,
        sqlite_url,
        PIPELINE,
        DEFINITION.apply,
        namespace=namespace,
        policy=FlushPolicy(max_length=50, update_time_s=0.05),
        poll_interval_s=0.01,
    )
    test_metadata.create_all(engine_for(sqlite_url))
    stop = threading.Event()
    thread = threading.Thread(target=service.run, args=(stop,), daemon=True)
    thread.start()
    try:
        writer = MrwqWriter(store, namespace)
        for k in range(120):
            append(writer, (t(k, k + 1), {"w": 1}))
        wait_for(lambda: counts(sqlite_url).get("w") == 120, "120 tuples flushed")
        wait_for(lambda: service.queue_length() == 0, "an empty queue")
    finally:
        stop.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert read_checkpoints(sqlite_url, PIPELINE) == {TP: 120}
    assert service.totals["items"] == 120 and service.totals["duplicates"] == 0


def test_an_item_that_cannot_be_applied_is_a_loud_gap_not_a_stall(
    store: MemcachedStore, sqlite_url: str, namespace: str
) -> None:
    reports: list[GapReport] = []
    service = make_service(store, sqlite_url, namespace, FakeClock(), on_gap=reports.append)
    service.start()
    writer = MrwqWriter(store, namespace)
    append(writer, (t(0, 5), {"a": 1}))
    writer.append("not-a-tuple-id", [("applied", {"b": 1})])
    result = service.flush().result
    assert result.gap is not None and result.gap.seq == 1
    assert "seq 2 (tuple 'not-a-tuple-id'" in result.gap.reason
    assert "malformed tuple id" in result.gap.reason
    assert isinstance(service.last_error, MrwqItemError)
    assert counts(sqlite_url) == {}  # the whole batch rolled back
    assert len(reports) == 1 and reports[0].partitions == ()
    assert reports[0].ranges({TP: 5}) == [t(0, 5)]
    assert service.queue_length() == 2  # kept until the replay is planned

    service.resync()
    append(writer, (t(0, 5), {"a": 1}), (t(2, 7), {"c": 1}))  # [2, 7) is cut wrongly
    result = service.flush().result
    assert result.gap is not None
    expected = "range flushtest.eden:0:2-7 partially overlaps applied range flushtest.eden:0:0-5"
    assert expected in result.gap.reason
    assert counts(sqlite_url) == {}


@pytest.mark.postgres
def test_run_keeps_items_while_the_database_is_down_and_stops_during_backoff(
    store: MemcachedStore, postgres_url: str, namespace: str
) -> None:
    url = sa.make_url(postgres_url)
    proxy = TcpProxy((url.host or "127.0.0.1", url.port or 5432))
    proxy.start()
    proxied = url.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
    writer = MrwqWriter(store, namespace)

    def service() -> FlusherService:
        return FlusherService(
            store,
            proxied,
            PIPELINE,
            DEFINITION.apply,
            namespace=namespace,
            policy=FlushPolicy(max_length=10, update_time_s=0.05),
            retry_policy=FlumeBackoff(0.05, 0.2),
            poll_interval_s=0.01,
        )

    try:
        test_metadata.create_all(engine_for(proxied))
        down = service()
        down.start()
        proxy.stop()
        append(writer, (t(0, 3), {"a": 1}), (t(3, 6), {"b": 1}))
        stop = threading.Event()
        thread = threading.Thread(target=down.run, args=(stop,), daemon=True)
        thread.start()
        wait_for(lambda: down.totals["failures"] >= 3, "three failed flush attempts")
        assert down.queue_length() == 2  # nothing lost, nothing half-written
        stop.set()
        thread.join(timeout=10)
        assert not thread.is_alive()  # the stop event interrupts the backoff

        proxy.start()
        up = service()
        stop = threading.Event()
        thread = threading.Thread(target=up.run, args=(stop,), daemon=True)
        thread.start()
        try:
            wait_for(lambda: counts(postgres_url) == {"a": 1, "b": 1}, "the queued results")
            wait_for(lambda: up.queue_length() == 0, "an empty queue")
        finally:
            stop.set()
            thread.join(timeout=10)
        assert read_checkpoints(postgres_url, PIPELINE) == {TP: 6}
        assert up.totals["duplicates"] == 0
    finally:
        proxy.stop()
        engine_for(proxied).dispose()
