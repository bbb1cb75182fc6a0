"""What every embedded service reports, and the errors the CLI shows as one line.

Kept apart from the process handling so the database (which has no process)
and the CLI share the same vocabulary without importing ``subprocess``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Protocol

from flowctl.config import Settings

# States shown by ``flowctl services status``.
UP = "up"  # running (or reachable) and healthy
DOWN = "down"  # not running
UNHEALTHY = "unhealthy"  # our process runs but fails its health check
EXTERNAL = "external"  # configured to use a service we do not run; reachable
UNREACHABLE = "unreachable"  # external or database service that does not answer


class ServiceError(RuntimeError):
    """An expected failure (taken port, missing binary, unreachable URL).

    The message is one complete sentence naming the service and what to do;
    the CLI prints it without a traceback.
    """


class PortInUseError(ServiceError):
    """The port a service must listen on is held by someone else."""


@dataclass(frozen=True)
class ServiceStatus:
    """One row of ``flowctl services status``."""

    name: str
    state: str
    pid: int | None
    address: str
    detail: str = ""

    @property
    def ok(self) -> bool:
        """Healthy, whether we run it or someone else does."""
        return self.state in (UP, EXTERNAL)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (``--json``)."""
        return {**asdict(self), "ok": self.ok}


class Service(Protocol):
    """The three operations the manager drives for each service."""

    name: str

    def up(self, settings: Settings) -> str:
        """Make the service available; return what was done. No-op when already up."""
        ...

    def down(self, settings: Settings) -> str:
        """Stop what we started; return what was done. No-op when already down."""
        ...

    def status(self, settings: Settings) -> ServiceStatus:
        """Report the current state without changing it."""
        ...
