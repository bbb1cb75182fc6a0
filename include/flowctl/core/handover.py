"""The overlapped blue-green handover, pure (docs/flow-control.md "Overlapped handover").

Sequential replacement waits until blue has nothing in flight before green admits: the
output pauses for a trigger and a batch. Overlapped, blue publishes its *admission
frontier* the moment it stops admitting, and green admits from it at once while blue
finishes what it holds. Ranges are then owned by exactly one side:

* blue owns the Eden tuples it cut (below the frontier) until it is gone (DRAINED,
  STOPPED, FAILED, or its heartbeat older than the lease);
* green owns everything from the frontier on, blue's buffered tuples (``handed``: cut,
  never dispatched), the replay topics' pointer and reads, and, once blue is gone, every
  hole left below the frontier (:func:`sweep`: what blue failed, timed out or lost).

Exactly once does not rest on the split: every result is claimed under its range in
``applied_ranges`` and a repeat is skipped, so a wrong guess (blue declared gone while
alive, a replay record read by both) costs repeated work, never a double count. The
split is what keeps the repeats rare. The durable checkpoint is one contiguous prefix
over the union of both sides' applied ranges (:func:`union_checkpoint`, what the
flusher's ``advance_checkpoint`` computes in the database).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from .clock import Clock
from .eden_cursor import aligned
from .replay import ReplaySnapshot
from .tuples import TopicPartition, TupleRange

__all__ = [
    "BLUE_GONE_STATES",
    "Frontier",
    "GreenAction",
    "GreenHandover",
    "GreenPhase",
    "GreenStart",
    "blue_gone",
    "green_start",
    "green_window",
    "sweep",
    "union_checkpoint",
]

#: Blue states after which it holds nothing (its in-flight tuples are done or abandoned).
BLUE_GONE_STATES = frozenset({"DRAINED", "STOPPED", "FAILED"})


def _int(name: str, value: Any, lo: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ValueError(f"{name}={value!r} must be an integer >= {lo}")
    return value


def _str(name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name}={value!r} must be a non-empty string")
    return value


@dataclass(frozen=True)
class Frontier:
    """Blue's admission frontier, published once when it stops admitting.

    :param topic: the Eden topic.
    :param eden: per partition, the first offset blue never cut.
    :param replay: blue's replay pointer and *committed* read positions: green reads
        from there, so the replay records blue had in flight are read again (applied
        once; see the module docstring) and nothing blue read is left unowned.
    :param handed: Eden tuples blue cut but never dispatched (retries, gaps): green's.
    :param window: blue's median lane window (tuples) when it stopped admitting, the size
        its lanes served within the latency target; ``None`` when unknown (an older blue).
        Green's lanes start from it (:func:`green_window`), not from the batch budget.
    """

    topic: str
    eden: tuple[tuple[int, int], ...]
    replay: ReplaySnapshot
    handed: tuple[TupleRange, ...] = ()
    window: int | None = None

    def __post_init__(self) -> None:
        _str("frontier.topic", self.topic)
        for partition, offset in self.eden:
            _int("frontier.eden partition", partition)
            _int(f"frontier.eden[{partition}]", offset)
        for t in self.handed:
            if t.topic != self.topic:
                raise ValueError(f"frontier.handed {t.id} is not a tuple of {self.topic!r}")
        if self.window is not None:
            _int("frontier.window", self.window, 1)

    def position(self, partition: int) -> int:
        """First offset of ``partition`` blue never cut (0: it cut nothing there)."""
        return dict(self.eden).get(partition, 0)

    def owner(self, t: TupleRange) -> str:
        """``"blue"`` or ``"green"``: who dispatches Eden tuple ``t`` while blue lives."""
        if t.topic == self.topic and t.end <= self.position(t.partition) and t not in self.handed:
            return "blue"
        return "green"

    def to_dict(self) -> dict[str, Any]:
        r = self.replay
        return {
            "topic": self.topic,
            "eden": [[p, o] for p, o in self.eden],
            "replay": {
                "pipeline": r.pipeline,
                "from": r.from_topic,
                "swaps": r.swaps,
                "positions": [list(x) for x in r.positions],
            },
            "handed": [[t.partition, t.start, t.end] for t in self.handed],
            "window": self.window,
        }

    @classmethod
    def from_dict(cls, data: Any) -> Frontier:
        """Decode :meth:`to_dict`; a foreign value is refused naming the field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"frontier={data!r:.200} must be a JSON object")
        topic = _str("frontier.topic", data.get("topic"))
        try:
            eden = tuple((int(p), int(o)) for p, o in data.get("eden", []))
            r = data["replay"]
            replay = ReplaySnapshot(
                _str("frontier.replay.pipeline", r.get("pipeline")),
                _str("frontier.replay.from", r.get("from")),
                tuple((str(t), int(p), int(o)) for t, p, o in r.get("positions", [])),
                _int("frontier.replay.swaps", r.get("swaps")),
            )
            handed = tuple(TupleRange(topic, int(p), int(s), int(e)) for p, s, e in data["handed"])
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"frontier={data!r:.200} is malformed: {exc!r}") from None
        return cls(topic, eden, replay, handed, data.get("window"))

    @classmethod
    def of(
        cls,
        topic: str,
        positions: Mapping[TopicPartition, int],
        replay: ReplaySnapshot,
        buffered: Iterable[TupleRange],
        windows: Iterable[int] = (),
    ) -> Frontier:
        """Blue's frontier from its spout: cut positions, replay snapshot, buffer, and its
        lanes' windows (their median is kept)."""
        eden = tuple(sorted((tp.partition, n) for tp, n in positions.items() if tp.topic == topic))
        handed = tuple(sorted(t for t in buffered if t.topic == topic))
        sizes = sorted(w for w in windows if w >= 1)
        window = sizes[len(sizes) // 2] if sizes else None
        return cls(topic, eden, replay, handed, window)


@dataclass(frozen=True)
class GreenStart:
    """What green's spout starts from at the handover (cf. a rebuild from the database)."""

    positions: dict[TopicPartition, int]
    gaps: list[TupleRange]
    replay: ReplaySnapshot


def green_start(
    frontier: Frontier,
    checkpoints: Mapping[TopicPartition, int],
    durable_ends: Mapping[TopicPartition, int],
    holes: Iterable[TupleRange],
    replay: ReplaySnapshot | None,
) -> GreenStart:
    """Green's start at the handover.

    ``checkpoints``, ``durable_ends`` (end of the last durable range) and ``holes`` (of
    ``applied_ranges`` below it) are what the database says now; ``replay`` its stored
    replay snapshot. Green cuts from the frontier (or from what is durable, if an earlier
    generation got further), dispatches blue's handed tuples and any hole at or beyond
    the frontier (nobody alive owns those) first, and reads the replay topics from the
    later of blue's and the database's committed positions.
    """
    positions: dict[TopicPartition, int] = {}
    tps = {
        *checkpoints,
        *durable_ends,
        *(TopicPartition(frontier.topic, p) for p, _ in frontier.eden),
    }
    for tp in tps:
        if tp.topic != frontier.topic:
            continue
        positions[tp] = max(
            frontier.position(tp.partition), durable_ends.get(tp, 0), checkpoints.get(tp, 0)
        )
    gaps = [t for t in frontier.handed if t.end > checkpoints.get(t.topic_partition, 0)]
    for h in holes:
        if h.topic == frontier.topic and h.end > frontier.position(h.partition):
            start = max(h.start, frontier.position(h.partition))
            gaps.append(TupleRange(h.topic, h.partition, start, h.end))
    return GreenStart(positions, gaps, _later_replay(frontier.replay, replay))


def green_window(frontier: Frontier | None, w_init: int, w_min: int) -> int:
    """The window green's lanes start with at the handover.

    ``w_init`` (each lane's share of the batch budget) is right for a topology that
    starts alone; at a handover it makes green's first batch as long as the lane time
    budget allows, and that batch is the output pause (blue has stopped cutting). Green's
    lanes run the same operators as blue's, so blue's window measured what one lane serves
    within the latency target: green starts at half of it (its first batch commits within
    half a batch of blue's work after it starts) and the window's growth (at most doubling
    per round) brings it to the target after one batch. Never above ``w_init``, never
    below ``w_min``.
    """
    _int("w_init", w_init, 1)
    _int("w_min", w_min, 1)
    if frontier is None or frontier.window is None:
        return w_init
    return min(w_init, max(w_min, -(-frontier.window // 2)))


def _later_replay(a: ReplaySnapshot, b: ReplaySnapshot | None) -> ReplaySnapshot:
    """The replay snapshot with the later pointer and, per partition, the later position
    (both only ever move forward, so the later one is the truer one)."""
    if b is None:
        return a
    positions: dict[tuple[str, int], int] = {}
    for t, p, o in (*a.positions, *b.positions):
        positions[(t, p)] = max(o, positions.get((t, p), 0))
    newer = a if a.swaps >= b.swaps else b
    merged = tuple(sorted((t, p, o) for (t, p), o in positions.items()))
    return ReplaySnapshot(a.pipeline, newer.from_topic, merged, newer.swaps)


def sweep(
    frontier: Frontier,
    checkpoints: Mapping[TopicPartition, int],
    holes: Iterable[TupleRange],
    held: Iterable[str],
    tuple_size: int,
) -> list[TupleRange]:
    """Blue is gone: the holes below the frontier green must dispatch, on the tuple grid.

    ``holes`` are the database's unapplied ranges (after blue's results are flushed),
    ``held`` the tuple ids green has in flight, buffered or processed and not yet
    durable (its handed tuples among them): those are not dispatched twice.
    """
    _int("tuple_size", tuple_size, 1)
    busy = set(held)
    out: list[TupleRange] = []
    for h in holes:
        if h.topic != frontier.topic:
            continue
        lo = max(h.start, checkpoints.get(h.topic_partition, 0))
        hi = min(h.end, frontier.position(h.partition))
        if lo >= hi:
            continue
        out.extend(t for t in aligned(h.topic_partition, lo, hi, tuple_size) if t.id not in busy)
    return out


def union_checkpoint(base: int, applied: Iterable[tuple[int, int]]) -> int:
    """The durable checkpoint of a partition: from ``base``, the end of the contiguous
    prefix of the union of applied ranges (whoever applied them). A range beyond a hole
    waits until the hole is applied: the checkpoint never passes an unapplied record."""
    _int("base", base)
    position = base
    for start, end in sorted(applied):
        if start > position:
            break
        position = max(position, end)
    return position


def blue_gone(state: str | None, heartbeat_age_s: float | None, lease_s: float) -> bool:
    """Blue holds nothing any more: it says so (DRAINED and after), or it is silent.

    A silent blue (no heartbeat for ``lease_s``: killed, its host lost) may in truth be
    alive and slow; treating it as gone then only repeats its tuples (applied once).
    """
    if state in BLUE_GONE_STATES:
        return True
    return heartbeat_age_s is not None and heartbeat_age_s > lease_s


class GreenPhase(StrEnum):
    """Green's side of an overlapped handover."""

    WAITING = "waiting"  # activated: waiting for blue's frontier
    OVERLAP = "overlap"  # admitting from the frontier; blue finishes, blue's flusher runs
    OWNER = "owner"  # blue is gone: green flushes and owns every range


class GreenAction(StrEnum):
    """What green's driver does on a tick of :meth:`GreenHandover.step`."""

    WAIT = "wait"
    ADMIT_FROM_FRONTIER = "admit_from_frontier"  # rebuild from the frontier, admit
    ADMIT_ALL = "admit_all"  # blue vanished before publishing: sequential start
    TAKE_OVER = "take_over"  # start the flusher, then sweep blue's leftovers
    NONE = "none"


@dataclass
class GreenHandover:
    """Green's handover state machine: one :meth:`step` per control-loop tick.

    Green never starts the MRWQ flusher while blue may run its own (one flusher per
    namespace keeps the gap detection honest); blue flushes both sides' results during
    the overlap. ``lease_s`` is how long blue may be silent before it counts as gone.
    """

    blue: str
    clock: Clock
    lease_s: float
    phase: GreenPhase = GreenPhase.WAITING
    frontier: Frontier | None = None
    history: list[tuple[float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if isinstance(self.lease_s, bool) or not isinstance(self.lease_s, int | float):
            raise ValueError(f"lease_s={self.lease_s!r} must be a number > 0")
        if self.lease_s <= 0:
            raise ValueError(f"lease_s={self.lease_s!r} must be a number > 0")

    def _to(self, phase: GreenPhase, why: str) -> None:
        self.phase = phase
        self.history.append((self.clock.now(), f"{phase}: {why}"))

    def step(
        self, frontier: Frontier | None, blue_state: str | None, heartbeat_age_s: float | None
    ) -> GreenAction:
        """Advance on what the database says: blue's frontier, state and heartbeat age."""
        gone = blue_gone(blue_state, heartbeat_age_s, self.lease_s)
        if self.phase is GreenPhase.WAITING:
            if frontier is not None:
                self.frontier = frontier
                self._to(GreenPhase.OVERLAP, "frontier published")
                return GreenAction.ADMIT_FROM_FRONTIER
            if gone:
                self._to(GreenPhase.OWNER, f"blue gone ({blue_state}) before its frontier")
                return GreenAction.ADMIT_ALL
            return GreenAction.WAIT
        if self.phase is GreenPhase.OVERLAP and gone:
            self._to(GreenPhase.OWNER, f"blue gone ({blue_state})")
            return GreenAction.TAKE_OVER
        return GreenAction.NONE
