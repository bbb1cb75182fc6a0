"""The two sources a simulation can run: the production spout, and the equal-split baseline.

:class:`SpoutSource` drives :class:`flowctl.core.spout.Spout`, the pure core of the flow
planner that the Spark source runs (``flowctl.spark.flow``): the spout cuts aligned
tuples, keeps one :class:`~flowctl.core.window.AdaptiveWindow` per lane, picks lanes with
the dispatch policy, tracks each dispatch in its XOR acker and requeues a tuple with no
outcome to another lane. What the simulator does not model of the production source:
the replay topics (a lane's outcome is acked or "no outcome", never a record routed to
From or the DLQ), the database (a tuple is durable when acked) and backpressure (no
admission budget).

:class:`StaticSplit` is the baseline the spout is compared with, modelled here and
nowhere else in the platform: tuple ``k`` belongs to lane ``k mod P`` (static hash
partitioning, the seed's old system), each lane has a fixed cap of ``w_init`` tuples in
flight (like Storm's ``max.spout.pending``), no adaptation, and a failed or timed-out
tuple is retried on its own lane. It times tuples out with the same
:class:`~flowctl.core.acker.XorAcker` as the spout.

Both speak the same small protocol to the engine: :meth:`send` the tuples the lanes may
take now, :meth:`report` one lane's outcome of one dispatch (``False``: the dispatch is
no longer current, its work is wasted), :meth:`expire` the dispatches whose acker entry
timed out, and hear of :meth:`durable` progress; :meth:`waiting` says whether the source
had tuples waiting (then the windows, not the workload, limited the lanes).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from flowctl.core.acker import AckerEvent, AckerEventKind, XorAcker
from flowctl.core.clock import Clock
from flowctl.core.spout import Spout
from flowctl.core.spout_contract import LaneResult, Outcome, SpoutConfig
from flowctl.core.tuples import TopicPartition, TupleRange
from flowctl.core.window import AdaptiveWindow

from .model import SimConfig

#: The simulated Eden topic: one partition, tuples of ``tuple_size`` records.
TP = TopicPartition("sim.eden", 0)


class Reply(StrEnum):
    """What reached the source about one dispatch."""

    ACKED = "acked"
    FAILED = "failed"  # the lane failed the tuple
    NO_OUTCOME = "no_outcome"  # the batch ended before the lane finished it


@dataclass
class Job:
    """One dispatch of one tuple to one lane (a tuple dispatched again is a new job)."""

    tuple: TupleRange
    lane: int
    token: int  # the acker edge (spout) or root (baseline): unique per dispatch
    sent_at: float


class Source(Protocol):
    """What the engine asks of a source (see the module docstring)."""

    def send(self, latest: dict[TopicPartition, int]) -> list[Job]: ...

    def report(self, job: Job, reply: Reply, rt: float) -> bool: ...

    def expire(self) -> list[Job]: ...

    def durable(self, checkpoint: int) -> None: ...

    def waiting(self, latest: dict[TopicPartition, int]) -> int: ...

    @property
    def windows(self) -> list[AdaptiveWindow]: ...


def acker_timeout_s(config: SimConfig) -> float:
    """In micro-batch mode the batch timeout answers first; the acker is the backstop."""
    return config.timeout_s * (2 if config.mode == "microbatch" else 1)


class SpoutSource:
    """The windowed policies: the production :class:`~flowctl.core.spout.Spout`."""

    def __init__(self, config: SimConfig, clock: Clock, policy: str) -> None:
        self._clock = clock
        self.spout = Spout(
            SpoutConfig(
                pipeline="sim",
                lanes=len(config.lanes),
                tuple_size=config.tuple_size,
                w_min=config.w_min,
                w_max=config.w_max,
                w_init=config.w_init,
                rtt_threshold_s=config.threshold,
                rtt_min_threshold_s=config.min_threshold,
                policy=policy,
                tuple_timeout_s=acker_timeout_s(config),
                linger_s=0.0,  # tuples arrive whole: there is no partial tuple to wait for
            ),
            clock,
            checkpoints={TP: 0},
            rng=random.Random(config.seed),
        )
        self._current: dict[str, Job] = {}
        self._expired: list[Job] = []
        self._durable = 0

    @property
    def windows(self) -> list[AdaptiveWindow]:
        return self.spout.windows

    def send(self, latest: dict[TopicPartition, int]) -> list[Job]:
        self._collect_timeouts()
        now = self._clock.now()
        jobs = []
        for d in self.spout.plan(latest, {}, now):  # no replay topics: nothing to read there
            job = Job(d.tuple, d.lane, d.edge, now)
            self._current[d.tuple.id] = job
            jobs.append(job)
        return jobs

    def report(self, job: Job, reply: Reply, rt: float) -> bool:
        self._collect_timeouts()
        tid = job.tuple.id
        if self._current.get(tid) is not job:
            return False
        del self._current[tid]
        if reply is Reply.ACKED:
            result = LaneResult(tid, Outcome.ACKED, xor=job.token, rt=rt, records=job.tuple.size)
        else:  # no stored outcome: the spout requeues the tuple for another lane
            result = LaneResult(tid, Outcome.FAILED)
        summary = self.spout.on_lane_results(job.lane, [result])
        return summary.stale == 0

    def durable(self, checkpoint: int) -> None:
        """What the simulated database holds: the spout closes its ledger below it."""
        if checkpoint > self._durable:
            self._durable = checkpoint
            self.spout.durable({TP: checkpoint})

    def expire(self) -> list[Job]:
        self._collect_timeouts()
        out, self._expired = self._expired, []
        return out

    def _collect_timeouts(self) -> None:
        """Take the acker's timeouts before any other spout call at this instant, so the
        spout never times a dispatch out unseen (it rotates its acker on every call)."""
        for t in self.spout.expire():
            job = self._current.pop(t.id, None)
            if job is not None:
                self._expired.append(job)

    def waiting(self, latest: dict[TopicPartition, int]) -> int:
        return self.spout.backlog(latest)


class StaticSplit:
    """The baseline: tuple ``k`` to lane ``k mod P``, ``w_init`` in flight per lane."""

    def __init__(self, config: SimConfig, clock: Clock) -> None:
        self._clock = clock
        self._cap = config.w_init
        self._tuple_size = config.tuple_size
        self._acker = XorAcker(
            clock, timeout_s=acker_timeout_s(config), rng=random.Random(config.seed)
        )
        self._queues: list[deque[TupleRange]] = [deque() for _ in config.lanes]
        self._in_flight = [0] * len(config.lanes)
        self._cut = 0  # tuples cut so far
        self._jobs: dict[int, tuple[Job, int]] = {}  # root -> (job, edge)
        self._expired: list[Job] = []  # timed out on a send, reported by the next expire()

    @property
    def windows(self) -> list[AdaptiveWindow]:
        return []

    def send(self, latest: dict[TopicPartition, int]) -> list[Job]:
        self._collect_timeouts()
        size, lanes = self._tuple_size, len(self._queues)
        while (self._cut + 1) * size <= latest[TP]:
            k = self._cut
            t = TupleRange(TP.topic, TP.partition, k * size, (k + 1) * size)
            self._queues[k % lanes].append(t)
            self._cut += 1
        jobs = []
        for lane, queue in enumerate(self._queues):
            while queue and self._in_flight[lane] < self._cap:
                jobs.append(self._send(queue.popleft(), lane))
        return jobs

    def _send(self, t: TupleRange, lane: int) -> Job:
        root, edge = self._acker.new_root(), self._acker.new_id()
        self._timed_out(self._acker.ack_init(root, edge, source_task=lane))
        self._in_flight[lane] += 1
        job = Job(t, lane, root, self._clock.now())
        self._jobs[root] = (job, edge)
        return job

    def report(self, job: Job, reply: Reply, rt: float) -> bool:
        self._collect_timeouts()
        entry = self._jobs.get(job.token)
        if entry is None:
            return False
        if reply is Reply.ACKED:
            events = self._acker.ack(job.token, entry[1])
            self._timed_out(events)
            if not any(e.kind is AckerEventKind.COMPLETE for e in events):
                return False
            del self._jobs[job.token]
            self._in_flight[job.lane] -= 1
        else:
            self._timed_out(self._acker.fail(job.token))
            self._give_up(job.token)
        return True

    def expire(self) -> list[Job]:
        self._collect_timeouts()
        out, self._expired = self._expired, []
        return out

    def _collect_timeouts(self) -> None:
        self._timed_out(self._acker.expire())

    def _timed_out(self, events: list[AckerEvent]) -> None:
        for event in events:
            if event.kind is AckerEventKind.TIMED_OUT:
                job = self._give_up(event.root)
                if job is not None:
                    self._expired.append(job)

    def _give_up(self, root: int) -> Job | None:
        """Same lane again, first in its queue."""
        entry = self._jobs.pop(root, None)
        if entry is None:
            return None
        job = entry[0]
        self._in_flight[job.lane] -= 1
        self._queues[job.lane].appendleft(job.tuple)
        return job

    def durable(self, checkpoint: int) -> None:
        """The baseline keeps no ledger: nothing to close."""

    def waiting(self, latest: dict[TopicPartition, int]) -> int:
        uncut = max(0, latest[TP] - self._cut * self._tuple_size)
        return uncut + sum(t.size for q in self._queues for t in q)
