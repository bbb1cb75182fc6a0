"""The process cluster's layout, its saved form, the shipped zip and the exec'd launchers."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from flowctl.services.cluster_layout import ClusterLayout
from flowctl.services.process import _matches
from flowctl.services.shipping import build_zip, spark_defaults, write_spark_defaults


def test_layout_round_trips_through_its_file(tmp_path: Path) -> None:
    layout = ClusterLayout(
        home=tmp_path,
        spark_master_port=20001,
        spark_worker_ui_ports=(20002, 20003),
        extra_env={"FLOWCTL_PIPELINES_DIR": "/x"},
    )
    layout.save()
    assert ClusterLayout.load(tmp_path) == layout
    assert ClusterLayout.load(tmp_path / "none") is None


def test_layout_settings_point_at_the_cluster(tmp_path: Path) -> None:
    layout = ClusterLayout(home=tmp_path, spark_master_port=20001, flowctl_db="f1")
    settings = layout.settings
    assert settings.spark_master == "spark://127.0.0.1:20001"
    assert settings.broker == "kafka"
    assert settings.kafka_bootstrap == "127.0.0.1:9092,127.0.0.1:9192,127.0.0.1:9292"
    assert settings.resolved_database_url.endswith("/f1")
    env = layout.airflow_env()
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].endswith(f"/{layout.airflow_db}")
    assert "PYTHONPATH" not in env
    # Two homes never share a Celery queue.
    assert ClusterLayout(home=tmp_path / "b").queue != layout.queue


def test_tansu_runs_on_its_memory_engine_unless_the_clusters_own_variable_says_s3(
    tmp_path: Path,
) -> None:
    from flowctl.services.s3 import durability

    layout = ClusterLayout.from_env(tmp_path, {"FLOWCTL_BROKER": "tansu"})
    assert layout.settings.tansu_storage == "memory"
    line = durability(layout.settings)
    assert "NOT durable" in line and "FLOWCTL_CLUSTER_TANSU_STORAGE=s3" in line
    # every message about the engine names the variable that chose it
    from flowctl.services.s3 import S3Service

    assert "FLOWCTL_CLUSTER_TANSU_STORAGE=memory" in S3Service().up(layout.settings)
    # the embedded platform's variable does not switch the cluster
    embedded = ClusterLayout.from_env(
        tmp_path, {"FLOWCTL_BROKER": "tansu", "FLOWCTL_TANSU_STORAGE": "s3"}
    )
    assert embedded.tansu_storage == "memory"
    on_s3 = ClusterLayout.from_env(
        tmp_path, {"FLOWCTL_BROKER": "tansu", "FLOWCTL_CLUSTER_TANSU_STORAGE": "s3"}
    )
    assert on_s3.settings.tansu_storage == "s3"
    named = ClusterLayout.from_env(tmp_path, {"FLOWCTL_CLUSTER_TANSU_STORAGE": "memory"})
    assert named.tansu_storage == "memory"
    on_s3.save()
    assert ClusterLayout.load(tmp_path) == on_s3


def test_a_layout_saved_before_it_recorded_tansus_engine_is_read_as_s3(tmp_path: Path) -> None:
    """Such a layout's cluster ran Tansu on S3: read as memory, its moto would go unnamed."""
    ClusterLayout(home=tmp_path).save()
    path = tmp_path / "cluster.json"
    data = json.loads(path.read_text())
    del data["tansu_storage"]
    path.write_text(json.dumps(data))
    loaded = ClusterLayout.load(tmp_path)
    assert loaded is not None and loaded.tansu_storage == "s3"


def test_a_layout_saved_while_tansu_was_the_broker_still_names_it(tmp_path: Path) -> None:
    """A cluster started before Apache Kafka ran here recorded one ``kafka_port``: it is
    read as Tansu's, so that ``cluster down`` stops what runs."""
    ClusterLayout(home=tmp_path).save()
    path = tmp_path / "cluster.json"
    data = json.loads(path.read_text())
    for key in ("kafka_ports", "kafka_controller_ports", "broker"):
        del data[key]
    data["kafka_port"] = 29092
    path.write_text(json.dumps(data))
    loaded = ClusterLayout.load(tmp_path)
    assert loaded is not None and loaded.broker == "tansu"
    assert loaded.settings.kafka_bootstrap == "127.0.0.1:29092"


