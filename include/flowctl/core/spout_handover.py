"""The spout's side of an overlapped handover (:mod:`flowctl.core.handover`).

Mixed into :class:`~flowctl.core.spout.Spout` (whose attributes it uses): blue hands
green the Eden tuples it cut and did not dispatch; green, once blue is gone, dispatches
blue's leftovers before new data, except the tuples it holds itself.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from .tuples import TupleRange


class SpoutHandover:
    """What a spout holds, and taking over a gone topology's leftovers."""

    _retry: deque[tuple[TupleRange, int]]
    _gaps: deque[TupleRange]
    _flights: Mapping[str, object]  # tuple id -> its flight (only the ids are read here)
    _open: dict[str, TupleRange]

    def buffered_tuples(self) -> list[TupleRange]:
        """Tuples cut and waiting for a lane (a blue hands its Eden ones to green)."""
        return [t for t, _ in self._retry] + list(self._gaps)

    def held_ids(self) -> set[str]:
        """Ids of tuples this spout will still resolve: in flight, buffered, processed."""
        return {*self._flights, *(t.id for t in self.buffered_tuples()), *self._open}

    def take_over(self, ranges: Iterable[TupleRange]) -> int:
        """Dispatch ``ranges`` (a gone blue's leftovers) before new data; returns how many."""
        taken = [t for t in ranges if t.id not in self.held_ids()]
        self._gaps.extend(taken)
        return len(taken)
