"""Airflow for the embedded platform: a project-local home and ``airflow standalone``.

Everything Airflow needs is derived from :class:`flowctl.config.Settings`:

- ``AIRFLOW_HOME`` is ``<FLOWCTL_HOME>/airflow`` (project-local; SQLite
  metadata database, logs, the generated admin password);
- SQLite writers wait up to a minute for the lock, not Python's 5 s
  (:mod:`flowctl.services.airflow_sqlite`);
- the DAGs come from ``dags/``, plugins from ``plugins/``; no examples;
- the platform's connections (``spark_default``, ``flowctl_kafka``,
  ``flowctl_memcached``, ``flowctl_db``) are written into Airflow's database
  once, by :func:`import_connections`, and never overwritten afterwards: a
  user who edits them in the UI keeps their edit.

``airflow standalone`` runs the api-server, scheduler, dag-processor and
triggerer as children. ``kill -TERM`` of standalone leaves those children
running, so :meth:`AirflowService.down` stops the whole process tree by PID,
children first.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from flowctl.config import PROJECT_ROOT, Settings
from flowctl.services.base import DOWN, ServiceError, ServiceStatus
from flowctl.services.process import Daemon, stop_tree

log = logging.getLogger(__name__)

NAME = "airflow"
ADMIN_USER = "admin"
#: The module holding the metadata database's connection arguments (a longer busy timeout).
SQLITE_ARGS = "flowctl.services.airflow_sqlite"


def airflow_home(settings: Settings) -> Path:
    return settings.home / "airflow"


def airflow_bin() -> str:
    """The ``airflow`` script of the interpreter running flowctl."""
    candidate = Path(sys.executable).parent / "airflow"
    return str(candidate) if candidate.exists() else "airflow"


PATHSPEC_WARNING = "ignore:GitWildMatchPattern:DeprecationWarning"


def jwt_secret(settings: Settings) -> str:
    """The JWT signing key of this Airflow home: 64 random bytes, made once, owner-only."""
    path = airflow_home(settings) / "jwt_secret"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = base64.b64encode(os.urandom(64)).decode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another command of the same home made it first
        return path.read_text().strip()
    with os.fdopen(fd, "w") as out:
        out.write(secret)
    return secret


def executor_parallelism(cpus: int | None = None) -> int:
    """LocalExecutor worker processes for this machine (Airflow's default is 32).

    A stream task holds its worker for the topology's life, and a replacement
    runs blue, green and the rescale task at once, next to a short reconcile
    or autoscale task: so at least 6, and 2 per core beyond that. Each idle
    worker is a forked Airflow interpreter (~150 MB), so not more.
    """
    return max(6, 2 * (cpus or os.cpu_count() or 1))


def airflow_env(settings: Settings) -> dict[str, str]:
    """Environment for every ``airflow`` command and task of the embedded platform."""
    venv_bin = str(Path(sys.executable).parent)
    return {
        **settings.to_env(),
        "AIRFLOW_HOME": str(airflow_home(settings)),
        # Explicit, so an AIRFLOW__DATABASE__* inherited from the caller's shell cannot point
        # the embedded Airflow at another instance's metadata database.
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{airflow_home(settings) / 'airflow.db'}",
        # A writer waits up to a minute for SQLite's lock, not 5 s (see airflow_sqlite).
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS": f"{SQLITE_ARGS}.CONNECT_ARGS",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONNECT_ARGS_ASYNC": f"{SQLITE_ARGS}.CONNECT_ARGS_ASYNC",
        "AIRFLOW__CORE__DAGS_FOLDER": str(PROJECT_ROOT / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(PROJECT_ROOT / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": os.environ.get(
            "AIRFLOW__CORE__PARALLELISM", str(executor_parallelism())
        ),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{ADMIN_USER}:admin",
        "AIRFLOW__API__HOST": settings.host,
        "AIRFLOW__API__PORT": str(settings.airflow_port),
        "AIRFLOW__API__BASE_URL": f"http://{settings.host}:{settings.airflow_port}",
        # New and changed DAG files show up within seconds, not minutes.
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
        # HS512 wants a 64-byte key; Airflow generates a 16-byte one and PyJWT warns about
        # its length in every component's log. One persisted key, shared by all of them.
        "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret(settings),
        # Airflow reads plugins/.airflowignore with pathspec's deprecated GitWildMatchPattern
        # (the task runner always in glob syntax, whatever [core] dag_ignore_file_syntax
        # says), and every task log warned about it. Not ours to fix: silenced here, by
        # message. (A PYTHONWARNINGS also turns off Airflow's own "show our deprecation
        # warnings" filter; Python's defaults apply to those instead.)
        "PYTHONWARNINGS": ",".join(
            w for w in (os.environ.get("PYTHONWARNINGS"), PATHSPEC_WARNING) if w
        ),
        "SPARK_LOCAL_IP": settings.host,
        "PATH": f"{venv_bin}{os.pathsep}{os.environ.get('PATH', '')}",
    }


def connections(settings: Settings) -> dict[str, dict[str, object]]:
    """The platform's Airflow connections, in Airflow's JSON connection format."""
    master = settings.spark_master
    spark: dict[str, object] = {"conn_type": "spark", "host": master}
    if master.startswith("spark://"):
        host, _, port = master.removeprefix("spark://").rpartition(":")
        spark = {"conn_type": "spark", "host": f"spark://{host}", "port": int(port)}
    mc_host, _, mc_port = settings.memcached_address.rpartition(":")
    return {
        "spark_default": spark,
        "flowctl_kafka": {
            "conn_type": "kafka",
            "extra": json.dumps({"bootstrap.servers": settings.kafka_bootstrap}),
        },
        "flowctl_memcached": {"conn_type": "generic", "host": mc_host, "port": int(mc_port)},
        "flowctl_db": {
            "conn_type": "generic",
            "extra": json.dumps({"sqlalchemy_url": settings.resolved_database_url}),
        },
    }


def connections_env(settings: Settings) -> dict[str, str]:
    """The same connections as ``AIRFLOW_CONN_*`` variables (for tests and one-off runs)."""
    return {
        f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps(conn)
        for conn_id, conn in connections(settings).items()
    }


def _run_airflow(
    settings: Settings, *args: str, timeout: float = 300.0, env: dict[str, str] | None = None
) -> str:
    """``airflow args...`` in the platform's environment (``env``: another Airflow's)."""
    cmd = [airflow_bin(), *args]
    try:
        done = subprocess.run(
            cmd,
            env={**os.environ, **(env if env is not None else airflow_env(settings))},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ServiceError(
            f"`airflow {' '.join(args)}` did not finish in {timeout:.0f} s"
        ) from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-5:]
        raise ServiceError(f"`airflow {' '.join(args)}` failed: {' | '.join(tail)}")
    return done.stdout


def migrate(settings: Settings) -> None:
    """Create or upgrade Airflow's metadata database (idempotent)."""
    airflow_home(settings).mkdir(parents=True, exist_ok=True)
    _run_airflow(settings, "db", "migrate")


