"""SPEC E: Algorithm 2 (paper policy) and the adaptive policy, with exact E(M) and S^2."""

from __future__ import annotations

import json
import pickle

import pytest

from bench.lib.autoscaler import Autoscaler
from flowctl.core.adaptive_scaling import AdaptiveConfig, adaptive_decision, ds2_target
from flowctl.core.clock import FakeClock
from flowctl.core.scaling import (
    Decision,
    WindowStats,
    dispersion,
    linear_weights,
    next_power_of_two,
    paper_decision,
)

# --- E(M), S^2 -------------------------------------------------------------------------


def test_linear_weights_are_lower_for_older_windows() -> None:
    assert linear_weights(4) == [0.25, 0.5, 0.75, 1.0]


def test_dispersion_of_a_recent_burst() -> None:
    # E = 2.5; S^2 = (.25*6.25 + .5*6.25 + .75*6.25 + 1*56.25) / 4
    assert dispersion([0, 0, 0, 10]) == (2.5, 16.40625)


def test_an_old_burst_weighs_less_than_a_recent_one() -> None:
    assert dispersion([10, 0, 0, 0]) == (2.5, 7.03125)


def test_dispersion_of_a_steady_load_is_zero() -> None:
    assert dispersion([4, 4, 4, 4]) == (4.0, 0.0)


def test_dispersion_rejects_negative_counts() -> None:
    with pytest.raises(ValueError, match=r"counts\[1\] must be an int >= 0, got -3"):
        dispersion([1, -3])


# --- paper policy ----------------------------------------------------------------------


def test_paper_scales_up_when_failures_exceed_the_mean_and_s2_exceeds_c() -> None:
    d = paper_decision([0, 0, 0, 10], 4, 10.0)
    assert (d.direction, d.old_parallelism, d.new_parallelism) == ("up", 4, 8)
    assert (d.mean, d.s2, d.threshold_c, d.cause) == (2.5, 16.40625, 10.0, "load")


def test_paper_scales_down_when_failures_fall_below_the_mean() -> None:
    d = paper_decision([10, 10, 10, 0], 4, 10.0)
    assert (d.direction, d.new_parallelism) == ("down", 2)
    assert (d.mean, d.s2) == (7.5, 16.40625)


def test_paper_holds_when_s2_is_not_above_c() -> None:
    d = paper_decision([0, 0, 0, 10], 4, 16.40625)
    assert (d.direction, d.new_parallelism) == ("none", 4)


def test_paper_never_scales_a_quiet_topology_down() -> None:
    d = paper_decision([0, 0, 0, 0], 8, 0.0)
    assert d.direction == "none"
    assert d.s2 == 0.0


def test_paper_cannot_halve_below_one() -> None:
    d = paper_decision([10, 10, 10, 0], 1, 10.0)
    assert (d.direction, d.new_parallelism) == ("none", 1)
    assert "at min" in d.reason


def test_paper_respects_max_parallelism() -> None:
    d = paper_decision([0, 0, 0, 10], 8, 10.0, max_parallelism=8)
    assert d.direction == "none"
    assert "at max" in d.reason


def test_paper_rejects_negative_threshold() -> None:
    with pytest.raises(ValueError, match=r"threshold_c must be a finite number >= 0\.0, got -1"):
        paper_decision([1], 2, -1)


# --- adaptive policy -------------------------------------------------------------------

CFG = AdaptiveConfig(threshold_c=10.0, max_parallelism=64, cooldown_s=120.0)


def adaptive(counts: list[int], window: WindowStats, p: int = 4, **kw) -> Decision:
    return adaptive_decision(
        counts,
        window,
        p,
        kw.pop("config", CFG),
        now=kw.pop("now", 1000.0),
        last_change_at=kw.pop("last_change_at", None),
        last_up_at=kw.pop("last_up_at", None),
    )


def test_adaptive_scales_up_on_load_failures() -> None:
    d = adaptive([0, 0, 0, 10], WindowStats(fail_num=10, repeat_failures=1))
    assert (d.direction, d.new_parallelism, d.cause) == ("up", 8, "load")
    assert d.policy == "adaptive"


def test_poison_failures_do_not_scale_up() -> None:
    d = adaptive([0, 0, 0, 10], WindowStats(fail_num=10, repeat_failures=8, dlq_added=2))
    assert (d.direction, d.cause) == ("none", "poison")
    assert "8 of 10 failures are repeat failures, DLQ +2" in d.reason


