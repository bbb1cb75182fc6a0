"""The simulator: deterministic, nothing lost, and least_loaded beats an equal split
when one lane is slower (a property of the algorithms, in simulated time)."""

from __future__ import annotations

import ast
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from flowctl.sim.engine import simulate
from flowctl.sim.model import FailSpan, LaneSpec, SimConfig, SpeedChange, constant
from flowctl.sim.scenarios import Knobs, build
from flowctl.sim.settle import settle_round, steady_band

SMALL = Knobs(lanes=4, slow_factor=4.0, tuples=600, seed=3)


def test_same_seed_same_result() -> None:
    cfg = build("heterogeneous", SMALL)
    assert simulate(cfg, "least_loaded") == simulate(cfg, "least_loaded")


@pytest.mark.parametrize("mode", ["continuous", "microbatch"])
def test_least_loaded_beats_equal_split_with_one_slow_lane(mode: str) -> None:
    cfg = build("heterogeneous", replace(SMALL, mode=mode))
    ll, eq = simulate(cfg, "least_loaded"), simulate(cfg, "equal_split")
    assert ll.records == eq.records == 600 * 100
    assert ll.throughput_rps >= 1.3 * eq.throughput_rps


def test_equal_lanes_gain_nothing_from_adaptation() -> None:
    cfg = build("heterogeneous", replace(SMALL, slow_factor=1.0))
    ll, eq = simulate(cfg, "least_loaded"), simulate(cfg, "equal_split")
    assert ll.throughput_rps / eq.throughput_rps == pytest.approx(1.0, abs=0.1)


@pytest.mark.parametrize("mode", ["continuous", "microbatch"])
def test_windows_follow_lane_speed_and_settle_within_20_rounds(mode: str) -> None:
    result = simulate(build("heterogeneous", replace(SMALL, mode=mode)), "least_loaded")
    *fast, slow = result.lanes
    assert result.settle_rounds is not None and result.settle_rounds <= 20
    assert all(slow.steady_band[1] < lane.steady_band[0] for lane in fast)  # type: ignore[index]


def test_least_loaded_keeps_latency_off_the_slow_lane_under_open_load() -> None:
    cfg = build("heterogeneous_open", SMALL)
    ll, rr = simulate(cfg, "least_loaded"), simulate(cfg, "round_robin")
    assert ll.lanes[-1].completed < rr.lanes[-1].completed
    assert ll.latency_p99_s is not None and rr.latency_p99_s is not None
    assert ll.latency_p99_s < rr.latency_p99_s


@pytest.mark.parametrize("policy", ["equal_split", "round_robin", "least_loaded"])
@pytest.mark.parametrize("mode", ["continuous", "microbatch"])
def test_failures_and_stalls_lose_nothing(policy: str, mode: str) -> None:
    result = simulate(build("failing_lane", replace(SMALL, mode=mode)), policy)
    assert result.records == 600 * 100
    assert result.failed > 0 and result.timed_out > 0


def test_unknown_policy_and_scenario_are_rejected() -> None:
    with pytest.raises(ValueError, match="unknown policy 'fastest'"):
        simulate(build("heterogeneous", SMALL), "fastest")
    with pytest.raises(ValueError, match="unknown scenario 'nope'"):
        build("nope", SMALL)


def test_finish_time_integrates_piecewise_speed() -> None:
    lane = LaneSpec((SpeedChange(0, 100), SpeedChange(1, 0), SpeedChange(3, 50)))
    assert lane.finish_time(0.0, 50) == 0.5
    assert lane.finish_time(0.5, 100) == 4.0  # 50 by t=1, stalled to 3, 50 more at 50/s
    assert math.isinf(LaneSpec((SpeedChange(0, 10), SpeedChange(1, 0))).finish_time(0.5, 100))


def test_lane_spec_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="speeds must start with a change at 0"):
        LaneSpec((SpeedChange(1, 10),))
    with pytest.raises(ValueError, match="FailSpan"):
        LaneSpec((SpeedChange(0, 10),), (FailSpan(2, 1, 0.5),))
    with pytest.raises(ValueError, match=r"SimConfig\.mode"):
        SimConfig(lanes=(constant(1),), mode="batchy")


def test_settle_round_is_the_first_round_inside_the_band_for_good() -> None:
    series = [4, 5, 6, 7, 8, 9, 10, 9, 10, 9, 10, 9, 10, 9]
    assert steady_band(series) == (8, 11)
    assert settle_round(series) == 5
    assert settle_round([9, 10, 9]) is None  # too few rounds to say
    long = [4, 5, 6, 7, 8, *[9, 10] * 20]
    assert settle_round(long) == 5
    assert settle_round([*long, 20]) is None  # left the band at the end


def test_the_simulator_is_pure_standard_library_and_core_only() -> None:
    root = Path(__file__).resolve().parents[2] / "include" / "flowctl" / "sim"
    bad = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            for name in names:
                top = name.split(".")[0]
                ok = name.startswith(("flowctl.core", "flowctl.sim")) or (
                    top in sys.stdlib_module_names and top not in {"socket", "subprocess"}
                )
                if not ok:
                    bad.append(f"{path.name}: {name}")
    assert bad == []
