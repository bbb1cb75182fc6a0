"""The planner (FlowPlanner) driven through its channels, with in-memory stores."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from flowctl.adapters.memcached_store import LaneFeedback as FeedbackStore
from flowctl.core.clock import FakeClock
from flowctl.core.persistence import create_queue, mrwq_namespace
from flowctl.core.spout_contract import LaneResult, Outcome
from flowctl.core.tuples import TopicPartition
from flowctl.spark.flow import channels
from flowctl.spark.flow.channels import Control, LaneFeedback, SpoutState
from flowctl.spark.flow.plan import decode_plan, initial_offset
from flowctl.spark.flow.planner import FlowPlanner
from tests.unit.fakes import DictStore, FakeEnds, FakeState
from tests.unit.flow_setup import flow_settings

EDEN = "demo.eden"


def _planner(
    tmp_path: Path, ends: dict[int, int], **kw: object
) -> tuple[FlowPlanner, DictStore, FakeState]:
    store, state = DictStore(), FakeState()
    settings = flow_settings(tmp_path, **kw)  # type: ignore[arg-type]
    planner = FlowPlanner(
        settings, store=store, ends=FakeEnds({EDEN: ends}), state=state, clock=FakeClock()
    )
    create_queue(store, mrwq_namespace("demo"), "epoch-1")  # as the driver's flusher does
    return planner, store, state


def _state(planner: FlowPlanner, store: DictStore) -> SpoutState:
    return SpoutState.decode(store.get_json(channels.state_key(planner.settings.ns)))


def test_a_batch_plans_the_log_in_tuples_over_the_lanes_and_publishes_its_state(
    tmp_path: Path,
) -> None:
    planner, store, state = _planner(tmp_path, {0: 25, 1: 10}, flow="linger_s = 0.5")
    start = planner.initial_offset()
    assert state.builds == 1 and decode_plan(start, EDEN, "demo") == []
    end = planner.latest_offset(start)
    parts = decode_plan(end, EDEN, "demo")
    tuples = sorted(e.tuple for p in parts for e in p.entries)
    assert {p.lane for p in parts} == {0, 1} and all(p.seq == 1 for p in parts)
    covered = {(t.partition, o) for t in tuples for o in range(t.start, t.end)}
    # full tuples only: the partial tail 20-25 lingers for more records
    assert covered == {(0, o) for o in range(20)} | {(1, o) for o in range(10)}
    assert all(t.size == 10 for t in tuples)
    published = _state(planner, store)
    assert (planner.seq, published.in_flight, published.admit) == (1, len(tuples), True)
    assert not published.log_empty
    planner.clock.advance(planner.flow.linger_s + 0.1)  # type: ignore[attr-defined]
    tail = decode_plan(planner.latest_offset(end), EDEN, "demo")
    assert [(e.tuple.partition, e.tuple.start, e.tuple.end) for p in tail for e in p.entries] == [
        (0, 20, 25)
    ]


def test_feedback_of_the_lanes_acks_the_tuples_one_batch_later(tmp_path: Path) -> None:
    planner, store, _ = _planner(tmp_path, {0: 20})
    end = planner.latest_offset(planner.initial_offset())
    _ack_all(planner, end)
    again = planner.latest_offset(end)
    assert again == end  # everything admitted already: Spark runs no batch
    published = _state(planner, store)
    assert published.in_flight == 0 and published.pending_batches == 0
    assert published.counters["acked"] == 2 and published.counters["records"] == 20
    assert not any(k.startswith(f"{planner.settings.ns}:fb:") for k in store.data)


def test_the_ends_the_lanes_fetched_go_to_the_next_read_of_the_ends_once(
    tmp_path: Path,
) -> None:
    """Eden's ends a lane's fetches reported come with its feedback and are handed to the
    read of the ends after the one already under way (it starts before the feedback is
    collected), once; another topic's are not Eden's."""
    planner, _, _ = _planner(tmp_path, {0: 20})
    ends = planner.ends.source
    assert isinstance(ends, FakeEnds)
    end = planner.latest_offset(planner.initial_offset())
    _ack_all(planner, end, lambda lane: ((EDEN, 0, 27 + lane), ("elsewhere", 0, 99)))
    planner.latest_offset(end)  # collects the feedback; its ends read was under way
    planner.latest_offset(end)
    planner.latest_offset(end)
    assert ends.reported[-3:] == [{}, {(EDEN, 0): 28}, {}]


def test_a_costly_logs_next_ends_are_read_as_soon_as_a_batch_is_planned(
    tmp_path: Path,
) -> None:
    """Where Eden's exact ends are costly, the read the next batch plans on starts once this
    batch is planned (it runs while the batch does): records appended after it wait one
    batch more. Cheap ends are read when the next batch is planned."""
    planner, _, _ = _planner(tmp_path, {0: 20})
    ends = planner.ends.source
    assert isinstance(ends, FakeEnds)
    end = planner.latest_offset(planner.initial_offset())
    assert planner._next_ends is None  # cheap: nothing read ahead
    ends.costly_topics.add(EDEN)
    ends.ends[EDEN][0] = 40
    _ack_all(planner, end)
    reads = len(ends.reported)
    second = planner.latest_offset(end)  # read at planning, then the next read ahead
    ahead = planner._next_ends
    assert ahead is not None and ahead.result() == {EDEN: {0: 40}, **_no_replays()}
    assert len(ends.reported) == reads + 2
    assert _cut(second) == [(20, 30), (30, 40)]
    ends.ends[EDEN][0] = 60  # appended after the read ahead: waits a batch
    _ack_all(planner, second)
    third = planner.latest_offset(second)
    assert third == second and len(ends.reported) == reads + 2  # planned on the read ahead
    fourth = planner.latest_offset(third)
    assert _cut(fourth) == [(40, 50), (50, 60)]


def _no_replays() -> dict[str, dict[int, int]]:
    return {"demo.replay.a": {}, "demo.replay.b": {}}


def _cut(plan: dict[str, object]) -> list[tuple[int, int]]:
    return sorted(
        (e.tuple.start, e.tuple.end) for p in decode_plan(plan, EDEN, "demo") for e in p.entries
    )


def test_the_control_key_holds_admission_and_a_new_rebuild_rebuilds_the_spout(
    tmp_path: Path,
) -> None:
    planner, store, state = _planner(tmp_path, {0: 30})
    ctl = channels.control_key(planner.settings.ns)
    store.set_json(ctl, Control(admit=False, rebuild=0).encode())
    start = planner.initial_offset()
    assert planner.latest_offset(start) == start  # admission off: no batch
    assert _state(planner, store).admit is False and state.builds == 1
    store.set_json(ctl, Control(admit=True, rebuild=1).encode())
    end = planner.latest_offset(start)
    assert decode_plan(end, EDEN, "demo") and state.builds == 2
    assert _state(planner, store).rebuild == 1


def test_a_rebuild_waits_until_what_was_queued_is_flushed_and_admits_nothing_meanwhile(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A gap's rebuild reads applied_ranges: results still queued (a retried task's, after
    the resync) must be in the database first, or the spout cuts their ranges again."""
    planner, store, state = _planner(tmp_path, {0: 30})
    ctl = channels.control_key(planner.settings.ns)
    ns = mrwq_namespace("demo")
    store.set_json(ctl, Control(admit=True, rebuild=0).encode())
    start = planner.initial_offset()
    planner.latest_offset(start)
    store.incr(f"{ns}:tail", 3)  # three results queued, not flushed (head stays 1)
    store.set_json(ctl, Control(admit=True, rebuild=1).encode())
    with caplog.at_level(logging.WARNING, "flowctl.spark.flow.planner"):
        assert planner.latest_offset(start) == start  # no batch while the rebuild waits
        assert planner.latest_offset(start) == start
    assert state.builds == 1 and planner.rebuild_wait.pending
    waits = [r for r in caplog.records if "rebuild 1 waits" in r.getMessage()]
    assert len(waits) == 1 and "flushed up to item 3" in waits[0].getMessage()
    store.incr(f"{ns}:tail", 2)  # queued after the request: not waited for
    store.set_many({f"{ns}:head": b"4"})  # the flusher reached past item 3
    end = planner.latest_offset(start)
    assert state.builds == 2 and not planner.rebuild_wait.pending
    assert decode_plan(end, EDEN, "demo")  # admitting again, from the rebuilt spout


