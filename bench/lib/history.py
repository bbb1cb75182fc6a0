"""A week of another pipeline's bookkeeping, written into a control database before a run.

What a busy pipeline leaves behind in the tables that grow with time and volume, so a
benchmark can show that a topology's per-batch cost does not depend on them:

- ``applied_ranges``: one row per durable tuple (``tuple_size`` records, contiguous per
  partition, ``applied`` with a few ``dlq`` and ``replayed``), times spread over the week:
  the shape an older database (before ranges below the checkpoint were merged) keeps, and
  the largest a history can be; the offsets table holds each partition's checkpoint at
  the end of its rows, as the flusher left it;
- ``metrics_windows``: the last day's windows of the topology running then (one per
  ``metrics_window_s``), and hourly rollups of the days before;
- ``topologies`` and ``replacement_events``: a blue-green replacement every two hours,
  each one a stopped topology and one event.

Written through the control plane's public API where there is one (topologies,
replacements, windows), in bulk through the schema's tables for the ranges.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import random
from typing import Any

import sqlalchemy as sa

from flowctl.adapters import schema
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.replacements import ReplacementLog
from flowctl.core.metrics_row import MetricsRow

DAYS = 7
WINDOW_S = 10.0
REPLACE_EVERY_H = 2
PARTITIONS = 4
TUPLE_SIZE = 500
#: Rows per insert statement batch (one transaction each).
CHUNK = 50_000


@dataclasses.dataclass(frozen=True)
class History:
    """What :func:`fill_history` wrote: rows per table, the pipeline and its topic."""

    pipeline: str
    topic: str
    rows: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.rows.values())


def bulk_plane(database_url: str) -> ControlPlane:
    """The control plane at ``database_url`` for writing history fast: on SQLite without a
    disk sync per commit (thousands of one-row transactions; the history is set up before
    the measured run, not part of it, and the file is synced when the engine closes)."""
    engine = sa.create_engine(database_url)
    if engine.dialect.name == "sqlite":

        @sa.event.listens_for(engine, "connect")
        def _no_sync(dbapi_conn: Any, _record: Any) -> None:
            dbapi_conn.execute("PRAGMA synchronous=OFF")

    return ControlPlane(engine)


def fill_history(plane: ControlPlane, pipeline: str, rows: int, seed: int) -> History:
    """About ``rows`` rows of a week of ``pipeline`` (not the measured one) into ``plane``.

    The topologies, replacements and windows are what a week holds (about 9,000 rows);
    ``applied_ranges`` takes the rest. Raises ``ValueError`` naming ``rows`` when it is
    too small to hold the week's other rows.
    """
    rng = random.Random(seed)
    end = dt.datetime.now(dt.UTC).replace(microsecond=0)
    start = end - dt.timedelta(days=DAYS)
    topic = f"{pipeline}.eden"
    topologies = _topologies(plane, pipeline, start, end)
    windows = _windows(plane, topologies[-1], end, rng)
    other = len(topologies) + (len(topologies) - 1) + windows
    if rows < other + PARTITIONS:
        raise ValueError(f"--history-rows={rows}: a week of history needs at least {other + 4}")
    ranges = _applied_ranges(plane, pipeline, topic, rows - other, start, end, rng)
    return History(
        pipeline,
        topic,
        {
            "topologies": len(topologies),
            "replacement_events": len(topologies) - 1,
            "metrics_windows": windows,
            "applied_ranges": ranges,
        },
    )


def _topologies(
    plane: ControlPlane, pipeline: str, start: dt.datetime, end: dt.datetime
) -> list[str]:
    """A stopped topology per replacement, blue and green in turn; the events between them."""
    t = schema.topologies
    ids: list[str] = []
    values: list[dict[str, Any]] = []
    at = start
    generation = 1
    while at < end:
        colour = "blue" if generation % 2 else "green"
        tid = f"{pipeline}-{colour}-{generation}"
        values.append(
            {
                "topology_id": tid,
                "pipeline": pipeline,
                "colour": colour,
                "generation": generation,
                "parallelism": 2 ** (1 + generation % 3),
                "state": "STOPPED",
                "heartbeat_at": min(end, at + dt.timedelta(hours=REPLACE_EVERY_H)),
                "created_at": at,
                "updated_at": min(end, at + dt.timedelta(hours=REPLACE_EVERY_H)),
            }
        )
        ids.append(tid)
        at += dt.timedelta(hours=REPLACE_EVERY_H)
        generation += 1
    with plane.engine.begin() as conn:
        conn.execute(t.insert(), values)
    events = ReplacementLog(plane.engine)
    for old, new in itertools.pairwise(values):
        began = new["created_at"]
        events.record_replacement(
            pipeline,
            old["topology_id"],
            new["topology_id"],
            old["parallelism"],
            new["parallelism"],
            "failure windows: failNum > E(M) and S^2 > C",
            started_at=began,
            ready_at=began + dt.timedelta(seconds=21),
            deactivated_at=began + dt.timedelta(seconds=22),
            drained_at=began + dt.timedelta(seconds=25),
            finished_at=began + dt.timedelta(seconds=27),
            pause_ms=310.0,
            duplicates=0,
            outcome="ok",
        )
    return ids


def _window(
    topology: str, at: dt.datetime, seconds: float, rng: random.Random, **extra: Any
) -> MetricsRow:
    records = int(rng.gauss(10_000, 800) * seconds / 10.0)
    tuples = max(1, records // TUPLE_SIZE)
    return MetricsRow(
        topology=topology,
        window_start=at.timestamp(),
        window_end=at.timestamp() + seconds,
        admitted=tuples,
        acked=tuples,
        failed=0,
        timed_out=0,
        replayed=0,
        dlq=0,
        records=records,
        records_per_s=records / seconds,
        latency_p50_s=0.3,
        latency_p99_s=0.9,
        backlog=rng.randint(0, 2_000),
        backpressure_level=0.0,
        lanes=[{"lane": i, "window": 25, "state": "NORMAL", "in_flight": 0} for i in range(2)],
        **extra,
    )


def _windows(plane: ControlPlane, topology: str, end: dt.datetime, rng: random.Random) -> int:
    """The last day's raw windows of ``topology``, hourly rollups of the six days before."""
    written = 0
    day = end - dt.timedelta(days=1)
    hour = (end - dt.timedelta(days=DAYS)).replace(minute=0, second=0)
    while hour < day.replace(minute=0, second=0):
        per_hour = int(3600 / WINDOW_S)
        plane.write_row(_window(topology, hour, 3600.0, rng, rolled_up=per_hour))
        hour += dt.timedelta(hours=1)
        written += 1
    at = day.replace(minute=0, second=0)
    while at < end - dt.timedelta(seconds=WINDOW_S):
        plane.write_row(_window(topology, at, WINDOW_S, rng))
        at += dt.timedelta(seconds=WINDOW_S)
        written += 1
    return written


