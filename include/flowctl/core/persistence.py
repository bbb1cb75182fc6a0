"""Delayed persistence queue: the MRWQ over a memcached-shaped store (SPEC F, seed 002 Algorithm 3).

The last stage appends results to a memory read-write queue (MRWQ) and reports success at
once; a separate flusher moves the queue to the database in batches when its length
reaches ``maxLength`` or ``updateTime`` has passed since the last flush. Disk IO leaves the
processing path.

The queue lives in a :class:`Store` (memcached through an adapter), as in the paper's final
version, so a worker crash loses nothing:

- ``<ns>:tail`` is a counter; writers take sequence numbers with one ``incr`` per batch.
- ``<ns>:item:<seq>`` holds one item: its tuple id, idempotency key, value and the epoch.
- ``<ns>:epoch`` is a random token created with the queue; a memcached restart loses it,
  so the flusher sees a different (or no) token and knows items were lost.
- ``<ns>:head`` is the next sequence number to flush, so a new flusher can resume.

The flusher reads contiguous sequence numbers from ``head``. A missing item (evicted,
lost in a restart, or a writer that died between ``incr`` and ``set``) is never skipped:
once it has been missing for ``gap_grace_s`` (a live writer's ``set`` lands well within
it) the flush reports a :class:`Gap` ("gap at seq N, replay from the durable
checkpoint"), flushes nothing past it, and keeps reporting it until :meth:`MrwqFlusher.resync`.

Every flush returns the tuple ids now durable (the durable ack, SPEC A): a tuple's items
are appended together, so it is durable when its last item is flushed. The database write
is idempotent by item key (:class:`Sink`), so a replay after a gap never double-counts.
"""

from __future__ import annotations

import json
import logging
import math
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from .clock import Clock

__all__ = [
    "OUTCOMES",
    "REPLAY_SUFFIX",
    "FlushPolicy",
    "FlushResult",
    "FlusherSnapshot",
    "Gap",
    "MrwqFlusher",
    "MrwqWriteError",
    "MrwqWriter",
    "QueueItem",
    "Sink",
    "Store",
    "head_key",
    "item_key",
    "mrwq_namespace",
    "mrwq_result",
    "parse_outcome_key",
    "queue_length",
    "read_epoch",
]

_log = logging.getLogger(__name__)

_NAMESPACE = re.compile(r"^[A-Za-z0-9._:-]{1,200}$")  # memcached keys: <= 250 bytes, no spaces


class Store(Protocol):
    """The minimal memcached-shaped store the MRWQ needs. Values are bytes.

    - ``incr(key, delta)``: atomically add ``delta`` (>= 0) to the decimal counter at
      ``key`` and return the new value; return ``None`` if the key does not exist (it
      never creates one). ``delta == 0`` reads the counter.
    - ``add(key, value)``: store only if ``key`` is absent; True if stored. Of concurrent
      adds exactly one wins.
    - ``get_many(keys)``: the values of the keys that exist; missing keys (never set,
      evicted, lost in a restart) are absent from the result, never ``None`` values.
    - ``set_many(mapping)``: store every pair; return the keys that could not be stored
      (an empty list means all were stored).
    - ``delete_many(keys)``: delete; absent keys are not an error.

    Any call may raise when the store is unreachable; the caller retries with backoff
    (SPEC G).
    """

    def incr(self, key: str, delta: int) -> int | None: ...

    def add(self, key: str, value: bytes) -> bool: ...

    def get_many(self, keys: Sequence[str]) -> dict[str, bytes]: ...

    def set_many(self, mapping: Mapping[str, bytes]) -> list[str]: ...

    def delete_many(self, keys: Sequence[str]) -> None: ...


@dataclass(frozen=True)
class QueueItem:
    """One result in the queue. ``key`` is its idempotency key (``None`` marks a tuple
    that produced no result: nothing is written, but it still becomes durable)."""

    seq: int
    tuple_id: str
    key: str | None
    value: Any
    last: bool


class Sink(Protocol):
    """The database side of a flush (SQL adapter).

    ``write_batch(items)`` must make every item durable before returning, and be
    idempotent by ``item.key``: writing an item whose key is already stored must leave the
    stored result as if it had been written once. It raises on failure; the flusher then
    keeps the batch and the next flush writes it again.
    """

    def write_batch(self, items: Sequence[QueueItem]) -> None: ...


class MrwqWriteError(RuntimeError):
    """An append could not be stored; the tuples must fail (and be replayed)."""


