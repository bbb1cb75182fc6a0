"""The typed memcached channels between planner, lanes and driver: round trips and refusals."""

from __future__ import annotations

import dataclasses
import json

import pytest

from flowctl.core.metrics_row import MetricsRow
from flowctl.core.spout_contract import LaneResult, Outcome
from flowctl.spark.flow import channels
from flowctl.spark.flow.channels import Control, LaneFeedback, SpoutState


def _through_json(data: object) -> object:
    return json.loads(json.dumps(data))  # what memcached stores and gives back


def test_keys_carry_the_topology() -> None:
    ns = channels.namespace("wc-blue-1")
    assert (channels.control_key(ns), channels.state_key(ns), channels.rows_key(ns)) == (
        "flow.wc-blue-1:ctl",
        "flow.wc-blue-1:state",
        "flow.wc-blue-1:rows",
    )


@pytest.mark.parametrize("control", [Control(True, 3), Control(False, None)])
def test_control_round_trips(control: Control) -> None:
    assert Control.decode(_through_json(control.encode())) == control


def test_spout_state_round_trips() -> None:
    state = SpoutState(
        at=1700000000.5,
        admit=True,
        rebuild=2,
        in_flight=4,
        buffered=1,
        pending_batches=1,
        mrwq=17,
        levels={"source": 0, "persist": 1},
        lanes=[{"lane": 0, "window": 8, "state": "NORMAL", "rate": None}],
        counters={"acked": 9, "failed": 1},
        at_risk=3,
        seq=12,
        warmups=0,
        log_empty=False,
    )
    assert SpoutState.decode(_through_json(state.encode())) == state
    assert state.encode() == dataclasses.asdict(state)  # the wire form of every field


def test_metrics_rows_round_trip() -> None:
    row = MetricsRow(
        topology="wc-blue-1",
        n=4,
        window_start=100.0,
        window_end=110.0,
        admitted=20,
        acked=18,
        failed=1,
        timed_out=1,
        replayed=2,
        dlq=0,
        records=180,
        records_per_s=18.0,
        latency_p50_s=0.2,
        latency_p99_s=None,
        backlog=40,
        backpressure_level=1,
        lanes=[{"lane": 0, "window": 8, "state": "SLOW", "in_flight": 2}],
        levels={"persist": 1},
        mrwq=5,
        repeat_failures=1,
        arrival_rate=12.5,
        lane_rate=None,
    )
    assert channels.decode_rows(_through_json(channels.encode_rows([row, row]))) == [row, row]
    assert channels.decode_rows(None) == []


def test_lane_feedback_round_trips_with_64_bit_edges() -> None:
    feedback = LaneFeedback(
        (
            LaneResult("p.eden:0:0-100", Outcome.ACKED, 2**64 - 3, 0.5, 100, latencies=(0.1,)),
            LaneResult(
                "p.eden:1:0-1",
                Outcome.DLQ,
                7,
                0.01,
                1,
                routed_records=1,
                dead_records=1,
                mrwq_epoch="abc",
                mrwq_seq=12,
                error="PoisonRecord: bad",
            ),
            LaneResult(
                "p.eden:2:0-9",
                Outcome.REPLAYED,
                error="KeyError: 'w'",
                trace="Traceback (most recent call last):\n  File \"p.py\", line 3\nKeyError: 'w'",
            ),
            LaneResult("p.replay.a:0:3-4", Outcome.HELD, not_before=1700000001.25),
        ),
        ends=(("p.eden", 0, 100), ("p.eden", 2, 2**40)),
    )
    assert LaneFeedback.decode(_through_json(feedback.encode())) == feedback


def test_lane_feedback_without_ends_decodes_and_a_bad_end_is_named() -> None:
    """A lane that reported no ends (or an older lane's feedback) decodes with none; a
    malformed end is refused naming the field and the value."""
    result = LaneResult("p.eden:0:0-1", Outcome.ACKED)
    plain = {"results": [LaneFeedback((result,)).encode()["results"][0]]}
    assert LaneFeedback.decode(plain) == LaneFeedback((result,))
    for bad in (["p.eden", 0], ["p.eden", -1, 5], [0, 0, 5], ["p.eden", 0, True]):
        with pytest.raises(ValueError, match=r"lane feedback\.ends: .* is not \[topic"):
            LaneFeedback.decode({**plain, "ends": [bad]})


@pytest.mark.parametrize(
    ("decode", "data", "message"),
    [
        (Control.decode, ["admit"], r"control must be a JSON object"),
        (Control.decode, {"admit": "yes"}, r"control\.admit='yes'"),
        (Control.decode, {"admit": True, "rebuild": 1.5}, r"control\.rebuild=1\.5"),
        (SpoutState.decode, {"at": 1.0}, r"state\.admit=None"),
        (MetricsRow.from_dict, {"n": True}, r"metrics row\.n=True is not a number"),
        (LaneFeedback.decode, {"results": {}}, r"lane feedback\.results=\{\}"),
        (LaneFeedback.decode, {"results": [{"outcome": "acked"}]}, r"lane result\.tuple_id"),
    ],
)
def test_a_foreign_message_is_refused_naming_the_field(
    decode: object, data: object, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        decode(data)  # type: ignore[operator]
