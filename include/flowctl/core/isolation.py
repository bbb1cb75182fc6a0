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

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

__all__ = [
    "Failure",
    "Isolation",
    "Poisoned",
    "isolate",
    "locate_by_offset",
]

T = TypeVar("T")

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
