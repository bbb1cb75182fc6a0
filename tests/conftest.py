"""Shared fixtures: one embedded Tansu + memcached per session, fresh databases per test.

Fixtures are lazy: a test that asks for neither ``kafka_bootstrap`` nor
``memcached_address`` (nor ``flowctl_settings``) starts nothing. Ports are
picked free at session start, never the defaults (9092, 11211), so a demo
running on the same machine is not disturbed.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from flowctl.config import Settings
from flowctl.services import manager
from flowctl.services.process import free_port

POSTGRES_ENV = "FLOWCTL_TEST_POSTGRES_URL"
POSTGRES_DEFAULT = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


@pytest.fixture(scope="session")
def _session_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The session's settings: a tmp home and free ports; starts nothing by itself."""
    return Settings(
        home=tmp_path_factory.mktemp("flowctl_home"),
        kafka_port=free_port(),
        memcached_port=free_port(),
        memcached_memory_mb=64,
    )


@pytest.fixture(scope="session")
def _session_tansu(_session_settings: Settings) -> Iterator[None]:
    """Tansu for the whole session, started on first use, stopped at the end."""
    manager.up(_session_settings, only="tansu")
    try:
        yield
    finally:
        manager.down(_session_settings, only="tansu")


@pytest.fixture(scope="session")
def _session_memcached(_session_settings: Settings) -> Iterator[None]:
    """memcached for the whole session, started on first use, stopped at the end."""
    manager.up(_session_settings, only="memcached")
    try:
        yield
    finally:
        manager.down(_session_settings, only="memcached")


@pytest.fixture(scope="session")
def flowctl_settings(
    _session_settings: Settings, _session_tansu: None, _session_memcached: None
) -> Settings:
    """Settings with a tmp home and free ports; Tansu and memcached run for the session.

    Its ``database_url`` is empty, i.e. a SQLite file in the home.
    """
    return _session_settings


@pytest.fixture(scope="session")
def kafka_bootstrap(_session_settings: Settings, _session_tansu: None) -> str:
    """``"127.0.0.1:<port>"`` of the session's Tansu broker (memcached is not started)."""
    return _session_settings.kafka_bootstrap


@pytest.fixture(scope="session")
def memcached_address(_session_settings: Settings, _session_memcached: None) -> str:
    """``"127.0.0.1:<port>"`` of the session's memcached (Tansu is not started)."""
    return _session_settings.memcached_address


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file URL in the test's tmp dir."""
    return f"sqlite:///{tmp_path / 'flowctl.db'}"


def _postgres_base_url() -> str:
    return os.environ.get(POSTGRES_ENV) or POSTGRES_DEFAULT


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test, dropped afterwards.

    Fails (never skips) when the server is unreachable: the PostgreSQL leg of
    the suite must not disappear silently.
    """
    base = sa.make_url(_postgres_base_url())
    admin = sa.create_engine(
        base, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5}
    )
    name = f"flowctl_t_{secrets.token_hex(6)}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        pytest.fail(
            f"PostgreSQL unreachable at {base.render_as_string(hide_password=True)} "
            f"(set {POSTGRES_ENV}): {str(exc).splitlines()[0]}",
            pytrace=False,
        )
    url = base.set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    """A fresh database URL; a test using it runs once on SQLite, once on PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")
