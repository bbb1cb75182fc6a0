"""The failure-window policy (SPEC E) as pure functions: what decides, not what reads.

The autoscale sensor, its trigger and the live benchmark all take a scaling decision
the same way: refuse while a replacement of the pipeline runs or during the cooldown
after one, refuse while the topology is not HEALTHY or has fewer than ``A`` windows,
else run the pipeline's policy (:func:`~flowctl.core.scaling.paper_decision` or
:func:`~flowctl.core.adaptive_scaling.adaptive_decision`). That rule lives here, over
plain values, so it is tested without a database or Airflow; reading the values is
:mod:`flowctl.adapters.window_evaluation`'s job, polling is the trigger's.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any, NamedTuple, Protocol

from .adaptive_scaling import AdaptiveConfig, ScalingThresholds, adaptive_decision
from .metrics_row import MetricsRow
from .scaling import POLICIES, Decision, WindowStats, paper_decision


class PipelineScaling(Protocol):
    """What :meth:`WindowPolicy.from_config` reads of a pipeline's ``[scaling]`` section."""

    @property
    def policy(self) -> str: ...
    @property
    def history_windows(self) -> int: ...

    def thresholds(self) -> ScalingThresholds: ...


class PipelineBounds(Protocol):
    """What :meth:`WindowPolicy.from_config` reads of a pipeline's config."""

    @property
    def scaling(self) -> PipelineScaling: ...
    @property
    def min_parallelism(self) -> int: ...
    @property
    def max_parallelism(self) -> int | None: ...


class ReplacementRecord(Protocol):
    """What the gate reads of one replacement event (the replacement log's rows)."""

    @property
    def id(self) -> int: ...
    @property
    def old_topology_id(self) -> str: ...
    @property
    def new_topology_id(self) -> str | None: ...
    @property
    def old_parallelism(self) -> int: ...
    @property
    def new_parallelism(self) -> int: ...
    @property
    def finished_at(self) -> dt.datetime | None: ...
    @property
    def outcome(self) -> str: ...


@dataclass(frozen=True, kw_only=True)
class WindowPolicy(AdaptiveConfig):
    """Everything a decision depends on besides the database: plain values, JSON-safe.

    The policy's name and its history ``A`` beside :class:`AdaptiveConfig` (the
    thresholds and bounds, whose defaults are defined once in core). Built from a
    pipeline's ``[scaling]`` and ``[stream]`` sections by :meth:`from_config` and carried
    through the trigger's ``serialize()`` as a dict.
    """

    policy: str
    history_windows: int

    @classmethod
    def from_config(cls, config: PipelineBounds, **overrides: Any) -> WindowPolicy:
        """The pipeline's policy; ``overrides`` (not None) replace single values."""
        s = config.scaling
        values = {
            **asdict(s.thresholds()),
            "policy": s.policy,
            "history_windows": s.history_windows,
            "min_parallelism": config.min_parallelism,
            "max_parallelism": config.max_parallelism,
        }
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.from_dict(values)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> WindowPolicy:
        """Rebuild from :meth:`to_dict`; names an unknown key and a bad policy."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - names)
        if unknown:
            raise ValueError(f"window policy has unknown key(s) {unknown} (known: {sorted(names)})")
        return cls(**data)  # the thresholds and bounds are validated by AdaptiveConfig

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"policy={self.policy!r} must be one of {', '.join(POLICIES)}")
        if (
            isinstance(self.history_windows, bool)
            or not isinstance(self.history_windows, int)
            or self.history_windows < 2
        ):
            raise ValueError(f"history_windows={self.history_windows!r} must be an integer >= 2")
        super().__post_init__()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def adaptive_config(self) -> AdaptiveConfig:
        """The :class:`AdaptiveConfig` part of these values."""
        return AdaptiveConfig(**{f.name: getattr(self, f.name) for f in fields(AdaptiveConfig)})


@dataclass(frozen=True)
class Evaluation:
    """One look at the windows: a decision that changes the parallelism, or why there is none."""

    pipeline: str
    topology_id: str | None
    decision: Decision | None
    reason: str

    @property
    def decided(self) -> bool:
        return self.decision is not None and self.decision.changes

    def to_event(self) -> dict[str, Any]:
        """The payload of a trigger event / the sensor's XCom (JSON types only)."""
        return {
            "status": "decision" if self.decided else "waiting",
            "pipeline": self.pipeline,
            "topology_id": self.topology_id,
            "reason": self.reason,
            "decision": None if self.decision is None else self.decision.to_dict(),
        }


