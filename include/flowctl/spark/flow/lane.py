"""A lane: one executor task of one micro-batch (docs/flow-control.md, "Lanes").

It reads exactly the lane's offset ranges, runs the pipeline definition's ``process``
tuple by tuple under a deadline, routes failed records to the From replay topic or the
DLQ (:mod:`flowctl.spark.flow.routing`), appends one outcome item per tuple to the MRWQ
(:class:`~flowctl.core.persistence.MrwqWriter`) and writes its feedback for the planner
(:class:`~flowctl.spark.flow.channels.LaneFeedback`). It yields one status row per tuple
(:data:`STATUS_SCHEMA`).

The steps of :func:`run_lane` are separate functions over a :class:`LaneIO` (Kafka reads
and writes, the memcached store), so a unit test drives them with in-memory fakes.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from flowctl.core.backoff import FlumeBackoff
from flowctl.core.isolation import isolate, verdict
from flowctl.core.persistence import MrwqWriter, mrwq_namespace, mrwq_result
from flowctl.core.replay import Backflow, EnvelopeError, ReplayTopics, Routed, decode_envelope
from flowctl.core.replay import encode_envelope as encode_routed
from flowctl.core.spout_contract import LaneResult, Outcome
from flowctl.core.tuples import TupleRange
from flowctl.pipelines.base import PipelineDefinition, PoisonRecord, Record, combiner_of
from flowctl.spark.flow.channels import LaneFeedback, control_key
from flowctl.spark.flow.deadline import TupleTimeout, run_with_deadline
from flowctl.spark.flow.lane_read import prefetch
from flowctl.spark.flow.plan import FlowPartition, PlanEntry
from flowctl.spark.flow.routing import (
    Routing,
    describe,
    route_isolated,
    route_malformed,
    route_replay_failure,
)
from flowctl.spark.flow.settings import FlowSettings, cached_store, load_config

if TYPE_CHECKING:
    from flowctl.adapters.memcached_store import MemcachedStore

log = logging.getLogger(__name__)

#: Columns of the status rows a lane yields (one per tuple).
STATUS_SCHEMA = (
    "lane int, seq long, tuple_id string, outcome string, records int, rt double, error string"
)
#: The longest a lane waits for a replayed record's not-before time instead of holding it.
MAX_HOLD_WAIT_S = 1.0
#: The status rows' outcome of a warm-up batch's tuples (never fed to the spout).
WARMUP = "warmup"
#: Latency samples a lane reports per acked tuple (evenly spread over its records).
LATENCY_SAMPLES = 8

#: Each tuple's records as the lane's reader (``[flow] reader``) read them, by tuple id, or
#: why the read failed.
Fetched = Mapping[str, "list[Record] | Exception"]
#: One row of :data:`STATUS_SCHEMA`.
StatusRow = tuple[int, int, str, str, int, float, "str | None"]
#: ``process`` over one tuple's records: the definition's JSON-serialisable result.
Process = Callable[[list[Record]], Any]


class LaneIO(Protocol):
    """What a lane reads and writes besides the pipeline's code."""

    #: The memcached store (MRWQ and feedback): ``incr``, ``add``, ``get_many``,
    #: ``set_many``, ``delete_many``, ``get_json``, ``set_json``.
    store: MemcachedStore

    def read(self, entries: Sequence[PlanEntry]) -> Fetched:
        """Every tuple's Kafka records by tuple id, or the exception that failed its read."""
        ...

    def produce(self, topic: str, values: Sequence[bytes]) -> None:
        """Append ``values`` to ``topic`` (replay topics, the DLQ)."""
        ...

    def log_ends(self) -> Mapping[tuple[str, int], int]:
        """The log end per ``(topic, partition)`` that the last :meth:`read`'s fetches
        reported (empty where a reader reports none)."""
        ...


@dataclass
class TupleDone:
    """One tuple's outcome inside a lane, before the MRWQ write and the feedback."""

    entry: PlanEntry
    outcome: Outcome
    records: int
    rt: float
    item: tuple[str, list[tuple[str, Any]]] | None = None
    routed: list[Routed] | None = None
    latencies: tuple[float, ...] = ()
    not_before: float | None = None
    error: str = ""
    trace: str = ""
    mrwq_epoch: str | None = None
    mrwq_seq: int | None = None
    #: Items appended right after ``item``: one-record ``dlq`` rows nested in its range.
    nested: list[tuple[str, list[tuple[str, Any]]]] = field(default_factory=list)

    def result(self) -> LaneResult:
        """The planner's view of this tuple."""
        routed = self.routed or ()
        return LaneResult(
            tuple_id=self.entry.tuple.id,
            outcome=self.outcome,
            xor=self.entry.edge,
            rt=self.rt,
            records=self.records,
            routed_records=len(routed),
            dead_records=sum(1 for x in routed if x.dead),
            latencies=self.latencies,
            not_before=self.not_before,
            mrwq_epoch=self.mrwq_epoch,
            mrwq_seq=self.mrwq_seq,
            error=self.error[:300],
            trace=self.trace,
        )


