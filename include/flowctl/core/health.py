"""A topology's health beside its state: HEALTHY, RECOVERING, STALLED or HALTED (pure;
time passed in).

A topology can be ACTIVE and still do nothing useful. Two such cases must not pass
silently:

- **STALLED**: there is a backlog (``backlog > 0``) and nothing became durable for
  ``stall_after_s`` (the broker stopped answering, the database refuses the flush, a step
  hangs). The cause is the last read or flush error seen since the last progress, else
  the slowest step. Any durable progress makes the topology HEALTHY again, at once. So is
  a topology that could not read the log's ends for ``stall_after_s``, whatever the
  backlog last seen: a broker that answers nothing may hold one (:meth:`blind`).
- **RECOVERING**: results queued in the MRWQ were lost (a worker killed while writing
  one, memcached evicting or restarting), and the topology rebuilds its spout from the
  database to dispatch again what is not durable. The backlog and the missing durable
  progress are expected meanwhile, and shown at once with the rebuild as the cause (a
  warning, not yet a stall): it ends at the first durable progress after the rebuild,
  and becomes STALLED like any other lack of progress after ``stall_after_s``.
- **HALTED**: a code error. When, in one window, most tuples fail with the same
  exception type and none succeeds, the error is the pipeline's code, not its records:
  retrying and dead-lettering would only move the whole stream to the DLQ,
  "successfully". With ``on_code_error = "halt"`` (the default) the topology stops
  admitting, keeps its offsets and waits for a fix (a new deployment) or a stop; HALTED
  is not left by itself. ``"dead_letter"`` keeps today's behaviour (records' failures).
  ``PoisonRecord`` (a record the code refuses on purpose) and timeouts are always
  records' failures and never halt.

:class:`HealthMonitor` applies both rules; the planner feeds it once per planning call
and stamps its :class:`Health` on each metrics window it closes (the window carries
health, see :class:`flowctl.core.metrics_row.MetricsRow`).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from .clock import Clock

__all__ = [
    "ALERT_STATES",
    "CODE_ERROR_ACTIONS",
    "HEALTH_STATES",
    "STALE_AFTER_WINDOWS",
    "CodeError",
    "Health",
    "HealthMonitor",
    "code_error",
    "stale_for",
]

HEALTH_STATES = ("HEALTHY", "RECOVERING", "STALLED", "HALTED")
#: States that need an operator (``flowctl stream status`` exits 3, the callback is
#: called): RECOVERING resolves itself, or becomes STALLED.
ALERT_STATES = ("STALLED", "HALTED")
#: ``[flow] on_code_error``: what a code error does to the topology.
CODE_ERROR_ACTIONS = ("halt", "dead_letter")
#: A topology's newest stored window older than this many window lengths is stale: its
#: health is not known now (the driver can store no window, or is gone), and it is shown
#: as such, never as current.
STALE_AFTER_WINDOWS = 2
#: Exception types that are a record's fault by contract, never the code's.
RECORD_ERRORS = frozenset({"PoisonRecord"})
#: A window needs at least this many tuples failing alike to be a code error: one or two
#: failures of a quiet window are not evidence enough to stop a topology.
MIN_CODE_ERRORS = 3


@dataclass(frozen=True)
class Health:
    """A topology's health: the state, why (``None`` when HEALTHY), since when (clock s)."""

    state: str = "HEALTHY"
    cause: str | None = None
    since: float | None = None

    def __post_init__(self) -> None:
        if self.state not in HEALTH_STATES:
            raise ValueError(f"health state={self.state!r} must be one of {HEALTH_STATES}")

    @property
    def healthy(self) -> bool:
        return self.state == "HEALTHY"


def stale_for(window_start: float, window_end: float, window_s: float, now: float) -> float | None:
    """Seconds since a topology's newest window ended, when that is more than
    :data:`STALE_AFTER_WINDOWS` window lengths (``None``: the window is current).

    A window's length is ``window_s`` (``[flow] metrics_window_s``) or its own span when
    longer: a planner whose batches take longer than ``window_s`` closes longer windows,
    and is not stale for that. Times are epoch seconds."""
    age = now - window_end
    length = max(window_s, window_end - window_start)
    return round(age, 1) if age > STALE_AFTER_WINDOWS * length else None


@dataclass(frozen=True)
class CodeError:
    """The verdict of :func:`code_error`: ``failed`` of ``tuples`` raised ``error_type``."""

    error_type: str
    failed: int
    tuples: int
    example: str

    def describe(self) -> str:
        return (
            f"code error: {self.failed} of {self.tuples} tuples raised {self.error_type} "
            f"and none succeeded ({self.example[:300]})"
        )


def error_type(error: str) -> str:
    """The exception type of a tuple's error text (``"KeyError: 'x'"`` -> ``KeyError``)."""
    head = error.strip().split(":", 1)[0].strip()
    return head.rsplit(".", 1)[-1] or "unknown"


