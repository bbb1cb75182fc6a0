"""Metrics-window aggregator: one row per topology per window (SPEC H; seed 001_61fde93b6fcf7afc).

JStorm's topology master aggregates task heartbeats and metrics so that the
coordination store sees one write per topology per window instead of one per
task per event. Likewise the driver records events as they happen
(admitted, acked, failed, ...) and, once per ``window_s``, :meth:`roll` turns
them into a frozen :class:`MetricsRow` that an adapter persists in the control
plane; the autoscaler (SPEC E) reads ``failed + timed_out`` per window from it.

Latency percentiles are exact nearest-rank percentiles of the samples of the
window, from a bounded reservoir (uniform sampling with a seeded
``random.Random``) so a busy window cannot grow memory without bound.

Windows are aligned on the clock at construction: ``[t0 + i * window_s,
t0 + (i + 1) * window_s)``. ``roll`` emits every window that has ended,
including empty ones (a window without failures is a data point too).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .clock import Clock
from .health import Health
from .metrics_row import COUNTS, LaneGauge, MetricsRow

__all__ = ["LaneGauge", "MetricsRow", "MetricsWindow", "SpoutMetrics", "percentile"]

if TYPE_CHECKING:
    from .spout import Spout
    from .tuples import TopicPartition


def percentile(samples: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile ``q`` in [0, 100] of ``samples``; None when empty."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile: q must be in [0, 100], got {q!r}")
    if not samples:
        return None
    ordered = sorted(samples)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


class MetricsWindow:
    """Counters of the current window plus the gauges last set."""

    def __init__(
        self,
        topology: str,
        clock: Clock,
        *,
        window_s: float = 10.0,
        max_samples: int = 4096,
        rng: random.Random | None = None,
    ) -> None:
        if not isinstance(topology, str) or not topology:
            raise ValueError(f"MetricsWindow: topology must be a non-empty str, got {topology!r}")
        if not isinstance(window_s, int | float) or not window_s > 0:
            raise ValueError(f"MetricsWindow: window_s must be > 0, got {window_s!r}")
        if not isinstance(max_samples, int) or max_samples < 1:
            raise ValueError(f"MetricsWindow: max_samples must be an int >= 1, got {max_samples!r}")
        self.topology = topology
        self.window_s = float(window_s)
        self._clock = clock
        self._max_samples = max_samples
        self._rng = rng if rng is not None else random.Random(0)
        self._start = clock.now()
        self._backlog = 0
        self._backpressure = 0
        self._lanes: tuple[LaneGauge, ...] = ()
        self._closed: list[MetricsRow] = []
        self._reset()

    @property
    def window_start(self) -> float:
        return self._start

    # -- counters --------------------------------------------------------
    def admitted(self, tuples: int = 1) -> None:
        self._count("admitted", tuples)

    def acked(self, tuples: int = 1, records: int = 0, latencies: Iterable[float] = ()) -> None:
        """Tuples acked, the records they held, and their end-to-end latencies (s)."""
        self._count("acked", tuples)
        self._count("records", records)
        self._sample_all(latencies)

    def failed(self, tuples: int = 1) -> None:
        self._count("failed", tuples)

    def timed_out(self, tuples: int = 1) -> None:
        self._count("timed_out", tuples)

    def replayed(self, tuples: int = 1) -> None:
        self._count("replayed", tuples)

    def dlq(self, records: int = 1) -> None:
        self._count("dlq", records)

    # -- gauges ----------------------------------------------------------
    def set_backlog(self, records: int) -> None:
        self._advance()
        self._backlog = _non_negative("backlog", records)

    def set_backpressure(self, level: int) -> None:
        self._advance()
        self._backpressure = _non_negative("backpressure_level", level)

    def set_lanes(self, lanes: Iterable[LaneGauge]) -> None:
        self._advance()
        self._lanes = tuple(sorted(lanes, key=lambda g: g.lane))

    # -- windows ---------------------------------------------------------
    def roll(self) -> list[MetricsRow]:
        """Rows of every window that has ended by now, oldest first (each once)."""
        self._advance()
        rows, self._closed = self._closed, []
        return rows

    def _advance(self) -> None:
        # Close ended windows before recording anything, so that an event is
        # counted in the window it happened in even if roll() is called late.
        ended = int((self._clock.now() - self._start) // self.window_s)
        for _ in range(ended):
            self._closed.append(self._row(self._start + self.window_s))
            self._start += self.window_s
            self._reset()

    def _row(self, end: float) -> MetricsRow:
        c: dict[str, Any] = dict(self._counts)
        return MetricsRow(
            topology=self.topology,
            window_start=self._start,
            window_end=end,
            **c,
            records_per_s=c["records"] / self.window_s,
            latency_p50_s=percentile(self._samples, 50),
            latency_p99_s=percentile(self._samples, 99),
            backlog=self._backlog,
            backpressure_level=self._backpressure,
            lanes=self._lanes,
        )

    def _reset(self) -> None:
        self._counts = dict.fromkeys(COUNTS, 0)
        self._samples: list[float] = []
        self._seen = 0

    def _count(self, name: str, n: int) -> None:
        self._advance()
        self._counts[name] += _non_negative(name, n)

    def _sample_all(self, latencies: Iterable[float]) -> None:
        """Keep a uniform sample of the window's latencies (reservoir sampling, Algorithm R).

        The window is advanced once for the lot (they are reported at one instant): the
        planner hands over a batch's latencies at once, 8 per tuple."""
        self._advance()
        samples, most, rng = self._samples, self._max_samples, self._rng
        for latency in latencies:
            if not isinstance(latency, int | float) or math.isnan(latency) or latency < 0:
                raise ValueError(f"MetricsWindow: latency must be a number >= 0, got {latency!r}")
            self._seen += 1
            if len(samples) < most:
                samples.append(float(latency))
                continue
            slot = rng.randrange(self._seen)
            if slot < most:
                samples[slot] = float(latency)


