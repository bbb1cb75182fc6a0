"""Warm the Spark Python workers while the streaming query starts.

A topology's first micro-batch (a standby's warm-up batch) is Spark's slow one: the
``pyspark.daemon`` is started, workers are forked and each imports the lane's code,
Kafka's and memcached's clients and the pipeline before it reads a record. With
``spark.python.worker.reuse`` the workers stay up between tasks, so a throw-away job
run on its own thread right after the SparkSession exists, beside the query's start
(which spends its time in other processes: the data source's planner and the
streaming source runner), leaves warm workers for that first batch. The job's Spark
code paths (scheduler, task serialisation) are warm by then too.

The job is a ``mapInArrow``, not an RDD job: Spark keeps one daemon per worker
environment, and a SQL Python runner (a Python data source's read, ``mapInArrow``) sets
variables an RDD's does not (the traceback settings), so an RDD job warmed a
daemon of its own that the lanes never used, and the first batch still forked and
imported its workers (measured: 3 s of a cold green's warm-up batch, 0.3 s of it the
lanes' work).
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
    import pyarrow as pa
    from pyspark.sql import SparkSession

log = logging.getLogger("flowctl.job")

#: Modules a lane's ``read()`` imports on a cold worker (``definition`` comes on top).
WORKER_MODULES = (
    "flowctl.spark.flow.reader",
    "flowctl.spark.flow.lane",
    "flowctl.spark.flow.plan",
    "flowctl.spark.flow.worker_gc",
    "flowctl.adapters.kafka_log",
    "flowctl.adapters.kafka_ends",
    "flowctl.adapters.memcached_store",
)
#: The warming job's one column: the pid of the worker that ran each task.
PRELOAD_SCHEMA = "pid long"


def preload_batches(batches: Iterable[pa.RecordBatch], definition: str) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: import what a lane needs in this Spark Python worker;
    yields one row, the worker's pid."""
    import pyarrow as pa

    for name in (*WORKER_MODULES, definition):
        importlib.import_module(name)
    for _ in batches:
        pass
    yield pa.RecordBatch.from_pydict({"pid": [os.getpid()]})


def warm_workers(
    spark: SparkSession,
    definition: str,
    topology_id: str,
    on_done: Callable[[], object] | None = None,
) -> threading.Thread:
    """Run :func:`preload_batches` on every task slot, on a daemon thread; failures are
    logged, never raised (the query's own first batch then simply starts cold).
    ``on_done`` is called once the workers are warm (the start-up clock's mark)."""

    def run() -> None:
        started = time.monotonic()
        try:
            slots = max(1, int(spark.sparkContext.defaultParallelism))
            rows = (
                spark.range(0, slots, 1, slots)
                .mapInArrow(lambda batches: preload_batches(batches, definition), PRELOAD_SCHEMA)
                .collect()
            )
            log.info(
                "topology %s: %d Python worker(s) warmed in %.2f s",
                topology_id,
                len({row["pid"] for row in rows}),
                time.monotonic() - started,
            )
            if on_done is not None:
                on_done()
        except Exception as exc:  # warming is an optimisation only
            log.warning("topology %s: warming the Python workers failed: %s", topology_id, exc)

    thread = threading.Thread(target=run, name="warm-workers", daemon=True)
    thread.start()
    return thread
