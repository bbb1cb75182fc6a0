"""The Kafka log's end offsets, as the planner reads them once per micro-batch.

Exact ends are not free on Tansu (``end_offsets()`` under-reports; see
:func:`flowctl.adapters.kafka_log.latest_offsets`), and the planner asks for Eden's and
both replay topics' ends before every batch, so :class:`KafkaEnds` keeps one consumer
and what it learnt per partition (``known``): a partition whose bound did not move
costs no fetch (for up to ``kafka_log.KNOWN_MAX_AGE_S``), and the three topics are read
together (one ListOffsets request, at most one fetch round).

The consumer asks the broker to hold a fetch at most ``PLANNER_FETCH_WAIT_MS`` (a short
hold keeps the next batch's requests from queueing behind it). Tansu with S3 storage
answers nothing within so short a hold (it reads the batch from S3 first), so a read
that fetched nothing within ``QUICK_READ_TIMEOUT_S`` switches this reader, for good, to
a consumer with the default hold.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, Protocol

log = logging.getLogger(__name__)

#: How long a read with the short fetch hold may take before the reader turns patient.
#: A read takes about 5 ms on Tansu in memory and on Apache Kafka.
QUICK_READ_TIMEOUT_S = 1.0


class LogEnds(Protocol):
    """The Kafka log's end offsets, as the planner reads them."""

    def latest_offsets_of(
        self,
        topics: Sequence[str],
        bounds_suffice: Callable[[dict[str, dict[int, int]]], bool] | None = None,
    ) -> dict[str, dict[int, int]]: ...

    def close(self) -> None: ...


class KafkaEnds:
    """:class:`LogEnds` over one lazily created KafkaConsumer."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self._consumer: Any = None
        self._known: dict[Any, tuple[int, int, float]] = {}  # kafka_log.KnownEnds
        #: Whether the short fetch hold proved too short for this broker.
        self.patient = False

    def latest_offsets_of(
        self,
        topics: Sequence[str],
        bounds_suffice: Callable[[dict[str, dict[int, int]]], bool] | None = None,
    ) -> dict[str, dict[int, int]]:
        """``{topic: {partition: end}}``, exactly, in one request round for all ``topics``
        (or the lower bounds ``bounds_suffice`` accepts: see ``kafka_log.latest_offsets_of``)."""
        from flowctl.adapters import kafka_log

        read = functools.partial(
            kafka_log.latest_offsets_of, known=self._known, bounds_suffice=bounds_suffice
        )
        if self.patient:
            return read(self._open(), topics)
        try:
            return read(self._open(), topics, timeout_s=QUICK_READ_TIMEOUT_S)
        except kafka_log.KafkaReadTimeout as exc:
            log.info(
                "log ends: %s; the broker answers no fetch held %d ms (Tansu on S3?): "
                "reading with the default hold from now on",
                exc,
                kafka_log.PLANNER_FETCH_WAIT_MS,
            )
            self.close()
            self.patient = True
            return read(self._open(), topics)

    def _open(self) -> Any:
        from flowctl.adapters import kafka_log

        if self._consumer is None:
            hold = {} if self.patient else {"fetch_max_wait_ms": kafka_log.PLANNER_FETCH_WAIT_MS}
            self._consumer = kafka_log.new_consumer(self.bootstrap, **hold)
        return self._consumer

    def close(self) -> None:
        from flowctl.adapters import kafka_log

        kafka_log.close_quietly(self._consumer)
        self._consumer = None
        self._known.clear()
