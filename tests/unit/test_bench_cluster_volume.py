"""The cluster volume bench's figures from sampled durable progress (pure: no cluster).

The bench's targets rest on these: when durable progress resumed after the kill, the
records/s of a stretch, the records/s while a backlog waited, what each stretch covered
(so a rate is known to be capacity, not the ingest's pace), and the record counts it
accepts (the local[2] baseline drains part of the same log).
"""

from __future__ import annotations

import argparse

import pytest

from bench._experiment import BadArgument
from bench.cluster_volume import (
    backlogged_rate,
    check_args,
    rate_between,
    resume_after,
    stretch,
)

# (t, durable, produced): steady until the kill at t=10, a 12 s stall, steady again.
SAMPLES = [
    (0.0, 0, 100_000),
    (4.0, 10_000, 100_000),
    (8.0, 20_000, 100_000),
    (10.0, 25_000, 100_000),
    (14.0, 25_000, 100_000),
    (22.0, 25_000, 100_000),
    (24.0, 35_000, 100_000),
    (28.0, 45_000, 100_000),
]


def test_resume_is_the_end_of_the_longest_stall_after_the_kill() -> None:
    # advances at 4, 8, 10, 24, 28: the longest gap ending after the kill is 10 -> 24
    assert resume_after(SAMPLES, t_kill=10.0, until=28.0) == pytest.approx(14.0)


def test_resume_without_an_advance_after_the_kill_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no durable advance after the kill"):
        resume_after(SAMPLES[:5], t_kill=10.0, until=14.0)


def test_rate_between_two_moments_counts_what_became_durable() -> None:
    assert rate_between(SAMPLES, 0.0, 8.0) == 2500
    assert rate_between(SAMPLES, 10.0, 28.0) == round(20_000 / 18)
    assert rate_between(SAMPLES, 5.0, 5.0) is None


def test_backlogged_rate_leaves_out_intervals_that_began_with_little_waiting() -> None:
    samples = [
        (0.0, 0, 60_000),  # 60k waiting
        (1.0, 20_000, 70_000),  # 50k waiting
        (2.0, 40_000, 70_000),  # 30k waiting: the next interval is the ingest's pace
        (3.0, 45_000, 75_000),
    ]
    rate, seconds = backlogged_rate(samples, 0.0, 3.0, min_backlog=50_000)
    assert (rate, seconds) == (20_000, 2.0)
    assert backlogged_rate(samples, 0.0, 3.0, min_backlog=100_000) == (None, 0.0)


def test_a_stretch_says_its_span_records_and_the_fewest_waiting() -> None:
    assert stretch(SAMPLES, 0.0, 10.0) == {
        "from_s": 0.0,
        "to_s": 10.0,
        "seconds": 10.0,
        "records": 25_000,
        "min_waiting": 75_000,
    }
    # no sample inside: nothing known about what waited
    assert stretch(SAMPLES, 1.0, 2.0)["min_waiting"] is None


def _args(records: int, baseline: int | None) -> argparse.Namespace:
    return argparse.Namespace(records=records, baseline_records=baseline)


def test_the_baseline_defaults_to_the_records_durable_at_the_kill() -> None:
    args = _args(2_000_000, None)
    check_args(args)
    assert args.baseline_records == 600_000


@pytest.mark.parametrize(
    ("records", "baseline", "named"),
    [
        (5_000, None, "--records=5000"),
        (100_000, 5_000, "--baseline-records=5000"),
        (100_000, 200_000, "--baseline-records=200000"),
    ],
)
def test_bad_record_counts_are_refused_by_name(
    records: int, baseline: int | None, named: str
) -> None:
    with pytest.raises(BadArgument, match=named):
        check_args(_args(records, baseline))
