"""Send buffer and dispatcher: which lane gets which tuple (SPEC A; seed 000_7245d8bf028e7bc3).

The seed's spout buffers tuples and hands them round robin to the lanes whose
window has room; it names "send to the idlest lane" as future work. Both are
here, selectable by name (:func:`make_policy`):

* ``round_robin`` (the seed): the next lane in cyclic order with a free slot.
* ``least_loaded`` (**beyond**): the lane with the lowest expected completion
  time ``(in_flight + 1) / rate``, where ``rate`` (tuples/s) is measured per
  lane from its acks by Little's law: a tuple that found ``ahead`` tuples in
  flight and came back after ``rt`` seconds says ``rate ~ (ahead + 1) / rt``
  (an EWMA of those samples). A fail or timeout halves the lane's rate: it is
  evidence that the lane is not delivering. A lane with no measurement yet
  gets the mean of the measured lanes (or 1 tuple/s when none is measured).

A failed or timed-out tuple goes to the FRONT of the buffer (before fresh
tuples, oldest failure first) and is never given back to the lane that failed
it while more than one lane exists; if only that lane has room, it waits and
fresh tuples take the room.

Driving it from a micro-batch source (``latestOffset`` / ``partitions`` /
lane feedback), per batch:

1. apply the previous batch's lane feedback: ``on_lane_report(lane,
   acked=[(tuple_id, rt), ...], failed=[...])`` per lane, and
   ``expire(timeout_s)`` for tuples no lane reported; tell the
   :class:`~flowctl.core.checkpoint.AckLedger` ``processed`` / ``failed``;
2. how many tuples the lanes may take now: ``capacity()`` per lane,
   ``total_free()`` in all; cut that many minus ``buffered`` with
   :class:`~flowctl.core.tuples.TupleBatcher` ``cut(latest, n)``, ``admit``
   them in the ledger and ``enqueue`` them;
3. ``dispatch()`` -> this batch's (lane, tuple) assignments: one
   InputPartition per lane holding its offset ranges;
4. the checkpoint per partition, once results are durable: ledger
   ``durable(tuple_id)`` then ``checkpoint()``.

``snapshot()`` / ``Dispatcher.from_snapshot`` survive a restart of the reader
process (with the batcher's ``positions()`` and the ledger's snapshot).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from .clock import Clock
from .tuples import TupleRange
from .window import AckOutcome, AdaptiveWindow, WindowSnapshot


@dataclass(frozen=True)
class LaneLoad:
    """What a policy sees of one lane with at least one free slot."""

    lane: int
    free_slots: int
    in_flight: int
    rate: float | None


class DispatchPolicy(Protocol):
    """Chooses one lane among candidates (never empty) for the next tuple."""

    name: str

    def choose(self, candidates: Sequence[LaneLoad], lanes: int) -> int: ...

    def state(self) -> int: ...


class RoundRobin:
    """The seed's policy: cyclic order over lanes with a free slot."""

    name = "round_robin"

    def __init__(self, cursor: int = -1) -> None:
        self._cursor = cursor

    def choose(self, candidates: Sequence[LaneLoad], lanes: int) -> int:
        free = {c.lane for c in candidates}
        for step in range(1, lanes + 1):
            lane = (self._cursor + step) % lanes
            if lane in free:
                self._cursor = lane
                return lane
        raise ValueError(f"RoundRobin.choose: no candidate among lanes 0..{lanes - 1}")

    def state(self) -> int:
        return self._cursor


class LeastLoaded:
    """Lowest expected completion time ``(in_flight + 1) / rate``; ties -> fewer in
    flight, then lower lane index (deterministic)."""

    name = "least_loaded"

    def choose(self, candidates: Sequence[LaneLoad], lanes: int) -> int:
        known = [c.rate for c in candidates if c.rate is not None and c.rate > 0]
        default = sum(known) / len(known) if known else 1.0

        def ect(c: LaneLoad) -> tuple[float, int, int]:
            rate = c.rate if c.rate is not None and c.rate > 0 else default
            return ((c.in_flight + 1) / rate, c.in_flight, c.lane)

        return min(candidates, key=ect).lane

    def state(self) -> int:
        return -1


POLICIES: tuple[str, ...] = (RoundRobin.name, LeastLoaded.name)


def make_policy(name: str, state: int = -1) -> DispatchPolicy:
    """The policy called ``name`` (``state`` from a snapshot); a clear error lists the
    known names."""
    if name == RoundRobin.name:
        return RoundRobin(state)
    if name == LeastLoaded.name:
        return LeastLoaded()
    raise ValueError(
        f"dispatch policy: unknown name {name!r}; choose one of {', '.join(sorted(POLICIES))}"
    )


@dataclass(frozen=True)
class Assignment:
    """One tuple given to one lane."""

    lane: int
    tuple: TupleRange


