"""Tuple boundaries across rebuilds, losses and retries (docs/flow-control.md, "A rebuild
waits for the queue").

A model of one Eden partition driven by arbitrary interleavings: the log grows, the
spout's cursor (the real :class:`~flowctl.core.eden_cursor.EdenCursor`, partial tails cut
at the log's end) cuts tuples, results are applied in any order, retried (applied twice),
or lost (an MRWQ item evicted: a gap), and a gap's rebuild reads what is applied (the
checkpoint, the holes, the end of the applied ranges, as ``applied.replay_plan`` does) and
cuts again from there, holes first. The applier refuses a range that partially overlaps
an applied one and takes an exact repeat as a no-op (``applied_ranges``).

With the rebuild waiting until every result queued before it was asked for is flushed
(:class:`~flowctl.core.persistence.FlushBarrier`), no cut ever partially overlaps an
applied range and every record is applied once. Without it, a result still queued at the
rebuild's read (a retried task's) is applied after it, and the new cut, which no longer
stops where the log ended at the first cut, straddles it: the invariant error of a worker
loss on the cluster.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.eden_cursor import EdenCursor, aligned
from flowctl.core.tuples import TopicPartition

TP = TopicPartition("demo.eden", 0)
SIZE = 10


class Conflict(AssertionError):
    """A range partially overlaps an applied one: the sink's RangeConflict."""


@dataclass
class Model:
    barrier: bool
    log_end: int = 0
    cursor: EdenCursor = field(default_factory=lambda: EdenCursor(SIZE, 0.0, {TP: 0}))
    gaps: list[tuple[int, int]] = field(default_factory=list)
    in_flight: list[tuple[int, int]] = field(default_factory=list)
    applied: set[tuple[int, int]] = field(default_factory=set)
    now: float = 0.0
    lost: bool = False  # an item lost since the last rebuild: its gap asks for one

    def apply(self, r: tuple[int, int]) -> None:
        if r in self.applied:
            return  # a retry, or a range the rebuild dispatched again: a no-op
        for s, e in self.applied:
            if s < r[1] and r[0] < e:
                raise Conflict(f"range {r} partially overlaps applied range {(s, e)}")
        self.applied.add(r)

    def cut(self, budget: int) -> None:
        while self.gaps and budget:
            self.in_flight.append(self.gaps.pop(0))
            budget -= 1
        self.now += 1.0  # past linger_s: a partial tail is cut at the log's end
        for t in self.cursor.cut({TP: self.log_end}, self.now, budget):
            self.in_flight.append((t.start, t.end))

    def start_state(self) -> tuple[int, list[tuple[int, int]]]:
        """``(position, holes)`` from what is applied, as a rebuild reads the database."""
        checkpoint = 0
        for s, e in sorted(self.applied):
            if s == checkpoint:
                checkpoint = e
        applied_end = max([checkpoint, *(e for _, e in self.applied)])
        holes, pos = [], checkpoint
        for s, e in sorted(r for r in self.applied if r[1] > checkpoint):
            if s > pos:
                holes.append((pos, s))
            pos = max(pos, e)
        return applied_end, holes

    def rebuild(self, late: list[bool]) -> None:
        """A gap repaired: the queued results either flushed first (the barrier) or, those
        marked ``late``, flushed only after the rebuild read the database."""
        self.lost = False
        queued, self.in_flight = self.in_flight, []
        arriving_late = []
        for i, r in enumerate(queued):
            if not self.barrier and late[i % len(late)]:
                arriving_late.append(r)
            else:
                self.apply(r)
        position, holes = self.start_state()
        self.cursor = EdenCursor(SIZE, 0.0, {TP: position})
        self.gaps = [(t.start, t.end) for s, e in holes for t in aligned(TP, s, e, SIZE)]
        for r in arriving_late:
            self.apply(r)

    def drain(self) -> None:
        """The gap of a lost item repaired, everything in flight applied, then the rest of
        the log cut and applied."""
        if self.lost:
            self.rebuild([False])
        for _ in range(1000):
            for r in self.in_flight:
                self.apply(r)
            self.in_flight = []
            self.cut(10_000)
            if not self.in_flight:
                return
        raise AssertionError("the log never drained")


EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 37)),
        st.tuples(st.just("cut"), st.integers(1, 4)),
        st.tuples(st.just("apply"), st.integers(0, 50)),
        st.tuples(st.just("retry"), st.integers(0, 50)),
        st.tuples(st.just("lose"), st.integers(0, 50)),
        st.tuples(st.just("rebuild"), st.lists(st.booleans(), min_size=1, max_size=6)),
    ),
    max_size=60,
)


def run(events: list[tuple[str, object]], barrier: bool) -> Model:
    m = Model(barrier)
    for kind, arg in events:
        if kind == "append":
            m.log_end += int(arg)  # type: ignore[call-overload]
        elif kind == "cut":
            m.cut(int(arg))  # type: ignore[call-overload]
        elif kind in ("apply", "retry", "lose") and m.in_flight:
            i = int(arg) % len(m.in_flight)  # type: ignore[call-overload]
            r = m.in_flight[i] if kind == "retry" else m.in_flight.pop(i)
            if kind == "lose":
                m.lost = True
            else:
                m.apply(r)  # a retried task's result comes again later: still in flight
        elif kind == "rebuild":
            m.rebuild(list(arg))  # type: ignore[call-overload]
    m.drain()
    return m


@settings(max_examples=400)
@given(EVENTS)
def test_with_the_barrier_no_cut_straddles_an_applied_range_and_all_is_applied_once(
    events: list[tuple[str, object]],
) -> None:
    m = run(events, barrier=True)
    covered = sorted(m.applied)
    assert sum(e - s for s, e in covered) == m.log_end  # each record once: no overlap, no hole
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(covered))


def test_without_the_barrier_a_late_result_meets_a_cut_that_straddles_it() -> None:
    """The worker loss on the cluster: a tail cut at the log's end ([50, 53)) is lost, the
    next tuple ([53, 60)) is a retried task's result still queued when the rebuild reads
    the database; the rebuild cuts [50, 60), which straddles it once it is applied."""
    events: list[tuple[str, object]] = [
        ("append", 53),
        ("cut", 6),  # [0, 10) ... [40, 50), [50, 53): the tail at the log's end
        *(("apply", 0) for _ in range(5)),  # [0, 50) applied
        ("append", 40),
        ("cut", 1),  # [53, 60)
        ("lose", 0),  # [50, 53)'s item evicted: a gap
        ("rebuild", [True]),  # [53, 60) is flushed only after the rebuild's read
    ]
    try:
        run(events, barrier=False)
    except Conflict as conflict:
        assert "(50, 60) partially overlaps applied range (53, 60)" in str(conflict)
    else:
        raise AssertionError("no conflict without the barrier")
    m = run(events, barrier=True)
    assert sorted(m.applied)[5:7] == [(50, 53), (53, 60)]
