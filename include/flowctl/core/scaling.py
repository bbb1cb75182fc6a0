"""Scaling decisions from failure windows and utilisation (SPEC E, seed 002 Algorithm 2).

The paper keeps the failure counts of the last ``A`` windows in a ring buffer and computes

    E(M) = sum(X_i) / A
    S^2  = sum(W_i * (X_i - E(M))^2) / A

then scales up (``newcap = oldcap << 1``) when the current window's ``failNum > E(M)`` and
``S^2 > C``, and down (``oldcap >> 1``) when ``failNum < E(M)`` and ``S^2 > C``.

Weights (the paper only says "lower for older windows"): linear in recency,
``W_i = i / A`` for ``i = 1`` (oldest) ``.. A`` (newest, the current window, weight 1).
Linear weights keep S^2 within the plain variance, never let an old burst outweigh the
present, and give exact binary fractions that a test can check by hand.

``policy="paper"`` is that rule, unchanged. ``policy="adaptive"`` (**beyond**) adds what the
paper lacks: a diagnosis of *why* tuples fail (poison records or a failing sink must not
buy more lanes), a DS2-style target from measured rates (arrival rate over one lane's true
processing rate, rounded up to a power of two, so one decision may jump several doublings),
utilisation-based scale-down (the paper never scales a quiet topology down: S^2 = 0),
min/max parallelism, a cooldown, and no scale-down while the backlog grows.

This module holds the shared vocabulary (:class:`WindowStats`, :class:`Decision`, E(M) and
S^2) and the paper's rule; the adaptive rule is :mod:`flowctl.core.adaptive_scaling`, and
the benchmarks' simulated autoscaler (``bench.lib.autoscaler``) adds a ring buffer and the
time of the last change. :class:`Decision` round-trips through JSON (XCom).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from .metrics_row import MetricsRow

__all__ = [
    "Decision",
    "WindowStats",
    "check_int",
    "check_number",
    "clamp",
    "direction_of",
    "dispersion",
    "linear_weights",
    "next_power_of_two",
    "paper_decision",
    "paper_signal",
]

Direction = Literal["up", "down", "none"]
DIRECTIONS: tuple[str, ...] = ("up", "down", "none")
# What a decision saw: load (genuine overload), poison (the same tuples failing again),
# sink (the database failing), idle (spare capacity), none (nothing notable).
CAUSES: tuple[str, ...] = ("load", "poison", "sink", "idle", "none")
POLICIES: tuple[str, ...] = ("paper", "adaptive")


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` if it is an int >= ``minimum`` (not a bool), else a ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def check_number(name: str, value: Any, minimum: float = 0.0) -> float:
    """``value`` if it is a finite number >= ``minimum``, else a ValueError naming it."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value < minimum
    ):
        raise ValueError(f"{name} must be a finite number >= {minimum}, got {value!r}")
    return float(value)


def next_power_of_two(n: int) -> int:
    """The smallest power of two >= ``n`` (``n >= 1``)."""
    check_int("n", n, 1)
    return 1 << (n - 1).bit_length()


def linear_weights(n: int) -> list[float]:
    """``W_i = i / n`` for ``i = 1..n``, oldest first: older windows weigh less."""
    check_int("n", n, 1)
    return [i / n for i in range(1, n + 1)]


def dispersion(counts: Sequence[int]) -> tuple[float, float]:
    """``(E(M), S^2)`` of failure counts, oldest first, current window last."""
    if not counts:
        raise ValueError("counts must hold at least one window, got an empty sequence")
    for i, x in enumerate(counts):
        check_int(f"counts[{i}]", x, 0)
    a = len(counts)
    mean = sum(counts) / a
    s2 = sum(w * (x - mean) ** 2 for w, x in zip(linear_weights(a), counts, strict=True)) / a
    return mean, s2


