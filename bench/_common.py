"""Shared pieces of the benchmarks: services, pipeline configs, jobs, measurements, results.

Every experiment runs on its own platform: Tansu and memcached on free ports under a
temporary home (never the default ports), a fresh SQLite database, a pipeline config
that is a renamed copy of the shipped one (own topics, offsets and results). Jobs run
the way Airflow runs them, ``spark-submit`` in a subprocess, and are stopped through
the control plane (``stop`` signal).
"""

from __future__ import annotations

import contextlib
import dataclasses
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
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
from flowctl.services.process import free_port

# -- services -----------------------------------------------------------------------------


@dataclasses.dataclass
class Platform:
    """Private services (Tansu, memcached) and a SQLite database under a tmp home."""

    settings: Settings
    work_dir: Path

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.work_dir / 'bench.db'}"

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
def platform_up(keep: bool = False) -> Iterator[Platform]:
    """Tansu + memcached on free ports in a tmp home; stopped (and the home removed) on exit.

    SIGTERM and SIGINT unwind through the same cleanup.
    """
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    home = Path(tempfile.mkdtemp(prefix="flowctl-bench-"))
    settings = Settings(
        home=home, kafka_port=free_port(), memcached_port=free_port(), memcached_memory_mb=128
    )
    started: list[str] = []
    try:
        settings = _start(settings, "tansu", "kafka_port")
        started.append("tansu")
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


def old_tree_config(tree: Path, directory: Path, name: str, topic: str) -> Path:
    """``tree``'s shipped word-count config renamed ``name`` and reading ``topic``.

    Derived by text from the old file (not :func:`pipeline_config`: the keys of this
    tree's config are not all known to an old tree, and the reverse)."""
    text = (tree / "include" / "pipelines" / "wordcount.toml").read_text()
    for old, new in (('name = "wordcount"', f'name = "{name}"'),
                     ('eden = "wordcount.eden"', f'eden = "{topic}"')):  # fmt: skip
        if text.count(old) != 1:
            raise ValueError(f"{tree}'s wordcount.toml does not hold {old!r} exactly once")
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


# -- measurements ---------------------------------------------------------------------------


def committed_total(plat: Platform, pipeline: str, topic: str) -> int:
    """Records durable in the database: the sum of the pipeline's committed offsets."""
    try:
        return sum(plat.plane.committed_offsets(pipeline, topic).values())
    except Exception:  # schema not there yet, or SQLite busy for a moment
        return -1


@dataclasses.dataclass
class Progress:
    """``(monotonic time, durable records)`` samples of a run."""

    samples: list[tuple[float, int]]

    def throughput_after_first_batch(self, total: int) -> tuple[float | None, dict[str, Any]]:
        """Records/s from the first durable progress (the first batch) to the last record."""
        nonzero = [(t, n) for t, n in self.samples if n > 0]
        done = [(t, n) for t, n in self.samples if n >= total]
        if not nonzero or not done:
            return None, {"complete": bool(done)}
        t0, n0 = nonzero[0]
        t1, _ = done[0]
        if t1 <= t0:
            return None, {"complete": True, "first_batch_records": n0}
        return (total - n0) / (t1 - t0), {
            "complete": True,
            "first_batch_records": n0,
            "measured_records": total - n0,
            "measured_s": round(t1 - t0, 3),
        }


def watch_progress(
    plat: Platform,
    job: Job,
    pipeline: str,
    topic: str,
    total: int,
    *,
    timeout_s: float,
    interval_s: float = 0.2,
    on_first_batch: Callable[[Job], None] | None = None,
) -> Progress:
    """Sample the durable record count until ``total`` is reached, the job dies or time is up."""
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        n = committed_total(plat, pipeline, topic)
        samples.append((time.monotonic(), n))
        if on_first_batch is not None and n > 0:
            threading.Thread(target=on_first_batch, args=(job,), daemon=True).start()
            on_first_batch = None
        if n >= total or not job.alive():
            break
        time.sleep(interval_s)
    return Progress(samples)


