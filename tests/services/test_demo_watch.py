"""The demo's watch says what the stream is doing until its first count (a real SQLite)."""

from __future__ import annotations

from pathlib import Path

from flowctl.adapters.control_plane import ControlPlane
from flowctl.config import Settings
from flowctl.demo import stream_state, watch


def test_before_any_topology_the_watch_says_airflow_starts_the_job(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    ControlPlane(settings.resolved_database_url).ensure_schema()
    assert stream_state(settings, "wordcount") == "Airflow is starting the Spark job"


def test_a_starting_stream_is_named_and_a_stream_without_counts_ends_the_watch(
    tmp_path: Path,
) -> None:
    settings = Settings(home=tmp_path)
    plane = ControlPlane(settings.resolved_database_url)
    plane.ensure_schema()
    plane.register_topology("wordcount-blue-1", "wordcount", "blue", 2)
    said: list[str] = []
    watch(settings, "wordcount", seconds=60, say=said.append, interval=0.01, start_timeout=0.05)
    assert said[0].startswith("  waiting for the first batch: topology STARTING (Spark")
    # one waiting line while nothing changes (then every 15 s), not one per poll
    assert sum(line.startswith("  waiting") for line in said) == 1, said
    assert not any("words counted" in line for line in said), said
    assert said[-1].startswith("  no counts after") and "(topology STARTING" in said[-1]
    assert "stream_wordcount task's log" in said[-1]
