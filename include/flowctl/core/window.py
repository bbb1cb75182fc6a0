"""Adaptive send window per lane (SPEC A; seed 000_7245d8bf028e7bc3).

The seed adapts TCP's congestion avoidance to one spout feeding many bolts
(here: one flow-controlled source feeding P lanes). Each lane has a window
``w`` of tuples in flight, ``w_min <= w <= w_max``, a state and the send time
of every in-flight tuple:

* ack with ``rt`` within the lane's threshold -> NORMAL. After a full round of
  NORMAL acks the window grows by one (additive increase, once per round),
  provided the window was full at some point of the round. **beyond** the
  seed (TCP's congestion window validation, RFC 7661): a lane that was never
  window-limited has not shown it can take more, and a window inflated while
  the source was idle would flood the lane at the next burst.
* ack with ``rt`` over the threshold -> SLOW, and the window shrinks by one, at
  most once per round (a burst of slow acks is one congestion signal), and
  only for a tuple sent after the last decrease: a tuple sent before it
  queued behind the larger window, so its rt is an echo of the congestion
  already acted on (TCP's "one reduction per window of data"). Without this
  rule the window overshoots by one round of feedback delay each way.
  **beyond** the seed, selectable (``slow_decrease="to_target"``, the platform's
  default; ``"one"`` is the seed's rule): besides the -1, a round with SLOW acks
  ends with the window cut to what the lane could have served within the
  threshold, by Little's law ``floor((ahead + 1) * threshold / rt)`` of the slow
  ack with the longest queue (``ahead + 1``: the lane's queue when it was sent,
  itself included; the longest queue amortises any fixed cost in ``rt`` best).
  In a micro-batch source a round is one batch, so the seed's -1 per round
  needs as many batches as the window is too large: measured under a 2x
  overload (bench/overload.py), a window of 50 tuples came down by one per
  12 s batch. Acks just over the threshold give the seed's -1 alone.
  **beyond** the seed, selectable (``growth="to_target"``, the platform's default;
  ``"one"`` is the seed's +1): a round of NORMAL acks in which the window was full
  grows it to what the lane could serve within the threshold, by the same Little's
  law on the NORMAL ack with the longest queue, at most doubling it per round and at
  least +1. A window cut deep during a slowdown thus comes back in a few rounds once
  the lane is fast again (TCP's slow start, with the measured room as its threshold)
  instead of one tuple per micro-batch; in steady state (acks near the threshold)
  the room is the window itself and the rule is the seed's +1.
* fail or timeout -> BUSY, the window shrinks by one at once and the tuple is
  handed back so the caller requeues it at the front of the send buffer for a
  *different* lane (see :mod:`flowctl.core.spout`).
* returned (**beyond** the seed): the lane passed its time budget in a batch before
  it started the tuple and handed it back unprocessed -> BUSY, and the window is cut
  at once to what it served within the threshold (Little's law on the tuples it did
  serve: ``served * threshold / rt`` of the last; at least -1, once per batch:
  returns of tuples sent before the cut are the same signal). The tuple is requeued
  for another lane like a failed one.

A *round* starts with ``round_len = w`` and ends after ``round_len`` acks
(NORMAL or SLOW). A fail or timeout changes ``w`` and starts a new round in
which the SLOW decrease counts as already spent (the slow acks that follow a
fail are echoes of the same overload).

Acks are unordered: any ack frees a slot at once (unlike TCP's sliding
window, nothing waits for an older tuple). Deliberately absent, as in the
seed: slow start for a fresh lane (it is idle, not congested; ``w_init`` is its
share of the batch), a blind ssthresh (exponential growth overshoots into SLOW;
``growth="to_target"`` doubles only up to the room the acks measured) and fast
retransmit (a failed tuple goes to another lane instead).

Driving it from a micro-batch source: per batch, ``free_slots`` says how many
tuples the lane may take now; ``on_send`` each tuple given to it; when the
lane reports back, ``on_ack(tuple_id, rt=...)`` or ``on_fail(tuple_id)`` per
tuple; ``overdue(timeout_s)`` + ``on_timeout`` for tuples never reported.
``snapshot()`` / ``AdaptiveWindow.from_snapshot`` carry the state across a
restart of the reader process; in-flight send times are stored as ages
because a monotonic clock restarts with the process.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from enum import StrEnum

from .clock import Clock
from .rtt import RttEstimator, RttSnapshot


class LaneState(StrEnum):
    """The seed's three lane states."""

    NORMAL = "NORMAL"
    SLOW = "SLOW"
    BUSY = "BUSY"


