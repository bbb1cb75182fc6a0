"""The MRWQ flusher's once-a-minute summary line carries the flushes' durations."""

from __future__ import annotations

import logging

import pytest

from flowctl.adapters.mrwq_flush_log import FlushLog
from flowctl.adapters.mrwq_reports import FlushReport
from flowctl.adapters.mrwq_sink import FlushStats
from flowctl.core.clock import FakeClock
from flowctl.core.flusher import FlushResult


def _report(seq: int, seconds: float) -> FlushReport:
    result = FlushResult("length", seq, seq, 1, (f"t{seq}",), None, 0)
    return FlushReport(result, FlushStats(items=1, applied=1, records=500), seconds)


def test_summary_gives_flush_ms_p50_and_p95_of_the_flushes_since_the_last_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock(0.0)
    flushes = FlushLog("ns", clock)
    caplog.set_level(logging.INFO, logger="flowctl.adapters.mrwq_flusher")
    flushes.flushed(_report(0, 0.5))  # the first summary is due at once
    caplog.clear()
    for seq, seconds in enumerate([0.010, 0.020, 0.030, 0.040, 0.900], start=1):
        clock.advance(14.0)  # the fifth is 70 s after the first line: the next one
        flushes.flushed(_report(seq, seconds))
    lines = [r.getMessage() for r in caplog.records if "flush(es)" in r.getMessage()]
    assert lines == [
        "MRWQ ns: flushed 5 item(s), 2500 record(s) in 5 flush(es) in the last 70 s; "
        "to seq 5, queue 0; flush ms p50 30.0, p95 900.0"
    ]
