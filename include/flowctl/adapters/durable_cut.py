"""A consistent cut of what is durable for one pipeline and topic (for the reconcile).

Checkpoints, durable ``applied_ranges`` rows, the pipeline's stored results, the ranges
skipped as lost (``skipped_ranges``) and when a checkpoint last moved are read in ONE
repeatable-read transaction, so they describe the same moment even while a stream job
keeps flushing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from flowctl.adapters import schema, schema_setup
from flowctl.adapters.db import engine_for

#: ``{partition: [(start, end, outcome), ...]}`` of ``applied_ranges``.
Rows = dict[int, list[tuple[int, int, str]]]
#: ``{partition: [(first, end), ...]}`` of ``skipped_ranges``.
Skips = dict[int, list[tuple[int, int]]]


def read_durable_cut(
    database_url: str,
    pipeline: str,
    topic: str,
    stored: Callable[[Any, str], Mapping[str, Any]],
) -> tuple[dict[int, int], Rows, dict[str, Any], Skips, dt.datetime | None]:
    """``(checkpoints, rows, stored(conn, pipeline), skipped, progressed_at)`` in one
    transaction; ``progressed_at``: when a checkpoint of ``topic`` last moved (``None``:
    no checkpoint yet)."""
    engine = engine_for(database_url)
    schema_setup.ensure_schema(engine)
    o, a = schema.offsets, schema.applied_ranges
    with engine.connect() as raw:
        if engine.dialect.name == "sqlite":
            # pysqlite opens no transaction before a SELECT; BEGIN pins one WAL snapshot.
            raw.exec_driver_sql("BEGIN")
            conn = raw
        else:
            conn = raw.execution_options(isolation_level="REPEATABLE READ")
        try:
            checkpoints = {
                int(p): int(n)
                for p, n in conn.execute(
                    sa.select(o.c.partition, o.c.next_offset).where(
                        o.c.pipeline == pipeline, o.c.topic == topic
                    )
                ).all()
            }
            rows: Rows = {}
            for p, s, e, outcome in conn.execute(
                sa.select(a.c.partition, a.c.start, a.c.end, a.c.outcome).where(
                    a.c.pipeline == pipeline, a.c.topic == topic
                )
            ).all():
                rows.setdefault(int(p), []).append((int(s), int(e), str(outcome)))
            results = dict(stored(conn, pipeline))
            skipped: Skips = {}
            k = schema.skipped_ranges
            for p, first, end in conn.execute(
                sa.select(k.c.partition, k.c.first, k.c.end)
                .where(k.c.pipeline == pipeline, k.c.topic == topic)
                .order_by(k.c.partition, k.c.first)
            ).all():
                skipped.setdefault(int(p), []).append((int(first), int(end)))
            progressed_at = conn.execute(
                sa.select(sa.func.max(o.c.updated_at)).where(
                    o.c.pipeline == pipeline, o.c.topic == topic
                )
            ).scalar()
        finally:
            conn.rollback()
    return checkpoints, rows, results, skipped, progressed_at  # max() keeps UTCDateTime
