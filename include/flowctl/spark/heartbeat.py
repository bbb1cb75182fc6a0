"""The driver's heartbeat, on a thread of its own: liveness independent of batch length.

A topology is taken for alive while its ``heartbeat_at`` is younger than
:data:`flowctl.adapters.control_plane.LIVE_HEARTBEAT_S` (admission of a second ACTIVE
topology, ``live_topologies`` that ``cluster down`` stops by signal, the handover and the
sensors read it). The control loop once wrote it between its other work, so whatever held
the loop (a stop waiting for a micro-batch of minutes, a drain's flush) also aged the
heartbeat, and a busy topology read as dead: ``cluster down`` skipped its stop signal.

:class:`Heartbeat` writes it every :data:`HEARTBEAT_EVERY_S` from a daemon thread, from
registration until the job records its final state; a database error is logged (at most
every :data:`WARN_EVERY_S`) and retried at the next beat, never raised into the job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

__all__ = ["HEARTBEAT_EVERY_S", "WARN_EVERY_S", "Heartbeat"]

log = logging.getLogger("flowctl.job")

#: Seconds between two heartbeats of the driver (well inside the 5 s of ``LIVE_HEARTBEAT_S``).
HEARTBEAT_EVERY_S = 1.0
#: Seconds between two warnings of a heartbeat the database refused.
WARN_EVERY_S = 10.0


class Heartbeat:
    """Calls ``beat()`` every ``every_s`` seconds on a daemon thread until :meth:`stop`.

    :param beat: writes one heartbeat (``lambda: control.heartbeat(topology_id)``).
    :param name: names the thread and the log lines (the topology id).
    """

    def __init__(
        self, beat: Callable[[], None], name: str, every_s: float = HEARTBEAT_EVERY_S
    ) -> None:
        if isinstance(every_s, bool) or not isinstance(every_s, int | float) or every_s <= 0:
            raise ValueError(f"Heartbeat every_s must be a number > 0, got {every_s!r}")
        self._beat = beat
        self.name = name
        self.every_s = float(every_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_warning = -1e9
        self.beats = 0  # heartbeats written (for the log and tests)
        self.failures = 0

    def start(self) -> None:
        """Beat once now (in the caller's thread, so a start is alive at once), then on the
        thread. Starting twice is a no-op."""
        if self._thread is not None:
            return
        self._once()
        self._thread = threading.Thread(
            target=self._run, name=f"heartbeat-{self.name}", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 5.0) -> None:
        """End the thread (before the job records its final state) and wait for it."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)

    def beat_now(self) -> None:
        """Beat once now, in the caller's thread, unless stopped: a replacement waits for a
        heartbeat newer than a moment (green's after blue drained) and should not wait up to
        ``every_s`` for the thread's next one."""
        if not self._stop.is_set():
            self._once()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._once()

    def _once(self) -> None:
        try:
            self._beat()
            self.beats += 1
        except Exception as exc:  # the database may be away: the stream goes on
            self.failures += 1
            now = time.monotonic()
            if now - self._last_warning >= WARN_EVERY_S:
                self._last_warning = now
                log.warning("topology %s: heartbeat not written (retrying): %s", self.name, exc)
