"""Which deployment a command talks to: the process cluster when its files say it is up,
otherwise the embedded platform.

``flowctl cluster up`` saves its layout (``<home>/cluster.json``) and every process it
starts writes a PID file under ``<home>/run``; ``cluster down`` removes the PID files. So
``flowctl stream ...`` and ``flowctl ingest`` need no flags to reach the cluster's
PostgreSQL database and broker: while the cluster's Spark master or Airflow scheduler has
a PID file in the home, the cluster's settings are used. A setting the operator names
(a flag, or its ``FLOWCTL_*`` variable) always wins over the cluster's.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from flowctl.config import Settings
from flowctl.services.cluster_layout import ClusterLayout
from flowctl.services.process import run_dir

#: PID files whose presence says the process cluster is up (the embedded platform has none).
CLUSTER_MARKERS = ("spark-master.pid", "airflow-scheduler.pid")

#: Settings a cluster supplies, and the ``FLOWCTL_*`` variable that names each explicitly.
CLUSTER_FIELDS = {
    "database_url": "FLOWCTL_DATABASE_URL",
    "kafka_port": "FLOWCTL_KAFKA_PORT",
    "kafka_bootstrap_servers": "FLOWCTL_KAFKA_BOOTSTRAP",
    "broker": "FLOWCTL_BROKER",
    "tansu_storage": "FLOWCTL_TANSU_STORAGE",
    "s3_port": "FLOWCTL_S3_PORT",
    "memcached_port": "FLOWCTL_MEMCACHED_PORT",
    "spark_master": "FLOWCTL_SPARK_MASTER",
}


@dataclass(frozen=True)
class Deployment:
    """The deployment chosen and the settings to reach it."""

    name: str  # "cluster" or "embedded"
    settings: Settings
    overridden: tuple[str, ...] = ()  # cluster settings the operator's own values replaced

    def describe(self) -> str:
        """One line: which deployment, its broker and its database (password hidden)."""
        from flowctl.adapters.db import masked_url

        database = masked_url(self.settings.resolved_database_url)
        line = (
            f"deployment: {self.name} (home {self.settings.home}; "
            f"broker {self.settings.kafka_bootstrap}; database {database})"
        )
        if self.overridden:
            line += f"; given explicitly: {', '.join(self.overridden)}"
        return line


def cluster_is_up(settings: Settings) -> bool:
    """Whether the home holds a saved cluster layout and a live cluster's PID files."""
    return (settings.home / "cluster.json").is_file() and any(
        (run_dir(settings) / name).is_file() for name in CLUSTER_MARKERS
    )


def explicit_fields(flags: Collection[str], env: Mapping[str, str] | None = None) -> frozenset[str]:
    """Settings fields the operator named: by a flag (``flags``) or a ``FLOWCTL_*`` variable."""
    env = os.environ if env is None else env
    named = {f for f, var in CLUSTER_FIELDS.items() if env.get(var)}
    return frozenset(named | (set(flags) & set(CLUSTER_FIELDS)))


def choose(settings: Settings, explicit: Collection[str] = ()) -> Deployment:
    """The cluster's settings if it is up in ``settings.home`` (``explicit`` fields kept
    from ``settings``), else ``settings`` as they are (the embedded platform)."""
    layout = ClusterLayout.load(settings.home) if cluster_is_up(settings) else None
    if layout is None:
        return Deployment("embedded", settings)
    cluster = layout.settings
    if "kafka_port" in explicit:  # one broker named by its port: not the cluster's three
        explicit = {*explicit, "kafka_bootstrap_servers"}
    taken = {f: getattr(cluster, f) for f in CLUSTER_FIELDS if f not in explicit}
    if "tansu_storage" in taken:  # and the variable that chose it, for its messages
        taken["tansu_storage_variable"] = cluster.tansu_storage_variable
    kept = tuple(
        sorted(f for f in CLUSTER_FIELDS if f in explicit and f != "kafka_bootstrap_servers")
    )
    return Deployment("cluster", dataclasses.replace(settings, **taken), kept)
