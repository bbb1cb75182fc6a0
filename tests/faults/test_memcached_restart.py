"""memcached (the MRWQ) restarted under a running stream."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.faults.conftest import FaultRun, Tally, check
from tests.spark.flow_harness import mrwq_length, wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.integration,
]


def test_memcached_restarted(
    fault_run: Callable[..., FaultRun],
    spark: Any,
    tallies: list[Tally],
    _session_services: Any,
) -> None:
    run = fault_run("faultmemc", seed=202, tuple_size=20, flow={"flush_update_time_s": 3.0})
    run.produce(2_000)
    job = run.submit("faultmemc-blue-1", 2)
    with run.feeding():
        wait_for(
            lambda: mrwq_length(run.flow.settings, run.name) > 0,
            timeout_s=180,
            job=job,
            what="results waiting in the MRWQ",
        )
        _session_services.stop("memcached")
        time.sleep(1.0)
        _session_services.start("memcached", "memcached_port")
        time.sleep(3.0)
    run.settle(job, "faultmemc-blue-1")
    assert "MRWQ gap repaired by re-dispatch" in job.log(), job.log_tail()
    check(run, "memcached restarted", spark, tallies)
