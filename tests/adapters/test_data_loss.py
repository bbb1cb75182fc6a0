"""Skipped ranges and failure causes in the database (SQLite and PostgreSQL)."""

from __future__ import annotations

import threading

import pytest

from flowctl.adapters import applied, schema_setup
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.data_loss import record_cause, record_skip, skipped_ranges
from flowctl.adapters.db import engine_for
from flowctl.core.data_loss import LossKind, LostRange
from flowctl.core.tuples import TopicPartition

pytestmark = pytest.mark.integration

EDEN = "demo.eden"


def _lost(partition: int, first: int, end: int) -> LostRange:
    detail = f"the log now starts at {end}, past the durable checkpoint {first}"
    return LostRange(EDEN, partition, first, end, LossKind.LOG_START, detail)


def test_a_skip_is_recorded_with_the_checkpoint_moved_over_it_once(database_url: str) -> None:
    schema_setup.ensure_schema(engine_for(database_url))
    with engine_for(database_url).begin() as conn:
        applied.ensure_checkpoint(conn, "demo", EDEN, 0, 100)
    assert record_skip(database_url, "demo", "demo-blue-1", _lost(0, 100, 250)) == 250
    # the same loss seen again (another topology, a second check): nothing more recorded
    assert record_skip(database_url, "demo", "demo-green-2", _lost(0, 100, 250)) == 250
    assert record_skip(database_url, "demo", "demo-blue-1", _lost(1, 0, 30)) == 30
    rows = skipped_ranges(database_url, "demo", EDEN)
    assert [(r.partition, r.first, r.end, r.records, r.topology_id) for r in rows] == [
        (0, 100, 250, 150, "demo-blue-1"),
        (1, 0, 30, 30, "demo-blue-1"),
    ]
    assert (
        rows[0]
        .describe()
        .startswith(
            "demo.eden partition 0: offsets [100, 250) (150 record(s)) skipped by demo-blue-1 at "
        )
    )
    assert rows[0].reason == "the log now starts at 250, past the durable checkpoint 100"
    assert applied.read_checkpoints(database_url, "demo", EDEN) == {
        TopicPartition(EDEN, 0): 250,
        TopicPartition(EDEN, 1): 30,
    }
    assert skipped_ranges(database_url, "other", EDEN) == []


def test_a_skip_starts_at_the_checkpoint_the_flusher_reached_meanwhile(database_url: str) -> None:
    """The flusher made [100, 180) durable after the planner read 100: only the rest is
    skipped, under the checkpoint row's lock."""
    schema_setup.ensure_schema(engine_for(database_url))
    with engine_for(database_url).begin() as conn:
        applied.ensure_checkpoint(conn, "demo", EDEN, 0, 180)
    record_skip(database_url, "demo", "demo-blue-1", _lost(0, 100, 250))
    [row] = skipped_ranges(database_url, "demo", EDEN)
    assert (row.first, row.end) == (180, 250)


def test_concurrent_skips_of_one_loss_record_it_once(database_url: str) -> None:
    schema_setup.ensure_schema(engine_for(database_url))
    done: list[int] = []
    threads = [
        threading.Thread(
            target=lambda: done.append(record_skip(database_url, "demo", "t", _lost(2, 0, 90)))
        )
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert done == [90] * 4
    assert [(r.first, r.end) for r in skipped_ranges(database_url, "demo", EDEN)] == [(0, 90)]


def test_an_empty_range_is_refused_naming_it(database_url: str) -> None:
    with pytest.raises(ValueError, match=r"offsets \[60, 60\).*an empty range is not a skip"):
        record_skip(database_url, "demo", "t", _lost(0, 60, 60))


def test_the_latest_cause_of_a_topology_wins_and_a_long_one_is_cut(database_url: str) -> None:
    from flowctl.adapters.data_loss import CAUSE_MAX_CHARS, causes

    plane = ControlPlane(database_url)
    plane.ensure_schema()
    plane.register_topology("demo-blue-1", "demo", "blue", 2)
    record_cause(database_url, "demo-blue-1", "first")
    record_cause(database_url, "demo-blue-1", "x" * (CAUSE_MAX_CHARS + 50))
    with engine_for(database_url).connect() as conn:
        got = causes(conn, ["demo-blue-1", "nobody"])
    assert list(got) == ["demo-blue-1"]
    assert len(got["demo-blue-1"]) == CAUSE_MAX_CHARS and got["demo-blue-1"].endswith("...")
