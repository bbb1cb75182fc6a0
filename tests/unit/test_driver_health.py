"""The driver's stall watch: a stall the blocked planner cannot report is still seen."""

from __future__ import annotations

import time

from flowctl.core.clock import FakeClock
from flowctl.spark.flow.channels import SpoutState
from flowctl.spark.flow.driver_health import DriverHealth
from tests.unit.test_metrics_row import row


def _state(at: float, in_flight: int = 8, buffered: int = 2) -> SpoutState:
    return SpoutState(
        at=at, admit=True, rebuild=None, in_flight=in_flight, buffered=buffered,
        pending_batches=1, mrwq=0, levels={}, lanes=[], counters={}, at_risk=0, seq=3,
        warmups=0, log_empty=False,
    )  # fmt: skip


def test_tuples_in_flight_and_no_checkpoint_progress_stall_and_progress_heals() -> None:
    clock = FakeClock()
    watch = DriverHealth("t-blue-1", clock, stall_after_s=6.0, window_s=2.0)
    state = _state(time.time() - 30)  # the planner's last state: 30 s old
    assert watch.check(state, lambda: 100, admitting=True).healthy
    clock.advance(6)
    stalled = watch.check(state, lambda: 100, admitting=True)
    assert stalled.state == "STALLED"
    assert stalled.cause is not None and stalled.cause.startswith(
        "backlog 10, nothing durable for 6 s; slowest step: the planner has not planned for 3"
    )
    clock.advance(1)
    assert watch.check(state, lambda: 150, admitting=True) is stalled  # checked every 2 s
    clock.advance(1)
    assert watch.check(state, lambda: 150, admitting=True).healthy


def test_a_checkpoint_read_error_is_the_cause() -> None:
    clock = FakeClock()
    watch = DriverHealth("t-blue-1", clock, stall_after_s=4.0, window_s=2.0)

    def away() -> int:
        raise ConnectionError("database is away")

    watch.check(_state(time.time()), away, admitting=False)
    clock.advance(4)
    health = watch.check(_state(time.time(), buffered=50), away, admitting=False)
    assert health.cause == (
        "backlog 8, nothing durable for 4 s; "  # not admitting: only the tuples in flight
        "reading the checkpoints: ConnectionError: database is away"
    )


def test_a_flush_error_is_the_cause_until_a_flush_succeeds() -> None:
    clock = FakeClock()
    watch = DriverHealth("t-blue-1", clock, stall_after_s=4.0, window_s=2.0)
    refused = OSError("database is locked")
    watch.check(_state(time.time()), lambda: 5, admitting=True, flush_error=refused)
    clock.advance(4)
    health = watch.check(_state(time.time()), lambda: 5, admitting=True, flush_error=refused)
    assert health.state == "STALLED"
    assert health.cause == (
        "backlog 10, nothing durable for 4 s; "
        "flushing the MRWQ to the database: OSError: database is locked"
    )
    clock.advance(2)
    assert watch.check(_state(time.time()), lambda: 9, admitting=True).healthy  # it flushed


def test_while_stalled_windows_say_so_and_a_quiet_planner_gets_one_written() -> None:
    clock = FakeClock()
    watch = DriverHealth("t-blue-1", clock, stall_after_s=2.0, window_s=2.0)
    last = row(window_start=time.time() - 15, window_end=time.time() - 5, repeat_failures=1)
    assert watch.quiet_window(last, _state(time.time())) is None  # HEALTHY: nothing to add
    assert watch.stamp(last) == last
    watch.check(_state(time.time()), lambda: 7, admitting=True)
    clock.advance(2)
    watch.check(_state(time.time()), lambda: 7, admitting=True)
    stamped = watch.stamp(last)
    assert (stamped.health, stamped.health_cause) == ("STALLED", watch.current.cause)
    assert watch.stamp(row(health="HALTED", health_cause="code error")).health == "HALTED"
    quiet = watch.quiet_window(last, _state(time.time(), in_flight=3, buffered=4))
    assert quiet is not None and quiet.window_start == last.window_end
    assert quiet.window_end >= last.window_end + 5
    assert (quiet.acked, quiet.records, quiet.backlog, quiet.health) == (0, 0, 7, "STALLED")
    assert quiet.lanes == last.lanes and quiet.repeat_failures is None  # counted once, before
    assert quiet.mrwq == 0
    assert watch.quiet_window(quiet, _state(time.time())) is None  # a window at most per window_s
    quiet.check()
    first = watch.quiet_window(None, _state(time.time()))  # the planner closed none yet
    assert first is not None and first.topology == "t-blue-1" and first.health == "STALLED"
    assert first.window_end - first.window_start >= 2.0 and first.check() == first


def test_memcached_away_the_backlog_last_seen_stands_and_the_failed_read_is_the_cause() -> None:
    """An outage of the planner's channel shows while it lasts: the driver writes windows
    of its own, STALLED, naming memcached (the planner's windows cannot reach it)."""
    clock = FakeClock()
    watch = DriverHealth("t-blue-1", clock, stall_after_s=4.0, window_s=2.0)
    assert watch.check(_state(time.time()), lambda: 5, admitting=True).healthy
    away = ConnectionError("memcached at 127.0.0.1:11211: get failed after 5 attempt(s)")
    clock.advance(4)
    health = watch.check(None, lambda: 5, admitting=True, state_error=away)
    assert health.state == "STALLED"
    assert health.cause == (
        "backlog 10, nothing durable for 4 s; reading the planner's state from memcached: "
        "ConnectionError: memcached at 127.0.0.1:11211: get failed after 5 attempt(s)"
    )
    window = watch.quiet_window(row(window_end=time.time() - 3.0), None)
    assert window is not None and (window.health, window.backlog) == ("STALLED", 10)


def test_the_planners_stalled_cause_stands_in_the_drivers_windows() -> None:
    """The planner's cause names the broker it cannot read; the driver's, with no error of
    its own, only that the planner is quiet: the nearer cause stands, in the planner's
    windows and in the driver's own quiet ones (which may cover the planner's time first:
    CI's broker kill). An error the driver saw (a flush) is nearer still."""
    clock = FakeClock()
    watch = DriverHealth("t-blue-1", clock, stall_after_s=2.0, window_s=2.0)
    watch.check(_state(time.time()), lambda: 7, admitting=True)
    clock.advance(2)
    assert watch.check(_state(time.time()), lambda: 7, admitting=True).state == "STALLED"
    broker = "backlog unknown, the log's ends unread for 5 s; reading the end offsets ..."
    planners = row(health="STALLED", health_cause=broker)
    watch.heard(planners)
    assert watch.stamp(planners) == planners
    # the planner's window came after a quiet one of the driver's: the next quiet one says it
    quiet = watch.quiet_window(row(window_end=time.time() - 3.0), None)
    assert quiet is not None and quiet.health_cause == broker
    watch.heard(row())  # the planner's next window is HEALTHY: the driver's cause again
    assert watch.stamp(planners).health_cause == watch.current.cause
    watch.heard(planners)
    clock.advance(2)
    refused = OSError("database is locked")
    watch.check(_state(time.time()), lambda: 7, admitting=True, flush_error=refused)
    stamped = watch.stamp(planners)
    assert stamped.health_cause is not None and "database is locked" in stamped.health_cause