def test_a_failing_sink_does_not_scale_up() -> None:
    d = adaptive([0, 0, 0, 10], WindowStats(fail_num=10, sink_errors=3))
    assert (d.direction, d.cause) == ("none", "sink")
    assert "3 sink error(s)" in d.reason


def test_ds2_target_jumps_more_than_one_doubling() -> None:
    # ceil(10000 / (500 * 0.7)) = 29 lanes -> 32.
    w = WindowStats(fail_num=0, backlog_delta=1000, arrival_rate=10000.0, lane_rate=500.0)
    d = adaptive([0, 0, 0, 0], w)
    assert (d.direction, d.new_parallelism) == ("up", 32)
    assert d.figures["ds2_target"] == 32


def test_scale_up_is_clamped_to_max_parallelism() -> None:
    cfg = AdaptiveConfig(threshold_c=10.0, max_parallelism=16)
    w = WindowStats(fail_num=0, backlog_delta=1000, arrival_rate=10000.0, lane_rate=500.0)
    assert adaptive([0], w, config=cfg).new_parallelism == 16


def test_saturated_lanes_with_growing_backlog_scale_up() -> None:
    w = WindowStats(fail_num=0, saturation=0.95, backlog_delta=50)
    d = adaptive([0, 0], w)
    assert (d.direction, d.new_parallelism) == ("up", 8)


def test_idle_lanes_scale_down_to_the_ds2_target() -> None:
    w = WindowStats(fail_num=0, saturation=0.1, backlog_delta=0, arrival_rate=100, lane_rate=500)
    d = adaptive([0, 0, 0, 0], w, p=8)
    assert (d.direction, d.new_parallelism, d.cause) == ("down", 1, "idle")


def test_idle_lanes_without_rates_halve() -> None:
    w = WindowStats(fail_num=0, batch_duration_s=0.4, trigger_s=2.0, backlog_delta=0)
    d = adaptive([0, 0], w, p=8)
    assert (d.direction, d.new_parallelism) == ("down", 4)


def test_no_scale_down_while_the_backlog_grows() -> None:
    w = WindowStats(fail_num=0, saturation=0.1, backlog_delta=5)
    d = adaptive([0, 0], w, p=8)
    assert d.direction == "none"
    assert "backlog growing by 5" in d.reason


def test_cooldown_stops_a_change_soon_after_the_last_one() -> None:
    d = adaptive([0, 0, 0, 10], WindowStats(fail_num=10), now=1030.0, last_change_at=1000.0)
    assert d.direction == "none"
    assert d.reason == "cooldown: 30 s since the last change < 120 s"


IDLE = WindowStats(fail_num=0, saturation=0.1, backlog_delta=0, arrival_rate=100, lane_rate=500)


def test_no_scale_down_within_the_delay_after_a_scale_up() -> None:
    d = adaptive([0, 0], IDLE, p=8, now=1200.0, last_up_at=1000.0)
    assert (d.direction, d.new_parallelism, d.cause) == ("none", 8, "idle")
    assert d.reason == "holding: lanes idle, but scaled up 200 s ago < scale_down_delay_s=300"


def test_scale_down_once_the_delay_after_a_scale_up_has_passed() -> None:
    d = adaptive([0, 0], IDLE, p=8, now=1300.0, last_up_at=1000.0)
    assert (d.direction, d.new_parallelism) == ("down", 1)


def test_the_scale_down_delay_does_not_hold_a_scale_up() -> None:
    w = WindowStats(fail_num=0, saturation=0.95, backlog_delta=50)
    d = adaptive([0, 0], w, p=2, now=1010.0, last_up_at=1000.0)
    assert (d.direction, d.new_parallelism) == ("up", 4)


def test_a_scale_down_delay_of_zero_is_the_rule_without_it() -> None:
    cfg = AdaptiveConfig(threshold_c=10.0, scale_down_delay_s=0.0)
    d = adaptive([0, 0], IDLE, p=8, config=cfg, now=1000.0, last_up_at=1000.0)
    assert d.direction == "down"


def test_scale_down_stops_at_min_parallelism() -> None:
    cfg = AdaptiveConfig(threshold_c=10.0, min_parallelism=2)
    w = WindowStats(fail_num=0, saturation=0.0, backlog_delta=0)
    d = adaptive([0], w, p=2, config=cfg)
    assert d.direction == "none"


def test_busy_lanes_hold() -> None:
    w = WindowStats(fail_num=0, saturation=0.6, backlog_delta=0)
    assert adaptive([0], w).direction == "none"