@dataclass(frozen=True)
class AckReport:
    """One applied ack: which tuple, on which lane, and what the window made of it."""

    lane: int
    tuple: TupleRange
    outcome: AckOutcome


@dataclass(frozen=True)
class LaneReport:
    """What one lane's report did: applied acks, tuples requeued, ids ignored.

    ``stale`` ids were not in flight on that lane (already timed out and
    requeued, or never sent there): they change nothing.
    """

    lane: int
    acked: tuple[AckReport, ...]
    requeued: tuple[TupleRange, ...]
    stale: tuple[str, ...]


@dataclass(frozen=True)
class Retry:
    """A failed tuple waiting at the front of the buffer, and the lane to avoid."""

    tuple: TupleRange
    avoid_lane: int


@dataclass(frozen=True)
class DispatcherSnapshot:
    """Immutable, picklable state of a :class:`Dispatcher`."""

    policy: str
    policy_state: int
    rate_alpha: float
    windows: tuple[WindowSnapshot, ...]
    retry: tuple[Retry, ...]
    fresh: tuple[TupleRange, ...]
    in_flight: tuple[tuple[TupleRange, int], ...]
    rates: tuple[float | None, ...]


class Dispatcher:
    """The seed's FlowControlSpout buffer plus a dispatch policy over the lanes' windows."""

    def __init__(
        self,
        windows: Sequence[AdaptiveWindow],
        clock: Clock,
        *,
        policy: str = "round_robin",
        rate_alpha: float = 0.2,
    ) -> None:
        if not windows:
            raise ValueError("Dispatcher: windows must hold at least one lane, got none")
        for i, w in enumerate(windows):
            if w.lane != i:
                raise ValueError(
                    f"Dispatcher: windows[{i}] has lane={w.lane}; lanes must be 0..P-1"
                )
        if not 0 < rate_alpha <= 1:
            raise ValueError(f"Dispatcher: rate_alpha must be in (0, 1], got {rate_alpha!r}")
        self._windows = list(windows)
        self._clock = clock
        self._policy = make_policy(policy)
        self._rate_alpha = float(rate_alpha)
        self._retry: deque[Retry] = deque()
        self._fresh: deque[TupleRange] = deque()
        self._in_flight: dict[str, tuple[TupleRange, int]] = {}
        self._rates: list[float | None] = [None] * len(windows)

    # -- read side -------------------------------------------------------
    @property
    def policy(self) -> str:
        return self._policy.name

    @property
    def windows(self) -> list[AdaptiveWindow]:
        return list(self._windows)

    @property
    def lanes(self) -> int:
        return len(self._windows)

    @property
    def buffered(self) -> int:
        """Tuples waiting in the send buffer (retries included)."""
        return len(self._retry) + len(self._fresh)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def rate(self, lane: int) -> float | None:
        """Measured rate of ``lane`` in tuples/s, None before its first ack."""
        return self._rates[lane]

    def capacity(self) -> dict[int, int]:
        """Free window slots per lane: how many tuples each lane may take now."""
        return {w.lane: w.free_slots for w in self._windows}

    def total_free(self) -> int:
        return sum(w.free_slots for w in self._windows)

    def lane_of(self, tuple_id: str) -> int | None:
        entry = self._in_flight.get(tuple_id)
        return None if entry is None else entry[1]

    # -- buffer ----------------------------------------------------------
    def enqueue(self, tuples: Iterable[TupleRange]) -> None:
        """Append fresh tuples at the back of the send buffer."""
        for t in tuples:
            if not isinstance(t, TupleRange):
                raise ValueError(f"Dispatcher.enqueue: expected TupleRange, got {t!r}")
            self._fresh.append(t)

    def dispatch(self, max_tuples: int | None = None) -> list[Assignment]:
        """Give buffered tuples to lanes with free slots, retries first."""
        out: list[Assignment] = []
        limit = max_tuples if max_tuples is not None else self.buffered
        waiting: deque[Retry] = deque()
        while self._retry and len(out) < limit:
            entry = self._retry.popleft()
            lane = self._choose(avoid=entry.avoid_lane)
            if lane is None:
                waiting.append(entry)
                continue
            out.append(self._send(entry.tuple, lane))
        waiting.extend(self._retry)
        self._retry = waiting
        while self._fresh and len(out) < limit:
            lane = self._choose(avoid=None)
            if lane is None:
                break
            out.append(self._send(self._fresh.popleft(), lane))
        return out

    # -- feedback --------------------------------------------------------
    def on_ack(self, tuple_id: str, rt: float | None = None) -> AckReport | None:
        """A lane processed ``tuple_id``. None if it is not in flight (late ack)."""
        entry = self._in_flight.pop(tuple_id, None)
        if entry is None:
            return None
        t, lane = entry
        outcome = self._windows[lane].on_ack(tuple_id, rt)
        if outcome is None:  # the window no longer knows it: keep both views equal
            return None
        if outcome.rt > 0:
            sample = (outcome.ahead + 1) / outcome.rt
            old = self._rates[lane]
            a = self._rate_alpha
            self._rates[lane] = sample if old is None else (1 - a) * old + a * sample
        return AckReport(lane, t, outcome)

    def on_lane_report(
        self,
        lane: int,
        acked: Iterable[tuple[str, float | None]] = (),
        failed: Iterable[str] = (),
    ) -> LaneReport:
        """Apply one lane's outcome of a micro-batch: ``(tuple_id, rt)`` per processed
        tuple (rt None = measure from the send time) and the ids it failed."""
        if not isinstance(lane, int) or not 0 <= lane < len(self._windows):
            raise ValueError(
                f"Dispatcher.on_lane_report: lane must be in 0..{len(self._windows) - 1}, "
                f"got {lane!r}"
            )
        acks: list[AckReport] = []
        requeued: list[TupleRange] = []
        stale: list[str] = []
        for tuple_id, rt in acked:
            report = self.on_ack(tuple_id, rt) if self.lane_of(tuple_id) == lane else None
            if report is None:
                stale.append(tuple_id)
            else:
                acks.append(report)
        for tuple_id in failed:
            t = self.on_fail(tuple_id) if self.lane_of(tuple_id) == lane else None
            if t is None:
                stale.append(tuple_id)
            else:
                requeued.append(t)
        return LaneReport(lane, tuple(acks), tuple(requeued), tuple(stale))

    def on_fail(self, tuple_id: str) -> TupleRange | None:
        """An explicit fail: the lane turns BUSY and the tuple is requeued in front."""
        return self._requeue(tuple_id, timeout=False)

    def on_timeout(self, tuple_id: str) -> TupleRange | None:
        """No outcome in time: like a fail (see :meth:`AdaptiveWindow.on_timeout`)."""
        return self._requeue(tuple_id, timeout=True)

    def expire(self, timeout_s: float) -> list[TupleRange]:
        """Time out every tuple in flight for ``timeout_s`` or more; returns them."""
        expired: list[TupleRange] = []
        for w in self._windows:
            for tuple_id in w.overdue(timeout_s):
                t = self.on_timeout(str(tuple_id))
                if t is not None:
                    expired.append(t)
        return expired

    # -- persistence -----------------------------------------------------
    def snapshot(self) -> DispatcherSnapshot:
        return DispatcherSnapshot(
            policy=self._policy.name,
            policy_state=self._policy.state(),
            rate_alpha=self._rate_alpha,
            windows=tuple(w.snapshot() for w in self._windows),
            retry=tuple(self._retry),
            fresh=tuple(self._fresh),
            in_flight=tuple(self._in_flight.values()),
            rates=tuple(self._rates),
        )

    @classmethod
    def from_snapshot(cls, snap: DispatcherSnapshot, clock: Clock) -> Dispatcher:
        windows = [AdaptiveWindow.from_snapshot(w, clock) for w in snap.windows]
        d = cls(windows, clock, policy=snap.policy, rate_alpha=snap.rate_alpha)
        d._policy = make_policy(snap.policy, snap.policy_state)
        d._retry = deque(snap.retry)
        d._fresh = deque(snap.fresh)
        d._in_flight = {t.id: (t, lane) for t, lane in snap.in_flight}
        d._rates = list(snap.rates)
        return d

    # -- internals -------------------------------------------------------
    def _choose(self, avoid: int | None) -> int | None:
        candidates = [
            LaneLoad(w.lane, w.free_slots, w.in_flight, self._rates[w.lane])
            for w in self._windows
            if w.free_slots > 0 and not (len(self._windows) > 1 and w.lane == avoid)
        ]
        if not candidates:
            return None
        return self._policy.choose(candidates, len(self._windows))

    def _send(self, t: TupleRange, lane: int) -> Assignment:
        if t.id in self._in_flight:
            raise ValueError(f"Dispatcher: tuple {t.id} is already in flight")
        self._windows[lane].on_send(t.id)
        self._in_flight[t.id] = (t, lane)
        return Assignment(lane, t)

    def _requeue(self, tuple_id: str, *, timeout: bool) -> TupleRange | None:
        entry = self._in_flight.pop(tuple_id, None)
        if entry is None:
            return None
        t, lane = entry
        window = self._windows[lane]
        if timeout:
            window.on_timeout(tuple_id)
        else:
            window.on_fail(tuple_id)
        rate = self._rates[lane]
        if rate is not None:
            self._rates[lane] = rate / 2
        self._retry.append(Retry(t, lane))
        return t
