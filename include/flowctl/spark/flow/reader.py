"""The stream reader of ``flowctl_kafka`` in ``mode=flow``: the spout's Spark face.

Spark runs ``initialOffset``, ``latestOffset``, ``partitions`` and ``commit`` in one
long-lived planner process, where this reader delegates to the process's
:class:`~flowctl.spark.flow.planner.FlowPlanner`; ``read`` runs on executors against a
pickled snapshot of the reader and runs the lane (:func:`~flowctl.spark.flow.lane.run_lane`).
The plain reader (``mode=plain``) is :class:`flowctl.spark.kafka_source.FlowctlKafkaStreamReader`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

from flowctl.spark.flow.settings import FlowSettings
from flowctl.spark.kafka_source import SOURCE_NAME

if TYPE_CHECKING:
    from flowctl.spark.flow.lane import StatusRow
    from flowctl.spark.flow.planner import FlowPlanner

log = logging.getLogger(__name__)


class FlowStreamReader(DataSourceStreamReader):
    """Plans flow-controlled micro-batches (the planner) and runs their lanes (executors)."""

    def __init__(self, settings: FlowSettings) -> None:
        self.settings = settings
        self._planner: FlowPlanner | None = None  # created lazily in the planner process
        self._planning_error: BaseException | None = None

    def __getstate__(self) -> dict[str, object]:
        # Tasks get a pickled snapshot; the spout cannot travel.
        state = self.__dict__.copy()
        state["_planner"] = None
        state["_planning_error"] = None
        return state

    def planner(self) -> FlowPlanner:
        from flowctl.spark.flow.planner import planner_for

        if self._planner is None:
            self._planner = planner_for(self.settings)
        return self._planner

    def initialOffset(self) -> dict[str, Any]:
        """The empty plan; the spout starts from the database's durable state."""
        try:
            return self.planner().initial_offset()
        except Exception:
            log.exception("%s: initialOffset (flow) failed", SOURCE_NAME)
            raise

    def getDefaultReadLimit(self) -> ReadLimit:
        # Informative: the spout admits (windows, backpressure, max_rows), not this limit.
        if self.settings.max_rows is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.settings.max_rows)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """The next batch's plan (``start`` itself when nothing is admitted)."""
        if self._planning_error is not None:
            # partitions() failing can stall a query silently; fail it loudly here instead.
            error, self._planning_error = self._planning_error, None
            raise RuntimeError(f"{SOURCE_NAME}: planning the previous batch failed: {error}")
        from flowctl.spark.flow.worker_gc import freeze_planner

        try:
            end = self.planner().latest_offset(start)
        except Exception:
            log.exception(
                "%s: latestOffset (flow) failed (start seq %s)", SOURCE_NAME, start.get("seq")
            )
            raise
        freeze_planner()  # the collector then skips the imports and the first spout
        return end

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One ``FlowPartition`` per lane with tuples in the plan ``end``."""
        from flowctl.spark.flow.plan import decode_plan

        started = time.monotonic()
        try:
            parts = decode_plan(end, self.settings.topic, self.settings.pipeline)
            self.planner().planned(end, (time.monotonic() - started) * 1000.0)
            return parts
        except Exception as exc:
            log.exception("%s: partitions (flow) failed (end seq %s)", SOURCE_NAME, end.get("seq"))
            self._planning_error = exc
            raise

    def read(self, partition: InputPartition) -> Iterator[StatusRow]:
        """The lane: one status row per tuple (runs on executors)."""
        from flowctl.spark.flow.lane import run_lane
        from flowctl.spark.flow.plan import FlowPartition
        from flowctl.spark.flow.worker_gc import freeze_long_lived

        if not isinstance(partition, FlowPartition):
            raise TypeError(f"partition={partition!r} is not a FlowPartition")
        freeze_long_lived()  # Spark's gc.collect() after each task then skips the imports
        yield from run_lane(self.settings, partition)

    def commit(self, end: dict[str, Any]) -> None:
        # Durability moves with the MRWQ flush; Spark's commit is informative.
        log.debug("%s: Spark committed batch %s", SOURCE_NAME, end.get("seq"))

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()
