"""Blue-green replacement end to end: real Airflow, Spark topologies, Apache Kafka and SQLite.

1. blue runs at 2 lanes and is overloaded (every tuple takes ``SLOW_S``, as the paper's
   experiment slowed its bolts, and text arrives faster than two lanes count it);
   ``autoscale_wordcount`` decides ``up`` from its metrics windows (the adaptive policy:
   backlog growing with saturated lanes) and replaces it: green ACTIVE at 4 lanes, blue
   STOPPED, the output pause recorded, the counts exact after the hand-over;
2. ``rescale_wordcount`` brings it back down to 2 by hand;
3. the replace task of a third rescale is killed while blue is deactivated: afterwards
   exactly one topology consumes (blue re-activated and the event ``rolled_back``, or,
   when the kill lands after green is ACTIVE, green and the event ``failed``); then
   ``reconcile_wordcount`` (the reconcile job over the whole log) finds nothing lost and
   nothing counted twice.

Every green is a warm standby (:data:`SPARES`), started beside blue at the beginning
(``stream_wordcount`` runs with Standby on and Replaces empty): their start-ups (a Spark
application each, about 20 s) overlap blue's start and overload instead of following one
another inside the three replacements (the test took 171 s with four cold starts in a
row, about 105 s this way on the 2-core dev machine). Each replacement takes the newest
READY one, so they register in the reverse of the order they are taken, in the colour of
the slot each fills; the first two replacements leave a spare behind and the third is
killed, so none starts a next standby (the four topologies are all there ever are). The
cold start of a green, a new ``stream_wordcount`` run created by the replace task, is
proven elsewhere: ``tests/dags/test_rescale_protocol.py`` (the run and its conf, the
colour of the free slot), ``tests/cluster/test_cluster_e2e.py`` (a cold green under the
real scheduler, to ACTIVE with exact counts and a reconcile) and
``tests/faults/test_handover_faults.py`` (green started ``--standby`` by spark-submit).

The pipeline is the word count with test-sized settings: its config is written to a
temporary directory named by ``FLOWCTL_PIPELINES_DIR`` (the DAG factory, the operators and
the jobs all read it from there) and its definition is :data:`DEFINITION` below (Spark's
workers import this module for it).

``dag.test()`` runs the autoscale and rescale DAGs in this process. Topologies are runs of
``stream_wordcount``; with no scheduler in a test, :class:`StandInScheduler` plays its
part for that one DAG and runs each queued run's task with ``airflow tasks test <dag>
topology <run id>`` (a separate process, since a topology runs until it is stopped).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest

from flowctl.adapters import kafka_log, results
from flowctl.adapters.control_plane import TERMINAL_STATES, ControlPlane, UnknownTopology
from flowctl.adapters.replacements import ReplacementLog
from flowctl.config import Settings
from flowctl.pipelines.wordcount import count_words
from flowctl.services.process import stop_tree
from flowctl.services.stopping import end_detached_drivers
from flowctl.textgen import zipf_lines

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.spark, pytest.mark.integration]

PIPELINE = "wordcount"
#: Its own input topic: no other test of the session reads or writes it.
EDEN = "bgwords.eden"
#: Seconds every tuple takes (the paper's experiment slowed its bolts on purpose).
SLOW_S = 0.05
#: Records per tuple: one lane then counts about TUPLE_SIZE / SLOW_S records per second.
TUPLE_SIZE = 20
STREAM_DAG = f"stream_{PIPELINE}"
AIRFLOW = str(Path(sys.executable).parent / "airflow")
WAIT_S = 240.0  # every wait of this test is bounded by this; the test then fails
#: The greens of the three replacements, warm standbys started beside blue: (topology id,
#: colour), in the order the replacements take them (each the slot its blue leaves free).
SPARES = (("wc-green-up", "green"), ("wc-blue-down", "blue"), ("wc-green-killed", "green"))


class SlowWordCount:
    """The word count, every tuple taking :data:`SLOW_S`: a lane has a fixed capacity (the
    shipped config's ``[sink]``, kept by :func:`_write_config`, stores the counts)."""

    name = "wordcount"

    def process(self, records):  # type: ignore[no-untyped-def]
        from flowctl.pipelines.wordcount import DEFINITION as WORDCOUNT

        time.sleep(SLOW_S)
        return WORDCOUNT.process(records)

    def reference(self, values):  # type: ignore[no-untyped-def]
        from flowctl.pipelines.wordcount import DEFINITION as WORDCOUNT

        return WORDCOUNT.reference(values)


DEFINITION = SlowWordCount()

#: Test-sized settings over the shipped config: (section, key, value).
SETTINGS = [
    ("", "definition", '"tests.e2e.test_rescale_e2e"'),
    ("topics", "eden", f'"{EDEN}"'),
    ("stream", "tuple_size", str(TUPLE_SIZE)),
    ("stream", "trigger_interval_s", "0.5"),
    # The DS2 target may jump past one doubling; 4 is as far as this test's story goes.
    ("stream", "max_parallelism", "4"),
    ("flow", "metrics_window_s", "3.0"),
    ("scaling", "policy", '"adaptive"'),
    ("scaling", "history_windows", "2"),
    ("scaling", "cooldown_s", "0.0"),
    ("scaling", "poke_interval_s", "1.0"),
    ("scaling", "sensor_timeout_s", "150.0"),
    ("scaling", "ready_timeout_s", "150.0"),
    ("scaling", "drain_timeout_s", "60.0"),
    ("scaling", "stop_timeout_s", "60.0"),
    ("scaling", "high_saturation", "0.5"),
    ("scaling", "low_saturation", "0.05"),
]


def _write_config(directory: Path) -> Path:
    """The shipped wordcount config with :data:`SETTINGS` applied, in ``directory``."""
    import re

    from flowctl.pipelines.config import resolve_path

    text = resolve_path(PIPELINE).read_text()
    sections = re.split(r"(?m)^(\[[a-z]+\])$", text)  # [head, "[topics]", body, ...]
    for section, key, value in SETTINGS:
        index = 0 if not section else sections.index(f"[{section}]") + 1
        sections[index], n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", sections[index])
        assert n == 1, (section, key)
    path = directory / f"{PIPELINE}.toml"
    path.write_text("".join(sections))
    return path


def _job_supports_the_protocol() -> str | None:
    """None if the stream job implements standby/activate/deactivate, else what is missing."""
    from flowctl.spark.job import build_parser

    options = {o for action in build_parser()._actions for o in action.option_strings}
    if "--standby" not in options:
        return "the stream job has no --standby option (docs/flow-control.md, Signals and states)"
    return None


def _wait(what: str, check, timeout: float = WAIT_S, every: float = 0.2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


class StandInScheduler:
    """Runs the queued runs of one DAG the way the scheduler would, one process per run."""

    def __init__(self, dag_id: str, log_dir: Path) -> None:
        self.dag_id = dag_id
        self.log_dir = log_dir
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> StandInScheduler:
        # Runs queued before this test (other tests' greens that nothing ran) are not ours.
        self._ignored = set(self._queued())
        self._thread.start()
        return self

    def wait_all(self, timeout: float) -> None:
        """Wait for every run's process to end (a stopped topology ends its task)."""
        deadline = time.monotonic() + timeout
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))

    def tails(self, lines: int = 40) -> str:
        """The end of every run's task log (shown when the test fails)."""
        out = []
        for run_id in self.processes:
            text = (self.log_dir / f"{run_id}.log").read_text(errors="replace")
            out.append(f"--- {run_id}\n" + "\n".join(text.splitlines()[-lines:]))
        return "\n".join(out)

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for process in self.processes.values():
            if process.poll() is None:
                stop_tree(process.pid, timeout=30)

    def _queued(self) -> list[str]:
        import sqlalchemy as sa
        from airflow.models.dagrun import DagRun
        from airflow.utils.session import create_session
        from airflow.utils.state import DagRunState

        with create_session() as session:
            return list(
                session.scalars(
                    sa.select(DagRun.run_id).where(
                        DagRun.dag_id == self.dag_id, DagRun.state == DagRunState.QUEUED
                    )
                )
            )

    def _loop(self) -> None:
        while not self._stop.is_set():
            for run_id in self._queued():
                if run_id not in self.processes and run_id not in self._ignored:
                    with (self.log_dir / f"{run_id}.log").open("wb") as log:
                        self.processes[run_id] = subprocess.Popen(
                            [AIRFLOW, "tasks", "test", self.dag_id, "topology", run_id],
                            env=os.environ.copy(),
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            start_new_session=True,
                        )
            self._stop.wait(0.2)


