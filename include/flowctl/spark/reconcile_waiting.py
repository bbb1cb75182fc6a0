"""What reconcile reports beside its comparison: the part of the log not durable yet.

A stream that stores nothing leaves the durable part empty, and a comparison of the
durable part alone then finds nothing to differ: reconcile also reads the log's ends,
prints per partition how many records lie past the durable checkpoint, and calls the
stream stuck (:func:`stalled`) when that part has not moved for a while (the job exits
4, naming the partitions; docs/operations.md).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

#: Default of reconcile's ``--stall-minutes`` (see :func:`stalled`).
STALL_MINUTES = 10.0


def waiting(
    bootstrap: str, topic: str, checkpoints: Mapping[int, int]
) -> tuple[dict[int, int], dict[int, int | None]]:
    """``(not_durable, first_waiting_ms)``: per partition, the records past the durable
    checkpoint (the log's end minus it) and the Kafka timestamp of the first of them."""
    from flowctl.adapters import kafka_ends, kafka_log

    consumer = kafka_log.new_consumer(bootstrap)
    try:
        if not consumer.partitions_for_topic(topic):  # no log yet (nothing ingested)
            return {}, {}
        ends = kafka_ends.latest_offsets(consumer, topic)
        not_durable = {
            p: end - checkpoints.get(p, 0)
            for p, end in sorted(ends.items())
            if end > checkpoints.get(p, 0)
        }
        first: dict[int, int | None] = {}
        for p in not_durable:
            at = checkpoints.get(p, 0)
            head = list(kafka_log.read_range(consumer, topic, p, at, at + 1))
            first[p] = head[0].timestamp if head else None
    finally:
        consumer.close()
    return not_durable, first


def stalled(
    checkpoints: Mapping[int, int],
    progressed_at: dt.datetime | None,
    not_durable: Mapping[int, int],
    first_waiting_ms: Mapping[int, int | None],
    now: dt.datetime,
    stall_s: float,
) -> str | None:
    """Why the stream made no durable progress over a log that has records, else ``None``.

    Stalled means both: a partition's first record past the durable checkpoint was
    written more than ``stall_s`` ago (``first_waiting_ms``: its Kafka timestamp), and no
    checkpoint of the topic moved within ``stall_s`` (or none exists). A stream busy with
    an old backlog moves its checkpoint; records produced a moment ago are not late.
    """
    moved = progressed_at
    if moved is not None and (now - moved).total_seconds() <= stall_s:
        return None
    cutoff_ms = (now.timestamp() - stall_s) * 1000.0
    late = sorted(
        p
        for p, n in not_durable.items()
        if n > 0 and (first_waiting_ms.get(p) or cutoff_ms + 1) <= cutoff_ms
    )
    if not late:
        return None
    since = "no checkpoint yet" if moved is None else f"checkpoint last moved {moved.isoformat()}"
    return (
        f"no durable progress for {stall_s / 60:g} minute(s) over a log that has records "
        f"({since}): "
        + ", ".join(
            f"partition {p} has {not_durable[p]} record(s) past the checkpoint "
            f"{checkpoints.get(p, 0)}"
            for p in late
        )
    )
