"""The planner's health feed: Eden tuples judged per planning call, changes logged once."""

from __future__ import annotations

import logging

import pytest

from flowctl.core.clock import FakeClock
from flowctl.core.spout_contract import LaneResult, Outcome
from flowctl.spark.flow.planner_health import PlannerHealth

ERROR = "AttributeError: 'NoneType' object has no attribute 'lower'"


def _health(clock: FakeClock, **kw: object) -> PlannerHealth:
    settings = {"stall_after_s": 10.0, "on_code_error": "halt", **kw}
    return PlannerHealth("p-blue-1", "p.eden", clock, **settings)  # type: ignore[arg-type]


def _raised(topic: str, n: int) -> list[LaneResult]:
    return [LaneResult(f"{topic}:0:{i}-{i + 1}", Outcome.REPLAYED, error=ERROR) for i in range(n)]


def test_eden_tuples_all_raising_halt_once_with_an_error_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    health = _health(FakeClock())
    health.results(_raised("p.eden", 2))
    health.results(_raised("p.eden", 2))  # another lane of the same call
    with caplog.at_level(logging.INFO, logger="flowctl.spark.flow"):
        now = health.observe(backlog=100, slowest_step=None)
        again = health.observe(backlog=100, slowest_step=None)
    assert health.halted and now.state == again.state == "HALTED"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "HALTED: code error: 4 of 4 tuples raised AttributeError" in errors[0].getMessage()
    assert ERROR in errors[0].getMessage()


def test_replayed_tuples_failing_again_never_halt() -> None:
    health = _health(FakeClock())
    health.results(_raised("p.replay.a", 9))
    assert health.observe(backlog=9, slowest_step=None).state == "HEALTHY"
    assert not health.halted


def test_a_read_error_is_the_cause_of_a_stall_and_progress_heals_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    health = _health(clock)
    health.durable_at({"p.eden:0": 10})
    health.observe(backlog=5, slowest_step="log_ends (900 ms)")
    health.error("reading the end offsets", TimeoutError("no answer"))
    clock.advance(10)
    with caplog.at_level(logging.INFO, logger="flowctl.spark.flow"):
        stalled = health.observe(backlog=5, slowest_step="log_ends (900 ms)")
        health.durable_at({"p.eden:0": 12})
        healed = health.observe(backlog=5, slowest_step=None)
    assert stalled.state == "STALLED"
    assert stalled.cause == (
        "backlog 5, nothing durable for 10 s; reading the end offsets: TimeoutError: no answer"
    )
    assert healed.state == "HEALTHY"
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
