"""The embedded platform in one command: services, Airflow, demo data, the stream.

``flowctl demo up`` is what the README's first command runs: it starts the
embedded services and ``airflow standalone``, waits until the pipeline DAGs
are parsed, loads demo text into Kafka (progress on the terminal), triggers
``stream_<pipeline>`` through Airflow, and prints the UI address, the login
and the live word counts. ``flowctl demo down`` stops running topologies
cleanly, then Airflow, then the services: no process is left behind.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

from flowctl.config import Settings
from flowctl.services import manager
from flowctl.services.airflow import AirflowService, admin_password, airflow_bin, airflow_env
from flowctl.services.base import ServiceError

log = logging.getLogger(__name__)
Say = Callable[[str], None]
DEMO_SEED = 7


def _airflow(settings: Settings, *args: str, timeout: float = 120.0) -> str:
    done = subprocess.run(
        [airflow_bin(), *args],
        env={**os.environ, **airflow_env(settings)},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        raise ServiceError(f"`airflow {' '.join(args)}` failed: {' | '.join(tail)}")
    return done.stdout


def _json_lines(output: str) -> list[dict[str, object]]:
    """The JSON array printed by ``airflow ... -o json`` (warnings may share stdout)."""
    for line in output.splitlines():
        if line.startswith("["):
            return list(json.loads(line))
    raise ValueError(f"no JSON array in the output: {output[:200]!r}")


def wait_for_dags(settings: Settings, dag_ids: list[str], timeout: float = 180.0) -> None:
    """Wait until the dag-processor has parsed and stored ``dag_ids``."""
    deadline = time.monotonic() + timeout
    missing = set(dag_ids)
    while time.monotonic() < deadline:
        try:
            listed = _json_lines(_airflow(settings, "dags", "list", "-o", "json"))
            missing = set(dag_ids) - {row.get("dag_id") for row in listed}
        except (ServiceError, ValueError) as exc:
            log.info("dags not listed yet: %s", exc)
        if not missing:
            return
        time.sleep(3.0)
    raise ServiceError(
        f"Airflow did not load DAG(s) {sorted(missing)} within {timeout:.0f} s; see "
        f"`airflow dags list-import-errors` and {settings.home / 'logs' / 'airflow.log'}"
    )


def trigger(settings: Settings, dag_id: str, conf: dict[str, object] | None = None) -> None:
    """Unpause and trigger ``dag_id`` through Airflow's CLI."""
    _airflow(settings, "dags", "unpause", dag_id)
    _airflow(settings, "dags", "trigger", dag_id, "--conf", json.dumps(conf or {}))


def word_total(settings: Settings, pipeline: str) -> tuple[int, int]:
    """(total words counted, distinct words) in the results database."""
    from flowctl.adapters import results
    from flowctl.adapters.control_plane import ControlPlane

    # The tables exist before the stream's first batch: 0 counted, not an error.
    ControlPlane(settings.resolved_database_url).ensure_schema()
    counts = results.word_counts(settings.resolved_database_url, pipeline)
    return sum(counts.values()), len(counts)


def watch(
    settings: Settings,
    pipeline: str,
    *,
    seconds: float,
    feed_rate: int,
    say: Say,
    interval: float = 3.0,
) -> None:
    """Print the live counts every ``interval`` s; meanwhile feed ``feed_rate`` lines/s."""
    stop = threading.Event()
    feeder = None
    if feed_rate > 0:
        feeder = threading.Thread(
            target=_feed, args=(settings, pipeline, feed_rate, stop), daemon=True
        )
        feeder.start()
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            try:
                total, distinct = word_total(settings, pipeline)
                say(f"  live counts: {total:>10,d} words counted, {distinct:,d} distinct")
            except Exception as exc:  # results table not there yet: the stream is starting
                say(f"  live counts: waiting for the stream ({type(exc).__name__})")
            time.sleep(interval)
    finally:
        stop.set()
        if feeder is not None:
            feeder.join(timeout=10)


