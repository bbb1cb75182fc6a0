"""Where a failed tuple's records go: the failure-routing rules of the lanes, pure.

A failure is a :class:`~flowctl.pipelines.base.PoisonRecord`, a
:class:`~flowctl.spark.flow.deadline.TupleTimeout` or any other exception of the
pipeline's ``process``. The rules (docs/flow-control.md, "Replay"):

- a one-record Eden tuple whose record is poison goes to the DLQ at once;
- in a larger tuple every record goes to the From replay topic (the poison one too:
  replayed alone it fails again and is dead-lettered under its own one-record ``dlq``
  row, so the durable rows say where it went);
- a replayed record that is poison goes to the DLQ; one that fails otherwise gets one
  more attempt on its count (:meth:`~flowctl.core.replay.Backflow.fail_replayed`: From,
  or the DLQ after ``max_attempts``);
- a replay-topic record that is not an envelope goes to the DLQ with its raw bytes.

No I/O and no clock here: the caller passes ``now`` (epoch seconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flowctl.core.replay import Backflow, Envelope, Routed
from flowctl.core.spout import Outcome
from flowctl.pipelines.base import PoisonRecord
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
    return Outcome.DLQ if dead else Outcome.REPLAYED


def route_eden_failure(
    exc: BaseException,
    records: Sequence[Any],
    *,
    topic: str,
    from_topic: str,
    backflow: Backflow,
    now: float,
) -> Routing:
    """The records of an Eden tuple whose ``process`` raised ``exc``."""
    error = describe(exc)
    poison_at = exc.offset if isinstance(exc, PoisonRecord) else None
    single_poison = isinstance(exc, PoisonRecord) and len(records) == 1
    routed: list[Routed] = []
    for r in records:
        payload = r.value if r.value is not None else b""
        if single_poison:
            dead = Envelope(
                topic, r.partition, r.offset, payload, 1, f"poison: {error}", now, r.key
            )
            routed.append(Routed(backflow.topics.dlq, dead, True))
            continue
        why = error
        if poison_at is not None and r.offset != poison_at:
            why = f"replayed with the poison record's tuple: {error}"
        routed.append(
            backflow.fail_original(
                partition=r.partition,
                offset=r.offset,
                payload=payload,
                key=r.key,
                error=why,
                now=now,
                from_topic=from_topic,
            )
        )
    all_dead = bool(routed) and all(x.dead for x in routed)
    return Routing(_outcome(exc, all_dead), "dlq" if all_dead else "replayed", routed, error)


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
