"""The control and results schema: one SQLAlchemy MetaData for SQLite and PostgreSQL.

:func:`flowctl.adapters.schema_setup.ensure_schema` creates what is missing, records
:data:`SCHEMA_VERSION`, upgrades an older schema it can, and refuses one written by a
newer (or unknown) version of flowctl with a clear error rather than half-using it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import typing
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect

from flowctl.core.metrics_row import MetricsRow
from flowctl.core.persistence import OUTCOMES
from flowctl.core.window_figures import WindowFigures

#: Bump when a table changes; ``schema_setup.ensure_schema`` upgrades or refuses others.
#: Adding a table is compatible (``create_all`` adds it to an existing database and older
#: code never reads it), so ``replacement_events`` did not bump it.
#: 2: ``metrics_windows`` has columns for the window figures (they were in ``lanes_json``).
#: 3: ``metrics_windows`` has the topology's health (``health``, ``health_cause``).
#: 4: ``metrics_windows`` has ``rolled_up`` (0 for a window, else an hourly rollup's count).
#: 5: ``metrics_windows`` has ``rebuilds``; a version-4 database is upgraded in place
#: (:mod:`flowctl.adapters.schema_setup`).
SCHEMA_VERSION = 5

#: Life of a topology (docs/flow-control.md, "Signals and states"): READY is warmed up but
#: admitting nothing (a standby green), DRAINED has nothing in flight and its results flushed.
TOPOLOGY_STATES = ("STARTING", "READY", "ACTIVE", "DRAINING", "DRAINED", "STOPPED", "FAILED")
SIGNAL_KINDS = ("activate", "deactivate", "drain", "stop")
#: ``running`` while a blue-green replacement is under way, then one of the final three.
REPLACEMENT_OUTCOMES = ("running", "ok", "rolled_back", "failed")


class UTCDateTime(sa.types.TypeDecorator[dt.datetime]):
    """Timezone-aware UTC datetimes on every dialect (SQLite stores naive text).

    Naive values are refused on the way in: a naive time is ambiguous and a
    silent local-time shift would corrupt every duration computed from it.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: dt.datetime | None, dialect: Dialect) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"datetime {value!r} is naive; pass a timezone-aware (UTC) value")
        value = value.astimezone(dt.UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(
        self, value: dt.datetime | None, dialect: Dialect
    ) -> dt.datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)


def utcnow() -> dt.datetime:
    """The current time, timezone-aware UTC (what every timestamp column stores)."""
    return dt.datetime.now(dt.UTC)


metadata = sa.MetaData()

