"""The process cluster's layout: docker-compose.yaml's services as processes on this machine.

One record, :class:`ClusterLayout`, says where everything listens and how each
process is started; ``flowctl cluster`` runs it (:mod:`flowctl.services.cluster`)
and ``tests/test_docker_compose.py`` checks it against docker-compose.yaml, so
the two deployments cannot drift: the same components (:data:`COMPOSE_SERVICES`),
the same commands, the same Airflow executor and settings, the same connections.

The layout is saved as ``<FLOWCTL_HOME>/cluster.json`` by ``up``; ``down`` and
``status`` read it back, so they act on what was started even when the
environment changed in between.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowctl.config import Settings
from flowctl.core.slot_plan import DEFAULT_PLAN

#: docker-compose.yaml service -> the process cluster's component that plays its part.
COMPOSE_SERVICES: dict[str, str] = {
    "kafka-1": "kafka-1",
    "kafka-2": "kafka-2",
    "kafka-3": "kafka-3",
    "memcached": "memcached",
    "postgres": "db",
    "redis": "redis",
    "spark-master": "spark-master",
    "spark-worker-1": "spark-worker-1",
    "spark-worker-2": "spark-worker-2",
    "airflow-init": "airflow-init",
    "airflow-apiserver": "airflow-api-server",
    "airflow-scheduler": "airflow-scheduler",
    "airflow-dag-processor": "airflow-dag-processor",
    "airflow-triggerer": "airflow-triggerer",
    "airflow-worker-1": "airflow-worker-1",
    "airflow-worker-2": "airflow-worker-2",
}

#: Airflow settings only docker-compose.yaml has, and why the process cluster does not.
COMPOSE_ONLY_ENV: dict[str, str] = {
    "AIRFLOW__CORE__AUTH_MANAGER": "compose keeps users in the metadata DB (FAB, airflow-init "
    "creates the admin); the process cluster uses the simple auth manager's password file",
    "AIRFLOW__CORE__FERNET_KEY": "set from the operator's .env in compose; the process cluster "
    "stores no connection in the database (all are AIRFLOW_CONN_* variables)",
}

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
WORKERS = DEFAULT_PLAN.workers  # Spark workers, and Celery workers: one of each per compose "node"
LAYOUT_FILE = "cluster.json"
TANSU_STORAGES = ("memory", "s3")
#: The variable that picks the cluster's Tansu engine (the embedded platform's is
#: ``FLOWCTL_TANSU_STORAGE``: the two deployments are switched separately).
STORAGE_VARIABLE = "FLOWCTL_CLUSTER_TANSU_STORAGE"
#: The cluster's Tansu engine unless ``FLOWCTL_CLUSTER_TANSU_STORAGE`` names the other:
#: memory, because S3 on the local moto server is no more durable (moto keeps its objects
#: in memory too) and moto, listing a partition's whole prefix on every fetch, was the
#: bottleneck at volume (bench/README.md, cluster_volume).
DEFAULT_TANSU_STORAGE = "memory"
#: The engine of a layout saved before the layout recorded one: those clusters ran on S3.
UNRECORDED_TANSU_STORAGE = "s3"


def spark_home() -> Path:
    """pyspark's own package directory: it holds ``bin/spark-class`` and the jars."""
    spec = importlib.util.find_spec("pyspark")  # located, not imported: no JVM, no Spark
    if spec is None or spec.origin is None:
        raise RuntimeError("pyspark is not installed: run scripts/bootstrap")
    return Path(spec.origin).resolve().parent


def _home_tag(home: Path) -> str:
    return hashlib.sha1(str(home).encode()).hexdigest()[:8]


