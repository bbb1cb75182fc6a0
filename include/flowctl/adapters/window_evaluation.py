"""Read what a failure-window decision needs from the control plane, then decide.

:func:`evaluate` is the one place where a scaling decision is taken from the
database: it finds the topology, reads the pipeline's replacement events and the
topology's last ``A`` metrics windows, and hands them to the pure rule in
:mod:`flowctl.core.scaling_policy`. The poke-mode sensor calls it directly; the
deferred sensor's trigger calls it in a worker thread of the triggerer
(SQLAlchemy is synchronous); the live autoscaling benchmark calls it as the sensor does.
"""

from __future__ import annotations

import datetime as dt

from flowctl.adapters.control_plane import ControlPlane, Topology
from flowctl.adapters.replacements import ReplacementLog
from flowctl.core.scaling_policy import (
    Evaluation,
    WindowPolicy,
    judge_windows,
    replacement_gate,
    topology_refusal,
)

#: The replacement events the gate reads (the running one and the cooldown's are recent).
RECENT_REPLACEMENTS = 20


def evaluate(
    database: str | ControlPlane,
    pipeline: str,
    policy: WindowPolicy,
    *,
    topology_id: str | None = None,
    now: dt.datetime | None = None,
) -> Evaluation:
    """Decide from the database, now; never writes anything but the schema.

    ``database`` is a URL (its schema is ensured: a sensor pokes from a new process each
    time) or a :class:`ControlPlane` whose schema the caller ensured once (the trigger).
    No decision (``decision`` None or direction ``none``) when: no single ACTIVE
    topology (none runs, or two during a replacement); a replacement of the pipeline
    is running; the last replacement finished less than ``cooldown_s`` ago; the
    topology's last window says it is not HEALTHY; fewer than ``history_windows``
    windows exist for the topology; or the policy says so
    (:func:`~flowctl.core.scaling_policy.judge_windows`).
    """
    now = now or dt.datetime.now(dt.UTC)
    if isinstance(database, ControlPlane):
        plane = database
    else:
        plane = ControlPlane(database)
        plane.ensure_schema()

    topo = _the_topology(plane, pipeline, topology_id)
    if isinstance(topo, str):
        return Evaluation(pipeline, topology_id, None, topo)
    events = ReplacementLog(plane.engine).replacements(pipeline, limit=RECENT_REPLACEMENTS)
    gate = replacement_gate(events, policy.cooldown_s, now)
    if gate.refusal is not None:  # the windows are not read when nothing can be decided
        return Evaluation(pipeline, topo.topology_id, None, gate.refusal)
    windows = plane.metrics_windows(topo.topology_id, limit=policy.history_windows)
    rows = [w.row for w in windows]
    return judge_windows(pipeline, topo.topology_id, topo.parallelism, rows, policy, gate, now)


def _the_topology(plane: ControlPlane, pipeline: str, topology_id: str | None) -> Topology | str:
    """The one ACTIVE topology to judge, or why there is none."""
    if topology_id is not None:
        topos = [plane.get_topology(topology_id)]
    else:
        topos = plane.topologies(pipeline, states=["ACTIVE"])
    refusal = topology_refusal(pipeline, topology_id, {t.topology_id: t.state for t in topos})
    return refusal if refusal is not None else topos[0]
