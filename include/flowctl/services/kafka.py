"""The embedded Kafka: Apache Kafka's own broker, one KRaft node (broker and controller).

The broker's jars are Maven artifacts at the version ``include/kafka-broker/pom.xml`` pins (the
same as docker-compose.yaml's ``apache/kafka`` image); ``scripts/bootstrap`` resolves them
once into ``.deps/kafka-<version>/`` (``FLOWCTL_KAFKA_LIBS`` names another folder), and
nothing is downloaded when the broker starts.

What runs, and why (docs/services.md, "The broker"):

- the log on disk under ``<home>/kafka/log``: it survives a broker restart and a SIGKILL
  (what a producer was acknowledged is in the page cache, written by the kernel), and
  ``flowctl services down --purge`` deletes it;
- retention on, by time and by size per partition (``FLOWCTL_KAFKA_RETENTION_HOURS``,
  ``FLOWCTL_KAFKA_RETENTION_MB``), in segments small enough for retention to act;
- no auto-created topics (the platform creates its topics with their partition counts;
  a typo'd topic is an error, not a new empty log);
- transactions on: the transaction state log and the consumer offsets topic at
  replication 1 (one broker), so a transactional producer's aborted records are filtered
  by the platform's read_committed consumers;
- a bounded heap (``FLOWCTL_KAFKA_HEAP``, fixed at start).

The storage is formatted (``kafka.tools.StorageTool format``) once, the first time the
log folder has no ``meta.properties``.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import shutil
import subprocess
import uuid
import xml.etree.ElementTree as ET
from pathlib import Path

from flowctl.config import PROJECT_ROOT, Settings
from flowctl.services.base import ServiceError, ServiceStatus
from flowctl.services.ports import check_tcp
from flowctl.services.process import Daemon, EmbeddedService

NAME = "kafka"
POM = PROJECT_ROOT / "include" / "kafka-broker" / "pom.xml"
LIBS_ENV = "FLOWCTL_KAFKA_LIBS"
#: The JVM's options besides the heap: G1 with short pauses (a broker serves small
#: requests), exit on running out of memory rather than limp on.
JVM_OPTIONS = (
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
#: Kafka's own distribution's levels: the request and state-change loggers are noisy.
LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = STDOUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.state.name = state.change.logger
logger.state.level = WARN
logger.controller.name = org.apache.kafka.controller
logger.controller.level = INFO
"""


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


def version() -> str:
    """The Kafka version ``include/kafka-broker/pom.xml`` pins (``<kafka.version>``)."""
    try:
        root = ET.parse(POM).getroot()
    except (OSError, ET.ParseError) as exc:
        raise ServiceError(f"kafka: cannot read the broker's manifest {POM}: {exc}") from None
    found = root.find(
        "{http://maven.apache.org/POM/4.0.0}properties/"
        "{http://maven.apache.org/POM/4.0.0}kafka.version"
    )
    if found is None or not (found.text or "").strip():
        raise ServiceError(f"kafka: {POM} names no <kafka.version>")
    return (found.text or "").strip()


def libs_dir() -> Path:
    """The folder of the broker's jars: ``FLOWCTL_KAFKA_LIBS`` or ``.deps/kafka-<version>``."""
    named = os.environ.get(LIBS_ENV)
    return Path(named) if named else PROJECT_ROOT / ".deps" / f"kafka-{version()}"


def classpath(check: bool = True) -> str:
    """The JVM class path of the broker's jars; ``check``: fail clearly when they are missing."""
    libs = libs_dir()
    if check and not any(libs.glob("kafka_2.13-*.jar")):
        raise ServiceError(
            f"kafka: the broker's jars are not in {libs}; run scripts/bootstrap (it resolves "
            f"{POM.relative_to(PROJECT_ROOT)} with Maven once), or set {LIBS_ENV}"
        )
    return f"{libs}/*"