#: How far one SLOW signal shrinks a window: the seed's one tuple, or to the target.
SLOW_DECREASES = ("one", "to_target")
#: How far a NORMAL, window-limited round grows a window: the seed's +1, or toward the
#: room measured by Little's law (at most doubling).
GROWTHS = ("one", "to_target")


class WindowFullError(RuntimeError):
    """``on_send`` was called on a lane with no free slot."""


@dataclass(frozen=True)
class InFlight:
    """One in-flight tuple: when it was sent, how many were ahead, its send number."""

    tuple_id: Hashable
    sent_at: float
    ahead: int
    send_no: int


@dataclass(frozen=True)
class AckOutcome:
    """What one ack did: its rt, its verdict, and the lane's queue when sent.

    ``ahead`` (tuples already in flight when this one was sent) lets a caller
    estimate the lane's service rate by Little's law: ``(ahead + 1) / rt``.
    """

    tuple_id: Hashable
    rt: float
    slow: bool
    ahead: int
    window: int


@dataclass(frozen=True)
class InFlightAge:
    """An in-flight tuple in a snapshot: its age instead of a clock reading."""

    tuple_id: Hashable
    age: float
    ahead: int
    send_no: int


@dataclass(frozen=True)
class WindowSnapshot:
    """Immutable, picklable state of an :class:`AdaptiveWindow`."""

    lane: int
    w_min: int
    w_max: int
    size: int
    state: LaneState
    in_flight: tuple[InFlightAge, ...]
    round_len: int
    round_acks: int
    round_all_normal: bool
    round_decreased: bool
    round_limited: bool
    rounds: int
    sends: int
    decreased_at_send: int
    rtt: RttSnapshot
    slow_decrease: str = "one"
    round_target: tuple[int, int] | None = None
    growth: str = "one"
    round_room: tuple[int, int] | None = None
    returned_at_send: int = 0


def validate_bounds(w_min: int, w_max: int, w_init: int) -> None:
    """Raise ValueError naming the bad field unless 1 <= w_min <= w_init <= w_max."""
    for name, value in (("w_min", w_min), ("w_max", w_max), ("w_init", w_init)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"AdaptiveWindow: {name} must be an int, got {value!r}")
    if w_min < 1:
        raise ValueError(f"AdaptiveWindow: w_min must be >= 1, got {w_min}")
    if w_max < w_min:
        raise ValueError(f"AdaptiveWindow: w_max must be >= w_min={w_min}, got {w_max}")
    if not w_min <= w_init <= w_max:
        raise ValueError(f"AdaptiveWindow: w_init must be in [{w_min}, {w_max}], got {w_init}")


