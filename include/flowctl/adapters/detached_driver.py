"""A stream job's ``spark-submit`` run detached from the Airflow task that started it.

In client mode the Spark driver lives in the ``spark-submit`` process. Run as a child
of the task, it died with the task's runner or Celery worker, and the task's retry had
to submit a second topology. Here it is started in a session of its own under a small
*keeper* process that is nobody's child once the launcher returns:

- the launcher (``spark_jobs/spark-submit-detached``, the stream operator's Spark
  binary) starts the keeper in a new session and returns at once, having written
  ``driver.json`` (the keeper's pid, the host) into the driver's directory
  ``<FLOWCTL_HOME>/drivers/<topology id>/``;
- the keeper runs ``spark-submit`` with its output appended to ``driver.log`` in that
  directory and writes its exit code to ``exit_code`` when it ends (a SIGTERM to the
  process group ends the driver, not the keeper, which records how it ended).

Whoever holds the directory (the task, its retry on the same host, ``demo down``) can
tell whether the driver still runs (:meth:`DetachedDriver.process_state`), read its
log from any offset (:class:`LogTail`) and, as a last resort, end its whole process
group (:meth:`DetachedDriver.kill`). A supervisor that kills the task's process group
does not reach the driver: a clean stop goes through the control plane.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from flowctl.adapters.procfs import proc_cmdline

#: The launcher's environment: the driver's directory (required).
DRIVER_DIR_ENV = "FLOWCTL_DRIVER_DIR"
#: The launcher's environment: the real ``spark-submit`` to run (default ``spark-submit``).
SPARK_SUBMIT_ENV = "FLOWCTL_SPARK_SUBMIT"
RECORD_FILE = "driver.json"
LOG_FILE = "driver.log"
EXIT_FILE = "exit_code"
#: What the keeper's command line holds (how a pid is told apart from a reused one).
KEEPER_MODULE = "flowctl.adapters.detached_driver"

#: :meth:`DetachedDriver.process_state` values.
ALIVE, EXITED, GONE, ELSEWHERE = "alive", "exited", "gone", "elsewhere"


def drivers_dir(home: Path) -> Path:
    """Where the detached drivers of a flowctl home keep their directories."""
    return home / "drivers"


def _write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


@dataclass(frozen=True)
class DetachedDriver:
    """One detached driver: its directory and what ``driver.json`` says about it."""

    directory: Path
    keeper_pid: int
    host: str
    started_at: float  # epoch seconds

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_FILE

    @classmethod
    def load(cls, directory: Path) -> DetachedDriver | None:
        """The driver recorded in ``directory``, or None if there is none (or it is unreadable)."""
        try:
            data = json.loads((directory / RECORD_FILE).read_text())
            return cls(
                directory=directory,
                keeper_pid=int(data["keeper_pid"]),
                host=str(data["host"]),
                started_at=float(data["started_at"]),
            )
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def to_json(self) -> dict[str, object]:
        """What the Airflow task keeps to find this driver again (its ``task_state_store``)."""
        return {
            "directory": str(self.directory),
            "keeper_pid": self.keeper_pid,
            "host": self.host,
            "started_at": self.started_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> DetachedDriver:
        """The inverse of :meth:`to_json`; a clear error names a missing or bad field."""
        try:
            return cls(
                directory=Path(str(data["directory"])),
                keeper_pid=int(str(data["keeper_pid"])),
                host=str(data["host"]),
                started_at=float(str(data["started_at"])),
            )
        except KeyError as exc:
            raise ValueError(f"detached driver record {dict(data)!r} has no {exc}") from None
        except ValueError as exc:
            raise ValueError(f"detached driver record {dict(data)!r}: {exc}") from None

    @property
    def local(self) -> bool:
        """Whether the driver runs on this host (its process and log can be seen)."""
        return self.host == socket.gethostname()

    def exit_code(self) -> int | None:
        """The exit code the keeper wrote when ``spark-submit`` ended, or None."""
        try:
            return int((self.directory / EXIT_FILE).read_text().strip())
        except (OSError, ValueError):
            return None

    def keeper_alive(self) -> bool:
        cmdline = proc_cmdline(self.keeper_pid)
        return cmdline is not None and KEEPER_MODULE in cmdline and str(self.directory) in cmdline

    def process_state(self) -> str:
        """:data:`ALIVE`, :data:`EXITED` (the exit code is known), :data:`GONE` (its keeper
        died without one: SIGKILLed) or :data:`ELSEWHERE` (another host runs it)."""
        if not self.local:
            return ELSEWHERE
        if self.keeper_alive():
            return ALIVE
        return EXITED if self.exit_code() is not None else GONE

    def kill(self, sig: int = signal.SIGKILL) -> bool:
        """Send ``sig`` to the driver's whole process group (keeper, ``spark-submit``, the
        Python driver, its workers); False if the keeper is not alive here."""
        if not self.keeper_alive():
            return False
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.keeper_pid, sig)
        return True


class LogTail:
    """Complete new lines of a growing log file, from a byte offset on."""

    def __init__(self, path: Path, offset: int = 0, *, skip_first_line: bool = False) -> None:
        self.path = path
        self.offset = offset
        self._partial = b""
        self._skip_first_line = skip_first_line  # an offset inside a line: drop its rest

    @classmethod
    def last(cls, path: Path, max_bytes: int) -> LogTail:
        """A tail starting at the first line within the last ``max_bytes`` of the file."""
        try:
            size = path.stat().st_size
        except OSError:
            return cls(path)
        if size <= max_bytes:
            return cls(path)
        return cls(path, size - max_bytes, skip_first_line=True)

    def lines(self) -> Iterator[str]:
        """The lines written since the last call (an unfinished last line waits)."""
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return
        self.offset += len(data)
        data = self._partial + data
        *complete, self._partial = data.split(b"\n")
        if complete and self._skip_first_line:
            complete = complete[1:]
            self._skip_first_line = False
        for raw in complete:
            yield raw.decode(errors="replace").rstrip("\r")

    def rest(self) -> Iterator[str]:
        """The new lines and an unfinished last one (once the writer has ended)."""
        yield from self.lines()
        if self._partial:
            yield self._partial.decode(errors="replace")
            self._partial = b""


def launch(
    directory: Path, command: Sequence[str], env: Mapping[str, str] | None = None
) -> DetachedDriver:
    """Start ``command`` under a keeper in a new session, its output in ``driver.log``.

    ``directory`` must hold no live driver (a topology id names one run).
    """
    directory.mkdir(parents=True, exist_ok=True)
    earlier = DetachedDriver.load(directory)
    if earlier is not None and earlier.keeper_alive():
        raise RuntimeError(
            f"driver directory {directory} already holds a running driver "
            f"(keeper pid {earlier.keeper_pid})"
        )
    for name in (RECORD_FILE, EXIT_FILE):
        (directory / name).unlink(missing_ok=True)
    with (directory / LOG_FILE).open("ab") as log:
        keeper = subprocess.Popen(
            [sys.executable, "-m", KEEPER_MODULE, "keep", str(directory), "--", *command],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=dict(env) if env is not None else None,
        )
    driver = DetachedDriver(directory, keeper.pid, socket.gethostname(), time.time())
    _write_atomically(directory / RECORD_FILE, json.dumps(driver.to_json()))
    return driver


def keep(directory: Path, command: Sequence[str]) -> int:
    """The keeper: run ``command``, outlive the signals sent to its process group, record
    the command's exit code."""
    # A handler, not SIG_IGN: the child (exec'd) gets the default action back, while the
    # keeper lives on to record how it ended. A TERM meant for the driver goes to the group.
    signal.signal(signal.SIGTERM, _note_signal)
    signal.signal(signal.SIGINT, _note_signal)
    with (directory / LOG_FILE).open("ab") as log:
        child = subprocess.Popen(
            list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
        )
    code = child.wait()
    _write_atomically(directory / EXIT_FILE, str(code))
    return 0


