"""A chain of backpressure stages (SPEC C2): monitors and controllers wired in data order.

:class:`BackpressureChain` wires stages ``source -> ... -> sink``: each stage's
:class:`~flowctl.core.backpressure.QueueMonitor` signals the previous stage's
:class:`~flowctl.core.backpressure.RateController`, so a slowed stage's own queue grows and
the pressure propagates upstream step by step, in the worst case to the source. The parts
and the algorithm are in :mod:`flowctl.core.backpressure`; this module only composes them
for a topology (its planner) and snapshots them together.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .backoff import BackoffPolicy
from .backpressure import (
    ControllerSnapshot,
    LocalChannel,
    MonitorSnapshot,
    QueueMonitor,
    RateController,
    SignalChannel,
)
from .clock import Clock

__all__ = ["BackpressureChain", "ChainSnapshot", "StageSpec"]


@dataclass(frozen=True)
class StageSpec:
    """One stage of a chain: its name, input-queue capacity QML and configured send rate."""

    name: str
    qml: int
    rate: float


@dataclass(frozen=True)
class ChainSnapshot:
    controllers: tuple[ControllerSnapshot, ...]
    monitors: tuple[MonitorSnapshot, ...]


class BackpressureChain:
    """Stages in data order (``source, process, persist``) with step-by-step backpressure.

    Every stage but the first has a :class:`QueueMonitor` that signals the stage before
    it; every stage has a :class:`RateController`. :meth:`step` takes the current input
    queue lengths and returns the rate each stage should send at. The channel defaults to
    a :class:`LocalChannel` over the chain's own controllers; a control-plane channel can
    be injected (its receiving side calls ``controller(name).apply(signal)``).
    """

    def __init__(
        self,
        stages: Sequence[StageSpec],
        *,
        load_factor: float,
        factor: float,
        clock: Clock,
        channel: SignalChannel | None = None,
        retry_policy: BackoffPolicy | None = None,
        max_sensitivity_s: float = 30.0,
    ) -> None:
        if len(stages) < 2:
            raise ValueError(f"a chain needs at least 2 stages, got {len(stages)}")
        names = [s.name for s in stages]
        if len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique, got {names}")
        self.names = tuple(names)
        self._controllers = {s.name: RateController(s.name, s.rate, factor) for s in stages}
        self._channel = channel if channel is not None else LocalChannel(self._controllers)
        self._monitors = {
            down.name: QueueMonitor(
                down.name,
                up.name,
                qml=down.qml,
                load_factor=load_factor,
                channel=self._channel,
                clock=clock,
                retry_policy=retry_policy,
                max_sensitivity_s=max_sensitivity_s,
            )
            for up, down in itertools.pairwise(stages)
        }

    def controller(self, name: str) -> RateController:
        return self._controllers[name]

    def monitor(self, name: str) -> QueueMonitor:
        return self._monitors[name]

    def step(self, queue_lengths: Mapping[str, int]) -> dict[str, float]:
        """Run every monitor once (downstream first) and return each stage's rate."""
        missing = [n for n in self._monitors if n not in queue_lengths]
        if missing:
            raise ValueError(f"queue_lengths is missing stage(s) {missing}")
        for name in reversed(self.names[1:]):
            # Equation 1's T.V is the task's rate *before* backpressure: V_init if it has one.
            own = self._controllers[name]
            rate = own.v_init if own.v_init is not None else own.rate
            self._monitors[name].step(queue_lengths[name], rate)
        return self.rates()

    def rates(self) -> dict[str, float]:
        return {n: c.rate for n, c in self._controllers.items()}

    def levels(self) -> dict[str, int]:
        """Backpressure level per stage (0 = normal), for the metrics row."""
        return {n: c.level for n, c in self._controllers.items()}

    def snapshot(self) -> ChainSnapshot:
        return ChainSnapshot(
            tuple(self._controllers[n].snapshot() for n in self.names),
            tuple(self._monitors[n].snapshot() for n in self.names[1:]),
        )

    def restore(self, snapshot: ChainSnapshot) -> None:
        _restore_each(self._controllers, snapshot.controllers)
        _restore_each(self._monitors, snapshot.monitors)


def _restore_each(parts: Mapping[str, Any], snaps: Iterable[Any]) -> None:
    for snap in snaps:
        part = parts.get(snap.name)
        if part is None:
            raise ValueError(f"snapshot has unknown stage {snap.name!r}; known: {sorted(parts)}")
        part.restore(snap)
