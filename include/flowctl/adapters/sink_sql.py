"""The SQL of declarative sinks: the result table, one upsert per batch, the stored reader.

:mod:`flowctl.core.sink_rules` decides what a batch of tuple results becomes (one row per
key) and how a row merges with the stored one; this module says the same in SQL, for
SQLite and PostgreSQL, in the caller's transaction (the flusher's, whose
``applied_ranges`` claims make every tuple count once):

- ``sum``: ``ON CONFLICT DO UPDATE SET v = t.v + excluded.v``;
- ``insert``: ``ON CONFLICT DO NOTHING``;
- ``max`` / ``min``: ``SET v = CASE WHEN excluded.v > t.v THEN excluded.v ELSE t.v END``;
- ``replace``: ``SET v = excluded.v ... WHERE excluded.<event_time> > t.<event_time>``.

The shipped result tables (``word_counts``, ``log_events``) are defined in
:mod:`flowctl.adapters.schema` with their CHECK constraints; a sink naming one of them
uses that table, after checking the declaration agrees with it. Any other table is built
from the declaration and created on first use (``CREATE`` if missing, in the caller's
transaction: two writers racing to create it make one flush fail and be retried).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.schema import UTCDateTime, dialect_insert
from flowctl.core.sink_rules import PIPELINE_COLUMN, Key, SinkSpec, Values, view

__all__ = ["SinkTableError", "apply_rows", "count_by", "read_rows", "stored", "table_for"]

#: Result tables that predate declarative sinks; every other schema table is the platform's.
SHIPPED_TABLES = ("word_counts", "log_events")

_TYPES: dict[str, type[sa.types.TypeEngine[Any]] | type[sa.types.TypeDecorator[Any]]] = {
    "text": sa.Text,
    "integer": sa.Integer,
    "bigint": sa.BigInteger,
    "float": sa.Float,
    "boolean": sa.Boolean,
    "timestamp": UTCDateTime,
}
#: Tables built from declarations, apart from the platform's schema.
_declared = sa.MetaData()
_lock = threading.Lock()


class SinkTableError(ValueError):
    """A ``[sink]`` that disagrees with the table of that name (shipped or declared before)."""


def _build(spec: SinkSpec, metadata: sa.MetaData) -> sa.Table:
    columns = [sa.Column(PIPELINE_COLUMN, sa.String(100), primary_key=True)]
    for c in spec.columns:
        kind = _TYPES[c.type]
        key = c.name in spec.key
        columns.append(
            sa.Column(c.name, kind(), primary_key=key, nullable=c.nullable, autoincrement=False)
        )
    return sa.Table(spec.table, metadata, *columns)


def _disagreement(spec: SinkSpec, table: sa.Table) -> str | None:
    """Why ``table`` cannot hold ``spec``'s rows (``None``: it can)."""
    wanted = [PIPELINE_COLUMN, *(c.name for c in spec.columns)]
    if sorted(table.columns.keys()) != sorted(wanted):
        return f"has columns {sorted(table.columns.keys())}, the sink declares {sorted(wanted)}"
    key = [c.name for c in table.primary_key.columns]
    if key != [PIPELINE_COLUMN, *spec.key]:
        return f"is keyed by {key}, the sink by {[PIPELINE_COLUMN, *spec.key]}"
    for c in spec.columns:
        column = table.columns[c.name]
        family = sa.String if c.type == "text" else _TYPES[c.type]  # String(45) holds text too
        if not isinstance(column.type, family) or column.nullable != c.nullable:
            null = "nullable" if column.nullable else "not null"
            return f"has {c.name} {column.type} ({null}), the sink declares {c.describe()}"
    return None


