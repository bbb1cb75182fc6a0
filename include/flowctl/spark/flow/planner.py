"""The planner: the spout's process side (Spark's long-lived source runner).

``latestOffset`` collects the lanes' feedback of the previous micro-batch from memcached,
applies it to the :class:`~flowctl.core.spout.Spout` (windows, XOR acker, ledger, replay
state machine), reads what the database says is durable, steps the backpressure chain
and admits this batch's tuples; the batch plan is the end offset
(:mod:`flowctl.spark.flow.plan`). The planner talks to the driver through the channels
of :mod:`flowctl.spark.flow.channels` and to the database only through
:class:`~flowctl.adapters.flow_state.FlowState` (no SQL here).
"""

from __future__ import annotations

import logging
import secrets
import sys
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from flowctl.adapters.process_cache import entries
from flowctl.core.backpressure_chain import BackpressureChain, StageSpec
from flowctl.core.clock import Clock, MonotonicClock
from flowctl.core.handover import Frontier
from flowctl.core.log_pacing import Tally
from flowctl.core.metrics import MetricsWindow, SpoutMetrics
from flowctl.core.persistence import mrwq_namespace, queue_length
from flowctl.core.replay import ReplaySnapshot, ReplayTopics
from flowctl.core.spout import Spout
from flowctl.core.spout_contract import Dispatch
from flowctl.core.timings import PhaseTimings
from flowctl.core.tuples import TopicPartition
from flowctl.spark.flow import channels
from flowctl.spark.flow.channels import CallMark, Control, SpoutState
from flowctl.spark.flow.log_ends import BackgroundEnds, Ends, KafkaEnds, LogEnds
from flowctl.spark.flow.log_guard import LogGuard
from flowctl.spark.flow.plan import encode_plan, encode_warmup, initial_offset, warmup_ranges
from flowctl.spark.flow.planner_ends import EndsPlanning
from flowctl.spark.flow.planner_feedback import FeedbackPlanning
from flowctl.spark.flow.planner_handover import HandoverPlanning
from flowctl.spark.flow.planner_health import PlannerHealth
from flowctl.spark.flow.planner_logs import (
    PLANNING_FIRST_LOG_S,
    PLANNING_LOG_EVERY_S,
    WINDOW_LOG_EVERY_S,
    PlannerLogs,
)
from flowctl.spark.flow.rebuild_wait import RebuildWait
from flowctl.spark.flow.settings import FlowSettings, load_config
from flowctl.spark.flow.window_log import WindowLog

if TYPE_CHECKING:
    from concurrent.futures import Future

    from flowctl.adapters.flow_state import FlowState
    from flowctl.adapters.memcached_store import MemcachedStore

log = logging.getLogger(__name__)

#: Seconds between warm-up batches of a standby topology (before its first activation).
#: A warm-up batch reads one tuple's worth of the newest Eden records per lane and runs
#: the pipeline's ``process`` on them, discarding the results: Spark's Python workers,
#: the lanes' imports and connections are then warm when ``activate`` comes, so the
#: first real batch is not a 4-7 s first batch. Spark ends a Python worker idle for a
#: minute, hence well under that.
WARMUP_EVERY_S = 20.0

#: The planner process's planners by topology id (:mod:`flowctl.adapters.process_cache`).
_PLANNERS = "flowctl._flow_planners"


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


