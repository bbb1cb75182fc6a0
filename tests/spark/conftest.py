"""Fixtures of the Spark tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flowctl.config import Settings
from tests.spark.flow_harness import Flow
from tests.spark.stream_jobs import StreamJobRunner


@pytest.fixture
def stream_job_runner(
    flowctl_settings: Settings, sqlite_url: str, tmp_path: Path
) -> Iterator[StreamJobRunner]:
    """Submits stream jobs against the session's broker and a fresh SQLite database."""
    runner = StreamJobRunner(flowctl_settings, sqlite_url, tmp_path)
    yield runner
    runner.kill_leftovers()


@pytest.fixture
def flow(flowctl_settings: Settings, sqlite_url: str, tmp_path: Path) -> Iterator[Flow]:
    """Starts flow-controlled topologies against the session's services and a fresh SQLite."""
    harness = Flow(flowctl_settings, sqlite_url, tmp_path)
    yield harness
    harness.kill_leftovers()
