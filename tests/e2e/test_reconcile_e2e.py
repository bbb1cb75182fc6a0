"""The reconcile DAG end to end: a real PySpark batch (spark-submit), Apache Kafka and SQLite.

The database is brought into the states a running stream leaves behind, through the
real sink and applied-ranges adapters: a prefix of every partition applied under the
checkpoint, a dead-lettered tuple, a tuple applied beyond a hole, a replayed tuple of
which one record came back and was applied, and records not durable yet. The DAG must
pass on that, counting exactly the durable records; after one stored count is changed
it must fail, and the job's output must name the changed word.

The pipeline is the word count under its own name (``rcwords``, a config written to a
temporary ``FLOWCTL_PIPELINES_DIR``), so its topic and rows are its own and no other
test of the session sees them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import sqlalchemy as sa

from flowctl.adapters import applied, kafka_ends, kafka_log, results
from flowctl.adapters.db import engine_for
from flowctl.adapters.schema import word_counts
from flowctl.adapters.schema_setup import ensure_schema
from flowctl.config import Settings
from flowctl.core.tuples import TupleRange
from flowctl.pipelines.config import load_pipeline_config
from flowctl.pipelines.sinks import result_store
from flowctl.pipelines.wordcount import apply_records, count_values
from flowctl.textgen import zipf_lines

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.deep,  # the rescale and cluster e2e run reconcile_wordcount over their data
]

PIPELINE = "rcwords"
EDEN = "rcwords.eden"
#: The word count's apply/stored, routed as the flusher and reconcile route them ([sink]).
WORDCOUNT = result_store(load_pipeline_config("wordcount"))


@pytest.fixture
def pipeline_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The shipped wordcount config renamed ``rcwords``, the DAGs built from it."""
    from flowctl.pipelines.config import resolve_path

    text = resolve_path("wordcount").read_text()
    text = text.replace('name = "wordcount"', f'name = "{PIPELINE}"')
    text = text.replace('eden = "wordcount.eden"', f'eden = "{EDEN}"')
    (tmp_path / f"{PIPELINE}.toml").write_text(text)
    monkeypatch.setenv("FLOWCTL_PIPELINES_DIR", str(tmp_path))
    return tmp_path


def _reconcile_dag():
    from flowctl_airflow.dag_factory import all_pipeline_dags

    return {d.dag_id: d for d in all_pipeline_dags()}[f"reconcile_{PIPELINE}"]


def _by_partition(bootstrap: str) -> dict[int, list[bytes]]:
    consumer = kafka_log.new_consumer(bootstrap)
    try:
        ends = kafka_ends.latest_offsets(consumer, EDEN)
        return {
            p: [r.value for r in kafka_log.read_range(consumer, EDEN, p, 0, end)]
            for p, end in ends.items()
        }
    finally:
        consumer.close()


def _durable_state(url: str, logs: dict[int, list[bytes]]) -> Counter[str]:
    """Write the durable state described in the module doc; return the expected counts."""
    engine = engine_for(url)
    ensure_schema(engine)
    expected: Counter[str] = Counter()
    for p, values in logs.items():
        n = len(values)
        assert n >= 60, f"partition {p} got only {n} records"
        head = n // 3
        # The direct sink: records [0, head) applied, checkpoint at head, no rows.
        apply_records(engine, PIPELINE, [(EDEN, p, o, values[o]) for o in range(head)])
        expected.update(count_values(values[:head]))
        dlq = TupleRange(EDEN, p, head, head + 10)
        beyond = TupleRange(EDEN, p, head + 20, head + 30)  # after the hole [head+10, head+20)
        replayed = TupleRange(EDEN, p, head + 30, head + 40)
        back = TupleRange(EDEN, p, head + 32, head + 33)  # one record came back from replay
        with engine.begin() as conn:
            assert applied.claim(
                conn, PIPELINE, [applied.Claim(dlq, "dlq"), applied.Claim(beyond, "applied")]
            ) == [True, True]
            WORDCOUNT.apply(conn, PIPELINE, [count_values(values[beyond.start : beyond.end])])
            applied.claim(conn, PIPELINE, [applied.Claim(replayed, "replayed")])
            assert applied.claim(conn, PIPELINE, [applied.Claim(back, "applied", replay=True)])
            WORDCOUNT.apply(conn, PIPELINE, [count_values([values[back.start]])])
            applied.advance_checkpoint(conn, PIPELINE, [(EDEN, p)])
        expected.update(count_values(values[beyond.start : beyond.end]))
        expected.update(count_values([values[back.start]]))
    return expected


def test_reconcile_passes_on_exact_data_and_names_a_tampered_count(
    platform: Settings, pipeline_dir: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    url = platform.resolved_database_url
    kafka_log.ensure_topics(platform.kafka_bootstrap, {EDEN: 4})
    kafka_log.produce(platform.kafka_bootstrap, EDEN, list(zipf_lines(600, seed=5)))
    logs = _by_partition(platform.kafka_bootstrap)
    expected = _durable_state(url, logs)
    assert results.word_counts(url, PIPELINE) == dict(expected)

    run = _reconcile_dag().test()
    assert str(run.state).endswith("success")
    out = capfd.readouterr()
    text = out.out + out.err
    assert "OK: the stored results equal the reference" in text
    partitions = len(logs)
    assert f"excluded {10 * partitions} dead-lettered record(s)" in text
    assert f"excluded {9 * partitions} record(s) waiting in a replay topic" in text

    word = max(expected, key=lambda w: (expected[w], w))
    with engine_for(url).begin() as conn:
        conn.execute(
            word_counts.update()
            .where(word_counts.c.pipeline == PIPELINE, word_counts.c.word == word)
            .values(count=word_counts.c.count + 1)
        )
    run = _reconcile_dag().test()
    assert str(run.state).endswith("failed")
    out = capfd.readouterr()
    text = out.out + out.err
    assert "MISMATCH: 1 key(s) differ" in text
    assert f"{word!r}: {expected[word]} != {expected[word] + 1}" in text
    with engine_for(url).connect() as conn:
        stored = conn.execute(
            sa.select(sa.func.count()).where(word_counts.c.pipeline == PIPELINE)
        ).scalar()
    assert stored == len(expected)
