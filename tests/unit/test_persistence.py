"""SPEC F: the MRWQ over a memcached-shaped store, flush triggers, gaps and the durable ack."""

from __future__ import annotations

import itertools
import pickle
import re
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.clock import FakeClock
from flowctl.core.flusher import FlushPolicy, MrwqFlusher
from flowctl.core.persistence import (
    MrwqWriteError,
    MrwqWriter,
    QueueItem,
    mrwq_result,
    parse_outcome_key,
)
from tests.unit.fakes import DictStore


class KeyedSink:
    """An idempotent sink: one row per key, the last value wins."""

    def __init__(self) -> None:
        self.rows: dict[str, object] = {}
        self.batches: list[list[str]] = []
        self.fail_next = 0

    def write_batch(self, items: Sequence[QueueItem]) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ConnectionError("database down")
        self.batches.append([i.key for i in items if i.key])
        for item in items:
            self.rows[item.key] = item.value  # type: ignore[index]


def tokens():
    counter = itertools.count(1)
    return lambda: f"epoch-{next(counter)}"


def setup(max_length: int = 3, update_time_s: float = 1.0, as_queued: bool = False, **kw):
    clock = FakeClock()
    store, sink = DictStore(), KeyedSink()
    new_token = tokens()
    writer = MrwqWriter(store, "wc", new_token=new_token)
    flusher = MrwqFlusher(
        store,
        sink,
        "wc",
        policy=FlushPolicy(max_length, update_time_s, as_queued),
        clock=clock,
        new_token=new_token,
        **kw,
    )
    assert flusher.open() is None
    return clock, store, sink, writer, flusher


# --- policy ------------------------------------------------------------------------------------


def test_flush_policy_triggers_on_length_then_on_time() -> None:
    policy = FlushPolicy(max_length=100, update_time_s=2.0)
    assert policy.due(100, 0.0) == "length"
    assert policy.due(5, 2.0) == "time"
    assert policy.due(5, 1.9) is None
    assert policy.due(0, 60.0) is None


