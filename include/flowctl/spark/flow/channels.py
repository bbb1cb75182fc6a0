"""The memcached channels between the planner, the lanes and the driver, typed.

Every key carries the topology id (``flow.<topology>``, :func:`namespace`). Nothing in a
channel is needed for correctness: losing them in a memcached restart only costs speed.

- ``<ns>:ctl`` driver -> planner: :class:`Control` (``admit``, ``rebuild``); the driver
  rewrites it every second, so it survives a memcached restart; a new ``rebuild`` number
  makes the planner rebuild its spout from the database (gap repair, activation);
- ``<ns>:state`` planner -> driver: :class:`SpoutState` (in flight, buffered, admitting,
  backpressure levels, lane windows, cumulative counters);
- ``<ns>:rows`` planner -> driver: the closed metrics windows, a list of
  :class:`flowctl.core.metrics_row.MetricsRow` in its wire form (the one metrics window
  type: its ``to_dict`` / ``from_dict``); only the driver writes them to
  ``metrics_windows``;
- ``<ns>:fb:<seq>:<lane>`` lane -> planner: :class:`LaneFeedback`, the per-tuple outcomes
  of batch ``seq`` and the log ends the lane's fetches saw (stored by
  :class:`~flowctl.adapters.memcached_store.LaneFeedback`), read one batch behind.

Each message is a frozen dataclass with ``encode()`` (plain JSON types) and ``decode()``
(which raises ``ValueError`` naming the field, so a foreign value is refused loudly).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from flowctl.core.isolation import MAX_TRACE_CHARS
from flowctl.core.metrics_row import MetricsRow
from flowctl.core.spout_contract import LaneResult, Outcome

#: How long the planner's published state and rows live in memcached (seconds).
STATE_TTL_S = 3600


def namespace(topology_id: str) -> str:
    """The memcached namespace of a topology's control channels."""
    return f"flow.{topology_id}"


def control_key(ns: str) -> str:
    return f"{ns}:ctl"


def state_key(ns: str) -> str:
    return f"{ns}:state"


def rows_key(ns: str) -> str:
    return f"{ns}:rows"


def call_key(ns: str) -> str:
    """The planner's call mark, written at the start of every ``latestOffset`` (before it
    reads the control key): :class:`CallMark`."""
    return f"{ns}:call"


def _object(name: str, data: Any) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ValueError(f"{name} must be a JSON object, got {data!r:.200}")
    return data


