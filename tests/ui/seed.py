"""Known rows for the metrics page, written through the control plane like a real run.

Pipeline ``wordcount``: a blue topology (2 lanes) that ran four windows and was
replaced by a green one (4 lanes, still active) that ran two; one replacement
event between them. Pipeline ``other``: one topology, no windows. The numbers
are chosen so E(M) and S^2 can be checked by hand (see the API tests).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from flowctl.adapters import schema
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.handovers import HandoverLog
from flowctl.adapters.replacements import ReplacementLog
from flowctl.adapters.schema import utcnow
from flowctl.core.scaling import Decision
from flowctl.core.window_figures import WindowFigures

PIPELINE = "wordcount"
BLUE = "wordcount-blue-1"
GREEN = "wordcount-green-2"
#: failed + timed_out per blue window, oldest first: E(M) = 2, weighted S^2 = 5 (A = 4).
BLUE_FAILS = [(0, 0), (1, 1), (0, 0), (4, 2)]
GREEN_LANES = [
    {"lane": 0, "window": 7, "state": "NORMAL", "in_flight": 5},
    {"lane": 1, "window": 3, "state": "SLOW", "in_flight": 3},
    {"lane": 2, "window": 1, "state": "BUSY", "in_flight": 1},
    {"lane": 3, "window": 6, "state": "NORMAL", "in_flight": 2},
]
RECORDS_PER_S = 4321.5
PAUSE_MS = 321.0
DUPLICATES = 7
DLQ_TOTAL = 17
OVERLAP_S = 1.9  # green admitting -> blue gone


#: What the sensor saw when it decided the seeded replacement (shown on the page).
DECISION = Decision(
    "up",
    2,
    4,
    "scale up 2 -> 4: failNum=6, E(M)=2, S^2=5, C=4",
    "load",
    mean=2.0,
    s2=5.0,
    threshold_c=4.0,
    policy="adaptive",
    figures={"fail_num": 6, "saturation": 0.93, "backlog": 12000, "backlog_delta": 3000},
)


@dataclass(frozen=True)
class Seeded:
    start: dt.datetime
    replacement_id: int


def seed(url: str, window_s: float = 10.0, ago_s: float | None = None) -> Seeded:
    """Write the rows into the control database at ``url`` (schema ensured); the last
    window ends ``ago_s`` (default ``window_s``) before now. A live topology's window
    older than two windows shows as stale: a test that renders the page a while after
    seeding seeds longer windows, ending now."""
    plane = ControlPlane(url)
    plane.ensure_schema()
    events = ReplacementLog(plane.engine)
    ago = window_s if ago_s is None else ago_s
    start = utcnow() - dt.timedelta(seconds=6 * window_s + ago)

    def window(i: int) -> tuple[dt.datetime, dt.datetime]:
        return (
            start + dt.timedelta(seconds=i * window_s),
            start + dt.timedelta(seconds=(i + 1) * window_s),
        )

    plane.register_topology(BLUE, PIPELINE, "blue", 2)
    # Registered before BLUE admits: no second admitting topology registers beside an ACTIVE one.
    plane.register_topology(GREEN, PIPELINE, "green", 4)
    plane.set_state(BLUE, "ACTIVE")
    for i, (failed, timed_out) in enumerate(BLUE_FAILS):
        plane.write_metrics_window(
            BLUE,
            *window(i),
            admitted=100,
            acked=100 - failed - timed_out,
            failed=failed,
            timed_out=timed_out,
            records=10_000,
            records_per_s=1000.0 + i,
            latency_p50_ms=40.0 + i,
            latency_p99_ms=90.0 + i,
            dlq=5 if i == 3 else 0,
            backlog=200 * i,
            backpressure_level=1.0 if i == 3 else 0.0,
            lanes=[{"lane": 0, "window": 4, "state": "NORMAL", "in_flight": 1}],
        )
    plane.set_state(GREEN, "ACTIVE")
    plane.set_state(BLUE, "STOPPED")
    for i in (4, 5):
        plane.write_metrics_window(
            GREEN,
            *window(i),
            admitted=200,
            acked=200,
            records=40_000,
            records_per_s=RECORDS_PER_S if i == 5 else 3000.0,
            latency_p50_ms=30.0,
            latency_p99_ms=None if i == 4 else 70.0,
            dlq=12 if i == 5 else 0,
            backlog=50,
            backpressure_level=0.0,
            lanes=GREEN_LANES,
            figures=WindowFigures(rebuilds=1),  # one rebuild after lost MRWQ items
        )
    replacement_id = events.record_replacement(
        PIPELINE,
        BLUE,
        GREEN,
        2,
        4,
        "scale up 2 -> 4: failNum=6, E(M)=2, S^2=5, C=4",
        decision=DECISION,
        started_at=window(3)[1],
        ready_at=window(3)[1] + dt.timedelta(seconds=4),
        deactivated_at=window(3)[1] + dt.timedelta(seconds=4.1),
        drained_at=window(3)[1] + dt.timedelta(seconds=6),
        finished_at=window(3)[1] + dt.timedelta(seconds=6.5),
        pause_ms=PAUSE_MS,
        duplicates=DUPLICATES,
        outcome="ok",
    )
    # An overlapped handover: blue's frontier published, green admitting beside blue
    # until blue was gone.
    deactivated = window(3)[1] + dt.timedelta(seconds=4.1)
    handover_id = HandoverLog(plane.engine).open(PIPELINE, replacement_id, BLUE, GREEN)
    with plane.engine.begin() as conn:
        conn.execute(
            schema.handovers.update()
            .where(schema.handovers.c.id == handover_id)
            .values(
                created_at=deactivated,
                frontier_at=deactivated + dt.timedelta(seconds=0.2),
                green_admitting_at=deactivated + dt.timedelta(seconds=0.4),
                blue_gone_at=deactivated + dt.timedelta(seconds=0.4 + OVERLAP_S),
            )
        )
    plane.register_topology("other-blue-1", "other", "blue", 1)
    # Registration stamps "now"; move the two topologies' times to when the windows
    # say they ran, so the parallelism timeline lines up with the metrics charts.
    handover = window(3)[1] + dt.timedelta(seconds=6.5)
    t = schema.topologies
    with plane.engine.begin() as conn:
        conn.execute(
            t.update()
            .where(t.c.topology_id == BLUE)
            .values(created_at=start - dt.timedelta(seconds=2), updated_at=handover)
        )
        conn.execute(t.update().where(t.c.topology_id == GREEN).values(created_at=window(3)[1]))
    return Seeded(start=start, replacement_id=replacement_id)
