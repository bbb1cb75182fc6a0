"""A topology's health in a real run: a paused broker (SIGSTOP) stalls it, SIGCONT heals it."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from flowctl.adapters import kafka_log
from flowctl.services import manager
from tests.spark.flow_harness import Flow, flow_config, lines, wait_for


def _health(flow: Flow, topology_id: str) -> tuple[str, str | None] | None:
    windows = flow.plane.metrics_windows(topology_id, limit=1)
    return (windows[0].health, windows[0].health_cause) if windows else None


def test_a_paused_broker_stalls_the_topology_and_resuming_heals_it(
    flow: Flow, tmp_path: Path
) -> None:
    stall_after_s, window_s = 6.0, 2.0
    config = flow_config(
        tmp_path, "flowstall", flow={"stall_after_s": stall_after_s, "metrics_window_s": window_s}
    )
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowstall.eden": 2})
    kafka_log.produce(bootstrap, "flowstall.eden", lines(20_000, seed=32))
    job = flow.submit(config, "flowstall-blue-1", 2)
    wait_for(
        lambda: sum(flow.plane.committed_offsets("flowstall", "flowstall.eden").values()) > 0,
        timeout_s=180,
        job=job,
        what="the first durable records",
    )
    (tansu,) = manager.status(flow.settings, only="tansu")
    assert tansu.pid is not None
    os.kill(tansu.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: (_health(flow, "flowstall-blue-1") or ("",))[0] == "STALLED",
            timeout_s=stall_after_s + window_s + 30,  # + the driver's write of the window
            job=job,
            what="the topology STALLED while the broker is paused",
        )
    finally:
        os.kill(tansu.pid, signal.SIGCONT)
    _, cause = _health(flow, "flowstall-blue-1")  # type: ignore[misc]
    assert cause is not None and "nothing durable for" in cause
    wait_for(
        lambda: (_health(flow, "flowstall-blue-1") or ("",))[0] == "HEALTHY",
        timeout_s=120,
        job=job,
        what="the topology HEALTHY again after the broker resumed",
    )
    assert "STALLED: backlog" in job.log()
    flow.stop(job, "flowstall-blue-1")
