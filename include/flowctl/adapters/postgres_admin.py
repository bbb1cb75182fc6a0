"""Administration of a PostgreSQL server for the process cluster: databases and Airflow jobs.

``flowctl cluster`` creates its own databases on the local server (results and control
plane, Airflow's metadata), drops them on ``down --purge``, and checks Airflow's components
by their heartbeat rows; the SQL lives here so that the services stay free of database
clients.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import sqlalchemy as sa


class PostgresAdminError(RuntimeError):
    """The server or database could not be reached; the message names it (no password)."""


def with_database(url: str, name: str) -> str:
    """``url`` (a server URL) pointing at database ``name``, password kept."""
    return sa.make_url(url).set(database=name).render_as_string(hide_password=False)


@contextmanager
def _admin(url: str, timeout_s: float) -> Iterator[tuple[sa.Connection, sa.Engine]]:
    """An autocommit connection to the server of ``url`` (CREATE / DROP DATABASE cannot run
    in a transaction); an unreachable server is a :class:`PostgresAdminError` naming it."""
    engine = sa.create_engine(
        url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": int(timeout_s)}
    )
    try:
        with engine.connect() as conn:
            yield conn, engine
    except sa.exc.OperationalError as exc:
        raise PostgresAdminError(
            f"cannot reach {sa.make_url(url).render_as_string()}: {str(exc).splitlines()[0]}"
        ) from None
    finally:
        engine.dispose()


def _exists(conn: sa.Connection, name: str) -> bool:
    found = conn.execute(sa.text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
    return found.scalar() is not None


def ensure_databases(url: str, names: Sequence[str], timeout_s: float = 5.0) -> list[str]:
    """Create the databases ``names`` that do not exist yet; returns the ones created."""
    created = []
    with _admin(url, timeout_s) as (conn, engine):
        for name in names:
            if not _exists(conn, name):
                quoted = engine.dialect.identifier_preparer.quote(name)
                conn.execute(sa.text(f"CREATE DATABASE {quoted}"))
                created.append(name)
    return created


def job_heartbeat_age(url: str, job_type: str, timeout_s: float) -> float | None:
    """Seconds since the newest heartbeat of a running Airflow job of ``job_type``
    (``SchedulerJob``, ``TriggererJob``, ...) in the metadata database ``url``; ``None``
    when there is none."""
    engine = sa.create_engine(url, connect_args={"connect_timeout": int(timeout_s) + 1})
    try:
        with engine.connect() as conn:
            age = conn.execute(
                sa.text(
                    "SELECT EXTRACT(EPOCH FROM (now() - max(latest_heartbeat))) FROM job "
                    "WHERE job_type = :t AND state = 'running'"
                ),
                {"t": job_type},
            ).scalar()
    except sa.exc.SQLAlchemyError as exc:
        raise PostgresAdminError(f"metadata DB not answering: {exc}") from None
    finally:
        engine.dispose()
    return None if age is None else float(age)


def drop_databases(url: str, names: Sequence[str], timeout_s: float = 5.0) -> list[str]:
    """Drop the databases ``names`` that exist; returns the ones dropped.

    ``WITH (FORCE)`` (PostgreSQL 13+) ends the sessions still connected: a purge runs
    after ``down``, and a connection a killed process left open must not stop it.
    """
    dropped = []
    with _admin(url, timeout_s) as (conn, engine):
        for name in names:
            if _exists(conn, name):
                quoted = engine.dialect.identifier_preparer.quote(name)
                conn.execute(sa.text(f"DROP DATABASE {quoted} WITH (FORCE)"))
                dropped.append(name)
    return dropped
