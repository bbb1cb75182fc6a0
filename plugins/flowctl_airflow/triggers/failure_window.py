"""Failure-rate windows (SPEC E) evaluated against the control plane, and their trigger.

:func:`evaluate` is the one place where a scaling decision is taken from the
database: it finds the topology, refuses to decide while a replacement runs or
during the cooldown after one (read from the replacement events, so the state
survives any process: a sensor pokes from a new process every time), reads the
topology's last ``A`` metrics windows and runs the pipeline's policy from
:mod:`flowctl.core.scaling`. The poke-mode sensor calls it directly; the
deferred sensor's :class:`FailureWindowTrigger` calls it in a worker thread of
the triggerer (SQLAlchemy is synchronous; a blocking call on the triggerer's
event loop would stall every other trigger).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any, NamedTuple

from airflow.triggers.base import BaseTrigger, TriggerEvent

from flowctl.core.adaptive_scaling import AdaptiveConfig

if TYPE_CHECKING:
    from flowctl.adapters.control_plane import ControlPlane, MetricsWindow, Topology
    from flowctl.core.scaling import Decision
    from flowctl.pipelines.config import PipelineConfig


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
    def from_config(cls, config: PipelineConfig, **overrides: Any) -> WindowPolicy:
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
        from flowctl.core.scaling import POLICIES

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


def evaluate(
    database: str | ControlPlane,
    pipeline: str,
    policy: WindowPolicy,
    *,
    topology_id: str | None = None,
    now: dt.datetime | None = None,
) -> Evaluation:
    """Decide from the database, now; never writes anything but the schema.

    ``database`` is a URL (its schema is ensured: a sensor pokes from a new process each
    time) or a :class:`ControlPlane` whose schema the caller ensured once (the trigger).
    No decision (``decision`` None or direction ``none``) when: no single ACTIVE
    topology (none runs, or two during a replacement); a replacement of the pipeline
    is running; the last replacement finished less than ``cooldown_s`` ago; the
    topology's last window says it is not HEALTHY (STALLED or HALTED: more lanes would
    not help, a replacement would only move the problem); fewer than
    ``history_windows`` windows exist for the topology; or the policy says so.
    """
    from flowctl.adapters.control_plane import ControlPlane

    now = now or dt.datetime.now(dt.UTC)
    if isinstance(database, ControlPlane):
        plane = database
    else:
        plane = ControlPlane(database)
        plane.ensure_schema()

    topo = _the_active_topology(plane, pipeline, topology_id)
    if isinstance(topo, str):
        return Evaluation(pipeline, topology_id, None, topo)
    tid = topo.topology_id
    gate = _replacement_gate(plane, pipeline, policy.cooldown_s, now)
    if gate.refusal is not None:
        return Evaluation(pipeline, tid, None, gate.refusal)
    windows = plane.metrics_windows(tid, limit=policy.history_windows)
    if windows and windows[-1].health != "HEALTHY":
        last = windows[-1]
        why = f"topology {tid} is {last.health} ({last.health_cause}): not scaled until HEALTHY"
        return Evaluation(pipeline, tid, None, why)
    if len(windows) < policy.history_windows:
        return Evaluation(
            pipeline,
            tid,
            None,
            f"topology {tid} has {len(windows)} of history_windows={policy.history_windows} "
            f"metrics windows",
        )
    decision = _decide(windows, topo.parallelism, policy, now, gate.last_change_at, gate.last_up_at)
    return Evaluation(pipeline, tid, decision, decision.reason)


def _the_active_topology(
    plane: ControlPlane, pipeline: str, topology_id: str | None
) -> Topology | str:
    """The one ACTIVE topology to judge, or why there is none."""
    if topology_id is not None:
        topo = plane.get_topology(topology_id)
        if topo.state != "ACTIVE":
            return f"topology {topology_id} is {topo.state}, not ACTIVE"
        return topo
    active = plane.topologies(pipeline, states=["ACTIVE"])
    if not active:
        return f"pipeline {pipeline!r} has no ACTIVE topology"
    if len(active) > 1:
        ids = ", ".join(t.topology_id for t in active)
        return f"pipeline {pipeline!r} has {len(active)} ACTIVE topologies ({ids})"
    return active[0]


class _Gate(NamedTuple):
    """What the pipeline's replacements say before the policy is asked."""

    refusal: str | None  # why not to decide now: a replacement running, or its cooldown
    last_change_at: float | None  # epoch s the last successful change finished
    last_up_at: float | None  # epoch s the last successful scale-up finished


