"""The metrics window of a topology: one type, from the planner to the page (SPEC H).

A closed window is one :class:`MetricsRow`. Its fields are the only place its figures
are spelled: the planner builds it (:class:`flowctl.core.metrics.SpoutMetrics`), its wire
form between the planner and the driver is :meth:`MetricsRow.to_dict` /
:meth:`MetricsRow.from_dict` (both read the fields, so a new field travels without
another edit), the control plane's ``metrics_windows`` columns are built from the same
fields (``flowctl.adapters.schema``), and the stored window the sensors, the emitter and
the page read wraps one (``flowctl.adapters.metrics_windows.MetricsWindow``). Adding a
figure is one edit here (or in :class:`~flowctl.core.window_figures.WindowFigures`) plus
its tests.

Times are seconds: the planner's clock while the window is open, the wall clock
(seconds since the epoch) once :class:`~flowctl.core.metrics.SpoutMetrics` hands it on.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .health import HEALTH_STATES
from .window_figures import WindowFigures, lane_list, split_lanes

__all__ = ["COUNTS", "LaneGauge", "MetricsRow"]


@dataclass(frozen=True)
class LaneGauge:
    """One lane's flow-control state at the end of a window."""

    lane: int
    window: int
    state: str
    in_flight: int


@dataclass(frozen=True, kw_only=True)
class MetricsRow(WindowFigures):
    """The aggregated metrics of one topology over one window.

    Counts (tuples, except ``dlq`` and ``records``, which count records) and gauges
    here; the topology-wide figures the autoscaler and the page read come from
    :class:`WindowFigures`. ``n`` numbers the planner's windows (0: not numbered).
    ``lanes``: one mapping per lane (``lane``, ``window``, ``state``, ``in_flight``,
    and what else the spout measured), or :class:`LaneGauge` objects; ``None`` for a
    stored window written without them.
    """

    topology: str
    window_start: float
    window_end: float
    admitted: int
    acked: int
    failed: int
    timed_out: int
    replayed: int
    dlq: int
    records: int
    records_per_s: float
    latency_p50_s: float | None
    latency_p99_s: float | None
    backlog: int
    backpressure_level: float
    lanes: Sequence[Any] | None = field(default_factory=tuple)
    n: int = 0
    #: The topology's health at the window's end (:mod:`flowctl.core.health`) and why.
    #: Health lives on the window, not the topology's row: the planner measures it, and
    #: the planner's only channel to the control plane is its windows (one write per
    #: window, no extra path); the page, the CLI and the sensors read the last window.
    health: str = "HEALTHY"
    health_cause: str | None = None
    #: 0 for a window; for an hourly rollup of older windows
    #: (:mod:`flowctl.core.metrics_rollup`), how many windows it sums. Readers of "the
    #: last K windows" (the sensors, the emitter) skip rollups: they are history.
    rolled_up: int = 0

    @property
    def fail_count(self) -> int:
        """failNum of SPEC E: tuples failed or timed out in this window."""
        return self.failed + self.timed_out

    @property
    def figures(self) -> WindowFigures:
        """The topology-wide figures (the part :class:`WindowFigures` defines).

        Completed by what ``lanes`` carries (:func:`split_lanes`): the figures of an older
        ``{"lanes": [...], <figures>}`` object, the saturation of the lanes' gauges.
        Raises ``ValueError`` for lanes in no known shape.
        """
        own = WindowFigures(**{f.name: getattr(self, f.name) for f in _FIGURE_FIELDS})
        return own.merged(split_lanes(self.lanes)[1])

    @property
    def lane_list(self) -> list[dict[str, Any]]:
        """Per-lane figures as plain dicts, whichever shape ``lanes`` holds."""
        return lane_list(self.lanes)

    def to_dict(self) -> dict[str, Any]:
        """The wire form: plain JSON types only (lanes as a list of dicts)."""
        return asdict(self) | {"lanes": self.lane_list}

    @classmethod
    def from_dict(cls, data: Any, *, name: str = "metrics row") -> MetricsRow:
        """The row :meth:`to_dict` wrote; a foreign value raises ``ValueError`` naming it."""
        if not isinstance(data, Mapping):
            raise ValueError(f"{name} must be a JSON object, got {data!r:.200}")
        fields = dataclasses.fields(cls)
        given = [f.name for f in fields if f.name in data]
        missing = [f.name for f in fields if f.name not in data and _required(f)]
        values = {k: _typed(f"{name}.{k}", data.get(k), _HINTS[k]) for k in given + missing}
        if isinstance(values.get("lanes"), list):
            values["lanes"] = [_lane(f"{name}.lanes[]", g) for g in values["lanes"]]
        return cls(**values)

    def check(self) -> MetricsRow:
        """This row, if every count is an int >= 0 and every figure a finite number >= 0.

        Raises ``ValueError`` naming the field and its value (the control plane calls it
        before storing, so a bad window is refused whole, never half written).
        """
        for f in dataclasses.fields(self):
            value, hint = getattr(self, f.name), _HINTS[f.name]
            if value is None and _nullable(hint):
                continue
            if f.name in ("lanes", "levels", "topology", "health", "health_cause"):
                _typed(f.name, value, hint)
            elif _base(hint) is int and (_is_number(value) is not int or value < 0):
                raise ValueError(f"{f.name}={value!r} must be an integer >= 0")
            elif _is_number(value) is None or value < 0 or not math.isfinite(value):
                raise ValueError(f"{f.name}={value!r} must be a number >= 0")
        if self.health not in HEALTH_STATES:
            raise ValueError(f"health={self.health!r} must be one of {', '.join(HEALTH_STATES)}")
        if not self.topology:
            raise ValueError(f"topology={self.topology!r} must be a non-empty string")
        if self.window_end < self.window_start:
            raise ValueError(
                f"window_end={self.window_end!r} is before window_start={self.window_start!r}"
            )
        return self


