"""A stream task whose task runner is SIGKILLed: its retry reattaches to the running topology.

The embedded platform as ``flowctl demo up`` runs it (``airflow standalone``: scheduler,
LocalExecutor, api-server; Spark local; Apache Kafka and memcached of the session), in a home of
its own. A stream run counts text while a feeder keeps producing; the test SIGKILLs the
task's runner process (the process executing the operator, not the driver). The topology
keeps counting while no task follows it; Airflow retries the task, and the retry
reattaches: one topology id the whole time, no second submission, the same driver
process. At the end the counts equal a plain count of everything produced (nothing
lost, nothing counted twice) and a ``stop`` ends the retry successfully.

Marked ``deep``: the default run proves the same reattach end to end under Celery
(``tests/cluster/test_cluster_e2e.py``, a Celery worker and its task processes SIGKILLed
under the stream task: the retry reattaches to the same detached driver, counts exact);
this is its variant on the embedded LocalExecutor (80 s of the run).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bench.lib.airflow_api import AirflowApi
from flowctl.adapters import kafka_log, results
from flowctl.adapters.control_plane import ControlPlane, UnknownTopology
from flowctl.adapters.detached_driver import DetachedDriver, drivers_dir
from flowctl.adapters.procfs import proc_cmdline
from flowctl.config import Settings
from flowctl.pipelines.wordcount import count_words
from flowctl.services.airflow import AirflowService, admin_password, airflow_home
from flowctl.services.ports import free_port
from flowctl.services.stopping import end_detached_drivers
from flowctl.textgen import zipf_lines

pytestmark = [
    pytest.mark.deep,
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.airflow,
    pytest.mark.integration,
]

PIPELINE = "wcresume"
EDEN = f"{PIPELINE}.eden"
STREAM = f"stream_{PIPELINE}"
TOPOLOGY = "wcresume-blue"
RUN = "resume-1"
WAIT_S = 240.0


def _wait(what: str, check: Callable[[], object], timeout: float = WAIT_S) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


@pytest.fixture
def platform(
    flowctl_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[Settings, AirflowApi]]:
    """``airflow standalone`` in a home of its own, with one pipeline: :data:`PIPELINE`
    (the shipped word count renamed, so its topics are its own)."""
    from flowctl.pipelines.config import PIPELINES_DIR
    from flowctl_airflow.dag_factory import PIPELINES_DIR_ENV

    pipelines = tmp_path / "pipelines"
    pipelines.mkdir()
    text = (PIPELINES_DIR / "wordcount.toml").read_text()
    (pipelines / f"{PIPELINE}.toml").write_text(
        text.replace('name = "wordcount"', f'name = "{PIPELINE}"').replace("wordcount.eden", EDEN)
    )
    monkeypatch.setenv(PIPELINES_DIR_ENV, str(pipelines))  # Airflow's processes inherit it
    settings = dataclasses.replace(
        flowctl_settings, home=tmp_path / "home", airflow_port=free_port()
    )
    kafka_log.ensure_topics(settings.kafka_bootstrap, {EDEN: 2})
    airflow = AirflowService()
    try:
        airflow.up(settings)
        password = admin_password(settings)
        assert password, "Airflow wrote no admin password"
        api = AirflowApi(f"http://{settings.host}:{settings.airflow_port}", "admin", password)
        api.wait_for_dag(STREAM, timeout=120)
        yield settings, api
    finally:
        plane = ControlPlane(settings.resolved_database_url)
        plane.ensure_schema()
        for topo in plane.live_topologies():
            plane.send_signal(topo.topology_id, "stop")
        end_detached_drivers(settings, print, grace_s=60.0)
        print(airflow.down(settings))


def _state(plane: ControlPlane, topology_id: str) -> str | None:
    try:
        return plane.get_topology(topology_id).state
    except UnknownTopology:
        return None


def _task_log(settings: Settings, attempt: int) -> str:
    path = (
        airflow_home(settings)
        / "logs"
        / f"dag_id={STREAM}"
        / f"run_id={RUN}"
        / "task_id=topology"
        / f"attempt={attempt}.log"
    )
    return path.read_text(errors="replace") if path.exists() else ""


def _spark_submit_pid(driver: DetachedDriver) -> int:
    """The keeper's child: the driver's ``spark-submit`` JVM."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == driver.keeper_pid:
                return int(entry.name)
    pytest.fail(f"the keeper {driver.keeper_pid} has no child")


