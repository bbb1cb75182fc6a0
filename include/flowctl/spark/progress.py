"""Where Spark's own micro-batch time goes, from the query's progress reports.

The planner times its planning (:mod:`flowctl.core.timings`); the rest of a batch is
Spark's: the offset log written before the batch (``walCommit``), the batch itself
(``addBatch``: the lanes' tasks and the sink), the commit log after it
(``commitOffsets``). :func:`batch_phases` summarises the query's ``recentProgress``
since the last summary, so the job can log one line per status period and a reader of
the task log sees which part of a micro-batch dominates its latency.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flowctl.core.metrics import percentile

#: The phases reported, in the order a batch runs them.
PHASES = (
    "triggerExecution",
    "latestOffset",
    "queryPlanning",
    "walCommit",
    "addBatch",
    "commitOffsets",
)


def _field(progress: Any, name: str) -> Any:
    # PySpark 4 gives StreamingQueryProgress objects, older versions dicts.
    return progress[name] if isinstance(progress, dict) else getattr(progress, name, None)


def batch_phases(
    progresses: Iterable[Any], after_batch: int
) -> tuple[int, dict[str, tuple[float, float]]]:
    """``(last batch id seen, {phase: (p50 ms, p99 ms)})`` over the reports of batches
    after ``after_batch`` that read input (an empty trigger has no batch to speak of)."""
    last = after_batch
    samples: dict[str, list[float]] = {}
    for progress in progresses:
        batch = int(_field(progress, "batchId") or -1)
        if batch <= after_batch:
            continue
        last = max(last, batch)
        if not _field(progress, "numInputRows"):
            continue
        durations = _field(progress, "durationMs") or {}
        for phase in PHASES:
            if phase in durations:
                samples.setdefault(phase, []).append(float(durations[phase]))
    return last, {
        phase: (round(percentile(v, 50) or 0.0, 1), round(percentile(v, 99) or 0.0, 1))
        for phase, v in samples.items()
    }
