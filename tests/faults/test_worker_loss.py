"""Spark's Python workers killed while a gap's rebuild runs (docs/flow-control.md, "A
rebuild waits for the queue").

The invariant broke on the cluster when a worker's loss left a gap in the MRWQ and a task
Spark re-ran wrote its result after the flusher's resync: the rebuild read
``applied_ranges`` without it and cut a range that overlapped it. Here the same sequence
runs on purpose: results waiting in the MRWQ are taken away (as memcached evicts them),
and while the flusher repairs the gap and the planner rebuilds, the job's Python workers
are SIGKILLed, so that Spark re-runs their tasks (``local[2,4]``: up to four attempts, as
a cluster retries an executor's tasks). No range may be cut twice, the
topology shows RECOVERING with the gap as the cause, counts the rebuild on its windows,
and every record is counted once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bench.lib.submit import LocalJob
from flowctl.adapters.memcached_store import MemcachedStore
from flowctl.core.persistence import item_key, mrwq_namespace, queue_counters
from flowctl.services.process import process_tree
from tests.faults.conftest import FaultRun, Tally, check
from tests.spark.flow_harness import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.integration,
]

TOPOLOGY = "faultgap-blue-1"


def _evict_queued(run: FaultRun, timeout_s: float = 60.0) -> int:
    """Delete items waiting in the MRWQ (appended, not flushed), as an eviction would,
    until at least one is gone; how many were deleted."""
    store = MemcachedStore(run.flow.settings.memcached_address)
    ns = mrwq_namespace(run.name)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        tail, head = queue_counters(store, ns)
        if tail is not None and head is not None and tail >= head:
            keys = [item_key(ns, seq) for seq in range(head, tail + 1)]
            present = store.get_many(keys)
            if present:
                store.delete_many(list(present))
                return len(present)
        time.sleep(0.01)
    raise AssertionError(f"no item waited in the MRWQ {ns} within {timeout_s} s")


def _python_workers(job: LocalJob) -> list[int]:
    """The job's Python workers (``pyspark.daemon`` and the workers it forked); not the
    driver's Python nor the planner's (the source runner)."""
    workers = []
    for pid in process_tree(job.process.pid):
        with contextlib.suppress(OSError):
            if b"pyspark.daemon" in Path(f"/proc/{pid}/cmdline").read_bytes():
                workers.append(pid)
    return workers


def _kill_workers(job: LocalJob) -> int:
    pids = _python_workers(job)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def test_python_workers_killed_while_a_gap_rebuild_runs_cut_nothing_twice(
    fault_run: Callable[..., FaultRun], spark: Any, tallies: list[Tally]
) -> None:
    # Items wait up to 3 s for a flush (time to take some away); windows of 1 s show the
    # recovery as it happens.
    flow = {"flush_update_time_s": 3.0, "metrics_window_s": 1.0}
    run = fault_run("faultgap", seed=606, tuple_size=20, flow=flow)
    run.produce(2_000)
    job = run.submit(TOPOLOGY, 2, master="local[2,4]")
    killed = 0
    with run.feeding(per_tick=37, tick_s=0.25):  # tails cut off the tuple grid
        wait_for(lambda: run.counted() >= 1_000, timeout_s=180, job=job, what="1,000 counted")
        assert _evict_queued(run) > 0
        # Once now (the tasks running re-run, their results may come after the gap's
        # resync) and once as the flusher repairs the gap (after its grace), while the
        # rebuild waits for the queue. Twice at most: a task failing four times fails the
        # batch (local[2,4]), where a cluster re-runs an executor's tasks without counting.
        killed += _kill_workers(job)
        deadline = time.monotonic() + 60
        while "MRWQ gap repaired by re-dispatch" not in job.log():
            assert time.monotonic() < deadline, f"no gap repair in 60 s:\n{job.log_tail()}"
            time.sleep(0.1)
        killed += _kill_workers(job)
        time.sleep(3.0)
    assert killed > 0, "no Python worker was found to kill"
    run.settle(job, TOPOLOGY)
    log = job.log()
    assert "partially overlaps" not in log and "cannot apply the batch" not in log, log
    assert f"flow {TOPOLOGY}: RECOVERING: rebuild " in log, job.log_tail()
    assert "after lost MRWQ items" in log
    windows = run.flow.plane.metrics_windows(TOPOLOGY)
    assert any(w.health == "RECOVERING" for w in windows), [w.health for w in windows]
    assert windows[-1].rebuilds is not None and windows[-1].rebuilds >= 1
    assert windows[-1].health == "HEALTHY"
    check(run, "Python workers SIGKILLed while a gap's rebuild ran", spark, tallies)
