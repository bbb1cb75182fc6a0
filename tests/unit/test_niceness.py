"""A stopped topology's shutdown gives way: every thread of a process at niceness 19, and
its session's autogroup."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from flowctl.spark.niceness import LOWEST, jvm_pid, lower_autogroup, lower_priority


def _niceness(pid: int, tid: int) -> int:
    # /proc/<pid>/task/<tid>/stat: field 19 is the nice value (after the command in parens)
    stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


def test_every_thread_of_a_process_is_lowered() -> None:
    code = "import threading, time\nthreading.Thread(target=time.sleep, args=(30,)).start()\n"
    child = subprocess.Popen([sys.executable, "-c", code + "time.sleep(30)"])
    try:
        tasks = Path(f"/proc/{child.pid}/task")
        for _ in range(100):  # until its second thread exists
            if len(list(tasks.iterdir())) >= 2:
                break
            subprocess.run(["sleep", "0.05"], check=True)
        tids = [int(t.name) for t in tasks.iterdir()]
        assert lower_priority(child.pid) == len(tids) >= 2
        assert {_niceness(child.pid, tid) for tid in tids} == {LOWEST}
    finally:
        child.kill()
        child.wait()


def test_a_process_that_is_gone_or_a_session_without_a_jvm_is_no_error() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert lower_priority(gone.pid) == 0
    assert jvm_pid(object()) is None


def test_the_autogroup_of_a_session_of_its_own_is_lowered() -> None:
    """spark-submit runs each topology in a session of its own: its autogroup, shared by
    every process of the session, is what competes with green's for the CPU."""
    if not Path("/proc/self/autogroup").exists():
        assert lower_autogroup(os.getpid()) is False
        return
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
    )
    try:
        assert lower_autogroup(child.pid) is True
        group = Path(f"/proc/{child.pid}/autogroup").read_text()
        assert group.split()[-1] == str(LOWEST), group
        assert Path("/proc/self/autogroup").read_text() != group  # ours is untouched
    finally:
        child.kill()
        child.wait()
