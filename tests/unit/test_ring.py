"""Disruptor-style ring: power-of-two capacity, batch catch-up, gating and lapping."""

from __future__ import annotations

import pytest

from flowctl.core.ring import RingBuffer, RingFullError


@pytest.mark.parametrize("capacity", [0, 3, 6, 1.5, True])
def test_capacity_must_be_a_power_of_two(capacity: object) -> None:
    with pytest.raises(ValueError, match="capacity must be a power of two"):
        RingBuffer(capacity)  # type: ignore[arg-type]


def test_sequences_start_at_zero_and_wrap_on_the_mask() -> None:
    ring: RingBuffer[str] = RingBuffer(4)
    c = ring.consumer("c")
    seqs = [ring.publish(x) for x in "abc"]
    assert seqs == [0, 1, 2]
    assert c.poll().items == ("a", "b", "c")
    for x in "defg":
        ring.publish(x)
    batch = c.poll()
    assert (batch.first_seq, batch.last_seq, batch.items) == (3, 6, ("d", "e", "f", "g"))


def test_consumer_catches_up_in_one_batch_or_in_bounded_ones() -> None:
    ring: RingBuffer[int] = RingBuffer(8)
    c = ring.consumer("c")
    ring.publish_all(range(5))
    assert c.poll(max_batch=2).items == (0, 1)
    assert c.lag == 3
    assert c.poll().items == (2, 3, 4)
    assert c.poll().items == ()


def test_new_consumer_sees_only_later_items() -> None:
    ring: RingBuffer[int] = RingBuffer(4)
    ring.publish(1)
    c = ring.consumer("late")
    ring.publish(2)
    assert c.poll().items == (2,)


def test_gating_mode_refuses_to_lap_a_slow_consumer() -> None:
    ring: RingBuffer[int] = RingBuffer(2)
    slow = ring.consumer("slow")
    ring.publish_all([1, 2])
    assert ring.remaining_capacity() == 0
    with pytest.raises(RingFullError, match="consumer 'slow' is at sequence -1"):
        ring.publish(3)
    slow.poll(max_batch=1)
    assert ring.publish(3) == 2


def test_overwrite_mode_reports_what_a_lapped_consumer_missed() -> None:
    ring: RingBuffer[int] = RingBuffer(4, overwrite=True)
    c = ring.consumer("c")
    ring.publish_all(range(10))
    batch = c.poll()
    assert batch.missed == 6
    assert (batch.first_seq, batch.items) == (6, (6, 7, 8, 9))


def test_removed_consumer_no_longer_gates() -> None:
    ring: RingBuffer[int] = RingBuffer(2)
    ring.consumer("gone")
    ring.publish_all([1, 2])
    ring.remove_consumer("gone")
    assert ring.publish(3) == 2
