"""Metrics windows in the control plane: one aggregated row per topology per window (SPEC H).

The driver writes a row per closed planner window; the metrics page, the StatsD/OTel
emitter and the failure-window sensor read them. :class:`MetricsWindowRows` is the
control plane's part that stores and reads them (``ControlPlane`` inherits it).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.checks import check_int, check_text, check_time
from flowctl.adapters.lane_figures import FIGURE_NAMES, WindowFigures, lane_list, split_lanes

__all__ = ["MetricsWindow", "MetricsWindowRows"]

T = TypeVar("T")


@dataclass(frozen=True)
class MetricsWindow:
    """One aggregated metrics row of a topology for one window (SPEC H)."""

    id: int
    topology_id: str
    window_start: dt.datetime
    window_end: dt.datetime
    admitted: int
    acked: int
    failed: int
    timed_out: int
    replayed: int
    dlq: int
    records: int
    records_per_s: float
    latency_p50_ms: float | None
    latency_p99_ms: float | None
    backlog: int
    backpressure_level: float
    lanes: Any  # the per-lane gauges (a list; older rows: any shape lane_list reads)
    repeat_failures: int | None = None
    sink_errors: int | None = None
    mrwq: int | None = None
    arrival_rate: float | None = None
    lane_rate: float | None = None
    batch_duration_s: float | None = None
    trigger_s: float | None = None
    saturation: float | None = None
    levels: dict[str, int] | None = None

    @property
    def lane_list(self) -> list[dict[str, Any]]:
        """Per-lane figures, whichever shape the job wrote (see :func:`lane_list`)."""
        return lane_list(self.lanes)

    @property
    def figures(self) -> WindowFigures:
        """The window's topology-wide figures: its columns, else what ``lanes`` carries."""
        own = WindowFigures(**{name: getattr(self, name) for name in FIGURE_NAMES})
        return own.merged(split_lanes(self.lanes)[1])


class MetricsWindowRows:
    """Writing and reading ``metrics_windows``; needs the control plane's ``_tx``."""

    def _tx(self, what: str, work: Callable[[sa.Connection], T]) -> T:
        raise NotImplementedError

    def write_metrics_window(
        self,
        topology_id: str,
        window_start: dt.datetime,
        window_end: dt.datetime,
        *,
        admitted: int = 0,
        acked: int = 0,
        failed: int = 0,
        timed_out: int = 0,
        replayed: int = 0,
        dlq: int = 0,
        records: int = 0,
        records_per_s: float = 0.0,
        latency_p50_ms: float | None = None,
        latency_p99_ms: float | None = None,
        backlog: int = 0,
        backpressure_level: float = 0.0,
        lanes: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        figures: WindowFigures | None = None,
    ) -> int:
        """Store one aggregated metrics row for the window and return its id.

        ``lanes``: the per-lane gauges (a list); an object ``{"lanes": [...], <figures>}``
        is split into the list and the figures. ``figures`` (:class:`WindowFigures`) go
        to their columns, completed by those found in ``lanes``.
        """
        check_text("topology_id", topology_id)
        check_time("window_start", window_start)
        check_time("window_end", window_end)
        if window_end < window_start:
            raise ValueError(f"window_end={window_end!r} is before window_start={window_start!r}")
        counts = {
            "admitted": admitted,
            "acked": acked,
            "failed": failed,
            "timed_out": timed_out,
            "replayed": replayed,
            "dlq": dlq,
            "records": records,
            "backlog": backlog,
        }
        for field, value in counts.items():
            check_int(field, value)
        floats = {
            "records_per_s": records_per_s,
            "latency_p50_ms": latency_p50_ms,
            "latency_p99_ms": latency_p99_ms,
            "backpressure_level": backpressure_level,
        }
        for field, value in floats.items():
            if value is None and field.startswith("latency"):
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
                raise ValueError(f"{field}={value!r} must be a number >= 0")
        per_lane, found = split_lanes(lanes)
        measured = (figures or WindowFigures()).merged(found)
        m = schema.metrics_windows
        values = {
            "topology_id": topology_id,
            "window_start": window_start,
            "window_end": window_end,
            **counts,
            **floats,
            "lanes_json": None if lanes is None else json.dumps(per_lane, sort_keys=True),
            **{name: getattr(measured, name) for name in FIGURE_NAMES if name != "levels"},
            "levels_json": None if measured.levels is None else json.dumps(measured.levels),
        }

        def work(conn: sa.Connection) -> int:
            return int(conn.execute(m.insert().values(**values)).inserted_primary_key[0])

        return self._tx(f"writing a metrics window of {topology_id!r}", work)

    def metrics_windows(
        self,
        topology_id: str,
        *,
        since: dt.datetime | None = None,
        limit: int | None = None,
    ) -> list[MetricsWindow]:
        """The topology's metrics windows in time order; ``limit`` keeps the most recent ones."""
        m = schema.metrics_windows
        query = sa.select(m).where(m.c.topology_id == topology_id)
        if since is not None:
            query = query.where(m.c.window_end >= check_time("since", since))
        query = query.order_by(m.c.window_end.desc(), m.c.id.desc())
        if limit is not None:
            query = query.limit(check_int("limit", limit, 1))
        rows = self._tx(
            f"reading metrics windows of {topology_id!r}", lambda conn: conn.execute(query).all()
        )
        result = []
        for row in reversed(rows):
            data = dict(row._mapping)
            lanes_json, levels_json = data.pop("lanes_json"), data.pop("levels_json")
            data["lanes"] = None if lanes_json is None else json.loads(lanes_json)
            data["levels"] = None if levels_json is None else json.loads(levels_json)
            result.append(MetricsWindow(**data))
        return result
