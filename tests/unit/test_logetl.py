"""The log-ETL pipeline: parsing, every kind of malformed line, enrichment, the generator."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl import loggen
from flowctl.pipelines import logetl
from flowctl.pipelines.base import PoisonRecord, Record
from flowctl.pipelines.config import load_pipeline_config, resolve_path

GOOD = (
    '203.0.113.7 - alice [10/Oct/2000:13:55:36 -0700] "GET /docs/a.html?x=1&y=2 HTTP/1.1" '
    '200 2326 "https://example.com/start" "Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0"'
)


def _with(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


def test_a_combined_log_line_parses_into_an_enriched_event() -> None:
    event = logetl.parse_line(GOOD.encode())
    assert event == logetl.LogEvent(
        ts=dt.datetime(2000, 10, 10, 20, 55, 36, tzinfo=dt.UTC),
        ip="203.0.113.7",
        ip_prefix="203.0.113.0/24",
        remote_user="alice",
        method="GET",
        path="/docs/a.html",
        protocol="HTTP/1.1",
        status=200,
        status_class="2xx",
        bytes=2326,
        referer="https://example.com/start",
        user_agent="Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0",
        is_bot=False,
    )


def test_common_log_format_dashes_and_line_endings() -> None:
    line = '::1 - - [01/Jan/2026:00:00:00 +0000] "HEAD / HTTP/1.0" 304 -\r\n'
    event = logetl.parse_line(line.encode())
    assert (event.ip, event.ip_prefix, event.remote_user) == ("::1", "::/64", None)
    assert (event.bytes, event.status_class, event.referer, event.user_agent) == (
        0,
        "3xx",
        None,
        None,
    )
    assert event.is_bot  # no user agent at all: no browser sends that
    assert event.ts == dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def test_escaped_quotes_stay_inside_their_field() -> None:
    line = _with('"Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0"', r'"say \"hi\" \\"')
    assert logetl.parse_line(line).user_agent == r"say \"hi\" \\"


def test_timestamps_are_converted_to_utc_across_a_day_boundary() -> None:
    assert logetl.parse_timestamp("31/Dec/2025:23:30:00 -0130") == dt.datetime(
        2026, 1, 1, 1, 0, tzinfo=dt.UTC
    )
    assert logetl.parse_timestamp("29/Feb/2024:08:00:00 +0800") == dt.datetime(
        2024, 2, 29, 0, 0, tzinfo=dt.UTC
    )


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (_with("10/Oct/2000", "32/Foo/2020"), "bad timestamp '32/Foo/2020:13:55:36 -0700'"),
        (_with("10/Oct/2000", "30/Feb/2000"), "bad timestamp '30/Feb/2000:13:55:36 -0700' (day"),
        (_with("13:55:36", "25:00:00"), "bad timestamp '10/Oct/2000:25:00:00 -0700'"),
        (_with("-0700", "+2500"), "bad timestamp '10/Oct/2000:13:55:36 +2500'"),
        (_with("10/Oct/2000", "10/oct/2000"), "bad timestamp '10/oct/2000:13:55:36 -0700'"),
        (_with("[10/Oct/2000:13:55:36 -0700]", "10/Oct/2000:13:55:36"), "expected [ to open"),
        (_with("-0700]", "-0700"), "unterminated timestamp"),
        (_with("203.0.113.7", "203.0.113.700"), "bad ip '203.0.113.700'"),
        (_with("203.0.113.7", "localhost"), "bad ip 'localhost'"),
        (_with("203.0.113.7", "fe80::1%eth0"), "bad ip 'fe80::1%eth0' (zone index"),
        (_with(" 200 ", " 2OO "), "bad status '2OO'"),
        (_with(" 200 ", " 600 "), "bad status '600'"),
        (_with(" 200 ", " - "), "bad status '-'"),
        (_with(" 2326 ", " 12k "), "bad size '12k'"),
        (_with(" 2326 ", " -1 "), "bad size '-1'"),
        (_with("GET /docs", "GET  /docs"), "bad request 'GET  /docs"),
        (_with("GET ", "get "), "bad request 'get /docs"),
        (_with(" HTTP/1.1", ""), "bad request 'GET /docs/a.html?x=1&y=2'"),
        (_with("GET /docs/a.html?x=1&y=2 HTTP/1.1", "-"), "bad request '-'"),
        (_with("GET /docs/a.html?x=1&y=2 HTTP/1.1", r"\x16\x03\x01"), r"bad request '\\x16"),
        (GOOD[: GOOD.index("HTTP")], "unterminated request"),
        (GOOD[: GOOD.index("[")].rstrip(), "line ends before the timestamp"),
        (_with("alice [", "alice  ["), "expected [ to open the timestamp, found ' [10/Oct"),
        (_with(" 200 ", "200 "), "expected a space before the status"),
        (GOOD + " extra", "unexpected text after the user agent: ' extra'"),
        (GOOD[: GOOD.rindex('"')], "unterminated user agent"),
        (_with('"https://example.com/start" ', ""), "line ends before the user agent"),
        ("", "empty line"),
        ("   \n", "empty line"),
    ],
)
def test_each_malformed_line_is_poison_with_a_reason_naming_the_problem(
    line: str, reason: str
) -> None:
    with pytest.raises(PoisonRecord) as info:
        logetl.parse_line(line.encode())
    assert info.value.reason.startswith(reason), info.value.reason


def test_values_that_are_not_text_are_poison() -> None:
    with pytest.raises(PoisonRecord, match=r"^empty record \(no value\)$"):
        logetl.parse_line(None)
    with pytest.raises(PoisonRecord, match=r"^value is not UTF-8 \(byte 3: b'\\xff'\)$"):
        logetl.parse_line(b"1.2\xff.3.4 - - [")


def test_long_values_are_shortened_in_the_reason() -> None:
    with pytest.raises(PoisonRecord) as info:
        logetl.parse_line(_with("203.0.113.7", "x" * 500))
    assert (
        info.value.reason == f"bad ip '{'x' * logetl.SHOW_CHARS}...' (not an IPv4 or IPv6 address)"
    )


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("/a/b?x=1", "/a/b"),
        ("/a#frag", "/a"),
        ("/", "/"),
        ("/?q", "/"),
        ("http://proxy.example/p/q?x", "/p/q"),
        ("https://example.com", "/"),
        ("example.com:443", "example.com:443"),
        ("*", "*"),
    ],
)
def test_path_drops_query_and_fragment(target: str, path: str) -> None:
    assert logetl.path_of(target) == path


@pytest.mark.parametrize(
    ("agent", "bot"),
    [
        ("Mozilla/5.0 (compatible; Googlebot/2.1; +http://www.google.com/bot.html)", True),
        ("Mozilla/5.0 (compatible; bingbot/2.0)", True),
        ("Mozilla/5.0 (compatible; Baiduspider/2.0)", True),
        ("curl/8.5.0", True),
        ("python-requests/2.32.3", True),
        ("Wget/1.21.4", True),
        (None, True),
        ("x" * 600 + " Googlebot/2.1", True),  # longer than what is cached
        ("Mozilla/5.0 " + "a" * 600, False),
        ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) Chrome/131.0.0.0 Safari/537.36", False),
        ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_1 like Mac OS X) Mobile/15E148", False),
    ],
)
def test_bot_flag_from_the_user_agent(agent: str | None, bot: bool) -> None:
    assert logetl.is_bot(agent) is bot


def test_status_class_and_ip_prefix() -> None:
    import ipaddress

    assert [logetl.status_class(s) for s in (101, 204, 302, 404, 599)] == [
        "1xx",
        "2xx",
        "3xx",
        "4xx",
        "5xx",
    ]
    assert logetl.ip_prefix(ipaddress.ip_address("10.1.2.3")) == "10.1.2.0/24"
    assert logetl.ip_prefix(ipaddress.ip_address("2001:db8:1:2:3::4")) == "2001:db8:1:2::/64"


def test_process_keys_rows_by_kafka_coordinates_and_is_json() -> None:
    records = [Record("t", 1, 40 + i, None, GOOD.encode()) for i in range(3)]
    rows = logetl.DEFINITION.process(records)
    assert json.loads(json.dumps(rows)) == rows
    assert [(r["topic"], r["partition"], r["offset"]) for r in rows] == [
        ("t", 1, 40),
        ("t", 1, 41),
        ("t", 1, 42),
    ]
    assert rows[0]["ts"] == "2000-10-10T20:55:36+00:00"
    assert rows[0]["status_class"] == "2xx" and rows[0]["is_bot"] is False


def test_process_names_the_offset_of_the_first_malformed_line() -> None:
    records = [
        Record("t", 0, 7, None, GOOD.encode()),
        Record("t", 0, 8, None, _with(" 200 ", " 999 ").encode()),
        Record("t", 0, 9, None, b""),
    ]
    with pytest.raises(PoisonRecord) as info:
        logetl.DEFINITION.process(records)
    assert info.value.offset == 8
    assert info.value.reason.startswith("bad status '999'")


def test_reference_counts_parsed_lines_per_status_class() -> None:
    values = [
        GOOD.encode(),
        _with(" 200 ", " 404 ").encode(),
        _with(" 200 ", " 404 ").encode(),
        b"garbage",
        None,
    ]
    assert logetl.DEFINITION.reference(values) == {
        "rows": 3,
        "status_classes": {"2xx": 1, "4xx": 2},
    }


def test_the_shipped_config_loads_and_documents_every_key() -> None:
    config = load_pipeline_config("logetl")
    assert (config.name, config.eden_topic, config.dlq_topic) == (
        "logetl",
        "logetl.eden",
        "logetl.dlq",
    )
    assert config.load_definition().DEFINITION is logetl.DEFINITION
    lines = resolve_path("logetl").read_text().splitlines()
    for i, line in enumerate(lines):
        if "=" in line and not line.lstrip().startswith("#"):
            assert lines[i - 1].lstrip().startswith("#"), f"undocumented key: {line!r}"


# -- the generator ----------------------------------------------------------------------------


def test_generated_lines_parse_exactly_when_they_are_not_labelled_malformed() -> None:
    lines = list(loggen.labelled_lines(4000, seed=11, malformed_fraction=0.1))
    kinds = {line.malformed for line in lines}
    assert kinds == {None, *loggen.MALFORMED_KINDS}  # every kind occurs at this size
    for line in lines:
        if line.malformed is None:
            logetl.parse_line(line.text)
        else:
            with pytest.raises(PoisonRecord):
                logetl.parse_line(line.text)


def test_generated_traffic_looks_like_a_real_site() -> None:
    events = [
        e
        for e in logetl.parse_values(loggen.access_log_lines(5000, seed=3, malformed_fraction=0))
        if isinstance(e, logetl.LogEvent)
    ]
    assert len(events) == 5000
    classes = {e.status_class for e in events}
    assert {"2xx", "3xx", "4xx", "5xx"} <= classes
    share_2xx = sum(e.status_class == "2xx" for e in events) / len(events)
    assert 0.6 < share_2xx < 0.95
    assert 0.03 < sum(e.is_bot for e in events) / len(events) < 0.4
    assert len({e.ip_prefix for e in events}) < len({e.ip for e in events}) / 2
    assert any(":" in e.ip for e in events)  # some IPv6 clients
    stamps = [e.ts for e in events]
    assert stamps == sorted(stamps)


def test_the_generator_is_deterministic_and_honours_the_fraction() -> None:
    a = list(loggen.access_log_lines(300, seed=5))
    assert a == list(loggen.access_log_lines(300, seed=5))
    assert a != list(loggen.access_log_lines(300, seed=6))
    bad = sum(g.malformed is not None for g in loggen.labelled_lines(300, malformed_fraction=1.0))
    assert bad == 300
    none = sum(g.malformed is not None for g in loggen.labelled_lines(300, malformed_fraction=0))
    assert none == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"count": -1}, r"count=-1 must be an integer >= 0"),
        ({"count": 5, "malformed_fraction": 1.5}, r"malformed_fraction=1.5 must lie in \[0, 1\]"),
        ({"count": 5, "clients": 0}, r"clients=0 must be an integer >= 1"),
        ({"count": 5, "start": dt.datetime(2026, 1, 1)}, r"start=.* must be timezone-aware"),
    ],
)
def test_generator_arguments_are_checked(kwargs: dict, message: str) -> None:
    with pytest.raises(loggen.LogGenError, match=message):
        next(loggen.labelled_lines(**kwargs))


# -- properties -------------------------------------------------------------------------------


@settings(max_examples=400)
@given(st.binary(max_size=300))
def test_any_bytes_parse_or_are_poison(value: bytes) -> None:
    try:
        event = logetl.parse_line(value)
    except PoisonRecord as exc:
        assert exc.reason
    else:
        assert 100 <= event.status <= 599


@settings(max_examples=400)
@given(
    st.integers(min_value=0, max_value=len(GOOD)),
    st.integers(min_value=0, max_value=12),
    st.text(max_size=12),
)
def test_any_edit_of_a_good_line_parses_or_is_poison(start: int, length: int, text: str) -> None:
    line = GOOD[:start] + text + GOOD[start + length :]
    try:
        event = logetl.parse_line(line.encode("utf-8", errors="surrogatepass"))
    except PoisonRecord as exc:
        assert exc.reason
    else:
        assert event.status_class == f"{event.status // 100}xx"
        assert event.ts.tzinfo == dt.UTC
