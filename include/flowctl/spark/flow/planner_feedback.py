"""The planner's collection of the lanes' feedback, applied to the spout.

Mixed into :class:`~flowctl.spark.flow.planner.FlowPlanner` (whose attributes it uses):
each lane writes its results of a micro-batch to memcached
(:class:`~flowctl.spark.flow.channels.LaneFeedback`); the planner collects them for every
pending batch, hands them to the :class:`~flowctl.core.spout.Spout` (windows, acker,
replay), the log guard and the health watch, and logs what the lanes returned unstarted.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from flowctl.spark.flow.channels import LaneFeedback

if TYPE_CHECKING:
    from flowctl.adapters.memcached_store import MemcachedStore
    from flowctl.core.clock import Clock
    from flowctl.core.log_pacing import Tally
    from flowctl.core.spout import Spout
    from flowctl.pipelines.config_sections import FlowConfig
    from flowctl.spark.flow.log_guard import LogGuard
    from flowctl.spark.flow.planner_health import PlannerHealth
    from flowctl.spark.flow.settings import FlowSettings

log = logging.getLogger("flowctl.spark.flow.planner")


class FeedbackPlanning:
    """The lanes' feedback of the previous batches, collected and applied."""

    settings: FlowSettings
    flow: FlowConfig
    clock: Clock
    spout: Spout | None
    pending: dict[int, tuple[set[int], float]]
    lane_ends: dict[int, int]
    guard: LogGuard
    health: PlannerHealth
    _returned: Tally

    if TYPE_CHECKING:  # FlowPlanner's

        def store(self) -> MemcachedStore: ...
        def _warn(self, what: str, exc: BaseException, every_s: float = 10.0) -> None: ...

    def _collect_feedback(self) -> None:
        from flowctl.adapters.memcached_store import LaneFeedback as FeedbackStore

        assert self.spout is not None
        try:
            feedback = FeedbackStore(self.store(), self.settings.ns)
            for seq in sorted(self.pending):
                lanes, sent_at = self.pending[seq]
                got = feedback.collect(seq, lanes)
                for lane, data in got.items():
                    self._apply_feedback(lane, LaneFeedback.decode(data))
                if got:
                    feedback.discard(seq, got)
                    lanes -= set(got)
                if not lanes or self.clock.now() - sent_at > self.flow.ack_timeout_s:
                    del self.pending[seq]
        except Exception as exc:
            self._warn("collecting lane feedback", exc)

    def _apply_feedback(self, lane: int, feedback: LaneFeedback) -> None:
        assert self.spout is not None
        summary = self.spout.on_lane_results(lane, feedback.results)
        for topic, partition, end in feedback.ends:
            if topic == self.settings.topic and end > self.lane_ends.get(partition, -1):
                self.lane_ends[partition] = end
        self.guard.lane_results(feedback.results)
        self.health.results(feedback.results)
        for error in summary.errors[:3]:
            log.warning("flow lane %d: %s", lane, error)
        due = (
            self._returned.add(self.clock.now(), tuples=summary.returned)
            if summary.returned
            else None
        )
        if due is not None:
            times, sums, seconds = due
            log.info(
                "flow lane %d: time budget spent after %d tuple(s); %d returned unstarted, "
                "dispatched again to other lanes (window now %d); all lanes: %d time(s), "
                "%d tuple(s) %s",
                lane,
                summary.acked,
                summary.returned,
                self.spout.lane_gauges()[lane]["window"],
                times,
                sums["tuples"],
                f"in the last {seconds:.0f} s" if seconds else "(the first)",
            )
        if summary.requeued > summary.returned:
            log.warning(
                "flow lane %d: %d tuple(s) without an outcome, dispatched again to another lane",
                lane,
                summary.requeued - summary.returned,
            )
