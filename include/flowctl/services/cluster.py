"""``flowctl cluster``: docker-compose.yaml's deployment as processes on this machine.

What runs (see :mod:`flowctl.services.cluster_layout` for ports and commands):

- three Apache Kafka brokers (:mod:`flowctl.services.cluster_kafka`), memcached, and
  PostgreSQL databases of their own on the local server (results, control plane, Airflow);
- Redis, the Celery broker: the one answering at the layout's URL, else a
  ``redis-server`` of our own;
- a Spark standalone master and two workers (separate JVMs and work dirs);
- Airflow split as in compose: api-server, scheduler, dag-processor, triggerer
  and two Celery workers, all on the PostgreSQL metadata database.

Every process is a :class:`~flowctl.services.process.Daemon` (PID file with its
command line, log in ``<home>/logs``, a health check); a stop takes its whole
process tree (executors, task processes, the drivers they started), so ``down``
leaves no process. ``up`` is idempotent and rolls back what it started if a
step fails.
"""

from __future__ import annotations

import functools
import json
import logging
import secrets
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from flowctl.adapters.procfs import proc_cmdline
from flowctl.core.slot_plan import DEFAULT_PLAN
from flowctl.services import cluster_redis, manager
from flowctl.services.airflow import _run_airflow, airflow_home
from flowctl.services.base import ServiceError, ServiceStatus
from flowctl.services.cluster_layout import WORKERS, ClusterLayout
from flowctl.services.cluster_redis import redis_ping
from flowctl.services.kafka import durability
from flowctl.services.ports import check_tcp
from flowctl.services.process import Daemon, PidRecord, stop_tree

log = logging.getLogger(__name__)

AIRFLOW_COMPONENTS = ("scheduler", "dag-processor", "triggerer", "api-server")
JOB_HEARTBEAT_S = 60.0  # a dag-processor or triggerer older than this is not alive


def _http_json(url: str, timeout: float) -> object:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return json.loads(response.read() or b"null")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServiceError(f"{url} is not answering: {exc}") from None


def _start_time(pid: int) -> str | None:
    """The process's start time (clock ticks since boot, /proc/<pid>/stat field 22)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()[19]


@dataclass
class ClusterDaemon(Daemon):
    """A daemon whose stop takes its whole process tree; port 0 means it listens on none.

    The api-server and the Celery workers rename themselves (setproctitle), so their
    command line no longer matches the PID file's: such a process is recognised by its
    PID and its start time, recorded beside the PID file once it is up (a recycled PID
    has another start time).
    """

    @property
    def start_file(self) -> Path:
        return self.pid_file.with_suffix(".start")

    def _start(self) -> str:
        message = super()._start()
        record = PidRecord.load(self.pid_file.read_text())
        self.start_file.write_text(_start_time(record.pid) or "")
        return message

    def running(self) -> PidRecord | None:
        try:
            record = PidRecord.load(self.pid_file.read_text())
            started = self.start_file.read_text() if self.start_file.exists() else ""
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            return super().running()  # logs and removes the unreadable file
        if started and _start_time(record.pid) == started and proc_cmdline(record.pid):
            return record
        found = super().running()
        if found is None:
            self.start_file.unlink(missing_ok=True)
        return found

    def health_at(self, host: str, port: int, timeout: float) -> None:
        if port:
            check_tcp(host, port, timeout)
        self.health(timeout)

    def down(self) -> str:
        record = self.running()
        if record is None:
            return f"{self.name} already down"
        started = time.monotonic()
        tree = stop_tree(record.pid, timeout=self.stop_timeout)
        self.pid_file.unlink(missing_ok=True)
        self.start_file.unlink(missing_ok=True)
        took = time.monotonic() - started
        return f"{self.name} down ({len(tree)} processes) in {took:.1f} s"


# -- health checks --------------------------------------------------------------------------
def master_health(layout: ClusterLayout, timeout: float) -> None:
    url = f"http://{layout.host}:{layout.spark_master_ui_port}/json/"
    state = _http_json(url, timeout)
    if not isinstance(state, dict) or state.get("status") != "ALIVE":
        raise ServiceError(f"Spark master at {url} is not ALIVE")


def worker_health(layout: ClusterLayout, index: int, timeout: float) -> None:
    """The worker has registered with our master (its state names the master)."""
    url = f"http://{layout.host}:{layout.spark_worker_ui_ports[index - 1]}/json/"
    state = _http_json(url, timeout)
    if not isinstance(state, dict) or state.get("masterurl") != layout.spark_master_url:
        raise ServiceError(f"Spark worker at {url} has not registered with the master")


def job_health(layout: ClusterLayout, job_type: str, timeout: float) -> None:
    """A running Airflow job of ``job_type`` with a recent heartbeat, in the metadata DB."""
    from flowctl.adapters.postgres_admin import PostgresAdminError, job_heartbeat_age

    try:
        age = job_heartbeat_age(layout.database_url(layout.airflow_db), job_type, timeout)
    except PostgresAdminError as exc:
        raise ServiceError(f"{job_type}: {exc}") from None
    if age is None or age > JOB_HEARTBEAT_S:
        raise ServiceError(f"no {job_type} heartbeat in the last {JOB_HEARTBEAT_S:.0f} s")


def api_health(layout: ClusterLayout, timeout: float) -> None:
    """The api-server answers its (public) health endpoint and reaches the metadata DB."""
    url = f"http://{layout.host}:{layout.airflow_port}/api/v2/monitor/health"
    body = _http_json(url, timeout)
    status = (body.get("metadatabase") or {}).get("status") if isinstance(body, dict) else None
    if status != "healthy":
        raise ServiceError(f"Airflow api-server at {url}: metadata database is {status}")


def http_ok(url: str, timeout: float) -> None:
    """``url`` answers 200 (any body)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise ServiceError(f"{url} is not answering: {exc}") from None


