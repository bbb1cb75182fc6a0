"""The durable checkpoint, committed to a Kafka consumer group: lag where Kafka users look.

The platform's readers need no consumer group (they ``assign`` and ``seek``; the durable
checkpoint lives in the database, written in the same transaction as the results). But
operators read a consumer's lag with Kafka's own tools (``kafka-consumer-groups
--describe --group flowctl.<pipeline>``) and lag exporters, which know only committed
group offsets. So every pipeline's checkpoint of its Eden topic is also committed to the
group :func:`group_of` names, as a copy: a lag figure, never a restart point.

The copy is committed on a thread of its own, at most every :data:`COMMIT_EVERY_S`, the
newest checkpoint only: a broker that does not answer slows no flush, and a failure is
logged (at most every :data:`WARN_EVERY_S`) and retried with the next checkpoint.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from flowctl.adapters.kafka_network import NETWORK_CLIENT

log = logging.getLogger(__name__)

#: Seconds between two commits of the newest checkpoint.
COMMIT_EVERY_S = 1.0
#: Seconds between two warnings about failed commits.
WARN_EVERY_S = 30.0


def group_of(pipeline: str) -> str:
    """The consumer group a pipeline's durable checkpoint is committed to."""
    return f"flowctl.{pipeline}"


def group_consumer(bootstrap: str, group: str, timeout_s: float = 5.0) -> KafkaConsumer:
    """A consumer that only commits for ``group``: it never subscribes nor joins, so its
    commits are a "simple consumer"'s (generation -1), which the group coordinator accepts
    while no member has joined the group."""
    return KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        request_timeout_ms=int(timeout_s * 1000),
        bootstrap_timeout_ms=int(timeout_s * 1000),
        client_id=f"{group}-checkpoint",
        kafka_client=NETWORK_CLIENT,
    )


def commit_offsets(
    consumer: KafkaConsumer, topic: str, offsets: Mapping[int, int], timeout_s: float = 10.0
) -> None:
    """Commit ``{partition: next offset}`` of ``topic`` to the consumer's group, once."""
    consumer.commit(
        {
            TopicPartition(topic, p): OffsetAndMetadata(n, "flowctl durable checkpoint", -1)
            for p, n in offsets.items()
        },
        timeout_ms=int(timeout_s * 1000),
    )


class GroupCheckpoint:
    """Commits the newest checkpoint :meth:`offer` was given, on a daemon thread."""

    def __init__(self, bootstrap: str, pipeline: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.group = group_of(pipeline)
        self.topic = topic
        self._lock = threading.Lock()
        self._pending: dict[int, int] = {}
        self._committed: dict[int, int] = {}
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._warned_at = float("-inf")
        self._thread: threading.Thread | None = None
        self._consumer: KafkaConsumer | None = None

    def offer(self, checkpoint: Mapping[tuple[str, int], int]) -> None:
        """The checkpoint moved (``{(topic, partition): next offset}``; other topics are
        ignored): commit it soon. Never blocks, never raises."""
        mine = {p: n for (t, p), n in checkpoint.items() if t == self.topic}
        if not mine:
            return
        with self._lock:
            for p, n in mine.items():
                if n > self._pending.get(p, -1):
                    self._pending[p] = n
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name=f"group-checkpoint-{self.group}", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def close(self) -> None:
        """Commit what is pending (once), then stop the thread."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=15)

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            with self._lock:
                due = {p: n for p, n in self._pending.items() if self._committed.get(p) != n}
            if due:
                try:
                    if self._consumer is None:
                        self._consumer = group_consumer(self.bootstrap, self.group)
                    commit_offsets(self._consumer, self.topic, due)
                    with self._lock:
                        self._committed.update(due)
                except (KafkaError, OSError) as exc:
                    self._drop_consumer()
                    now = time.monotonic()
                    if now - self._warned_at >= WARN_EVERY_S:
                        self._warned_at = now
                        log.warning(
                            "committing the durable checkpoint of %s to consumer group %s "
                            "failed (%s); retried with the next checkpoint (the lag Kafka's "
                            "tools show is stale meanwhile, nothing else depends on it)",
                            self.topic,
                            self.group,
                            exc,
                        )
                    self._wake.set()  # try again after the pause
            if self._stop.is_set():
                self._drop_consumer()
                return
            self._stop.wait(COMMIT_EVERY_S)

    def _drop_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            try:
                consumer.close()
            except Exception:
                log.debug("closing the group checkpoint's consumer failed", exc_info=True)
