"""The failure-window decision read from real SQLite and PostgreSQL rows, without Airflow.

:func:`flowctl.adapters.window_evaluation.evaluate` is what the autoscale sensor's poke
and its trigger both call: it reads the control plane and runs the pure rule of
:mod:`flowctl.core.scaling_policy`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest

from flowctl.adapters import schema
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.replacements import ReplacementLog
from flowctl.adapters.window_evaluation import evaluate
from tests.unit.window_policies import PAPER

pytestmark = pytest.mark.integration

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
ADAPTIVE = dataclasses.replace(PAPER, policy="adaptive")


def _topology(
    url: str,
    failures: Sequence[int],
    *,
    parallelism: int = 2,
    topology_id: str = "wc-blue-1",
    lanes: Sequence[Any] | None = None,
    backlog: Sequence[int] | None = None,
    dlq: int = 0,
) -> str:
    plane = ControlPlane(url)
    plane.ensure_schema()
    plane.register_topology(topology_id, "wordcount", "blue", parallelism)
    plane.set_state(topology_id, "ACTIVE")
    for i, failed in enumerate(failures):
        plane.write_metrics_window(
            topology_id,
            T0 + dt.timedelta(seconds=10 * i),
            T0 + dt.timedelta(seconds=10 * (i + 1)),
            acked=100,
            failed=failed,
            dlq=dlq if i == len(failures) - 1 else 0,
            backlog=backlog[i] if backlog else 0,
            lanes=lanes[i] if lanes else None,
        )
    return topology_id


# -- the paper's rule -----------------------------------------------------------------------


def test_paper_scales_up_on_a_spike(database_url: str) -> None:
    tid = _topology(database_url, [0, 0, 0, 9])
    result = evaluate(database_url, "wordcount", PAPER)
    assert result.decided and result.topology_id == tid
    d = result.decision
    assert (d.direction, d.old_parallelism, d.new_parallelism, d.cause) == ("up", 2, 4, "load")
    assert d.mean == 2.25 and d.s2 > d.threshold_c == 1.0
    assert d.figures["fail_num"] == 9


def test_paper_scales_down_when_calm_but_dispersed(database_url: str) -> None:
    _topology(database_url, [9, 9, 9, 0], parallelism=4)
    d = evaluate(database_url, "wordcount", PAPER).decision
    assert (d.direction, d.new_parallelism, d.cause) == ("down", 2, "idle")


def test_paper_takes_no_decision_on_steady_failures(sqlite_url: str) -> None:
    _topology(sqlite_url, [3, 3, 3, 3])
    result = evaluate(sqlite_url, "wordcount", PAPER)
    assert not result.decided
    assert result.decision.direction == "none" and result.decision.s2 == 0
    assert result.reason.startswith("stable")


def test_failed_and_timed_out_both_count_as_failures(sqlite_url: str) -> None:
    plane = ControlPlane(sqlite_url)
    plane.ensure_schema()
    plane.register_topology("t", "wordcount", "blue", 2)
    plane.set_state("t", "ACTIVE")
    for i, (failed, timed_out) in enumerate([(0, 0), (0, 0), (0, 0), (4, 5)]):
        plane.write_metrics_window(
            "t", T0 + dt.timedelta(seconds=i), T0 + dt.timedelta(seconds=i + 1),
            failed=failed, timed_out=timed_out,
        )  # fmt: skip
    assert evaluate(sqlite_url, "wordcount", PAPER).decision.figures["fail_num"] == 9


def test_a_stalled_or_halted_topology_is_never_scaled(sqlite_url: str) -> None:
    tid = _topology(sqlite_url, [0, 0, 0, 9])  # the paper's rule would scale up
    plane = ControlPlane(sqlite_url)
    for health in ("STALLED", "HALTED"):
        plane.write_metrics_window(
            tid, T0 + dt.timedelta(seconds=40), T0 + dt.timedelta(seconds=50),
            failed=9, health=health, health_cause="broker not answering",
        )  # fmt: skip
        result = evaluate(sqlite_url, "wordcount", PAPER)
        assert result.decision is None
        assert result.reason == (
            f"topology {tid} is {health} (broker not answering): not scaled until HEALTHY"
        )


def test_fewer_windows_than_the_history_is_no_decision(sqlite_url: str) -> None:
    _topology(sqlite_url, [0, 0, 9])
    result = evaluate(sqlite_url, "wordcount", PAPER)
    assert result.decision is None
    assert "3 of history_windows=4" in result.reason


# -- the adaptive policy and its causes -----------------------------------------------------


def test_adaptive_scales_up_on_load(sqlite_url: str) -> None:
    _topology(sqlite_url, [0, 0, 0, 9], backlog=[0, 100, 200, 400])
    d = evaluate(sqlite_url, "wordcount", ADAPTIVE).decision
    assert (d.direction, d.new_parallelism, d.cause, d.policy) == ("up", 4, "load", "adaptive")


def test_adaptive_does_not_buy_lanes_for_poison(sqlite_url: str) -> None:
    lanes = [None, None, None, {"repeat_failures": 8, "lanes": []}]
    _topology(sqlite_url, [0, 0, 0, 9], lanes=lanes, dlq=3)
    result = evaluate(sqlite_url, "wordcount", ADAPTIVE)
    assert not result.decided
    assert result.decision.cause == "poison"
    assert "not scaling up" in result.reason and "DLQ +3" in result.reason


def test_adaptive_does_not_buy_lanes_for_a_failing_sink(database_url: str) -> None:
    _topology(database_url, [0, 0, 0, 9], lanes=[None, None, None, {"sink_errors": 2}])
    result = evaluate(database_url, "wordcount", ADAPTIVE)
    assert not result.decided and result.decision.cause == "sink"


def test_adaptive_scales_an_idle_topology_down(sqlite_url: str) -> None:
    idle = [{"window": 8, "in_flight": 1}, {"window": 8, "in_flight": 0}]
    _topology(sqlite_url, [0, 0, 0, 0], parallelism=4, lanes=[idle] * 4, backlog=[5, 5, 5, 5])
    d = evaluate(sqlite_url, "wordcount", ADAPTIVE).decision
    assert (d.direction, d.new_parallelism, d.cause) == ("down", 2, "idle")
    assert d.figures["saturation"] == pytest.approx(1 / 16)


# -- when the sensor must not decide --------------------------------------------------------


def test_no_decision_while_a_replacement_runs(sqlite_url: str) -> None:
    tid = _topology(sqlite_url, [0, 0, 0, 9])
    ReplacementLog(sqlite_url).record_replacement(
        "wordcount", tid, "wc-green-2", 2, 4, "manual", started_at=T0, outcome="running"
    )
    result = evaluate(sqlite_url, "wordcount", PAPER)
    assert result.decision is None and "is running" in result.reason


def test_no_decision_during_the_cooldown_after_a_replacement(sqlite_url: str) -> None:
    tid = _topology(sqlite_url, [0, 0, 0, 9])
    finished = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=20)
    ReplacementLog(sqlite_url).record_replacement(
        "wordcount", "old", tid, 1, 2, "earlier", started_at=finished - dt.timedelta(seconds=5),
        finished_at=finished, outcome="ok",
    )  # fmt: skip
    result = evaluate(sqlite_url, "wordcount", PAPER)
    assert result.decision is None and "cooldown" in result.reason
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    assert evaluate(sqlite_url, "wordcount", PAPER, now=later).decided


def test_the_adaptive_policy_keeps_lanes_a_scale_up_bought_for_scale_down_delay_s(
    sqlite_url: str,
) -> None:
    """The last scale-up's finish is read from the replacement log: idle lanes are held
    until ``scale_down_delay_s`` after it, then given back."""
    idle = [{"window": 10, "in_flight": 0, "rate": 500.0}] * 2
    tid = _topology(sqlite_url, [0, 0, 0, 0], parallelism=4, lanes=[idle] * 4)
    finished = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=100)
    ReplacementLog(sqlite_url).record_replacement(
        "wordcount", "old", tid, 2, 4, "scale up", started_at=finished - dt.timedelta(seconds=5),
        finished_at=finished, outcome="ok",
    )  # fmt: skip
    policy = dataclasses.replace(ADAPTIVE, scale_down_delay_s=300.0)
    held = evaluate(sqlite_url, "wordcount", policy)
    assert held.decision is not None and held.decision.direction == "none"
    assert "scale_down_delay_s=300" in held.reason
    later = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=300)
    down = evaluate(sqlite_url, "wordcount", policy, now=later)
    assert down.decision is not None and down.decision.direction == "down"


def test_no_decision_without_exactly_one_active_topology(sqlite_url: str) -> None:
    ControlPlane(sqlite_url).ensure_schema()
    assert "no ACTIVE topology" in evaluate(sqlite_url, "wordcount", PAPER).reason
    _topology(sqlite_url, [0, 0, 0, 9])
    # The control plane registers no second admitting topology while the first one lives;
    # two ACTIVE ones remain possible when the first one's driver died without a word.
    t = schema.topologies
    with ControlPlane(sqlite_url).engine.begin() as conn:
        conn.execute(
            t.update()
            .where(t.c.topology_id == "wc-blue-1")
            .values(heartbeat_at=dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5))
        )
    _topology(sqlite_url, [0, 0, 0, 9], topology_id="wc-green-2")
    assert "2 ACTIVE topologies" in evaluate(sqlite_url, "wordcount", PAPER).reason
