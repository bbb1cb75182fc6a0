"""Up, status, down and up again against the real Tansu and memcached binaries."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from flowctl.adapters.procfs import proc_cmdline
from flowctl.config import Settings
from flowctl.services import manager, memcached, tansu
from flowctl.services.base import DOWN, UP, PortInUseError
from flowctl.services.process import PidRecord, is_alive

from .helpers import pid_gone, processes_mentioning

pytestmark = pytest.mark.integration


def _pids(settings: Settings) -> dict[str, int | None]:
    return {s.name: s.pid for s in manager.status(settings)}


def test_up_status_down_up_again(fresh_settings: Settings) -> None:
    manager.up(fresh_settings)
    rows = {s.name: s for s in manager.status(fresh_settings)}
    assert {name: row.state for name, row in rows.items()} == {
        "db": UP,
        "memcached": UP,
        "tansu": UP,
    }
    assert rows["tansu"].address == f"127.0.0.1:{fresh_settings.kafka_port}"
    assert rows["memcached"].address == f"127.0.0.1:{fresh_settings.memcached_port}"
    first = _pids(fresh_settings)
    assert first["memcached"] and first["tansu"]
    assert (fresh_settings.home / "run" / "tansu.pid").is_file()
    assert (fresh_settings.home / "logs" / "memcached.log").is_file()

    manager.down(fresh_settings)
    assert pid_gone(first["memcached"]) and pid_gone(first["tansu"])
    assert not (fresh_settings.home / "run" / "tansu.pid").exists()
    states = {s.name: s.state for s in manager.status(fresh_settings)}
    assert states == {"db": UP, "memcached": DOWN, "tansu": DOWN}

    manager.up(fresh_settings)
    second = _pids(fresh_settings)
    assert second["tansu"] and second["tansu"] != first["tansu"]
    assert all(s.ok for s in manager.status(fresh_settings))


def test_up_twice_is_a_noop(fresh_settings: Settings) -> None:
    manager.up(fresh_settings, only=["memcached", "tansu"])
    before = _pids(fresh_settings)
    messages = manager.up(fresh_settings, only=["memcached", "tansu"])
    assert [m for m in messages if "already up" in m] == messages
    assert _pids(fresh_settings) == before


def test_down_when_down_is_a_noop(fresh_settings: Settings) -> None:
    messages = manager.down(fresh_settings, only=["memcached", "tansu"])
    assert messages == ["tansu already down", "memcached already down"]


def test_taken_port_names_service_and_port_and_leaves_nothing(fresh_settings: Settings) -> None:
    port = fresh_settings.kafka_port
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        with pytest.raises(PortInUseError) as err:
            manager.up(fresh_settings)
    message = str(err.value)
    assert "tansu" in message and f"port {port}" in message and "127.0.0.1" in message
    assert f"pid {os.getpid()}" in message  # what holds the port
    # memcached had started before tansu failed: it was rolled back.
    assert _pids(fresh_settings) == {"db": None, "memcached": None, "tansu": None}
    assert processes_mentioning(f"tcp://127.0.0.1:{port}") == []
    assert processes_mentioning(f"-p {fresh_settings.memcached_port} ") == []


def test_stale_pid_file_of_a_dead_process_is_removed(fresh_settings: Settings) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    daemon = tansu.daemon(fresh_settings)
    daemon.pid_file.parent.mkdir(parents=True)
    daemon.pid_file.write_text(PidRecord(dead.pid, daemon.argv, daemon.address).dump())

    assert tansu.TansuService().status(fresh_settings).state == DOWN
    assert not daemon.pid_file.exists()
    assert "up (pid" in manager.up(fresh_settings, only="tansu")[0]


def test_pid_file_naming_an_unrelated_live_process_is_stale_and_never_signalled(
    fresh_settings: Settings,
) -> None:
    daemon = memcached.daemon(fresh_settings)
    daemon.pid_file.parent.mkdir(parents=True)
    # This very test process: same PID as recorded, but not the recorded command line.
    daemon.pid_file.write_text(PidRecord(os.getpid(), daemon.argv, daemon.address).dump())

    assert manager.down(fresh_settings, only="memcached") == ["memcached already down"]
    assert not daemon.pid_file.exists()
    assert is_alive(os.getpid(), proc_cmdline(os.getpid()) or ())


def test_unreadable_pid_file_is_removed(fresh_settings: Settings) -> None:
    daemon = tansu.daemon(fresh_settings)
    daemon.pid_file.parent.mkdir(parents=True)
    daemon.pid_file.write_text("not json")
    assert daemon.running() is None
    assert not daemon.pid_file.exists()


def test_a_killed_daemon_shows_down_and_up_restarts_it(fresh_settings: Settings) -> None:
    manager.up(fresh_settings, only="memcached")
    pid = _pids(fresh_settings)["memcached"]
    assert pid is not None
    os.kill(pid, 9)
    os.waitpid(pid, 0)  # we are its parent here; a CLI-started one is reaped by init
    assert _pids(fresh_settings)["memcached"] is None
    manager.up(fresh_settings, only="memcached")
    assert _pids(fresh_settings)["memcached"] not in (None, pid)
