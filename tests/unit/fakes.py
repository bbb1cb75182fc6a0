"""In-memory fakes of the flow source's stores (unit tests only, no I/O).

:class:`DictStore` has memcached's semantics; :class:`FakeEnds` stands for the Kafka end
offsets the planner reads, :class:`FakeState` for its database
(:class:`flowctl.adapters.flow_state.FlowState`), :class:`FakeLaneIO` for a lane's Kafka
reads and writes (:class:`flowctl.spark.flow.lane.LaneIO`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from flowctl.adapters.flow_state import Durable, StartState
from flowctl.core.data_loss import LostRange
from flowctl.core.record import Record
from flowctl.core.replay import ReplaySnapshot
from flowctl.core.tuples import TopicPartition


class DictStore:
    """memcached semantics in a dict (unit tests only): incr never creates, add only if
    absent, get_many omits missing keys, set_many returns the keys not stored."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.refuse_sets = False

    def incr(self, key: str, delta: int) -> int | None:
        if key not in self.data:
            return None
        value = int(self.data[key]) + delta
        self.data[key] = str(value).encode()
        return value

    def add(self, key: str, value: bytes) -> bool:
        if key in self.data:
            return False
        self.data[key] = value
        return True

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]:
        return {k: self.data[k] for k in keys if k in self.data}

    def set_many(self, mapping: Mapping[str, bytes], expire_s: int = 0) -> list[str]:
        if self.refuse_sets:
            return list(mapping)
        self.data.update(mapping)
        return []

    def delete_many(self, keys: Sequence[str]) -> None:
        for k in keys:
            self.data.pop(k, None)

    def restart(self) -> None:
        self.data.clear()

    def set_json(self, key: str, value: Any, *, expire_s: int = 0) -> None:
        if self.set_many({key: json.dumps(value).encode()}):
            raise ConnectionError(f"set of {key!r} was not stored")

    def get_json(self, key: str) -> Any | None:
        raw = self.data.get(key)
        return None if raw is None else json.loads(raw)


class FakeEnds:
    """The log's end offsets per topic, set by the test."""

    def __init__(self, ends: Mapping[str, Mapping[int, int]] | None = None) -> None:
        self.ends: dict[str, dict[int, int]] = {t: dict(e) for t, e in (ends or {}).items()}
        self.closed = False
        #: Per read, whether the planner would have done with ``end_offsets()``.
        self.bounds_accepted: list[bool] = []
        #: The log's start offsets per topic (absent: every partition starts at 0).
        self.starts: dict[str, dict[int, int]] = {}
        #: Raised by every read while set (a broker that fails).
        self.error: Exception | None = None
        #: How many reads of the starts were made.
        self.start_reads = 0
        #: Per read, the ends the lanes had reported (``{(topic, partition): end}``).
        self.reported: list[dict[tuple[str, int], int]] = []
        #: The topics whose exact ends the test calls costly to read.
        self.costly_topics: set[str] = set()

    def latest_offsets_of(
        self,
        topics: Sequence[str],
        bounds_suffice: Callable[[str, dict[int, int]], bool] | None = None,
        may_defer: Collection[str] = (),
        reported: Mapping[tuple[str, int], int] | None = None,
    ) -> dict[str, dict[int, int]]:
        """Exact ends (a broker whose ``end_offsets()`` is exact); records whether the
        caller would have done with them, per read, for the first topic (Eden), and the
        ends the lanes reported."""
        self.reported.append(dict(reported or {}))
        if self.error is not None:
            raise self.error
        ends = {topic: dict(self.ends.get(topic, {})) for topic in topics}
        if bounds_suffice is not None:
            self.bounds_accepted.append(bounds_suffice(topics[0], ends[topics[0]]))
        return ends

    def costly(self, topics: Collection[str]) -> list[str]:
        return [t for t in topics if t in self.costly_topics]

    def log_starts_of(self, topic: str) -> dict[int, int]:
        self.start_reads += 1
        if self.error is not None:
            raise self.error
        starts = self.starts.get(topic, {})
        return {p: starts.get(p, 0) for p in self.ends.get(topic, {})}

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeState:
    """The planner's database: a checkpoint per partition, no gaps, the replay pointer."""

    checkpoints: dict[TopicPartition, int] = field(default_factory=dict)
    replay: ReplaySnapshot | None = None
    stored: list[ReplaySnapshot] = field(default_factory=list)
    builds: int = 0
    skipped: list[tuple[str, LostRange]] = field(default_factory=list)

    def start_state(self) -> StartState:
        self.builds += 1
        return StartState(dict(self.checkpoints), dict(self.checkpoints), [], self.replay)

    def durable(self) -> Durable:
        return Durable(dict(self.checkpoints), None)

    def store_replay(self, snap: ReplaySnapshot) -> None:
        self.stored.append(snap)
        self.replay = snap

    def skip(self, topology_id: str, lost: LostRange) -> int:
        """``on_data_loss = skip``: the range noted, the checkpoint moved over it."""
        tp = TopicPartition(lost.topic, lost.partition)
        self.skipped.append((topology_id, lost))
        self.checkpoints[tp] = max(self.checkpoints.get(tp, 0), lost.end)
        return self.checkpoints[tp]


