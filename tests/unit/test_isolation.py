"""Poison isolation inside a lane (flowctl.core.isolation): good records still count."""

from __future__ import annotations

import math
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl import loggen
from flowctl.core.isolation import isolate, locate_by_offset
from flowctl.pipelines import logetl, wordcount
from flowctl.pipelines.base import PoisonRecord, Record, combine_results, combiner_of

GOOD_LINES = [line.text for line in loggen.labelled_lines(64, seed=3, malformed_fraction=0.0)]
BAD_LINE = "this is not an access log line"


def _records(values: list[str | bytes]) -> list[Record]:
    return [
        Record("eden", 0, 100 + i, None, v.encode() if isinstance(v, str) else v)
        for i, v in enumerate(values)
    ]


def _is_poison(exc: BaseException) -> bool:
    return isinstance(exc, PoisonRecord)


class Counting:
    """A definition's process with a call counter (and, optionally, transient errors)."""

    def __init__(self, process, fail_when=None) -> None:
        self._process = process
        self._fail_when = fail_when
        self.calls: list[list[int]] = []

    def __call__(self, records: list[Record]):
        self.calls.append([r.offset for r in records])
        if self._fail_when is not None and self._fail_when(records):
            raise TimeoutError("process exceeded its deadline")
        return self._process(records)


def _logetl(values: list[str | bytes], *, locate=locate_by_offset, fail_when=None):
    records = _records(values)
    process = Counting(logetl.DEFINITION.process, fail_when)
    out = isolate(
        records,
        process,
        combine=combiner_of(logetl.DEFINITION),
        is_poison=_is_poison,
        locate=locate,
    )
    return records, process, out


def _lines(bad_at: set[int], n: int) -> list[str | bytes]:
    return [BAD_LINE if i in bad_at else GOOD_LINES[i % len(GOOD_LINES)] for i in range(n)]


def test_a_tuple_without_poison_costs_one_call_and_keeps_its_result() -> None:
    records, process, out = _logetl(_lines(set(), 8))
    assert out.result == logetl.DEFINITION.process(records)
    assert out.good == tuple(range(8))
    assert (out.poison, out.transient, out.calls, len(process.calls)) == ((), (), 1, 1)
    assert out.clean


def test_the_named_poison_record_is_proven_alone_and_the_rest_is_processed() -> None:
    records, process, out = _logetl(_lines({3}, 8))
    assert [p.index for p in out.poison] == [3]
    with pytest.raises(PoisonRecord) as raised:
        logetl.parse_line(BAD_LINE)
    assert out.poison[0].reason == raised.value.reason  # the definition's own words
    assert [103] in process.calls  # proven by processing it alone
    assert out.good == (0, 1, 2, 4, 5, 6, 7)
    assert out.result == logetl.DEFINITION.process([r for r in records if r.offset != 103])
    assert out.calls == 4  # the tuple, the part before, the record alone, the rest


def test_without_a_named_record_bisection_finds_it() -> None:
    records, _, out = _logetl(_lines({5}, 8), locate=None)
    assert [p.index for p in out.poison] == [5]
    assert out.result == logetl.DEFINITION.process([r for r in records if r.offset != 105])
    # [0,8) [0,4) [4,8) [4,6) [6,8) [4,5) [5,6)
    assert out.calls == 7


def test_a_name_that_is_wrong_only_costs_calls() -> None:
    def wrong(exc: BaseException, part) -> int:
        return 0  # always the first record of the part, poison or not

    _, _, out = _logetl(_lines({6}, 8), locate=wrong)
    assert [p.index for p in out.poison] == [6]
    assert out.good == (0, 1, 2, 3, 4, 5, 7)


def test_a_tuple_that_fails_transiently_is_not_bisected() -> None:
    _, process, out = _logetl(_lines({2}, 8), fail_when=lambda rs: len(rs) == 8)
    assert out.calls == 1 and len(process.calls) == 1
    assert [(f.start, f.stop) for f in out.transient] == [(0, 8)]
    assert isinstance(out.transient[0].error, TimeoutError)
    assert (out.result, out.good, out.poison) == (None, (), ())
    assert not out.clean


