"""The local spark-submit launcher: its environment, its command, and stopping a job's group.

No Spark here: a fake ``spark-submit`` (a shell script) stands in for the real one, and
the stop tests run ``sh`` with a ``sleep`` child in its own session, which is what a
job's process group looks like (the launcher and the processes it starts).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.lib import submit
from bench.lib.submit import LocalJob, job_env, spark_submit
from flowctl.adapters import class_archive, driver_jvm
from flowctl.config import PROJECT_ROOT, Settings


def _gone(pid: int) -> bool:
    """``pid`` has exited: no such process, or a zombie nobody has reaped yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in {"Z", "X"}


def _wait_gone(pid: int, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.02)
    return False


def _group_job(tmp_path: Path, script: str) -> tuple[LocalJob, int]:
    """``sh -c script`` in its own session; ``script`` prints a child's pid when it is ready."""
    log_path = tmp_path / "job.log"
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            ["sh", "-c", script], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    job = LocalJob(process, log_path, "unit-blue-1")
    deadline = time.monotonic() + 10
    while not job.log().strip():
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.02)
    return job, int(job.log().split()[0])


@pytest.fixture
def sleeping(tmp_path: Path) -> Iterator[tuple[LocalJob, int]]:
    """A job whose shell waits on a ``sleep 60`` child in the same process group."""
    job, child = _group_job(tmp_path, "sleep 60 & echo $!; wait")
    yield job, child
    job.kill_hard()


def test_job_env_is_this_environment_plus_the_platform_and_spark_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOWCTL_UNIT_MARKER", "kept")
    monkeypatch.setenv("PATH", "/usr/bin")
    settings = Settings(home=tmp_path, kafka_port=19092)
    env = job_env(settings, "sqlite:///x.db", {"SPARK_LOCAL_IP": "10.0.0.1", "EXTRA": "1"})
    assert env["FLOWCTL_UNIT_MARKER"] == "kept"
    for key, value in settings.to_env().items():
        if key != "FLOWCTL_DATABASE_URL":
            assert env[key] == value, key
    assert env["FLOWCTL_DATABASE_URL"] == "sqlite:///x.db"
    assert env["PYSPARK_PYTHON"] == env["PYSPARK_DRIVER_PYTHON"] == sys.executable
    assert env["PYTHONPATH"] == str(PROJECT_ROOT)
    assert env["PATH"] == f"{Path(sys.executable).parent}{os.pathsep}/usr/bin"
    assert (env["SPARK_LOCAL_IP"], env["EXTRA"]) == ("10.0.0.1", "1")  # extra comes last
    assert job_env(settings, "sqlite:///x.db")["SPARK_LOCAL_IP"] == "127.0.0.1"


def test_spark_submit_runs_the_venvs_spark_submit_in_a_session_of_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    fake = fake_bin / "spark-submit"
    fake.write_text(
        "#!/bin/sh\n"
        'echo "args: $*"\n'
        'echo "cwd: $(pwd)"\n'
        'echo "db: $FLOWCTL_DATABASE_URL"\n'
        'echo "ids: $$ $(cut -d" " -f5,6 /proc/$$/stat)"\n'
    )
    fake.chmod(0o755)
    monkeypatch.setattr(submit, "VENV_BIN", fake_bin)
    log_path = tmp_path / "t.log"
    script = tmp_path / "job.py"
    env = {
        "PATH": os.environ["PATH"],
        "FLOWCTL_DATABASE_URL": "sqlite:///t.db",
        "FLOWCTL_SPARK_CLASS_ARCHIVE": "off",  # the class archive: below
    }
    job = spark_submit(script, ["--a", "1"], env=env, log_path=log_path, topology_id="t-blue-1")
    assert (job.topology_id, job.log_path) == ("t-blue-1", log_path)
    assert job.wait(timeout_s=10) == 0
    log = job.log()
    heap = driver_jvm.java_options("1g", archive=False)  # the settings' size, fixed
    assert (
        "args: --master local[2] --conf spark.ui.enabled=false --conf spark.driver.memory=1g "
        f"--conf spark.driver.extraJavaOptions={heap} {script} --a 1"
    ) in log
    assert heap.startswith("-Xms1g -XX:+AlwaysPreTouch")
    assert f"cwd: {PROJECT_ROOT}" in log
    assert "db: sqlite:///t.db" in log
    pid, group, session = log.split("ids: ")[1].split()
    assert pid == group == session  # its own session, so its own process group
    again = spark_submit(
        script, [], env=env, log_path=log_path, topology_id="t-blue-1", master="local[1]"
    )
    assert again.wait(timeout_s=10) == 0
    assert log_path.read_text().startswith(log)  # appended: a restart keeps one log
    assert "--master local[1]" in again.log_tail(4)
    archive = tmp_path / "spark-driver-x.jsa"
    archive.write_bytes(b"")
    monkeypatch.setattr(class_archive, "archive_path", lambda: archive)
    env["FLOWCTL_SPARK_CLASS_ARCHIVE"] = "on"
    mapped = spark_submit(script, [], env=env, log_path=log_path, topology_id="t-blue-1")
    assert mapped.wait(timeout_s=10) == 0
    assert f" -XX:SharedArchiveFile={archive} {script}" in mapped.log_tail(4)


def test_log_tail_is_the_last_lines(tmp_path: Path) -> None:
    job, _ = _group_job(tmp_path, "echo 1; for i in 2 3 4 5; do echo line $i; done")
    assert job.wait(timeout_s=10) == 0
    assert job.log_tail(2) == "line 4\nline 5"
    assert job.log().splitlines()[0] == "1"


def test_terminate_stops_the_whole_group(sleeping: tuple[LocalJob, int]) -> None:
    job, child = sleeping
    assert job.alive() and not _gone(child)
    assert job.terminate(timeout_s=10) == -signal.SIGTERM
    assert not job.alive()
    assert _wait_gone(child), "the sleep child outlived its group's SIGTERM"


def test_terminate_ends_with_sigkill_when_sigterm_is_ignored(tmp_path: Path) -> None:
    job, child = _group_job(tmp_path, "trap '' TERM; sleep 60 & echo $!; wait")
    try:
        started = time.monotonic()
        assert job.terminate(timeout_s=0.5) == -signal.SIGKILL
        assert time.monotonic() - started < 10
        assert _wait_gone(child)
    finally:
        job.kill_hard()


def test_kill_hard_sigkills_the_whole_group(sleeping: tuple[LocalJob, int]) -> None:
    job, child = sleeping
    job.kill_hard()
    assert job.process.returncode == -signal.SIGKILL
    assert _wait_gone(child)
    job.kill_hard()  # a dead job: nothing to do


def test_wait_returns_the_exit_code(tmp_path: Path) -> None:
    job, _ = _group_job(tmp_path, "echo 0; exit 3")
    assert job.wait(timeout_s=10) == 3


def test_a_job_outliving_its_wait_is_killed_and_named(sleeping: tuple[LocalJob, int]) -> None:
    job, child = sleeping
    with pytest.raises(TimeoutError, match=r"(?s)unit-blue-1 did not exit within 0.2 s.*log:"):
        job.wait(timeout_s=0.2)
    assert job.process.returncode == -signal.SIGKILL
    assert _wait_gone(child)
