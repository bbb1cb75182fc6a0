"""Hourly rollups of old metrics windows on SQLite and PostgreSQL (issue 28: bounded history).

Totals stay exact, the row count is bounded (one row per topology per hour), and the
sensors' reads of the latest windows (``metrics_windows(limit=K)``, the failure-window
evaluation) are the same before and after a rollup.
"""

from __future__ import annotations

import datetime as dt

import pytest

from flowctl.adapters import metrics_windows as metrics_windows_module
from flowctl.adapters import schema
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.window_evaluation import evaluate
from flowctl.core.metrics_row import COUNTS
from tests.unit.window_policies import PAPER

pytestmark = pytest.mark.integration

NOW = dt.datetime.now(dt.UTC).replace(minute=30, second=0, microsecond=0)
#: Three whole hours, 30 h ago: past the default 24 h, so rolled up.
OLD = NOW.replace(minute=0) - dt.timedelta(hours=30)
BEFORE = NOW - dt.timedelta(hours=24)
PER_HOUR = 12  # one window per 5 minutes


def _plane(url: str, *topologies: str) -> ControlPlane:
    plane = ControlPlane(url)
    plane.ensure_schema()
    for tid in topologies:
        plane.register_topology(tid, "wordcount", "blue", 2)
        plane.set_state(tid, "ACTIVE")
    return plane


def _window(plane: ControlPlane, tid: str, start: dt.datetime, i: int, **values: object) -> None:
    defaults = {
        "admitted": 10 + i, "acked": 10 + i, "failed": i % 3, "timed_out": i % 2,
        "dlq": i % 4, "records": 20 + i, "records_per_s": float(i),
        "latency_p99_ms": float(100 + i), "backlog": i,
    }  # fmt: skip
    plane.write_metrics_window(tid, start, start + dt.timedelta(minutes=5), **defaults | values)


def _history(plane: ControlPlane, tid: str) -> None:
    """Three old hours of windows, then four recent ones (the paper's rule scales up)."""
    for h in range(3):
        for k in range(PER_HOUR):
            start = OLD + dt.timedelta(hours=h, minutes=5 * k)
            _window(plane, tid, start, h * PER_HOUR + k)
    for k, failed in enumerate([0, 0, 0, 9]):
        start = NOW - dt.timedelta(minutes=20 - 5 * k)
        plane.write_metrics_window(
            tid, start, start + dt.timedelta(minutes=5), acked=100, failed=failed
        )


def _totals(plane: ControlPlane, tid: str) -> dict[str, int]:
    rows = [w.row for w in plane.metrics_windows(tid, rollups=True)]
    return {k: sum(getattr(r, k) for r in rows) for k in COUNTS}


def test_a_rollup_keeps_totals_exact_bounds_the_rows_and_leaves_the_sensors_reads(
    database_url: str,
) -> None:
    plane = _plane(database_url, "t1", "t2")
    for tid in ("t1", "t2"):
        _history(plane, tid)
    totals = {tid: _totals(plane, tid) for tid in ("t1", "t2")}
    latest = [w.row for w in plane.metrics_windows("t1", limit=4)]
    decided = evaluate(database_url, "wordcount", PAPER, topology_id="t1")
    assert decided.decided

    assert plane.roll_up_windows(BEFORE) == 2 * 3 * PER_HOUR

    for tid in ("t1", "t2"):
        assert _totals(plane, tid) == totals[tid]
        stored = plane.metrics_windows(tid, rollups=True)
        rollups = [w for w in stored if w.rolled_up]
        assert len(stored) == 3 + 4 and len(rollups) == 3
        assert [w.rolled_up for w in rollups] == [PER_HOUR] * 3
        assert [w.window_start for w in rollups] == [OLD + dt.timedelta(hours=h) for h in range(3)]
    first = plane.metrics_windows("t1", rollups=True)[0]
    assert first.window_end == OLD + dt.timedelta(hours=1)
    assert first.latency_p99_ms == pytest.approx(100 + PER_HOUR - 1)  # the hour's worst
    assert first.records_per_s == pytest.approx(sum(range(PER_HOUR)) / PER_HOUR)  # equal lengths
    assert first.backlog == PER_HOUR - 1 and first.lanes is None
    # The sensors' reads: the same last windows, the same decision; no rollup among them.
    assert [w.row for w in plane.metrics_windows("t1", limit=4)] == latest
    assert [w.rolled_up for w in plane.metrics_windows("t1")] == [0] * 4
    again = evaluate(database_url, "wordcount", PAPER, topology_id="t1")
    assert again.decision == decided.decision and again.reason == decided.reason
    # A second pass finds nothing: the row count stays where it is.
    assert plane.roll_up_windows(BEFORE) == 0
    assert len(plane.metrics_windows("t1", rollups=True)) == 7


def test_a_late_window_is_merged_into_its_hours_rollup(database_url: str) -> None:
    plane = _plane(database_url, "t1")
    _history(plane, "t1")
    plane.roll_up_windows(BEFORE)
    _window(plane, "t1", OLD + dt.timedelta(minutes=7), 99)
    totals = _totals(plane, "t1")
    assert plane.roll_up_windows(BEFORE) == 1
    assert _totals(plane, "t1") == totals
    rollups = [w for w in plane.metrics_windows("t1", rollups=True) if w.rolled_up]
    assert [w.rolled_up for w in rollups] == [PER_HOUR + 1, PER_HOUR, PER_HOUR]


def test_a_topology_with_only_rollups_left_has_no_window_for_the_sensor(sqlite_url: str) -> None:
    plane = _plane(sqlite_url, "t1")
    for k, failed in enumerate([0, 0, 0, 9]):
        _window(plane, "t1", OLD + dt.timedelta(minutes=5 * k), k, failed=failed)
    plane.roll_up_windows(BEFORE)
    assert plane.metrics_windows("t1") == []
    assert plane.metrics_windows("t1", rollups=True)[0].rolled_up == 4
    result = evaluate(sqlite_url, "wordcount", PAPER)
    assert result.decision is None and "0 of history_windows=4" in result.reason


def test_one_pass_rolls_up_at_most_rollup_max_hours_the_oldest_first(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metrics_windows_module, "ROLLUP_MAX_HOURS", 1)
    plane = _plane(sqlite_url, "t1")
    _history(plane, "t1")
    assert plane.roll_up_windows(BEFORE) == PER_HOUR
    kinds = [w.rolled_up for w in plane.metrics_windows("t1", rollups=True)]
    assert kinds[0] == PER_HOUR and kinds[1:] == [0] * (2 * PER_HOUR + 4)
    assert plane.roll_up_windows(BEFORE) == PER_HOUR


def test_a_naive_cutoff_is_refused_naming_it(sqlite_url: str) -> None:
    plane = _plane(sqlite_url)
    with pytest.raises(ValueError, match="before"):
        plane.roll_up_windows(dt.datetime(2026, 1, 1))


def test_the_rollup_column_is_built_from_the_type() -> None:
    assert "rolled_up" in schema.metrics_windows.c
