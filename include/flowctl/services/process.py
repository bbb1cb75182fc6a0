"""Run a local server as a detached daemon we can find, check and stop again.

A daemon is started in its own session (so a Ctrl-C in the shell that ran
``flowctl services up`` does not kill it), with stdout/stderr appended to
``<home>/logs/<name>.log``. Its PID file ``<home>/run/<name>.pid`` records the
PID *and* the exact command line: a PID alone can be reused by an unrelated
process after a reboot or a crash, so "is it alive" means "/proc/<pid>/cmdline
is still the command we started". A PID file that fails that test is stale and
removed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flowctl.adapters.procfs import proc_cmdline
from flowctl.config import Settings
from flowctl.services.base import (
    DOWN,
    EXTERNAL,
    UNHEALTHY,
    UNREACHABLE,
    UP,
    PortInUseError,
    ServiceError,
    ServiceStatus,
)
from flowctl.services.ports import check_tcp, port_holder, port_is_free

log = logging.getLogger(__name__)

HealthCheck = Callable[[float], None]
"""Called with a timeout in seconds; returns if healthy, raises with the reason otherwise."""


def run_dir(settings: Settings) -> Path:
    """Where PID files live."""
    return settings.home / "run"


def log_dir(settings: Settings) -> Path:
    """Where daemon logs live."""
    return settings.home / "logs"


@dataclass(frozen=True)
class PidRecord:
    """The content of a PID file."""

    pid: int
    argv: tuple[str, ...]
    address: str

    def dump(self) -> str:
        return json.dumps({"pid": self.pid, "argv": list(self.argv), "address": self.address})

    @classmethod
    def load(cls, text: str) -> PidRecord:
        data = json.loads(text)
        return cls(pid=int(data["pid"]), argv=tuple(data["argv"]), address=str(data["address"]))


def _reap(pid: int) -> None:
    """Collect the exit status if ``pid`` is our child, so it does not linger as a zombie."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid:
            out.append(int(entry.name))
    return out


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, deepest first (the order to stop them in)."""
    order: list[int] = []

    def visit(p: int) -> None:
        for child in _children(p):
            visit(child)
        order.append(p)

    visit(pid)
    return order


def _survivors(pids: Sequence[int], deadline: float) -> list[int]:
    """Wait until none of ``pids`` lives (reaping our own children); return the survivors."""
    while True:
        for p in pids:
            _reap(p)
        alive = [p for p in pids if proc_cmdline(p) is not None]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.2)


def stop_tree(pid: int, timeout: float = 30.0) -> list[int]:
    """TERM every process of the tree, children first; KILL what is left after ``timeout``.

    Returns only when every process of the tree is gone: a SIGKILLed process can take
    a moment to exit (its memory is freed first), and a caller that checks right after
    must not see it.
    """
    tree = process_tree(pid)
    for p in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGTERM)
    stubborn = _survivors(tree, time.monotonic() + timeout)
    # Children forked while the tree was stopping belong to it too.
    stubborn += [p for p in process_tree(pid) if p not in tree and proc_cmdline(p) is not None]
    for p in stubborn:
        name = " ".join((proc_cmdline(p) or ("?",))[:3])
        log.warning("pid %d (%s) ignored SIGTERM for %.0f s; killing it", p, name, timeout)
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    left = _survivors(stubborn, time.monotonic() + 10.0)
    if left:
        log.error("pids %s still alive 10 s after SIGKILL", left)
    return tree


#: Launcher scripts that ``exec`` the real program with their own arguments last
#: (``spark-class`` becomes ``java ... <class> <args>``).
EXEC_LAUNCHERS = ("spark-class",)


def _matches(cmdline: tuple[str, ...], argv: Sequence[str]) -> bool:
    wanted = tuple(argv)
    # A script started through its ``#!`` line shows as ``interpreter script args...``.
    if cmdline == wanted or (len(cmdline) == len(wanted) + 1 and cmdline[1:] == wanted):
        return True
    tail = wanted[1:]
    return (
        bool(tail)
        and Path(wanted[0]).name in EXEC_LAUNCHERS
        and len(cmdline) > len(tail)
        and cmdline[-len(tail) :] == tail
    )


def is_alive(pid: int, argv: Sequence[str]) -> bool:
    """True if ``pid`` runs and its command line is exactly ``argv``.

    A script started through its ``#!`` line counts too, as long as everything
    after the interpreter is exactly ``argv``.
    """
    _reap(pid)
    cmdline = proc_cmdline(pid)
    return cmdline is not None and _matches(cmdline, argv)


def _gone(pid: int, argv: Sequence[str]) -> bool:
    """Exited (or a zombie), or the PID now runs another program.

    A process in the middle of exiting has an empty command line: that is not
    gone yet, or a caller could see it alive right after "stopped".
    """
    _reap(pid)
    cmdline = proc_cmdline(pid)
    return cmdline is None or (bool(cmdline) and not _matches(cmdline, argv))


def _wait_gone(pid: int, argv: Sequence[str], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not _gone(pid, argv):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    _reap(pid)
    return True


def wait_exec(pid: int, timeout: float = 5.0) -> None:
    """Return once ``pid`` shows a command line of its own, or has exited.

    ``Popen`` returns when the child's exec has begun, but ``/proc/<pid>/cmdline``
    stays empty until the kernel has laid out the new program's arguments; on a
    busy machine that gap is long enough for a ``running()`` check right after a
    start to take the fresh process for a stale PID file and remove it.
    """
    deadline = time.monotonic() + timeout
    while proc_cmdline(pid) == () and time.monotonic() < deadline:
        time.sleep(0.01)


def stop_pid(pid: int, argv: Sequence[str], timeout: float = 10.0) -> bool:
    """SIGTERM, wait up to ``timeout``, then SIGKILL. False if it was not running.

    ``argv`` is re-checked before every signal so a recycled PID is never hit.
    Returns once the process has really exited (not merely begun to).
    """
    if not is_alive(pid, argv):
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if _wait_gone(pid, argv, timeout):
        return True
    log.warning("pid %d did not exit %.1f s after SIGTERM; sending SIGKILL", pid, timeout)
    if is_alive(pid, argv):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if not _wait_gone(pid, argv, 5.0):
        raise ServiceError(f"pid {pid} ({argv[0]}) survived SIGKILL; check it by hand")
    return True


def _tail(path: Path, lines: int = 5) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


@dataclass
class Daemon:
    """One local server process: how to start it and how to tell it is healthy."""

    name: str
    argv: tuple[str, ...]
    host: str
    port: int
    settings: Settings
    health: HealthCheck
    env: Mapping[str, str] = field(default_factory=dict)
    start_timeout: float = 15.0
    stop_timeout: float = 10.0
    check_timeout: float = 3.0  # health check of a running daemon (status, up)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid_file(self) -> Path:
        return run_dir(self.settings) / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return log_dir(self.settings) / f"{self.name}.log"

    def running(self) -> PidRecord | None:
        """The record of our live process; a stale PID file is removed on the way."""
        try:
            record = PidRecord.load(self.pid_file.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning(
                "%s: unreadable PID file %s (%s); removing it", self.name, self.pid_file, exc
            )
            self.pid_file.unlink(missing_ok=True)
            return None
        if is_alive(record.pid, record.argv):
            return record
        log.info(
            "%s: stale PID file %s (pid %d is gone); removing it",
            self.name,
            self.pid_file,
            record.pid,
        )
        self.pid_file.unlink(missing_ok=True)
        return None

    def status(self) -> ServiceStatus:
        record = self.running()
        if record is None:
            return ServiceStatus(self.name, DOWN, None, self.address, f"log {self.log_file}")
        host, _, port = record.address.rpartition(":")
        try:
            self.health_at(host, int(port), timeout=self.check_timeout)
        except Exception as exc:
            return ServiceStatus(self.name, UNHEALTHY, record.pid, record.address, str(exc))
        return ServiceStatus(self.name, UP, record.pid, record.address, f"log {self.log_file}")

    def health_at(self, host: str, port: int, timeout: float) -> None:
        """TCP connect first (a cheap, clear failure), then the protocol-level check."""
        check_tcp(host, port, timeout)
        self.health(timeout)

    def up(self) -> str:
        record = self.running()
        if record is not None:
            if record.argv != self.argv:
                raise ServiceError(
                    f"{self.name} is already running as pid {record.pid} at {record.address} "
                    f"with other settings; run `flowctl services down --only {self.name}` first"
                )
            host, _, port = record.address.rpartition(":")
            try:
                self.health_at(host, int(port), timeout=self.check_timeout)
            except Exception as exc:
                raise ServiceError(
                    f"{self.name} runs as pid {record.pid} at {record.address} but is unhealthy "
                    f"({exc or type(exc).__name__}); see {self.log_file}, or run "
                    f"`flowctl services down --only {self.name}` and up again"
                ) from None
            return f"{self.name} already up (pid {record.pid}, {record.address})"
        if not port_is_free(self.host, self.port):
            holder = port_holder(self.port)
            raise PortInUseError(
                f"{self.name} cannot start: port {self.port} on {self.host} is already in use"
                + (f" by {holder}" if holder else "")
                + "; stop it or choose another port"
            )
        return self._start()

    def _start(self) -> str:
        self.pid_file.parent.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self.log_file, "ab") as out:
            stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
            out.write(f"--- {stamp} starting: {' '.join(self.argv)}\n".encode())
            out.flush()
            try:
                proc = subprocess.Popen(
                    self.argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env={**os.environ, **self.env},
                    close_fds=True,
                )
            except OSError as exc:
                raise ServiceError(
                    f"{self.name} cannot start {self.argv[0]}: {exc.strerror}"
                ) from None
        wait_exec(proc.pid)
        record = PidRecord(proc.pid, self.argv, self.address)
        self.pid_file.write_text(record.dump())
        last_error = "no answer yet"
        deadline = started + self.start_timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                self.pid_file.unlink(missing_ok=True)
                if not port_is_free(self.host, self.port):  # lost a race for the port
                    raise PortInUseError(
                        f"{self.name} cannot start: port {self.port} on {self.host} was taken "
                        f"while it started; log {self.log_file}: {_tail(self.log_file, 2)}"
                    )
                raise ServiceError(
                    f"{self.name} exited with code {proc.returncode} right after starting "
                    f"on {self.address}; log {self.log_file}: {_tail(self.log_file)}"
                )
            try:
                self.health_at(self.host, self.port, timeout=1.0)
            except Exception as exc:
                last_error = str(exc) or type(exc).__name__
                time.sleep(0.05)
                continue
            took = time.monotonic() - started
            return f"{self.name} up (pid {proc.pid}, {self.address}) in {took:.2f} s"
        stop_pid(proc.pid, self.argv, self.stop_timeout)
        proc.poll()
        self.pid_file.unlink(missing_ok=True)
        raise ServiceError(
            f"{self.name} did not become healthy on {self.address} within "
            f"{self.start_timeout:.0f} s ({last_error}); stopped it; log {self.log_file}"
        )

    def down(self) -> str:
        record = self.running()
        if record is None:
            return f"{self.name} already down"
        started = time.monotonic()
        stop_pid(record.pid, record.argv, self.stop_timeout)
        self.pid_file.unlink(missing_ok=True)
        took = time.monotonic() - started
        return f"{self.name} down (was pid {record.pid}) in {took:.2f} s"


class EmbeddedService:
    """A daemon we run, or, when the settings name another server, a health check of it.

    Subclasses say what the server is (``kind``, for messages), where the settings put
    it and how to check and run it; ``up``/``down``/``status`` are the same for all.
    """

    name: str
    kind: str

    def is_external(self, settings: Settings) -> bool:
        raise NotImplementedError

    def address(self, settings: Settings) -> str:
        raise NotImplementedError

    def health(self, address: str, timeout: float) -> None:
        raise NotImplementedError

    def daemon(self, settings: Settings, for_start: bool = False) -> Daemon:
        raise NotImplementedError

    def up(self, settings: Settings) -> str:
        if self.is_external(settings):
            address = self.address(settings)
            self.health(address, 5.0)
            return f"{self.name}: using external {self.kind} at {address} (reachable)"
        return self.daemon(settings, for_start=True).up()

    def down(self, settings: Settings) -> str:
        if self.is_external(settings):
            address = self.address(settings)
            return f"{self.name}: external {self.kind} at {address} is not ours to stop"
        return self.daemon(settings).down()

    def status(self, settings: Settings) -> ServiceStatus:
        if self.is_external(settings):
            address = self.address(settings)
            try:
                self.health(address, 3.0)
            except ServiceError as exc:
                return ServiceStatus(self.name, UNREACHABLE, None, address, str(exc))
            return ServiceStatus(self.name, EXTERNAL, None, address, f"external {self.kind}")
        return self.daemon(settings).status()