@dataclass(frozen=True)
class WindowStats:
    """One window's figures, as the aggregated metrics row carries them (SPEC H).

    Only ``fail_num`` is needed by the paper's rule; the rest feed the adaptive policy and
    may be ``None`` when not measured (a missing figure never triggers an action).

    - ``fail_num``: tuples failed or timed out in the window.
    - ``repeat_failures``: failures of tuples that had already failed before (replays).
    - ``dlq_added``: records sent to the dead-letter topic in the window.
    - ``sink_errors``: failed database writes / flushes in the window.
    - ``saturation``: mean over lanes of in-flight / window size, in [0, 1].
    - ``backlog`` / ``backlog_delta``: records waiting, and its change over the window.
    - ``batch_duration_s`` / ``trigger_s``: micro-batch duration and trigger interval.
    - ``arrival_rate``: records/s arriving; ``lane_rate``: records/s one lane processes
      while busy (its true processing rate, DS2).
    """

    fail_num: int
    repeat_failures: int = 0
    dlq_added: int = 0
    sink_errors: int = 0
    saturation: float | None = None
    backlog: int | None = None
    backlog_delta: int | None = None
    batch_duration_s: float | None = None
    trigger_s: float | None = None
    arrival_rate: float | None = None
    lane_rate: float | None = None

    def __post_init__(self) -> None:
        check_int("fail_num", self.fail_num, 0)
        check_int("repeat_failures", self.repeat_failures, 0)
        check_int("dlq_added", self.dlq_added, 0)
        check_int("sink_errors", self.sink_errors, 0)
        if self.repeat_failures > self.fail_num:
            raise ValueError(
                f"repeat_failures={self.repeat_failures} exceeds fail_num={self.fail_num}"
            )
        if self.saturation is not None:
            check_number("saturation", self.saturation)
            if self.saturation > 1.0:
                raise ValueError(f"saturation must be in [0, 1], got {self.saturation!r}")
        if self.backlog is not None:
            check_int("backlog", self.backlog, 0)
        if self.backlog_delta is not None and (
            isinstance(self.backlog_delta, bool) or not isinstance(self.backlog_delta, int)
        ):
            raise ValueError(f"backlog_delta must be an int, got {self.backlog_delta!r}")
        for name in ("batch_duration_s", "arrival_rate"):
            if getattr(self, name) is not None:
                check_number(name, getattr(self, name))
        for name in ("trigger_s", "lane_rate"):
            value = getattr(self, name)
            if value is not None and check_number(name, value) == 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")

    @classmethod
    def of(cls, windows: Sequence[MetricsRow]) -> WindowStats:
        """The last window's stats, its backlog change from the one before (oldest first).

        A figure the window does not carry stays unmeasured (it never triggers an
        action); lanes in no known shape count as no figures.
        """
        from .window_figures import WindowFigures

        current = windows[-1]
        try:
            extra = current.figures
        except ValueError:  # lanes in no known shape: no figures
            extra = WindowFigures()
        fail_num = current.fail_count
        repeat = extra.repeat_failures
        return cls(
            fail_num=fail_num,
            repeat_failures=min(int(repeat), fail_num) if isinstance(repeat, int) else 0,
            dlq_added=int(current.dlq),
            sink_errors=int(extra.sink_errors or 0),
            saturation=extra.saturation,
            backlog=int(current.backlog),
            backlog_delta=(
                int(current.backlog) - int(windows[-2].backlog) if len(windows) > 1 else None
            ),
            batch_duration_s=extra.batch_duration_s,
            trigger_s=extra.trigger_s or None,
            arrival_rate=extra.arrival_rate,
            lane_rate=extra.lane_rate or None,
        )


