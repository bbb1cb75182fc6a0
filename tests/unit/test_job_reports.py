"""The "no batch finished" line says idle only when the log holds nothing more."""

from __future__ import annotations

import logging
import threading

import pytest

from flowctl.spark.job_reports import JobReports


class _Progress:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.batches = 0
        self.records = 0


class _Job(JobReports):
    """The reporting mixin with the lag given (Kafka and the database are the adapters')."""

    def __init__(self, lag: int | None, standby: bool = False) -> None:
        self.topology_id = "wordcount/blue"
        self.progress = _Progress()
        self.lag = lag
        self.standby = standby

    def _lag(self) -> int | None:
        return self.lag

    def _standing_by(self) -> bool:
        return self.standby


@pytest.mark.parametrize(
    ("lag", "line"),
    [
        (
            339000,
            "topology wordcount/blue: no batch finished for 12 s while 339000 records wait in "
            "the log (0 batches, 0 records so far)",
        ),
        (
            0,
            "topology wordcount/blue idle: caught up with the log, no batch for 12 s "
            "(0 batches, 0 records so far)",
        ),
        (
            None,
            "topology wordcount/blue: no batch finished for 12 s while an unknown number of "
            "records wait in the log (0 batches, 0 records so far)",
        ),
    ],
)
def test_no_batch_is_idle_only_when_caught_up(
    lag: int | None, line: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flowctl.job")
    _Job(lag)._report_no_batch(12.3)
    assert [r.getMessage() for r in caplog.records] == [line]


def test_a_warm_standby_says_it_stands_by_whatever_the_log_holds(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """One wording for a standby waiting: not "idle" one minute and "records wait" the next."""
    caplog.set_level(logging.INFO, logger="flowctl.job")
    for lag in (0, 50, None):
        _Job(lag, standby=True)._report_no_batch(80.0)
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "topology wordcount/blue standing by (READY): it reads nothing until a replacement "
        "activates it"
    ] * 3