def _note_signal(_signum: int, _frame: FrameType | None) -> None:
    """The keeper's TERM/INT handler: nothing; the driver in its group got the signal too."""


def launcher_main(env: Mapping[str, str], argv: Sequence[str]) -> int:
    """``spark-submit-detached ARGS``: ``spark-submit ARGS`` detached; prints where it runs."""
    raw = env.get(DRIVER_DIR_ENV, "")
    if not raw:
        print(f"{DRIVER_DIR_ENV} is not set: no directory for the detached driver", file=sys.stderr)
        return 2
    spark_submit = env.get(SPARK_SUBMIT_ENV) or "spark-submit"
    driver = launch(Path(raw), [spark_submit, *argv], env)
    print(
        f"spark-submit started detached: keeper pid {driver.keeper_pid} on {driver.host}, "
        f"log {driver.log_path}",
        flush=True,
    )
    return 0


def leftover_drivers(home: Path) -> list[DetachedDriver]:
    """The drivers of ``home`` whose keeper still runs on this host."""
    root = drivers_dir(home)
    if not root.is_dir():
        return []
    found = (DetachedDriver.load(d) for d in sorted(root.iterdir()) if d.is_dir())
    return [d for d in found if d is not None and d.process_state() == ALIVE]


def _main(argv: Sequence[str]) -> int:
    if len(argv) >= 3 and argv[0] == "keep" and argv[2] == "--":
        return keep(Path(argv[1]), argv[3:])
    if argv and argv[0] == "launch":
        return launcher_main(os.environ, argv[1:])
    print(
        f"usage: python -m {KEEPER_MODULE} launch SPARK-SUBMIT-ARGS... "
        f"| keep DIRECTORY -- COMMAND...; got {list(argv)!r}",
        file=sys.stderr,
    )
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