# -- components -----------------------------------------------------------------------------
def _daemon(
    layout: ClusterLayout,
    name: str,
    argv: tuple[str, ...],
    port: int,
    health: Callable[[float], None],
    env: dict[str, str],
    start_timeout: float = 120.0,
) -> ClusterDaemon:
    return ClusterDaemon(
        name=name,
        argv=argv,
        host=layout.host,
        port=port,
        settings=layout.settings,
        health=health,
        env=env,
        start_timeout=start_timeout,
        stop_timeout=30.0,
        check_timeout=5.0,
    )


def kafka_daemons(layout: ClusterLayout, for_start: bool = False) -> list[ClusterDaemon]:
    """The three Apache Kafka nodes (:func:`flowctl.services.cluster_kafka.nodes`)."""
    from flowctl.services import cluster_kafka

    return [
        _daemon(layout, name, argv, port, health, {}, start_timeout=180.0)
        for name, argv, port, health in cluster_kafka.nodes(layout, for_start)
    ]


def redis_daemon(layout: ClusterLayout) -> ClusterDaemon:
    """Our own ``redis-server`` (no persistence) when none answers at the layout's URL."""
    port = urlsplit(layout.redis_url).port or 6379
    argv = (
        shutil.which("redis-server") or "redis-server",
        "--bind",
        layout.host,
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
    )
    return _daemon(layout, "redis", argv, port, lambda t: redis_ping(layout.redis_url, t), {}, 30.0)


def spark_daemons(layout: ClusterLayout) -> list[ClusterDaemon]:
    env = layout.spark_env()
    master = _daemon(
        layout,
        "spark-master",
        layout.master_argv(),
        layout.spark_master_ui_port,
        lambda t: master_health(layout, t),
        env,
    )
    workers = [
        _daemon(
            layout,
            f"spark-worker-{i}",
            layout.worker_argv(i),
            layout.spark_worker_ui_ports[i - 1],
            functools.partial(worker_health, layout, i),
            env,
        )
        for i in range(1, WORKERS + 1)
    ]
    return [master, *workers]


def airflow_daemons(layout: ClusterLayout) -> list[ClusterDaemon]:
    host = layout.host
    checks: dict[str, tuple[int, Callable[[float], None]]] = {
        "scheduler": (
            layout.scheduler_health_port,
            lambda t: http_ok(f"http://{host}:{layout.scheduler_health_port}/health", t),
        ),
        "dag-processor": (0, lambda t: job_health(layout, "DagProcessorJob", t)),
        "triggerer": (layout.triggerer_log_port, lambda t: job_health(layout, "TriggererJob", t)),
        "api-server": (layout.airflow_port, lambda t: api_health(layout, t)),
    }
    for i in range(1, WORKERS + 1):
        checks[f"worker-{i}"] = (layout.celery_log_ports[i - 1], lambda t: None)
    return [
        _daemon(
            layout,
            f"airflow-{component}",
            layout.airflow_argv(component),
            port,
            health,
            layout.component_env(component),
            start_timeout=240.0,
        )
        for component, (port, health) in checks.items()
    ]