# The windows the live benchmark (bench/autoscale_live.py) showed the sensor at 800 records/s
# on one lane (a topology that keeps up: 0.25 s trigger, batches of 0.27-0.82 s) and at
# 3200 records/s on two lanes (it does not).
KEEPING_UP = {"saturation": 0.32, "trigger_s": 0.25, "lane_rate": 3974.8}
SWING = WindowStats(fail_num=0, backlog=212, backlog_delta=212, batch_duration_s=0.529,
                    arrival_rate=798.0, **KEEPING_UP)  # fmt: skip
LAGGING = WindowStats(fail_num=0, saturation=1.0, backlog=37378, backlog_delta=471,
                      batch_duration_s=1.252, trigger_s=0.25, arrival_rate=3194.6,
                      lane_rate=1955.9)  # fmt: skip


def test_a_backlog_within_one_batchs_arrivals_is_not_growth() -> None:
    # 212 records waiting < 798 records/s x 0.529 s: where the window closed in a batch,
    # not a lag; the batches "overrun" the 0.25 s trigger, as every batch does.
    clock = FakeClock(0.0)
    scaler = Autoscaler(parallelism=1, history_windows=6, policy="adaptive", config=CFG,
                        clock=clock)  # fmt: skip
    scaler.last_change_at = 0.0  # the step down's replacement ended now
    clock.advance(CFG.cooldown_s + 5.0)  # the cooldown is over: the look the live run made
    calm = WindowStats(fail_num=0, backlog=150, backlog_delta=-30, batch_duration_s=0.4,
                       arrival_rate=800.0, **KEEPING_UP)  # fmt: skip
    for _ in range(5):
        scaler.observe(calm)
    held = scaler.observe(SWING)
    assert (held.direction, held.new_parallelism) == ("none", 1)
    assert "holding" in held.reason


def test_a_backlog_beyond_one_batchs_arrivals_still_scales_up() -> None:
    clock = FakeClock(0.0)
    scaler = Autoscaler(parallelism=2, history_windows=6, policy="adaptive", config=CFG,
                        clock=clock)  # fmt: skip
    scaler.last_change_at = 0.0
    clock.advance(CFG.cooldown_s + 5.0)
    d = scaler.observe(LAGGING)
    # ceil(3194.6 / (1955.9 x 0.7)) = 3 lanes -> 4
    assert (d.direction, d.new_parallelism) == ("up", 4)
    assert "backlog growing by 471 with lanes saturated" in d.reason


def test_growth_with_unsaturated_lanes_names_the_overrun() -> None:
    w = WindowStats(fail_num=0, saturation=0.5, backlog=5000, backlog_delta=4000,
                    batch_duration_s=1.0, trigger_s=0.25, arrival_rate=3000.0)  # fmt: skip
    d = adaptive([0, 0], w, p=1)
    assert d.direction == "up"
    assert "backlog growing by 4000 with batches overrunning the trigger" in d.reason


def test_growth_without_rates_counts_as_before() -> None:
    # No arrival rate or batch time: one batch's arrivals are unknown, any growth counts.
    w = WindowStats(fail_num=0, saturation=0.95, backlog=10, backlog_delta=10)
    assert adaptive([0, 0], w).direction == "up"


def test_adaptive_checks_counts_end_with_the_window() -> None:
    with pytest.raises(ValueError, match="counts must end with the current window's fail_num=3"):
        adaptive([1, 2], WindowStats(fail_num=3))


