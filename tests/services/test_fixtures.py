"""The shared session fixtures of tests/conftest.py behave as the other suites expect."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import sqlalchemy as sa

from flowctl.config import Settings
from flowctl.services import manager
from flowctl.services.base import UP
from tests.conftest import _postgres_base_url, _SessionServices, fresh_postgres_database

pytestmark = pytest.mark.integration


def test_session_services_are_up_on_the_advertised_addresses(
    flowctl_settings: Settings, kafka_bootstrap: str, memcached_address: str
) -> None:
    assert kafka_bootstrap == f"127.0.0.1:{flowctl_settings.kafka_port}"
    assert memcached_address == f"127.0.0.1:{flowctl_settings.memcached_port}"
    assert flowctl_settings.kafka_port not in (9092,) and flowctl_settings.memcached_port != 11211
    states = {s.name: s.state for s in manager.status(flowctl_settings)}
    assert states == {"db": UP, "memcached": UP, flowctl_settings.broker: UP}


def test_a_port_taken_before_start_is_replaced(tmp_path: Path) -> None:
    services = _SessionServices(tmp_path)
    taken = services.settings.kafka_port
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", taken))
        blocker.listen()
        try:
            services.start("kafka", "kafka_port")
            assert services.settings.kafka_port != taken
            row = manager.status(services.settings, only="kafka")[0]
            assert row.state == UP and row.address == f"127.0.0.1:{services.settings.kafka_port}"
        finally:
            services.stop("kafka")
    assert manager.status(services.settings, only="kafka")[0].pid is None


def test_postgres_url_is_a_fresh_empty_database(postgres_url: str) -> None:
    engine = sa.create_engine(postgres_url)
    try:
        with engine.connect() as conn:
            name = conn.execute(sa.text("SELECT current_database()")).scalar_one()
            tables = conn.execute(
                sa.text(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema='public'"
                )
            ).scalar_one()
    finally:
        engine.dispose()
    assert name.startswith("flowctl_t_") and tables == 0


def _databases(url: str) -> set[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return set(conn.execute(sa.text("SELECT datname FROM pg_database")).scalars())
    finally:
        engine.dispose()


def test_the_postgres_database_is_dropped_even_with_a_connection_left_open() -> None:
    with fresh_postgres_database() as url:
        name = sa.make_url(url).database
        assert name in _databases(url)
        leaked = sa.create_engine(url).connect()  # a test that forgot to clean up
        leaked.execute(sa.text("CREATE TABLE t (x int)"))
    assert name not in _databases(_postgres_base_url())
    leaked.invalidate()


def test_sqlite_url_is_a_fresh_file(sqlite_url: str, tmp_path: Path) -> None:
    assert sqlite_url == f"sqlite:///{tmp_path / 'flowctl.db'}"
    assert not (tmp_path / "flowctl.db").exists()
