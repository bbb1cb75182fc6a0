"""``flowctl cluster down --purge``: delete what a stopped cluster keeps.

``down`` keeps the cluster's data for the next ``up``: its two PostgreSQL databases
(results and control plane; Airflow's metadata) and its state dir (daemon logs, the
Spark workers' work dirs, Airflow's home with the task logs, the shipped zip and
spark-defaults.conf, the saved layout). ``--purge`` deletes these after the stop, and
says what it deleted. The Tansu log needs nothing here: Tansu's memory engine, or on
S3 the local moto server, keeps it in memory, so it ends with ``down``; a log in an
external S3 (``AWS_ENDPOINT``, S3 storage only) is that store's and is left alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from flowctl.services import s3
from flowctl.services.airflow import airflow_home
from flowctl.services.base import ServiceError
from flowctl.services.cluster_layout import ClusterLayout
from flowctl.services.process import log_dir, run_dir


def state_paths(layout: ClusterLayout) -> list[Path]:
    """The files and dirs of ``layout.home`` the cluster wrote (nothing else in the home)."""
    settings = layout.settings
    return [
        log_dir(settings),
        run_dir(settings),
        layout.home / "spark",
        airflow_home(settings),
        layout.home / "dist",
        layout.spark_conf_dir,
        layout.path,
        # the brokers' logs and their cluster id (flowctl.services.cluster_kafka)
        *(layout.home / f"kafka-{i}" for i in range(1, len(layout.kafka_ports) + 1)),
        layout.home / "kafka-cluster-id",
    ]


def purge(layout: ClusterLayout) -> list[str]:
    """Drop the cluster's databases and delete its state; one message per thing deleted."""
    from flowctl.adapters import postgres_admin

    names = [layout.flowctl_db, layout.airflow_db]
    try:
        dropped = postgres_admin.drop_databases(layout.postgres_url, names)
    except postgres_admin.PostgresAdminError as exc:
        raise ServiceError(f"purge: postgres: {exc}; nothing deleted") from None
    messages = [f"purge: dropped database {name}" for name in dropped]
    messages += [f"purge: database {name} did not exist" for name in names if name not in dropped]
    for path in state_paths(layout):
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
        else:
            continue
        messages.append(f"purge: deleted {path}")
    if layout.broker == "tansu" and layout.tansu_storage == "s3" and s3.external_endpoint():
        messages.append(
            f"purge: the Tansu log in the S3 store at {s3.external_endpoint()} is kept "
            "(not the cluster's to delete)"
        )
    return messages