def code_error(succeeded: int, timed_out: int, errors: Sequence[str]) -> CodeError | None:
    """Whether one window's tuples show a code error (see the module's docstring).

    ``succeeded``: tuples acked; ``timed_out``: tuples that ran out of time; ``errors``:
    the error text (``"Type: message"``) of each tuple that raised. A code error: none
    succeeded, and one exception type, not a record error, was raised by more than half
    of the window's tuples and by at least :data:`MIN_CODE_ERRORS` of them.
    """
    for name, value in (("succeeded", succeeded), ("timed_out", timed_out)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"code_error: {name}={value!r} must be an int >= 0")
    tuples = succeeded + timed_out + len(errors)
    if succeeded or not errors:
        return None
    kinds = Counter(error_type(e) for e in errors if error_type(e) not in RECORD_ERRORS)
    if not kinds:
        return None
    kind, failed = kinds.most_common(1)[0]
    if failed < MIN_CODE_ERRORS or failed * 2 <= tuples:
        return None
    example = next(e for e in errors if error_type(e) == kind)
    return CodeError(kind, failed, tuples, example)


class HealthMonitor:
    """The health rules over time: fed by the planner, read once per metrics window."""

    def __init__(
        self, clock: Clock, *, stall_after_s: float = 60.0, on_code_error: str = "halt"
    ) -> None:
        if (
            isinstance(stall_after_s, bool)
            or not isinstance(stall_after_s, int | float)
            or not math.isfinite(stall_after_s)
            or stall_after_s <= 0
        ):
            raise ValueError(f"stall_after_s={stall_after_s!r} must be a number > 0")
        if on_code_error not in CODE_ERROR_ACTIONS:
            raise ValueError(
                f"on_code_error={on_code_error!r} must be one of {', '.join(CODE_ERROR_ACTIONS)}"
            )
        self._clock = clock
        self.stall_after_s = float(stall_after_s)
        self.on_code_error = on_code_error
        self._durable: int | None = None
        self._progress_at = clock.now()
        self._error: str | None = None
        self._halted: Health | None = None
        self._stalled_since: float | None = None
        self._recovery: _Recovery | None = None
        self._blind: tuple[float, str] | None = None

    def blind(self, what: str) -> None:
        """The backlog cannot be known (``what``: the read of the log's ends that failed,
        and why): past ``stall_after_s`` of it the topology is STALLED even when the
        backlog last seen was empty, since a broker that answers nothing may hold one."""
        since = self._blind[0] if self._blind is not None else self._clock.now()
        self._blind = (since, what)

    def sighted(self) -> None:
        """The log's ends were read again: the backlog is known."""
        self._blind = None

    def recovering(self, cause: str) -> None:
        """A rebuild after lost MRWQ items was asked for (``cause``: which, and why):
        RECOVERING until the first durable progress after :meth:`rebuilt`."""
        since = self._recovery.since if self._recovery is not None else self._clock.now()
        self._recovery = _Recovery(cause, since)

    def rebuilt(self) -> None:
        """The rebuild asked for by :meth:`recovering` is done: what was not durable is
        dispatched again, and the next durable progress ends the recovery."""
        if self._recovery is not None:
            self._recovery.rebuilt = True

    @property
    def halted(self) -> bool:
        return self._halted is not None

    def error(self, what: str) -> None:
        """A read or flush error (``what`` says which and why): the cause of a stall."""
        self._error = what

    @property
    def last_error(self) -> str | None:
        """The error seen since the last progress (:meth:`error`), if any."""
        return self._error

    def window(self, succeeded: int, timed_out: int, errors: Sequence[str]) -> CodeError | None:
        """One batch's tuple outcomes; returns the code error when it halts the topology.

        Returns ``None`` when there is none, when the topology is halted already (the
        error is reported once), or when ``on_code_error`` is ``"dead_letter"``.
        """
        found = code_error(succeeded, timed_out, errors)
        if found is None or self.halted or self.on_code_error != "halt":
            return None
        self._halted = Health("HALTED", found.describe(), self._clock.now())
        return found

    def observe(self, *, backlog: int, durable: int, slowest_step: str | None = None) -> Health:
        """The health now, given the backlog and the durable position (any growing count).

        ``slowest_step`` names the step that took longest lately (the cause of a stall
        when no error was seen).
        """
        now = self._clock.now()
        if self._durable is None or durable > self._durable or backlog <= 0:
            self._progress_at, self._error, self._stalled_since = now, None, None
            if self._recovery is not None and self._recovery.rebuilt:
                self._recovery = None
        self._durable = durable if self._durable is None else max(self._durable, durable)
        if self._halted is not None:
            return self._halted
        if self._blind is not None and now - self._blind[0] >= self.stall_after_s:
            blind_s = now - self._blind[0]
            cause = f"backlog unknown, the log's ends unread for {blind_s:.0f} s; {self._blind[1]}"
            return Health("STALLED", cause, self._blind[0] + self.stall_after_s)
        idle = now - self._progress_at
        recovery = self._recovery
        if idle < self.stall_after_s:
            if recovery is None:
                return Health()
            step = "dispatched again" if recovery.rebuilt else "rebuilding"
            cause = f"{recovery.cause}; {step}, backlog {backlog}, nothing durable for {idle:.0f} s"
            return Health("RECOVERING", cause, recovery.since)
        if self._stalled_since is None:
            self._stalled_since = now
        why = (
            self._error
            or (recovery.cause if recovery is not None else None)
            or (f"slowest step: {slowest_step}" if slowest_step else "unknown")
        )
        cause = f"backlog {backlog}, nothing durable for {idle:.0f} s; {why}"
        return Health("STALLED", cause, self._stalled_since)


@dataclass
class _Recovery:
    """A rebuild after lost MRWQ items: why, since when, and whether it has happened."""

    cause: str
    since: float
    rebuilt: bool = False