class KafkaLaneIO:
    """The lane's real I/O: Kafka through the pipeline's reader (:mod:`.lane_read`) and
    :mod:`flowctl.adapters.kafka_log` (producing), memcached."""

    def __init__(self, settings: FlowSettings) -> None:
        self.settings = settings
        self.store = cached_store(settings.memcached)
        self._ends: dict[tuple[str, int], int] = {}

    def read(self, entries: Sequence[PlanEntry]) -> Fetched:
        reader = load_config(self.settings.config_path).flow.reader
        self._ends = {}
        s = self.settings
        return prefetch(entries, s.bootstrap, s.read_timeout_s, reader, ends=self._ends)

    def log_ends(self) -> Mapping[tuple[str, int], int]:
        return self._ends

    def produce(self, topic: str, values: Sequence[bytes]) -> None:
        from flowctl.adapters import kafka_log

        codec = load_config(self.settings.config_path).compression
        kafka_log.produce(self.settings.bootstrap, topic, list(values), compression=codec)


def run_lane(
    settings: FlowSettings, part: FlowPartition, io: LaneIO | None = None
) -> Iterator[StatusRow]:
    """Process one lane's tuples (see the module docstring); yields one status row per tuple.

    Never raises for a tuple: a tuple that cannot even be read or stored is reported
    ``failed`` (the spout dispatches it again to another lane); in local mode a raising
    task would fail the whole query.
    """
    task_started = time.monotonic()  # the budget counts the task's reads too
    config = load_config(settings.config_path)
    flow = config.flow
    definition = config.pipeline_definition()  # DEFINITION, or configure([params])
    io = io if io is not None else KafkaLaneIO(settings)
    if part.warmup:
        yield from warm_up(settings, part, definition, flow.tuple_timeout_s, io)
        return
    backflow = Backflow(
        ReplayTopics(config.name),
        max_attempts=flow.max_attempts,
        backoff=FlumeBackoff(flow.replay_backoff_initial_s, flow.replay_backoff_max_s),
    )

    def process(records: list[Record]) -> Any:
        result = run_with_deadline(definition.process, records, flow.tuple_timeout_s, part.lane)
        json.dumps(result, allow_nan=False)  # it waits in memcached as JSON: fail here if not
        return result

    combine = combiner_of(definition)
    budget = flow.lane_budget_s
    deadline = None if budget is None else task_started + budget
    done = process_tuples(part.entries, io.read(part.entries), process, backflow, combine, deadline)
    route_records(done, io)
    append_outcomes(done, io.store, mrwq_namespace(config.name))
    write_feedback(io.store, settings.ns, part, done, io.log_ends())
    yield from status_rows(part, done)


def process_tuples(
    entries: Sequence[PlanEntry],
    fetched: Fetched,
    process: Process,
    backflow: Backflow,
    combine: Callable[[Sequence[Any]], Any],
    deadline: float | None = None,
) -> list[TupleDone]:
    """The tuple-processing step: each tuple's records through ``process``, in plan order.

    ``combine`` merges the results of a failing tuple's good parts (poison isolation).

    Past ``deadline`` (``time.monotonic()``: the task's start plus the lane's time budget)
    the lane starts no new tuple: the rest
    are ``returned`` unstarted, and the spout dispatches them again to other lanes, so a
    lane that suddenly slows holds the batch for about its budget, not for its whole
    window (docs/flow-control.md, "Lane time budget").

    A replay topic partition whose head record must wait longer than
    :data:`MAX_HOLD_WAIT_S` is held: its later records in this batch are held too (their
    order is kept).
    """
    started = time.monotonic()
    done: list[TupleDone] = []
    held: set[tuple[str, int]] = set()
    for entry in entries:
        t = entry.tuple
        raw = fetched[t.id]
        if deadline is not None and time.monotonic() > deadline:
            done.append(TupleDone(entry, Outcome.RETURNED, 0, time.monotonic() - started))
        elif isinstance(raw, Exception):
            done.append(TupleDone(entry, Outcome.FAILED, 0, 0.0, error=f"read failed: {raw}"))
        elif not entry.replay:
            done.append(eden_tuple(entry, raw, process, backflow, started, combine))
        elif (t.topic, t.partition) in held:
            done.append(TupleDone(entry, Outcome.HELD, 0, 0.0, not_before=time.time()))
        elif not raw:  # no record at that offset (a hole in the log): nothing to replay
            done.append(TupleDone(entry, Outcome.ACKED, 0, time.monotonic() - started))
        else:
            done.append(replay_record(entry, raw[0], process, backflow, started, held))
    return done


