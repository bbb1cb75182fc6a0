"""The results/control database: nothing to start, "up" means reachable.

SQLite (the default, a file in the home) needs its directory to exist; any
other SQLAlchemy URL (PostgreSQL is the tested one) must answer ``SELECT 1``
within a connect timeout. Errors name the URL with its password masked.
"""

from __future__ import annotations

import time

from flowctl.config import Settings
from flowctl.services.base import UNREACHABLE, UP, ServiceError, ServiceStatus

NAME = "db"


def masked(url: str) -> str:
    """The URL with its password replaced by ``***``, safe for logs and errors."""
    from flowctl.adapters.db import masked_url

    return masked_url(url)


def check(url: str, timeout: float = 5.0) -> None:
    """Open the database and run ``SELECT 1``; raise :class:`ServiceError` naming the URL.

    The check is the database adapter's; it is imported here, not at the top,
    so the CLI starts without loading SQLAlchemy.
    """
    from flowctl.adapters.db import DatabaseCheckFailed, check_database

    try:
        check_database(url, timeout)
    except DatabaseCheckFailed as exc:
        raise ServiceError(f"{NAME}: {exc}") from None


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
