"""The application the driver's class-data sharing archive is dumped from
(:mod:`flowctl.adapters.class_archive`): what a topology's driver loads before and while its
first batches run, so that the archive holds those classes.

A session like the jobs' (:func:`flowctl.spark.job.build_session`), a DataFrame job, a
Python job through Arrow (the lanes' ``mapInArrow``) and a short micro-batch stream (the
streaming engine, its offset and commit logs, ``foreachBatch``), then a clean stop: the
JVM writes the archive as it exits.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from typing import Any


def _pass_through(batches: Iterator[Any]) -> Iterator[Any]:
    yield from batches


def main() -> int:
    """Run the workload and stop the session (the JVM then dumps the archive)."""
    from flowctl.spark.job import build_session

    spark = build_session("flowctl-class-archive")
    try:
        spark.sparkContext.setLogLevel("WARN")
        df = spark.range(10_000)
        total = df.selectExpr("sum(id) AS total").collect()[0]["total"]
        passed = df.mapInArrow(_pass_through, df.schema).count()
        if (total, passed) != (49_995_000, 10_000):
            raise RuntimeError(f"the archive's workload went wrong: sum {total}, rows {passed}")
        with tempfile.TemporaryDirectory(prefix="flowctl-class-archive-") as checkpoint:
            seen: list[int] = []
            query = (
                spark.readStream.format("rate")
                .option("rowsPerSecond", 100)
                .load()
                .writeStream.option("checkpointLocation", checkpoint)
                .trigger(processingTime="200 milliseconds")
                .foreachBatch(lambda batch, batch_id: seen.append(batch.count()))
                .start()
            )
            try:
                while len(seen) < 3 and query.isActive:
                    query.awaitTermination(1)
            finally:
                query.stop()
    finally:
        spark.stop()
    return 0
