"""Setting a database up for flowctl: the tables created, the schema version recorded,
an older schema upgraded in place (so that an upgrade of flowctl keeps the durable
checkpoint and every bookkeeping row), a newer one refused.

Each step names what one version added to the one before. Only additive changes are
steps here (a new nullable column: older rows read it as "not measured"); a change that
needs data rewritten would be a step of its own kind, and a version with no step is
refused by :func:`ensure_schema` with a clear error.

A step runs in one transaction with the version's bump, after re-reading the version
under a row lock (PostgreSQL; SQLite serialises writers): of several processes starting
at once on an old database, one upgrades it and the others find it done.
"""

from __future__ import annotations

import logging

import sqlalchemy as sa

from flowctl.adapters import schema

log = logging.getLogger("flowctl.schema")

SCHEMA_VERSION = schema.SCHEMA_VERSION


class SchemaVersionError(RuntimeError):
    """The database carries a schema version this code does not know."""


#: version -> the columns (table, column) the next version added; each is defined in
#: :mod:`flowctl.adapters.schema`, whose definition the added column takes.
ADDED_COLUMNS: dict[int, tuple[tuple[str, str], ...]] = {
    # 5: the topology's rebuilds after lost MRWQ items (WindowFigures.rebuilds)
    4: (("metrics_windows", "rebuilds"),),
}


def upgradable(version: int) -> bool:
    """Whether a database at ``version`` can be brought to the current one here."""
    return all(v in ADDED_COLUMNS for v in range(version, SCHEMA_VERSION))


def upgrade(engine: sa.Engine, version: int) -> None:
    """Bring a database at ``version`` (:func:`upgradable`) to ``SCHEMA_VERSION``."""
    for step in range(version, SCHEMA_VERSION):
        try:
            if not _step(engine, step):
                continue  # another process did this step already
        except sa.exc.DBAPIError:
            # SQLite takes no row lock: two processes may both add the column, and the
            # second is refused ("duplicate column"). Done by the other, or a real error.
            if _version(engine) > step:
                continue
            raise
        log.info(
            "database %s: flowctl schema upgraded from version %d to %d (added %s)",
            engine.url.render_as_string(hide_password=True),
            step,
            step + 1,
            ", ".join(f"{t}.{c}" for t, c in ADDED_COLUMNS[step]),
        )


def _version(engine: sa.Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(schema.schema_version.c.version)).scalar_one())


def _step(engine: sa.Engine, step: int) -> bool:
    """Upgrade from ``step`` to ``step + 1`` in one transaction; False if found done."""
    with engine.begin() as conn:
        found = conn.execute(
            sa.select(schema.schema_version.c.version)
            .where(schema.schema_version.c.id == 1)
            .with_for_update()
        ).scalar_one()
        if found != step:
            return False
        present = {
            table: {c["name"] for c in sa.inspect(conn).get_columns(table)}
            for table, _ in ADDED_COLUMNS[step]
        }
        for table, column in ADDED_COLUMNS[step]:
            if column not in present[table]:
                _add_column(conn, schema.metadata.tables[table].c[column])
        conn.execute(
            sa.update(schema.schema_version)
            .where(schema.schema_version.c.id == 1)
            .values(version=step + 1, updated_at=schema.utcnow())
        )
    return True


def _add_column(conn: sa.Connection, column: sa.Column[object]) -> None:
    if not column.nullable:
        raise ValueError(f"column {column.table.name}.{column.name} must be nullable to be added")
    kind = column.type.compile(dialect=conn.dialect)
    quote = conn.dialect.identifier_preparer.quote
    conn.execute(
        sa.text(f"ALTER TABLE {quote(column.table.name)} ADD COLUMN {quote(column.name)} {kind}")
    )


def ensure_schema(engine: sa.Engine) -> None:
    """Create missing tables and check (or record) the schema version.

    Safe to call from several processes at once: table creation is
    ``checkfirst`` and the version row is inserted only if missing.
    """
    schema.metadata.create_all(engine, checkfirst=True)
    with engine.begin() as conn:
        conn.execute(
            schema.dialect_insert(conn)(schema.schema_version)
            .values(id=1, version=SCHEMA_VERSION, updated_at=schema.utcnow())
            .on_conflict_do_nothing(index_elements=["id"])
        )
        found = conn.execute(sa.select(schema.schema_version.c.version)).scalars().all()
    if len(found) == 1 and found[0] < SCHEMA_VERSION and upgradable(found[0]):
        upgrade(engine, found[0])
        return
    if len(found) != 1 or found[0] != SCHEMA_VERSION:
        older = len(found) == 1 and found[0] < SCHEMA_VERSION
        advice = (
            "this version does not upgrade a schema that old: use a new database (the "
            "embedded platform's: `scripts/demo down`, then remove FLOWCTL_HOME's flowctl.db)"
            if older
            else "upgrade flowctl or use another database"
        )
        raise SchemaVersionError(
            f"database {engine.url.render_as_string(hide_password=True)} has flowctl schema "
            f"version {found}, this code knows version {SCHEMA_VERSION}: {advice}"
        )