def test_a_rebuild_after_lost_items_shows_recovering_until_durable_progress_after_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Health item 4 of the worker-loss issue: RECOVERING at once (not STALLED only after
    stall_after_s), with the gap as its cause, counted on every window from then on."""
    planner, store, state = _planner(tmp_path, {0: 30})
    ctl = channels.control_key(planner.settings.ns)
    ns = mrwq_namespace("demo")
    store.set_json(ctl, Control(admit=True, rebuild=0).encode())
    start = planner.initial_offset()
    planner.latest_offset(start)
    assert planner.health.current.state == "HEALTHY"
    store.incr(f"{ns}:tail", 3)  # queued before the gap's resync: waited for
    gap = "rebuild 1 after lost MRWQ items: gap at seq 2 (item missing for 5.0 s)"
    store.set_json(ctl, Control(admit=True, rebuild=1, gaps=1, gap=gap).encode())
    with caplog.at_level(logging.INFO, "flowctl.spark.flow.planner"):
        planner.latest_offset(start)
        health = planner.health.current
        assert health.state == "RECOVERING" and (health.cause or "").startswith(gap)
        assert "rebuilding" in (health.cause or "")
        store.set_many({f"{ns}:head": b"4"})
        end = planner.latest_offset(start)  # rebuilt; no progress yet
    assert state.builds == 2 and planner.health.current.state == "RECOVERING"
    assert "dispatched again" in (planner.health.current.cause or "")
    rebuilt = [r for r in caplog.records if "dispatching everything not durable" in r.getMessage()]
    assert [r.levelno for r in rebuilt] == [logging.WARNING]
    assert "after lost MRWQ items" in rebuilt[0].getMessage()
    state.checkpoints[TopicPartition(EDEN, 0)] = 10  # durable progress after the rebuild
    planner.latest_offset(end)
    assert planner.health.current.state == "HEALTHY"
    planner.clock.advance(planner.flow.metrics_window_s + 1)  # type: ignore[attr-defined]
    planner.latest_offset(end)
    assert planner.metrics.rows and planner.metrics.rows[-1].rebuilds == 1


def test_an_activations_rebuild_is_routine_and_logged_at_info(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    planner, store, _ = _planner(tmp_path, {0: 30}, standby=True)
    ctl = channels.control_key(planner.settings.ns)
    store.set_json(ctl, Control(admit=False, rebuild=0).encode())
    start = planner.initial_offset()
    planner.latest_offset(start)
    store.set_json(ctl, Control(admit=True, rebuild=1).encode())
    with caplog.at_level(logging.INFO, "flowctl.spark.flow.planner"):
        planner.latest_offset(start)
    rebuilt = [r for r in caplog.records if "dispatching everything not durable" in r.getMessage()]
    assert [(r.levelno, "(activation)" in r.getMessage()) for r in rebuilt] == [
        (logging.INFO, True)
    ]
    assert planner.health.current.state == "HEALTHY"


def test_lanes_given_at_activation_are_planned_from_the_rebuild_on(tmp_path: Path) -> None:
    planner, store, state = _planner(tmp_path, {0: 200}, standby=True)
    ctl = channels.control_key(planner.settings.ns)
    store.set_json(ctl, Control(admit=False, rebuild=0, lanes=2).encode())
    start = planner.initial_offset()
    planner.latest_offset(start)  # a warm-up
    store.set_json(ctl, Control(admit=True, rebuild=1, lanes=4).encode())
    parts = decode_plan(planner.latest_offset(start), EDEN, "demo")
    assert planner.lanes == 4 and {p.lane for p in parts} == {0, 1, 2, 3}
    assert len(_state(planner, store).lanes) == 4 and state.builds == 2


def _green_activated(tmp_path: Path, **control: object) -> tuple[FlowPlanner, DictStore, list]:
    """A warm standby activated with blue's frontier (window 6, Eden cut up to 100) and
    ``control``; returns the planner, its store and the tuples of its first plan."""
    from flowctl.core.handover import Frontier
    from flowctl.core.replay import ReplaySnapshot

    planner, store, _ = _planner(tmp_path, {0: 500}, standby=True)
    ctl = channels.control_key(planner.settings.ns)
    store.set_json(ctl, Control(admit=False, rebuild=0).encode())
    start = planner.initial_offset()
    planner.latest_offset(start)
    snap = ReplaySnapshot("demo", "demo.replay.a", (), 0)
    frontier = Frontier(EDEN, ((0, 100),), snap, (), window=6).to_dict()
    store.set_json(ctl, Control(admit=True, rebuild=1, frontier=frontier, **control).encode())
    parts = decode_plan(planner.latest_offset(start), EDEN, "demo")
    return planner, store, sorted(e.tuple for p in parts for e in p.entries)


def test_an_overlapped_green_starts_its_windows_at_half_of_blues(tmp_path: Path) -> None:
    planner, store, tuples = _green_activated(tmp_path)
    assert [w["window"] for w in _state(planner, store).lanes] == [3, 3]
    assert tuples[0].start == 100 and len(tuples) == 6  # from the frontier, 3 per lane


def test_a_green_whose_blue_is_gone_before_its_first_plan_still_starts_at_half_of_blues(
    tmp_path: Path,
) -> None:
    """Blue DRAINED before green's planner saw the frontier (the control key holds the
    frontier and the sweep at once): green cuts from the database, its windows from blue's."""
    planner, store, tuples = _green_activated(tmp_path, sweep=1)
    assert [w["window"] for w in _state(planner, store).lanes] == [3, 3]
    assert tuples[0].start == 0 and len(tuples) == 6  # from the database, 3 per lane
    assert planner.frontier is None  # nothing of blue's left to sweep


