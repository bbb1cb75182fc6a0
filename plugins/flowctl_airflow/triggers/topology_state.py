"""Wait until a topology reaches a state: one look, a blocking wait, and the trigger.

The blue-green replacement waits three times (green READY, blue DRAINED, a stopped
topology STOPPED; docs/flow-control.md "Signals and states"). :func:`look` is the rule
of one look, shared by the operator's in-worker wait (:func:`wait_for_state`) and by
:class:`TopologyStateTrigger`, which waits in the triggerer so that a replacement holds
no worker slot while a Spark job gets ready or drains.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Callable, Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

if TYPE_CHECKING:
    from flowctl.adapters.control_plane import ControlPlane

ENDED = frozenset({"FAILED", "STOPPED"})

#: Seconds a deferred task's trigger holds its event after the deferral. The worker's exit
#: on ``defer()`` reports SUCCESS for the try; if the trigger fires and the resumed try is
#: RUNNING before the scheduler has handled that stale SUCCESS, Airflow takes it for an
#: external kill and marks the task FAILED (apache/airflow#72716, open; 1 rescale in 4
#: was rolled back so when green was READY within a second of the deferral). The
#: scheduler handled it within 3-6 s in the reported cases.
DEFER_SETTLE_S = 10.0
#: Seconds the replace task waits in its worker before it defers a wait: most waits end
#: sooner (blue DRAINED, a topology STOPPED), and those then never pay DEFER_SETTLE_S.
DEFER_AFTER_S = 15.0


@dataclass(frozen=True)
class Reached:
    """A topology in one of the wanted states, and when it entered it."""

    topology_id: str
    state: str
    updated_at: dt.datetime

    def to_event(self) -> dict[str, Any]:
        return {
            "status": "reached",
            "topology_id": self.topology_id,
            "state": self.state,
            "updated_at": self.updated_at.isoformat(),
        }

    @classmethod
    def from_event(cls, event: dict[str, Any]) -> Reached:
        return cls(
            event["topology_id"], event["state"], dt.datetime.fromisoformat(event["updated_at"])
        )


class StateWaitFailed(RuntimeError):
    """The topology can no longer reach the wanted state; the message says why."""


def look(
    plane: ControlPlane, topology_id: str, wanted: Collection[str], what: str
) -> Reached | None:
    """One read: :class:`Reached`, None to keep waiting, or :class:`StateWaitFailed`.

    A topology not registered yet (green's job is starting) is waited for. One that
    ended (FAILED, STOPPED) when neither is wanted cannot get there. A green that goes
    ACTIVE while READY is wanted would make two admitting topologies.
    """
    from flowctl.adapters.control_plane import UnknownTopology

    try:
        topo = plane.get_topology(topology_id)
    except UnknownTopology:
        return None
    if topo.state in wanted:
        return Reached(topology_id, topo.state, topo.updated_at)
    if topo.state in ENDED and not ENDED & set(wanted):
        raise StateWaitFailed(f"{what}: {topology_id} ended {topo.state} (see its stream task log)")
    if "READY" in wanted and topo.state == "ACTIVE":
        raise StateWaitFailed(
            f"{what}: {topology_id} went ACTIVE without waiting in READY (was it started "
            f"without standby?)"
        )
    return None


def wait_for_state(
    plane: ControlPlane,
    topology_id: str,
    wanted: Collection[str],
    what: str,
    *,
    timeout_s: float,
    poll_interval_s: float,
    killed: Callable[[], bool] = lambda: False,
) -> Reached | None:
    """Look every ``poll_interval_s`` in this process; None on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        reached = look(plane, topology_id, wanted, what)
        if reached is not None:
            return reached
        if killed():
            raise StateWaitFailed(f"{what}: the replace task was killed")
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_interval_s)


