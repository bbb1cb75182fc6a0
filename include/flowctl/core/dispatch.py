"""Dispatch policies: which lane gets the next tuple (SPEC A; seed 000_7245d8bf028e7bc3).

The seed's spout hands tuples round robin to the lanes whose window has room; it
names "send to the idlest lane" as future work. Both are here, selectable by name
(:func:`make_policy`); the spout (:mod:`flowctl.core.spout`) keeps the send buffer
and asks a policy for each tuple's lane among the lanes with a free slot:

* ``round_robin`` (the seed): the next lane in cyclic order with a free slot.
* ``least_loaded`` (**beyond**): the lane with the lowest expected completion
  time ``(in_flight + 1) / rate``, where ``rate`` (tuples/s) is measured per
  lane from its acks by Little's law: a tuple that found ``ahead`` tuples in
  flight and came back after ``rt`` seconds says ``rate ~ (ahead + 1) / rt``
  (an EWMA of those samples, kept by the spout). A fail or timeout halves the
  lane's rate: it is evidence that the lane is not delivering. A lane with no
  measurement yet gets the mean of the measured lanes (or 1 tuple/s when none
  is measured).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol


class LaneLoad(NamedTuple):
    """What a policy sees of one lane with at least one free slot (a named tuple: the
    spout builds one per lane for every tuple it dispatches, so it must be cheap)."""

    lane: int
    free_slots: int
    in_flight: int
    rate: float | None


class DispatchPolicy(Protocol):
    """Chooses one lane among candidates (never empty) for the next tuple."""

    name: str

    def choose(self, candidates: Sequence[LaneLoad], lanes: int) -> int: ...

    def state(self) -> int: ...


class RoundRobin:
    """The seed's policy: cyclic order over lanes with a free slot."""

    name = "round_robin"

    def __init__(self, cursor: int = -1) -> None:
        self._cursor = cursor

    def choose(self, candidates: Sequence[LaneLoad], lanes: int) -> int:
        free = {c.lane for c in candidates}
        for step in range(1, lanes + 1):
            lane = (self._cursor + step) % lanes
            if lane in free:
                self._cursor = lane
                return lane
        raise ValueError(f"RoundRobin.choose: no candidate among lanes 0..{lanes - 1}")

    def state(self) -> int:
        return self._cursor


class LeastLoaded:
    """Lowest expected completion time ``(in_flight + 1) / rate``; ties -> fewer in
    flight, then lower lane index (deterministic)."""

    name = "least_loaded"

    def choose(self, candidates: Sequence[LaneLoad], lanes: int) -> int:
        known = [c.rate for c in candidates if c.rate is not None and c.rate > 0]
        default = sum(known) / len(known) if known else 1.0

        def ect(c: LaneLoad) -> tuple[float, int, int]:
            rate = c.rate if c.rate is not None and c.rate > 0 else default
            return ((c.in_flight + 1) / rate, c.in_flight, c.lane)

        return min(candidates, key=ect).lane

    def state(self) -> int:
        return -1


POLICIES: tuple[str, ...] = (RoundRobin.name, LeastLoaded.name)


def make_policy(name: str, state: int = -1) -> DispatchPolicy:
    """The policy called ``name`` (``state`` from a snapshot); a clear error lists the
    known names."""
    if name == RoundRobin.name:
        return RoundRobin(state)
    if name == LeastLoaded.name:
        return LeastLoaded()
    raise ValueError(
        f"dispatch policy: unknown name {name!r}; choose one of {', '.join(sorted(POLICIES))}"
    )