def java() -> str:
    """The ``java`` of ``JAVA_HOME``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise ServiceError("kafka: no java on PATH (Apache Kafka needs Java 17 or newer)")
    return found


def state_dir(settings: Settings) -> Path:
    """Everything the embedded broker keeps: its config and its log."""
    return settings.home / "kafka"


def log_dir(settings: Settings) -> Path:
    """The broker's log (``log.dirs``): topics' segments and the KRaft metadata log."""
    return state_dir(settings) / "log"


def server_properties(settings: Settings) -> str:
    """The broker's ``server.properties`` for these settings."""
    host = settings.host
    retention_bytes = settings.kafka_retention_mb * 1024 * 1024
    # Retention deletes whole segments only: at most an eighth of the size limit each.
    segment_bytes = max(1024 * 1024, min(128 * 1024 * 1024, retention_bytes // 8))
    lines = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@{host}:{settings.kafka_controller_port}",
        "listeners": f"PLAINTEXT://{host}:{settings.kafka_port},"
        f"CONTROLLER://{host}:{settings.kafka_controller_port}",
        "advertised.listeners": f"PLAINTEXT://{host}:{settings.kafka_port}",
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(log_dir(settings)),
        "auto.create.topics.enable": "false",
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.hours": str(settings.kafka_retention_hours),
        "log.retention.bytes": str(retention_bytes),
        "log.segment.bytes": str(segment_bytes),
        "log.retention.check.interval.ms": "60000",
    }
    return "".join(f"{key}={value}\n" for key, value in lines.items())


def _format(settings: Settings, properties: Path) -> None:
    """Format the log folder for KRaft once (a new cluster id), if never formatted."""
    if (log_dir(settings) / "meta.properties").exists():
        return
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
    # ``--cluster-id=<id>``: an id may begin with "-", which a separate argument would not be
    argv = [java(), "-cp", classpath(), "kafka.tools.StorageTool", "format",
            f"--cluster-id={cluster_id}", "-c", str(properties)]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        reason = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
        raise ServiceError(f"kafka: formatting {log_dir(settings)} failed: {reason[0]}")


def prepare(settings: Settings) -> Path:
    """Write the broker's config files and format its log; return ``server.properties``."""
    state = state_dir(settings)
    state.mkdir(parents=True, exist_ok=True)
    properties = state / "server.properties"
    properties.write_text(server_properties(settings))
    (state / "log4j2.properties").write_text(LOG4J2)
    _format(settings, properties)
    return properties


def log_size(settings: Settings) -> int:
    """Bytes the broker's log takes on disk (0 when there is none)."""
    total = 0
    for root, _dirs, files in os.walk(log_dir(settings)):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total


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
    """The broker process for these settings (``for_start``: its files are written)."""
    state = state_dir(settings)
    properties = prepare(settings) if for_start else state / "server.properties"
    heap = settings.kafka_heap
    argv = (
        java() if for_start else (shutil.which("java") or "java"),
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *JVM_OPTIONS,
        f"-Dlog4j2.configurationFile={state / 'log4j2.properties'}",
        f"-Dkafka.logs.dir={state}",
        "-cp",
        classpath(check=for_start),
        "kafka.Kafka",
        str(properties),
    )
    bootstrap = f"{settings.host}:{settings.kafka_port}"
    return Daemon(
        name=NAME,
        argv=argv,
        host=settings.host,
        port=settings.kafka_port,
        settings=settings,
        health=lambda timeout: kafka_health(bootstrap, timeout),
        start_timeout=90.0,  # a JVM; about 5 s on 2 idle cores, much longer beside Spark
        stop_timeout=30.0,  # a controlled shutdown closes every log
    )


class KafkaService(EmbeddedService):
    """The embedded Apache Kafka broker, or a health check of an external Kafka."""

    name = NAME
    kind = "Kafka"

    def is_external(self, settings: Settings) -> bool:
        return is_external(settings)

    def address(self, settings: Settings) -> str:
        return settings.kafka_bootstrap

    def health(self, address: str, timeout: float) -> None:
        kafka_health(address, timeout)

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