class TopologyStateTrigger(BaseTrigger):
    """Look until ``topology_id`` is in one of ``wanted`` or ``end_at`` passes.

    Yields exactly one :class:`TriggerEvent`: ``status`` ``reached`` (with the state and
    when it was entered), ``timeout`` or ``error`` (with the message). It carries the
    connection id, never the database URL (the kwargs are stored in the trigger table);
    the URL is resolved once per run and every read runs in a worker thread.

    :param flowctl_conn_id: connection of the flowctl database.
    :param topology_id: the topology watched.
    :param wanted: the states that end the wait.
    :param what: what is waited for, for messages ("waiting for green READY").
    :param end_at: epoch seconds after which the trigger yields ``timeout``; an absolute
        time, so a trigger re-created on another triggerer keeps the same deadline.
    :param poll_interval: seconds between two looks.
    :param progress: the replacement's :meth:`Progress.to_dict`; with it, :meth:`on_kill`
        rolls the replacement back when a person marks the deferred task failed or clears it.
    :param then: the replacement's phase after this wait.
    :param not_before: epoch seconds before which no event is yielded (``None``: at
        once). The deferring task sets it :data:`DEFER_SETTLE_S` ahead: see there.

    ``progress`` and ``then`` are echoed in every event: the task resumes from the event
    alone (``dag.test()`` hands the resume method the event and drops ``defer``'s kwargs).
    """

    def __init__(
        self,
        *,
        flowctl_conn_id: str,
        topology_id: str,
        wanted: Collection[str],
        what: str,
        end_at: float,
        poll_interval: float = 1.0,
        progress: dict[str, Any] | None = None,
        then: str | None = None,
        not_before: float | None = None,
    ) -> None:
        super().__init__()
        self.flowctl_conn_id = flowctl_conn_id
        self.topology_id = topology_id
        self.wanted = sorted(wanted)
        self.what = what
        self.end_at = float(end_at)
        self.poll_interval = float(poll_interval)
        self.progress = progress
        self.then = then
        self.not_before = None if not_before is None else float(not_before)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "flowctl_conn_id": self.flowctl_conn_id,
                "topology_id": self.topology_id,
                "wanted": list(self.wanted),
                "what": self.what,
                "end_at": self.end_at,
                "poll_interval": self.poll_interval,
                "progress": self.progress,
                "then": self.then,
                "not_before": self.not_before,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from flowctl.adapters.control_plane import ControlPlane
        from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook

        try:
            plane = ControlPlane(await FlowctlDbHook.async_sqlalchemy_url(self.flowctl_conn_id))
            while True:
                reached = await asyncio.to_thread(
                    look, plane, self.topology_id, self.wanted, self.what
                )
                if reached is not None:
                    await self._settled()
                    yield self._event(reached.to_event())
                    return
                if time.time() >= self.end_at:
                    await self._settled()
                    yield self._event({"status": "timeout", "topology_id": self.topology_id})
                    return
                await asyncio.sleep(min(self.poll_interval, max(0.0, self.end_at - time.time())))
        except StateWaitFailed as exc:
            await self._settled()
            yield self._event({"status": "error", "message": str(exc)})
        except Exception as exc:  # reported to the task, which rolls back and fails
            await self._settled()
            yield self._event(
                {"status": "error", "message": f"{self.what}: {type(exc).__name__}: {exc}"}
            )

    def _event(self, payload: dict[str, Any]) -> TriggerEvent:
        return TriggerEvent({**payload, "then": self.then, "progress": self.progress})

    async def _settled(self) -> None:
        """Wait until ``not_before`` (see :data:`DEFER_SETTLE_S`)."""
        if self.not_before is not None and (left := self.not_before - time.time()) > 0:
            await asyncio.sleep(left)

    async def on_kill(self) -> None:
        """The deferred replace task was killed: undo the replacement like its ``on_kill``."""
        if not self.progress:
            return
        from flowctl.adapters.control_plane import ControlPlane
        from flowctl.adapters.replacements import ReplacementLog
        from flowctl_airflow.hooks.flowctl_db import FlowctlDbHook
        from flowctl_airflow.replacement_state import Progress, roll_back

        plane = ControlPlane(await FlowctlDbHook.async_sqlalchemy_url(self.flowctl_conn_id))
        await asyncio.to_thread(
            roll_back,
            plane,
            ReplacementLog(plane.engine),
            Progress.from_dict(self.progress),
            f"the replace task was killed while {self.what}",
            self.log,
        )


def outcome_of(event: dict[str, Any]) -> Reached | None:
    """The trigger's event as the blocking wait's result: Reached, None (timeout) or an error."""
    status = event.get("status")
    if status == "reached":
        return Reached.from_event(event)
    if status == "timeout":
        return None
    raise StateWaitFailed(str(event.get("message", event)))