def table_for(spec: SinkSpec) -> sa.Table:
    """The table of ``spec`` (a shipped one, or one built from the declaration).

    Raises :class:`SinkTableError` when the declaration disagrees with the shipped
    table, with a table another sink declared differently in this process, or names a
    platform table (``offsets``, ``applied_ranges``, ...).
    """
    name = spec.table
    if name in schema.metadata.tables:
        if name not in SHIPPED_TABLES:
            raise SinkTableError(
                f"sink.table={name!r} is a flowctl control table; choose another name"
            )
        table = schema.metadata.tables[name]
    else:
        with _lock:
            found = _declared.tables.get(name)
            table = found if found is not None else _build(spec, _declared)
    why = _disagreement(spec, table)
    if why is not None:
        raise SinkTableError(f"sink.table={name!r}: the table {why}")
    return table


def _ensure(conn: sa.Connection, spec: SinkSpec) -> sa.Table:
    table = table_for(spec)
    table.create(conn, checkfirst=True)
    return table


def apply_rows(
    conn: sa.Connection, spec: SinkSpec, pipeline: str, rows: Mapping[Key, Values]
) -> int:
    """Merge ``rows`` (one per key, :func:`~flowctl.core.sink_rules.fold`) into the table
    with ONE upsert statement; returns the rows inserted or changed."""
    if not rows:
        return 0
    table = _ensure(conn, spec)
    stmt = dialect_insert(conn)(table)
    index = [PIPELINE_COLUMN, *spec.key]
    new, old = stmt.excluded, table.c
    if spec.merge == "insert" or not spec.values:
        stmt = stmt.on_conflict_do_nothing(index_elements=index)
    elif spec.merge == "replace":
        et = spec.event_time
        assert et is not None
        stmt = stmt.on_conflict_do_update(
            index_elements=index, set_={v: new[v] for v in spec.values}, where=new[et] > old[et]
        )
    else:
        merged: Callable[[str], Any] = {
            "sum": lambda v: old[v] + new[v],
            "max": lambda v: sa.case((new[v] > old[v], new[v]), else_=old[v]),
            "min": lambda v: sa.case((new[v] < old[v], new[v]), else_=old[v]),
        }[spec.merge]
        stmt = stmt.on_conflict_do_update(
            index_elements=index, set_={v: merged(v) for v in spec.values}
        )
    params = [
        {PIPELINE_COLUMN: pipeline, **dict(zip(spec.key, key, strict=True)), **values}
        for key, values in rows.items()
    ]
    return len(conn.execute(stmt.returning(table.c[spec.key[0]]), params).all())


def read_rows(conn: sa.Connection, spec: SinkSpec, pipeline: str) -> dict[Key, Values]:
    """The pipeline's rows, ``{key: values}``, in the caller's transaction."""
    table = _ensure(conn, spec)
    names = [*spec.key, *spec.values]
    query = sa.select(*(table.c[n] for n in names)).where(table.c[PIPELINE_COLUMN] == pipeline)
    n = len(spec.key)
    return {
        tuple(r[:n]): dict(zip(spec.values, r[n:], strict=True)) for r in conn.execute(query).all()
    }


def stored(conn: sa.Connection, spec: SinkSpec, pipeline: str) -> dict[str, Any]:
    """The pipeline's rows shaped for reconcile (:func:`~flowctl.core.sink_rules.view`)."""
    return view(spec, read_rows(conn, spec, pipeline))


def count_by(conn: sa.Connection, table: str, pipeline: str, column: str) -> dict[Any, int]:
    """The pipeline's rows of ``table`` counted per value of ``column``, in the caller's
    transaction: a definition's own ``stored`` summary, grouped by the database."""
    found = schema.metadata.tables.get(table)
    if found is None:
        with _lock:
            found = _declared.tables.get(table)
    if found is None:
        raise SinkTableError(f"table={table!r} is neither shipped nor declared by a loaded [sink]")
    group = found.c[column]
    query = (
        sa.select(group, sa.func.count())
        .where(found.c[PIPELINE_COLUMN] == pipeline)
        .group_by(group)
    )
    return {value: int(n) for value, n in conn.execute(query).all()}
