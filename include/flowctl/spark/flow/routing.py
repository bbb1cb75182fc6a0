"""Where a failed tuple's records go: the failure-routing rules of the lanes, pure.

A failure is a :class:`~flowctl.pipelines.base.PoisonRecord`, a
:class:`~flowctl.spark.flow.deadline.TupleTimeout` or any other exception of the
pipeline's ``process``. The rules (docs/flow-control.md, "Replay"):

- an Eden tuple that fails is isolated in the lane (:mod:`flowctl.core.isolation`): a
  record proven poison goes to the DLQ at once (under a one-record ``dlq`` row nested in
  the tuple's row), the other records of a part that failed for another reason go to the
  From replay topic (:func:`route_isolated`);
- a replayed record that is poison goes to the DLQ; one that fails otherwise gets one
  more attempt on its count (:meth:`~flowctl.core.replay.Backflow.fail_replayed`: From,
  or the DLQ after ``max_attempts``);
- a replay-topic record that is not an envelope goes to the DLQ with its raw bytes.

No I/O and no clock here: the caller passes ``now`` (epoch seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from flowctl.core.isolation import Verdict
from flowctl.core.replay import Backflow, Envelope, Routed
from flowctl.core.spout_contract import Outcome
from flowctl.pipelines.base import PoisonRecord, Record
from flowctl.spark.flow.deadline import TupleTimeout


@dataclass(frozen=True)
class Routing:
    """A failed tuple's fate: its outcome, its MRWQ outcome key, its routed records."""

    outcome: Outcome
    key: str  # ``replayed`` or ``dlq`` (the MRWQ item's outcome)
    routed: list[Routed]
    error: str


def describe(exc: BaseException) -> str:
    """The error text of a failure, as stored in envelopes, items and status rows."""
    return f"{type(exc).__name__}: {exc}"


def _outcome(exc: BaseException, dead: bool) -> Outcome:
    if isinstance(exc, TupleTimeout):
        return Outcome.TIMED_OUT
    if isinstance(exc, PoisonRecord):
        return Outcome.POISON  # proven poison alone: data, not load (no window cut)
    return Outcome.DLQ if dead else Outcome.REPLAYED


def route_isolated(
    verdict: Verdict,
    records: Sequence[Record],
    *,
    topic: str,
    from_topic: str,
    backflow: Backflow,
    now: float,
) -> list[Routed]:
    """Where the records of an isolated Eden tuple go (``verdict.routes``, in order)."""
    routed: list[Routed] = []
    for route in verdict.routes:
        r = records[route.index]
        payload = r.value  # None for a tombstone: it stays one in the DLQ and on replay
        if route.dead:
            dead = Envelope(
                topic,
                r.partition,
                r.offset,
                payload,
                1,
                route.reason,
                now,
                r.key,
                _stamp(r),
                r.headers,
            )
            routed.append(Routed(backflow.topics.dlq, dead, True))
            continue
        routed.append(
            backflow.fail_original(
                partition=r.partition,
                offset=r.offset,
                payload=payload,
                key=r.key,
                error=route.reason,
                now=now,
                from_topic=from_topic,
                timestamp_ms=_stamp(r),
                headers=r.headers,
            )
        )
    return routed


def _stamp(record: Record) -> int | None:
    """The record's Kafka timestamp for its envelope (``None``/-1: the log has none)."""
    ts = record.timestamp_ms
    return ts if isinstance(ts, int) and ts >= 0 else None


def route_replay_failure(
    exc: BaseException, env: Envelope, *, from_topic: str, backflow: Backflow, now: float
) -> Routing:
    """A replayed record (its envelope ``env``) whose ``process`` raised ``exc``."""
    error = describe(exc)
    if isinstance(exc, PoisonRecord):
        dead = Envelope(
            env.topic,
            env.partition,
            env.offset,
            env.payload,
            env.attempt + 1,
            f"poison: {error}",
            now,
            env.key,
            env.timestamp_ms,
            env.headers,
        )
        routed = Routed(backflow.topics.dlq, dead, True)
    else:
        routed = backflow.fail_replayed(env, error=error, now=now, from_topic=from_topic)
    return Routing(
        _outcome(exc, routed.dead), "dlq" if routed.dead else "replayed", [routed], error
    )


def route_malformed(
    raw: bytes,
    error: str,
    *,
    topic: str,
    partition: int,
    offset: int,
    backflow: Backflow,
    now: float,
) -> Routing:
    """A replay-topic record that is not an envelope: to the DLQ, raw bytes kept."""
    routed = backflow.malformed(
        raw, topic=topic, partition=partition, offset=offset, error=error, now=now
    )
    return Routing(Outcome.DLQ, "dlq", [routed], error)
