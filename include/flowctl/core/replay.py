"""Stateless topology data replay: Eden / From / To (SPEC D, seed 002 section 4.2).

Three source queues: Eden (the original topic) and two replay queues, From and To.
While To is non-empty the source reads To; when To is empty it reads Eden and swaps To
and From (a pointer swap: what failed during the last period becomes readable). A
backflow writes every failed tuple (failure or timeout) to From.

For Kafka the queues are the topics ``<pipeline>.eden``, ``<pipeline>.replay.a`` and
``<pipeline>.replay.b``; which replay topic is From is a pointer. This module is the
state machine over topic names and offsets, with no I/O: the driver passes the end
offsets it observed and gets a :class:`ReadPlan`; a :class:`ReplaySnapshot` (pointer and
durable positions) is what the control plane stores.

**beyond**: every replayed record travels in an :class:`Envelope` carrying its origin,
payload, attempt count, last error and ``not_before``. :class:`Backflow` routes a failure
to From with a backoff delay (SPEC G), or, after ``max_attempts``, to ``<pipeline>.dlq``
with the error; an undecodable record goes to the DLQ as raw bytes. A poison record
therefore never stops the stream and is never silently dropped.

Offsets in a replay topic are never deleted: "clearing" From after a swap is just the
read position reaching the end, kept per topic across swaps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from .backoff import BackoffPolicy
from .envelope import Envelope, EnvelopeError, decode_envelope, encode_envelope
from .record import Headers

__all__ = [
    "DLQ_SUFFIX",
    "EDEN_SUFFIX",
    "REPLAY_A_SUFFIX",
    "REPLAY_B_SUFFIX",
    "Backflow",
    "Envelope",
    "EnvelopeError",
    "ReadPlan",
    "ReplaySnapshot",
    "ReplayStateMachine",
    "ReplayTopics",
    "Routed",
    "decode_envelope",
    "encode_envelope",
    "replay_quota",
]

EDEN_SUFFIX = ".eden"
REPLAY_A_SUFFIX = ".replay.a"
REPLAY_B_SUFFIX = ".replay.b"
DLQ_SUFFIX = ".dlq"

_TOPIC_CHARS = re.compile(r"^[A-Za-z0-9._-]+$")
_MAX_TOPIC_LEN = 249  # Kafka's limit
MAX_ERROR_CHARS = 2000  # keeps a replayed record small even with a long traceback


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _check_time(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def replay_quota(room: int, eden_demand: int, share: float) -> int:
    """How many of this batch's ``room`` free slots the To replay topic may take (beyond).

    SPEC D reads To before Eden. With every slot a one-record replay, a storm of failures
    would then starve fresh input: Eden waits while lanes work through replays one record
    per slot. The window is shared instead:

    * Eden idle (``eden_demand`` = 0 tuples it could use now): To may take every slot;
    * Eden with input: To takes at most ``floor(share * room)`` slots (at least one when
      ``room`` is 2 or more, so replays always progress), plus whatever Eden cannot use
      (``room - eden_demand``).

    Eden is never starved by replays (it keeps ``room - floor(share * room)`` slots) and
    To is never starved by Eden; a single free slot goes to Eden (replayed records already
    wait out a backoff, fresh input has not been delayed yet).
    """
    _check_int("room", room, 0)
    _check_int("eden_demand", eden_demand, 0)
    if isinstance(share, bool) or not isinstance(share, int | float) or not 0 < share <= 1:
        raise ValueError(f"share must be a number in (0, 1], got {share!r}")
    if eden_demand == 0:
        return room
    reserved = max(1, math.floor(share * room)) if room >= 2 else 0
    return min(room, max(reserved, room - eden_demand))


@dataclass(frozen=True)
class ReplayTopics:
    """The four topic names of one pipeline."""

    pipeline: str

    def __post_init__(self) -> None:
        name = self.pipeline
        if not isinstance(name, str) or not _TOPIC_CHARS.match(name):
            raise ValueError(
                f"pipeline must be a non-empty name of letters, digits, '.', '_' or '-', "
                f"got {name!r}"
            )
        if len(name) + len(REPLAY_A_SUFFIX) > _MAX_TOPIC_LEN:
            raise ValueError(f"pipeline {name!r} is too long for Kafka topic names")

    @property
    def eden(self) -> str:
        return self.pipeline + EDEN_SUFFIX

    @property
    def replay_a(self) -> str:
        return self.pipeline + REPLAY_A_SUFFIX

    @property
    def replay_b(self) -> str:
        return self.pipeline + REPLAY_B_SUFFIX

    @property
    def dlq(self) -> str:
        return self.pipeline + DLQ_SUFFIX

    @property
    def all(self) -> tuple[str, str, str, str]:
        """Every topic to create on the first run."""
        return (self.eden, self.replay_a, self.replay_b, self.dlq)


# --- backflow ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Routed:
    """Where a failed record goes: ``topic`` (From or the DLQ) and the envelope to write."""

    topic: str
    envelope: Envelope
    dead: bool


class Backflow:
    """The backflow thread's decision, as a pure function of the failure.

    ``max_attempts`` is the number of processing attempts a record gets in all (the
    first read from Eden included). A failure below it goes to From with
    ``not_before = now + backoff.delay(attempt)``; the failure that reaches it, or a
    backoff policy that gives up earlier, goes to the DLQ with the error.
    """

    def __init__(self, topics: ReplayTopics, *, max_attempts: int, backoff: BackoffPolicy) -> None:
        self.topics = topics
        self.max_attempts = _check_int("max_attempts", max_attempts, 1)
        self.backoff = backoff

    def _route(self, base: Envelope, error: str, now: float, from_topic: str) -> Routed:
        if from_topic not in (self.topics.replay_a, self.topics.replay_b):
            raise ValueError(
                f"from_topic must be {self.topics.replay_a!r} or {self.topics.replay_b!r}, "
                f"got {from_topic!r}"
            )
        error = error[:MAX_ERROR_CHARS]
        attempt = base.attempt
        wait = None if attempt >= self.max_attempts else self.backoff.delay(attempt)
        if wait is None:
            why = f"gave up after {attempt} attempt(s): {error}"[:MAX_ERROR_CHARS]
            dead = Envelope(
                base.topic,
                base.partition,
                base.offset,
                base.payload,
                attempt,
                why,
                now,
                base.key,
                base.timestamp_ms,
                base.headers,
            )
            return Routed(self.topics.dlq, dead, True)
        again = Envelope(
            base.topic,
            base.partition,
            base.offset,
            base.payload,
            attempt,
            error,
            now + wait,
            base.key,
            base.timestamp_ms,
            base.headers,
        )
        return Routed(from_topic, again, False)

    def fail_original(
        self,
        *,
        partition: int,
        offset: int,
        payload: bytes | None,
        key: bytes | None,
        error: str,
        now: float,
        from_topic: str,
        timestamp_ms: int | None = None,
        headers: Headers = (),
    ) -> Routed:
        """A record read from Eden failed or timed out: its first failed attempt.

        ``timestamp_ms``, ``headers``: the record's own, carried to every replay
        (``payload`` ``None``: a tombstone).
        """
        _check_time("now", now)
        first = Envelope(
            self.topics.eden, partition, offset, payload, 1, error, now, key, timestamp_ms, headers
        )
        return self._route(first, error, now, from_topic)

    def fail_replayed(
        self, envelope: Envelope, *, error: str, now: float, from_topic: str
    ) -> Routed:
        """A replayed record failed again: one more attempt on its count."""
        _check_time("now", now)
        counted = Envelope(
            envelope.topic,
            envelope.partition,
            envelope.offset,
            envelope.payload,
            envelope.attempt + 1,
            error,
            now,
            envelope.key,
            envelope.timestamp_ms,
            envelope.headers,
        )
        return self._route(counted, error, now, from_topic)

    def malformed(
        self, raw: bytes, *, topic: str, partition: int, offset: int, error: str, now: float
    ) -> Routed:
        """A replay-topic record that is not an envelope: straight to the DLQ, raw bytes kept.

        The envelope's origin is the replay-topic position where it was found.
        """
        _check_time("now", now)
        why = f"malformed envelope: {error}"[:MAX_ERROR_CHARS]
        dead = Envelope(topic, partition, offset, bytes(raw), self.max_attempts, why, now)
        return Routed(self.topics.dlq, dead, True)


# --- the read state machine -------------------------------------------------------------------

TopicPartition = tuple[str, int]


@dataclass(frozen=True)
class ReadPlan:
    """What one micro-batch reads.

    ``source == "to"``: read ``ranges`` (``(partition, start, end)``, end exclusive) of
    ``topic`` (To). ``source == "eden"``: read Eden; the spout picks the ranges (windows,
    checkpoint). Either way failures of this batch go to ``from_topic``. ``swapped`` says
    this plan swapped the pointer; ``held_until`` is set when To has records that are not
    yet eligible (backoff), the earliest time one becomes eligible.
    """

    source: Literal["to", "eden"]
    topic: str
    ranges: tuple[tuple[int, int, int], ...]
    from_topic: str
    swapped: bool
    held_until: float | None = None

    @property
    def records(self) -> int:
        return sum(end - start for _, start, end in self.ranges)


@dataclass(frozen=True)
class ReplaySnapshot:
    """The pointer and the durable read positions: what the control plane keeps.

    ``positions`` holds ``(topic, partition, next offset)`` of committed replay reads; a
    restart resumes there, so anything admitted but not committed is read again.
    """

    pipeline: str
    from_topic: str
    positions: tuple[tuple[str, int, int], ...]
    swaps: int


class ReplayStateMachine:
    """The Eden / From / To read policy over offsets.

    Driver loop, once per micro-batch:

    1. ``plan = machine.next_read(ends, now)`` with the end offsets of To's partitions
       (every partition of To: a partition left out counts as empty). Reading To admits
       the planned ranges; reading Eden with an empty To swaps the pointer.
    2. The reader processes the ranges; a record whose envelope is not yet eligible stops
       its partition: report it with ``hold(topic, partition, offset, not_before)``.
    3. When the batch's outcome is durable: ``commit(topic, partition, next_offset)``.
    4. Persist :meth:`snapshot` in the control plane (after commits, before the next plan
       is acted on); :meth:`restore` it on start.
    """

    def __init__(self, pipeline: str, *, snapshot: ReplaySnapshot | None = None) -> None:
        self.topics = ReplayTopics(pipeline)
        self._from = self.topics.replay_a
        self._admitted: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._holds: dict[TopicPartition, tuple[int, float]] = {}
        self.swaps = 0
        if snapshot is not None:
            self.restore(snapshot)

    @property
    def from_topic(self) -> str:
        return self._from

    @property
    def to_topic(self) -> str:
        a, b = self.topics.replay_a, self.topics.replay_b
        return b if self._from == a else a

    def position(self, topic: str, partition: int) -> int:
        """Next offset to admit from a replay topic partition."""
        return self._admitted.get((topic, partition), 0)

    def committed(self, topic: str, partition: int) -> int:
        return self._committed.get((topic, partition), 0)

    def _check_replay_tp(self, topic: str, partition: int) -> TopicPartition:
        if topic not in (self.topics.replay_a, self.topics.replay_b):
            raise ValueError(
                f"topic must be {self.topics.replay_a!r} or {self.topics.replay_b!r}, got {topic!r}"
            )
        _check_int("partition", partition, 0)
        return topic, partition

    def next_read(
        self, ends: Mapping[TopicPartition, int], now: float, *, max_records: int | None = None
    ) -> ReadPlan:
        """Decide this batch's source; admits To ranges or swaps the pointer (see class doc)."""
        _check_time("now", now)
        if max_records is not None:
            _check_int("max_records", max_records, 1)
        to = self.to_topic
        ready: list[tuple[int, int, int]] = []
        held: list[float] = []
        for (topic, partition), end in sorted(ends.items()):
            if topic != to:
                continue
            _check_int(f"ends[{topic!r}, {partition}]", end, 0)
            pos = self.position(topic, partition)
            if end <= pos:
                continue
            hold = self._holds.get((topic, partition))
            if hold is not None and hold[0] == pos and hold[1] > now:
                held.append(hold[1])
                continue
            ready.append((partition, pos, end))
        if ready:
            budget = max_records
            ranges = []
            for partition, start, end in ready:
                if budget is not None:
                    if budget == 0:
                        break
                    end = min(end, start + budget)
                    budget -= end - start
                ranges.append((partition, start, end))
                self._admitted[(to, partition)] = end
            return ReadPlan("to", to, tuple(ranges), self._from, False)
        if held:
            # To is not empty, only not yet eligible: keep Eden flowing, do not swap.
            return ReadPlan("eden", self.topics.eden, (), self._from, False, min(held))
        self._from = to
        self.swaps += 1
        return ReadPlan("eden", self.topics.eden, (), self._from, True)

    def hold(self, topic: str, partition: int, offset: int, not_before: float) -> None:
        """The reader stopped at ``offset``: that record is not eligible before ``not_before``.

        The partition's position goes back to ``offset`` so the record is read again, and
        :meth:`next_read` skips the partition until ``not_before``.
        """
        tp = self._check_replay_tp(topic, partition)
        _check_int("offset", offset, self.committed(topic, partition))
        if offset > self.position(topic, partition):
            raise ValueError(
                f"offset {offset} is beyond the admitted position "
                f"{self.position(topic, partition)} of {topic}[{partition}]"
            )
        self._admitted[tp] = offset
        self._holds[tp] = (offset, _check_time("not_before", not_before))

    def commit(self, topic: str, partition: int, next_offset: int) -> None:
        """Reads before ``next_offset`` are durably handled (acked, re-queued or dead)."""
        tp = self._check_replay_tp(topic, partition)
        _check_int("next_offset", next_offset, 0)
        if next_offset > self.position(topic, partition):
            raise ValueError(
                f"next_offset {next_offset} is beyond the admitted position "
                f"{self.position(topic, partition)} of {topic}[{partition}]"
            )
        self._committed[tp] = max(self._committed.get(tp, 0), next_offset)

    def snapshot(self) -> ReplaySnapshot:
        positions = tuple(sorted((t, p, o) for (t, p), o in self._committed.items()))
        return ReplaySnapshot(self.topics.pipeline, self._from, positions, self.swaps)

    def restore(self, snapshot: ReplaySnapshot) -> None:
        """Resume from durable state: admitted positions fall back to committed ones."""
        if snapshot.pipeline != self.topics.pipeline:
            raise ValueError(
                f"snapshot of pipeline {snapshot.pipeline!r} restored into {self.topics.pipeline!r}"
            )
        if snapshot.from_topic not in (self.topics.replay_a, self.topics.replay_b):
            raise ValueError(f"snapshot from_topic is not a replay topic: {snapshot.from_topic!r}")
        committed: dict[TopicPartition, int] = {}
        for topic, partition, offset in snapshot.positions:
            committed[self._check_replay_tp(topic, partition)] = _check_int(
                f"position of {topic}[{partition}]", offset, 0
            )
        self._from = snapshot.from_topic
        self._committed = committed
        self._admitted = dict(committed)
        self._holds = {}
        self.swaps = _check_int("snapshot.swaps", snapshot.swaps, 0)
