"""Poison isolation inside a lane: the good records of a failing tuple still count.

A tuple fails as a whole when one of its records is malformed: ``process`` raises the
pipeline's poison exception for the tuple. Replaying all of its records one by one
(SPEC D) is correct but turns a storm of malformed input into a storm of one-record
replays. :func:`isolate` instead finds the poison records inside the lane:

* it re-runs ``process`` on parts of the tuple: around the record the exception names
  (``locate``), else on the two halves (bisection), until every part either returns a
  result or is one record that raises the poison exception *alone* (proven poison);
* the results of the good parts are merged with ``combine`` in record order, so the
  tuple's good records are applied in the same batch as if processed without the
  poison ones (a definition's ``process`` is deterministic and has no side effects,
  ``flowctl.pipelines.base``);
* a part that raises anything else (an error of the moment, a timeout) is *transient*:
  its records keep SPEC D's replay semantics, the lane does not guess further.

Cost: a tuple without poison costs one call. Bisection costs at most
``1 + 2 p ceil(log2 n)`` calls for ``p`` poison records in ``n`` (each poison record lies
on one path of halvings, and each halving of that path makes two calls); with
``locate`` naming the record, three calls per poison record (the part before it, the
record alone, the rest).
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .spout_contract import Outcome
from .tuples import TupleRange

__all__ = [
    "Failure",
    "Isolation",
    "Item",
    "Poisoned",
    "Route",
    "Verdict",
    "isolate",
    "locate_by_offset",
    "short_trace",
    "verdict",
]

T = TypeVar("T")
#: The most characters of a failure's traceback a lane reports (see :func:`short_trace`).
MAX_TRACE_CHARS = 800

#: ``locate(exc, part)``: the index in ``part`` of the record ``exc`` names, or ``None``.
Locate = Callable[[BaseException, Sequence[Any]], "int | None"]


@dataclass(frozen=True)
class Poisoned:
    """A record proven poison: it raised the poison exception when processed alone."""

    index: int  # position in the tuple
    reason: str


@dataclass(frozen=True)
class Failure:
    """A part ``[start, stop)`` of the tuple whose ``process`` call failed transiently."""

    start: int
    stop: int
    error: BaseException


@dataclass(frozen=True)
class Isolation(Generic[T]):
    """What :func:`isolate` found in one tuple; indices are positions in the tuple.

    ``result`` is the combined result of the ``good`` records (``None`` when there are
    none); ``poison`` lists the proven poison records in order; ``transient`` the parts
    that failed transiently (their records are neither good nor poison); ``calls`` counts
    the ``process`` calls made.
    """

    result: Any
    good: tuple[int, ...]
    poison: tuple[Poisoned, ...]
    transient: tuple[Failure, ...]
    calls: int

    @property
    def clean(self) -> bool:
        """Every record is either good or proven poison: nothing needs a replay."""
        return not self.transient

    @property
    def transient_indices(self) -> tuple[int, ...]:
        return tuple(i for f in self.transient for i in range(f.start, f.stop))


def locate_by_offset(exc: BaseException, part: Sequence[Any]) -> int | None:
    """The index of the record whose ``offset`` the exception names (``exc.offset``).

    A hint only: :func:`isolate` still proves that record poison by processing it alone.
    """
    offset = getattr(exc, "offset", None)
    if offset is None:
        return None
    for i, record in enumerate(part):
        if getattr(record, "offset", None) == offset:
            return i
    return None


def isolate(
    records: Sequence[T],
    process: Callable[[list[T]], Any],
    *,
    combine: Callable[[Sequence[Any]], Any],
    is_poison: Callable[[BaseException], bool],
    locate: Locate | None = locate_by_offset,
) -> Isolation[T]:
    """Process ``records``, isolating the poison ones (see the module docstring).

    ``process`` is called with contiguous slices of ``records`` (a list); ``combine``
    merges the results of consecutive good slices, in record order, into the result the
    good records would have had processed together; ``is_poison`` says whether an
    exception proves its records malformed (``PoisonRecord``). Only ``Exception`` is
    caught: a ``KeyboardInterrupt`` or ``SystemExit`` ends the lane as it would without
    isolation.
    """
    good_parts: list[tuple[int, int, Any]] = []
    poison: list[Poisoned] = []
    transient: list[Failure] = []
    calls = 0
    stack = [(0, len(records))]  # parts still to process, the leftmost on top
    while stack:
        lo, hi = stack.pop()
        calls += 1
        try:
            result = process(list(records[lo:hi]))
        except Exception as exc:
            if not is_poison(exc):
                transient.append(Failure(lo, hi, exc))
                continue
            if hi - lo == 1:
                poison.append(Poisoned(lo, str(getattr(exc, "reason", exc))))
                continue
            stack.extend(reversed(_split(lo, hi, exc, records, locate)))
            continue
        good_parts.append((lo, hi, result))
    good_parts.sort(key=lambda p: p[0])
    good = tuple(i for lo, hi, _ in good_parts for i in range(lo, hi))
    if len(good_parts) == 1:
        combined = good_parts[0][2]
    elif good_parts:
        combined = combine([r for _, _, r in good_parts])
    else:
        combined = None
    return Isolation(
        combined,
        good,
        tuple(sorted(poison, key=lambda p: p.index)),
        tuple(sorted(transient, key=lambda f: f.start)),
        calls,
    )


def _split(
    lo: int, hi: int, exc: BaseException, records: Sequence[Any], locate: Locate | None
) -> list[tuple[int, int]]:
    """The parts to try next for a failing part ``[lo, hi)`` of two or more records:
    around the named record (it alone, and what lies on either side), else the halves."""
    named = None if locate is None else locate(exc, records[lo:hi])
    if named is not None and 0 <= named < hi - lo:
        at = lo + named
        return [(a, b) for a, b in ((lo, at), (at, at + 1), (at + 1, hi)) if a < b]
    mid = (lo + hi) // 2
    return [(lo, mid), (mid, hi)]


# -- what becomes of an isolated tuple ----------------------------------------------------------


@dataclass(frozen=True)
class Item:
    """One MRWQ outcome item of the tuple: the range it claims, its outcome and value.

    ``outcome`` is ``applied`` (``value``: the result), ``replayed`` or ``dlq`` (``value``:
    ``{"error": ...}``); ``replay`` marks a one-record claim nested in the tuple's
    ``replayed`` row (``mrwq_result(..., replay=True)``), ``isolated`` one nested in its
    ``applied`` row (``mrwq_result(..., isolated=True)``: the claim rules tell it from a
    repeat of a one-record tuple by this mark, :mod:`flowctl.core.applied_rules`).
    """

    range: TupleRange
    outcome: str
    value: Any
    replay: bool = False
    isolated: bool = False


@dataclass(frozen=True)
class Route:
    """Where one record of the tuple goes: the DLQ now (``dead``) or the From replay topic."""

    index: int
    dead: bool
    reason: str


@dataclass(frozen=True)
class Verdict:
    """The lane's outcome for one isolated Eden tuple: what to report, store and route.

    Items are in the order to append them (the covering row first, so the flusher claims
    it before the one-record rows nested in it); routes are produced before the items.
    """

    outcome: Outcome
    items: tuple[Item, ...]
    routes: tuple[Route, ...]
    good: int
    error: str
    #: The innermost frames of a transient failure's traceback (:func:`short_trace`), so a
    #: halted topology's log can say where the pipeline's code raised; ``""`` otherwise.
    trace: str = ""

    @property
    def dead(self) -> int:
        return sum(1 for r in self.routes if r.dead)


def verdict(
    t: TupleRange,
    offsets: Sequence[int],
    found: Isolation[Any],
    *,
    is_timeout: Callable[[BaseException], bool],
) -> Verdict:
    """Map :func:`isolate`'s findings on Eden tuple ``t`` (its records' ``offsets``) to the
    lane's outcome, MRWQ items and record routes (docs/flow-control.md, "Poison isolation").

    - nothing transient, some good (or no record at all): ``acked``; one ``applied`` item
      for ``t`` with the good records' result, and a one-record ``dlq`` item nested in it
      per poison record;
    - nothing transient, nothing good: ``poison``; one ``dlq`` item for ``t``;
    - anything transient: SPEC D for the tuple: ``replayed`` (``timed_out`` if a part
      timed out), one ``replayed`` item for ``t``, every record that is not proven poison
      to From, and a nested one-record ``dlq`` item per poison record.

    Proven poison records go to the DLQ at once in every case.
    """
    if len(offsets) != len(found.good) + len(found.poison) + len(found.transient_indices):
        raise ValueError(
            f"verdict: {len(offsets)} offset(s) for tuple {t.id}, but the isolation accounts "
            f"for {len(found.good)} good, {len(found.poison)} poison, "
            f"{len(found.transient_indices)} transient record(s)"
        )

    def one(i: int) -> TupleRange:
        return TupleRange(t.topic, t.partition, offsets[i], offsets[i] + 1)

    dead = tuple(Route(p.index, True, f"poison: PoisonRecord: {p.reason}") for p in found.poison)
    first_poison = dead[0].reason if dead else ""
    if found.clean and (found.good or not found.poison):  # an empty tuple has a result too
        nested = tuple(
            Item(one(p.index), "dlq", {"error": p.reason[:300]}, isolated=True)
            for p in found.poison
        )
        items = (Item(t, "applied", found.result), *nested)
        return Verdict(Outcome.ACKED, items, dead, len(found.good), first_poison)
    if found.clean:
        item = Item(t, "dlq", {"error": first_poison[:300]})
        return Verdict(Outcome.POISON, (item,), dead, 0, first_poison)
    failure = found.transient[0].error
    error = f"{type(failure).__name__}: {failure}"
    timed_out = any(is_timeout(f.error) for f in found.transient)
    why = {i: f"{type(f.error).__name__}: {f.error}" for f in found.transient
           for i in range(f.start, f.stop)}  # fmt: skip
    replayed = tuple(
        Route(i, False, why.get(i, f"replayed with its tuple: {error}"))
        for i in sorted(set(found.good) | set(why))
    )
    nested = tuple(
        Item(one(p.index), "dlq", {"error": p.reason[:300]}, replay=True) for p in found.poison
    )
    items = (Item(t, "replayed", {"error": error[:300]}), *nested)
    outcome = Outcome.TIMED_OUT if timed_out else Outcome.REPLAYED
    routes = tuple(sorted(dead + replayed, key=lambda r: r.index))
    return Verdict(outcome, items, routes, 0, error, short_trace(failure))


def short_trace(exc: BaseException, limit: int = MAX_TRACE_CHARS) -> str:
    """The traceback of ``exc``, innermost frames kept, at most ``limit`` characters.

    A lane reports it with the tuple's result; the driver logs it once when the failures
    halt the topology (a code error): the user needs the file and line that raised, and the
    innermost frames are those, so whole outer lines of a long traceback are what gets cut
    (its first line stays, then ``  ...``).
    """
    lines = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).splitlines()
    text = "\n".join(lines)
    if len(text) <= limit:
        return text
    head, kept = [lines[0], "  ..."], []
    room = limit - sum(len(h) + 1 for h in head)
    for line in reversed(lines[1:]):
        if len(line) + 1 > room:
            break
        kept.append(line)
        room -= len(line) + 1
    if not kept:  # one line longer than the limit: its end, which names the error
        return "\n".join(head) + "\n" + lines[-1][-max(room - 1, 0) :]
    return "\n".join(head + kept[::-1])
