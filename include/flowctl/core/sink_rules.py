"""Declarative sinks: how tuple results become rows of a result table, and how rows merge.

A pipeline's ``[sink]`` section (see ``include/pipelines/wordcount.toml``) names a table,
its key and value columns, their types and a merge rule; :func:`parse_sink` validates it
into a :class:`SinkSpec`. This module is the pure half: it checks a batch of tuple
results, folds it into one row per key (:func:`fold`) and says how a row merges with the
stored one (:func:`merge`); :mod:`flowctl.adapters.sink_sql` runs the same rule as one
SQL upsert per batch. Every table also has a ``pipeline`` column, first in its key, so
derived pipelines (tests, benchmarks) share a table without sharing rows.

The rules, each commutative and associative over the results a flush can see, so the
table does not depend on how tuples were batched or in which order they were flushed
(``applied_ranges`` already guarantees each tuple is applied once):

- ``sum``: value columns are counters, added;
- ``insert``: the first row of a key stays, later ones are ignored (rows keyed by their
  source, e.g. topic/partition/offset, are equal whenever their keys are);
- ``max`` / ``min``: each value column keeps its largest / smallest value;
- ``replace``: the row with the latest ``event_time`` wins; on a tie the stored row stays,
  so one key must not carry two different rows at the same event time.

A tuple result is a list of row mappings (every column, by name), or, when the sink has
one text key column and one value column, a mapping ``{key: value}`` (a counter).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowctl.core.validation import InvalidValue, choice

RULES = ("sum", "insert", "max", "min", "replace")
TYPES = ("text", "integer", "bigint", "float", "boolean", "timestamp")
NUMERIC = ("integer", "bigint", "float")
#: Types an ordering rule (max, min, replace's event_time) can compare.
ORDERED = (*NUMERIC, "timestamp")
#: Every result table has this column first in its key; no sink may declare it.
PIPELINE_COLUMN = "pipeline"
KEYS = ("table", "key", "values", "merge", "columns", "nullable", "event_time")

_IDENT = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")
_NUM = r"-?\d+(?:\.\d+)?"
_TYPE = re.compile(rf"^({'|'.join(TYPES)})(?:\s*>=\s*({_NUM}))?(?:\s*<=\s*({_NUM}))?$")

#: A row's key: the key columns' values, in the spec's order.
Key = tuple[Any, ...]
#: A row's value columns by name.
Values = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """A declared column: its type, whether it may be NULL, and bounds for numbers."""

    name: str
    type: str
    nullable: bool = False
    lo: float | None = None
    hi: float | None = None

    def describe(self) -> str:
        """``"bigint >= 1"``: the type as declared, for errors."""
        lo = f" >= {self.lo:g}" if self.lo is not None else ""
        hi = f" <= {self.hi:g}" if self.hi is not None else ""
        return f"{self.type}{lo}{hi}"


@dataclass(frozen=True)
class SinkSpec:
    """A validated ``[sink]`` section."""

    table: str
    key: tuple[str, ...]
    values: tuple[str, ...]
    merge: str
    columns: tuple[Column, ...]
    event_time: str | None = None

    def column(self, name: str) -> Column:
        """The declared column ``name`` (a key or value column)."""
        return next(c for c in self.columns if c.name == name)

    @property
    def counter_shape(self) -> bool:
        """Whether results may be ``{key: value}`` mappings (one text key, one value)."""
        return (
            len(self.key) == 1 and len(self.values) == 1 and self.column(self.key[0]).type == "text"
        )


def parse_sink(raw: Any) -> SinkSpec:
    """Validate a ``[sink]`` table; errors name ``sink.<key>`` and the value."""
    if not isinstance(raw, dict):
        raise InvalidValue("sink", raw, "must be a table")
    for name in raw:
        if name not in KEYS:
            raise InvalidValue(
                f"sink.{name}", raw[name], f"is not a known field (known: {list(KEYS)})"
            )
    table = raw.get("table")
    if not isinstance(table, str) or not _IDENT.match(table):
        raise InvalidValue(
            "sink.table", table, "must be a table name: lower-case letters, digits, '_'"
        )
    merge = choice("sink.merge", raw.get("merge"), RULES)
    key = _names(raw, "key", required=True)
    values = _names(raw, "values", required=merge != "insert")
    both = set(key) & set(values)
    if both:
        raise InvalidValue("sink.values", list(values), f"repeats key columns {sorted(both)}")
    nullable = set(_names(raw, "nullable", required=False))
    if not nullable <= set(values):
        raise InvalidValue(
            "sink.nullable", sorted(nullable), f"must name value columns of {list(values)}"
        )
    declared = raw.get("columns", {})
    if not isinstance(declared, dict) or set(declared) != {*key, *values}:
        shown = sorted(declared) if isinstance(declared, dict) else declared
        raise InvalidValue(
            "sink.columns", shown, f"must give the type of exactly {sorted({*key, *values})}"
        )
    columns = tuple(_column(n, declared[n], n in nullable) for n in (*key, *values))
    spec = SinkSpec(table, key, values, merge, columns, raw.get("event_time"))
    _check_rule(spec)
    return spec


def _names(raw: dict[str, Any], field: str, *, required: bool) -> tuple[str, ...]:
    names = raw.get(field, [])
    bad = not isinstance(names, list) or not all(
        isinstance(n, str) and _IDENT.match(n) for n in names
    )
    if bad or len(set(names)) != len(names) or (required and not names):
        need = "a non-empty list" if required else "a list"
        raise InvalidValue(f"sink.{field}", names, f"must be {need} of distinct column names")
    if PIPELINE_COLUMN in names:
        raise InvalidValue(
            f"sink.{field}", names, f"must not name {PIPELINE_COLUMN!r} (every table has it)"
        )
    return tuple(names)


def _column(name: str, text: Any, nullable: bool) -> Column:
    match = _TYPE.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise InvalidValue(
            f"sink.columns.{name}",
            text,
            f"must be one of {', '.join(TYPES)}, numbers optionally with '>= N' / '<= N'",
        )
    kind, lo, hi = match.group(1), match.group(2), match.group(3)
    if (lo or hi) and kind not in NUMERIC:
        raise InvalidValue(
            f"sink.columns.{name}", text, f"bounds apply to {', '.join(NUMERIC)} only"
        )
    return Column(name, kind, nullable, float(lo) if lo else None, float(hi) if hi else None)


def _check_rule(spec: SinkSpec) -> None:
    """The rule's demands on the value columns (what its SQL can add or compare)."""
    if spec.merge != "replace" and spec.event_time is not None:
        raise InvalidValue(
            "sink.event_time",
            spec.event_time,
            f"applies to merge = 'replace' only, not {spec.merge!r}",
        )
    if spec.merge == "replace":
        et = spec.event_time
        if et not in spec.values or spec.column(et).type not in ORDERED or spec.column(et).nullable:
            raise InvalidValue(
                "sink.event_time",
                et,
                f"must name a non-nullable value column of type {', '.join(ORDERED)}",
            )
    allowed = {"sum": NUMERIC, "max": ORDERED, "min": ORDERED}.get(spec.merge)
    if allowed is None:
        return
    for name in spec.values:
        col = spec.column(name)
        if col.type not in allowed or col.nullable:
            raise InvalidValue(
                f"sink.columns.{name}",
                col.describe(),
                f"merge = {spec.merge!r} needs a non-nullable {', '.join(allowed)}",
            )