class AdaptiveWindow:
    """The seed's AdaptiveFlowConsumer: one lane's window, state and in-flight set."""

    # The current round's state, set by _start_round (called from __init__ and at each new
    # round) and by from_snapshot: declared here so both assign one declared type.
    _round_decreased: bool
    _round_target: tuple[int, int] | None  # (ahead, Little's-law window)
    _round_room: tuple[int, int] | None  # the same, from NORMAL acks

    def __init__(
        self,
        lane: int,
        clock: Clock,
        *,
        w_min: int = 1,
        w_max: int = 64,
        w_init: int | None = None,
        rtt: RttEstimator | None = None,
        slow_decrease: str = "one",
        growth: str = "one",
    ) -> None:
        w_init = w_min if w_init is None else w_init
        validate_bounds(w_min, w_max, w_init)
        for name, value, allowed in (
            ("slow_decrease", slow_decrease, SLOW_DECREASES),
            ("growth", growth, GROWTHS),
        ):
            if value not in allowed:
                raise ValueError(
                    f"AdaptiveWindow: {name} must be one of {', '.join(allowed)}, got {value!r}"
                )
        self._slow_decrease = slow_decrease
        self._growth = growth
        self.lane = lane
        self._clock = clock
        self._w_min = w_min
        self._w_max = w_max
        self._size = w_init
        self._state = LaneState.NORMAL
        self._rtt = rtt if rtt is not None else RttEstimator()
        self._in_flight: dict[Hashable, InFlight] = {}
        self._rounds = 0
        self._sends = 0  # send numbers: "sent after the last decrease" without clock ties
        self._decreased_at_send = 0
        self._returned_at_send = 0
        self._start_round(decreased=False)

    # -- read side -------------------------------------------------------
    @property
    def size(self) -> int:
        """The window ``w``: how many tuples may be in flight."""
        return self._size

    @property
    def w_min(self) -> int:
        return self._w_min

    @property
    def w_max(self) -> int:
        return self._w_max

    @property
    def state(self) -> LaneState:
        return self._state

    @property
    def rounds(self) -> int:
        """Completed rounds since creation (a clock for 'once per round')."""
        return self._rounds

    @property
    def rtt(self) -> RttEstimator:
        return self._rtt

    @property
    def in_flight(self) -> int:
        """Tuples sent and not yet acked, failed or timed out."""
        return len(self._in_flight)

    @property
    def free_slots(self) -> int:
        """How many more tuples this lane may take now (0 when the window shrank)."""
        return max(0, self._size - len(self._in_flight))

    def is_in_flight(self, tuple_id: Hashable) -> bool:
        return tuple_id in self._in_flight

    def in_flight_ids(self) -> list[Hashable]:
        """In-flight tuple ids, oldest send first."""
        return [f.tuple_id for f in sorted(self._in_flight.values(), key=lambda f: f.sent_at)]

    def overdue(self, timeout_s: float) -> list[Hashable]:
        """In-flight tuples sent at least ``timeout_s`` ago, oldest first."""
        if not timeout_s > 0:
            raise ValueError(f"AdaptiveWindow.overdue: timeout_s must be > 0, got {timeout_s!r}")
        limit = self._clock.now() - timeout_s
        return [
            f.tuple_id
            for f in sorted(self._in_flight.values(), key=lambda f: f.sent_at)
            if f.sent_at <= limit
        ]

    # -- events ----------------------------------------------------------
    def on_send(self, tuple_id: Hashable) -> None:
        """Record that ``tuple_id`` was handed to this lane now."""
        if tuple_id in self._in_flight:
            raise ValueError(
                f"AdaptiveWindow(lane={self.lane}): tuple {tuple_id!r} already in flight"
            )
        if self.free_slots <= 0:
            raise WindowFullError(
                f"AdaptiveWindow(lane={self.lane}): window {self._size} is full "
                f"({len(self._in_flight)} in flight); cannot send {tuple_id!r}"
            )
        self._in_flight[tuple_id] = InFlight(
            tuple_id, self._clock.now(), len(self._in_flight), self._sends
        )
        self._sends += 1
        if len(self._in_flight) >= self._size:
            self._round_limited = True

    def on_ack(self, tuple_id: Hashable, rt: float | None = None) -> AckOutcome | None:
        """Apply an ack. ``rt`` defaults to now - send time; a lane may report its own.

        Returns None for an unknown tuple (a late ack of a tuple already timed
        out and requeued): it must not move the window twice.
        """
        sent = self._in_flight.pop(tuple_id, None)
        if sent is None:
            return None
        if rt is None:
            rt = max(0.0, self._clock.now() - sent.sent_at)
        threshold = self._rtt.threshold()
        slow = self._rtt.is_slow(rt)
        self._rtt.observe(rt)
        self._round_acks += 1
        if slow:
            self._state = LaneState.SLOW
            self._round_all_normal = False
            if not self._round_decreased and sent.send_no >= self._decreased_at_send:
                self._decrease()
                self._round_decreased = True
            if self._slow_decrease == "to_target":  # a clamp, not a step: echoes may count
                target = (sent.ahead, int((sent.ahead + 1) * threshold / rt))
                if self._round_target is None or target[0] > self._round_target[0]:
                    self._round_target = target
        else:
            self._state = LaneState.NORMAL
            if self._growth == "to_target":
                room = (sent.ahead, _littles_window(sent.ahead, threshold, rt, self._w_max))
                if self._round_room is None or room[0] > self._round_room[0]:
                    self._round_room = room
        if self._round_acks >= self._round_len:
            if self._round_all_normal and self._round_limited:
                self._size = min(self._w_max, self._grown())
            if self._round_target is not None:
                self._size = max(self._w_min, min(self._size, self._round_target[1]))
            self._rounds += 1
            self._start_round(decreased=False)
        return AckOutcome(tuple_id, rt, slow, sent.ahead, self._size)

    def on_fail(self, tuple_id: Hashable) -> Hashable | None:
        """An explicit fail: BUSY, -1 at once; returns the tuple id to requeue.

        Returns None for an unknown tuple (already acked, failed or timed out).
        """
        return self._busy(tuple_id)

    def on_timeout(self, tuple_id: Hashable) -> Hashable | None:
        """No outcome within the timeout: treated exactly like a fail (the seed's
        only fail is Storm's timeout)."""
        return self._busy(tuple_id)

    def on_return(
        self, tuple_id: Hashable, served: int, rt: float | None = None
    ) -> Hashable | None:
        """The lane handed ``tuple_id`` back unprocessed after ``served`` tuples of its
        batch, the last acked at ``rt``, used up its time budget: BUSY, window cut once per
        batch (at least -1) to what it serves within the threshold, by Little's law
        ``floor(served * threshold / rt)`` (``served`` when ``rt`` is within it or unknown).
        Returns the tuple id to requeue, or None for an unknown tuple."""
        sent = self._in_flight.pop(tuple_id, None)
        if sent is None:
            return None
        self._state = LaneState.BUSY
        # The batch's first return cuts (its own marker: a SLOW -1 in the same batch must
        # not hide it); the cut also makes later SLOW acks of the batch echoes.
        if sent.send_no >= self._returned_at_send:
            threshold = self._rtt.threshold()
            room = served if rt is None or rt <= threshold else int(served * threshold / rt)
            self._size = max(self._w_min, min(self._size - 1, room))
            self._returned_at_send = self._decreased_at_send = self._sends
            self._start_round(decreased=True)
        return tuple_id

    # -- persistence -----------------------------------------------------
    def snapshot(self) -> WindowSnapshot:
        """An immutable copy; in-flight send times become ages (see module doc)."""
        now = self._clock.now()
        return WindowSnapshot(
            lane=self.lane,
            w_min=self._w_min,
            w_max=self._w_max,
            size=self._size,
            state=self._state,
            in_flight=tuple(
                InFlightAge(f.tuple_id, max(0.0, now - f.sent_at), f.ahead, f.send_no)
                for f in sorted(self._in_flight.values(), key=lambda f: f.sent_at)
            ),
            round_len=self._round_len,
            round_acks=self._round_acks,
            round_all_normal=self._round_all_normal,
            round_decreased=self._round_decreased,
            round_limited=self._round_limited,
            rounds=self._rounds,
            sends=self._sends,
            decreased_at_send=self._decreased_at_send,
            rtt=self._rtt.snapshot(),
            slow_decrease=self._slow_decrease,
            round_target=self._round_target,
            growth=self._growth,
            round_room=self._round_room,
            returned_at_send=self._returned_at_send,
        )

    @classmethod
    def from_snapshot(cls, snap: WindowSnapshot, clock: Clock) -> AdaptiveWindow:
        """Rebuild a window on ``clock``; the time between snapshot and restore
        is not counted in the in-flight ages (they can only look younger)."""
        win = cls(
            snap.lane,
            clock,
            w_min=snap.w_min,
            w_max=snap.w_max,
            w_init=snap.size,
            rtt=RttEstimator.from_snapshot(snap.rtt),
            slow_decrease=snap.slow_decrease,
            growth=snap.growth,
        )
        win._state = LaneState(snap.state)
        now = clock.now()
        win._in_flight = {
            f.tuple_id: InFlight(f.tuple_id, now - f.age, f.ahead, f.send_no)
            for f in snap.in_flight
        }
        win._round_len = snap.round_len
        win._round_acks = snap.round_acks
        win._round_all_normal = snap.round_all_normal
        win._round_decreased = snap.round_decreased
        win._round_limited = snap.round_limited
        win._rounds = snap.rounds
        win._sends = snap.sends
        win._decreased_at_send = snap.decreased_at_send
        win._round_target = snap.round_target
        win._round_room = snap.round_room
        win._returned_at_send = snap.returned_at_send
        return win

    # -- internals -------------------------------------------------------
    def _start_round(self, *, decreased: bool) -> None:
        self._round_len = self._size
        self._round_acks = 0
        self._round_all_normal = True
        self._round_decreased = decreased
        self._round_limited = len(self._in_flight) >= self._size
        self._round_target = None
        self._round_room = None

    def _grown(self) -> int:
        """The window after a NORMAL, window-limited round (see the module doc)."""
        if self._round_room is None:
            return self._size + 1
        return max(self._size + 1, min(2 * self._size, self._round_room[1]))

    def _decrease(self) -> None:
        self._size = max(self._w_min, self._size - 1)
        self._decreased_at_send = self._sends

    def _busy(self, tuple_id: Hashable) -> Hashable | None:
        if self._in_flight.pop(tuple_id, None) is None:
            return None
        self._state = LaneState.BUSY
        self._decrease()
        self._start_round(decreased=True)
        return tuple_id


def _littles_window(ahead: int, threshold: float, rt: float, w_max: int) -> int:
    """Tuples a lane serves within ``threshold``, by Little's law from one ack: its queue
    when sent (``ahead + 1``) over its ``rt``; ``w_max`` for an instant ack or while the
    threshold is still unbounded (an adaptive estimate with no sample yet)."""
    room = (ahead + 1) * threshold / rt if rt > 0 else math.inf
    return w_max if room >= w_max else int(room)