def _dags() -> dict[str, object]:
    from flowctl_airflow.dag_factory import all_pipeline_dags

    return {dag.dag_id: dag for dag in all_pipeline_dags()}


def _trigger_stream(run_id: str, conf: dict[str, object]) -> None:
    """Queue a run of the stream DAG (as the UI's Trigger button does)."""
    from airflow.api.common.trigger_dag import trigger_dag
    from airflow.utils.types import DagRunTriggeredByType

    trigger_dag(STREAM_DAG, run_id=run_id, conf=conf, triggered_by=DagRunTriggeredByType.TEST)


def _sync_dags_to_the_metadata_db() -> None:
    """What the dag-processor does (and ``dag.test()`` on its way): the folder's DAGs in
    the metadata database, so that runs can be queued for them."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import BundleDagBag, sync_bag_to_db

    manager = DagBundlesManager()
    manager.sync_bundles_to_db()
    for bundle in manager.get_all_dag_bundles():
        if not bundle.is_initialized:
            bundle.initialize()
        bag = BundleDagBag(dag_folder=bundle.path, bundle_path=bundle.path, bundle_name=bundle.name)
        sync_bag_to_db(bag, bundle.name, bundle.version)


@pytest.fixture
def stream_runs(
    platform: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[StandInScheduler, str]]:
    """The stand-in scheduler and this test's own flowctl database URL."""
    missing = _job_supports_the_protocol()
    if missing:
        pytest.skip(f"blue-green needs the job side of the protocol: {missing}")
    _write_config(tmp_path)
    monkeypatch.setenv("FLOWCTL_PIPELINES_DIR", str(tmp_path))
    root = str(Path(__file__).resolve().parents[2])
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    )
    url = f"sqlite:///{tmp_path / 'flowctl.db'}"
    monkeypatch.setenv("FLOWCTL_DATABASE_URL", url)
    monkeypatch.setenv(
        "AIRFLOW_CONN_FLOWCTL_DB",
        json.dumps({"conn_type": "generic", "extra": {"sqlalchemy_url": url}}),
    )
    kafka_log.ensure_topics(platform.kafka_bootstrap, {EDEN: 4})
    _sync_dags_to_the_metadata_db()
    logs = tmp_path / "runs"
    logs.mkdir()
    with StandInScheduler(STREAM_DAG, logs) as scheduler:
        try:
            yield scheduler, url
        finally:
            plane = ControlPlane(url)
            for topo in plane.topologies(PIPELINE):
                if topo.state not in TERMINAL_STATES:
                    plane.send_signal(topo.topology_id, "stop")
            scheduler.wait_all(90)
            print(scheduler.tails())
            # the drivers run detached from their task processes: end any left running
            end_detached_drivers(platform, print)


