"""A metrics window's topology-wide figures, and the one reader of its lane figures.

:class:`WindowFigures` is defined once here and extended by the metrics window itself
(:class:`flowctl.core.metrics_row.MetricsRow`), so a figure is one field: the planner's
wire form, the ``metrics_windows`` columns (their schema is built from these fields),
the metrics page and the autoscaler's sensor all follow from it.

A stored row keeps the per-lane gauges as a JSON list in ``lanes_json``. Rows written
before the figures had columns, and hand-built rows, carry the figures inside a ``lanes``
object ``{"lanes": [...], "repeat_failures": ..., ...}``: :func:`split_lanes` reads every
shape, so the control plane, the metrics emitter and the failure-window sensor agree on
what a row says.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WindowFigures:
    """Topology-wide figures of one metrics window (``None``: not measured).

    ``repeat_failures``: replayed records failing again (poison, not load);
    ``sink_errors``: failed writes to the results; ``mrwq``: MRWQ length at the window's
    end; ``arrival_rate``: Eden's growth (records/s); ``lane_rate``: one lane's records/s;
    ``batch_duration_s``: mean time between batch completions; ``trigger_s``: the
    trigger interval; ``saturation``: mean share of the lanes' windows in flight;
    ``levels``: backpressure level per stage; ``rebuilds``: the topology's rebuilds
    after lost MRWQ items since it started (each re-dispatches what was not durable).
    """

    repeat_failures: int | None = None
    sink_errors: int | None = None
    mrwq: int | None = None
    arrival_rate: float | None = None
    lane_rate: float | None = None
    batch_duration_s: float | None = None
    trigger_s: float | None = None
    saturation: float | None = None
    levels: dict[str, int] | None = None
    rebuilds: int | None = None

    def merged(self, other: WindowFigures) -> WindowFigures:
        """These figures, completed by ``other``'s where these are not measured."""
        return WindowFigures(
            **{
                f.name: getattr(self, f.name)
                if getattr(self, f.name) is not None
                else getattr(other, f.name)
                for f in dataclasses.fields(self)
            }
        )


FIGURE_NAMES = tuple(f.name for f in dataclasses.fields(WindowFigures))


def _lane(entry: Any) -> dict[str, Any]:
    if isinstance(entry, Mapping):
        return dict(entry)
    if dataclasses.is_dataclass(entry) and not isinstance(entry, type):  # core LaneGauge
        return dataclasses.asdict(entry)
    raise ValueError(f"lanes entry {entry!r} must be a mapping of lane figures")


def lane_list(lanes: Any) -> list[dict[str, Any]]:
    """The per-lane figures of a row's ``lanes``, as a list of dicts.

    Accepted: ``None``; a list of lane mappings (or :class:`flowctl.core.metrics.LaneGauge`);
    an object ``{"lanes": [...], <figures>}`` (either part may be absent); a mapping
    ``{lane: figures}``.
    """
    return split_lanes(lanes)[0]


def split_lanes(lanes: Any) -> tuple[list[dict[str, Any]], WindowFigures]:
    """``(per-lane figures, topology-wide figures)`` of a row's ``lanes`` in any shape."""
    if lanes is None:
        return [], WindowFigures()
    figures = WindowFigures()
    if isinstance(lanes, Mapping) and ("lanes" in lanes or set(lanes) & set(FIGURE_NAMES)):
        given = {k: lanes[k] for k in FIGURE_NAMES if lanes.get(k) is not None}
        figures = WindowFigures(**given)
        lanes = lanes.get("lanes") or []
    elif isinstance(lanes, Mapping):
        lanes = [
            {"lane": k, **v} if isinstance(v, Mapping) else {"lane": k} for k, v in lanes.items()
        ]
    if isinstance(lanes, str | bytes) or not isinstance(lanes, Sequence):
        raise ValueError(f"lanes={lanes!r} must be a list of lane figures")
    out = [_lane(entry) for entry in lanes]
    if figures.saturation is None:
        figures = dataclasses.replace(figures, saturation=saturation(out))
    return out, figures


def saturation(lanes: Sequence[Mapping[str, Any]]) -> float | None:
    """Mean share of each lane's window in flight (``None`` when a lane lacks the figures)."""
    shares = []
    for lane in lanes:
        window, in_flight = lane.get("window"), lane.get("in_flight")
        if isinstance(window, bool) or not isinstance(window, int | float):
            return None
        if isinstance(in_flight, bool) or not isinstance(in_flight, int | float):
            return None
        if window > 0:
            shares.append(min(1.0, max(0.0, in_flight / window)))
    return sum(shares) / len(shares) if shares else None
