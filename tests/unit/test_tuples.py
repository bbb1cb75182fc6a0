"""Tuple ranges: a stable id, and clear errors for bad fields."""

from __future__ import annotations

import pytest

from flowctl.core.tuples import TupleRange


def test_range_id_is_stable_and_parseable() -> None:
    t = TupleRange("a:b", 3, 100, 150)
    assert t.id == "a:b:3:100-150"
    assert TupleRange.parse_id(t.id) == t
    assert t.size == 50


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", 0, 0, 1), "topic"),
        (("t", -1, 0, 1), "partition"),
        (("t", 0, -5, 1), "start"),
        (("t", 0, 5, 5), "end"),
    ],
)
def test_bad_range_names_the_field(args: tuple, field: str) -> None:
    with pytest.raises(ValueError, match=f"TupleRange.{field}"):
        TupleRange(*args)


def test_parse_id_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="malformed tuple id 'nope'"):
        TupleRange.parse_id("nope")