def _state(plane: ControlPlane, topology_id: str) -> str | None:
    """The topology's state, None while it has not registered."""
    try:
        return plane.get_topology(topology_id).state
    except UnknownTopology:
        return None


def _start_spares(plane: ControlPlane) -> None:
    """Queue the runs of :data:`SPARES`, each once the one before it has registered.

    A replacement takes the pipeline's newest READY standby (the last registered), so the
    spare taken last registers first; they then start up side by side with blue.
    """
    for topology_id, colour in reversed(SPARES):
        conf = {"parallelism": 2, "colour": colour, "standby": True, "topology_id": topology_id}
        _trigger_stream(f"spare-{topology_id}", conf)
        _wait(f"{topology_id} registered", partial(_state, plane, topology_id))


def _ready(plane: ControlPlane, topology_id: str) -> None:
    """Wait for a spare's first warm-up batch (READY): a replacement takes only a READY one."""
    _wait(f"the warm standby {topology_id} READY", lambda: _state(plane, topology_id) == "READY")


def _backlog_growing(plane: ControlPlane, topology_id: str) -> bool:
    """The last three metrics windows have a backlog, growing."""
    backlog = [w.backlog for w in plane.metrics_windows(topology_id, limit=3)]
    return len(backlog) == 3 and 0 < backlog[0] < backlog[1] < backlog[2]


def _active(plane: ControlPlane) -> list[str]:
    return [t.topology_id for t in plane.topologies(PIPELINE, states=["ACTIVE"])]


def _counts_of(url: str, lines: list[str]):  # type: ignore[no-untyped-def]
    """A check for :func:`_wait`: the stored counts equal a plain count of ``lines``."""
    expected = dict(count_words(lines))
    return lambda: results.word_counts(url, PIPELINE) == expected