class OffsetLatency:
    """End-to-end latency per record: producer send time -> its offset durable in the DB.

    A steady producer thread sends ``rate`` records/s and keeps each record's send time
    by ``(partition, offset)``; a poller reads the committed offsets every ``poll_s``
    and stamps every record below a newly committed offset with the poll's time. Both
    jobs are measured by the same code, so the poll resolution (``poll_s``) is the same
    error on both sides.
    """

    def __init__(self, plat: Platform, pipeline: str, topic: str, poll_s: float = 0.05) -> None:
        self.plat = plat
        self.pipeline = pipeline
        self.topic = topic
        self.poll_s = poll_s
        self.sent: dict[tuple[int, int], float] = {}
        self.latencies: list[tuple[float, float]] = []  # (durable at, latency s)
        self.durable: dict[tuple[int, int], float] = {}  # (partition, offset) -> durable at
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._committed: dict[int, int] = {}

    def produce_steady(self, values: Sequence[bytes], rate: float, stamp: bool = True) -> int:
        """Send ``values`` at ``rate`` records/s (in 20 ms slices); returns records acknowledged.

        With ``stamp`` each line starts with its send time (digits are not words).
        """
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=self.plat.bootstrap, acks=1, linger_ms=2)
        futures = []
        start = time.time()
        for i, value in enumerate(values):
            due = start + i / rate
            delay = due - time.time()
            if delay > 0.02:
                time.sleep(delay)
            sent_at = time.time()
            if stamp:
                value = f"{sent_at:.3f} ".encode() + value
            fut = producer.send(self.topic, value)
            futures.append((fut, sent_at))
            if i % 200 == 0:
                self._collect(futures)
                futures = []
        producer.flush()
        self._collect(futures)
        producer.close()
        return len(self.sent)

    def _collect(self, futures: list[tuple[Any, float]]) -> None:
        for fut, sent_at in futures:
            md = fut.get(timeout=30)
            with self._lock:
                self.sent[(md.partition, md.offset)] = sent_at

    def poll_until(self, total: int | None, timeout_s: float, job: Job) -> None:
        """Poll until ``total`` sent records are durable (``None``: until the timeout), the
        timeout passes or the job exits. ``durable`` keeps every offset's durable time."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and job.alive():
            try:
                committed = self.plat.plane.committed_offsets(self.pipeline, self.topic)
            except Exception:
                committed = {}
            now = time.time()
            with self._lock:
                for p, n in committed.items():
                    before = self._committed.get(p, 0)
                    for off in range(before, n):
                        self.durable[(p, off)] = now
                        sent_at = self.sent.get((p, off))
                        if sent_at is not None:
                            self.latencies.append((now, now - sent_at))
                    if n > before:
                        self._committed[p] = n
                if total is not None and len(self.latencies) >= total:
                    return
            time.sleep(self.poll_s)


def drain_run(
    plat: Platform,
    work: Path,
    topic: str,
    total: int,
    lanes: int,
    *,
    label: str,
    baseline: bool,
    partitions: int = 4,
    batch: int | None = None,
    stream: Mapping[str, object] | None = None,
    flow: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 240.0,
    on_first_batch: Callable[[Job], None] | None = None,
    master: str = "local[2]",
    rate_source: bool = False,
    tree: Path | None = None,
) -> tuple[float | None, dict[str, Any]]:
    """One job reads all of ``topic`` under a pipeline of its own; records/s after batch 1.

    ``rate_source``: the baseline reads Spark's rate source instead (``--source rate``)
    and its first ``total`` records are timed, by their offsets under ``<topic>.rate``.
    ``tree``: the flow job of another project tree (:func:`export_tree`), with that
    tree's shipped word-count config and package (``stream``, ``flow`` and ``batch`` do
    not apply: its settings are the ones it shipped with), on a database of its own (the
    same broker and memcached).
    """
    from bench.lib.rate_lines import rate_topic

    name = unique_name(label)
    settings = dict(stream or {})
    if batch is not None:
        settings["max_records_per_batch"] = batch
    if tree is not None:
        # its own database: an old tree refuses one of this tree's schema version
        plat = dataclasses.replace(plat, work_dir=work / f"{name}-db")
        plat.work_dir.mkdir()
        config = old_tree_config(tree, work, name, topic)
        job = submit_from_tree(plat, tree, config, f"{name}-1", lanes, env=env, master=master)
    else:
        config = pipeline_config(work, name, partitions=partitions, stream=settings, flow=flow)
        text = config.read_text().replace(f'eden = "{name}.eden"', f'eden = "{topic}"')
        config.write_text(text)
        extra = ["--source", "rate"] if rate_source else []
        job = submit(
            plat, config, f"{name}-1", lanes, baseline=baseline, extra=extra, env=env, master=master
        )
    measured = rate_topic(topic) if rate_source else topic
    try:
        progress = watch_progress(
            plat, job, name, measured, total, timeout_s=timeout_s, on_first_batch=on_first_batch
        )
    finally:
        code = stop(plat, job)
        save_log(job, label)
    rate, info = progress.throughput_after_first_batch(total)
    info["exit_code"] = code
    info["pipeline"] = name
    info["settings"] = settings_of(config)
    t0 = progress.samples[0][0] if progress.samples else 0.0
    info["series"] = [(round(t - t0, 2), n) for t, n in progress.samples]
    info["series_t0"] = t0  # time.monotonic() of the series' 0 (for events timed by a caller)
    return (None if rate is None else round(rate)), info
