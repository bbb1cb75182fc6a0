"""Cumulative-ack checkpoint (the seed's worked example) and the processed/durable ledger."""

from __future__ import annotations

import itertools
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.checkpoint import (
    AckLedger,
    CheckpointError,
    ContiguousAck,
    SequenceCheckpoint,
    TupleStatus,
)
from flowctl.core.tuples import TopicPartition, TupleRange

TP = TopicPartition("t", 0)


def test_seed_example_acks_1_3_4_then_2() -> None:
    cp = SequenceCheckpoint(first=1)
    assert [cp.ack(1), cp.ack(3), cp.ack(4)] == [1, 1, 1]
    assert cp.ack(2) == 4


def test_kafka_offset_is_end_of_highest_contiguous_tuple() -> None:
    acks = ContiguousAck(base=100)
    acks.ack(110, 120)
    assert acks.position == 100
    acks.ack(100, 110)
    assert acks.position == 120
    assert acks.pending == []


def test_duplicate_acks_are_ignored() -> None:
    acks = ContiguousAck()
    assert acks.ack(0, 10)
    assert not acks.ack(0, 10)
    acks.ack(20, 30)
    assert not acks.ack(20, 30)
    assert acks.position == 10


def test_overlapping_ranges_are_an_error() -> None:
    acks = ContiguousAck()
    acks.ack(20, 30)
    with pytest.raises(CheckpointError, match=r"\[25, 35\) overlaps \[20, 30\)"):
        acks.ack(25, 35)
    with pytest.raises(CheckpointError, match="overlaps"):
        acks.ack(15, 21)


def test_range_straddling_the_position_is_an_error() -> None:
    acks = ContiguousAck()
    acks.ack(0, 10)
    with pytest.raises(CheckpointError, match="straddles position 10"):
        acks.ack(5, 15)


def test_ledger_checkpoint_moves_on_durable_not_processed() -> None:
    ledger = AckLedger({TP: 0})
    a, b = TupleRange("t", 0, 0, 10), TupleRange("t", 0, 10, 20)
    ledger.admit(a)
    ledger.admit(b)
    ledger.processed(a.id)
    ledger.processed(b.id)
    assert ledger.checkpoint() == {TP: 0}
    assert ledger.at_risk() == [a, b]
    ledger.durable(b.id)
    assert ledger.checkpoint() == {TP: 0}
    assert ledger.durable(a.id)
    assert ledger.checkpoint() == {TP: 20}
    assert ledger.at_risk() == []
    assert ledger.status(a.id) is TupleStatus.DURABLE


def test_failed_tuple_goes_back_to_admitted_and_blocks_the_checkpoint() -> None:
    ledger = AckLedger()
    a = TupleRange("t", 0, 0, 10)
    ledger.admit(a)
    ledger.processed(a.id)
    ledger.failed(a.id)
    assert ledger.status(a.id) is TupleStatus.ADMITTED
    assert ledger.checkpoint() == {TP: 0}
    assert ledger.outstanding() == 1


def test_repeated_durable_ack_is_ignored_but_unknown_is_an_error() -> None:
    ledger = AckLedger()
    a = TupleRange("t", 0, 0, 10)
    ledger.admit(a)
    ledger.durable(a.id)
    assert not ledger.durable(a.id)
    with pytest.raises(CheckpointError, match="unknown tuple 't:0:50-60'"):
        ledger.durable("t:0:50-60")


def test_admitting_below_the_checkpoint_is_an_error() -> None:
    ledger = AckLedger({TP: 100})
    with pytest.raises(CheckpointError, match="before the checkpoint 100"):
        ledger.admit(TupleRange("t", 0, 90, 100))


def test_ledger_snapshot_round_trip() -> None:
    ledger = AckLedger({TP: 0})
    ts = [TupleRange(TP.topic, TP.partition, s, s + 10) for s in range(0, 40, 10)]
    for t in ts:
        ledger.admit(t)
    ledger.processed(ts[1].id)
    ledger.durable(ts[2].id)
    snap = pickle.loads(pickle.dumps(ledger.snapshot()))
    back = AckLedger.from_snapshot(snap)
    assert back.snapshot() == ledger.snapshot()
    back.durable(ts[0].id)
    back.durable(ts[1].id)
    assert back.checkpoint() == {TP: 30}


@settings(max_examples=200, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 5), min_size=1, max_size=30),
    data=st.data(),
)
def test_checkpoint_never_passes_an_unacked_tuple(sizes: list[int], data: st.DataObject) -> None:
    bounds = [0]
    for s in sizes:
        bounds.append(bounds[-1] + s)
    ranges = list(itertools.pairwise(bounds))
    acked_idx = data.draw(st.lists(st.sampled_from(range(len(ranges))), max_size=2 * len(ranges)))
    acks = ContiguousAck()
    done: set[int] = set()
    for i in acked_idx:
        acks.ack(*ranges[i])
        done.add(i)
        unacked = [r for j, r in enumerate(ranges) if j not in done]
        # never past an unacked tuple, and as far as the contiguous prefix allows
        expected = unacked[0][0] if unacked else bounds[-1]
        assert acks.position == expected