def _feed(settings: Settings, pipeline: str, rate: int, stop: threading.Event) -> None:
    from flowctl.adapters import kafka_log
    from flowctl.pipelines.config import load_pipeline_config
    from flowctl.textgen import zipf_lines

    topic = load_pipeline_config(pipeline).eden_topic
    seed = int(time.time())
    while not stop.is_set():
        started = time.monotonic()
        lines = zipf_lines(rate, seed=seed, vocab_seed=DEMO_SEED)
        kafka_log.produce(settings.kafka_bootstrap, topic, lines)
        seed += 1
        stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))


def up(
    settings: Settings,
    *,
    pipeline: str = "wordcount",
    lines: int = 200_000,
    watch_seconds: float = 60.0,
    feed_rate: int = 2_000,
    say: Say = print,
) -> None:
    """Bring the whole platform up and start the pipeline's stream."""
    from flowctl.ingest import IngestRequest, ingest

    started = time.monotonic()
    for message in manager.up(settings):
        say(message)
    say("starting Airflow (standalone) ...")
    say(AirflowService().up(settings))
    dags = [f"ingest_{pipeline}", f"stream_{pipeline}"]
    wait_for_dags(settings, dags)
    say(f"DAGs loaded: {', '.join(dags)}")

    say(f"loading {lines:,d} lines of demo text into Kafka ...")
    result = ingest(
        IngestRequest.parse(pipeline=pipeline, lines=lines, seed=DEMO_SEED),
        settings.kafka_bootstrap,
        on_progress=lambda n: say(f"  produced {n:,d}/{lines:,d}"),
        progress_every=max(lines // 5, 1),
    )
    say(f"loaded {result.records:,d} lines into {result.topic} ({result.records_per_s:,.0f}/s)")
    trigger(settings, f"stream_{pipeline}")
    say(f"triggered stream_{pipeline} (the Spark job starts in 10-20 s)")

    url = f"http://{settings.host}:{settings.airflow_port}"
    password = admin_password(settings)
    say("")
    say(f"Airflow UI: {url}  login: admin / {password or '(see AIRFLOW_HOME)'}")
    say(f"platform up in {time.monotonic() - started:.0f} s; watching the counts ...")
    watch(settings, pipeline, seconds=watch_seconds, feed_rate=feed_rate, say=say)
    say("")
    say(f"Airflow UI: {url}  login: admin / {password or '(see AIRFLOW_HOME)'}")
    say("the stream keeps running. Live counts: `.venv/bin/flowctl stream counts`")
    say("stop everything: `scripts/demo down`")


def stop_topologies(settings: Settings, say: Say, timeout: float = 90.0) -> None:
    """Send ``stop`` to every running topology and wait until they end."""
    from flowctl.adapters.control_plane import TERMINAL_STATES, ControlPlane
    from flowctl.pipelines.config import PIPELINES_DIR, load_pipeline_config

    try:
        plane = ControlPlane(settings.resolved_database_url)
        plane.ensure_schema()
    except Exception as exc:
        say(f"control plane unreachable ({exc}); skipping clean topology stop")
        return
    running = []
    for path in sorted(PIPELINES_DIR.glob("*.toml")):
        name = load_pipeline_config(path).name
        for topo in plane.topologies(name):
            if topo.state not in TERMINAL_STATES:
                plane.send_signal(topo.topology_id, "stop")
                running.append(topo.topology_id)
                say(f"sent stop to topology {topo.topology_id}")
    deadline = time.monotonic() + timeout
    while running and time.monotonic() < deadline:
        running = [t for t in running if plane.get_topology(t).state not in TERMINAL_STATES]
        time.sleep(1.0)
    for topology_id in running:
        say(f"topology {topology_id} did not stop within {timeout:.0f} s")


def down(settings: Settings, say: Say = print) -> None:
    """Stop topologies, Airflow and the services, in that order."""
    airflow = AirflowService()
    if airflow.status(settings).ok:
        stop_topologies(settings, say)
    say(airflow.down(settings))
    for message in manager.down(settings):
        say(message)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `flowctl demo up|down`")
