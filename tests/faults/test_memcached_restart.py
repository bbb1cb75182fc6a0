"""memcached (the MRWQ) restarted under a running stream."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.faults.conftest import FaultRun, Tally, check
from tests.spark.flow_harness import mrwq_length, wait_for

TOPOLOGY = "faultmemc-blue-1"

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
    # STALLED 3 s into the outage, windows of 2 s: the outage shows while it lasts.
    flow = {"flush_update_time_s": 3.0, "stall_after_s": 3.0, "metrics_window_s": 2.0}
    run = fault_run("faultmemc", seed=202, tuple_size=20, flow=flow)
    run.produce(2_000)
    job = run.submit(TOPOLOGY, 2)
    with run.feeding():
        # Mid-stream, past the first 2,000 records, and at a moment items wait in the MRWQ
        # (a flush at each batch's end leaves them there for milliseconds): the restart
        # loses them, and the flusher's head is far above the new queue's tail.
        wait_for(lambda: run.counted() >= 2_500, timeout_s=180, job=job, what="2,500 counted")
        deadline = time.monotonic() + 60
        while mrwq_length(run.flow.settings, run.name) == 0 and time.monotonic() < deadline:
            time.sleep(0.005)
        _session_services.stop("memcached")

        def stalled_on_memcached() -> bool:
            windows = run.flow.plane.metrics_windows(TOPOLOGY, limit=1)
            return (
                bool(windows)
                and windows[0].health == "STALLED"
                and ("memcached" in (windows[0].health_cause or ""))
            )

        # The planner's windows travel through memcached: the driver writes its own.
        wait_for(stalled_on_memcached, timeout_s=60, job=job, what="STALLED, memcached the cause")
        _session_services.start("memcached", "memcached_port")
        restarted = time.time()
        time.sleep(3.0)
    run.settle(job, TOPOLOGY)
    assert "MRWQ gap repaired by re-dispatch" in job.log(), job.log_tail()
    after = [
        w for w in run.flow.plane.metrics_windows(TOPOLOGY) if w.window_end.timestamp() > restarted
    ]
    assert any(w.health == "HEALTHY" for w in after), [(w.health, w.health_cause) for w in after]
    check(run, "memcached restarted", spark, tallies)