def _field(name: str, data: Mapping[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    value = data.get(key)
    if isinstance(value, bool) and kind in (int, float, (int, float)):
        raise ValueError(f"{name}.{key}={value!r} is not a number")
    if not isinstance(value, kind):
        raise ValueError(f"{name}.{key}={value!r:.200} is not {kind}")
    return value


def _optional(name: str, data: Mapping[str, Any], key: str, kind: Any) -> Any:
    return None if data.get(key) is None else _field(name, data, key, kind)


_NUMBER = (int, float)


@dataclass(frozen=True)
class Control:
    """Driver -> planner: admit or hold admission; ``rebuild`` changes ask for a rebuild.

    An overlapped handover's green also gets blue's ``frontier`` (a rebuild starts from
    it while ``sweep`` is unset) and, once blue is gone, a ``sweep`` number: its change
    makes the planner dispatch what blue left unapplied below the frontier. ``lanes`` is
    the topology's parallelism when an activation changed it (a warm standby takes the
    replacement's): the planner's next rebuild plans that many lanes. ``gaps`` counts
    the rebuilds asked for because MRWQ items were lost, ``gap`` says why the last one
    was (the planner shows the topology RECOVERING with it, and counts it on its windows).
    """

    admit: bool
    rebuild: int | None = None
    frontier: dict[str, Any] | None = None
    sweep: int | None = None
    lanes: int | None = None
    gaps: int = 0
    gap: str | None = None

    def encode(self) -> dict[str, Any]:
        return {
            "admit": self.admit,
            "rebuild": self.rebuild,
            "frontier": self.frontier,
            "sweep": self.sweep,
            "lanes": self.lanes,
            "gaps": self.gaps,
            "gap": self.gap,
        }

    @classmethod
    def decode(cls, data: Any) -> Control:
        d = _object("control", data)
        return cls(
            _field("control", d, "admit", bool),
            _optional("control", d, "rebuild", int),
            _optional("control", d, "frontier", dict),
            _optional("control", d, "sweep", int),
            _optional("control", d, "lanes", int),
            _optional("control", d, "gaps", int) or 0,
            _optional("control", d, "gap", str),
        )


@dataclass(frozen=True)
class CallMark:
    """Planner -> driver: ``latestOffset`` number ``call`` of planner ``planner`` (a token
    per planner object) has begun, written before the call reads the control key.

    The admission fence of an overlapped handover rests on the order of the two writes
    and two reads: the driver writes ``admit: false``, then reads this mark; each call
    writes this mark, then reads the control key. With one memcached server, a call whose
    mark the driver did not see reads ``admit: false``, so the state published by the
    call the driver saw (or a later one of the same planner) holds every tuple blue will
    ever cut: blue's frontier, at once, without waiting for its running batch.
    """

    planner: str
    call: int

    def encode(self) -> dict[str, Any]:
        return {"planner": self.planner, "call": self.call}

    @classmethod
    def decode(cls, data: Any) -> CallMark:
        d = _object("call mark", data)
        return cls(_field("call mark", d, "planner", str), _field("call mark", d, "call", int))


@dataclass(frozen=True)
class SpoutState:
    """Planner -> driver: the spout's figures after each ``latestOffset``."""

    at: float
    admit: bool
    rebuild: int | None
    in_flight: int
    buffered: int
    pending_batches: int
    mrwq: int
    levels: dict[str, int]
    lanes: list[dict[str, Any]]
    counters: dict[str, int]
    at_risk: int
    seq: int
    warmups: int
    log_empty: bool
    #: The spout's frontier after this call (:class:`flowctl.core.handover.Frontier`):
    #: blue's once the call is fenced (:class:`CallMark`) or admission is off.
    frontier: dict[str, Any] | None = None
    #: The call that published this state (:class:`CallMark`'s two fields).
    planner: str | None = None
    call: int | None = None

    def encode(self) -> dict[str, Any]:
        # Its fields hold only plain JSON types already: a shallow dict serves (the planner
        # publishes one every batch; ``dataclasses.asdict`` deep-copies every lane's gauges).
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @classmethod
    def decode(cls, data: Any) -> SpoutState:
        d = _object("state", data)

        def f(key: str, kind: type | tuple[type, ...]) -> Any:
            return _field("state", d, key, kind)

        return cls(
            at=float(f("at", _NUMBER)),
            admit=f("admit", bool),
            rebuild=_optional("state", d, "rebuild", int),
            in_flight=f("in_flight", int),
            buffered=f("buffered", int),
            pending_batches=f("pending_batches", int),
            mrwq=f("mrwq", int),
            levels=dict(f("levels", dict)),
            lanes=[dict(_object("state.lanes[]", lane)) for lane in f("lanes", list)],
            counters=dict(f("counters", dict)),
            at_risk=f("at_risk", int),
            seq=f("seq", int),
            warmups=f("warmups", int),
            log_empty=f("log_empty", bool),
            frontier=_optional("state", d, "frontier", dict),
            planner=_optional("state", d, "planner", str),
            call=_optional("state", d, "call", int),
        )


def encode_rows(rows: Sequence[MetricsRow]) -> list[dict[str, Any]]:
    """The closed windows' wire form (:meth:`MetricsRow.to_dict`, read from its fields)."""
    return [row.to_dict() for row in rows]


def decode_rows(data: Any) -> list[MetricsRow]:
    if data is None:
        return []
    if not isinstance(data, list):
        raise ValueError(f"metrics rows must be a JSON list, got {data!r:.200}")
    return [MetricsRow.from_dict(row) for row in data]


def _encode_result(r: LaneResult) -> dict[str, Any]:
    return {
        "tuple_id": r.tuple_id,
        "outcome": str(r.outcome),
        "xor": r.xor,
        "rt": None if r.rt is None else round(r.rt, 6),
        "records": r.records,
        "routed_records": r.routed_records,
        "dead_records": r.dead_records,
        "latencies": [round(v, 4) for v in r.latencies],
        "not_before": r.not_before,
        "mrwq_epoch": r.mrwq_epoch,
        "mrwq_seq": r.mrwq_seq,
        "error": r.error[:300],
        "trace": r.trace[:MAX_TRACE_CHARS],
    }


def _decode_result(data: Any) -> LaneResult:
    """A tuple's result; absent fields take :class:`LaneResult`'s defaults."""
    d = _object("lane result", data)
    name = "lane result"
    raw = d.get("outcome")
    try:
        if not isinstance(raw, str):
            raise ValueError(f"{raw!r} is not a valid Outcome")
        outcome = Outcome(raw)
    except ValueError as exc:
        raise ValueError(f"{name}.outcome: {exc}") from None

    def get(key: str, kind: Any, default: Any) -> Any:
        return default if d.get(key) is None else _field(name, d, key, kind)

    return LaneResult(
        tuple_id=_field(name, d, "tuple_id", str),
        outcome=outcome,
        xor=get("xor", int, 0),
        rt=get("rt", _NUMBER, None),
        records=get("records", int, 0),
        routed_records=get("routed_records", int, 0),
        dead_records=get("dead_records", int, 0),
        latencies=tuple(float(v) for v in get("latencies", list, ())),
        not_before=get("not_before", _NUMBER, None),
        mrwq_epoch=get("mrwq_epoch", str, None),
        mrwq_seq=get("mrwq_seq", int, None),
        error=get("error", str, ""),
        trace=get("trace", str, ""),
    )


@dataclass(frozen=True)
class LaneFeedback:
    """Lane -> planner: one :class:`~flowctl.core.spout.LaneResult` per tuple of a batch,
    and the log ends the lane's fetches reported (``(topic, partition, end)``: the
    planner's bounds for partitions being appended to, instead of a ListOffsets request)."""

    results: tuple[LaneResult, ...]
    ends: tuple[tuple[str, int, int], ...] = ()

    def encode(self) -> dict[str, Any]:
        return {
            "results": [_encode_result(r) for r in self.results],
            "ends": [list(e) for e in self.ends],
        }

    @classmethod
    def decode(cls, data: Any) -> LaneFeedback:
        d = _object("lane feedback", data)
        results = tuple(_decode_result(r) for r in _field("lane feedback", d, "results", list))
        return cls(results, tuple(_decode_end(e) for e in d.get("ends") or ()))


def _decode_end(data: Any) -> tuple[str, int, int]:
    """One ``[topic, partition, end]`` of :attr:`LaneFeedback.ends`."""
    ok = isinstance(data, list) and len(data) == 3 and isinstance(data[0], str)
    if ok and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in data[1:]):
        return data[0], data[1], data[2]
    raise ValueError(f"lane feedback.ends: {data!r:.200} is not [topic, partition, end]")
