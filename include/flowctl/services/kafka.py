"""The embedded Kafka: Apache Kafka's own broker, a quorum of one KRaft node
(:mod:`flowctl.services.kafka_node`), its log on disk under ``<home>/kafka/log``.

The log survives a broker restart and a SIGKILL (what the broker acknowledged is in the
kernel's page cache) and ``flowctl services down``; ``down --purge`` deletes it. Settings:
``FLOWCTL_KAFKA_PORT``, ``FLOWCTL_KAFKA_CONTROLLER_PORT``, ``FLOWCTL_KAFKA_HEAP``,
``FLOWCTL_KAFKA_RETENTION_HOURS``, ``FLOWCTL_KAFKA_RETENTION_MB``. When
``FLOWCTL_KAFKA_BOOTSTRAP`` names another Kafka, nothing is started and only the health
check runs against it.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

from flowctl.config import Settings
from flowctl.services.base import ServiceError, ServiceStatus
from flowctl.services.kafka_node import KafkaNode, KafkaQuorum, dir_size, new_cluster_id
from flowctl.services.ports import check_tcp
from flowctl.services.process import Daemon, EmbeddedService

NAME = "kafka"


def is_external(settings: Settings) -> bool:
    """True when the settings name a Kafka other than the embedded broker (ours or Tansu)."""
    embedded = f"{settings.host}:{settings.kafka_port}"
    return bool(settings.kafka_bootstrap_servers) and settings.kafka_bootstrap_servers != embedded


def _reachable(bootstrap: str, timeout: float) -> None:
    """Fail fast (the Kafka client retries for long) unless a bootstrap server accepts TCP."""
    errors = []
    for server in bootstrap.split(","):
        host, _, port = server.strip().rpartition(":")
        try:
            check_tcp(host.strip("[]"), int(port), timeout)
            return
        except (OSError, ValueError) as exc:
            errors.append(f"{server.strip()}: {exc.strerror if isinstance(exc, OSError) else exc}")
    raise ServiceError(f"no Kafka broker answers at {bootstrap} ({'; '.join(errors)})")


def kafka_health(bootstrap: str, timeout: float) -> None:
    """A Kafka-protocol round trip (metadata via ``list_topics``) within ``timeout``.

    The round trip is the Kafka adapter's; it is imported here, not at the top,
    so the CLI starts without loading the Kafka client.
    """
    _reachable(bootstrap, timeout)
    from flowctl.adapters.kafka_log import KafkaUnavailable, check_broker

    try:
        check_broker(bootstrap, timeout)
    except KafkaUnavailable as exc:
        raise ServiceError(str(exc)) from None


def node(settings: Settings) -> KafkaNode:
    """The embedded broker: node 1 of a quorum of one."""
    return KafkaNode(
        1, settings.host, settings.kafka_port, settings.kafka_controller_port, state_dir(settings)
    )


def quorum(settings: Settings) -> KafkaQuorum:
    return KafkaQuorum(
        (node(settings),),
        settings.kafka_heap,
        settings.kafka_retention_hours,
        settings.kafka_retention_mb,
    )


def state_dir(settings: Settings) -> Path:
    """Everything the embedded broker keeps: its config and its log."""
    return settings.home / "kafka"


def log_dir(settings: Settings) -> Path:
    """The broker's log (``log.dirs``): topics' segments and the KRaft metadata log."""
    return node(settings).log_dir


def log_size(settings: Settings) -> int:
    """Bytes the broker's log takes on disk (0 when there is none)."""
    return dir_size(log_dir(settings))


def purge(settings: Settings) -> str:
    """Delete the broker's log and config (the broker must be down)."""
    state = state_dir(settings)
    if not state.exists():
        return f"{NAME}: no log to delete at {state}"
    size = log_size(settings)
    shutil.rmtree(state)
    return f"{NAME}: deleted its log at {state} ({size / 1e6:.1f} MB)"


def durability(settings: Settings) -> str:
    """One line saying where the broker's log lives and what survives a restart."""
    if settings.broker == "tansu" or is_external(settings):
        from flowctl.services import s3  # Tansu's engines, and the external Kafka's line

        return s3.durability(settings)
    return (
        f"log: on disk in {log_dir(settings)} (retention {settings.kafka_retention_hours} h or "
        f"{settings.kafka_retention_mb} MB per partition); it survives a broker restart, a "
        "kill and `down`; `down --purge` deletes it"
    )


def daemon(settings: Settings, for_start: bool = False) -> Daemon:
    """The broker process for these settings (``for_start``: its files are written and
    its log formatted, the first time, for a new cluster)."""
    one = node(settings)
    if for_start:
        quorum(settings).prepare(one, new_cluster_id())
    return Daemon(
        name=NAME,
        argv=quorum(settings).argv(one, for_start),
        host=settings.host,
        port=settings.kafka_port,
        settings=settings,
        health=lambda timeout: kafka_health(one.address, timeout),
        start_timeout=90.0,  # a JVM; about 5 s on 2 idle cores, much longer beside Spark
        stop_timeout=30.0,  # a controlled shutdown closes every log
    )


class KafkaBroker(EmbeddedService):
    """A Kafka broker we run, or, when ``FLOWCTL_KAFKA_BOOTSTRAP`` names another, a health
    check of that Kafka: what Apache Kafka's service and Tansu's share."""

    kind = "Kafka"

    def is_external(self, settings: Settings) -> bool:
        return is_external(settings)

    def address(self, settings: Settings) -> str:
        return settings.kafka_bootstrap

    def health(self, address: str, timeout: float) -> None:
        kafka_health(address, timeout)


class KafkaService(KafkaBroker):
    """The embedded Apache Kafka broker, or a health check of an external Kafka."""

    name = NAME

    def daemon(self, settings: Settings, for_start: bool = False) -> Daemon:
        return daemon(settings, for_start)

    def status(self, settings: Settings) -> ServiceStatus:
        """The broker's state, with its log's size on disk in the detail."""
        row = super().status(settings)
        if self.is_external(settings):
            return row
        size = f"data {log_size(settings) / 1e6:.1f} MB on disk in {log_dir(settings)}"
        return dataclasses.replace(row, detail=f"{size}; {row.detail}" if row.detail else size)

    def purge(self, settings: Settings) -> str:
        """Delete the broker's log (after ``down``): every topic and record is gone."""
        if self.daemon(settings).running() is not None:
            raise ServiceError(f"{NAME}: still running; stop it before deleting its log")
        return purge(settings)
