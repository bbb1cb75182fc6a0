"""End-to-end tests: the real Airflow (``dag.test()``), Spark local, Apache Kafka, SQLite."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from flowctl.config import Settings
from tests.airflow_env import configure

configure()


@pytest.fixture
def platform(flowctl_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Iterator[Settings]:
    """The session's services wired into Airflow as connections (env-defined)."""
    from flowctl.services.airflow import connections_env

    for key, value in {**flowctl_settings.to_env(), **connections_env(flowctl_settings)}.items():
        monkeypatch.setenv(key, value)
    yield flowctl_settings
