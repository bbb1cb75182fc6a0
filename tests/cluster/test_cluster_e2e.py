"""The platform on the process cluster, end to end, and a Spark worker, a broker and a
Celery worker lost under load.

Everything goes the way a user's would: runs are triggered through the split
Airflow's REST API and executed by its Celery workers; the topologies' drivers run
detached beside the Celery workers' task processes and their executors on the two Spark workers,
with flowctl shipped to them. The tests share the session's cluster and run in
order: the second starts from the topology the first leaves ACTIVE.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest

from flowctl.adapters import kafka_ends, kafka_log, results
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.detached_driver import DetachedDriver, drivers_dir
from flowctl.adapters.procfs import proc_cmdline
from flowctl.adapters.replacements import ReplacementLog
from flowctl.pipelines.wordcount import count_words
from flowctl.services import cluster
from flowctl.services.airflow import airflow_home
from flowctl.services.process import process_tree
from flowctl.textgen import zipf_lines
from tests.cluster.conftest import EDEN, PIPELINE, Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.integration]

STREAM, RESCALE, RECONCILE = (f"{k}_{PIPELINE}" for k in ("stream", "rescale", "reconcile"))
WAIT_S = 240.0
LINES: list[str] = []  # everything produced to EDEN this session


def _wait(what: str, check, timeout: float = WAIT_S, every: float = 1.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    detail = getattr(check, "explain", lambda: "")()
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}{detail}")


def _ingest(c: Cluster, n: int, seed: int) -> None:
    batch = list(zipf_lines(n, seed=seed))
    kafka_log.produce(c.layout.settings.kafka_bootstrap, EDEN, batch)
    LINES.extend(batch)


def _log_lines(c: Cluster) -> list[str]:
    """Every record of EDEN, read back from the broker."""
    bootstrap = c.layout.settings.kafka_bootstrap
    consumer = kafka_log.new_consumer(bootstrap)
    try:
        ends = kafka_ends.latest_offsets(consumer, EDEN, timeout_s=60.0)
        return [
            r.value.decode()
            for partition, end in ends.items()
            for r in kafka_log.read_range(consumer, EDEN, partition, 0, end)
        ]
    finally:
        kafka_log.close_quietly(consumer)


def _exact(c: Cluster):  # type: ignore[no-untyped-def]
    """A check that the stored counts equal the words of every record in EDEN.

    The expectation is read from the log, once, when the feeding is over: the stream owes
    exactly-once over what the log holds. The log must hold every line the test produced
    (LINES); a producer's retry may have written one twice, which the stream then rightly
    counts twice. On a timeout the check says how far off the counts were (still short, or
    in excess), which tells a slow run from a wrong one.
    """
    in_log = _log_lines(c)
    produced, logged = Counter(LINES), Counter(in_log)
    missing = produced - logged
    assert not missing, f"{sum(missing.values())} produced lines are not in {EDEN}"
    doubled = sum((logged - produced).values())
    if doubled:
        print(f"{doubled} line(s) written twice to {EDEN} by a producer retry")
    expected = dict(count_words(in_log))

    def check() -> bool:
        return results.word_counts(c.url, PIPELINE) == expected

    def explain() -> str:
        stored = results.word_counts(c.url, PIPELINE)
        short = sum(max(0, n - stored.get(w, 0)) for w, n in expected.items())
        extra = sum(max(0, n - expected.get(w, 0)) for w, n in stored.items())
        return (
            f": {sum(expected.values())} words in {len(in_log)} logged lines"
            f" ({doubled} written twice by the producer), {sum(stored.values())} stored,"
            f" {short} short, {extra} in excess"
        )

    check.explain = explain  # type: ignore[attr-defined]
    return check


class _Feeder:
    """Text poured into EDEN on a thread (400 lines every half second) until :meth:`stop`."""

    def __init__(self, c: Cluster, seed: int) -> None:
        self.c, self.seed = c, seed
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, daemon=True)
        self._thread.start()

    def _feed(self) -> None:
        try:
            while not self._stop.is_set():
                _ingest(self.c, 400, seed=self.seed)
                self.seed += 1
                self._stop.wait(0.5)
        except Exception as exc:  # part of a failed batch may be in the log: _exact reads it
            self.errors.append(exc)

    def stop(self) -> list[BaseException]:
        """Stop feeding; the errors that stopped the feed early, if any."""
        self._stop.set()
        self._thread.join(timeout=120)
        assert not self._thread.is_alive(), "a produce to EDEN hung for 120 s"
        return self.errors


def _active(plane: ControlPlane) -> list[str]:
    return [t.topology_id for t in plane.topologies(PIPELINE, states=["ACTIVE"])]


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def _executors_by_worker(c: Cluster) -> dict[int, set[str]]:
    """Worker index -> the application ids with an executor on it (the workers' /json/)."""
    layout = c.layout
    return {
        i: {e["appid"] for e in _json(f"http://127.0.0.1:{port}/json/")["executors"]}
        for i, port in enumerate(layout.spark_worker_ui_ports, start=1)
    }


def _task_log(c: Cluster, run_id: str) -> str:
    logs = airflow_home(c.layout.settings) / "logs"
    found = sorted(logs.glob(f"dag_id={STREAM}/run_id={run_id}/task_id=topology/attempt=*.log"))
    return "\n".join(p.read_text(errors="replace") for p in found)


def test_ingest_stream_rescale_reconcile_through_the_rest_api(process_cluster: Cluster) -> None:
    c, api = process_cluster, process_cluster.api
    for dag_id in (STREAM, RESCALE, RECONCILE):
        api.wait_for_dag(dag_id, timeout=120)
        api.unpause(dag_id)
    plane = ControlPlane(c.url)
    plane.ensure_schema()
    kafka_log.ensure_topics(c.layout.settings.kafka_bootstrap, {EDEN: 4})
    _ingest(c, 3000, seed=1)

    api.trigger(STREAM, "blue-1", {"parallelism": 2, "colour": "blue", "topology_id": "wc-blue"})
    _wait("blue ACTIVE", lambda: _active(plane) == ["wc-blue"])
    _wait("blue's exact counts", _exact(c))

    # The master runs the topology as one application with an executor on each worker.
    master = _json(f"http://127.0.0.1:{c.layout.spark_master_ui_port}/json/")
    (app,) = [a for a in master["activeapps"] if a["state"] == "RUNNING"]
    placed = _executors_by_worker(c)
    assert all(app["id"] in apps for apps in placed.values()), (app, placed)

    api.trigger(RESCALE, "up-1", {"change": "up", "reason": "cluster e2e"})
    assert api.wait_run(RESCALE, "up-1", timeout=WAIT_S) == "success"
    (event,) = ReplacementLog(c.url).replacements(PIPELINE)
    assert (event.outcome, event.old_parallelism, event.new_parallelism) == ("ok", 2, 4)
    assert event.duplicates == 0
    assert _active(plane) == [event.new_topology_id]
    assert plane.get_topology("wc-blue").state == "STOPPED"
    _ingest(c, 1500, seed=2)
    _wait("exact counts after the hand-over", _exact(c))

    api.trigger(RECONCILE, "reconcile-1", {})
    assert api.wait_run(RECONCILE, "reconcile-1", timeout=WAIT_S) == "success"


def test_a_spark_worker_killed_under_load_loses_nothing(process_cluster: Cluster) -> None:
    """SIGKILL worker 1's JVM and its executor while text pours in: Spark re-runs the lost
    tasks on worker 2, the counts end exact, the task log names the lost executor."""
    c = process_cluster
    plane = ControlPlane(c.url)
    (topology_id,) = _active(plane)
    run_id = plane.get_topology(topology_id).airflow_run_id
    feeder = _Feeder(c, seed=100)
    try:
        time.sleep(5)  # the stream is busy
        worker = next(d for d in cluster.spark_daemons(c.layout) if d.name == "spark-worker-1")
        record = worker.running()
        assert record is not None
        tree = process_tree(record.pid)  # the worker JVM and its executor JVMs
        assert len(tree) >= 2, "worker 1 runs no executor"
        for pid in tree:
            os.kill(pid, signal.SIGKILL)
        _wait("worker 1 gone", lambda: all(proc_cmdline(p) is None for p in tree))
        time.sleep(10)  # load on the surviving worker
    finally:
        errors = feeder.stop()
    if errors:
        print(f"the feeder stopped on {errors[0]!r}; the log decides what was fed")
    try:
        _wait("exact counts after losing a worker", _exact(c))
    except pytest.fail.Exception as failed:
        states = {t.topology_id: t.state for t in plane.topologies(PIPELINE)}
        tail = _task_log(c, run_id)[-8000:]
        pytest.fail(f"{failed}\ntopologies: {states}\n--- the task log's tail ---\n{tail}")
    print(f"worker loss: {len(LINES)} lines in, all counted exactly once")
    assert _active(plane) == [topology_id], "the topology survived the lost worker"
    log = _task_log(c, run_id)
    assert "Lost executor" in log, log[-3000:]
    # `cluster up` brings the dead worker back; the cluster is whole again.
    cluster.up(c.layout)
    assert all(r.ok for r in cluster.status(c.layout))


def _ppid(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _celery_worker_of(c: Cluster, task_pid: int):  # type: ignore[no-untyped-def]
    """The airflow-worker-N daemon whose process tree holds ``task_pid``."""
    workers = {
        d.running().pid: d
        for d in cluster.airflow_daemons(c.layout)
        if d.name.startswith("airflow-worker-") and d.running() is not None
    }
    pid: int | None = task_pid
    while pid and pid not in workers:
        pid = _ppid(pid)
    assert pid, f"task pid {task_pid} is not under a Celery worker {sorted(workers)}"
    return workers[pid]


def _attempt_log(c: Cluster, run_id: str, attempt: int) -> str:
    logs = airflow_home(c.layout.settings) / "logs"
    path = logs / f"dag_id={STREAM}/run_id={run_id}/task_id=topology/attempt={attempt}.log"
    return path.read_text(errors="replace") if path.exists() else ""


def test_a_celery_worker_killed_under_the_stream_task(process_cluster: Cluster) -> None:
    """SIGKILL the Celery worker running the topology's task and its task processes, not
    the detached driver: the topology keeps counting; once the scheduler finds the task's
    heartbeat gone, Airflow retries the task (on the other worker, or the one `cluster up`
    restarts) and the retry reattaches: the same topology and driver, counts exact."""
    c, api = process_cluster, process_cluster.api
    plane = ControlPlane(c.url)
    plane.ensure_schema()
    if not _active(plane):  # run alone: start the topology the earlier tests leave ACTIVE
        api.wait_for_dag(STREAM, timeout=120)
        api.unpause(STREAM)
        kafka_log.ensure_topics(c.layout.settings.kafka_bootstrap, {EDEN: 4})
        _ingest(c, 1000, seed=299)
        api.trigger(STREAM, "celery-1", {"parallelism": 2, "colour": "blue"})
        _wait("a topology ACTIVE", lambda: _active(plane))
    (topology_id,) = _active(plane)
    registered = [t.topology_id for t in plane.topologies(PIPELINE)]
    run_id = plane.get_topology(topology_id).airflow_run_id
    ti = api.task_instance(STREAM, run_id, "topology")
    tries = int(ti["try_number"])
    worker = _celery_worker_of(c, int(ti["pid"]))
    record = worker.running()
    driver = DetachedDriver.load(drivers_dir(c.layout.settings.home) / topology_id)
    assert driver is not None and driver.keeper_alive(), topology_id
    _ingest(c, 1000, seed=300)
    tree = process_tree(record.pid)  # the Celery worker, its task processes
    assert driver.keeper_pid not in tree, "the driver is not detached from its task"
    for pid in tree:
        os.kill(pid, signal.SIGKILL)
    _wait("the Celery worker gone", lambda: all(proc_cmdline(p) is None for p in tree))
    _ingest(c, 1000, seed=301)  # arrives while no task follows the topology
    _wait("the topology counting on without its task", _exact(c))

    cluster.up(c.layout)  # restarts the dead Celery worker

    def retried() -> bool:
        now = api.task_instance(STREAM, run_id, "topology")
        return int(now["try_number"]) == tries + 1 and now["state"] == "running"

    _wait("the task retried", retried, timeout=WAIT_S + 120)
    _wait(
        "the retry reattached",
        lambda: "Reconnecting to existing job" in _attempt_log(c, run_id, tries + 1),
    )
    _ingest(c, 500, seed=302)
    _wait("exact counts after the lost Celery worker", _exact(c))
    assert [t.topology_id for t in plane.topologies(PIPELINE)] == registered, "submitted again"
    assert _active(plane) == [topology_id]
    assert driver.keeper_alive(), "the driver was replaced"
    assert "submitting topology" not in _attempt_log(c, run_id, tries + 1)
    print(f"celery worker loss: {len(LINES)} lines in, all counted exactly once, one topology")
    api.trigger(RECONCILE, "reconcile-2", {})
    assert api.wait_run(RECONCILE, "reconcile-2", timeout=WAIT_S) == "success"


def _in_sync(c: Cluster) -> dict[int, int]:
    """``{partition: in-sync replicas}`` of EDEN, as the brokers' metadata says."""
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=c.layout.settings.kafka_bootstrap)
    try:
        (topic,) = admin.describe_topics([EDEN])
    finally:
        admin.close()
    return {p["partition_index"]: len(p["isr_nodes"]) for p in topic["partitions"]}


def test_a_broker_killed_under_load_loses_nothing(process_cluster: Cluster) -> None:
    """SIGKILL one of the three brokers while text pours in: every topic has three replicas
    and acks=all needs two, so the producers and the stream go on; the counts end exact, and
    the broker, started again, catches up until every partition has three in-sync replicas.
    Then leadership moves back to it, and the stream reads on."""
    c = process_cluster
    if c.layout.broker != "kafka":
        pytest.skip("the cluster's broker is Tansu (FLOWCTL_BROKER=tansu): one broker")
    plane = ControlPlane(c.url)
    (topology_id,) = _active(plane)
    assert set(_in_sync(c).values()) == {3}, "EDEN is not replicated three ways"
    feeder = _Feeder(c, seed=500)
    try:
        time.sleep(5)  # the stream is busy
        broker = next(d for d in cluster.kafka_daemons(c.layout) if d.name == "kafka-2")
        record = broker.running()
        assert record is not None
        os.kill(record.pid, signal.SIGKILL)
        _wait("broker 2 gone", lambda: proc_cmdline(record.pid) is None)
        before = len(LINES)
        time.sleep(15)  # load on the two surviving brokers
        assert len(LINES) > before, "no line was produced with broker 2 down"
    finally:
        errors = feeder.stop()
    assert not errors, f"a produce failed with one broker of three down: {errors[0]!r}"
    _wait("exact counts with a broker down", _exact(c))
    print(f"broker loss: {len(LINES)} lines in, all counted exactly once")
    assert _active(plane) == [topology_id], "the topology survived the lost broker"
    cluster.up(c.layout)  # broker 2 again, on its log
    _wait("broker 2 in sync again", lambda: set(_in_sync(c).values()) == {3}, timeout=120)
    assert all(r.ok for r in cluster.status(c.layout))
    # Leadership goes back to broker 2 (what the controller's rebalance does within
    # minutes): clients that used the lost connection must read on (a kafka-python consumer
    # kept failing ListOffsets then, until a new one was opened).
    _elect_preferred_leaders(c)
    _ingest(c, 1500, seed=900)
    _wait("exact counts after leadership came back", _exact(c))
    assert _active(plane) == [topology_id], "the topology survived leadership coming back"


def _elect_preferred_leaders(c: Cluster) -> None:
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=c.layout.settings.kafka_bootstrap)
    try:
        admin.elect_leaders(0, None)  # 0: the preferred replicas, every partition
    finally:
        admin.close()
