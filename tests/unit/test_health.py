"""Health rules on a fake clock: stall, halt, recovery to HEALTHY."""

from __future__ import annotations

import pytest

from flowctl.core.clock import FakeClock
from flowctl.core.health import CodeError, Health, HealthMonitor, code_error, stale_for

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


GAP = "rebuild 3 after lost MRWQ items: gap at seq 412 (item missing for 5.0 s (evicted or lost))"


def test_a_rebuild_after_lost_items_shows_at_once_until_durable_progress_after_it() -> None:
    clock = FakeClock()
    monitor = HealthMonitor(clock, stall_after_s=60)
    monitor.observe(backlog=900, durable=100)
    monitor.recovering(GAP)
    clock.advance(2)
    health = monitor.observe(backlog=900, durable=100)
    assert health == Health(
        "RECOVERING", f"{GAP}; rebuilding, backlog 900, nothing durable for 2 s", 0.0
    )
    # Results queued before the rebuild still flush: progress, but not the recovery's end.
    assert monitor.observe(backlog=800, durable=200).state == "RECOVERING"
    monitor.rebuilt()
    clock.advance(3)
    health = monitor.observe(backlog=800, durable=200)
    assert health.state == "RECOVERING" and "dispatched again, backlog 800" in (health.cause or "")
    assert health.since == 0.0
    assert monitor.observe(backlog=700, durable=300) == Health()  # progress after the rebuild


def test_a_recovery_without_progress_becomes_a_stall_with_the_rebuild_as_its_cause() -> None:
    clock = FakeClock()
    monitor = HealthMonitor(clock, stall_after_s=10)
    monitor.observe(backlog=50, durable=0)
    monitor.recovering(GAP)
    monitor.rebuilt()
    clock.advance(10)
    health = monitor.observe(backlog=50, durable=0)
    assert health == Health("STALLED", f"backlog 50, nothing durable for 10 s; {GAP}", 10.0)
    monitor.error("flushing the MRWQ to the database: OperationalError: gone")
    assert monitor.observe(backlog=50, durable=0).cause == (
        "backlog 50, nothing durable for 10 s; "
        "flushing the MRWQ to the database: OperationalError: gone"
    )  # the error seen is the nearer cause


def test_a_second_gap_during_a_recovery_keeps_its_start_and_needs_its_own_rebuild() -> None:
    clock = FakeClock()
    monitor = HealthMonitor(clock, stall_after_s=60)
    monitor.observe(backlog=5, durable=0)
    monitor.recovering("rebuild 2 after lost MRWQ items: gap at seq 7")
    monitor.rebuilt()
    clock.advance(4)
    monitor.recovering(GAP)
    health = monitor.observe(backlog=5, durable=1)  # progress, but rebuild 3 is not done
    assert (health.state, health.since) == ("RECOVERING", 0.0)
    assert (health.cause or "").startswith(GAP)


def test_an_empty_backlog_after_the_rebuild_ends_a_recovery() -> None:
    monitor = HealthMonitor(FakeClock(), stall_after_s=60)
    monitor.recovering(GAP)
    monitor.rebuilt()
    assert monitor.observe(backlog=0, durable=0) == Health()


def test_ends_unread_for_stall_after_s_stall_whatever_the_backlog_last_seen() -> None:
    """A broker frozen while nothing waited: the backlog is unknown, not empty."""
    clock = FakeClock()
    monitor = HealthMonitor(clock, stall_after_s=10)
    monitor.observe(backlog=0, durable=100)
    monitor.blind("reading the end offsets of wc.eden from Kafka at k:9092: KafkaTimeoutError")
    clock.advance(9)
    assert monitor.observe(backlog=0, durable=100) == Health()
    clock.advance(1)
    health = monitor.observe(backlog=0, durable=100)
    assert health == Health(
        "STALLED",
        "backlog unknown, the log's ends unread for 10 s; "
        "reading the end offsets of wc.eden from Kafka at k:9092: KafkaTimeoutError",
        10.0,
    )
    monitor.blind("again")  # keeps its start
    clock.advance(5)
    assert monitor.observe(backlog=0, durable=100).since == 10.0
    monitor.sighted()
    assert monitor.observe(backlog=0, durable=100) == Health()


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


def test_a_window_older_than_two_window_lengths_is_stale() -> None:
    # 10 s windows: current up to 20 s after its end, stale after
    assert stale_for(100.0, 110.0, 10.0, now=130.0) is None
    assert stale_for(100.0, 110.0, 10.0, now=131.0) == 21.0
    # a 30 s window (slow batches) is its own length: stale only 60 s after its end
    assert stale_for(80.0, 110.0, 10.0, now=160.0) is None
    assert stale_for(80.0, 110.0, 10.0, now=171.0) == 61.0
