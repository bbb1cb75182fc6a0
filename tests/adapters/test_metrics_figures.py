"""``metrics_windows`` keeps the window figures in columns (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt

import pytest

from flowctl.adapters.control_plane import ControlPlane, WindowFigures

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.UTC)
LANES = [{"lane": 0, "window": 4, "state": "NORMAL", "in_flight": 1}]


@pytest.fixture
def plane(database_url: str) -> ControlPlane:
    cp = ControlPlane(database_url)
    cp.ensure_schema()
    return cp


def _write(plane: ControlPlane, i: int, **kw: object) -> None:
    start = T0 + dt.timedelta(seconds=10 * i)
    plane.write_metrics_window("t", start, start + dt.timedelta(seconds=10), **kw)  # type: ignore[arg-type]


def test_figures_are_columns_and_read_back(plane: ControlPlane) -> None:
    figures = WindowFigures(
        repeat_failures=2,
        mrwq=7,
        arrival_rate=12.5,
        lane_rate=40.0,
        batch_duration_s=1.2,
        trigger_s=1.0,
        levels={"persist": 1},
    )
    _write(plane, 0, lanes=LANES, figures=figures)
    (window,) = plane.metrics_windows("t")
    assert window.lanes == LANES and window.lane_list == LANES
    assert (window.repeat_failures, window.mrwq, window.arrival_rate) == (2, 7, 12.5)
    assert (window.lane_rate, window.batch_duration_s, window.trigger_s) == (40.0, 1.2, 1.0)
    assert window.levels == {"persist": 1} and window.saturation == 0.25
    assert window.figures == WindowFigures(
        repeat_failures=2,
        mrwq=7,
        arrival_rate=12.5,
        lane_rate=40.0,
        batch_duration_s=1.2,
        trigger_s=1.0,
        saturation=0.25,
        levels={"persist": 1},
    )


def test_a_lanes_object_with_figures_is_split_on_write(plane: ControlPlane) -> None:
    _write(plane, 0, lanes={"lanes": LANES, "sink_errors": 3, "trigger_s": 2.0})
    _write(plane, 1)
    first, second = plane.metrics_windows("t")
    assert first.lanes == LANES and (first.sink_errors, first.trigger_s) == (3, 2.0)
    assert second.lanes is None and second.figures == WindowFigures()


def test_health_is_stored_with_the_window_and_checked(plane: ControlPlane) -> None:
    _write(plane, 0)
    _write(plane, 1, health="STALLED", health_cause="backlog 5, nothing durable for 60 s")
    first, second = plane.metrics_windows("t")
    assert (first.health, first.health_cause) == ("HEALTHY", None)
    assert (second.health, second.health_cause) == (
        "STALLED",
        "backlog 5, nothing durable for 60 s",
    )
    with pytest.raises(ValueError, match=r"health=.SICK. must be one of HEALTHY, RECOVERING"):
        _write(plane, 2, health="SICK")
    assert len(plane.metrics_windows("t")) == 2