# -- checking results ------------------------------------------------------------------------


def _timestamp(text: Any, field: str) -> dt.datetime:
    if isinstance(text, dt.datetime):
        stamp = text
    else:
        try:
            stamp = dt.datetime.fromisoformat(text)
        except (TypeError, ValueError):
            raise InvalidValue(field, text, "is not ISO 8601") from None
    if stamp.tzinfo is None:
        raise InvalidValue(field, text, "has no time zone")
    return stamp.astimezone(dt.UTC)


def coerce(column: Column, value: Any, *, key: bool = False) -> Any:
    """``value`` as the column stores it; :class:`InvalidValue` (field = column) if it cannot be.

    Results come back from memcached as JSON, so a timestamp is ISO 8601 text with a zone.
    """
    name, kind = column.name, column.type
    if value is None:
        if column.nullable:
            return None
        raise InvalidValue(name, value, "must not be null")
    if kind == "timestamp":
        return _timestamp(value, name)
    if kind == "text":
        if not isinstance(value, str) or (key and not value):
            raise InvalidValue(
                name,
                value,
                "is not a non-empty string" if key else "has the wrong type (expected text)",
            )
        return value
    if kind == "boolean" and isinstance(value, bool):
        return value
    wanted = int if kind in ("integer", "bigint") else (int, float)
    if kind == "boolean" or isinstance(value, bool) or not isinstance(value, wanted):
        raise InvalidValue(name, value, f"has the wrong type (expected {column.describe()})")
    outside = (column.lo is not None and value < column.lo) or (
        column.hi is not None and value > column.hi
    )
    if outside or (isinstance(value, float) and not math.isfinite(value)):
        raise InvalidValue(name, value, f"is out of range (expected {column.describe()})")
    return value


