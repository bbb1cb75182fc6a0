"""Helpers to run the stream job the way Airflow does: ``spark-submit`` in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from flowctl.config import PROJECT_ROOT, Settings

VENV_BIN = Path(sys.executable).parent


@dataclass
class SubmittedJob:
    """A running ``spark-submit`` of a stream job, with its log file."""

    process: subprocess.Popen
    log_path: Path

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"job did not exit within {timeout_s} s; log:\n{self.log_tail()}")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@dataclass
class StreamJobRunner:
    """Starts stream jobs against the session's broker and one test database."""

    settings: Settings
    database_url: str
    work_dir: Path

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.settings.to_env())
        env["FLOWCTL_DATABASE_URL"] = self.database_url
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
        return env

    def submit(self, *args: str, name: str) -> SubmittedJob:
        log_path = self.work_dir / f"{name}.log"
        with log_path.open("wb") as log:
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
                    *args,
                ],
                cwd=PROJECT_ROOT,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        return SubmittedJob(process, log_path)


def wait_for(
    condition: Callable[[], bool], *, timeout_s: float, job: SubmittedJob, what: str
) -> None:
    """Poll ``condition()`` until true; fail with the job's log if it exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        if job.process.poll() is not None:
            pytest.fail(
                f"job exited with {job.process.returncode} while waiting for {what}; "
                f"log:\n{job.log_tail()}"
            )
        time.sleep(0.5)
    job.kill()
    pytest.fail(f"timed out after {timeout_s} s waiting for {what}; log:\n{job.log_tail()}")
