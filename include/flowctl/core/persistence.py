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
checkpoint"), flushes nothing past it, and keeps reporting it until :meth:`MrwqFlusher.resync`
(the flusher: :mod:`flowctl.core.flusher`; this module holds the queue's protocol and the
writers' side).

Every flush returns the tuple ids now durable (the durable ack, SPEC A): a tuple's items
are appended together, so it is durable when its last item is flushed. The database write
is idempotent by item key (:class:`Sink`), so a replay after a gap never double-counts.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "ISOLATED_SUFFIX",
    "OUTCOMES",
    "REPLAY_SUFFIX",
    "MrwqWriteError",
    "MrwqWriter",
    "QueueItem",
    "Sink",
    "Store",
    "check_namespace",
    "control_keys",
    "create_queue",
    "decode_counter",
    "head_key",
    "item_key",
    "mrwq_namespace",
    "mrwq_result",
    "new_token",
    "parse_outcome_key",
    "queue_length",
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
#: Suffix of a ``dlq`` item key of a poison record the lane isolated from its Eden tuple
#: (claimed as ``Claim.isolated``, nested in the tuple's ``applied`` row).
ISOLATED_SUFFIX = "+isolated"


def mrwq_namespace(pipeline: str) -> str:
    """The MRWQ namespace of a pipeline: the lanes, the planner and the flusher share it."""
    if not isinstance(pipeline, str) or not pipeline:
        raise ValueError(f"pipeline={pipeline!r} must be a non-empty string")
    return f"mrwq.{pipeline}"


def control_keys(ns: str) -> tuple[str, str, str]:
    """The queue's control keys: ``(epoch, tail, head)``."""
    return f"{ns}:epoch", f"{ns}:tail", f"{ns}:head"


def head_key(ns: str) -> str:
    """The key of the next sequence number to flush."""
    return control_keys(ns)[2]


def item_key(ns: str, seq: int) -> str:
    """The key of the item with sequence number ``seq``."""
    return f"{ns}:item:{seq}"


def queue_counters(store: Store, ns: str) -> tuple[int | None, int | None]:
    """``(tail, head)``: the last sequence number appended, and the next one to flush (the
    flusher stores it once the items before it are in the database, or skipped by a
    resync); ``None`` where the store does not know it."""
    _, tail_key, head = control_keys(ns)
    tail = store.incr(tail_key, 0)
    return tail, decode_counter(store.get_many([head]).get(head))


def queue_length(store: Store, ns: str) -> int | None:
    """Items appended and not flushed, by the counters in the store (``None``: unknown)."""
    tail, flushed_to = queue_counters(store, ns)
    if tail is None or flushed_to is None:
        return None
    return max(0, tail - flushed_to + 1)


class FlushBarrier:
    """Holds a rebuild of the spout until the MRWQ is flushed past what was queued when the
    rebuild was asked for.

    A rebuild (after a gap) cuts everything not durable again from the database's
    ``applied_ranges``. Results of tuples still in flight at the gap's repair (a Spark
    task retried after an executor was lost, the rest of the batch) reach the queue after
    the resync and are flushed normally; read before they are flushed, the database says
    their ranges are not applied, the rebuilt spout cuts them again, and where the first
    cut had stopped at the log's end then (``[53872, 54000)``) the new one does not
    (``[53500, 54000)``): a range that partially overlaps an applied one, which the sink
    refuses (docs/flow-control.md, "A rebuild waits for the queue"). Past the barrier, every
    result queued before the rebuild was asked for is in the database (or skipped by a
    resync, and so dispatched again): the rebuilt spout cuts around what is applied.
    """

    def __init__(self) -> None:
        #: The tail when the rebuild was first asked for (``None``: no rebuild waiting).
        self.upto: int | None = None

    def passed(self, tail: int | None, head: int | None) -> bool:
        """Whether the queue is flushed past the tail seen at the first call (counters
        from :func:`queue_counters`; unknown ones never pass)."""
        if self.upto is None:
            if tail is None:
                return False
            self.upto = tail
        return head is not None and head > self.upto

    def clear(self) -> None:
        """The rebuild is done: the next one takes a new tail."""
        self.upto = None


def mrwq_result(
    outcome: str = "applied", value: Any = None, *, replay: bool = False, isolated: bool = False
) -> tuple[str, Any]:
    """The ``(key, value)`` a lane appends for one tuple: ``writer.append_many([(t.id,
    [mrwq_result("applied", result)])])``.

    ``outcome``: ``applied`` (``value`` = the pipeline's result), ``replayed`` (the records
    went to the replay topic) or ``dlq``. ``replay``: the tuple was read from a replay topic
    (its id uses the record's original coordinates). ``isolated``: a ``dlq`` item of one
    poison record the lane isolated from its Eden tuple (:mod:`flowctl.core.isolation`),
    the only one-record ``dlq`` claim a covering ``applied`` row does not make a repeat.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"outcome={outcome!r} is not one of {', '.join(OUTCOMES)}")
    for name, flag in (("replay", replay), ("isolated", isolated)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name} must be a bool, got {flag!r}")
    if isolated and (outcome != "dlq" or replay):
        raise ValueError(
            f"isolated marks a poison record isolated from an Eden tuple: outcome 'dlq' "
            f"without replay, got outcome={outcome!r}, replay={replay!r}"
        )
    if replay:
        return outcome + REPLAY_SUFFIX, value
    return (outcome + ISOLATED_SUFFIX if isolated else outcome), value


def parse_outcome_key(key: str) -> tuple[str, bool, bool]:
    """Inverse of :func:`mrwq_result`'s key: ``(outcome, replay, isolated)``."""
    text = key if isinstance(key, str) else ""
    replay = text.endswith(REPLAY_SUFFIX)
    isolated = text == "dlq" + ISOLATED_SUFFIX
    outcome = "dlq" if isolated else text.removesuffix(REPLAY_SUFFIX)
    if outcome not in OUTCOMES:
        raise ValueError(
            f"MRWQ item key {key!r} is not an outcome ({', '.join(OUTCOMES)}, optionally "
            f"suffixed {REPLAY_SUFFIX!r}, or 'dlq{ISOLATED_SUFFIX}')"
        )
    return outcome, replay, isolated


def check_namespace(namespace: str) -> str:
    """``namespace`` if it is usable in memcached keys, else a ValueError naming it."""
    if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
        raise ValueError(
            f"namespace must be 1-200 characters of letters, digits, '.', '_', ':' or '-', "
            f"got {namespace!r}"
        )
    return namespace


def new_token() -> str:
    """A fresh epoch token."""
    return uuid.uuid4().hex


def create_queue(store: Store, namespace: str, token: str) -> None:
    """Create the control keys if absent; concurrent creators agree (``add`` is atomic)."""
    epoch_key, tail_key, head_key = control_keys(namespace)
    store.add(epoch_key, token.encode())
    store.add(tail_key, b"0")
    store.add(head_key, b"1")


def decode_counter(raw: bytes | None) -> int | None:
    """A counter's stored bytes as an int (``None``: absent or not a number)."""
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
    returns the sequence numbers used, and :attr:`epoch` is the epoch those items carry
    (the tuples' durable ack compares it with the flusher's: reading the epoch key again
    after the append could name a newer one). If anything fails it raises
    :class:`MrwqWriteError`: the caller must fail those tuples, never ack them.
    """

    def __init__(
        self, store: Store, namespace: str, *, new_token: Callable[[], str] = new_token
    ) -> None:
        self._store = store
        self.namespace = check_namespace(namespace)
        self.new_token = new_token
        self.epoch: str | None = None

    def _epoch(self) -> str:
        epoch_key = control_keys(self.namespace)[0]
        raw = self._store.get_many([epoch_key]).get(epoch_key)
        if raw is None:
            # First use, or the store lost the queue: a new epoch tells the flusher.
            create_queue(self._store, self.namespace, self.new_token())
            raw = self._store.get_many([epoch_key]).get(epoch_key)
            if raw is None:
                raise MrwqWriteError(f"{self.namespace}: could not initialise the queue epoch")
        return raw.decode()

    def _reserve(self, n: int) -> int:
        epoch_key, tail_key, _ = control_keys(self.namespace)
        last = self._store.incr(tail_key, n)
        if last is None:
            # The counter vanished under a live epoch: rotate the epoch so the flusher
            # reports the loss instead of mixing old and new sequence numbers.
            failed = self._store.set_many({epoch_key: self.new_token().encode()})
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
        for seq, (tid, result_key, value, is_last) in enumerate(planned, start=first):
            try:
                body = json.dumps(
                    {"e": epoch, "t": tid, "k": result_key, "v": value, "l": is_last},
                    separators=(",", ":"),
                    allow_nan=False,
                )
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"value of result {result_key!r} of tuple {tid!r} is not JSON-serialisable: "
                    f"{exc}"
                ) from exc
            mapping[item_key(self.namespace, seq)] = body.encode()
        failed = self._store.set_many(mapping)
        if failed:
            raise MrwqWriteError(
                f"{self.namespace}: {len(failed)} of {len(mapping)} item(s) not stored "
                f"(seq {first}..{last}); the flusher will report the gap"
            )
        self.epoch = epoch
        return range(first, last + 1)
