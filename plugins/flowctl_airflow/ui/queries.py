"""The metrics page's read model: what the JSON API returns, computed from the control plane.

Kept apart from the FastAPI routes so it can be tested on a real database
without a web server, and so the routes stay thin (parse, authorise, call).
Everything here only reads; each call is one short transaction, retried on
transient errors like every other control-plane access.

E(M) and S^2 are recomputed here from the stored failure counts with the very
function the autoscaler uses (:func:`flowctl.core.scaling.dispersion`), per
topology, over the last ``history`` windows ending at each window: the
autoscaler's ring buffer is cleared when a replacement changes the
parallelism, so the history of one topology never mixes with the next one's.
The page therefore shows the same numbers the decision was taken on.
"""

from __future__ import annotations

import datetime as dt
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.control_plane import TERMINAL_STATES, lane_list
from flowctl.adapters.data_loss import causes
from flowctl.adapters.db import engine_for, in_transaction
from flowctl.adapters.handovers import Handover, HandoverLog
from flowctl.adapters.replacements import ReplacementLog
from flowctl.core.health import stale_for
from flowctl.core.scaling import dispersion, paper_signal


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    """An aggregate (``max``) bypasses the column type: SQLite hands back naive UTC text."""
    if value is None:
        return None
    if isinstance(value, str):
        value = dt.datetime.fromisoformat(value)
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


class UnknownPipeline(LookupError):
    """The control database knows nothing about that pipeline."""


def _iso(value: dt.datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True)
class MetricsQuery:
    """Parameters of the metrics series: how many windows and the scaling rule's A and C.

    ``history`` / ``threshold_c`` left ``None`` are taken from the pipeline's
    ``[scaling]`` section (see :func:`scaling_rule`), so the page shows E(M), S^2
    and C as the autoscaler computes them.
    """

    limit: int = 120
    history: int | None = None
    threshold_c: float | None = None


def metrics_window_s(pipeline: str) -> float:
    """The pipeline's ``[flow] metrics_window_s`` (the default when its config does not
    load: :func:`scaling_rule` reports why): how old a window may be and still be current."""
    from flowctl.pipelines.config import (
        PIPELINES_DIR,
        PipelineConfigError,
        load_pipeline_config,
        resolve_path,
    )
    from flowctl.pipelines.config_sections import FlowConfig

    if resolve_path(pipeline).parent != PIPELINES_DIR:  # a bare name only, never a path
        return FlowConfig().metrics_window_s
    try:
        return load_pipeline_config(pipeline).flow.metrics_window_s
    except PipelineConfigError:
        return FlowConfig().metrics_window_s


def scaling_rule(pipeline: str) -> tuple[int, float, str, str | None]:
    """``(A, C, source, problem)`` of the pipeline's ``[scaling]`` section.

    ``source`` is ``config`` when read from ``include/pipelines/<pipeline>.toml``, else
    ``default`` (the autoscaler's defaults) with ``problem`` saying why: no such file, or
    the file is invalid. Only a bare pipeline name is looked up, never a path.
    """
    from flowctl.pipelines.config import (
        PIPELINES_DIR,
        PipelineConfigError,
        load_pipeline_config,
        resolve_path,
    )
    from flowctl.pipelines.config_sections import ScalingConfig

    defaults = ScalingConfig()
    if resolve_path(pipeline).parent != PIPELINES_DIR:
        problem = f"pipeline={pipeline!r} is not a config name"
        return defaults.history_windows, defaults.threshold_c, "default", problem
    try:
        scaling = load_pipeline_config(pipeline).scaling
    except PipelineConfigError as exc:
        return defaults.history_windows, defaults.threshold_c, "default", str(exc)
    return scaling.history_windows, scaling.threshold_c, "config", None


