"""Missing binaries, incomplete S3 settings and external services."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.config import ConfigError, Settings
from flowctl.services import kafka, manager, memcached, s3, tansu
from flowctl.services.base import EXTERNAL, UNREACHABLE, ServiceError
from flowctl.services.ports import free_port


def test_missing_memcached_without_root_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Cannot uninstall memcached for real on a shared machine: simulate its absence.
    monkeypatch.setattr(memcached.shutil, "which", lambda name: None)
    monkeypatch.setattr(memcached.os, "geteuid", lambda: 1000)
    with pytest.raises(ServiceError, match=r"apt-get install memcached"):
        memcached.binary()


def test_failed_install_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    monkeypatch.setattr(
        memcached.shutil, "which", lambda name: f"/usr/bin/{name}" if name == "apt-get" else None
    )
    monkeypatch.setattr(memcached.os, "geteuid", lambda: 0)
    failed = subprocess.CompletedProcess([], 100, "", "E: Unable to locate package memcached")
    monkeypatch.setattr(memcached.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(ServiceError, match=r"failed \(E: Unable to locate package memcached\)"):
        memcached.binary()


def test_s3_storage_without_endpoint_or_moto_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in tansu.S3_ENV:
        monkeypatch.delenv(name, raising=False)
    # moto is installed here; simulate a machine without it.
    monkeypatch.setattr(s3, "moto_available", lambda: False)
    settings = Settings(home=tmp_path, kafka_port=free_port(), broker="tansu", tansu_storage="s3")
    with pytest.raises(ServiceError, match=r"set AWS_ENDPOINT, AWS_ACCESS_KEY_ID.*moto\[server\]"):
        manager.up(settings, only="tansu")
    assert tansu.TansuService().status(settings).pid is None


def test_s3_endpoint_without_credentials_names_the_missing_ones(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT", "http://127.0.0.1:1")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings(home=tmp_path, tansu_storage="s3")
    with pytest.raises(ServiceError, match=r"AWS_ENDPOINT is set but AWS_ACCESS_KEY_ID"):
        tansu.storage_engine(settings)


def test_bad_s3_url_and_port_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match=r"FLOWCTL_TANSU_S3_URL='http://x/' must look like"):
        s3.bucket(Settings(tansu_s3_url="http://x/"))
    with pytest.raises(ConfigError, match=r"FLOWCTL_S3_PORT=99999 is out of range"):
        Settings.from_env({"FLOWCTL_S3_PORT": "99999"})


def test_tansu_binary_is_found() -> None:
    path = tansu.binary()
    assert path.name == "tansu" and path.is_file()


@pytest.mark.integration
def test_external_services_are_checked_not_started(
    kafka_bootstrap: str, memcached_address: str, tmp_path: Path
) -> None:
    settings = Settings(
        home=tmp_path,
        kafka_port=free_port(),
        memcached_port=free_port(),
        kafka_bootstrap_servers=kafka_bootstrap,
        memcached_server=memcached_address,
    )
    messages = manager.up(settings)
    assert any("using external Kafka" in m for m in messages)
    assert any("using external memcached" in m for m in messages)
    states = {s.name: s.state for s in manager.status(settings)}
    assert states["kafka"] == EXTERNAL and states["memcached"] == EXTERNAL
    assert not (tmp_path / "run").exists()  # nothing was started here
    manager.down(settings)
    assert {s.name: s.state for s in manager.status(settings)} == states


def test_unreachable_external_kafka_is_reported(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, kafka_bootstrap_servers=f"127.0.0.1:{free_port()}")
    row = kafka.KafkaService().status(settings)
    assert row.state == UNREACHABLE and "no Kafka broker answers" in row.detail
    with pytest.raises(ServiceError, match=r"127\.0\.0\.1:\d+"):
        manager.up(settings, only="kafka")


def test_unknown_service_name_is_named() -> None:
    with pytest.raises(
        ServiceError,
        match=r"unknown service\(s\) zookeeper; known: db, memcached, kafka, s3, tansu",
    ):
        manager.status(Settings(), only="zookeeper")
