"""Backpressure: water marks and dynamic step-by-step backpressure (SPEC C, seeds 001 and 002).

C1 (seed 001, JStorm): :class:`WaterMarks` throttles above ``high`` and releases only below
``low``; the gap (hysteresis) stops throughput from jittering around one threshold.

C2 (seed 002, Algorithm 1): every task watches its own input queue and signals only its
direct upstream.

- :class:`QueueMonitor` is the task side. If ``queueLength > loadFactor * QML`` and no timer
  is pending, it schedules a backpressure signal to its upstream after
  ``sensitivity = (QML - queueLength) / (2 * T.V)`` seconds: at most one signal per task per
  sensitivity period. A signal the channel could not deliver is retried with backoff
  (SPEC G). If ``queueLength < (1 - loadFactor) * QML`` for ``sensitivity`` seconds it sends
  a cancel.
- :class:`RateController` is the upstream side (state ``S``). On a backpressure signal: if
  ``S.V_init`` is unset record ``S.V_init = S.V``; then ``S.V = S.V / v'``. On a cancel, if
  under backpressure: ``S.V = S.V * v'``, leaving the backpressure state only when ``S.V`` is
  back at ``S.V_init``. The rate is kept as ``V_init / v'**level`` so that it returns to
  ``V_init`` exactly (repeated float multiply/divide would drift) and never exceeds it.
- :class:`~flowctl.core.backpressure_chain.BackpressureChain` (its own module) wires
  stages ``source -> ... -> sink`` out of these parts.

Signals travel through an injected :class:`SignalChannel` (the paper used ZooKeeper znodes;
an adapter will use the control-plane database). Signals carry a per-sender sequence number
so a channel may deliver at least once: a controller applies each signal once.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from .backoff import BackoffPolicy, FlumeBackoff
from .clock import Clock

__all__ = [
    "ChannelError",
    "ControllerSnapshot",
    "LocalChannel",
    "MonitorSnapshot",
    "QueueMonitor",
    "RateController",
    "Signal",
    "SignalChannel",
    "WaterMarks",
    "sensitivity",
]

_log = logging.getLogger(__name__)

SignalKind = Literal["backpressure", "cancel"]
SIGNAL_KINDS: tuple[str, ...] = ("backpressure", "cancel")


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _check_number(name: str, value: Any, *, positive: bool = False) -> float:
    ok = (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and (value > 0 if positive else value >= 0)
    )
    if not ok:
        bound = "> 0" if positive else ">= 0"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


# --- C1 ---------------------------------------------------------------------------------


class WaterMarks:
    """JStorm's two water marks with hysteresis (C1).

    ``update(queue_length)`` returns whether the upstream should be throttled: it turns on
    when the queue is above ``high`` and off only when it is below ``low``; between the two
    marks the previous state holds. ``throttled`` is the state for metrics and snapshots.
    """

    def __init__(self, low: int, high: int, *, throttled: bool = False) -> None:
        _check_int("low", low, 0)
        _check_int("high", high, 1)
        if not low < high:
            raise ValueError(f"low water mark {low} must be < high water mark {high}")
        self.low = low
        self.high = high
        self.throttled = throttled

    def update(self, queue_length: int) -> bool:
        _check_int("queue_length", queue_length, 0)
        if queue_length > self.high:
            self.throttled = True
        elif queue_length < self.low:
            self.throttled = False
        return self.throttled


# --- signals and channel ------------------------------------------------------------------


@dataclass(frozen=True)
class Signal:
    """A backpressure or cancel signal from ``sender`` to its direct upstream ``target``.

    ``seq`` increases per sender; a retried signal keeps its ``seq``, so a receiver can
    drop duplicates. ``created_at`` is the sender's clock time, for logs and metrics.
    """

    kind: SignalKind
    sender: str
    target: str
    seq: int
    created_at: float

    def __post_init__(self) -> None:
        if self.kind not in SIGNAL_KINDS:
            raise ValueError(f"kind must be one of {SIGNAL_KINDS}, got {self.kind!r}")
        for name in ("sender", "target"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"{name} must be a non-empty str, got {value!r}")
        _check_int("seq", self.seq, 1)
        if (
            isinstance(self.created_at, bool)
            or not isinstance(self.created_at, int | float)
            or not math.isfinite(self.created_at)
        ):
            raise ValueError(f"created_at must be a finite number, got {self.created_at!r}")

    def to_dict(self) -> dict[str, Any]:
        """JSON types only, for a channel that stores signals in a database."""
        return {
            "kind": self.kind,
            "sender": self.sender,
            "target": self.target,
            "seq": self.seq,
            "created_at": self.created_at,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Signal:
        missing = [k for k in ("kind", "sender", "target", "seq", "created_at") if k not in data]
        if missing:
            raise ValueError(f"signal is missing field(s) {missing}")
        return cls(data["kind"], data["sender"], data["target"], data["seq"], data["created_at"])


class ChannelError(RuntimeError):
    """A channel could not deliver a signal now; the sender retries with backoff."""


class SignalChannel(Protocol):
    """Carries signals to the upstream stage's :class:`RateController`.

    ``deliver`` returns True once the target has the signal (applied, or durably queued
    for it), and returns False or raises :class:`ChannelError` when it could not deliver
    it now. Delivery may happen more than once (the controller drops duplicates by
    ``(sender, seq)``) but a True must never be returned for a signal that is lost.
    """

    def deliver(self, signal: Signal) -> bool: ...


# --- upstream side --------------------------------------------------------------------------


@dataclass(frozen=True)
class ControllerSnapshot:
    """A :class:`RateController`'s state; picklable, survives a restart."""

    name: str
    base_rate: float
    level: int
    last_seq: tuple[tuple[str, int], ...]


