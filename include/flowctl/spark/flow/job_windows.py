"""The stream job's metrics windows: the planner's, copied to the control plane, and the
driver's own while the topology is STALLED (:mod:`.driver_health`); and, every few
minutes, the hourly rollup of windows older than ``FLOWCTL_METRICS_RAW_HOURS``.

Mixed into :class:`~flowctl.spark.flow.job.FlowStreamJob` (whose attributes it uses).
"""

from __future__ import annotations

import collections
import dataclasses
import datetime as dt
import logging
import time
from typing import TYPE_CHECKING

from flowctl.config import Settings
from flowctl.core.metrics_row import MetricsRow
from flowctl.spark.flow import channels
from flowctl.spark.flow.channels import SpoutState
from flowctl.spark.flow.driver_health import DriverHealth

if TYPE_CHECKING:
    from flowctl.adapters.control_plane import ControlPlane
    from flowctl.adapters.memcached_store import MemcachedStore
    from flowctl.adapters.mrwq_flusher import FlusherService
    from flowctl.pipelines.config import PipelineConfig
    from flowctl.pipelines.health_callback import HealthCallback

log = logging.getLogger("flowctl.job")  # the driver log the task shows

#: Seconds between two rollup passes of one driver (each pass is one short transaction).
ROLLUP_EVERY_S = 300.0


class WindowPublishing:
    """Writing the topology's windows to ``metrics_windows``, each once, with its health."""

    topology_id: str
    config: PipelineConfig
    control: ControlPlane
    store: MemcachedStore
    ns: str
    state: str
    alerts: HealthCallback
    driver_health: DriverHealth
    state_error: BaseException | None
    flusher: FlusherService | None  # the MRWQ flusher (job_flusher.FlusherThread), once started
    _last_row_end: float
    _last_row: MetricsRow | None
    _batch_ends: collections.deque[float]
    settings: Settings
    #: monotonic time of the last rollup pass (None: none yet in this driver)
    _rolled_up_at: float | None = None

    def _warn(self, what: str, exc: BaseException) -> None:
        raise NotImplementedError

    def _publish_metrics(self) -> None:
        """Write the planner's closed windows to ``metrics_windows`` (each once)."""
        try:
            rows = channels.decode_rows(self.store.get_json(channels.rows_key(self.ns)))
        except Exception as exc:
            self._warn("reading metrics windows", exc)
            return
        for row in rows:
            self.driver_health.heard(row)
            if row.window_end <= self._last_row_end:
                continue
            row = self.driver_health.stamp(
                dataclasses.replace(
                    row,
                    topology=self.topology_id,
                    batch_duration_s=self._batch_duration(row),
                    trigger_s=self.config.trigger_interval_s,
                )
            )
            if not self._write_window(row):
                return
        self._roll_up_old_windows()

    def _roll_up_old_windows(self) -> None:
        """Roll up windows older than ``FLOWCTL_METRICS_RAW_HOURS`` (docs/services.md), at
        most once every :data:`ROLLUP_EVERY_S`: ``metrics_windows`` stays bounded."""
        now = time.monotonic()
        if self._rolled_up_at is not None and now - self._rolled_up_at < ROLLUP_EVERY_S:
            return
        self._rolled_up_at = now
        before = dt.datetime.now(dt.UTC) - dt.timedelta(hours=self.settings.metrics_raw_hours)
        try:
            rolled = self.control.roll_up_windows(before)
        except Exception as exc:  # the windows stay as they are; the next pass tries again
            self._warn("rolling up old metrics windows", exc)
            return
        if rolled:
            log.info("rolled up %d metrics windows older than %s", rolled, before.isoformat())

    def _write_window(self, row: MetricsRow) -> bool:
        """Store one window (the planner's, or the driver's own while STALLED); alert."""
        try:
            self.control.write_row(row)
        except Exception as exc:
            self._warn("writing a metrics window", exc)
            return False
        self._last_row_end, self._last_row = row.window_end, row
        self.alerts.health(row.health, row.health_cause, row.window_end)
        return True

    def _watch_health(self, state: SpoutState | None) -> None:
        """The driver's stall watch (:mod:`.driver_health`) while the topology runs."""
        if self.state not in ("ACTIVE", "DRAINING"):
            return
        eden = self.config.eden_topic
        self.driver_health.check(
            state,
            lambda: sum(self.control.committed_offsets(self.config.name, eden).values()),
            admitting=self.state == "ACTIVE",
            flush_error=getattr(self.flusher, "last_error", None),
            state_error=self.state_error,
        )
        quiet = self.driver_health.quiet_window(self._last_row, state)
        if quiet is not None:
            self._write_window(quiet)

    def _batch_duration(self, row: MetricsRow) -> float | None:
        """Mean time between batch completions inside the row's window (``None``: no batch)."""
        ends = [t for t in self._batch_ends if row.window_start <= t < row.window_end]
        before = [t for t in self._batch_ends if t < row.window_start]
        if before:
            ends.insert(0, before[-1])
        if len(ends) < 2:
            return None
        return round((ends[-1] - ends[0]) / (len(ends) - 1), 3)
