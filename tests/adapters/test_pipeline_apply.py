"""Pipeline definitions on real services: ``apply``/``stored`` (SQLite, PostgreSQL), ingest (Tansu).

``apply`` runs in the caller's transaction (the flusher's); ``stored`` must
read back exactly what ``reference`` computes over the same input. Both come
from :func:`~flowctl.pipelines.sinks.result_store`, as the flusher and reconcile
get them: the shipped configs' ``[sink]`` sections, or the definition's own.
"""

from __future__ import annotations

import datetime as dt
import secrets
from pathlib import Path
from types import SimpleNamespace

import pytest
import sqlalchemy as sa

from flowctl import loggen
from flowctl.adapters import kafka_ends, kafka_log, results, schema, schema_setup
from flowctl.adapters.db import engine_for
from flowctl.ingest import IngestRequest, ingest
from flowctl.pipelines import logetl
from flowctl.pipelines.base import PoisonRecord, Record
from flowctl.pipelines.config import load_pipeline_config, resolve_path
from flowctl.pipelines.sinks import result_store
from flowctl.textgen import zipf_lines

pytestmark = pytest.mark.integration


def _routed(name: str) -> SimpleNamespace:
    """The shipped pipeline's process/reference with apply/stored as the flusher gets them."""
    config = load_pipeline_config(name)
    definition, store = config.load_definition().DEFINITION, result_store(config)
    return SimpleNamespace(
        process=definition.process,
        reference=definition.reference,
        apply=store.apply,
        stored=store.stored,
    )


WORDCOUNT = _routed("wordcount")
LOGETL = _routed("logetl")


@pytest.fixture
def engine(database_url: str) -> sa.Engine:
    engine = engine_for(database_url)
    schema_setup.ensure_schema(engine)
    return engine


def _tuples(topic: str, values: list[bytes], size: int) -> list[list[Record]]:
    """``values`` as consecutive tuples of one partition, the way the source cuts them."""
    return [
        [Record(topic, 0, i + j, None, v) for j, v in enumerate(values[i : i + size])]
        for i in range(0, len(values), size)
    ]


# -- wordcount ----------------------------------------------------------------------------------


def test_wordcount_apply_adds_tuple_results_and_stored_equals_reference(
    engine: sa.Engine,
) -> None:
    definition = WORDCOUNT
    values = [line.encode() for line in zipf_lines(1500, seed=4)]
    tuple_results = [definition.process(t) for t in _tuples("wc.eden", values, 100)]
    with engine.begin() as conn:
        touched = definition.apply(conn, "wc", tuple_results[:7])
        assert touched == len({w for r in tuple_results[:7] for w in r})
    with engine.begin() as conn:
        definition.apply(conn, "wc", tuple_results[7:])
    with engine.connect() as conn:
        stored = definition.stored(conn, "wc")
        assert stored == definition.reference(values)
        assert definition.stored(conn, "other") == {}
    # The same table and numbers the direct sink reads.
    assert results.word_counts(engine, "wc") == stored


def test_wordcount_apply_is_additive_and_merges_a_word_seen_in_several_results(
    engine: sa.Engine,
) -> None:
    definition = WORDCOUNT
    with engine.begin() as conn:
        assert definition.apply(conn, "wc", [{"a": 1, "b": 2}, {"a": 3}]) == 2
    with engine.begin() as conn:
        assert definition.apply(conn, "wc", [{"a": 1}]) == 1
        assert definition.apply(conn, "wc", []) == 0
    with engine.connect() as conn:
        assert definition.stored(conn, "wc") == {"a": 5, "b": 2}


def test_wordcount_apply_rolls_back_with_the_callers_transaction(engine: sa.Engine) -> None:
    with pytest.raises(RuntimeError, match="flush failed later"), engine.begin() as conn:
        WORDCOUNT.apply(conn, "wc", [{"a": 1}])
        raise RuntimeError("flush failed later")
    with engine.connect() as conn:
        assert WORDCOUNT.stored(conn, "wc") == {}


# -- logetl -------------------------------------------------------------------------------------


def _logetl_results(values: list[bytes], size: int) -> list[list[dict]]:
    """Tuple results as the topology gets them: a poisoned tuple is retried without its poison."""
    out = []
    for records in _tuples("logs.eden", values, size):
        while records:
            try:
                out.append(logetl.DEFINITION.process(records))
                break
            except PoisonRecord as exc:  # the offending line goes to the DLQ, the rest is retried
                records = [r for r in records if r.offset != exc.offset]
    return out


