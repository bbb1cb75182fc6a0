"""Declarative sinks on SQLite and PostgreSQL, through the flusher's own transaction.

Each rule's config goes the way a pipeline's does: a TOML file with a ``[sink]``, loaded,
routed by :func:`~flowctl.pipelines.sinks.result_store` (the definition, word count's,
brings no ``apply``), and applied by :class:`~flowctl.adapters.mrwq_sink.SqlSink`, which
claims each tuple's range in ``applied_ranges``. The property: tuples flushed in any
order, in any batches, with replays, leave the table one pass leaves, and the table the
pure rules (:mod:`flowctl.core.sink_rules`) compute.
"""

from __future__ import annotations

import datetime as dt
import json
import secrets
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowctl.adapters import schema_setup, sink_sql
from flowctl.adapters.db import engine_for
from flowctl.adapters.mrwq_sink import SqlSink
from flowctl.core.persistence import QueueItem
from flowctl.core.sink_rules import fold, parse_sink, view
from flowctl.core.tuples import TupleRange
from flowctl.pipelines.config import load_pipeline_config
from flowctl.pipelines.sinks import ResultStore, result_store
from tests.unit.sink_cases import RAW, SPECS, Flush, flushes, stamp
from tests.unit.test_sink_rules import flush_in_model

pytestmark = pytest.mark.integration

UTC = dt.UTC


@pytest.fixture
def engine(database_url: str) -> sa.Engine:
    engine = engine_for(database_url)
    schema_setup.ensure_schema(engine)
    return engine


def _toml(name: str, sink: dict[str, Any]) -> str:
    """A pipeline config running word count's definition into ``sink``."""
    lines = [f'name = "{name}"', 'definition = "flowctl.pipelines.wordcount"', "[sink]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in sink.items() if k != "columns"]
    lines += ["[sink.columns]", *(f"{k} = {json.dumps(v)}" for k, v in sink["columns"].items())]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ResultStore]:
    """Each rule's ``apply``/``stored`` as the flusher and reconcile get them."""
    directory = tmp_path_factory.mktemp("sinks")
    out = {}
    for rule, raw in RAW.items():
        path = directory / f"sink{rule}.toml"
        path.write_text(_toml(f"sink{rule}", raw))
        out[rule] = result_store(load_pipeline_config(path))
    return out


def _flush(engine: sa.Engine, store: ResultStore, pipeline: str, flush: Flush) -> None:
    """``flush``'s batches through the flusher's transaction; tuple ``i`` is range ``i``."""
    sink = SqlSink(engine, pipeline, f"ns-{pipeline}", store.apply, lambda: None)
    seq = 0
    for batch in flush.batches:
        items = []
        for i in batch:
            seq += 1
            tuple_id = TupleRange(f"{pipeline}.eden", 0, 10 * i, 10 * i + 10).id
            items.append(QueueItem(seq, tuple_id, "applied", flush.results[i], True))
        sink.write_batch(items)


def _stored(engine: sa.Engine, store: ResultStore, pipeline: str) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(store.stored(conn, pipeline))


# -- the table --------------------------------------------------------------------------------


def test_a_declared_table_is_created_with_its_columns_and_key_on_first_use(
    engine: sa.Engine, stores: dict[str, ResultStore]
) -> None:
    assert not sa.inspect(engine).has_table("t_replace")
    with engine.begin() as conn:
        row = {"k": "a", "ts": stamp(0), "state": "s", "score": None}
        assert stores["replace"].apply(conn, "p", [[row]]) == 1
    inspector = sa.inspect(engine)
    columns = {c["name"]: c for c in inspector.get_columns("t_replace")}
    assert list(columns) == ["pipeline", "k", "ts", "state", "score"]
    assert [columns[c]["nullable"] for c in ("ts", "state", "score")] == [False, False, True]
    assert inspector.get_pk_constraint("t_replace")["constrained_columns"] == ["pipeline", "k"]
    assert _stored(engine, stores["replace"], "p") == {
        "a": {"ts": "2026-03-01T12:00:00+00:00", "state": "s", "score": None}
    }


def test_stored_of_a_table_never_written_is_empty(
    engine: sa.Engine, stores: dict[str, ResultStore]
) -> None:
    assert _stored(engine, stores["min"], "nobody") == {}


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({**RAW["sum"], "table": "offsets"}, r"'offsets' is a flowctl control table"),
        ({**RAW["sum"], "table": "word_counts"}, r"word_counts'.*has columns .*'count'.*'n'"),
        (
            {**RAW["sum"], "table": "word_counts", "key": ["word"], "values": ["count"],
             "columns": {"word": "text", "count": "float"}},
            r"has count BIGINT \(not null\), the sink declares float",
        ),
        ({**RAW["min"], "columns": {"k": "text", "lo": "bigint"}}, r"t_min'.*has lo INTEGER"),
    ],
)  # fmt: skip
def test_a_sink_that_disagrees_with_its_table_is_refused(raw: dict, message: str) -> None:
    sink_sql.table_for(SPECS["min"])  # declared first, as another pipeline would
    with pytest.raises(sink_sql.SinkTableError, match=message):
        sink_sql.table_for(parse_sink(raw))


# -- each rule in SQL -------------------------------------------------------------------------