schema_version = sa.Table(
    "flowctl_schema_version",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

topologies = sa.Table(
    "topologies",
    metadata,
    sa.Column("topology_id", sa.String(200), primary_key=True),
    sa.Column("pipeline", sa.String(100), nullable=False, index=True),
    sa.Column("colour", sa.String(20), nullable=False),
    sa.Column("generation", sa.Integer, nullable=False),
    sa.Column("parallelism", sa.Integer, nullable=False),
    sa.Column("state", sa.String(20), nullable=False),
    sa.Column("heartbeat_at", UTCDateTime, nullable=True),
    sa.Column("spark_app_id", sa.String(200), nullable=True),
    sa.Column("airflow_run_id", sa.String(250), nullable=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.CheckConstraint("parallelism >= 1", name="ck_topologies_parallelism"),
    sa.CheckConstraint(
        "state IN (" + ", ".join(f"'{s}'" for s in TOPOLOGY_STATES) + ")",
        name="ck_topologies_state",
    ),
)

# Why a topology failed, when the platform knows (records lost before processing, a read
# error that persisted): the cause the task log names, shown on the metrics page beside
# the topology's state. A table of its own so that ``topologies`` keeps its columns.
topology_causes = sa.Table(
    "topology_causes",
    metadata,
    sa.Column(
        "topology_id",
        sa.String(200),
        sa.ForeignKey("topologies.topology_id"),
        primary_key=True,
    ),
    sa.Column("cause", sa.Text, nullable=False),
    sa.Column("recorded_at", UTCDateTime, nullable=False),
)

control_signals = sa.Table(
    "control_signals",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column(
        "topology_id",
        sa.String(200),
        sa.ForeignKey("topologies.topology_id"),
        nullable=False,
        index=True,
    ),
    sa.Column("kind", sa.String(20), nullable=False),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("handled_at", UTCDateTime, nullable=True),
    sa.CheckConstraint(
        "kind IN (" + ", ".join(f"'{k}'" for k in SIGNAL_KINDS) + ")",
        name="ck_control_signals_kind",
    ),
)

offsets = sa.Table(
    "offsets",
    metadata,
    sa.Column("pipeline", sa.String(100), primary_key=True),
    sa.Column("topic", sa.String(250), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("next_offset", sa.BigInteger, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
)

#: What happened to a tuple's records, as recorded in ``applied_ranges`` (the MRWQ's).
APPLIED_OUTCOMES = OUTCOMES

# One row per tuple whose outcome is durable (SPEC F, docs/flow-control.md): ``applied``
# (its results are in the database), ``replayed`` (its records went to the replay topic and
# come back one by one under their original coordinates) or ``dlq``. The flusher inserts a
# row in the same transaction as the results, so a tuple flushed twice is applied once; the
# durable checkpoint (``offsets.next_offset``) moves over contiguous rows.
applied_ranges = sa.Table(
    "applied_ranges",
    metadata,
    sa.Column("pipeline", sa.String(100), primary_key=True),
    sa.Column("topic", sa.String(250), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("start", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("end", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("outcome", sa.String(20), nullable=False),
    sa.Column("applied_at", UTCDateTime, nullable=False),
    sa.CheckConstraint('"start" >= 0 AND "end" > "start"', name="ck_applied_ranges_span"),
    sa.CheckConstraint(
        "outcome IN (" + ", ".join(f"'{o}'" for o in APPLIED_OUTCOMES) + ")",
        name="ck_applied_ranges_outcome",
    ),
    # The checkpoint advances over rows ending after it, and claims look up rows ending
    # after a new range's start: both read the table from ``end``, never its whole past.
    sa.Index("ix_applied_ranges_end", "pipeline", "topic", "partition", "end"),
)

# The MRWQ flusher's position per queue namespace (core.persistence.FlusherSnapshot), kept
# next to the checkpoint and written in the flush's own transaction, so a flusher restarted
# after memcached lost the queue (a new epoch) knows items were lost.
# Eden records lost before they were processed and skipped under ``[topics] on_data_loss
# = "skip"``: one row per range ``[first, end)``; the checkpoint moved over it in the same
# transaction. Reconcile lists them and leaves them out of its comparison.
skipped_ranges = sa.Table(
    "skipped_ranges",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("pipeline", sa.String(100), nullable=False, index=True),
    sa.Column("topic", sa.String(255), nullable=False),
    sa.Column("partition", sa.Integer, nullable=False),
    sa.Column("first", sa.BigInteger, nullable=False),
    sa.Column("end", sa.BigInteger, nullable=False),
    sa.Column("topology_id", sa.String(200), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("skipped_at", UTCDateTime, nullable=False),
    sa.CheckConstraint('"end" > "first" AND "first" >= 0', name="ck_skipped_ranges_span"),
)

mrwq_state = sa.Table(
    "mrwq_state",
    metadata,
    sa.Column("namespace", sa.String(200), primary_key=True),
    sa.Column("pipeline", sa.String(100), nullable=False),
    sa.Column("epoch", sa.String(64), nullable=True),
    sa.Column("head", sa.BigInteger, nullable=False),
    sa.Column("updated_at", UTCDateTime, nullable=False),
    sa.CheckConstraint("head >= 1", name="ck_mrwq_state_head"),
)

#: ``metrics_windows`` columns whose name is not their field's (:func:`window_column`).
_WINDOW_RENAMED = {
    "topology": "topology_id",
    "latency_p50_s": "latency_p50_ms",  # stored in milliseconds
    "latency_p99_s": "latency_p99_ms",
    "lanes": "lanes_json",  # the per-lane gauges, a JSON list
    "levels": "levels_json",  # backpressure level per stage, a JSON object
}
#: Fields of a window that are not stored: the planner's window number.
WINDOW_UNSTORED = ("n",)


def window_column(name: str) -> str:
    """The ``metrics_windows`` column of :class:`MetricsRow` field ``name``."""
    return _WINDOW_RENAMED.get(name, name)


def _window_columns() -> list[sa.Column[Any]]:
    """One column per :class:`MetricsRow` field: the table is derived from the type.

    Counts are BigInteger, other numbers Float, times UTC datetimes, lanes and levels
    JSON text; the figures of :class:`WindowFigures` may be NULL (not measured).
    """
    hints = typing.get_type_hints(MetricsRow)
    figures = {f.name for f in dataclasses.fields(WindowFigures)}
    columns: list[sa.Column[Any]] = []
    for f in dataclasses.fields(MetricsRow):
        if f.name in WINDOW_UNSTORED:
            continue
        hint, name = hints[f.name], window_column(f.name)
        nullable = f.name in figures or type(None) in getattr(hint, "__args__", ())
        if f.name == "topology":
            kind: Any = sa.String(200)
        elif hint is str or str in getattr(hint, "__args__", ()):
            kind = sa.Text
        elif f.name in ("window_start", "window_end"):
            kind = UTCDateTime
        elif name.endswith("_json"):
            kind = sa.Text
        elif int in (hint, *getattr(hint, "__args__", ())):
            kind = sa.BigInteger
        else:
            kind = sa.Float
        columns.append(sa.Column(name, kind, nullable=nullable, index=f.name == "topology"))
    return columns


metrics_windows = sa.Table(
    "metrics_windows",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    *_window_columns(),
)

# One row per blue-green replacement (SPEC E). No foreign keys to ``topologies``: the
# event is a history record and must be writable even when the new topology never got
# registered (a green that failed to start) or the old one was cleaned up.
replacement_events = sa.Table(
    "replacement_events",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("pipeline", sa.String(100), nullable=False, index=True),
    sa.Column("old_topology_id", sa.String(200), nullable=False),
    sa.Column("new_topology_id", sa.String(200), nullable=True),
    sa.Column("old_parallelism", sa.Integer, nullable=False),
    sa.Column("new_parallelism", sa.Integer, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("decision_json", sa.Text, nullable=True),
    sa.Column("started_at", UTCDateTime, nullable=False),
    sa.Column("ready_at", UTCDateTime, nullable=True),
    sa.Column("deactivated_at", UTCDateTime, nullable=True),
    sa.Column("drained_at", UTCDateTime, nullable=True),
    sa.Column("finished_at", UTCDateTime, nullable=True),
    sa.Column("pause_ms", sa.Float, nullable=True),
    sa.Column("duplicates", sa.BigInteger, nullable=True),
    sa.Column("outcome", sa.String(20), nullable=False),
    sa.Column("error", sa.Text, nullable=True),
    sa.CheckConstraint(
        "old_parallelism >= 1 AND new_parallelism >= 1",
        name="ck_replacement_events_parallelism",
    ),
    sa.CheckConstraint(
        "outcome IN (" + ", ".join(f"'{o}'" for o in REPLACEMENT_OUTCOMES) + ")",
        name="ck_replacement_events_outcome",
    ),
    sa.CheckConstraint("pause_ms IS NULL OR pause_ms >= 0", name="ck_replacement_events_pause_ms"),
    sa.CheckConstraint(
        "duplicates IS NULL OR duplicates >= 0", name="ck_replacement_events_duplicates"
    ),
)

# One row per overlapped handover (docs/flow-control.md "Overlapped handover"): the
# replace operator opens it before it deactivates blue; blue's job writes its admission
# frontier into it when it stops admitting; green's job admits from that frontier and
# records when it admitted and when it took over from a gone blue. The durable place of
# the frontier: a memcached restart must not lose it.
handovers = sa.Table(
    "handovers",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("pipeline", sa.String(100), nullable=False, index=True),
    sa.Column("event_id", sa.Integer, nullable=True),
    sa.Column("blue_topology_id", sa.String(200), nullable=False, index=True),
    sa.Column("green_topology_id", sa.String(200), nullable=False, index=True),
    sa.Column("created_at", UTCDateTime, nullable=False),
    sa.Column("frontier_json", sa.Text, nullable=True),
    sa.Column("frontier_at", UTCDateTime, nullable=True),
    sa.Column("green_admitting_at", UTCDateTime, nullable=True),
    sa.Column("blue_gone_at", UTCDateTime, nullable=True),
    sa.Column("note", sa.Text, nullable=True),
)

word_counts = sa.Table(
    "word_counts",
    metadata,
    sa.Column("pipeline", sa.String(100), primary_key=True),
    sa.Column("word", sa.Text, primary_key=True),
    sa.Column("count", sa.BigInteger, nullable=False),
)

#: Status classes of ``log_events.status_class`` (HTTP status 100-599).
STATUS_CLASSES = ("1xx", "2xx", "3xx", "4xx", "5xx")

# One row per parsed web-server log line (pipeline ``logetl``). The key is the line's
# Kafka coordinates: a tuple applied twice (a replay, a restart, a caller's slip) hits the
# primary key and is ignored, so rows are never duplicated.
log_events = sa.Table(
    "log_events",
    metadata,
    sa.Column("pipeline", sa.String(100), primary_key=True),
    sa.Column("topic", sa.String(250), primary_key=True),
    sa.Column("partition", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("offset", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("ts", UTCDateTime, nullable=False),
    sa.Column("ip", sa.String(45), nullable=False),
    sa.Column("ip_prefix", sa.String(50), nullable=False),
    sa.Column("remote_user", sa.Text, nullable=True),
    sa.Column("method", sa.String(32), nullable=False),
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("protocol", sa.String(32), nullable=False),
    sa.Column("status", sa.Integer, nullable=False),
    sa.Column("status_class", sa.String(3), nullable=False),
    sa.Column("bytes", sa.BigInteger, nullable=False),
    sa.Column("referer", sa.Text, nullable=True),
    sa.Column("user_agent", sa.Text, nullable=True),
    sa.Column("is_bot", sa.Boolean, nullable=False),
    sa.CheckConstraint("status BETWEEN 100 AND 599", name="ck_log_events_status"),
    sa.CheckConstraint(
        "status_class IN (" + ", ".join(f"'{c}'" for c in STATUS_CLASSES) + ")",
        name="ck_log_events_status_class",
    ),
    sa.CheckConstraint("bytes >= 0", name="ck_log_events_bytes"),
)


def dialect_insert(conn: sa.Connection | sa.Engine) -> Callable[[sa.Table], Any]:
    """The dialect's ``insert`` (with ``on_conflict_do_*``): SQLite or PostgreSQL only."""
    name = conn.dialect.name
    if name == "sqlite":
        return sqlite_insert
    if name == "postgresql":
        return pg_insert
    raise ValueError(f"database dialect={name!r} is not supported (use sqlite or postgresql)")