def test_autoscale_up_rescale_down_and_a_killed_replacement(
    platform: Settings, stream_runs: tuple[StandInScheduler, str]
) -> None:
    _, url = stream_runs
    plane = ControlPlane(url)
    plane.ensure_schema()
    events = ReplacementLog(url)
    dags = _dags()
    lines: list[str] = []

    def ingest(n: int, seed: int) -> None:
        batch = list(zipf_lines(n, seed=seed))
        kafka_log.produce(platform.kafka_bootstrap, EDEN, batch)
        lines.extend(batch)

    ingest(2000, seed=21)
    _trigger_stream("blue-1", {"parallelism": 2, "colour": "blue", "topology_id": "wc-blue-1"})
    _start_spares(plane)
    _wait("blue ACTIVE", lambda: _active(plane) == ["wc-blue-1"])
    _wait("blue's first counts", _counts_of(url, lines))

    # -- 1. overload blue until autoscale decides up, then the replacement -----------------
    lanes_rate = TUPLE_SIZE / SLOW_S  # records per second one lane counts
    per_second = int(1.5 * 2 * lanes_rate)  # more than 2 lanes count, less than 4
    feeder_stop = threading.Event()

    def feed() -> None:  # until the decision: then the backlog is small and green clears it
        seed = 100
        while not feeder_stop.is_set() and not events.replacements(PIPELINE):
            batch = list(zipf_lines(per_second, seed=seed))
            kafka_log.produce(platform.kafka_bootstrap, EDEN, batch)
            lines.extend(batch)
            seed += 1
            feeder_stop.wait(1.0)

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        # The sensor judges the last `history_windows` windows: let them show the overload
        # first, or on a fast machine it may still see blue idle after the first data.
        _wait("blue overloaded", lambda: _backlog_growing(plane, "wc-blue-1"))
        _ready(plane, SPARES[0][0])
        run = dags[f"autoscale_{PIPELINE}"].test()
    finally:
        feeder_stop.set()
        feeder.join(timeout=60)
    assert str(run.state).endswith("success"), run
    (up,) = events.replacements(PIPELINE)
    assert (up.outcome, up.old_parallelism, up.new_parallelism) == ("ok", 2, 4)
    assert up.new_topology_id == SPARES[0][0], up
    assert up.decision is not None and up.decision["direction"] == "up"
    assert up.pause_ms is not None and up.pause_ms >= 0 and up.duplicates == 0
    assert up.ready_at <= up.deactivated_at <= up.drained_at <= up.finished_at
    green = plane.get_topology(up.new_topology_id)
    assert (green.state, green.parallelism, green.colour) == ("ACTIVE", 4, "green")
    assert plane.get_topology("wc-blue-1").state == "STOPPED"
    _wait("exact counts after the hand-over", _counts_of(url, lines))

    # -- 2. by hand, back down to 2 --------------------------------------------------------
    _ready(plane, SPARES[1][0])
    run = dags[f"rescale_{PIPELINE}"].test(run_conf={"change": "down", "reason": "load test over"})
    assert str(run.state).endswith("success")
    down = events.replacements(PIPELINE)[-1]
    assert (down.outcome, down.old_parallelism, down.new_parallelism) == ("ok", 4, 2)
    assert (down.new_topology_id, plane.get_topology(down.new_topology_id).colour) == SPARES[1]
    assert down.reason == "load test over" and down.decision is None
    assert _active(plane) == [down.new_topology_id]
    assert plane.get_topology(green.topology_id).state == "STOPPED"
    ingest(1000, seed=22)
    _wait("exact counts after the second hand-over", _counts_of(url, lines))

    # -- 3. kill the replace task while blue is deactivated --------------------------------
    blue = down.new_topology_id
    _ready(plane, SPARES[2][0])
    conf = json.dumps({"change": "up", "reason": "killed on purpose"})
    with (stream_runs[0].log_dir / "killed-rescale.log").open("wb") as log:
        rescale = subprocess.Popen(
            [AIRFLOW, "dags", "test", f"rescale_{PIPELINE}", "--conf", conf],
            env=os.environ.copy(),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        killed = _wait(
            "the third replacement to deactivate blue",
            lambda: [e for e in events.replacements(PIPELINE)[2:] if e.deactivated_at],
            every=0.1,
        )
        os.killpg(rescale.pid, signal.SIGTERM)  # the task runner calls on_kill
        rescale.wait(timeout=120)
    finally:
        if rescale.poll() is None:
            stop_tree(rescale.pid, timeout=30)
    event = events.get_replacement(killed[0].id)
    assert "killed" in event.error, event
    assert event.new_topology_id == SPARES[2][0], event
    # Where the kill lands decides who stays: before green is ACTIVE the replacement rolls
    # back to blue; once green is ACTIVE (the hand-over takes well under a second after
    # the deactivation) it finishes forward and stops blue. Either way exactly one admits.
    if event.outcome == "rolled_back":
        survivor, loser = blue, event.new_topology_id
    else:
        assert event.outcome == "failed", event
        survivor, loser = event.new_topology_id, blue
    _wait("the killed replacement's other topology to stop", lambda: plane.get_topology(
        loser).state in TERMINAL_STATES)  # fmt: skip
    assert _wait("exactly one topology consuming", lambda: _active(plane) == [survivor])
    ingest(500, seed=23)
    _wait("exact counts after the killed replacement", _counts_of(url, lines))

    # The first two replacements left a spare behind and the third was killed: none
    # started a next standby, one spare at most (docs/flow-control.md, warm standby).
    started = [t.topology_id for t in plane.topologies(PIPELINE)]
    assert sorted(started) == sorted(["wc-blue-1", *(s for s, _ in SPARES)]), started

    # -- the reconcile job (reconcile_wordcount) over the whole log: 0 lost, 0 counted twice --
    run = dags[f"reconcile_{PIPELINE}"].test()
    assert str(run.state).endswith("success"), run
