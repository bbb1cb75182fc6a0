"""The one reader of a metrics window's lane figures: every shape a row may carry."""

from __future__ import annotations

import pytest

from flowctl.core.metrics import LaneGauge
from flowctl.core.window_figures import WindowFigures, lane_list, saturation, split_lanes

LANES = [
    {"lane": 0, "window": 8, "state": "NORMAL", "in_flight": 2},
    {"lane": 1, "window": 4, "state": "SLOW", "in_flight": 4},
]


def test_a_list_of_lanes_is_the_lanes_and_gives_their_saturation() -> None:
    lanes, figures = split_lanes(LANES)
    assert lanes == LANES
    assert figures == WindowFigures(saturation=(0.25 + 1.0) / 2)


def test_the_flow_jobs_object_splits_into_lanes_and_figures() -> None:
    lanes, figures = split_lanes(
        {"lanes": LANES, "repeat_failures": 3, "trigger_s": 1.0, "levels": {"persist": 1}}
    )
    assert lanes == LANES
    assert (figures.repeat_failures, figures.trigger_s, figures.levels) == (3, 1.0, {"persist": 1})
    assert split_lanes({"sink_errors": 2}) == ([], WindowFigures(sink_errors=2))


def test_gauges_and_lane_keyed_mappings_read_as_lists() -> None:
    assert lane_list((LaneGauge(0, 8, "NORMAL", 2),)) == [LANES[0]]
    assert lane_list({0: {"window": 8}, 1: {"window": 4}}) == [
        {"lane": 0, "window": 8},
        {"lane": 1, "window": 4},
    ]
    assert lane_list(None) == [] and lane_list(()) == []


def test_a_given_figure_wins_over_a_computed_one() -> None:
    _, figures = split_lanes({"lanes": LANES, "saturation": 0.9})
    assert figures.saturation == 0.9
    assert WindowFigures(mrwq=4).merged(figures) == WindowFigures(mrwq=4, saturation=0.9)


def test_saturation_needs_every_lanes_figures() -> None:
    assert saturation([{"lane": 0, "window": 4}]) is None
    assert saturation([{"lane": 0, "window": 0, "in_flight": 0}]) is None


@pytest.mark.parametrize(
    ("lanes", "message"),
    [("lanes", r"lanes='lanes' must be a list"), ([3], r"lanes entry 3 must be a mapping")],
)
def test_other_shapes_are_refused_naming_them(lanes: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        split_lanes(lanes)
