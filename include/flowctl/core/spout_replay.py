"""The spout's side of the replay topics (SPEC D): reading To, committing what is durable.

Mixed into :class:`~flowctl.core.spout.Spout` (whose attributes it uses). Each batch the
spout reads up to its share of one-record tuples from the To replay topic (swapping To
and From when To is read up, :class:`~flowctl.core.replay.ReplayStateMachine` decides);
a replayed record's offset may be committed only once its result is durable: at once
when it produced none, else when the flusher's durable position passes its MRWQ item
(:meth:`SpoutReplay.confirm_replays`). Committed offsets advance contiguously per
partition (:class:`~flowctl.core.checkpoint.ContiguousAck`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from .checkpoint import CheckpointError, ContiguousAck
from .replay import ReplayStateMachine
from .spout_contract import Dispatch
from .tuples import TupleRange

# The spout's logger: these lines read as the spout's.
_log = logging.getLogger("flowctl.core.spout")


class SpoutReplay:
    """Replayed records: dispatched from To, their offsets committed once durable."""

    _replay: ReplayStateMachine
    _replay_acks: dict[tuple[str, int], ContiguousAck]
    _replay_unconfirmed: dict[str, tuple[str, int]]
    counters: dict[str, int]

    if TYPE_CHECKING:  # Spout's, which this mixes into

        def _choose(self, avoid: int | None) -> int | None: ...
        def _send(self, t: TupleRange, lane: int, *, replay: bool, from_topic: str) -> Dispatch: ...

    def confirm_replays(self, epoch: str | None, head: int | None) -> int:
        """The flusher's durable position (epoch, head) from the database: replayed records
        whose MRWQ item lies below it are durable, so their replay offsets may be committed."""
        if epoch is None or head is None:
            return 0
        done = [
            tid for tid, (e, seq) in self._replay_unconfirmed.items() if e == epoch and seq < head
        ]
        for tid in done:
            del self._replay_unconfirmed[tid]
            self._replay_durable(TupleRange.parse_id(tid))
        return len(done)

    def _plan_replays(
        self,
        out: list[Dispatch],
        left: int,
        replay_ends: Mapping[tuple[str, int], int],
        now_epoch: float,
    ) -> str:
        """Up to ``left`` one-record tuples from To (swapping To and From when To is read
        up); returns the From topic the lanes write this batch's failures to."""
        from_topic = self._replay.from_topic
        unread = sum(
            max(0, end - self._replay.position(topic, partition))
            for (topic, partition), end in replay_ends.items()
        )
        if left <= 0 or unread <= 0:  # with both replay topics read up, a swap changes nothing
            return from_topic
        read = self._replay.next_read(replay_ends, now_epoch, max_records=left)
        from_topic = read.from_topic
        if read.swapped:
            _log.info(
                "replay: To is read up; swapped: %s (%d record(s) to replay) is To, From is now %s",
                read.topic if read.source == "to" else self._replay.to_topic,
                unread,
                read.from_topic,
            )
        if read.source != "to":
            return from_topic
        for partition, start, end in read.ranges:
            for offset in range(start, end):
                t = TupleRange(read.topic, partition, offset, offset + 1)
                lane = self._choose(None)
                if lane is None:  # cannot happen: ranges are bounded by the free slots
                    raise RuntimeError(f"spout: no lane free for replayed record {t.id}")
                out.append(self._send(t, lane, replay=True, from_topic=from_topic))
                self.counters["replay_admitted"] += 1
        return from_topic

    def _is_replay(self, t: TupleRange) -> bool:
        return t.topic in (self._replay.topics.replay_a, self._replay.topics.replay_b)

    def _replay_durable(self, t: TupleRange) -> None:
        key = (t.topic, t.partition)
        acks = self._replay_acks.get(key)
        committed = self._replay.committed(t.topic, t.partition)
        if acks is None or acks.position < committed:
            acks = ContiguousAck(committed)
            self._replay_acks[key] = acks
        try:
            acks.ack(t.start, t.end)
        except CheckpointError as exc:
            _log.debug("replay ack %s: %s", t.id, exc)
            return
        position = min(acks.position, self._replay.position(t.topic, t.partition))
        if position > committed:
            self._replay.commit(t.topic, t.partition, position)
