"""Timestamps of a flow job's steps, for ``bench/latency_parts.py`` (never the product's).

Installed by ``bench/inject/sitecustomize.py`` when ``FLOWCTL_BENCH_TRACE`` names a file,
in every process of the job (the driver, the planner, Spark's Python workers): once one
of the modules below is imported, a few of its functions are wrapped so that each call
appends one JSON line (``ev``, ``t`` epoch seconds, ``pid`` and its fields) to the file.
The wrappers change no behaviour; what they record:

- ``plan``: the planner's ``latest_offset`` (start ``t0``, end ``t``, the plan it
  returned: ``seq`` and its rows, one per tuple);
- ``read``: a lane's task in Spark's Python worker (``FlowStreamReader.read``: ``t0``
  when Spark started it, ``t`` when its last status row was taken);
- ``queued``: a lane's MRWQ append returned (its tuples' ranges and item numbers);
- ``batch``: the driver's ``foreachBatch`` (``t0`` when Spark called it, ``t`` its end);
- ``flush``: one MRWQ flush that wrote items (``t0``, ``t``, the sequence numbers);
- ``progress``: each of Spark's query progress reports (its JSON), from a listener.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

_lock = threading.Lock()
_path: str | None = None


def emit(ev: str, **fields: Any) -> None:
    """Append one event line (a whole line per write, so processes do not interleave)."""
    if _path is None:
        return
    line = json.dumps({"ev": ev, "t": time.time(), "pid": os.getpid(), **fields}) + "\n"
    with _lock, open(_path, "a") as out:
        out.write(line)


def _ranges(tuples: Sequence[Any]) -> list[list[int]]:
    return [[t.partition, t.start, t.end] for t in tuples]


def _planner(module: ModuleType) -> None:
    cls = module.FlowPlanner
    latest_offset = cls.latest_offset

    def traced(self: Any, start: dict[str, Any]) -> dict[str, Any]:
        t0 = time.time()
        out: dict[str, Any] = latest_offset(self, start)
        planned = out.get("seq") != start.get("seq") and not out.get("warmup")
        emit("plan", t0=t0, seq=out.get("seq"), rows=out.get("plan") if planned else None)
        return out

    cls.latest_offset = traced


def _reader(module: ModuleType) -> None:
    cls = module.FlowStreamReader
    read = cls.read

    def traced(self: Any, partition: Any) -> Iterator[Any]:
        t0 = time.time()
        yield from read(self, partition)
        emit("read", t0=t0, seq=partition.seq, lane=partition.lane)

    cls.read = traced


def _lane(module: ModuleType) -> None:
    append_outcomes = module.append_outcomes

    def traced(done: Sequence[Any], store: Any, ns: str) -> None:
        append_outcomes(done, store, ns)
        items = [d for d in done if d.mrwq_seq is not None]
        emit(
            "queued",
            ranges=_ranges([d.entry.tuple for d in items]),
            seqs=[d.mrwq_seq for d in items],
        )

    module.append_outcomes = traced


def _job(module: ModuleType) -> None:
    cls = module.FlowStreamJob
    on_batch, start_query = cls._on_batch, cls._start_query

    def traced_batch(self: Any, df: Any, batch_id: int) -> None:
        t0 = time.time()
        on_batch(self, df, batch_id)
        emit("batch", t0=t0, batch=batch_id)

    def traced_start(self: Any, spark: Any) -> Any:
        from pyspark.sql.streaming import StreamingQueryListener

        class Progress(StreamingQueryListener):
            def onQueryStarted(self, event: Any) -> None:
                pass

            def onQueryProgress(self, event: Any) -> None:
                emit("progress", p=json.loads(event.progress.json))

            def onQueryIdle(self, event: Any) -> None:
                pass

            def onQueryTerminated(self, event: Any) -> None:
                pass

        spark.streams.addListener(Progress())
        return start_query(self, spark)

    cls._on_batch, cls._start_query = traced_batch, traced_start


def _flusher(module: ModuleType) -> None:
    cls = module.FlusherService
    step = cls._step

    def traced(self: Any, fn: Any, what: str, sleep: Any) -> Any:
        t0 = time.time()
        report = step(self, fn, what, sleep)
        if report is not None and report.result.first_seq is not None:
            r = report.result
            emit("flush", t0=t0, first=r.first_seq, last=r.last_seq, trigger=r.trigger)
        return report

    cls._step = traced


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "flowctl.spark.flow.planner": _planner,
    "flowctl.spark.flow.reader": _reader,
    "flowctl.spark.flow.lane": _lane,
    "flowctl.spark.flow.job": _job,
    "flowctl.adapters.mrwq_flusher": _flusher,
}


class _Finder(importlib.abc.MetaPathFinder):
    """Wraps the functions of :data:`PATCHES` right after their module is executed."""

    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if name not in PATCHES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        loader = spec.loader
        exec_module = loader.exec_module

        def patched(module: ModuleType) -> None:
            exec_module(module)
            PATCHES[name](module)

        loader.exec_module = patched  # type: ignore[method-assign]  # this spec's own loader
        return spec


def install(path: str) -> None:
    """Trace into ``path`` (called once per process by the bench's sitecustomize)."""
    global _path
    _path = path
    sys.meta_path.insert(0, _Finder())
