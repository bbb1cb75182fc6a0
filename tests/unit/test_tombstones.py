"""Tombstones (a null value) and empty values in the three shipped pipelines.

Foreign producers write both: a tombstone is a compacted topic's delete marker, an empty
value what a producer sends with no payload. Each pipeline makes its documented choice
(docs/flow-control.md, "What is read"), never a ``TypeError`` that would turn into
replays, and its reference agrees with what the lane does with the tuple: the isolated
good records' result counts, the poison goes to the DLQ.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flowctl.core.envelope import Envelope, EnvelopeError, decode_envelope, encode_envelope
from flowctl.core.isolation import isolate
from flowctl.core.spout_contract import Dispatch
from flowctl.core.tuples import TupleRange
from flowctl.loggen import labelled_lines
from flowctl.pipelines import clickstream
from flowctl.pipelines.base import PoisonRecord, Record, combiner_of, reference_of
from flowctl.pipelines.config import load_pipeline_config
from flowctl.spark.flow.lane import run_lane
from flowctl.spark.flow.plan import decode_plan, encode_plan
from tests.unit.fakes import FakeLaneIO
from tests.unit.flow_setup import flow_settings

T0 = 1_767_225_600_000
EDEN = "demo.eden"
GOOD = {
    "wordcount": [b"the cat and the hat", b"a cat"],
    "logetl": [line.text.encode() for line in labelled_lines(2, seed=5, malformed_fraction=0)],
    "clickstream": [
        json.dumps({"user": u, "page": "/a", "ts": clickstream.iso_ms(T0 + 1000)}).encode()
        for u in ("ann", "bob")
    ],
}
#: What each pipeline does with (a tombstone, an empty value): "skip" counts nothing,
#: anything else is the start of the PoisonRecord's reason (the record goes to the DLQ).
CHOICE = {
    "wordcount": ("skip", "skip"),
    "logetl": ("empty record (no value)", "empty line"),
    "clickstream": ("no value (a tombstone), not a click event", "not JSON"),
}


def _tuple(name: str) -> list[Record]:
    """good, tombstone, good, empty: keyed, with headers, as a foreign producer writes."""
    a, b = GOOD[name]
    values = [a, None, b, b""]
    return [
        Record(f"{name}.eden", 0, 10 + i, T0 + 2000, v, b"k", (("h", b"1"), ("n", None)))
        for i, v in enumerate(values)
    ]


@pytest.mark.parametrize("name", sorted(CHOICE))
def test_each_pipeline_makes_its_documented_choice(name: str) -> None:
    definition = load_pipeline_config(name).pipeline_definition()
    tombstone, empty = _tuple(name)[1], _tuple(name)[3]
    for record, choice in zip((tombstone, empty), CHOICE[name], strict=True):
        if choice == "skip":
            assert definition.process([record]) == definition.process([])
        else:
            with pytest.raises(PoisonRecord) as info:
                definition.process([record])
            assert info.value.reason.startswith(choice), info.value.reason
            assert info.value.offset == record.offset


@pytest.mark.parametrize("name", sorted(CHOICE))
def test_reference_agrees_with_what_the_lane_stores(name: str) -> None:
    """The lane isolates the poison and stores the good records' result; reconcile's
    reference over the same records must read the same."""
    config = load_pipeline_config(name)
    definition = config.pipeline_definition()
    records = _tuple(name)
    out = isolate(
        records,
        definition.process,
        combine=combiner_of(definition),
        is_poison=lambda e: isinstance(e, PoisonRecord),
    )
    poisoned = {records[p.index].offset for p in out.poison}
    skipped = [i for i, c in ((1, CHOICE[name][0]), (3, CHOICE[name][1])) if c != "skip"]
    assert poisoned == {records[i].offset for i in skipped}
    good = [r for r in records if r.offset not in poisoned]
    assert reference_of(definition, records) == reference_of(definition, good)
    assert reference_of(definition, good) == reference_of(definition, [r for r in good if r.value])
    if name == "wordcount":  # a mapping of counts: the stored result is the reference
        assert dict(out.result) == dict(reference_of(definition, records))
    else:  # rows: one per good record
        assert len(out.result) == 2


# -- through a lane: the DLQ and replays keep what was read -----------------------------------

HEADERS = (("trace", b"t-1"), ("trace", b"t-2"), ("null", None))


def test_an_envelope_keeps_a_tombstone_and_the_headers() -> None:
    for payload in (None, b"", b"\x00v"):
        env = Envelope("p.eden", 1, 7, payload, 2, "boom", 1.5, b"k", 99, HEADERS)
        again = decode_envelope(encode_envelope(env))
        assert again == env
        assert again.payload is payload or again.payload == payload
    old = Envelope("p.eden", 1, 7, b"v", 1, "e", 0.0).to_dict()
    assert "headers" not in old  # the wire form of a record without headers is unchanged
    assert Envelope.from_dict(old).headers == ()
    with pytest.raises(EnvelopeError, match=r"'headers' must be a list of \[name, base64"):
        Envelope.from_dict({**old, "headers": [["a"]]})
    with pytest.raises(EnvelopeError, match=r"'headers' must be a tuple of \(str, bytes"):
        Envelope("p.eden", 1, 7, b"v", 1, "e", 0.0, headers=(("a", "text"),))  # type: ignore[arg-type]


def test_a_lane_sends_a_poison_tombstone_to_the_dlq_as_a_tombstone_with_key_and_headers(
    tmp_path: Path,
) -> None:
    """logetl refuses a tombstone and an empty value: both reach the DLQ as they were read
    (a null value stays null), with their keys and headers; the good line is stored."""
    settings = flow_settings(tmp_path, definition="flowctl.pipelines.logetl")
    io = FakeLaneIO()
    good = GOOD["logetl"][0]
    io.append(
        EDEN,
        0,
        [good, None, b""],
        extras=[(b"k0", list(HEADERS)), (b"k1", list(HEADERS)), (None, None)],
    )
    (part,) = decode_plan(
        encode_plan(EDEN, 3, [Dispatch(0, TupleRange(EDEN, 0, 0, 3), 7, False, "demo.replay.a")],
                    "demo"),
        EDEN,
        "demo",
    )  # fmt: skip
    rows = list(run_lane(settings, part, io))
    assert [(r[3], r[4]) for r in rows] == [("acked", 1)]
    dead = [decode_envelope(v) for v in io.produced["demo.dlq"]]
    assert [(e.offset, e.payload, e.key, e.headers) for e in dead] == [
        (1, None, b"k1", HEADERS),
        (2, b"", None, ()),
    ]
    assert [e.error.split(": ", 2)[-1] for e in dead] == ["empty record (no value)", "empty line"]


def test_a_replayed_record_reaches_the_definition_with_its_headers(tmp_path: Path) -> None:
    settings = flow_settings(tmp_path)  # wordcount: a tombstone counts nothing, acked
    io = FakeLaneIO()
    env = Envelope(EDEN, 1, 41, None, 1, "earlier", 0.0, b"k", 5, HEADERS)
    io.append("demo.replay.b", 0, [encode_envelope(env)])
    (part,) = decode_plan(
        encode_plan(EDEN, 3, [Dispatch(0, TupleRange("demo.replay.b", 0, 0, 1), 7, True,
                                       "demo.replay.a")], "demo"),
        EDEN,
        "demo",
    )  # fmt: skip
    seen: list[Record] = []
    definition = load_pipeline_config(settings.config_path).pipeline_definition()
    process = definition.process

    def spy(records: list[Record]) -> object:
        seen.extend(records)
        return process(records)

    definition.process = spy
    try:
        rows = list(run_lane(settings, part, io))
    finally:
        definition.process = process
    assert [r[3] for r in rows] == ["acked"]
    assert seen == [Record(EDEN, 1, 41, 5, None, b"k", HEADERS)]
