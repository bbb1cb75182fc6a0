"""The flow-controlled topology end to end: spark-submit, Tansu, memcached, SQLite/PostgreSQL.

Every test runs one topology at a time (two cores for the whole machine) on a pipeline
of its own (a renamed copy of a shipped config), so its topics never meet another
test's on the session's broker, and checks exact results against the plain-Python
reference: nothing lost, nothing counted twice. The driver SIGKILL and memcached
restart faults live in tests/faults/ (with the reconcile check); this file keeps the
database outage for what it shows inside the topology (MRWQ growth, backpressure).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa

from flowctl.adapters import kafka_log, results
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.db import DatabaseUnavailable
from flowctl.config import PROJECT_ROOT, Settings
from flowctl.core.replay import decode_envelope
from flowctl.pipelines.config import resolve_path
from flowctl.pipelines.wordcount import count_words

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]

VENV_BIN = Path(sys.executable).parent
WORDS = ["alpha", "Beta", "gamma", "DELTA", "épée", "zeta", "eta", "theta", "iota", "kappa"]

#: [flow] values every test config starts from: small tuples and windows, quick windows.
FLOW_DEFAULTS = {
    "w_init": 4,
    "w_max": 24,
    "latency_target_s": 2.0,
    "linger_s": 0.5,
    "flush_update_time_s": 0.5,
    "metrics_window_s": 2.0,
    "tuple_timeout_s": 10.0,
    "gap_grace_s": 2.0,
    "replay_backoff_initial_s": 0.2,
    "replay_backoff_max_s": 0.5,
}


def lines(n: int, seed: int, prefix: str = "") -> list[str]:
    rng = random.Random(seed)
    return [
        f"{prefix}" + " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + f", {i}!"
        for i in range(n)
    ]


def flow_config(
    tmp_path: Path,
    name: str,
    *,
    definition: str = "flowctl.pipelines.wordcount",
    partitions: int = 3,
    tuple_size: int = 50,
    flow: Mapping[str, object] | None = None,
    shipped: str = "wordcount",
) -> Path:
    """The shipped ``shipped`` config renamed ``name``, with test-sized settings."""
    text = resolve_path(shipped).read_text()
    text = text.replace(f'name = "{shipped}"', f'name = "{name}"')
    text = text.replace(f'eden = "{shipped}.eden"', f'eden = "{name}.eden"')
    if shipped == "wordcount":
        text = text.replace('"flowctl.pipelines.wordcount"', f'"{definition}"')
    text = text.replace("partitions = 4", f"partitions = {partitions}")
    text = text.replace("trigger_interval_s = 1.0", "trigger_interval_s = 0.5")
    text = re.sub(r"(?m)^tuple_size = \d+$", f"tuple_size = {tuple_size}", text)
    head, _, section = text.partition("[flow]")
    for key, value in {**FLOW_DEFAULTS, **(flow or {})}.items():
        shown = f'"{value}"' if isinstance(value, str) else str(value)
        section, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {shown}", section)
        assert n == 1, key
    path = tmp_path / f"{name}.toml"
    path.write_text(head + "[flow]" + section)
    return path


@dataclass
class Job:
    """A running spark-submit of a stream job in its own process group."""

    process: subprocess.Popen
    log_path: Path

    def log_tail(self, lines: int = 80) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill_hard()
            pytest.fail(f"job did not exit within {timeout_s} s; log:\n{self.log_tail()}")

    def kill_hard(self) -> None:
        """SIGKILL the whole job (driver, JVM, Python workers): a crash, no cleanup."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.kill_hard()