#: The counts of a window, summed by an aggregator.
COUNTS = ("admitted", "acked", "failed", "timed_out", "replayed", "dlq", "records")

_FIGURE_FIELDS = dataclasses.fields(WindowFigures)
_HINTS = typing.get_type_hints(MetricsRow)


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def _nullable(hint: Any) -> bool:
    return isinstance(hint, types.UnionType) and type(None) in hint.__args__


def _base(hint: Any) -> Any:
    """The type of a field, ``X`` for ``X | None``."""
    if _nullable(hint):
        (hint,) = [a for a in hint.__args__ if a is not type(None)]
    return typing.get_origin(hint) or hint


def _is_number(value: Any) -> type | None:
    """``int`` or ``float`` for a number (a bool is none), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int if isinstance(value, int) else float


def _typed(name: str, value: Any, hint: Any) -> Any:
    """``value`` if it is of the field's type (an int for a float is a float)."""
    if value is None:
        if _nullable(hint):
            return None
        raise ValueError(f"{name}=None is missing")
    origin = _base(hint)
    if origin in (int, float):
        if _is_number(value) is None:
            raise ValueError(f"{name}={value!r:.200} is not a number")
        if origin is int and not isinstance(value, int):
            raise ValueError(f"{name}={value!r:.200} is not an int")
        return float(value) if origin is float else value
    if origin is Sequence:
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise ValueError(f"{name}={value!r:.200} is not a list")
        return value
    if origin is dict:
        if not isinstance(value, Mapping):
            raise ValueError(f"{name}={value!r:.200} is not an object")
        return dict(value)
    if not isinstance(value, origin):
        raise ValueError(f"{name}={value!r:.200} is not {origin.__name__}")
    return value


def _lane(name: str, entry: Any) -> dict[str, Any]:
    if not isinstance(entry, Mapping):
        raise ValueError(f"{name} must be a JSON object, got {entry!r:.200}")
    return dict(entry)
