"""``airflow standalone`` on a project-local home: up, healthy, down with no leftovers."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest

from flowctl.adapters.procfs import proc_cmdline
from flowctl.config import Settings
from flowctl.demo import wait_for_dags
from flowctl.services.airflow import (
    AirflowService,
    airflow_bin,
    airflow_env,
    connections,
    daemon,
    executor_parallelism,
)
from flowctl.services.process import process_tree
from tests.conftest import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.airflow]


def test_connections_cover_everything_the_dags_use(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, kafka_port=19000, memcached_port=19001)
    conns = connections(settings)
    assert conns["spark_default"] == {"conn_type": "spark", "host": "local[2]"}
    assert json.loads(conns["flowctl_kafka"]["extra"]) == {"bootstrap.servers": "127.0.0.1:19000"}
    assert conns["flowctl_memcached"] == {
        "conn_type": "generic",
        "host": "127.0.0.1",
        "port": 19001,
    }
    assert json.loads(conns["flowctl_db"]["extra"])["sqlalchemy_url"].endswith("flowctl.db")


def test_spark_master_url_becomes_host_and_port(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, spark_master="spark://spark-master:7077")
    assert connections(settings)["spark_default"] == {
        "conn_type": "spark",
        "host": "spark://spark-master",
        "port": 7077,
    }


def test_executor_parallelism_follows_the_cores(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert executor_parallelism(2) == 6  # blue + green + rescale + a short task fit
    assert executor_parallelism(16) == 32
    monkeypatch.delenv("AIRFLOW__CORE__PARALLELISM", raising=False)
    env = airflow_env(Settings(home=tmp_path))
    assert env["AIRFLOW__CORE__PARALLELISM"] == str(executor_parallelism())
    monkeypatch.setenv("AIRFLOW__CORE__PARALLELISM", "3")
    assert airflow_env(Settings(home=tmp_path))["AIRFLOW__CORE__PARALLELISM"] == "3"


def test_standalone_up_lists_dags_and_down_leaves_nothing(tmp_path: Path) -> None:
    settings = dataclasses.replace(
        Settings(home=tmp_path / "home"), airflow_port=free_port(), kafka_port=free_port()
    )
    service = AirflowService()
    try:
        message = service.up(settings)
        assert "airflow up" in message
        assert service.up(settings).startswith("airflow already up")
        status = service.status(settings)
        assert status.ok and "login admin" in status.detail
        listed = subprocess.run(
            [airflow_bin(), "connections", "list", "-o", "json"],
            env={**os.environ, **airflow_env(settings)},
            capture_output=True,
            text=True,
            check=True,
        )
        conn_ids = {row["conn_id"] for row in json.loads(listed.stdout)}
        assert {"spark_default", "flowctl_kafka", "flowctl_memcached", "flowctl_db"} <= conn_ids
        record = daemon(settings).running()
        assert record is not None
        tree = process_tree(record.pid)
        assert len(tree) > 3  # standalone and its api-server, scheduler, dag-processor, ...
        # What `flowctl demo up` waits for: the dag-processor has stored the pipeline DAGs.
        wait_for_dags(settings, ["ingest_wordcount", "stream_wordcount"], timeout=180)
    finally:
        down = service.down(settings)
    assert "airflow down" in down
    assert [pid for pid in tree if proc_cmdline(pid) is not None] == []
    assert service.down(settings) == "airflow already down"


def test_the_metadata_database_waits_a_minute_for_the_lock_in_wal_mode(tmp_path: Path) -> None:
    """Python's 5 s busy timeout failed a form's unpause (HTTP 500) while the scheduler and
    the task heartbeats wrote; Airflow's own engine, configured as the platform runs it."""
    code = (
        "from airflow import settings\n"
        "from sqlalchemy import text\n"
        "with settings.engine.connect() as c:\n"
        "    print(c.execute(text('PRAGMA busy_timeout')).scalar(),"
        " c.execute(text('PRAGMA journal_mode')).scalar())\n"
    )
    env = {**os.environ, **airflow_env(Settings(home=tmp_path))}
    done = subprocess.run(
        [str(Path(airflow_bin()).parent / "python"), "-c", code],
        env=env, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert done.stdout.split()[-2:] == ["60000", "wal"], done.stdout + done.stderr