class RateController:
    """One stage's send rate ``S.V`` under backpressure from its downstream stages.

    ``rate`` is the rate to send at now. Outside backpressure it is the configured base
    rate and ``v_init`` is ``None``; under backpressure ``v_init`` is the rate recorded at
    the first signal and ``rate = v_init / factor**level``. Each backpressure signal adds a
    level, each cancel removes one; at level 0 the stage leaves the backpressure state.
    """

    def __init__(self, name: str, rate: float, factor: float = 2.0) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"name must be a non-empty str, got {name!r}")
        self.name = name
        self._base = _check_number("rate", rate, positive=True)
        self.factor = _check_number("factor", factor, positive=True)
        if self.factor <= 1.0:
            raise ValueError(f"factor v' must be > 1 (it divides the rate), got {factor!r}")
        self.level = 0
        self._last_seq: dict[str, int] = {}

    @property
    def under_backpressure(self) -> bool:
        return self.level > 0

    @property
    def state(self) -> str:
        """``"backpressure"`` or ``"normal"``, for metrics."""
        return "backpressure" if self.under_backpressure else "normal"

    @property
    def v_init(self) -> float | None:
        return self._base if self.under_backpressure else None

    @property
    def rate(self) -> float:
        return self._base / self.factor**self.level

    def set_base_rate(self, rate: float) -> None:
        """Change the configured rate; under backpressure this moves ``V_init``."""
        self._base = _check_number("rate", rate, positive=True)

    def apply(self, signal: Signal) -> bool:
        """Apply a delivered signal once; returns False for a duplicate or a no-op cancel."""
        if signal.target != self.name:
            raise ValueError(
                f"signal for target {signal.target!r} delivered to controller {self.name!r}"
            )
        if signal.seq <= self._last_seq.get(signal.sender, 0):
            return False
        self._last_seq[signal.sender] = signal.seq
        if signal.kind == "backpressure":
            # V_init is the base while level > 0: recorded implicitly at the first signal.
            self.level += 1
            return True
        if not self.under_backpressure:
            return False
        self.level -= 1
        return True

    def snapshot(self) -> ControllerSnapshot:
        return ControllerSnapshot(
            self.name, self._base, self.level, tuple(sorted(self._last_seq.items()))
        )

    def restore(self, snapshot: ControllerSnapshot) -> None:
        if snapshot.name != self.name:
            raise ValueError(f"snapshot of {snapshot.name!r} restored into {self.name!r}")
        self._base = _check_number("snapshot.base_rate", snapshot.base_rate, positive=True)
        self.level = _check_int("snapshot.level", snapshot.level, 0)
        self._last_seq = dict(snapshot.last_seq)