def test_a_killed_task_runner_is_retried_and_reattaches(
    platform: tuple[Settings, AirflowApi],
) -> None:
    settings, api = platform
    url = settings.resolved_database_url
    plane = ControlPlane(url)
    plane.ensure_schema()
    lines: list[str] = []
    lock = threading.Lock()

    def produce(n: int, seed: int) -> None:
        batch = list(zipf_lines(n, seed=seed))
        with lock:
            kafka_log.produce(settings.kafka_bootstrap, EDEN, batch)
            lines.extend(batch)

    def counted() -> int:
        return sum(results.word_counts(url, PIPELINE).values())

    def exact() -> bool:
        with lock:
            expected = dict(count_words(lines))
        return results.word_counts(url, PIPELINE) == expected

    produce(2000, seed=31)
    api.unpause(STREAM)
    api.trigger(STREAM, RUN, {"parallelism": 2, "colour": "blue", "topology_id": TOPOLOGY})
    _wait("the topology ACTIVE", lambda: _state(plane, TOPOLOGY) == "ACTIVE")
    _wait("the first counts", exact)
    first = api.task_instance(STREAM, RUN, "topology")
    assert (first["state"], first["try_number"]) == ("running", 1), first
    runner = int(first["pid"])
    driver = DetachedDriver.load(drivers_dir(settings.home) / TOPOLOGY)
    assert driver is not None and driver.keeper_alive()
    submit = _spark_submit_pid(driver)

    stop = threading.Event()
    errors: list[BaseException] = []

    def feed() -> None:
        seed = 100
        try:
            while not stop.wait(0.5):
                produce(100, seed)
                seed += 1
        except Exception as exc:  # reported below
            errors.append(exc)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        time.sleep(2)
        os.kill(runner, signal.SIGKILL)  # the task runner, not the driver
        _wait("the task runner gone", lambda: proc_cmdline(runner) is None, timeout=30)
        at_kill = counted()

        def retry_running() -> bool:
            ti = api.task_instance(STREAM, RUN, "topology")
            return ti["try_number"] == 2 and ti["state"] == "running"

        _wait("the retry running", retry_running)
        # No restart gap: the topology counted on while no task followed it.
        assert counted() > at_kill, "the output stopped while the task was away"
        _wait(
            "the retry reattached",
            lambda: "Reconnecting to existing job" in _task_log(settings, 2),
        )
        time.sleep(3)
    finally:
        stop.set()
        feeder.join(timeout=60)
    assert not errors, f"producing failed: {errors[0]!r}"

    _wait("exact counts after the reattach", exact)
    assert [t.topology_id for t in plane.topologies(PIPELINE)] == [TOPOLOGY]
    assert plane.get_topology(TOPOLOGY).state == "ACTIVE"
    assert driver.keeper_alive() and proc_cmdline(submit) is not None, "the driver was replaced"
    retry_log = _task_log(settings, 2)
    assert "submitting topology" not in retry_log, retry_log[-3000:]

    plane.send_signal(TOPOLOGY, "stop")
    assert api.wait_run(STREAM, RUN, timeout=WAIT_S) == "success", _task_log(settings, 2)[-3000:]
    assert plane.get_topology(TOPOLOGY).state == "STOPPED"
    assert driver.exit_code() == 0
    assert "ended cleanly" in _task_log(settings, 2)
    print(f"reattach: {len(lines)} lines in, all counted exactly once; one topology, one driver")
