"""What a pipeline is: a definition the flow-controlled topology runs tuple by tuple.

A pipeline is not a fork of the job: it is a small module (named by the
``definition`` key of its config file) exposing ``DEFINITION``, an object
with the interface below. The topology's lanes call :meth:`process` once per
tuple (with a deadline; a raise or a timeout fails only that tuple), the
flusher calls :meth:`apply` inside its database transaction, and the
reconcile job compares :meth:`reference` over the Kafka log with what
:meth:`stored` reads back.

Contracts:

- :meth:`process` is deterministic in its input and has no side effects: a
  tuple may be processed more than once (replays, restarts); only its first
  applied result counts. Its result is JSON-serialisable (it waits in
  memcached).
- A record that can never succeed (malformed input) raises
  :class:`PoisonRecord`: it goes to the DLQ at once, with the reason,
  instead of being retried ``max_attempts`` times.
- :meth:`apply` writes a list of tuple results in the caller's transaction;
  the caller guarantees each result is applied at most once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

#: The database connection :meth:`PipelineDefinition.apply` and
#: :meth:`PipelineDefinition.stored` get: a SQLAlchemy ``Connection`` inside the
#: caller's transaction. Typed loosely so a pipeline module needs no SQLAlchemy:
#: it hands the connection to :mod:`flowctl.adapters.results`, which runs the SQL.
Connection = Any


class PoisonRecord(ValueError):
    """A record that no retry can fix; the message says why (it goes to the DLQ)."""

    def __init__(self, reason: str, *, offset: int | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.offset = offset


@dataclass(frozen=True)
class Record:
    """One Kafka record as the lanes hand it to a pipeline."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None
    value: bytes | None
    key: bytes | None = None


class PipelineDefinition(Protocol):
    """The interface of ``<definition module>.DEFINITION``."""

    name: str

    def process(self, records: Sequence[Record]) -> Any:
        """Run the pipeline's operators over one tuple; return its JSON-serialisable result."""
        ...

    def apply(self, conn: Connection, pipeline: str, results: Sequence[Any]) -> int:
        """Persist tuple results in ``conn``'s transaction; return the rows touched."""
        ...

    def reference(self, values: Iterable[bytes | None]) -> Mapping[str, Any]:
        """The plain-Python result of the whole input, for reconciliation."""
        ...

    def stored(self, conn: Connection, pipeline: str) -> Mapping[str, Any]:
        """What the database holds, in the shape :meth:`reference` returns."""
        ...