def _replacement_gate(
    plane: ControlPlane, pipeline: str, cooldown_s: float, now: dt.datetime
) -> _Gate:
    """The gate of :func:`evaluate` (the adaptive policy's cooldown and scale-down delay
    read ``last_change_at`` and ``last_up_at``)."""
    from flowctl.adapters.replacements import ReplacementLog

    events = ReplacementLog(plane.engine).replacements(pipeline, limit=20)
    running = [e for e in events if e.outcome == "running"]
    if running:
        e = running[-1]
        why = f"replacement {e.id} ({e.old_topology_id} -> {e.new_topology_id}) is running"
        return _Gate(why, None, None)
    finished = [e for e in events if e.finished_at is not None]
    if not finished:
        return _Gate(None, None, None)
    last = max(finished, key=lambda e: e.finished_at)  # type: ignore[arg-type,return-value]
    since = (now - last.finished_at).total_seconds()  # type: ignore[operator]
    if since < cooldown_s:
        why = f"cooldown: replacement {last.id} finished {since:.0f} s ago"
        why += f" < cooldown_s={cooldown_s:g}"
        return _Gate(why, None, None)
    ups = [e for e in finished if e.outcome == "ok" and e.new_parallelism > e.old_parallelism]
    last_up = max((e.finished_at for e in ups), default=None)  # type: ignore[type-var]
    up_at = None if last_up is None else last_up.timestamp()
    if last.outcome == "ok":
        return _Gate(None, last.finished_at.timestamp(), up_at)  # type: ignore[union-attr]
    return _Gate(None, None, up_at)


def _decide(
    windows: Sequence[MetricsWindow],
    parallelism: int,
    policy: WindowPolicy,
    now: dt.datetime,
    last_change_at: float | None,
    last_up_at: float | None = None,
) -> Decision:
    """The pipeline's policy over the topology's last windows."""
    from flowctl.core.adaptive_scaling import adaptive_decision
    from flowctl.core.scaling import WindowStats, paper_decision

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
        WindowStats.of([w.row for w in windows]),
        parallelism,
        policy.adaptive_config(),
        now=now.timestamp(),
        last_change_at=last_change_at,
        last_up_at=last_up_at,
    )


class FailureWindowTrigger(BaseTrigger):
    """Poll the metrics windows until the policy decides a change (or ``timeout_s`` passes).

    Yields exactly one :class:`TriggerEvent`: ``status`` ``decision`` (with the
    decision and the topology), ``timeout`` (with the last reason) or ``error`` (with
    the message). The database calls run in a worker thread.

    The trigger carries the connection id, not the URL: its kwargs are stored in the
    trigger table, where a password must not land. The URL is resolved and the schema
    ensured once per run of the trigger, not on every look.

    :param flowctl_conn_id: connection of the flowctl database.
    :param pipeline: the pipeline whose (active) topology is watched.
    :param policy: :meth:`WindowPolicy.to_dict` of the decision rule.
    :param topology_id: watch this topology instead of the pipeline's active one.
    :param poke_interval: seconds between two evaluations.
    :param end_at: epoch seconds after which the trigger gives up (``timeout``).
    """

    def __init__(
        self,
        *,
        flowctl_conn_id: str = "flowctl_db",
        pipeline: str,
        policy: Mapping[str, Any],
        topology_id: str | None = None,
        poke_interval: float = 10.0,
        end_at: float | None = None,
    ) -> None:
        super().__init__()
        self.flowctl_conn_id = flowctl_conn_id
        self.pipeline = pipeline
        self.policy = dict(policy)
        self.topology_id = topology_id
        self.poke_interval = float(poke_interval)
        self.end_at = end_at

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "flowctl_conn_id": self.flowctl_conn_id,
                "pipeline": self.pipeline,
                "policy": dict(self.policy),
                "topology_id": self.topology_id,
                "poke_interval": self.poke_interval,
                "end_at": self.end_at,
            },
        )

    async def _control_plane(self) -> ControlPlane:
        """The control plane of the connection, schema ensured (once per trigger run)."""
        from flowctl.adapters.control_plane import ControlPlane
        from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook

        url = await FlowctlDbHook.async_sqlalchemy_url(self.flowctl_conn_id)
        plane = ControlPlane(url)
        await asyncio.to_thread(plane.ensure_schema)
        return plane

    async def run(self) -> AsyncIterator[TriggerEvent]:
        try:
            policy = WindowPolicy.from_dict(self.policy)
        except (TypeError, ValueError) as exc:
            yield TriggerEvent({"status": "error", "message": f"bad policy: {exc}"})
            return
        try:
            plane = await self._control_plane()
        except Exception as exc:  # reported to the task, which fails with it
            yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
            return
        async for event in self._watch(plane, policy):
            yield event
            return

    async def _watch(
        self, plane: ControlPlane, policy: WindowPolicy
    ) -> AsyncIterator[TriggerEvent]:
        """Evaluate every ``poke_interval`` until a decision, a timeout or an error."""
        reason = "not evaluated yet"
        while True:
            try:
                result = await asyncio.to_thread(
                    evaluate, plane, self.pipeline, policy, topology_id=self.topology_id
                )
            except Exception as exc:  # reported to the task, which fails with it
                yield TriggerEvent({"status": "error", "message": f"{type(exc).__name__}: {exc}"})
                return
            reason = result.reason
            if result.decided:
                yield TriggerEvent(result.to_event())
                return
            self.log.info("no decision for %s: %s", self.pipeline, reason)
            if self.end_at is not None and time.time() + self.poke_interval > self.end_at:
                yield TriggerEvent(
                    {
                        "status": "timeout",
                        "pipeline": self.pipeline,
                        "topology_id": result.topology_id,
                        "reason": reason,
                    }
                )
                return
            await asyncio.sleep(self.poke_interval)
