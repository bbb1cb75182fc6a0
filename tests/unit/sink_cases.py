"""One declarative sink per merge rule, and hypothesis strategies of flushes that replay.

Shared by the pure tests (tests/unit/test_sink_rules.py, a model of ``applied_ranges``)
and the SQL ones (tests/adapters/test_sink_sql.py, the real flusher transaction), so
both hold the rules to the same property: any order of the tuple results, any batching,
any replays of a tuple gives the table one pass gives.

Every generated row obeys the rules' contract: ``insert`` rows are equal whenever their
keys are (keyed by source offset), ``replace`` rows are equal whenever key and event
time are (one event per key and time).
"""

from __future__ import annotations

import datetime as dt
import itertools
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from flowctl.core.sink_rules import SinkSpec, parse_sink

RAW: dict[str, dict[str, Any]] = {
    "sum": {
        "table": "t_sum",
        "key": ["k"],
        "values": ["n"],
        "merge": "sum",
        "columns": {"k": "text", "n": "bigint >= 1"},
    },
    "insert": {
        "table": "t_insert",
        "key": ["topic", "offset"],
        "values": ["v", "note"],
        "merge": "insert",
        "nullable": ["note"],
        "columns": {"topic": "text", "offset": "bigint >= 0", "v": "integer", "note": "text"},
    },
    "max": {
        "table": "t_max",
        "key": ["k"],
        "values": ["hi", "at"],
        "merge": "max",
        "columns": {"k": "text", "hi": "float", "at": "timestamp"},
    },
    "min": {
        "table": "t_min",
        "key": ["k"],
        "values": ["lo"],
        "merge": "min",
        "columns": {"k": "text", "lo": "integer"},
    },
    "replace": {
        "table": "t_replace",
        "key": ["k"],
        "values": ["ts", "state", "score"],
        "merge": "replace",
        "event_time": "ts",
        "nullable": ["score"],
        "columns": {"k": "text", "ts": "timestamp", "state": "text", "score": "float"},
    },
}
SPECS: dict[str, SinkSpec] = {rule: parse_sink(raw) for rule, raw in RAW.items()}

_BASE = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.UTC)
_ZONES = [dt.timezone(dt.timedelta(hours=h)) for h in (0, 8, -5)]
_KEYS = st.sampled_from(["a", "b", "c", "é", "d d"])


def stamp(minutes: int, zone: int = 0) -> str:
    """ISO 8601 text of ``_BASE + minutes``, written in one of three time zones."""
    return (_BASE + dt.timedelta(minutes=minutes)).astimezone(_ZONES[zone % 3]).isoformat()


@st.composite
def _sum_result(draw: st.DrawFn) -> Any:
    counts = draw(st.dictionaries(_KEYS, st.integers(1, 5), max_size=4))
    if draw(st.booleans()):  # the counter shape, as word count's results are
        return counts
    return [{"k": k, "n": n} for k, n in counts.items()]


@st.composite
def _insert_result(draw: st.DrawFn) -> Any:
    offsets = draw(st.lists(st.integers(0, 30), max_size=4))
    return [
        {"topic": "t", "offset": o, "v": o * 7 % 11, "note": None if o % 3 else f"n{o}"}
        for o in offsets
    ]


@st.composite
def _max_result(draw: st.DrawFn) -> Any:
    rows = draw(
        st.lists(st.tuples(_KEYS, st.integers(-20, 20), st.integers(0, 50), st.integers(0, 2)))
    )
    return [{"k": k, "hi": h / 4, "at": stamp(m, z)} for k, h, m, z in rows[:4]]


@st.composite
def _min_result(draw: st.DrawFn) -> Any:
    rows = draw(st.lists(st.tuples(_KEYS, st.integers(-1000, 1000)), max_size=4))
    return [{"k": k, "lo": v} for k, v in rows]


@st.composite
def _replace_result(draw: st.DrawFn) -> Any:
    rows = draw(st.lists(st.tuples(_KEYS, st.integers(0, 6), st.integers(0, 2)), max_size=4))
    return [
        {"k": k, "ts": stamp(m, z), "state": f"{k}@{m}", "score": None if m % 2 else m / 4}
        for k, m, z in rows
    ]


RESULTS = {
    "sum": _sum_result(),
    "insert": _insert_result(),
    "max": _max_result(),
    "min": _min_result(),
    "replace": _replace_result(),
}


@dataclass(frozen=True)
class Flush:
    """Tuple results, and the order the flusher met them in: ``batches`` of tuple indexes,
    each index at least once (a repeat is a replay of that tuple, same source range)."""

    results: list[Any]
    batches: list[list[int]]


@st.composite
def flushes(draw: st.DrawFn, rule: str) -> Flush:
    results = draw(st.lists(RESULTS[rule], min_size=1, max_size=8))
    n = len(results)
    replays = draw(st.lists(st.integers(0, n - 1), max_size=n))
    order = draw(st.permutations([*range(n), *replays]))
    cuts = sorted(draw(st.sets(st.integers(1, len(order) - 1), max_size=4))) if n > 1 else []
    bounds = [0, *cuts, len(order)]
    return Flush(results, [order[a:b] for a, b in itertools.pairwise(bounds)])
