"""How long each phase of a micro-batch's planning takes, as distributions.

The driver plans every micro-batch (feedback, durability, log ends, backpressure,
admission, metrics, then Spark's ``partitions``) while the lanes wait for it, so its
cost is on every batch's critical path. :class:`PhaseTimings` keeps the phases'
durations of the batches planned since the last :meth:`PhaseTimings.summary` and
reports their percentiles; a planning round that ends without a batch (nothing to
admit: Spark polls again at the next trigger) is dropped by :meth:`PhaseTimings.begin`.
The planner logs the summary (docs/flow-control.md, "Planning cost").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from .clock import Clock
from .metrics import percentile


class PhaseTimings:
    """Durations (ms) per phase name, and per batch in all, on ``clock``."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._phases: dict[str, list[float]] = {}
        self._batches: list[float] = []
        self._pending: dict[str, float] = {}

    def begin(self) -> None:
        """A new planning round: what the last one timed without a batch is dropped."""
        self._pending = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Time the body as phase ``name`` of the batch being planned."""
        started = self._clock.now()
        try:
            yield
        finally:
            self.add(name, (self._clock.now() - started) * 1000.0)

    def add(self, name: str, ms: float) -> None:
        """Count ``ms`` for phase ``name`` of the round (e.g. one timed elsewhere)."""
        self._pending[name] = self._pending.get(name, 0.0) + ms

    def slowest(self) -> str | None:
        """The phase that took longest so far in the batch being timed, with its time."""
        if not self._pending:
            return None
        name = max(self._pending, key=self._pending.__getitem__)
        return f"{name} ({self._pending[name]:.0f} ms)"

    def end_batch(self) -> None:
        """The round planned a batch: its phases are samples, their sum one of the total."""
        for name, ms in self._pending.items():
            self._phases.setdefault(name, []).append(ms)
        self._batches.append(sum(self._pending.values()))
        self._pending = {}

    def summary(self) -> dict[str, dict[str, float | int | None]]:
        """``{"total": {...}, phase: {...}}`` with n, p50, p99 and max in ms; then reset."""
        out = {"total": _stats(self._batches)}
        out.update({name: _stats(values) for name, values in self._phases.items()})
        self._phases, self._batches = {}, []
        return out


def _stats(values: list[float]) -> dict[str, float | int | None]:
    return {
        "n": len(values),
        "p50": _ms(percentile(values, 50)),
        "p99": _ms(percentile(values, 99)),
        "max": _ms(max(values) if values else None),
    }


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
