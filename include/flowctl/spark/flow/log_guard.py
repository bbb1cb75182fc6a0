"""The planner's guard over the log: records lost before processing, read errors that persist.

Every ``latestOffset`` the planner hands this guard what it read anyway (Eden's ends, the
durable checkpoint, the spout's positions, the lanes' feedback); every
:data:`STARTS_EVERY_S` the ends' thread also reads Eden's log starts (one ListOffsets
request), so the guard adds no round trip to a batch's planning.

- A range lost before processing (:func:`flowctl.core.data_loss.lost_ranges`, declared by
  :class:`~flowctl.core.data_loss.LossWatch`) is logged at ERROR, one line per partition.
  ``[topics] on_data_loss = "fail"`` then raises :class:`DataLossError` from
  ``latestOffset``: Spark fails the query, the driver records FAILED with the ranges as
  the topology's cause. ``"skip"`` records the range and moves the checkpoint over it
  (:func:`flowctl.adapters.data_loss.record_skip`) and the planner rebuilds its spout from
  the database. A reset log fails under both settings: its new offsets start again below
  the durable ranges of the old log, so neither the checkpoint nor reconcile could stay
  exact.
- A read error (the ends' read, a lane's read of a tuple) is retried: the ends next
  batch, a tuple by another lane. One that persists for a partition past ``[flow]
  read_error_timeout_s`` without a success in between raises :class:`ReadPathError`
  naming topic, partition and error (docs/flow-control.md, "Data loss and read errors").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from flowctl.core.clock import Clock
from flowctl.core.data_loss import (
    DataLossError,
    LossKind,
    LossWatch,
    LostRange,
    ReadErrors,
    ReadPathError,
    lost_ranges,
)
from flowctl.core.spout_contract import LaneResult
from flowctl.core.tuples import TupleRange

log = logging.getLogger(__name__)

#: Seconds between reads of Eden's log starts. A start loss is declared by two reads
#: that agree (:class:`~flowctl.core.data_loss.LossWatch`), so it stops a topology
#: 5-10 s after retention took records it had not processed.
STARTS_EVERY_S = 5.0
#: The error text a lane reports for a tuple it could not read (``flow.lane``).
READ_FAILED = "read failed: "


class LogGuard:
    """One topology's data-loss and read-error decisions (see the module docstring).

    ``skip(range) -> checkpoint`` stores a skipped range (the database); ``rebuild()``
    rebuilds the planner's spout from the database after a skip.
    """

    def __init__(
        self,
        topology_id: str,
        topic: str,
        *,
        policy: str,
        read_error_timeout_s: float,
        clock: Clock,
        skip: Callable[[LostRange], int],
        rebuild: Callable[[], object],
    ) -> None:
        self.topology_id = topology_id
        self.topic = topic
        self.policy = policy
        self.clock = clock
        self._skip = skip
        self._rebuild = rebuild
        self.watch = LossWatch()
        self.read_errors = ReadErrors(clock, read_error_timeout_s)
        self._last_starts = -1e9
        self.skipped: list[LostRange] = []

    def starts_due(self) -> bool:
        """Whether this batch's ends read should read Eden's starts too (and note it)."""
        now = self.clock.now()
        if now - self._last_starts < STARTS_EVERY_S:
            return False
        self._last_starts = now
        return True

    # -- read errors --

    def ends_failed(self, exc: BaseException) -> None:
        """The read of Eden's ends failed: a read error of the whole topic."""
        self.read_errors.failed(self.topic, None, f"{type(exc).__name__}: {exc}")
        self.raise_if_persistent()

    def ends_read(self) -> None:
        self.read_errors.succeeded(self.topic, None)

    def lane_results(self, results: Iterable[LaneResult]) -> None:
        """A lane's reads: a tuple whose read failed is a failure of its partition, any
        other outcome of an Eden tuple a success."""
        for r in results:
            try:
                t = TupleRange.parse_id(r.tuple_id)
            except ValueError:
                continue
            if t.topic != self.topic:
                continue
            if r.error.startswith(READ_FAILED):
                self.read_errors.failed(t.topic, t.partition, r.error[len(READ_FAILED) :])
            else:
                self.read_errors.succeeded(t.topic, t.partition)

    def raise_if_persistent(self) -> None:
        failures = self.read_errors.persistent()
        if failures:
            error = ReadPathError(failures, self.read_errors.bound_s)
            log.error("flow %s: FAILED: %s", self.topology_id, error)
            raise error

    # -- data loss --

    def check(
        self,
        *,
        checkpoints: Mapping[int, int] | None,
        ends: Mapping[int, int],
        positions: Mapping[int, int],
        starts: Mapping[int, int] | None,
        seen_ends: Mapping[int, int],
    ) -> None:
        """Act on the ranges lost before processing (``checkpoints`` ``None``: the database
        could not be read this batch, nothing is decided)."""
        if checkpoints is None:
            return
        found = lost_ranges(
            self.topic,
            checkpoints=checkpoints,
            ends=ends,
            positions=positions,
            starts=starts,
            seen_ends=seen_ends,
        )
        declared = self.watch.declare(found, starts_read=starts is not None)
        if not declared:
            return
        for r in declared:
            log.error("flow %s: data loss: %s", self.topology_id, r.describe())
        resets = [r for r in declared if r.kind is LossKind.LOG_RESET]
        if self.policy == "fail" or resets:
            why = (
                "on_data_loss = fail"
                if self.policy == "fail"
                else "a reset log fails under on_data_loss = skip too: its new offsets "
                "start again below the old log's durable ranges"
            )
            error = DataLossError(declared, why)
            log.error("flow %s: FAILED: %s", self.topology_id, error)
            raise error
        for r in declared:
            try:
                checkpoint = self._skip(r)
            except Exception as exc:  # the database is away: declared again next start read
                log.warning(
                    "flow %s: on_data_loss = skip: recording %s failed (will retry): %s",
                    self.topology_id,
                    r.describe(),
                    exc,
                )
                continue
            self.watch.forget(r.partition)
            self.skipped.append(r)
            log.error(
                "flow %s: on_data_loss = skip: recorded %s as skipped; checkpoint now %d",
                self.topology_id,
                r.describe(),
                checkpoint,
            )
        self._rebuild()
