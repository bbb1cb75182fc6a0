"""The stream task relays each metrics window of its topology to Airflow's metrics once."""

from __future__ import annotations

import datetime as dt

import pytest

from flowctl.adapters.control_plane import ControlPlane, MetricsWindow
from flowctl_airflow.metrics_relay import MetricsRelay

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _window(plane: ControlPlane, n: int, acked: int) -> int:
    start = T0 + dt.timedelta(seconds=10 * n)
    return plane.write_metrics_window(
        "wc-blue-1", start, start + dt.timedelta(seconds=10), acked=acked, records=acked * 10
    )


@pytest.fixture
def plane(database_url: str) -> ControlPlane:
    plane = ControlPlane(database_url)
    plane.ensure_schema()
    plane.register_topology("wc-blue-1", "wordcount", "blue", 2)
    return plane


def test_each_window_is_emitted_once_in_order(plane: ControlPlane) -> None:
    seen: list[MetricsWindow] = []
    relay = MetricsRelay(plane, "wc-blue-1", emit=seen.append)
    first = [_window(plane, n, acked=n + 1) for n in range(3)]
    assert relay.poll_once() == 3
    assert relay.poll_once() == 0
    later = _window(plane, 3, acked=9)
    assert relay.poll_once() == 1
    assert [w.id for w in seen] == [*first, later]
    assert [w.acked for w in seen] == [1, 2, 3, 9]


def test_a_failing_emit_does_not_stop_the_relay(plane: ControlPlane) -> None:
    calls: list[int] = []

    def emit(row: MetricsWindow) -> None:
        calls.append(row.id)
        if len(calls) == 1:
            raise ValueError("bad figure")

    relay = MetricsRelay(plane, "wc-blue-1", emit=emit)
    ids = [_window(plane, n, acked=1) for n in range(2)]
    assert relay.poll_once() == 2
    assert calls == ids and relay.emitted == 2


def test_the_default_emitter_accepts_control_plane_rows(plane: ControlPlane) -> None:
    _window(plane, 0, acked=5)
    relay = MetricsRelay(plane, "wc-blue-1", pipeline="wordcount")
    assert relay.poll_once() == 1  # through emit_window: a no-op without a metrics backend


def test_interval_must_be_positive(plane: ControlPlane) -> None:
    with pytest.raises(ValueError, match=r"interval_s=0 must be > 0"):
        MetricsRelay(plane, "wc-blue-1", interval_s=0)
