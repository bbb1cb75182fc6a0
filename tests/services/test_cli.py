"""``flowctl services ...``: once end to end through the installed script, then in process."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from flowctl import cli
from flowctl.config import Settings
from flowctl.services import manager
from flowctl.services.ports import free_port

from .helpers import pid_gone

FLOWCTL = Path(sys.executable).parent / "flowctl"


def _env(home: Path, kafka_port: int, memcached_port: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWCTL_")}
    env.update(
        FLOWCTL_HOME=str(home),
        FLOWCTL_KAFKA_PORT=str(kafka_port),
        FLOWCTL_MEMCACHED_PORT=str(memcached_port),
        FLOWCTL_KAFKA_CONTROLLER_PORT=str(free_port()),
        FLOWCTL_MEMCACHED_MEMORY_MB="16",
    )
    return env


def _flowctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(FLOWCTL), *args], env=env, capture_output=True, text=True, timeout=120
    )


@pytest.mark.integration
def test_console_script_up_status_down(tmp_path: Path) -> None:
    assert shutil.which(str(FLOWCTL)), (
        f"{FLOWCTL} missing: run .venv/bin/pip install -e . --no-deps"
    )
    home, kport, mport = tmp_path / "home", free_port(), free_port()
    env = _env(home, kport, mport)
    settings = Settings.from_env(env)
    try:
        up = _flowctl(env, "services", "up")
        assert up.returncode == 0, up.stderr
        assert "kafka up (pid" in up.stdout and f"127.0.0.1:{kport}" in up.stdout

        status = _flowctl(env, "services", "status", "--json", "--check")
        assert status.returncode == 0, status.stderr
        rows = {row["name"]: row for row in json.loads(status.stdout)["services"]}
        assert {name: row["state"] for name, row in rows.items()} == {
            "db": "up",
            "memcached": "up",
            "kafka": "up",
        }
        pids = [rows["kafka"]["pid"], rows["memcached"]["pid"]]

        table = _flowctl(env, "services", "status")
        assert table.stdout.splitlines()[0].split() == [
            "service",
            "state",
            "pid",
            "address",
            "detail",
        ]
        assert f"{rows['kafka']['pid']}" in table.stdout
        assert "log: on disk in " in table.stdout.splitlines()[-1]

        down = _flowctl(env, "services", "down")
        assert down.returncode == 0, down.stderr
        assert all(pid_gone(pid) for pid in pids)
        after = _flowctl(env, "services", "status", "--check")
        assert after.returncode == 1 and "down" in after.stdout
    finally:
        manager.down(settings)


def _main(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, *argv: str) -> int:
    monkeypatch.setenv("FLOWCTL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("FLOWCTL_KAFKA_PORT", str(free_port()))
    monkeypatch.setenv("FLOWCTL_MEMCACHED_PORT", str(free_port()))
    for name in ("FLOWCTL_DATABASE_URL", "FLOWCTL_KAFKA_BOOTSTRAP", "FLOWCTL_MEMCACHED"):
        monkeypatch.delenv(name, raising=False)
    return cli.main(list(argv))


@pytest.mark.integration
def test_taken_port_is_one_line_on_stderr_and_exit_1(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1]
        code = _main(
            monkeypatch,
            tmp_path,
            "services",
            "up",
            "--only",
            "memcached",
            "--memcached-port",
            str(port),
        )
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"flowctl: error: memcached cannot start: port {port} on 127.0.0.1")


def test_bad_arguments_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        _main(monkeypatch, tmp_path, "services", "up", "--kafka-port", "70000")
    assert exit_info.value.code == 2
    assert "--kafka-port: 70000 is out of range" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        _main(monkeypatch, tmp_path, "services", "up", "--only", "zookeeper")
    assert exit_info.value.code == 2


def test_bad_environment_is_exit_1_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("FLOWCTL_MEMCACHED_MEMORY_MB", "lots")
    monkeypatch.setenv("FLOWCTL_HOME", str(tmp_path))
    assert cli.main(["services", "status"]) == 1
    assert "FLOWCTL_MEMCACHED_MEMORY_MB='lots' is not an integer" in capsys.readouterr().err


def test_flags_override_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FLOWCTL_KAFKA_PORT", "1111")
    monkeypatch.setenv("FLOWCTL_HOME", str(tmp_path / "env-home"))
    parser = cli.build_parser()
    args = parser.parse_args(
        ["--home", str(tmp_path / "outer"), "services", "status", "--kafka-port", "2222"]
    )
    settings = cli.settings_from_args(args)
    assert settings.kafka_port == 2222
    assert settings.home == (tmp_path / "outer").resolve()  # not reset by the sub-parser
    args = parser.parse_args(
        ["services", "status", "--tansu-storage", "s3", "--database-url", "sqlite://"]
    )
    settings = cli.settings_from_args(args)
    assert (settings.kafka_port, settings.tansu_storage, settings.database_url) == (
        1111,
        "s3",
        "sqlite://",
    )
    assert settings.home == (tmp_path / "env-home").resolve()


def test_every_command_module_registers_a_handler() -> None:
    parser = cli.build_parser()
    for action in ("up", "down", "status"):
        assert callable(parser.parse_args(["services", action]).func)
