"""The planner's guard over the log (FlowPlanner + LogGuard), with in-memory stores and a
fake clock: records lost before processing under both settings, a reset log, read errors
of the ends' read and of a lane that persist past the bound."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flowctl.adapters.memcached_store import LaneFeedback as FeedbackStore
from flowctl.core.clock import FakeClock
from flowctl.core.data_loss import DataLossError, LossKind, ReadPathError
from flowctl.core.spout_contract import LaneResult, Outcome
from flowctl.core.tuples import TopicPartition
from flowctl.spark.flow.channels import LaneFeedback
from flowctl.spark.flow.log_guard import STARTS_EVERY_S
from flowctl.spark.flow.plan import decode_plan
from flowctl.spark.flow.planner import FlowPlanner
from tests.unit.fakes import DictStore, FakeEnds, FakeState
from tests.unit.flow_setup import flow_settings

EDEN = "demo.eden"


def _planner(
    tmp_path: Path, ends: dict[int, int], checkpoints: dict[int, int], **kw: str
) -> tuple[FlowPlanner, DictStore, FakeState, FakeEnds, FakeClock]:
    store = DictStore()
    state = FakeState(checkpoints={TopicPartition(EDEN, p): n for p, n in checkpoints.items()})
    fake, clock = FakeEnds({EDEN: ends}), FakeClock()
    planner = FlowPlanner(
        flow_settings(tmp_path, **kw), store=store, ends=fake, state=state, clock=clock
    )
    return planner, store, state, fake, clock


def _tuples(plan: dict) -> list[tuple[int, int, int]]:
    return sorted(
        (e.tuple.partition, e.tuple.start, e.tuple.end)
        for p in decode_plan(plan, EDEN, "demo")
        for e in p.entries
    )


def test_a_log_start_past_the_checkpoint_fails_the_topology_naming_the_range(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    planner, _, _, fake, clock = _planner(tmp_path, {0: 500, 1: 40}, {0: 100, 1: 40})
    start = planner.initial_offset()
    fake.starts[EDEN] = {0: 250}  # retention took [0, 250): 100..250 never processed
    clock.advance(STARTS_EVERY_S)
    planner.latest_offset(start)  # the first read that sees it: a suspicion
    clock.advance(STARTS_EVERY_S)
    with caplog.at_level(logging.ERROR), pytest.raises(DataLossError) as info:
        planner.latest_offset(start)
    assert [(r.partition, r.first, r.end, r.kind) for r in info.value.lost] == [
        (0, 100, 250, LossKind.LOG_START)
    ]
    assert "demo.eden partition 0: offsets [100, 250) (150 record(s)) lost" in str(info.value)
    assert "on_data_loss = fail" in str(info.value)
    assert "data loss: demo.eden partition 0: offsets [100, 250)" in caplog.text


def test_skip_records_the_range_moves_the_checkpoint_and_cuts_from_the_new_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    planner, _, state, fake, clock = _planner(
        tmp_path, {0: 500}, {0: 100}, topics='on_data_loss = "skip"', flow="w_init = 2"
    )
    start = planner.initial_offset()
    first = _tuples(planner.latest_offset(start))
    assert first[0] == (0, 100, 110)
    fake.starts[EDEN] = {0: 250}
    clock.advance(STARTS_EVERY_S)
    planner.latest_offset(start)
    clock.advance(STARTS_EVERY_S)
    builds = state.builds
    with caplog.at_level(logging.ERROR):
        plan = planner.latest_offset(start)
    assert [(tid, r.first, r.end) for tid, r in state.skipped] == [("demo-blue-1", 100, 250)]
    assert state.checkpoints[TopicPartition(EDEN, 0)] == 250 and state.builds == builds + 1
    assert _tuples(plan)[0] == (0, 250, 260)  # the rebuilt spout cuts past the skip
    assert "on_data_loss = skip: recorded demo.eden partition 0: offsets [100, 250)" in caplog.text
    clock.advance(STARTS_EVERY_S)
    planner.latest_offset(start)  # the start is the checkpoint now: nothing more to skip
    assert len(state.skipped) == 1


@pytest.mark.parametrize("policy", ["fail", "skip"])
def test_a_reset_log_fails_under_both_settings(tmp_path: Path, policy: str) -> None:
    planner, _, state, fake, _ = _planner(
        tmp_path, {0: 320}, {0: 100}, topics=f'on_data_loss = "{policy}"'
    )
    start = planner.initial_offset()
    planner.latest_offset(start)
    fake.ends[EDEN] = {0: 20}  # deleted and recreated: 20 new records
    assert planner.latest_offset(start) == start  # one read may be a misreport: no batch
    with pytest.raises(DataLossError) as info:
        planner.latest_offset(start)
    (lost,) = info.value.lost
    assert (lost.partition, lost.first, lost.end, lost.kind) == (0, 100, 320, LossKind.LOG_RESET)
    assert "the log ends at 20, below the position" in str(info.value)
    assert state.skipped == []


def test_a_failing_ends_read_plans_nothing_within_the_bound_then_fails_with_its_cause(
    tmp_path: Path,
) -> None:
    planner, _, _, fake, clock = _planner(tmp_path, {0: 50}, {}, flow="read_error_timeout_s = 30.0")
    start = planner.initial_offset()
    fake.error = ConnectionError("broker 127.0.0.1:9 unreachable")
    assert planner.latest_offset(start) == start  # no batch: retried next trigger
    clock.advance(20)
    assert planner.latest_offset(start) == start
    fake.error = None
    assert _tuples(planner.latest_offset(start))  # a success clears the error
    fake.error = ConnectionError("broker 127.0.0.1:9 unreachable")
    clock.advance(1)
    planner.latest_offset(start)
    clock.advance(31)
    with pytest.raises(ReadPathError) as info:
        planner.latest_offset(start)
    assert (
        "demo.eden every partition: reads failing for 31 s, last error: ConnectionError: "
        "broker 127.0.0.1:9 unreachable"
    ) in str(info.value)


def test_a_lanes_read_error_of_one_partition_that_persists_fails_naming_it(
    tmp_path: Path,
) -> None:
    planner, store, _, _, clock = _planner(
        tmp_path, {0: 20, 1: 20}, {}, flow="read_error_timeout_s = 30.0"
    )
    feedback = FeedbackStore(store, planner.settings.ns)
    plan = planner.latest_offset(planner.initial_offset())
    with pytest.raises(ReadPathError) as info:
        for _ in range(10):  # every round: partition 1's tuples fail to read, again
            for part in decode_plan(plan, EDEN, "demo"):
                results = tuple(
                    LaneResult(e.tuple.id, Outcome.FAILED, error="read failed: CorruptRecordError")
                    if e.tuple.partition == 1
                    else LaneResult(e.tuple.id, Outcome.ACKED, xor=e.edge, rt=0.01, records=10)
                    for e in part.entries
                )
                feedback.put(part.seq, part.lane, LaneFeedback(results).encode())
            clock.advance(10)
            plan = planner.latest_offset(plan)
            assert {t[0] for t in _tuples(plan)} == {1}  # dispatched again, to another lane
    # first seen failing at 10 s (the feedback of the first batch), failed past 10 + 30 s
    assert clock.now() == 50
    (failure,) = info.value.failures
    assert (failure.topic, failure.partition, failure.error) == (EDEN, 1, "CorruptRecordError")


def test_a_skip_the_database_refuses_is_declared_again_at_the_next_start_read(
    tmp_path: Path,
) -> None:
    planner, _, state, fake, clock = _planner(
        tmp_path, {0: 500}, {0: 100}, topics='on_data_loss = "skip"'
    )
    start = planner.initial_offset()
    fake.starts[EDEN] = {0: 250}
    real_skip = state.skip

    def refuse(topology_id: str, lost: object) -> int:
        raise ConnectionError("database away")

    state.skip = refuse  # type: ignore[method-assign]
    for _ in range(2):
        clock.advance(STARTS_EVERY_S)
        planner.latest_offset(start)  # suspicion, then a declared loss the database refuses
    assert state.skipped == []
    state.skip = real_skip  # type: ignore[method-assign]
    clock.advance(STARTS_EVERY_S)
    planner.latest_offset(start)
    assert [(r.first, r.end) for _, r in state.skipped] == [(100, 250)]


def test_a_broker_that_stops_answering_shows_stalled_while_it_lasts(tmp_path: Path) -> None:
    """The ends cannot be read: no batch, but health is judged and the metrics windows
    closed on the ends last read, so a window STALLED (the read's error as its cause) is
    published during the outage, not after it."""
    planner, _, _, fake, clock = _planner(
        tmp_path, {0: 500}, {}, flow="stall_after_s = 5.0\nread_error_timeout_s = 300.0"
    )
    start = planner.initial_offset()
    assert _tuples(planner.latest_offset(start))  # a backlog, in flight
    fake.error = ConnectionError("broker 127.0.0.1:9 unreachable")
    for _ in range(6):
        clock.advance(3)
        assert planner.latest_offset(start) == start  # nothing planned
    stalled = [r for r in planner.metrics.rows if r.health == "STALLED"]
    assert stalled, [r.health for r in planner.metrics.rows]
    assert "reading the end offsets" in (stalled[-1].health_cause or "")
    assert "broker 127.0.0.1:9 unreachable" in (stalled[-1].health_cause or "")