class MetricsReader:
    """Read-only queries over the control database at ``url`` (URL or engine)."""

    def __init__(self, url: str | sa.Engine) -> None:
        self.engine = engine_for(url)

    def _read(self, what: str, query: sa.Executable) -> Sequence[sa.Row[Any]]:
        return in_transaction(self.engine, lambda conn: conn.execute(query).all(), what=what)

    # -- pipelines ----------------------------------------------------------------------------

    def pipelines(self) -> list[dict[str, Any]]:
        """Every pipeline with a topology or a replacement, with its current state in brief."""
        t, r = schema.topologies, schema.replacement_events
        topo_rows = self._read(
            "listing pipelines",
            sa.select(t).order_by(t.c.pipeline, t.c.generation, t.c.created_at),
        )
        replaced = {
            row.pipeline: row.n
            for row in self._read(
                "counting replacements",
                sa.select(r.c.pipeline, sa.func.count().label("n")).group_by(r.c.pipeline),
            )
        }
        m = schema.metrics_windows
        last_window = {
            row.pipeline: row.last
            for row in self._read(
                "finding the latest metrics windows",
                sa.select(t.c.pipeline, sa.func.max(m.c.window_end).label("last"))
                .join(m, m.c.topology_id == t.c.topology_id)
                .group_by(t.c.pipeline),
            )
        }
        by_pipeline: dict[str, list[sa.Row[Any]]] = defaultdict(list)
        for row in topo_rows:
            by_pipeline[row.pipeline].append(row)
        out = []
        for name in sorted(set(by_pipeline) | set(replaced)):
            rows = by_pipeline.get(name, [])
            live = [row for row in rows if row.state not in TERMINAL_STATES]
            current = live[-1] if live else (rows[-1] if rows else None)
            out.append(
                {
                    "pipeline": name,
                    "topologies": len(rows),
                    "live_topologies": [row.topology_id for row in live],
                    "current_topology": None if current is None else current.topology_id,
                    "parallelism": None if current is None else current.parallelism,
                    "state": None if current is None else current.state,
                    "replacements": replaced.get(name, 0),
                    "last_window_end": _iso(_utc(last_window.get(name))),
                }
            )
        return out

    def _require(self, pipeline: str) -> None:
        t, r = schema.topologies, schema.replacement_events
        [found] = self._read(
            f"looking up pipeline {pipeline!r}",
            sa.select(
                sa.or_(
                    sa.exists().where(t.c.pipeline == pipeline),
                    sa.exists().where(r.c.pipeline == pipeline),
                )
            ),
        )
        if not found[0]:
            raise UnknownPipeline(f"pipeline={pipeline!r} has no topologies and no replacements")

    # -- topologies ---------------------------------------------------------------------------

    def topologies(self, pipeline: str) -> dict[str, Any]:
        """The parallelism timeline: one band per topology, oldest first.

        A band starts when the topology registered and ends when it reached a final
        state (its last update); a live topology's band is open (``ended_at`` None).
        """
        self._require(pipeline)
        t = schema.topologies
        rows = self._read(
            f"listing topologies of {pipeline!r}",
            sa.select(t).where(t.c.pipeline == pipeline).order_by(t.c.generation, t.c.created_at),
        )
        ids = [row.topology_id for row in rows]
        why = in_transaction(
            self.engine, lambda conn: causes(conn, ids), what=f"reading causes of {pipeline!r}"
        )
        bands = []
        for row in rows:
            final = row.state in TERMINAL_STATES
            bands.append(
                {
                    "topology_id": row.topology_id,
                    "colour": row.colour,
                    "generation": row.generation,
                    "parallelism": row.parallelism,
                    "state": row.state,
                    "started_at": _iso(row.created_at),
                    "ended_at": _iso(row.updated_at) if final else None,
                    "heartbeat_at": _iso(row.heartbeat_at),
                    "spark_app_id": row.spark_app_id,
                    "airflow_run_id": row.airflow_run_id,
                    # why it FAILED, when the platform knows (records lost, a read error)
                    "cause": why.get(row.topology_id),
                }
            )
        return {"pipeline": pipeline, "now": _iso(schema.utcnow()), "topologies": bands}

    # -- replacements -------------------------------------------------------------------------

    def replacements(self, pipeline: str, limit: int) -> dict[str, Any]:
        """The pipeline's most recent ``limit`` replacements, oldest first."""
        self._require(pipeline)
        events = ReplacementLog(self.engine).replacements(pipeline, limit=limit)
        handovers = HandoverLog(self.engine).for_events(e.id for e in events)
        return {
            "pipeline": pipeline,
            "replacements": [
                {**e.to_dict(), "handover": _handover(handovers.get(e.id))} for e in events
            ],
        }

    # -- metrics windows ----------------------------------------------------------------------

    def metrics(self, pipeline: str, query: MetricsQuery) -> dict[str, Any]:
        """The last ``query.limit`` windows of the pipeline, every topology, in time order.

        Each window carries ``fail_num`` (failed + timed out, SPEC E), ``mean`` (E(M)),
        ``s2`` (weighted S^2) over that topology's last ``history`` windows, and
        ``signal``: what the paper's rule with threshold C would decide there.
        ``rule_source`` says where A and C came from: ``query``, ``config`` (the
        pipeline's ``[scaling]``) or ``default`` (then ``rule_problem`` says why).
        ``health`` and ``health_cause``: the topology's health at the window's end
        (HEALTHY, RECOVERING, STALLED, HALTED; the autoscaler never scales a topology that
        is not HEALTHY); ``rebuilds``: its rebuilds after lost MRWQ items so far.
        ``latest`` holds, per live topology, its newest window with the per-lane send
        windows and states, and ``stale_s``: seconds since that window ended when it is
        older than two windows (its health is not known now), else ``None``;
        ``dlq_total`` counts every DLQ record ever.
        """
        self._require(pipeline)
        history, threshold_c, source, problem = scaling_rule(pipeline)
        if query.history is not None or query.threshold_c is not None:
            source, problem = "query", None
        if query.history is not None:
            history = query.history
        if query.threshold_c is not None:
            threshold_c = query.threshold_c
        t, m = schema.topologies, schema.metrics_windows
        topo_rows = self._read(
            f"listing topologies of {pipeline!r}",
            sa.select(t.c.topology_id, t.c.colour, t.c.state, t.c.parallelism).where(
                t.c.pipeline == pipeline
            ),
        )
        topo = {row.topology_id: row for row in topo_rows}
        # The first returned window needs history - 1 earlier windows for its E(M) and S^2.
        # Windows only: an hourly rollup of old windows is history, not a window of the
        # series (the DLQ total below sums rollups too: their counts are exact sums).
        fetch = query.limit + history - 1
        joined = (
            sa.select(m)
            .join(t, t.c.topology_id == m.c.topology_id)
            .where(t.c.pipeline == pipeline, m.c.rolled_up == 0)
            .order_by(m.c.window_end.desc(), m.c.id.desc())
            .limit(fetch)
        )
        rows = list(reversed(self._read(f"reading metrics of {pipeline!r}", joined)))
        dlq_total = in_transaction(
            self.engine,
            lambda conn: conn.execute(
                sa.select(sa.func.coalesce(sa.func.sum(m.c.dlq), 0))
                .join(t, t.c.topology_id == m.c.topology_id)
                .where(t.c.pipeline == pipeline)
            ).scalar_one(),
            what=f"summing the DLQ of {pipeline!r}",
        )
        windows = list(_with_dispersion(rows, topo, history, threshold_c))[-query.limit :]
        latest: dict[str, dict[str, Any]] = {}
        for window in windows:
            latest[window["topology_id"]] = window
        spans = {row.topology_id: (row.window_start, row.window_end) for row in rows}
        window_s, now = metrics_window_s(pipeline), schema.utcnow().timestamp()
        live = [
            {
                **latest[tid],
                "state": topo[tid].state,
                "parallelism": topo[tid].parallelism,
                "stale_s": stale_for(
                    spans[tid][0].timestamp(), spans[tid][1].timestamp(), window_s, now=now
                ),
            }
            for tid in latest
            if topo[tid].state not in TERMINAL_STATES
        ]
        # Lanes only in ``latest``: the series stays small however many lanes there are.
        series = [{k: v for k, v in w.items() if k != "lanes"} for w in windows]
        return {
            "pipeline": pipeline,
            "limit": query.limit,
            "history": history,
            "threshold_c": threshold_c,
            "rule_source": source,
            "rule_problem": problem,
            "dlq_total": int(dlq_total),
            "windows": series,
            "latest": live,
        }


