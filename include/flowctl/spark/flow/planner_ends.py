"""The planner's reads of the log's ends, and the guard over the log they feed.

Mixed into :class:`~flowctl.spark.flow.planner.FlowPlanner` (whose attributes it uses):
the ends of Eden and both replay topics are read on the ends' thread beside the batch's
other work (:class:`~flowctl.spark.flow.log_ends.BackgroundEnds`), Eden's log starts with
them every ``STARTS_EVERY_S``; what they say goes to the
:class:`~flowctl.spark.flow.log_guard.LogGuard` (records lost before processing, read
errors that persist).
"""

from __future__ import annotations

import logging
from concurrent.futures import Future
from typing import TYPE_CHECKING

from flowctl.spark.flow.log_ends import BackgroundEnds, Ends
from flowctl.spark.flow.log_guard import LogGuard

if TYPE_CHECKING:
    from flowctl.core.handover import Frontier
    from flowctl.core.replay import ReplayTopics
    from flowctl.core.spout import Spout
    from flowctl.core.tuples import TopicPartition
    from flowctl.pipelines.config import PipelineConfig
    from flowctl.spark.flow.planner_health import PlannerHealth
    from flowctl.spark.flow.settings import FlowSettings

log = logging.getLogger("flowctl.spark.flow.planner")


class EndsPlanning:
    """The ends' read of a batch, and the data-loss and read-error checks on it."""

    settings: FlowSettings
    config: PipelineConfig
    spout: Spout | None
    ends: BackgroundEnds
    guard: LogGuard
    health: PlannerHealth
    topics: ReplayTopics
    admit: bool
    _latest: dict[TopicPartition, int]
    _replay: dict[tuple[str, int], int]
    lane_ends: dict[int, int]
    _next_ends: Future[Ends] | None
    #: Eden's durable checkpoint as this batch read it (``None``: the database did not
    #: answer, nothing is decided about data loss this batch).
    _checkpoints: dict[int, int] | None

    if TYPE_CHECKING:  # FlowPlanner's

        def build_spout(
            self, frontier: Frontier | None = None, *, windows_of: Frontier | None = None
        ) -> Spout: ...
        def batch_cap(self) -> int | None: ...
        def _warn(self, what: str, exc: BaseException, every_s: float = 10.0) -> None: ...

    def _reading_for_batch(self) -> Future[Ends]:
        """The read of the ends this batch plans on: the one :meth:`_read_ahead` started
        as the last batch was planned, if it did, else one started now."""
        reading, self._next_ends = self._next_ends, None
        return reading if reading is not None else self._start_reading_ends()

    def _read_ahead(self) -> None:
        """Where Eden's exact ends are costly (a long log on Tansu, whose requests walk
        the partition's record batches: bench/README.md, "The hour again"), start the
        next batch's read of the ends now, once this batch is planned: it runs while the
        batch does, and the next planning finds it done instead of waiting on the broker.
        Records appended while it runs wait one batch more; a light stream's ends are
        cheap and stay read when the next batch is planned (its latency needs them)."""
        if self.ends.costly():
            self._next_ends = self._start_reading_ends()

    def _start_reading_ends(self) -> Future[Ends]:
        """Start reading the three topics' ends (:class:`BackgroundEnds`). The spout changes
        while they are read, so whether ``end_offsets()`` suffice is decided on what this
        batch can take at most: its windows after this batch's acks, and never more than
        the batch's cap (:meth:`batch_cap`; with many lanes the windows' room alone is
        many batches' worth, and every batch would pay an exact end's fetch). The ends
        the lanes reported since the last read go with it (:attr:`lane_ends`)."""
        starts = self.guard.starts_due()  # Eden's log starts too, every STARTS_EVERY_S
        reported, self.lane_ends = self.lane_ends, {}
        if self.spout is None:
            return self.ends.start(with_starts=starts, reported=reported)
        positions = {tp.partition: n for tp, n in self.spout.positions().items()}
        # a window grows at most to double (at least +1) per round of acks, up to w_max
        room = sum(min(w.w_max, max(2 * w.size, w.size + 1)) for w in self.spout.windows)
        cap = self.batch_cap()
        if cap is not None:
            room = min(room, cap)
        most = room * self.config.tuple_size
        return self.ends.start(positions, most, with_starts=starts, reported=reported)

    def _read_ends(self, reading: Future[Ends]) -> dict[int, int] | None:
        """Eden's end offsets (returned; ``None`` when they could not be read: a read
        error, raised once it outlasts ``read_error_timeout_s``) and the replay topics'
        (kept for :meth:`_admit`; a failure only leaves them out this batch)."""
        eden, replays = self.settings.topic, (self.topics.replay_a, self.topics.replay_b)
        try:
            ends = reading.result()
        except Exception as exc:
            broker = f"Kafka at {self.settings.bootstrap}"
            topics = f"{eden}, {', '.join(replays)}"
            self._warn(f"reading the end offsets of {topics} together from {broker}", exc)
            self._replay = {}
            try:
                eden_ends = self.ends.read([eden])[eden]  # Eden alone
            except Exception as again:
                self._warn(f"reading the end offsets of {eden} from {broker}", again)
                self.health.blind(f"reading the end offsets of {eden} from {broker}", again)
                self.guard.ends_failed(again)  # raises past read_error_timeout_s
                return None
            self.health.sighted()
            self.guard.ends_read()
            return eden_ends
        self.health.sighted()
        self.guard.ends_read()
        self._replay = {(t, p): n for t in replays for p, n in ends[t].items()}
        return ends[eden]

    def _guard_log(self, latest: dict[int, int]) -> bool:
        """Records lost before processing, read errors that persist (:class:`LogGuard`):
        only an admitting planner decides (a standby or draining one owns no checkpoint).
        Returns whether the batch may be planned on ``latest``: not while an end lies below
        the spout's position and the next read has not confirmed a reset log (the guard
        declares one on two reads in a row; one read may be a broker's misreport)."""
        assert self.spout is not None
        if self.ends.starts_error is not None:
            self._warn(f"reading the log starts of {self.settings.topic}", self.ends.starts_error)
        topic = self.settings.topic
        positions = {
            tp.partition: n for tp, n in self.spout.positions().items() if tp.topic == topic
        }
        if self.admit:
            self.guard.check(
                checkpoints=self._checkpoints,
                ends=latest,
                positions=positions,
                starts=self.ends.starts,
                seen_ends={tp.partition: n for tp, n in self._latest.items()},
            )
        self.guard.raise_if_persistent()
        below = {p: end for p, end in latest.items() if end < positions.get(p, 0)}
        if below:
            log.warning(
                "flow %s: %s read ending below the position the topology reached (%s): "
                "no batch until the next read of the ends confirms a reset log or clears it",
                self.settings.topology_id,
                topic,
                ", ".join(f"partition {p}: end {e} < {positions[p]}" for p, e in below.items()),
            )
            return False
        return True

    def _rebuild_after_skip(self) -> None:
        """A skip moved the checkpoint: the spout cuts from the database again."""
        self.spout = self.build_spout()
