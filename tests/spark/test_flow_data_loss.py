"""Data loss and read errors under a running flow-controlled topology (spark-submit, Tansu).

One topology run per scenario: Eden deleted and recreated with fewer records (a reset
log: the topology stops FAILED, the range named per partition, the cause stored for the
metrics page), and Eden deleted for good (a read error that persists past ``[flow]
read_error_timeout_s``: FAILED with topic, partition and error, never an idle ACTIVE
topology). Tansu has no DeleteRecords and no retention, so the log-start case (a start
past the checkpoint) is covered by the planner's unit tests (tests/unit).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kafka.admin import KafkaAdminClient

from flowctl.adapters import kafka_log
from flowctl.adapters.data_loss import causes
from flowctl.pipelines.wordcount import count_words
from tests.spark.flow_harness import Flow, counted, flow_config, lines, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()


def _run_until_counted(flow: Flow, tmp_path: Path, name: str, **flow_keys: object) -> tuple:
    config = flow_config(tmp_path, name, partitions=2, flow=flow_keys or None)
    bootstrap = flow.settings.kafka_bootstrap
    topic = f"{name}.eden"
    kafka_log.ensure_topics(bootstrap, {topic: 2})
    data = lines(3_000, seed=31)
    kafka_log.produce(bootstrap, topic, data)
    expected = dict(count_words(data))
    job = flow.submit(config, f"{name}-blue-1", 2)
    wait_for(lambda: counted(flow, name) == expected, timeout_s=180, job=job, what="exact counts")
    return job, topic, expected, kafka_log.latest_offsets(bootstrap, topic)


def _cause(flow: Flow, topology_id: str) -> str:
    with flow.plane.engine.connect() as conn:
        return causes(conn, [topology_id]).get(topology_id, "")


def test_a_topic_deleted_and_recreated_under_the_stream_fails_it_naming_the_ranges(
    flow: Flow, tmp_path: Path
) -> None:
    job, topic, expected, before = _run_until_counted(flow, tmp_path, "flowreset")
    bootstrap = flow.settings.kafka_bootstrap
    _delete_topic(bootstrap, topic)
    kafka_log.ensure_topics(bootstrap, {topic: 2})
    kafka_log.produce(bootstrap, topic, lines(100, seed=32))  # below the old ends
    after = kafka_log.latest_offsets(bootstrap, topic)
    assert all(after[p] < before[p] for p in before), (before, after)
    code = job.wait(timeout_s=120)
    assert code == 1, job.log_tail()
    assert flow.state("flowreset-blue-1") == "FAILED"
    log = job.log()
    for p in sorted(before):
        # the recreated log's end when the planner looked: 0 up to what was produced
        line = (
            rf"data loss: {re.escape(topic)} partition {p}: offsets \[{before[p]}, {before[p]}\) "
            rf"\(0 record\(s\)\) lost before processing: the log ends at (\d+), below the "
            rf"position {before[p]}"
        )
        found = re.search(line, log)
        assert found is not None and int(found.group(1)) <= after[p], job.log_tail()
    cause = _cause(flow, "flowreset-blue-1")
    assert cause.startswith("records lost before processing (on_data_loss = fail): "), cause
    assert f"{topic} partition 0: offsets [{before[0]}, {before[0]})" in cause
    assert "FAILED: records lost before processing" in log
    # nothing of the new log was taken for the old one's, nothing counted twice
    assert counted(flow, "flowreset") == expected
    assert flow.plane.committed_offsets("flowreset", topic) == before


def test_a_read_error_that_persists_fails_the_topology_with_its_cause(
    flow: Flow, tmp_path: Path
) -> None:
    job, topic, expected, _ = _run_until_counted(
        flow, tmp_path, "flowgone", read_error_timeout_s=5.0
    )
    _delete_topic(flow.settings.kafka_bootstrap, topic)
    code = job.wait(timeout_s=120)
    assert code == 1, job.log_tail()
    assert flow.state("flowgone-blue-1") == "FAILED"
    cause = _cause(flow, "flowgone-blue-1")
    assert cause.startswith("read errors persisted past read_error_timeout_s=5: "), cause
    assert f"{topic} every partition: reads failing for" in cause
    assert "does not exist" in cause
    assert f"FAILED: read errors persisted past read_error_timeout_s=5: {topic}" in job.log()
    assert counted(flow, "flowgone") == expected