def test_a_durable_checkpoint_moves_the_plan_past_it(tmp_path: Path) -> None:
    planner, _, state = _planner(tmp_path, {0: 40})
    state.checkpoints = {TopicPartition(EDEN, 0): 30}
    end = planner.latest_offset(initial_offset(EDEN))
    tuples = [e.tuple for p in decode_plan(end, EDEN, "demo") for e in p.entries]
    assert [(t.start, t.end) for t in tuples] == [(30, 40)]


def test_a_standby_planner_plans_warm_up_batches_and_admits_nothing(tmp_path: Path) -> None:
    planner, store, _ = _planner(tmp_path, {0: 50}, standby=True)
    start = planner.initial_offset()
    warm = planner.latest_offset(start)
    parts = decode_plan(warm, EDEN, "demo")
    assert warm["warmup"] == 1 and warm["seq"] == 0 and all(p.warmup for p in parts)
    assert [(p.lane, p.entries[0].tuple.start, p.entries[0].tuple.end) for p in parts] == [
        (0, 40, 50),
        (1, 40, 50),
    ]
    assert planner.latest_offset(warm) == warm  # the next warm-up is not due yet
    published = _state(planner, store)
    assert (published.admit, published.in_flight, published.warmups) == (False, 0, 1)


def test_a_standby_warms_every_task_slot_whatever_its_lanes(tmp_path: Path) -> None:
    """A warm standby of 1 lane on an application of 3 task slots warms 3 Python workers:
    it may be given more lanes at activation."""
    import dataclasses

    store, state = DictStore(), FakeState()
    settings = dataclasses.replace(flow_settings(tmp_path, lanes=1, standby=True), slots=3)
    planner = FlowPlanner(
        settings, store=store, ends=FakeEnds({EDEN: {0: 50}}), state=state, clock=FakeClock()
    )
    warm = planner.latest_offset(planner.initial_offset())
    assert sorted(p.lane for p in decode_plan(warm, EDEN, "demo")) == [0, 1, 2]


