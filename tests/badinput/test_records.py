"""Record decoding: word count reads every byte string, log-ETL parses or names what is wrong,
replay envelopes decode or name the bad field. Nothing raises anything else; nothing is lost.
"""

from __future__ import annotations

import base64
import ipaddress
import json
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowctl.core.replay import Envelope, EnvelopeError, decode_envelope, encode_envelope
from flowctl.pipelines import logetl, wordcount
from flowctl.pipelines.base import PoisonRecord, Record

PROPERTY = settings(max_examples=80, deadline=None)

GOOD = (
    '203.0.113.7 - alice [10/Oct/2000:13:55:36 -0700] "GET /a/b?x=1 HTTP/1.1" '
    '200 2326 "https://example.com/" "Mozilla/5.0 (X11; Linux x86_64) Firefox/133.0"'
)
FIELDS = ("ip", "ident", "user", "timestamp", "request", "status", "size", "referer", "user agent")

values = st.one_of(st.none(), st.binary(max_size=200))
words_ascii = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=12)
# A token: no space (the field separator), no quote or bracket (the delimiters).
tokens = st.text(
    alphabet=st.characters(blacklist_characters=' "[]\n\r', blacklist_categories=("Cs",)),
    min_size=1,
    max_size=20,
)


def _records(vals: list[bytes | None], first_offset: int = 0) -> list[Record]:
    return [Record("t.eden", 0, first_offset + i, None, v) for i, v in enumerate(vals)]


# --- word count -------------------------------------------------------------------------------


@PROPERTY
@given(st.binary(max_size=300))
def test_wordcount_decode_and_words_accept_any_bytes(value: bytes) -> None:
    line = wordcount.decode(value)
    assert isinstance(line, str)
    for word in wordcount.words(line):
        assert word and word == word.lower()
        assert word in line.lower()


@PROPERTY
@given(st.lists(values, max_size=20))
def test_wordcount_process_never_raises_and_counts_each_record_alone(
    vals: list[bytes | None],
) -> None:
    result = wordcount.DEFINITION.process(_records(vals))
    expected: Counter[str] = Counter()
    for v in vals:  # record by record: no word may be glued across two records
        if v is not None:
            expected.update(wordcount.words(wordcount.decode(v)))
    assert result == dict(expected)
    json.dumps(result)  # the result waits in memcached as JSON


@PROPERTY
@given(st.lists(st.tuples(st.binary(max_size=30), words_ascii), min_size=1, max_size=10))
def test_wordcount_counts_readable_words_between_undecodable_bytes(
    parts: list[tuple[bytes, str]],
) -> None:
    value = b"".join(junk + b"\xff" + word.encode() + b"\xff" for junk, word in parts)
    counts = wordcount.DEFINITION.process(_records([value]))
    for word, n in Counter(word for _, word in parts).items():
        assert counts.get(word, 0) >= n, (word, value)


def test_wordcount_tombstones_have_no_words() -> None:
    assert wordcount.DEFINITION.process(_records([None, None])) == {}


# --- log ETL --------------------------------------------------------------------------------


def _assert_poison_reason(exc: PoisonRecord) -> None:
    assert isinstance(exc.reason, str) and exc.reason
    known = (*FIELDS, "UTF-8", "empty", "unexpected text")
    assert any(name in exc.reason for name in known), exc.reason


@PROPERTY
@given(values)
def test_logetl_any_bytes_parse_or_raise_a_poison_record_naming_the_problem(
    value: bytes | None,
) -> None:
    try:
        event = logetl.parse_line(value)
    except PoisonRecord as exc:
        _assert_poison_reason(exc)
    else:
        assert 100 <= event.status <= 599


@PROPERTY
@given(st.integers(0, len(GOOD)), st.text(max_size=30), st.integers(0, 30))
def test_logetl_damaged_lines_parse_or_raise_a_poison_record_naming_the_problem(
    at: int, inserted: str, cut: int
) -> None:
    line = GOOD[:at] + inserted + GOOD[at + cut :]
    try:
        logetl.parse_line(line.encode("utf-8", errors="surrogatepass"))
    except PoisonRecord as exc:
        _assert_poison_reason(exc)


def _replace_token(index: int, new: str) -> str:
    parts = GOOD.split(" ")
    parts[index] = new
    return " ".join(parts)