@dataclass(frozen=True)
class ClusterLayout:
    """Ports, databases and sizes of one process cluster (defaults: docker-compose's)."""

    home: Path
    host: str = "127.0.0.1"
    #: The brokers' client and KRaft controller ports: three Apache Kafka nodes, each broker
    #: and controller (flowctl.services.cluster_kafka); with ``broker`` ``tansu``, the
    #: first port is Tansu's.
    kafka_ports: tuple[int, ...] = (9092, 9192, 9292)
    kafka_controller_ports: tuple[int, ...] = (9093, 9193, 9293)
    #: The broker (``FLOWCTL_BROKER``): ``kafka``, Apache Kafka with its logs on disk in the
    #: cluster's home, or ``tansu``, the former stand-in (:attr:`tansu_storage`).
    broker: str = "kafka"
    s3_port: int = 9000
    memcached_port: int = 11211
    airflow_port: int = 8080
    spark_master_port: int = 7077
    spark_master_ui_port: int = 8090
    spark_worker_ui_ports: tuple[int, ...] = (8091, 8092)
    scheduler_health_port: int = 8974
    triggerer_log_port: int = 8794
    celery_log_ports: tuple[int, ...] = (8793, 8795)
    redis_url: str = "redis://127.0.0.1:6379/0"
    postgres_url: str = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
    flowctl_db: str = "flowctl_cluster"
    airflow_db: str = "airflow_cluster"
    #: Slots per Spark worker, from the slot plan (flowctl.core.slot_plan): each stream
    #: holds one single-core executor per worker, and the streams and the reconcile that
    #: may run at once must all fit (see docs/deployment.md).
    worker_cores: int = DEFAULT_PLAN.worker_cores()
    worker_memory: str = f"{DEFAULT_PLAN.worker_memory_mb()}m"
    executor_memory: str = f"{DEFAULT_PLAN.executor_memory_mb}m"
    celery_concurrency: int = 4
    #: Extra environment for every Airflow component (e.g. FLOWCTL_PIPELINES_DIR).
    extra_env: Mapping[str, str] = field(default_factory=dict)
    #: Tansu's storage engine (``FLOWCTL_CLUSTER_TANSU_STORAGE``): ``memory`` (the default;
    #: lost when Tansu stops; cheaper per fetch on a long log, see bench/README.md,
    #: cluster_volume) or ``s3`` (the local moto server unless ``AWS_ENDPOINT`` names a
    #: real S3; survives a Tansu restart). Only a real S3 is durable across ``cluster down``.
    tansu_storage: str = DEFAULT_TANSU_STORAGE

    def __post_init__(self) -> None:
        if len(self.kafka_ports) != len(self.kafka_controller_ports) or not self.kafka_ports:
            raise ValueError(
                f"kafka_ports={self.kafka_ports!r} and kafka_controller_ports="
                f"{self.kafka_controller_ports!r} must name the same number of brokers"
            )
        if self.tansu_storage not in TANSU_STORAGES:
            raise ValueError(
                f"tansu_storage={self.tansu_storage!r} must be one of {', '.join(TANSU_STORAGES)}"
            )

    # -- derived facts --------------------------------------------------------------------
    @property
    def spark_master_url(self) -> str:
        return f"spark://{self.host}:{self.spark_master_port}"

    @property
    def kafka_bootstrap(self) -> str:
        """The bootstrap servers of the cluster's brokers (all of them: any may be down)."""
        return ",".join(f"{self.host}:{p}" for p in self.kafka_ports)

    @property
    def queue(self) -> str:
        """The Celery queue: per home, so clusters sharing one Redis never take each
        other's tasks."""
        return f"flowctl-{_home_tag(self.home)}"

    def database_url(self, name: str) -> str:
        from flowctl.adapters.postgres_admin import with_database

        return with_database(self.postgres_url, name)

    @property
    def settings(self) -> Settings:
        """The platform settings of this cluster: Apache Kafka (or Tansu, :attr:`broker`),
        PostgreSQL, Spark standalone."""
        return Settings(
            home=self.home,
            host=self.host,
            kafka_port=self.kafka_ports[0],
            kafka_controller_port=self.kafka_controller_ports[0],
            # Apache Kafka's three brokers run as the cluster's own processes: to the
            # platform's services they are a Kafka it checks and does not start.
            kafka_bootstrap_servers=self.kafka_bootstrap if self.broker == "kafka" else "",
            broker=self.broker,
            tansu_storage=self.tansu_storage,
            tansu_storage_variable=STORAGE_VARIABLE,
            s3_port=self.s3_port,
            memcached_port=self.memcached_port,
            database_url=self.database_url(self.flowctl_db),
            spark_master=self.spark_master_url,
            airflow_port=self.airflow_port,
        )

    @property
    def spark_conf_dir(self) -> Path:
        """``SPARK_CONF_DIR`` of every driver: its spark-defaults.conf ships the code."""
        return self.home / "spark-conf"

    def worker_dir(self, index: int) -> Path:
        return self.home / "spark" / f"worker-{index}"

    # -- commands -------------------------------------------------------------------------
    def master_argv(self) -> tuple[str, ...]:
        return (
            str(spark_home() / "bin" / "spark-class"),
            MASTER_CLASS,
            "--host",
            self.host,
            "--port",
            str(self.spark_master_port),
            "--webui-port",
            str(self.spark_master_ui_port),
        )

    def worker_argv(self, index: int) -> tuple[str, ...]:
        """Worker ``index`` (1-based): its own web UI port and work dir."""
        return (
            str(spark_home() / "bin" / "spark-class"),
            WORKER_CLASS,
            "--host",
            self.host,
            "--webui-port",
            str(self.spark_worker_ui_ports[index - 1]),
            "--cores",
            str(self.worker_cores),
            "--memory",
            self.worker_memory,
            "--work-dir",
            str(self.worker_dir(index)),
            self.spark_master_url,
        )

    def airflow_argv(self, component: str) -> tuple[str, ...]:
        """``airflow <command>`` of a component (``api-server``, ..., ``worker-1``)."""
        from flowctl.services.airflow import airflow_bin

        base = (sys.executable, airflow_bin())
        if component.startswith("worker-"):
            return (
                *base,
                "celery",
                "worker",
                "--queues",
                self.queue,
                "--concurrency",
                str(self.celery_concurrency),
                "--celery-hostname",
                f"{component}-{_home_tag(self.home)}@%h",
            )
        return (*base, component)

    # -- environment ----------------------------------------------------------------------
    def airflow_env(self) -> dict[str, str]:
        """The environment of every Airflow component and task (compose: x-airflow-common)."""
        from flowctl.services.airflow import airflow_env, airflow_home, connections_env

        settings = self.settings
        secret = hashlib.sha256(f"flowctl-cluster-{self.home}".encode()).hexdigest()
        metadata = self.database_url(self.airflow_db)
        env = {
            **airflow_env(settings),
            **connections_env(settings),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata,
            "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
            "AIRFLOW__CELERY__BROKER_URL": self.redis_url,
            "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + metadata,
            "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.queue,
            "AIRFLOW__CORE__LOAD_EXAMPLES": "false",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "true",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": (
                f"http://{self.host}:{self.airflow_port}/execution/"
            ),
            "AIRFLOW__API_AUTH__JWT_SECRET": secret,
            "AIRFLOW__API__SECRET_KEY": secret,
            "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "true",
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST": self.host,
            "AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_PORT": str(
                self.scheduler_health_port
            ),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self.triggerer_log_port),
            # One api-server worker process: one machine, one user (compose: per container).
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(
                airflow_home(settings) / "simple_auth_manager_passwords.json.generated"
            ),
            "SPARK_CONF_DIR": str(self.spark_conf_dir),
            "PYSPARK_PYTHON": sys.executable,
            **self.extra_env,
        }
        # No PYTHONPATH of the caller: the tasks import flowctl from the installed package.
        env.pop("PYTHONPATH", None)
        # The embedded platform's SQLite busy timeout (``timeout``) is no PostgreSQL option:
        # psycopg2 refuses it ("invalid connection option"), and `airflow db migrate` fails.
        env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS", None)
        env.pop("AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC", None)
        return env

    def component_env(self, component: str) -> dict[str, str]:
        """Per-process additions: each Celery worker serves its logs on its own port."""
        env = self.airflow_env()
        if component.startswith("worker-"):
            index = int(component.removeprefix("worker-"))
            env["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"] = str(self.celery_log_ports[index - 1])
        return env

    def spark_env(self) -> dict[str, str]:
        """Master and workers: loopback, and no PYTHONPATH that executors could inherit."""
        return {"SPARK_LOCAL_IP": self.host, "SPARK_HOME": str(spark_home()), "PYTHONPATH": ""}

    # -- persistence ----------------------------------------------------------------------
    @property
    def path(self) -> Path:
        return self.home / LAYOUT_FILE

    def save(self) -> None:
        data = dataclasses.asdict(self)
        data["home"] = str(self.home)
        self.home.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(data, indent=2, sort_keys=True))

    @classmethod
    def private(cls, home: Path, tag: str, **overrides: Any) -> ClusterLayout:
        """A layout on free ports and databases of its own (``flowctl_<tag>``,
        ``airflow_<tag>``): a benchmark or a test beside another deployment on the
        machine, whose default ports and database names may be taken."""
        from flowctl.services.ports import free_port

        ports: dict[str, Any] = {
            name: free_port()
            for name in (
                "s3_port",
                "memcached_port",
                "airflow_port",
                "spark_master_port",
                "spark_master_ui_port",
                "scheduler_health_port",
                "triggerer_log_port",
            )
        }
        ports["spark_worker_ui_ports"] = (free_port(), free_port())
        ports["kafka_ports"] = (free_port(), free_port(), free_port())
        ports["kafka_controller_ports"] = (free_port(), free_port(), free_port())
        ports["celery_log_ports"] = (free_port(), free_port())
        databases = {"flowctl_db": f"flowctl_{tag}", "airflow_db": f"airflow_{tag}"}
        return cls(home=home, **{**ports, **databases, **overrides})

    @classmethod
    def load(cls, home: Path) -> ClusterLayout | None:
        """The layout ``up`` saved in ``home``, or None if there is none."""
        try:
            data = json.loads((home / LAYOUT_FILE).read_text())
        except FileNotFoundError:
            return None
        data["home"] = Path(data["home"])
        data.setdefault("tansu_storage", UNRECORDED_TANSU_STORAGE)
        if "kafka_port" in data:  # a layout saved while Tansu was the cluster's broker
            data["broker"] = "tansu"
            data["kafka_ports"] = (data.pop("kafka_port"),)
            data["kafka_controller_ports"] = (0,)
        for key in ("spark_worker_ui_ports", "celery_log_ports", "kafka_ports",
                    "kafka_controller_ports"):  # fmt: skip
            data[key] = tuple(data[key])
        return cls(**data)

    @classmethod
    def from_env(cls, home: Path, env: Mapping[str, str] | None = None) -> ClusterLayout:
        """Defaults, with the embedded platform's ports from ``FLOWCTL_*`` variables and
        Tansu's engine from ``FLOWCTL_CLUSTER_TANSU_STORAGE`` (not the embedded platform's
        ``FLOWCTL_TANSU_STORAGE``), :data:`DEFAULT_TANSU_STORAGE` when it is unset."""
        env = os.environ if env is None else env
        s = Settings.from_env({**env, "FLOWCTL_HOME": str(home)})
        storage = env.get(STORAGE_VARIABLE) or DEFAULT_TANSU_STORAGE
        if storage not in TANSU_STORAGES:
            raise ValueError(
                f"{STORAGE_VARIABLE}={storage!r} must be one of {', '.join(TANSU_STORAGES)}"
            )
        return cls(
            home=s.home,
            host=s.host,
            kafka_ports=tuple(s.kafka_port + 100 * i for i in range(3)),
            kafka_controller_ports=tuple(s.kafka_controller_port + 100 * i for i in range(3)),
            broker=s.broker,
            s3_port=s.s3_port,
            memcached_port=s.memcached_port,
            airflow_port=s.airflow_port,
            tansu_storage=storage,
        )
