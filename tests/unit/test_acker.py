"""XOR acker: tree completion, fail, timeout, stale messages; XOR property."""

from __future__ import annotations

import pickle
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.acker import AckerEventKind, XorAcker
from flowctl.core.clock import FakeClock


def make(clock: FakeClock, seed: int = 7) -> XorAcker:
    return XorAcker(clock, timeout_s=30.0, buckets=3, rng=random.Random(seed))


def test_seeded_ids_are_reproducible_and_non_zero() -> None:
    a, b = make(FakeClock(), 1), make(FakeClock(), 1)
    ids = [a.new_root() for _ in range(5)]
    assert ids == [b.new_root() for _ in range(5)]
    assert all(0 < i < 2**64 for i in ids)


def test_linear_tree_completes_on_the_last_ack() -> None:
    clock = FakeClock()
    acker = make(clock)
    root, e1, e2 = acker.new_root(), acker.new_id(), acker.new_id()
    assert acker.ack_init(root, e1, source_task="lane-0") == []
    assert acker.ack(root, e1 ^ e2) == []  # split: consumed e1, emitted e2
    clock.advance(2.0)
    (event,) = acker.ack(root, e2)  # count: consumed e2, emitted nothing
    assert (event.kind, event.root, event.source_task) == (AckerEventKind.COMPLETE, root, "lane-0")
    assert (event.created, event.at) == (0.0, 2.0)
    assert acker.pending == 0


def test_entry_is_constant_size_whatever_the_tree() -> None:
    acker = make(FakeClock())
    root, edge = acker.new_root(), acker.new_id()
    acker.ack_init(root, edge)
    children = [acker.new_id() for _ in range(100)]
    x = edge
    for c in children:
        x ^= c
    acker.ack(root, x)
    entry = acker.entry(root)
    assert entry is not None and entry.ack_val == x ^ edge


def test_fail_reports_at_once() -> None:
    acker = make(FakeClock())
    root = acker.new_root()
    acker.ack_init(root, acker.new_id(), source_task=1)
    (event,) = acker.fail(root)
    assert event.kind is AckerEventKind.FAILED
    assert acker.pending == 0


def test_unacked_tree_times_out() -> None:
    clock = FakeClock()
    acker = make(clock)
    root = acker.new_root()
    acker.ack_init(root, acker.new_id())
    clock.advance(29.0)
    assert acker.expire() == []
    clock.advance(1.0)
    (event,) = acker.expire()
    assert (event.kind, event.root) == (AckerEventKind.TIMED_OUT, root)


def test_acks_do_not_extend_the_timeout() -> None:
    clock = FakeClock()
    acker = make(clock)
    root, e1, e2 = acker.new_root(), acker.new_id(), acker.new_id()
    acker.ack_init(root, e1)
    clock.advance(25.0)
    acker.ack(root, e1 ^ e2)
    clock.advance(5.0)
    assert [e.kind for e in acker.expire()] == [AckerEventKind.TIMED_OUT]


def test_messages_for_unknown_roots_are_counted_as_stale() -> None:
    acker = make(FakeClock())
    assert acker.ack(12345, 1) == []
    assert acker.fail(12345) == []
    assert acker.stale == 2


def test_duplicate_init_and_bad_ids_are_rejected() -> None:
    acker = make(FakeClock())
    root = acker.new_root()
    acker.ack_init(root, 5)
    with pytest.raises(ValueError, match="already pending"):
        acker.ack_init(root, 6)
    with pytest.raises(ValueError, match="root must be an int in"):
        acker.ack(0, 1)
    with pytest.raises(ValueError, match="xor_val must be an int in"):
        acker.ack(root, 2**64)


@st.composite
def trees(draw: st.DrawFn) -> list[list[int]]:
    """children[i] = indices of the edges emitted by the consumer of edge i (edge 0 = root edge)."""
    n = draw(st.integers(1, 25))
    children: list[list[int]] = [[] for _ in range(n)]
    for i in range(1, n):
        children[draw(st.integers(0, i - 1))].append(i)
    return children


@settings(max_examples=150, deadline=None)
@given(tree=trees(), seed=st.integers(0, 2**32), data=st.data())
def test_value_is_zero_exactly_when_every_edge_is_acked_once(
    tree: list[list[int]], seed: int, data: st.DataObject
) -> None:
    acker = make(FakeClock(), seed)
    root = acker.new_root()
    edges = [acker.new_id() for _ in tree]
    acker.ack_init(root, edges[0])
    order = data.draw(st.permutations(range(len(tree))))
    skip = data.draw(st.one_of(st.none(), st.sampled_from(order)))
    events = []
    for step, i in enumerate(order):
        if i == skip:
            continue
        xor = edges[i]
        for c in tree[i]:
            xor ^= edges[c]
        events = acker.ack(root, xor)
        last = step == len(order) - 1 or (step == len(order) - 2 and order[-1] == skip)
        if not last:
            assert events == [] and acker.pending == 1
    if skip is None:
        assert [e.kind for e in events] == [AckerEventKind.COMPLETE]
        assert acker.pending == 0
    else:
        assert events == [] and acker.pending == 1
        entry = acker.entry(root)
        assert entry is not None and entry.ack_val != 0


def test_snapshot_survives_a_restart_timeouts_and_ids_included() -> None:
    clock = FakeClock(500.0)
    acker = make(clock)
    root, e1 = acker.new_root(), acker.new_id()
    acker.ack_init(root, e1, source_task="lane-1")
    clock.advance(20.0)
    snap = pickle.loads(pickle.dumps(acker.snapshot()))
    restarted = FakeClock(0.0)
    back = XorAcker.from_snapshot(snap, restarted)
    assert back.new_id() == acker.new_id()  # the id stream continues
    entry = back.entry(root)
    assert entry is not None and (entry.created, entry.source_task) == (-20.0, "lane-1")
    restarted.advance(9.9)
    assert back.expire() == []
    restarted.advance(0.1)
    assert [e.root for e in back.expire()] == [root]  # 30 s after ack_init, as before
