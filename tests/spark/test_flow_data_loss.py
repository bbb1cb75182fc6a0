"""Data loss and read errors under a running flow-controlled topology (spark-submit,
Apache Kafka).

One topology run per setting of ``[topics] on_data_loss``: Eden deleted and recreated
under it (a reset log). Under ``fail`` and under ``skip`` alike the topology stops FAILED,
the range named per partition in the task log and stored as its cause for the metrics
page; nothing is skipped, nothing of the new log is counted. The log-start case (a start
moved past the checkpoint by DeleteRecords or retention, where ``skip`` records the range
and goes on): tests/spark/test_flow_log_start.py. Persistent read errors:
tests/unit/test_flow_planner_guard.py.

The two topologies (one per setting, each with its own pipeline and database) are
started together by one module fixture, so their start-ups overlap instead of adding up;
each test then resets its own topology's log.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from kafka.admin import KafkaAdminClient

from bench.lib.submit import LocalJob
from flowctl.adapters import kafka_ends, kafka_log
from flowctl.adapters.data_loss import causes, skipped_ranges
from flowctl.config import Settings
from flowctl.pipelines.wordcount import count_words
from tests.spark.flow_harness import Flow, counted, flow_config, lines, wait_for

# deep: data loss end to end runs in tests/spark/test_flow_log_start.py (records deleted
# past the checkpoint, both settings); a reset log's decision, both settings, in
# tests/unit/test_flow_planner_guard.py. These reset the log under a running topology.
pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration, pytest.mark.deep]

#: Pipeline name -> its ``[topics]`` keys beyond the partitions (the setting under test).
SETTINGS: dict[str, dict[str, object]] = {
    "flowreset": {},  # on_data_loss = "fail", the shipped default
    "flowresetskip": {"on_data_loss": "skip"},
}


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()


@dataclass
class Counted:
    """A topology that has counted its whole backlog exactly, before its log is reset."""

    flow: Flow
    job: LocalJob
    topic: str
    expected: dict[str, int]
    before: dict[int, int]  # each partition's end when the counts were exact


def _counts_are(flow: Flow, name: str, expected: dict[str, int]) -> Callable[[], bool]:
    return lambda: counted(flow, name) == expected


@pytest.fixture(scope="module")
def counted_runs(
    flowctl_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Counted]]:
    """Both topologies submitted at once, then each waited for until its counts are exact."""
    bootstrap = flowctl_settings.kafka_bootstrap
    flows: list[Flow] = []
    started: dict[str, tuple[Flow, LocalJob, str, dict[str, int]]] = {}
    try:
        for name, topics in SETTINGS.items():
            work = tmp_path_factory.mktemp(name)
            flow = Flow(flowctl_settings, f"sqlite:///{work / 'flowctl.db'}", work)
            flows.append(flow)
            config = flow_config(work, name, partitions=2, topics=topics)
            topic = f"{name}.eden"
            kafka_log.ensure_topics(bootstrap, {topic: 2})
            data = lines(1_500, seed=31)
            kafka_log.produce(bootstrap, topic, data)
            job = flow.submit(config, f"{name}-blue-1", 2)
            started[name] = (flow, job, topic, dict(count_words(data)))
        runs: dict[str, Counted] = {}
        for name, (flow, job, topic, expected) in started.items():
            wait_for(
                _counts_are(flow, name, expected),
                timeout_s=180,
                job=job,
                what=f"exact counts of {name}",
            )
            runs[name] = Counted(
                flow, job, topic, expected, kafka_ends.latest_offsets(bootstrap, topic)
            )
        yield runs
    finally:
        for flow in flows:
            flow.kill_leftovers()


def _cause(flow: Flow, topology_id: str) -> str:
    with flow.plane.engine.connect() as conn:
        return causes(conn, [topology_id]).get(topology_id, "")


def test_a_topic_deleted_and_recreated_under_the_stream_fails_it_naming_the_ranges(
    counted_runs: dict[str, Counted],
) -> None:
    run = counted_runs["flowreset"]
    flow, job, topic, expected, before = run.flow, run.job, run.topic, run.expected, run.before
    bootstrap = flow.settings.kafka_bootstrap
    _delete_topic(bootstrap, topic)
    kafka_log.ensure_topics(bootstrap, {topic: 2})
    kafka_log.produce(bootstrap, topic, lines(100, seed=32))  # below the old ends
    after = kafka_ends.latest_offsets(bootstrap, topic)
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


def test_a_reset_log_fails_under_on_data_loss_skip_too_and_nothing_is_skipped(
    counted_runs: dict[str, Counted],
) -> None:
    """The new log's offsets start again below the old log's durable ranges: skipping
    would take new records for old ones, so the topology stops and says why."""
    run = counted_runs["flowresetskip"]
    flow, job, topic, expected, before = run.flow, run.job, run.topic, run.expected, run.before
    bootstrap = flow.settings.kafka_bootstrap
    _delete_topic(bootstrap, topic)
    kafka_log.ensure_topics(bootstrap, {topic: 2})
    code = job.wait(timeout_s=120)
    assert code == 1, job.log_tail()
    assert flow.state("flowresetskip-blue-1") == "FAILED"
    cause = _cause(flow, "flowresetskip-blue-1")
    assert cause.startswith(
        "records lost before processing (a reset log fails under on_data_loss = skip too: "
        "its new offsets start again below the old log's durable ranges): "
    ), cause
    assert f"{topic} partition 1: offsets [{before[1]}, {before[1]})" in cause
    assert skipped_ranges(flow.database_url, "flowresetskip", topic) == []
    assert counted(flow, "flowresetskip") == expected
    assert flow.plane.committed_offsets("flowresetskip", topic) == before