def test_closed_metrics_windows_are_published_as_rows(tmp_path: Path) -> None:
    planner, store, _ = _planner(tmp_path, {0: 20}, flow="metrics_window_s = 1.0")
    start = planner.initial_offset()
    planner.latest_offset(start)
    assert store.get_json(channels.rows_key(planner.settings.ns)) is None
    planner.clock.advance(1.5)  # type: ignore[attr-defined]
    planner.latest_offset(start)
    rows = channels.decode_rows(store.get_json(channels.rows_key(planner.settings.ns)))
    assert [r.n for r in rows] == [1] and rows[0].admitted == 2
    assert rows[0].window_end > rows[0].window_start and len(rows[0].lanes) == 2
    # republished only when a window closes: a batch within the window leaves them as set
    store.delete_many([channels.rows_key(planner.settings.ns)])
    planner.latest_offset(start)
    assert store.get_json(channels.rows_key(planner.settings.ns)) is None
    planner.clock.advance(1.0)  # type: ignore[attr-defined]
    planner.latest_offset(start)
    rows = channels.decode_rows(store.get_json(channels.rows_key(planner.settings.ns)))
    assert [r.n for r in rows] == [1, 2]


def test_the_planning_cost_is_logged_after_10_s_then_every_60_s(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    planner, _, _ = _planner(tmp_path, {0: 25, 1: 10})
    caplog.set_level(logging.INFO, logger="flowctl.spark.flow.planner")
    offset = planner.initial_offset()
    lines = []
    for _ in range(15):  # a batch every 5 s for 75 s
        end = planner.latest_offset(offset)
        planner.planned(end, partitions_ms=0.1)
        offset = end
        lines.append(sum("planning per batch" in r.message for r in caplog.records))
        planner.clock.advance(5.0)  # type: ignore[attr-defined]
    # a short run (a benchmark's 15 s) still gets its line; then once a minute (a status
    # line of a long-running topology: see flowctl.core.log_pacing)
    assert lines == [0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2]


def test_the_planner_does_with_the_ends_lower_bounds_while_more_waits_than_it_can_admit(
    tmp_path: Path,
) -> None:
    """Exact ends cost a fetch on Tansu; they matter only where the cut could reach them."""
    planner, _, _ = _planner(tmp_path, {0: 10_000, 1: 10_000}, flow="w_init = 4")
    ends = planner.ends.source
    assert isinstance(ends, FakeEnds)
    end = planner.latest_offset(planner.initial_offset())
    # initialOffset and the first batch: 20,000 records waiting, room for 2 lanes x 4
    # tuples x 10 records: the bounds do
    assert ends.bounds_accepted == [True, True]
    assert sum(e.tuple.size for p in decode_plan(end, EDEN, "demo") for e in p.entries) == 80
    ends.ends[EDEN] = {0: 45, 1: 40}  # 85 records: within reach of the free slots after acks
    _ack_all(planner, end)
    planner.latest_offset(end)
    assert ends.bounds_accepted[-1] is False


def test_the_bounds_do_once_more_waits_than_one_batch_may_take_whatever_the_windows(
    tmp_path: Path,
) -> None:
    """Windows of 2 lanes x 8 tuples could take 160 records after the acks; a batch takes
    at most max_rows = 40 of them: 90 records waiting below the bounds are enough."""
    import dataclasses

    store, state = DictStore(), FakeState()
    settings = dataclasses.replace(flow_settings(tmp_path, flow="w_init = 4"), max_rows=40)
    ends = FakeEnds({EDEN: {0: 10_000, 1: 10_000}})
    planner = FlowPlanner(settings, store=store, ends=ends, state=state, clock=FakeClock())
    end = planner.latest_offset(planner.initial_offset())
    assert sum(e.tuple.size for p in decode_plan(end, EDEN, "demo") for e in p.entries) == 40
    cut = {tp.partition: n for tp, n in planner.spout.positions().items()}  # type: ignore[union-attr]
    ends.ends[EDEN] = {p: n + 45 for p, n in cut.items()}  # 90 past the cut: two batches' worth
    _ack_all(planner, end)
    end = planner.latest_offset(end)
    assert ends.bounds_accepted[-1] is True
    cut = {tp.partition: n for tp, n in planner.spout.positions().items()}  # type: ignore[union-attr]
    ends.ends[EDEN] = {p: n + 15 for p, n in cut.items()}  # 30: within one batch's reach
    _ack_all(planner, end)
    planner.latest_offset(end)
    assert ends.bounds_accepted[-1] is False


def _ack_all(
    planner: FlowPlanner,
    plan: dict[str, object],
    ends: Callable[[int], tuple[tuple[str, int, int], ...]] = lambda lane: (),
) -> None:
    """Every lane's feedback of ``plan``: all acked, with the log ``ends(lane)`` it saw."""
    feedback = FeedbackStore(planner.store(), planner.settings.ns)
    for part in decode_plan(plan, EDEN, "demo"):
        results = tuple(
            LaneResult(e.tuple.id, Outcome.ACKED, xor=e.edge, rt=0.01, records=e.tuple.size)
            for e in part.entries
        )
        feedback.put(part.seq, part.lane, LaneFeedback(results, ends(part.lane)).encode())


class _ReplayTopicsMissing(FakeEnds):
    """A broker that fails any read naming a replay topic (e.g. not created yet)."""

    def latest_offsets_of(self, topics, bounds_suffice=None, may_defer=(), reported=None):  # type: ignore[no-untyped-def]
        if len(topics) > 1:
            raise ValueError(f"topic={topics[1]!r} does not exist (or has no partitions)")
        return super().latest_offsets_of(topics, bounds_suffice, may_defer, reported)


def test_a_failed_read_of_the_replay_topics_ends_leaves_eden_planned(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store, state = DictStore(), FakeState()
    planner = FlowPlanner(
        flow_settings(tmp_path),
        store=store,
        ends=_ReplayTopicsMissing({EDEN: {0: 20}}),
        state=state,
        clock=FakeClock(),
    )
    with caplog.at_level(logging.WARNING):
        end = planner.latest_offset(planner.initial_offset())
    assert sum(e.tuple.size for p in decode_plan(end, EDEN, "demo") for e in p.entries) == 20
    assert "does not exist" in caplog.text and "together" in caplog.text


def test_a_standbys_windows_report_no_backlog_the_log_is_the_active_topologys(
    tmp_path: Path,
) -> None:
    """The page's backlog chart climbed with a warm standby's unread log while the ACTIVE
    topology's was 0: a standby owes none of it."""
    planner, store, _ = _planner(tmp_path, {0: 6_000}, standby=True)
    store.set_json(channels.control_key(planner.settings.ns), Control(admit=False).encode())
    start = planner.initial_offset()
    planner.latest_offset(start)
    planner.clock.advance(planner.flow.metrics_window_s + 1)  # type: ignore[attr-defined]
    planner.latest_offset(start)
    assert planner.metrics.rows and planner.metrics.rows[-1].backlog == 0


def test_a_stale_lower_rebuild_number_neither_rebuilds_nor_holds_admission(
    tmp_path: Path,
) -> None:
    """memcached restarted: the control loop's write of the control key, built before the
    gap's repair raised the number, landed after it. The planner held admission for good
    waiting for "rebuild 0" once the key said 1 again (a stream stalled on the cluster)."""
    planner, store, state = _planner(tmp_path, {0: 300})
    ctl = channels.control_key(planner.settings.ns)
    ns = mrwq_namespace("demo")
    store.set_json(ctl, Control(admit=True, rebuild=0).encode())
    start = planner.initial_offset()
    planner.latest_offset(start)
    store.set_json(ctl, Control(admit=True, rebuild=1).encode())
    planner.latest_offset(start)
    assert state.builds == 2 and planner.rebuild_seen == 1
    store.incr(f"{ns}:tail", 8)  # results queued, not flushed
    store.set_json(ctl, Control(admit=True, rebuild=0).encode())  # the stale write
    planner.latest_offset(start)
    assert state.builds == 2 and not planner.rebuild_wait.pending
    store.set_json(ctl, Control(admit=True, rebuild=1).encode())
    planner.latest_offset(start)
    assert state.builds == 2 and not planner.rebuild_wait.pending
