"""The log's start moved past the durable checkpoint (DeleteRecords, as retention does),
under each setting of ``[topics] on_data_loss``, on Apache Kafka.

A topology counts a first backlog exactly and stops; more lines arrive, and the records
below a cut, past the checkpoint, are deleted before a second topology starts from the
checkpoint. Under ``fail`` it stops FAILED with each partition's lost range in its task
log and its cause (the metrics page); under ``skip`` it records each range as skipped
(reconcile reports them), moves the checkpoint to the cut and counts the rest exactly.
Both pipelines run side by side, their start-ups overlapping.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from kafka import TopicPartition
from kafka.admin import KafkaAdminClient

from bench.lib.submit import LocalJob
from flowctl.adapters import kafka_ends, kafka_log
from flowctl.adapters.data_loss import causes, skipped_ranges
from flowctl.config import Settings
from flowctl.pipelines.wordcount import count_words
from tests.spark.flow_harness import Flow, counted, flow_config, lines, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]

SETTINGS: dict[str, dict[str, object]] = {
    "flowtrim": {},  # on_data_loss = "fail", the shipped default
    "flowtrimskip": {"on_data_loss": "skip"},
}
DELETED_PER_PARTITION = 150


@dataclass
class Trimmed:
    """A pipeline whose log start was moved past its checkpoint, and its second topology."""

    flow: Flow
    job: LocalJob
    topic: str
    first: dict[str, int]  # the counts of the first backlog
    checkpoint: dict[int, int]  # where the first topology stopped
    cut: dict[int, int]  # the log's new start
    kept: list[str]  # the lines at or past the cut


def _delete_below(bootstrap: str, topic: str, cut: dict[int, int]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, p): n for p, n in cut.items()})
    finally:
        admin.close()


def _lines_from(bootstrap: str, topic: str, start: dict[int, int]) -> list[str]:
    ends = kafka_ends.latest_offsets(bootstrap, topic)
    consumer = kafka_log.new_consumer(bootstrap)
    try:
        return [
            r.value.decode()
            for p, end in ends.items()
            for r in kafka_log.read_range(consumer, topic, p, start[p], end, timeout_s=30)
        ]
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def trimmed(
    flowctl_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Trimmed]]:
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
            data = lines(1_000, seed=41)
            kafka_log.produce(bootstrap, topic, data)
            job = flow.submit(config, f"{name}-blue-1", 2)
            started[name] = (flow, job, topic, dict(count_words(data)))
        runs: dict[str, Trimmed] = {}
        for name, (flow, job, topic, first) in started.items():
            wait_for(
                lambda f=flow, n=name, e=first: counted(f, n) == e,  # type: ignore[misc]
                timeout_s=180,
                job=job,
                what=f"exact counts of {name}'s first backlog",
            )
            flow.stop(job, f"{name}-blue-1")
            checkpoint = flow.plane.committed_offsets(name, topic)
            kafka_log.produce(bootstrap, topic, lines(600, seed=42))
            cut = {p: n + DELETED_PER_PARTITION for p, n in checkpoint.items()}
            _delete_below(bootstrap, topic, cut)
            kept = _lines_from(bootstrap, topic, cut)
            second = flow.submit(
                flow_config(flow.work_dir, name, partitions=2, topics=SETTINGS[name]),
                f"{name}-blue-2",
                2,
            )
            runs[name] = Trimmed(flow, second, topic, first, checkpoint, cut, kept)
        yield runs
    finally:
        for flow in flows:
            flow.kill_leftovers()


def test_records_deleted_past_the_checkpoint_fail_the_topology_naming_the_ranges(
    trimmed: dict[str, Trimmed],
) -> None:
    run = trimmed["flowtrim"]
    code = run.job.wait(timeout_s=180)
    assert code == 1, run.job.log_tail()
    assert run.flow.state("flowtrim-blue-2") == "FAILED"
    log = run.job.log()
    with run.flow.plane.engine.connect() as conn:
        cause = causes(conn, ["flowtrim-blue-2"]).get("flowtrim-blue-2", "")
    assert cause.startswith("records lost before processing (on_data_loss = fail): "), cause
    for p, start in run.checkpoint.items():
        lost = f"{run.topic} partition {p}: offsets [{start}, {run.cut[p]})"
        assert lost in cause and lost in log, (lost, cause)
    assert counted(run.flow, "flowtrim") == run.first  # nothing counted past the loss
    assert run.flow.plane.committed_offsets("flowtrim", run.topic) == run.checkpoint


def test_records_deleted_past_the_checkpoint_are_recorded_as_skipped_and_the_rest_counted(
    trimmed: dict[str, Trimmed],
) -> None:
    run = trimmed["flowtrimskip"]
    expected = dict(run.first)
    for word, n in count_words(run.kept).items():
        expected[word] = expected.get(word, 0) + n
    wait_for(
        lambda: counted(run.flow, "flowtrimskip") == expected,
        timeout_s=180,
        job=run.job,
        what="exact counts of what the log kept",
    )
    skipped = skipped_ranges(run.flow.database_url, "flowtrimskip", run.topic)
    assert {(s.partition, s.first, s.end) for s in skipped} == {
        (p, start, run.cut[p]) for p, start in run.checkpoint.items()
    }
    assert "on_data_loss = skip: recorded" in run.job.log()
    run.flow.stop(run.job, "flowtrimskip-blue-2")
