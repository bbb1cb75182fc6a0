"""What a pipeline is: a definition the flow-controlled topology runs tuple by tuple.

A pipeline is not a fork of the job: it is a small module (named by the
``definition`` key of its config file) exposing ``DEFINITION``, an object
with the interface below. The topology's lanes call :meth:`process` once per
tuple (with a deadline; a raise or a timeout fails only that tuple), the
flusher calls :meth:`apply` inside its database transaction, and the
reconcile job compares :meth:`reference` over the Kafka log with what
:meth:`stored` reads back. :meth:`apply` and :meth:`stored` are optional when
the config declares a ``[sink]``: :func:`flowctl.pipelines.sinks.result_store`
then provides them from the declaration (a definition's own method wins).

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
- :meth:`combine` (optional) merges the results of consecutive parts of one
  tuple into the result of the whole: the lane processes the parts of a tuple
  around its poison records separately (``flowctl.core.isolation``) and
  stores one result per tuple. ``combine([process(a), process(b)])`` must equal
  ``process(a + b)`` whenever both succeed. Without the method,
  :func:`combine_results` is used: lists concatenate, mappings of numbers add
  key by key.
- :meth:`reference_records` (optional) is :meth:`reference` over whole records, for a
  pipeline whose result depends on more than the values: clickstream judges lateness by
  a record's Kafka timestamp. Reconcile and ``flowctl pipeline check`` call it when the
  definition has it (:func:`reference_of`), so it must agree with :meth:`process` on
  every record ``process`` accepts, whatever tuple the record came in.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from numbers import Number
from typing import Any, Protocol

# The record type is the core's (every lane reader yields it); definitions import it from here.
from flowctl.core.record import Headers as Headers
from flowctl.core.record import Record as Record

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


class PipelineDefinition(Protocol):
    """The interface of ``<definition module>.DEFINITION``."""

    name: str

    def process(self, records: Sequence[Record]) -> Any:
        """Run the pipeline's operators over one tuple; return its JSON-serialisable result."""
        ...

    def apply(self, conn: Connection, pipeline: str, results: Sequence[Any]) -> int:
        """Persist tuple results in ``conn``'s transaction; return the rows touched."""
        ...

    def combine(self, results: Sequence[Any]) -> Any:
        """Optional: the result of a tuple from its consecutive parts' results, in order."""
        ...

    def reference(self, values: Iterable[bytes | None]) -> Mapping[str, Any]:
        """The plain-Python result of the whole input, for reconciliation."""
        ...

    def reference_records(self, records: Iterable[Record]) -> Mapping[str, Any]:
        """Optional: :meth:`reference` over whole records (timestamps, coordinates)."""
        ...

    def stored(self, conn: Connection, pipeline: str) -> Mapping[str, Any]:
        """What the database holds, in the shape :meth:`reference` returns."""
        ...


def combine_results(results: Sequence[Any]) -> Any:
    """The default merge of consecutive parts' results (see :meth:`PipelineDefinition.combine`).

    Lists (rows) concatenate in order; mappings whose values are numbers (counts) add key
    by key. Any other shape cannot be merged without knowing the pipeline: the error names
    the result, so the definition can declare its own ``combine``.
    """
    if all(isinstance(r, list) for r in results):
        return [row for r in results for row in r]
    if all(isinstance(r, Mapping) for r in results):
        total: dict[Any, Any] = {}
        for r in results:
            for key, value in r.items():
                if isinstance(value, bool) or not isinstance(value, Number):
                    raise TypeError(
                        f"combine_results: value of key={key!r} is {value!r}, not a number; "
                        "give the definition a combine(results) method"
                    )
                total[key] = total.get(key, 0) + value
        return total
    shapes = sorted({type(r).__name__ for r in results})
    raise TypeError(
        f"combine_results: results of types {shapes} are neither all lists nor all mappings "
        "of numbers; give the definition a combine(results) method"
    )


def reference_of(definition: Any, records: Iterable[Record]) -> Mapping[str, Any]:
    """``definition.reference_records(records)`` when it has it, else ``reference`` of the
    records' values: what reconcile compares with the stored results."""
    by_records = getattr(definition, "reference_records", None)
    # The definition is duck-typed (a module or an object): its methods' results are Any.
    reference: Mapping[str, Any] = (
        by_records(records)
        if callable(by_records)
        else definition.reference(r.value for r in records)
    )
    return reference


def combiner_of(definition: Any) -> Any:
    """``definition.combine`` when the definition has one, else :func:`combine_results`."""
    combine = getattr(definition, "combine", None)
    return combine if callable(combine) else combine_results
