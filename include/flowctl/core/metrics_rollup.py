"""Hourly rollups of old metrics windows: ``metrics_windows`` stays bounded (SPEC H).

The driver writes one window per topology per ``metrics_window_s``; kept forever, that
is a row per window per topology without end. Windows older than the platform's
``FLOWCTL_METRICS_RAW_HOURS`` are replaced by one row per topology per hour (of
``window_start``, UTC), built here, and marked by ``rolled_up`` = the number of
windows it sums, so that readers of the latest windows never take one for a fresh window.

How each field is aggregated (the one documented rule; docs/services.md repeats it):

- counts (``admitted``, ``acked``, ``failed``, ``timed_out``, ``replayed``, ``dlq``,
  ``records``, ``repeat_failures``, ``sink_errors``) are summed, so totals stay exact;
- rates and means (``records_per_s``, ``arrival_rate``, ``lane_rate``,
  ``batch_duration_s``, ``trigger_s``, ``saturation``) are the mean weighted by each
  window's length;
- latencies (``latency_p50_s``, ``latency_p99_s``) and gauges (``backlog``,
  ``backpressure_level``, ``mrwq``, each stage of ``levels``) are the hour's maximum:
  no window of the hour was worse; so is ``rebuilds``, a count since the topology's start;
- ``health`` and ``health_cause`` are the hour's last window's; ``lanes`` are not kept.

A figure no window measured stays ``None``.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence

from .metrics_row import COUNTS, MetricsRow

__all__ = ["HOUR_S", "hour_of", "roll_up", "roll_up_by_hour"]

HOUR_S = 3600.0
_SUMMED_FIGURES = ("repeat_failures", "sink_errors")
_MEANS = (
    "records_per_s",
    "arrival_rate",
    "lane_rate",
    "batch_duration_s",
    "trigger_s",
    "saturation",
)
_MAXIMA = ("latency_p50_s", "latency_p99_s", "backlog", "backpressure_level", "mrwq", "rebuilds")


def hour_of(row: MetricsRow) -> float:
    """The start (epoch seconds, UTC) of the hour the window belongs to: its start's."""
    return row.window_start - row.window_start % HOUR_S


def roll_up(rows: Sequence[MetricsRow]) -> MetricsRow:
    """One row standing for ``rows`` (one topology's windows, rollups among them allowed).

    Raises ``ValueError`` naming the topologies when ``rows`` mixes several, or when it
    is empty: either would be a bug of the caller, and a silent mix would corrupt totals.
    """
    if not rows:
        raise ValueError("roll_up: no windows to roll up")
    topologies = sorted({r.topology for r in rows})
    if len(topologies) > 1:
        raise ValueError(f"roll_up: windows of several topologies {topologies}")
    ordered = sorted(rows, key=lambda r: (r.window_end, r.window_start))
    weights = [max(r.window_end - r.window_start, 0.0) for r in ordered]
    values: dict[str, object] = {k: sum(getattr(r, k) for r in ordered) for k in COUNTS}
    for name in _SUMMED_FIGURES:
        values[name] = _sum(getattr(r, name) for r in ordered)
    for name in _MEANS:
        values[name] = _weighted_mean([getattr(r, name) for r in ordered], weights)
    for name in _MAXIMA:
        values[name] = _max(getattr(r, name) for r in ordered)
    last = ordered[-1]
    return dataclasses.replace(
        last,
        window_start=min(r.window_start for r in ordered),
        window_end=last.window_end,
        lanes=None,
        levels=_max_levels(r.levels for r in ordered),
        n=0,
        rolled_up=sum(max(r.rolled_up, 1) for r in ordered),
        # The fields are chosen by name (COUNTS, _MEANS...), which no checker follows;
        # check() validates every field of the rolled-up row instead.
        **values,  # type: ignore[arg-type]
    ).check()


def roll_up_by_hour(rows: Iterable[MetricsRow]) -> list[MetricsRow]:
    """One rollup per topology per hour of ``rows``, in (topology, hour) order."""
    key = lambda r: (r.topology, hour_of(r))  # noqa: E731
    return [roll_up(list(group)) for _, group in itertools.groupby(sorted(rows, key=key), key)]


def _sum(values: Iterable[int | None]) -> int | None:
    measured = [v for v in values if v is not None]
    return sum(measured) if measured else None


def _max(values: Iterable[float | None]) -> float | None:
    measured = [v for v in values if v is not None]
    return max(measured) if measured else None


def _weighted_mean(values: Sequence[float | None], weights: Sequence[float]) -> float | None:
    pairs = [(v, w) for v, w in zip(values, weights, strict=True) if v is not None]
    if not pairs:
        return None
    total = sum(w for _, w in pairs)
    if total <= 0:  # zero-length windows only: a plain mean
        return sum(v for v, _ in pairs) / len(pairs)
    return sum(v * w for v, w in pairs) / total


def _max_levels(levels: Iterable[dict[str, int] | None]) -> dict[str, int] | None:
    out: dict[str, int] = {}
    for stage_levels in levels:
        for stage, level in (stage_levels or {}).items():
            out[stage] = max(level, out.get(stage, level))
    return out or None
