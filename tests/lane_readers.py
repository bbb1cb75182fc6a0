"""The lanes' two Kafka readers (``[flow] reader``) behind one face, for tests that run
the same reads over both: each opens its client's consumer and reads a range into
:class:`~flowctl.core.record.Record`, as :mod:`flowctl.spark.flow.lane_read` hands them on.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from flowctl.adapters import kafka_log, kafka_read_rdkafka
from flowctl.core.record import Record
from flowctl.pipelines.config_sections import LIBRDKAFKA


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

    def cached(self, bootstrap: str) -> Any:
        module = kafka_read_rdkafka if self.rdkafka else kafka_log
        return module.cached_consumer(bootstrap)

    def drop_cached(self, bootstrap: str) -> None:
        module = kafka_read_rdkafka if self.rdkafka else kafka_log
        module.drop_cached_consumer(bootstrap)