def test_logetl_stored_equals_reference_and_reapplying_creates_no_duplicates(
    engine: sa.Engine,
) -> None:
    definition = LOGETL
    values = [
        line.encode() for line in loggen.access_log_lines(1200, seed=8, malformed_fraction=0.05)
    ]
    tuple_results = _logetl_results(values, 50)
    rows = sum(len(r) for r in tuple_results)
    reference = definition.reference(values)
    assert rows == reference["rows"] < len(values)  # the malformed lines are not rows

    with engine.begin() as conn:
        assert definition.apply(conn, "logs", tuple_results) == rows
    with engine.begin() as conn:  # the whole batch again: a caller's slip
        assert definition.apply(conn, "logs", tuple_results) == 0
    with engine.begin() as conn:  # overlapping, and one tuple twice in one call
        assert definition.apply(conn, "logs", tuple_results[3:5] + tuple_results[3:4]) == 0
    with engine.connect() as conn:
        assert definition.stored(conn, "logs") == reference
        count = conn.execute(sa.select(sa.func.count()).select_from(schema.log_events)).scalar()
        assert count == rows
        assert definition.stored(conn, "other") == {"rows": 0, "status_classes": {}}


def test_logetl_rows_round_trip_with_utc_times_and_enrichment(engine: sa.Engine) -> None:
    line = (
        '198.51.100.23 - - [05/Jan/2026:08:00:01 +0800] "POST /api/v1/cart?x=1 HTTP/2.0" '
        '503 - "-" "curl/8.5.0"'
    )
    result = logetl.DEFINITION.process([Record("logs.eden", 2, 99, 0, line.encode())])
    with engine.begin() as conn:
        assert LOGETL.apply(conn, "logs", [result]) == 1
    with engine.connect() as conn:
        row = conn.execute(sa.select(schema.log_events)).mappings().one()
    assert dict(row) == {
        "pipeline": "logs",
        "topic": "logs.eden",
        "partition": 2,
        "offset": 99,
        "ts": dt.datetime(2026, 1, 5, 0, 0, 1, tzinfo=dt.UTC),
        "ip": "198.51.100.23",
        "ip_prefix": "198.51.100.0/24",
        "remote_user": None,
        "method": "POST",
        "path": "/api/v1/cart",
        "protocol": "HTTP/2.0",
        "status": 503,
        "status_class": "5xx",
        "bytes": 0,
        "referer": None,
        "user_agent": "curl/8.5.0",
        "is_bot": True,
    }


def test_logetl_same_offsets_in_another_pipeline_are_other_rows(engine: sa.Engine) -> None:
    values = [line.encode() for line in loggen.access_log_lines(20, seed=2, malformed_fraction=0)]
    result = logetl.DEFINITION.process(_tuples("shared.eden", values, 20)[0])
    with engine.begin() as conn:
        assert LOGETL.apply(conn, "logs-a", [result]) == 20
        assert LOGETL.apply(conn, "logs-b", [result]) == 20
    with engine.connect() as conn:
        assert logetl.DEFINITION.stored(conn, "logs-a")["rows"] == 20
        assert logetl.DEFINITION.stored(conn, "logs-b")["rows"] == 20


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"status": "200"}, r"status='200' has the wrong type"),
        ({"is_bot": 1}, r"is_bot=1 has the wrong type"),
        ({"offset": True}, r"offset=True has the wrong type"),
        ({"ts": "yesterday"}, r"ts='yesterday' is not ISO 8601"),
        ({"ts": "2026-01-01T00:00:00"}, r"ts='2026-01-01T00:00:00' has no time zone"),
        ({"extra": 1}, r"fields \[.*'extra'.*\] are not"),
    ],
)
def test_logetl_apply_refuses_bad_rows_and_writes_nothing(
    engine: sa.Engine, change: dict, message: str
) -> None:
    good = logetl.DEFINITION.process(
        [
            Record("logs.eden", 0, i, None, v.encode())
            for i, v in enumerate(loggen.access_log_lines(2, seed=1, malformed_fraction=0))
        ]
    )
    bad = [good[0], {**good[1], **change}]
    with pytest.raises(ValueError, match=message), engine.begin() as conn:
        LOGETL.apply(conn, "logs", [bad])
    with engine.connect() as conn:
        assert logetl.DEFINITION.stored(conn, "logs")["rows"] == 0