@dataclass
class Flow:
    """Starts flow-controlled jobs against the session's broker and memcached."""

    settings: Settings
    database_url: str
    work_dir: Path

    def submit(self, config: Path, topology_id: str, lanes: int, *extra: str) -> Job:
        self.plane.ensure_schema()  # so the test can read results before the job is up
        env = dict(os.environ)
        env.update(self.settings.to_env())
        env.update(
            FLOWCTL_DATABASE_URL=self.database_url,
            SPARK_LOCAL_IP="127.0.0.1",
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
            PYTHONPATH=str(PROJECT_ROOT),  # the test definitions live in tests/
            PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
        )
        log_path = self.work_dir / f"{topology_id}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [
                    str(VENV_BIN / "spark-submit"),
                    "--master",
                    "local[2]",
                    "--conf",
                    "spark.ui.enabled=false",
                    "--driver-memory",
                    "768m",
                    str(PROJECT_ROOT / "spark_jobs" / "wordcount_stream.py"),
                    "--pipeline-config",
                    str(config),
                    "--topology-id",
                    topology_id,
                    "--parallelism",
                    str(lanes),
                    "--poll-seconds",
                    "0.5",
                    *extra,
                ],
                cwd=PROJECT_ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return Job(process, log_path)

    @property
    def plane(self) -> ControlPlane:
        return ControlPlane(self.database_url)

    def state(self, topology_id: str) -> str | None:
        try:
            return self.plane.get_topology(topology_id).state
        except Exception:  # not registered yet, or the database is away on purpose
            return None

    def stop(self, job: Job, topology_id: str) -> None:
        self.plane.send_signal(topology_id, "stop")
        code = job.wait(timeout_s=120)
        assert code == 0, job.log_tail()
        assert self.state(topology_id) == "STOPPED"


