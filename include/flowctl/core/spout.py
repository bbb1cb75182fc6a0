"""The spout: admission, dispatch and feedback of one flow-controlled topology (SPEC A, B, D).

This is the driver-side brain of the flow-controlled source (docs/flow-control.md), as a
pure state machine: the Spark adapter (:mod:`flowctl.spark.flow`) feeds it the log's end
offsets and the lanes' feedback and turns its :class:`Dispatch` list into one
InputPartition per lane. It combines the core pieces:

* tuples are cut *aligned* (tuple ``k`` of a partition is ``[k*tuple_size,
  (k+1)*tuple_size)``), so a restarted or green topology cuts exactly the same tuples and
  ``applied_ranges`` recognises a repeat; a trailing partial tuple is admitted once its
  oldest record has waited ``linger_s`` (otherwise a steady trickle would cut
  one-record tuples);
* one :class:`~flowctl.core.window.AdaptiveWindow` per lane decides how many tuples the
  lane may hold; a :class:`~flowctl.core.dispatch.DispatchPolicy` (``round_robin`` or
  ``least_loaded``) picks the lane of each tuple;
* every dispatched tuple is a tree root in the :class:`~flowctl.core.acker.XorAcker`: the
  lane acks the edge it was given; an entry that expires is a timeout (SPEC B);
* the :class:`~flowctl.core.checkpoint.AckLedger` keeps processed vs durable per Eden
  tuple (the durable view comes from the database's checkpoint, read by the adapter);
* the :class:`~flowctl.core.replay.ReplayStateMachine` decides when the To replay topic is
  read (before Eden) and when To and From swap (SPEC D); the spout's side of it (reading
  To, committing replayed records once durable) is :mod:`flowctl.core.spout_replay`.

Two kinds of fail take two paths here: a lane of this platform resolves most failures
itself (the tuple's records go to the From replay topic, SPEC D), so such a fail shrinks
the window (BUSY) *without* requeueing the tuple; only a tuple with no outcome at all (a
lane that could not read or store it, or an acker timeout) goes back to the front of the
buffer for a different lane.

Order of work (the adapter, once per micro-batch): :meth:`Spout.on_lane_results` per lane
report, :meth:`Spout.durable` / :meth:`Spout.confirm_replays` with what the database says
is durable, then :meth:`Spout.plan`. Time comes from the injected clock (monotonic: rt,
linger, acker timeouts); replay eligibility uses ``now_epoch`` passed in, because
``not_before`` of an envelope is wall-clock time written by another process.
"""

from __future__ import annotations

import dataclasses
import logging
import random
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .acker import AckerEventKind, XorAcker
from .checkpoint import AckLedger, CheckpointError, ContiguousAck
from .clock import Clock
from .dispatch import LaneLoad, make_policy
from .eden_cursor import EdenCursor, aligned
from .replay import ReplaySnapshot, ReplayStateMachine, replay_quota
from .rtt import RttEstimator
from .spout_contract import (
    COUNTERS,
    NOT_LOAD,
    ROUTED,
    Dispatch,
    LaneResult,
    Outcome,
    ReportSummary,
    SpoutConfig,
)
from .spout_handover import SpoutHandover
from .spout_replay import SpoutReplay
from .tuples import TopicPartition, TupleRange
from .window import AdaptiveWindow, LaneState

__all__ = ["OffsetsBeyondLog", "Spout"]

_log = logging.getLogger(__name__)


class OffsetsBeyondLog(ValueError):
    """A partition's position is past the log's end: the broker's log was reset."""


@dataclass
class _Flight:
    dispatch: Dispatch
    root: int


