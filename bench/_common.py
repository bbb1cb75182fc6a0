"""Shared pieces of the benchmarks: the private platform, pipeline configs, data, jobs.

Every experiment runs on its own platform: Tansu and memcached on free ports under a
temporary home (never the default ports), a fresh SQLite database, a pipeline config
that is a renamed copy of the shipped one (own topics, offsets and results). Jobs run
the way Airflow runs them, ``spark-submit`` in a subprocess, and are stopped through
the control plane (``stop`` signal).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench._experiment import RESULTS
from bench.lib.derive import derive_config
from bench.lib.submit import (
    LocalJob,
    job_env,
    submit_stream,
)
from flowctl.adapters import kafka_log
from flowctl.adapters.control_plane import ControlPlane
from flowctl.config import PROJECT_ROOT, Settings
from flowctl.services import manager
from flowctl.services.base import PortInUseError
from flowctl.services.ports import free_port

# -- services -----------------------------------------------------------------------------


@dataclasses.dataclass
class Platform:
    """Private services (the broker, memcached) and a SQLite database under a tmp home (or the
    SQLAlchemy URL ``database``: another deployment's database)."""

    settings: Settings
    work_dir: Path
    database: str = ""

    @property
    def database_url(self) -> str:
        return self.database or f"sqlite:///{self.work_dir / 'bench.db'}"

    @property
    def bootstrap(self) -> str:
        return self.settings.kafka_bootstrap

    @property
    def plane(self) -> ControlPlane:
        return ControlPlane(self.database_url)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        return job_env(self.settings, self.database_url, extra)


def _start(settings: Settings, service: str, port_field: str) -> Settings:
    for attempt in range(3):
        try:
            manager.up(settings, only=service)
            return settings
        except PortInUseError:
            if attempt == 2:
                raise
            settings = dataclasses.replace(settings, **{port_field: free_port()})
    return settings


def _terminate(signum: int, _frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds: jobs stopped, services down, home removed


@contextlib.contextmanager
def platform_up(keep: bool = False, memcached_memory_mb: int = 128) -> Iterator[Platform]:
    """The broker (Apache Kafka; Tansu with ``FLOWCTL_BROKER=tansu``) + memcached on free
    ports in a tmp home; stopped (and the home removed) on exit.

    ``memcached_memory_mb``: 128 for the short experiments; a soak passes the platform's
    default (:class:`flowctl.config.Settings`).

    SIGTERM and SIGINT unwind through the same cleanup.
    """
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    home = Path(tempfile.mkdtemp(prefix="flowctl-bench-"))
    settings = Settings(
        home=home,
        kafka_port=free_port(),
        kafka_controller_port=free_port(),
        memcached_port=free_port(),
        memcached_memory_mb=memcached_memory_mb,
        broker=os.environ.get("FLOWCTL_BROKER") or "kafka",
    )
    started: list[str] = []
    try:
        settings = _start(settings, settings.broker, "kafka_port")
        started.append(settings.broker)
        settings = _start(settings, "memcached", "memcached_port")
        started.append("memcached")
        plat = Platform(settings, home)
        plat.plane.ensure_schema()
        yield plat
    finally:
        for service in reversed(started):
            with contextlib.suppress(Exception):
                manager.down(settings, only=service)
        if not keep:
            shutil.rmtree(home, ignore_errors=True)


# -- pipeline configs ---------------------------------------------------------------------


def pipeline_config(
    directory: Path,
    name: str,
    *,
    shipped: str = "wordcount",
    definition: str | None = None,
    partitions: int = 4,
    stream: Mapping[str, object] | None = None,
    flow: Mapping[str, object] | None = None,
    scaling: Mapping[str, object] | None = None,
) -> Path:
    """The shipped config ``shipped`` (word count by default) renamed ``name``, with another
    ``definition`` module if given and ``[stream]``/``[flow]``/``[scaling]`` overrides."""
    sections = {
        "topics": {"partitions": partitions},
        "stream": stream or {},
        "flow": flow or {},
        "scaling": scaling or {},
    }
    return derive_config(directory, name, shipped=shipped, definition=definition, sections=sections)


def settings_of(config: Path) -> dict[str, str]:
    """The config's settings as ``{key: value text}`` (comments dropped): kept with results."""
    out = {}
    for line in config.read_text().splitlines():
        if "=" in line and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


def unique_name(prefix: str) -> str:
    return f"{prefix}{secrets.token_hex(3)}"


# -- data -----------------------------------------------------------------------------------


def random_lines(
    n: int, seed: int, min_bytes: int = 50, max_bytes: int = 100, vocabulary: int = 1000
) -> list[bytes]:
    """``n`` lines of 50-100 bytes, random words drawn uniformly from a fixed vocabulary.

    Like Storm's fast word count (random choices from a small set), so the counts
    stay a bounded set of keys and the database holds ``vocabulary`` rows.
    """
    import random

    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choices(letters, k=rng.randint(3, 9))) for _ in range(vocabulary)]
    out = []
    for _ in range(n):
        size = rng.randint(min_bytes, max_bytes)
        words: list[str] = []
        length = -1
        while length < size:
            w = rng.choice(vocab)
            words.append(w)
            length += len(w) + 1
        out.append(" ".join(words)[:size].rstrip().encode())
    return out


def produce(plat: Platform, topic: str, partitions: int, values: Sequence[bytes]) -> int:
    kafka_log.ensure_topics(plat.bootstrap, {topic: partitions})
    return kafka_log.produce(plat.bootstrap, topic, values, progress_every=20_000)


