"""A requested rebuild of the spout waits for the MRWQ to be flushed (docs/flow-control.md,
"A rebuild waits for the queue"): the planner's collaborator that reads the queue's
counters, holds admission meanwhile and says so once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from flowctl.core.persistence import FlushBarrier, queue_counters

if TYPE_CHECKING:
    from flowctl.adapters.memcached_store import MemcachedStore

log = logging.getLogger("flowctl.spark.flow.planner")


class RebuildWait:
    """Whether a rebuild may read the database now (:class:`FlushBarrier`)."""

    def __init__(
        self,
        topology_id: str,
        namespace: str,
        store: Callable[[], MemcachedStore],
        warn: Callable[[str, BaseException], None],
    ) -> None:
        self.topology_id = topology_id
        self.namespace = namespace
        self._store = store
        self._warn = warn
        self.barrier = FlushBarrier()
        #: A rebuild is waiting: nothing is admitted.
        self.pending = False

    def cancel(self) -> None:
        """No rebuild waits any more (the number asked for went back to the one done)."""
        self.barrier.clear()
        self.pending = False

    def flushed(self, rebuild: int) -> bool:
        """Every result queued when the rebuild was asked for is flushed; until then it
        waits (asked every batch), logged once at WARNING."""
        try:
            tail, head = queue_counters(self._store(), self.namespace)
        except Exception as exc:
            self._warn("reading the MRWQ counters before a rebuild", exc)
            tail, head = None, None
        first = self.barrier.upto is None
        if self.barrier.passed(tail, head):
            self.barrier.clear()
            self.pending = False
            return True
        if first or not self.pending:
            log.warning(
                "flow %s: rebuild %s waits until the MRWQ is flushed up to item %s (results "
                "of tuples in flight when the gap was repaired; flushed up to %s): no "
                "admission meanwhile",
                self.topology_id,
                rebuild,
                self.barrier.upto,
                None if head is None else head - 1,
            )
        self.pending = True
        return False
