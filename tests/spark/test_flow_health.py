"""A topology's health in a real run: a code error halts it (a paused broker stalling it:
test_flow_stall.py). One topology per scenario, on the session's broker, memcached and SQLite.
"""

from __future__ import annotations

from pathlib import Path

from flowctl.adapters import kafka_log
from tests.spark.flow_harness import Flow, flow_config, lines, read_topic, wait_for


def _health(flow: Flow, topology_id: str) -> tuple[str, str | None] | None:
    windows = flow.plane.metrics_windows(topology_id, limit=1)
    return (windows[0].health, windows[0].health_cause) if windows else None


def test_a_definition_raising_on_every_record_halts_and_dead_letters_nothing(
    flow: Flow, tmp_path: Path
) -> None:
    config = flow_config(tmp_path, "flowbug", definition="tests.spark.flow_def_broken_code")
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowbug.eden": 2})
    kafka_log.produce(bootstrap, "flowbug.eden", lines(2_000, seed=31))
    job = flow.submit(config, "flowbug-blue-1", 2)
    wait_for(
        lambda: (_health(flow, "flowbug-blue-1") or ("",))[0] == "HALTED",
        timeout_s=180,
        job=job,
        what="the topology HALTED by its code error",
    )
    _, cause = _health(flow, "flowbug-blue-1")  # type: ignore[misc]
    assert cause is not None and "raised AttributeError and none succeeded" in cause
    log = job.log()
    halted = [line for line in log.splitlines() if "HALTED: code error" in line]
    assert len(halted) == 1 and "ERROR" in halted[0], log[-3000:]
    assert "'Record' object has no attribute 'text'" in halted[0]
    after = log[log.index(halted[0]) :]  # the traceback follows the line, once
    assert "Traceback (most recent call last):" in after, after[:3000]
    assert "flow_definitions.py" in after and "r.text for r in records" in after, after[:3000]
    flow.stop(job, "flowbug-blue-1")
    assert read_topic(bootstrap, "flowbug.dlq") == []  # nothing dead-lettered
    latest = kafka_log.latest_offsets(bootstrap, "flowbug.eden")
    committed = flow.plane.committed_offsets("flowbug", "flowbug.eden")
    assert sum(committed.values()) < sum(latest.values())  # offsets kept, not skipped
