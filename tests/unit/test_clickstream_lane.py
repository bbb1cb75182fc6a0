"""Clickstream in a lane (in-memory Kafka and memcached): lateness judged by the record's
Kafka timestamp on Eden and, through the envelope, on every replay."""

from __future__ import annotations

import json
from pathlib import Path

from flowctl.core.persistence import mrwq_namespace, parse_outcome_key
from flowctl.core.replay import Envelope, ReplayTopics, decode_envelope, encode_envelope
from flowctl.core.spout_contract import Dispatch
from flowctl.core.tuples import TupleRange
from flowctl.pipelines.clickstream import iso_ms
from flowctl.spark.flow.lane import run_lane
from flowctl.spark.flow.plan import FlowPartition, decode_plan, encode_plan
from tests.unit.fakes import DictStore, FakeLaneIO
from tests.unit.flow_setup import flow_settings

EDEN = "demo.eden"
TOPICS = ReplayTopics("demo")
CLICKSTREAM = "flowctl.pipelines.clickstream"
T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z
CLOSED = T0 + 60_000 + 120_000  # the first minute's window end plus the allowed lateness


def click(user: str, event_ms: int) -> bytes:
    return json.dumps({"user": user, "page": "/a", "ts": iso_ms(event_ms)}).encode()


def _part(*tuples: TupleRange, replay: bool = False) -> FlowPartition:
    dispatches = [Dispatch(0, t, 7 + i, replay, TOPICS.replay_a) for i, t in enumerate(tuples)]
    (part,) = decode_plan(encode_plan(EDEN, 3, dispatches, "demo"), EDEN, "demo")
    return part


def _items(store: DictStore) -> list[dict]:
    ns = mrwq_namespace("demo")
    return [json.loads(v) for k, v in sorted(store.data.items()) if k.startswith(f"{ns}:item:")]


def test_a_too_late_click_goes_to_the_dlq_the_late_one_into_its_window(tmp_path: Path) -> None:
    io = FakeLaneIO()
    io.append(
        EDEN,
        0,
        [click("ann", T0 + 1_000), click("bob", T0 + 2_000), click("cat", T0 + 3_000)],
        timestamps=[T0 + 1_500, CLOSED + 1, CLOSED],  # on time, too late, late but allowed
    )
    rows = list(
        run_lane(
            flow_settings(tmp_path, definition=CLICKSTREAM), _part(TupleRange(EDEN, 0, 0, 3)), io
        )
    )
    assert [(r[3], r[4]) for r in rows] == [("acked", 2)]
    (dead,) = [decode_envelope(v) for v in io.produced[TOPICS.dlq]]
    assert (dead.offset, dead.timestamp_ms) == (1, CLOSED + 1)
    assert dead.error.startswith("poison: PoisonRecord: too late: event time 2026-01-01T00:00:02")
    items = _items(io.store)
    assert [(i["t"], parse_outcome_key(i["k"])) for i in items] == [
        (f"{EDEN}:0:0-3", ("applied", False, False)),
        (f"{EDEN}:0:1-2", ("dlq", False, True)),
    ]
    assert [(r["user"], r["window_start"]) for r in items[0]["v"]] == [
        ("ann", "2026-01-01T00:00:00+00:00"),
        ("cat", "2026-01-01T00:00:00+00:00"),
    ]


def test_a_replayed_click_is_judged_by_its_original_arrival(tmp_path: Path) -> None:
    """Re-produced to a replay topic, a record carries a new Kafka timestamp; the lane
    judges it by the envelope's (its Eden arrival), as the first attempt and reconcile do."""
    io = FakeLaneIO()
    late = Envelope(EDEN, 1, 41, click("ann", T0), 1, "earlier", 0.0, None, CLOSED)
    too_late = Envelope(EDEN, 1, 42, click("bob", T0), 1, "earlier", 0.0, None, CLOSED + 1)
    io.append(
        TOPICS.replay_b,
        0,
        [encode_envelope(late), encode_envelope(too_late)],
        timestamps=[CLOSED + 3_600_000] * 2,  # re-produced an hour later
    )
    part = _part(
        TupleRange(TOPICS.replay_b, 0, 0, 1), TupleRange(TOPICS.replay_b, 0, 1, 2), replay=True
    )
    rows = list(run_lane(flow_settings(tmp_path, definition=CLICKSTREAM), part, io))
    assert [r[3] for r in rows] == ["acked", "poison"]
    (dead,) = [decode_envelope(v) for v in io.produced[TOPICS.dlq]]
    assert (dead.offset, dead.timestamp_ms) == (42, CLOSED + 1)
    assert "too late" in dead.error
    assert [(i["t"], parse_outcome_key(i["k"])) for i in _items(io.store)] == [
        (f"{EDEN}:1:41-42", ("applied", True, False)),
        (f"{EDEN}:1:42-43", ("dlq", True, False)),
    ]


def test_a_transiently_failed_record_keeps_its_kafka_timestamp_in_the_replay_topic(
    tmp_path: Path,
) -> None:
    io = FakeLaneIO()
    io.append(EDEN, 0, [b"ok", b"BROKEN"], timestamps=[T0, T0 + 5])
    settings = flow_settings(tmp_path, definition="tests.spark.flow_def_poison")
    rows = list(run_lane(settings, _part(TupleRange(EDEN, 0, 0, 2)), io))
    assert [r[3] for r in rows] == ["replayed"]
    replayed = [decode_envelope(v) for v in io.produced[TOPICS.replay_a]]
    assert [(e.offset, e.timestamp_ms) for e in replayed] == [(0, T0), (1, T0 + 5)]