def _row(spec: SinkSpec, row: Any) -> tuple[Key, Values]:
    """One result row, checked, as ``(key, values)``; the error names the row by its key."""
    if not isinstance(row, Mapping):
        raise ValueError(f"sink {spec.table}: row={row!r} is not a mapping of column -> value")
    where = ", ".join(f"{k}={row.get(k)!r}" for k in spec.key)
    names = [c.name for c in spec.columns]
    if set(row) != set(names):
        raise ValueError(
            f"sink {spec.table}: row ({where}): fields {sorted(row)} are not {sorted(names)}"
        )
    try:
        key = tuple(coerce(spec.column(k), row[k], key=True) for k in spec.key)
        return key, {v: coerce(spec.column(v), row[v]) for v in spec.values}
    except InvalidValue as exc:
        raise ValueError(f"sink {spec.table}: row ({where}): {exc}") from None


def _counter(spec: SinkSpec, result: Mapping[Any, Any]) -> Iterable[tuple[Key, Values]]:
    """A ``{key: value}`` result's rows; errors read ``count of word='a' is 0, ...``."""
    key_col, value_col = spec.column(spec.key[0]), spec.column(spec.values[0])
    for k, v in result.items():
        try:
            key = coerce(key_col, k, key=True)
        except InvalidValue as exc:
            raise ValueError(f"sink {spec.table}: {exc}") from None
        try:
            value = coerce(value_col, v)
        except InvalidValue:
            raise ValueError(
                f"sink {spec.table}: {value_col.name} of {key_col.name}={k!r} is {v!r}, "
                f"not {value_col.describe()}"
            ) from None
        yield (key,), {value_col.name: value}


def rows_of(spec: SinkSpec, result: Any) -> Iterable[tuple[Key, Values]]:
    """The checked rows of one tuple result (see the module docstring for its shapes)."""
    if spec.counter_shape and isinstance(result, Mapping):
        return _counter(spec, result)
    if isinstance(result, list) and all(isinstance(r, Mapping) for r in result):
        return (_row(spec, r) for r in result)
    shape = f"a mapping of {spec.key[0]} -> {spec.values[0]} or " if spec.counter_shape else ""
    raise ValueError(f"sink {spec.table}: result={result!r} is not {shape}a list of row mappings")


# -- merging ---------------------------------------------------------------------------------


