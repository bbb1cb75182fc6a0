"""Topology metrics into Airflow's metrics pipeline (StatsD, Datadog or OpenTelemetry).

Where an Airflow deployment already ships its metrics somewhere (``[metrics]
statsd_on`` / ``statsd_datadog_enabled`` / ``otel_on``), the platform's own
figures belong next to Airflow's: :func:`emit_window` sends one metrics window
(SPEC H) through Airflow's ``Stats`` facade, so it goes wherever Airflow's go,
with Airflow's prefix, allow/block lists and name checks. Where no backend is
configured, ``Stats`` is a no-op and so is this.

Names are short and fixed (``flowctl.topology.<figure>``, ``flowctl.lane.<figure>``);
which topology, pipeline and lane a value belongs to travels in tags. Fixed
names keep OpenTelemetry instruments few and within its 63-character limit
(a topology id in the name would make one instrument per topology, and long ids
would be dropped). Plain StatsD has no tags: enable ``statsd_influxdb_enabled``
(tags appended to the name) or use Datadog/OpenTelemetry to tell topologies apart.

Counts of the window (admitted, acked, failed, ...) are counters incremented by
the window's count (zero counts are not sent); levels at the window's end
(throughput, latency percentiles, backlog, backpressure, failNum, lane windows)
are gauges; a lane's state is the gauge ``flowctl.lane.state`` (NORMAL 0, SLOW 1,
BUSY 2) rather than a tag, so a state change does not start a new series.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow.sdk.observability.stats import Stats

from flowctl.adapters.control_plane import MetricsWindow
from flowctl.core.metrics import MetricsRow
from flowctl.core.metrics_row import COUNTS

PREFIX = "flowctl"
#: A lane's state as a number (a gauge), so a state change never starts a new series.
LANE_STATES = {"NORMAL": 0, "SLOW": 1, "BUSY": 2}
COUNTERS = COUNTS


@dataclass(frozen=True)
class Emitted:
    """One value handed to ``Stats`` (returned so callers can log what was sent)."""

    kind: str  # "incr" or "gauge"
    name: str
    value: float
    tags: dict[str, str]


def _figures(
    row: MetricsRow | MetricsWindow,
) -> tuple[str, dict[str, float | None], list[dict[str, Any]]]:
    if isinstance(row, MetricsWindow):  # a stored window: its row
        row = row.row
    if not isinstance(row, MetricsRow):
        raise ValueError(
            f"row={row!r} must be a flowctl.core.metrics.MetricsRow or a control-plane "
            f"MetricsWindow, got {type(row).__name__}"
        )
    figures: dict[str, float | None] = {name: getattr(row, name) for name in COUNTERS}
    figures.update(
        records_per_s=row.records_per_s,
        fail_num=row.failed + row.timed_out,
        backlog=row.backlog,
        backpressure_level=row.backpressure_level,
        latency_p50_ms=None if row.latency_p50_s is None else row.latency_p50_s * 1000.0,
        latency_p99_ms=None if row.latency_p99_s is None else row.latency_p99_s * 1000.0,
    )
    return row.topology, figures, row.lane_list


def emit_window(row: MetricsRow | MetricsWindow, *, pipeline: str | None = None) -> list[Emitted]:
    """Send one metrics window through Airflow's ``Stats``; returns what was sent.

    Every figure is checked before the first one is sent, so a bad row sends nothing
    rather than half a window.

    :param row: the window, as the driver builds it (``MetricsRow``) or as the control
        plane returns it (``MetricsWindow``).
    :param pipeline: added as the ``pipeline`` tag when given.
    """
    topology, figures, lanes = _figures(row)
    if not isinstance(topology, str) or not topology:
        raise ValueError(f"topology={topology!r} must be a non-empty string")
    tags = {"topology": topology}
    if pipeline is not None:
        if not isinstance(pipeline, str) or not pipeline:
            raise ValueError(f"pipeline={pipeline!r} must be a non-empty string")
        tags["pipeline"] = pipeline
    planned: list[Emitted] = []
    for name, value in figures.items():
        if value is None:
            continue  # no latency sample in the window: nothing to report
        _check_number(f"topology {topology!r}", name, value)
        stat = f"{PREFIX}.topology.{name}"
        if name not in COUNTERS:
            planned.append(Emitted("gauge", stat, value, dict(tags)))
        elif value:
            planned.append(Emitted("incr", stat, int(value), dict(tags)))
    planned.extend(_plan_lanes(lanes, tags))
    for item in planned:
        if item.kind == "incr":
            Stats.incr(item.name, int(item.value), tags=item.tags)
        else:
            Stats.gauge(item.name, item.value, tags=item.tags)
    return planned


def _check_number(where: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name}={value!r} ({where}) must be a finite number")


def _plan_lanes(lanes: Iterable[Mapping[str, Any]], tags: Mapping[str, str]) -> list[Emitted]:
    lanes = list(lanes)
    planned = [Emitted("gauge", f"{PREFIX}.topology.lanes", len(lanes), dict(tags))]
    for lane in lanes:
        lane_tags = {**tags, "lane": str(lane.get("lane"))}
        state = lane.get("state")
        if state is not None and state not in LANE_STATES:
            raise ValueError(
                f"lane {lane.get('lane')!r}: state={state!r} is not one of {', '.join(LANE_STATES)}"
            )
        values = {
            "window": lane.get("window"),
            "in_flight": lane.get("in_flight"),
            "state": None if state is None else LANE_STATES[state],
        }
        for figure, value in values.items():
            if value is None:
                continue
            _check_number(f"lane {lane.get('lane')!r}", figure, value)
            planned.append(Emitted("gauge", f"{PREFIX}.lane.{figure}", value, dict(lane_tags)))
    return planned