def _sample_latencies(records: Sequence[Record], now_epoch: float) -> tuple[float, ...]:
    stamps = [r.timestamp_ms for r in records if r.timestamp_ms is not None and r.timestamp_ms > 0]
    if not stamps:
        return ()
    step = max(1, len(stamps) // LATENCY_SAMPLES)
    return tuple(max(0.0, now_epoch - ms / 1000.0) for ms in stamps[::step][:LATENCY_SAMPLES])


def _failed(
    entry: PlanEntry, item_id: str, routing: Routing, n: int, started: float, *, replay: bool
) -> TupleDone:
    return TupleDone(
        entry,
        routing.outcome,
        n,
        time.monotonic() - started,
        item=(item_id, [mrwq_result(routing.key, {"error": routing.error[:300]}, replay=replay)]),
        routed=routing.routed,
        error=routing.error,
    )


def eden_tuple(
    entry: PlanEntry,
    records: list[Record],
    process: Process,
    backflow: Backflow,
    started: float,
    combine: Callable[[Sequence[Any]], Any],
) -> TupleDone:
    """One Eden tuple, its poison records isolated (:mod:`flowctl.core.isolation`): the
    good records' result as an ``applied`` item, proven poison to the DLQ under nested
    one-record ``dlq`` items, the records of a transient failure replayed (SPEC D)."""
    t = entry.tuple
    found = isolate(
        records, process, combine=combine, is_poison=lambda e: isinstance(e, PoisonRecord)
    )
    v = verdict(
        t, [r.offset for r in records], found, is_timeout=lambda e: isinstance(e, TupleTimeout)
    )
    routed = route_isolated(
        v, records, topic=t.topic, from_topic=entry.from_topic, backflow=backflow, now=time.time()
    )
    items = [
        (it.range.id, [mrwq_result(it.outcome, it.value, replay=it.replay, isolated=it.isolated)])
        for it in v.items
    ]
    outcome = v.outcome
    if outcome is Outcome.REPLAYED and routed and all(x.dead for x in routed):
        outcome = Outcome.DLQ  # max_attempts reached at once: the tuple's row says dlq
        items[0] = (t.id, [mrwq_result("dlq", {"error": v.error[:300]})])
    acked = outcome is Outcome.ACKED
    good = [records[i] for i in found.good] if acked else []
    return TupleDone(
        entry,
        outcome,
        v.good if acked else len(records),
        time.monotonic() - started,
        item=items[0],
        nested=items[1:],
        routed=routed or None,
        latencies=_sample_latencies(good, time.time()),
        error=v.error,
        trace=v.trace,
    )


def replay_record(
    entry: PlanEntry,
    raw: Record,
    process: Process,
    backflow: Backflow,
    started: float,
    held: set[tuple[str, int]],
) -> TupleDone:
    """One record of the To topic: decode its envelope, wait out (or hold for) its backoff,
    process it under its original coordinates."""
    t = entry.tuple
    now = time.time()
    try:
        env = decode_envelope(raw.value or b"")
    except EnvelopeError as exc:
        routing = route_malformed(
            raw.value or b"",
            str(exc),
            topic=t.topic,
            partition=t.partition,
            offset=t.start,
            backflow=backflow,
            now=now,
        )
        return TupleDone(
            entry,
            Outcome.DLQ,
            1,
            time.monotonic() - started,
            routed=routing.routed,
            error=routing.error,
        )
    wait = env.not_before - now
    if wait > MAX_HOLD_WAIT_S:
        held.add((t.topic, t.partition))
        return TupleDone(entry, Outcome.HELD, 0, 0.0, not_before=env.not_before)
    if wait > 0:
        time.sleep(wait)
    original = TupleRange(env.topic, env.partition, env.offset, env.offset + 1)
    # the original arrival time: a re-produced record carries a new Kafka timestamp
    record = Record(
        env.topic, env.partition, env.offset, env.timestamp_ms, env.payload, env.key, env.headers
    )
    try:
        result = process([record])
    except Exception as exc:
        routing = route_replay_failure(
            exc, env, from_topic=entry.from_topic, backflow=backflow, now=time.time()
        )
        return _failed(entry, original.id, routing, 1, started, replay=True)
    return TupleDone(
        entry,
        Outcome.ACKED,
        1,
        time.monotonic() - started,
        item=(original.id, [mrwq_result("applied", result, replay=True)]),
    )


def route_records(done: Sequence[TupleDone], io: LaneIO) -> None:
    """Produce the failed records to their topics first: an outcome item must never claim
    records not yet routed. A failed produce fails the tuples that routed records."""
    by_topic: dict[str, list[bytes]] = {}
    for d in done:
        for routed in d.routed or ():
            by_topic.setdefault(routed.topic, []).append(encode_routed(routed.envelope))
    try:
        for topic, values in by_topic.items():
            io.produce(topic, values)
    except Exception as exc:
        for d in done:
            if d.routed:
                d.outcome, d.item, d.error = Outcome.FAILED, None, f"replay produce failed: {exc}"
                d.nested = []


def append_outcomes(done: Sequence[TupleDone], store: MemcachedStore, ns: str) -> None:
    """The MRWQ: one outcome item per tuple, one ``incr`` and one ``set_many`` for the lane;
    each tuple learns its queue epoch and sequence number (the planner's durable ack)."""
    items = [d for d in done if d.item is not None]
    if not items:
        return
    flat = [(d, item) for d in items for item in (d.item, *d.nested) if item is not None]
    try:
        writer = MrwqWriter(store, ns)
        appended = writer.append_many([item for _, item in flat])
        epoch = writer.epoch
    except Exception as exc:
        for d in items:
            d.outcome, d.error = Outcome.FAILED, f"MRWQ write failed: {exc}"
        return
    for (d, item), seq in zip(flat, appended, strict=True):
        if item is d.item:  # the tuple's own item; nested ones follow it
            d.mrwq_epoch, d.mrwq_seq = epoch, seq


def write_feedback(
    store: MemcachedStore,
    ns: str,
    part: FlowPartition,
    done: Sequence[TupleDone],
    ends: Mapping[tuple[str, int], int] | None = None,
) -> None:
    """The lane's feedback of batch ``part.seq`` for the planner (best effort: without it
    the spout times these tuples out and dispatches them again), with the log ``ends``
    its reads saw."""
    from flowctl.adapters.memcached_store import LaneFeedback as FeedbackStore

    seen = tuple((t, p, n) for (t, p), n in sorted((ends or {}).items()))
    feedback = LaneFeedback(tuple(d.result() for d in done), seen)
    try:
        FeedbackStore(store, ns).put(part.seq, part.lane, feedback.encode())
    except Exception as exc:
        log.warning("lane %d: feedback of batch %d not stored: %s", part.lane, part.seq, exc)


def status_rows(part: FlowPartition, done: Sequence[TupleDone]) -> Iterator[StatusRow]:
    """One row of :data:`STATUS_SCHEMA` per tuple."""
    for d in done:
        yield (
            part.lane,
            part.seq,
            d.entry.tuple.id,
            str(d.outcome),
            d.records,
            float(d.rt),
            d.error[:300] or None,
        )


def warm_up(
    settings: FlowSettings,
    part: FlowPartition,
    definition: PipelineDefinition,
    timeout_s: float,
    io: LaneIO,
) -> Iterator[StatusRow]:
    """A warm-up tuple: read its records, run ``process``, discard the results.

    Touches what a real batch touches (Kafka, the pipeline code, memcached) and nothing
    durable: no MRWQ item, no replay, no feedback. Errors are reported, never raised.
    """
    started = time.monotonic()
    entry = part.entries[0]
    error = ""
    records: list[Record] = []
    try:
        io.store.get_json(control_key(settings.ns))
        raw = io.read(part.entries)[entry.tuple.id]
        if isinstance(raw, Exception):
            raise raw
        records = raw
        run_with_deadline(definition.process, records, timeout_s, part.lane)
    except Exception as exc:  # a poison record or a slow read: the warm-up did its job
        error = describe(exc)
    yield (
        part.lane,
        part.seq,
        entry.tuple.id,
        WARMUP,
        len(records),
        time.monotonic() - started,
        error[:300] or None,
    )
