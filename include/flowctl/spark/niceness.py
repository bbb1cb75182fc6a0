"""Lower the CPU priority of a stopped topology's shutdown.

A replaced blue records STOPPED first and only then stops Spark (``spark.stop()`` and the
JVM's exit: about a second of CPU). On a small machine that second lands in green's first
batches, which are the end of the replacement's output pause. Once STOPPED is recorded
nothing waits for the shutdown, so its threads (the Python driver's and the driver JVM's)
give way to any other process: niceness 19, per thread (Linux applies ``setpriority`` to
one thread, and a JVM's GC and shutdown threads exist already).
"""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger(__name__)

#: The lowest priority (highest niceness) on Linux.
LOWEST = 19


def lower_priority(pid: int, niceness: int = LOWEST) -> int:
    """Set every thread of process ``pid`` to ``niceness``; returns how many were set.

    Best effort: 0 where ``/proc`` or ``setpriority`` is missing or refuses (another
    user's process); never raises."""
    try:
        tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except (OSError, ValueError):
        tids = [pid]
    done = 0
    for tid in tids:
        try:
            os.setpriority(os.PRIO_PROCESS, tid, niceness)
            done += 1
        except (OSError, AttributeError):  # gone meanwhile, not ours, or not POSIX
            continue
    return done


def jvm_pid(spark: Any) -> int | None:
    """The pid of the SparkSession's driver JVM (``None`` if it cannot be asked)."""
    try:
        return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
    except Exception:
        return None


def yield_shutdown(spark: Any) -> None:
    """Lower this Python driver's and its JVM's threads before ``spark.stop()``."""
    threads = lower_priority(os.getpid())
    jvm = jvm_pid(spark)
    if jvm is not None and jvm != os.getpid():
        threads += lower_priority(jvm)
    log.debug("shutdown at niceness %d (%d thread(s))", LOWEST, threads)