def wait_for(condition: Callable[[], bool], *, timeout_s: float, job: Job, what: str) -> None:
    """Poll ``condition()``; fail with the job's log if it exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (sa.exc.OperationalError, DatabaseUnavailable):
            pass  # the job has not created the schema yet, or the database is away on purpose
        if job.process.poll() is not None:
            pytest.fail(
                f"job exited ({job.process.returncode}) waiting for {what}; log:\n{job.log_tail()}"
            )
        time.sleep(0.5)
    job.kill_hard()
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}; log:\n{job.log_tail()}")


def read_topic(bootstrap: str, topic: str) -> list[bytes]:
    """Every record value of ``topic`` (all partitions)."""
    consumer = kafka_log.new_consumer(bootstrap)
    try:
        latest = kafka_log.latest_offsets(consumer, topic)
        values: list[bytes] = []
        for partition, end in latest.items():
            values.extend(r.value for r in kafka_log.read_range(consumer, topic, partition, 0, end))
        return values
    finally:
        consumer.close()


@pytest.fixture
def flow(flowctl_settings: Settings, sqlite_url: str, tmp_path: Path) -> Flow:
    return Flow(flowctl_settings, sqlite_url, tmp_path)


def counted(flow: Flow, pipeline: str) -> dict[str, int]:
    return results.word_counts(flow.database_url, pipeline)


def test_counts_exactly_writes_metrics_windows_and_checkpoints_behind_the_flush(
    flow: Flow, tmp_path: Path
) -> None:
    config = flow_config(tmp_path, "flowexact")
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowexact.eden": 3})
    data = lines(6_000, seed=11)
    kafka_log.produce(bootstrap, "flowexact.eden", data)
    expected = dict(count_words(data))
    job = flow.submit(config, "flowexact-blue-1", 3)
    wait_for(
        lambda: counted(flow, "flowexact") == expected,
        timeout_s=180,
        job=job,
        what="exact word counts",
    )
    more = lines(1_500, seed=12)
    kafka_log.produce(bootstrap, "flowexact.eden", more)
    expected = dict(count_words(data + more))
    wait_for(
        lambda: counted(flow, "flowexact") == expected,
        timeout_s=120,
        job=job,
        what="exact word counts after more data",
    )
    total = len(data) + len(more)
    wait_for(
        lambda: sum(w.records for w in flow.plane.metrics_windows("flowexact-blue-1")) >= total,
        timeout_s=30,
        job=job,
        what="metrics windows counting every record",
    )
    flow.stop(job, "flowexact-blue-1")
    assert counted(flow, "flowexact") == expected
    latest = kafka_log.latest_offsets(bootstrap, "flowexact.eden")
    assert flow.plane.committed_offsets("flowexact", "flowexact.eden") == latest
    windows = flow.plane.metrics_windows("flowexact-blue-1")
    assert sum(w.records for w in windows) >= total
    assert sum(w.failed + w.timed_out + w.dlq for w in windows) == 0
    lanes = [w.lanes for w in windows if w.acked][-1]
    assert [lane["lane"] for lane in lanes["lanes"]] == [0, 1, 2]
    assert all(lane["window"] >= 1 for lane in lanes["lanes"])
    assert any(w.latency_p50_ms is not None for w in windows)
    log = job.log()
    assert "flow control: round_robin dispatch" in log
    assert "MRWQ mrwq.flowexact: flushed" in log


def test_poison_records_go_to_the_dlq_with_their_error_and_the_stream_goes_on(
    flow: Flow, tmp_path: Path
) -> None:
    config = flow_config(
        tmp_path,
        "flowpoison",
        definition="tests.spark.flow_def_poison",
        tuple_size=20,
        flow={"tuple_timeout_s": 1.0},
    )
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowpoison.eden": 2})
    data = lines(2_000, seed=21)
    poisoned = {137, 1000, 1555}
    broken = {420, 1777}
    sleepy = {888}
    for i in poisoned:
        data[i] = f"POISON pill number {i}"
    for i in broken:
        data[i] = f"BROKEN record number {i}"
    for i in sleepy:
        data[i] = f"SLEEPY record number {i}"
    kafka_log.produce(bootstrap, "flowpoison.eden", data)
    failing = poisoned | broken | sleepy
    good = [line for i, line in enumerate(data) if i not in failing]
    expected = dict(count_words(good))
    job = flow.submit(config, "flowpoison-blue-1", 2)
    wait_for(
        lambda: counted(flow, "flowpoison") == expected,
        timeout_s=180,
        job=job,
        what="every good record counted",
    )
    more = lines(500, seed=22)
    kafka_log.produce(bootstrap, "flowpoison.eden", more)
    expected = dict(count_words(good + more))
    wait_for(
        lambda: counted(flow, "flowpoison") == expected,
        timeout_s=120,
        job=job,
        what="the stream going on after the poison",
    )
    wait_for(
        lambda: len(read_topic(bootstrap, "flowpoison.dlq")) >= len(failing),
        timeout_s=60,
        job=job,
        what="the poison records in the DLQ",
    )
    latest = kafka_log.latest_offsets(bootstrap, "flowpoison.eden")
    wait_for(
        lambda: flow.plane.committed_offsets("flowpoison", "flowpoison.eden") == latest,
        timeout_s=60,
        job=job,
        what="the durable checkpoint at the log's end",
    )
    wait_for(  # the window of the last dead letter must be closed and written too
        lambda: sum(w.dlq for w in flow.plane.metrics_windows("flowpoison-blue-1")) >= len(failing),
        timeout_s=30,
        job=job,
        what="metrics windows counting every dead letter",
    )
    flow.stop(job, "flowpoison-blue-1")
    dead = {
        e.payload.decode(): e for e in map(decode_envelope, read_topic(bootstrap, "flowpoison.dlq"))
    }
    assert sorted(dead) == sorted(data[i] for i in failing)
    for i in poisoned:  # straight to the DLQ: at most the one attempt of its own replay
        e = dead[data[i]]
        assert (
            e.error.startswith("poison: PoisonRecord") and f"offset {e.offset} is poison" in e.error
        )
        assert e.attempt <= 2
    for i in broken:  # replayed until max_attempts (3), then given up with the error
        e = dead[data[i]]
        assert e.attempt == 3, e
        assert e.error.startswith("gave up after 3 attempt(s): RuntimeError: cannot count"), e.error
    for i in sleepy:  # past its deadline every time: timed out, replayed, given up
        e = dead[data[i]]
        assert e.attempt == 3, e
        assert "TupleTimeout: process exceeded its deadline of 1 s" in e.error, e.error
    assert all(e.topic == "flowpoison.eden" for e in dead.values())

    assert counted(flow, "flowpoison") == expected
    windows = flow.plane.metrics_windows("flowpoison-blue-1")
    assert sum(w.dlq for w in windows) >= len(failing)
    assert sum(w.replayed for w in windows) > 0
    assert sum(w.failed for w in windows) >= len(poisoned | broken)
    assert sum(w.timed_out for w in windows) >= 3  # the sleepy record's three attempts
    assert "PoisonRecord" in job.log()


def test_a_slow_lane_ends_with_a_smaller_window_than_the_others(flow: Flow, tmp_path: Path) -> None:
    config = flow_config(
        tmp_path,
        "flowslow",
        definition="tests.spark.flow_def_slow",
        tuple_size=10,
        flow={"latency_target_s": 0.6, "w_init": 2, "w_max": 16, "metrics_window_s": 1.0},
    )
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowslow.eden": 3})
    data = lines(6_000, seed=31)
    kafka_log.produce(bootstrap, "flowslow.eden", data)
    expected = dict(count_words(data))
    job = flow.submit(config, "flowslow-blue-1", 3)
    wait_for(
        lambda: counted(flow, "flowslow") == expected,
        timeout_s=240,
        job=job,
        what="exact word counts",
    )
    wait_for(
        lambda: sum(w.records for w in flow.plane.metrics_windows("flowslow-blue-1")) >= 6_000,
        timeout_s=30,
        job=job,
        what="metrics windows counting every record",
    )
    flow.stop(job, "flowslow-blue-1")
    rows = [w for w in flow.plane.metrics_windows("flowslow-blue-1") if w.acked]
    windows = {lane["lane"]: lane["window"] for lane in rows[-1].lanes["lanes"]}
    assert windows[0] < min(windows[1], windows[2]), windows
    assert windows[0] <= 3 and min(windows[1], windows[2]) >= 6, windows
    assert any(
        lane["state"] == "SLOW" for w in rows for lane in w.lanes["lanes"] if lane["lane"] == 0
    )
    assert "SLOW" in job.log()


def mrwq_length(settings: Settings, pipeline: str) -> int:
    """Items waiting in the pipeline's MRWQ, read from memcached like the planner does."""
    from flowctl.adapters.memcached_store import MemcachedStore

    store = MemcachedStore(settings.memcached_address)
    ns = f"mrwq.{pipeline}"
    tail = store.incr(f"{ns}:tail", 0)
    head = store.get_many([f"{ns}:head"]).get(f"{ns}:head")
    return 0 if tail is None or head is None else max(0, tail - int(head) + 1)


