"""Tombstones (a null value) and empty values in the three shipped pipelines.

Foreign producers write both: a tombstone is a compacted topic's delete marker, an empty
value what a producer sends with no payload. Each pipeline makes its documented choice
(docs/flow-control.md, "What is read"), never a ``TypeError`` that would turn into
replays, and its reference agrees with what the lane does with the tuple: the isolated
good records' result counts, the poison goes to the DLQ.
"""

from __future__ import annotations

import json

import pytest

from flowctl.core.isolation import isolate
from flowctl.loggen import labelled_lines
from flowctl.pipelines import clickstream
from flowctl.pipelines.base import PoisonRecord, Record, combiner_of, reference_of
from flowctl.pipelines.config import load_pipeline_config

T0 = 1_767_225_600_000
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
