"""The steps of a blue-green replacement after green's run exists, waiting here or deferred.

Each phase acts (a signal, an event update) and names the wait that must end before the
next phase: :meth:`ReplacementSteps._drive` runs the phases in order and waits in the
worker (:func:`wait_for_state`) or, with ``deferrable``, hands each wait to the triggerer
(:class:`TopologyStateTrigger`); the task then resumes at ``execute_complete`` with the
phase and the :class:`Progress`, which is all a phase reads besides the database.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowctl_airflow.replacement_state import (
    Progress,
    ReplacementFailed,
    alive,
    utcnow,
)
from flowctl_airflow.triggers.topology_state import (
    ENDED,
    Reached,
    StateWaitFailed,
    TopologyStateTrigger,
    wait_for_state,
)

if TYPE_CHECKING:
    import logging

    from flowctl.adapters.control_plane import ControlPlane
    from flowctl.adapters.replacements import ReplacementLog

#: A wait's outcome, as :func:`~flowctl_airflow.triggers.topology_state.wait_for_state`
#: returns it: the state reached, or None on timeout.
Outcome = Reached | None


@dataclass(frozen=True)
class Wait:
    """A wait the protocol needs next: ``topology_id`` in ``wanted``, then phase ``then``."""

    topology_id: str
    wanted: frozenset[str]
    timeout_s: float
    what: str
    then: str


class ReplacementSteps:
    """The phases ``started`` -> ``ready`` -> ``drained`` -> ``active`` -> ``blue_stopped``.

    Mixed into the replace operator, whose attributes it reads: ``_plane``, ``_events``,
    ``_progress``, ``_killed``, ``deferrable``, ``poll_interval_s``, ``flowctl_conn_id``.
    """

    _plane: ControlPlane | None
    _events: ReplacementLog | None
    _progress: Progress | None
    _killed: bool
    deferrable: bool
    defer_after_s: float
    defer_settle_s: float
    _settling: bool
    poll_interval_s: float
    flowctl_conn_id: str
    log: logging.Logger
    defer: Callable[..., Any]

    def _drive(self, phase: str, outcome: Outcome) -> dict[str, Any]:
        """Run the protocol from ``phase`` on: each phase acts, then waits, until it ends."""
        assert self._progress is not None
        while True:
            if self._killed:
                raise ReplacementFailed(f"killed before {phase}")
            step = self._PHASES[phase](self, self._progress, outcome)
            if isinstance(step, dict):
                return step
            self.log.info("step %s ...", step.what)
            started = time.monotonic()
            # Just after a resume that came within seconds of its deferral (green's run
            # created), the worker's SUCCESS for that deferral may not have reached the
            # scheduler yet, and a task RUNNING then is taken for killed (DEFER_SETTLE_S):
            # that wait is deferred at once, deferrable or not, and waits out the settle
            # in the triggerer (which creating the run needed already).
            settling, self._settling = self._settling, False
            if settling or (self.deferrable and step.timeout_s > self.defer_after_s):
                # Here first: a wait that ends within defer_after_s never defers.
                here_s = 0.0 if settling else self.defer_after_s
                here = dataclasses.replace(step, timeout_s=here_s)
                outcome = self._wait_here(here) if here_s > 0 else None
                if outcome is None:
                    left = step.timeout_s - (time.monotonic() - started)
                    self._defer_wait(dataclasses.replace(step, timeout_s=max(left, 1.0)))
            else:
                outcome = self._wait_here(step)
            self.log.info("step %s done in %.2f s", step.what, time.monotonic() - started)
            phase = step.then

    def _wait_here(self, wait: Wait) -> Outcome:
        assert self._plane is not None
        try:
            return wait_for_state(
                self._plane,
                wait.topology_id,
                wait.wanted,
                wait.what,
                timeout_s=wait.timeout_s,
                poll_interval_s=self.poll_interval_s,
                killed=lambda: self._killed,
            )
        except StateWaitFailed as exc:
            raise ReplacementFailed(str(exc)) from None

    def _defer_wait(self, wait: Wait) -> None:
        """Hand the wait to the triggerer; the task resumes at execute_complete."""
        assert self._progress is not None
        self.log.info("step %s: deferred to the triggerer", wait.what)
        self.defer(
            trigger=TopologyStateTrigger(
                flowctl_conn_id=self.flowctl_conn_id,
                topology_id=wait.topology_id,
                wanted=wait.wanted,
                what=wait.what,
                end_at=time.time() + wait.timeout_s,
                poll_interval=max(self.poll_interval_s, 0.1),
                progress=self._progress.to_dict(),
                then=wait.then,
                not_before=time.time() + self.defer_settle_s,
            ),
            method_name="execute_complete",
            # The trigger ends itself at end_at; this is a backstop only.
            timeout=dt.timedelta(seconds=wait.timeout_s + 300),
        )

    def _update(self, **changes: Any) -> None:
        assert self._events is not None and self._progress is not None
        self._events.update_replacement(self._progress.event_id, **changes)

    def _started(self, p: Progress, _: Outcome) -> Wait:
        return Wait(p.green, frozenset({"READY"}), p.ready_s, "waiting for green READY", "ready")

    def _ready(self, p: Progress, ready: Outcome) -> Wait:
        assert self._plane is not None
        if ready is None:
            raise ReplacementFailed(
                f"green {p.green} not READY within ready_timeout_s={p.ready_s:g} "
                f"(is the {p.stream_dag_id} run {p.green_run_id} running?)"
            )
        self._update(ready_at=utcnow())
        if p.overlap:
            return self._overlap(p)
        self.log.info("step deactivate blue %s", p.blue)
        self._plane.send_signal(p.blue, "deactivate")
        p.deactivated = True
        deactivated_at = utcnow()
        p.deactivated_at = deactivated_at.isoformat()
        self._update(deactivated_at=deactivated_at)
        return Wait(
            p.blue, frozenset({"DRAINED"}), p.drain_s, "waiting for blue DRAINED", "drained"
        )

    # -- the overlapped handover (docs/flow-control.md "Overlapped handover") -------------

    def _overlap(self, p: Progress) -> Wait:
        """Open the handover, deactivate blue and activate green at once: green admits
        from blue's frontier while blue finishes its tuples."""
        from flowctl.adapters.handovers import HandoverLog

        assert self._plane is not None
        p.handover_id = HandoverLog(self._plane.engine).open(
            self._plane_pipeline(p), p.event_id, p.blue, p.green
        )
        self.log.info("step overlap: deactivate blue %s, activate green %s", p.blue, p.green)
        self._plane.send_signal(p.blue, "deactivate")
        p.deactivated = True
        deactivated_at = utcnow()
        p.deactivated_at = deactivated_at.isoformat()
        self._update(deactivated_at=deactivated_at)
        self._plane.send_signal(p.green, "activate")
        return Wait(
            p.green,
            frozenset({"ACTIVE"}),
            p.ready_s,
            "waiting for green ACTIVE (admitting from blue's frontier)",
            "overlap_active",
        )

    def _plane_pipeline(self, p: Progress) -> str:
        assert self._plane is not None
        return self._plane.get_topology(p.blue).pipeline

    def _overlap_active(self, p: Progress, active: Outcome) -> Wait:
        from flowctl.adapters.handovers import HandoverLog

        assert self._plane is not None and p.handover_id is not None
        if active is None:
            raise ReplacementFailed(
                f"green {p.green} not ACTIVE within {p.ready_s:g} s after activate (blue's "
                f"frontier never published, or green did not start admitting)"
            )
        p.green_active = True
        h = HandoverLog(self._plane.engine).get(p.handover_id)
        since = h.frontier_at or dt.datetime.fromisoformat(p.deactivated_at or "")
        # Admission's hand-over time: blue stopped cutting -> green cutting.
        p.pause_ms = max(0.0, (active.updated_at - since).total_seconds() * 1000.0)
        return Wait(
            p.blue,
            frozenset({"DRAINED"}),
            p.drain_s,
            "waiting for blue DRAINED (the overlap)",
            "overlap_drained",
        )

    def _overlap_drained(self, p: Progress, drained: Outcome) -> Wait:
        assert self._plane is not None
        since = utcnow() if drained is None else drained.updated_at
        if not self._heartbeat_after(p.green, since):
            raise ReplacementFailed(f"green {p.green} went silent during the overlap")
        if drained is None:
            self.log.warning(
                "blue %s not DRAINED within drain_timeout_s=%g: stopping it; green dispatches "
                "what it left below its frontier",
                p.blue,
                p.drain_s,
            )
        self._update(drained_at=since)
        return self._stop(p, p.blue, "blue_stopped")

    def _heartbeat_after(self, topology_id: str, since: dt.datetime) -> bool:
        """Green still lives after blue drained: ACTIVE with a heartbeat newer than
        ``since`` within the live limit (a SIGKILLed green keeps its state but not its
        heartbeat). Then blue may be stopped."""
        from flowctl.adapters.control_plane import LIVE_HEARTBEAT_S

        assert self._plane is not None
        deadline = time.monotonic() + LIVE_HEARTBEAT_S
        while time.monotonic() < deadline:
            t = self._plane.get_topology(topology_id)
            if t.state == "ACTIVE" and t.heartbeat_at is not None and t.heartbeat_at > since:
                return alive(self._plane, topology_id)
            if t.state != "ACTIVE":
                return False
            time.sleep(max(self.poll_interval_s, 0.1))
        return False

    def _drained(self, p: Progress, drained: Outcome) -> Wait:
        if drained is None:
            self.log.warning(
                "blue %s not DRAINED within drain_timeout_s=%g: stopping it; green dispatches "
                "its unapplied tuples first",
                p.blue,
                p.drain_s,
            )
            return self._stop(p, p.blue, "undrained_stopped")
        p.quiet_since = drained.updated_at.isoformat()
        return self._activate(p)

    def _undrained_stopped(self, p: Progress, stopped: Outcome) -> Wait:
        assert self._plane is not None
        if stopped is None:
            self.log.warning("%s did not reach STOPPED within %g s", p.blue, p.stop_s)
        p.blue_stopped = True
        p.quiet_since = self._plane.get_topology(p.blue).updated_at.isoformat()
        return self._activate(p)

    def _activate(self, p: Progress) -> Wait:
        assert self._plane is not None and p.quiet_since and p.deactivated_at
        quiet = max(
            dt.datetime.fromisoformat(p.quiet_since), dt.datetime.fromisoformat(p.deactivated_at)
        )
        p.quiet_since = quiet.isoformat()
        self._update(drained_at=quiet)
        self.log.info("step activate green %s", p.green)
        self._plane.send_signal(p.green, "activate")
        return Wait(p.green, frozenset({"ACTIVE"}), p.ready_s, "waiting for green ACTIVE", "active")

    def _active(self, p: Progress, active: Outcome) -> Wait | dict[str, Any]:
        if active is None:
            raise ReplacementFailed(
                f"green {p.green} not ACTIVE within {p.ready_s:g} s after activate"
            )
        p.green_active = True
        assert p.quiet_since is not None
        quiet = dt.datetime.fromisoformat(p.quiet_since)
        p.pause_ms = max(0.0, (active.updated_at - quiet).total_seconds() * 1000.0)
        if p.blue_stopped:
            return self._finish(p, None)
        return self._stop(p, p.blue, "blue_stopped")

    def _blue_stopped(self, p: Progress, stopped: Outcome) -> dict[str, Any]:
        if stopped is None:
            self.log.warning("%s did not reach STOPPED within %g s", p.blue, p.stop_s)
        p.blue_stopped = True
        return self._finish(p, stopped)

    def _stop(self, p: Progress, topology_id: str, then: str) -> Wait:
        """Send ``stop`` (unless it ended already) and wait for STOPPED; a timeout is logged."""
        assert self._plane is not None
        self.log.info("step stop %s", topology_id)
        if self._plane.get_topology(topology_id).state not in ENDED:
            self._plane.send_signal(topology_id, "stop")
        return Wait(topology_id, ENDED, p.stop_s, "waiting for STOPPED", then)

    def _finish(self, p: Progress, _: Outcome) -> dict[str, Any]:
        """Complete the event: the time, the output pause and the duplicates (0)."""
        assert self._events is not None
        self._update(finished_at=utcnow(), pause_ms=p.pause_ms, duplicates=0, outcome="ok")
        event = self._events.get_replacement(p.event_id)
        self.log.info(
            "replacement %d ok in %.1f s (%s): %s ACTIVE with %d lanes, %s stopped; %s %.0f "
            "ms, duplicates 0",
            event.id,
            (utcnow() - event.started_at).total_seconds(),
            "overlapped" if p.overlap else "sequential",
            p.green,
            p.target,
            p.blue,
            "admission hand-over (blue's frontier -> green ACTIVE)"
            if p.overlap
            else "output pause (blue quiet -> green ACTIVE)",
            p.pause_ms or 0.0,
        )
        return event.to_dict()

    _PHASES: Mapping[
        str, Callable[[ReplacementSteps, Progress, Outcome], Wait | dict[str, Any]]
    ] = {
        "started": _started,
        "ready": _ready,
        "drained": _drained,
        "undrained_stopped": _undrained_stopped,
        "active": _active,
        "overlap_active": _overlap_active,
        "overlap_drained": _overlap_drained,
        "blue_stopped": _blue_stopped,
    }

    # -- failure paths ----------------------------------------------------------------------
