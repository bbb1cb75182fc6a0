"""Daemon handling on throwaway processes: crashes, hangs, port holders, PID checks."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowctl.adapters.procfs import proc_cmdline
from flowctl.config import Settings
from flowctl.services.base import DOWN, UNHEALTHY, ServiceError
from flowctl.services.memcached import memcached_health
from flowctl.services.ports import free_port, port_holder, port_is_free
from flowctl.services.process import Daemon, PidRecord, is_alive, stop_pid, wait_exec

from .helpers import pid_gone, processes_mentioning

# A server that accepts connections and never answers: TCP is fine, the protocol is not.
SILENT_SERVER = (
    "import socket, sys, time\n"
    "s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
    "conns = []\n"
    "while True: conns.append(s.accept())\n"
)


def _daemon(tmp_path: Path, argv: tuple[str, ...], port: int, **kwargs: object) -> Daemon:
    settings = Settings(home=tmp_path / "home")
    address = f"127.0.0.1:{port}"
    return Daemon(
        name="probe",
        argv=argv,
        host="127.0.0.1",
        port=port,
        settings=settings,
        health=lambda timeout: memcached_health(address, timeout),
        **kwargs,  # type: ignore[arg-type]
    )


def test_a_daemon_that_exits_at_once_is_reported_with_its_log(tmp_path: Path) -> None:
    argv = (sys.executable, "-c", "import sys; print('bad flag --frobnicate'); sys.exit(3)")
    daemon = _daemon(tmp_path, argv, free_port())
    with pytest.raises(ServiceError, match=r"probe exited with code 3.*bad flag --frobnicate"):
        daemon.up()
    assert not daemon.pid_file.exists()
    assert daemon.status().state == DOWN


@pytest.mark.integration
def test_a_daemon_that_never_gets_healthy_is_stopped(tmp_path: Path) -> None:
    port = free_port()
    argv = (sys.executable, "-c", SILENT_SERVER, str(port))
    daemon = _daemon(tmp_path, argv, port, start_timeout=1.5)
    with pytest.raises(ServiceError, match=r"probe did not become healthy on 127.0.0.1:\d+"):
        daemon.up()
    assert not daemon.pid_file.exists()
    assert processes_mentioning(SILENT_SERVER) == []


def test_stop_pid_kills_a_process_that_ignores_sigterm(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    argv = (sys.executable, "-c", code, "stubborn")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    assert stop_pid(proc.pid, argv, timeout=0.5) is True
    assert pid_gone(proc.pid)
    assert "sending SIGKILL" in caplog.text


@pytest.mark.integration
def test_up_on_a_running_but_unhealthy_daemon_fails_and_says_so(tmp_path: Path) -> None:
    port = free_port()
    argv = (sys.executable, "-c", SILENT_SERVER, str(port))
    daemon = _daemon(tmp_path, argv, port, check_timeout=0.3)
    proc = subprocess.Popen(argv)
    try:
        daemon.pid_file.parent.mkdir(parents=True)
        daemon.pid_file.write_text(PidRecord(proc.pid, argv, daemon.address).dump())
        deadline = time.monotonic() + 10
        while port_is_free("127.0.0.1", port) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert daemon.status().state == UNHEALTHY
        with pytest.raises(
            ServiceError, match=rf"probe runs as pid {proc.pid} .* but is unhealthy"
        ):
            daemon.up()
        assert "probe down" in daemon.down()
        assert pid_gone(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_a_script_started_through_its_shebang_is_recognised(tmp_path: Path) -> None:
    script = tmp_path / "server"
    script.write_text(
        f"#!{sys.executable}\nimport time\nprint('ready', flush=True)\ntime.sleep(60)\n"
    )
    script.chmod(0o755)
    argv = (str(script), "--flag")
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        assert proc_cmdline(proc.pid) == (sys.executable, *argv)
        assert is_alive(proc.pid, argv)
        assert not is_alive(proc.pid, (str(script),))
    finally:
        proc.kill()
        proc.wait()


def test_stop_pid_does_nothing_when_the_command_line_differs() -> None:
    assert stop_pid(os.getpid(), ("not", "this", "process"), timeout=0.1) is False


def test_port_holder_and_port_is_free_see_a_listening_socket() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        assert (
            port_holder(port)
            == f"pid {os.getpid()} ({Path('/proc/self/comm').read_text().strip()})"
        )
    assert port_is_free("127.0.0.1", port)
    assert port_holder(port) is None


def test_pid_record_round_trips() -> None:
    record = PidRecord(42, ("a", "b c"), "127.0.0.1:1")
    assert PidRecord.load(record.dump()) == record


def test_a_started_process_is_seen_as_its_command_at_once() -> None:
    """Right after ``Popen`` the child may still be mid-exec, with no command line yet."""
    argv = (sys.executable, "-c", "import time; time.sleep(30)")
    for _ in range(20):
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL)
        try:
            wait_exec(proc.pid)
            assert is_alive(proc.pid, argv)
        finally:
            proc.kill()
            proc.wait()