class Spout(SpoutReplay, SpoutHandover):
    """One topology's admission and dispatch state (see the module docstring).

    :param positions: per Eden partition, the first offset never cut (on a start: the end
        of what is durable, so everything not durable is cut again).
    :param gaps: ranges to dispatch before new data (holes between durable ranges).
    :param checkpoints: the durable checkpoint per Eden partition (the ledger's base).
    :param replay: the durable replay pointer and positions (``None``: a first run).
    """

    def __init__(
        self,
        config: SpoutConfig,
        clock: Clock,
        *,
        positions: Mapping[TopicPartition, int] | None = None,
        gaps: Iterable[TupleRange] = (),
        checkpoints: Mapping[TopicPartition, int] | None = None,
        replay: ReplaySnapshot | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self._clock = clock
        self._windows = [
            AdaptiveWindow(
                lane,
                clock,
                w_min=config.w_min,
                w_max=config.w_max,
                w_init=config.w_init,
                rtt=self._estimator(),
                slow_decrease=config.slow_decrease,
                growth=config.growth,
            )
            for lane in range(config.lanes)
        ]
        self._policy = make_policy(config.policy)
        self._rates: list[float | None] = [None] * config.lanes
        self._acker = XorAcker(clock, timeout_s=config.tuple_timeout_s, rng=rng)
        self._flights: dict[str, _Flight] = {}
        self._retry: deque[tuple[TupleRange, int]] = deque()
        self._gaps: deque[TupleRange] = deque()
        for g in gaps:
            self._gaps.extend(aligned(g.topic_partition, g.start, g.end, config.tuple_size))
        self._eden = EdenCursor(config.tuple_size, config.linger_s, positions or {})
        self._ledger = AckLedger(checkpoints or {})
        self._open: dict[str, TupleRange] = {}
        self._replay = ReplayStateMachine(config.pipeline, snapshot=replay)
        self._replay_acks: dict[tuple[str, int], ContiguousAck] = {}
        self._replay_unconfirmed: dict[str, tuple[str, int]] = {}
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.latencies: list[float] = []

    def _estimator(self) -> RttEstimator:
        if self.config.rtt_threshold_s is not None:
            return RttEstimator(fixed_threshold=self.config.rtt_threshold_s)
        return RttEstimator(min_threshold=self.config.rtt_min_threshold_s)

    # -- read side ---------------------------------------------------------------------------

    @property
    def windows(self) -> list[AdaptiveWindow]:
        return list(self._windows)

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    @property
    def buffered(self) -> int:
        """Tuples waiting for a lane: retries and gaps (fresh data stays in the log)."""
        return len(self._retry) + len(self._gaps)

    @property
    def outstanding(self) -> int:
        """Admitted and not yet processed: the process stage's queue (SPEC C2)."""
        return self.in_flight + self.buffered

    @property
    def replay(self) -> ReplayStateMachine:
        return self._replay

    def total_free(self) -> int:
        return sum(w.free_slots for w in self._windows)

    def positions(self) -> dict[TopicPartition, int]:
        """Next Eden offset to cut, per partition."""
        return self._eden.positions()

    def backlog(self, latest: Mapping[TopicPartition, int]) -> int:
        """Records in Eden not yet cut, plus the records of buffered tuples."""
        waiting = self._eden.waiting(latest)
        return waiting + sum(t.size for t, _ in self._retry) + sum(t.size for t in self._gaps)

    def at_risk(self) -> int:
        """Processed but not yet durable Eden tuples (what a crash now would repeat)."""
        return len(self._ledger.at_risk())

    def lane_gauges(self) -> list[dict[str, object]]:
        """Per lane: window, state, in flight, rt threshold and measured rate (metrics)."""
        out = []
        for w in self._windows:
            srtt, rate = w.rtt.srtt, self._rates[w.lane]
            out.append(
                {
                    "lane": w.lane,
                    "window": w.size,
                    "state": str(w.state),
                    "in_flight": w.in_flight,
                    "srtt_s": None if srtt is None else round(srtt, 4),
                    "threshold_s": round(w.rtt.threshold(), 4),
                    "rate": None if rate is None else round(rate, 3),
                }
            )
        return out

    # -- feedback ----------------------------------------------------------------------------

    def on_lane_results(self, lane: int, results: Sequence[LaneResult]) -> ReportSummary:
        """Apply one lane's report of a micro-batch; unknown or foreign tuple ids are stale."""
        if (
            isinstance(lane, bool)
            or not isinstance(lane, int)
            or not 0 <= lane < len(self._windows)
        ):
            raise ValueError(f"Spout.on_lane_results: lane must be in 0..{len(self._windows) - 1}")
        summary = ReportSummary(lane)
        holds: dict[tuple[str, int], tuple[int, float]] = {}
        # What the lane served within its time budget, and when the last of it was acked.
        served = [r.rt for r in results if r.outcome in NOT_LOAD]
        served_rt = max((rt for rt in served if rt is not None), default=None)
        for r in results:
            flight = self._flights.get(r.tuple_id)
            if flight is None or flight.dispatch.lane != lane:
                summary.stale += 1
                continue
            if r.error:
                summary.errors.append(f"{r.tuple_id}: {r.error}")
            if r.outcome is Outcome.FAILED:
                self._fail(r.tuple_id, timeout=False)
                summary.failed += 1
                summary.requeued += 1
                continue
            if r.outcome is Outcome.RETURNED:
                self._fail(r.tuple_id, timeout=False, served=(len(served), served_rt))
                summary.returned += 1
                summary.requeued += 1
                continue
            del self._flights[r.tuple_id]
            for event in self._acker.ack(flight.root, r.xor):
                self._on_acker_event(event.kind, event.root)
            t = flight.dispatch.tuple
            if r.outcome is Outcome.HELD:
                self._forget(self._windows[lane], r.tuple_id)
                self.counters["held"] += 1
                summary.held += 1
                key = (t.topic, t.partition)
                nb = r.not_before if r.not_before is not None else 0.0
                if key not in holds or t.start < holds[key][0]:
                    holds[key] = (t.start, nb)
                continue
            self._count_outcome(lane, r, summary)
            if r.outcome in ROUTED:
                routed = r.routed_records or t.size
                dead = min(routed, r.dead_records)
                self.counters["dlq"] += dead
                self.counters["replayed"] += routed - dead
                if flight.dispatch.replay and r.outcome is not Outcome.POISON:
                    self.counters["repeat_failures"] += 1  # failing again: poison, not load
            self._settle(flight.dispatch, r)
        for (topic, partition), (offset, nb) in holds.items():
            try:
                self._replay.hold(topic, partition, offset, nb)
            except ValueError as exc:  # the position moved on (a later batch): read it then
                _log.warning("replay hold of %s[%d]@%d ignored: %s", topic, partition, offset, exc)
        return summary

    def _count_outcome(self, lane: int, r: LaneResult, summary: ReportSummary) -> None:
        """The lane's window, rate and the counters for one resolved (not held) tuple."""
        window = self._windows[lane]
        if r.outcome in NOT_LOAD:
            outcome = window.on_ack(r.tuple_id, r.rt)
            if outcome is not None and outcome.rt > 0:
                sample = (outcome.ahead + 1) / outcome.rt
                old = self._rates[lane]
                self._rates[lane] = sample if old is None else 0.8 * old + 0.2 * sample
        if r.outcome is Outcome.ACKED:
            # ``records`` counts the good records; an isolated tuple's poison records
            # went to the DLQ (``dead_records``), and its transient ones are not here:
            # a tuple with any is REPLAYED or TIMED_OUT.
            self.counters["acked"] += 1
            self.counters["records"] += r.records
            self.counters["dlq"] += r.dead_records
            self.latencies.extend(r.latencies)
            summary.acked += 1
        elif r.outcome is Outcome.POISON:
            summary.poison += 1
        elif r.outcome is Outcome.TIMED_OUT:
            window.on_timeout(r.tuple_id)
            self._halve_rate(lane)
            self.counters["timed_out"] += 1
            summary.timed_out += 1
        else:  # REPLAYED or DLQ: an explicit fail, resolved by the lane
            window.on_fail(r.tuple_id)
            self._halve_rate(lane)
            self.counters["failed"] += 1
            summary.failed += 1

    def _settle(self, dispatch: Dispatch, r: LaneResult) -> None:
        """An Eden tuple is processed; a replayed record's offset is committable once durable."""
        if not dispatch.replay:
            self._processed(r.tuple_id)
        elif r.outcome is not Outcome.ACKED or r.mrwq_seq is None:
            self._replay_durable(dispatch.tuple)
        else:
            self._replay_unconfirmed[r.tuple_id] = (r.mrwq_epoch or "", r.mrwq_seq or 0)

    def expire(self) -> list[TupleRange]:
        """Tuples whose acker entry expired (no lane reported them): timed out, requeued."""
        expired = []
        for event in self._acker.expire():
            t = self._on_acker_event(event.kind, event.root)
            if t is not None:
                expired.append(t)
        return expired

    def durable(self, checkpoints: Mapping[TopicPartition, int]) -> int:
        """The database's durable checkpoint per Eden partition: close the ledger below it."""
        closed = 0
        for tid, t in sorted(self._open.items(), key=lambda kv: kv[1]):
            cp = checkpoints.get(t.topic_partition)
            if cp is None or t.end > cp:
                continue
            try:
                self._ledger.durable(tid)
            except CheckpointError as exc:  # the ledger is a view; never stop admission for it
                _log.debug("ledger: %s", exc)
            del self._open[tid]
            closed += 1
        return closed

    # -- admission and dispatch --------------------------------------------------------------

    def plan(
        self,
        latest: Mapping[TopicPartition, int],
        replay_ends: Mapping[tuple[str, int], int],
        now_epoch: float,
        *,
        budget: int | None = None,
    ) -> list[Dispatch]:
        """This micro-batch's dispatches: retries, then To (its share of the room while Eden
        has input, :func:`~flowctl.core.replay.replay_quota`), then gaps, then fresh Eden.

        ``latest`` are Eden's end offsets, ``replay_ends`` the end offsets of both replay
        topics' partitions (From's decide whether a swap is worth it), ``budget`` an upper
        bound on the tuples admitted (the source's backpressure rate); the lanes' free
        window slots bound it anyway.
        """
        for tp, end in latest.items():
            pos = self._eden.position(tp)
            if pos is not None and pos > end:
                raise OffsetsBeyondLog(
                    f"partition {tp[1]}: start offset {pos} is past the log end {end} "
                    f"(was the broker's log reset?)"
                )
        self.expire()
        now = self._clock.now()
        out: list[Dispatch] = []
        room = self.total_free() if budget is None else min(budget, self.total_free())
        # 1. retries, each to another lane than the one that failed it
        self._plan_retries(out, room)
        # 2. the To replay topic before Eden (SPEC D), its share of the room while Eden has
        # input (replay_quota)
        eden_demand = len(self._gaps) + self._eden.demand(latest, now)
        left = replay_quota(room - len(out), eden_demand, self.config.replay_share)
        from_topic = self._plan_replays(out, left, replay_ends, now_epoch)
        # 3. gaps (admitted before a crash or lost with the MRWQ), then 4. fresh tuples
        while self._gaps and len(out) < room:
            lane = self._choose(None)
            if lane is None:
                break
            t = self._gaps.popleft()
            self._admit(t)
            out.append(self._send(t, lane, replay=False, from_topic=from_topic))
            self.counters["gaps_admitted"] += 1
        fresh = self._eden.cut(latest, now, room - len(out))
        for t in fresh:
            lane = self._choose(None)
            if lane is None:  # cannot happen: the cut is bounded by the free slots
                raise RuntimeError(f"spout: no lane free for {t.id}")
            self._admit(t)
            out.append(self._send(t, lane, replay=False, from_topic=from_topic))
        self.counters["admitted"] += len(out)
        return out

    def _plan_retries(self, out: list[Dispatch], room: int) -> None:
        """Requeued tuples first, each to another lane than the one that failed it."""
        from_topic = self._replay.from_topic
        waiting: deque[tuple[TupleRange, int]] = deque()
        while self._retry and len(out) < room:
            t, avoid = self._retry.popleft()
            lane = self._choose(avoid)
            if lane is None:
                waiting.append((t, avoid))
                continue
            out.append(self._send(t, lane, replay=self._is_replay(t), from_topic=from_topic))
        waiting.extend(self._retry)
        self._retry = waiting

    # -- internals ---------------------------------------------------------------------------

    def _admit(self, t: TupleRange) -> None:
        try:
            self._ledger.admit(t)
            self._open[t.id] = t
        except CheckpointError as exc:  # below the checkpoint: durable already, still harmless
            _log.debug("ledger: %s", exc)

    def _processed(self, tuple_id: str) -> None:
        if tuple_id in self._open:
            self._ledger.processed(tuple_id)

    def _choose(self, avoid: int | None) -> int | None:
        if len(self._windows) == 1:
            avoid = None  # a single lane takes its own retries
        rates = self._rates
        candidates = []
        for w in self._windows:
            free = w.free_slots
            if free > 0 and w.lane != avoid:
                candidates.append(LaneLoad(w.lane, free, w.in_flight, rates[w.lane]))
        if not candidates:
            return None
        return self._policy.choose(candidates, len(self._windows))

    def _send(self, t: TupleRange, lane: int, *, replay: bool, from_topic: str) -> Dispatch:
        if t.id in self._flights:
            raise ValueError(f"spout: tuple {t.id} is already in flight")
        self._windows[lane].on_send(t.id)
        root, edge = self._acker.new_root(), self._acker.new_id()
        for event in self._acker.ack_init(root, edge, source_task=t.id):
            self._on_acker_event(event.kind, event.root)
        d = Dispatch(lane, t, edge, replay, from_topic)
        self._flights[t.id] = _Flight(d, root)
        return d

    def _root_index(self, root: int) -> str | None:
        for tid, f in self._flights.items():
            if f.root == root:
                return tid
        return None

    def _on_acker_event(self, kind: AckerEventKind, root: int) -> TupleRange | None:
        if kind is not AckerEventKind.TIMED_OUT:
            return None  # COMPLETE and FAILED are applied where the lane's report is
        tid = self._root_index(root)
        if tid is None:
            return None
        return self._fail(tid, timeout=True)

    def _fail(
        self, tuple_id: str, *, timeout: bool, served: tuple[int, float | None] | None = None
    ) -> TupleRange | None:
        """Requeue a tuple for another lane: timed out, failed, or (``served`` given)
        returned unprocessed by a lane whose time budget ran out after ``served`` tuples."""
        flight = self._flights.pop(tuple_id, None)
        if flight is None:
            return None
        lane = flight.dispatch.lane
        window = self._windows[lane]
        if timeout:
            window.on_timeout(tuple_id)
            self.counters["timed_out"] += 1
        else:
            if served is None:
                window.on_fail(tuple_id)
                self.counters["failed"] += 1
            else:  # not a failure: no work lost, the lane was out of time (no rate cut)
                window.on_return(tuple_id, served[0], served[1])
                self.counters["returned"] += 1
            for event in self._acker.fail(flight.root):
                if event.root != flight.root:
                    self._on_acker_event(event.kind, event.root)
        if served is None:
            self._halve_rate(lane)
        t = flight.dispatch.tuple
        self._retry.append((t, lane))
        self.counters["requeued"] += 1
        if t.id in self._open:
            self._ledger.failed(t.id)
        return t

    def _halve_rate(self, lane: int) -> None:
        rate = self._rates[lane]
        if rate is not None:
            self._rates[lane] = rate / 2

    def _forget(self, window: AdaptiveWindow, tuple_id: str) -> None:
        """Take a tuple out of a window without judging the lane (a held replay record)."""
        snap = window.snapshot()
        kept = tuple(f for f in snap.in_flight if f.tuple_id != tuple_id)
        rebuilt = AdaptiveWindow.from_snapshot(
            dataclasses.replace(snap, in_flight=kept), self._clock
        )
        self._windows[window.lane] = rebuilt

    def state_of(self, lane: int) -> LaneState:
        return self._windows[lane].state
