"""The metrics window is one type: its wire form, its checks, its figures and its columns."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from flowctl.adapters import schema
from flowctl.core.metrics_row import MetricsRow
from flowctl.core.scaling import WindowStats
from flowctl.core.window_figures import WindowFigures

LANES = [{"lane": 0, "window": 4, "state": "NORMAL", "in_flight": 2}]


def row(**overrides: Any) -> MetricsRow:
    values: dict[str, Any] = {
        "topology": "wc-blue-1",
        "window_start": 100.0,
        "window_end": 110.0,
        "admitted": 10,
        "acked": 8,
        "failed": 1,
        "timed_out": 1,
        "replayed": 0,
        "dlq": 0,
        "records": 80,
        "records_per_s": 8.0,
        "latency_p50_s": 0.1,
        "latency_p99_s": 0.4,
        "backlog": 30,
        "backpressure_level": 0,
        "lanes": LANES,
    }
    return MetricsRow(**(values | overrides))


def test_every_field_travels_in_the_wire_form() -> None:
    sent = row(repeat_failures=2, levels={"persist": 1}, lane_rate=40.0, n=3)
    data = json.loads(json.dumps(sent.to_dict()))
    assert set(data) == {f.name for f in dataclasses.fields(MetricsRow)}
    assert MetricsRow.from_dict(data) == sent


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"acked": "8"}, r"metrics row\.acked='8' is not a number"),
        ({"failed": 1.5}, r"metrics row\.failed=1\.5 is not an int"),
        ({"lanes": "0"}, r"metrics row\.lanes='0' is not a list"),
        ({"lanes": [3]}, r"metrics row\.lanes\[\] must be a JSON object, got 3"),
        ({"levels": [1]}, r"metrics row\.levels=\[1\] is not an object"),
        ({"topology": None}, r"metrics row\.topology=None is missing"),
    ],
)
def test_a_foreign_wire_value_is_refused_naming_the_field(
    data: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        MetricsRow.from_dict(row().to_dict() | data)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"dlq": -1}, r"dlq=-1 must be an integer >= 0"),
        ({"records_per_s": float("nan")}, r"records_per_s=nan must be a number >= 0"),
        ({"arrival_rate": -2.0}, r"arrival_rate=-2\.0 must be a number >= 0"),
        ({"topology": ""}, r"topology='' must be a non-empty string"),
        ({"window_end": 90.0}, r"window_end=90\.0 is before window_start=100\.0"),
    ],
)
def test_check_names_the_bad_field(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        row(**overrides).check()
    assert row().check() == row()


def test_figures_are_the_rows_own_completed_by_an_older_lanes_object() -> None:
    older = row(lanes={"lanes": LANES, "sink_errors": 3, "mrwq": 9}, mrwq=4)
    assert older.figures == WindowFigures(sink_errors=3, mrwq=4, saturation=0.5)
    assert older.lane_list == LANES
    with pytest.raises(ValueError, match=r"lanes=7 must be a list of lane figures"):
        _ = row(lanes=7).figures


def test_the_table_has_a_column_for_every_stored_field() -> None:
    columns = {c.name for c in schema.metrics_windows.columns}
    names = [f.name for f in dataclasses.fields(MetricsRow)]
    stored = [name for name in names if name not in schema.WINDOW_UNSTORED]
    assert {schema.window_column(name) for name in stored} == columns - {"id"}
    assert schema.window_column("latency_p50_s") == "latency_p50_ms"


def test_window_stats_of_the_last_window() -> None:
    before, current = row(backlog=50), row(repeat_failures=5, trigger_s=1.0, lane_rate=0.0)
    stats = WindowStats.of([before, current])
    assert stats == WindowStats(
        fail_num=2,
        repeat_failures=2,  # never more than the window's failures
        dlq_added=0,
        sink_errors=0,
        saturation=0.5,
        backlog=30,
        backlog_delta=-20,
        trigger_s=1.0,
        lane_rate=None,  # 0 is not a measured rate
    )
    assert WindowStats.of([row(lanes=7)]).saturation is None  # lanes in no known shape
