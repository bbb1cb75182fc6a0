"""A local Spark session in the test process, for tests that run Spark batches or short
queries themselves rather than submitting a job."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def local_session(app_name: str) -> Iterator[Any]:
    """The platform's session (:func:`flowctl.spark.job.build_session`) on loopback, without
    Spark's UI, logging warnings and worse; stopped on exit."""
    from flowctl.spark.job import build_session

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", "--conf spark.ui.enabled=false pyspark-shell")
    session = build_session(app_name)
    session.sparkContext.setLogLevel("WARN")
    try:
        yield session
    finally:
        session.stop()