#: A tuple's outcome in its MRWQ item (and in its ``applied_ranges`` row): its records'
#: results were applied, or the records went to a replay topic, or to the DLQ.
OUTCOMES = ("applied", "replayed", "dlq")
#: Suffix of an item key whose records were read from a replay topic.
REPLAY_SUFFIX = "+replay"


def mrwq_namespace(pipeline: str) -> str:
    """The MRWQ namespace of a pipeline: the lanes, the planner and the flusher share it."""
    if not isinstance(pipeline, str) or not pipeline:
        raise ValueError(f"pipeline={pipeline!r} must be a non-empty string")
    return f"mrwq.{pipeline}"


def _keys(ns: str) -> tuple[str, str, str]:
    return f"{ns}:epoch", f"{ns}:tail", f"{ns}:head"


def head_key(ns: str) -> str:
    """The key of the next sequence number to flush."""
    return _keys(ns)[2]


def item_key(ns: str, seq: int) -> str:
    """The key of the item with sequence number ``seq``."""
    return f"{ns}:item:{seq}"


def read_epoch(store: Store, ns: str) -> str | None:
    """The queue's current epoch token (``None``: no queue, e.g. after a store restart)."""
    epoch_key = _keys(ns)[0]
    raw = store.get_many([epoch_key]).get(epoch_key)
    return None if raw is None else raw.decode(errors="replace")


def queue_length(store: Store, ns: str) -> int | None:
    """Items appended and not flushed, by the counters in the store (``None``: unknown)."""
    _, tail_key, head = _keys(ns)
    tail = store.incr(tail_key, 0)
    flushed_to = _decode_counter(store.get_many([head]).get(head))
    if tail is None or flushed_to is None:
        return None
    return max(0, tail - flushed_to + 1)


def mrwq_result(
    outcome: str = "applied", value: Any = None, *, replay: bool = False
) -> tuple[str, Any]:
    """The ``(key, value)`` a lane appends for one tuple: ``writer.append_many([(t.id,
    [mrwq_result("applied", result)])])``.

    ``outcome``: ``applied`` (``value`` = the pipeline's result), ``replayed`` (the records
    went to the replay topic) or ``dlq``. ``replay``: the tuple was read from a replay topic
    (its id uses the record's original coordinates).
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome={outcome!r} is not one of {', '.join(OUTCOMES)}")
    if not isinstance(replay, bool):
        raise ValueError(f"replay must be a bool, got {replay!r}")
    return (outcome + REPLAY_SUFFIX if replay else outcome), value


def parse_outcome_key(key: str) -> tuple[str, bool]:
    """Inverse of :func:`mrwq_result`'s key: ``(outcome, replay)``."""
    replay = isinstance(key, str) and key.endswith(REPLAY_SUFFIX)
    outcome = key[: -len(REPLAY_SUFFIX)] if replay else key
    if outcome not in OUTCOMES:
        raise ValueError(
            f"MRWQ item key {key!r} is not an outcome ({', '.join(OUTCOMES)}, "
            f"optionally suffixed {REPLAY_SUFFIX!r})"
        )
    return outcome, replay


def _check_namespace(namespace: str) -> str:
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise ValueError(
            f"namespace must be 1-200 characters of letters, digits, '.', '_', ':' or '-', "
            f"got {namespace!r}"
        )
    return namespace


def _new_token() -> str:
    return uuid.uuid4().hex


def _create_queue(store: Store, namespace: str, token: str) -> None:
    """Create the control keys if absent; concurrent creators agree (``add`` is atomic)."""
    epoch_key, tail_key, head_key = _keys(namespace)
    store.add(epoch_key, token.encode())
    store.add(tail_key, b"0")
    store.add(head_key, b"1")


