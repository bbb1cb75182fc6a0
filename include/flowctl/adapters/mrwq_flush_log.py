"""The MRWQ flusher's story in the task log, at a readable rate.

Every flush is logged at DEBUG; a flush that replayed, deduplicated or dead-lettered is
news (INFO at once); the rest are summed up at most once a minute
(:mod:`flowctl.core.log_pacing`), so a steady stream's flushes do not flood the log.
"""

from __future__ import annotations

import logging

from flowctl.adapters.mrwq_reports import FlushReport
from flowctl.core.clock import Clock
from flowctl.core.log_pacing import Tally
from flowctl.core.metrics import percentile

# The flusher's logger: its lines read as the flusher's, wherever they are written from.
log = logging.getLogger("flowctl.adapters.mrwq_flusher")


class FlushLog:
    """The log lines of one MRWQ's flushes (one per :class:`FlusherService`)."""

    def __init__(self, namespace: str, clock: Clock) -> None:
        self.namespace = namespace
        self.clock = clock
        self._tally = Tally()
        # the flushes' durations (ms) since the last summary line: their p50/p95 go in it,
        # so a long run's log shows whether a flush costs more as the tables grow
        self._durations_ms: list[float] = []

    def flushed(self, report: FlushReport) -> None:
        """Log one flush that wrote items (its first sequence number is set)."""
        s, r = report.stats, report.result
        # Every flush at DEBUG; a flush that replayed, deduplicated or dead-lettered is
        # news (INFO at once); the rest are summed up at most once a minute (log_pacing).
        notable = s.duplicates or s.replayed or s.dlq
        log.log(
            logging.INFO if notable else logging.DEBUG,
            "MRWQ %s: flushed %d item(s) seq %d..%d (%d applied, %d duplicate of %d record(s), "
            "%d replayed, %d dlq), %d record(s), %d row(s) in %.3f s; queue %d; trigger %s%s",
            self.namespace,
            s.items,
            r.first_seq,
            r.last_seq,
            s.applied,
            s.duplicates,
            s.duplicate_records,
            s.replayed,
            s.dlq,
            s.records,
            s.rows,
            report.duration_s,
            r.pending,
            r.trigger,
            f"; {s.coalesced} applied range row(s) merged away" if s.coalesced else "",
        )
        self._durations_ms.append(report.duration_s * 1000.0)
        due = self._tally.add(self.clock.now(), items=s.items, records=s.records)
        if due is not None:
            flushes, sums, seconds = due
            durations, self._durations_ms = self._durations_ms, []
            log.info(
                "MRWQ %s: flushed %d item(s), %d record(s) in %d flush(es) %s; to seq %d, "
                "queue %d; flush ms p50 %.1f, p95 %.1f",
                self.namespace,
                sums["items"],
                sums["records"],
                flushes,
                f"in the last {seconds:.0f} s" if seconds else "(the first)",
                r.last_seq,
                r.pending,
                percentile(durations, 50),
                percentile(durations, 95),
            )
