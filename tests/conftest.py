"""Shared fixtures: one embedded Apache Kafka broker + memcached per session, fresh databases
per test.

Fixtures are lazy: a test that asks for neither ``kafka_bootstrap`` nor
``memcached_address`` (nor ``flowctl_settings``) starts nothing. Ports are
picked free at session start, never the defaults (9092, 11211), so a demo
running on the same machine is not disturbed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa
from hypothesis import settings as hypothesis_settings

from flowctl.config import Settings
from flowctl.pipelines.config_sections import LANE_READERS
from flowctl.services import manager
from flowctl.services.base import PortInUseError
from flowctl.services.ports import free_port
from tests.lane_readers import LaneReader

# A deadline is a wall-clock assertion: an example that runs slowly beside the heavy tests
# (or on a slow machine) is not a failure.
hypothesis_settings.register_profile("flowctl", deadline=None)
hypothesis_settings.load_profile("flowctl")

#: Markers of the tests that start Spark, Airflow's processes, the cluster or a browser
#: (and the UI tests'): each such test is also marked ``heavy``. ``scripts/test`` with no
#: arguments runs them one at a time in one pytest process and the rest (unit, adapter,
#: DAG, config and service tests) in a second one beside it: two heavy tests at once
#: would compete for the machine's 2 cores and outlast their timeouts.
HEAVY_MARKERS = ("spark", "e2e", "cluster", "faults", "slow")
HEAVY_DIRS = ("ui",)


def pytest_itemcollected(item: pytest.Item) -> None:
    """Mark a heavy test ``heavy`` (see :data:`HEAVY_MARKERS`)."""
    top = Path(item.path).relative_to(Path(__file__).parent).parts[0]
    if top in HEAVY_DIRS or any(item.get_closest_marker(m) for m in HEAVY_MARKERS):
        item.add_marker(pytest.mark.heavy)


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test of Tansu's quirks (marked ``tansu``) runs on a Tansu broker only: in the suite
    ``FLOWCTL_BROKER=tansu pytest -m tansu`` that ``scripts/test`` runs."""
    if item.get_closest_marker("tansu") and os.environ.get("FLOWCTL_BROKER") != "tansu":
        pytest.skip("a test of the Tansu broker's quirks: run it with FLOWCTL_BROKER=tansu")


def pytest_unconfigure(config: pytest.Config) -> None:
    """kafka-python's network thread is a daemon that outlives the session; what it logs
    then (brokers the tests stopped) would be written to streams pytest has closed."""
    logging.getLogger("kafka").setLevel(logging.CRITICAL + 1)


POSTGRES_ENV = "FLOWCTL_TEST_POSTGRES_URL"
POSTGRES_DEFAULT = "postgresql+psycopg2://postgres@127.0.0.1:5432/test"


class _SessionServices:
    """The session's settings, adjusted when a chosen port turns out to be taken.

    Ports are picked free when the session first needs a service, but another
    process on the machine may grab one before the service binds it: then a
    new port is picked and the start retried, instead of failing every test
    that needs the service.
    """

    ATTEMPTS = 3

    def __init__(self, home: Path) -> None:
        self.settings = Settings(
            home=home,
            kafka_port=free_port(),
            kafka_controller_port=free_port(),
            memcached_port=free_port(),
            memcached_memory_mb=64,
            broker=os.environ.get("FLOWCTL_BROKER") or "kafka",
        )

    def start(self, service: str, port_field: str) -> None:
        for attempt in range(1, self.ATTEMPTS + 1):
            try:
                manager.up(self.settings, only=service)
                return
            except PortInUseError:
                if attempt == self.ATTEMPTS:
                    raise
                self.settings = dataclasses.replace(self.settings, **{port_field: free_port()})

    def stop(self, service: str) -> None:
        manager.down(self.settings, only=service)


@pytest.fixture(scope="session")
def _session_services(tmp_path_factory: pytest.TempPathFactory) -> _SessionServices:
    """A tmp home and free ports for the session; starts nothing by itself."""
    return _SessionServices(tmp_path_factory.mktemp("flowctl_home"))


@pytest.fixture(scope="session")
def _session_broker(_session_services: _SessionServices) -> Iterator[None]:
    """The broker for the whole session (Apache Kafka; Tansu's own suite sets
    ``FLOWCTL_BROKER=tansu``), started on first use, stopped at the end."""
    broker = _session_services.settings.broker
    _session_services.start(broker, "kafka_port")
    try:
        yield
    finally:
        # A cached consumer left open would keep reconnecting to the stopped broker and
        # log errors into closed streams at interpreter exit.
        for reader in LANE_READERS:
            LaneReader(reader).drop_cached(_session_services.settings.kafka_bootstrap)
        _session_services.stop(broker)


@pytest.fixture(scope="session")
def _session_memcached(_session_services: _SessionServices) -> Iterator[None]:
    """memcached for the whole session, started on first use, stopped at the end."""
    _session_services.start("memcached", "memcached_port")
    try:
        yield
    finally:
        _session_services.stop("memcached")


@pytest.fixture(scope="session")
def flowctl_settings(
    _session_services: _SessionServices, _session_broker: None, _session_memcached: None
) -> Settings:
    """Settings with a tmp home and free ports; the broker and memcached run for the session.

    Its ``database_url`` is empty, i.e. a SQLite file in the home;
    ``settings.to_env()`` hands the same settings to a child process.
    """
    return _session_services.settings


@pytest.fixture(scope="session")
def kafka_bootstrap(_session_services: _SessionServices, _session_broker: None) -> str:
    """``"127.0.0.1:<port>"`` of the session's broker (memcached is not started)."""
    return _session_services.settings.kafka_bootstrap


@pytest.fixture(scope="session")
def memcached_address(_session_services: _SessionServices, _session_memcached: None) -> str:
    """``"127.0.0.1:<port>"`` of the session's memcached (the broker is not started)."""
    return _session_services.settings.memcached_address


@pytest.fixture(params=LANE_READERS)
def lane_reader(request: pytest.FixtureRequest) -> LaneReader:
    """Each of the lanes' Kafka readers (``[flow] reader``) in turn: the test runs per reader."""
    return LaneReader(request.param)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A fresh SQLite file URL in the test's tmp dir."""
    return f"sqlite:///{tmp_path / 'flowctl.db'}"


def _postgres_base_url() -> str:
    return os.environ.get(POSTGRES_ENV) or POSTGRES_DEFAULT


@contextlib.contextmanager
def fresh_postgres_database(base_url: str | None = None) -> Iterator[str]:
    """Create an empty database ``flowctl_t_<random>`` on the server; drop it on exit.

    The drop uses ``WITH (FORCE)`` so connections a test left open (an engine
    it did not dispose) cannot keep the database alive.
    """
    base = sa.make_url(base_url or _postgres_base_url())
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
    try:
        yield base.set(database=name).render_as_string(hide_password=False)
    finally:
        try:
            with admin.connect() as conn:
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        finally:
            admin.dispose()


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test, dropped afterwards.

    Fails (never skips) when the server is unreachable: the PostgreSQL leg of
    the suite must not disappear silently.
    """
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest) -> str:
    """A fresh database URL; a test using it runs once on SQLite, once on PostgreSQL."""
    return request.getfixturevalue(f"{request.param}_url")
