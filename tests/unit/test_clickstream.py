"""The clickstream pipeline: event-time windows, lateness by Kafka timestamp, the DLQ reasons,
exact distinct users through the ``sum`` sink, its config ``[params]`` and its demo feed."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.sink_rules import fold, view
from flowctl.pipelines import clickstream
from flowctl.pipelines.base import PoisonRecord, Record, combiner_of, reference_of
from flowctl.pipelines.check import check_pipeline
from flowctl.pipelines.clickstream import DEFINITION, ClickstreamDefinition, configure
from flowctl.pipelines.config import PIPELINES_DIR, PipelineConfigError, load_pipeline_config

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, a window start
MIN = 60_000
SPEC = load_pipeline_config("clickstream").sink
assert SPEC is not None


def click(user: str, page: str, event_ms: int) -> bytes:
    return json.dumps({"user": user, "page": page, "ts": clickstream.iso_ms(event_ms)}).encode()


def rec(offset: int, value: bytes | str, arrival_ms: int | None) -> Record:
    raw = value.encode() if isinstance(value, str) else value
    return Record("clickstream.eden", 0, offset, arrival_ms, raw)


def table(results: list) -> dict:
    """What the declared sink would store for these tuple results."""
    return view(SPEC, fold(SPEC, results))


# -- windows ----------------------------------------------------------------------------------


def test_clicks_are_counted_per_page_minute_and_user_by_event_time() -> None:
    records = [
        rec(0, click("ann", "/a", T0 + 59_999), T0 + MIN + 1),  # last ms of minute 0
        rec(1, click("bob", "/a", T0 + MIN), T0 + MIN + 2),  # first ms of minute 1
        rec(2, click("ann", "/a", T0 + 5), T0 + MIN + 3),  # out of order: back in minute 0
        rec(3, click("ann", "/b", T0 + 10), T0 + MIN + 4),
    ]
    assert DEFINITION.process(records) == [
        {"page": "/a", "window_start": "2026-01-01T00:00:00+00:00", "user": "ann", "clicks": 2},
        {"page": "/a", "window_start": "2026-01-01T00:01:00+00:00", "user": "bob", "clicks": 1},
        {"page": "/b", "window_start": "2026-01-01T00:00:00+00:00", "user": "ann", "clicks": 1},
    ]


def test_distinct_users_and_clicks_per_window_merge_exactly_across_tuples() -> None:
    """The same user in two tuples is one row (one distinct user), its clicks added."""
    first = DEFINITION.process(
        [rec(0, click("ann", "/a", T0), T0), rec(1, click("bob", "/a", T0), T0)]
    )
    second = DEFINITION.process([rec(2, click("ann", "/a", T0 + 7), T0 + 9)])
    stored = table([first, second])
    assert stored == {
        "/a/2026-01-01T00:00:00+00:00/ann": 2,
        "/a/2026-01-01T00:00:00+00:00/bob": 1,
    }
    window = [k for k in stored if "/2026-01-01T00:00:00+00:00/" in k]
    assert (len(window), sum(stored[k] for k in window)) == (2, 3)  # users, clicks


def test_a_late_event_within_the_allowed_lateness_merges_into_its_window() -> None:
    end = T0 + MIN
    lateness = DEFINITION.allowed_lateness_s * 1000
    late = rec(0, click("ann", "/a", T0 + 30_000), end + lateness)  # exactly at the limit
    (row,) = DEFINITION.process([late])
    assert (row["window_start"], row["clicks"]) == ("2026-01-01T00:00:00+00:00", 1)


def test_a_too_late_event_is_poison_naming_event_time_window_and_lateness() -> None:
    end = T0 + MIN
    too_late = rec(7, click("ann", "/a", T0 + 30_000), end + 120_000 + 1)
    with pytest.raises(PoisonRecord) as caught:
        DEFINITION.process([rec(6, click("bob", "/a", T0), T0), too_late])
    assert caught.value.offset == 7
    assert caught.value.reason == (
        "too late: event time 2026-01-01T00:00:30+00:00 is in window "
        "[2026-01-01T00:00:00+00:00, 2026-01-01T00:01:00+00:00), which closed 120.001 s "
        "before the event arrived at 2026-01-01T00:03:00.001+00:00; allowed lateness is "
        "120 s (params.allowed_lateness_s)"
    )


def test_lateness_is_judged_by_the_record_alone_whatever_the_tuple() -> None:
    """No watermark: a record's verdict does not depend on the records read before it."""
    early = rec(0, click("ann", "/a", T0 + 10 * MIN), T0 + 10 * MIN)
    old = rec(1, click("bob", "/a", T0), T0 + MIN + 5_000)  # 5 s late, after a newer event
    together = DEFINITION.process([early, old])
    assert table([together]) == table([DEFINITION.process([early]), DEFINITION.process([old])])
    assert len(together) == 2


