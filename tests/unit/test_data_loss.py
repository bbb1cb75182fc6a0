"""Lost ranges and persistent read errors (flowctl.core.data_loss), exact values."""

from __future__ import annotations

from flowctl.core.clock import FakeClock
from flowctl.core.data_loss import LossKind, LossWatch, LostRange, ReadErrors, lost_ranges

EDEN = "demo.eden"


def test_a_log_start_past_the_checkpoint_is_the_range_between_them() -> None:
    found = lost_ranges(
        EDEN,
        checkpoints={0: 100, 1: 40},
        ends={0: 500, 1: 90},
        positions={0: 300, 1: 90},
        starts={0: 250, 1: 40},
    )
    assert found == [
        LostRange(
            EDEN,
            0,
            100,
            250,
            LossKind.LOG_START,
            "the log now starts at 250, past the durable checkpoint 100 (retention or "
            "DeleteRecords removed them)",
        )
    ]
    assert found[0].records == 150
    assert (
        found[0]
        .describe()
        .startswith(
            "demo.eden partition 0: offsets [100, 250) (150 record(s)) lost before processing"
        )
    )


def test_no_start_read_means_no_start_check_and_a_start_at_the_checkpoint_is_no_loss() -> None:
    kw = {"checkpoints": {0: 100}, "ends": {0: 500}, "positions": {0: 300}}
    assert lost_ranges(EDEN, **kw) == []  # type: ignore[arg-type]
    assert lost_ranges(EDEN, starts={0: 100}, **kw) == []  # type: ignore[arg-type]


def test_an_end_below_the_position_is_a_reset_log_losing_the_old_logs_undurable_part() -> None:
    found = lost_ranges(
        EDEN,
        checkpoints={0: 100, 1: 60},
        ends={0: 20, 1: 0},
        positions={0: 300, 1: 60},
        starts={0: 0, 1: 0},
        seen_ends={0: 320},
    )
    assert [(r.partition, r.first, r.end, r.kind) for r in found] == [
        (0, 100, 320, LossKind.LOG_RESET),
        (1, 60, 60, LossKind.LOG_RESET),  # all durable, yet the offsets start again
    ]
    assert "the log ends at 20, below the position 300" in found[0].detail


def test_a_partition_without_a_checkpoint_counts_from_offset_zero() -> None:
    found = lost_ranges(EDEN, checkpoints={}, ends={2: 50}, positions={}, starts={2: 10})
    assert [(r.partition, r.first, r.end) for r in found] == [(2, 0, 10)]


def test_a_start_loss_is_declared_on_the_second_read_that_finds_it_a_reset_on_the_next() -> None:
    watch = LossWatch()
    start = LostRange(EDEN, 0, 100, 250, LossKind.LOG_START, "")
    reset = LostRange(EDEN, 1, 60, 80, LossKind.LOG_RESET, "")
    assert watch.declare([start, reset], starts_read=True) == []
    assert watch.declare([reset], starts_read=False) == [reset]  # the next ends read agrees
    assert watch.declare([], starts_read=False) == []  # no start read: suspicions kept
    later = LostRange(EDEN, 0, 120, 250, LossKind.LOG_START, "")  # the checkpoint moved
    assert watch.declare([later], starts_read=True) == [later]
    watch.forget(0)
    assert watch.declare([later], starts_read=True) == []


def test_a_start_loss_gone_by_the_next_read_is_never_declared() -> None:
    """Records processed just before retention took them are durable a flush later."""
    watch = LossWatch()
    assert (
        watch.declare([LostRange(EDEN, 0, 100, 250, LossKind.LOG_START, "")], starts_read=True)
        == []
    )
    assert watch.declare([], starts_read=True) == []
    assert (
        watch.declare([LostRange(EDEN, 0, 240, 250, LossKind.LOG_START, "")], starts_read=True)
        == []
    )


def test_read_errors_persist_past_the_bound_only_without_a_success_between() -> None:
    clock = FakeClock()
    errors = ReadErrors(clock, bound_s=60.0)
    errors.failed(EDEN, 1, "KafkaReadTimeout: no record within 10 s")
    clock.advance(30)
    errors.failed(EDEN, 1, "UnknownTopicOrPartitionError")
    errors.failed(EDEN, None, "NoBrokersAvailable")
    clock.advance(31)
    assert errors.failing()
    late = errors.persistent()
    assert [(f.partition, f.error, f.failing_for_s) for f in late] == [
        (1, "UnknownTopicOrPartitionError", 61.0)
    ]
    assert late[0].describe() == (
        "demo.eden partition 1: reads failing for 61 s, last error: UnknownTopicOrPartitionError"
    )
    errors.succeeded(EDEN, 1)
    assert errors.persistent() == []
    clock.advance(30)
    assert [f.describe() for f in errors.persistent()] == [
        "demo.eden every partition: reads failing for 61 s, last error: NoBrokersAvailable"
    ]


def test_an_end_misreported_once_below_the_position_is_never_declared_a_reset() -> None:
    """A broker that answers one read with a wrong end (Tansu, while transactions were
    written) must not stop the topology; only two reads in a row are a reset log."""
    watch = LossWatch()
    reset = LostRange(EDEN, 1, 60, 80, LossKind.LOG_RESET, "")
    assert watch.declare([reset], starts_read=False) == []
    assert watch.declare([], starts_read=False) == []  # the next read is right again
    assert watch.declare([reset], starts_read=False) == []
    assert watch.declare([reset], starts_read=True) == [reset]
