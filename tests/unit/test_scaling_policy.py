"""The failure-window rule of flowctl.core.scaling_policy over plain values (no database)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import NamedTuple

import pytest

from flowctl.core.metrics_row import MetricsRow
from flowctl.core.scaling_policy import (
    Gate,
    WindowPolicy,
    judge_windows,
    replacement_gate,
    topology_refusal,
)
from tests.unit.window_policies import PAPER

NOW = dt.datetime(2026, 1, 1, 12, tzinfo=dt.UTC)
OPEN = Gate(None, None, None)


class Event(NamedTuple):
    """A replacement event as the gate reads it."""

    id: int
    outcome: str
    finished_at: dt.datetime | None
    old_parallelism: int = 2
    new_parallelism: int = 4
    old_topology_id: str = "blue"
    new_topology_id: str | None = "green"


def _rows(failures: list[int], **last: object) -> list[MetricsRow]:
    rows = [
        MetricsRow(
            topology="t",
            window_start=10.0 * i,
            window_end=10.0 * (i + 1),
            admitted=100,
            acked=100,
            failed=f,
            timed_out=0,
            replayed=0,
            dlq=0,
            records=100,
            records_per_s=10.0,
            latency_p50_s=None,
            latency_p99_s=None,
            backlog=0,
            backpressure_level=0.0,
        )
        for i, f in enumerate(failures)
    ]
    rows[-1] = dataclasses.replace(rows[-1], **last)  # type: ignore[arg-type]
    return rows


def test_the_paper_rule_decides_over_plain_rows() -> None:
    result = judge_windows("wc", "t", 2, _rows([0, 0, 0, 9]), PAPER, OPEN, NOW)
    assert result.decided and result.decision is not None
    assert (result.decision.direction, result.decision.new_parallelism) == ("up", 4)
    assert result.to_event()["status"] == "decision"


def test_an_unhealthy_last_window_or_too_few_windows_is_no_decision() -> None:
    halted = _rows([0, 0, 0, 9], health="HALTED", health_cause="bad record")
    result = judge_windows("wc", "t", 2, halted, PAPER, OPEN, NOW)
    assert result.decision is None
    assert result.reason == "topology t is HALTED (bad record): not scaled until HEALTHY"
    few = judge_windows("wc", "t", 2, _rows([0, 9]), PAPER, OPEN, NOW)
    assert few.decision is None and "2 of history_windows=4" in few.reason


def test_the_gate_refuses_while_running_and_during_the_cooldown() -> None:
    running = replacement_gate([Event(7, "running", None)], 60.0, NOW)
    assert running.refusal == "replacement 7 (blue -> green) is running"
    recent = Event(8, "ok", NOW - dt.timedelta(seconds=20))
    assert "cooldown: replacement 8 finished 20 s ago" in str(
        replacement_gate([recent], 60.0, NOW).refusal
    )
    later = replacement_gate([recent], 60.0, NOW + dt.timedelta(seconds=60))
    assert later == Gate(None, recent.finished_at.timestamp(), recent.finished_at.timestamp())
    refused = judge_windows("wc", "t", 2, _rows([0, 0, 0, 9]), PAPER, running, NOW)
    assert refused.decision is None and refused.reason == running.refusal


def test_a_failed_last_replacement_is_no_change_but_keeps_the_last_scale_up() -> None:
    up = Event(1, "ok", NOW - dt.timedelta(hours=2))
    failed = Event(2, "failed", NOW - dt.timedelta(hours=1), new_parallelism=1)
    assert replacement_gate([up, failed], 60.0, NOW) == Gate(None, None, up.finished_at.timestamp())


def test_exactly_one_active_topology_is_judged() -> None:
    assert topology_refusal("wc", None, {}) == "pipeline 'wc' has no ACTIVE topology"
    two = topology_refusal("wc", None, {"a": "ACTIVE", "b": "ACTIVE"})
    assert two == "pipeline 'wc' has 2 ACTIVE topologies (a, b)"
    assert topology_refusal("wc", None, {"a": "ACTIVE"}) is None
    assert topology_refusal("wc", "a", {"a": "DRAINING"}) == "topology a is DRAINING, not ACTIVE"


def test_a_bad_policy_names_the_field_and_value() -> None:
    with pytest.raises(ValueError, match="policy='fast' must be one of paper, adaptive"):
        dataclasses.replace(PAPER, policy="fast")
    with pytest.raises(ValueError, match="history_windows=1 must be an integer >= 2"):
        dataclasses.replace(PAPER, history_windows=1)
    with pytest.raises(ValueError, match=r"unknown key\(s\) \['speed'\]"):
        WindowPolicy.from_dict(PAPER.to_dict() | {"speed": 1})
    assert WindowPolicy.from_dict(PAPER.to_dict()) == PAPER
