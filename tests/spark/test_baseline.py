"""The baseline job: its command line and, end to end, spark-submit, Kafka, SQLite, stop signal.

One Spark run. The pipeline config is a copy of the shipped word count under
a unique name, so its topic and results do not mix with other tests sharing
the session's broker.
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
from pathlib import Path

import pytest

from bench.lib.baseline import BaselineJob, _latency_ms, parse_baseline_args
from bench.lib.submit import BASELINE_SCRIPT
from flowctl.adapters import kafka_ends, kafka_log, results
from flowctl.adapters.control_plane import ControlPlane
from flowctl.config import Settings
from flowctl.pipelines.config import load_pipeline_config, resolve_path
from flowctl.pipelines.wordcount import count_words
from flowctl.textgen import zipf_lines
from tests.spark.flow_harness import wait_for
from tests.spark.stream_jobs import StreamJobRunner

LINES = 9_000
MAX_ROWS = 2_500
_BATCH = re.compile(r"batch (\d+): (\d+) records \(applied (\d+), skipped (\d+)")


def _pipeline_config(tmp_path: Path) -> Path:
    """The shipped wordcount config under a unique name (own topic, offsets and results)."""
    name = f"wcbase{secrets.token_hex(3)}"
    text = resolve_path("wordcount").read_text()
    text = text.replace('name = "wordcount"', f'name = "{name}"')
    text = text.replace('eden = "wordcount.eden"', f'eden = "{name}.eden"')
    text = text.replace("partitions = 4", "partitions = 3")
    path = tmp_path / f"{name}.toml"
    path.write_text(text)
    return path


def test_the_command_line_is_the_stream_jobs_plus_a_batch_budget() -> None:
    args = parse_baseline_args(
        ["--pipeline-config", "wordcount", "--parallelism", "4", "--max-records-per-batch", "7"]
    )
    assert (args.pipeline_config, args.parallelism, args.max_records_per_batch) == (
        "wordcount",
        4,
        7,
    )
    assert parse_baseline_args([]).max_records_per_batch is None  # the config's budget


@pytest.mark.parametrize("bad", ["0", "-3", "many"])
def test_a_bad_batch_budget_is_refused_naming_the_value(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        parse_baseline_args(["--max-records-per-batch", bad])
    assert info.value.code == 2
    assert f"--max-records-per-batch: '{bad}'" in capsys.readouterr().err


def test_the_budget_defaults_to_the_config_and_other_pipelines_are_refused(
    tmp_path: Path,
) -> None:
    settings = Settings(home=tmp_path, database_url=f"sqlite:///{tmp_path / 'b.db'}")
    job = BaselineJob(parse_baseline_args([]), settings)
    assert job.max_rows == load_pipeline_config("wordcount").max_records_per_batch
    assert job.topology_id.startswith("wordcount-baseline-blue-")
    with pytest.raises(ValueError, match=r"definition='flowctl.pipelines.logetl' is not supported"):
        BaselineJob(parse_baseline_args(["--pipeline-config", "logetl"]), settings)


def test_latency_is_commit_time_minus_record_timestamps() -> None:
    committed = dt.datetime(2026, 1, 1, 0, 0, 10, tzinfo=dt.UTC)
    base = committed.timestamp() * 1000
    # timestamps' 1st percentile 4 s before the commit, median 1 s before
    assert _latency_ms({"timestamp_ms": [base - 4000, base - 1000]}, committed) == (1000, 4000)
    assert _latency_ms({"timestamp_ms": None}, committed) == (None, None)
    assert _latency_ms({"timestamp_ms": [None, None]}, committed) == (None, None)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.integration
def test_baseline_counts_exactly_in_fixed_batches_and_stops_on_signal(
    stream_job_runner: StreamJobRunner, tmp_path: Path
) -> None:
    config_path = _pipeline_config(tmp_path)
    config = load_pipeline_config(config_path)
    url = stream_job_runner.database_url
    bootstrap = stream_job_runner.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {config.eden_topic: config.partitions})
    lines = [*zipf_lines(LINES - 3, seed=21), "Épée ÉPÉE déjà", "x\ufffdy", "123 _ 456"]
    assert kafka_log.produce(bootstrap, config.eden_topic, lines) == LINES
    expected = count_words(lines)
    plane = ControlPlane(url)
    plane.ensure_schema()  # so the test can poll the counts before the job has started

    topology_id = f"{config.name}-baseline-1"
    job = stream_job_runner.submit(
        "--pipeline-config",
        str(config_path),
        "--topology-id",
        topology_id,
        "--parallelism",
        "2",
        "--max-records-per-batch",
        str(MAX_ROWS),
        "--poll-seconds",
        "0.5",
        name=topology_id,
        script=BASELINE_SCRIPT,
    )
    wait_for(
        lambda: results.total(url, config.name) >= sum(expected.values()),
        timeout_s=150,
        job=job,
        what=f"{sum(expected.values())} words counted",
    )
    assert plane.get_topology(topology_id).state == "ACTIVE"
    plane.send_signal(topology_id, "stop")
    code = job.wait(timeout_s=90)
    assert code == 0, job.log_tail()

    assert results.word_counts(url, config.name) == dict(expected)
    assert plane.committed_offsets(config.name, config.eden_topic) == kafka_ends.latest_offsets(
        bootstrap, config.eden_topic
    )
    topology = plane.get_topology(topology_id)
    assert (topology.state, topology.parallelism) == ("STOPPED", 2)

    batches = [tuple(map(int, m)) for m in _BATCH.findall(job.log_path.read_text())]
    with_data = [b for b in batches if b[1] > 0]
    assert sum(b[1] for b in with_data) == LINES, job.log_tail()
    assert all(b[1] <= MAX_ROWS for b in with_data), batches  # the fixed budget held
    assert len(with_data) >= -(-LINES // MAX_ROWS)
    assert all(b[3] == 0 for b in batches)  # nothing was applied twice
    windows = plane.metrics_windows(topology_id)
    assert sum(w.records for w in windows) == LINES
    for w in windows:  # every record carries its producer timestamp
        assert w.latency_p50_ms is not None and w.latency_p99_ms is not None, w
        assert 0 <= w.latency_p50_ms <= w.latency_p99_ms, w
