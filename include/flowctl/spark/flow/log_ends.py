"""The Kafka log's end offsets, as the planner reads them once per micro-batch.

Exact ends are not free on Tansu (``end_offsets()`` under-reports; see
:func:`flowctl.adapters.kafka_log.latest_offsets`), and the planner asks for Eden's and
both replay topics' ends before every batch, so :class:`KafkaEnds` keeps one consumer
and what it learnt per partition (``known``): a partition whose bound did not move
costs one ListOffsets request, not a fetch.
"""

from __future__ import annotations

from typing import Any, Protocol


class LogEnds(Protocol):
    """The Kafka log's end offsets, as the planner reads them."""

    def latest_offsets(self, topic: str) -> dict[int, int]: ...

    def close(self) -> None: ...


class KafkaEnds:
    """:class:`LogEnds` over one lazily created KafkaConsumer."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._consumer: Any = None
        self._known: dict[Any, tuple[int, int]] = {}  # kafka_log.KnownEnds

    def latest_offsets(self, topic: str) -> dict[int, int]:
        from flowctl.adapters import kafka_log

        if self._consumer is None:
            self._consumer = kafka_log.new_consumer(
                self.bootstrap, fetch_max_wait_ms=kafka_log.PLANNER_FETCH_WAIT_MS
            )
        return kafka_log.latest_offsets(self._consumer, topic, known=self._known)

    def close(self) -> None:
        from flowctl.adapters import kafka_log

        kafka_log.close_quietly(self._consumer)
        self._consumer = None
        self._known.clear()
