"""The stream job's two sides of an overlapped handover (docs/flow-control.md).

Mixed into :class:`~flowctl.spark.flow.job.FlowStreamJob` (whose attributes it uses):
blue publishes its planner's admission frontier into its ``handovers`` row once it has
stopped admitting; green, activated with a ``handovers`` row naming it, waits for that
frontier, admits from it at once, and takes over the MRWQ flusher and blue's leftovers
once blue is gone (:class:`~flowctl.core.handover.GreenHandover` decides when).
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import TYPE_CHECKING, Any

from flowctl.core.clock import MonotonicClock
from flowctl.core.handover import GreenAction, GreenHandover
from flowctl.spark.flow import channels
from flowctl.spark.flow.channels import CallMark, SpoutState

if TYPE_CHECKING:
    from flowctl.adapters.control_plane import ControlPlane
    from flowctl.adapters.handovers import HandoverLog
    from flowctl.adapters.memcached_store import MemcachedStore
    from flowctl.pipelines.config import PipelineConfig
    from flowctl.spark.heartbeat import Heartbeat

log = logging.getLogger("flowctl.job")


class HandoverSides:
    """Blue's and green's handover steps, called from the job's control loop."""

    topology_id: str
    parallelism: int
    config: PipelineConfig
    control: ControlPlane
    store: MemcachedStore
    ns: str
    _fence: CallMark | None
    heartbeat: Heartbeat
    database_url: str
    admit: bool
    rebuild_no: int
    _draining_since: float | None
    _warming_since: float | None
    _handover_log: HandoverLog | None
    _blue_handover: int | None
    _green: GreenHandover | None
    _green_handover: int | None
    frontier: dict[str, Any] | None
    sweep_no: int | None

    if TYPE_CHECKING:  # FlowStreamJob's, which this mixes into

        def _write_ctl(self, *, required: bool = False) -> None: ...
        def _set_state(self, state: str) -> None: ...
        def _activate(self) -> None: ...
        def _start_flusher(self) -> None: ...

    def _handovers(self) -> HandoverLog:
        from flowctl.adapters.handovers import HandoverLog

        if self._handover_log is None:
            self._handover_log = HandoverLog(self.database_url)
        return self._handover_log

    def _fence_admission(self) -> None:
        """Blue, admission just switched off for a handover: read the planner's call mark.

        ``admit: false`` is written first, then the mark is read (the order matters:
        :class:`~flowctl.spark.flow.channels.CallMark`). Every call after the marked one
        reads ``admit: false``, so the marked call's published state holds blue's frontier:
        it can be published at once, while blue's running batch goes on, instead of after
        the batch (the next ``latestOffset``). No mark (memcached away, nothing planned
        yet): ``None``, and the frontier waits for a state with admission off.
        """
        self._fence = None
        if self._blue_handover is None:
            return
        try:
            self._write_ctl(required=True)
            raw = self.store.get_json(channels.call_key(self.ns))
            self._fence = None if raw is None else CallMark.decode(raw)
        except Exception as exc:
            log.warning("topology %s: no admission fence (%s)", self.topology_id, exc)

    def _fenced(self, state: SpoutState) -> bool:
        """``state`` was published by the fenced call or a later one of the same planner."""
        fence = self._fence
        return (
            fence is not None
            and state.planner == fence.planner
            and state.call is not None
            and state.call >= fence.call
        )

    def _publish_frontier(self, state: SpoutState | None) -> None:
        """Blue: write the planner's frontier once it has stopped admitting for good: from
        the fenced call's state (at once), or from a state with admission off."""
        from flowctl.core.handover import Frontier

        since, handover = self._draining_since, self._blue_handover
        if handover is None or since is None or state is None or state.frontier is None:
            return
        fenced = self._fenced(state)
        if not fenced and (state.admit or state.at <= since):
            return
        published = self._handovers().publish(handover, Frontier.from_dict(state.frontier))
        self._blue_handover = None
        self._fence = None
        log.info(
            "topology %s: admission frontier %s published for handover %d (%s)%s",
            self.topology_id,
            dict(Frontier.from_dict(state.frontier).eden),
            handover,
            f"fenced at planner call {state.call}" if fenced else "after its last batch",
            "" if published else " (one was published already: kept)",
        )

    def _take_parallelism(self) -> None:
        """A standby's lanes are its row's at activation: a warm standby, started ahead of
        any replacement, is given the replacement's parallelism then (the planner plans
        that many lanes from its rebuild on)."""
        lanes = self.control.get_topology(self.topology_id).parallelism
        if lanes != self.parallelism:
            log.info(
                "topology %s: %d lane(s) from activation on (started with %d)",
                self.topology_id,
                lanes,
                self.parallelism,
            )
            self.parallelism = lanes

    def _begin_green(self) -> bool:
        """Green activated: is there an overlapped handover to it? Then wait for blue's
        frontier (:meth:`_step_handover`) instead of starting as a sequential green."""
        h = self._handovers().for_green(self.topology_id)
        if h is None or h.green_admitting_at is not None:
            return False
        lease = self.config.scaling.handover_lease_s
        self._green = GreenHandover(h.blue, MonotonicClock(), lease_s=lease)
        self._green_handover = h.id
        log.info(
            "topology %s: overlapped handover %d from %s: waiting for its frontier",
            self.topology_id,
            h.id,
            h.blue,
        )
        return True

    def _step_handover(self) -> None:
        """Green: admit from blue's frontier, then take over once blue is gone."""
        from flowctl.adapters.control_plane import UnknownTopology

        green, handover = self._green, self._green_handover
        assert green is not None and handover is not None
        h = self._handovers().get(handover)
        try:
            blue = self.control.get_topology(green.blue)
            state, beat = blue.state, blue.heartbeat_at
            age = None if beat is None else (dt.datetime.now(dt.UTC) - beat).total_seconds()
        except UnknownTopology:
            state, age = "STOPPED", None
        action = green.step(h.frontier, state, age)
        if action is GreenAction.ADMIT_FROM_FRONTIER:
            assert h.frontier is not None
            self.frontier = h.frontier.to_dict()
            self.rebuild_no += 1
            self.admit = True
            self._write_ctl()
            self._warming_since = None
            self._set_state("ACTIVE")
            self._handovers().stamp(handover, green_admitting_at=True)
            log.info(
                "topology %s: admitting from %s's frontier %s while it finishes its tuples",
                self.topology_id,
                green.blue,
                dict(h.frontier.eden),
            )
        elif action is GreenAction.ADMIT_ALL:
            log.warning(
                "topology %s: %s is %s without a frontier: starting as a sequential green",
                self.topology_id,
                green.blue,
                state,
            )
            self._green = None
            self._activate()
            note = f"blue {state} before its frontier: sequential start"
            self._handovers().stamp(handover, green_admitting_at=True, blue_gone_at=True, note=note)
        elif action is GreenAction.TAKE_OVER:
            self._green = None
            # The replace operator stops blue once green beats after blue's DRAINED: at
            # once, not at the heartbeat thread's next beat (up to a second later).
            self.heartbeat.beat_now()
            self._start_flusher()  # its first flush_all takes what blue left in the MRWQ
            self.sweep_no = 1
            self._write_ctl()
            self._handovers().stamp(handover, blue_gone_at=True, note=f"blue {state}")
            log.info(
                "topology %s: %s is gone (%s): flusher taken over, its leftovers swept",
                self.topology_id,
                green.blue,
                state,
            )