def test_a_record_without_a_kafka_timestamp_cannot_be_late() -> None:
    (row,) = DEFINITION.process([rec(0, click("ann", "/a", 0), None)])
    assert row["window_start"] == "1970-01-01T00:00:00+00:00"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b'["ann", "/a"]', "not a JSON object"),
        (b'{"page": "/a", "ts": "2026-01-01T00:00:00Z"}', "field 'user' is missing"),
        (b'{"user": "ann", "ts": "2026-01-01T00:00:00Z"}', "field 'page' is missing"),
        (b'{"user": "ann", "page": "/a"}', "field 'ts' is missing"),
        (b'{"user": "", "page": "/a", "ts": "2026-01-01T00:00:00Z"}', "field user=''"),
        (b'{"user": 7, "page": "/a", "ts": "2026-01-01T00:00:00Z"}', "field user='7'"),
        (b'{"user": "ann", "page": "/a", "ts": "soon"}', "field ts='soon' is not an ISO 8601"),
        (b'{"user": "ann", "page": "/a", "ts": 1767225600}', "field ts='1767225600' is not"),
        (b'{"user": "ann", "page": "/a", "ts": "2026-01-01T00:00:00"}', "has no time zone"),
        (b'{"user": "ann", "page": "/a", "ts": "1969-12-31T23:59:59Z"}', "is outside 1970"),
    ],
)
def test_a_malformed_event_is_poison_naming_the_field_and_value(value: bytes, reason: str) -> None:
    with pytest.raises(PoisonRecord, match=None) as caught:
        DEFINITION.process([rec(0, click("ann", "/a", T0), T0), rec(1, value, T0)])
    assert caught.value.offset == 1
    assert reason in caught.value.reason, caught.value.reason


def test_a_tombstone_is_poison() -> None:
    with pytest.raises(PoisonRecord, match="tombstone"):
        DEFINITION.process([Record("clickstream.eden", 0, 0, T0, None)])


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode)))
def test_no_input_raises_anything_but_poison(value: bytes) -> None:
    with contextlib.suppress(PoisonRecord):
        DEFINITION.accept(value, T0)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "user": st.text(min_size=1, max_size=5),
            "page": st.text(min_size=1, max_size=5),
            "ts": st.datetimes(timezones=st.timezones()).map(lambda d: d.isoformat()),
        }
    ),
    st.integers(min_value=-1, max_value=2**63 - 1),
)
def test_any_event_and_arrival_is_counted_or_poison(event: dict, arrival: int) -> None:
    with contextlib.suppress(PoisonRecord):
        DEFINITION.accept(json.dumps(event), arrival)


# -- tuples, replays, reconcile -----------------------------------------------------------------


def feed(count: int, seed: int) -> list[Record]:
    pairs = clickstream.synthetic_records(count, seed, start_ms=T0)
    return [rec(i, v, ts) for i, (v, ts) in enumerate(pairs)]


def _lane(records: list[Record]) -> list:
    """What lanes store for these records: poison isolated, one result per good part."""
    out, part = [], []
    for r in records:
        try:
            DEFINITION.process([r])
            part.append(r)
        except PoisonRecord:
            if part:
                out.append(DEFINITION.process(part))
            part = []
    if part:
        out.append(DEFINITION.process(part))
    return out


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=30), st.randoms())
def test_any_tuple_cutting_and_order_stores_what_reconcile_computes(
    sizes: list[int], rnd: object
) -> None:
    """Tuples cut anywhere and flushed in any order store exactly the reference over the
    records (what reconcile computes from the log), late events in their windows."""
    records = feed(300, seed=3)
    tuples, i = [], 0
    for size in sizes * 10:
        if i >= len(records):
            break
        tuples.append(records[i : i + size])
        i += size
    tuples.append(records[i:])
    results = [r for t in tuples for r in _lane(t)]
    rnd.shuffle(results)  # type: ignore[attr-defined]
    assert table(results) == reference_of(DEFINITION, records)


def test_combine_of_a_tuples_parts_equals_process_of_the_whole() -> None:
    records = [r for r in feed(400, seed=5) if _lane([r])]
    combine = combiner_of(DEFINITION)
    for cut in (1, 57, 200, 399):
        parts = [DEFINITION.process(records[:cut]), DEFINITION.process(records[cut:])]
        assert combine(parts) == DEFINITION.process(records)


def test_reference_of_bare_values_counts_every_well_formed_event() -> None:
    records = feed(200, seed=8)
    untimed = [rec(r.offset, r.value or b"", None) for r in records]
    assert DEFINITION.reference(r.value for r in records) == reference_of(DEFINITION, untimed)