def _non_negative(name: str, value: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"MetricsWindow: {name} must be an int >= 0, got {value!r}")
    return value


class SpoutMetrics:
    """A flow-controlled topology's metrics rows, assembled from the spout's figures.

    The spout keeps cumulative counters; :meth:`record` turns their growth since the last
    call into events of the :class:`MetricsWindow` and, for every window that closed,
    appends a :class:`MetricsRow` (times on the wall clock) with the lanes' gauges, the backpressure
    levels, the MRWQ length and the figures the adaptive autoscaler reads: replayed
    records failing again (poison, not load), how fast Eden grows, and how fast one lane
    processes records (its tuples/s by Little's law x tuple size). Window times are
    moved to the wall clock by ``wall_offset`` (wall time minus the clock's time).
    """

    def __init__(self, window: MetricsWindow, tuple_size: int, *, keep: int = 50) -> None:
        self.window = window
        self.tuple_size = tuple_size
        self.keep = keep
        self.rows: list[MetricsRow] = []
        self.row_no = 0
        self._spout: object | None = None
        self._prev: dict[str, int] = {}
        self._repeat = 0
        self._arrival_mark: tuple[float, int] | None = None

    def record(
        self,
        spout: Spout,
        latest: Mapping[TopicPartition, int],
        levels: Mapping[str, int],
        mrwq: int,
        *,
        now: float,
        wall_offset: float,
        health: Health | None = None,
        rebuilds: int | None = None,
        backlog: int | None = None,
    ) -> bool:
        """Count what the spout did since the last call; close the windows that ended.
        Returns whether any closed (:attr:`rows` changed): the planner republishes the rows
        only then, since encoding all ``keep`` of them every batch cost ~10 ms a batch.

        ``health``: the topology's health now, stamped on every window closed now;
        ``rebuilds``: its rebuilds after lost MRWQ items so far (see :class:`WindowFigures`);
        ``backlog``: what the topology owes (``None``: the spout's backlog over ``latest``;
        a standby owes none of the log's records, which are the ACTIVE topology's).
        """
        health = health or Health()
        self._count(spout, latest, levels, backlog)
        gauges = {g["lane"]: g for g in spout.lane_gauges()}
        rolled = self.window.roll()
        figures = self._figures(spout, latest, now) if rolled else {}
        for row in rolled:
            self.row_no += 1
            self.rows.append(
                dataclasses.replace(
                    row,
                    n=self.row_no,
                    window_start=row.window_start + wall_offset,
                    window_end=row.window_end + wall_offset,
                    lanes=[gauges.get(g["lane"], g) for g in row.lane_list],
                    levels=dict(levels),
                    mrwq=mrwq,
                    health=health.state,
                    health_cause=health.cause,
                    rebuilds=rebuilds,
                    **figures,
                )
            )
            figures["repeat_failures"] = 0  # counted once, in the first window rolled now
        self.rows = self.rows[-self.keep :]
        return bool(rolled)

    def _count(
        self,
        spout: Spout,
        latest: Mapping[TopicPartition, int],
        levels: Mapping[str, int],
        backlog: int | None,
    ) -> None:
        c = spout.counters
        if self._spout is not spout:  # a rebuilt spout counts from 0
            self._prev = {}
            self._spout = spout
        delta = {k: c[k] - self._prev.get(k, 0) for k in c}
        self._prev = dict(c)
        m = self.window
        m.admitted(delta["admitted"])
        m.acked(delta["acked"], delta["records"], spout.latencies)
        spout.latencies.clear()
        m.failed(delta["failed"])
        m.timed_out(delta["timed_out"])
        m.replayed(delta["replayed"])
        m.dlq(delta["dlq"])
        m.set_backlog(spout.backlog(latest) if backlog is None else backlog)
        m.set_backpressure(sum(levels.values()))
        m.set_lanes(LaneGauge(w.lane, w.size, str(w.state), w.in_flight) for w in spout.windows)
        self._repeat += max(0, delta.get("repeat_failures", 0))

    def _figures(
        self, spout: Spout, latest: Mapping[TopicPartition, int], now: float
    ) -> dict[str, Any]:
        total = sum(latest.values())
        arrival = None
        if self._arrival_mark is not None and now > self._arrival_mark[0]:
            arrival = max(0.0, (total - self._arrival_mark[1]) / (now - self._arrival_mark[0]))
        self._arrival_mark = (now, total)
        rates = [r for g in spout.lane_gauges() if isinstance(r := g["rate"], int | float)]
        lane_rate = sum(rates) / len(rates) * self.tuple_size if rates else None
        figures: dict[str, Any] = {
            "repeat_failures": self._repeat,
            "arrival_rate": None if arrival is None else round(arrival, 3),
            "lane_rate": None if lane_rate is None else round(lane_rate, 3),
        }
        self._repeat = 0
        return figures
