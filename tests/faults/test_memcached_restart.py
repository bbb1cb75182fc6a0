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
        # Mid-stream, past the first 2,000 records, and at a moment items wait in the MRWQ
        # (a flush at each batch's end leaves them there for milliseconds): the restart
        # loses them, and the flusher's head is far above the new queue's tail.
        wait_for(lambda: run.counted() >= 2_500, timeout_s=180, job=job, what="2,500 counted")
        deadline = time.monotonic() + 60
        while mrwq_length(run.flow.settings, run.name) == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        _session_services.stop("memcached")
        time.sleep(1.0)
        _session_services.start("memcached", "memcached_port")
        time.sleep(3.0)
    run.settle(job, "faultmemc-blue-1")
    assert "MRWQ gap repaired by re-dispatch" in job.log(), job.log_tail()
    check(run, "memcached restarted", spark, tallies)
