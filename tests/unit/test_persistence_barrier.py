"""FlushBarrier: a rebuild waits until the queue is flushed past the tail it first saw."""

from __future__ import annotations

from flowctl.core.persistence import FlushBarrier


def test_the_barrier_holds_until_the_head_passes_the_first_tail_seen() -> None:
    barrier = FlushBarrier()
    assert not barrier.passed(None, 1)  # the queue's counters unknown: never passes
    assert barrier.upto is None
    assert not barrier.passed(7, 5) and barrier.upto == 7
    assert not barrier.passed(12, 7)  # items appended since do not move the barrier
    assert not barrier.passed(12, None)
    assert barrier.passed(12, 8)
    barrier.clear()
    assert barrier.upto is None
    assert barrier.passed(0, 1)  # an empty queue: nothing to wait for
