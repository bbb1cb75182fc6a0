"""The demo's gentle feed: a detached process that produces until it is stopped."""

from __future__ import annotations

import time

import pytest

from flowctl import feed
from flowctl.adapters import kafka_ends, kafka_log
from flowctl.adapters.procfs import proc_cmdline
from flowctl.config import Settings
from flowctl.pipelines.config import load_pipeline_config

pytestmark = [pytest.mark.integration]


def _produced(settings: Settings, topic: str) -> int:
    return sum(kafka_ends.latest_offsets(settings.kafka_bootstrap, topic).values())


def test_feed_produces_until_stopped(flowctl_settings: Settings) -> None:
    config = load_pipeline_config("wordcount")
    topic = config.eden_topic
    kafka_log.ensure_topics(flowctl_settings.kafka_bootstrap, {topic: config.partitions})
    before = _produced(flowctl_settings, topic)
    message = feed.start(flowctl_settings, "wordcount", rate=20)
    record = feed.running(flowctl_settings)
    assert record is not None, message
    try:
        assert feed.start(flowctl_settings, "wordcount", rate=20).startswith("feed already")
        deadline = time.monotonic() + 60
        while _produced(flowctl_settings, topic) <= before and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _produced(flowctl_settings, topic) > before, "the feed produced nothing"
    finally:
        stopped = feed.stop(flowctl_settings)
    assert stopped.startswith("feed stopped")
    assert proc_cmdline(record.pid) is None
    assert feed.running(flowctl_settings) is None
    assert feed.stop(flowctl_settings) == "feed not running"
