"""The first end-to-end path, through Airflow: ingest -> stream -> exact counts -> stop.

Everything is real: the DAGs run with ``dag.test()``, the stream task runs
``spark-submit`` (Spark local) against Tansu, and the counts land in SQLite.
A watcher thread sends the ``stop`` signal once the database holds as many
words as a plain Python count of the same text; the stream task must then end
successfully. A second ingest and a second stream run must add exactly the
new words: a rerun never double-counts.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from flowctl.adapters import results
from flowctl.adapters.control_plane import TERMINAL_STATES, ControlPlane
from flowctl.config import Settings
from flowctl.pipelines.wordcount import count_words
from flowctl.textgen import zipf_lines

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.integration,
    pytest.mark.deep,  # the browser journey (tests/ui) ingests and streams through Airflow
]

#: A private copy of the word count (its own topic and results): other end-to-end tests
#: share the session's broker.
PIPELINE = "wce2e"
DEADLINE_S = 300.0  # the watcher stops the stream anyway after this; the test then fails


@pytest.fixture
def private_pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``include/pipelines/wordcount.toml`` renamed to :data:`PIPELINE`, the only pipeline."""
    from flowctl.pipelines.config import PIPELINES_DIR
    from flowctl_airflow.dag_factory import PIPELINES_DIR_ENV

    text = (PIPELINES_DIR / "wordcount.toml").read_text()
    (tmp_path / f"{PIPELINE}.toml").write_text(
        text.replace('name = "wordcount"', f'name = "{PIPELINE}"').replace(
            "wordcount.eden", f"{PIPELINE}.eden"
        )
    )
    monkeypatch.setenv(PIPELINES_DIR_ENV, str(tmp_path))
    return tmp_path


def _dags():
    from flowctl_airflow.dag_factory import all_pipeline_dags

    return {dag.dag_id: dag for dag in all_pipeline_dags()}


def _stop_when_counted(settings: Settings, expected_total: int, seen: dict[str, object]) -> None:
    """Send ``stop`` to the running topology once the database holds ``expected_total``."""
    url = settings.resolved_database_url
    plane = ControlPlane(url)
    plane.ensure_schema()
    deadline = time.monotonic() + DEADLINE_S
    topology_id = None
    while time.monotonic() < deadline:
        running = [t for t in plane.topologies(PIPELINE) if t.state not in TERMINAL_STATES]
        if running:
            topology_id = running[0].topology_id
            if results.total(url, PIPELINE) >= expected_total:
                break
        time.sleep(0.5)
    seen["topology_id"] = topology_id
    seen["total_at_stop"] = results.total(url, PIPELINE)
    if topology_id is not None:
        plane.send_signal(topology_id, "stop")


def _run_stream(settings: Settings, expected: Counter[str]) -> dict[str, object]:
    seen: dict[str, object] = {}
    watcher = threading.Thread(
        target=_stop_when_counted, args=(settings, sum(expected.values()), seen), daemon=True
    )
    watcher.start()
    run = _dags()[f"stream_{PIPELINE}"].test(run_conf={"parallelism": 2, "colour": "blue"})
    watcher.join(timeout=30)
    seen["state"] = str(run.state)
    return seen


def test_ingest_stream_counts_stop_and_rerun(platform: Settings, private_pipeline: Path) -> None:
    url = platform.resolved_database_url
    first = list(zipf_lines(3000, seed=11))
    ingest = _dags()[f"ingest_{PIPELINE}"].test(run_conf={"lines": 3000, "seed": 11})
    assert str(ingest.state).endswith("success")
    expected = count_words(first)

    seen = _run_stream(platform, expected)
    assert seen["topology_id"], "no topology registered in the control plane"
    assert seen["state"].endswith("success"), seen
    assert results.word_counts(url, PIPELINE) == dict(expected)
    topology = ControlPlane(url).get_topology(str(seen["topology_id"]))
    assert topology.state == "STOPPED"

    # More data, a second run: it resumes after the first run's offsets.
    second = list(zipf_lines(1000, seed=12))
    ingest = _dags()[f"ingest_{PIPELINE}"].test(run_conf={"lines": 1000, "seed": 12})
    assert str(ingest.state).endswith("success")
    expected = count_words(first + second)

    seen = _run_stream(platform, expected)
    assert seen["state"].endswith("success"), seen
    assert results.word_counts(url, PIPELINE) == dict(expected)
