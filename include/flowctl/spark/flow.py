"""The flow-controlled mode of ``flowctl_kafka``: the spout's planner and the lanes.

docs/flow-control.md is the contract; this module is its Spark side.

Planner (Spark's long-lived ``python_streaming_source_runner``; :class:`FlowPlanner`):
``latestOffset`` collects the lanes' feedback of the previous micro-batch from memcached,
applies it to the :class:`~flowctl.core.spout.Spout` (windows, XOR acker, ledger, replay
state machine), reads what the database says is durable, steps the backpressure chain
and admits this batch's tuples. The whole batch plan (which tuple, which lane, its acker
edge, its From topic) is the end offset Spark stores, so ``partitions`` and a re-run of
the batch after a restart read exactly the same plan.

Lanes (executors; :func:`run_lane`): read exactly the lane's offset ranges, run the
pipeline definition's ``process`` tuple by tuple under a deadline, append the outcomes
to the MRWQ (:class:`~flowctl.core.persistence.MrwqWriter` over
:class:`~flowctl.adapters.memcached_store.MemcachedStore`), route failed records to the
From replay topic or the DLQ, and write their feedback for the planner.

Channels through memcached (nothing in them is needed for correctness, so losing them in
a memcached restart only costs speed; all keys carry the topology id):

- ``flow.<topology>:fb:<seq>:<lane>`` lane -> planner: per-tuple outcomes of batch ``seq``
  (:class:`~flowctl.adapters.memcached_store.LaneFeedback`), read one batch behind;
- ``flow.<topology>:ctl`` driver -> planner: ``{"admit": bool, "rebuild": n}``; the
  driver rewrites it every poll, so it survives a memcached restart; a new ``rebuild``
  number makes the planner rebuild its spout from the database (gap repair, activate);
- ``flow.<topology>:state`` planner -> driver: in flight, buffered, admitting,
  backpressure levels, lane windows, cumulative counters;
- ``flow.<topology>:rows`` planner -> driver: the closed metrics windows; only the driver
  writes them to ``metrics_windows``.

Durable state of the replay queues lives in the database's ``offsets`` table: the read
position of each replay topic partition (as for Eden), and the From/To pointer as the
swap count in the row of the pseudo topic ``<pipeline>.replay.swaps`` (even: From is
``replay.a``).
"""

from __future__ import annotations

import contextvars
import importlib
import json
import logging
import sys
import time
import types
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from flowctl.core.backpressure import BackpressureChain, StageSpec
from flowctl.core.clock import MonotonicClock
from flowctl.core.metrics import LaneGauge, MetricsWindow
from flowctl.core.replay import (
    Backflow,
    Envelope,
    EnvelopeError,
    ReplaySnapshot,
    ReplayTopics,
    Routed,
    decode_envelope,
    encode_envelope,
)
from flowctl.core.spout import Dispatch, LaneResult, Outcome, Spout, SpoutConfig
from flowctl.core.tuples import TopicPartition, TupleRange

log = logging.getLogger(__name__)

#: Version of the offset JSON (the batch plan) this module writes.
PLAN_VERSION = 1
#: Columns of the status rows a lane yields (one per tuple).
STATUS_SCHEMA = (
    "lane int, seq long, tuple_id string, outcome string, records int, rt double, error string"
)
#: The longest a lane waits for a replayed record's not-before time instead of holding it.
MAX_HOLD_WAIT_S = 1.0
#: Seconds between log lines about windows that only grew (or backpressure levels that
#: only moved, without a stage entering or leaving backpressure).
WINDOW_LOG_EVERY_S = 5.0
#: Seconds between warm-up batches of a standby topology (before its first activation).
#: A warm-up batch reads one tuple's worth of the newest Eden records per lane and runs
#: the pipeline's ``process`` on them, discarding the results: Spark's Python workers,
#: the lanes' imports and connections are then warm when ``activate`` comes, so the
#: first real batch is not a 4-7 s first batch. Spark ends a Python worker idle for a
#: minute, hence well under that.
WARMUP_EVERY_S = 20.0
#: The status rows' outcome of a warm-up batch's tuples (never fed to the spout).
WARMUP = "warmup"
#: Latency samples a lane reports per acked tuple (evenly spread over its records).
LATENCY_SAMPLES = 8
_CACHE_MODULE = "flowctl._flow_lane_cache"

_current_lane: contextvars.ContextVar[int | None] = contextvars.ContextVar(
    "flowctl_lane", default=None
)


def current_lane() -> int | None:
    """The lane whose tuple is being processed (inside ``process``), else ``None``.

    For diagnostics and for test definitions that make one lane slow on purpose.
    """
    return _current_lane.get()


def namespace(topology_id: str) -> str:
    """The memcached namespace of a topology's control channels."""
    return f"flow.{topology_id}"


def swaps_topic(pipeline: str) -> str:
    """The pseudo topic whose ``offsets`` row holds the replay pointer (swap count)."""
    return f"{pipeline}.replay.swaps"


# --- settings ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FlowSettings:
    """Everything the planner and the lanes need, built from the source options."""

    bootstrap: str
    topic: str
    pipeline: str
    database_url: str
    memcached: str
    topology_id: str
    lanes: int
    config_path: str
    max_rows: int | None
    read_timeout_s: float
    standby: bool

    @property
    def ns(self) -> str:
        return namespace(self.topology_id)


def load_config(path: str) -> Any:
    """The pipeline config (cached per process: lanes call this per task)."""
    cache = _worker_cache()
    config = cache.configs.get(path)
    if config is None:
        from flowctl.pipelines.config import load_pipeline_config

        config = load_pipeline_config(path)
        cache.configs[path] = config
    return config