def test_sum_adds_to_stored_counts_in_one_statement(
    engine: sa.Engine, stores: dict[str, ResultStore]
) -> None:
    apply = stores["sum"].apply
    with engine.begin() as conn:
        assert apply(conn, "p", [{"a": 1, "b": 2}, [{"k": "a", "n": 3}]]) == 2
    with engine.begin() as conn:
        assert apply(conn, "p", [{"a": 5}]) == 1
        assert apply(conn, "q", [{"a": 1}]) == 1
    assert _stored(engine, stores["sum"], "p") == {"a": 9, "b": 2}


def test_insert_ignores_a_key_already_stored(
    engine: sa.Engine, stores: dict[str, ResultStore]
) -> None:
    apply = stores["insert"].apply
    row = {"topic": "t", "offset": 3, "v": 1, "note": None}
    with engine.begin() as conn:
        assert apply(conn, "p", [[row]]) == 1
    with engine.begin() as conn:
        assert apply(conn, "p", [[{**row, "v": 2}, {**row, "offset": 4}]]) == 1
    assert _stored(engine, stores["insert"], "p") == {
        "t/3": {"v": 1, "note": None},
        "t/4": {"v": 1, "note": None},
    }


def test_max_and_min_keep_the_extremes_of_what_is_stored(
    engine: sa.Engine, stores: dict[str, ResultStore]
) -> None:
    with engine.begin() as conn:
        stores["max"].apply(conn, "p", [[{"k": "a", "hi": 2.5, "at": stamp(5)}]])
        stores["min"].apply(conn, "p", [[{"k": "a", "lo": 3}]])
    with engine.begin() as conn:
        stores["max"].apply(conn, "p", [[{"k": "a", "hi": 1.0, "at": stamp(9, 1)}]])
        stores["min"].apply(conn, "p", [[{"k": "a", "lo": 7}], [{"k": "a", "lo": -1}]])
    assert _stored(engine, stores["max"], "p") == {
        "a": {"hi": 2.5, "at": "2026-03-01T12:09:00+00:00"}
    }
    assert _stored(engine, stores["min"], "p") == {"a": -1}


def test_replace_takes_a_later_event_only(
    engine: sa.Engine, stores: dict[str, ResultStore]
) -> None:
    apply = stores["replace"].apply
    with engine.begin() as conn:
        assert apply(conn, "p", [[{"k": "a", "ts": stamp(5), "state": "five", "score": 1}]]) == 1
    with engine.begin() as conn:  # earlier, and a tie: the stored row stays, no row changes
        older = {"k": "a", "ts": stamp(4, 2), "state": "four", "score": None}
        assert apply(conn, "p", [[older]]) == 0
        assert apply(conn, "p", [[{**older, "ts": stamp(5, 1), "state": "tie"}]]) == 0
    assert _stored(engine, stores["replace"], "p")["a"]["state"] == "five"
    with engine.begin() as conn:
        assert apply(conn, "p", [[{**older, "ts": stamp(6), "state": "six"}]]) == 1
    assert _stored(engine, stores["replace"], "p") == {
        "a": {"ts": "2026-03-01T12:06:00+00:00", "state": "six", "score": None}
    }


def test_a_bad_result_writes_nothing_of_its_batch(
    engine: sa.Engine, stores: dict[str, ResultStore]
) -> None:
    with pytest.raises(ValueError, match=r"n of k='b' is -1"), engine.begin() as conn:
        stores["sum"].apply(conn, "p", [{"a": 1}, {"b": -1}])
    assert _stored(engine, stores["sum"], "p") == {}


def test_count_by_groups_rows_in_the_database(
    engine: sa.Engine, stores: dict[str, ResultStore]
) -> None:
    rows = [{"topic": "t", "offset": o, "v": o % 2, "note": None} for o in range(5)]
    with engine.begin() as conn:
        stores["insert"].apply(conn, "p", [rows])
        assert sink_sql.count_by(conn, "t_insert", "p", "v") == {0: 3, 1: 2}
        with pytest.raises(sink_sql.SinkTableError, match="t_nowhere"):
            sink_sql.count_by(conn, "t_nowhere", "p", "v")


# -- the property, through applied_ranges -----------------------------------------------------


@pytest.mark.parametrize("rule", sorted(SPECS))
@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_flushes_in_any_order_with_replays_store_the_table_of_one_pass(
    engine: sa.Engine, stores: dict[str, ResultStore], rule: str, data: st.DataObject
) -> None:
    flush = data.draw(flushes(rule))
    store, run = stores[rule], secrets.token_hex(4)
    _flush(engine, store, f"shuffled{run}", flush)
    _flush(engine, store, f"once{run}", Flush(flush.results, [list(range(len(flush.results)))]))
    shuffled = _stored(engine, store, f"shuffled{run}")
    assert shuffled == _stored(engine, store, f"once{run}")
    assert shuffled == view(SPECS[rule], flush_in_model(SPECS[rule], flush))
    assert shuffled == view(SPECS[rule], fold(SPECS[rule], flush.results))


def test_the_flusher_route_suppresses_a_replayed_tuple(
    engine: sa.Engine, stores: dict[str, ResultStore]
) -> None:
    """A replay of the same range changes nothing; without the claim it would add again."""
    flush = Flush([{"a": 1}, {"a": 2}], [[0, 1], [0], [1, 0]])
    _flush(engine, stores["sum"], "replayed", flush)
    assert _stored(engine, stores["sum"], "replayed") == {"a": 3}
    with engine.begin() as conn:  # the same results applied without claims: counted again
        stores["sum"].apply(conn, "replayed", flush.results)
    assert _stored(engine, stores["sum"], "replayed") == {"a": 6}
