"""One process cluster for the whole session: ``flowctl cluster up`` on free ports.

Starting it takes a minute or two (two Spark JVMs, six Airflow processes), so every
cluster test shares it; each test uses its own topic and looks at its own rows. Its
databases are created on the local PostgreSQL server and dropped at the end; its
pipeline configs (test-sized intervals) live in a temporary FLOWCTL_PIPELINES_DIR.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from bench.lib.airflow_api import AirflowApi
from flowctl.adapters.procfs import proc_cmdline
from flowctl.pipelines.config import resolve_path
from flowctl.services import cluster
from flowctl.services.cluster_layout import ClusterLayout
from tests.conftest import _postgres_base_url

PIPELINE = "wordcount"
EDEN = "clusterwords.eden"
#: Test-sized settings over the shipped wordcount config: (section, key, value).
SETTINGS = [
    ("topics", "eden", f'"{EDEN}"'),
    ("stream", "tuple_size", "50"),
    ("stream", "trigger_interval_s", "0.5"),
    ("stream", "max_parallelism", "4"),
    ("flow", "metrics_window_s", "3.0"),
    ("scaling", "cooldown_s", "0.0"),
    ("scaling", "ready_timeout_s", "150.0"),
    ("scaling", "drain_timeout_s", "60.0"),
    ("scaling", "stop_timeout_s", "60.0"),
]


def write_config(directory: Path) -> Path:
    """The shipped wordcount config with :data:`SETTINGS` applied, in ``directory``."""
    text = resolve_path(PIPELINE).read_text()
    sections = re.split(r"(?m)^(\[[a-z]+\])$", text)
    for section, key, value in SETTINGS:
        index = sections.index(f"[{section}]") + 1
        sections[index], n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", sections[index])
        assert n == 1, (section, key)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{PIPELINE}.toml"
    path.write_text("".join(sections))
    return path


@dataclass
class Cluster:
    layout: ClusterLayout
    api: AirflowApi

    @property
    def url(self) -> str:
        """The results / control-plane database."""
        return self.layout.settings.resolved_database_url


def _admin_url() -> str:
    base = sa.make_url(_postgres_base_url())
    return base.set(database="postgres").render_as_string(hide_password=False)


def _drop(layout: ClusterLayout) -> None:
    admin = sa.create_engine(layout.postgres_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for name in (layout.flowctl_db, layout.airflow_db):
                conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(scope="package")
def process_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """``cluster.up`` on free ports, once for the tests of this package; after them ``down``,
    which must leave no process (an idle cluster left up would share the 2 cores with every
    later test). The broker is the cluster's three Apache Kafka nodes unless
    ``FLOWCTL_BROKER=tansu`` (then Tansu's engine from ``FLOWCTL_CLUSTER_TANSU_STORAGE``)."""
    home = tmp_path_factory.mktemp("cluster_home")
    pipelines = home / "pipelines"
    write_config(pipelines)
    tag = secrets.token_hex(4)
    layout = ClusterLayout.private(
        home,
        f"c_{tag}",
        broker=ClusterLayout.from_env(home).broker,
        tansu_storage=ClusterLayout.from_env(home).tansu_storage,
        postgres_url=_admin_url(),
        extra_env={
            "FLOWCTL_PIPELINES_DIR": str(pipelines),
            # A task whose Celery worker died is failed (and retried) after this, not 5 min.
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "60",
        },
    )
    try:
        for message in cluster.up(layout):
            print(message)
        user, password = cluster.admin_login(layout)
        yield Cluster(layout, AirflowApi(f"http://127.0.0.1:{layout.airflow_port}", user, password))
    finally:
        pids = [r.pid for r in cluster.status(layout) if r.pid]
        print("\n".join(cluster.down(layout)))
        _drop(layout)
        left = [pid for pid in pids if proc_cmdline(pid) is not None]
        assert not left, f"processes left after cluster down: {left}"
