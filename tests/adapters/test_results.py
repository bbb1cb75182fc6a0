"""The idempotent word-count sink on real SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from flowctl.adapters import results
from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.results import PartialOverlap, PartitionSpan
from flowctl.pipelines.wordcount import apply_records, count_words

pytestmark = [pytest.mark.integration, pytest.mark.postgres]

TOPIC = "wordcount.eden"
LINES = [f"The cat {i} and THE dog, the end-{i % 3}" for i in range(40)]


@pytest.fixture
def url(database_url: str) -> str:
    ControlPlane(database_url).ensure_schema()
    return database_url


def _records(lines: list[str], partitions: int = 2) -> list[results.Record]:
    """Spread lines over partitions round robin, with per-partition offsets from 0."""
    next_offset = [0] * partitions
    out = []
    for i, line in enumerate(lines):
        p = i % partitions
        out.append((TOPIC, p, next_offset[p], line.encode()))
        next_offset[p] += 1
    return out


def test_same_batch_applied_twice_counts_once(url: str) -> None:
    batch = _records(LINES)
    first = apply_records(url, "wordcount", batch)
    second = apply_records(url, "wordcount", batch)
    assert (first.applied_records, first.skipped_records) == (40, 0)
    assert (second.applied_records, second.skipped_records, second.words_added) == (0, 40, 0)
    assert results.word_counts(url, "wordcount") == dict(count_words(LINES))
    assert results.total(url, "wordcount") == sum(count_words(LINES).values())
    assert ControlPlane(url).committed_offsets("wordcount", TOPIC) == {0: 20, 1: 20}


def test_overlapping_batch_applies_only_the_new_records(url: str) -> None:
    batch = _records(LINES)
    apply_records(url, "wordcount", batch[:10])
    outcome = apply_records(url, "wordcount", batch[4:30])  # replays 4..9
    assert (outcome.applied_records, outcome.skipped_records) == (20, 6)
    apply_records(url, "wordcount", batch)
    assert results.word_counts(url, "wordcount") == dict(count_words(LINES))


def test_pipelines_are_independent(url: str) -> None:
    apply_records(url, "a", _records(LINES[:5]))
    apply_records(url, "b", _records(LINES[:5]))
    assert (
        results.word_counts(url, "a")
        == results.word_counts(url, "b")
        == dict(count_words(LINES[:5]))
    )
    assert results.total(url, "nothing") == 0
    assert results.word_counts(url, "nothing") == {}


def test_counted_spans_apply_whole_or_not_at_all(url: str) -> None:
    counts = dict(count_words(LINES[:20]))
    spans = [PartitionSpan(TOPIC, 0, 0, 9, 10), PartitionSpan(TOPIC, 1, 0, 9, 10)]
    applied = results.apply_counted_spans(url, "wordcount", counts, spans)
    again = results.apply_counted_spans(url, "wordcount", counts, spans)
    assert (applied.applied_records, again.applied_records, again.skipped_records) == (20, 0, 20)
    assert results.word_counts(url, "wordcount") == counts
    assert ControlPlane(url).committed_offsets("wordcount", TOPIC) == {0: 10, 1: 10}


def test_partly_applied_counted_batch_is_refused_and_the_fallback_is_exact(url: str) -> None:
    batch = _records(LINES)  # 20 records per partition
    apply_records(url, "wordcount", batch[:10])  # offsets 0..4 of each partition
    rest = batch[6:]  # starts at offset 3 of both partitions: part of it is applied
    counts = dict(count_words(value for *_, value in rest))
    spans = [PartitionSpan(TOPIC, 0, 3, 19, 17), PartitionSpan(TOPIC, 1, 3, 19, 17)]
    with pytest.raises(PartialOverlap, match=r"wordcount.eden/0 stored=5 span=3..19"):
        results.apply_counted_spans(url, "wordcount", counts, spans)
    assert results.word_counts(url, "wordcount") == dict(count_words(LINES[:10]))
    apply_records(url, "wordcount", rest)
    assert results.word_counts(url, "wordcount") == dict(count_words(LINES))


def test_bad_input_is_refused_before_writing(url: str) -> None:
    with pytest.raises(ValueError, match=r"record=\('t', 0, -1, b'x'\) must be"):
        apply_records(url, "wordcount", [("t", 0, -1, b"x")])
    with pytest.raises(ValueError, match=r"count of word='cat' is 0"):
        results.apply_counted_spans(url, "wordcount", {"cat": 0}, [PartitionSpan("t", 0, 0, 0, 1)])
    with pytest.raises(ValueError, match=r"counts without spans"):
        results.apply_counted_spans(url, "wordcount", {"cat": 1}, [])
    with pytest.raises(ValueError, match=r"records=5 does not fit offsets 0..1"):
        PartitionSpan("t", 0, 0, 1, 5)
    with pytest.raises(ValueError, match=r"pipeline='' must be a non-empty string"):
        apply_records(url, "", [])
    assert results.total(url, "wordcount") == 0
