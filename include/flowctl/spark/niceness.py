"""Lower the CPU priority of a stopped topology's shutdown.

A replaced blue records STOPPED first and only then stops Spark (``spark.stop()`` and the
JVM's exit: about a second of CPU). On a small machine that second lands in green's first
batches, which are the end of the replacement's output pause. Once STOPPED is recorded
nothing waits for the shutdown, so its threads (the Python driver's and the driver JVM's)
give way to any other process: niceness 19, per thread (Linux applies ``setpriority`` to
one thread, and a JVM's GC and shutdown threads exist already).

Thread niceness alone is not enough where the kernel groups tasks by session
(``kernel.sched_autogroup_enabled``, on by default on desktop and many server kernels):
CPU is then shared fairly between sessions first, and every topology runs in a session
of its own (``spark-submit`` starts one), so a niceness-19 blue still got half the
cores beside green. The session's autogroup is lowered too (``/proc/<pid>/autogroup``),
which covers every process of blue's session: the JVM, the Python driver, the planner
and the Python workers. Only where the session is the topology's own (``flowctl``'s
submit starts one per topology); Airflow runs its tasks' spark-submit in the worker's
session, one autogroup for blue and green, where thread niceness already counts.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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


def lower_autogroup(pid: int, niceness: int = LOWEST) -> bool:
    """Set the nice value of ``pid``'s scheduler autogroup (its session's share of the CPU
    against other sessions); ``False`` where autogroups are off or the write is refused."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(niceness))
        return True
    except OSError:
        return False


def jvm_pid(spark: SparkSession) -> int | None:
    """The pid of the SparkSession's driver JVM (``None`` if it cannot be asked)."""
    try:
        jvm = spark.sparkContext._jvm
        if jvm is None:  # a Spark Connect session has no JVM gateway
            return None
        return int(jvm.java.lang.ProcessHandle.current().pid())
    except Exception:
        return None


def yield_shutdown(spark: SparkSession) -> None:
    """Lower this Python driver's and its JVM's threads, and their session's autogroup,
    before ``spark.stop()``."""
    threads = lower_priority(os.getpid())
    jvm = jvm_pid(spark)
    if jvm is not None and jvm != os.getpid():
        threads += lower_priority(jvm)
    # Only a session of the topology's own (spark-submit's JVM leads it): lowering a
    # shared one would slow whatever else runs in it (a shell, a test run) for good.
    own_session = os.getsid(0) in {os.getpid(), jvm}
    group = own_session and lower_autogroup(os.getpid())
    log.info(
        "shutdown at niceness %d (%d thread(s)%s)",
        LOWEST,
        threads,
        ", and the session's autogroup" if group else "; session's autogroup unchanged",
    )
