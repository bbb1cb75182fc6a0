"""One Apache Kafka KRaft node (broker and controller): its jars, its config, its format.

The embedded broker (:mod:`flowctl.services.kafka`) is a quorum of one node; the process
cluster's (:mod:`flowctl.services.cluster_kafka`) a quorum of three. Both run the same
JVM command on the same jars: Maven artifacts at the version
``include/kafka-broker/pom.xml`` pins (the same as docker-compose.yaml's ``apache/kafka``
image), which ``scripts/bootstrap`` resolves once into ``.deps/kafka-<version>/``
(``FLOWCTL_KAFKA_LIBS`` names another folder); nothing is downloaded when a broker starts.

What every node runs with, and why (docs/services.md, "The broker: Apache Kafka"): its
log on disk; retention by time and by size per partition, in segments small enough for
retention to act; no auto-created topics (the platform creates its topics; a misspelt
topic is an error, not a new empty log); transactions on, their state log and the
consumer offsets replicated like any topic; a fixed heap. A node's log folder is
formatted (``kafka.tools.StorageTool format``) once, when it has no ``meta.properties``.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from flowctl.config import PROJECT_ROOT
from flowctl.services.base import ServiceError

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
"""


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


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


@dataclass(frozen=True)
class KafkaNode:
    """One node of a quorum: its id, ports and the folder of its config and log."""

    node_id: int
    host: str
    port: int
    controller_port: int
    state_dir: Path

    @property
    def log_dir(self) -> Path:
        """``log.dirs``: the topics' segments and the KRaft metadata log."""
        return self.state_dir / "log"

    @property
    def properties(self) -> Path:
        return self.state_dir / "server.properties"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class KafkaQuorum:
    """Nodes that are each broker and controller; replication as wide as they allow (at
    most 3), with ``min.insync.replicas`` 2 once there are 3 (acks=all then survives one
    node's loss)."""

    nodes: tuple[KafkaNode, ...]
    heap: str
    retention_hours: int
    retention_mb: int

    @property
    def replication(self) -> int:
        return min(3, len(self.nodes))

    @property
    def min_insync(self) -> int:
        return 2 if self.replication >= 3 else 1

    @property
    def bootstrap(self) -> str:
        return ",".join(n.address for n in self.nodes)

    def server_properties(self, node: KafkaNode) -> str:
        """``node``'s ``server.properties``."""
        retention_bytes = self.retention_mb * 1024 * 1024
        # Retention deletes whole segments only: at most an eighth of the size limit each.
        segment_bytes = max(1024 * 1024, min(128 * 1024 * 1024, retention_bytes // 8))
        voters = ",".join(f"{n.node_id}@{n.host}:{n.controller_port}" for n in self.nodes)
        rf, isr = str(self.replication), str(self.min_insync)
        lines = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{node.host}:{node.port},"
            f"CONTROLLER://{node.host}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{node.host}:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(node.log_dir),
            "auto.create.topics.enable": "false",
            "num.partitions": "1",
            "default.replication.factor": rf,
            "min.insync.replicas": isr,
            # The internal topics take 50 partitions by default, each a log per replica,
            # created at the first group commit or transaction: far more than a platform's
            # few groups (the checkpoints' copies) and producers need. Five each.
            "offsets.topic.num.partitions": "5",
            "transaction.state.log.num.partitions": "5",
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": isr,
            "share.coordinator.state.topic.replication.factor": rf,
            "share.coordinator.state.topic.min.isr": isr,
            "group.initial.rebalance.delay.ms": "0",
            "log.retention.hours": str(self.retention_hours),
            "log.retention.bytes": str(retention_bytes),
            "log.segment.bytes": str(segment_bytes),
            "log.retention.check.interval.ms": "60000",
        }
        return "".join(f"{key}={value}\n" for key, value in lines.items())

    def prepare(self, node: KafkaNode, cluster_id: str) -> None:
        """Write ``node``'s config files and format its log once (with ``cluster_id``)."""
        node.state_dir.mkdir(parents=True, exist_ok=True)
        node.properties.write_text(self.server_properties(node))
        (node.state_dir / "log4j2.properties").write_text(LOG4J2)
        if (node.log_dir / "meta.properties").exists():
            return
        # ``--cluster-id=<id>``: an id may begin with "-", which a separate argument would not
        argv = [java(), "-cp", classpath(), "kafka.tools.StorageTool", "format",
                f"--cluster-id={cluster_id}", "-c", str(node.properties)]  # fmt: skip
        result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            reason = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise ServiceError(f"kafka: formatting {node.log_dir} failed: {reason[0]}")

    def argv(self, node: KafkaNode, for_start: bool) -> tuple[str, ...]:
        """The command that runs ``node`` (``for_start``: fail clearly on missing parts)."""
        return (
            java() if for_start else (shutil.which("java") or "java"),
            f"-Xms{self.heap}",
            f"-Xmx{self.heap}",
            *JVM_OPTIONS,
            f"-Dlog4j2.configurationFile={node.state_dir / 'log4j2.properties'}",
            f"-Dkafka.logs.dir={node.state_dir}",
            "-cp",
            classpath(check=for_start),
            "kafka.Kafka",
            str(node.properties),
        )


def dir_size(path: Path) -> int:
    """Bytes the files under ``path`` take on disk (0 when there is none)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except OSError:
                continue
    return total
