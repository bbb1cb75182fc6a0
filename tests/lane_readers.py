"""The two Kafka readers (``[flow] reader``) behind one face, for tests that run the same
reads over both: each opens its client's consumer and reads a range into
:class:`~flowctl.core.record.Record`, as :mod:`flowctl.spark.flow.lane_read` hands them on,
and opens its client of the planner's exact-ends read
(:class:`~flowctl.adapters.kafka_ends.EndsClient`, as :mod:`flowctl.spark.flow.log_ends`
does).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowctl.adapters import kafka_log, kafka_read_rdkafka
from flowctl.adapters.kafka_ends import EndsClient
from flowctl.core.record import Record
from flowctl.pipelines.config_sections import LIBRDKAFKA
from flowctl.spark.flow.log_ends import open_client


@dataclass(frozen=True)
class LaneReader:
    """One reader: its ``[flow] reader`` name and its adapter's range read."""

    name: str

    @property
    def rdkafka(self) -> bool:
        return self.name == LIBRDKAFKA

    def consumer(self, bootstrap: str) -> Any:
        """A fresh consumer of this reader's client (close it with :meth:`close`)."""
        if self.rdkafka:
            return kafka_read_rdkafka.new_consumer(bootstrap)
        return kafka_log.new_consumer(bootstrap)

    def close(self, consumer: Any) -> None:
        consumer.close()

    def read(
        self, consumer: Any, topic: str, partition: int, start: int, end: int, **kw: Any
    ) -> Iterator[Record]:
        """The records of ``[start, end)`` as the lane gets them."""
        if self.rdkafka:
            return kafka_read_rdkafka.read_range(consumer, topic, partition, start, end, **kw)
        return map(Record.of, kafka_log.read_range(consumer, topic, partition, start, end, **kw))

    def ends(self, bootstrap: str, fetch_wait_ms: int | None = None) -> EndsClient:
        """A fresh client of this reader for the exact-ends read (close it when done)."""
        return open_client(bootstrap, self.name, fetch_wait_ms)

    def cached(self, bootstrap: str) -> Any:
        module = kafka_read_rdkafka if self.rdkafka else kafka_log
        return module.cached_consumer(bootstrap)

    def drop_cached(self, bootstrap: str) -> None:
        module = kafka_read_rdkafka if self.rdkafka else kafka_log
        module.drop_cached_consumer(bootstrap)


class SpyEnds:
    """A reader's real :class:`~flowctl.adapters.kafka_ends.EndsClient`, every call passed
    on, that notes which partitions each ListOffsets request (:attr:`asked`) and each fetch
    round (:attr:`fetched`) was made for: what a read cost the broker, whichever client."""

    def __init__(self, client: EndsClient) -> None:
        self.client = client
        self.asked: list[set[tuple[str, int]]] = []
        self.fetched: list[set[tuple[str, int]]] = []

    def partitions(self, topic: str) -> list[int]:
        return self.client.partitions(topic)

    def bounds(self, keys: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        self.asked.append(set(keys))
        return self.client.bounds(keys)

    def fetch_ends(
        self,
        first: Mapping[tuple[str, int], int],
        bounds: Mapping[tuple[str, int], int],
        timeout_s: float,
    ) -> dict[tuple[str, int], int]:
        self.fetched.append(set(first))
        return self.client.fetch_ends(first, bounds, timeout_s)

    def starts(self, topic: str) -> dict[int, int]:
        return self.client.starts(topic)

    def close(self) -> None:
        self.client.close()
