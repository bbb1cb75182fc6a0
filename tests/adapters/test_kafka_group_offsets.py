"""The durable checkpoint committed to the pipeline's consumer group, as Kafka's own tools
read it (``kafka-consumer-groups --describe``: the ConsumerGroupCommand of the broker's
pinned version)."""

from __future__ import annotations

import logging
import secrets
import subprocess

import pytest

from flowctl.adapters import kafka_log
from flowctl.adapters.kafka_group_offsets import GroupCheckpoint, group_of
from flowctl.services import kafka_node
from flowctl.services.ports import free_port
from tests.librdkafka import Rec, produce

pytestmark = pytest.mark.integration


def _describe(bootstrap: str, group: str) -> dict[int, tuple[int, int, int]]:
    """``{partition: (current offset, log end, lag)}`` from ``kafka-consumer-groups``."""
    argv = [
        kafka_node.java(),
        "-cp",
        kafka_node.classpath(),
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server",
        bootstrap,
        "--describe",
        "--group",
        group,
    ]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=True).stdout
    rows: dict[int, tuple[int, int, int]] = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) >= 6 and cells[0] == group:
            rows[int(cells[2])] = (int(cells[3]), int(cells[4]), int(cells[5]))
    return rows


def test_kafkas_own_tool_shows_the_checkpoint_and_the_lag(kafka_bootstrap: str) -> None:
    pipeline = f"lag{secrets.token_hex(3)}"
    topic = f"{pipeline}.eden"
    kafka_log.ensure_topics(kafka_bootstrap, {topic: 2})
    records = [Rec(b"r", partition=0)] * 150 + [Rec(b"r", partition=1)] * 90
    produce(kafka_bootstrap, topic, records)
    group = GroupCheckpoint(kafka_bootstrap, pipeline, topic)
    group.offer({(topic, 0): 60, (topic, 1): 10, ("other.topic", 0): 5})
    group.offer({(topic, 0): 100, (topic, 1): 40})  # the newest wins
    group.close()
    assert group_of(pipeline) == f"flowctl.{pipeline}"
    assert _describe(kafka_bootstrap, f"flowctl.{pipeline}") == {
        0: (100, 150, 50),
        1: (40, 90, 50),
    }


def test_a_broker_that_does_not_answer_slows_nothing_and_is_told(
    caplog: pytest.LogCaptureFixture,
) -> None:
    group = GroupCheckpoint(f"127.0.0.1:{free_port()}", "nobody", "nobody.eden")
    with caplog.at_level(logging.WARNING, "flowctl.adapters.kafka_group_offsets"):
        group.offer({("nobody.eden", 0): 7})  # returns at once: the group's thread commits
        group.close()
    assert "consumer group flowctl.nobody failed" in caplog.text
