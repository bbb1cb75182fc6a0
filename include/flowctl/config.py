"""Settings of the embedded platform, read from ``FLOWCTL_*`` environment variables.

One place for every knob of the local deployment (ports, paths, the database
URL), with defaults that make ``scripts/demo`` work on a fresh machine. Each
field names its environment variable; a bad value raises :class:`ConfigError`
naming the variable and the value.

In Airflow the same facts live in connections (``flowctl_kafka``,
``flowctl_memcached``, ``flowctl_db``, ``spark_default``); ``flowctl airflow
connections`` derives those from these settings.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: A JVM memory size as ``-Xmx`` takes it (and Spark's ``spark.driver.memory``).
_JVM_SIZE = re.compile(r"[1-9][0-9]*[kKmMgG]")


class ConfigError(ValueError):
    """A setting has a bad value; the message names the variable and the value."""


def _int(env: Mapping[str, str], name: str, default: int, lo: int = 1, hi: int = 65535) -> int:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer") from None
    if not lo <= value <= hi:
        raise ConfigError(f"{name}={value} is out of range [{lo}, {hi}]")
    return value


def _jvm_size(env: Mapping[str, str], name: str, default: str) -> str:
    raw = env.get(name, default) or default
    if not _JVM_SIZE.fullmatch(raw):
        raise ConfigError(
            f"{name}={raw!r} is not a JVM heap size "
            "(a whole number and a unit, k, m or g: e.g. 768m, 1g)"
        )
    return raw


@dataclass(frozen=True)
class Settings:
    """The embedded platform's settings; see :meth:`from_env` for the variables."""

    home: Path = field(default_factory=lambda: PROJECT_ROOT / ".flowctl")
    host: str = "127.0.0.1"
    kafka_port: int = 9092
    #: The embedded broker: ``kafka`` (Apache Kafka, :mod:`flowctl.services.kafka`) or
    #: ``tansu`` (the former stand-in, :mod:`flowctl.services.tansu`).
    broker: str = "kafka"
    kafka_controller_port: int = 9093  # the embedded Apache Kafka's KRaft controller
    kafka_heap: str = "512m"  # its JVM heap, fixed at start
    kafka_retention_hours: int = 168  # its log's retention by time (Kafka's default)
    kafka_retention_mb: int = 1024  # and by size, per partition
    tansu_storage: str = "memory"  # "memory" or "s3"
    #: The variable that chose ``tansu_storage``, named in errors and in ``status`` (the
    #: process cluster's is ``FLOWCTL_CLUSTER_TANSU_STORAGE``).
    tansu_storage_variable: str = "FLOWCTL_TANSU_STORAGE"
    tansu_s3_url: str = "s3://tansu/"
    s3_port: int = 9000  # the local (moto) S3 server of Tansu's S3 mode
    memcached_port: int = 11211
    memcached_memory_mb: int = 256
    database_url: str = ""  # empty: SQLite file in ``home``
    spark_master: str = "local[2]"
    airflow_port: int = 8080
    kafka_bootstrap_servers: str = ""  # empty: the embedded broker at host:kafka_port
    memcached_server: str = ""  # empty: the embedded memcached at host:memcached_port
    metrics_raw_hours: int = 24  # metrics windows older than this are rolled up hourly
    #: Whether Spark drivers map the class-data sharing archive once it is built
    #: (flowctl.adapters.class_archive).
    spark_class_archive: bool = True
    #: The heap of every Spark driver the platform starts, fixed and touched at its start
    #: (flowctl.adapters.driver_jvm); Spark's own default size.
    spark_driver_memory: str = "1g"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Read the settings from the environment.

        ``FLOWCTL_HOME`` (state dir: pid files, logs, SQLite file; default
        ``<project>/.flowctl``), ``FLOWCTL_HOST`` (bind address, default
        127.0.0.1), ``FLOWCTL_KAFKA_PORT`` (9092), ``FLOWCTL_BROKER`` (``kafka``, the
        embedded Apache Kafka, or ``tansu``), ``FLOWCTL_KAFKA_CONTROLLER_PORT`` (9093),
        ``FLOWCTL_KAFKA_HEAP`` (``512m``, the embedded broker's heap, a JVM size),
        ``FLOWCTL_KAFKA_RETENTION_HOURS`` (168) and ``FLOWCTL_KAFKA_RETENTION_MB`` (1024 per
        partition): the embedded broker's retention, ``FLOWCTL_TANSU_STORAGE``
        (``memory`` or ``s3``), ``FLOWCTL_TANSU_S3_URL`` (``s3://tansu/``),
        ``FLOWCTL_S3_PORT`` (9000; the local moto S3 server of Tansu's S3 mode),
        ``FLOWCTL_MEMCACHED_PORT`` (11211), ``FLOWCTL_MEMCACHED_MEMORY_MB``
        (256), ``FLOWCTL_DATABASE_URL`` (any SQLAlchemy URL; default a SQLite
        file in the home), ``FLOWCTL_SPARK_MASTER`` (``local[2]``),
        ``FLOWCTL_AIRFLOW_PORT`` (8080), ``FLOWCTL_KAFKA_BOOTSTRAP`` (an
        external Kafka's bootstrap servers; default the embedded broker),
        ``FLOWCTL_MEMCACHED`` (an external memcached ``host:port``; default
        the embedded one), ``FLOWCTL_METRICS_RAW_HOURS`` (24, 1..8760: how long
        ``metrics_windows`` keeps each window; older ones are replaced by one rollup
        row per topology per hour, counts summed; see docs/services.md),
        ``FLOWCTL_SPARK_CLASS_ARCHIVE`` (``on`` or ``off``: whether Spark drivers map the
        class-data sharing archive ``flowctl class-archive`` builds),
        ``FLOWCTL_SPARK_DRIVER_MEMORY`` (``1g``: each Spark driver's heap, a JVM size such
        as ``768m`` or ``2g``; reserved whole at the driver's start, see docs/services.md).
        """
        env = os.environ if env is None else env
        raw_home = env.get("FLOWCTL_HOME") or ""
        try:
            home = Path(raw_home or PROJECT_ROOT / ".flowctl").expanduser().resolve()
        except (ValueError, RuntimeError) as exc:  # a NUL byte, an unknown ~user
            raise ConfigError(f"FLOWCTL_HOME={raw_home!r} is not a usable path: {exc}") from None
        storage = env.get("FLOWCTL_TANSU_STORAGE", "memory") or "memory"
        if storage not in ("memory", "s3"):
            raise ConfigError(f"FLOWCTL_TANSU_STORAGE={storage!r} must be 'memory' or 's3'")
        broker = env.get("FLOWCTL_BROKER", "kafka") or "kafka"
        if broker not in ("kafka", "tansu"):
            raise ConfigError(f"FLOWCTL_BROKER={broker!r} must be 'kafka' or 'tansu'")
        kafka_heap = _jvm_size(env, "FLOWCTL_KAFKA_HEAP", "512m")
        archive = env.get("FLOWCTL_SPARK_CLASS_ARCHIVE", "on") or "on"
        if archive not in ("on", "off"):
            raise ConfigError(f"FLOWCTL_SPARK_CLASS_ARCHIVE={archive!r} must be 'on' or 'off'")
        driver_memory = _jvm_size(env, "FLOWCTL_SPARK_DRIVER_MEMORY", "1g")
        return cls(
            home=home,
            host=env.get("FLOWCTL_HOST", "127.0.0.1") or "127.0.0.1",
            kafka_port=_int(env, "FLOWCTL_KAFKA_PORT", 9092),
            broker=broker,
            kafka_controller_port=_int(env, "FLOWCTL_KAFKA_CONTROLLER_PORT", 9093),
            kafka_heap=kafka_heap.lower(),
            kafka_retention_hours=_int(env, "FLOWCTL_KAFKA_RETENTION_HOURS", 168, hi=876000),
            kafka_retention_mb=_int(env, "FLOWCTL_KAFKA_RETENTION_MB", 1024, lo=8, hi=10**7),
            tansu_storage=storage,
            tansu_s3_url=env.get("FLOWCTL_TANSU_S3_URL", "s3://tansu/") or "s3://tansu/",
            s3_port=_int(env, "FLOWCTL_S3_PORT", 9000),
            memcached_port=_int(env, "FLOWCTL_MEMCACHED_PORT", 11211),
            memcached_memory_mb=_int(env, "FLOWCTL_MEMCACHED_MEMORY_MB", 256, lo=16, hi=65536),
            database_url=env.get("FLOWCTL_DATABASE_URL", ""),
            spark_master=env.get("FLOWCTL_SPARK_MASTER", "local[2]") or "local[2]",
            airflow_port=_int(env, "FLOWCTL_AIRFLOW_PORT", 8080),
            kafka_bootstrap_servers=env.get("FLOWCTL_KAFKA_BOOTSTRAP", ""),
            memcached_server=env.get("FLOWCTL_MEMCACHED", ""),
            metrics_raw_hours=_int(env, "FLOWCTL_METRICS_RAW_HOURS", 24, lo=1, hi=8760),
            spark_class_archive=archive == "on",
            spark_driver_memory=driver_memory.lower(),
        )

    @property
    def kafka_bootstrap(self) -> str:
        """Kafka bootstrap servers: ``FLOWCTL_KAFKA_BOOTSTRAP`` or the embedded broker."""
        return self.kafka_bootstrap_servers or f"{self.host}:{self.kafka_port}"

    @property
    def memcached_address(self) -> str:
        """memcached ``host:port``: ``FLOWCTL_MEMCACHED`` or the embedded server."""
        return self.memcached_server or f"{self.host}:{self.memcached_port}"

    def to_env(self) -> dict[str, str]:
        """The ``FLOWCTL_*`` variables that reproduce these settings in a child process."""
        return {
            "FLOWCTL_HOME": str(self.home),
            "FLOWCTL_HOST": self.host,
            "FLOWCTL_KAFKA_PORT": str(self.kafka_port),
            "FLOWCTL_BROKER": self.broker,
            "FLOWCTL_KAFKA_CONTROLLER_PORT": str(self.kafka_controller_port),
            "FLOWCTL_KAFKA_HEAP": self.kafka_heap,
            "FLOWCTL_KAFKA_RETENTION_HOURS": str(self.kafka_retention_hours),
            "FLOWCTL_KAFKA_RETENTION_MB": str(self.kafka_retention_mb),
            "FLOWCTL_TANSU_STORAGE": self.tansu_storage,
            "FLOWCTL_TANSU_S3_URL": self.tansu_s3_url,
            "FLOWCTL_S3_PORT": str(self.s3_port),
            "FLOWCTL_MEMCACHED_PORT": str(self.memcached_port),
            "FLOWCTL_MEMCACHED_MEMORY_MB": str(self.memcached_memory_mb),
            "FLOWCTL_DATABASE_URL": self.resolved_database_url,
            "FLOWCTL_SPARK_MASTER": self.spark_master,
            "FLOWCTL_AIRFLOW_PORT": str(self.airflow_port),
            "FLOWCTL_KAFKA_BOOTSTRAP": self.kafka_bootstrap,
            "FLOWCTL_MEMCACHED": self.memcached_address,
            "FLOWCTL_METRICS_RAW_HOURS": str(self.metrics_raw_hours),
            "FLOWCTL_SPARK_CLASS_ARCHIVE": "on" if self.spark_class_archive else "off",
            "FLOWCTL_SPARK_DRIVER_MEMORY": self.spark_driver_memory,
        }

    @property
    def resolved_database_url(self) -> str:
        """The SQLAlchemy URL: ``FLOWCTL_DATABASE_URL`` or ``sqlite:///<home>/flowctl.db``."""
        return self.database_url or f"sqlite:///{self.home / 'flowctl.db'}"