# -- the demo feed ------------------------------------------------------------------------------


def test_the_feed_is_seeded_with_out_of_order_late_too_late_and_malformed_events() -> None:
    records = feed(4_000, seed=11)
    assert records == feed(4_000, seed=11)
    assert records != feed(4_000, seed=12)
    kinds = {"on time": 0, "late": 0, "too late": 0, "malformed": 0}
    out_of_order = 0
    last_event = 0
    for r in records:
        try:
            c = DEFINITION.accept(r.value, r.timestamp_ms)
        except PoisonRecord as exc:
            kinds["too late" if exc.reason.startswith("too late") else "malformed"] += 1
            continue
        end = DEFINITION.window_start(c.event_ms) + MIN
        kinds["late" if r.timestamp_ms > end else "on time"] += 1
        out_of_order += c.event_ms < last_event
        last_event = max(last_event, c.event_ms)
    assert kinds["on time"] > 3_000 and out_of_order > 1_000, (kinds, out_of_order)
    assert 200 < kinds["late"] < 500 and 40 < kinds["too late"] < 130, kinds
    assert 30 < kinds["malformed"] < 100, kinds
    first = json.loads(next(clickstream.synthetic_lines(5, 11)))  # the same feed, undated
    assert {k: first[k] for k in ("user", "page")} == {
        k: json.loads(records[0].value)[k] for k in ("user", "page")
    }


def test_the_feed_ends_now_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(clickstream.time, "time", lambda: (T0 + 10_000) / 1000)
    stamps = [ts for _, ts in clickstream.synthetic_records(40, 1)]
    assert stamps[0] == T0 and stamps[-1] == T0 + 39 * clickstream.ARRIVAL_STEP_MS


# -- config ---------------------------------------------------------------------------------------


def test_the_shipped_config_passes_pipeline_check_and_applies_its_params() -> None:
    done = check_pipeline("clickstream")
    assert "would store what reference() computes" in done[-1], done
    config = load_pipeline_config("clickstream")
    assert config.pipeline_definition() == ClickstreamDefinition(60, 120)
    assert config.dlq_topic == "clickstream.dlq"


def test_params_change_the_window_and_the_lateness(tmp_path: Path) -> None:
    text = (PIPELINES_DIR / "clickstream.toml").read_text()
    text = text.replace("window_s = 60", "window_s = 300").replace(
        "allowed_lateness_s = 120", "allowed_lateness_s = 0"
    )
    path = tmp_path / "clickstream.toml"
    path.write_text(text)
    definition = load_pipeline_config(path).pipeline_definition()
    (row,) = definition.process([rec(0, click("ann", "/a", T0 + 299_000), T0 + 300_000)])
    assert row["window_start"] == "2026-01-01T00:00:00+00:00"
    with pytest.raises(PoisonRecord, match="allowed lateness is 0 s"):
        definition.process([rec(0, click("ann", "/a", T0), T0 + 300_001)])


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"window": 60}, "params.window=60 is not a known field"),
        ({"window_s": 0}, "params.window_s=0 must be an integer >= 1"),
        ({"window_s": 7}, "params.window_s=7 must divide a day"),
        ({"window_s": 60.0}, "params.window_s=60.0 must be an integer"),
        ({"allowed_lateness_s": -1}, "params.allowed_lateness_s=-1 must be an integer >= 0"),
    ],
)
def test_bad_params_are_refused_naming_the_field(params: dict, message: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        configure(params)
    assert message in str(caught.value)


def test_a_bad_param_in_the_file_fails_the_config_load_naming_file_and_field(
    tmp_path: Path,
) -> None:
    text = (PIPELINES_DIR / "clickstream.toml").read_text()
    path = tmp_path / "clickstream.toml"
    path.write_text(text.replace("allowed_lateness_s = 120", 'allowed_lateness_s = "2m"'))
    with pytest.raises(PipelineConfigError) as caught:
        load_pipeline_config(path)
    assert str(path) in str(caught.value)
    assert "params.allowed_lateness_s='2m' must be an integer >= 0" in str(caught.value)


def test_a_definition_without_configure_takes_no_params(tmp_path: Path) -> None:
    path = tmp_path / "demo.toml"
    path.write_text('name = "demo"\ndefinition = "flowctl.pipelines.wordcount"\n[params]\nx = 1\n')
    with pytest.raises(PipelineConfigError, match="has no configure"):
        load_pipeline_config(path)


def test_window_ends_are_aligned_on_the_epoch() -> None:
    five = ClickstreamDefinition(window_s=300)
    assert five.window_start(T0 + 299_999) == T0
    assert five.window_start(T0 + 300_000) == T0 + 300_000