class KafkaRecord(NamedTuple):
    """A record as :func:`flowctl.adapters.kafka_log.read_range` (kafka-python) yields it;
    :meth:`FakeLaneIO.read` hands it on as the lane's reader does, a :class:`Record`."""

    topic: str
    partition: int
    offset: int
    timestamp: int | None
    value: bytes | None
    key: bytes | None = None
    headers: list[tuple[str, bytes | None]] | None = None


class FakeLaneIO:
    """A lane's Kafka in memory: ``log[(topic, partition)]`` holds the values by offset."""

    def __init__(self, store: DictStore | None = None) -> None:
        self.store = store if store is not None else DictStore()
        self.log: dict[tuple[str, int], list[bytes]] = {}
        self.stamps: dict[tuple[str, int], list[int | None]] = {}  # Kafka timestamps
        #: each record's (key, headers) as a Kafka client yields them
        self.extras: dict[tuple[str, int], list[tuple[bytes | None, list[Any] | None]]] = {}
        self.produced: dict[str, list[bytes]] = {}
        self.fail_reads: set[tuple[str, int]] = set()
        self.fail_produce = False
        #: The log end per partition the last read saw (a fetch's high watermark).
        self.ends: dict[tuple[str, int], int] = {}

    def append(
        self,
        topic: str,
        partition: int,
        values: Sequence[bytes | None],
        timestamps: Sequence[int | None] | None = None,
        extras: Sequence[tuple[bytes | None, list[Any] | None]] | None = None,
    ) -> None:
        self.log.setdefault((topic, partition), []).extend(values)  # type: ignore[arg-type]
        stamps = list(timestamps) if timestamps is not None else [None] * len(values)
        self.stamps.setdefault((topic, partition), []).extend(stamps)
        more = list(extras) if extras is not None else [(None, None)] * len(values)
        self.extras.setdefault((topic, partition), []).extend(more)

    def read(self, entries: Sequence[Any]) -> dict[str, list[Any] | Exception]:
        out: dict[str, list[Any] | Exception] = {}
        self.ends = {}
        for e in entries:
            t = e.tuple
            if (t.topic, t.partition) in self.fail_reads:
                out[t.id] = ConnectionError(f"{t.topic}/{t.partition} unreachable")
                continue
            values = self.log.get((t.topic, t.partition), [])
            stamps = self.stamps.get((t.topic, t.partition), [])
            extras = self.extras.get((t.topic, t.partition), [])
            out[t.id] = [
                Record.of(KafkaRecord(t.topic, t.partition, o, stamps[o], values[o], *extras[o]))
                for o in range(t.start, min(t.end, len(values)))
            ]
            self.ends[(t.topic, t.partition)] = len(values)
        return out

    def log_ends(self) -> dict[tuple[str, int], int]:
        return self.ends

    def produce(self, topic: str, values: Sequence[bytes]) -> None:
        if self.fail_produce:
            raise ConnectionError(f"{topic} unreachable")
        self.produced.setdefault(topic, []).extend(values)