def test_a_part_that_fails_transiently_keeps_its_records_for_replay() -> None:
    # The part after the poison record times out: its records are neither good nor poison.
    _, _, out = _logetl(_lines({2}, 8), fail_when=lambda rs: rs[0].offset == 103)
    assert [p.index for p in out.poison] == [2]
    assert out.good == (0, 1)
    assert out.transient_indices == (3, 4, 5, 6, 7)


def test_every_record_poison_leaves_no_result() -> None:
    _, _, out = _logetl(_lines(set(range(4)), 4))
    assert out.result is None and out.good == ()
    assert [p.index for p in out.poison] == [0, 1, 2, 3]
    assert out.clean


def test_an_interrupt_is_not_caught() -> None:
    def interrupted(records):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        isolate(_records(["x"]), interrupted, combine=combine_results, is_poison=_is_poison)


def test_locate_by_offset_ignores_unnamed_and_foreign_offsets() -> None:
    part = _records(["a", "b"])
    assert locate_by_offset(PoisonRecord("bad", offset=101), part) == 1
    assert locate_by_offset(PoisonRecord("bad", offset=7), part) is None
    assert locate_by_offset(PoisonRecord("bad"), part) is None


# -- combine ----------------------------------------------------------------------------------


def test_default_combine_concatenates_rows_and_adds_counts() -> None:
    assert combine_results([[1, 2], [3]]) == [1, 2, 3]
    assert combine_results([{"a": 1}, {"a": 2, "b": 1}]) == {"a": 3, "b": 1}


@pytest.mark.parametrize("results", [[{"a": "x"}], [[1], {"a": 1}], [3, 4]])
def test_default_combine_refuses_what_it_cannot_merge(results) -> None:
    with pytest.raises(TypeError, match="combine"):
        combine_results(results)


def test_combiner_of_prefers_the_definitions_own() -> None:
    assert combiner_of(logetl.DEFINITION) == logetl.DEFINITION.combine
    assert combiner_of(object()) is combine_results


def test_wordcount_combine_equals_processing_the_whole() -> None:
    records = _records(["the cat", "The dog", "a cat"])
    d = wordcount.DEFINITION
    assert d.combine([d.process(records[:1]), d.process(records[1:])]) == d.process(records)


def test_logetl_combine_refuses_a_foreign_result() -> None:
    with pytest.raises(ValueError, match="not a list of rows"):
        logetl.DEFINITION.combine([{"rows": 1}])


# -- properties -------------------------------------------------------------------------------


@st.composite
def tuples_with_poison(draw):
    n = draw(st.integers(min_value=1, max_value=40))
    bad = draw(st.sets(st.integers(min_value=0, max_value=n - 1)))
    return n, bad


@settings(max_examples=200, deadline=None)
@given(tuples_with_poison(), st.booleans())
def test_good_results_equal_the_good_records_alone_and_the_dlq_holds_the_poison(
    case, named: bool
) -> None:
    n, bad = case
    records, _, out = _logetl(_lines(bad, n), locate=locate_by_offset if named else None)
    good_records = [r for i, r in enumerate(records) if i not in bad]
    expected = logetl.DEFINITION.process(good_records) if good_records else None
    assert out.result == expected
    assert {p.index for p in out.poison} == bad
    assert set(out.good) == set(range(n)) - bad
    assert out.clean
    p = len(bad)
    bound = 1 + (3 * p if named else 2 * p * math.ceil(math.log2(n)) if n > 1 else 0)
    assert out.calls <= bound


def _counting_words(records: list[Record]) -> dict[str, int]:
    """Word counts, but a record holding ``POISON`` poisons its tuple (offset unnamed)."""
    if any(r.value and b"POISON" in r.value for r in records):
        raise PoisonRecord("contains POISON")
    return dict(Counter(w for r in records for w in (r.value or b"").decode().split()))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["a b", "b c", "c", "", "POISON a"]), min_size=1, max_size=30))
def test_counts_of_the_good_records_survive_any_poison_positions(values: list[str]) -> None:
    records = _records(values)
    out = isolate(records, _counting_words, combine=combine_results, is_poison=_is_poison)
    bad = {i for i, v in enumerate(values) if "POISON" in v}
    good = [r for i, r in enumerate(records) if i not in bad]
    assert {p.index for p in out.poison} == bad
    assert (out.result or {}) == (_counting_words(good) if good else {})