def _rename_database(admin: sa.Engine, old: str, new: str) -> None:
    """Rename a PostgreSQL database, terminating the sessions that keep it busy."""
    deadline = time.monotonic() + 30
    while True:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :name AND pid <> pg_backend_pid()"
                ),
                {"name": old},
            )
            try:
                conn.execute(sa.text(f'ALTER DATABASE "{old}" RENAME TO "{new}"'))
                return
            except sa.exc.OperationalError:
                if time.monotonic() > deadline:
                    raise
        time.sleep(0.05)


def test_a_database_away_for_20_s_backs_off_keeps_processing_into_the_mrwq(
    flowctl_settings: Settings, postgres_url: str, tmp_path: Path
) -> None:
    flow = Flow(flowctl_settings, postgres_url, tmp_path)
    config = flow_config(
        tmp_path, "flowdb", tuple_size=20, flow={"w_max": 6, "persist_queue_capacity": 40}
    )
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowdb.eden": 2})
    data = lines(2_000, seed=61)
    kafka_log.produce(bootstrap, "flowdb.eden", data)
    job = flow.submit(config, "flowdb-blue-1", 2)
    wait_for(
        lambda: counted(flow, "flowdb") == dict(count_words(data)),
        timeout_s=180,
        job=job,
        what="the first data counted",
    )
    url = sa.make_url(postgres_url)
    name = url.database
    assert name
    admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    away = f"{name}_away"
    more = lines(5_000, seed=62)
    try:
        _rename_database(admin, name, away)
        kafka_log.produce(bootstrap, "flowdb.eden", more)
        peak = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            peak = max(peak, mrwq_length(flow.settings, "flowdb"))
            assert job.process.poll() is None, job.log_tail()
            time.sleep(0.5)
    finally:
        _rename_database(admin, away, name)
        admin.dispose()
    assert peak > 0, "nothing was processed into the MRWQ while the database was away"
    expected = dict(count_words(data + more))
    wait_for(
        lambda: counted(flow, "flowdb") == expected,
        timeout_s=180,
        job=job,
        what="exact counts after the database came back",
    )
    latest = kafka_log.latest_offsets(bootstrap, "flowdb.eden")
    wait_for(
        lambda: flow.plane.committed_offsets("flowdb", "flowdb.eden") == latest,
        timeout_s=60,
        job=job,
        what="the durable checkpoint at the log's end",
    )
    flow.stop(job, "flowdb-blue-1")
    assert counted(flow, "flowdb") == expected
    log = job.log()
    assert re.search(r"MRWQ mrwq\.flowdb: flush \(poll\): attempt \d+ failed", log), job.log_tail()
    # the growing MRWQ (persist stage) pressed the process stage, and the release began
    process = [
        int(n) for n in re.findall(r"backpressure levels \{'source': \d+, 'process': (\d+)", log)
    ]
    assert process and max(process) > 0, process
    levels = [w.backpressure_level for w in flow.plane.metrics_windows("flowdb-blue-1")]
    peak = levels.index(max(levels))
    assert levels[peak] > 0 and min(levels[peak:]) < levels[peak], levels