def spout_config(settings: FlowSettings, config: Any) -> SpoutConfig:
    f = config.flow
    return SpoutConfig(
        pipeline=config.name,
        lanes=settings.lanes,
        tuple_size=config.tuple_size,
        w_min=f.w_min,
        w_max=f.w_max,
        w_init=config.initial_window(settings.lanes),
        rtt_threshold_s=f.rtt_threshold_s,
        rtt_min_threshold_s=f.rtt_min_threshold_s,
        slow_decrease=f.slow_decrease,
        policy=f.dispatch,
        tuple_timeout_s=f.ack_timeout_s,
        linger_s=f.linger_s,
    )


# --- the plan in Spark's offset log ---------------------------------------------------------


def initial_offset(topic: str) -> dict[str, Any]:
    return {"v": PLAN_VERSION, "topic": topic, "seq": 0, "plan": []}


def encode_plan(topic: str, seq: int, dispatches: Sequence[Dispatch], pipeline: str) -> dict:
    topics = ReplayTopics(pipeline)
    rows = [
        [
            d.lane,
            d.tuple.topic,
            d.tuple.partition,
            d.tuple.start,
            d.tuple.end,
            d.edge,
            1 if d.replay else 0,
            0 if d.from_topic == topics.replay_a else 1,
        ]
        for d in dispatches
    ]
    return {"v": PLAN_VERSION, "topic": topic, "seq": seq, "plan": rows}


@dataclass(frozen=True)
class PlanEntry:
    """One tuple of a lane's share of a batch (decoded from the offset JSON)."""

    tuple: TupleRange
    edge: int
    replay: bool
    from_topic: str


class FlowPartition(InputPartition):
    """One lane's share of one micro-batch: its tuples, in dispatch order."""

    def __init__(
        self, lane: int, seq: int, entries: tuple[PlanEntry, ...], *, warmup: bool = False
    ) -> None:
        super().__init__(lane)
        self.lane = lane
        self.seq = seq
        self.entries = entries
        self.warmup = warmup

    def __repr__(self) -> str:
        kind = ", warm-up" if self.warmup else ""
        return f"FlowPartition(lane={self.lane}, seq={self.seq}, tuples={len(self.entries)}{kind})"


def encode_warmup(topic: str, seq: int, number: int, ranges: Sequence[TupleRange]) -> dict:
    """A warm-up batch's offset: ``ranges[i]`` is read by lane ``i``; nothing is admitted.

    ``number`` makes each warm-up a new offset (Spark runs a batch only when the end
    offset differs from the start); ``seq`` stays the last admitted batch's.
    """
    rows = [[lane, r.topic, r.partition, r.start, r.end] for lane, r in enumerate(ranges)]
    return {
        "v": PLAN_VERSION,
        "topic": topic,
        "seq": seq,
        "plan": [],
        "warmup": number,
        "ranges": rows,
    }


def decode_plan(offset: Mapping[str, Any], topic: str, pipeline: str) -> list[FlowPartition]:
    """The batch's partitions, one per lane with tuples; refuses a foreign offset."""
    if offset.get("v") != PLAN_VERSION or offset.get("topic") != topic:
        raise ValueError(
            f"offset {str(dict(offset))[:200]!r} is not a flow plan of topic {topic!r} "
            f"(a checkpoint of another source mode or topic?)"
        )
    topics = ReplayTopics(pipeline)
    seq = int(offset["seq"])
    if offset.get("warmup"):
        return [
            FlowPartition(
                int(lane),
                seq,
                (PlanEntry(TupleRange(t, int(p), int(s), int(e)), 0, False, topics.replay_a),),
                warmup=True,
            )
            for lane, t, p, s, e in offset["ranges"]
        ]
    lanes: dict[int, list[PlanEntry]] = {}
    for row in offset["plan"]:
        lane, t, p, start, end, edge, replay, from_idx = row
        lanes.setdefault(int(lane), []).append(
            PlanEntry(
                TupleRange(t, int(p), int(start), int(end)),
                int(edge),
                bool(replay),
                topics.replay_a if from_idx == 0 else topics.replay_b,
            )
        )
    return [FlowPartition(lane, seq, tuple(es)) for lane, es in sorted(lanes.items())]


# --- planner --------------------------------------------------------------------------------


