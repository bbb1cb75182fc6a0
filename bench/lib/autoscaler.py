"""The autoscaler: the failure-window ring buffer and the last change, around a policy.

The simulated autoscale benchmark (``bench/autoscale.py``) and the scaling unit tests
drive it; the shipped sensor decides from the control plane's windows instead
(``flowctl.adapters.window_evaluation``), so it lives beside the benchmarks.

:class:`Autoscaler` feeds each window to the pipeline's policy (the paper's rule of
:mod:`flowctl.core.scaling` or the adaptive one of :mod:`flowctl.core.adaptive_scaling`)
and keeps what a decision needs across windows; :class:`AutoscalerSnapshot` is picklable
so an Airflow sensor, which runs in a new process on every poke, can resume it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from flowctl.core.adaptive_scaling import AdaptiveConfig, adaptive_decision
from flowctl.core.clock import Clock
from flowctl.core.scaling import (
    POLICIES,
    Decision,
    WindowStats,
    check_int,
    check_number,
    paper_decision,
)

__all__ = ["Autoscaler", "AutoscalerSnapshot"]


@dataclass(frozen=True)
class AutoscalerSnapshot:
    """Everything an :class:`Autoscaler` needs to resume in another process."""

    parallelism: int
    counts: tuple[int, ...]
    last_change_at: float | None
    last_up_at: float | None = None


class Autoscaler:
    """Algorithm 2's loop: one :meth:`observe` per window, one :meth:`applied` per change.

    ``observe(window)`` pushes the window's ``fail_num`` into a ring buffer of the last
    ``history_windows`` windows (``collections.deque(maxlen=A)``) and returns a
    :class:`Decision`; it changes nothing else. The caller (the autoscale DAG) runs the
    blue-green replacement and, only if it succeeded, calls ``applied(decision)``: the
    parallelism and the cooldown clock change then, and the history is cleared because
    counts measured under the old parallelism do not describe the new topology.
    """

    def __init__(
        self,
        *,
        parallelism: int,
        history_windows: int,
        clock: Clock,
        policy: str = "paper",
        threshold_c: float | None = None,
        config: AdaptiveConfig | None = None,
        snapshot: AutoscalerSnapshot | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        check_int("history_windows", history_windows, 1)
        if policy == "adaptive" and config is None:
            raise ValueError("policy='adaptive' needs config=AdaptiveConfig(...), got None")
        if policy == "paper" and threshold_c is None and config is None:
            raise ValueError("policy='paper' needs threshold_c, got None")
        self.policy = policy
        self.config = config
        self.threshold_c = (
            check_number("threshold_c", threshold_c)
            if threshold_c is not None
            else config.threshold_c  # type: ignore[union-attr]
        )
        self._clock = clock
        self._counts: deque[int] = deque(maxlen=history_windows)
        self.parallelism = check_int("parallelism", parallelism, 1)
        self.last_change_at: float | None = None
        #: When the last scale-up was applied (the adaptive policy's scale-down delay).
        self.last_up_at: float | None = None
        if snapshot is not None:
            self.restore(snapshot)

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(self._counts)

    def observe(self, window: WindowStats | int) -> Decision:
        """Record one closed window and decide; does not change the parallelism."""
        stats = window if isinstance(window, WindowStats) else WindowStats(fail_num=window)
        self._counts.append(stats.fail_num)
        if self.policy == "paper":
            lo = self.config.min_parallelism if self.config else 1
            hi = self.config.max_parallelism if self.config else None
            return paper_decision(
                self._counts,
                self.parallelism,
                self.threshold_c,
                min_parallelism=lo,
                max_parallelism=hi,
            )
        return adaptive_decision(
            self._counts,
            stats,
            self.parallelism,
            self.config,  # type: ignore[arg-type]
            now=self._clock.now(),
            last_change_at=self.last_change_at,
            last_up_at=self.last_up_at,
        )

    def applied(self, decision: Decision) -> None:
        """The replacement for ``decision`` succeeded: adopt its parallelism."""
        if decision.old_parallelism != self.parallelism:
            raise ValueError(
                f"decision.old_parallelism={decision.old_parallelism} does not match the "
                f"current parallelism {self.parallelism}"
            )
        if not decision.changes:
            return
        if decision.new_parallelism > self.parallelism:
            self.last_up_at = self._clock.now()
        self.parallelism = decision.new_parallelism
        self.last_change_at = self._clock.now()
        self._counts.clear()

    def snapshot(self) -> AutoscalerSnapshot:
        return AutoscalerSnapshot(
            self.parallelism, tuple(self._counts), self.last_change_at, self.last_up_at
        )

    def restore(self, snapshot: AutoscalerSnapshot) -> None:
        check_int("snapshot.parallelism", snapshot.parallelism, 1)
        for i, x in enumerate(snapshot.counts):
            check_int(f"snapshot.counts[{i}]", x, 0)
        self.parallelism = snapshot.parallelism
        self._counts.clear()
        self._counts.extend(snapshot.counts)
        self.last_change_at = snapshot.last_change_at
        self.last_up_at = snapshot.last_up_at