# -- steps that start nothing ---------------------------------------------------------------
def ensure_databases(layout: ClusterLayout) -> str:
    """Create the cluster's two databases on the PostgreSQL server if they do not exist."""
    from flowctl.adapters import postgres_admin

    try:
        created = postgres_admin.ensure_databases(
            layout.postgres_url, [layout.flowctl_db, layout.airflow_db]
        )
    except postgres_admin.PostgresAdminError as exc:
        raise ServiceError(f"postgres: {exc}") from None
    return f"postgres: databases {layout.flowctl_db}, {layout.airflow_db}" + (
        f" (created {', '.join(created)})" if created else " (already there)"
    )


def airflow_init(layout: ClusterLayout) -> str:
    """compose's airflow-init: migrate the metadata DB; an admin password for the REST API."""
    started = time.monotonic()
    home = airflow_home(layout.settings)
    home.mkdir(parents=True, exist_ok=True)
    passwords = home / "simple_auth_manager_passwords.json.generated"
    if not passwords.exists():
        passwords.write_text(json.dumps({"admin": secrets.token_urlsafe(12)}))
    _run_airflow(layout.settings, "db", "migrate", env=layout.airflow_env())
    return f"airflow-init: metadata database ready in {time.monotonic() - started:.1f} s"


def ship_code(layout: ClusterLayout) -> str:
    """The flowctl zip and the drivers' spark-defaults.conf (see flowctl.services.shipping)."""
    from flowctl.services.shipping import build_zip, spark_defaults, write_spark_defaults

    zip_path = build_zip(layout.home / "dist")
    properties = spark_defaults(
        zip_path, executor_memory=layout.executor_memory, cores_max=DEFAULT_PLAN.stream_cores
    )
    conf = write_spark_defaults(layout.spark_conf_dir, properties)
    return f"code: {zip_path} shipped to the executors by {conf}"


def admin_login(layout: ClusterLayout) -> tuple[str, str]:
    """The REST API's user and password."""
    home = airflow_home(layout.settings)
    data = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())
    return "admin", data["admin"]


# -- up / down / status ---------------------------------------------------------------------
def _start_all(daemons: list[ClusterDaemon], started: list[ClusterDaemon]) -> list[str]:
    """Start ``daemons`` side by side (their health waits overlap); record what started."""

    def one(d: ClusterDaemon) -> str:
        was_running = d.running() is not None
        message = d.up()
        if not was_running:
            started.append(d)
        return message

    with ThreadPoolExecutor(max_workers=len(daemons)) as pool:
        futures = [pool.submit(one, d) for d in daemons]
        messages, errors = [], []
        for future in futures:
            try:
                messages.append(future.result())
            except ServiceError as exc:
                errors.append(str(exc))
    if errors:
        raise ServiceError("; ".join(errors))
    return messages


def _own_redis(layout: ClusterLayout) -> bool:
    """True if we run the broker (someone else's answers, or ours is recorded)."""
    daemon = redis_daemon(layout)
    if daemon.running() is not None:
        return True
    try:
        redis_ping(layout.redis_url, 2.0)
    except ServiceError:
        return True
    return False


def up(layout: ClusterLayout) -> list[str]:
    """Bring the whole cluster up; a no-op for what already runs. Rolls back on failure."""
    t0 = time.monotonic()
    layout.save()
    settings = layout.settings
    started: list[ClusterDaemon] = []
    messages = [ensure_databases(layout)]
    services_before = {s.name for s in manager.status(settings) if s.pid}
    try:
        if _own_redis(layout):
            messages += _start_all([redis_daemon(layout)], started)
        else:
            messages.append(f"redis: using the one at {layout.redis_url}")
        # All three at once: a node answers only once a quorum of them has formed.
        messages += _start_all(kafka_daemons(layout, for_start=True), started)
        messages += manager.up(settings)
        messages.append(ship_code(layout))
        spark = spark_daemons(layout)
        messages += _start_all(spark[:1], started)
        messages += _start_all(spark[1:], started)
        messages.append(airflow_init(layout))
        messages += _start_all(airflow_daemons(layout), started)
    except ServiceError:
        for daemon in reversed(started):
            log.warning("rolling back: %s", daemon.down())
        started_services = {s.name for s in manager.status(settings) if s.pid}
        if started_services - services_before:
            manager.down(settings, only=started_services - services_before)
        raise
    messages.append(f"cluster up in {time.monotonic() - t0:.1f} s")
    messages.append(log_durability(layout))
    return messages


def all_daemons(layout: ClusterLayout) -> list[ClusterDaemon]:
    """Every process of the cluster in start order (services of ``manager`` aside)."""
    return [
        redis_daemon(layout),
        *kafka_daemons(layout),
        *spark_daemons(layout),
        *airflow_daemons(layout),
    ]