def test_flush_policy_as_queued_flushes_whatever_is_queued() -> None:
    policy = FlushPolicy(max_length=100, update_time_s=2.0, as_queued=True)
    assert policy.due(1, 0.0) == "queued"
    assert policy.due(100, 0.0) == "length"
    assert policy.due(0, 60.0) is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, 1.0), "max_length must be an int >= 1, got 0"),
        ((1, 0), "update_time_s"),
        ((1, 1.0, "yes"), "as_queued must be a bool, got 'yes'"),
    ],
)
def test_flush_policy_names_bad_arguments(args: tuple, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        FlushPolicy(*args)


# --- writing and flushing -------------------------------------------------------------------------


def test_writers_take_contiguous_sequence_numbers() -> None:
    _, _, _, writer, _ = setup()
    assert writer.append("t1", [("a", 1), ("b", 2)]) == range(1, 3)
    assert writer.append("t2", [("c", 1)]) == range(3, 4)


def test_a_flush_writes_in_order_and_acks_the_tuples_durable() -> None:
    _, store, sink, writer, flusher = setup()
    writer.append("t1", [("t1:a", 1), ("t1:b", 2)])
    writer.append("t2", [("t2:a", 5)])
    result = flusher.flush()
    assert (result.first_seq, result.last_seq, result.written) == (1, 3, 3)
    assert result.durable_tuple_ids == ("t1", "t2")
    assert result.gap is None
    assert sink.batches == [["t1:a", "t1:b", "t2:a"]]
    assert not [k for k in store.data if ":item:" in k]
    assert flusher.head == 4


def test_poll_waits_for_length_or_time() -> None:
    clock, _, _, writer, flusher = setup(max_length=3, update_time_s=1.0)
    writer.append("t1", [("a", 1)])
    assert flusher.poll() is None
    writer.append("t2", [("b", 1), ("c", 1)])
    result = flusher.poll()
    assert result is not None and result.trigger == "length"
    writer.append("t3", [("d", 1)])
    clock.advance(0.5)
    assert flusher.poll() is None
    clock.advance(0.5)
    result = flusher.poll()
    assert result is not None and (result.trigger, result.durable_tuple_ids) == ("time", ("t3",))


def test_a_batch_end_flushes_what_is_queued_without_waiting_for_the_timer() -> None:
    _, _, _, writer, flusher = setup(max_length=3, update_time_s=1.0)
    assert flusher.poll(batch_ended=True) is None  # nothing queued: nothing to write
    writer.append("t1", [("a", 1)])
    result = flusher.poll(batch_ended=True)
    assert result is not None and (result.trigger, result.durable_tuple_ids) == (
        "batch end",
        ("t1",),
    )
    writer.append("t2", [("b", 1)])
    assert flusher.poll() is None  # without a batch end the timer rules again


def test_as_queued_every_poll_flushes_what_the_lanes_queued() -> None:
    _, _, _, writer, flusher = setup(max_length=3, update_time_s=1.0, as_queued=True)
    assert flusher.poll() is None  # nothing queued: nothing to write
    writer.append("t1", [("a", 1)])
    result = flusher.poll()
    assert result is not None and (result.trigger, result.durable_tuple_ids) == (
        "queued",
        ("t1",),
    )
    writer.append("t2", [("b", 1)])
    writer.append("t3", [("c", 1)])
    result = flusher.poll()
    assert result is not None and result.durable_tuple_ids == ("t2", "t3")
    assert flusher.poll() is None


def test_a_tuple_is_durable_only_when_its_last_item_is_flushed() -> None:
    _, _, _, writer, flusher = setup(max_length=2)
    writer.append("t1", [("a", 1), ("b", 1), ("c", 1)])
    first = flusher.flush()
    assert (first.written, first.durable_tuple_ids, first.pending) == (2, (), 1)
    assert flusher.flush().durable_tuple_ids == ("t1",)


def test_a_tuple_without_results_still_becomes_durable() -> None:
    _, _, sink, writer, flusher = setup()
    writer.append("empty-line", [])
    result = flusher.flush()
    assert (result.durable_tuple_ids, result.written) == (("empty-line",), 0)
    assert sink.rows == {}


def test_a_sink_failure_keeps_the_batch_for_the_next_flush() -> None:
    _, _, sink, writer, flusher = setup()
    writer.append("t1", [("a", 1)])
    sink.fail_next = 1
    with pytest.raises(ConnectionError):
        flusher.flush()
    assert flusher.head == 1
    assert flusher.flush().durable_tuple_ids == ("t1",)
    assert sink.rows == {"a": 1}


def test_a_refused_write_fails_the_append() -> None:
    _, store, _, writer, _ = setup()
    writer.append("t0", [("x", 0)])
    store.refuse_sets = True
    with pytest.raises(MrwqWriteError, match=r"1 of 1 item\(s\) not stored \(seq 2\.\.2\)"):
        writer.append("t1", [("a", 1)])


def test_values_must_be_json() -> None:
    _, _, _, writer, _ = setup()
    with pytest.raises(ValueError, match="value of result 'a' of tuple 't1' is not JSON"):
        writer.append("t1", [("a", {1, 2})])


def test_bad_namespace_is_rejected() -> None:
    with pytest.raises(ValueError, match="namespace must be"):
        MrwqWriter(DictStore(), "word count")


# --- gaps ---------------------------------------------------------------------------------------


def test_an_item_still_being_written_is_waited_for_not_skipped() -> None:
    clock, store, _, writer, flusher = setup(gap_grace_s=5.0)
    writer.append("t1", [("a", 1)])
    writer.append("t2", [("b", 1)])
    writer.append("t3", [("c", 1)])
    del store.data["wc:item:2"]
    result = flusher.flush()
    assert (result.durable_tuple_ids, result.gap) == (("t1",), None)
    clock.advance(4.0)
    assert flusher.flush().gap is None
    assert flusher.head == 2


def test_an_evicted_item_is_reported_as_a_gap_after_the_grace() -> None:
    clock, store, _, writer, flusher = setup(gap_grace_s=5.0)
    for t in ("t1", "t2", "t3"):
        writer.append(t, [(t, 1)])
    del store.data["wc:item:2"]
    flusher.flush()
    clock.advance(5.0)
    result = flusher.flush()
    assert result.gap is not None and result.gap.seq == 2
    assert str(result.gap) == (
        "gap at seq 2 (item missing for 5 s (evicted or lost)): replay from the durable checkpoint"
    )
    assert result.durable_tuple_ids == ()


def test_a_gap_is_sticky_until_resync() -> None:
    _, store, sink, writer, flusher = setup(gap_grace_s=0.0)
    writer.append("t1", [("a", 1)])
    writer.append("t2", [("b", 1)])
    del store.data["wc:item:1"]
    assert flusher.flush().gap is not None
    writer.append("t3", [("c", 1)])
    assert flusher.flush().gap is not None
    assert sink.rows == {}
    assert flusher.resync() == range(1, 4)
    writer.append("t1", [("a", 1)])
    assert flusher.flush().durable_tuple_ids == ("t1",)


def test_a_store_restart_is_a_gap_even_if_new_writes_pass_the_head() -> None:
    _, store, sink, writer, flusher = setup()
    writer.append("t1", [("a", 1)])
    flusher.flush()  # head = 2
    writer.append("t2", [("b", 1)])
    store.restart()  # t2's item is lost
    for t in ("t3", "t4", "t5"):
        writer.append(t, [(t, 1)])  # seq 1..3 again, under a new epoch
    result = flusher.flush()
    assert result.gap is not None and result.gap.seq == 2
    assert "epoch changed" in result.gap.reason
    assert set(sink.rows) == {"a"}


def test_a_poll_reports_a_store_restart_while_the_new_tail_is_below_the_head() -> None:
    _, store, sink, writer, flusher = setup(max_length=100)
    for t in ("t1", "t2", "t3"):
        writer.append(t, [(t, 1)])
    flusher.flush()  # head = 4
    writer.append("t4", [("d", 1)])
    store.restart()  # t4's item is lost
    writer.append("t5", [("e", 1)])  # seq 1 under a new epoch, below the head
    assert flusher.length() is None  # not "0 queued": the queue is not the one it reads
    result = flusher.poll()
    assert result is not None and result.gap is not None and result.gap.seq == 4
    assert "epoch changed" in result.gap.reason
    assert set(sink.rows) == {"t1", "t2", "t3"}
    assert flusher.resync() == range(1, 2)  # the new queue's item, dispatched again
    assert "wc:item:1" not in store.data
    writer.append("t4", [("d", 1)])
    assert flusher.poll(batch_ended=True).durable_tuple_ids == ("t4",)  # type: ignore[union-attr]


def test_resync_moves_to_a_new_epoch_so_the_position_never_vouches_for_a_skipped_item() -> None:
    _, store, sink, writer, flusher = setup(gap_grace_s=0.0)
    writer.append("t1", [("a", 1)])
    writer.append("t2", [("b", 1)])
    labelled = (writer.epoch, 2)  # what the lane reports for t2: its item's epoch and seq
    del store.data["wc:item:1"]
    assert flusher.flush().gap is not None
    assert flusher.resync() == range(1, 3)
    # head is past t2's item, which was never written: only the epoch tells them apart
    assert flusher.head > labelled[1] and flusher.epoch != labelled[0]
    writer.append("t3", [("c", 1)])
    assert writer.epoch == flusher.epoch
    assert flusher.flush().durable_tuple_ids == ("t3",)
    assert set(sink.rows) == {"c"}


def test_an_item_stored_under_the_old_epoch_after_a_resync_is_a_gap() -> None:
    _, store, _, writer, flusher = setup(gap_grace_s=0.0)
    writer.append("t1", [("a", 1)])
    del store.data["wc:item:1"]
    assert flusher.flush().gap is not None
    old = writer.epoch
    flusher.resync()
    racing = MrwqWriter(store, "wc")
    racing._epoch = lambda: old  # type: ignore[method-assign]  # read just before the resync
    racing.append("t2", [("b", 1)])
    result = flusher.flush()
    assert result.gap is not None and result.gap.reason == "item from another queue epoch"
    assert result.durable_tuple_ids == ()


def test_a_lost_counter_rotates_the_epoch_and_is_reported() -> None:
    _, store, _, writer, flusher = setup()
    writer.append("t1", [("a", 1)])
    flusher.flush()
    del store.data["wc:tail"]
    writer.append("t2", [("b", 1)])
    result = flusher.flush()
    assert result.gap is not None and "epoch changed" in result.gap.reason


def test_a_counter_that_went_back_is_reported() -> None:
    _, store, _, writer, flusher = setup()
    writer.append("t1", [("a", 1), ("b", 2)])
    flusher.flush()
    store.data["wc:tail"] = b"1"
    result = flusher.flush()
    assert result.gap is not None and result.gap.reason == "sequence counter went back to 1"


def test_an_unreadable_item_is_a_gap() -> None:
    _, store, _, writer, flusher = setup()
    writer.append("t1", [("a", 1)])
    store.data["wc:item:1"] = b"\x00junk"
    result = flusher.flush()
    assert result.gap is not None and result.gap.reason.startswith("item unreadable")


# --- restart ------------------------------------------------------------------------------------


def test_a_new_flusher_resumes_from_the_stored_head() -> None:
    clock, store, sink, writer, flusher = setup()
    writer.append("t1", [("a", 1)])
    flusher.flush()
    writer.append("t2", [("b", 1)])
    fresh = MrwqFlusher(store, sink, "wc", policy=FlushPolicy(3, 1.0), clock=clock)
    assert fresh.flush().durable_tuple_ids == ("t2",)


def test_a_snapshot_detects_a_store_restart_while_the_flusher_was_down() -> None:
    clock, store, sink, writer, flusher = setup()
    writer.append("t1", [("a", 1)])
    flusher.flush()
    writer.append("t2", [("b", 1)])
    snap = pickle.loads(pickle.dumps(flusher.snapshot()))
    store.restart()
    writer.append("t3", [("c", 1)])
    resumed = MrwqFlusher(store, sink, "wc", policy=FlushPolicy(3, 1.0), clock=clock, snapshot=snap)
    result = resumed.flush()
    assert result.gap is not None and result.gap.seq == 2


# --- property -----------------------------------------------------------------------------------

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(0, 3)),
        st.tuples(st.just("flush"), st.just(0)),
        st.tuples(st.just("evict"), st.integers(1, 30)),
        st.tuples(st.just("restart"), st.just(0)),
        st.tuples(st.just("wait"), st.integers(1, 3)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_nothing_is_lost_silently(ops: list[tuple[str, int]]) -> None:
    """Every appended tuple ends durable with all its results written, or a gap is reported."""
    clock, store, sink, writer, flusher = setup(max_length=4, gap_grace_s=2.0)
    last_seq: dict[str, int] = {}
    results: dict[str, int] = {}
    durable: list[str] = []
    gap_seq: int | None = None
    for n, (op, arg) in enumerate(ops):
        if op == "append":
            seqs = writer.append(f"t{n}", [(f"t{n}:{i}", i) for i in range(arg)])
            last_seq[f"t{n}"] = seqs[-1]
            results[f"t{n}"] = arg
        elif op == "evict":
            store.data.pop(f"wc:item:{arg}", None)
        elif op == "restart":
            store.restart()
        elif op == "wait":
            clock.advance(arg)
        else:
            result = flusher.flush()
            durable.extend(result.durable_tuple_ids)
            if result.gap is not None:
                gap_seq = result.gap.seq
                break
    if gap_seq is None:
        for _ in range(10):
            clock.advance(3.0)
            result = flusher.flush()
            durable.extend(result.durable_tuple_ids)
            if result.gap is not None:
                gap_seq = result.gap.seq
                break
    assert len(durable) == len(set(durable))
    for t in durable:  # a durable ack only for a tuple whose every result is in the sink
        assert all(sink.rows.get(f"{t}:{i}") == i for i in range(results[t]))
    if gap_seq is None:
        assert sorted(durable) == sorted(last_seq)
    else:
        assert set(durable) <= set(last_seq)


@pytest.mark.parametrize(
    ("flags", "key", "parsed"),
    [
        ({}, "applied", ("applied", False, False)),
        ({"replay": True}, "dlq+replay", ("dlq", True, False)),
        ({"isolated": True}, "dlq+isolated", ("dlq", False, True)),
    ],
)
def test_an_outcome_key_carries_replay_and_the_isolated_mark(
    flags: dict[str, bool], key: str, parsed: tuple[str, bool, bool]
) -> None:
    outcome = "applied" if not flags else "dlq"
    assert mrwq_result(outcome, None, **flags) == (key, None)
    assert parse_outcome_key(key) == parsed


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: mrwq_result("applied", isolated=True), "outcome='applied'"),
        (lambda: mrwq_result("dlq", replay=True, isolated=True), "replay=True"),
        (lambda: mrwq_result("dlq", isolated="yes"), "isolated must be a bool, got 'yes'"),
        (lambda: parse_outcome_key("applied+isolated"), "'applied+isolated' is not an outcome"),
        (lambda: parse_outcome_key("dlq+isolated+replay"), "'dlq+isolated+replay'"),
    ],
)
def test_an_isolated_mark_off_the_protocol_is_refused(call: object, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        call()  # type: ignore[operator]
