"""RTT estimator: RFC 6298-style EWMA, floor, fixed threshold, snapshot."""

from __future__ import annotations

import math
import pickle

import pytest

from flowctl.core.rtt import RttEstimator


def test_no_sample_means_nothing_is_slow() -> None:
    est = RttEstimator()
    assert est.threshold() == math.inf
    assert not est.is_slow(1e9)


def test_first_sample_sets_srtt_and_half_deviation() -> None:
    est = RttEstimator()
    est.observe(2.0)
    assert (est.srtt, est.rttvar) == (2.0, 1.0)
    assert est.threshold() == 2.0 + 4 * 1.0


def test_second_sample_follows_rfc6298_order() -> None:
    est = RttEstimator()
    est.observe(2.0)
    est.observe(4.0)
    # rttvar uses the old srtt: 0.75 * 1 + 0.25 * |2 - 4| = 1.25; srtt = 0.875*2 + 0.125*4
    assert est.rttvar == 1.25
    assert est.srtt == 2.25
    assert est.threshold() == 2.25 + 4 * 1.25


def test_min_threshold_floors_the_estimate() -> None:
    est = RttEstimator(min_threshold=0.5)
    est.observe(0.01)
    assert est.threshold() == 0.5
    assert not est.is_slow(0.4)
    assert est.is_slow(0.6)


def test_fixed_threshold_ignores_history() -> None:
    est = RttEstimator(fixed_threshold=1.0)
    est.observe(10.0)
    assert est.threshold() == 1.0
    assert not est.is_slow(1.0)
    assert est.is_slow(1.0001)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"alpha": 0}, "alpha"),
        ({"beta": 1.5}, "beta"),
        ({"k": -1}, "k"),
        ({"min_threshold": -0.1}, "min_threshold"),
        ({"fixed_threshold": 0}, "fixed_threshold"),
    ],
)
def test_bad_config_names_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RttEstimator(**kwargs)


def test_negative_rt_is_rejected() -> None:
    with pytest.raises(ValueError, match="rt must be"):
        RttEstimator().observe(-1.0)


def test_snapshot_round_trip_keeps_history() -> None:
    est = RttEstimator(min_threshold=0.1)
    for rt in (1.0, 3.0, 2.0):
        est.observe(rt)
    snap = pickle.loads(pickle.dumps(est.snapshot()))
    back = RttEstimator.from_snapshot(snap)
    assert back.snapshot() == est.snapshot()
    assert back.threshold() == est.threshold()