def _handover(h: Handover | None) -> dict[str, Any] | None:
    """How a replacement handed over: ``None`` when sequentially (no handovers row); for an
    overlap, its steps and ``overlap_s``, the time both topologies admitted (green
    admitting -> blue gone)."""
    if h is None:
        return None
    overlap = (
        None
        if h.green_admitting_at is None or h.blue_gone_at is None
        else round(max(0.0, (h.blue_gone_at - h.green_admitting_at).total_seconds()), 3)
    )
    return {**h.to_dict(), "overlap_s": overlap}


def _with_dispersion(
    rows: Iterable[sa.Row[Any]], topo: dict[str, Any], history: int, threshold_c: float
) -> Iterable[dict[str, Any]]:
    counts: dict[str, list[int]] = defaultdict(list)
    for row in rows:
        fail_num = int(row.failed) + int(row.timed_out)
        ring = counts[row.topology_id]
        ring.append(fail_num)
        del ring[:-history]
        mean, s2 = dispersion(ring)
        yield {
            "topology_id": row.topology_id,
            "colour": topo[row.topology_id].colour,
            "window_start": _iso(row.window_start),
            "window_end": _iso(row.window_end),
            "admitted": row.admitted,
            "acked": row.acked,
            "failed": row.failed,
            "timed_out": row.timed_out,
            "fail_num": fail_num,
            "replayed": row.replayed,
            "dlq": row.dlq,
            "records": row.records,
            "records_per_s": row.records_per_s,
            "latency_p50_ms": row.latency_p50_ms,
            "latency_p99_ms": row.latency_p99_ms,
            "backlog": row.backlog,
            "backpressure_level": row.backpressure_level,
            "mean": mean,
            "s2": s2,
            "windows_in_history": len(ring),
            "signal": paper_signal(fail_num, mean, s2, threshold_c),
            "health": row.health,
            "health_cause": row.health_cause,
            "rebuilds": row.rebuilds,
            "lanes": None if row.lanes_json is None else lane_list(json.loads(row.lanes_json)),
        }