# -- ingest: the pipeline's own synthetic data ------------------------------------------------


def test_ingest_of_a_logetl_pipeline_produces_its_access_log_lines(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A renamed copy of the logetl config still ingests log lines: the definition decides."""
    name = f"logs{secrets.token_hex(3)}"
    text = resolve_path("logetl").read_text()
    text = text.replace('name = "logetl"', f'name = "{name}"')
    config_path = tmp_path / f"{name}.toml"
    config_path.write_text(text.replace('eden = "logetl.eden"', f'eden = "{name}.eden"'))

    request = IngestRequest.parse(pipeline=str(config_path), lines="600", seed="3")
    outcome = ingest(request, kafka_bootstrap)
    assert (outcome.topic, outcome.records) == (f"{name}.eden", 600)

    consumer = kafka_log.new_consumer(kafka_bootstrap)
    try:
        values = [
            record.value
            for partition, end in kafka_ends.latest_offsets(consumer, outcome.topic).items()
            for record in kafka_log.read_range(consumer, outcome.topic, partition, 0, end)
        ]
    finally:
        consumer.close()
    expected = [line.encode() for line in loggen.access_log_lines(600, seed=3)]
    assert sorted(values) == sorted(expected)
    assert logetl.DEFINITION.reference(values)["rows"] == sum(
        1 for g in loggen.labelled_lines(600, seed=3) if g.malformed is None
    )


def test_ingest_of_wordcount_still_produces_zipf_text() -> None:
    request = IngestRequest.parse(pipeline="wordcount", lines=50, seed=9)
    assert list(request.text()) == list(zipf_lines(50, seed=9))


def test_ingest_of_clickstream_produces_its_clicks_with_their_arrival_timestamps() -> None:
    """The module's synthetic_records wins: each record carries its simulated arrival."""
    request = IngestRequest.parse(pipeline="clickstream", lines=20, seed=4)
    pairs = list(request.text())
    assert all(isinstance(line, str) and isinstance(ts, int) for line, ts in pairs)
    assert [ts - pairs[0][1] for _, ts in pairs] == [250 * i for i in range(20)]


# -- ingest: a user's file, as it is ----------------------------------------------------------


def _topic_values(bootstrap: str, topic: str) -> list[bytes]:
    consumer = kafka_log.new_consumer(bootstrap)
    try:
        return [
            record.value
            for partition, end in kafka_ends.latest_offsets(consumer, topic).items()
            for record in kafka_log.read_range(consumer, topic, partition, 0, end)
        ]
    finally:
        consumer.close()


@pytest.mark.parametrize("skip_empty", [False, True])
def test_ingest_of_a_file_sends_every_line_unchanged(
    kafka_bootstrap: str, tmp_path: Path, skip_empty: bool
) -> None:
    """Empty lines and undecodable bytes reach the topic as they are (no U+FFFD), so a
    malformed line meets the pipeline, and its dead-letter topic, as the user wrote it."""
    name = f"files{secrets.token_hex(3)}"
    text = resolve_path("logetl").read_text().replace('name = "logetl"', f'name = "{name}"')
    config_path = tmp_path / f"{name}.toml"
    config_path.write_text(text.replace('eden = "logetl.eden"', f'eden = "{name}.eden"'))
    lines = [b"GET /a 200", b"", b"caf\xe9 \xff\xfe broken", b"", b"  ", b"last"]
    data = tmp_path / "input.log"
    data.write_bytes(b"\r\n".join(lines[:3]) + b"\n" + b"\n".join(lines[3:]))

    request = IngestRequest.parse(
        pipeline=str(config_path), source="file", path=str(data), skip_empty=str(skip_empty)
    )
    outcome = ingest(request, kafka_bootstrap)

    expected = [line for line in lines if line or not skip_empty]
    assert outcome.records == len(expected)
    values = _topic_values(kafka_bootstrap, outcome.topic)
    assert sorted(values) == sorted(expected)
    assert all(b"\xef\xbf\xbd" not in v for v in values)  # nothing became U+FFFD
    with pytest.raises(PoisonRecord, match="not UTF-8"):  # so the DLQ gets it, with why
        logetl.parse_line(b"caf\xe9 \xff\xfe broken")
