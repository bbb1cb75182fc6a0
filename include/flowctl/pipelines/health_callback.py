"""The pipeline's health callback: ``[stream] on_health_callback``, like Airflow's
``on_failure_callback``, called when a topology becomes STALLED, HALTED or FAILED.

The stream task's driver calls it (so it runs where the topology's log is, with the
task's environment), once per change of health, with one ``dict`` of plain values::

    {"pipeline": "wordcount", "topology_id": "wordcount-blue-1", "state": "STALLED",
     "cause": "backlog 4000, nothing durable for 61 s; ...", "at": "2026-11-26T06:00:10+00:00"}

A callback that raises is logged at ERROR with its traceback and never stops the
stream: an alert must not take down what it alerts about. docs/flow-control.md
("Health") has an example that posts to a webhook.
"""

from __future__ import annotations

import datetime as dt
import importlib
import logging
import re
from collections.abc import Callable
from typing import Any

from flowctl.core.health import ALERT_STATES
from flowctl.core.validation import InvalidValue

log = logging.getLogger("flowctl.health")

#: ``package.module:function`` (or ``package.module.function``).
_PATH = re.compile(r"^[A-Za-z_][\w.]*[:.][A-Za-z_]\w*$")

Callback = Callable[[dict[str, Any]], Any]


def resolve_callback(path: str, field: str = "stream.on_health_callback") -> Callback:
    """The callable at ``path``; raises :class:`InvalidValue` naming ``field`` and ``path``."""
    if not isinstance(path, str) or not _PATH.match(path):
        raise InvalidValue(field, path, 'must be "package.module:function"')
    module_name, _, name = path.replace(":", ".").rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidValue(field, path, f"cannot import {module_name!r}: {exc}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise InvalidValue(field, path, f"{module_name!r} has no callable {name!r}")
    # getattr() is Any; callable() above is the check a cast would only assert.
    return fn  # type: ignore[no-any-return]


class HealthCallback:
    """Calls the pipeline's callback once per change to STALLED, HALTED or FAILED."""

    def __init__(self, pipeline: str, topology_id: str, path: str | None) -> None:
        self.pipeline = pipeline
        self.topology_id = topology_id
        self._fn = resolve_callback(path) if path else None
        self._last = "HEALTHY"

    def health(self, state: str, cause: str | None, at: float) -> None:
        """A metrics window's health (``at``: its end, epoch s)."""
        if state != self._last and state in ALERT_STATES:  # RECOVERING resolves itself
            self._fire(state, cause, at)
        self._last = state

    def failed(self, cause: str | None, at: float) -> None:
        """The topology is FAILED."""
        self._fire("FAILED", cause, at)

    def _fire(self, state: str, cause: str | None, at: float) -> None:
        if self._fn is None:
            return
        event = {
            "pipeline": self.pipeline,
            "topology_id": self.topology_id,
            "state": state,
            "cause": cause,
            "at": dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="seconds"),
        }
        try:
            self._fn(event)
        except Exception:
            log.error(
                "topology %s: the health callback failed on %s (the stream goes on)",
                self.topology_id,
                state,
                exc_info=True,
            )
