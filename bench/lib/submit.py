"""Run a stream job locally the way Airflow's SparkSubmitOperator does.

``spark-submit`` in a subprocess, in its own process group, its output in a log file.
The benchmarks and the Spark tests start their jobs through here so that what they
measure and check is the command Airflow runs, not an in-process Spark session.

The process group matters: ``spark-submit`` starts a JVM which starts the Python
driver and the Python workers. Signalling only the launcher would leave the driver
running (and holding cores) after the test or benchmark has given up on it; a
signal to the group reaches all of them, the way a killed container or node would.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from flowctl.adapters import driver_jvm
from flowctl.config import PROJECT_ROOT, Settings

#: The virtualenv's ``bin``: its ``spark-submit`` and Python are the job's.
VENV_BIN = Path(sys.executable).parent
STREAM_SCRIPT = PROJECT_ROOT / "spark_jobs" / "wordcount_stream.py"
BASELINE_SCRIPT = PROJECT_ROOT / "bench" / "jobs" / "wordcount_baseline.py"


@dataclass
class LocalJob:
    """A running ``spark-submit`` of a stream job in its own process group."""

    process: subprocess.Popen[bytes]
    log_path: Path
    topology_id: str

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_tail(self, lines: int = 80) -> str:
        """The last ``lines`` lines of the log: what a failure message shows."""
        return "\n".join(self.log().splitlines()[-lines:])

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait(self, timeout_s: float) -> int:
        """The job's exit code once it exits by itself within ``timeout_s``.

        A job still running then is hung: it is killed (a job left behind would hold
        the cores the next job needs) and :class:`TimeoutError` names it with its log.
        """
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill_hard()
            raise TimeoutError(
                f"{self.topology_id} did not exit within {timeout_s} s (killed); "
                f"log:\n{self.log_tail()}"
            ) from None

    def stop(self, database_url: str, timeout_s: float = 120.0) -> int | None:
        """The ``stop`` signal through the control plane (the driver drains and exits);
        SIGTERM, then SIGKILL, if it has not exited within ``timeout_s``."""
        from flowctl.adapters.control_plane import ControlPlane

        if self.alive():
            with contextlib.suppress(Exception):  # the database may be away on purpose
                ControlPlane(database_url).send_signal(self.topology_id, "stop")
            try:
                return self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                return self.terminate()
        return self.process.returncode

    def terminate(self, timeout_s: float = 60.0) -> int | None:
        """SIGTERM to the group (the driver stops its query); SIGKILL after ``timeout_s``."""
        if self.alive():
            self._signal_group(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill_hard()
        return self.process.returncode

    def kill_hard(self) -> None:
        """SIGKILL the whole job (launcher, JVM, Python driver and workers): a crash, no cleanup."""
        if self.alive():
            self._signal_group(signal.SIGKILL)
            self.process.wait(timeout=30)

    def _signal_group(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError):  # it exited just now
            os.killpg(self.process.pid, signum)


def job_env(
    settings: Settings, database_url: str, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment of a job started outside Airflow, as Airflow's workers give it.

    This process's environment plus the platform's ``FLOWCTL_*`` settings and database;
    Spark bound to loopback, this interpreter for the driver and the workers (the venv
    has pyspark), ``PROJECT_ROOT`` importable (test and bench definitions live in
    ``tests/`` and ``bench/``) and the venv's ``bin`` first on ``PATH``. ``extra`` last.
    """
    env = dict(os.environ)
    env.update(settings.to_env())
    env.update(
        FLOWCTL_DATABASE_URL=database_url,
        SPARK_LOCAL_IP="127.0.0.1",
        PYSPARK_PYTHON=sys.executable,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        PYTHONPATH=str(PROJECT_ROOT),
        PATH=f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}",
    )
    env.update(extra or {})
    return env


def spark_submit(
    script: Path,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    topology_id: str,
    master: str = "local[2]",
) -> LocalJob:
    """Start ``spark-submit script args...`` in a new session, stdout and stderr to ``log_path``.

    No Spark UI (it would take a port per job); the driver JVM is the operators' drivers'
    (:mod:`flowctl.adapters.driver_jvm`: the settings' heap size, fixed and reserved at
    start, the class-data sharing archive once built).
    ``log_path`` is appended to, so a job restarted under the same topology keeps one log.
    """
    settings = Settings.from_env(env)
    jvm = driver_jvm.driver_conf(settings.spark_driver_memory, settings.spark_class_archive)
    command = [
        str(VENV_BIN / "spark-submit"),
        "--master",
        master,
        "--conf",
        "spark.ui.enabled=false",
        *(part for key, value in jvm.items() for part in ("--conf", f"{key}={value}")),
        str(script),
        *args,
    ]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command,
            cwd=PROJECT_ROOT,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return LocalJob(process, log_path, topology_id)


def submit_stream(
    config: Path,
    topology_id: str,
    lanes: int,
    *,
    env: Mapping[str, str],
    log_dir: Path,
    extra: Sequence[str] = (),
    baseline: bool = False,
    master: str = "local[2]",
) -> LocalJob:
    """``spark-submit`` the flow-controlled stream job (or the plain baseline) of a pipeline
    config, its log in ``<log_dir>/<topology_id>.log``: how tests and benchmarks start one."""
    args = ["--pipeline-config", str(config), "--topology-id", topology_id]
    return spark_submit(
        BASELINE_SCRIPT if baseline else STREAM_SCRIPT,
        [*args, "--parallelism", str(lanes), *extra],
        env=env,
        log_path=log_dir / f"{topology_id}.log",
        topology_id=topology_id,
        master=master,
    )
