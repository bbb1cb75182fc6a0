"""The overlapped handover's pure core (flowctl.core.handover), with a fake clock.

The properties drive blue and green through any interleaving of acks, failures (the
records go to a replay topic), timeouts (with or without a late result), blue's crash and
flushes, over a model of ``applied_ranges`` that claims like the database: every record
ends applied exactly once, and the checkpoint never passes a record that is neither
applied nor waiting in a replay topic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.clock import FakeClock
from flowctl.core.handover import (
    Frontier,
    GreenAction,
    GreenHandover,
    GreenPhase,
    blue_gone,
    green_start,
    green_window,
    sweep,
    union_checkpoint,
)
from flowctl.core.replay import ReplaySnapshot
from flowctl.core.tuples import TopicPartition, TupleRange

EDEN = "p.eden"
TP = TopicPartition(EDEN, 0)
SIZE = 2


def snap(positions: tuple[tuple[str, int, int], ...] = (), swaps: int = 0) -> ReplaySnapshot:
    return ReplaySnapshot("p", "p.replay.a" if swaps % 2 == 0 else "p.replay.b", positions, swaps)


def t(start: int, end: int, partition: int = 0) -> TupleRange:
    return TupleRange(EDEN, partition, start, end)


def frontier(eden: int = 10, handed: tuple[TupleRange, ...] = ()) -> Frontier:
    return Frontier(EDEN, ((0, eden),), snap((("p.replay.a", 0, 3),), swaps=2), handed)


# -- the frontier -------------------------------------------------------------------------


def test_a_frontier_survives_its_json_form() -> None:
    f = frontier(handed=(t(4, 6),))
    assert Frontier.from_dict(f.to_dict()) == f


def test_a_malformed_frontier_is_refused_naming_the_field() -> None:
    data = frontier().to_dict()
    data["replay"]["swaps"] = -1
    with pytest.raises(ValueError, match=r"frontier\.replay\.swaps=-1"):
        Frontier.from_dict(data)


def test_a_frontier_of_another_topic_refuses_a_foreign_handed_tuple() -> None:
    with pytest.raises(ValueError, match=r"is not a tuple of 'p\.eden'"):
        Frontier(EDEN, ((0, 4),), snap(), (TupleRange("other", 0, 0, 2),))


def test_blue_owns_what_it_cut_and_did_not_hand_over() -> None:
    f = frontier(eden=10, handed=(t(4, 6),))
    assert f.owner(t(2, 4)) == "blue"
    assert f.owner(t(4, 6)) == "green"  # handed: cut by blue, never dispatched
    assert f.owner(t(10, 12)) == "green"
    assert f.owner(t(0, 2, partition=1)) == "green"  # blue never cut partition 1


def test_frontier_of_a_spout_keeps_only_eden_buffered_tuples() -> None:
    replayed = TupleRange("p.replay.a", 0, 7, 8)
    f = Frontier.of(EDEN, {TP: 8}, snap(), [t(2, 4), replayed])
    assert f.eden == ((0, 8),) and f.handed == (t(2, 4),)


def test_a_frontier_keeps_the_median_of_blues_lane_windows() -> None:
    f = Frontier.of(EDEN, {TP: 8}, snap(), [], windows=[12, 3, 40])
    assert f.window == 12 and Frontier.from_dict(f.to_dict()) == f
    assert Frontier.of(EDEN, {TP: 8}, snap(), []).window is None
    old = f.to_dict()
    del old["window"]  # published by a blue before this field
    assert Frontier.from_dict(old).window is None
    with pytest.raises(ValueError, match=r"frontier\.window=0"):
        Frontier(EDEN, ((0, 4),), snap(), (), window=0)


def test_green_starts_at_half_of_blues_window_within_its_bounds() -> None:
    f = Frontier(EDEN, ((0, 4),), snap(), (), window=15)
    assert green_window(f, w_init=250, w_min=1) == 8  # half, rounded up
    assert green_window(f, w_init=5, w_min=1) == 5  # never above the lanes' share
    assert green_window(Frontier(EDEN, (), snap(), (), window=1), 250, 2) == 2  # w_min
    assert green_window(Frontier(EDEN, (), snap()), 250, 1) == 250  # unknown: w_init
    assert green_window(None, 250, 1) == 250
    with pytest.raises(ValueError, match="w_init=0"):
        green_window(f, 0, 1)


# -- green's start and the sweep ----------------------------------------------------------


def test_green_cuts_from_the_frontier_and_dispatches_the_handed_tuples_first() -> None:
    start = green_start(frontier(eden=10, handed=(t(4, 6),)), {TP: 2}, {TP: 4}, [t(2, 4)], None)
    assert start.positions == {TP: 10}
    assert start.gaps == [t(4, 6)]  # the hole [2, 4) is blue's until blue is gone


def test_green_takes_holes_beyond_the_frontier_that_nobody_alive_owns() -> None:
    start = green_start(frontier(eden=4), {TP: 2}, {TP: 12}, [t(2, 6), t(8, 10)], None)
    assert start.positions == {TP: 12}
    assert start.gaps == [t(4, 6), t(8, 10)]


def test_green_reads_the_replay_topics_from_the_later_pointer_and_positions() -> None:
    stored = snap((("p.replay.a", 0, 5), ("p.replay.b", 0, 1)), swaps=1)
    start = green_start(frontier(), {}, {}, [], stored)
    assert start.replay.swaps == 2 and start.replay.from_topic == "p.replay.a"
    assert start.replay.positions == (("p.replay.a", 0, 5), ("p.replay.b", 0, 1))


def test_the_sweep_cuts_blue_holes_on_the_grid_and_skips_what_green_holds() -> None:
    held = {t(4, 6).id}
    got = sweep(frontier(eden=10), {TP: 2}, [t(0, 7), t(9, 14)], held, SIZE)
    assert got == [t(2, 4), t(6, 7), t(9, 10)]


def test_union_checkpoint_stops_at_the_first_unapplied_record() -> None:
    assert union_checkpoint(0, [(4, 6), (0, 2), (2, 4), (8, 10)]) == 6


# -- green's state machine ----------------------------------------------------------------


def test_blue_is_gone_when_it_says_so_or_when_it_is_silent_for_the_lease() -> None:
    assert blue_gone("DRAINED", 0.1, 10) and blue_gone("FAILED", None, 10)
    assert not blue_gone("DRAINING", 9.0, 10)
    assert blue_gone("DRAINING", 11.0, 10)


def test_green_admits_from_the_frontier_once_blue_publishes_it() -> None:
    g = GreenHandover("blue-1", FakeClock(), lease_s=10)
    assert g.step(None, "DRAINING", 0.5) is GreenAction.WAIT
    assert g.step(frontier(), "DRAINING", 0.5) is GreenAction.ADMIT_FROM_FRONTIER
    assert g.phase is GreenPhase.OVERLAP and g.frontier == frontier()


def test_green_takes_over_the_flusher_only_once_blue_is_gone() -> None:
    g = GreenHandover("blue-1", FakeClock(), lease_s=10)
    g.step(frontier(), "DRAINING", 0.5)
    assert g.step(frontier(), "DRAINING", 0.5) is GreenAction.NONE
    assert g.step(frontier(), "DRAINING", 12.0) is GreenAction.TAKE_OVER
    assert g.phase is GreenPhase.OWNER
    assert g.step(frontier(), "DRAINING", 12.0) is GreenAction.NONE


def test_green_starts_as_a_sequential_green_when_blue_dies_before_its_frontier() -> None:
    g = GreenHandover("blue-1", FakeClock(), lease_s=10)
    assert g.step(None, "FAILED", None) is GreenAction.ADMIT_ALL
    assert g.phase is GreenPhase.OWNER


def test_a_lease_that_is_not_a_positive_number_is_refused() -> None:
    with pytest.raises(ValueError, match="lease_s=0"):
        GreenHandover("blue-1", FakeClock(), lease_s=0)


# -- properties: any interleaving ---------------------------------------------------------


@dataclass
class Db:
    """``applied_ranges`` of one partition, claiming like the database: an equal row is a
    duplicate; a replayed record is new inside a ``replayed`` tuple row only."""

    rows: dict[tuple[int, int], str] = field(default_factory=dict)
    applications: dict[int, int] = field(default_factory=dict)

    def claim(self, start: int, end: int, outcome: str) -> None:
        if (start, end) in self.rows:
            return
        if end - start == 1 and any(
            s <= start and end <= e and (e - s) > 1 and o != "replayed"
            for (s, e), o in self.rows.items()
        ):
            return  # a replayed record of a tuple applied after all
        self.rows[(start, end)] = outcome
        if outcome == "applied":
            for o in range(start, end):
                self.applications[o] = self.applications.get(o, 0) + 1

    def holes(self, cp: int, end: int) -> list[TupleRange]:
        out, pos = [], cp
        for s, e in sorted(self.rows):
            if s > pos and pos < end:
                out.append(t(pos, min(s, end)))
            pos = max(pos, e)
        if pos < end:
            out.append(t(pos, end))
        return out


@dataclass
class Side:
    in_flight: list[TupleRange] = field(default_factory=list)
    queue: list[TupleRange] = field(default_factory=list)
    alive: bool = True


class World:
    """Blue cut ``[0, f)`` (part applied, part handed, the rest in flight); green starts
    from the frontier; a shared MRWQ, a replay topic, the database."""

    def __init__(self, n: int, f: int, applied: set[int], handed: set[int]) -> None:
        self.n, self.db, self.mrwq, self.replay = n, Db(), [], []
        self.blue, self.green = Side(), Side()
        for k in range(f):
            tk = t(k * SIZE, (k + 1) * SIZE)
            if k in applied:
                self.db.claim(tk.start, tk.end, "applied")
            elif k in handed:
                self.blue.queue.append(tk)
            else:
                self.blue.in_flight.append(tk)
        self.cp = union_checkpoint(0, self.db.rows)
        self.frontier = Frontier.of(EDEN, {TP: f * SIZE}, snap(), self.blue.queue)
        start = green_start(
            self.frontier, {TP: self.cp}, {TP: self._durable_end()}, self._holes(), None
        )
        self.green.queue = list(start.gaps)
        pos = start.positions[TP]
        self.green.queue += [t(o, o + SIZE) for o in range(pos, n * SIZE, SIZE)]
        self.blue.queue.clear()  # handed: blue never dispatches them
        self.handover = GreenHandover("blue", FakeClock(), lease_s=1.0)
        self.handover.step(self.frontier, "DRAINING", 0.0)

    def _durable_end(self) -> int:
        return max((e for _, e in self.db.rows), default=0)

    def _holes(self, end: int | None = None) -> list[TupleRange]:
        return self.db.holes(self.cp, self._durable_end() if end is None else end)

    def outcome(self, side: Side, i: int, kind: str) -> None:
        """Tuple ``i`` of ``side``'s flight: acked, failed (records to replay), timed out
        (requeued for green; a late result may still arrive: ``late``)."""
        tk = side.in_flight.pop(i % len(side.in_flight))
        if kind == "ack":
            self.mrwq.append((tk.start, tk.end, "applied"))
        elif kind == "fail":
            self.mrwq.append((tk.start, tk.end, "replayed"))
            self.replay.extend(range(tk.start, tk.end))
        else:
            if kind == "late":
                self.mrwq.append((tk.start, tk.end, "applied"))
            if side is self.green:
                self.green.queue.append(tk)  # green requeues for another lane
            # blue no longer admits: its timed-out tuple waits for the sweep

    def dispatch_green(self, count: int) -> None:
        for _ in range(min(count, len(self.green.queue))):
            self.green.in_flight.append(self.green.queue.pop(0))

    def replay_one(self) -> None:
        o = self.replay.pop(0)
        self.mrwq.append((o, o + 1, "applied"))

    def flush(self) -> None:
        for start, end, outcome in self.mrwq:
            self.db.claim(start, end, outcome)
        self.mrwq.clear()
        new = union_checkpoint(self.cp, self.db.rows)
        assert new >= self.cp
        self.cp = new
        self.check_checkpoint()

    def check_checkpoint(self) -> None:
        pending = set(self.replay)
        for o in range(self.cp):
            applied = self.db.applications.get(o, 0) == 1
            assert applied or o in pending or self._replayed_row(o), f"checkpoint past {o}"

    def _replayed_row(self, o: int) -> bool:
        return any(s <= o < e and out == "replayed" for (s, e), out in self.db.rows.items())

    def blue_gone(self, crashed: bool) -> None:
        if crashed:
            self.blue.in_flight.clear()  # what it held is lost with it
        self.blue.alive = False
        assert self.handover.step(self.frontier, "FAILED", None) is GreenAction.TAKE_OVER
        self.flush()  # green's flusher starts with a flush of the whole MRWQ
        held = {x.id for x in self.green.in_flight + self.green.queue}
        holes = self._holes(self.frontier.position(0))  # unapplied up to the frontier
        self.green.queue += sweep(self.frontier, {TP: self.cp}, holes, held, SIZE)

    def finish(self) -> None:
        """Everyone acks what is left; green replays every record; then all is applied."""
        while self.blue.alive and self.blue.in_flight:
            self.outcome(self.blue, 0, "ack")
        if self.blue.alive:
            self.blue_gone(crashed=False)
        for _ in range(10 * self.n + 10):
            self.dispatch_green(len(self.green.queue))
            while self.green.in_flight:
                self.outcome(self.green, 0, "ack")
            while self.replay:
                self.replay_one()
            self.flush()
            if not self.green.queue:
                break
        assert self.cp == self.n * SIZE
        assert all(self.db.applications.get(o) == 1 for o in range(self.n * SIZE)), (
            self.db.applications
        )


@st.composite
def worlds(draw: st.DrawFn) -> World:
    n = draw(st.integers(1, 8))
    f = draw(st.integers(0, n))
    applied = draw(st.sets(st.integers(0, max(f - 1, 0)), max_size=f))
    handed = draw(st.sets(st.integers(0, max(f - 1, 0)), max_size=f)) - applied
    return World(n, f, applied, handed)


EVENTS = st.lists(
    st.tuples(
        st.sampled_from(
            ["blue", "green", "dispatch", "replay", "flush", "blue_drained", "blue_crash"]
        ),
        st.sampled_from(["ack", "fail", "timeout", "late"]),
        st.integers(0, 20),
    ),
    max_size=40,
)


@settings(max_examples=400, deadline=None)
@given(worlds(), EVENTS)
def test_any_interleaving_applies_every_record_exactly_once(
    world: World, events: list[tuple[str, str, int]]
) -> None:
    for who, kind, i in events:
        if who == "blue" and world.blue.alive and world.blue.in_flight:
            world.outcome(world.blue, i, kind)
        elif who == "green" and world.green.in_flight:
            world.outcome(world.green, i, kind)
        elif who == "dispatch":
            world.dispatch_green(i % 4 + 1)
        elif who == "replay" and world.replay:
            world.replay_one()
        elif who == "flush":
            world.flush()
        elif who in ("blue_drained", "blue_crash") and world.blue.alive:
            if who == "blue_drained" and world.blue.in_flight:
                continue  # DRAINED means nothing in flight
            world.blue_gone(crashed=who == "blue_crash")
    world.finish()


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 20), st.lists(st.tuples(st.integers(0, 30), st.integers(1, 4))))
def test_the_union_checkpoint_never_passes_an_unapplied_record(
    base: int, ranges: list[tuple[int, int]]
) -> None:
    applied = [(s, s + n) for s, n in ranges]
    cp = union_checkpoint(base, applied)
    covered = {o for s, e in applied for o in range(s, e)}
    assert cp >= base
    assert all(o in covered for o in range(base, cp))
    assert not any(s <= cp < e for s, e in applied)  # and it goes as far as it may
