"""``flowctl pipeline check NAME``: a pipeline's config and definition, checked before any
DAG parses them, without Spark, Airflow, Kafka or a database.

What a running topology would find out late, found here at once, each failure a
:class:`PipelineConfigError` naming the file and the field or method and the value:

1. the config loads (every key typed and bounded, the ``[sink]`` included) and names an
   importable module with a ``DEFINITION`` that has ``process`` and ``reference``;
2. results have somewhere to go: the definition's own ``apply``/``stored`` or the
   ``[sink]`` (:func:`~flowctl.pipelines.sinks.result_store`), and a ``[sink]`` agrees
   with the table of that name if flowctl ships one;
3. the definition runs over sample records (its module's ``synthetic_records`` with
   their timestamps, else ``synthetic_lines``, as ``flowctl ingest`` would produce them),
   cut into tuples the way the source cuts them:
   results are JSON, parts of a tuple combine into the whole, the ``[sink]`` accepts
   every result, and what the sink would store equals ``reference`` (what reconcile
   compares) unless the definition reads its table its own way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from flowctl.core.sink_rules import fold, view
from flowctl.pipelines.base import PoisonRecord, Record, combiner_of, reference_of
from flowctl.pipelines.config import PipelineConfig, PipelineConfigError, load_pipeline_config
from flowctl.pipelines.sinks import result_store

__all__ = ["SAMPLE_RECORDS", "check_pipeline"]

#: Records of sample data the definition runs over.
SAMPLE_RECORDS = 400


def _fail(config: PipelineConfig, what: str) -> PipelineConfigError:
    return PipelineConfigError(f"{config.source}: definition={config.definition!r}: {what}")


def _tuple_result(
    config: PipelineConfig, process: Callable[..., Any], records: list[Record]
) -> Any:
    """What a lane stores for one tuple: poison records dropped (they go to the DLQ)."""
    while records:
        try:
            return process(records)
        except PoisonRecord as exc:
            if exc.offset is None or all(r.offset != exc.offset for r in records):
                raise _fail(
                    config,
                    f"process raised PoisonRecord({exc.reason!r}) with offset={exc.offset!r}, "
                    "not the offset of one of its records: the lane cannot isolate it",
                ) from None
            records = [r for r in records if r.offset != exc.offset]
        except Exception as exc:  # a definition's bug: say which tuple and why
            first, last = records[0].offset, records[-1].offset
            raise _fail(
                config, f"process raised on sample offsets {first}..{last}: {exc!r}"
            ) from exc
    return None


def _samples(config: PipelineConfig, module: Any) -> list[tuple[bytes, int | None]]:
    """Sample values and their Kafka timestamps (``None``: the generator sets none)."""
    timed = getattr(module, "synthetic_records", None)
    generate = getattr(module, "synthetic_lines", None)
    if callable(timed):
        pairs = list(timed(SAMPLE_RECORDS, 1))
    elif callable(generate):
        pairs = [(line, None) for line in generate(SAMPLE_RECORDS, 1)]
    else:
        raise _fail(config, "the module has no synthetic_lines(count, seed) to check it with")
    return [(v if isinstance(v, bytes) else v.encode(), ts) for v, ts in pairs]


def _check_json(config: PipelineConfig, results: Sequence[Any]) -> None:
    """Every result survives JSON unchanged (it waits in memcached as JSON)."""
    for result in results:
        try:
            if json.loads(json.dumps(result)) != result:
                raise ValueError("it changes on the way through JSON")
        except (TypeError, ValueError) as exc:
            raise _fail(
                config, f"process returned {result!r:.200}, which cannot wait in memcached: {exc}"
            ) from None


def _check_combine(
    config: PipelineConfig, definition: Any, process: Callable[..., Any], whole: list[Record]
) -> None:
    """``combine`` of a tuple's two halves equals ``process`` of the whole (base.py)."""
    cut = len(whole) // 2
    parts = [_tuple_result(config, process, p) for p in (whole[:cut], whole[cut:])]
    if None in parts:
        return
    try:
        combined = combiner_of(definition)(parts)
    except (TypeError, ValueError) as exc:
        raise _fail(config, f"combine() of a tuple's two halves raised {exc!r}") from None
    result = _tuple_result(config, process, whole)
    if combined != result:
        how = (
            "the definition's combine()"
            if callable(getattr(definition, "combine", None))
            else "the default combine (lists of rows concatenate, mappings add key by key; "
            "rows merged or sorted by process need a combine(results) method)"
        )
        raise _fail(
            config,
            f"combine() of a tuple's two halves differs from process() of the whole: "
            f"{how} gave {combined!r:.120}, process() gave {result!r:.120} "
            "(docs/pipelines.md, section 3)",
        )


def _check_sink(
    config: PipelineConfig, definition: Any, results: Sequence[Any], records: list[Record]
) -> str:
    """The ``[sink]`` takes every result and would store what ``reference`` computes."""
    spec = config.sink
    if spec is None or callable(getattr(definition, "apply", None)):
        return "results are JSON and combine"
    try:
        rows = fold(spec, results)
    except ValueError as exc:
        raise _fail(config, f"the [sink] refuses a result of process: {exc}") from None
    if callable(getattr(definition, "stored", None)):
        return "the [sink] accepts every result"
    stored, reference = view(spec, rows), dict(reference_of(definition, records))
    if stored != reference:
        differ = sorted(k for k in {*stored, *reference} if stored.get(k) != reference.get(k))
        shown = ", ".join(
            f"{k!r}: stored {stored.get(k)!r}, reference {reference.get(k)!r}" for k in differ[:3]
        )
        raise _fail(
            config,
            f"over the sample data, what the [sink] would store differs from reference() at "
            f"{len(differ)} key(s) ({shown}): reconcile would report them",
        )
    return "the [sink] accepts every result and would store what reference() computes"


def check_pipeline(name_or_path: str) -> list[str]:
    """Check pipeline ``name_or_path``; the lines say what passed, the first failure raises."""
    config = load_pipeline_config(name_or_path)
    module = config.load_definition()
    definition = config.pipeline_definition()
    for method in ("process", "reference"):
        if not callable(getattr(definition, method, None)):
            raise _fail(config, f"DEFINITION={definition!r:.80} has no {method}() method")
    store = result_store(config, definition)
    done = [f"config {config.source} loads; definition {config.definition} has process, reference"]
    if config.sink is not None:
        from flowctl.adapters.sink_sql import SinkTableError, table_for

        try:
            table_for(config.sink)
        except SinkTableError as exc:
            raise PipelineConfigError(f"{config.source}: {exc}") from None
        own = [m for m in ("apply", "stored") if getattr(store, m) == getattr(definition, m, None)]
        mine = f" (the definition's own {' and '.join(own)})" if own else ""
        done.append(
            f"results go to table {config.sink.table} by merge = {config.sink.merge!r}{mine}"
        )
    else:
        done.append("results go through the definition's own apply and stored")
    samples = _samples(config, module)
    records = [Record(config.eden_topic, 0, i, ts, v) for i, (v, ts) in enumerate(samples)]
    size = min(config.tuple_size, 50)
    tuples = [records[i : i + size] for i in range(0, len(records), size)]
    results = [r for t in tuples if (r := _tuple_result(config, definition.process, t)) is not None]
    _check_json(config, results)
    agrees = _check_sink(config, definition, results, records)
    if len(tuples[0]) > 1:
        _check_combine(config, definition, definition.process, tuples[0])
    done.append(f"process over {len(records)} sample records in {len(tuples)} tuples: {agrees}")
    return done
