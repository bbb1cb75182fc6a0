"""1% poison records: log-ETL lines from flowctl.loggen, the malformed ones in the DLQ."""

from __future__ import annotations

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


# deep: the poison storm below is the same path with twenty times the poison
@pytest.mark.deep
def test_one_percent_poison_records_end_in_the_dlq(
    fault_run: Callable[..., FaultRun], spark: Any, tallies: list[Tally]
) -> None:
    from flowctl.loggen import labelled_lines

    source = (line.text for line in labelled_lines(1_000_000, seed=505, malformed_fraction=0.01))
    run = fault_run("faultpoison", shipped="logetl", source=source, partitions=2, tuple_size=25)
    run.produce(1_500)
    job = run.submit("faultpoison-blue-1", 2)
    with run.feeding():
        wait_for(lambda: run.counted() > 0, timeout_s=180, job=job, what="the first rows")
        time.sleep(3.0)
    run.settle(job, "faultpoison-blue-1")
    tally = check(run, "1% poison records (logetl malformed lines)", spark, tallies)
    assert tally.dlq > 0 and tally.reconcile["dlq"] == tally.dlq, tally


def test_a_poison_storm_does_not_stall_the_stream(
    fault_run: Callable[..., FaultRun], spark: Any, tallies: list[Tally]
) -> None:
    """A fifth of the input malformed for a while, between good lines: every good line
    stored once, every malformed one in the DLQ with its reason (isolated in the lanes)."""
    import itertools

    from flowctl.loggen import labelled_lines

    def lines(count: int, seed: int, malformed: float) -> Any:
        return (x.text for x in labelled_lines(count, seed=seed, malformed_fraction=malformed))

    source = itertools.chain(
        lines(1_000, 606, 0.0), lines(2_000, 607, 0.2), lines(1_000_000, 608, 0.0)
    )
    run = fault_run("faultstorm", shipped="logetl", source=source, partitions=2, tuple_size=25)
    run.produce(1_000)
    job = run.submit("faultstorm-blue-1", 2)
    wait_for(lambda: run.counted() > 0, timeout_s=180, job=job, what="the first rows")
    run.produce(2_000)  # the storm: one line in five malformed
    with run.feeding():
        time.sleep(3.0)
    run.settle(job, "faultstorm-blue-1")
    tally = check(run, "poison storm: 20% malformed log lines for 2,000 lines", spark, tallies)
    assert tally.dlq >= 300 and tally.reconcile["dlq"] == tally.dlq, tally
