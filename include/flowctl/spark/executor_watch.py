"""Say in the driver's log when a job on a Spark cluster waits for executors.

On a standalone master an application whose cores are all taken gets no executor
and waits; Spark's only word on it is a WARN of TaskSchedulerImpl (``Initial job has
not accepted any resources``), and only once a job has been submitted. A stream that
waited so, or a reconcile beside a stream and its green, looked like a slow start in
its task log for minutes. :class:`ExecutorWatch` counts the application's executors
from the driver's own monitoring REST API (``/api/v1/applications/<id>/executors`` on
``SparkContext.uiWebUrl``, which lists the driver too) from the session's start, and logs
a WARNING after
:data:`WARN_AFTER_S` without one, again every :data:`WARN_AFTER_S` while it lasts,
and one INFO line once executors came. A local master has no such wait: no watch.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["CHECK_EVERY_S", "WARN_AFTER_S", "ExecutorWatch", "executor_count", "watch_session"]

log = logging.getLogger("flowctl.job")

#: Seconds without an executor before the first warning (Spark's own comes at 15 s, and
#: only once a job waits); the issue asks for a word in the task log within 30 s.
WARN_AFTER_S = 15.0
#: Seconds between two counts of the executors.
CHECK_EVERY_S = 2.0


class ExecutorWatch:
    """Decides what to log about the executors of one application; :meth:`check` is pure
    (time passed in), :meth:`start` runs it on a daemon thread until executors come.

    :param count: the number of executors registered now (the driver not counted).
    :param master: the master's URL, named in the warning.
    :param started_at: ``clock()`` when the application asked for executors.
    """

    def __init__(
        self,
        count: Callable[[], int],
        master: str,
        started_at: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.count = count
        self.master = master
        self.started_at = started_at
        self.clock = clock
        self.warned_at: float | None = None
        self.done = threading.Event()

    def check(self, now: float, executors: int) -> tuple[int, str] | None:
        """The (level, message) to log at ``now`` with ``executors`` registered, if any;
        sets :attr:`done` once executors are there."""
        waited = now - self.started_at
        if executors > 0:
            self.done.set()
            if self.warned_at is None:
                return None
            return logging.INFO, f"{executors} executor(s) registered after {waited:.0f} s"
        last = self.started_at if self.warned_at is None else self.warned_at
        if now - last < WARN_AFTER_S:
            return None
        self.warned_at = now
        return logging.WARNING, (
            f"waiting for cluster resources: no executor after {waited:.0f} s; the Spark "
            f"master {self.master} has no free cores or memory for this job (the slot "
            "plan in docs/deployment.md says what each job takes; the master's web UI "
            "lists the applications holding them)"
        )

    def _run(self) -> None:
        while not self.done.wait(CHECK_EVERY_S):
            try:
                executors = self.count()
            except Exception as exc:  # a stopped context: nothing left to watch
                log.debug("executor watch ended: %s", exc)
                return
            said = self.check(self.clock(), executors)
            if said is not None:
                log.log(*said)

    def start(self) -> ExecutorWatch:
        threading.Thread(target=self._run, name="executor-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self.done.set()


def executor_count(ui_url: str, app_id: str, timeout_s: float = 5.0) -> int:
    """Executors registered with the driver whose web UI is ``ui_url`` (the driver not
    counted), from Spark's monitoring REST API: public and documented, where PySpark's
    ``StatusTracker`` has no executor list."""
    url = f"{ui_url.rstrip('/')}/api/v1/applications/{app_id}/executors"
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        executors = json.load(response)
    return sum(1 for e in executors if e.get("id") != "driver")


def watch_session(spark: SparkSession) -> ExecutorWatch | None:
    """Start an :class:`ExecutorWatch` on ``spark``'s application unless its master is local."""
    sc = spark.sparkContext
    master = sc.master
    if master is None or master.startswith("local"):  # a started context always has one
        return None
    ui_url, app_id = sc.uiWebUrl, sc.applicationId
    if not ui_url:  # spark.ui.enabled=false: no monitoring API to ask
        log.info("no Spark web UI: the driver cannot say whether it waits for executors")
        return None
    return ExecutorWatch(lambda: executor_count(ui_url, app_id), master, time.monotonic()).start()