def test_standby_activate_deactivate_drained_and_reactivate(flow: Flow, tmp_path: Path) -> None:
    """The states of docs/flow-control.md on one topology: a standby topology warms up
    (a batch that processes real records and stores nothing) before READY; READY admits
    nothing; activate processes; deactivate drains (nothing in flight, MRWQ flushed) to
    DRAINED and admits nothing; a second activate (a rollback) resumes exactly where the
    checkpoint is."""
    config = flow_config(tmp_path, "flowsig")
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowsig.eden": 2})
    data = lines(1_500, seed=71)
    kafka_log.produce(bootstrap, "flowsig.eden", data)
    tid = "flowsig-green-1"
    job = flow.submit(config, tid, 2, "--standby", "--colour", "green")
    wait_for(lambda: flow.state(tid) == "READY", timeout_s=120, job=job, what="READY")
    assert "warm-up, 100 record(s) read and processed on 2 lane(s)" in job.log()
    time.sleep(3.0)  # several triggers: a READY topology must admit nothing
    assert counted(flow, "flowsig") == {}
    assert flow.plane.committed_offsets("flowsig", "flowsig.eden") == {}
    flow.plane.send_signal(tid, "activate")
    expected = dict(count_words(data))
    wait_for(lambda: counted(flow, "flowsig") == expected, timeout_s=120, job=job, what="counts")
    assert flow.state(tid) == "ACTIVE"
    flow.plane.send_signal(tid, "deactivate")
    wait_for(lambda: flow.state(tid) == "DRAINED", timeout_s=120, job=job, what="DRAINED")
    drained_at = kafka_log.latest_offsets(bootstrap, "flowsig.eden")
    assert flow.plane.committed_offsets("flowsig", "flowsig.eden") == drained_at
    more = lines(500, seed=72)
    kafka_log.produce(bootstrap, "flowsig.eden", more)
    time.sleep(3.0)  # several triggers: a DRAINED topology must admit nothing
    assert counted(flow, "flowsig") == expected
    flow.plane.send_signal(tid, "activate")
    expected = dict(count_words(data + more))
    wait_for(
        lambda: counted(flow, "flowsig") == expected, timeout_s=120, job=job, what="reactivated"
    )
    flow.stop(job, tid)
    assert flow.plane.pending_signals(tid) == []
    log = job.log()
    for step in (
        "STARTING -> READY",
        "READY -> ACTIVE",
        "ACTIVE -> DRAINING",
        "DRAINING -> DRAINED",
        "DRAINED -> ACTIVE",
    ):
        assert step in log, step


def test_logetl_rows_exact_and_malformed_lines_in_the_dlq(flow: Flow, tmp_path: Path) -> None:
    from flowctl.adapters.db import engine_for
    from flowctl.pipelines.logetl import DEFINITION, parse_line, synthetic_lines

    config = flow_config(tmp_path, "flowlog", shipped="logetl", partitions=2, tuple_size=25)
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowlog.eden": 2})
    data = list(synthetic_lines(2_000, seed=81))
    malformed = []
    for line in data:
        try:
            parse_line(line.encode())
        except Exception:
            malformed.append(line)
    assert malformed, "the generator should mix in malformed lines"
    kafka_log.produce(bootstrap, "flowlog.eden", data)
    expected = DEFINITION.reference(line.encode() for line in data)

    def stored() -> object:
        with engine_for(flow.database_url).connect() as conn:
            return DEFINITION.stored(conn, "flowlog")

    job = flow.submit(config, "flowlog-blue-1", 2)
    wait_for(lambda: stored() == expected, timeout_s=180, job=job, what="exact log_events")
    wait_for(
        lambda: len(read_topic(bootstrap, "flowlog.dlq")) >= len(malformed),
        timeout_s=60,
        job=job,
        what="malformed lines in the DLQ",
    )
    latest = kafka_log.latest_offsets(bootstrap, "flowlog.eden")
    wait_for(
        lambda: flow.plane.committed_offsets("flowlog", "flowlog.eden") == latest,
        timeout_s=60,
        job=job,
        what="the durable checkpoint at the log's end",
    )
    flow.stop(job, "flowlog-blue-1")
    assert stored() == expected
    dead = [decode_envelope(v) for v in read_topic(bootstrap, "flowlog.dlq")]
    assert sorted(e.payload.decode() for e in dead) == sorted(malformed)
    assert all(e.error.startswith("poison: PoisonRecord") for e in dead)