@PROPERTY
@given(tokens)
def test_logetl_a_bad_ip_is_named_with_its_value(token: str) -> None:
    try:
        ipaddress.ip_address(token)
    except ValueError:
        pass
    else:
        if "%" not in token:
            return
    with pytest.raises(PoisonRecord) as info:
        logetl.parse_line(_replace_token(0, token).encode())
    assert "bad ip" in info.value.reason and logetl.show(token) in info.value.reason


@PROPERTY
@given(tokens)
def test_logetl_a_bad_status_is_named_with_its_value(token: str) -> None:
    if token.isascii() and token.isdigit() and len(token) == 3 and 100 <= int(token) <= 599:
        return
    with pytest.raises(PoisonRecord) as info:
        logetl.parse_line(_replace_token(8, token).encode())
    assert "bad status" in info.value.reason and logetl.show(token) in info.value.reason


@PROPERTY
@given(tokens)
def test_logetl_a_bad_size_is_named_with_its_value(token: str) -> None:
    if token == "-" or (token.isascii() and token.isdigit() and len(token) <= 18):
        return
    with pytest.raises(PoisonRecord) as info:
        logetl.parse_line(_replace_token(9, token).encode())
    assert "bad size" in info.value.reason and logetl.show(token) in info.value.reason


@PROPERTY
@given(tokens)
def test_logetl_a_bad_timestamp_is_named_with_its_value(text: str) -> None:
    line = GOOD.replace("10/Oct/2000:13:55:36 -0700", text, 1)
    try:
        logetl.parse_line(line.encode())
    except PoisonRecord as exc:
        assert "bad timestamp" in exc.reason and logetl.show(text) in exc.reason
    # Whatever parses is a real time: nothing else gets through.


@PROPERTY
@given(
    st.lists(st.one_of(st.just(GOOD.encode()), values), min_size=1, max_size=12),
    st.integers(0, 2**40),
)
def test_logetl_process_reports_the_offset_of_the_first_poisoned_record(
    vals: list[bytes | None], first_offset: int
) -> None:
    records = _records(vals, first_offset)
    outcomes = [logetl.parse_values([v]).__next__() for v in vals]
    bad = [r.offset for r, o in zip(records, outcomes, strict=True) if isinstance(o, PoisonRecord)]
    try:
        rows = logetl.DEFINITION.process(records)
    except PoisonRecord as exc:
        assert bad and exc.offset == bad[0]
        _assert_poison_reason(exc)
    else:
        assert not bad
        assert [row["offset"] for row in rows] == [r.offset for r in records]
        json.dumps(rows)


# --- replay envelopes -------------------------------------------------------------------------

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
VALID = Envelope(
    topic="p.eden",
    partition=1,
    offset=7,
    payload=b"hello",
    attempt=2,
    error="boom",
    not_before=12.5,
    key=b"k",
).to_dict()
ENVELOPE_FIELDS = tuple(VALID)


@PROPERTY
@given(
    st.one_of(
        st.binary(max_size=200),
        json_values.map(lambda v: json.dumps(v).encode()),
        st.integers(1, 50_000).map(lambda n: b"[" * n),
        st.integers(1, 50_000).map(lambda n: b'{"a":' * n),
    )
)
def test_decode_envelope_on_any_bytes_returns_an_envelope_or_an_envelope_error(
    data: bytes,
) -> None:
    try:
        envelope = decode_envelope(data)
    except EnvelopeError as exc:
        assert str(exc).startswith("envelope")
    else:
        assert decode_envelope(encode_envelope(envelope)) == envelope


@PROPERTY
@given(st.sampled_from(ENVELOPE_FIELDS), json_values)
def test_an_envelope_field_with_any_value_is_accepted_or_named_with_its_value(
    field: str, value: object
) -> None:
    data = {**VALID, field: value}
    try:
        envelope = decode_envelope(json.dumps(data).encode())
    except EnvelopeError as exc:
        message = str(exc)
        assert repr(field) in message, message
        shown = value[:40] if isinstance(value, str) and field in ("payload", "key") else value
        assert repr(shown) in message, message
    else:
        got = envelope.to_dict()
        if field in ("payload", "key") and value is not None:
            assert got[field] == base64.b64encode(base64.b64decode(value)).decode()
        else:
            assert got[field] == value or (value != value and got[field] != got[field])


@PROPERTY
@given(st.sampled_from([f for f in ENVELOPE_FIELDS if f != "key"]))
def test_an_envelope_missing_a_field_is_refused_naming_it(field: str) -> None:
    data = {k: v for k, v in VALID.items() if k != field}
    with pytest.raises(EnvelopeError, match=repr(field)):
        decode_envelope(json.dumps(data).encode())
