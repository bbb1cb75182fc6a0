"""The latency benchmarks' bookkeeping: a record's steps from a trace, and its latency
counted once whether its send or its durability is seen first.

What ``bench/latency_parts.py`` and ``bench/latency.py`` conclude rests on these small
pieces, so they are checked here on known input.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from bench._measure import OffsetLatency
from bench.latency_parts import STEPS, decompose


def _trace() -> dict[str, list[dict[str, Any]]]:
    """One batch (seq 1): lane 0 reads partition 0 offsets 0-4, its item is MRWQ seq 7."""
    return {
        "plan": [{"t0": 10.0, "t": 10.02, "seq": 1, "rows": [[0, "x.eden", 0, 0, 5, 9, 0, 0]]}],
        "read": [{"t0": 10.1, "t": 10.15, "seq": 1, "lane": 0}],
        "queued": [{"t": 10.14, "ranges": [[0, 0, 5]], "seqs": [7]}],
        "flush": [
            {"t0": 10.05, "t": 10.08, "first": 5, "last": 6},
            {"t0": 10.16, "t": 10.2, "first": 7, "last": 8},
        ],
        "progress": [
            {
                "p": {
                    "batchId": 0,
                    "sources": [{"endOffset": '{"seq": 1}'}],
                    "numInputRows": 5,
                    "durationMs": {"walCommit": 30},
                }
            }
        ],
        "batch": [{"t0": 10.05, "t": 10.18, "batch": 0}],
    }


def test_each_record_is_cut_into_steps_whose_sum_is_its_latency() -> None:
    sent = {(0, i): 9.9 for i in range(5)}
    durable = {(0, i): 10.22 for i in range(5)}
    parts = decompose(_trace(), sent, durable, since=9.0)
    assert parts["records"] == 5
    means = {name: parts["steps"][name]["mean_ms"] for name in STEPS}
    assert means == {
        "trigger wait": 100.0,
        "planning": 20.0,
        "to the lane": 80.0,
        "lane": 40.0,
        "to the flush": 20.0,  # the flush holding item 7, not the one before it
        "flush": 40.0,
        "to the poll": 20.0,
    }
    assert sum(means.values()) == pytest.approx(parts["latency"]["mean_ms"])
    around = parts["batches"]["around_the_lanes"]
    assert around["plan end -> foreachBatch called"]["p50_ms"] == 30.0
    assert around["foreachBatch called -> first lane started"]["p50_ms"] == 50.0
    assert parts["batches"]["spark_phases"]["walCommit"]["p50_ms"] == 30.0


def test_a_record_outside_every_plan_or_not_durable_is_left_out() -> None:
    sent = {(0, 3): 9.9, (0, 9): 9.9, (1, 0): 9.9}
    parts = decompose(_trace(), sent, {(0, 3): 10.22, (1, 0): 10.3}, since=9.0)
    assert (parts["records"], parts["of"]) == (1, 3)


class _Future:
    def __init__(self, partition: int, offset: int) -> None:
        self.md = SimpleNamespace(partition=partition, offset=offset)

    def get(self, timeout: float) -> SimpleNamespace:
        return self.md


def test_a_record_durable_before_its_send_is_acknowledged_is_counted_once() -> None:
    meter = OffsetLatency(SimpleNamespace(), "p", "p.eden")  # type: ignore[arg-type]  # no platform needed
    meter.durable[(0, 4)] = 10.3  # the poll saw offset 4 durable before its ack came back
    meter._collect([(_Future(0, 4), 10.0), (_Future(0, 5), 10.1)])
    assert meter.latencies == [(10.3, pytest.approx(0.3))]
    assert meter.sent == {(0, 4): 10.0, (0, 5): 10.1}
