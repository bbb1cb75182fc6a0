"""The planner's side of a topology's health: feeds :class:`~flowctl.core.health.HealthMonitor`.

The planner sees everything the rules need: the lanes' per-tuple outcomes (a code error),
its own read and flush errors (the cause of a stall), the backlog and what the database
says is durable. This module turns those into the monitor's inputs and logs each change
of health once, so the stream task's log says when and why a topology stalled or halted.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TypeVar

from flowctl.core.clock import Clock
from flowctl.core.health import Health, HealthMonitor
from flowctl.core.spout_contract import LaneResult, Outcome

log = logging.getLogger("flowctl.spark.flow")

#: Whatever a checkpoint is keyed by: only its offsets are summed.
_Key = TypeVar("_Key")

#: Outcomes of a tuple whose code raised (the error text names the exception type).
_RAISED = frozenset({Outcome.REPLAYED, Outcome.DLQ})
#: Failures that are the records' by contract: they never make a code error.
_RECORDS = frozenset({Outcome.TIMED_OUT, Outcome.POISON})


class PlannerHealth:
    """One planner's health: the monitor, the inputs it needs, and the log of changes."""

    def __init__(
        self,
        topology_id: str,
        eden: str,
        clock: Clock,
        *,
        stall_after_s: float,
        on_code_error: str,
    ) -> None:
        self.topology_id = topology_id
        self._eden = f"{eden}:"
        self._outcomes: list[LaneResult] = []
        self.monitor = HealthMonitor(
            clock, stall_after_s=stall_after_s, on_code_error=on_code_error
        )
        self.durable = 0
        self.current = Health()

    @property
    def halted(self) -> bool:
        """A code error stopped admission: the planner dispatches nothing more."""
        return self.monitor.halted

    def results(self, results: Sequence[LaneResult]) -> None:
        """A lane's report of a batch: its Eden tuples are judged with the others of this
        planning call (:meth:`observe`). Replayed tuples are left out: a record failing
        again is a record's failure, whichever exception it raises."""
        self._outcomes.extend(r for r in results if r.tuple_id.startswith(self._eden))

    def _judge(self) -> None:
        """The outcomes since the last call as one window: a code error halts, logged at
        ERROR once."""
        outcomes, self._outcomes = self._outcomes, []
        acked = sum(1 for r in outcomes if r.outcome is Outcome.ACKED)
        others = sum(1 for r in outcomes if r.outcome in _RECORDS)
        errors = [r.error or "unknown" for r in outcomes if r.outcome in _RAISED]
        found = self.monitor.window(acked, others, errors)
        if found is not None:
            trace = next((r.trace for r in outcomes if r.error == found.example and r.trace), "")
            log.error(
                "flow %s: HALTED: %s. Admission stopped, offsets kept: fix the pipeline's "
                "code and deploy it, or stop the topology ([flow] on_code_error = "
                '"dead_letter" replays and dead-letters such records instead). Error: %s%s',
                self.topology_id,
                found.describe(),
                found.example,
                f"\n{trace}" if trace else " (no traceback was reported)",
            )

    def error(self, what: str, exc: BaseException) -> None:
        """A read or flush error of the planner: the cause of a stall, if one follows."""
        self.monitor.error(f"{what}: {type(exc).__name__}: {exc}")

    def blind(self, what: str, exc: BaseException) -> None:
        """The log's ends could not be read (the backlog is unknown; STALLED if it lasts)."""
        self.monitor.blind(f"{what}: {type(exc).__name__}: {exc}")

    def sighted(self) -> None:
        """The log's ends were read."""
        self.monitor.sighted()

    def recovering(self, cause: str) -> None:
        """A rebuild after lost MRWQ items was asked for: RECOVERING, with ``cause``."""
        self.monitor.recovering(cause)

    def rebuilt(self) -> None:
        """The spout was rebuilt from the database (any rebuild: one after a gap ends
        RECOVERING at the next durable progress)."""
        self.monitor.rebuilt()

    def durable_at(self, checkpoints: Mapping[_Key, int]) -> None:
        """What the database says is durable: the sum of the Eden checkpoints."""
        self.durable = sum(checkpoints.values())

    def observe(self, backlog: int, slowest_step: str | None) -> Health:
        """The health now; a change is logged (WARNING when not HEALTHY, else INFO)."""
        self._judge()
        health = self.monitor.observe(
            backlog=backlog, durable=self.durable, slowest_step=slowest_step
        )
        if health.state != self.current.state:
            if health.healthy:
                log.info("flow %s: HEALTHY again (was %s)", self.topology_id, self.current.state)
            elif health.state in ("STALLED", "RECOVERING"):
                log.warning("flow %s: %s: %s", self.topology_id, health.state, health.cause)
        self.current = health
        return health
