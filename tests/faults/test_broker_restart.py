"""The broker frozen, then killed: the embedded Apache Kafka SIGSTOPped mid-stream for twice
``stall_after_s`` and woken, then SIGKILLed and started again on its log on disk. While it
is frozen or down the topology shows STALLED with the broker as the cause, where an
operator looks (``flowctl stream status``, the page's metrics API) and while the outage
lasts; nothing it acknowledged is lost, and the stream resumes by itself."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flowctl import cli
from flowctl.config import Settings
from flowctl.services import kafka, manager
from flowctl.services.ports import free_port
from flowctl_airflow.ui.queries import MetricsQuery, MetricsReader
from tests.faults.conftest import FaultRun, Tally, check
from tests.spark.flow_harness import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.integration,
]


def _status(run: FaultRun, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``flowctl stream status`` of the run's pipeline: its exit code and its output."""
    capsys.readouterr()
    argv = ["stream", "status", f"--pipeline={run.config}"]
    code = cli.main([*argv, f"--database-url={run.flow.database_url}"])
    return code, capsys.readouterr().out


def _page_health(run: FaultRun, topology_id: str) -> tuple[str, str | None]:
    """The health the metrics page's API gives the topology (its newest window)."""
    body = MetricsReader(run.flow.database_url).metrics(run.name, MetricsQuery(limit=5))
    latest = {t["topology_id"]: t for t in body["latest"]}.get(topology_id)
    return (latest["health"], latest["health_cause"]) if latest else ("", None)


def _health(run: FaultRun, topology_id: str) -> tuple[str, str | None]:
    windows = run.flow.plane.metrics_windows(topology_id, limit=1)
    return (windows[0].health, windows[0].health_cause) if windows else ("", None)


@pytest.fixture
def own_broker(flowctl_settings: Settings, tmp_path: Path) -> Iterator[Settings]:
    """An Apache Kafka broker of this test's own (its log in the test's home) beside the
    session's memcached, so that killing it disturbs no other test."""
    settings = dataclasses.replace(
        flowctl_settings,
        home=tmp_path / "broker-home",
        broker="kafka",
        kafka_port=free_port(),
        kafka_controller_port=free_port(),
    )
    manager.up(settings, only="kafka")
    try:
        yield settings
    finally:
        manager.down(settings, only="kafka", purge=True)


def test_the_embedded_broker_frozen_then_killed_mid_stream_loses_nothing(
    fault_run: Callable[..., FaultRun],
    spark: Any,
    tallies: list[Tally],
    own_broker: Settings,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # STALLED 5 s into the outage; the outage (until STALLED is seen, then the restart) may
    # outlast the default read_error_timeout_s, past which the topology would rightly fail.
    flow = {"stall_after_s": 5.0, "read_error_timeout_s": 300.0}
    run = fault_run("faultbroker", seed=404, settings=own_broker, partitions=2, flow=flow)
    run.produce(1_500)
    job = run.submit("faultbroker-blue-1", 2)
    with run.feeding():
        wait_for(lambda: run.counted() > 0, timeout_s=180, job=job, what="the first results")
    assert run.counted() < len(run.produced), "the kill came after the stream's end"
    record = kafka.daemon(own_broker).running()
    assert record is not None, "the test's broker is not running"
    broker = f"from Kafka at {own_broker.kafka_bootstrap}"

    # Frozen (SIGSTOP: connections stay open, nothing answers) for twice stall_after_s:
    # STALLED with the broker as the cause, in stream status and the page, while it lasts.
    os.kill(record.pid, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:

        def status_says_stalled() -> bool:
            code, out = _status(run, capsys)
            return code == 3 and "STALLED" in out and broker in out

        wait_for(status_says_stalled, timeout_s=90, job=job, what="stream status: STALLED")
        state, cause = _page_health(run, "faultbroker-blue-1")
        assert state == "STALLED" and broker in (cause or ""), (state, cause)
        time.sleep(max(0.0, 2 * flow["stall_after_s"] - (time.monotonic() - frozen_at)))
    finally:
        os.kill(record.pid, signal.SIGCONT)
    with run.feeding():
        wait_for(lambda: _status(run, capsys)[0] == 0, timeout_s=120, job=job, what="HEALTHY again")

    os.kill(record.pid, signal.SIGKILL)

    # While the broker is down the topology says so: STALLED, the failed read as the cause.
    def stalled_on_the_broker() -> bool:
        state, cause = _health(run, "faultbroker-blue-1")
        return state == "STALLED" and broker in (cause or "")

    wait_for(stalled_on_the_broker, timeout_s=90, job=job, what="STALLED, the broker the cause")
    manager.up(own_broker, only="kafka")  # the same log on disk: recovered, not recreated
    with run.feeding():
        time.sleep(3.0)
    run.settle(job, "faultbroker-blue-1")
    check(run, "the embedded Apache Kafka SIGKILLed and restarted", spark, tallies)
