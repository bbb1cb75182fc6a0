"""Health rules on a fake clock: stall, halt, recovery to HEALTHY."""

from __future__ import annotations

import pytest

from flowctl.core.clock import FakeClock
from flowctl.core.health import CodeError, Health, HealthMonitor, code_error

ATTR = "AttributeError: 'NoneType' object has no attribute 'split'"


def test_a_backlog_without_durable_progress_stalls_after_stall_after_s() -> None:
    clock = FakeClock()
    monitor = HealthMonitor(clock, stall_after_s=60)
    assert monitor.observe(backlog=500, durable=100) == Health()
    clock.advance(59)
    assert monitor.observe(backlog=500, durable=100) == Health()
    clock.advance(1)
    health = monitor.observe(backlog=500, durable=100, slowest_step="flush")
    assert health == Health(
        "STALLED", "backlog 500, nothing durable for 60 s; slowest step: flush", 60.0
    )
    clock.advance(10)
    assert monitor.observe(backlog=510, durable=100).since == 60.0  # stalled since then


def test_the_last_read_or_flush_error_is_the_cause_of_a_stall() -> None:
    clock = FakeClock()
    monitor = HealthMonitor(clock, stall_after_s=30)
    monitor.observe(backlog=5, durable=0)
    monitor.error("reading the log ends: KafkaTimeoutError: broker not answering")
    clock.advance(30)
    health = monitor.observe(backlog=5, durable=0, slowest_step="plan")
    assert health.state == "STALLED"
    assert health.cause == (
        "backlog 5, nothing durable for 30 s; "
        "reading the log ends: KafkaTimeoutError: broker not answering"
    )


def test_durable_progress_or_an_empty_backlog_is_healthy_again_at_once() -> None:
    clock = FakeClock()
    monitor = HealthMonitor(clock, stall_after_s=10)
    monitor.observe(backlog=5, durable=0)
    clock.advance(20)
    assert monitor.observe(backlog=5, durable=0).state == "STALLED"
    assert monitor.observe(backlog=5, durable=1) == Health()
    clock.advance(20)
    assert monitor.observe(backlog=5, durable=1).state == "STALLED"
    assert monitor.observe(backlog=0, durable=1) == Health()  # nothing to do is no stall
    clock.advance(20)
    assert monitor.observe(backlog=0, durable=1) == Health()


def test_a_window_of_one_exception_and_no_success_halts_once_and_stays_halted() -> None:
    clock = FakeClock(5.0)
    monitor = HealthMonitor(clock, stall_after_s=10)
    found = monitor.window(succeeded=0, timed_out=1, errors=[ATTR] * 4)
    assert found == CodeError("AttributeError", 4, 5, ATTR)
    assert monitor.window(succeeded=0, timed_out=0, errors=[ATTR] * 4) is None  # reported once
    health = monitor.observe(backlog=9, durable=3)
    assert (health.state, health.since) == ("HALTED", 5.0)
    assert health.cause is not None and health.cause.startswith(
        "code error: 4 of 5 tuples raised AttributeError and none succeeded"
    )
    clock.advance(100)
    assert monitor.observe(backlog=0, durable=50).state == "HALTED"  # waits for a fix or a stop


def test_dead_letter_mode_never_halts() -> None:
    monitor = HealthMonitor(FakeClock(), on_code_error="dead_letter")
    assert monitor.window(succeeded=0, timed_out=0, errors=[ATTR] * 8) is None
    assert monitor.observe(backlog=1, durable=0) == Health()


@pytest.mark.parametrize(
    ("succeeded", "timed_out", "errors"),
    [
        (1, 0, [ATTR] * 9),  # one success: the code works on some records
        (0, 0, ["PoisonRecord: bad line"] * 9),  # refused records are records' failures
        (0, 5, [ATTR] * 4),  # not most of the window
        (0, 0, [ATTR] * 2),  # too few to tell
        (0, 0, [ATTR, ATTR, "KeyError: 'x'", "ValueError: y", "TypeError: z"]),
        (0, 3, []),  # timeouts only
    ],
)
def test_records_failures_are_no_code_error(succeeded: int, timed_out: int, errors: list) -> None:
    assert code_error(succeeded, timed_out, errors) is None


def test_the_type_is_read_from_a_qualified_name_too() -> None:
    found = code_error(0, 0, ["mylib.errors.BadConfig: no key"] * 3)
    assert found is not None and found.error_type == "BadConfig"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"stall_after_s": 0}, r"stall_after_s=0 must be a number > 0"),
        ({"on_code_error": "ignore"}, r"on_code_error='ignore' must be one of halt, dead_letter"),
    ],
)
def test_bad_settings_are_named(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HealthMonitor(FakeClock(), **kwargs)
    with pytest.raises(ValueError, match=r"health state='SICK' must be one of"):
        Health("SICK")
