"""A topology's health and liveness in a real run: a code error halts it; micro-batches
that outlast the heartbeat's liveness limit (5 s) keep it live, and a stop mid-batch is
seen; a paused broker (SIGSTOP) stalls it and resuming it (SIGCONT) heals it.

The three topologies (each with its own pipeline and SQLite database) are submitted
together by one module fixture, so their start-ups overlap instead of adding up; the
tests then run in file order. The broker is paused last, once the other two are
stopped, so the pause reaches the stalling topology alone. The long-batch and the
stalling topologies get their input in their own tests: the first must still have
batches to run when its test watches them, the second a backlog when the broker stops
answering.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from bench.lib.submit import LocalJob
from flowctl.adapters import kafka_ends, kafka_log
from flowctl.adapters.applied import applied_rows
from flowctl.adapters.control_plane import TERMINAL_STATES
from flowctl.config import Settings
from flowctl.pipelines.wordcount import count_words
from flowctl.services import manager
from tests.spark.flow_definitions import SLEEPY_TUPLE_S
from tests.spark.flow_harness import Flow, counted, flow_config, lines, read_topic, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]

#: The stalling topology's [flow] limits: STALLED after this long without durable progress,
#: seen in the next metrics window.
STALL_AFTER_S, WINDOW_S = 6.0, 2.0
#: Tuples per micro-batch of the long-batch topology (each takes SLEEPY_TUPLE_S).
TUPLES_PER_BATCH = 3


@dataclass(frozen=True)
class Pipeline:
    """One topology's pipeline: its definition, sizes and [flow] keys beyond the defaults."""

    definition: str = "flowctl.pipelines.wordcount"
    lanes: int = 2
    partitions: int = 2
    tuple_size: int = 50
    flow: dict[str, object] = field(default_factory=dict)


