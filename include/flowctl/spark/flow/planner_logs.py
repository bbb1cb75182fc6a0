"""The planner's story in the task log, at a readable rate.

Mixed into :class:`~flowctl.spark.flow.planner.FlowPlanner` (whose attributes it uses):
the planning cost per batch and phase, and the lanes' windows when they change.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from flowctl.core.log_pacing import QUIET_EVERY_S

if TYPE_CHECKING:
    from flowctl.core.clock import Clock
    from flowctl.core.spout import Spout
    from flowctl.core.timings import PhaseTimings
    from flowctl.spark.flow.settings import FlowSettings

log = logging.getLogger("flowctl.spark.flow.planner")

#: Seconds between log lines about windows that only resized (or backpressure levels that
#: only moved, without a stage entering or leaving backpressure): a lane's state change
#: is logged at once, the sizes' ups and downs of a steady stream once a minute.
WINDOW_LOG_EVERY_S = QUIET_EVERY_S
#: How often the planning cost per batch is logged (seconds).
PLANNING_LOG_EVERY_S = QUIET_EVERY_S
#: ... the first time after this many seconds: Spark does not always stop a query's
#: source runner through ``stop()``, so a short run (a benchmark) would log none.
PLANNING_FIRST_LOG_S = 10.0


class PlannerLogs:
    """Planning cost and window changes, logged."""

    settings: FlowSettings
    clock: Clock
    spout: Spout | None
    seq: int
    timings: PhaseTimings
    _last_timings_log: float
    _last_windows: tuple[int, ...]
    _last_states: tuple[str, ...]
    _last_window_log: float

    def _log_timings(self) -> None:
        self._last_timings_log = self.clock.now()
        summary = self.timings.summary()
        total = summary.pop("total")
        if not total["n"]:
            return
        log.info(
            "flow %s: planning per batch over %s batch(es), ms: p50 %s, p99 %s, max %s; "
            "by phase p50/p99: %s",
            self.settings.topology_id,
            total["n"],
            total["p50"],
            total["p99"],
            total["max"],
            ", ".join(f"{name} {v['p50']}/{v['p99']}" for name, v in summary.items()),
        )

    def _log_windows(self, dispatched: int) -> None:
        """Window changes at a readable rate: at once when a lane's state changes
        (congestion is news), sizes at most every ``WINDOW_LOG_EVERY_S``. The line names
        no batch number: the planner's count is not Spark's batch id."""
        assert self.spout is not None
        sizes = tuple(w.size for w in self.spout.windows)
        states = tuple(str(w.state) for w in self.spout.windows)
        now = self.clock.now()
        due = now - self._last_window_log >= WINDOW_LOG_EVERY_S
        if sizes != self._last_windows and (states != self._last_states or due):
            self._last_window_log = now
            self._last_states = states
            log.info(
                "flow %s: %d tuple(s) dispatched; windows %s -> %s, states %s",
                self.settings.topology_id,
                dispatched,
                list(self._last_windows),
                list(sizes),
                list(states),
            )
            self._last_windows = sizes
