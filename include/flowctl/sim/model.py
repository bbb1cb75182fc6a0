"""What a simulation run is made of: lanes with speed schedules and failures, and the workload.

A lane is a single server with a FIFO queue (one Spark task slot working
through its tuples one by one). Its speed in records/s is piecewise constant
over simulated time (heterogeneous lanes, lanes slowing down or stalling:
speed 0), and during a failure span each tuple it finishes fails with a given
probability (an explicit fail, sent back like an ack).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

POLICIES = ("equal_split", "round_robin", "least_loaded")
MODES = ("continuous", "microbatch")


@dataclass(frozen=True)
class SpeedChange:
    """From ``at`` seconds on, the lane processes ``records_per_s`` (0 = stalled)."""

    at: float
    records_per_s: float


@dataclass(frozen=True)
class FailSpan:
    """Tuples finishing in ``[start, end)`` fail with ``probability``."""

    start: float
    end: float
    probability: float


@dataclass(frozen=True)
class LaneSpec:
    speeds: tuple[SpeedChange, ...]
    fails: tuple[FailSpan, ...] = ()

    def __post_init__(self) -> None:
        if not self.speeds or self.speeds[0].at != 0:
            raise ValueError(f"LaneSpec.speeds must start with a change at 0, got {self.speeds!r}")
        times = [s.at for s in self.speeds]
        if times != sorted(times) or len(set(times)) != len(times):
            raise ValueError(f"LaneSpec.speeds must be strictly increasing in time, got {times}")
        for s in self.speeds:
            if not s.records_per_s >= 0 or math.isinf(s.records_per_s):
                raise ValueError(f"SpeedChange.records_per_s must be >= 0, got {s.records_per_s!r}")
        for f in self.fails:
            if not 0 <= f.probability <= 1 or f.end <= f.start:
                raise ValueError(
                    f"FailSpan must have start < end and probability in [0, 1], got {f}"
                )

    def speed_at(self, t: float) -> float:
        speed = self.speeds[0].records_per_s
        for s in self.speeds:
            if s.at > t:
                break
            speed = s.records_per_s
        return speed

    def finish_time(self, start: float, work: float) -> float:
        """When ``work`` records started at ``start`` are done (inf if the lane stalls forever)."""
        t, left = start, work
        for i, s in enumerate(self.speeds):
            seg_end = self.speeds[i + 1].at if i + 1 < len(self.speeds) else math.inf
            if seg_end <= t:
                continue
            if s.records_per_s > 0:
                need = left / s.records_per_s
                if t + need <= seg_end:
                    return t + need
                left -= s.records_per_s * (seg_end - t)
            t = seg_end
        return math.inf

    def fail_probability(self, t: float) -> float:
        return max((f.probability for f in self.fails if f.start <= t < f.end), default=0.0)


def constant(records_per_s: float) -> LaneSpec:
    return LaneSpec((SpeedChange(0.0, records_per_s),))


@dataclass(frozen=True)
class SimConfig:
    """One run's workload and flow-control settings.

    ``threshold=None`` uses the adaptive RTT threshold (EWMA + k * deviation,
    floored at ``min_threshold``); a number fixes it. ``arrival_tps=None``
    puts the whole workload in the backlog at t=0 (a drain: throughput is the
    question); a rate makes tuples arrive over time (latency is the question).
    ``mode`` is ``continuous`` or ``microbatch`` (see :mod:`flowctl.sim.engine`).
    """

    lanes: tuple[LaneSpec, ...]
    tuples: int = 4000
    tuple_size: int = 100
    link_delay_s: float = 0.05
    jitter: float = 0.2
    w_init: int = 4
    w_min: int = 1
    w_max: int = 32
    threshold: float | None = 1.0
    min_threshold: float = 0.0
    timeout_s: float = 10.0
    arrival_tps: float | None = None
    seed: int = 1
    metrics_window_s: float = 5.0
    mode: str = "continuous"
    batch_overhead_s: float = 0.5
    horizon_s: float = 3600.0
    name: str = field(default="custom")

    def __post_init__(self) -> None:
        if not self.lanes:
            raise ValueError("SimConfig.lanes must hold at least one lane, got none")
        for fname in ("tuples", "tuple_size"):
            value = getattr(self, fname)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"SimConfig.{fname} must be an int >= 1, got {value!r}")
        if not 0 <= self.jitter < 1:
            raise ValueError(f"SimConfig.jitter must be in [0, 1), got {self.jitter!r}")
        if self.link_delay_s < 0:
            raise ValueError(f"SimConfig.link_delay_s must be >= 0, got {self.link_delay_s!r}")
        if self.mode not in MODES:
            raise ValueError(f"SimConfig.mode must be one of {MODES}, got {self.mode!r}")
        if self.batch_overhead_s < 0:
            raise ValueError(
                f"SimConfig.batch_overhead_s must be >= 0, got {self.batch_overhead_s!r}"
            )
        if self.arrival_tps is not None and not self.arrival_tps > 0:
            raise ValueError(f"SimConfig.arrival_tps must be > 0 or None, got {self.arrival_tps!r}")
