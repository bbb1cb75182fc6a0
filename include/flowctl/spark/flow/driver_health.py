"""The driver's watch for a stall the planner cannot report itself.

The planner judges health inside ``latestOffset``; but when the broker stops answering,
the planner's own Kafka calls block (up to the client's request timeout) and the running
batch's lanes wait on their fetches, so Spark calls no ``latestOffset`` and no window
closes: a stall would be silent. The driver's control loop runs regardless; it applies
the same rule (:class:`~flowctl.core.health.HealthMonitor`) to what it can see: the
tuples the planner last reported in flight or buffered, and the Eden checkpoints in the
database. While it finds the topology STALLED it stamps that on the planner's windows,
and when no window came for a whole ``window_s`` it writes one itself (no counts, the
backlog last seen, STALLED and why), so the page, the CLI and the sensors see it.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

from flowctl.core.clock import Clock
from flowctl.core.health import Health, HealthMonitor
from flowctl.core.metrics_row import COUNTS, MetricsRow
from flowctl.core.window_figures import WindowFigures
from flowctl.spark.flow.channels import SpoutState

log = logging.getLogger("flowctl.job")

#: Seconds between the driver's looks at the checkpoints (one small query each).
CHECK_EVERY_S = 2.0


class DriverHealth:
    """The stall rule on the driver's side; see the module's docstring."""

    def __init__(
        self,
        topology_id: str,
        clock: Clock,
        *,
        stall_after_s: float,
        window_s: float,
    ) -> None:
        self.topology_id = topology_id
        self.monitor = HealthMonitor(clock, stall_after_s=stall_after_s)
        self.window_s = window_s
        self.current = Health()
        self._checked = -1e9
        self._clock = clock
        #: The planner's state last read: while memcached (its channel) is away, the
        #: backlog it showed still stands, and the failed read is the cause.
        self._seen: SpoutState | None = None
        #: The planner's STALLED health of its latest window (:meth:`heard`), if it was.
        self._planners: Health | None = None

    def check(
        self,
        state: SpoutState | None,
        durable: Callable[[], int],
        admitting: bool,
        flush_error: BaseException | None = None,
        state_error: BaseException | None = None,
    ) -> Health:
        """Judge now (at most every :data:`CHECK_EVERY_S`): ``durable()`` reads the sum of
        the Eden checkpoints (an error reading it is the cause, if a stall follows);
        ``flush_error`` is the MRWQ flusher's last error, ``None`` once a flush succeeded
        (a database refusing the flush is the usual cause of nothing becoming durable);
        ``state_error``: why ``state`` could not be read (memcached away): the state last
        read stands for it."""
        if state is not None:
            self._seen = state
        elif state_error is not None:
            state = self._seen
        now = self._clock.now()
        if now - self._checked < CHECK_EVERY_S:
            return self.current
        self._checked = now
        if flush_error is not None:
            self.monitor.error(
                f"flushing the MRWQ to the database: {type(flush_error).__name__}: {flush_error}"
            )
        if state_error is not None:  # the nearer cause: the planner's channel is away
            self.monitor.error(
                f"reading the planner's state from memcached: "
                f"{type(state_error).__name__}: {state_error}"
            )
        try:
            position = durable()
        except Exception as exc:
            self.monitor.error(f"reading the checkpoints: {type(exc).__name__}: {exc}")
            position = -1  # no progress seen
        backlog = 0 if state is None else state.in_flight + (state.buffered if admitting else 0)
        quiet = None if state is None else time.time() - state.at
        slowest = None if quiet is None else f"the planner has not planned for {quiet:.0f} s"
        health = self.monitor.observe(backlog=backlog, durable=position, slowest_step=slowest)
        if health.state != self.current.state:
            if health.healthy:
                log.info("topology %s: HEALTHY again (was STALLED)", self.topology_id)
            else:
                log.warning("topology %s: STALLED: %s", self.topology_id, health.cause)
        self.current = health
        return health

    def heard(self, row: MetricsRow) -> None:
        """The planner's latest window, written or not (a window of the driver's own may
        have covered its time already): while it says STALLED, its cause names the read
        that failed, nearer than the driver's "the planner has not planned"."""
        stalled = row.health == "STALLED" and row.health_cause is not None
        self._planners = Health(row.health, row.health_cause) if stalled else None

    def _shown(self) -> Health:
        """The health a window shows while the driver finds the topology STALLED: the
        planner's own STALLED cause, unless the driver saw an error of its own (a flush,
        memcached, the checkpoints), which is nearer still."""
        if self._planners is not None and self.monitor.last_error is None:
            return self._planners
        return self.current

    def stamp(self, row: MetricsRow) -> MetricsRow:
        """The planner's window (after :meth:`heard`), STALLED if the driver finds it so
        (HALTED stays)."""
        if self.current.healthy or row.health == "HALTED":
            return row
        shown = self._shown()
        return dataclasses.replace(row, health=shown.state, health_cause=shown.cause)

    def quiet_window(self, last: MetricsRow | None, state: SpoutState | None) -> MetricsRow | None:
        """A window of its own while STALLED and the planner closed none for ``window_s``
        since ``last`` (the last window written, the template of lanes; ``None``: none
        was written yet, the window then covers the last ``window_s``)."""
        now = time.time()
        state = state or self._seen
        if last is None:  # no window yet (the planner blocked before closing one)
            last = MetricsRow(
                topology=self.topology_id,
                window_start=now - self.window_s,
                window_end=now - self.window_s,
                **_zero_counts(),
                records_per_s=0.0,
                latency_p50_s=None,
                latency_p99_s=None,
                backlog=0,
                backpressure_level=0,
                lanes=[] if state is None else state.lanes,
            )
        if self.current.healthy or now - last.window_end < self.window_s:
            return None
        backlog = 0 if state is None else state.in_flight + state.buffered
        # Nothing was measured in it: no figure carries over but the MRWQ's length and the
        # rebuilds so far (a count since the start).
        # Keyword arguments by field name: mypy checks each value against every field.
        unmeasured: dict[str, Any] = dict.fromkeys(
            f.name for f in dataclasses.fields(WindowFigures)
        )
        unmeasured["mrwq"] = None if state is None else state.mrwq
        unmeasured["rebuilds"] = last.rebuilds
        return dataclasses.replace(
            last,
            **unmeasured,
            window_start=last.window_end,
            window_end=now,
            n=0,
            health=self._shown().state,
            health_cause=self._shown().cause,
            **_zero_counts(),
            records_per_s=0.0,
            latency_p50_s=None,
            latency_p99_s=None,
            backlog=backlog,
        )


def _zero_counts() -> dict[str, Any]:  # keyword arguments by field name, as above
    """Every count of a metrics window at 0 (a window in which nothing was measured)."""
    return dict.fromkeys(COUNTS, 0)