def merge(spec: SinkSpec, stored: Values, new: Values) -> Values:
    """The row a key holds after ``new`` meets ``stored`` (what the SQL upsert does)."""
    rule = spec.merge
    if rule == "sum":
        return {c: stored[c] + new[c] for c in spec.values}
    if rule == "max":
        return {c: max(stored[c], new[c]) for c in spec.values}
    if rule == "min":
        return {c: min(stored[c], new[c]) for c in spec.values}
    if rule == "replace":
        assert spec.event_time is not None
        return new if new[spec.event_time] > stored[spec.event_time] else stored
    return stored  # insert: the first row of a key stays


def _plain_counts(spec: SinkSpec, result: Any) -> bool:
    """Whether ``result`` is a ``{key: count}`` dict that :func:`_counter` would accept
    unchanged: ``str`` keys, none empty, exact ``int`` counts within the value column's
    bounds. Checked with C-level passes over the keys and values (``map``, ``min``,
    ``max``), not one :func:`coerce` call per key. ``False`` is no verdict: the caller
    checks the result key by key, which names what is wrong."""
    if type(result) is not dict:
        return False
    if not result:
        return True
    column = spec.column(spec.values[0])
    if set(map(type, result)) != {str} or "" in result:
        return False
    if set(map(type, result.values())) != {int}:
        return False
    if column.lo is not None and min(result.values()) < column.lo:
        return False
    return column.hi is None or max(result.values()) <= column.hi


def _fold_sums(spec: SinkSpec, results: Sequence[Any], into: dict[Key, Values] | None) -> bool:
    """:func:`fold` of a ``sum`` counter sink whose results are all plain counts
    (:func:`_plain_counts`), added per key in one dict instead of a checked row and a
    merged values dict per key and result (the flusher's largest cost at high rates: a
    word-count flush folds about 2.5 keys per record). Returns ``False``, with ``into``
    untouched, when a result is not plain: the general path then checks every result."""
    if not all(_plain_counts(spec, r) for r in results):
        return False
    column = spec.values[0]
    totals: dict[str, int] = {}
    if into:
        totals = {key[0]: values[column] for key, values in into.items()}
    get = totals.get
    for result in results:
        for word, n in result.items():
            totals[word] = get(word, 0) + n
    if into is not None:
        into.update({(word,): {column: n} for word, n in totals.items()})
    return True


def _summable(spec: SinkSpec) -> bool:
    """A sink whose batches :func:`_fold_sums` can fold: one text key, one integer
    counter, merged by ``sum``."""
    return (
        spec.merge == "sum"
        and spec.counter_shape
        and spec.column(spec.values[0]).type in ("integer", "bigint")
    )


def fold(
    spec: SinkSpec, results: Sequence[Any], into: dict[Key, Values] | None = None
) -> dict[Key, Values]:
    """One row per key from a batch of tuple results (``into``: rows to merge them with).

    Every result is checked before any row is merged, so a bad result fails the whole
    batch with nothing half-applied. One row per key is also what PostgreSQL needs: it
    refuses to update a row twice in one statement.
    """
    if _summable(spec):
        table = {} if into is None else into
        if _fold_sums(spec, results, table):
            return table
    checked = [row for result in results for row in rows_of(spec, result)]
    table = {} if into is None else into
    for key, values in checked:
        table[key] = merge(spec, table[key], values) if key in table else values
    return table


def _text(value: Any) -> str:
    return value.isoformat() if isinstance(value, dt.datetime) else str(value)


def view(spec: SinkSpec, rows: Mapping[Key, Values]) -> dict[str, Any]:
    """Rows shaped for reconcile (what ``stored`` returns and ``reference`` must match).

    The key is its column's value as text (several key columns: joined by ``/``); the
    value is the one value column's, or a mapping of the value columns (empty for an
    ``insert`` sink without values). Timestamps read as ISO 8601 text in UTC.
    """

    def shaped(values: Values) -> Any:
        out = {c: _text(v) if isinstance(v, dt.datetime) else v for c, v in values.items()}
        return out[spec.values[0]] if len(spec.values) == 1 else out

    return {"/".join(_text(p) for p in key): shaped(values) for key, values in rows.items()}
