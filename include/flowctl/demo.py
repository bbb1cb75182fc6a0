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
import time
from collections.abc import Callable

from flowctl import feed
from flowctl.config import Settings
from flowctl.services import manager
from flowctl.services.airflow import AirflowService, admin_password, airflow_bin, airflow_env
from flowctl.services.base import ServiceError
from flowctl.services.stopping import end_detached_drivers, stop_topologies

log = logging.getLogger(__name__)
Say = Callable[[str], None]
DEMO_SEED = feed.DEMO_SEED
#: Seconds between two "waiting for the first batch" lines while nothing changes.
WAIT_LINE_EVERY_S = 15.0


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


def stream_state(settings: Settings, pipeline: str) -> str:
    """What the pipeline's newest topology is doing, for a reader waiting for counts."""
    from flowctl.adapters.control_plane import ControlPlane

    topologies = ControlPlane(settings.resolved_database_url).topologies(pipeline)
    if not topologies:
        return "Airflow is starting the Spark job"
    newest = max(topologies, key=lambda t: t.created_at)
    return f"topology {newest.state}" + (
        " (Spark and its Python workers start)" if newest.state == "STARTING" else ""
    )


def watch(
    settings: Settings,
    pipeline: str,
    *,
    seconds: float,
    say: Say,
    interval: float = 3.0,
    start_timeout: float = 300.0,
) -> None:
    """Print the live counts every ``interval`` s for ``seconds`` from the first count.

    Until the stream's first batch is stored a line says what the stream is doing
    (a Spark job takes 10-100 s to start), not "0 words counted": when that changes,
    else every :data:`WAIT_LINE_EVERY_S` s; after
    ``start_timeout`` s without a count it says where to look, and the watch ends.
    """
    started = time.monotonic()
    deadline: float | None = None
    said: tuple[str, float] = ("", -WAIT_LINE_EVERY_S)  # the last waiting line: state, when
    while deadline is None or time.monotonic() < deadline:
        waited = time.monotonic() - started
        try:
            total, distinct = word_total(settings, pipeline)
            state = "" if total else stream_state(settings, pipeline)
        except Exception as exc:  # results table not there yet: the stream is starting
            total, distinct, state = 0, 0, f"the stream is starting ({type(exc).__name__})"
        if total and deadline is None:
            deadline = time.monotonic() + seconds
        if deadline is not None:
            say(f"  live counts: {total:>10,d} words counted, {distinct:,d} distinct")
        elif waited > start_timeout:
            say(
                f"  no counts after {waited:.0f} s ({state}): see the stream_{pipeline} "
                "task's log in the Airflow UI"
            )
            return
        elif state != said[0] or waited - said[1] >= WAIT_LINE_EVERY_S:
            said = (state, waited)
            say(f"  waiting for the first batch: {state}, {waited:.0f} s")
        time.sleep(interval)


def pipeline_names() -> list[str]:
    from flowctl.pipelines.config import PIPELINES_DIR, load_pipeline_config

    return [load_pipeline_config(path).name for path in sorted(PIPELINES_DIR.glob("*.toml"))]


def dag_guide(pipelines: list[str], url: str) -> list[str]:
    """What a user can do with each generated DAG, and where (the demo prints it)."""
    what = {
        "ingest": "load more text into Kafka (synthetic lines, or a file)",
        "stream": "the streaming topology; its task log shows windows, checkpoints, signals",
        "rescale": "replace the running topology blue-green: change up (double), down "
        "(halve) or a number of lanes, and a reason",
        "autoscale": "rescales from the failure-rate windows on its schedule, once unpaused",
        "reconcile": "checks the stored results against the Kafka log (hourly once unpaused)",
    }
    rows = [(f"{kind}_{name}", text) for name in pipelines for kind, text in what.items()]
    width = max(len(dag_id) for dag_id, _ in rows)
    return [
        f"In the Airflow UI ({url}), page Dags; a DAG's Trigger button opens its form:",
        *(f"  {dag_id:<{width}}  {text}" for dag_id, text in rows),
        f"Metrics: Browse > Flowctl metrics ({url}/plugin/flowctl-metrics)",
    ]


def _start_feed(settings: Settings, pipeline: str, rate: int, say: Say) -> None:
    feed.stop(settings)
    if rate > 0:
        say(feed.start(settings, pipeline, rate))


def up(
    settings: Settings,
    *,
    pipeline: str = "wordcount",
    lines: int = 200_000,
    watch_seconds: float = 60.0,
    feed_rate: int = 2_000,
    idle_feed_rate: int = 50,
    say: Say = print,
) -> None:
    """Bring the whole platform up, start the pipeline's stream and keep feeding it."""
    from flowctl.ingest import IngestRequest, ingest

    started = time.monotonic()
    for message in manager.up(settings):
        say(message)
    say("starting Airflow (standalone) ...")
    airflow = AirflowService()
    was_up = airflow.status(settings).ok
    say(airflow.up(settings))
    if not was_up:
        _close_stale_runs(settings, say)
    pipelines = pipeline_names()
    kinds = ("ingest", "stream", "rescale", "autoscale", "reconcile")
    wait_for_dags(settings, [f"{kind}_{name}" for name in pipelines for kind in kinds])

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
    login = f"Airflow UI: {url}  login: admin / {password or '(see AIRFLOW_HOME)'}"
    say("")
    say(login)
    say(f"platform up in {time.monotonic() - started:.0f} s; watching the counts ...")
    _start_feed(settings, pipeline, feed_rate, say)
    watch(settings, pipeline, seconds=watch_seconds, say=say)
    _start_feed(settings, pipeline, idle_feed_rate, say)
    say("")
    for line in dag_guide(pipelines, url):
        say(line)
    say("")
    say(login)
    say("the stream keeps running. Live counts: `.venv/bin/flowctl stream counts`")
    say("stop everything: `scripts/demo down`")


def _close_stale_runs(settings: Settings, say: Say) -> None:
    """Runs left open by an unclean stop (no task of them can be running now)."""
    from flowctl.services.airflow_runs import close_runs

    note = "closed by `flowctl demo up`: Airflow had stopped while this run was open"
    for dag_id, run_id in close_runs(settings, wait_s=0.0, note=note):
        say(f"marked stale run {dag_id} / {run_id} failed")


def down(settings: Settings, say: Say = print) -> None:
    """Stop the feed, the topologies, Airflow and the services, in that order.

    Between the topologies and Airflow, the DAG runs are closed: no run is left
    ``running`` (see :mod:`flowctl.services.airflow_runs`).
    """
    from flowctl.services.airflow_runs import close_runs

    say(feed.stop(settings))
    airflow = AirflowService()
    if airflow.status(settings).ok:
        stop_topologies(settings, say)
        note = "closed by `flowctl demo down`: Airflow stopped before the run finished"
        try:
            closed = close_runs(settings, wait_s=60.0, note=note)
            for dag_id, run_id in closed:
                say(f"run {dag_id} / {run_id} was still open: marked failed")
            if not closed:
                say("every DAG run has ended (none left running)")
        except ServiceError as exc:
            say(f"could not close the open DAG runs: {exc}")
    say(airflow.down(settings))
    # after Airflow: no task is left to submit a driver again
    end_detached_drivers(settings, say)
    for message in manager.down(settings):
        say(message)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("use `flowctl demo up|down`")
