"""The discrete-event engine: one source, P lanes, built on the real core modules.

The source of the windowed policies (``round_robin``, ``least_loaded``) is the
production planner's pure core, :class:`~flowctl.core.spout.Spout`, driven through
:class:`~flowctl.sim.sources.SpoutSource`; the baseline ``equal_split`` is
:class:`~flowctl.sim.sources.StaticSplit` (see :mod:`flowctl.sim.sources` for both, and
for what of the Spark source the simulation leaves out). Around the source the engine
keeps the simulated database (an :class:`~flowctl.core.checkpoint.AckLedger`: a tuple is
durable once acked) and a :class:`~flowctl.core.metrics.MetricsWindow` per window.

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
  unfinished tuples have no outcome and are requeued). Outcomes, with each tuple's
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

from flowctl.core.checkpoint import AckLedger
from flowctl.core.clock import FakeClock
from flowctl.core.metrics import MetricsWindow, percentile
from flowctl.core.tuples import TopicPartition, TupleRange

from .model import POLICIES, SimConfig
from .settle import settle_round, steady_band
from .sources import TP, Job, Reply, Source, SpoutSource, StaticSplit

#: Acker expiry and metrics rows are checked this many times per ``timeout_s``.
TICKS_PER_TIMEOUT = 5


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


class _Lane:
    """A FIFO single server."""

    def __init__(self, index: int, seed: int) -> None:
        self.index = index
        self.rng = random.Random(seed * 1_000_003 + index)
        self.queue: deque[Job] = deque()
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
        self._source: Source = (
            SpoutSource(config, self.clock, policy)
            if self._windowed
            else StaticSplit(config, self.clock)
        )
        self._microbatch = config.mode == "microbatch"
        self._ledger = AckLedger({TP: 0})
        self._metrics = MetricsWindow(f"sim-{policy}", self.clock, window_s=config.metrics_window_s)
        self._available_at: dict[str, float] = {}
        self._rts: list[float] = []
        self._latencies: list[float] = []
        self._failed = 0
        self._timed_out = 0
        self._wasted = 0
        self._last_rounds = [0 for _ in self._lanes]
        self._batch_open: dict[int, Job] = {}  # tokens of the running micro-batch
        self._batch_replies: list[tuple[float, Job, bool]] = []
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

    def _arrival_time(self, t: TupleRange) -> float:
        if self.cfg.arrival_tps is None:
            return 0.0
        return (t.end // self.cfg.tuple_size) / self.cfg.arrival_tps

    def _pump(self) -> list[Job]:
        """Time out what the acker gave up on, then send what the lanes may take now."""
        for job in self._source.expire():
            self._lost(job, timed_out=True)
        jobs = self._source.send(self._latest())
        for job in jobs:
            t = job.tuple
            self._ledger.admit(t)  # a retried tuple is admitted already: no change
            if t.id not in self._available_at:
                self._available_at[t.id] = self._arrival_time(t)
                self._metrics.admitted(1)
            self._schedule(self.clock.now() + self.cfg.link_delay_s, "arrive", job)
        return jobs

    # -- the lanes -------------------------------------------------------
    def _on_arrive(self, job: Job) -> None:
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
        if job.token in self._abandoned:  # its batch gave up on it: wasted work
            self._abandoned.discard(job.token)
            self._wasted += 1
            return
        self._batch_replies.append((now, job, ok))
        self._batch_open.pop(job.token, None)
        if not self._batch_open:
            self._schedule(now + self.cfg.link_delay_s, "batch_end", self._batch_no)

    # -- micro-batches ---------------------------------------------------
    def _on_batch_start(self, _: object) -> None:
        self._batch_no += 1
        self._batch_open = {job.token: job for job in self._pump()}
        if self._batch_open:
            self._schedule(self.clock.now() + self.cfg.timeout_s, "batch_end", self._batch_no)
        else:  # nothing to do yet (open workload): poll again after the overhead
            self._schedule(self.clock.now() + self.cfg.batch_overhead_s, "batch_start", None)

    def _on_batch_end(self, batch_no: int) -> None:
        if batch_no != self._batch_no or (not self._batch_open and not self._batch_replies):
            return  # a stale end (the batch already ended the other way)
        replies, self._batch_replies = sorted(self._batch_replies, key=lambda r: r[0]), []
        for done_at, job, ok in replies:
            self._outcome(job, ok, done_at - job.sent_at)
        for token in sorted(self._batch_open):  # the lane did not finish in time
            job = self._batch_open[token]
            self._abandoned.add(token)
            if self._source.report(job, Reply.NO_OUTCOME, self.clock.now() - job.sent_at):
                self._lost(job, timed_out=True)
        self._batch_open = {}
        self._batch_no += 1  # invalidates the other scheduled end of this batch
        self._schedule(self.clock.now() + self.cfg.batch_overhead_s, "batch_start", None)

    def _on_reply(self, payload: tuple[Job, bool]) -> None:
        job, ok = payload
        self._outcome(job, ok, self.clock.now() - job.sent_at)

    def _on_tick(self, _: object) -> None:
        for job in self._source.expire():
            self._lost(job, timed_out=True)
        self._collect_rows()
        self._schedule(self.clock.now() + self.cfg.timeout_s / TICKS_PER_TIMEOUT, "tick", None)

    def _on_arrival(self, _: object) -> None:
        arrived = self._latest()[TP] // self.cfg.tuple_size
        if arrived < self.cfg.tuples:
            self._schedule((arrived + 1) / (self.cfg.arrival_tps or 1.0), "arrival", None)

    # -- outcomes --------------------------------------------------------
    def _outcome(self, job: Job, ok: bool, rt: float) -> None:
        """A lane's answer reached the source; an answer the source no longer waits for
        (the dispatch timed out) is wasted work when it was an ack."""
        current = self._source.report(job, Reply.ACKED if ok else Reply.FAILED, rt)
        if ok and current:
            self._complete(job, rt)
        elif ok:
            self._wasted += 1
        elif current:
            self._lost(job, timed_out=False)

    def _complete(self, job: Job, rt: float) -> None:
        now = self.clock.now()
        tid = job.tuple.id
        if self._windowed:
            w = self._source.windows[job.lane]
            if w.rounds > self._last_rounds[job.lane]:
                self._last_rounds[job.lane] = w.rounds
                if self._saturated():
                    self._round_windows[job.lane].append(w.size)
        self._rts.append(rt)
        self._lanes[job.lane].completed += 1
        self._ledger.processed(tid)
        self._ledger.durable(tid)
        self._source.durable(self._ledger.checkpoint()[TP])
        latency = now - self._available_at.pop(tid)
        self._latencies.append(latency)
        self._metrics.acked(1, records=job.tuple.size, latencies=[latency])

    def _lost(self, job: Job, *, timed_out: bool) -> None:
        """The source requeued the tuple (another lane for the spout, the same lane for the
        baseline)."""
        self._ledger.failed(job.tuple.id)
        if timed_out:
            self._timed_out += 1
            self._metrics.timed_out(1)
        else:
            self._failed += 1
            self._metrics.failed(1)
        self._metrics.replayed(1)

    def _saturated(self) -> bool:
        """The source had tuples waiting: windows, not the workload, limited the lanes."""
        return self._source.waiting(self._latest()) > 0

    # -- observation -----------------------------------------------------
    def _trace_windows(self) -> None:
        now = self.clock.now()
        for w in self._source.windows:
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
        settle = (
            None
            if not self._windowed or None in settles
            else max(s for s in settles if s is not None)
        )
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
