"""PhaseTimings: planning cost per batch and phase, on a fake clock."""

from __future__ import annotations

from flowctl.core.clock import FakeClock
from flowctl.core.timings import PhaseTimings


def _round(timings: PhaseTimings, clock: FakeClock, steps: dict[str, float]) -> None:
    timings.begin()
    for name, seconds in steps.items():
        with timings.phase(name):
            clock.advance(seconds)


def test_a_batch_total_is_the_sum_of_its_phases_and_percentiles_are_per_phase() -> None:
    clock = FakeClock()
    timings = PhaseTimings(clock)
    for k in range(1, 5):
        _round(timings, clock, {"feedback": 0.001 * k, "admit": 0.002})
        timings.add("partitions", 0.5)
        timings.end_batch()
    summary = timings.summary()
    assert summary["total"] == {"n": 4, "p50": 4.5, "p99": 6.5, "max": 6.5}
    assert summary["feedback"] == {"n": 4, "p50": 2.0, "p99": 4.0, "max": 4.0}
    assert summary["partitions"]["p50"] == 0.5


def test_a_round_without_a_batch_is_dropped_and_a_summary_resets() -> None:
    clock = FakeClock()
    timings = PhaseTimings(clock)
    _round(timings, clock, {"feedback": 5.0})  # nothing admitted: Spark polls again
    _round(timings, clock, {"feedback": 0.003})
    timings.end_batch()
    assert timings.summary()["total"] == {"n": 1, "p50": 3.0, "p99": 3.0, "max": 3.0}
    assert timings.summary() == {"total": {"n": 0, "p50": None, "p99": None, "max": None}}
