"""The discrete-event engine: one source, P lanes, built on the real core modules.

The source side is exactly what the Spark source runs: a
:class:`~flowctl.core.tuples.TupleBatcher` cuts tuples on demand, a
:class:`~flowctl.core.dispatch.Dispatcher` over one
:class:`~flowctl.core.window.AdaptiveWindow` per lane gives them to lanes, the
:class:`~flowctl.core.acker.XorAcker` tracks each dispatch (and times out the
ones a stalled lane never answers), the
:class:`~flowctl.core.checkpoint.AckLedger` moves the checkpoint, and a
:class:`~flowctl.core.metrics.MetricsWindow` aggregates per window.

Policies: ``round_robin`` and ``least_loaded`` (adaptive windows +
dispatcher), and the baseline ``equal_split``: tuple ``i`` belongs to lane
``i mod P`` (static hash partitioning, the seed's old system), each lane has a
fixed cap of ``w_init`` tuples in flight (like Storm's ``max.spout.pending``;
without any cap every tuple would sit in a lane queue from t=0 and time out),
no adaptation, and a failed tuple is retried on its own lane.

Messages (tuple to lane, ack/fail back) take ``link_delay_s`` each way; a lane
serves its FIFO queue one tuple at a time, the service time being
``tuple_size * U(1 - jitter, 1 + jitter)`` records at the lane's current
speed. Each lane has its own seeded random stream, so a lane's k-th service
time is the same whatever the policy.

Two modes:

* ``continuous`` (Storm, the seed): every ack or fail reaches the source
  ``link_delay_s`` after the lane finishes, and the source refills windows at
  once.
* ``microbatch`` (the Spark source): at each batch start the source cuts and
  dispatches as many tuples as the windows allow (one task per lane); a lane
  works through its tuples; the batch ends when every lane is done (Spark
  waits for all tasks) or at ``timeout_s`` (the reader's no-progress timeout:
  unfinished tuples time out and are requeued). Outcomes, with each tuple's
  rt measured on its lane, reach the windows at batch end; the next batch
  starts ``batch_overhead_s`` later. The acker's own timeout is then twice
  ``timeout_s``: a backstop behind the batch timeout.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass
from itertools import count

from flowctl.core.acker import AckerEvent, AckerEventKind, XorAcker
from flowctl.core.checkpoint import AckLedger
from flowctl.core.clock import FakeClock
from flowctl.core.dispatch import Dispatcher
from flowctl.core.metrics import MetricsWindow, percentile
from flowctl.core.rtt import RttEstimator
from flowctl.core.tuples import TopicPartition, TupleBatcher, TupleRange
from flowctl.core.window import AdaptiveWindow

from .model import POLICIES, SimConfig
from .settle import settle_round, steady_band

TP = TopicPartition("sim.eden", 0)


@dataclass(frozen=True)
class LaneResult:
    """One lane's share of the work and its window's history."""

    lane: int
    completed: int
    window_trace: tuple[tuple[float, int], ...]
    round_windows: tuple[int, ...]
    settle_round: int | None
    steady_band: tuple[int, int] | None


@dataclass(frozen=True)
class SimResult:
    """The outcome of one run with one policy."""

    scenario: str
    policy: str
    tuples: int
    records: int
    makespan_s: float
    throughput_rps: float
    rt_p50_s: float | None
    rt_p99_s: float | None
    latency_p50_s: float | None
    latency_p99_s: float | None
    failed: int
    timed_out: int
    wasted: int
    settle_rounds: int | None
    lanes: tuple[LaneResult, ...]
    throughput_series: tuple[tuple[float, float], ...]


@dataclass
class _Job:
    tuple: TupleRange
    lane: int
    root: int
    edge: int
    sent_at: float


class _Lane:
    """A FIFO single server."""

    def __init__(self, index: int, seed: int) -> None:
        self.index = index
        self.rng = random.Random(seed * 1_000_003 + index)
        self.queue: deque[_Job] = deque()
        self.busy = False
        self.completed = 0


class Simulation:
    """One run: ``Simulation(config, policy).run()`` -> :class:`SimResult`."""

    def __init__(self, config: SimConfig, policy: str) -> None:
        if policy not in POLICIES:
            raise ValueError(f"Simulation: unknown policy {policy!r}; choose one of {POLICIES}")
        self.cfg = config
        self.policy = policy
        self.clock = FakeClock()
        self._events: list[tuple[float, int, str, object]] = []
        self._seq = count()
        self._lanes = [_Lane(i, config.seed) for i in range(len(config.lanes))]
        self._windowed = policy != "equal_split"
        self._dispatcher: Dispatcher | None = None
        if self._windowed:
            windows = [
                AdaptiveWindow(
                    i,
                    self.clock,
                    w_min=config.w_min,
                    w_max=config.w_max,
                    w_init=config.w_init,
                    rtt=RttEstimator(
                        fixed_threshold=config.threshold, min_threshold=config.min_threshold
                    ),
                )
                for i in range(len(config.lanes))
            ]
            self._dispatcher = Dispatcher(windows, self.clock, policy=policy)
        self._microbatch = config.mode == "microbatch"
        self._acker = XorAcker(
            self.clock,
            timeout_s=config.timeout_s * (2 if self._microbatch else 1),
            buckets=config.acker_buckets,
            rng=random.Random(config.seed),
        )
        self._batcher = TupleBatcher(config.tuple_size)
        self._ledger = AckLedger({TP: 0})
        self._metrics = MetricsWindow(f"sim-{policy}", self.clock, window_s=config.metrics_window_s)
        self._jobs: dict[int, _Job] = {}
        self._available_at: dict[str, float] = {}
        self._rts: list[float] = []
        self._latencies: list[float] = []
        self._failed = 0
        self._timed_out = 0
        self._wasted = 0
        self._next_static = 0
        self._static_queues: list[deque[TupleRange]] = [deque() for _ in self._lanes]
        self._static_in_flight = [0 for _ in self._lanes]
        self._last_rounds = [0 for _ in self._lanes]
        self._batch_open: set[int] = set()  # roots of the running micro-batch
        self._batch_replies: list[tuple[float, _Job, bool]] = []
        self._batch_no = 0
        self._abandoned: set[int] = set()
        self._traces: list[list[tuple[float, int]]] = [[] for _ in self._lanes]
        self._round_windows: list[list[int]] = [[] for _ in self._lanes]
        self._rows: list[tuple[float, float]] = []
        self._total_records = config.tuples * config.tuple_size

    # -- the loop --------------------------------------------------------
    def run(self) -> SimResult:
        cfg = self.cfg
        self._trace_windows()
        self._schedule(0.0, "tick", None)
        if cfg.arrival_tps is not None:
            self._schedule(0.0, "arrival", None)
        if self._microbatch:
            self._schedule(0.0, "batch_start", None)
        else:
            self._pump()
        finished_at = math.inf
        while self._events:
            t, _, kind, payload = heapq.heappop(self._events)
            if t > cfg.horizon_s:
                break
            self.clock.set(t)
            getattr(self, f"_on_{kind}")(payload)
            if not self._microbatch:
                self._pump()
            self._trace_windows()
            if self._ledger.checkpoint()[TP] >= self._total_records:
                finished_at = t
                break
        self._collect_rows()
        return self._result(finished_at)

    def _schedule(self, t: float, kind: str, payload: object) -> None:
        heapq.heappush(self._events, (t, next(self._seq), kind, payload))

    # -- the source ------------------------------------------------------
    def _latest(self) -> dict[TopicPartition, int]:
        cfg = self.cfg
        if cfg.arrival_tps is None:
            arrived = cfg.tuples
        else:
            arrived = min(cfg.tuples, math.floor(self.clock.now() * cfg.arrival_tps + 1e-9))
        return {TP: arrived * cfg.tuple_size}

    def _cut(self, max_tuples: int | None) -> list[TupleRange]:
        fresh = self._batcher.cut(self._latest(), max_tuples)
        for t in fresh:
            self._ledger.admit(t)
            self._available_at[t.id] = self._arrival_time(t)
            self._metrics.admitted(1)
        return fresh

    def _arrival_time(self, t: TupleRange) -> float:
        if self.cfg.arrival_tps is None:
            return 0.0
        return (t.end // self.cfg.tuple_size) / self.cfg.arrival_tps

    def _pump(self) -> None:
        if not self._windowed:
            for t in self._cut(None):
                self._static_queues[self._next_static % len(self._lanes)].append(t)
                self._next_static += 1
            for i, queue in enumerate(self._static_queues):
                while queue and self._static_in_flight[i] < self.cfg.w_init:
                    self._static_in_flight[i] += 1
                    self._send(queue.popleft(), i)
            return
        d = self._dispatcher
        assert d is not None
        want = d.total_free() - d.buffered
        if want > 0:
            d.enqueue(self._cut(want))
        for a in d.dispatch():
            self._send(a.tuple, a.lane)

    def _send(self, t: TupleRange, lane: int) -> None:
        root, edge = self._acker.new_root(), self._acker.new_id()
        timeouts = self._acker.ack_init(root, edge, source_task=lane)
        job = _Job(t, lane, root, edge, self.clock.now())
        self._jobs[root] = job
        self._schedule(self.clock.now() + self.cfg.link_delay_s, "arrive", job)
        self._handle(timeouts)  # trees that expired on this call are retried too

    # -- the lanes -------------------------------------------------------
    def _on_arrive(self, job: _Job) -> None:
        lane = self._lanes[job.lane]
        lane.queue.append(job)
        if not lane.busy:
            self._start_service(lane)

    def _start_service(self, lane: _Lane) -> None:
        if not lane.queue:
            lane.busy = False
            return
        lane.busy = True
        spec = self.cfg.lanes[lane.index]
        work = self.cfg.tuple_size * lane.rng.uniform(1 - self.cfg.jitter, 1 + self.cfg.jitter)
        done = spec.finish_time(self.clock.now(), work)
        if math.isfinite(done):
            self._schedule(done, "done", lane)

    def _on_done(self, lane: _Lane) -> None:
        job = lane.queue.popleft()
        now = self.clock.now()
        ok = lane.rng.random() >= self.cfg.lanes[lane.index].fail_probability(now)
        self._start_service(lane)
        if not self._microbatch:
            self._schedule(now + self.cfg.link_delay_s, "reply", (job, ok))
            return
        if job.root in self._abandoned:  # its batch gave up on it: wasted work
            self._abandoned.discard(job.root)
            self._wasted += 1
            return
        self._batch_replies.append((now, job, ok))
        self._batch_open.discard(job.root)
        if not self._batch_open:
            self._schedule(now + self.cfg.link_delay_s, "batch_end", self._batch_no)

    # -- micro-batches ---------------------------------------------------
    def _on_batch_start(self, _: object) -> None:
        self._batch_no += 1
        before = set(self._jobs)
        self._pump()
        self._batch_open = set(self._jobs) - before
        if self._batch_open:
            self._schedule(self.clock.now() + self.cfg.timeout_s, "batch_end", self._batch_no)
        else:  # nothing to do yet (open workload): poll again after the overhead
            self._schedule(self.clock.now() + self.cfg.batch_overhead_s, "batch_start", None)

    def _on_batch_end(self, batch_no: int) -> None:
        if batch_no != self._batch_no or (not self._batch_open and not self._batch_replies):
            return  # a stale end (the batch already ended the other way)
        replies, self._batch_replies = sorted(self._batch_replies, key=lambda r: r[0]), []
        for done_at, job, ok in replies:
            if ok:
                events = self._acker.ack(job.root, job.edge)
                self._handle(events, rt={job.root: done_at - job.sent_at})
            else:
                self._handle(self._acker.fail(job.root))
        for root in sorted(self._batch_open):  # the lane did not finish in time
            job = self._jobs.pop(root)
            self._abandoned.add(root)
            self._handle(self._acker.fail(root), skip=root)
            self._retry(job, timed_out=True)
        self._batch_open = set()
        self._batch_no += 1  # invalidates the other scheduled end of this batch
        self._schedule(self.clock.now() + self.cfg.batch_overhead_s, "batch_start", None)

    def _on_reply(self, payload: tuple[_Job, bool]) -> None:
        job, ok = payload
        if ok:
            if job.root not in self._jobs:
                self._wasted += 1  # its tree already timed out: the work is repeated
            events = self._acker.ack(job.root, job.edge)
        else:
            events = self._acker.fail(job.root)
        self._handle(events)

    def _on_tick(self, _: object) -> None:
        self._handle(self._acker.expire())
        self._collect_rows()
        period = self.cfg.timeout_s / self.cfg.acker_buckets
        self._schedule(self.clock.now() + period, "tick", None)

    def _on_arrival(self, _: object) -> None:
        arrived = self._latest()[TP] // self.cfg.tuple_size
        if arrived < self.cfg.tuples:
            self._schedule((arrived + 1) / (self.cfg.arrival_tps or 1.0), "arrival", None)

    # -- outcomes --------------------------------------------------------
    def _handle(
        self, events: list[AckerEvent], rt: dict[int, float] | None = None, skip: int = 0
    ) -> None:
        for ev in events:
            if ev.root == skip:
                continue
            job = self._jobs.pop(ev.root)
            if ev.kind is AckerEventKind.COMPLETE:
                self._complete(job, (rt or {}).get(ev.root))
            else:
                self._retry(job, timed_out=ev.kind is AckerEventKind.TIMED_OUT)

    def _complete(self, job: _Job, rt: float | None = None) -> None:
        now = self.clock.now()
        tid = job.tuple.id
        rt = now - job.sent_at if rt is None else rt
        if self._dispatcher is not None:
            self._dispatcher.on_ack(tid, rt)
            w = self._dispatcher.windows[job.lane]
            if w.rounds > self._last_rounds[job.lane]:
                self._last_rounds[job.lane] = w.rounds
                if self._saturated():
                    self._round_windows[job.lane].append(w.size)
        else:
            self._static_in_flight[job.lane] -= 1
        self._rts.append(rt)
        self._lanes[job.lane].completed += 1
        self._ledger.processed(tid)
        self._ledger.durable(tid)
        latency = now - self._available_at.pop(tid)
        self._latencies.append(latency)
        self._metrics.acked(1, records=job.tuple.size, latencies=[latency])

    def _retry(self, job: _Job, *, timed_out: bool) -> None:
        tid = job.tuple.id
        self._ledger.failed(tid)
        if timed_out:
            self._timed_out += 1
            self._metrics.timed_out(1)
        else:
            self._failed += 1
            self._metrics.failed(1)
        if self._dispatcher is not None:
            if timed_out:
                self._dispatcher.on_timeout(tid)
            else:
                self._dispatcher.on_fail(tid)
        else:  # static partitioning: same lane again, first in its queue
            self._static_in_flight[job.lane] -= 1
            self._static_queues[job.lane].appendleft(job.tuple)
        self._metrics.replayed(1)

    def _saturated(self) -> bool:
        """The source had tuples waiting: windows, not the workload, limited the lanes."""
        d = self._dispatcher
        pending = self._batcher.pending_records(self._latest())
        return pending > 0 or (d is not None and d.buffered > 0)

    # -- observation -----------------------------------------------------
    def _trace_windows(self) -> None:
        if self._dispatcher is None:
            return
        now = self.clock.now()
        for w in self._dispatcher.windows:
            trace = self._traces[w.lane]
            if not trace or trace[-1][1] != w.size:
                trace.append((now, w.size))

    def _collect_rows(self) -> None:
        for row in self._metrics.roll():
            self._rows.append((row.window_end, row.records_per_s))

    def _result(self, finished_at: float) -> SimResult:
        cfg = self.cfg
        records = self._ledger.checkpoint()[TP]
        lanes = []
        for i, lane in enumerate(self._lanes):
            rounds = tuple(self._round_windows[i])
            trace = list(self._traces[i])
            if trace and math.isfinite(finished_at):
                trace.append((finished_at, trace[-1][1]))
            lanes.append(
                LaneResult(
                    lane=i,
                    completed=lane.completed,
                    window_trace=tuple(trace),
                    round_windows=rounds,
                    settle_round=settle_round(rounds) if self._windowed else None,
                    steady_band=steady_band(rounds) if rounds else None,
                )
            )
        settles = [lr.settle_round for lr in lanes]
        settle = None if not self._windowed or None in settles else max(settles)  # type: ignore[type-var]
        makespan = finished_at if math.isfinite(finished_at) else self.clock.now()
        return SimResult(
            scenario=cfg.name,
            policy=self.policy,
            tuples=cfg.tuples,
            records=records,
            makespan_s=makespan,
            throughput_rps=records / makespan if makespan > 0 else 0.0,
            rt_p50_s=percentile(self._rts, 50),
            rt_p99_s=percentile(self._rts, 99),
            latency_p50_s=percentile(self._latencies, 50),
            latency_p99_s=percentile(self._latencies, 99),
            failed=self._failed,
            timed_out=self._timed_out,
            wasted=self._wasted,
            settle_rounds=settle,
            lanes=tuple(lanes),
            throughput_series=tuple(self._rows),
        )


def simulate(config: SimConfig, policy: str) -> SimResult:
    """Run ``config`` under ``policy`` (one of :data:`flowctl.sim.model.POLICIES`)."""
    return Simulation(config, policy).run()