def topology_refusal(
    pipeline: str, topology_id: str | None, states: Mapping[str, str]
) -> str | None:
    """Why no topology can be judged, or None when exactly one is to be.

    ``states`` maps topology ids to their states: the named topology's alone when
    ``topology_id`` is given, else the pipeline's ACTIVE topologies (none runs, or two
    overlap during a replacement: neither is judged then).
    """
    if topology_id is not None:
        state = states[topology_id]
        return None if state == "ACTIVE" else f"topology {topology_id} is {state}, not ACTIVE"
    active = [t for t, state in states.items() if state == "ACTIVE"]
    if not active:
        return f"pipeline {pipeline!r} has no ACTIVE topology"
    if len(active) > 1:
        return f"pipeline {pipeline!r} has {len(active)} ACTIVE topologies ({', '.join(active)})"
    return None


class Gate(NamedTuple):
    """What the pipeline's replacements say before the policy is asked."""

    refusal: str | None  # why not to decide now: a replacement running, or its cooldown
    last_change_at: float | None  # epoch s the last successful change finished
    last_up_at: float | None  # epoch s the last successful scale-up finished


def replacement_gate(
    events: Sequence[ReplacementRecord], cooldown_s: float, now: dt.datetime
) -> Gate:
    """The replacements' gate, from the pipeline's recent replacement events.

    Read from the events rather than kept in memory so it survives any process (a
    sensor pokes from a new process every time). The adaptive policy's cooldown and
    scale-down delay read ``last_change_at`` and ``last_up_at``.
    """
    running = [e for e in events if e.outcome == "running"]
    if running:
        e = running[-1]
        why = f"replacement {e.id} ({e.old_topology_id} -> {e.new_topology_id}) is running"
        return Gate(why, None, None)
    finished = [(e, e.finished_at) for e in events if e.finished_at is not None]
    if not finished:
        return Gate(None, None, None)
    last, last_at = max(finished, key=lambda pair: pair[1])
    since = (now - last_at).total_seconds()
    if since < cooldown_s:
        why = f"cooldown: replacement {last.id} finished {since:.0f} s ago"
        why += f" < cooldown_s={cooldown_s:g}"
        return Gate(why, None, None)
    ups = [at for e, at in finished if e.outcome == "ok" and e.new_parallelism > e.old_parallelism]
    up_at = max(ups).timestamp() if ups else None
    if last.outcome == "ok":
        return Gate(None, last_at.timestamp(), up_at)
    return Gate(None, None, up_at)


def judge_windows(
    pipeline: str,
    topology_id: str,
    parallelism: int,
    windows: Sequence[MetricsRow],
    policy: WindowPolicy,
    gate: Gate,
    now: dt.datetime,
) -> Evaluation:
    """The evaluation of one ACTIVE topology past the gate, over its last windows (oldest
    first, at most ``history_windows``).

    No decision while the last window says the topology is not HEALTHY (STALLED or
    HALTED: more lanes would not help, a replacement would only move the problem) or
    while fewer than ``history_windows`` windows exist; else the policy decides.
    """
    if gate.refusal is not None:
        return Evaluation(pipeline, topology_id, None, gate.refusal)
    if windows and windows[-1].health != "HEALTHY":
        last = windows[-1]
        why = f"topology {topology_id} is {last.health} ({last.health_cause})"
        return Evaluation(pipeline, topology_id, None, why + ": not scaled until HEALTHY")
    if len(windows) < policy.history_windows:
        why = (
            f"topology {topology_id} has {len(windows)} of "
            f"history_windows={policy.history_windows} metrics windows"
        )
        return Evaluation(pipeline, topology_id, None, why)
    decision = decide(windows, parallelism, policy, now, gate.last_change_at, gate.last_up_at)
    return Evaluation(pipeline, topology_id, decision, decision.reason)


def decide(
    windows: Sequence[MetricsRow],
    parallelism: int,
    policy: WindowPolicy,
    now: dt.datetime,
    last_change_at: float | None,
    last_up_at: float | None = None,
) -> Decision:
    """The pipeline's policy over the topology's last windows."""
    counts = [w.fail_count for w in windows]
    if policy.policy == "paper":
        return paper_decision(
            counts,
            parallelism,
            policy.threshold_c,
            min_parallelism=policy.min_parallelism,
            max_parallelism=policy.max_parallelism,
        )
    return adaptive_decision(
        counts,
        WindowStats.of(list(windows)),
        parallelism,
        policy.adaptive_config(),
        now=now.timestamp(),
        last_change_at=last_change_at,
        last_up_at=last_up_at,
    )