PIPELINES = {
    "flowbug": Pipeline(definition="tests.spark.flow_def_broken_code"),
    "flowlive": Pipeline(
        definition="tests.spark.flow_def_sleepy",
        lanes=1,
        partitions=1,
        tuple_size=20,
        flow={
            "w_init": TUPLES_PER_BATCH,
            "w_max": TUPLES_PER_BATCH,
            "latency_target_s": 60.0,
            "lane_budget": 0,
            "tuple_timeout_s": 60.0,
            "coalesce_every_s": 0,
        },
    ),
    "flowstall": Pipeline(flow={"stall_after_s": STALL_AFTER_S, "metrics_window_s": WINDOW_S}),
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
    """The topologies submitted at once; whatever a test leaves running is killed at the end."""
    bootstrap = flowctl_settings.kafka_bootstrap
    flows: list[Flow] = []
    started: dict[str, Running] = {}
    try:
        for name, p in PIPELINES.items():
            work = tmp_path_factory.mktemp(name)
            flow = Flow(flowctl_settings, f"sqlite:///{work / 'flowctl.db'}", work)
            flows.append(flow)
            config = flow_config(
                work,
                name,
                definition=p.definition,
                partitions=p.partitions,
                tuple_size=p.tuple_size,
                flow=p.flow,
            )
            kafka_log.ensure_topics(bootstrap, {f"{name}.eden": p.partitions})
            if name == "flowbug":
                kafka_log.produce(bootstrap, "flowbug.eden", lines(2_000, seed=31))
            topology_id = f"{name}-blue-1"
            job = flow.submit(config, topology_id, p.lanes)
            started[name] = Running(flow, job, topology_id)
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
    run = running["flowbug"]
    flow, job, tid = run.flow, run.job, run.topology_id
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
    after = log[log.index(halted[0]) :]  # the traceback follows the line, once
    assert "Traceback (most recent call last):" in after, after[:3000]
    assert "flow_definitions.py" in after and "r.text for r in records" in after, after[:3000]
    flow.stop(job, tid)
    assert read_topic(bootstrap, "flowbug.dlq") == []  # nothing dead-lettered
    latest = kafka_ends.latest_offsets(bootstrap, "flowbug.eden")
    committed = flow.plane.committed_offsets("flowbug", "flowbug.eden")
    assert sum(committed.values()) < sum(latest.values())  # offsets kept, not skipped


def test_a_topology_stays_live_through_long_batches_and_stops_mid_batch(
    running: dict[str, Running],
) -> None:
    """The heartbeat keeps the topology live while batches take longer than the limit, a
    stop that arrives mid-batch is seen and the topology stays live until STOPPED (the
    stop waits for the batch), the results are exact for what is durable, the applied
    rows below the checkpoint are one merged row, and the clean stop deletes the Spark
    checkpoint."""
    assert TUPLES_PER_BATCH * SLEEPY_TUPLE_S > 5.0  # each batch outlasts LIVE_HEARTBEAT_S
    run = running["flowlive"]
    flow, job, tid = run.flow, run.job, run.topology_id
    data = lines(400, seed=91)  # 20 tuples: about 7 batches of 9 s
    kafka_log.produce(flow.settings.kafka_bootstrap, "flowlive.eden", data)

    def live() -> bool:
        return tid in {t.topology_id for t in flow.plane.live_topologies()}

    wait_for(lambda: counted(flow, "flowlive") != {}, timeout_s=180, job=job, what="a batch")
    # Live through a whole batch (batches run back to back on the backlog).
    first = counted(flow, "flowlive")
    samples = 0
    while counted(flow, "flowlive") == first or samples < 4:
        assert live(), f"not live {samples} samples into a batch; log:\n{job.log_tail()}"
        samples += 1
        assert samples < 120, "no batch ended within 60 s"
        time.sleep(0.5)
        assert job.alive(), job.log_tail()
    # The next batch has just begun: stop it in its middle and stay live until STOPPED.
    flow.plane.send_signal(tid, "stop")
    while flow.state(tid) not in TERMINAL_STATES:
        assert live(), f"not live while stopping; log:\n{job.log_tail()}"
        assert job.alive(), job.log_tail()
        time.sleep(0.5)
    assert job.wait(timeout_s=120) == 0, job.log_tail()
    assert flow.state(tid) == "STOPPED"
    assert not live()

    rows = applied_rows(flow.database_url, "flowlive")
    applied = [r for r, outcome in rows if outcome == "applied"]
    assert [o for _, o in rows] == ["applied"] * len(rows)
    durable = flow.plane.committed_offsets("flowlive", "flowlive.eden")[0]
    assert 0 < durable < len(data)  # stopped part way
    assert (applied[0].start, applied[0].end) == (0, durable)  # one row below the checkpoint
    offsets = sorted(o for r in applied for o in range(r.start, r.end))
    assert counted(flow, "flowlive") == dict(count_words(data[o] for o in offsets))
    assert not (flow.settings.home / "checkpoints" / tid).exists()
    assert "deleted the Spark checkpoint" in job.log()


def test_a_paused_broker_stalls_the_topology_and_resuming_heals_it(
    running: dict[str, Running],
) -> None:
    run = running["flowstall"]
    flow, job, tid = run.flow, run.job, run.topology_id
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.produce(bootstrap, "flowstall.eden", lines(20_000, seed=32))
    wait_for(
        lambda: sum(flow.plane.committed_offsets("flowstall", "flowstall.eden").values()) > 0,
        timeout_s=180,
        job=job,
        what="the first durable records",
    )
    (broker,) = manager.status(flow.settings, only=flow.settings.broker)
    assert broker.pid is not None
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        wait_for(
            lambda: (_health(flow, tid) or ("",))[0] == "STALLED",
            timeout_s=STALL_AFTER_S + WINDOW_S + 30,  # + the driver's write of the window
            job=job,
            what="the topology STALLED while the broker is paused",
        )
    finally:
        os.kill(broker.pid, signal.SIGCONT)
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
