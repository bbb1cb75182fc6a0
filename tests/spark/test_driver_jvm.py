"""A Spark driver the platform starts holds its whole heap from its start
(flowctl.adapters.driver_jvm): its resident memory at its first job is already the heap's
size, so what grows later is only what lives outside the heap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.lib.submit import job_env, spark_submit
from flowctl.config import Settings

APP = """
import os, sys
from pyspark.sql import SparkSession
spark = SparkSession.builder.appName("heap-check").getOrCreate()
assert spark.range(1000).count() == 1000
jvm = os.getppid()  # client mode: the Python driver is the driver JVM's child
cmdline = open(f"/proc/{jvm}/cmdline", "rb").read().split(b"\\0")
rss_kb = next(
    int(line.split()[1]) for line in open(f"/proc/{jvm}/status") if line.startswith("VmRSS:")
)
print("heap flags:", sorted(a.decode() for a in cmdline if a.startswith((b"-Xms", b"-Xmx"))))
print("resident MB:", rss_kb // 1024)
spark.stop()
"""


@pytest.mark.spark
@pytest.mark.integration
def test_a_drivers_heap_is_resident_at_its_size_from_its_first_job(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(APP)
    settings = Settings(home=tmp_path, spark_driver_memory="640m")
    env = job_env(settings, settings.resolved_database_url)
    job = spark_submit(
        script, [], env=env, log_path=tmp_path / "driver.log", topology_id="heap-check"
    )
    assert job.wait(timeout_s=300) == 0, job.log_tail()
    log = job.log()
    assert "heap flags: ['-Xms640m', '-Xmx640m']" in log, job.log_tail()
    resident = int(log.split("resident MB: ")[1].split()[0])
    # Without -Xms and pre-touch the JVM commits a fraction of the heap at start and
    # touches pages only as it allocates them; a small job does not reach the size.
    assert resident >= 640, (resident, os.uname().release)
