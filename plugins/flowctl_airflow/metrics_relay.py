"""Relay a running topology's metrics windows to Airflow's metrics backend.

The stream job is a Spark process, not an Airflow one: it writes one metrics
row per window to the control plane (SPEC H) and knows nothing of StatsD or
OpenTelemetry. The Airflow task that runs it does: while the topology runs,
:class:`MetricsRelay` reads each new row once and hands it to
:func:`~flowctl_airflow.metrics_emitter.emit_window`, so the figures go
wherever Airflow's own metrics go (a no-op when none is configured).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from flowctl.adapters.control_plane import ControlPlane, MetricsWindow

if TYPE_CHECKING:
    from flowctl_airflow.metrics_emitter import Emitted

log = logging.getLogger(__name__)


class MetricsRelay:
    """Emit each new metrics window of ``topology_id`` exactly once, every ``interval_s``.

    :param plane: the control plane the job writes to.
    :param emit: called with each new window; default ``emit_window``.
    """

    def __init__(
        self,
        plane: ControlPlane,
        topology_id: str,
        *,
        pipeline: str | None = None,
        interval_s: float = 5.0,
        emit: Callable[[MetricsWindow], object] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s={interval_s!r} must be > 0")
        self.plane = plane
        self.topology_id = topology_id
        self.pipeline = pipeline
        self.interval_s = interval_s
        self._emit = emit or self._emit_window
        self._last_id = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.emitted = 0

    def _emit_window(self, row: MetricsWindow) -> list[Emitted]:
        from flowctl_airflow.metrics_emitter import emit_window

        return emit_window(row, pipeline=self.pipeline)

    def poll_once(self) -> int:
        """Emit the windows written since the last poll; returns how many."""
        rows = [
            r
            for r in self.plane.metrics_windows(self.topology_id, limit=100)
            if r.id > self._last_id
        ]
        for row in sorted(rows, key=lambda r: r.id):
            try:
                self._emit(row)
            except Exception:  # one bad row must not stop the relay or the task
                log.exception("could not emit metrics window %d of %s", row.id, self.topology_id)
            self._last_id = row.id
            self.emitted += 1
        return len(rows)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.poll_once()
            except Exception as exc:  # the database may be briefly away; try next time
                log.warning("metrics relay for %s: %s", self.topology_id, exc)

    def start(self) -> MetricsRelay:
        self._thread = threading.Thread(
            target=self._run, name=f"metrics-relay-{self.topology_id}", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread after a last poll (the final windows are emitted too)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval_s + 5)
        try:
            self.poll_once()
        except Exception as exc:
            log.warning("metrics relay for %s: final poll failed: %s", self.topology_id, exc)
