"""The word-count DEFINITION agrees with the reference functions it is built on."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowctl.pipelines import wordcount
from flowctl.pipelines.base import Record
from flowctl.pipelines.config import load_pipeline_config
from flowctl.pipelines.sinks import result_store
from flowctl.textgen import zipf_lines

DEFINITION = wordcount.DEFINITION

values_strategy = st.lists(
    st.binary(max_size=40) | st.text(max_size=40).map(str.encode) | st.none(), max_size=30
)


def _records(values: list[bytes | None]) -> list[Record]:
    return [Record("wordcount.eden", i % 3, i, None, v) for i, v in enumerate(values)]


def test_the_config_names_this_definition() -> None:
    definition = load_pipeline_config("wordcount").load_definition()
    assert definition.DEFINITION is DEFINITION
    assert DEFINITION.name == "wordcount"


def test_process_counts_a_tuple_like_count_words() -> None:
    values = [b"The cat and the hat", b"\xffthe\xfe end", None, "Épée épée".encode()]
    assert DEFINITION.process(_records(values)) == {
        "the": 3,
        "cat": 1,
        "and": 1,
        "hat": 1,
        "end": 1,
        "épée": 2,
    }
    assert DEFINITION.process([]) == {}


@given(values_strategy)
def test_process_and_reference_equal_count_words(values: list[bytes | None]) -> None:
    expected = wordcount.count_words(v for v in values if v is not None)
    result = DEFINITION.process(_records(values))
    assert result == expected
    assert json.loads(json.dumps(result)) == result  # it waits in memcached as JSON
    assert DEFINITION.reference(values) == expected


@given(st.lists(values_strategy, max_size=6))
def test_tuple_results_add_up_to_the_reference(tuples: list[list[bytes | None]]) -> None:
    total: Counter[str] = Counter()
    for values in tuples:
        total.update(DEFINITION.process(_records(values)))
    assert total == DEFINITION.reference(v for values in tuples for v in values)


def test_demo_text_counts_the_same_either_way() -> None:
    lines = list(wordcount.synthetic_lines(2000, 3))
    assert lines == list(zipf_lines(2000, seed=3))
    values = [line.encode() for line in lines]
    tuples = [values[i : i + 100] for i in range(0, len(values), 100)]
    total: Counter[str] = Counter()
    for values_of_tuple in tuples:
        total.update(DEFINITION.process(_records(values_of_tuple)))
    assert total == wordcount.count_words(lines) == DEFINITION.reference(values)


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (["a", 1], r"result=\['a', 1\] is not a mapping"),
        ({"a": 0}, r"count of word='a' is 0"),
        ({"a": True}, r"count of word='a' is True"),
        ({"a": "2"}, r"count of word='a' is '2'"),
        ({"": 2}, r"word='' is not a non-empty string"),
    ],
)
def test_apply_refuses_results_that_are_not_word_counts(result: object, message: str) -> None:
    # The config's [sink] checks before any SQL, so no connection is needed to see it refuse.
    apply = result_store(load_pipeline_config("wordcount")).apply
    with pytest.raises(ValueError, match=message):
        apply(None, "wordcount", [{"ok": 1}, result])