def test_ds2_target_rounds_up_to_a_power_of_two() -> None:
    assert ds2_target(1000.0, 100.0, 1.0) == 16
    assert ds2_target(0.0, 100.0, 0.7) == 1
    assert next_power_of_two(17) == 32


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"min_parallelism": 0}, "min_parallelism"),
        ({"min_parallelism": 8, "max_parallelism": 4}, "max_parallelism=4 < min_parallelism=8"),
        ({"target_utilisation": 1.5}, "target_utilisation"),
        ({"low_saturation": 0.95}, "low_saturation"),
        ({"cooldown_s": -1}, "cooldown_s"),
    ],
)
def test_adaptive_config_names_the_bad_field(kwargs: dict, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        AdaptiveConfig(threshold_c=1.0, **kwargs)


def test_window_stats_rejects_saturation_above_one() -> None:
    with pytest.raises(ValueError, match="saturation must be in"):
        WindowStats(fail_num=0, saturation=1.2)


# --- Decision serialisation -------------------------------------------------------------


def test_decision_round_trips_through_json() -> None:
    d = adaptive([0, 0, 0, 10], WindowStats(fail_num=10, saturation=0.5))
    again = Decision.from_dict(json.loads(json.dumps(d.to_dict())))
    assert again == d


def test_decision_from_dict_names_missing_fields() -> None:
    data = paper_decision([0, 10], 2, 1.0).to_dict()
    del data["s2"]
    with pytest.raises(ValueError, match=r"missing field\(s\) \['s2'\]"):
        Decision.from_dict(data)


def test_decision_rejects_a_direction_that_contradicts_the_numbers() -> None:
    data = paper_decision([0, 10], 2, 1.0).to_dict()
    data["direction"] = "down"
    with pytest.raises(ValueError, match="direction='down' contradicts"):
        Decision.from_dict(data)


# --- Autoscaler ---------------------------------------------------------------------------


def test_autoscaler_keeps_only_the_last_a_windows() -> None:
    scaler = Autoscaler(parallelism=4, history_windows=3, threshold_c=10.0, clock=FakeClock())
    for n in (7, 0, 0, 0):
        scaler.observe(n)
    assert scaler.counts == (0, 0, 0)


def test_autoscaler_decides_without_changing_until_applied() -> None:
    clock = FakeClock(50.0)
    scaler = Autoscaler(parallelism=4, history_windows=4, threshold_c=10.0, clock=clock)
    for n in (0, 0, 0):
        assert scaler.observe(n).direction == "none"
    decision = scaler.observe(10)
    assert decision.new_parallelism == 8
    assert scaler.parallelism == 4
    scaler.applied(decision)
    assert (scaler.parallelism, scaler.last_change_at, scaler.counts) == (8, 50.0, ())


def test_autoscaler_adaptive_cooldown_uses_the_clock() -> None:
    clock = FakeClock(0.0)
    scaler = Autoscaler(
        parallelism=4, history_windows=4, policy="adaptive", config=CFG, clock=clock
    )
    up = scaler.observe(WindowStats(fail_num=0, saturation=1.0, backlog_delta=10))
    scaler.applied(up)
    clock.advance(60.0)
    held = scaler.observe(WindowStats(fail_num=0, saturation=1.0, backlog_delta=10))
    assert held.direction == "none"
    clock.advance(60.0)
    assert (
        scaler.observe(WindowStats(fail_num=0, saturation=1.0, backlog_delta=10)).new_parallelism
        == 16
    )


def test_autoscaler_delays_a_scale_down_after_a_scale_up_not_after_a_scale_down() -> None:
    clock = FakeClock(0.0)
    cfg = AdaptiveConfig(threshold_c=10.0, cooldown_s=60.0, scale_down_delay_s=300.0)
    scaler = Autoscaler(
        parallelism=4, history_windows=4, policy="adaptive", config=cfg, clock=clock
    )
    scaler.applied(scaler.observe(WindowStats(fail_num=0, saturation=1.0, backlog_delta=10)))
    assert (scaler.parallelism, scaler.last_up_at) == (8, 0.0)
    clock.advance(120.0)  # past the cooldown, within the delay
    assert scaler.observe(IDLE).direction == "none"
    clock.advance(180.0)
    down = scaler.observe(IDLE)
    assert (down.direction, down.new_parallelism) == ("down", 1)
    scaler.applied(down)
    assert scaler.last_up_at == 0.0  # a scale-down does not restart the delay
    resumed = Autoscaler(
        parallelism=1, history_windows=4, policy="adaptive", config=cfg, clock=clock,
        snapshot=pickle.loads(pickle.dumps(scaler.snapshot())),
    )  # fmt: skip
    assert resumed.last_up_at == 0.0


def test_autoscaler_snapshot_survives_pickle_and_restore() -> None:
    clock = FakeClock()
    scaler = Autoscaler(parallelism=4, history_windows=4, threshold_c=10.0, clock=clock)
    for n in (0, 0, 0):
        scaler.observe(n)
    snap = pickle.loads(pickle.dumps(scaler.snapshot()))
    resumed = Autoscaler(
        parallelism=1, history_windows=4, threshold_c=10.0, clock=clock, snapshot=snap
    )
    assert resumed.observe(10).new_parallelism == 8


def test_applied_rejects_a_stale_decision() -> None:
    scaler = Autoscaler(parallelism=4, history_windows=2, threshold_c=1.0, clock=FakeClock())
    stale = paper_decision([0, 10], 2, 1.0)
    with pytest.raises(
        ValueError, match="old_parallelism=2 does not match the current parallelism 4"
    ):
        scaler.applied(stale)


def test_autoscaler_requires_a_config_for_adaptive() -> None:
    with pytest.raises(ValueError, match="policy='adaptive' needs config"):
        Autoscaler(parallelism=1, history_windows=2, policy="adaptive", clock=FakeClock())
