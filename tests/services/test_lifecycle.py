"""Up, status, down and up again against the real Apache Kafka broker and memcached."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from flowctl.adapters.procfs import proc_cmdline
from flowctl.config import Settings
from flowctl.services import kafka, manager, memcached
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
        "kafka": UP,
    }
    assert rows["kafka"].address == f"127.0.0.1:{fresh_settings.kafka_port}"
    assert rows["memcached"].address == f"127.0.0.1:{fresh_settings.memcached_port}"
    first = _pids(fresh_settings)
    assert first["memcached"] and first["kafka"]
    assert (fresh_settings.home / "run" / "kafka.pid").is_file()
    assert (fresh_settings.home / "logs" / "memcached.log").is_file()

    manager.down(fresh_settings)
    assert pid_gone(first["memcached"]) and pid_gone(first["kafka"])
    assert not (fresh_settings.home / "run" / "kafka.pid").exists()
    states = {s.name: s.state for s in manager.status(fresh_settings)}
    assert states == {"db": UP, "memcached": DOWN, "kafka": DOWN}

    manager.up(fresh_settings)
    second = _pids(fresh_settings)
    assert second["kafka"] and second["kafka"] != first["kafka"]
    assert all(s.ok for s in manager.status(fresh_settings))


def test_up_twice_is_a_noop(fresh_settings: Settings) -> None:
    manager.up(fresh_settings, only=["memcached", "kafka"])
    before = _pids(fresh_settings)
    messages = manager.up(fresh_settings, only=["memcached", "kafka"])
    assert [m for m in messages if "already up" in m] == messages
    assert _pids(fresh_settings) == before


def test_down_when_down_is_a_noop(fresh_settings: Settings) -> None:
    messages = manager.down(fresh_settings, only=["memcached", "kafka"])
    assert messages == ["kafka already down", "memcached already down"]


def test_taken_port_names_service_and_port_and_leaves_nothing(fresh_settings: Settings) -> None:
    port = fresh_settings.kafka_port
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", port))
        blocker.listen()
        with pytest.raises(PortInUseError) as err:
            manager.up(fresh_settings)
    message = str(err.value)
    assert "kafka" in message and f"port {port}" in message and "127.0.0.1" in message
    assert f"pid {os.getpid()}" in message  # what holds the port
    # memcached had started before kafka failed: it was rolled back.
    assert _pids(fresh_settings) == {"db": None, "memcached": None, "kafka": None}
    assert processes_mentioning(str(fresh_settings.home / "kafka" / "server.properties")) == []
    assert processes_mentioning(f"-p {fresh_settings.memcached_port} ") == []


def test_stale_pid_file_of_a_dead_process_is_removed(fresh_settings: Settings) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    daemon = kafka.daemon(fresh_settings)
    daemon.pid_file.parent.mkdir(parents=True)
    daemon.pid_file.write_text(PidRecord(dead.pid, daemon.argv, daemon.address).dump())

    assert kafka.KafkaService().status(fresh_settings).state == DOWN
    assert not daemon.pid_file.exists()
    assert "up (pid" in manager.up(fresh_settings, only="kafka")[0]


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
    daemon = kafka.daemon(fresh_settings)
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


def test_the_broker_keeps_its_log_across_a_kill_and_purge_deletes_it(
    fresh_settings: Settings,
) -> None:
    """The embedded Apache Kafka's log is on disk: records acknowledged before a SIGKILL are
    read back after ``up``; ``status`` shows the log's size; ``down --purge`` deletes it."""
    from flowctl.adapters import kafka_log
    from flowctl.adapters.kafka_ends import latest_offsets

    manager.up(fresh_settings, only="kafka")
    bootstrap = fresh_settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"kept": 2})
    assert kafka_log.produce(bootstrap, "kept", [f"r{i}" for i in range(500)]) == 500
    pid = _pids(fresh_settings)["kafka"]
    assert pid is not None
    os.kill(pid, 9)
    os.waitpid(pid, 0)  # we are its parent here
    manager.up(fresh_settings, only="kafka")
    assert sum(latest_offsets(bootstrap, "kept").values()) == 500
    row = kafka.KafkaService().status(fresh_settings)
    assert row.state == UP and " MB on disk in " in row.detail
    assert kafka.log_size(fresh_settings) > 0

    with pytest.raises(Exception, match="still running"):
        kafka.KafkaService().purge(fresh_settings)
    messages = manager.down(fresh_settings, only="kafka", purge=True)
    assert messages[0].startswith("kafka down") and "deleted its log" in messages[1]
    assert not kafka.log_dir(fresh_settings).exists()
    manager.up(fresh_settings, only="kafka")  # a new, empty log
    with pytest.raises(ValueError, match="kept"):
        latest_offsets(bootstrap, "kept")


def test_the_broker_creates_no_topic_by_itself(fresh_settings: Settings) -> None:
    """``auto.create.topics.enable=false``: a topic nobody created is an error, not a new log."""
    from kafka import KafkaProducer
    from kafka.errors import KafkaTimeoutError

    manager.up(fresh_settings, only="kafka")
    producer = KafkaProducer(bootstrap_servers=fresh_settings.kafka_bootstrap, max_block_ms=2_000)
    try:
        with pytest.raises(KafkaTimeoutError):
            producer.send("never-created", b"x").get(timeout=5)
    finally:
        producer.close()
