"""SPEC D: the Eden / From / To state machine, the envelope, the backflow and the DLQ."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.backoff import FlumeBackoff, HadoopBackoff
from flowctl.core.replay import (
    Backflow,
    Envelope,
    EnvelopeError,
    ReplayStateMachine,
    ReplayTopics,
    decode_envelope,
    encode_envelope,
)

P = "wc"
A, B, EDEN, DLQ = "wc.replay.a", "wc.replay.b", "wc.eden", "wc.dlq"

# --- topics -----------------------------------------------------------------------------------


def test_topic_names_follow_the_pipeline() -> None:
    assert ReplayTopics(P).all == (EDEN, A, B, DLQ)


@pytest.mark.parametrize("bad", ["", "word count", "a/b", "x" * 245])
def test_bad_pipeline_names_are_rejected(bad: str) -> None:
    with pytest.raises(ValueError, match="pipeline"):
        ReplayTopics(bad)


# --- the read policy ----------------------------------------------------------------------------


def test_first_read_is_eden_and_swaps_the_pointer() -> None:
    m = ReplayStateMachine(P)
    assert (m.from_topic, m.to_topic) == (A, B)
    plan = m.next_read({}, 0.0)
    assert (plan.source, plan.topic, plan.swapped, plan.from_topic) == ("eden", EDEN, True, B)
    assert (m.from_topic, m.to_topic) == (B, A)


def test_failures_become_readable_after_the_next_swap() -> None:
    m = ReplayStateMachine(P)
    m.next_read({}, 0.0)  # From = b; this batch's failures go to b
    plan = m.next_read({(B, 0): 3, (A, 0): 0}, 1.0)  # To = a is empty: Eden, swap
    assert (plan.source, plan.from_topic, m.to_topic) == ("eden", A, B)
    plan = m.next_read({(B, 0): 3, (A, 0): 0}, 2.0)
    assert (plan.source, plan.topic, plan.ranges, plan.from_topic) == ("to", B, ((0, 0, 3),), A)


def test_to_is_read_until_empty_before_eden() -> None:
    m = ReplayStateMachine(P)
    m.next_read({}, 0.0)
    m.next_read({}, 0.0)  # now To = b
    assert m.next_read({(B, 0): 2}, 0.0).source == "to"
    plan = m.next_read({(B, 0): 5}, 0.0)  # more arrived late in b: still To
    assert plan.ranges == ((0, 2, 5),)
    assert m.next_read({(B, 0): 5}, 0.0).swapped is True


def test_max_records_limits_a_to_read_across_partitions() -> None:
    m = ReplayStateMachine(P)
    m.next_read({}, 0.0)
    m.next_read({}, 0.0)
    plan = m.next_read({(B, 0): 4, (B, 1): 4}, 0.0, max_records=6)
    assert plan.ranges == ((0, 0, 4), (1, 0, 2))
    assert plan.records == 6
    assert m.next_read({(B, 0): 4, (B, 1): 4}, 0.0).ranges == ((1, 2, 4),)


def test_a_held_record_keeps_eden_flowing_without_a_swap() -> None:
    m = ReplayStateMachine(P)
    m.next_read({}, 0.0)
    m.next_read({}, 0.0)
    m.next_read({(B, 0): 3}, 10.0)
    m.hold(B, 0, 1, not_before=100.0)  # the reader stopped at offset 1
    plan = m.next_read({(B, 0): 3}, 50.0)
    assert (plan.source, plan.swapped, plan.held_until) == ("eden", False, 100.0)
    assert m.to_topic == B
    assert m.next_read({(B, 0): 3}, 100.0).ranges == ((0, 1, 3),)


def test_commit_cannot_pass_the_admitted_position() -> None:
    m = ReplayStateMachine(P)
    m.next_read({}, 0.0)
    m.next_read({}, 0.0)
    m.next_read({(B, 0): 3}, 0.0)
    with pytest.raises(ValueError, match=r"next_offset 4 is beyond the admitted position 3"):
        m.commit(B, 0, 4)


def test_commit_rejects_a_non_replay_topic() -> None:
    with pytest.raises(ValueError, match=r"topic must be 'wc\.replay\.a' or 'wc\.replay\.b'"):
        ReplayStateMachine(P).commit(EDEN, 0, 1)


def test_restore_rereads_what_was_admitted_but_not_committed() -> None:
    m = ReplayStateMachine(P)
    m.next_read({}, 0.0)
    m.next_read({}, 0.0)
    m.next_read({(B, 0): 5}, 0.0)
    m.commit(B, 0, 2)
    snap = pickle.loads(pickle.dumps(m.snapshot()))
    resumed = ReplayStateMachine(P, snapshot=snap)
    assert (resumed.from_topic, resumed.swaps) == (A, 2)
    assert resumed.next_read({(B, 0): 5}, 0.0).ranges == ((0, 2, 5),)


def test_restore_rejects_another_pipelines_snapshot() -> None:
    snap = ReplayStateMachine("other").snapshot()
    with pytest.raises(ValueError, match="snapshot of pipeline 'other' restored into 'wc'"):
        ReplayStateMachine(P, snapshot=snap)


# --- the envelope -------------------------------------------------------------------------------


def envelope(**kw) -> Envelope:
    base = {
        "topic": EDEN,
        "partition": 1,
        "offset": 42,
        "payload": b"\x00hello\xff",
        "attempt": 2,
        "error": "ValueError: bad row",
        "not_before": 12.5,
        "key": b"k",
    }
    return Envelope(**{**base, **kw})


def test_envelope_round_trips() -> None:
    env = envelope()
    assert decode_envelope(encode_envelope(env)) == env
    assert decode_envelope(encode_envelope(envelope(key=None))).key is None


def test_envelope_is_a_small_json_object() -> None:
    data = json.loads(encode_envelope(envelope()))
    assert data == {
        "v": 1,
        "topic": EDEN,
        "partition": 1,
        "offset": 42,
        "key": "aw==",
        "payload": "AGhlbGxv/w==",
        "attempt": 2,
        "error": "ValueError: bad row",
        "not_before": 12.5,
    }


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", "not UTF-8 JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"v": 1}', r"missing field\(s\) \['topic'"),
    ],
)
def test_malformed_envelopes_say_what_is_wrong(raw: bytes, message: str) -> None:
    with pytest.raises(EnvelopeError, match=message):
        decode_envelope(raw)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("attempt", 0, "'attempt' must be an int >= 1, got 0"),
        ("payload", "%%%", "'payload' is not valid base64"),
        ("v", 9, "'v' must be 1, got 9"),
        ("not_before", None, "'not_before' must be a finite number"),
        ("partition", -1, "'partition' must be an int >= 0"),
    ],
)
def test_a_bad_envelope_field_is_named(field: str, value: object, message: str) -> None:
    data = envelope().to_dict()
    data[field] = value
    with pytest.raises(EnvelopeError, match=message):
        decode_envelope(json.dumps(data).encode())


# --- the backflow --------------------------------------------------------------------------------


def backflow(max_attempts: int = 3) -> Backflow:
    return Backflow(
        ReplayTopics(P), max_attempts=max_attempts, backoff=HadoopBackoff(1.0, 10, jitter=False)
    )


def test_a_first_failure_goes_to_from_with_backoff() -> None:
    routed = backflow().fail_original(
        partition=0, offset=7, payload=b"x", key=None, error="timeout", now=100.0, from_topic=B
    )
    assert (routed.topic, routed.dead) == (B, False)
    env = routed.envelope
    assert (env.topic, env.offset, env.attempt, env.error, env.not_before) == (
        EDEN,
        7,
        1,
        "timeout",
        102.0,
    )


def test_replays_are_spaced_by_growing_backoff() -> None:
    flow = backflow(max_attempts=5)
    first = flow.fail_original(
        partition=0, offset=7, payload=b"x", key=None, error="e", now=0.0, from_topic=B
    ).envelope
    second = flow.fail_replayed(first, error="e", now=10.0, from_topic=A).envelope
    assert (second.attempt, second.not_before) == (2, 14.0)


def test_after_max_attempts_a_record_goes_to_the_dlq_with_its_error() -> None:
    flow = backflow(max_attempts=2)
    first = flow.fail_original(
        partition=3, offset=9, payload=b"x", key=b"k", error="e1", now=0.0, from_topic=B
    ).envelope
    routed = flow.fail_replayed(first, error="KeyError: 'w'", now=5.0, from_topic=A)
    assert (routed.topic, routed.dead) == (DLQ, True)
    env = routed.envelope
    assert (env.topic, env.partition, env.offset, env.key, env.attempt) == (EDEN, 3, 9, b"k", 2)
    assert env.error == "gave up after 2 attempt(s): KeyError: 'w'"


def test_max_attempts_one_sends_the_first_failure_to_the_dlq() -> None:
    routed = backflow(max_attempts=1).fail_original(
        partition=0, offset=0, payload=b"", key=None, error="e", now=0.0, from_topic=A
    )
    assert routed.dead


def test_a_backoff_that_gives_up_early_sends_to_the_dlq() -> None:
    flow = Backflow(ReplayTopics(P), max_attempts=10, backoff=HadoopBackoff(1.0, 0))
    routed = flow.fail_original(
        partition=0, offset=0, payload=b"", key=None, error="e", now=0.0, from_topic=A
    )
    assert routed.topic == DLQ


def test_a_malformed_record_goes_to_the_dlq_with_its_raw_bytes() -> None:
    routed = backflow().malformed(
        b"\xffgarbage", topic=A, partition=0, offset=4, error="not UTF-8 JSON", now=1.0
    )
    assert (routed.topic, routed.envelope.payload, routed.envelope.topic) == (
        DLQ,
        b"\xffgarbage",
        A,
    )
    assert decode_envelope(encode_envelope(routed.envelope)) == routed.envelope


def test_backflow_rejects_an_unknown_from_topic() -> None:
    with pytest.raises(ValueError, match="from_topic must be"):
        backflow().fail_original(
            partition=0, offset=0, payload=b"", key=None, error="e", now=0.0, from_topic=EDEN
        )


# --- a whole stream with poison records ------------------------------------------------


def run_stream(n: int, fails: dict[int, int], max_attempts: int, batch: int):
    """Drive the machine over an in-memory log; ``fails[offset]`` = times it fails first."""
    log: dict[str, list[bytes]] = {A: [], B: [], DLQ: []}
    m = ReplayStateMachine(P)
    flow = Backflow(ReplayTopics(P), max_attempts=max_attempts, backoff=FlumeBackoff(1.0, 4.0))
    failures_left = dict(fails)
    acked: list[int] = []
    eden_pos, now = 0, 0.0

    def process(offset: int) -> str | None:
        if failures_left.get(offset, 0) > 0:
            failures_left[offset] -= 1
            return f"boom at {offset}"
        acked.append(offset)
        return None

    for _ in range(10_000):
        ends = {(t, 0): len(log[t]) for t in (A, B)}
        if eden_pos == n and all(m.position(t, 0) == e for (t, _), e in ends.items()):
            break
        plan = m.next_read(ends, now)
        if plan.source == "eden":
            for offset in range(eden_pos, min(n, eden_pos + batch)):
                error = process(offset)
                if error:
                    r = flow.fail_original(
                        partition=0,
                        offset=offset,
                        payload=b"p",
                        key=None,
                        error=error,
                        now=now,
                        from_topic=plan.from_topic,
                    )
                    log[r.topic].append(encode_envelope(r.envelope))
            eden_pos = min(n, eden_pos + batch)
        else:
            for partition, start, end in plan.ranges:
                stop = end
                for off in range(start, end):
                    env = decode_envelope(log[plan.topic][off])
                    if not env.eligible(now):
                        m.hold(plan.topic, partition, off, env.not_before)
                        stop = off
                        break
                    error = process(env.offset)
                    if error:
                        r = flow.fail_replayed(
                            env, error=error, now=now, from_topic=plan.from_topic
                        )
                        log[r.topic].append(encode_envelope(r.envelope))
                m.commit(plan.topic, partition, stop)
        now += 1.0
    else:
        raise AssertionError("stream did not drain")
    return acked, [decode_envelope(x) for x in log[DLQ]]


def test_a_poison_record_goes_to_the_dlq_and_the_stream_goes_on() -> None:
    acked, dead = run_stream(20, {5: 99}, max_attempts=3, batch=4)
    assert sorted(acked) == [i for i in range(20) if i != 5]
    assert [(d.offset, d.attempt) for d in dead] == [(5, 3)]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    fails=st.dictionaries(st.integers(0, 39), st.integers(1, 6), max_size=15),
    max_attempts=st.integers(1, 5),
    batch=st.integers(1, 8),
)
def test_every_record_is_acked_once_or_dead_lettered(
    n: int, fails: dict[int, int], max_attempts: int, batch: int
) -> None:
    fails = {k: v for k, v in fails.items() if k < n}
    acked, dead = run_stream(n, fails, max_attempts, batch)
    dead_offsets = [d.offset for d in dead]
    expected_dead = sorted(k for k, v in fails.items() if v >= max_attempts)
    assert sorted(dead_offsets) == expected_dead
    assert sorted(acked) == sorted(set(range(n)) - set(expected_dead))
    assert all(d.attempt == max_attempts for d in dead)


def test_an_envelope_carries_the_records_kafka_timestamp_through_every_replay() -> None:
    """A re-produced record gets a new Kafka timestamp: its original arrival must travel
    in the envelope (clickstream judges lateness by it)."""
    flow = Backflow(ReplayTopics(P), max_attempts=3, backoff=FlumeBackoff(0.25, 4.0))
    first = flow.fail_original(
        partition=0,
        offset=5,
        payload=b"x",
        key=None,
        error="boom",
        now=1.0,
        from_topic=A,
        timestamp_ms=1_767_225_600_000,
    )
    again = flow.fail_replayed(first.envelope, error="boom", now=2.0, from_topic=B)
    dead = flow.fail_replayed(again.envelope, error="boom", now=3.0, from_topic=A)
    assert (first.dead, again.dead, dead.dead) == (False, False, True)
    for routed in (first, again, dead):
        assert decode_envelope(encode_envelope(routed.envelope)).timestamp_ms == 1_767_225_600_000


def test_an_envelope_written_before_timestamps_decodes_without_one() -> None:
    data = json.loads(encode_envelope(envelope()))
    assert "timestamp_ms" not in data
    assert decode_envelope(json.dumps(data).encode()).timestamp_ms is None
    with pytest.raises(EnvelopeError, match="'timestamp_ms' must be an int >= 0"):
        decode_envelope(json.dumps({**data, "timestamp_ms": "noon"}).encode())
