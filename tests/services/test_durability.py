"""``services status`` and ``cluster status`` say where the broker's log lives and whether it
is durable: only a real S3 endpoint the operator names, or an external Kafka, is."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.config import Settings
from flowctl.services.s3 import durability


@pytest.fixture(autouse=True)
def _no_s3_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AWS_ENDPOINT", raising=False)


def test_the_memory_engine_is_not_durable(tmp_path: Path) -> None:
    line = durability(Settings(home=tmp_path))
    assert line.startswith("log: in Tansu's memory, NOT durable")
    assert "Apache Kafka" in line and "AWS_ENDPOINT" in line


def test_moto_is_named_a_test_double_and_not_durable(tmp_path: Path) -> None:
    line = durability(Settings(home=tmp_path, tansu_storage="s3", s3_port=9123))
    assert "moto's memory (a test double of S3 at http://127.0.0.1:9123), NOT durable" in line
    assert "survives a Tansu restart, not `down`" in line
    assert "AWS_ENDPOINT" in line


def test_a_named_s3_endpoint_is_where_durability_comes_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT", "https://s3.example.net")
    line = durability(Settings(home=tmp_path, tansu_storage="s3"))
    assert line == (
        "log: in the S3 bucket 'tansu' at https://s3.example.net; durable as that store is"
    )
    assert "NOT" not in line


def test_an_external_kafka_holds_the_log(tmp_path: Path) -> None:
    line = durability(Settings(home=tmp_path, kafka_bootstrap_servers="kafka:9092"))
    assert line == "log: in the external Kafka at kafka:9092; durable as that cluster is"
