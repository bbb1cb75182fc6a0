"""The planner's log of its lanes' windows, at a readable rate.

A lane changing state (congestion is news) is logged at once; sizes that only moved at
most every ``every_s`` (once a minute in the planner), so a steady stream's ups and downs
do not flood the stream task's log. The line names no batch number: the planner's count
is not Spark's batch id.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from flowctl.core.clock import Clock
from flowctl.core.window import AdaptiveWindow

log = logging.getLogger("flowctl.spark.flow.planner")  # the planner's story, one logger


class WindowLog:
    """What the last window line said, to log only changes worth a line."""

    def __init__(self, topology_id: str, clock: Clock, every_s: float) -> None:
        self.topology_id = topology_id
        self._clock = clock
        self.every_s = every_s
        self._sizes: tuple[int, ...] = ()
        self._states: tuple[str, ...] = ()
        self._logged_at = -1e9

    def batch(self, seq: int, dispatched: int, windows: Sequence[AdaptiveWindow]) -> None:
        """Batch ``seq`` dispatched ``dispatched`` tuples; its lanes' windows now."""
        sizes = tuple(w.size for w in windows)
        states = tuple(str(w.state) for w in windows)
        now = self._clock.now()
        due = now - self._logged_at >= self.every_s
        if sizes != self._sizes and (states != self._states or due):
            self._logged_at = now
            self._states = states
            log.info(
                "flow %s: %d tuple(s) dispatched; windows %s -> %s, states %s",
                self.topology_id,
                dispatched,
                list(self._sizes),
                list(sizes),
                list(states),
            )
            self._sizes = sizes
