"""The results/control database: nothing to start, "up" means reachable.

SQLite (the default, a file in the home) needs its directory to exist; any
other SQLAlchemy URL (PostgreSQL is the tested one) must answer ``SELECT 1``
within a connect timeout. Errors name the URL with its password masked.
"""

from __future__ import annotations

import time
from pathlib import Path

from flowctl.config import Settings
from flowctl.services.base import UNREACHABLE, UP, ServiceError, ServiceStatus

NAME = "db"


def masked(url: str) -> str:
    """The URL with its password replaced by ``***``, safe for logs and errors."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except ArgumentError:
        return url.split("@")[-1] if "@" in url else url


def _connect_args(dialect: str, timeout: float) -> dict[str, object]:
    if dialect == "sqlite":
        return {"timeout": timeout}
    if dialect in ("postgresql", "mysql", "mariadb"):
        return {"connect_timeout": max(int(timeout), 1)}
    return {}


def check(url: str, timeout: float = 5.0) -> None:
    """Open the database and run ``SELECT 1``; raise :class:`ServiceError` naming the URL."""
    import sqlalchemy as sa
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

    try:
        parsed = sa.make_url(url)
    except ArgumentError:
        raise ServiceError(f"db: {masked(url)!r} is not a valid SQLAlchemy URL") from None
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    try:
        engine = sa.create_engine(
            parsed, connect_args=_connect_args(parsed.get_backend_name(), timeout)
        )
    except (NoSuchModuleError, ImportError) as exc:
        raise ServiceError(f"db: no driver for {masked(url)}: {exc}") from None
    try:
        with engine.connect() as conn:
            conn.execute(sa.text("SELECT 1")).scalar_one()
    except SQLAlchemyError as exc:
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise ServiceError(f"db: cannot reach {masked(url)}: {reason}") from None
    finally:
        engine.dispose()


class DatabaseService:
    """The configured database; ``up`` checks it, ``down`` leaves it alone."""

    name = NAME

    def up(self, settings: Settings) -> str:
        url = settings.resolved_database_url
        started = time.monotonic()
        check(url)
        return f"{NAME} reachable at {masked(url)} in {time.monotonic() - started:.2f} s"

    def down(self, settings: Settings) -> str:
        return f"{NAME}: nothing to stop ({masked(settings.resolved_database_url)} stays as is)"

    def status(self, settings: Settings) -> ServiceStatus:
        url = settings.resolved_database_url
        try:
            check(url, timeout=3.0)
        except ServiceError as exc:
            return ServiceStatus(NAME, UNREACHABLE, None, masked(url), str(exc))
        return ServiceStatus(NAME, UP, None, masked(url), "SELECT 1 ok")
