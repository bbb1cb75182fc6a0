"""The MRWQ's flusher, one step at a time (SPEC F, seed 002 Algorithm 3's Processor).

The queue's layout and the writers' side are in :mod:`flowctl.core.persistence`; this is
the reading side: flush contiguous items from ``head`` to a :class:`Sink` when the
:class:`FlushPolicy` says so, report a :class:`Gap` instead of skipping a missing item,
and return the tuple ids each flush made durable (the durable ack, SPEC A).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

from .clock import Clock
from .persistence import (
    QueueItem,
    Sink,
    Store,
    check_namespace,
    control_keys,
    create_queue,
    decode_counter,
    item_key,
    new_token,
)

__all__ = ["FlushPolicy", "FlushResult", "FlusherSnapshot", "Gap", "MrwqFlusher"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FlushPolicy:
    """Algorithm 3's triggers: ``max_length`` items queued, or ``update_time_s`` elapsed.

    ``as_queued`` (beyond Algorithm 3): flush whatever is queued at every poll. A result
    is then durable one flush after its lane queued it, instead of waiting for the
    queue to fill, for the timer, or for its micro-batch to end (the lanes queue their
    results while Spark still runs the batch: the collect, the foreachBatch call and the
    commit log come after). Under load the queue is never empty and the flusher runs
    back to back either way.
    """

    max_length: int
    update_time_s: float
    as_queued: bool = False

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
        if not isinstance(self.as_queued, bool):
            raise ValueError(f"as_queued must be a bool, got {self.as_queued!r}")

    def due(self, length: int, since_last_flush_s: float) -> str | None:
        """``"length"``, ``"queued"`` or ``"time"`` (only with something to flush), or
        ``None``."""
        if length >= self.max_length:
            return "length"
        if length > 0 and self.as_queued:
            return "queued"
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
        new_token: Callable[[], str] = new_token,
    ) -> None:
        self._store = store
        self._sink = sink
        self.namespace = check_namespace(namespace)
        self.policy = policy
        self._clock = clock
        if not isinstance(gap_grace_s, int | float) or not gap_grace_s >= 0:
            raise ValueError(f"gap_grace_s must be a number >= 0, got {gap_grace_s!r}")
        self.gap_grace_s = float(gap_grace_s)
        mb = policy.max_length if max_batch is None else max_batch
        if isinstance(mb, bool) or not isinstance(mb, int) or mb < 1:
            raise ValueError(f"max_batch must be an int >= 1, got {max_batch!r}")
        self.max_batch = mb
        self.new_token = new_token
        self.epoch: str | None = None
        self.head = 1
        self._last_flush_at = clock.now()
        self._missing: tuple[int, float] | None = None
        self.gap: Gap | None = None
        if snapshot is not None:
            self.restore(snapshot)

    # -- reading the queue's control keys --

    def _control(self) -> tuple[str | None, int | None, int | None]:
        epoch_key, tail_key, head_key = control_keys(self.namespace)
        got = self._store.get_many([epoch_key, head_key])
        tail = self._store.incr(tail_key, 0)
        raw_epoch = got.get(epoch_key)
        epoch = None if raw_epoch is None else raw_epoch.decode(errors="replace")
        return epoch, tail, decode_counter(got.get(head_key))

    def _open(self, epoch: str | None, tail: int | None, head: int | None) -> Gap | None:
        """First contact without a snapshot: adopt the queue, or create it."""
        epoch_key, tail_key, _ = control_keys(self.namespace)
        if epoch is None:
            create_queue(self._store, self.namespace, self.new_token())
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
        """Items queued and not flushed, by the counter; ``None`` when the counter cannot
        tell: it is gone, or the queue is not the one this flusher reads (the next flush
        reports the gap).

        The epoch is read with the counter because after a store restart the writers
        re-create the queue, and its new tail stays below ``head`` for a while: by the
        counter alone that queue looks empty, and the lost items would wait for the new
        tail to pass the old head (forever, once the input stops).
        """
        if self.epoch is None:
            return None
        epoch, tail, _ = self._control()
        if tail is None or self._check_control(epoch, tail) is not None:
            return None
        return max(0, tail - self.head + 1)

    def poll(self, batch_ended: bool = False) -> FlushResult | None:
        """Flush if the policy says so (or to report a lost counter); else ``None``.

        ``batch_ended``: a micro-batch ended since the last poll, so every result it made
        is queued: flushing it now rather than at ``update_time_s`` takes the timer off
        the path from a record's arrival to its durability (beyond Algorithm 3, whose
        two triggers still apply).
        """
        length = self.length()
        if self.gap is not None or length is None:
            return self.flush("check")
        if batch_ended and length > 0:
            return self.flush("batch end")
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
        failed = self._store.set_many({control_keys(self.namespace)[2]: str(self.head).encode()})
        if failed:
            _log.warning("%s: could not store the flusher position %d", self.namespace, self.head)
        self._store.delete_many(keys)

    def _report(self, gap: Gap) -> None:
        self.gap = gap
        _log.error("%s: %s", self.namespace, gap)

    def resync(self) -> range:
        """After the replay from the durable checkpoint: start again at the queue's end,
        under a new epoch.

        Skips everything up to the current tail (the replay re-produces it) and returns the
        skipped range. The new epoch is what keeps the skipped items from counting as
        flushed: a replayed record is durable when its item's epoch is the flusher's and
        ``head`` is past it (the durable ack), and ``head`` now passes items that were
        never written to the sink. An item a writer stores under the old epoch after this
        is a gap of its own.
        """
        epoch_key, tail_key, head_key = control_keys(self.namespace)
        create_queue(self._store, self.namespace, self.new_token())  # a counter, after a restart
        raw = self._store.get_many([epoch_key]).get(epoch_key)
        tail = self._store.incr(tail_key, 0)
        if raw is None or tail is None:
            raise RuntimeError(f"{self.namespace}: store unavailable during resync")
        # Another epoch is another queue (the store restarted): all of it so far is skipped.
        start = 1 if raw.decode() != self.epoch else (self.gap.seq if self.gap else self.head)
        skipped = range(start, tail + 1)
        token = self.new_token()
        if self._store.set_many({epoch_key: token.encode(), head_key: str(tail + 1).encode()}):
            raise RuntimeError(f"{self.namespace}: could not store the new epoch during resync")
        self.epoch = token
        self.head = tail + 1
        self.gap = None
        self._missing = None
        self._last_flush_at = self._clock.now()
        if skipped:
            self._store.delete_many([item_key(self.namespace, s) for s in skipped])
        _log.warning(
            "%s: resynced at seq %d under epoch %s, skipped %s",
            self.namespace,
            self.head,
            token,
            skipped,
        )
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