def test_the_clusters_brokers_are_a_quorum_of_three_replicating_every_topic(
    tmp_path: Path,
) -> None:
    from flowctl.services import cluster_kafka

    layout = ClusterLayout.private(tmp_path, "q")
    brokers = cluster_kafka.quorum(layout)
    assert [n.node_id for n in brokers.nodes] == [1, 2, 3]
    props = dict(
        line.split("=", 1) for line in brokers.server_properties(brokers.nodes[1]).splitlines()
    )
    voters = ",".join(
        f"{i}@127.0.0.1:{p}" for i, p in enumerate(layout.kafka_controller_ports, start=1)
    )
    assert props["node.id"] == "2" and props["controller.quorum.voters"] == voters
    assert props["default.replication.factor"] == "3" and props["min.insync.replicas"] == "2"
    assert props["transaction.state.log.replication.factor"] == "3"
    assert props["transaction.state.log.min.isr"] == "2"
    assert props["log.dirs"] == str(tmp_path / "kafka-2" / "log")
    assert props["auto.create.topics.enable"] == "false"
    assert cluster_kafka.cluster_id(layout) == cluster_kafka.cluster_id(layout)  # kept


def test_a_bad_tansu_engine_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="FLOWCTL_CLUSTER_TANSU_STORAGE='disk'"):
        ClusterLayout.from_env(tmp_path, {"FLOWCTL_CLUSTER_TANSU_STORAGE": "disk"})
    with pytest.raises(ValueError, match="tansu_storage='disk'"):
        ClusterLayout(home=tmp_path, tansu_storage="disk")


def test_each_worker_has_its_own_work_dir_and_ui_port(tmp_path: Path) -> None:
    layout = ClusterLayout(home=tmp_path)
    one, two = layout.worker_argv(1), layout.worker_argv(2)
    assert one != two
    assert str(layout.worker_dir(1)) in one and str(layout.worker_dir(2)) in two
    assert (
        layout.component_env("worker-1")["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"]
        != (layout.component_env("worker-2")["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"])
    )


def test_the_zip_holds_the_package_and_the_definitions(tmp_path: Path) -> None:
    path = build_zip(tmp_path)
    names = set(zipfile.ZipFile(path).namelist())
    assert {"flowctl/__init__.py", "flowctl/pipelines/wordcount.py"} <= names
    assert not [n for n in names if "__pycache__" in n]
    conf = write_spark_defaults(
        tmp_path / "conf", spark_defaults(path, executor_memory="512m", cores_max=2)
    )
    lines = conf.read_text().splitlines()
    assert f"spark.submit.pyFiles {path}" in lines
    assert "spark.cores.max 2" in lines


def test_a_launcher_that_execs_its_program_still_matches() -> None:
    argv = ("/s/bin/spark-class", "org.x.Master", "--port", "7")
    java = ("/usr/bin/java", "-cp", "/s/jars/*", "org.x.Master", "--port", "7")
    assert _matches(java, argv)
    assert not _matches(("/usr/bin/java", "org.x.Master", "--port", "8"), argv)
    assert not _matches(java, ("/bin/other", "org.x.Master", "--port", "7"))


def test_the_layout_sizes_its_workers_by_the_slot_plan(tmp_path: Path) -> None:
    from flowctl.core.slot_plan import DEFAULT_PLAN
    from flowctl.services.cluster_layout import WORKERS

    layout = ClusterLayout(home=tmp_path)
    assert DEFAULT_PLAN.workers == WORKERS
    assert layout.worker_cores * WORKERS >= DEFAULT_PLAN.cores_needed()
    argv = layout.worker_argv(1)
    assert argv[argv.index("--cores") + 1] == str(DEFAULT_PLAN.worker_cores())
    assert argv[argv.index("--memory") + 1] == f"{DEFAULT_PLAN.worker_memory_mb()}m"
    assert layout.executor_memory == f"{DEFAULT_PLAN.executor_memory_mb}m"


def test_the_cluster_airflow_has_no_sqlite_connect_args(tmp_path: Path) -> None:
    """The embedded Airflow's SQLite busy timeout is no PostgreSQL option: psycopg2 refused
    it ("invalid connection option 'timeout'") and `airflow db migrate` failed at `cluster up`."""
    from flowctl.services.airflow import airflow_env

    env = ClusterLayout(home=tmp_path).airflow_env()
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
    assert not any(k.startswith("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS") for k in env)
    # ... while the embedded one keeps them.
    embedded = airflow_env(ClusterLayout(home=tmp_path).settings)
    assert "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS" in embedded