@dataclass(frozen=True)
class Decision:
    """A scaling decision and everything it was based on; JSON-serialisable for XCom.

    ``direction`` is ``up``, ``down`` or ``none``; ``new_parallelism`` equals
    ``old_parallelism`` for ``none``. ``cause`` is what the diagnosis saw (see ``CAUSES``);
    ``reason`` is one human sentence for the task log. ``figures`` holds the inputs used.
    """

    direction: Direction
    old_parallelism: int
    new_parallelism: int
    reason: str
    cause: str
    mean: float
    s2: float
    threshold_c: float
    policy: str
    figures: Mapping[str, float | int | None] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise ValueError(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.cause not in CAUSES:
            raise ValueError(f"cause must be one of {CAUSES}, got {self.cause!r}")
        if self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        check_int("old_parallelism", self.old_parallelism, 1)
        check_int("new_parallelism", self.new_parallelism, 1)
        if self.direction != direction_of(self.old_parallelism, self.new_parallelism):
            raise ValueError(
                f"direction={self.direction!r} contradicts old_parallelism="
                f"{self.old_parallelism} -> new_parallelism={self.new_parallelism}"
            )
        for name in ("mean", "s2", "threshold_c"):
            check_number(name, getattr(self, name))
        if not isinstance(self.reason, str) or not self.reason:
            raise ValueError(f"reason must be a non-empty str, got {self.reason!r}")
        for key, value in self.figures.items():
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise ValueError(f"figures[{key!r}] must be a finite number or None, got {value!r}")

    @property
    def changes(self) -> bool:
        return self.direction != "none"

    def to_dict(self) -> dict[str, Any]:
        """A plain dict of JSON types (``json.dumps`` works on it as is)."""
        out = asdict(self)
        out["figures"] = dict(self.figures)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Decision:
        """Rebuild from :meth:`to_dict`'s output; names a missing or unknown field."""
        if not isinstance(data, Mapping):
            raise ValueError(f"decision must be a mapping, got {type(data).__name__}")
        names = [f.name for f in fields(cls)]
        missing = [n for n in names if n not in data]
        if missing:
            raise ValueError(f"decision is missing field(s) {missing}")
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ValueError(f"decision has unknown field(s) {unknown}")
        figures = data["figures"]
        if not isinstance(figures, Mapping):
            raise ValueError(f"figures must be a mapping, got {figures!r}")
        return cls(**{**{n: data[n] for n in names}, "figures": dict(figures)})


def clamp(n: int, lo: int, hi: int | None) -> int:
    """``n`` within the parallelism bounds ``[lo, hi]`` (``hi`` None: no upper bound)."""
    n = max(n, lo)
    return min(n, hi) if hi is not None else n


def direction_of(old: int, new: int) -> Direction:
    """The direction of a change from ``old`` to ``new`` lanes."""
    return "up" if new > old else "down" if new < old else "none"


def paper_signal(fail_num: int, mean: float, s2: float, threshold_c: float) -> Direction:
    """Algorithm 2's rule alone: ``up`` when the counts spread (S^2 > C) and this window
    fails more than the mean, ``down`` when it fails less, else ``none``.

    The one statement of the rule: :func:`paper_decision` and the metrics page's
    per-window signal both ask it.
    """
    if s2 > threshold_c and fail_num > mean:
        return "up"
    if s2 > threshold_c and fail_num < mean:
        return "down"
    return "none"


def paper_decision(
    counts: Sequence[int],
    parallelism: int,
    threshold_c: float,
    *,
    min_parallelism: int = 1,
    max_parallelism: int | None = None,
) -> Decision:
    """Algorithm 2 as published. ``counts``: the ring buffer, current window last.

    Clamped to ``[min_parallelism, max_parallelism]``; a clamp that leaves the parallelism
    unchanged yields ``none`` with the reason saying so.
    """
    check_int("parallelism", parallelism, 1)
    c = check_number("threshold_c", threshold_c)
    check_int("min_parallelism", min_parallelism, 1)
    if max_parallelism is not None and check_int("max_parallelism", max_parallelism, 1) < (
        min_parallelism
    ):
        raise ValueError(f"max_parallelism={max_parallelism} < min_parallelism={min_parallelism}")
    mean, s2 = dispersion(counts)
    fail_num = counts[-1]
    figures = {"fail_num": fail_num, "windows": len(counts)}

    def decide(direction: Direction, new: int, reason: str, cause: str) -> Decision:
        return Decision(direction, parallelism, new, reason, cause, mean, s2, c, "paper", figures)

    stats = f"failNum={fail_num}, E(M)={mean:g}, S^2={s2:g}, C={c:g}"
    signal = paper_signal(fail_num, mean, s2, c)
    if signal != "none":
        up = signal == "up"
        wanted = parallelism << 1 if up else parallelism >> 1
        new = clamp(wanted, min_parallelism, max_parallelism)
        verb = "up" if up else "down"
        if new == parallelism:
            limit = "max" if up else "min"
            return decide(
                "none", parallelism, f"would scale {verb} ({stats}) but at {limit}", "none"
            )
        return decide(
            direction_of(parallelism, new),
            new,
            f"scale {verb} {parallelism} -> {new}: {stats}",
            "load" if up else "idle",
        )
    return decide("none", parallelism, f"stable: {stats}", "none")
