"""Metrics windows in the control plane: one aggregated row per topology per window (SPEC H).

The driver writes a row per closed planner window; the metrics page, the StatsD/OTel
emitter and the failure-window sensor read them. The window is one type,
:class:`flowctl.core.metrics_row.MetricsRow`; the table's columns are built from its
fields (``schema.metrics_windows``) and a stored window wraps it (:class:`MetricsWindow`).
:class:`MetricsWindowRows` is the control plane's part that stores and reads them
(``ControlPlane`` inherits it).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.checks import check_int, check_text, check_time
from flowctl.core.metrics_rollup import hour_of, roll_up_by_hour
from flowctl.core.metrics_row import COUNTS, MetricsRow
from flowctl.core.window_figures import WindowFigures, lane_list

__all__ = ["MetricsWindow", "MetricsWindowRows"]

T = TypeVar("T")

#: The most hours :meth:`MetricsWindowRows.roll_up_windows` rolls up in one call.
ROLLUP_MAX_HOURS = 24


@dataclass(frozen=True)
class MetricsWindow:
    """A metrics window as the control plane stored it: its id and its :class:`MetricsRow`.

    Not a second type of the window: every field is the row's (``window.acked``,
    ``window.figures``, ``window.lane_list`` read through to it). Only what storage
    changes is spelled here: the row id, the times as UTC datetimes, the latencies in
    milliseconds (the columns' unit) and the topology's column name.
    """

    id: int
    row: MetricsRow

    def __getattr__(self, name: str) -> Any:
        if name == "row":  # not set yet (copy, unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.row, name)

    @property
    def topology_id(self) -> str:
        return self.row.topology

    @property
    def window_start(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.row.window_start, dt.UTC)

    @property
    def window_end(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.row.window_end, dt.UTC)

    @property
    def latency_p50_ms(self) -> float | None:
        return _ms(self.row.latency_p50_s)

    @property
    def latency_p99_ms(self) -> float | None:
        return _ms(self.row.latency_p99_s)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000.0


def _s(ms: float | None) -> float | None:
    return None if ms is None else ms / 1000.0


#: What a window stores for a field, and what it reads back (else the value itself).
_TO_COLUMN: dict[str, Callable[[Any], Any]] = {
    "window_start": lambda t: dt.datetime.fromtimestamp(t, dt.UTC),
    "window_end": lambda t: dt.datetime.fromtimestamp(t, dt.UTC),
    "latency_p50_s": _ms,
    "latency_p99_s": _ms,
    "lanes": lambda v: None if v is None else json.dumps(lane_list(v), sort_keys=True),
    "levels": lambda v: None if v is None else json.dumps(v),
}
_FROM_COLUMN: dict[str, Callable[[Any], Any]] = {
    "window_start": lambda t: t.timestamp(),
    "window_end": lambda t: t.timestamp(),
    "latency_p50_s": _s,
    "latency_p99_s": _s,
    "lanes": lambda v: None if v is None else json.loads(v),
    "levels": lambda v: None if v is None else json.loads(v),
}
_STORED = [f.name for f in dataclasses.fields(MetricsRow) if f.name not in schema.WINDOW_UNSTORED]


class MetricsWindowRows:
    """Writing and reading ``metrics_windows``; needs the control plane's ``_tx``."""

    def _tx(self, what: str, work: Callable[[sa.Connection], T]) -> T:
        raise NotImplementedError

    def write_row(self, row: MetricsRow) -> int:
        """Store one closed window (checked whole first: :meth:`MetricsRow.check`); its id.

        ``row.lanes`` may be the older object ``{"lanes": [...], <figures>}``: it is split
        into the lanes and the figures the row does not carry itself.
        """
        lanes = None if row.lanes is None else lane_list(row.lanes)
        row = dataclasses.replace(row, **dataclasses.asdict(row.figures), lanes=lanes).check()
        values = _columns(row)
        m = schema.metrics_windows

        def work(conn: sa.Connection) -> int:
            return int(conn.execute(m.insert().values(**values)).inserted_primary_key[0])

        return self._tx(f"writing a metrics window of {row.topology!r}", work)

    def write_metrics_window(
        self,
        topology_id: str,
        window_start: dt.datetime,
        window_end: dt.datetime,
        *,
        latency_p50_ms: float | None = None,
        latency_p99_ms: float | None = None,
        lanes: Sequence[Mapping[str, Any]] | Mapping[str, Any] | None = None,
        figures: WindowFigures | None = None,
        **values: Any,
    ) -> int:
        """:meth:`write_row` of a window given in the columns' units (datetimes, ms).

        ``values``: the row's counts and gauges (``admitted``, ``records_per_s``,
        ``backlog``, ...; any left out are 0) and its ``health`` and ``health_cause``;
        ``figures`` (:class:`WindowFigures`)
        complete those found in ``lanes``.
        """
        check_text("topology_id", topology_id)
        check_time("window_start", window_start)
        check_time("window_end", window_end)
        unknown = sorted(set(values) - set(_ZEROS) - {"health", "health_cause"})
        if unknown:
            raise ValueError(f"write_metrics_window: {unknown} are not metrics window fields")
        row = MetricsRow(
            topology=topology_id,
            window_start=window_start.timestamp(),
            window_end=window_end.timestamp(),
            latency_p50_s=_s(latency_p50_ms),
            latency_p99_s=_s(latency_p99_ms),
            # An older ``{"lanes": [...], <figures>}`` object is split by write_row.
            lanes=cast(Any, lanes),
            **(_ZEROS | values),
            **dataclasses.asdict(figures or WindowFigures()),
        )
        return self.write_row(row)

    def metrics_windows(
        self,
        topology_id: str,
        *,
        since: dt.datetime | None = None,
        limit: int | None = None,
        rollups: bool = False,
    ) -> list[MetricsWindow]:
        """The topology's metrics windows in time order; ``limit`` keeps the most recent ones.

        Hourly rollups of old windows (:meth:`roll_up_windows`) only with ``rollups``: a
        reader of the latest windows (the sensors, the emitter, the CLI) must never take
        one for a fresh window.
        """
        m = schema.metrics_windows
        query = sa.select(m).where(m.c.topology_id == topology_id)
        if not rollups:
            query = query.where(m.c.rolled_up == 0)
        if since is not None:
            query = query.where(m.c.window_end >= check_time("since", since))
        query = query.order_by(m.c.window_end.desc(), m.c.id.desc())
        if limit is not None:
            query = query.limit(check_int("limit", limit, 1))
        rows = self._tx(
            f"reading metrics windows of {topology_id!r}", lambda conn: conn.execute(query).all()
        )
        return [_stored(dict(row._mapping)) for row in reversed(rows)]

    def roll_up_windows(self, before: dt.datetime) -> int:
        """Replace the windows of whole hours before ``before`` by hourly rollups.

        One row per topology per hour (:func:`flowctl.core.metrics_rollup.roll_up`: counts
        summed, so totals stay exact), in one transaction: the rollups are inserted and
        the windows they sum deleted together. At most :data:`ROLLUP_MAX_HOURS` hours,
        the oldest first, per call (a long backlog is caught up over several calls, each
        transaction stays small). A rollup already stored for such an hour (a late
        window) is merged into the new one. Returns how many windows were rolled up.
        Two processes rolling up at once cannot both count a window: the deletes must
        remove every row read, else the transaction is rolled back (``RuntimeError``).
        """
        boundary = check_time("before", before).replace(minute=0, second=0, microsecond=0)
        m = schema.metrics_windows
        raw_before = sa.and_(m.c.rolled_up == 0, m.c.window_start < boundary)

        def work(conn: sa.Connection) -> int:
            oldest = conn.execute(sa.select(sa.func.min(m.c.window_start)).where(raw_before))
            first = oldest.scalar_one()
            if first is None:
                return 0
            first = schema.UTCDateTime().process_result_value(first, conn.dialect)
            assert first is not None
            span = dt.timedelta(hours=ROLLUP_MAX_HOURS)
            upper = min(boundary, first.replace(minute=0, second=0, microsecond=0) + span)
            raw_part = sa.and_(m.c.rolled_up == 0, m.c.window_start < upper)
            stored = [_stored(dict(r._mapping)) for r in conn.execute(sa.select(m).where(raw_part))]
            hours = {(w.row.topology, hour_of(w.row)) for w in stored}
            earlier = [
                _stored(dict(r._mapping))
                for r in conn.execute(
                    sa.select(m).where(
                        m.c.rolled_up > 0,
                        m.c.window_start < upper,
                        m.c.topology_id.in_(sorted({t for t, _ in hours})),
                    )
                )
            ]
            merged = [w.id for w in earlier if (w.row.topology, hour_of(w.row)) in hours]
            deleted = conn.execute(m.delete().where(raw_part)).rowcount
            if merged:
                deleted += conn.execute(m.delete().where(m.c.id.in_(merged))).rowcount
            if deleted != len(stored) + len(merged):
                raise RuntimeError(
                    f"rolling up metrics windows: deleted {deleted} of "
                    f"{len(stored) + len(merged)} rows read (another process changed them "
                    f"meanwhile); nothing changed"
                )
            rows = [w.row for w in stored] + [w.row for w in earlier if w.id in set(merged)]
            for rollup in roll_up_by_hour(rows):
                conn.execute(m.insert().values(**_columns(rollup)))
            return len(stored)

        return self._tx(f"rolling up metrics windows before {boundary.isoformat()}", work)


def _columns(row: MetricsRow) -> dict[str, Any]:
    """The column values of a checked row."""
    return {schema.window_column(k): _TO_COLUMN.get(k, _same)(getattr(row, k)) for k in _STORED}


def _same(value: Any) -> Any:
    return value


def _stored(columns: Mapping[str, Any]) -> MetricsWindow:
    values = {k: _FROM_COLUMN.get(k, _same)(columns[schema.window_column(k)]) for k in _STORED}
    return MetricsWindow(id=columns["id"], row=MetricsRow(**values))


#: The counts and gauges of a window that :meth:`write_metrics_window` defaults to 0.
_ZEROS: dict[str, Any] = {
    f.name: 0
    for f in dataclasses.fields(MetricsRow)
    if f.name in (*COUNTS, "records_per_s", "backlog", "backpressure_level")
}
