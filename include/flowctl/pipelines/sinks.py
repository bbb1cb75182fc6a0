"""Where a pipeline's results go: its definition's ``apply``/``stored``, or its ``[sink]``.

The flusher (:mod:`flowctl.spark.flow.job`), reconcile (:mod:`flowctl.spark.reconcile`)
and ``flowctl stream counts`` all ask :func:`result_store` rather than the definition,
so a pipeline whose config declares a ``[sink]`` writes no SQL: the declarative sink
(:mod:`flowctl.core.sink_rules`, SQL in :mod:`flowctl.adapters.sink_sql`) provides what
the definition leaves out. A definition's own method always wins, so a pipeline can
declare its table and still summarise it its own way for reconcile (log ETL does).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowctl.core.sink_rules import SinkSpec, fold
from flowctl.pipelines.base import Connection
from flowctl.pipelines.config import PipelineConfig, PipelineConfigError

__all__ = ["ResultStore", "result_store"]

Apply = Callable[[Connection, str, Sequence[Any]], int]
Stored = Callable[[Connection, str], Mapping[str, Any]]


@dataclass(frozen=True)
class ResultStore:
    """A pipeline's ``apply(conn, pipeline, results)`` and ``stored(conn, pipeline)``."""

    apply: Apply
    stored: Stored


def _declared_apply(spec: SinkSpec) -> Apply:
    def apply(conn: Connection, pipeline: str, results: Sequence[Any]) -> int:
        rows = fold(spec, results)  # checks every result before any SQL runs
        if not rows:
            return 0
        from flowctl.adapters import sink_sql

        return sink_sql.apply_rows(conn, spec, pipeline, rows)

    return apply


def _declared_stored(spec: SinkSpec) -> Stored:
    def stored(conn: Connection, pipeline: str) -> Mapping[str, Any]:
        from flowctl.adapters import sink_sql

        return sink_sql.stored(conn, spec, pipeline)

    return stored


def result_store(config: PipelineConfig, definition: Any | None = None) -> ResultStore:
    """``apply`` and ``stored`` of the pipeline: the definition's own, else its ``[sink]``'s.

    ``definition`` defaults to the config's (:meth:`PipelineConfig.pipeline_definition`). A
    method neither provides is a :class:`PipelineConfigError` naming the file and what to add.
    """
    if definition is None:
        definition = config.pipeline_definition()
    spec = config.sink
    found: dict[str, Callable[..., Any]] = {}
    for method, declared in (("apply", _declared_apply), ("stored", _declared_stored)):
        own = getattr(definition, method, None)
        if callable(own):
            found[method] = own
        elif spec is not None:
            found[method] = declared(spec)
        else:
            raise PipelineConfigError(
                f"{config.source}: definition={config.definition!r} has no {method}() and the "
                f"config has no [sink] section: declare where results go in [sink] (table, key, "
                f"values, merge, columns) or give the definition {method}()"
            )
    return ResultStore(apply=found["apply"], stored=found["stored"])
