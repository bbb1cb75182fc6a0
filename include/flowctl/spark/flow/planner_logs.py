"""The planner's story in the task log, at a readable rate.

Mixed into :class:`~flowctl.spark.flow.planner.FlowPlanner` (whose attributes it uses):
the planning cost per batch and phase (the lanes' windows: :mod:`.window_log`).
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
    """Planning cost, logged."""

    settings: FlowSettings
    clock: Clock
    spout: Spout | None
    seq: int
    timings: PhaseTimings
    _last_timings_log: float

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
