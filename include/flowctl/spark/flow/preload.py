"""Warm the Spark Python workers while the streaming query starts.

A topology's first micro-batch (a standby's warm-up batch) is Spark's slow one: the
``pyspark.daemon`` is started, workers are forked and each imports the lane's code,
Kafka's and memcached's clients and the pipeline before it reads a record. With
``spark.python.worker.reuse`` the workers stay up between tasks, so a throw-away job
run on its own thread right after the SparkSession exists, beside the query's start
(which spends its time in other processes: the data source's planner and the
streaming source runner), leaves warm workers for that first batch. The job's Spark
code paths (scheduler, task serialisation) are warm by then too.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("flowctl.job")

#: Modules a lane's ``read()`` imports on a cold worker (``definition`` comes on top).
WORKER_MODULES = (
    "flowctl.spark.flow.reader",
    "flowctl.spark.flow.lane",
    "flowctl.adapters.kafka_log",
    "flowctl.adapters.memcached_store",
)


def preload_worker(_: Iterable[int], definition: str) -> Iterator[int]:
    """Import what a lane needs, in a Spark Python worker; yields the worker's pid."""
    for name in (*WORKER_MODULES, definition):
        importlib.import_module(name)
    yield os.getpid()


def warm_workers(
    spark: SparkSession,
    definition: str,
    topology_id: str,
    on_done: Callable[[], object] | None = None,
) -> threading.Thread:
    """Run :func:`preload_worker` on every task slot, on a daemon thread; failures are
    logged, never raised (the query's own first batch then simply starts cold).
    ``on_done`` is called once the workers are warm (the start-up clock's mark)."""

    def run() -> None:
        started = time.monotonic()
        try:
            sc = spark.sparkContext
            slots = max(1, int(sc.defaultParallelism))
            pids = (
                sc.parallelize(range(slots), slots)
                .mapPartitions(lambda part: preload_worker(part, definition))
                .collect()
            )
            log.info(
                "topology %s: %d Python worker(s) warmed in %.2f s",
                topology_id,
                len(set(pids)),
                time.monotonic() - started,
            )
            if on_done is not None:
                on_done()
        except Exception as exc:  # warming is an optimisation only
            log.warning("topology %s: warming the Python workers failed: %s", topology_id, exc)

    thread = threading.Thread(target=run, name="warm-workers", daemon=True)
    thread.start()
    return thread