def import_connections(settings: Settings) -> None:
    """Add the platform's connections that do not exist yet; keep the user's edits."""
    path = airflow_home(settings) / "flowctl-connections.json"
    path.write_text(json.dumps(connections(settings), indent=2))
    _run_airflow(settings, "connections", "import", str(path))


def admin_password(settings: Settings) -> str | None:
    """The password Airflow generated for ``admin`` (simple auth manager), if any."""
    path = airflow_home(settings) / "simple_auth_manager_passwords.json.generated"
    try:
        password = json.loads(path.read_text()).get(ADMIN_USER)
    except (OSError, ValueError):
        return None
    return password if isinstance(password, str) else None


def api_health(settings: Settings, timeout: float) -> None:
    """The api-server answers and reports a healthy metadata database and scheduler."""
    url = f"http://{settings.host}:{settings.airflow_port}/api/v2/monitor/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            body = json.loads(response.read() or b"{}")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ServiceError(f"Airflow api-server at {url} is not answering: {exc}") from None
    for part in ("metadatabase", "scheduler"):
        status = (body.get(part) or {}).get("status")
        if status != "healthy":
            raise ServiceError(f"Airflow {part} is {status or 'unknown'} ({url})")


def daemon(settings: Settings) -> Daemon:
    return Daemon(
        name=NAME,
        # The interpreter is named explicitly so /proc/<pid>/cmdline matches argv exactly.
        argv=(sys.executable, airflow_bin(), "standalone"),
        host=settings.host,
        port=settings.airflow_port,
        settings=settings,
        health=lambda timeout: api_health(settings, timeout),
        env=airflow_env(settings),
        start_timeout=240.0,
        stop_timeout=30.0,
    )


class AirflowService:
    """``airflow standalone`` on the project-local home, with the platform's connections."""

    name = NAME

    def up(self, settings: Settings) -> str:
        process = daemon(settings)
        if process.running() is not None:
            return process.up()
        started = time.monotonic()
        migrate(settings)
        import_connections(settings)
        log.info("%s: metadata database ready in %.1f s", NAME, time.monotonic() - started)
        return process.up()

    def down(self, settings: Settings) -> str:
        process = daemon(settings)
        record = process.running()
        if record is None:
            return f"{NAME} already down"
        started = time.monotonic()
        tree = stop_tree(record.pid, timeout=process.stop_timeout)
        process.pid_file.unlink(missing_ok=True)
        return f"{NAME} down ({len(tree)} processes) in {time.monotonic() - started:.1f} s"

    def status(self, settings: Settings) -> ServiceStatus:
        status = daemon(settings).status()
        if status.state == DOWN:
            return status
        password = admin_password(settings)
        login = f"login {ADMIN_USER} / {password}" if password else f"login {ADMIN_USER}"
        return ServiceStatus(
            status.name,
            status.state,
            status.pid,
            f"http://{status.address}",
            f"{login}; {status.detail}",
        )
