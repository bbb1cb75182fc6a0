"""A lane (run_lane and its steps) with an in-memory Kafka and memcached, no I/O."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flowctl.adapters.memcached_store import LaneFeedback as FeedbackStore
from flowctl.core.persistence import mrwq_namespace, parse_outcome_key, queue_length
from flowctl.core.replay import Envelope, ReplayTopics, decode_envelope, encode_envelope
from flowctl.core.spout_contract import Dispatch, Outcome
from flowctl.core.tuples import TupleRange
from flowctl.spark.flow.channels import LaneFeedback
from flowctl.spark.flow.lane import TupleDone, run_lane, write_feedback
from flowctl.spark.flow.plan import FlowPartition, PlanEntry, decode_plan, encode_plan
from tests.unit.fakes import DictStore, FakeLaneIO
from tests.unit.flow_setup import flow_settings

EDEN = "demo.eden"
TOPICS = ReplayTopics("demo")
POISON = "tests.spark.flow_def_poison"


def _part(*tuples: TupleRange, lane: int = 0, seq: int = 3, replay: bool = False) -> FlowPartition:
    dispatches = [Dispatch(lane, t, 7 + i, replay, TOPICS.replay_a) for i, t in enumerate(tuples)]
    (part,) = decode_plan(encode_plan(EDEN, seq, dispatches, "demo"), EDEN, "demo")
    return part


def _items(store: DictStore) -> list[dict]:
    import json

    ns = mrwq_namespace("demo")
    return [json.loads(v) for k, v in sorted(store.data.items()) if k.startswith(f"{ns}:item:")]


def _feedback(store: DictStore, ns: str, part: FlowPartition) -> LaneFeedback:
    got = FeedbackStore(store, ns).collect(part.seq, [part.lane])
    return LaneFeedback.decode(got[part.lane])


def test_a_lane_processes_its_tuples_appends_outcomes_and_reports_them(tmp_path: Path) -> None:
    settings = flow_settings(tmp_path)
    io = FakeLaneIO()
    io.append(EDEN, 0, [b"a b", b"b c", b"c"] * 4)
    part = _part(TupleRange(EDEN, 0, 0, 6), TupleRange(EDEN, 0, 6, 12))
    rows = list(run_lane(settings, part, io))
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in rows] == [
        (0, 3, f"{EDEN}:0:0-6", "acked", 6),
        (0, 3, f"{EDEN}:0:6-12", "acked", 6),
    ]
    ns = mrwq_namespace("demo")
    assert queue_length(io.store, ns) == 2
    items = _items(io.store)
    assert [(i["t"], parse_outcome_key(i["k"]), i["v"]) for i in items] == [
        (f"{EDEN}:0:0-6", ("applied", False, False), {"a": 2, "b": 4, "c": 4}),
        (f"{EDEN}:0:6-12", ("applied", False, False), {"a": 2, "b": 4, "c": 4}),
    ]
    feedback = _feedback(io.store, settings.ns, part)
    # each tuple carries the epoch its item was stored under (the durable ack's key)
    assert [(r.outcome, r.xor, r.records, r.mrwq_epoch) for r in feedback.results] == [
        (Outcome.ACKED, 7, 6, items[0]["e"]),
        (Outcome.ACKED, 8, 6, items[1]["e"]),
    ]
    assert [r.mrwq_seq for r in feedback.results] == [1, 2]
    assert feedback.ends == ((EDEN, 0, 12),)  # the log end the lane's read saw
    assert io.produced == {}


def test_poison_is_isolated_in_the_lane_good_records_acked_poison_to_the_dlq(
    tmp_path: Path,
) -> None:
    settings = flow_settings(tmp_path, definition=POISON)
    io = FakeLaneIO()
    io.append(EDEN, 0, [b"ok", b"POISON", b"fine", b"POISON here"])
    part = _part(TupleRange(EDEN, 0, 1, 2), TupleRange(EDEN, 0, 2, 4), TupleRange(EDEN, 0, 0, 1))
    rows = list(run_lane(settings, part, io))
    # A tuple of poison only is POISON; the one holding ``fine`` is acked with it alone.
    assert [(r[3], r[4]) for r in rows] == [("poison", 1), ("acked", 1), ("acked", 1)]
    dead = [decode_envelope(v) for v in io.produced[TOPICS.dlq]]
    assert [(e.offset, e.payload) for e in dead] == [(1, b"POISON"), (3, b"POISON here")]
    assert all(e.error.startswith("poison: PoisonRecord") for e in dead)
    assert TOPICS.replay_a not in io.produced  # nothing transient: nothing to replay
    results = _feedback(io.store, settings.ns, part).results
    assert [(r.routed_records, r.dead_records) for r in results] == [(1, 1), (1, 1), (0, 0)]
    items = _items(io.store)
    assert [(i["t"], parse_outcome_key(i["k"])) for i in items] == [
        (f"{EDEN}:0:1-2", ("dlq", False, False)),
        (f"{EDEN}:0:2-4", ("applied", False, False)),
        (f"{EDEN}:0:3-4", ("dlq", False, True)),  # the poison record, nested and marked
        (f"{EDEN}:0:0-1", ("applied", False, False)),
    ]
    assert items[1]["v"] == {"fine": 1}


def test_a_transient_failure_replays_the_tuple_through_from(tmp_path: Path) -> None:
    settings = flow_settings(tmp_path, definition=POISON)
    io = FakeLaneIO()
    io.append(EDEN, 0, [b"ok", b"BROKEN", b"POISON"])
    rows = list(run_lane(settings, _part(TupleRange(EDEN, 0, 0, 3)), io))
    assert [r[3] for r in rows] == ["replayed"]
    replayed = [decode_envelope(v) for v in io.produced[TOPICS.replay_a]]
    assert [(e.offset, e.attempt) for e in replayed] == [(0, 1), (1, 1), (2, 1)]
    assert "RuntimeError" in replayed[1].error


def test_a_failed_produce_fails_the_tuples_that_routed_records(tmp_path: Path) -> None:
    settings = flow_settings(tmp_path, definition=POISON)
    io = FakeLaneIO()
    io.append(EDEN, 0, [b"POISON", b"ok"])
    io.fail_produce = True
    part = _part(TupleRange(EDEN, 0, 0, 1), TupleRange(EDEN, 0, 1, 2))
    rows = list(run_lane(settings, part, io))
    assert [r[3] for r in rows] == ["failed", "acked"]
    assert "replay produce failed" in rows[0][6]
    assert queue_length(io.store, mrwq_namespace("demo")) == 1  # no item claims them


def test_a_read_or_mrwq_failure_fails_tuples_never_the_task(tmp_path: Path) -> None:
    settings = flow_settings(tmp_path)
    io = FakeLaneIO()
    io.append(EDEN, 0, [b"a"] * 4)
    io.fail_reads.add((EDEN, 1))
    part = _part(TupleRange(EDEN, 1, 0, 2), TupleRange(EDEN, 0, 0, 2))
    assert [r[3] for r in run_lane(settings, part, io)] == ["failed", "acked"]
    io.store.refuse_sets = True  # memcached refuses the items (and the feedback)
    rows = list(run_lane(settings, _part(TupleRange(EDEN, 0, 2, 4), seq=4), io))
    assert rows[0][3] == "failed" and "MRWQ write failed" in rows[0][6]


def test_a_replayed_record_is_processed_under_its_original_coordinates(tmp_path: Path) -> None:
    settings = flow_settings(tmp_path, definition=POISON)
    io = FakeLaneIO()
    env = Envelope(EDEN, 1, 41, b"BROKEN again", 1, "earlier", 0.0)
    io.append(TOPICS.replay_b, 0, [encode_envelope(env), b"not an envelope"])
    part = _part(
        TupleRange(TOPICS.replay_b, 0, 0, 1), TupleRange(TOPICS.replay_b, 0, 1, 2), replay=True
    )
    rows = list(run_lane(settings, part, io))
    assert [r[3] for r in rows] == ["replayed", "dlq"]
    again = decode_envelope(io.produced[TOPICS.replay_a][0])
    assert (again.topic, again.partition, again.offset, again.attempt) == (EDEN, 1, 41, 2)
    assert decode_envelope(io.produced[TOPICS.dlq][0]).payload == b"not an envelope"
    items = _items(io.store)  # the malformed record has no item: no Eden range to claim
    assert [(i["t"], parse_outcome_key(i["k"])) for i in items] == [
        (f"{EDEN}:1:41-42", ("replayed", True, False))
    ]


def test_a_warm_up_batch_processes_and_stores_nothing(tmp_path: Path) -> None:
    settings = flow_settings(tmp_path)
    io = FakeLaneIO()
    io.append(EDEN, 0, [b"x y"] * 10)
    entry = PlanEntry(TupleRange(EDEN, 0, 0, 10), 0, False, TOPICS.replay_a)
    rows = list(run_lane(settings, FlowPartition(1, 5, (entry,), warmup=True), io))
    assert [(r[0], r[1], r[3], r[4], r[6]) for r in rows] == [(1, 5, "warmup", 10, None)]
    assert io.store.data == {} and io.produced == {}


def test_the_feedback_writer_stores_what_the_planner_reads_and_never_raises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = DictStore()
    entry = PlanEntry(TupleRange(EDEN, 0, 0, 5), 2**64 - 3, False, TOPICS.replay_a)
    part = FlowPartition(1, 9, (entry,))
    done = [TupleDone(entry, Outcome.ACKED, 5, 0.25, latencies=(0.5,), mrwq_epoch="e", mrwq_seq=4)]
    write_feedback(store, "flow.t", part, done, {(EDEN, 1): 80, (EDEN, 0): 12})
    feedback = _feedback(store, "flow.t", part)
    assert feedback.ends == ((EDEN, 0, 12), (EDEN, 1, 80))  # the ends the lane's reads saw
    (result,) = feedback.results
    assert (result.tuple_id, result.xor, result.rt, result.records) == (
        entry.tuple.id,
        2**64 - 3,
        0.25,
        5,
    )
    assert (result.latencies, result.mrwq_epoch, result.mrwq_seq) == ((0.5,), "e", 4)
    store.refuse_sets = True
    with caplog.at_level(logging.WARNING):
        write_feedback(store, "flow.t", FlowPartition(1, 10, (entry,)), done)
    assert "lane 1: feedback of batch 10 not stored" in caplog.text


def test_a_lane_past_its_time_budget_returns_the_rest_unstarted(tmp_path: Path) -> None:
    """Lane 0 of the slow definition takes SLOW_S a tuple; with a budget far below that
    (0.01 x 1 s), it processes its first tuple and hands the others back untouched:
    no MRWQ item, no replay record, outcome ``returned`` for the spout to redispatch."""
    settings = flow_settings(
        tmp_path,
        definition="tests.spark.flow_def_slow",
        flow="latency_target_s = 1.0\nlane_budget = 0.01",
    )
    io = FakeLaneIO()
    io.append(EDEN, 0, [b"a b", b"b c", b"c"] * 4)
    part = _part(TupleRange(EDEN, 0, 0, 4), TupleRange(EDEN, 0, 4, 8), TupleRange(EDEN, 0, 8, 12))
    rows = list(run_lane(settings, part, io))
    assert [(r[3], r[4]) for r in rows] == [("acked", 4), ("returned", 0), ("returned", 0)]
    assert queue_length(io.store, mrwq_namespace("demo")) == 1
    feedback = _feedback(io.store, settings.ns, part)
    assert [r.outcome for r in feedback.results] == [Outcome.ACKED] + [Outcome.RETURNED] * 2
    assert io.produced == {}


def test_without_a_budget_a_slow_lane_processes_its_whole_window(tmp_path: Path) -> None:
    settings = flow_settings(
        tmp_path, definition="tests.spark.flow_def_slow", flow="lane_budget = 0"
    )
    io = FakeLaneIO()
    io.append(EDEN, 0, [b"a b", b"b c"] * 2)
    part = _part(TupleRange(EDEN, 0, 0, 2), TupleRange(EDEN, 0, 2, 4))
    assert [r[3] for r in run_lane(settings, part, io)] == ["acked", "acked"]