def _ensure_logging() -> None:
    """Spark's source runner configures no logging: without a handler the planner's story
    (window changes, backpressure, replays, rebuilds) would be lost. Its stderr reaches
    the driver's log (the Airflow task log)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(
            logging.Formatter("%(asctime)s %(levelname)s %(name)s [planner]: %(message)s")
        )
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        for noisy in ("kafka", "py4j"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


class FlowPlanner:
    """The spout's process side: owns the :class:`Spout`, talks to Kafka, memcached, the DB.

    Lives on the stream reader in the planner process; never pickled to tasks.
    """

    def __init__(self, settings: FlowSettings) -> None:
        _ensure_logging()
        self.settings = settings
        self.config = load_config(settings.config_path)
        self.flow = self.config.flow
        self.clock = MonotonicClock()
        self.topics = ReplayTopics(self.config.name)
        self._store: Any = None
        self._consumer: Any = None
        self.spout: Spout | None = None
        self.seq = 0
        self.pending: dict[int, tuple[set[int], float]] = {}
        self.admit = not settings.standby
        self.activated = self.admit
        self.warmups = 0
        self._last_warmup = -1e9
        self.rebuild_seen: int | None = None
        self.metrics = MetricsWindow(
            settings.topology_id, self.clock, window_s=self.flow.metrics_window_s
        )
        self.rows: list[dict[str, Any]] = []
        self.row_no = 0
        self.chain = self._new_chain()
        self._last_plan_at = self.clock.now()
        self._persisted_replay: ReplaySnapshot | None = None
        self._last_warning: dict[str, float] = {}
        self._last_level_log = -1e9
        self._repeat = 0
        self._arrival_mark: tuple[float, int] | None = None
        self._last_windows: tuple[int, ...] = ()
        self._last_states: tuple[str, ...] = ()
        self._last_window_log = -1e9
        self._last_levels: dict[str, int] = {}
        self._latest: dict[TopicPartition, int] = {}

    def _new_chain(self) -> BackpressureChain:
        f = self.flow
        return BackpressureChain(
            [
                StageSpec("source", 1, f.admission_rate),
                StageSpec("process", f.process_queue_capacity, f.admission_rate),
                StageSpec(
                    "persist", f.persist_queue_capacity, f.flush_max_length / f.flush_update_time_s
                ),
            ],
            load_factor=f.load_factor,
            factor=f.backpressure_factor,
            clock=self.clock,
        )

    # -- services --

    def store(self) -> Any:
        from flowctl.adapters.memcached_store import MemcachedStore

        if self._store is None:
            self._store = MemcachedStore(self.settings.memcached)
        return self._store

    def consumer(self) -> Any:
        from flowctl.adapters import kafka_log

        if self._consumer is None:
            self._consumer = kafka_log.new_consumer(self.settings.bootstrap)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception:
                log.debug("closing the planner consumer failed", exc_info=True)
            self._consumer = None

    def _warn(self, what: str, exc: BaseException, every_s: float = 10.0) -> None:
        """Log a best-effort failure at most every ``every_s`` per kind (readable logs)."""
        now = self.clock.now()
        if now - self._last_warning.get(what, -1e9) >= every_s:
            self._last_warning[what] = now
            log.warning("flow %s: %s failed (will retry): %s", self.settings.topology_id, what, exc)

    # -- start and rebuild --

    def build_spout(self) -> Spout:
        """A spout from the durable state: checkpoint, gaps (holes of applied_ranges),
        everything beyond the last durable range cut again, replay pointer and positions."""
        from flowctl.adapters import applied

        db, pipeline, eden = self.settings.database_url, self.config.name, self.settings.topic
        checkpoints = {tp: n for tp, n in applied.read_checkpoints(db, pipeline, eden).items()}
        positions: dict[TopicPartition, int] = dict(checkpoints)
        gaps: list[TupleRange] = []
        for p in applied.replay_plan(db, pipeline):
            if p.topic != eden:
                continue
            positions[p.topic_partition] = max(p.applied_end, p.checkpoint)
            gaps.extend(TupleRange(p.topic, p.partition, s, e) for s, e in p.holes)
        replay = self._read_replay_snapshot()
        spout = Spout(
            spout_config(self.settings, self.config),
            self.clock,
            positions=positions,
            gaps=gaps,
            checkpoints=checkpoints,
            replay=replay,
        )
        self._persisted_replay = replay
        self.pending.clear()
        log.info(
            "flow %s: spout built from the database: checkpoint %s, cut from %s, %d gap "
            "range(s) first, replay From=%s positions %s",
            self.settings.topology_id,
            {tp.partition: n for tp, n in checkpoints.items()},
            {tp.partition: n for tp, n in positions.items()},
            len(gaps),
            spout.replay.from_topic,
            replay.positions if replay else (),
        )
        return spout

    def _read_replay_snapshot(self) -> ReplaySnapshot | None:
        from flowctl.adapters import applied

        rows = applied.read_checkpoints(self.settings.database_url, self.config.name)
        swaps = rows.get(TopicPartition(swaps_topic(self.config.name), 0))
        positions = tuple(
            sorted(
                (tp.topic, tp.partition, n)
                for tp, n in rows.items()
                if tp.topic in (self.topics.replay_a, self.topics.replay_b)
            )
        )
        if swaps is None and not positions:
            return None
        swaps = swaps or 0
        from_topic = self.topics.replay_a if swaps % 2 == 0 else self.topics.replay_b
        return ReplaySnapshot(self.config.name, from_topic, positions, swaps)

    def _persist_replay(self) -> None:
        """Store the replay pointer and committed positions when they changed (best effort)."""
        from flowctl.adapters import schema
        from flowctl.adapters.db import engine_for

        assert self.spout is not None
        snap = self.spout.replay.snapshot()
        if snap == self._persisted_replay:
            return
        rows = [(t, p, o) for t, p, o in snap.positions]
        rows.append((swaps_topic(self.config.name), 0, snap.swaps))
        engine = engine_for(self.settings.database_url)
        now = schema.utcnow()
        with engine.begin() as conn:
            stmt = schema.dialect_insert(conn)(schema.offsets).values(
                [
                    {
                        "pipeline": self.config.name,
                        "topic": t,
                        "partition": p,
                        "next_offset": o,
                        "updated_at": now,
                    }
                    for t, p, o in rows
                ]
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["pipeline", "topic", "partition"],
                    set_={"next_offset": stmt.excluded.next_offset, "updated_at": now},
                    where=schema.offsets.c.next_offset <= stmt.excluded.next_offset,
                )
            )
        self._persisted_replay = snap

    # -- the per-batch work --

    def initial_offset(self) -> dict[str, Any]:
        if self.spout is None:
            self.spout = self.build_spout()
        return initial_offset(self.settings.topic)

    def latest_offset(self, start: Mapping[str, Any]) -> dict[str, Any]:
        """Feedback, durability, backpressure, then admission; returns the batch's plan
        (or ``start`` itself when nothing is admitted: Spark then runs no batch)."""
        from flowctl.adapters import kafka_log

        self.seq = max(self.seq, int(start.get("seq", 0)))
        self._read_control()
        if self.spout is None:
            self.spout = self.build_spout()
        spout = self.spout
        self._collect_feedback()
        spout.expire()
        self._durability()
        latest = kafka_log.latest_offsets(self.consumer(), self.settings.topic)
        self._latest = {TopicPartition(self.settings.topic, p): n for p, n in latest.items()}
        persist_len = self._mrwq_length()
        levels = self._backpressure(persist_len)
        dispatches: list[Dispatch] = []
        if self.admit:
            now = self.clock.now()
            elapsed = min(max(now - self._last_plan_at, 0.1), 10.0)
            rates = self.chain.rates()
            budget = max(1, int(min(rates["source"], rates["process"]) * elapsed))
            if self.settings.max_rows is not None:
                budget = min(budget, max(1, self.settings.max_rows // self.config.tuple_size))
            replay_ends = self._replay_ends()
            dispatches = spout.plan(self._latest, replay_ends, time.time(), budget=budget)
            self._last_plan_at = now
        self._record_metrics(dispatches, persist_len, levels)
        self._publish_state(persist_len, levels)
        if not dispatches:
            warmup = self._warmup_plan() if not self.activated else None
            return dict(start) if warmup is None else warmup
        self.seq += 1
        self.pending[self.seq] = ({d.lane for d in dispatches}, self.clock.now())
        self._log_windows(len(dispatches))
        return encode_plan(self.settings.topic, self.seq, dispatches, self.config.name)

    def _warmup_plan(self) -> dict[str, Any] | None:
        """A standby topology's warm-up batch, every ``WARMUP_EVERY_S`` (``None``: not due,
        or the log is empty: nothing to warm up with)."""
        now = self.clock.now()
        if now - self._last_warmup < WARMUP_EVERY_S:
            return None
        filled = sorted(tp for tp, end in self._latest.items() if end > 0)
        if not filled:
            return None
        self._last_warmup = now
        self.warmups += 1
        size = self.config.tuple_size
        ranges = []
        for lane in range(self.settings.lanes):
            tp = filled[lane % len(filled)]
            end = self._latest[tp]
            ranges.append(TupleRange(tp.topic, tp.partition, max(0, end - size), end))
        log.info(
            "flow %s: standby warm-up %d: %d lane(s) read and process %d record(s) each, "
            "results discarded",
            self.settings.topology_id,
            self.warmups,
            len(ranges),
            size,
        )
        return encode_warmup(self.settings.topic, self.seq, self.warmups, ranges)

    def _read_control(self) -> None:
        try:
            ctl = self.store().get_json(f"{self.settings.ns}:ctl")
        except Exception as exc:
            self._warn("reading the control key", exc)
            return
        if not isinstance(ctl, dict):
            return
        admit = bool(ctl.get("admit", self.admit))
        if admit != self.admit:
            log.info("flow %s: admission %s", self.settings.topology_id, "on" if admit else "off")
            self.admit = admit
            self.activated = self.activated or admit
        rebuild = ctl.get("rebuild")
        if rebuild is not None and rebuild != self.rebuild_seen:
            if self.rebuild_seen is not None and self.spout is not None:
                log.warning(
                    "flow %s: rebuild %s requested (gap repair or activation): dispatching "
                    "everything not durable again",
                    self.settings.topology_id,
                    rebuild,
                )
                try:
                    self.spout = self.build_spout()
                except Exception as exc:  # the database is away: keep going, retry next batch
                    self._warn("rebuilding the spout from the database", exc, every_s=0)
                    return
            self.rebuild_seen = rebuild

    def _collect_feedback(self) -> None:
        from flowctl.adapters.memcached_store import LaneFeedback

        assert self.spout is not None
        try:
            feedback = LaneFeedback(self.store(), self.settings.ns)
            for seq in sorted(self.pending):
                lanes, sent_at = self.pending[seq]
                got = feedback.collect(seq, lanes)
                for lane, stats in got.items():
                    results = [_result_from_json(r) for r in stats.get("results", [])]
                    summary = self.spout.on_lane_results(lane, results)
                    for error in summary.errors[:3]:
                        log.warning("flow lane %d: %s", lane, error)
                    if summary.requeued:
                        log.warning(
                            "flow lane %d: %d tuple(s) without an outcome, dispatched again "
                            "to another lane",
                            lane,
                            summary.requeued,
                        )
                if got:
                    feedback.discard(seq, got)
                    lanes -= set(got)
                if not lanes or self.clock.now() - sent_at > self.flow.ack_timeout_s:
                    del self.pending[seq]
        except Exception as exc:
            self._warn("collecting lane feedback", exc)

    def _durability(self) -> None:
        """What the database says is durable: Eden checkpoint, flusher position."""
        import sqlalchemy as sa

        from flowctl.adapters import applied, schema
        from flowctl.adapters.db import engine_for
        from flowctl.adapters.mrwq_flusher import default_namespace

        assert self.spout is not None
        s = schema.mrwq_state
        try:
            # One attempt on our own connection: a database that is away must cost the
            # batch nothing (the flusher retries with backoff; we read again next batch).
            with engine_for(self.settings.database_url).connect() as conn:
                checkpoints = applied.read_checkpoints(conn, self.config.name, self.settings.topic)
                row = conn.execute(
                    sa.select(s.c.epoch, s.c.head).where(
                        s.c.namespace == default_namespace(self.config.name)
                    )
                ).first()
            self.spout.durable(checkpoints)
            if row is not None:
                self.spout.confirm_replays(row.epoch, int(row.head))
            self._persist_replay()
        except Exception as exc:
            self._warn("reading durable state from the database", exc)

    def _mrwq_length(self) -> int:
        from flowctl.adapters.mrwq_flusher import default_namespace

        ns = default_namespace(self.config.name)
        try:
            store = self.store()
            tail = store.incr(f"{ns}:tail", 0)
            raw = store.get_many([f"{ns}:head"]).get(f"{ns}:head")
            if tail is None or raw is None:
                return 0
            return max(0, tail - int(raw) + 1)
        except Exception as exc:
            self._warn("reading the MRWQ length", exc)
            return 0

    def _backpressure(self, persist_len: int) -> dict[str, int]:
        assert self.spout is not None
        self.chain.step({"process": self.spout.outstanding, "persist": persist_len})
        levels = self.chain.levels()
        # Readable: at once when a stage enters or leaves backpressure, else every 5 s.
        edge = {k for k, v in levels.items() if v} != {k for k, v in self._last_levels.items() if v}
        due = self.clock.now() - self._last_level_log >= WINDOW_LOG_EVERY_S
        if levels != self._last_levels and (edge or due):
            self._last_level_log = self.clock.now()
            log.info(
                "flow %s: backpressure levels %s (MRWQ %d items, %d tuples admitted and not "
                "processed); rates %s",
                self.settings.topology_id,
                levels,
                persist_len,
                self.spout.outstanding,
                {k: round(v, 1) for k, v in self.chain.rates().items()},
            )
            self._last_levels = levels
        return levels

    def _replay_ends(self) -> dict[tuple[str, int], int]:
        from flowctl.adapters import kafka_log

        out: dict[tuple[str, int], int] = {}
        for topic in (self.topics.replay_a, self.topics.replay_b):
            try:
                ends = kafka_log.latest_offsets(self.consumer(), topic)
            except Exception as exc:
                self._warn(f"reading the end offsets of {topic}", exc)
                return {}
            out.update({(topic, p): n for p, n in ends.items()})
        return out

    def _record_metrics(
        self, dispatches: Sequence[Dispatch], persist_len: int, levels: Mapping[str, int]
    ) -> None:
        assert self.spout is not None
        spout = self.spout
        c = spout.counters
        prev = getattr(self, "_prev_counters", {})
        if getattr(self, "_counted_spout", None) is not spout:  # a rebuilt spout counts from 0
            prev = {}
            self._counted_spout = spout
        delta = {k: c[k] - prev.get(k, 0) for k in c}
        self._prev_counters = dict(c)
        m = self.metrics
        m.admitted(delta["admitted"])
        m.acked(delta["acked"], delta["records"], spout.latencies)
        spout.latencies.clear()
        m.failed(delta["failed"])
        m.timed_out(delta["timed_out"])
        m.replayed(delta["replayed"])
        m.dlq(delta["dlq"])
        m.set_backlog(spout.backlog(self._latest))
        m.set_backpressure(sum(levels.values()))
        m.set_lanes(LaneGauge(w.lane, w.size, str(w.state), w.in_flight) for w in spout.windows)
        self._repeat += max(0, delta.get("repeat_failures", 0))
        offset = time.time() - self.clock.now()
        gauges = {g["lane"]: g for g in spout.lane_gauges()}
        rolled = m.roll()
        if rolled:
            figures = self._window_figures()
        for row in rolled:
            self.row_no += 1
            data = row.to_dict()
            data["n"] = self.row_no
            data["window_start"] = row.window_start + offset
            data["window_end"] = row.window_end + offset
            data["lanes"] = [gauges.get(g["lane"], g) for g in data["lanes"]]
            data["levels"] = dict(levels)
            data["mrwq"] = persist_len
            data.update(figures)
            figures["repeat_failures"] = 0  # counted once, in the first window rolled now
            self.rows.append(data)
        self.rows = self.rows[-50:]

    def _window_figures(self) -> dict[str, Any]:
        """Figures the adaptive autoscaler reads from a metrics row (``lanes`` JSON):
        replayed records failing again (poison, not load), how fast Eden grows, and how
        fast one lane processes records (its tuples/s by Little's law x tuple size)."""
        assert self.spout is not None
        now = self.clock.now()
        total = sum(self._latest.values())
        arrival = None
        if self._arrival_mark is not None and now > self._arrival_mark[0]:
            arrival = max(0.0, (total - self._arrival_mark[1]) / (now - self._arrival_mark[0]))
        self._arrival_mark = (now, total)
        rates = [g["rate"] for g in self.spout.lane_gauges() if g["rate"] is not None]
        lane_rate = sum(rates) / len(rates) * self.config.tuple_size if rates else None
        figures = {
            "repeat_failures": self._repeat,
            "arrival_rate": None if arrival is None else round(arrival, 3),
            "lane_rate": None if lane_rate is None else round(lane_rate, 3),
        }
        self._repeat = 0
        return figures

    def _publish_state(self, persist_len: int, levels: Mapping[str, int]) -> None:
        assert self.spout is not None
        state = {
            "at": time.time(),
            "admit": self.admit,
            "rebuild": self.rebuild_seen,
            "in_flight": self.spout.in_flight,
            "buffered": self.spout.buffered,
            "pending_batches": len(self.pending),
            "mrwq": persist_len,
            "levels": dict(levels),
            "lanes": self.spout.lane_gauges(),
            "counters": dict(self.spout.counters),
            "at_risk": self.spout.at_risk(),
            "seq": self.seq,
            "warmups": self.warmups,
            "log_empty": not any(self._latest.values()),
        }
        try:
            store = self.store()
            store.set_json(f"{self.settings.ns}:state", state, expire_s=3600)
            if self.rows:
                store.set_json(f"{self.settings.ns}:rows", self.rows, expire_s=3600)
        except Exception as exc:
            self._warn("publishing the spout state", exc)

    def _log_windows(self, dispatched: int) -> None:
        """Window changes at a readable rate: at once when a window shrinks or a lane's
        state changes (congestion is news), growth at most every ``WINDOW_LOG_EVERY_S``."""
        assert self.spout is not None
        sizes = tuple(w.size for w in self.spout.windows)
        states = tuple(str(w.state) for w in self.spout.windows)
        shrank = len(sizes) == len(self._last_windows) and any(
            new < old for new, old in zip(sizes, self._last_windows, strict=True)
        )
        now = self.clock.now()
        due = now - self._last_window_log >= WINDOW_LOG_EVERY_S
        if sizes != self._last_windows and (shrank or states != self._last_states or due):
            self._last_window_log = now
            self._last_states = states
            log.info(
                "flow %s: batch %d: %d tuple(s) dispatched; windows %s -> %s, states %s",
                self.settings.topology_id,
                self.seq,
                dispatched,
                list(self._last_windows),
                list(sizes),
                [str(w.state) for w in self.spout.windows],
            )
            self._last_windows = sizes


def planner_for(settings: FlowSettings) -> FlowPlanner:
    """The process's planner of a topology: Spark may create several reader objects in the
    planner process (one for ``initialOffset``, one for the query); they must share one
    spout, or the second would rebuild from the database and dispatch in-flight tuples
    again."""
    cache = _worker_cache()
    planner = cache.planners.get(settings.topology_id)
    if planner is None or planner.settings != settings:
        planner = FlowPlanner(settings)
        cache.planners[settings.topology_id] = planner
    return planner


def _result_from_json(data: Mapping[str, Any]) -> LaneResult:
    return LaneResult(
        tuple_id=str(data["id"]),
        outcome=Outcome(data["o"]),
        xor=int(data.get("x", 0)),
        rt=data.get("rt"),
        records=int(data.get("n", 0)),
        routed_records=int(data.get("r", 0)),
        dead_records=int(data.get("d", 0)),
        latencies=tuple(float(v) for v in data.get("lat", ())),
        not_before=data.get("nb"),
        mrwq_epoch=data.get("e"),
        mrwq_seq=data.get("s"),
        error=str(data.get("err", "")),
    )


# --- lanes ----------------------------------------------------------------------------------


class TupleTimeout(TimeoutError):
    """A tuple's ``process`` exceeded its deadline."""


def _worker_cache() -> Any:
    """Per-process cache in ``sys.modules`` (module globals do not survive between tasks)."""
    cache = sys.modules.get(_CACHE_MODULE)
    if cache is None:
        cache = types.ModuleType(_CACHE_MODULE, "Per-worker state of flowctl lanes.")
        cache.configs = {}  # type: ignore[attr-defined]
        cache.stores = {}  # type: ignore[attr-defined]
        cache.planners = {}  # type: ignore[attr-defined]
        cache.pool = None  # type: ignore[attr-defined]
        sys.modules[_CACHE_MODULE] = cache
    return cache


def _store(address: str) -> Any:
    from flowctl.adapters.memcached_store import MemcachedStore

    cache = _worker_cache()
    store = cache.stores.get(address)
    if store is None:
        store = MemcachedStore(address)
        cache.stores[address] = store
    return store


def _run_with_deadline(fn: Any, records: Any, timeout_s: float, lane: int) -> Any:
    """``fn(records)`` in the worker's helper thread, raising :class:`TupleTimeout` after
    ``timeout_s``. A timed-out call cannot be killed: its thread is abandoned (it ends on
    its own) and the next tuple gets a fresh thread, so one stuck tuple never blocks
    the lane."""
    cache = _worker_cache()
    if cache.pool is None:
        cache.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="flowctl-process")
    token = _current_lane.set(lane)
    try:
        ctx = contextvars.copy_context()
    finally:
        _current_lane.reset(token)
    future = cache.pool.submit(ctx.run, fn, records)
    try:
        return future.result(timeout=timeout_s)
    except FutureTimeout:
        cache.pool.shutdown(wait=False, cancel_futures=True)
        cache.pool = None
        raise TupleTimeout(f"process exceeded its deadline of {timeout_s:g} s") from None


