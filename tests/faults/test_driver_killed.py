"""The driver SIGKILLed three times at seeded random moments, restarted each time."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.faults.conftest import FaultRun, Tally, check
from tests.spark.flow_harness import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.integration,
]


# deep: the default run SIGKILLs a driver mid-stream twice already (clickstream's windows,
# blue in a handover's overlap); this one kills three times at seeded moments.
@pytest.mark.deep
def test_driver_sigkilled_three_times_at_random_moments(
    fault_run: Callable[..., FaultRun], spark: Any, tallies: list[Tally]
) -> None:
    run = fault_run("faultkill", seed=101, flow={"flush_update_time_s": 1.0})
    rng = random.Random(20261121)
    run.produce(2_000)
    with run.feeding():
        for attempt in (1, 2, 3):
            before = run.counted()
            job = run.submit(f"faultkill-blue-{attempt}", rng.choice([2, 4]))
            wait_for(
                lambda before=before: run.counted() > before,
                timeout_s=180,
                job=job,
                what=f"progress of run {attempt}",
            )
            time.sleep(rng.uniform(0.0, 3.0))
            job.kill_hard()
            assert run.counted() < len(run.produced), "the kill came after the stream's end"
    job = run.submit("faultkill-blue-4", 4)
    run.settle(job, "faultkill-blue-4")
    assert "spout built from the database" in job.log()
    check(run, "driver SIGKILL x3 (seeded moments), restarted", spark, tallies)
