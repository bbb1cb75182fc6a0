"""One Kafka record as the platform hands it on, whichever client read it.

Defined in the core (no I/O) so that every reader of the lanes yields this one type: the
kafka-python reader copies a ``ConsumerRecord`` into it (:meth:`Record.of`), the librdkafka
reader builds it straight from a ``Message``; the lane, the routing of failed records and
a pipeline's definition never see which client ran. :mod:`flowctl.pipelines.base`
re-exports it, where definitions have always imported it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

#: A record's headers as Kafka carries them: ``(name, value)`` pairs in the producer's order,
#: a name possibly repeated, a value possibly null. A tuple of tuples: immutable, picklable.
Headers = tuple[tuple[str, bytes | None], ...]


class Record(NamedTuple):
    """One Kafka record as the lanes hand it to a pipeline, whoever produced it.

    ``value`` is ``None`` for a tombstone (a record with a null value, the delete marker of
    a compacted topic) and ``b""`` for an empty value: a definition chooses what each means
    (skip it, or raise :class:`~flowctl.pipelines.base.PoisonRecord` with a reason) and its
    ``reference`` must agree. ``key`` and ``headers`` are as produced (``None`` and ``()``
    when absent).

    A named tuple: immutable and picklable as a frozen dataclass is, and built once per
    record read (a lane builds tens of thousands a second) in about a third of a frozen
    dataclass's time, whose ``__init__`` sets each field through ``object.__setattr__``.
    """

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    value: bytes | None
    key: bytes | None = None
    headers: Headers = ()

    @classmethod
    def of(cls, consumed: Any) -> Record:
        """The record of kafka-python's consumed record (its ``ConsumerRecord``: ``topic``,
        ``partition``, ``offset``, ``timestamp``, ``value``, ``key``, ``headers``): the one
        place that copies its fields, for the lanes' kafka-python reader and reconcile."""
        return cls(
            consumed.topic,
            consumed.partition,
            consumed.offset,
            consumed.timestamp,
            consumed.value,
            consumed.key,
            tuple((name, value) for name, value in consumed.headers or ()),
        )
