"""Metrics window: one row per topology per window, percentiles, gauges."""

from __future__ import annotations

import json
import pickle

import pytest

from flowctl.core.clock import FakeClock
from flowctl.core.metrics import LaneGauge, MetricsWindow, percentile


def test_nearest_rank_percentiles() -> None:
    samples = [float(i) for i in range(1, 101)]
    assert percentile(samples, 50) == 50.0
    assert percentile(samples, 99) == 99.0
    assert percentile(samples, 100) == 100.0
    assert percentile([3.0], 99) == 3.0
    assert percentile([], 50) is None


def test_percentile_rejects_out_of_range_q() -> None:
    with pytest.raises(ValueError, match="q must be in"):
        percentile([1.0], 101)


def test_no_row_before_the_window_ends() -> None:
    clock = FakeClock()
    m = MetricsWindow("wc-blue", clock, window_s=10)
    m.admitted(3)
    clock.advance(9.9)
    assert m.roll() == []


def test_row_aggregates_counters_gauges_and_latency() -> None:
    clock = FakeClock(100.0)
    m = MetricsWindow("wc-blue", clock, window_s=10)
    m.admitted(5)
    m.acked(4, records=400, latencies=[0.1, 0.2, 0.3, 0.4])
    m.failed(1)
    m.timed_out(2)
    m.replayed(3)
    m.dlq(1)
    m.set_backlog(1234)
    m.set_backpressure(2)
    m.set_lanes([LaneGauge(1, 3, "SLOW", 2), LaneGauge(0, 8, "NORMAL", 5)])
    clock.advance(10)
    (row,) = m.roll()
    assert (row.topology, row.window_start, row.window_end) == ("wc-blue", 100.0, 110.0)
    assert (row.admitted, row.acked, row.failed, row.timed_out) == (5, 4, 1, 2)
    assert (row.replayed, row.dlq, row.records, row.records_per_s) == (3, 1, 400, 40.0)
    assert (row.latency_p50_s, row.latency_p99_s) == (0.2, 0.4)
    assert (row.backlog, row.backpressure_level, row.fail_count) == (1234, 2, 3)
    assert [g.lane for g in row.lanes] == [0, 1]


def test_late_roll_keeps_events_in_their_own_window() -> None:
    clock = FakeClock()
    m = MetricsWindow("t", clock, window_s=1)
    m.failed(1)
    clock.advance(2.5)  # windows [0,1) and [1,2) ended; nothing rolled yet
    m.failed(7)  # happens in [2,3)
    rows = m.roll()
    assert [(r.window_start, r.failed) for r in rows] == [(0.0, 1), (1.0, 0)]
    clock.advance(0.5)
    assert [r.failed for r in m.roll()] == [7]


def test_latency_reservoir_is_bounded() -> None:
    clock = FakeClock()
    m = MetricsWindow("t", clock, window_s=1, max_samples=10)
    m.acked(1000, latencies=[float(i) for i in range(1000)])
    clock.advance(1)
    (row,) = m.roll()
    assert row.latency_p50_s is not None and 0 <= row.latency_p50_s < 1000


def test_row_is_frozen_picklable_and_json_ready() -> None:
    clock = FakeClock()
    m = MetricsWindow("t", clock, window_s=1)
    m.set_lanes([LaneGauge(0, 4, "NORMAL", 1)])
    clock.advance(1)
    (row,) = m.roll()
    with pytest.raises(AttributeError):
        row.acked = 5  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(row)) == row
    assert json.loads(json.dumps(row.to_dict()))["lanes"][0]["window"] == 4


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda m: m.failed(-1), "failed"),
        (lambda m: m.set_backlog(-5), "backlog"),
        (lambda m: m.acked(1, latencies=[-0.1]), "latency"),
    ],
)
def test_bad_values_name_the_field(call, field: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=field):
        call(MetricsWindow("t", FakeClock()))