def _decode_counter(raw: bytes | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        return None


class MrwqWriter:
    """The last stage's side: append results, then report the tuples processed.

    ``append_many([(tuple_id, [(key, value), ...]), ...])`` takes one block of sequence
    numbers for the whole call (one ``incr``) and stores every item (one ``set_many``). It
    returns the sequence numbers used. If anything fails it raises
    :class:`MrwqWriteError`: the caller must fail those tuples, never ack them.
    """

    def __init__(
        self, store: Store, namespace: str, *, new_token: Callable[[], str] = _new_token
    ) -> None:
        self._store = store
        self.namespace = _check_namespace(namespace)
        self._new_token = new_token

    def _epoch(self) -> str:
        epoch_key = _keys(self.namespace)[0]
        raw = self._store.get_many([epoch_key]).get(epoch_key)
        if raw is None:
            # First use, or the store lost the queue: a new epoch tells the flusher.
            _create_queue(self._store, self.namespace, self._new_token())
            raw = self._store.get_many([epoch_key]).get(epoch_key)
            if raw is None:
                raise MrwqWriteError(f"{self.namespace}: could not initialise the queue epoch")
        return raw.decode()

    def _reserve(self, n: int) -> int:
        epoch_key, tail_key, _ = _keys(self.namespace)
        last = self._store.incr(tail_key, n)
        if last is None:
            # The counter vanished under a live epoch: rotate the epoch so the flusher
            # reports the loss instead of mixing old and new sequence numbers.
            failed = self._store.set_many({epoch_key: self._new_token().encode()})
            if failed:
                raise MrwqWriteError(f"{self.namespace}: could not rotate the queue epoch")
            self._store.add(tail_key, b"0")
            last = self._store.incr(tail_key, n)
            if last is None:
                raise MrwqWriteError(f"{self.namespace}: sequence counter unavailable")
        return last

    def append(self, tuple_id: str, results: Sequence[tuple[str, Any]]) -> range:
        return self.append_many([(tuple_id, results)])

    def append_many(self, tuples: Sequence[tuple[str, Sequence[tuple[str, Any]]]]) -> range:
        """Append every tuple's results contiguously; returns the sequence numbers."""
        planned: list[tuple[str, str | None, Any, bool]] = []
        for tuple_id, results in tuples:
            if not isinstance(tuple_id, str) or not tuple_id:
                raise ValueError(f"tuple_id must be a non-empty str, got {tuple_id!r}")
            if not results:
                planned.append((tuple_id, None, None, True))
            for i, (key, value) in enumerate(results):
                if not isinstance(key, str) or not key:
                    raise ValueError(
                        f"result key of tuple {tuple_id!r} must be a non-empty str, got {key!r}"
                    )
                planned.append((tuple_id, key, value, i == len(results) - 1))
        if not planned:
            return range(0)
        epoch = self._epoch()
        last = self._reserve(len(planned))
        first = last - len(planned) + 1
        mapping: dict[str, bytes] = {}
        for seq, (tuple_id, key, value, is_last) in enumerate(planned, start=first):
            try:
                body = json.dumps(
                    {"e": epoch, "t": tuple_id, "k": key, "v": value, "l": is_last},
                    separators=(",", ":"),
                    allow_nan=False,
                )
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"value of result {key!r} of tuple {tuple_id!r} is not JSON-serialisable: {exc}"
                ) from exc
            mapping[item_key(self.namespace, seq)] = body.encode()
        failed = self._store.set_many(mapping)
        if failed:
            raise MrwqWriteError(
                f"{self.namespace}: {len(failed)} of {len(mapping)} item(s) not stored "
                f"(seq {first}..{last}); the flusher will report the gap"
            )
        return range(first, last + 1)


@dataclass(frozen=True)
class FlushPolicy:
    """Algorithm 3's triggers: ``max_length`` items queued, or ``update_time_s`` elapsed."""

    max_length: int
    update_time_s: float

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_length, bool)
            or not isinstance(self.max_length, int)
            or (self.max_length < 1)
        ):
            raise ValueError(f"max_length must be an int >= 1, got {self.max_length!r}")
        t = self.update_time_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t <= 0:
            raise ValueError(f"update_time_s must be a finite number > 0, got {t!r}")

    def due(self, length: int, since_last_flush_s: float) -> str | None:
        """``"length"``, ``"time"`` (only with something to flush) or ``None``."""
        if length >= self.max_length:
            return "length"
        if length > 0 and since_last_flush_s >= self.update_time_s:
            return "time"
        return None


@dataclass(frozen=True)
class Gap:
    """Items from ``seq`` on cannot be read: the input must be replayed from the durable
    checkpoint (SPEC A), and the flusher resynced."""

    seq: int
    reason: str

    def __str__(self) -> str:
        return f"gap at seq {self.seq} ({self.reason}): replay from the durable checkpoint"


@dataclass(frozen=True)
class FlushResult:
    """What one flush did. ``durable_tuple_ids`` is the durable ack; ``gap`` is sticky."""

    trigger: str
    first_seq: int | None
    last_seq: int | None
    written: int
    durable_tuple_ids: tuple[str, ...]
    gap: Gap | None
    pending: int


@dataclass(frozen=True)
class FlusherSnapshot:
    """Where a flusher stands; keep it durable (next to the checkpoint) to detect a store
    restart across a flusher restart."""

    namespace: str
    epoch: str | None
    head: int
    since_last_flush_s: float


