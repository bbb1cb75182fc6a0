"""The hourly rollup of metrics windows (flowctl.core.metrics_rollup), over plain rows."""

from __future__ import annotations

import dataclasses

import pytest

from flowctl.config import ConfigError, Settings
from flowctl.core.metrics_rollup import HOUR_S, hour_of, roll_up, roll_up_by_hour
from flowctl.core.metrics_row import COUNTS, MetricsRow


def _row(start: float, length: float = 60.0, topology: str = "t", **values: object) -> MetricsRow:
    base = {
        "topology": topology, "window_start": start, "window_end": start + length,
        "admitted": 5, "acked": 4, "failed": 1, "timed_out": 2, "replayed": 3, "dlq": 1,
        "records": 10, "records_per_s": 1.0, "latency_p50_s": 0.1, "latency_p99_s": 0.5,
        "backlog": 3, "backpressure_level": 0.5, "lanes": [{"lane": 0}],
    }  # fmt: skip
    return MetricsRow(**(base | values))  # type: ignore[arg-type]


def test_counts_are_summed_rates_weighted_by_length_and_latencies_the_worst() -> None:
    rows = [
        _row(0.0, 60.0, records_per_s=1.0, latency_p99_s=0.5, backlog=7, sink_errors=2),
        _row(60.0, 180.0, records_per_s=5.0, latency_p99_s=2.0, backlog=1, health="STALLED",
             health_cause="broker", levels={"sink": 1}, saturation=0.5),
    ]  # fmt: skip
    up = roll_up(rows)
    assert {k: getattr(up, k) for k in COUNTS} == {k: 2 * getattr(rows[0], k) for k in COUNTS}
    assert up.records_per_s == pytest.approx((1.0 * 60 + 5.0 * 180) / 240)
    assert (up.latency_p99_s, up.latency_p50_s, up.backlog) == (2.0, 0.1, 7)
    assert (up.window_start, up.window_end) == (0.0, 240.0)
    assert (up.health, up.health_cause) == ("STALLED", "broker")  # the hour's last window's
    assert up.sink_errors == 2 and up.repeat_failures is None  # unmeasured stays None
    assert up.saturation == 0.5 and up.levels == {"sink": 1}
    assert up.lanes is None and up.rolled_up == 2 and up.n == 0


def test_a_rollup_merged_again_counts_its_windows() -> None:
    first = roll_up([_row(0.0), _row(60.0)])
    again = roll_up([first, _row(120.0)])
    assert again.rolled_up == 3 and again.acked == 12


def test_one_rollup_per_topology_per_hour() -> None:
    rows = [_row(HOUR_S - 60.0), _row(HOUR_S), _row(HOUR_S + 60.0), _row(0.0, topology="u")]
    ups = roll_up_by_hour(rows)
    assert [(u.topology, hour_of(u), u.rolled_up) for u in ups] == [
        ("t", 0.0, 1), ("t", HOUR_S, 2), ("u", 0.0, 1),
    ]  # fmt: skip


def test_empty_or_mixed_input_is_refused_naming_the_topologies() -> None:
    with pytest.raises(ValueError, match="no windows"):
        roll_up([])
    with pytest.raises(ValueError, match=r"several topologies \['t', 'u'\]"):
        roll_up([_row(0.0), _row(0.0, topology="u")])


def test_the_rolled_up_count_is_checked_like_every_count() -> None:
    with pytest.raises(ValueError, match="rolled_up=-1 must be an integer >= 0"):
        dataclasses.replace(_row(0.0), rolled_up=-1).check()


def test_metrics_raw_hours_setting_default_range_and_child_env() -> None:
    assert Settings.from_env({}).metrics_raw_hours == 24
    settings = Settings.from_env({"FLOWCTL_METRICS_RAW_HOURS": "48"})
    assert settings.metrics_raw_hours == 48
    assert Settings.from_env(settings.to_env()).metrics_raw_hours == 48
    with pytest.raises(ConfigError, match=r"FLOWCTL_METRICS_RAW_HOURS=0 is out of range"):
        Settings.from_env({"FLOWCTL_METRICS_RAW_HOURS": "0"})
    with pytest.raises(ConfigError, match="FLOWCTL_METRICS_RAW_HOURS='day' is not an integer"):
        Settings.from_env({"FLOWCTL_METRICS_RAW_HOURS": "day"})