class LocalChannel:
    """Delivers signals to controllers in the same process (one driver owns all stages)."""

    def __init__(self, controllers: Mapping[str, RateController]) -> None:
        self._controllers = dict(controllers)

    def deliver(self, signal: Signal) -> bool:
        controller = self._controllers.get(signal.target)
        if controller is None:
            raise ValueError(
                f"no stage named {signal.target!r}; known: {sorted(self._controllers)}"
            )
        controller.apply(signal)
        return True


# --- task side ----------------------------------------------------------------------------


def sensitivity(qml: int, queue_length: int, send_rate: float, max_s: float) -> float:
    """Equation 1: ``(QML - queueLength) / (2 * T.V)`` seconds, kept within ``[0, max_s]``.

    The clamp is ours: a full queue gives 0 (signal at once) and a stalled task
    (``T.V == 0``, e.g. its sink is down) gives ``max_s`` instead of never signalling.
    """
    if send_rate <= 0:
        return max_s
    return min(max(0.0, (qml - queue_length) / (2.0 * send_rate)), max_s)


@dataclass(frozen=True)
class MonitorSnapshot:
    """A :class:`QueueMonitor`'s state; times are relative so a new clock can resume it."""

    name: str
    next_seq: int
    outstanding: int
    pending: Signal | None
    pending_in_s: float | None
    attempt: int
    low_for_s: float | None


