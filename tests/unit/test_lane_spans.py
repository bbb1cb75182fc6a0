"""How a lane groups its tuples into range reads (``lane_read._spans``): contiguous runs
per partition, and for the librdkafka reader runs across short gaps too."""

from __future__ import annotations

from flowctl.core.tuples import TupleRange
from flowctl.spark.flow.lane_read import LIBRDKAFKA_MAX_SKIP, _spans
from flowctl.spark.flow.plan import PlanEntry


def _entries(*ranges: tuple[int, int, int]) -> list[PlanEntry]:
    return [PlanEntry(TupleRange("t", p, s, e), 1, False, "t.from") for p, s, e in ranges]


def _bounds(spans: list[list[TupleRange]]) -> list[list[tuple[int, int, int]]]:
    return [[(t.partition, t.start, t.end) for t in span] for span in spans]


def test_contiguous_tuples_of_a_partition_are_one_read_in_offset_order() -> None:
    entries = _entries((0, 500, 1000), (1, 0, 500), (0, 0, 500), (0, 2000, 2500))
    assert _bounds(_spans(entries)) == [
        [(0, 0, 500), (0, 500, 1000)],
        [(0, 2000, 2500)],
        [(1, 0, 500)],
    ]


def test_a_librdkafka_read_moves_over_short_gaps_only() -> None:
    """Every other tuple of 500 (a lane of two): one read; a gap past the limit: two."""
    far = 1500 + LIBRDKAFKA_MAX_SKIP + 1
    entries = _entries((0, 0, 500), (0, 1000, 1500), (0, far, far + 500), (1, 500, 1000))
    assert _bounds(_spans(entries, LIBRDKAFKA_MAX_SKIP)) == [
        [(0, 0, 500), (0, 1000, 1500)],
        [(0, far, far + 500)],
        [(1, 500, 1000)],
    ]
    assert len(_spans(entries)) == 4  # kafka-python: contiguous runs only
