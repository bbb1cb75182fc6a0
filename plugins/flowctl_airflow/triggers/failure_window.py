"""The trigger of the deferred failure-window sensor: it polls and serialises, nothing more.

The decision is :func:`flowctl.adapters.window_evaluation.evaluate` (which reads the
control plane and runs the pure rule of :mod:`flowctl.core.scaling_policy`); the
trigger calls it in a worker thread of the triggerer (SQLAlchemy is synchronous; a
blocking call on the triggerer's event loop would stall every other trigger).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from flowctl.adapters.window_evaluation import evaluate
from flowctl.core.scaling_policy import WindowPolicy

if TYPE_CHECKING:
    from flowctl.adapters.control_plane import ControlPlane


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
