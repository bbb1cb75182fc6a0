"""Where a stream job's start-up time goes: one INFO line per phase, timed from spark-submit.

A replacement waits for green's start-up (issue 12: decision-to-done), so each phase
is logged as ``start-up <phase>: +X.XX s after spark-submit`` and a benchmark can
read the breakdown from the job's log (``bench/replacement.py``). The origin is the
start of the ``spark-submit`` process: in local and client mode the Python driver is
a child of spark-submit's JVM (the launcher script ``exec``\\s into it, so the JVM
keeps its pid), and Linux's ``/proc`` gives that parent's start time. Anywhere else
(no ``/proc``, another parent) the origin is the driver's own start and the lines say
so.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("flowctl.job")


def process_started_at(pid: int) -> float | None:
    """The epoch time at which process ``pid`` started (``None`` without ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        # Field 22 (starttime, clock ticks since boot) counts from after the ")" that ends
        # the command name, which may itself hold spaces.
        ticks = int(stat.rsplit(")", 1)[1].split()[19])
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _parent_is_spark_submit(ppid: int) -> bool:
    try:
        cmd = Path(f"/proc/{ppid}/cmdline").read_bytes()
    except OSError:
        return False
    return b"SparkSubmit" in cmd or b"spark-submit" in cmd


class StartupClock:
    """Logs each start-up phase once, as seconds since spark-submit (or the driver) started.

    ``btime`` and the start ticks have a resolution of 1 s and 10 ms: the origin is
    exact to about 1 s across reboots' clock changes, to 10 ms otherwise, which is
    what a breakdown of a 10-30 s start needs.
    """

    def __init__(self, topology_id: str = "") -> None:
        self.topology_id = topology_id
        ppid = os.getppid()
        parent = process_started_at(ppid) if _parent_is_spark_submit(ppid) else None
        own = process_started_at(os.getpid())
        self.origin_name = "spark-submit" if parent is not None else "the driver's start"
        self.origin = parent if parent is not None else (own if own is not None else time.time())
        self.marks: dict[str, float] = {}
        self._logged = False
        if parent is not None and own is not None:
            # What the JVM took before it forked the Python driver (launcher, JVM start).
            self.marks["python driver forked"] = own - parent

    def mark(self, phase: str) -> float:
        """Log ``phase`` (the first time only) with its offset from the origin; returns it."""
        if phase in self.marks:
            return self.marks[phase]
        if not self._logged:
            self._logged = True
            for earlier, at in self.marks.items():  # known before logging was set up
                self._log(earlier, at)
        at = self.marks[phase] = time.time() - self.origin
        self._log(phase, at)
        return at

    def _log(self, phase: str, at: float) -> None:
        who = f"topology {self.topology_id} " if self.topology_id else ""
        log.info("%sstart-up %s: +%.2f s after %s", who, phase, at, self.origin_name)

    def summary(self) -> str:
        """``phase +X.XX s, ...`` of every mark so far, in time order."""
        ordered = sorted(self.marks.items(), key=lambda item: item[1])
        return ", ".join(f"{phase} +{at:.2f} s" for phase, at in ordered)


class SessionStarter:
    """Builds the SparkSession on a thread while the driver's main thread goes on.

    Why: ``getOrCreate`` takes about 6 s on this machine (the SparkContext's JVM side:
    class loading, the block manager, the session state), nearly all of it in the JVM
    while the Python thread waits on py4j; the driver's own imports (SQLAlchemy, Kafka,
    the pipeline), the config and the registration of the topology take another 2-3 s
    and need no session. Started first, the session is built behind them.
    """

    def __init__(self, app_name: str, build: Callable[[str], SparkSession]) -> None:
        import threading

        self.app_name = app_name
        self._build_session = build
        self._spark: SparkSession | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._build, name="spark-session", daemon=True)
        self._thread.start()

    def _build(self) -> None:
        try:
            self._spark = self._build_session(self.app_name)
        except BaseException as exc:  # handed to result(), raised in the main thread
            self._error = exc

    def result(self) -> SparkSession:
        """The session once built; the build's exception if it failed."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._spark is not None  # _build set it, since it did not raise
        return self._spark

    def discard(self) -> None:
        """Stop the session (the job could not start): the JVM must not outlive the run."""
        try:
            spark = self.result()
        except BaseException:
            return
        stop = getattr(spark, "stop", None)
        if callable(stop):
            stop()