def read_loop(bootstrap: str, topic: str, total: int, check_crcs: bool = True) -> float:
    """Records/s of one kafka-python consumer reading all of ``topic`` and counting its
    words (no Spark, no database): the machine's upper bound for a Python reader."""
    from kafka import TopicPartition

    from flowctl.adapters.kafka_log import new_consumer
    from flowctl.pipelines.wordcount import count_values

    consumer = new_consumer(bootstrap, check_crcs=check_crcs)
    parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
    consumer.assign(parts)
    consumer.seek_to_beginning(*parts)
    counts: Counter[str] = Counter()
    seen = 0
    t0 = time.monotonic()
    while seen < total:
        for records in consumer.poll(timeout_ms=1000, max_records=5000).values():
            counts.update(count_values(r.value for r in records))
            seen += len(records)
    elapsed = time.monotonic() - t0
    consumer.close()
    return seen / elapsed


def read_loop_librdkafka(bootstrap: str, topic: str, total: int, check_crcs: bool = True) -> float:
    """Records/s of one librdkafka (confluent-kafka) consumer reading all of ``topic`` and
    counting its words as :func:`read_loop` does (the same ``count_values`` over batches
    of up to 5,000 values), CRC checks on (``check.crcs``): the ceiling of a Python reader
    whose fetching and record parsing are in C, no Spark, no database."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException
    from confluent_kafka import TopicPartition as RdTopicPartition

    from flowctl.pipelines.wordcount import count_values

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("bench-librdkafka"),  # required; assign() joins no group
            "enable.auto.commit": False,
            "check.crcs": check_crcs,
        }
    )
    metadata = consumer.list_topics(topic, timeout=30).topics[topic]
    if metadata.error is not None:
        raise KafkaException(metadata.error)
    consumer.assign(
        [RdTopicPartition(topic, p, OFFSET_BEGINNING) for p in sorted(metadata.partitions)]
    )
    counts: Counter[str] = Counter()
    seen = 0
    t0 = time.monotonic()
    while seen < total:
        messages = consumer.consume(num_messages=5000, timeout=1.0)
        for m in messages:
            if m.error() is not None:
                raise KafkaException(m.error())
        counts.update(count_values(m.value() for m in messages))
        seen += len(messages)
    elapsed = time.monotonic() - t0
    consumer.close()
    return seen / elapsed


# -- jobs -----------------------------------------------------------------------------------


#: A running ``spark-submit`` of a stream job in its own process group.
Job = LocalJob


def submit(
    plat: Platform,
    config: Path,
    topology_id: str,
    lanes: int,
    *,
    baseline: bool = False,
    max_records_per_batch: int | None = None,
    extra: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    master: str = "local[2]",
) -> Job:
    """``spark-submit`` the flow-controlled job (or the baseline) on ``master``."""
    if baseline and max_records_per_batch:
        extra = ["--max-records-per-batch", str(max_records_per_batch), *extra]
    return submit_stream(
        config,
        topology_id,
        lanes,
        env=plat.env(env),
        log_dir=plat.work_dir,
        extra=extra,
        baseline=baseline,
        master=master,
    )


def export_tree(commit: str, into: Path) -> Path:
    """The project at ``commit`` as plain files under ``into`` (``git archive``: no
    checkout, no worktree, the working tree untouched)."""
    into.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(PROJECT_ROOT), "archive", commit], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def old_tree_config(
    tree: Path, directory: Path, name: str, topic: str, *, shipped: str = "wordcount"
) -> Path:
    """``tree``'s shipped config ``shipped`` (word count by default) renamed ``name`` and
    reading ``topic``.

    Derived by text from the old file (not :func:`pipeline_config`: the keys of this
    tree's config are not all known to an old tree, and the reverse)."""
    text = (tree / "include" / "pipelines" / f"{shipped}.toml").read_text()
    for old, new in ((f'name = "{shipped}"', f'name = "{name}"'),
                     (f'eden = "{shipped}.eden"', f'eden = "{topic}"')):  # fmt: skip
        if text.count(old) != 1:
            raise ValueError(f"{tree}'s {shipped}.toml does not hold {old!r} exactly once")
        text = text.replace(old, new)
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def submit_from_tree(
    plat: Platform,
    tree: Path,
    config: Path,
    topology_id: str,
    lanes: int,
    *,
    env: Mapping[str, str] | None = None,
    master: str = "local[2]",
) -> Job:
    """``spark-submit`` ``tree``'s word-count stream job, ``tree``'s package first on the
    driver's and the workers' path (they inherit the environment)."""
    from bench.lib.submit import spark_submit

    paths = {"PYTHONPATH": f"{tree / 'include'}:{tree}"}
    args = ["--pipeline-config", str(config), "--topology-id", topology_id]
    return spark_submit(
        tree / "spark_jobs" / "wordcount_stream.py",
        [*args, "--parallelism", str(lanes)],
        env=plat.env({**(env or {}), **paths}),
        log_path=plat.work_dir / f"{topology_id}.log",
        topology_id=topology_id,
        master=master,
    )


def stop(plat: Platform, job: Job, timeout_s: float = 120.0) -> int | None:
    """Stop ``job`` through the control plane (``stop`` signal); SIGTERM/SIGKILL if it hangs."""
    return job.stop(plat.database_url, timeout_s)


def save_log(job: Job, name: str) -> None:
    """Keep the job's log in bench/results/logs/ (not committed) for a later look."""
    logs = RESULTS / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        shutil.copy(job.log_path, logs / f"{name}.log")
