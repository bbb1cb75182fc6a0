"""The driver's rollup step: paced to one pass per ROLLUP_EVERY_S, on a real SQLite plane."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from flowctl.adapters.control_plane import ControlPlane
from flowctl.config import Settings
from flowctl.spark.flow import job_windows
from flowctl.spark.flow.job_windows import WindowPublishing

pytestmark = pytest.mark.integration


class Driver(WindowPublishing):
    """The step's part of the stream job: its control plane, settings and warnings."""

    def __init__(self, url: str) -> None:
        self.control = ControlPlane(url)
        self.settings = Settings(metrics_raw_hours=24)
        self.warnings: list[str] = []

    def _warn(self, what: str, exc: BaseException) -> None:
        self.warnings.append(f"{what}: {exc}")


def _old_windows(plane: ControlPlane, count: int, hour: dt.datetime) -> None:
    for k in range(count):
        start = hour + dt.timedelta(minutes=k)
        plane.write_metrics_window("t", start, start + dt.timedelta(minutes=1), acked=1)


def _kinds(plane: ControlPlane) -> list[int]:
    return [w.rolled_up for w in plane.metrics_windows("t", rollups=True)]


def test_the_step_rolls_up_once_per_pass_interval(sqlite_url: str) -> None:
    driver = Driver(sqlite_url)
    plane: Any = driver.control
    plane.ensure_schema()
    plane.register_topology("t", "wordcount", "blue", 1)
    hour = dt.datetime.now(dt.UTC).replace(minute=0, second=0, microsecond=0)
    _old_windows(plane, 3, hour - dt.timedelta(hours=30))
    driver._roll_up_old_windows()
    assert _kinds(plane) == [3]
    _old_windows(plane, 2, hour - dt.timedelta(hours=29))
    driver._roll_up_old_windows()  # too soon: nothing
    assert _kinds(plane) == [3, 0, 0]
    assert driver._rolled_up_at is not None
    driver._rolled_up_at -= job_windows.ROLLUP_EVERY_S
    driver._roll_up_old_windows()
    assert _kinds(plane) == [3, 2]
    assert driver.warnings == []


def test_a_failed_pass_is_a_warning_and_changes_nothing(tmp_path: Any) -> None:
    driver = Driver(f"sqlite:///{tmp_path / 'missing' / 'flowctl.db'}")
    driver._roll_up_old_windows()
    assert len(driver.warnings) == 1 and "rolling up old metrics windows" in driver.warnings[0]
