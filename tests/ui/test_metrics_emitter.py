"""emit_window through Airflow's Stats facade into a real OpenTelemetry SDK.

Airflow's own OpenTelemetry logger (``SafeOtelLogger``) is installed as the
``Stats`` backend, over an OpenTelemetry ``MeterProvider`` whose reader keeps
the exported data in memory: the test reads back what an OTLP collector would
have received (names with Airflow's prefix, values, attributes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest
from airflow.sdk._shared.observability.metrics import stats
from airflow.sdk._shared.observability.metrics.base_stats_logger import NoStatsLogger
from airflow.sdk._shared.observability.metrics.otel_logger import SafeOtelLogger
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from flowctl.adapters.control_plane import MetricsWindow
from flowctl.core.metrics import LaneGauge, MetricsRow
from flowctl_airflow.metrics_emitter import emit_window

T0 = dt.datetime(2026, 1, 5, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    memory = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[memory])
    stats.initialize(
        factory=lambda: SafeOtelLogger(provider, prefix="airflow"), export_legacy_names=False
    )
    try:
        yield memory
    finally:
        stats.initialize(factory=NoStatsLogger, export_legacy_names=True)
        provider.shutdown()


def collected(reader: InMemoryMetricReader) -> dict[tuple[str, tuple[tuple[str, Any], ...]], Any]:
    """``{(metric name, sorted attributes): value}`` of everything exported so far."""
    out = {}
    data = reader.get_metrics_data()
    if data is None:  # nothing recorded at all
        return out
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    key = (metric.name, tuple(sorted((point.attributes or {}).items())))
                    out[key] = point.value
    return out


def row(**overrides: Any) -> MetricsRow:
    values: dict[str, Any] = {
        "topology": "wordcount-green-2",
        "window_start": 0.0,
        "window_end": 10.0,
        "admitted": 120,
        "acked": 110,
        "failed": 6,
        "timed_out": 4,
        "replayed": 3,
        "dlq": 0,
        "records": 11000,
        "records_per_s": 1100.0,
        "latency_p50_s": 0.04,
        "latency_p99_s": 0.25,
        "backlog": 900,
        "backpressure_level": 2,
        "lanes": (LaneGauge(0, 8, "NORMAL", 5), LaneGauge(1, 2, "BUSY", 2)),
    }
    values.update(overrides)
    return MetricsRow(**values)


def test_a_driver_window_reaches_opentelemetry_with_tags(reader: InMemoryMetricReader) -> None:
    sent = emit_window(row(), pipeline="wordcount")
    got = collected(reader)
    tags = (("pipeline", "wordcount"), ("topology", "wordcount-green-2"))
    assert got[("airflow.flowctl.topology.failed", tags)] == 6
    assert got[("airflow.flowctl.topology.timed_out", tags)] == 4
    assert got[("airflow.flowctl.topology.records", tags)] == 11000
    assert got[("airflow.flowctl.topology.fail_num", tags)] == 10
    assert got[("airflow.flowctl.topology.records_per_s", tags)] == 1100.0
    assert got[("airflow.flowctl.topology.latency_p99_ms", tags)] == 250.0
    assert got[("airflow.flowctl.topology.backpressure_level", tags)] == 2
    assert got[("airflow.flowctl.topology.lanes", tags)] == 2
    lane1 = (("lane", "1"), *tags)
    assert got[("airflow.flowctl.lane.window", lane1)] == 2
    assert got[("airflow.flowctl.lane.state", lane1)] == 2  # BUSY
    # A zero count is not sent: no DLQ counter at all.
    assert not [key for key in got if key[0] == "airflow.flowctl.topology.dlq"]
    assert {(e.kind, e.name) for e in sent} >= {
        ("incr", "flowctl.topology.failed"),
        ("gauge", "flowctl.lane.in_flight"),
    }


def test_counters_add_up_over_windows(reader: InMemoryMetricReader) -> None:
    emit_window(row())
    emit_window(row(failed=1, lanes=()))
    got = collected(reader)
    assert got[("airflow.flowctl.topology.failed", (("topology", "wordcount-green-2"),))] == 7


def test_a_control_plane_window_is_accepted_and_missing_latency_skipped(
    reader: InMemoryMetricReader,
) -> None:
    window = MetricsWindow(
        id=1,
        row=MetricsRow(
            topology="wordcount-blue-1",
            window_start=T0.timestamp(),
            window_end=(T0 + dt.timedelta(seconds=10)).timestamp(),
            admitted=5,
            acked=5,
            failed=0,
            timed_out=0,
            replayed=0,
            dlq=2,
            records=500,
            records_per_s=50.0,
            latency_p50_s=None,
            latency_p99_s=None,
            backlog=0,
            backpressure_level=0.0,
            lanes=[{"lane": 0, "window": 3, "state": "SLOW", "in_flight": 1}],
        ),
    )
    sent = emit_window(window)
    got = collected(reader)
    tags = (("topology", "wordcount-blue-1"),)
    assert got[("airflow.flowctl.topology.dlq", tags)] == 2
    assert got[("airflow.flowctl.lane.state", (("lane", "0"), *tags))] == 1  # SLOW
    assert not [e for e in sent if e.name.startswith("flowctl.topology.latency")]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"records_per_s": float("inf")},
            r"records_per_s=inf \(topology 'wordcount-green-2'\) must be a finite number",
        ),
        ({"lanes": (LaneGauge(0, 1, "ASLEEP", 0),)}, r"lane 0: state='ASLEEP' is not one of"),
    ],
)
def test_bad_figures_are_refused_naming_them(
    reader: InMemoryMetricReader, bad: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        emit_window(row(**bad))
    assert collected(reader) == {}  # nothing of the bad window was sent


def test_other_objects_are_refused() -> None:
    with pytest.raises(ValueError, match=r"must be a flowctl.core.metrics.MetricsRow .* got dict"):
        emit_window({"topology": "x"})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"pipeline='' must be a non-empty string"):
        emit_window(row(), pipeline="")


def test_the_flow_jobs_lanes_object_gives_one_gauge_set_per_lane() -> None:
    import datetime as dt

    from flowctl.adapters.control_plane import MetricsWindow
    from flowctl.core.metrics_row import MetricsRow
    from flowctl_airflow.metrics_emitter import emit_window

    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    row = MetricsWindow(
        id=1,
        row=MetricsRow(
            topology="wc-blue-1",
            window_start=t0.timestamp(),
            window_end=(t0 + dt.timedelta(seconds=10)).timestamp(),
            admitted=4,
            acked=4,
            failed=0,
            timed_out=0,
            replayed=0,
            dlq=0,
            records=400,
            records_per_s=40.0,
            latency_p50_s=None,
            latency_p99_s=None,
            backlog=0,
            backpressure_level=0.0,
            lanes={
                "lanes": [
                    {"lane": 0, "window": 8, "state": "NORMAL", "in_flight": 2},
                    {"lane": 1, "window": 3, "state": "SLOW", "in_flight": 1},
                ],
                "levels": {"source": 0},
                "trigger_s": 1.0,
            },
        ),
    )
    sent = emit_window(row)
    windows = {e.tags["lane"]: e.value for e in sent if e.name == "flowctl.lane.window"}
    assert windows == {"0": 8, "1": 3}
    assert row.lane_list == [
        {"lane": 0, "window": 8, "state": "NORMAL", "in_flight": 2},
        {"lane": 1, "window": 3, "state": "SLOW", "in_flight": 1},
    ]