@dataclass
class _Done:
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


def _sample_latencies(records: Sequence[Any], now_epoch: float) -> tuple[float, ...]:
    stamps = [r.timestamp_ms for r in records if r.timestamp_ms is not None and r.timestamp_ms > 0]
    if not stamps:
        return ()
    step = max(1, len(stamps) // LATENCY_SAMPLES)
    return tuple(max(0.0, now_epoch - ms / 1000.0) for ms in stamps[::step][:LATENCY_SAMPLES])


def run_lane(settings: FlowSettings, part: FlowPartition) -> Iterator[tuple[Any, ...]]:
    """Process one lane's tuples (see the module docstring); yields one status row per tuple.

    Never raises for a tuple: a tuple that cannot even be read or stored is reported
    ``failed`` (the spout dispatches it again to another lane); in local mode a raising
    task would fail the whole query.
    """
    from flowctl.adapters import kafka_log
    from flowctl.adapters.memcached_store import LaneFeedback
    from flowctl.adapters.mrwq_flusher import default_namespace, mrwq_result
    from flowctl.core.backoff import FlumeBackoff
    from flowctl.core.persistence import MrwqWriter
    from flowctl.pipelines.base import PoisonRecord, Record

    config = load_config(settings.config_path)
    flow = config.flow
    definition = importlib.import_module(config.definition).DEFINITION
    if part.warmup:
        yield from _warm_up(settings, part, definition, flow.tuple_timeout_s)
        return
    topics = ReplayTopics(config.name)
    backflow = Backflow(
        topics,
        max_attempts=flow.max_attempts,
        backoff=FlumeBackoff(flow.replay_backoff_initial_s, flow.replay_backoff_max_s),
    )
    store = _store(settings.memcached)
    started = time.monotonic()
    done: list[_Done] = []
    held: set[tuple[str, int]] = set()

    def process(records: list[Any]) -> Any:
        result = _run_with_deadline(definition.process, records, flow.tuple_timeout_s, part.lane)
        json.dumps(result, allow_nan=False)  # it waits in memcached as JSON: fail here if not
        return result

    fetched = _prefetch(part.entries, settings)
    for entry in part.entries:
        t = entry.tuple
        raw = fetched[t.id]
        if isinstance(raw, Exception):
            done.append(_Done(entry, Outcome.FAILED, 0, 0.0, error=f"read failed: {raw}"))
            continue
        if not entry.replay:
            records = [
                Record(r.topic, r.partition, r.offset, r.timestamp, r.value, r.key) for r in raw
            ]
            done.append(_eden_tuple(entry, records, process, backflow, started, mrwq_result))
            continue
        key = (t.topic, t.partition)
        if key in held:
            done.append(_Done(entry, Outcome.HELD, 0, 0.0, not_before=time.time()))
            continue
        if not raw:  # no record at that offset (a hole in the log): nothing to replay
            done.append(_Done(entry, Outcome.ACKED, 0, time.monotonic() - started))
            continue
        done.append(
            _replay_record(
                entry, raw[0], process, backflow, started, mrwq_result, PoisonRecord, Record, held
            )
        )

    # Route failed records first: an outcome item must never claim records not yet routed.
    by_topic: dict[str, list[bytes]] = {}
    for d in done:
        for routed in d.routed or ():
            by_topic.setdefault(routed.topic, []).append(encode_envelope(routed.envelope))
    try:
        for topic, values in by_topic.items():
            kafka_log.produce(settings.bootstrap, topic, values)
    except Exception as exc:
        for d in done:
            if d.routed:
                d.outcome, d.item, d.error = Outcome.FAILED, None, f"replay produce failed: {exc}"
    # The MRWQ: one outcome item per tuple, one incr and one set_many for the lane.
    epoch: str | None = None
    seqs: dict[int, int] = {}
    items = [(i, d.item) for i, d in enumerate(done) if d.item is not None]
    if items:
        ns = default_namespace(config.name)
        try:
            writer = MrwqWriter(store, ns)
            appended = writer.append_many([item for _, item in items])
            raw_epoch = store.get_many([f"{ns}:epoch"]).get(f"{ns}:epoch")
            epoch = None if raw_epoch is None else raw_epoch.decode()
            seqs = {i: seq for (i, _), seq in zip(items, appended, strict=True)}
        except Exception as exc:
            for i, _ in items:
                d = done[i]
                d.outcome, d.error = Outcome.FAILED, f"MRWQ write failed: {exc}"
    results = []
    for i, d in enumerate(done):
        results.append(
            {
                "id": d.entry.tuple.id,
                "o": str(d.outcome),
                "x": d.entry.edge,
                "rt": round(d.rt, 6),
                "n": d.records,
                "r": len(d.routed or ()),
                "d": sum(1 for x in d.routed or () if x.dead),
                "lat": [round(v, 4) for v in d.latencies],
                "nb": d.not_before,
                "e": epoch if i in seqs else None,
                "s": seqs.get(i),
                "err": d.error[:300],
            }
        )
    try:
        LaneFeedback(store, settings.ns).put(part.seq, part.lane, {"results": results})
    except Exception as exc:  # the spout then times these tuples out and dispatches them again
        log.warning("lane %d: feedback of batch %d not stored: %s", part.lane, part.seq, exc)
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


def _warm_up(
    settings: FlowSettings, part: FlowPartition, definition: Any, timeout_s: float
) -> Iterator[tuple[Any, ...]]:
    """A warm-up tuple: read its records, run ``process``, discard the results.

    Touches what a real batch touches (Kafka, the pipeline code, memcached) and nothing
    durable: no MRWQ item, no replay, no feedback. Errors are reported, never raised.
    """
    from flowctl.pipelines.base import Record

    started = time.monotonic()
    entry = part.entries[0]
    error = ""
    records: list[Any] = []
    try:
        _store(settings.memcached).get_json(f"{settings.ns}:ctl")
        raw = _prefetch(part.entries, settings)[entry.tuple.id]
        if isinstance(raw, Exception):
            raise raw
        records = [Record(r.topic, r.partition, r.offset, r.timestamp, r.value, r.key) for r in raw]
        _run_with_deadline(definition.process, records, timeout_s, part.lane)
    except Exception as exc:  # a poison record or a slow read: the warm-up did its job
        error = f"{type(exc).__name__}: {exc}"
    yield (
        part.lane,
        part.seq,
        entry.tuple.id,
        WARMUP,
        len(records),
        time.monotonic() - started,
        error[:300] or None,
    )


def _prefetch(
    entries: Sequence[PlanEntry], settings: FlowSettings
) -> dict[str, list[Any] | Exception]:
    """Every tuple's records, read in as few ``read_range`` calls as possible.

    A lane's tuples of one partition are often contiguous (a window's worth of one
    partition, or a run of replayed records): one read per contiguous span instead of one
    assign + seek + fetch round trip per tuple. A span that cannot be read fails its
    tuples only (the spout dispatches them again), never the task.
    """
    import bisect

    from flowctl.adapters import kafka_log

    by_tp: dict[tuple[str, int], list[TupleRange]] = {}
    for e in entries:
        by_tp.setdefault((e.tuple.topic, e.tuple.partition), []).append(e.tuple)
    out: dict[str, list[Any] | Exception] = {}
    for (topic, partition), tuples in sorted(by_tp.items()):
        tuples.sort()
        spans: list[list[TupleRange]] = []
        for t in tuples:
            if spans and spans[-1][-1].end == t.start:
                spans[-1].append(t)
            else:
                spans.append([t])
        for span in spans:
            starts = [t.start for t in span]
            for t in span:
                out[t.id] = []
            try:
                consumer = kafka_log.cached_consumer(settings.bootstrap)
                for record in kafka_log.read_range(
                    consumer,
                    topic,
                    partition,
                    span[0].start,
                    span[-1].end,
                    timeout_s=settings.read_timeout_s,
                ):
                    t = span[bisect.bisect_right(starts, record.offset) - 1]
                    out[t.id].append(record)  # type: ignore[union-attr]
            except Exception as exc:
                # A consumer that failed mid-read is in doubt: the next read gets a fresh one.
                kafka_log.drop_cached_consumer(settings.bootstrap)
                for t in span:
                    out[t.id] = exc
    return out


def _eden_tuple(
    entry: PlanEntry, records: list[Any], process: Any, backflow: Backflow, started: float, mrwq
) -> _Done:
    """One Eden tuple: its result as an ``applied`` item, or its records routed."""
    from flowctl.pipelines.base import PoisonRecord

    t = entry.tuple
    try:
        result = process(records)
    except Exception as exc:
        timed_out = isinstance(exc, TupleTimeout)
        error = f"{type(exc).__name__}: {exc}"
        now = time.time()
        routed: list[Routed] = []
        poison_at = exc.offset if isinstance(exc, PoisonRecord) else None
        # Only a one-record tuple's poison goes to the DLQ at once. In a larger tuple the
        # poison record goes to From with the others: replayed alone, it fails again and is
        # dead-lettered under its own one-record ``dlq`` row, so the durable rows say where
        # it went (a record sent to the DLQ from inside a ``replayed`` row would stay
        # "pending replay" for the reconcile forever).
        single_poison = isinstance(exc, PoisonRecord) and len(records) == 1
        for r in records:
            payload = r.value if r.value is not None else b""
            if single_poison:
                dead = Envelope(
                    t.topic, r.partition, r.offset, payload, 1, f"poison: {error}", now, r.key
                )
                routed.append(Routed(backflow.topics.dlq, dead, True))
                continue
            why = error
            if poison_at is not None and r.offset != poison_at:
                why = f"replayed with the poison record's tuple: {error}"
            routed.append(
                backflow.fail_original(
                    partition=r.partition,
                    offset=r.offset,
                    payload=payload,
                    key=r.key,
                    error=why,
                    now=now,
                    from_topic=entry.from_topic,
                )
            )
        all_dead = bool(routed) and all(x.dead for x in routed)
        outcome_key = "dlq" if all_dead else "replayed"
        outcome = (
            Outcome.TIMED_OUT if timed_out else (Outcome.DLQ if all_dead else Outcome.REPLAYED)
        )
        return _Done(
            entry,
            outcome,
            len(records),
            time.monotonic() - started,
            item=(t.id, [mrwq(outcome_key, {"error": error[:300]})]),
            routed=routed,
            error=error,
        )
    return _Done(
        entry,
        Outcome.ACKED,
        len(records),
        time.monotonic() - started,
        item=(t.id, [mrwq("applied", result)]),
        latencies=_sample_latencies(records, time.time()),
    )


def _replay_record(
    entry: PlanEntry,
    raw: Any,
    process: Any,
    backflow: Backflow,
    started: float,
    mrwq: Any,
    poison_cls: type,
    record_cls: type,
    held: set[tuple[str, int]],
) -> _Done:
    """One record of the To topic: decode its envelope, wait out (or hold for) its backoff,
    process it under its original coordinates."""
    t = entry.tuple
    now = time.time()
    try:
        env = decode_envelope(raw.value or b"")
    except EnvelopeError as exc:
        routed = backflow.malformed(
            raw.value or b"",
            topic=t.topic,
            partition=t.partition,
            offset=t.start,
            error=str(exc),
            now=now,
        )
        return _Done(
            entry, Outcome.DLQ, 1, time.monotonic() - started, routed=[routed], error=str(exc)
        )
    wait = env.not_before - now
    if wait > MAX_HOLD_WAIT_S:
        held.add((t.topic, t.partition))
        return _Done(entry, Outcome.HELD, 0, 0.0, not_before=env.not_before)
    if wait > 0:
        time.sleep(wait)
    original = TupleRange(env.topic, env.partition, env.offset, env.offset + 1)
    record = record_cls(env.topic, env.partition, env.offset, None, env.payload, env.key)
    try:
        result = process([record])
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        now = time.time()
        if isinstance(exc, poison_cls):
            dead = Envelope(
                env.topic,
                env.partition,
                env.offset,
                env.payload,
                env.attempt + 1,
                f"poison: {error}",
                now,
                env.key,
            )
            routed = Routed(backflow.topics.dlq, dead, True)
        else:
            routed = backflow.fail_replayed(env, error=error, now=now, from_topic=entry.from_topic)
        outcome = Outcome.DLQ if routed.dead else Outcome.REPLAYED
        if isinstance(exc, TupleTimeout):
            outcome = Outcome.TIMED_OUT
        key = "dlq" if routed.dead else "replayed"
        return _Done(
            entry,
            outcome,
            1,
            time.monotonic() - started,
            item=(original.id, [mrwq(key, {"error": error[:300]}, replay=True)]),
            routed=[routed],
            error=error,
        )
    return _Done(
        entry,
        Outcome.ACKED,
        1,
        time.monotonic() - started,
        item=(original.id, [mrwq("applied", result, replay=True)]),
    )
