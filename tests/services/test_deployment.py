"""Which deployment ``flowctl stream``/``ingest`` talk to: chosen from the home's files
(the layout ``cluster up`` saves and its PID files), explicit settings winning."""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from flowctl.cli import main
from flowctl.config import Settings
from flowctl.services.cluster_layout import ClusterLayout
from flowctl.services.deployment import choose, cluster_is_up, explicit_fields

PG_ADMIN = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"


def _cluster_home(home: Path, marker: str | None = "spark-master.pid", **layout: object) -> None:
    """What ``cluster up`` leaves in a home: the saved layout and (while up) PID files."""
    ports = {"kafka_ports": (19092, 19192, 19292), "kafka_controller_ports": (19093, 19193, 19293)}
    ClusterLayout(home=home, **{**ports, **layout}).save()  # type: ignore[arg-type]
    if marker:
        (home / "run").mkdir(parents=True, exist_ok=True)
        (home / "run" / marker).write_text("123 0\n")


def test_no_cluster_files_is_the_embedded_platform(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    chosen = choose(settings)
    assert not cluster_is_up(settings)
    assert chosen.name == "embedded"
    assert chosen.settings == settings
    assert chosen.describe().startswith("deployment: embedded")


def test_a_saved_layout_without_pid_files_is_a_cluster_that_is_down(tmp_path: Path) -> None:
    _cluster_home(tmp_path, marker=None)
    assert choose(Settings(home=tmp_path)).name == "embedded"


@pytest.mark.parametrize("marker", ["spark-master.pid", "airflow-scheduler.pid"])
def test_a_running_cluster_supplies_database_and_broker(tmp_path: Path, marker: str) -> None:
    # S3, not the embedded platform's default engine: the assertion tells whose was taken
    _cluster_home(tmp_path, marker, broker="tansu", tansu_storage="s3")
    chosen = choose(Settings(home=tmp_path))
    assert chosen.name == "cluster"
    assert chosen.settings.resolved_database_url.endswith("/flowctl_cluster")
    assert chosen.settings.resolved_database_url.startswith("postgresql")
    assert chosen.settings.kafka_bootstrap == "127.0.0.1:19092"
    assert chosen.settings.tansu_storage == "s3"
    assert chosen.settings.spark_master == "spark://127.0.0.1:7077"
    assert "deployment: cluster" in chosen.describe()
    assert "flowctl_cluster" in chosen.describe()


def test_a_running_cluster_supplies_its_three_brokers(tmp_path: Path) -> None:
    _cluster_home(tmp_path)
    chosen = choose(Settings(home=tmp_path))
    assert chosen.settings.broker == "kafka"
    assert chosen.settings.kafka_bootstrap == "127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292"
    assert "broker 127.0.0.1:19092,127.0.0.1:19192,127.0.0.1:19292" in chosen.describe()


def test_explicit_settings_win_over_the_clusters(tmp_path: Path) -> None:
    _cluster_home(tmp_path, broker="tansu", tansu_storage="s3")  # not the embedded default
    mine = Settings(home=tmp_path, database_url="sqlite:///x.db", kafka_port=9999)
    explicit = explicit_fields({"database_url", "home"}, env={"FLOWCTL_KAFKA_PORT": "9999"})
    assert explicit == {"database_url", "kafka_port"}
    chosen = choose(mine, explicit)
    assert chosen.name == "cluster"
    assert chosen.settings.resolved_database_url == "sqlite:///x.db"
    assert chosen.settings.kafka_port == 9999
    assert chosen.settings.tansu_storage == "s3"  # not named: the cluster's
    assert chosen.overridden == ("database_url", "kafka_port")
    assert "given explicitly: database_url, kafka_port" in chosen.describe()


def test_the_password_of_the_database_url_is_not_printed(tmp_path: Path) -> None:
    _cluster_home(tmp_path, postgres_url="postgresql+psycopg2://u:secret@db:5432/postgres")
    line = choose(Settings(home=tmp_path)).describe()
    assert "secret" not in line
    assert "db:5432/flowctl_cluster" in line


@pytest.mark.integration
def test_stream_list_reads_the_running_clusters_postgres_database(
    tmp_path: Path,
    postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # The cluster's flowctl database is this test's fresh PostgreSQL database; no flag names it.
    database = sa.make_url(postgres_url).database
    _cluster_home(tmp_path, flowctl_db=database, postgres_url=PG_ADMIN)
    for var in ("FLOWCTL_DATABASE_URL", "FLOWCTL_KAFKA_PORT", "FLOWCTL_TANSU_STORAGE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FLOWCTL_HOME", str(tmp_path))
    assert main(["stream", "list", "--pipeline", "logetl"]) == 0
    out, err = capsys.readouterr()
    assert "no topologies for pipeline 'logetl'" in out
    assert f"deployment: cluster (home {tmp_path}" in err
    assert f"/{database})" in err
    engine = sa.create_engine(postgres_url)
    try:  # the control plane's schema was created there, not in a SQLite file in the home
        assert "topologies" in sa.inspect(engine).get_table_names()
    finally:
        engine.dispose()
    assert not (tmp_path / "flowctl.db").exists()


def test_the_markers_are_pid_files_the_cluster_writes(tmp_path: Path) -> None:
    from flowctl.services.cluster import all_daemons
    from flowctl.services.deployment import CLUSTER_MARKERS

    layout = ClusterLayout(home=tmp_path)
    written = {d.pid_file.name for d in all_daemons(layout)}
    assert set(CLUSTER_MARKERS) <= written
