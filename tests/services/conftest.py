"""Fixtures for the service tests: a private home and private ports per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from flowctl.config import Settings
from flowctl.services import manager
from flowctl.services.ports import free_port


@pytest.fixture
def fresh_settings(tmp_path: Path) -> Iterator[Settings]:
    """Settings nobody else uses; whatever a test starts with them is stopped afterwards."""
    settings = Settings(
        home=tmp_path / "home",
        kafka_port=free_port(),
        kafka_controller_port=free_port(),
        memcached_port=free_port(),
        memcached_memory_mb=16,
    )
    try:
        yield settings
    finally:
        manager.down(settings)
