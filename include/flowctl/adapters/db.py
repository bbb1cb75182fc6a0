"""Engines and retried transactions for the control and results databases.

One engine per URL per process (connection pools are expensive and SQLite
needs its pragmas set on every connection). SQLite is shared by the Spark
driver, Airflow tasks and the CLI at once, so it runs in WAL mode with a busy
timeout; a transaction that still meets a transient ``OperationalError``
(locked database, dropped PostgreSQL connection) is retried with backoff as a
whole, then fails with an error naming what was attempted.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import sqlalchemy as sa

from flowctl.adapters.retry import RetriesExhausted, retry_call

T = TypeVar("T")

_engines: dict[str, sa.Engine] = {}
_lock = threading.Lock()


class DatabaseUnavailable(RuntimeError):
    """The database kept failing with operational errors after every retry."""


class DatabaseCheckFailed(RuntimeError):
    """A health check found the URL malformed, its driver missing, or the database silent."""


def _on_sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def engine_for(url_or_engine: str | sa.Engine) -> sa.Engine:
    """The process-wide engine for ``url_or_engine`` (an engine is returned as is)."""
    if isinstance(url_or_engine, sa.Engine):
        return url_or_engine
    if not isinstance(url_or_engine, str) or not url_or_engine:
        raise ValueError(f"database url={url_or_engine!r} must be a non-empty SQLAlchemy URL")
    with _lock:
        engine = _engines.get(url_or_engine)
        if engine is None:
            url = sa.make_url(url_or_engine)
            if url.get_backend_name() == "sqlite":
                engine = sa.create_engine(
                    url, connect_args={"timeout": 30, "check_same_thread": False}
                )
                sa.event.listen(engine, "connect", _on_sqlite_connect)
            elif url.get_backend_name() == "postgresql":
                engine = sa.create_engine(url, pool_pre_ping=True)
            else:
                raise ValueError(
                    f"database url={url.render_as_string(hide_password=True)!r}: backend "
                    f"{url.get_backend_name()!r} is not supported (use sqlite or postgresql)"
                )
            _engines[url_or_engine] = engine
        return engine


def in_transaction(
    engine: sa.Engine, work: Callable[[sa.Connection], T], *, what: str, attempts: int = 6
) -> T:
    """Run ``work(conn)`` in one transaction, retrying the whole of it on ``OperationalError``."""

    def once() -> T:
        with engine.begin() as conn:
            return work(conn)

    try:
        return retry_call(once, what=what, retry_on=(sa.exc.OperationalError,), attempts=attempts)
    except RetriesExhausted as exc:
        url = engine.url.render_as_string(hide_password=True)
        raise DatabaseUnavailable(f"{exc} (database {url})") from exc


def inserted_id(result: sa.CursorResult[Any], what: str) -> int:
    """The primary key an ``INSERT`` of one row gave it; an error naming ``what`` if the
    driver reported none (an ``INSERT ... FROM SELECT`` or an executemany)."""
    key = result.inserted_primary_key
    if key is None or key[0] is None:
        raise RuntimeError(f"{what}: the database reported no primary key for the new row")
    return int(key[0])


def masked_url(url: str) -> str:
    """The URL with its password replaced by ``***``, safe for logs and errors."""
    try:
        return sa.make_url(url).render_as_string(hide_password=True)
    except sa.exc.ArgumentError:
        return url.split("@")[-1] if "@" in url else url


def _connect_args(dialect: str, timeout: float) -> dict[str, object]:
    if dialect == "sqlite":
        return {"timeout": timeout}
    if dialect in ("postgresql", "mysql", "mariadb"):
        return {"connect_timeout": max(int(timeout), 1)}
    return {}


def check_database(url: str, timeout: float = 5.0) -> None:
    """Open the database and run ``SELECT 1`` on a throwaway engine, no retry.

    The health check of ``flowctl services``: a SQLite file's directory is
    created first; any failure raises :class:`DatabaseCheckFailed` naming the
    URL with its password masked.
    """
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise DatabaseCheckFailed(f"{masked_url(url)!r} is not a valid SQLAlchemy URL") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = sa.create_engine(
            parsed, connect_args=_connect_args(parsed.get_backend_name(), timeout)
        )
    except (sa.exc.NoSuchModuleError, ImportError) as exc:
        raise DatabaseCheckFailed(f"no driver for {masked_url(url)}: {exc}") from None
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1")).scalar_one()
    except sa.exc.SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise DatabaseCheckFailed(f"cannot reach {masked_url(url)}: {reason}") from None
    finally:
        engine.dispose()
