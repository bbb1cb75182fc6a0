"""Blue's admission fence (docs/flow-control.md "Overlapped handover", step 3): the driver
publishes blue's frontier from the planner's state at once when the planner's call mark
proves no later call can cut, in every order of the planner's call and the deactivate."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from flowctl.core.clock import FakeClock
from flowctl.core.handover import Frontier
from flowctl.spark.flow import channels
from flowctl.spark.flow.channels import CallMark, Control, SpoutState
from flowctl.spark.flow.job_handover import HandoverSides
from flowctl.spark.flow.plan import decode_plan
from flowctl.spark.flow.planner import FlowPlanner
from tests.unit.fakes import DictStore, FakeEnds, FakeState
from tests.unit.flow_setup import flow_settings

EDEN = "demo.eden"


class FakeHandovers:
    def __init__(self) -> None:
        self.published: list[Frontier] = []

    def publish(self, handover: int, frontier: Frontier) -> bool:
        self.published.append(frontier)
        return len(self.published) == 1


class Blue(HandoverSides):
    """The driver's side of blue: its control key, the fence, the frontier."""

    def __init__(self, store: DictStore, ns: str) -> None:
        self.store, self.ns, self.topology_id = store, ns, "demo-blue"
        self.admit, self.rebuild_no = True, 0
        self._handover_log = FakeHandovers()
        self._blue_handover: int | None = None
        self._draining_since: float | None = None
        self._fence = None
        self._write_ctl()

    def _write_ctl(self, *, required: bool = False) -> None:
        self.store.set_json(channels.control_key(self.ns), Control(self.admit, 0).encode())

    def deactivate(self) -> None:
        """What the job does on ``deactivate`` with a handover row."""
        self._blue_handover = 1
        self.admit = False
        self._write_ctl()
        self._fence_admission()
        self._draining_since = time.time()

    def tick(self) -> list[Frontier]:
        raw = self.store.get_json(channels.state_key(self.ns))
        self._publish_frontier(None if raw is None else SpoutState.decode(raw))
        return self._handover_log.published


def _pair(tmp_path: Path, ends: dict[int, int]) -> tuple[FlowPlanner, Blue, FakeEnds]:
    store, log_ends = DictStore(), FakeEnds({EDEN: ends})
    planner = FlowPlanner(
        flow_settings(tmp_path), store=store, ends=log_ends, state=FakeState(), clock=FakeClock()
    )
    return planner, Blue(store, planner.settings.ns), log_ends


def _cut(planner: FlowPlanner, offset: dict[str, Any]) -> tuple[dict[str, Any], list[int]]:
    end = planner.latest_offset(offset)
    if end == offset:  # nothing admitted: Spark runs no batch
        return end, []
    return end, [e.tuple.end for p in decode_plan(end, EDEN, "demo") for e in p.entries]


def test_the_frontier_is_published_at_once_while_blues_batch_runs(tmp_path: Path) -> None:
    planner, blue, _ = _pair(tmp_path, {0: 40})
    end, cut = _cut(planner, planner.initial_offset())
    assert max(cut) == 40  # batch 1 dispatched: it runs now
    blue.deactivate()
    (frontier,) = blue.tick()  # no planner call since: the fenced state is call 1's
    assert frontier.eden == ((0, 40),) and blue._blue_handover is None
    assert _cut(planner, end)[1] == []  # the next call admits nothing


def test_a_call_that_read_admit_before_the_fence_is_waited_for(tmp_path: Path) -> None:
    planner, blue, ends = _pair(tmp_path, {0: 40})
    end, _ = _cut(planner, planner.initial_offset())
    ends.ends[EDEN] = {0: 80}
    read = planner._read_control

    def racing_read() -> None:  # the call reads admit: true, then blue is deactivated
        read()
        blue.deactivate()
        assert blue.tick() == []  # call 1's state: older than the marked call 2

    planner._read_control = racing_read  # type: ignore[method-assign]
    end, cut = _cut(planner, end)
    assert max(cut) == 80  # call 2 cut on with the admission it read
    planner._read_control = read  # type: ignore[method-assign]
    (frontier,) = blue.tick()
    assert frontier.eden == ((0, 80),)  # call 2's cuts are in it
    ends.ends[EDEN] = {0: 120}
    assert _cut(planner, end)[1] == []


def test_a_deactivate_before_the_call_is_read_by_it(tmp_path: Path) -> None:
    planner, blue, ends = _pair(tmp_path, {0: 40})
    end, _ = _cut(planner, planner.initial_offset())
    blue.deactivate()
    ends.ends[EDEN] = {0: 80}
    assert _cut(planner, end)[1] == []
    (frontier,) = blue.tick()
    assert frontier.eden == ((0, 40),)


def test_a_call_that_cannot_write_its_mark_admits_nothing(tmp_path: Path) -> None:
    planner, _, _ = _pair(tmp_path, {0: 40})
    store = planner.store()
    store.refuse_sets = True  # type: ignore[attr-defined]
    start = planner.initial_offset()
    assert planner.latest_offset(start) == start
    store.refuse_sets = False  # type: ignore[attr-defined]
    assert max(_cut(planner, start)[1]) == 40


def test_another_planners_state_is_not_fenced(tmp_path: Path) -> None:
    """A planner restarted by Spark starts a new token: a state of the old one is never
    taken for the new one's fenced call."""
    planner, blue, _ = _pair(tmp_path, {0: 40})
    _cut(planner, planner.initial_offset())
    blue.deactivate()
    blue._fence = CallMark("another planner", 1)
    assert blue.tick() == []  # call 1's state admits: it waits for admission off