def _applied_ranges(
    plane: ControlPlane,
    pipeline: str,
    topic: str,
    rows: int,
    start: dt.datetime,
    end: dt.datetime,
    rng: random.Random,
) -> int:
    """``rows`` contiguous tuple ranges over the partitions, in time order; each partition's
    checkpoint (the offsets table) at the end of its rows."""
    a = schema.applied_ranges
    span = (end - start).total_seconds()
    next_offset = [0] * PARTITIONS
    written = 0
    while written < rows:
        batch = []
        for i in range(written, min(rows, written + CHUNK)):
            p = i % PARTITIONS
            lo = next_offset[p]
            size = TUPLE_SIZE if rng.random() > 0.05 else rng.randint(1, TUPLE_SIZE)  # lingered
            roll = rng.random()
            outcome = "applied" if roll > 0.002 else ("dlq" if roll > 0.001 else "replayed")
            batch.append(
                {
                    "pipeline": pipeline,
                    "topic": topic,
                    "partition": p,
                    "start": lo,
                    "end": lo + size,
                    "outcome": outcome,
                    "applied_at": start + dt.timedelta(seconds=span * i / rows),
                }
            )
            next_offset[p] = lo + size
        with plane.engine.begin() as conn:
            conn.execute(a.insert(), batch)
        written += len(batch)
    o = schema.offsets
    with plane.engine.begin() as conn:
        conn.execute(
            o.insert(),
            [
                {
                    "pipeline": pipeline,
                    "topic": topic,
                    "partition": p,
                    "next_offset": n,
                    "updated_at": end,
                }
                for p, n in enumerate(next_offset)
            ],
        )
    return written
