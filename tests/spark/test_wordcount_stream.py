"""The word-count stream job (flow-controlled) end to end: spark-submit, Apache Kafka, memcached,
SQLite, stop signal, rerun.

One test, two spark-submit runs (one Spark at a time). The pipeline config is
a copy of the shipped one under its own name, so its topic and results do not
mix with other tests sharing the session's broker.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from flowctl.adapters import kafka_ends, kafka_log, results
from flowctl.adapters.control_plane import ControlPlane
from flowctl.pipelines.config import load_pipeline_config, resolve_path
from flowctl.pipelines.wordcount import apply_records, count_words
from tests.spark.flow_harness import wait_for
from tests.spark.stream_jobs import StreamJobRunner

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]

WORDS = ["alpha", "Beta", "gamma", "DELTA", "épée", "zeta", "eta", "theta", "iota", "kappa"]


def _lines(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 12))) + f", no. {i}!"
        for i in range(n)
    ]


def _pipeline_config(tmp_path: Path) -> Path:
    """The shipped wordcount config renamed ``wcstream`` (own topic and results)."""
    text = resolve_path("wordcount").read_text()
    text = text.replace('name = "wordcount"', 'name = "wcstream"')
    text = text.replace('eden = "wordcount.eden"', 'eden = "wcstream.eden"')
    text = text.replace("partitions = 4", "partitions = 3")  # lanes != partitions on purpose
    text = text.replace("max_records_per_batch = 50000", "max_records_per_batch = 4000")
    path = tmp_path / "wcstream.toml"
    path.write_text(text)
    return path


def _run_until_counted(
    runner: StreamJobRunner, config: Path, topology_id: str, colour: str, lanes: int, total: int
) -> None:
    plane = ControlPlane(runner.database_url)
    job = runner.submit(
        "--pipeline-config",
        str(config),
        "--topology-id",
        topology_id,
        "--colour",
        colour,
        "--parallelism",
        str(lanes),
        "--airflow-run-id",
        f"manual__{topology_id}",
        "--poll-seconds",
        "0.5",
        name=topology_id,
    )

    def active() -> bool:
        try:
            return plane.get_topology(topology_id).state == "ACTIVE"
        except Exception:  # schema or row not there yet
            return False

    wait_for(active, timeout_s=120, job=job, what=f"{topology_id} ACTIVE")
    wait_for(
        lambda: results.total(runner.database_url, "wcstream") >= total,
        timeout_s=150,
        job=job,
        what=f"{total} words counted",
    )
    signal_id = plane.send_signal(topology_id, "stop")
    code = job.wait(timeout_s=90)
    assert code == 0, job.log_tail()
    topology = plane.get_topology(topology_id)
    assert (topology.state, topology.colour, topology.parallelism) == ("STOPPED", colour, lanes)
    assert topology.spark_app_id
    assert plane.pending_signals(topology_id) == []
    assert any(s.id == signal_id and s.handled_at for s in plane.signals(topology_id))
    log = job.log_path.read_text(errors="replace")
    assert "records processed; slowest lane" in log, job.log_tail()


# deep: the cluster e2e (tests/cluster) stops blue on its signal (STOPPED) and its green
# counts on exactly with 4 lanes from blue's durable checkpoint; test_flow_topology counts
# exactly with the checkpoint at the log's end
@pytest.mark.deep
def test_stream_counts_exactly_stops_on_signal_and_resumes(
    stream_job_runner: StreamJobRunner, tmp_path: Path
) -> None:
    config_path = _pipeline_config(tmp_path)
    config = load_pipeline_config(config_path)
    bootstrap = stream_job_runner.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {config.eden_topic: config.partitions})

    first = _lines(12_000, seed=1)
    assert kafka_log.produce(bootstrap, config.eden_topic, first) == len(first)
    expected = count_words(first)
    _run_until_counted(
        stream_job_runner, config_path, "wcstream-blue-1", "blue", 2, sum(expected.values())
    )
    assert results.word_counts(stream_job_runner.database_url, "wcstream") == dict(expected)

    second = _lines(5_000, seed=2)
    kafka_log.produce(bootstrap, config.eden_topic, second)
    expected = count_words(first + second)
    _run_until_counted(
        stream_job_runner, config_path, "wcstream-green-2", "green", 4, sum(expected.values())
    )
    assert results.word_counts(stream_job_runner.database_url, "wcstream") == dict(expected)
    latest = kafka_ends.latest_offsets(bootstrap, config.eden_topic)
    committed = ControlPlane(stream_job_runner.database_url).committed_offsets(
        "wcstream", config.eden_topic
    )
    assert committed == latest
    generations = [
        t.generation for t in ControlPlane(stream_job_runner.database_url).topologies("wcstream")
    ]
    assert generations == [1, 2]


# deep: tests/spark/test_flow_data_loss.py resets the log under a running topology, whose
# checkpoint is then past the log's end: FAILED, loudly, nothing skipped
@pytest.mark.deep
def test_a_failing_query_marks_the_topology_failed_and_exits_non_zero(
    stream_job_runner: StreamJobRunner, tmp_path: Path
) -> None:
    """A checkpoint past the log's end (a reset broker) must fail loudly, not skip data."""
    config_path = _pipeline_config(tmp_path)
    config = load_pipeline_config(config_path)
    bootstrap = stream_job_runner.settings.kafka_bootstrap
    topic = config.eden_topic
    kafka_log.ensure_topics(bootstrap, {topic: config.partitions})
    latest = kafka_ends.latest_offsets(bootstrap, topic)
    plane = ControlPlane(stream_job_runner.database_url)
    plane.ensure_schema()
    # The durable checkpoint says partition 0 was processed further than the log goes.
    apply_records(
        stream_job_runner.database_url, "wcstream", [(topic, 0, latest[0] + 10, b"ghost")]
    )
    job = stream_job_runner.submit(
        "--pipeline-config", str(config_path), "--topology-id", "wcstream-bad", name="bad"
    )
    code = job.wait(timeout_s=150)
    assert code == 1, job.log_tail()
    assert plane.get_topology("wcstream-bad").state == "FAILED"
    log = job.log_path.read_text(errors="replace")
    assert f"start offset {latest[0] + 11} is past the log end {latest[0]}" in log, job.log_tail()
