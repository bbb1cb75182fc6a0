"""An older schema upgraded in place: a user upgrading flowctl keeps the durable checkpoint
and every bookkeeping row (SQLite and PostgreSQL)."""

from __future__ import annotations

import datetime as dt
from concurrent.futures import ThreadPoolExecutor

import pytest
import sqlalchemy as sa

from flowctl.adapters import schema, schema_setup
from flowctl.adapters.control_plane import ControlPlane
from flowctl.core.window_figures import WindowFigures


def _as_version_4(plane: ControlPlane) -> None:
    """The database as version 4 of flowctl left it: no ``rebuilds`` column."""
    with plane.engine.begin() as conn:
        conn.execute(sa.text("ALTER TABLE metrics_windows DROP COLUMN rebuilds"))
        conn.execute(schema.schema_version.update().values(version=4))


def _version(plane: ControlPlane) -> int:
    with plane.engine.connect() as conn:
        return int(conn.execute(sa.select(schema.schema_version.c.version)).scalar_one())


def test_a_version_4_database_is_upgraded_keeping_its_rows(database_url: str) -> None:
    plane = ControlPlane(database_url)
    plane.ensure_schema()
    plane.register_topology("wc-blue-1", "wordcount", "blue", 2)
    start = dt.datetime(2026, 11, 28, 12, tzinfo=dt.UTC)
    plane.write_metrics_window("wc-blue-1", start, start + dt.timedelta(seconds=5), acked=7)
    with plane.engine.begin() as conn:
        conn.execute(
            schema.offsets.insert().values(
                pipeline="wordcount",
                topic="wordcount.eden",
                partition=0,
                next_offset=1234,
                updated_at=schema.utcnow(),
            )
        )
    _as_version_4(plane)
    with plane.engine.connect() as conn:
        names = {c["name"] for c in sa.inspect(conn).get_columns("metrics_windows")}
    assert "rebuilds" not in names

    upgraded = ControlPlane(database_url)
    upgraded.ensure_schema()

    assert _version(upgraded) == schema.SCHEMA_VERSION
    assert upgraded.committed_offsets("wordcount", "wordcount.eden") == {0: 1234}
    (old,) = upgraded.metrics_windows("wc-blue-1")
    assert (old.acked, old.rebuilds) == (7, None)  # not measured by version 4
    upgraded.write_metrics_window(
        "wc-blue-1",
        start + dt.timedelta(seconds=5),
        start + dt.timedelta(seconds=10),
        figures=WindowFigures(rebuilds=2),
    )
    assert [w.rebuilds for w in upgraded.metrics_windows("wc-blue-1")] == [None, 2]


def test_processes_starting_at_once_upgrade_it_once(database_url: str) -> None:
    plane = ControlPlane(database_url)
    plane.ensure_schema()
    _as_version_4(plane)
    planes = [ControlPlane(database_url) for _ in range(4)]
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda p: p.ensure_schema(), planes))
    assert _version(plane) == schema.SCHEMA_VERSION


def test_a_schema_older_than_any_upgrade_is_refused_with_advice(database_url: str) -> None:
    plane = ControlPlane(database_url)
    plane.ensure_schema()
    with plane.engine.begin() as conn:
        conn.execute(schema.schema_version.update().values(version=3))
    assert not schema_setup.upgradable(3)
    with pytest.raises(schema_setup.SchemaVersionError, match=r"version \[3\].*use a new database"):
        ControlPlane(database_url).ensure_schema()
