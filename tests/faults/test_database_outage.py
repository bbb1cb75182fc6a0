"""The database (PostgreSQL) unreachable for 20 s under a running stream."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

import pytest
import sqlalchemy as sa

from tests.faults.conftest import FaultRun, Tally, check
from tests.spark.flow_harness import rename_database, wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.integration,
]


def test_database_unreachable_for_20_s(
    fault_run: Callable[..., FaultRun], spark: Any, tallies: list[Tally], postgres_url: str
) -> None:
    run = fault_run(
        "faultdb",
        seed=303,
        database_url=postgres_url,
        tuple_size=20,
        flow={"persist_queue_capacity": 200},
    )
    run.produce(1_000)
    job = run.submit("faultdb-blue-1", 2)
    wait_for(lambda: run.counted() > 0, timeout_s=180, job=job, what="the first results")
    url = sa.make_url(postgres_url)
    assert url.database
    admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    away = f"{url.database}_away"
    try:
        with run.feeding():
            rename_database(admin, url.database, away)
            try:
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    assert job.process.poll() is None, job.log_tail()
                    time.sleep(0.5)
            finally:
                rename_database(admin, away, url.database)
    finally:
        admin.dispose()
    run.settle(job, "faultdb-blue-1")
    flush_failed = r"MRWQ mrwq\.faultdb: flush \(poll\): attempt \d+ failed"
    assert re.search(flush_failed, job.log()), job.log_tail()
    check(run, "database unreachable 20 s (PostgreSQL)", spark, tallies)
