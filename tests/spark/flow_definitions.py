"""Pipeline definitions for the flow-controlled topology's tests (never shipped).

Both wrap the word count so results are checked against :func:`count_words`; a config
file (derived from the shipped wordcount one, whose ``[sink]`` stores the results) names
the modules :mod:`tests.spark.flow_def_poison` and :mod:`tests.spark.flow_def_slow`,
whose ``DEFINITION`` they are:

- :class:`Poisonous`: a record whose text contains ``POISON`` raises
  :class:`~flowctl.pipelines.base.PoisonRecord` (naming its offset), so it must end in
  the DLQ at once with its error; one containing ``BROKEN`` raises an ordinary error, so
  it must be replayed until ``max_attempts`` and then reach the DLQ; one containing
  ``SLEEPY`` outlasts the tuple deadline every time (timed out, replayed, then the DLQ);
  every other record is counted;
- :class:`BrokenCode`: a bug in the pipeline's code: every record raises the same
  ``AttributeError``, so the topology must halt (HALTED) and dead-letter nothing;
- :class:`SlowLane`: lane 0 sleeps ``SLOW_S`` per tuple, the others do not, so lane 0's
  round-trip times exceed the latency target and its window must end smaller;
- :class:`SleepyTuples` (:mod:`tests.spark.flow_def_sleepy`): every tuple sleeps
  ``SLEEPY_TUPLE_S``, so a micro-batch of a few tuples outlasts the liveness limit of a
  heartbeat (5 s).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from flowctl.pipelines.base import PoisonRecord, Record
from flowctl.pipelines.wordcount import DEFINITION as WORDCOUNT
from flowctl.spark.flow.deadline import current_lane

#: Seconds lane 0 of :class:`SlowLane` spends on every tuple.
SLOW_S = 0.25
#: Seconds :class:`Poisonous` spends on a record containing ``SLEEPY``.
SLEEPY_S = 2.0
#: Seconds :class:`SleepyTuples` spends on every tuple.
SLEEPY_TUPLE_S = 3.0


class _Wrapped:
    """The word count's reference around another ``process`` (no apply/stored: the
    config's ``[sink]`` provides them)."""

    name = "wordcount"

    def reference(self, values: Iterable[bytes | None]) -> Mapping[str, Any]:
        return WORDCOUNT.reference(values)


class Poisonous(_Wrapped):
    """Word count that refuses records containing ``POISON`` (a :class:`PoisonRecord`:
    DLQ at once) and fails on records containing ``BROKEN`` (an ordinary error: replayed
    until ``max_attempts``, then the DLQ)."""

    def process(self, records: Sequence[Record]) -> dict[str, int]:
        for r in records:
            if r.value is not None and b"POISON" in r.value:
                raise PoisonRecord(f"record at offset {r.offset} is poison", offset=r.offset)
            if r.value is not None and b"BROKEN" in r.value:
                raise RuntimeError(f"cannot count the record at offset {r.offset}")
            if r.value is not None and b"SLEEPY" in r.value:
                time.sleep(SLEEPY_S)  # longer than the test's tuple_timeout_s
        return WORDCOUNT.process(records)


class BrokenCode(_Wrapped):
    """Word count with a bug: it reads an attribute records do not have."""

    def process(self, records: Sequence[Record]) -> dict[str, int]:
        return WORDCOUNT.process([r.text for r in records])  # type: ignore[attr-defined]


class SlowLane(_Wrapped):
    """Word count whose lane 0 is slow on purpose."""

    def process(self, records: Sequence[Record]) -> dict[str, int]:
        if current_lane() == 0:
            time.sleep(SLOW_S)
        return WORDCOUNT.process(records)


class SleepyTuples(_Wrapped):
    """Word count that sleeps ``SLEEPY_TUPLE_S`` per tuple: micro-batches of minutes in
    miniature."""

    def process(self, records: Sequence[Record]) -> dict[str, int]:
        time.sleep(SLEEPY_TUPLE_S)
        return WORDCOUNT.process(records)
