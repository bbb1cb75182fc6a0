"""FlowctlDbHook: the URL of a ``postgres`` connection whose password needs escaping.

A password holding ``@``, ``/``, ``:`` or ``%`` pasted into an f-string URL moves the
host or breaks the parse; the hook builds the URL with ``sqlalchemy.URL.create``. The
PostgreSQL test logs in as a role with such a password through the hook.
"""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest
import sqlalchemy as sa

from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook

pytestmark = pytest.mark.integration

PASSWORD = "p@ss/w%rd:40#x"


def _use_connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, conn: dict) -> None:
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(conn))


def test_a_password_with_url_characters_survives_the_url(monkeypatch: pytest.MonkeyPatch) -> None:
    conn = {
        "conn_type": "postgres",
        "host": "db.example",
        "port": 6543,
        "login": "flow@ctl",
        "password": PASSWORD,
        "schema": "flowctl",
    }
    _use_connection(monkeypatch, "pg_escaped", conn)
    url = sa.make_url(FlowctlDbHook("pg_escaped").sqlalchemy_url)
    assert (url.username, url.password, url.host, url.port, url.database) == (
        "flow@ctl",
        PASSWORD,
        "db.example",
        6543,
        "flowctl",
    )
    again = asyncio.run(FlowctlDbHook.async_sqlalchemy_url("pg_escaped"))
    assert sa.make_url(again) == url


def test_the_hook_logs_in_with_such_a_password(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = sa.make_url(postgres_url)
    role = f"flowctl_r_{secrets.token_hex(4)}"
    admin = sa.create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(sa.text(f"CREATE ROLE {role} LOGIN PASSWORD :pw").bindparams(pw=PASSWORD))
    try:
        conn = {
            "conn_type": "postgres",
            "host": base.host,
            "port": base.port or 5432,
            "login": role,
            "password": PASSWORD,
            "schema": base.database,
        }
        _use_connection(monkeypatch, "pg_role", conn)
        ok, message = FlowctlDbHook("pg_role").test_connection()
        assert ok, message
        engine = sa.create_engine(FlowctlDbHook("pg_role").sqlalchemy_url)
        with engine.connect() as c:
            assert c.execute(sa.text("SELECT current_user")).scalar() == role
        engine.dispose()
    finally:
        with admin.connect() as c:
            c.execute(sa.text(f"DROP ROLE IF EXISTS {role}"))
        admin.dispose()
