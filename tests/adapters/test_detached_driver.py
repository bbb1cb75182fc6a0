"""A command started detached: it outlives its launcher, in a session of its own, its
output in the driver's log, its exit code recorded; found again and ended by its record."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flowctl.adapters.detached_driver import (
    ALIVE,
    DRIVER_DIR_ENV,
    ELSEWHERE,
    EXITED,
    SPARK_SUBMIT_ENV,
    DetachedDriver,
    LogTail,
    leftover_drivers,
)

#: The stream operator's Spark binary: it runs the launcher with FLOWCTL_PYTHON.
LAUNCHER = Path(__file__).resolve().parents[2] / "spark_jobs" / "spark-submit-detached"
SCRIPT = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(7))
print("driver up", flush=True)
print("no newline yet", end="", flush=True)
time.sleep(float(sys.argv[1]))
"""


def _wait(check: Callable[[], object], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def launch(tmp_path: Path) -> Iterator[Callable[[float], DetachedDriver]]:
    """Runs the launcher as the stream operator's hook does (it returns at once)."""
    started: list[DetachedDriver] = []

    def run(sleep_s: float) -> DetachedDriver:
        directory = tmp_path / "drivers" / f"topo-{len(started)}"
        env = {
            **os.environ,
            DRIVER_DIR_ENV: str(directory),
            SPARK_SUBMIT_ENV: sys.executable,  # stands for spark-submit: runs SCRIPT
            "FLOWCTL_PYTHON": sys.executable,
        }
        done = subprocess.run(
            [str(LAUNCHER), "-c", SCRIPT, str(sleep_s)],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        assert "started detached: keeper pid" in done.stdout
        driver = DetachedDriver.load(directory)
        assert driver is not None
        started.append(driver)
        return driver

    yield run
    for driver in started:
        driver.kill(signal.SIGKILL)


def test_the_command_outlives_its_launcher_in_a_session_of_its_own(
    launch: Callable[[float], DetachedDriver],
) -> None:
    driver = launch(60.0)
    assert driver.process_state() == ALIVE
    assert os.getsid(driver.keeper_pid) == driver.keeper_pid != os.getsid(0)
    _wait(lambda: "driver up" in driver.log_path.read_text())
    tail = LogTail(driver.log_path)
    assert list(tail.lines()) == ["driver up"]  # the unfinished line waits
    assert leftover_drivers(driver.directory.parents[1]) == [driver]

    assert driver.kill(signal.SIGTERM)  # the keeper forwards it; the command exits 7
    _wait(lambda: driver.process_state() == EXITED)
    assert driver.exit_code() == 7
    assert list(tail.rest()) == ["no newline yet"]
    assert leftover_drivers(driver.directory.parents[1]) == []
    assert not driver.kill()


def test_the_exit_code_of_a_command_that_ends_is_recorded(
    launch: Callable[[float], DetachedDriver],
) -> None:
    driver = launch(0.0)
    _wait(lambda: driver.process_state() == EXITED)
    assert driver.exit_code() == 0


def test_a_record_from_another_host_is_seen_as_elsewhere(tmp_path: Path) -> None:
    record = {"directory": str(tmp_path), "keeper_pid": 1, "host": "not-this-host", "started_at": 0}
    driver = DetachedDriver.from_json(record)
    assert driver.process_state() == ELSEWHERE
    assert not driver.local
    with pytest.raises(ValueError, match="no 'keeper_pid'"):
        DetachedDriver.from_json({"directory": str(tmp_path), "host": "h", "started_at": 0})


def test_a_tail_from_the_last_bytes_starts_at_a_whole_line(tmp_path: Path) -> None:
    log = tmp_path / "driver.log"
    log.write_text("".join(f"line {i:03d}\n" for i in range(100)))
    tail = LogTail.last(log, max_bytes=25)  # inside line 097
    assert list(tail.lines()) == ["line 098", "line 099"]
    with log.open("a") as f:
        f.write("line 100\n")
    assert list(tail.lines()) == ["line 100"]
    assert next(LogTail.last(log, max_bytes=10_000).lines()) == "line 000"


def test_the_launcher_without_a_driver_directory_says_which_variable() -> None:
    env = {k: v for k, v in os.environ.items() if k != DRIVER_DIR_ENV}
    done = subprocess.run(
        [str(LAUNCHER), "--version"],
        env={**env, "FLOWCTL_PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert f"{DRIVER_DIR_ENV} is not set" in done.stderr
