"""The exact-ends read's requests on librdkafka (confluent-kafka): the planner's other client.

Under ``[flow] reader = "librdkafka"`` the planner reads the log's exact ends
(:func:`flowctl.adapters.kafka_ends.latest_offsets_of`, which decides what to ask) with
:class:`RdkafkaEnds`, as the lanes read their ranges with
:mod:`flowctl.adapters.kafka_read_rdkafka`: the fetch round's fetching and parsing then
run in C, off the planner's Python (at 64 partitions a read took 8.4 ms p50 against
kafka-python's 23.3, its client CPU 2.8 ms against 18.4: bench/README.md, "The planner's
own client"). What it asks is kafka-python's read, request for request:

- ListOffsets for the bounds (latest, with the consumer's committed isolation) and the
  log starts (earliest), through the consumer's ``offsets_for_times`` with Kafka's
  "latest" and "earliest" timestamps (-1, -2): one request, answered in C (the admin
  client's ``list_offsets``, one future per partition, took 4.0 ms against 2.1 at 192
  partitions, and 42 ms of Python at its worst);
- a fetch round: every partition assigned at its first offset, consumed until each
  returned a record or reported the end of its partition (``enable.partition.eof``: a
  fetch at the log's end, or past a trailing transaction marker, was parsed), its end the
  high watermark of that fetch (librdkafka's cached one: no request), then unassigned,
  so nothing is fetched between reads. Starting at the bound itself never needs the
  kafka-python reader's second try: a bound that is the end answers with its report.

Partition lists come from a metadata request, kept :data:`PARTITIONS_MAX_AGE_S`.
confluent-kafka is the optional extra ``flowctl[librdkafka]``; a config naming
``librdkafka`` without it is refused when it is loaded.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from flowctl.adapters.kafka_ends import Key
from flowctl.adapters.kafka_log import KafkaReadTimeout
from flowctl.adapters.kafka_read_rdkafka import CONSUMER_CONFIG

#: How long a topic's partition list is used before it is asked again (a topic's
#: partitions are added rarely; kafka-python keeps its metadata 5 minutes).
PARTITIONS_MAX_AGE_S = 30.0

#: How long one wait of a fetch round lasts for its first event (it returns at once when
#: one is queued; the rest queued is taken without a wait).
POLL_S = 0.02

#: The fetch hold of the planner's patient reader (``flowctl.spark.flow.log_ends``: a broker
#: that answered no fetch within the short hold), kafka-python's ``fetch_max_wait_ms``.
PATIENT_FETCH_WAIT_MS = 100

#: Kafka's ListOffsets timestamps of a partition's end and start.
LATEST, EARLIEST = -1, -2

#: Events taken per ``consume`` call once one arrived (each partition's records up to its
#: end: one call empties the queue).
BATCH_EVENTS = 10_000


class RdkafkaEnds:
    """:class:`~flowctl.adapters.kafka_ends.EndsClient` on a librdkafka consumer.
    ``fetch_wait_ms``: how long the broker may hold a fetch at the log's end
    (the planner's :data:`~flowctl.adapters.kafka_ends.PLANNER_FETCH_WAIT_MS`; ``None``:
    :data:`PATIENT_FETCH_WAIT_MS`, the planner's patient reader's)."""

    def __init__(
        self, bootstrap: str, *, fetch_wait_ms: int | None = None, request_timeout_s: float = 10.0
    ) -> None:
        config: dict[str, Any] = {"bootstrap.servers": bootstrap, **CONSUMER_CONFIG}
        config["group.id"] = "flowctl-planner"
        config["fetch.wait.max.ms"] = (
            PATIENT_FETCH_WAIT_MS if fetch_wait_ms is None else fetch_wait_ms
        )
        self.consumer = Consumer(config)
        self.request_timeout_s = request_timeout_s
        self._partitions: dict[str, tuple[list[int], float]] = {}

    def partitions(self, topic: str) -> list[int]:
        cached = self._partitions.get(topic)
        if cached is not None and time.monotonic() - cached[1] < PARTITIONS_MAX_AGE_S:
            return cached[0]
        metadata = self.consumer.list_topics(topic, timeout=self.request_timeout_s)
        found = metadata.topics.get(topic)
        if found is None or found.error is not None or not found.partitions:
            raise ValueError(f"topic={topic!r} does not exist (or has no partitions)")
        parts = sorted(found.partitions)
        self._partitions[topic] = (parts, time.monotonic())
        return parts

    def bounds(self, keys: Sequence[Key]) -> dict[Key, int]:
        return self._list_offsets(keys, LATEST)

    def starts(self, topic: str) -> dict[int, int]:
        found = self._list_offsets([(topic, p) for p in self.partitions(topic)], EARLIEST)
        return {p: n for (_, p), n in found.items()}

    def _list_offsets(self, keys: Sequence[Key], timestamp: int) -> dict[Key, int]:
        """One ListOffsets request for ``keys`` at ``timestamp`` (:data:`LATEST`,
        :data:`EARLIEST`); a partition's error is raised as ``KafkaException``."""
        asked = [TopicPartition(t, p, timestamp) for t, p in keys]
        found = self.consumer.offsets_for_times(asked, timeout=self.request_timeout_s)
        for tp in found:
            if tp.error is not None:
                raise KafkaException(tp.error)
        return {(tp.topic, tp.partition): max(0, tp.offset) for tp in found}

    def fetch_ends(
        self, first: Mapping[Key, int], bounds: Mapping[Key, int], timeout_s: float
    ) -> dict[Key, int]:
        consumer = self.consumer
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in first.items()])
        try:
            waiting = set(first)
            deadline = time.monotonic() + timeout_s
            eof = KafkaError._PARTITION_EOF
            while waiting:
                if time.monotonic() > deadline:
                    raise KafkaReadTimeout(
                        f"latest_offsets (librdkafka): no fetch of {sorted(waiting)} answered "
                        f"within {timeout_s} s"
                    )
                event = consumer.poll(POLL_S)
                if event is None:
                    continue
                for m in [event, *consumer.consume(num_messages=BATCH_EVENTS, timeout=0)]:
                    error = m.error()
                    if error is not None and error.code() != eof:
                        raise KafkaException(error)
                    waiting.discard((m.topic(), m.partition()))
            return {key: self._highwater(key) for key in first}
        finally:
            consumer.unassign()

    def _highwater(self, key: Key) -> int:
        """The high watermark librdkafka's last fetch of ``key`` reported (cached)."""
        _, high = self.consumer.get_watermark_offsets(TopicPartition(*key), cached=True)
        return int(high)

    def close(self) -> None:
        self.consumer.close()
