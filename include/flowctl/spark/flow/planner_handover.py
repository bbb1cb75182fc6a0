"""The planner's side of activation and of an overlapped handover (docs/flow-control.md).

Mixed into :class:`~flowctl.spark.flow.planner.FlowPlanner` (whose attributes it uses):
building the spout (from the database, or from blue's frontier for an overlapped green),
the lane count given at activation (a warm standby takes the replacement's parallelism
then), the sweep of blue's leftovers once blue is gone, a new flusher epoch during the
overlap, and blue's frontier as published in ``:state``.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from flowctl.core.handover import Frontier, green_start, green_window, sweep
from flowctl.core.spout import Spout
from flowctl.spark.flow.settings import spout_config

if TYPE_CHECKING:
    from flowctl.adapters.flow_state import FlowState
    from flowctl.core.clock import Clock
    from flowctl.core.replay import ReplaySnapshot
    from flowctl.pipelines.config import PipelineConfig
    from flowctl.spark.flow.channels import Control
    from flowctl.spark.flow.planner_health import PlannerHealth
    from flowctl.spark.flow.rebuild_wait import RebuildWait
    from flowctl.spark.flow.settings import FlowSettings

log = logging.getLogger("flowctl.spark.flow.planner")


class HandoverPlanning:
    """Spout building, lanes at activation, the frontier, the sweep and the epoch check."""

    settings: FlowSettings
    config: PipelineConfig
    clock: Clock
    spout: Spout | None
    pending: dict[int, tuple[set[int], float]]
    rebuild_seen: int | None
    gaps_seen: int
    health: PlannerHealth
    rebuild_wait: RebuildWait
    frontier: Frontier | None
    sweep_seen: int | None
    _epoch: str | None
    _persisted_replay: ReplaySnapshot | None
    #: The topology's lanes: the source option's at start; an activation may change it
    #: (a warm standby takes the replacement's parallelism). Spark asks for partitions
    #: per batch, so the next plan simply has that many lanes.
    lanes: int

    if TYPE_CHECKING:  # FlowPlanner's

        def state(self) -> FlowState: ...
        def _warn(self, what: str, exc: BaseException, every_s: float = 10.0) -> None: ...

    def build_spout(
        self, frontier: Frontier | None = None, *, windows_of: Frontier | None = None
    ) -> Spout:
        """A spout from the durable state: checkpoint, gaps (holes of applied_ranges),
        everything beyond the last durable range cut again, replay pointer and positions.

        With blue's ``frontier`` (an overlapped handover's green): cut from the frontier,
        blue's handed tuples first, the lanes' windows from blue's (:func:`green_window`);
        what blue cut stays blue's until the sweep. ``windows_of`` (default: ``frontier``)
        gives the windows alone: a green whose blue was gone before its first plan cuts
        from the database, yet its first batch is still the end of the output pause."""
        start = self.state().start_state()
        positions, gaps, replay = start.positions, start.gaps, start.replay
        if frontier is not None:
            g = green_start(frontier, start.checkpoints, positions, gaps, replay)
            positions, gaps, replay = g.positions, g.gaps, g.replay
        config = spout_config(self.settings, self.config, lanes=self.lanes)
        windows_of = windows_of or frontier
        if windows_of is not None:
            w_init = green_window(windows_of, config.w_init, config.w_min)
            config = spout_config(self.settings, self.config, lanes=self.lanes, w_init=w_init)
        spout = Spout(
            config,
            self.clock,
            positions=positions,
            gaps=gaps,
            checkpoints=start.checkpoints,
            replay=replay,
        )
        self._persisted_replay = replay
        self.pending.clear()
        log.info(
            "flow %s: spout built from %s: %d lane(s), windows from %d, checkpoint %s, cut "
            "from %s, %d gap range(s) first, replay From=%s positions %s",
            self.settings.topology_id,
            "blue's frontier" if frontier is not None else "the database",
            self.lanes,
            config.w_init,
            {tp.partition: n for tp, n in start.checkpoints.items()},
            {tp.partition: n for tp, n in positions.items()},
            len(gaps),
            spout.replay.from_topic,
            replay.positions if replay else (),
        )
        return spout

    def _apply_control(self, ctl: Control) -> None:
        """The control key's lanes, rebuild and sweep (admission is the caller's)."""
        if ctl.lanes is not None and ctl.lanes != self.lanes:
            log.info(
                "flow %s: %d lane(s) from now on (was %d)",
                self.settings.topology_id,
                ctl.lanes,
                self.lanes,
            )
            self.lanes = ctl.lanes
        # Until the sweep, a rebuild of an overlapped green starts from blue's frontier.
        overlap = ctl.frontier is not None and ctl.sweep is None
        rebuild = ctl.rebuild
        if ctl.gaps > self.gaps_seen:  # MRWQ items were lost: RECOVERING until progress
            self.health.recovering(ctl.gap or f"rebuild {rebuild} after lost MRWQ items")
            self.gaps_seen = ctl.gaps
        if self.rebuild_wait.pending and (rebuild is None or rebuild == self.rebuild_seen):
            self.rebuild_wait.cancel()  # the rebuild it waited for is not asked for any more
        # Rebuild numbers only grow: a lower one is a stale write of the control key.
        if rebuild is not None and (self.rebuild_seen is None or rebuild > self.rebuild_seen):
            if self.rebuild_seen is not None and self.spout is not None:
                # From the database (not from blue's frontier, above which blue cut
                # nothing): only once what was in flight is flushed (FlushBarrier).
                if not overlap and not self.rebuild_wait.flushed(rebuild):
                    return  # asked again next batch; nothing is admitted meanwhile
                # An activation's rebuild is routine (INFO); one after lost items, not.
                gap = ctl.gap is not None and ctl.gap.startswith(f"rebuild {rebuild} ")
                log.log(
                    logging.WARNING if gap else logging.INFO,
                    "flow %s: rebuild %s (%s): dispatching everything not durable again",
                    self.settings.topology_id,
                    rebuild,
                    "after lost MRWQ items"
                    if gap
                    else "from blue's frontier"
                    if overlap
                    else "activation",
                )
                try:
                    blue = None if ctl.frontier is None else Frontier.from_dict(ctl.frontier)
                    frontier = blue if overlap else None
                    self.spout = self.build_spout(frontier, windows_of=blue)
                    self.frontier = frontier
                    self.health.rebuilt()
                except Exception as exc:  # the database is away: keep going, retry next batch
                    self._warn("rebuilding the spout from the database", exc, every_s=0)
                    return
            self.rebuild_seen = rebuild
        if ctl.sweep is not None and ctl.sweep != self.sweep_seen and self.spout is not None:
            try:
                if self.frontier is not None:
                    self._sweep()
            except Exception as exc:  # the database is away: retry next batch
                self._warn("sweeping blue's leftovers", exc, every_s=0)
                return
            self.sweep_seen = ctl.sweep
            self.frontier = None

    def _sweep(self) -> None:
        """Blue is gone (and its results flushed): dispatch what it left below the frontier."""
        assert self.spout is not None and self.frontier is not None
        checkpoints, holes = self.state().unapplied_below(self.frontier)
        ranges = sweep(
            self.frontier, checkpoints, holes, self.spout.held_ids(), self.config.tuple_size
        )
        taken = self.spout.take_over(ranges)
        log.info(
            "flow %s: blue is gone: %d tuple(s) it left unapplied below its frontier %s "
            "dispatched first",
            self.settings.topology_id,
            taken,
            dict(self.frontier.eden),
        )

    def _check_epoch(self, epoch: str | None) -> None:
        """An overlapped green does not run the flusher, so it never hears of a gap from
        it; a new flusher epoch (memcached restarted, or blue's flusher resynced after a
        gap) tells it items may be lost: it rebuilds from the database, owning every range
        not durable (blue's included)."""
        seen, self._epoch = self._epoch, epoch or self._epoch
        if self.frontier is None or seen is None or epoch is None or epoch == seen:
            return
        log.warning(
            "flow %s: MRWQ epoch %s -> %s during the overlap: rebuilding from the database",
            self.settings.topology_id,
            seen,
            epoch,
        )
        self.spout = self.build_spout()
        self.frontier = None

    def _frontier(self) -> dict[str, Any]:
        """The spout's admission frontier (published while admission is off), with its
        lanes' windows for green's start."""
        assert self.spout is not None
        snap = self.spout.replay.snapshot()
        windows = [w.size for w in self.spout.windows]
        return Frontier.of(
            self.settings.topic,
            self.spout.positions(),
            snap,
            self.spout.buffered_tuples(),
            windows,
        ).to_dict()
