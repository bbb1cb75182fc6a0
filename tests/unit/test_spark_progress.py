"""Spark's micro-batch phases summarised from progress reports (flowctl.spark.progress)."""

from __future__ import annotations

from types import SimpleNamespace

from flowctl.spark.progress import batch_phases


def report(batch: int, rows: int, **ms: int) -> dict:
    return {"batchId": batch, "numInputRows": rows, "durationMs": ms}


def test_summarises_batches_after_the_last_line_that_read_input() -> None:
    reports = [
        report(3, 10, addBatch=900, walCommit=50),  # already summarised
        report(4, 10, addBatch=300, walCommit=40, triggerExecution=400),
        report(5, 0, addBatch=1, triggerExecution=2),  # an empty trigger
        report(6, 10, addBatch=500, walCommit=60, triggerExecution=600),
    ]
    last, phases = batch_phases(reports, after_batch=3)
    assert last == 6
    assert phases == {
        "triggerExecution": (400.0, 600.0),
        "walCommit": (40.0, 60.0),
        "addBatch": (300.0, 500.0),
    }
    assert list(phases) == ["triggerExecution", "walCommit", "addBatch"]  # a batch's order


def test_reads_pyspark_progress_objects_and_reports_nothing_new() -> None:
    progress = SimpleNamespace(batchId=7, numInputRows=5, durationMs={"addBatch": 120})
    assert batch_phases([progress], after_batch=6) == (7, {"addBatch": (120.0, 120.0)})
    assert batch_phases([progress], after_batch=7) == (7, {})
