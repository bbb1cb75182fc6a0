"""The pure rules of declarative sinks: the spec, result checks, folding and merging.

The property at the end holds every rule to what the flusher needs: tuples applied in
any order, in any batches, with replays of the same source range (which
``applied_ranges`` suppresses, modelled here by a set of applied tuples), leave the
table one pass leaves.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.sink_rules import SinkSpec, fold, merge, parse_sink, rows_of, view
from flowctl.core.validation import InvalidValue
from tests.unit.sink_cases import RAW, SPECS, Flush, flushes, stamp

UTC = dt.UTC


def _with(rule: str, **changes: Any) -> dict[str, Any]:
    raw = {**RAW[rule], **changes}
    return {k: v for k, v in raw.items() if v is not None}


# -- the spec ---------------------------------------------------------------------------------


def test_every_rule_parses_with_its_columns_in_key_then_value_order() -> None:
    spec = SPECS["replace"]
    assert (spec.table, spec.key, spec.values, spec.merge) == (
        "t_replace",
        ("k",),
        ("ts", "state", "score"),
        "replace",
    )
    assert [(c.name, c.type, c.nullable) for c in spec.columns] == [
        ("k", "text", False),
        ("ts", "timestamp", False),
        ("state", "text", False),
        ("score", "float", True),
    ]
    assert SPECS["sum"].column("n").describe() == "bigint >= 1"
    assert (
        parse_sink(
            _with("insert", values=[], nullable=None, columns={"topic": "text", "offset": "bigint"})
        ).values
        == ()
    )


@pytest.mark.parametrize(
    ("raw", "field", "value"),
    [
        ("not a table", "sink", "not a table"),
        (_with("sum", table="Bad-Name"), "sink.table", "Bad-Name"),
        (_with("sum", colour="red"), "sink.colour", "red"),
        (_with("sum", merge="avg"), "sink.merge", "avg"),
        (_with("sum", key=[]), "sink.key", []),
        (_with("sum", key="k"), "sink.key", "k"),
        (_with("sum", key=["k", "k"]), "sink.key", ["k", "k"]),
        (_with("sum", key=["pipeline"]), "sink.key", ["pipeline"]),
        (_with("sum", values=[]), "sink.values", []),
        (_with("sum", values=["k", "n"]), "sink.values", ["k", "n"]),
        (_with("sum", nullable=["k"]), "sink.nullable", ["k"]),
        (_with("sum", columns={"k": "text"}), "sink.columns", ["k"]),
        (_with("sum", columns={"k": "text", "n": "int"}), "sink.columns.n", "int"),
        (_with("sum", columns={"k": "text >= 1", "n": "bigint"}), "sink.columns.k", "text >= 1"),
        (_with("sum", columns={"k": "text", "n": "text"}), "sink.columns.n", "text"),
        (_with("sum", nullable=["n"]), "sink.columns.n", "bigint >= 1"),
        (
            _with("max", columns={"k": "text", "hi": "float", "at": "boolean"}),
            "sink.columns.at",
            "boolean",
        ),
        (_with("sum", event_time="n"), "sink.event_time", "n"),
        (_with("replace", event_time=None), "sink.event_time", None),
        (_with("replace", event_time="state"), "sink.event_time", "state"),
        (_with("replace", event_time="k"), "sink.event_time", "k"),
    ],
)
def test_a_bad_sink_names_the_field_and_the_value(raw: Any, field: str, value: Any) -> None:
    with pytest.raises(InvalidValue) as caught:
        parse_sink(raw)
    assert (caught.value.field, caught.value.value) == (field, value)
    assert str(caught.value).startswith(f"{field}={value!r} ")


# -- checking results -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "result", "message"),
    [
        ("sum", ["a", 1], r"sink t_sum: result=\['a', 1\] is not a mapping of k -> n or a list"),
        ("sum", {"a": 0}, r"n of k='a' is 0, not bigint >= 1"),
        ("sum", {"a": 1.5}, r"n of k='a' is 1.5, not bigint >= 1"),
        ("sum", {"": 1}, r"k='' is not a non-empty string"),
        ("sum", [{"k": "a"}], r"row \(k='a'\): fields \['k'\] are not \['k', 'n'\]"),
        ("insert", {"t": 1}, r"result=\{'t': 1\} is not a list of row mappings"),
        (
            "insert",
            [{"topic": "t", "offset": -1, "v": 1, "note": None}],
            r"offset=-1 is out of range",
        ),
        (
            "insert",
            [{"topic": "t", "offset": 1, "v": None, "note": None}],
            r"v=None must not be null",
        ),
        (
            "insert",
            [{"topic": "t", "offset": 1, "v": True, "note": None}],
            r"v=True has the wrong type",
        ),
        ("max", [{"k": "a", "hi": 1.0, "at": "noon"}], r"at='noon' is not ISO 8601"),
        ("max", [{"k": "a", "hi": 1.0, "at": "2026-01-01T00:00"}], r"has no time zone"),
        ("max", [{"k": "a", "hi": float("nan"), "at": stamp(0)}], r"hi=nan is out of range"),
        (
            "replace",
            [{"k": "a", "ts": stamp(0), "state": 3, "score": None}],
            r"state=3 has the wrong",
        ),
    ],
)
def test_a_bad_result_fails_the_whole_batch_naming_the_column_and_value(
    rule: str, result: Any, message: str
) -> None:
    good = {"sum": {"z": 1}, "insert": [], "max": [], "min": [], "replace": []}[rule]
    with pytest.raises(ValueError, match=message):
        fold(SPECS[rule], [good, result])


def test_results_become_typed_rows_keyed_by_their_key_columns() -> None:
    rows = fold(SPECS["insert"], [[{"topic": "t", "offset": 4, "v": 1, "note": None}]])
    assert rows == {("t", 4): {"v": 1, "note": None}}
    rows = fold(SPECS["replace"], [[{"k": "a", "ts": stamp(0, 1), "state": "x", "score": 2}]])
    assert rows == {
        ("a",): {"ts": dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC), "state": "x", "score": 2}
    }


# -- each rule --------------------------------------------------------------------------------


def test_sum_adds_a_key_met_twice_in_a_batch_and_the_stored_count() -> None:
    spec = SPECS["sum"]
    rows = fold(spec, [{"a": 1, "b": 2}, [{"k": "a", "n": 3}]])
    assert rows == {("a",): {"n": 4}, ("b",): {"n": 2}}
    assert merge(spec, {"n": 4}, {"n": 5}) == {"n": 9}


def test_insert_keeps_the_first_row_of_a_key() -> None:
    spec = SPECS["insert"]
    first = {"topic": "t", "offset": 1, "v": 1, "note": None}
    rows = fold(spec, [[first], [{**first, "v": 2}]])
    assert rows == {("t", 1): {"v": 1, "note": None}}
    assert merge(spec, {"v": 1, "note": None}, {"v": 2, "note": "x"}) == {"v": 1, "note": None}


def test_max_and_min_keep_each_columns_extreme_on_its_own() -> None:
    early, late = dt.datetime(2026, 1, 1, tzinfo=UTC), dt.datetime(2026, 1, 2, tzinfo=UTC)
    assert merge(SPECS["max"], {"hi": 5.0, "at": early}, {"hi": 1.0, "at": late}) == {
        "hi": 5.0,
        "at": late,
    }
    rows = fold(SPECS["min"], [[{"k": "a", "lo": 3}, {"k": "a", "lo": -2}], [{"k": "a", "lo": 0}]])
    assert rows == {("a",): {"lo": -2}}


def test_replace_keeps_the_latest_event_and_on_a_tie_the_stored_row() -> None:
    spec = SPECS["replace"]
    at = {m: dt.datetime(2026, 3, 1, 12, m, tzinfo=UTC) for m in range(3)}
    old = {"ts": at[1], "state": "old", "score": None}
    assert merge(spec, old, {"ts": at[2], "state": "new", "score": 1.0})["state"] == "new"
    assert merge(spec, old, {"ts": at[0], "state": "older", "score": 1.0}) is old
    assert merge(spec, old, {"ts": at[1], "state": "same time", "score": 1.0}) is old
    late_first = [[{"k": "a", "ts": stamp(2), "state": "b", "score": None}]]
    rows = fold(spec, [*late_first, [{"k": "a", "ts": stamp(1, 2), "state": "a", "score": 0.5}]])
    assert rows[("a",)]["state"] == "b"


# -- what reconcile compares ------------------------------------------------------------------


def test_view_keys_are_text_and_values_scalars_or_mappings() -> None:
    assert view(SPECS["sum"], {("a",): {"n": 3}}) == {"a": 3}
    assert view(SPECS["insert"], {("t", 4): {"v": 1, "note": None}}) == {
        "t/4": {"v": 1, "note": None}
    }
    at = dt.datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
    assert view(SPECS["max"], {("a",): {"hi": 1.0, "at": at}}) == {
        "a": {"hi": 1.0, "at": "2026-03-01T12:00:00+00:00"}
    }
    keys_only = parse_sink(
        _with("insert", values=[], nullable=None, columns={"topic": "text", "offset": "bigint"})
    )
    assert view(keys_only, {("t", 1): {}}) == {"t/1": {}}


# -- the property: order, batching and replays do not matter ----------------------------------


def flush_in_model(spec: SinkSpec, flush: Flush) -> dict[Any, Any]:
    """The table after ``flush``: each batch folded and merged into the table, a tuple
    applied only the first time its range is met (``applied_ranges``)."""
    table: dict[Any, Any] = {}
    applied: set[int] = set()
    for batch in flush.batches:
        fresh = [i for i in dict.fromkeys(batch) if i not in applied]
        applied.update(fresh)
        fold(spec, [flush.results[i] for i in fresh], into=table)
    return table


@pytest.mark.parametrize("rule", sorted(SPECS))
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_order_batching_and_replays_give_the_table_of_one_pass(
    rule: str, data: st.DataObject
) -> None:
    spec = SPECS[rule]
    flush = data.draw(flushes(rule))
    assert flush_in_model(spec, flush) == fold(spec, flush.results)


def test_the_property_sees_a_replay_that_is_not_suppressed() -> None:
    """Without ``applied_ranges`` a replayed tuple would count twice: the check can fail."""
    spec = SPECS["sum"]
    results = [{"a": 1}, {"a": 2}]
    replayed = fold(spec, [results[0], results[1], results[0]])
    assert replayed != fold(spec, results)
    assert flush_in_model(spec, Flush(results, [[0, 1], [0]])) == fold(spec, results)


# -- the counters' fast fold ------------------------------------------------------------------


def fold_key_by_key(
    spec: SinkSpec, results: list[Any], into: dict[Any, Any] | None = None
) -> dict[Any, Any]:
    """The general fold, row by checked row (what ``fold`` did before its fast path for
    ``sum`` counters): the fast path must give the same rows, in the same key order."""
    checked = [row for result in results for row in rows_of(spec, result)]
    table = {} if into is None else into
    for key, values in checked:
        table[key] = merge(spec, table[key], values) if key in table else values
    return table


_COUNTS = st.dictionaries(st.text(min_size=1, max_size=3), st.integers(1, 2**40), max_size=6)


@settings(max_examples=200, deadline=None)
@given(
    stored=st.lists(_COUNTS, max_size=3),
    results=st.lists(_COUNTS, max_size=6),
)
def test_the_fast_fold_of_counters_equals_the_key_by_key_fold(
    stored: list[dict[str, int]], results: list[dict[str, int]]
) -> None:
    spec = SPECS["sum"]
    fast, slow = fold(spec, stored), fold_key_by_key(spec, stored)
    assert list(fast.items()) == list(slow.items())
    fold(spec, results, into=fast)
    fold_key_by_key(spec, results, into=slow)
    assert list(fast.items()) == list(slow.items())  # same rows, same key order


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"a": 0}, r"n of k='a' is 0, not bigint >= 1"),
        ({"a": True}, r"n of k='a' is True, not bigint >= 1"),
        ({"a": 2.0}, r"n of k='a' is 2.0, not bigint >= 1"),
        ({"": 1}, r"k='' is not a non-empty string"),
        ({1: 1}, r"k=1 is not a non-empty string"),
    ],
)
def test_a_bad_counter_after_good_ones_leaves_the_table_untouched(
    bad: dict[Any, Any], message: str
) -> None:
    """The fast path refuses the batch as the key-by-key one does: same message, nothing
    of the good results merged into ``into``."""
    spec = SPECS["sum"]
    table = {("a",): {"n": 5}}
    with pytest.raises(ValueError, match=message):
        fold(spec, [{"a": 1, "b": 2}, bad], into=table)
    assert table == {("a",): {"n": 5}}


def test_counters_the_fast_path_does_not_take_fold_key_by_key() -> None:
    """A mapping that is not a dict, or a column with an upper bound, folds the same."""
    import types

    proxy = types.MappingProxyType({"a": 2})
    assert fold(SPECS["sum"], [proxy, {"a": 1}]) == {("a",): {"n": 3}}
    capped = parse_sink({**RAW["sum"], "columns": {"k": "text", "n": "bigint >= 1 <= 10"}})
    assert fold(capped, [{"a": 4}, {"a": 10}]) == {("a",): {"n": 14}}
    with pytest.raises(ValueError, match=r"n of k='a' is 11, not bigint >= 1 <= 10"):
        fold(capped, [{"a": 11}])