#: Seconds ``down`` gives the scheduler to close the runs of cleanly stopped topologies.
RUNS_CLOSE_WAIT_S = 30.0


def close_open_runs(layout: ClusterLayout, say: Callable[[str], None]) -> None:
    """Leave no Airflow run ``queued`` or ``running`` (see :mod:`flowctl.services.airflow_runs`).

    A stream stopped by its signal ends its task, and the scheduler closes the run on its
    next loop (success); a run still open after :data:`RUNS_CLOSE_WAIT_S` (a topology
    that did not stop, a task waiting for resources) is marked ``failed`` with a note, as
    ``flowctl demo down`` does: the stop is about to kill its task.
    """
    from flowctl.services.airflow_runs import close_runs

    api = next(d for d in airflow_daemons(layout) if d.name == "airflow-api-server")
    if api.running() is None:
        say("airflow api-server is not running: open DAG runs not checked")
        return
    note = "closed by `flowctl cluster down`: the cluster stopped before the run finished"
    try:
        closed = close_runs(layout.settings, wait_s=RUNS_CLOSE_WAIT_S, note=note)
    except ServiceError as exc:
        say(f"could not close the open DAG runs: {exc}")
        return
    for dag_id, run_id in closed:
        say(f"run {dag_id} / {run_id} was still open: marked failed")


def down(layout: ClusterLayout, *, purge: bool = False) -> list[str]:
    """Stop the live topologies by their ``stop`` signal, close the open DAG runs, then stop
    every process of the cluster, Airflow first. The databases and the state dir stay
    unless ``purge`` (:mod:`flowctl.services.cluster_purge`)."""
    from flowctl.services.stopping import end_detached_drivers, stop_topologies

    t0 = time.monotonic()
    messages: list[str] = []
    stop_topologies(layout.settings, messages.append, timeout=60.0)
    close_open_runs(layout, messages.append)
    brokers = kafka_daemons(layout)
    names = {d.name for d in brokers}
    own = redis_daemon(layout).running() is not None  # else an external one: not ours to stop
    names |= set() if own else {"redis"}
    messages += [d.down() for d in reversed(all_daemons(layout)) if d.name not in names]
    messages += [] if own else [cluster_redis.leave_external(layout.redis_url)]
    # The brokers together: stopped one by one, the last wait for a controller that is gone.
    with ThreadPoolExecutor(max_workers=len(brokers) or 1) as pool:
        messages += list(pool.map(lambda d: d.down(), brokers))
    # after Airflow: no task is left to submit a driver again
    end_detached_drivers(layout.settings, messages.append)
    messages += manager.down(layout.settings)
    if purge:
        from flowctl.services.cluster_purge import purge as purge_state

        left = [f"{r.name} (pid {r.pid})" for r in status(layout) if r.pid]
        if left:
            raise ServiceError(f"purge refused: still running after down: {', '.join(left)}")
        messages += purge_state(layout)
    messages.append(f"cluster down in {time.monotonic() - t0:.1f} s")
    return messages


def status(layout: ClusterLayout) -> list[ServiceStatus]:
    """One row per process, plus the services of ``manager`` and the broker."""
    ours = layout.broker == "kafka"  # the kafka-<n> rows stand for the manager's kafka row
    rows = [r for r in manager.status(layout.settings) if not (ours and r.name == "kafka")]
    redis = redis_daemon(layout)
    if redis.running() is None:
        try:
            redis_ping(layout.redis_url, 2.0)
            rows.append(ServiceStatus("redis", "external", None, layout.redis_url, "PONG"))
        except ServiceError as exc:
            rows.append(ServiceStatus("redis", "unreachable", None, layout.redis_url, str(exc)))
    else:
        rows.append(redis.status())
    rows += [d.status() for d in all_daemons(layout)[1:]]
    return rows


def log_durability(layout: ClusterLayout) -> str:
    """Where the cluster's broker log lives and whether it is durable: ``up`` ends with it
    (an ``AWS_ENDPOINT`` alone does not move the log to S3) and so does ``status``."""
    from flowctl.services import cluster_kafka

    ours = layout.broker == "kafka"
    return cluster_kafka.durability(layout) if ours else durability(layout.settings)


def healthy(layout: ClusterLayout) -> bool:
    return all(r.ok for r in status(layout))


def layout_for(home: Path) -> ClusterLayout:
    """The saved layout of ``home``, else the default one."""
    return ClusterLayout.load(home) or ClusterLayout.from_env(home)