class FlowPlanner(EndsPlanning, FeedbackPlanning, HandoverPlanning, PlannerLogs):
    """The spout's process side: owns the :class:`Spout`, talks to Kafka, memcached, the DB.

    Lives on the stream reader in the planner process; never pickled to tasks. ``store``
    (memcached), ``ends`` (Kafka) and ``state`` (the database) default to the real
    adapters; a test passes in-memory fakes.
    """

    def __init__(
        self,
        settings: FlowSettings,
        *,
        store: MemcachedStore | None = None,
        ends: LogEnds | None = None,
        state: FlowState | None = None,
        clock: Clock | None = None,
    ) -> None:
        _ensure_logging()
        self.settings = settings
        self.config = load_config(settings.config_path)
        self.flow = self.config.flow
        self.clock = clock if clock is not None else MonotonicClock()
        self.topics = ReplayTopics(self.config.name)
        self._store = store
        self.ends = BackgroundEnds(
            ends if ends is not None else KafkaEnds(settings.bootstrap, self.flow.reader),
            settings.topic,
            (self.topics.replay_a, self.topics.replay_b),
        )
        self._state = state
        self.spout: Spout | None = None
        self.seq = 0
        self.pending: dict[int, tuple[set[int], float]] = {}
        self.lanes = settings.lanes
        #: This planner object's token and its ``latestOffset`` count (:class:`CallMark`).
        self.token = secrets.token_hex(6)
        self.calls = 0
        self._marked = False
        self.admit = not settings.standby
        self.activated = self.admit
        self.warmups = 0
        self._last_warmup = -1e9
        self.rebuild_seen: int | None = None
        self.gaps_seen = 0  # rebuilds after lost MRWQ items (Control.gaps), for health
        self.rebuild_wait = RebuildWait(
            settings.topology_id, mrwq_namespace(self.config.name), self.store, self._warn
        )
        #: An overlapped handover's green: blue's frontier (until the sweep), the sweep
        #: number acted on, and the flusher epoch seen (its change means lost MRWQ items).
        self.frontier: Frontier | None = None
        self.sweep_seen: int | None = None
        self._epoch: str | None = None
        self.metrics = SpoutMetrics(
            MetricsWindow(settings.topology_id, self.clock, window_s=self.flow.metrics_window_s),
            self.config.tuple_size,
        )
        self.health = PlannerHealth(
            settings.topology_id,
            settings.topic,
            self.clock,
            stall_after_s=self.flow.stall_after_s,
            on_code_error=self.flow.on_code_error,
        )
        self.chain = self._new_chain()
        self._last_plan_at = self.clock.now()
        self._persisted_replay: ReplaySnapshot | None = None
        self._last_warning: dict[str, float] = {}
        self._last_level_log = -1e9
        self._returned = Tally()  # lanes' time budgets spent, summed up once a minute
        self.window_log = WindowLog(settings.topology_id, self.clock, WINDOW_LOG_EVERY_S)
        self._last_levels: dict[str, int] = {}
        self._latest: dict[TopicPartition, int] = {}
        #: The replay topics' ends, read with Eden's (:meth:`_read_ends`).
        self._replay: dict[tuple[str, int], int] = {}
        #: Eden's ends as the lanes' fetches reported them since the last read of the
        #: ends (``{partition: end}``; :meth:`_start_reading_ends` hands them over).
        self.lane_ends: dict[int, int] = {}
        #: The next batch's read of the ends, started as this batch was planned (only
        #: where Eden's ends are costly: :meth:`_read_ahead`).
        self._next_ends: Future[Ends] | None = None
        #: Planning cost per batch and phase (logged with the job's status).
        self.timings = PhaseTimings(self.clock)
        #: Data loss and read errors (:mod:`flowctl.spark.flow.log_guard`); Eden's durable
        #: checkpoint as this batch read it (``None``: the database did not answer).
        self.guard = LogGuard(
            settings.topology_id,
            settings.topic,
            policy=self.config.on_data_loss,
            read_error_timeout_s=self.flow.read_error_timeout_s,
            clock=self.clock,
            skip=lambda lost: self.state().skip(settings.topology_id, lost),
            rebuild=self._rebuild_after_skip,
        )
        self._checkpoints: dict[int, int] | None = None
        self._last_timings_log = self.clock.now() - (PLANNING_LOG_EVERY_S - PLANNING_FIRST_LOG_S)

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

    def store(self) -> MemcachedStore:
        from flowctl.adapters.memcached_store import MemcachedStore

        if self._store is None:
            self._store = MemcachedStore(self.settings.memcached)
        return self._store

    def state(self) -> FlowState:
        """The database side (:class:`~flowctl.adapters.flow_state.FlowState`)."""
        if self._state is None:
            from flowctl.adapters.flow_state import FlowState

            self._state = FlowState(
                self.settings.database_url, self.config.name, self.settings.topic
            )
        return self._state

    def close(self) -> None:
        self._log_timings()  # the batches since the last line (a short run has no other)
        self.ends.close()

    def _warn(self, what: str, exc: BaseException, every_s: float = 10.0) -> None:
        """Log a best-effort failure at most every ``every_s`` per kind (readable logs)."""
        self.health.error(what, exc)
        now = self.clock.now()
        if now - self._last_warning.get(what, -1e9) >= every_s:
            self._last_warning[what] = now
            log.warning("flow %s: %s failed (will retry): %s", self.settings.topology_id, what, exc)

    # -- start and rebuild --

    def _persist_replay(self) -> None:
        """Store the replay pointer and committed positions when they changed (best effort)."""
        assert self.spout is not None
        snap = self.spout.replay.snapshot()
        if snap == self._persisted_replay:
            return
        self.state().store_replay(snap)
        self._persisted_replay = snap

    # -- the per-batch work --

    def initial_offset(self) -> dict[str, Any]:
        if self.spout is None:
            self.spout = self.build_spout()
        # Connect to Kafka and memcached now, not inside the first batch's planning.
        try:
            self._read_ends(self._start_reading_ends())
        except Exception as exc:
            self._warn("reading the log's end offsets", exc)
        try:
            self.store().get_json(channels.state_key(self.settings.ns))
        except Exception as exc:
            self._warn("reading the spout state from memcached", exc)
        return initial_offset(self.settings.topic)

    def latest_offset(self, start: Mapping[str, Any]) -> dict[str, Any]:
        """Feedback, durability, backpressure, then admission; returns the batch's plan
        (or ``start`` itself when nothing is admitted: Spark then runs no batch)."""
        self.seq = max(self.seq, int(start.get("seq", 0)))
        self.timings.begin()
        timed = self.timings.phase
        with timed("control"):
            self._mark_call()  # before the control key is read: see CallMark
            self._read_control()
        if self.spout is None:
            self.spout = self.build_spout()
        reading = self._reading_for_batch()  # on the ends' thread, beside the next two
        with timed("feedback"):
            self._collect_feedback()
            self.spout.expire()
        with timed("durability"):
            self._durability()
        with timed("log_ends"):
            latest = self._read_ends(reading)
        # No batch on a failed read (retried) or an unconfirmed end below the position; health
        # and the metrics window go on, on the ends last read: an outage shows while it lasts.
        plannable = latest is not None and self._guard_log(latest)
        if latest is not None and plannable:
            self._latest = {TopicPartition(self.settings.topic, p): n for p, n in latest.items()}
        with timed("backpressure"):
            persist_len = self._mrwq_length()
            levels = self._backpressure(persist_len)
        # What should become durable: a standby or draining topology owes only its
        # tuples in flight (the log's backlog is not its to take).
        waiting = self.spout.backlog(self._latest) if self.admit else 0
        backlog = waiting + self.spout.in_flight
        health = self.health.observe(backlog, self.timings.slowest())  # HALTED: admit nothing
        with timed("admit"):
            held = self.health.halted or self.rebuild_wait.pending
            admitting = plannable and self.admit and self._marked and not held
            dispatches = self._admit() if admitting else []
        with timed("metrics"):
            rolled = self.metrics.record(
                self.spout,
                self._latest,
                levels,
                persist_len,
                now=self.clock.now(),
                wall_offset=time.time() - self.clock.now(),
                health=health,
                rebuilds=self.gaps_seen,
                backlog=waiting,  # a standby's is 0: the log is the ACTIVE topology's
            )
            self._publish_state(persist_len, levels, with_rows=rolled)
        if not plannable:
            return dict(start)
        if not dispatches:
            warmup = self._warmup_plan() if not self.activated else None
            return dict(start) if warmup is None else warmup
        self.seq += 1
        self.pending[self.seq] = ({d.lane for d in dispatches}, self.clock.now())
        self.window_log.batch(self.seq, len(dispatches), self.spout.windows)
        self._read_ahead()
        return encode_plan(self.settings.topic, self.seq, dispatches, self.config.name)

    def planned(self, plan: Mapping[str, Any], partitions_ms: float) -> None:
        """Spark split ``plan`` into lane partitions in ``partitions_ms``: the batch's
        planning is complete. Every ``PLANNING_LOG_EVERY_S`` (the first time after
        ``PLANNING_FIRST_LOG_S``) the cost is logged."""
        self.timings.add("partitions", partitions_ms)
        self.timings.end_batch()
        if self.clock.now() - self._last_timings_log >= PLANNING_LOG_EVERY_S:
            self._log_timings()

    def _admit(self) -> list[Dispatch]:
        """This batch's tuples, within the source and process stages' rates."""
        assert self.spout is not None
        now = self.clock.now()
        elapsed = min(max(now - self._last_plan_at, 0.1), 10.0)
        rates = self.chain.rates()
        budget = max(1, int(min(rates["source"], rates["process"]) * elapsed))
        cap = self.batch_cap()
        if cap is not None:
            budget = min(budget, cap)
        dispatches = self.spout.plan(self._latest, self._replay, time.time(), budget=budget)
        self._last_plan_at = now
        return dispatches

    def batch_cap(self) -> int | None:
        """The most tuples one batch admits whatever the windows (``max_rows``, the
        pipeline's ``max_records_per_batch``, in tuples; ``None``: no such limit)."""
        if self.settings.max_rows is None:
            return None
        return max(1, self.settings.max_rows // self.config.tuple_size)

    def _warmup_plan(self) -> dict[str, Any] | None:
        """A standby topology's warm-up batch, every ``WARMUP_EVERY_S`` (``None``: not due,
        or the log is empty: nothing to warm up with)."""
        now = self.clock.now()
        if now - self._last_warmup < WARMUP_EVERY_S:
            return None
        lanes = max(self.lanes, self.settings.slots or 0)  # every task slot's worker
        ranges = warmup_ranges(self._latest, lanes, self.config.tuple_size)
        if not ranges:
            return None
        self._last_warmup = now
        self.warmups += 1
        log.info(
            "flow %s: standby warm-up %d: %d lane(s) read and process %d record(s) each, "
            "results discarded",
            self.settings.topology_id,
            self.warmups,
            len(ranges),
            self.config.tuple_size,
        )
        return encode_warmup(self.settings.topic, self.seq, self.warmups, ranges)

    def _mark_call(self) -> None:
        """Count this call and say it has begun (:class:`CallMark`), before reading the
        control key. A call whose mark could not be written admits nothing: the driver
        could not know of it, and a frontier it takes must hold every cut."""
        self.calls += 1
        self._marked = False
        try:
            mark = CallMark(self.token, self.calls).encode()
            self.store().set_json(
                channels.call_key(self.settings.ns), mark, expire_s=channels.STATE_TTL_S
            )
            self._marked = True
        except Exception as exc:
            self._warn("writing the call mark", exc)

    def _read_control(self) -> None:
        try:
            raw = self.store().get_json(channels.control_key(self.settings.ns))
            ctl = None if raw is None else Control.decode(raw)
        except Exception as exc:
            self._warn("reading the control key", exc)
            return
        if ctl is None:
            return
        if ctl.admit != self.admit:
            log.info(
                "flow %s: admission %s", self.settings.topology_id, "on" if ctl.admit else "off"
            )
            self.admit = ctl.admit
            self.activated = self.activated or ctl.admit
        self._apply_control(ctl)

    def _durability(self) -> None:
        """What the database says is durable: Eden checkpoint, flusher position."""
        assert self.spout is not None
        self._checkpoints = None
        try:
            durable = self.state().durable()
            self._checkpoints = {
                tp.partition: n
                for tp, n in durable.checkpoints.items()
                if tp.topic == self.settings.topic
            }
            self._check_epoch(durable.flushed.epoch if durable.flushed else None)
            self.spout.durable(durable.checkpoints)
            self.health.durable_at(durable.checkpoints)
            if durable.flushed is not None:
                self.spout.confirm_replays(durable.flushed.epoch, int(durable.flushed.head))
            self._persist_replay()
        except Exception as exc:
            self._warn("reading durable state from the database", exc)

    def _mrwq_length(self) -> int:
        try:
            return queue_length(self.store(), mrwq_namespace(self.config.name)) or 0
        except Exception as exc:
            self._warn("reading the MRWQ length", exc)
            return 0

    def _backpressure(self, persist_len: int) -> dict[str, int]:
        assert self.spout is not None
        self.chain.step({"process": self.spout.outstanding, "persist": persist_len})
        levels = self.chain.levels()
        # Readable: at once when a stage enters or leaves backpressure, else once a minute.
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

    def spout_state(self, persist_len: int, levels: Mapping[str, int]) -> SpoutState:
        """What the driver reads after each batch (see :class:`SpoutState`)."""
        assert self.spout is not None
        return SpoutState(
            at=time.time(),
            admit=self.admit,
            rebuild=self.rebuild_seen,
            in_flight=self.spout.in_flight,
            buffered=self.spout.buffered,
            pending_batches=len(self.pending),
            mrwq=persist_len,
            levels=dict(levels),
            lanes=self.spout.lane_gauges(),
            counters=dict(self.spout.counters),
            at_risk=self.spout.at_risk(),
            seq=self.seq,
            warmups=self.warmups,
            log_empty=not any(self._latest.values()),
            frontier=self._frontier(),
            planner=self.token,
            call=self.calls,
        )

    def _publish_state(
        self, persist_len: int, levels: Mapping[str, int], *, with_rows: bool = True
    ) -> None:
        """The spout's state every batch, and the closed windows when they changed."""
        state = self.spout_state(persist_len, levels)
        rows = self.metrics.rows if with_rows else []
        ns = self.settings.ns
        try:
            store = self.store()
            store.set_json(channels.state_key(ns), state.encode(), expire_s=channels.STATE_TTL_S)
            if rows:
                store.set_json(
                    channels.rows_key(ns), channels.encode_rows(rows), expire_s=channels.STATE_TTL_S
                )
        except Exception as exc:
            self._warn("publishing the spout state", exc)


def planner_for(settings: FlowSettings) -> FlowPlanner:
    """The process's planner of a topology: Spark may create several reader objects in the
    planner process (one for ``initialOffset``, one for the query); they must share one
    spout, or the second would rebuild from the database and dispatch in-flight tuples
    again."""
    planners = entries(_PLANNERS)
    planner = planners.get(settings.topology_id)
    if not isinstance(planner, FlowPlanner) or planner.settings != settings:
        planner = FlowPlanner(settings)
        planners[settings.topology_id] = planner
    return planner
