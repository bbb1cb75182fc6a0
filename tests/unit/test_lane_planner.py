"""The lane planner: fair admission and even, exact lane assignment."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowctl.spark.lane_planner import LanePlanner, OffsetRange, OffsetsBeyondLog

offsets = st.dictionaries(st.integers(0, 7), st.integers(0, 500), min_size=1, max_size=8)


def test_admits_everything_without_a_limit() -> None:
    planner = LanePlanner(2)
    assert planner.admit({0: 5, 1: 0}, {0: 10, 1: 3, 2: 4}, None) == {0: 10, 1: 3, 2: 4}


def test_a_budget_is_shared_fairly() -> None:
    planner = LanePlanner(2)
    # backlogs 2, 100, 100: the small one takes all it has, the rest split evenly.
    assert planner.admit({0: 0, 1: 0, 2: 0}, {0: 2, 1: 100, 2: 100}, 52) == {0: 2, 1: 25, 2: 25}


def test_a_start_past_the_log_is_an_error() -> None:
    with pytest.raises(
        OffsetsBeyondLog, match=r"partition 1: start offset 9 is past the log end 4"
    ):
        LanePlanner(1).admit({0: 0, 1: 9}, {0: 0, 1: 4}, None)
    with pytest.raises(OffsetsBeyondLog, match=r"partition 3 .* no longer in the log"):
        LanePlanner(1).admit({3: 1}, {0: 0}, None)


def test_assignment_splits_partitions_over_lanes() -> None:
    plans = LanePlanner(3).assign("t", {0: 0, 1: 10}, {0: 4, 1: 15})
    assert [p.records for p in plans] == [3, 3, 3]
    assert plans[0].ranges == (OffsetRange("t", 0, 0, 3),)
    assert plans[1].ranges == (OffsetRange("t", 0, 3, 4), OffsetRange("t", 1, 10, 12))
    assert plans[2].ranges == (OffsetRange("t", 1, 12, 15),)


def test_empty_lanes_and_batches_are_left_out() -> None:
    assert LanePlanner(4).assign("t", {0: 5}, {0: 5}) == []
    plans = LanePlanner(4).assign("t", {0: 0}, {0: 2})
    assert [(p.lane, p.records) for p in plans] == [(0, 1), (1, 1)]


def test_bad_lanes() -> None:
    with pytest.raises(ValueError, match=r"lanes=0 must be an integer >= 1"):
        LanePlanner(0)


@given(
    start=offsets, extra=offsets, lanes=st.integers(1, 9), budget=st.none() | st.integers(1, 900)
)
def test_plans_cover_the_admitted_range_exactly_once(
    start: dict[int, int], extra: dict[int, int], lanes: int, budget: int | None
) -> None:
    latest = {p: start.get(p, 0) + extra.get(p, 0) for p in set(start) | set(extra)}
    planner = LanePlanner(lanes)
    end = planner.admit(start, latest, budget)
    backlog = sum(latest[p] - start.get(p, 0) for p in latest)
    admitted = sum(end[p] - start.get(p, 0) for p in end)
    assert admitted == (backlog if budget is None else min(backlog, budget))
    assert all(start.get(p, 0) <= end[p] <= latest[p] for p in latest)

    plans = planner.assign("t", start, end)
    assert len(plans) <= lanes
    sizes = [p.records for p in plans]
    assert not sizes or max(sizes) - min(sizes) <= 1
    covered = sorted(
        (r.partition, o) for p in plans for r in p.ranges for o in range(r.start, r.end)
    )
    expected = sorted((p, o) for p in end for o in range(start.get(p, 0), end[p]))
    assert covered == expected