class MrwqFlusher:
    """The Processor thread of Algorithm 3, one step at a time.

    Call :meth:`poll` periodically (it flushes when :class:`FlushPolicy` says so) or
    :meth:`flush` directly. A sink error propagates and leaves the queue as it was (wrap
    the call in :func:`flowctl.core.backoff.retry`). After a :class:`Gap` the driver
    replays from the durable checkpoint and calls :meth:`resync`.
    """

    def __init__(
        self,
        store: Store,
        sink: Sink,
        namespace: str,
        *,
        policy: FlushPolicy,
        clock: Clock,
        gap_grace_s: float = 5.0,
        max_batch: int | None = None,
        snapshot: FlusherSnapshot | None = None,
        new_token: Callable[[], str] = _new_token,
    ) -> None:
        self._store = store
        self._sink = sink
        self.namespace = _check_namespace(namespace)
        self.policy = policy
        self._clock = clock
        if not isinstance(gap_grace_s, int | float) or not gap_grace_s >= 0:
            raise ValueError(f"gap_grace_s must be a number >= 0, got {gap_grace_s!r}")
        self.gap_grace_s = float(gap_grace_s)
        mb = policy.max_length if max_batch is None else max_batch
        if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
            raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
        self.max_batch = mb
        self._new_token = new_token
        self.epoch: str | None = None
        self.head = 1
        self._last_flush_at = clock.now()
        self._missing: tuple[int, float] | None = None
        self.gap: Gap | None = None
        if snapshot is not None:
            self.restore(snapshot)

    # -- reading the queue's control keys --

    def _control(self) -> tuple[str | None, int | None, int | None]:
        epoch_key, tail_key, head_key = _keys(self.namespace)
        got = self._store.get_many([epoch_key, head_key])
        tail = self._store.incr(tail_key, 0)
        raw_epoch = got.get(epoch_key)
        epoch = None if raw_epoch is None else raw_epoch.decode(errors="replace")
        return epoch, tail, _decode_counter(got.get(head_key))

    def _open(self, epoch: str | None, tail: int | None, head: int | None) -> Gap | None:
        """First contact without a snapshot: adopt the queue, or create it."""
        epoch_key, tail_key, _ = _keys(self.namespace)
        if epoch is None:
            _create_queue(self._store, self.namespace, self._new_token())
            epoch = self._store.get_many([epoch_key]).get(epoch_key, b"").decode() or None
            self.epoch = epoch
            if tail:
                return Gap(1, "queue found without an epoch")
            tail = self._store.incr(tail_key, 0) or 0
            self.head = tail + 1
            return None
        self.epoch = epoch
        if head is not None:
            self.head = head
        elif tail:
            return Gap(1, "flusher position lost and the queue is not empty")
        return None

    def _check_control(self, epoch: str | None, tail: int | None) -> Gap | None:
        if epoch != self.epoch:
            return Gap(self.head, "queue epoch changed: the store restarted or was reset")
        if tail is None:
            return Gap(self.head, "sequence counter lost")
        if tail < self.head - 1:
            return Gap(self.head, f"sequence counter went back to {tail}")
        return None

    def length(self) -> int | None:
        """Items queued and not flushed, by the counter; ``None`` if the counter is gone."""
        tail = self._store.incr(_keys(self.namespace)[1], 0)
        return None if tail is None else max(0, tail - self.head + 1)

    def poll(self) -> FlushResult | None:
        """Flush if the policy says so (or to report a lost counter); else ``None``."""
        length = self.length()
        if self.gap is not None or length is None:
            return self.flush("check")
        trigger = self.policy.due(length, self._clock.now() - self._last_flush_at)
        return self.flush(trigger) if trigger else None

    def _result(self, trigger: str, batch: list[QueueItem], pending: int) -> FlushResult:
        return FlushResult(
            trigger=trigger,
            first_seq=batch[0].seq if batch else None,
            last_seq=batch[-1].seq if batch else None,
            written=sum(1 for item in batch if item.key is not None),
            durable_tuple_ids=tuple(item.tuple_id for item in batch if item.last),
            gap=self.gap,
            pending=pending,
        )

    def open(self) -> Gap | None:
        """Adopt the queue's epoch (creating the queue if there is none) and check it.

        Call it when the flusher starts, before writers run: from then on a store restart
        is detected. Without a snapshot or an early ``open``, a flusher that first meets
        the store after a restart cannot know what the restart lost.
        """
        return self.gap if self.gap is not None else self._check()[0]

    def _check(self) -> tuple[Gap | None, int]:
        """Open if needed and validate the control keys; returns a gap or the tail."""
        epoch, tail, head = self._control()
        gap = None
        if self.epoch is None:
            gap = self._open(epoch, tail, head)
            if gap is None:
                epoch, tail, _ = self._control()  # read again after creating the queue
        if gap is None:
            gap = self._check_control(epoch, tail)
        if gap is not None:
            self._report(gap)
        return gap, tail or 0

    def flush(self, trigger: str = "forced") -> FlushResult:
        """Write the contiguous items from ``head`` (up to ``max_batch``) to the sink."""
        now = self._clock.now()
        if self.gap is not None:
            return self._result(trigger, [], 0)
        gap, tail = self._check()
        if gap is not None:
            return self._result(trigger, [], 0)
        upto = min(tail, self.head + self.max_batch - 1)
        seqs = range(self.head, upto + 1)
        got = self._store.get_many([item_key(self.namespace, s) for s in seqs])
        batch: list[QueueItem] = []
        for seq in seqs:
            raw = got.get(item_key(self.namespace, seq))
            if raw is None:
                gap = self._missing_item(seq, now)
                break
            item, problem = self._decode(seq, raw)
            if item is None:
                gap = Gap(seq, problem)
                break
            batch.append(item)
        if batch:
            self._sink.write_batch([item for item in batch if item.key is not None])
            self._advance(batch, now)
        if gap is not None:
            self._report(gap)
        return self._result(trigger, batch, max(0, tail - self.head + 1))

    def _missing_item(self, seq: int, now: float) -> Gap | None:
        if self._missing is None or self._missing[0] != seq:
            self._missing = (seq, now)
        if now - self._missing[1] >= self.gap_grace_s:
            return Gap(seq, f"item missing for {now - self._missing[1]:g} s (evicted or lost)")
        return None

    def _decode(self, seq: int, raw: bytes) -> tuple[QueueItem | None, str]:
        try:
            body = json.loads(raw)
            item = QueueItem(seq, body["t"], body["k"], body["v"], bool(body["l"]))
            epoch = body["e"]
        except (ValueError, KeyError, TypeError) as exc:
            return None, f"item unreadable: {exc!r}"
        if epoch != self.epoch:
            return None, "item from another queue epoch"
        return item, ""

    def _advance(self, batch: list[QueueItem], now: float) -> None:
        keys = [item_key(self.namespace, item.seq) for item in batch]
        self.head = batch[-1].seq + 1
        self._last_flush_at = now
        failed = self._store.set_many({_keys(self.namespace)[2]: str(self.head).encode()})
        if failed:
            _log.warning("%s: could not store the flusher position %d", self.namespace, self.head)
        self._store.delete_many(keys)

    def _report(self, gap: Gap) -> None:
        self.gap = gap
        _log.error("%s: %s", self.namespace, gap)

    def resync(self) -> range:
        """After the replay from the durable checkpoint: start again at the queue's end.

        Adopts the store's current epoch (a new one if it has none), skips everything up
        to the current tail (the replay re-produces it) and returns the skipped range.
        """
        epoch_key, tail_key, head_key = _keys(self.namespace)
        _create_queue(self._store, self.namespace, self._new_token())
        raw = self._store.get_many([epoch_key]).get(epoch_key)
        tail = self._store.incr(tail_key, 0)
        if raw is None or tail is None:
            raise RuntimeError(f"{self.namespace}: store unavailable during resync")
        start = self.gap.seq if self.gap is not None else self.head
        skipped = range(start, tail + 1)
        self.epoch = raw.decode()
        self.head = tail + 1
        self.gap = None
        self._missing = None
        self._last_flush_at = self._clock.now()
        self._store.set_many({head_key: str(self.head).encode()})
        if skipped:
            self._store.delete_many([item_key(self.namespace, s) for s in skipped])
        _log.warning("%s: resynced at seq %d, skipped %s", self.namespace, self.head, skipped)
        return skipped

    def snapshot(self) -> FlusherSnapshot:
        return FlusherSnapshot(
            self.namespace, self.epoch, self.head, self._clock.now() - self._last_flush_at
        )

    def restore(self, snapshot: FlusherSnapshot) -> None:
        if snapshot.namespace != self.namespace:
            raise ValueError(f"snapshot of {snapshot.namespace!r} restored into {self.namespace!r}")
        if (
            isinstance(snapshot.head, bool)
            or not isinstance(snapshot.head, int)
            or (snapshot.head < 1)
        ):
            raise ValueError(f"snapshot.head must be an int >= 1, got {snapshot.head!r}")
        self.epoch = snapshot.epoch
        self.head = snapshot.head
        self._last_flush_at = self._clock.now() - snapshot.since_last_flush_s
        self._missing = None
        self.gap = None
