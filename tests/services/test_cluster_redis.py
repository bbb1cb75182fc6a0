"""``cluster down`` with an external Redis: left running, only the cluster's Celery keys
deleted (a real ``redis-server`` of the test's own)."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator

import pytest
import redis

from flowctl.services.base import ServiceError
from flowctl.services.cluster_redis import celery_keys, leave_external, redis_ping
from flowctl.services.ports import free_port


@pytest.fixture
def external_redis() -> Iterator[str]:
    server = shutil.which("redis-server")
    if server is None:
        pytest.fail("redis-server is not installed: scripts/bootstrap installs it")
    port = free_port()
    process = subprocess.Popen(
        [server, "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                redis_ping(url, 1.0)
                break
            except ServiceError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        process.wait(10)


def test_an_external_redis_keeps_running_and_loses_only_the_clusters_keys(
    external_redis: str,
) -> None:
    client = redis.Redis.from_url(external_redis)
    for key in celery_keys():
        client.rpush(key, b"x")
    client.set("default_settings", b"someone else's")  # a foreign key beside ours
    said = leave_external(external_redis)
    assert said.startswith(f"redis at {external_redis} is not ours: left running; removed ")
    assert f"removed {len(celery_keys())} Celery key(s)" in said
    assert client.exists(*celery_keys()) == 0
    assert client.get("default_settings") == b"someone else's"
    redis_ping(external_redis, 2.0)  # still answering
