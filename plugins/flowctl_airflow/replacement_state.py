"""How far a blue-green replacement got, and how to undo it from there.

A deferrable replacement runs in several task executions (and its waits in the
triggerer), so its progress cannot live in the operator object: :class:`Progress` is
plain data carried through ``defer(kwargs=...)`` and the trigger's kwargs, and
:func:`roll_back` works from it alone, for the operator (a failed step, ``on_kill``)
and for the trigger (``on_kill`` when the deferred task is marked failed or cleared).
It sits beside ``operators/`` and ``triggers/`` rather than in either: both use it, and a
trigger never imports an operator.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowctl.adapters.control_plane import ControlPlane
    from flowctl.adapters.replacements import ReplacementLog


class ReplacementRefused(RuntimeError):
    """A replacement cannot start (another one runs, no single active topology, bad target)."""


class ReplacementFailed(RuntimeError):
    """A step of the replacement failed or timed out; the message names the step."""


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class Progress:
    """A replacement's identity, its timeouts and what has been done so far (JSON types)."""

    event_id: int
    blue: str
    green: str
    green_run_id: str
    stream_dag_id: str
    target: int
    ready_s: float
    drain_s: float
    stop_s: float
    deactivated: bool = False
    deactivated_at: str | None = None
    quiet_since: str | None = None
    green_active: bool = False
    blue_stopped: bool = False
    pause_ms: float | None = None
    overlap: bool = False
    handover_id: int | None = None
    #: The lanes of the warm standby this replacement took as green, as it was started
    #: (None: green was started for it): the next standby gets as many.
    standby_lanes: int | None = None
    #: The standby started after it (see :func:`next_standby_conf`), once triggered.
    next_standby: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Progress:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


#: Run id prefix of the warm standby a replacement starts when it took one:
#: ``next_standby__<event id>__<topology id>``.
NEXT_STANDBY_RUN_PREFIX = "next_standby__"


def next_standby_conf(
    p: Progress,
    *,
    enabled: bool,
    pipeline: str,
    colour: str,
    spares: Sequence[str],
    allowed: Sequence[int],
    stamp: str,
) -> tuple[dict[str, Any] | None, str]:
    """The ``stream_<pipeline>`` run conf of the warm standby to start after a finished
    replacement, or None; and why, for the task log.

    One is started only if the replacement took a warm standby as green
    (``p.standby_lanes``), finished (blue stopped, green admitting), ``enabled`` is on and
    the pipeline has no other spare (``spares``: live STARTING/READY topologies no
    replacement named): the pipeline keeps the one standby it had, never two. It gets the
    lanes the taken standby was started with (the smallest ``allowed`` value if that is
    no longer allowed), and ``colour``, the slot blue leaves free.
    """
    if not enabled:
        return None, "next standby: off (start_next_standby=False)"
    if p.standby_lanes is None:
        return None, "next standby: none (green was started for this replacement, no standby taken)"
    if not (p.blue_stopped and p.green_active):
        return None, "next standby: none (the replacement did not finish)"
    if spares:
        return None, f"next standby: none (the pipeline has one already: {', '.join(spares)})"
    lanes = p.standby_lanes if p.standby_lanes in allowed else min(allowed)
    topology_id = f"{pipeline}-{colour}-standby-{stamp}"
    conf = {
        "parallelism": lanes,
        "colour": colour,
        "standby": True,
        "replaces": None,
        "topology_id": topology_id,
    }
    return conf, f"next standby: starting {topology_id} ({colour}, {lanes} lane(s)) as the spare"


def alive(plane: ControlPlane, topology_id: str) -> bool:
    """``topology_id`` is ACTIVE with a heartbeat younger than the live limit."""
    from flowctl.adapters.control_plane import LIVE_HEARTBEAT_S, UnknownTopology

    try:
        t = plane.get_topology(topology_id)
    except UnknownTopology:
        return False
    if t.state != "ACTIVE" or t.heartbeat_at is None:
        return False
    return (utcnow() - t.heartbeat_at).total_seconds() < LIVE_HEARTBEAT_S


def roll_back(
    plane: ControlPlane,
    events: ReplacementLog,
    progress: Progress,
    error: str,
    log: logging.Logger,
) -> str:
    """Leave exactly one admitting topology and record the outcome; returns the outcome.

    Signals only, no waiting: this runs in ``on_kill`` too, and a job acts on a signal
    within its poll interval whether or not anyone waits for it. Before green admits:
    ``activate`` blue if it was deactivated and ``stop`` green (``rolled_back``). Once
    green admits, or once blue was stopped for not draining, green is the one kept
    (``failed``: the replacement did not finish cleanly but finished forward).
    """
    from flowctl.adapters.control_plane import UnknownTopology

    p = progress
    outcome = "rolled_back"
    log.error("replacement %d failed: %s; rolling back", p.event_id, error)
    try:
        if p.overlap and p.green_active and not p.blue_stopped and not alive(plane, p.green):
            p.green_active = False  # green died in the overlap: blue takes everything back
            log.error("green %s is gone during the overlap: blue %s takes over", p.green, p.blue)
            # A killed driver records nothing: its row would say ACTIVE for ever, and the
            # sensor and the next replacement would find two ACTIVE topologies and refuse.
            with contextlib.suppress(UnknownTopology):
                if plane.get_topology(p.green).state == "ACTIVE":
                    plane.set_state(p.green, "FAILED")
                    log.error("green %s marked FAILED (no heartbeat)", p.green)
        if p.green_active:
            outcome = "failed"
            if not p.blue_stopped:
                plane.send_signal(p.blue, "stop")
                log.info("green is ACTIVE: stop sent to blue %s", p.blue)
        elif p.blue_stopped:
            outcome = "failed"
            plane.send_signal(p.green, "activate")
            log.error(
                "blue %s is stopped; activate sent to green %s again (the only topology left): "
                "check it admits",
                p.blue,
                p.green,
            )
        else:
            if p.deactivated:
                plane.send_signal(p.blue, "activate")
                log.info("rollback: activate sent to blue %s", p.blue)
            try:
                plane.send_signal(p.green, "stop")
                log.info("rollback: stop sent to green %s", p.green)
            except UnknownTopology:
                log.error(
                    "rollback: green %s never registered; if its run %s starts later, mark it "
                    "failed in the UI (it would only wait in READY)",
                    p.green,
                    p.green_run_id,
                )
    finally:
        try:
            events.update_replacement(
                p.event_id, outcome=outcome, error=error[:2000], finished_at=utcnow()
            )
        except Exception:
            log.exception("could not record the outcome of replacement %d", p.event_id)
    return outcome