class QueueMonitor:
    """Algorithm 1 for one task: watch its input queue, signal its direct upstream.

    Call :meth:`step` on every tick (the driver: once per micro-batch or control tick)
    with the queue length and ``T.V``, the task's send rate before any backpressure on it
    (its ``V_init`` if it has one). A timer fires on the first step at or after its time;
    :meth:`next_due` says when that is. ``outstanding`` counts backpressure signals
    delivered and not yet cancelled: cancels are sent only while it is positive, so an
    idle task does not flood the channel.
    """

    def __init__(
        self,
        name: str,
        upstream: str,
        *,
        qml: int,
        load_factor: float,
        channel: SignalChannel,
        clock: Clock,
        retry_policy: BackoffPolicy | None = None,
        max_sensitivity_s: float = 30.0,
    ) -> None:
        for arg, value in (("name", name), ("upstream", upstream)):
            if not isinstance(value, str) or not value:
                raise ValueError(f"{arg} must be a non-empty str, got {value!r}")
        self.name = name
        self.upstream = upstream
        self.qml = _check_int("qml", qml, 1)
        lf = _check_number("load_factor", load_factor)
        if not 0.5 < lf < 1.0:
            # Below 0.5 the low mark (1 - lf) * QML would sit above the high mark lf * QML.
            raise ValueError(f"load_factor must be in (0.5, 1), got {load_factor!r}")
        self.load_factor = lf
        self.max_sensitivity_s = _check_number("max_sensitivity_s", max_sensitivity_s)
        self._channel = channel
        self._clock = clock
        self._retry = retry_policy if retry_policy is not None else FlumeBackoff()
        self._next_seq = 1
        self.outstanding = 0
        self._pending: Signal | None = None
        self._pending_due: float | None = None
        self._attempt = 0
        self._low_since: float | None = None
        self._last_retry_delay = 0.0

    @property
    def high_mark(self) -> float:
        return self.load_factor * self.qml

    @property
    def low_mark(self) -> float:
        return (1.0 - self.load_factor) * self.qml

    @property
    def pending(self) -> Signal | None:
        """The scheduled (or retrying) signal, if any: the paper's timeSchedule."""
        return self._pending

    def next_due(self) -> float | None:
        return self._pending_due

    @property
    def state(self) -> str:
        """For metrics: ``signalling`` (timer pending), ``pressing`` (signals in force) or
        ``normal``."""
        if self._pending is not None:
            return "signalling"
        return "pressing" if self.outstanding else "normal"

    def _schedule(self, kind: SignalKind, due: float, now: float) -> None:
        self._pending = Signal(kind, self.name, self.upstream, self._next_seq, now)
        self._next_seq += 1
        self._pending_due = due
        self._attempt = 0

    def _try_deliver(self, now: float) -> Signal | None:
        signal = self._pending
        assert signal is not None and self._pending_due is not None
        try:
            delivered = self._channel.deliver(signal)
            error: object = "channel returned False"
        except ChannelError as exc:
            delivered, error = False, exc
        if delivered:
            self.outstanding += 1 if signal.kind == "backpressure" else -1
            self._pending = self._pending_due = None
            self._attempt = 0
            return signal
        self._attempt += 1
        wait = self._retry.delay(self._attempt)
        if wait is None:
            # A control signal is never dropped: keep retrying at the last interval.
            wait = self._last_retry_delay
        self._last_retry_delay = wait
        self._pending_due = now + wait
        _log.warning(
            "%s: %s signal %d to %s not delivered (attempt %d: %s); retrying in %.3f s",
            self.name,
            signal.kind,
            signal.seq,
            signal.target,
            self._attempt,
            error,
            wait,
        )
        return None

    def step(self, queue_length: int, send_rate: float) -> Signal | None:
        """One iteration of Algorithm 1's loop for this task; returns a signal delivered now."""
        _check_int("queue_length", queue_length, 0)
        _check_number("send_rate", send_rate)
        now = self._clock.now()
        sens = sensitivity(self.qml, queue_length, send_rate, self.max_sensitivity_s)
        if queue_length > self.high_mark:
            self._low_since = None
            if self._pending is None:
                self._schedule("backpressure", now + sens, now)
        elif queue_length < self.low_mark:
            if self._low_since is None:
                self._low_since = now
            if self.outstanding > 0 and self._pending is None and now - self._low_since >= sens:
                self._schedule("cancel", now, now)
                # Each further cancel needs another full sensitivity period of low load.
                self._low_since = now
        else:
            self._low_since = None
        due = self._pending_due  # set together with _pending (see _hold)
        if self._pending is not None and due is not None and now >= due:
            return self._try_deliver(now)
        return None

    def snapshot(self) -> MonitorSnapshot:
        now = self._clock.now()
        return MonitorSnapshot(
            name=self.name,
            next_seq=self._next_seq,
            outstanding=self.outstanding,
            pending=self._pending,
            pending_in_s=None if self._pending_due is None else self._pending_due - now,
            attempt=self._attempt,
            low_for_s=None if self._low_since is None else now - self._low_since,
        )

    def restore(self, snapshot: MonitorSnapshot) -> None:
        if snapshot.name != self.name:
            raise ValueError(f"snapshot of {snapshot.name!r} restored into {self.name!r}")
        now = self._clock.now()
        self._next_seq = _check_int("snapshot.next_seq", snapshot.next_seq, 1)
        self.outstanding = _check_int("snapshot.outstanding", snapshot.outstanding, 0)
        self._pending = snapshot.pending
        self._pending_due = None if snapshot.pending_in_s is None else now + snapshot.pending_in_s
        self._attempt = _check_int("snapshot.attempt", snapshot.attempt, 0)
        self._low_since = None if snapshot.low_for_s is None else now - snapshot.low_for_s
