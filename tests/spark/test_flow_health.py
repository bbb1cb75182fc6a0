"""A topology's health in a real run: a code error halts it; a paused broker (SIGSTOP)
stalls it and resuming it (SIGCONT) heals it.

The two topologies (each with its own pipeline and SQLite database) are submitted
together by one module fixture, so their start-ups overlap instead of adding up. The
code error is watched first; the broker is paused only after that topology is stopped,
so the pause reaches the stalling topology alone. The stalling topology's input is
produced in its own test, so it has a backlog when the broker stops answering.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from bench.lib.submit import LocalJob
from flowctl.adapters import kafka_log
from flowctl.config import Settings
from flowctl.services import manager
from tests.spark.flow_harness import Flow, flow_config, lines, read_topic, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]

#: The stalling topology's [flow] limits: STALLED after this long without durable progress,
#: seen in the next metrics window.
STALL_AFTER_S, WINDOW_S = 6.0, 2.0
#: Pipeline name -> (its definition, its [flow] keys beyond the test defaults).
PIPELINES: dict[str, tuple[str, dict[str, object]]] = {
    "flowbug": ("tests.spark.flow_def_broken_code", {}),
    "flowstall": (
        "flowctl.pipelines.wordcount",
        {"stall_after_s": STALL_AFTER_S, "metrics_window_s": WINDOW_S},
    ),
}


@dataclass
class Running:
    """A submitted topology and the harness that started it."""

    flow: Flow
    job: LocalJob
    topology_id: str


@pytest.fixture(scope="module")
def running(
    flowctl_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Running]]:
    """Both topologies submitted at once; whatever a test leaves running is killed at the end."""
    bootstrap = flowctl_settings.kafka_bootstrap
    flows: list[Flow] = []
    started: dict[str, Running] = {}
    try:
        for name, (definition, flow_keys) in PIPELINES.items():
            work = tmp_path_factory.mktemp(name)
            flow = Flow(flowctl_settings, f"sqlite:///{work / 'flowctl.db'}", work)
            flows.append(flow)
            config = flow_config(work, name, definition=definition, flow=flow_keys)
            kafka_log.ensure_topics(bootstrap, {f"{name}.eden": 2})
            if name == "flowbug":
                kafka_log.produce(bootstrap, "flowbug.eden", lines(2_000, seed=31))
            topology_id = f"{name}-blue-1"
            started[name] = Running(flow, flow.submit(config, topology_id, 2), topology_id)
        yield started
    finally:
        for flow in flows:
            flow.kill_leftovers()


def _health(flow: Flow, topology_id: str) -> tuple[str, str | None] | None:
    windows = flow.plane.metrics_windows(topology_id, limit=1)
    return (windows[0].health, windows[0].health_cause) if windows else None


def test_a_definition_raising_on_every_record_halts_and_dead_letters_nothing(
    running: dict[str, Running],
) -> None:
    flow, job, tid = running["flowbug"].flow, running["flowbug"].job, "flowbug-blue-1"
    bootstrap = flow.settings.kafka_bootstrap
    wait_for(
        lambda: (_health(flow, tid) or ("",))[0] == "HALTED",
        timeout_s=180,
        job=job,
        what="the topology HALTED by its code error",
    )
    _, cause = _health(flow, tid)  # type: ignore[misc]
    assert cause is not None and "raised AttributeError and none succeeded" in cause
    log = job.log()
    halted = [line for line in log.splitlines() if "HALTED: code error" in line]
    assert len(halted) == 1 and "ERROR" in halted[0], log[-3000:]
    assert "'Record' object has no attribute 'text'" in halted[0]
    flow.stop(job, tid)
    assert read_topic(bootstrap, "flowbug.dlq") == []  # nothing dead-lettered
    latest = kafka_log.latest_offsets(bootstrap, "flowbug.eden")
    committed = flow.plane.committed_offsets("flowbug", "flowbug.eden")
    assert sum(committed.values()) < sum(latest.values())  # offsets kept, not skipped


def test_a_paused_broker_stalls_the_topology_and_resuming_heals_it(
    running: dict[str, Running],
) -> None:
    flow, job, tid = running["flowstall"].flow, running["flowstall"].job, "flowstall-blue-1"
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.produce(bootstrap, "flowstall.eden", lines(20_000, seed=32))
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
            lambda: (_health(flow, tid) or ("",))[0] == "STALLED",
            timeout_s=STALL_AFTER_S + WINDOW_S + 30,  # + the driver's write of the window
            job=job,
            what="the topology STALLED while the broker is paused",
        )
    finally:
        os.kill(tansu.pid, signal.SIGCONT)
    _, cause = _health(flow, tid)  # type: ignore[misc]
    assert cause is not None and "nothing durable for" in cause
    wait_for(
        lambda: (_health(flow, tid) or ("",))[0] == "HEALTHY",
        timeout_s=120,
        job=job,
        what="the topology HEALTHY again after the broker resumed",
    )
    assert "STALLED: backlog" in job.log()
    flow.stop(job, tid)
