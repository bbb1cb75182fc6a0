"""Named scenarios: one source, P lanes, one of them slower, and things going wrong.

Every scenario is derived from a few knobs (``lanes``, ``speed`` records/s of a
normal lane, ``slow_factor`` of the slow one, the workload) so the command line
can vary them. ``D`` below is the ideal drain time: workload / total speed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from .model import FailSpan, LaneSpec, SimConfig, SpeedChange, constant


@dataclass(frozen=True)
class Knobs:
    lanes: int = 4
    speed: float = 1000.0
    slow_factor: float = 4.0
    tuples: int = 4000
    tuple_size: int = 100
    threshold: float = 1.0
    mode: str = "continuous"
    seed: int = 1

    def __post_init__(self) -> None:
        if self.lanes < 2:
            raise ValueError(
                f"Knobs.lanes must be >= 2 (one slow lane and others), got {self.lanes}"
            )
        if not self.speed > 0:
            raise ValueError(f"Knobs.speed must be > 0, got {self.speed}")
        if not self.slow_factor >= 1:
            raise ValueError(f"Knobs.slow_factor must be >= 1, got {self.slow_factor}")

    @property
    def capacity_rps(self) -> float:
        return self.speed * (self.lanes - 1) + self.speed / self.slow_factor

    @property
    def ideal_drain_s(self) -> float:
        return self.tuples * self.tuple_size / self.capacity_rps


def _lanes(k: Knobs) -> tuple[LaneSpec, ...]:
    return (*(constant(k.speed) for _ in range(k.lanes - 1)), constant(k.speed / k.slow_factor))


def _base(k: Knobs, name: str) -> SimConfig:
    return SimConfig(
        lanes=_lanes(k),
        tuples=k.tuples,
        tuple_size=k.tuple_size,
        threshold=k.threshold,
        mode=k.mode,
        seed=k.seed,
        name=name,
    )


def heterogeneous(k: Knobs) -> SimConfig:
    """The whole workload waiting at t=0; the last lane ``slow_factor`` times slower."""
    return _base(k, "heterogeneous")


def heterogeneous_open(k: Knobs) -> SimConfig:
    """Tuples arriving at half the total capacity: latency, not throughput, is the question."""
    cfg = _base(k, "heterogeneous_open")
    return replace(cfg, arrival_tps=0.5 * k.capacity_rps / k.tuple_size)


def speed_change(k: Knobs) -> SimConfig:
    """Lane 0 drops to a fifth of its speed from D/3 to 2D/3."""
    d = k.ideal_drain_s
    lane0 = LaneSpec(
        (
            SpeedChange(0.0, k.speed),
            SpeedChange(d / 3, k.speed / 5),
            SpeedChange(2 * d / 3, k.speed),
        )
    )
    cfg = _base(k, "speed_change")
    return replace(cfg, lanes=(lane0, *cfg.lanes[1:]))


def failing_lane(k: Knobs) -> SimConfig:
    """Lane 1 fails half its tuples from D/4 to D/2; lane 2 stalls for two timeouts from D/2."""
    cfg = _base(k, "failing_lane")
    d = k.ideal_drain_s
    lanes = list(cfg.lanes)
    lanes[1] = LaneSpec((SpeedChange(0.0, k.speed),), (FailSpan(d / 4, d / 2, 0.5),))
    if k.lanes > 2:
        stall = (SpeedChange(0.0, k.speed), SpeedChange(d / 2, 0.0))
        lanes[2] = LaneSpec((*stall, SpeedChange(d / 2 + 2 * cfg.timeout_s, k.speed)))
    return replace(cfg, lanes=tuple(lanes))


def adaptive_threshold(k: Knobs) -> SimConfig:
    """``heterogeneous`` with the RTT-estimate threshold (EWMA + 4 * deviation) instead of a
    fixed one."""
    return replace(_base(k, "adaptive_threshold"), threshold=None)


SCENARIOS: dict[str, Callable[[Knobs], SimConfig]] = {
    "heterogeneous": heterogeneous,
    "heterogeneous_open": heterogeneous_open,
    "speed_change": speed_change,
    "failing_lane": failing_lane,
    "adaptive_threshold": adaptive_threshold,
}


def build(name: str, knobs: Knobs) -> SimConfig:
    """The scenario called ``name``; a clear error lists the known ones."""
    try:
        return SCENARIOS[name](knobs)
    except KeyError:
        raise ValueError(
            f"unknown scenario {name!r}; choose one of {', '.join(SCENARIOS)}"
        ) from None
