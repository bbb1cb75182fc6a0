"""The broker restarted: Tansu in S3 mode, its log in a local (moto) S3 (survives a broker
restart, not a restart of moto)."""

from __future__ import annotations

import dataclasses
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flowctl.config import Settings
from flowctl.services import manager
from flowctl.services.ports import free_port
from tests.faults.conftest import FaultRun, Tally, check
from tests.spark.flow_harness import wait_for

pytestmark = [
    pytest.mark.faults,
    pytest.mark.slow,
    pytest.mark.spark,
    pytest.mark.integration,
]


@pytest.fixture
def durable_settings(
    flowctl_settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Settings]:
    """A private Tansu on S3 (log in a local moto S3) beside the session's memcached."""
    pytest.importorskip("moto.server", reason="moto[server] not installed (Tansu's S3 mode)")
    for name in ("AWS_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    settings = dataclasses.replace(
        flowctl_settings,
        home=tmp_path / "durable-home",
        kafka_port=free_port(),
        s3_port=free_port(),
        tansu_storage="s3",
        tansu_s3_url=f"s3://flowctl-{secrets.token_hex(3)}/",
    )
    manager.up(settings, only="tansu")  # pulls in the local S3 store
    try:
        yield settings
    finally:
        manager.down(settings, only=["tansu", "s3"])


def test_broker_restarted_durable_tansu_on_s3(
    fault_run: Callable[..., FaultRun],
    spark: Any,
    tallies: list[Tally],
    durable_settings: Settings,
) -> None:
    run = fault_run("faulttansu", seed=404, settings=durable_settings, partitions=2)
    run.produce(1_500)
    job = run.submit("faulttansu-blue-1", 2)
    with run.feeding():
        wait_for(lambda: run.counted() > 0, timeout_s=180, job=job, what="the first results")
    assert run.counted() < len(run.produced), "the restart came after the stream's end"
    manager.down(durable_settings, only="tansu")
    time.sleep(2.0)
    manager.up(durable_settings, only="tansu")
    with run.feeding():
        time.sleep(3.0)
    run.settle(job, "faulttansu-blue-1")
    check(run, "broker restarted (Tansu on a local moto S3)", spark, tallies)
