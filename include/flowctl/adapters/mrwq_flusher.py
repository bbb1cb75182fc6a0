"""The MRWQ flusher of a topology: memcached to the database, exactly once (SPEC F).

The lanes append one *outcome item* per tuple to the MRWQ in memcached
(:class:`flowctl.core.persistence.MrwqWriter`) and ack at once; this module is the
separate processor of seed 002's Algorithm 3. It runs as a thread of the driver's main
process (docs/flow-control.md says why) and, when the queue holds ``max_length`` items or
``update_time_s`` has passed, moves a batch to the database in ONE transaction:

1. claim each item's range in ``applied_ranges`` (:func:`flowctl.adapters.applied.claim`):
   a range already durable is a duplicate and skipped (a crash between the commit and the
   MRWQ delete, a re-run batch, an overlapping blue-green handover);
2. ``apply(conn, pipeline, results)`` (the pipeline definition's) with the results of
   the new ``applied`` items only;
3. advance ``offsets.next_offset`` over contiguous durable ranges (the durable ack);
4. store the flusher's position (epoch, head) in ``mrwq_state``.

Only then are the items deleted from memcached. A database error (server down, a locked
or unwritable SQLite file) is retried with Flume-style backoff (SPEC G) while the items
stay in memcached: nothing is lost, the queue grows (:meth:`FlusherService.queue_length`
feeds backpressure and metrics) and the batch is written once the database is back.

The position lives in the database, in the flush's transaction, rather than only in
memcached: memcached forgets everything on a restart, and a flusher that comes back
after one must compare the queue's epoch with the one it last flushed to know that
items were lost. A lost item, a restarted memcached or a lost counter is a :class:`Gap`:
it is logged, and reported through ``on_gap`` with what to dispatch again (the durable
checkpoint, the holes in ``applied_ranges``, and the end of what is durable); nothing
is ever skipped silently. An item that can never be applied (off the item protocol, or a
range overlapping a durable one) is handled the same way, loudly, instead of stopping the
flusher for good.

The item protocol (:mod:`flowctl.core.persistence` holds it: :func:`mrwq_result` builds
what lanes write): the item's tuple id is the tuple's range id
``topic:partition:start-end`` (for a replayed record: its ORIGINAL topic, partition and
``offset-offset+1``); its key is the outcome (``applied``,
``replayed`` or ``dlq``), suffixed ``+replay`` when the records came from a replay topic;
its value is the result of ``definition.process`` (``applied``) or a note (the others).
Exactly one item per tuple: a tuple's results are one JSON value.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

import sqlalchemy as sa

from flowctl.adapters import schema_setup
from flowctl.adapters.applied import (
    RangeConflict,
    replay_plan,
)
from flowctl.adapters.db import engine_for
from flowctl.adapters.mrwq_flush_log import FlushLog
from flowctl.adapters.mrwq_reports import DrainResult, FlushReport, GapReport
from flowctl.adapters.mrwq_sink import (
    FlushStats,
    MrwqItemError,
    SqlSink,
    load_position,
    save_position,
)
from flowctl.core.backoff import BackoffPolicy, FlumeBackoff, retry
from flowctl.core.clock import Clock, MonotonicClock
from flowctl.core.flusher import FlusherSnapshot, FlushPolicy, FlushResult, Gap, MrwqFlusher
from flowctl.core.persistence import (
    Store,
    head_key,
    item_key,
    mrwq_namespace,
)

__all__ = [
    "DrainResult",
    "FlushReport",
    "FlushTimeout",
    "FlusherService",
    "GapReport",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: Transient failures: the flush is retried with backoff and the items stay in memcached.
#: ``ConnectionError`` covers :class:`flowctl.adapters.memcached_store.MemcachedUnavailable`.
RETRYABLE: tuple[type[BaseException], ...] = (
    sa.exc.OperationalError,
    sa.exc.InterfaceError,
    ConnectionError,
)


class FlushTimeout(TimeoutError):
    """:meth:`FlusherService.flush_all` could not empty the queue in time."""


class _Stopped(Exception):
    """The stop event was set while waiting to retry."""


class FlusherService:
    """Drives :class:`~flowctl.core.persistence.MrwqFlusher` against the database.

    :param store: the MRWQ's store (a :class:`~flowctl.adapters.memcached_store.MemcachedStore`).
    :param database_url: the results database (URL or engine).
    :param pipeline: the pipeline whose results, ranges and checkpoint are written.
    :param apply: the pipeline definition's ``apply(conn, pipeline, results)``; it runs in
        the flush transaction (a callable, so this adapter needs no pipeline code).
    :param policy: Algorithm 3's ``maxLength`` / ``updateTime`` triggers.
    :param clock: the clock of the triggers and of the missing-item grace period.
    :param namespace: the MRWQ namespace (default :func:`~flowctl.core.persistence.mrwq_namespace`).
    :param on_gap: called once per gap with a :class:`GapReport`. If it returns True the
        replay is planned and the service resyncs at once (see :meth:`resync`).
    :param retry_policy: backoff between retries of a failed flush (default Flume:
        0.25 s doubling to 4 s, never giving up in :meth:`run`).
    :param sleep: how :meth:`flush` and :meth:`flush_all` wait between retries.
    :param gap_grace_s: how long a missing item may be missing before it is a gap.
    :param max_batch: items per transaction (default ``policy.max_length``).
    :param on_checkpoint: told ``{(topic, partition): next offset}`` after every flush that
        moved the durable checkpoint (it must not block; an error it raises is logged).
    :param coalesce_every_s: seconds between two merges of the ``applied_ranges`` rows
        below the checkpoint (the pipeline's ``[flow] coalesce_every_s``; 0: every flush;
        ``None``: never), timed by ``clock``.

    :meth:`start` must be called first (``run`` and ``flush_all`` call it if needed).
    Thread-safe: the flusher thread runs :meth:`run`; others may call
    :meth:`queue_length`, :meth:`resync` and :meth:`flush_all`.
    """

    def __init__(
        self,
        store: Store,
        database_url: str | sa.Engine,
        pipeline: str,
        apply: Callable[[sa.Connection, str, Sequence[Any]], int | None],
        *,
        policy: FlushPolicy | None = None,
        clock: Clock | None = None,
        namespace: str | None = None,
        on_gap: Callable[[GapReport], bool | None] | None = None,
        retry_policy: BackoffPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        gap_grace_s: float = 5.0,
        max_batch: int | None = None,
        poll_interval_s: float = 0.05,
        coalesce_every_s: float | None = None,
        on_checkpoint: Callable[[Mapping[tuple[str, int], int]], None] | None = None,
    ) -> None:
        if not isinstance(pipeline, str) or not pipeline:
            raise ValueError(f"pipeline={pipeline!r} must be a non-empty string")
        if not callable(apply):
            raise ValueError(f"apply={apply!r} must be callable as apply(conn, pipeline, results)")
        if isinstance(poll_interval_s, bool) or not isinstance(poll_interval_s, int | float):
            raise ValueError(f"poll_interval_s must be a number > 0, got {poll_interval_s!r}")
        if poll_interval_s <= 0:
            raise ValueError(f"poll_interval_s must be a number > 0, got {poll_interval_s!r}")
        self.store = store
        self.engine = engine_for(database_url)
        self.pipeline = pipeline
        self.apply = apply
        self.policy = policy if policy is not None else FlushPolicy(1000, 1.0)
        self.clock = clock if clock is not None else MonotonicClock()
        self.namespace = namespace if namespace is not None else mrwq_namespace(pipeline)
        self.on_gap = on_gap
        self.on_checkpoint = on_checkpoint
        self.retry_policy = retry_policy if retry_policy is not None else FlumeBackoff(0.25, 4.0)
        self._sleep = sleep
        self.poll_interval_s = float(poll_interval_s)
        self._batch_ended = threading.Event()
        self._sink = SqlSink(
            self.engine,
            self.pipeline,
            self.namespace,
            self.apply,
            lambda: self._flusher.epoch,
            coalesce_every_s=coalesce_every_s,
            clock=self.clock,
        )
        # Built now so bad arguments fail here; its position is restored in start().
        self._flusher = MrwqFlusher(
            store,
            self._sink,
            self.namespace,
            policy=self.policy,
            clock=self.clock,
            gap_grace_s=gap_grace_s,
            max_batch=max_batch,
        )
        self._lock = threading.RLock()
        self._started = False
        self._reported: Gap | None = None
        self.last_gap: GapReport | None = None
        self.last_error: BaseException | None = None
        self._flush_log = FlushLog(self.namespace, self.clock)
        counted = "flushes items applied duplicates duplicate_records replayed dlq records"
        self.totals: dict[str, int] = dict.fromkeys([*counted.split(), "failures", "gaps"], 0)

    # -- retries --

    def _retry(self, fn: Callable[[], T], what: str, sleep: Callable[[float], None]) -> T:
        def counted() -> T:
            try:
                return fn()
            except RETRYABLE as exc:
                self.totals["failures"] += 1
                self.last_error = exc
                raise

        return retry(
            counted,
            self.retry_policy,
            sleep=sleep,
            retry_on=RETRYABLE,
            describe=f"MRWQ {self.namespace}: {what}",
            logger=log,
        )

    # -- start --

    def start(self) -> GapReport | None:
        """Create the tables if needed, restore the position, adopt or check the queue.

        Returns the gap report if the queue lost items while no flusher watched it.
        """
        return self._start(self._sleep)

    def _start(self, sleep: Callable[[float], None]) -> GapReport | None:
        with self._lock:
            if self._started:
                return self.last_gap if self._flusher.gap is not None else None
            self._retry(
                lambda: schema_setup.ensure_schema(self.engine), "creating the schema", sleep
            )
            snapshot = self._retry(self._read_state, "reading the flusher position", sleep)
            if snapshot is not None:
                self._flusher.restore(snapshot)
            gap = self._retry(self._flusher.open, "opening the queue", sleep)
            self._started = True
            if gap is None:
                if snapshot is not None:
                    self._retry(self._drop_stale, "deleting items flushed before a crash", sleep)
                self._retry(self._persist, "storing the flusher position", sleep)
                log.info(
                    "MRWQ %s: flusher of %r at seq %d (epoch %s), queue %s",
                    self.namespace,
                    self.pipeline,
                    self._flusher.head,
                    self._flusher.epoch,
                    self.queue_length(),
                )
                return None
            return self._on_gap(gap, sleep)

    def _read_state(self) -> FlusherSnapshot | None:
        with self.engine.connect() as conn:
            return load_position(conn, self.namespace)

    def _persist(self) -> None:
        snap = self._flusher.snapshot()
        with self.engine.begin() as conn:
            save_position(conn, self.namespace, self.pipeline, snap.epoch, snap.head)

    def _drop_stale(self) -> None:
        """Items below the stored position were committed by a flusher that died before
        deleting them: delete them and move memcached's head key up to the position."""
        key = head_key(self.namespace)
        raw = self.store.get_many([key]).get(key)
        try:
            old = int(raw) if raw is not None else None
        except ValueError:
            old = None
        head = self._flusher.head
        if old is None or old >= head:
            return
        stale = [item_key(self.namespace, seq) for seq in range(max(old, head - 100_000), head)]
        self.store.delete_many(stale)
        self.store.set_many({key: str(head).encode()})
        log.info(
            "MRWQ %s: deleted %d item(s) already flushed before a crash", self.namespace, len(stale)
        )

    # -- flushing --

    def queue_length(self) -> int | None:
        """Items waiting in the MRWQ; ``None`` when memcached cannot tell (down, counter lost)."""
        try:
            return self._flusher.length()
        except ConnectionError as exc:
            log.warning("MRWQ %s: queue length unknown: %s", self.namespace, exc)
            return None

    def poll(self) -> FlushReport | None:
        """Flush if the policy says so (retrying failures); ``None`` if nothing was due."""
        return self._step(self._flusher.poll, "poll", self._sleep)

    def batch_ended(self) -> None:
        """A micro-batch ended: :meth:`run` flushes what is queued at its next poll."""
        self._batch_ended.set()

    def flush(self, trigger: str = "forced") -> FlushReport:
        """Flush now whatever is queued (up to ``max_batch`` items), retrying failures."""
        report = self._step(lambda: self._flusher.flush(trigger), trigger, self._sleep)
        assert report is not None
        return report

    def _step(
        self, fn: Callable[[], FlushResult | None], what: str, sleep: Callable[[float], None]
    ) -> FlushReport | None:
        self._start(sleep)
        with self._lock:
            t0 = time.perf_counter()

            def attempt() -> FlushResult | None:
                self._sink.last = None
                try:
                    return fn()
                except (MrwqItemError, RangeConflict) as exc:
                    return self._unappliable(what, exc)

            result = self._retry(attempt, f"flush ({what})", sleep)
            if result is None:
                return None
            report = FlushReport(result, self._sink.last or FlushStats(), time.perf_counter() - t0)
            self._account(report)
            if report.stats.checkpoint and self.on_checkpoint is not None:
                try:
                    moved = report.stats.checkpoint
                    self.on_checkpoint({(tp.topic, tp.partition): n for tp, n in moved.items()})
                except Exception:
                    log.exception("MRWQ %s: on_checkpoint failed", self.namespace)
            if result.gap is not None and result.gap != self._reported:
                self._on_gap(result.gap, sleep)
            return report

    def _unappliable(self, trigger: str, exc: Exception) -> FlushResult:
        """An item that can never be applied (off protocol, or a range cut wrongly) must
        neither stop the pipeline nor be dropped silently: the batch was rolled back, and
        the queue is treated as having a gap from the flusher's position, so everything not
        durable is dispatched again from the durable checkpoint."""
        self.last_error = exc
        log.error("MRWQ %s: cannot apply the batch: %s", self.namespace, exc)
        gap = Gap(self._flusher.head, f"item cannot be applied: {exc}")
        self._flusher.gap = gap
        return FlushResult(trigger, None, None, 0, (), gap, self._flusher.length() or 0)

    def _account(self, report: FlushReport) -> None:
        s, r = report.stats, report.result
        if r.first_seq is None:
            return
        self.totals["flushes"] += 1
        for name in (
            "items",
            "applied",
            "duplicates",
            "duplicate_records",
            "replayed",
            "dlq",
            "records",
        ):
            self.totals[name] += getattr(s, name)
        self.last_error = None
        self._flush_log.flushed(report)

    # -- gaps --

    @property
    def gap(self) -> Gap | None:
        """The unresolved gap, if any (flushing stops at it until :meth:`resync`)."""
        return self._flusher.gap

    def _on_gap(self, gap: Gap, sleep: Callable[[float], None]) -> GapReport:
        plan = self._retry(
            lambda: replay_plan(self.engine, self.pipeline), "planning the replay", sleep
        )
        report = GapReport(self.pipeline, self.namespace, gap, tuple(plan))
        self._reported = gap
        self.last_gap = report
        self.totals["gaps"] += 1
        log.error("%s", report)
        if self.on_gap is not None:
            try:
                planned = self.on_gap(report)
            except Exception:
                log.exception("MRWQ %s: on_gap callback failed", self.namespace)
                return report
            if planned is True:
                self.resync()
        return report

    def resync(self) -> range:
        """Resume after a gap at the queue's end; returns the skipped sequence numbers.

        Call it once the replay of the :class:`GapReport` is planned and before the
        replayed tuples' results can reach the MRWQ: everything queued now is skipped
        (and deleted), which is safe because everything not durable is being dispatched
        again; results appended after the resync are flushed normally.
        """
        with self._lock:
            skipped = self._retry(self._flusher.resync, "resync", self._sleep)
            self._retry(self._persist, "storing the flusher position", self._sleep)
            self._reported = None
            log.warning(
                "MRWQ %s: resynced at seq %d after the gap; %d queued item(s) skipped "
                "(they are being dispatched again)",
                self.namespace,
                self._flusher.head,
                len(skipped),
            )
            return skipped

    # -- loops --

    def flush_all(self, timeout_s: float) -> DrainResult:
        """Flush whatever the MRWQ holds, for start-up and drain.

        Stops when the queue is empty or at a gap (reported as usual and returned);
        raises :class:`FlushTimeout` if items are still queued after ``timeout_s``
        (including retries of a database that stays down).
        """
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a number > 0, got {timeout_s!r}")
        deadline = time.monotonic() + timeout_s

        def sleep(delay: float) -> None:
            if time.monotonic() + delay > deadline:
                raise FlushTimeout(
                    f"MRWQ {self.namespace}: not drained within {timeout_s:g} s "
                    f"(queue {self.queue_length()}); last error: {self.last_error!r}"
                )
            self._sleep(delay)

        before = dict(self.totals)
        self._start(sleep)
        while True:
            with self._lock:
                if self._flusher.gap is not None:
                    break
                length = self._retry(self._flusher.length, "reading the queue length", sleep)
                if length == 0:
                    break
            report = self._step(lambda: self._flusher.flush("drain"), "drain", sleep)
            if report is not None and report.result.first_seq is None and self.gap is None:
                sleep(self.poll_interval_s)  # an item not written yet: wait for it (or the gap)
        return DrainResult(
            flushes=self.totals["flushes"] - before["flushes"],
            items=self.totals["items"] - before["items"],
            applied=self.totals["applied"] - before["applied"],
            duplicates=self.totals["duplicates"] - before["duplicates"],
            gap=self.last_gap if self.gap is not None else None,
        )

    def run(self, stop_event: threading.Event) -> None:
        """The flusher thread: poll until ``stop_event`` is set.

        Transient failures are retried with backoff forever (the queue keeps the items);
        any other error is logged with its traceback and retried after the same backoff,
        so the thread never dies silently and ``last_error`` says what is wrong.
        """

        def sleep(delay: float) -> None:
            if stop_event.wait(delay):
                raise _Stopped

        failures = iter(self.retry_policy)
        while not stop_event.is_set():
            ended = self._batch_ended.is_set()
            self._batch_ended.clear()
            try:
                report = self._step(partial(self._flusher.poll, ended), "poll", sleep)
            except _Stopped:
                break
            except Exception as exc:
                self.last_error = exc
                log.exception("MRWQ %s: flush failed", self.namespace)
                delay = next(failures, None)
                if stop_event.wait(delay if delay is not None else 4.0):
                    break
                continue
            failures = iter(self.retry_policy)
            # Straight on while a full queue is being worked off; a flush that wrote nothing
            # (an item not there yet) waits like an idle one instead of spinning on memcached.
            busy = (
                report is not None
                and report.result.first_seq is not None
                and report.result.pending >= self.policy.max_length
            )
            if not busy and stop_event.wait(self.poll_interval_s):
                break
        log.info("MRWQ %s: flusher stopped; queue %s", self.namespace, self.queue_length())
