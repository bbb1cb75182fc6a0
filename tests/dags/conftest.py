"""DAG tests run against a throwaway Airflow home (see tests/airflow_env.py)."""

from __future__ import annotations

import json

import pytest

from flowctl.adapters.control_plane import ControlPlane
from tests.airflow_env import configure

configure()

#: The ACTIVE topology of :func:`flowctl_db`.
ACTIVE_BLUE = "wc-blue-1"


@pytest.fixture
def flowctl_db(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A control database behind the ``flowctl_db`` connection, with the word count's
    blue topology (:data:`ACTIVE_BLUE`, 2 lanes) ACTIVE; its URL."""
    conn = {"conn_type": "generic", "extra": {"sqlalchemy_url": sqlite_url}}
    monkeypatch.setenv("AIRFLOW_CONN_FLOWCTL_DB", json.dumps(conn))
    plane = ControlPlane(sqlite_url)
    plane.ensure_schema()
    plane.register_topology(ACTIVE_BLUE, "wordcount", "blue", 2)
    plane.set_state(ACTIVE_BLUE, "ACTIVE")
    return sqlite_url
