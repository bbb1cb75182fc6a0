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

The decision functions are pure; :class:`Autoscaler` adds the ring buffer and the time of
the last change, with a picklable snapshot so an Airflow sensor, which runs in a new
process on every poke, can resume it. :class:`Decision` round-trips through JSON (XCom).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal

from .clock import Clock

__all__ = [
    "AdaptiveConfig",
    "Autoscaler",
    "AutoscalerSnapshot",
    "Decision",
    "WindowStats",
    "adaptive_decision",
    "dispersion",
    "ds2_target",
    "linear_weights",
    "next_power_of_two",
    "paper_decision",
]

Direction = Literal["up", "down", "none"]
DIRECTIONS: tuple[str, ...] = ("up", "down", "none")
# What a decision saw: load (genuine overload), poison (the same tuples failing again),
# sink (the database failing), idle (spare capacity), none (nothing notable).
CAUSES: tuple[str, ...] = ("load", "poison", "sink", "idle", "none")
POLICIES: tuple[str, ...] = ("paper", "adaptive")


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def _check_number(name: str, value: Any, minimum: float = 0.0) -> float:
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
    _check_int("n", n, 1)
    return 1 << (n - 1).bit_length()


def linear_weights(n: int) -> list[float]:
    """``W_i = i / n`` for ``i = 1..n``, oldest first: older windows weigh less."""
    _check_int("n", n, 1)
    return [i / n for i in range(1, n + 1)]


def dispersion(counts: Sequence[int]) -> tuple[float, float]:
    """``(E(M), S^2)`` of failure counts, oldest first, current window last."""
    if not counts:
        raise ValueError("counts must hold at least one window, got an empty sequence")
    for i, x in enumerate(counts):
        _check_int(f"counts[{i}]", x, 0)
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
        _check_int("fail_num", self.fail_num, 0)
        _check_int("repeat_failures", self.repeat_failures, 0)
        _check_int("dlq_added", self.dlq_added, 0)
        _check_int("sink_errors", self.sink_errors, 0)
        if self.repeat_failures > self.fail_num:
            raise ValueError(
                f"repeat_failures={self.repeat_failures} exceeds fail_num={self.fail_num}"
            )
        if self.saturation is not None:
            _check_number("saturation", self.saturation)
            if self.saturation > 1.0:
                raise ValueError(f"saturation must be in [0, 1], got {self.saturation!r}")
        if self.backlog is not None:
            _check_int("backlog", self.backlog, 0)
        if self.backlog_delta is not None and (
            isinstance(self.backlog_delta, bool) or not isinstance(self.backlog_delta, int)
        ):
            raise ValueError(f"backlog_delta must be an int, got {self.backlog_delta!r}")
        for name in ("batch_duration_s", "arrival_rate"):
            if getattr(self, name) is not None:
                _check_number(name, getattr(self, name))
        for name in ("trigger_s", "lane_rate"):
            value = getattr(self, name)
            if value is not None and _check_number(name, value) == 0:
                raise ValueError(f"{name} must be > 0, got {value!r}")


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
        _check_int("old_parallelism", self.old_parallelism, 1)
        _check_int("new_parallelism", self.new_parallelism, 1)
        if self.direction != _direction(self.old_parallelism, self.new_parallelism):
            raise ValueError(
                f"direction={self.direction!r} contradicts old_parallelism="
                f"{self.old_parallelism} -> new_parallelism={self.new_parallelism}"
            )
        for name in ("mean", "s2", "threshold_c"):
            _check_number(name, getattr(self, name))
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


def _clamp(n: int, lo: int, hi: int | None) -> int:
    n = max(n, lo)
    return min(n, hi) if hi is not None else n


def _direction(old: int, new: int) -> Direction:
    return "up" if new > old else "down" if new < old else "none"


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
    _check_int("parallelism", parallelism, 1)
    c = _check_number("threshold_c", threshold_c)
    _check_int("min_parallelism", min_parallelism, 1)
    if max_parallelism is not None and _check_int("max_parallelism", max_parallelism, 1) < (
        min_parallelism
    ):
        raise ValueError(f"max_parallelism={max_parallelism} < min_parallelism={min_parallelism}")
    mean, s2 = dispersion(counts)
    fail_num = counts[-1]
    figures = {"fail_num": fail_num, "windows": len(counts)}

    def decide(direction: Direction, new: int, reason: str, cause: str) -> Decision:
        return Decision(direction, parallelism, new, reason, cause, mean, s2, c, "paper", figures)

    stats = f"failNum={fail_num}, E(M)={mean:g}, S^2={s2:g}, C={c:g}"
    if s2 > c and fail_num != mean:
        up = fail_num > mean
        wanted = parallelism << 1 if up else parallelism >> 1
        new = _clamp(wanted, min_parallelism, max_parallelism)
        verb = "up" if up else "down"
        if new == parallelism:
            limit = "max" if up else "min"
            return decide(
                "none", parallelism, f"would scale {verb} ({stats}) but at {limit}", "none"
            )
        return decide(
            _direction(parallelism, new),
            new,
            f"scale {verb} {parallelism} -> {new}: {stats}",
            "load" if up else "idle",
        )
    return decide("none", parallelism, f"stable: {stats}", "none")


@dataclass(frozen=True)
class AdaptiveConfig:
    """Thresholds of the adaptive policy (every one is validated, names in errors).

    ``target_utilisation`` is the DS2 headroom: lanes = arrival / (lane_rate * target).
    ``poison_share``: failures counted as poison when at least this share of them are
    repeat failures. ``cooldown_s`` applies after any applied change, both directions.
    """

    threshold_c: float
    min_parallelism: int = 1
    max_parallelism: int = 64
    cooldown_s: float = 120.0
    target_utilisation: float = 0.7
    high_saturation: float = 0.9
    low_saturation: float = 0.3
    low_batch_fraction: float = 0.5
    poison_share: float = 0.5

    def __post_init__(self) -> None:
        _check_number("threshold_c", self.threshold_c)
        _check_int("min_parallelism", self.min_parallelism, 1)
        _check_int("max_parallelism", self.max_parallelism, 1)
        if self.max_parallelism < self.min_parallelism:
            raise ValueError(
                f"max_parallelism={self.max_parallelism} < min_parallelism={self.min_parallelism}"
            )
        _check_number("cooldown_s", self.cooldown_s)
        for name in ("target_utilisation", "high_saturation", "poison_share"):
            value = _check_number(name, getattr(self, name))
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value!r}")
        for name in ("low_saturation", "low_batch_fraction"):
            if not 0 <= _check_number(name, getattr(self, name)) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.low_saturation >= self.high_saturation:
            raise ValueError(
                f"low_saturation={self.low_saturation} must be < "
                f"high_saturation={self.high_saturation}"
            )


def ds2_target(arrival_rate: float, lane_rate: float, target_utilisation: float) -> int:
    """Lanes needed so each runs at ``target_utilisation``: a power of two, at least 1."""
    _check_number("arrival_rate", arrival_rate)
    if _check_number("lane_rate", lane_rate) == 0:
        raise ValueError(f"lane_rate must be > 0, got {lane_rate!r}")
    needed = math.ceil(arrival_rate / (lane_rate * target_utilisation))
    return next_power_of_two(max(needed, 1))


def _diagnose(window: WindowStats, cfg: AdaptiveConfig) -> tuple[str, str]:
    """Why tuples failed: ``sink``, ``poison``, ``load`` or ``none``, and the evidence."""
    if window.sink_errors > 0:
        return "sink", f"{window.sink_errors} sink error(s): the database is failing"
    if window.fail_num == 0:
        return "none", "no failures"
    if window.repeat_failures >= cfg.poison_share * window.fail_num:
        return "poison", (
            f"{window.repeat_failures} of {window.fail_num} failures are repeat failures, "
            f"DLQ +{window.dlq_added}"
        )
    return "load", f"{window.fail_num} failures, {window.repeat_failures} repeats"


@dataclass(frozen=True)
class _Signals:
    """What one window says about load, read once for the adaptive policy's rules."""

    target: int | None  # DS2's parallelism, when the rates are known
    growing: bool  # the backlog grew over the window
    saturated: bool  # lanes' windows nearly full
    overrun: bool  # batches take longer than the trigger
    idle: bool  # lanes nearly empty or batches short

    @classmethod
    def of(cls, window: WindowStats, config: AdaptiveConfig) -> _Signals:
        rates_known = window.arrival_rate is not None and window.lane_rate is not None
        timed = window.batch_duration_s is not None and window.trigger_s is not None
        sat = window.saturation
        return cls(
            target=(
                ds2_target(window.arrival_rate, window.lane_rate, config.target_utilisation)  # type: ignore[arg-type]
                if rates_known
                else None
            ),
            growing=window.backlog_delta is not None and window.backlog_delta > 0,
            saturated=sat is not None and sat >= config.high_saturation,
            overrun=timed and window.batch_duration_s > window.trigger_s,  # type: ignore[operator]
            idle=(sat is not None and sat <= config.low_saturation)
            or (
                timed and window.batch_duration_s <= config.low_batch_fraction * window.trigger_s  # type: ignore[operator]
            ),
        )


def _figures(
    window: WindowStats, windows: int, target: int | None, since: float | None
) -> dict[str, float | int | None]:
    """What the decision saw, kept with it (the metrics page shows it)."""
    return {
        "fail_num": window.fail_num,
        "windows": windows,
        "repeat_failures": window.repeat_failures,
        "dlq_added": window.dlq_added,
        "sink_errors": window.sink_errors,
        "saturation": window.saturation,
        "backlog": window.backlog,
        "backlog_delta": window.backlog_delta,
        "batch_duration_s": window.batch_duration_s,
        "trigger_s": window.trigger_s,
        "arrival_rate": window.arrival_rate,
        "lane_rate": window.lane_rate,
        "ds2_target": target,
        "since_last_change_s": since,
    }


def adaptive_decision(
    counts: Sequence[int],
    window: WindowStats,
    parallelism: int,
    config: AdaptiveConfig,
    *,
    now: float,
    last_change_at: float | None,
) -> Decision:
    """The adaptive policy (**beyond**): diagnose, size by rates, respect limits and cooldown.

    ``counts`` is the ring buffer with ``window.fail_num`` as its last element.

    Up when the cause is load and any of: the paper's rule fires; the backlog grows while
    lanes are saturated or batches overrun the trigger; the DS2 target exceeds the current
    parallelism while the backlog grows. The new parallelism is the larger of the doubling
    and the DS2 target. Down when the backlog is not growing, failures are not rising,
    nothing fails because of the sink or poison, and lanes are idle (low saturation or
    short batches); the target is the DS2 target if rates are known, else a halving.
    """
    _check_int("parallelism", parallelism, 1)
    if not counts or counts[-1] != window.fail_num:
        raise ValueError(
            f"counts must end with the current window's fail_num={window.fail_num}, "
            f"got {list(counts)!r}"
        )
    mean, s2 = dispersion(counts)
    c = config.threshold_c
    sig = _Signals.of(window, config)
    since = None if last_change_at is None else now - last_change_at
    figures = _figures(window, len(counts), sig.target, since)

    def decide(new: int, reason: str, cause: str) -> Decision:
        return Decision(
            _direction(parallelism, new),
            parallelism,
            new,
            reason,
            cause,
            mean,
            s2,
            c,
            "adaptive",
            figures,
        )

    cause, evidence = _diagnose(window, config)
    stats = f"failNum={window.fail_num}, E(M)={mean:g}, S^2={s2:g}, C={c:g}"
    wants_up: list[str] = []
    if window.fail_num > mean and s2 > c:  # the paper's rule
        wants_up.append(f"failures rising ({stats})")
    if sig.growing and (sig.saturated or sig.overrun):
        wants_up.append(f"backlog growing by {window.backlog_delta} with lanes saturated")
    if sig.growing and sig.target is not None and sig.target > parallelism:
        wants_up.append(f"DS2 target {sig.target} > {parallelism}")

    if wants_up and cause in ("sink", "poison"):
        return decide(parallelism, f"not scaling up: {evidence}", cause)
    if since is not None and since < config.cooldown_s:
        return decide(
            parallelism,
            f"cooldown: {since:g} s since the last change < {config.cooldown_s:g} s",
            cause,
        )
    if wants_up:
        hi = config.max_parallelism
        new = _clamp(max(parallelism << 1, sig.target or 0), config.min_parallelism, hi)
        why = "; ".join(wants_up)
        if new <= parallelism:
            return decide(parallelism, f"would scale up ({why}) but at max {hi}", "load")
        return decide(new, f"scale up {parallelism} -> {new}: {why}", "load")

    if cause in ("sink", "poison"):
        return decide(parallelism, f"not scaling down while diagnosing: {evidence}", cause)
    if sig.growing:
        return decide(parallelism, f"holding: backlog growing by {window.backlog_delta}", cause)
    if window.fail_num > mean:
        return decide(parallelism, f"holding: failures rising ({stats})", cause)
    if not sig.idle:
        return decide(parallelism, f"holding: lanes busy ({stats})", cause)
    return _scale_down(parallelism, sig.target, config, decide)


def _scale_down(
    parallelism: int,
    target: int | None,
    config: AdaptiveConfig,
    decide: Callable[[int, str, str], Decision],
) -> Decision:
    """Idle lanes: the DS2 target if the rates are known, else a halving, within the bounds."""
    lo = config.min_parallelism
    wanted = target if target is not None else parallelism >> 1
    new = _clamp(min(wanted, parallelism), lo, config.max_parallelism)
    if new >= parallelism:
        if target is not None and target >= parallelism:
            return decide(parallelism, f"holding: DS2 target {target} needs {parallelism}", "none")
        return decide(parallelism, f"lanes idle but at min {lo}", "idle")
    basis = f"DS2 target {target}" if target is not None else "halving"
    return decide(new, f"scale down {parallelism} -> {new}: lanes idle, {basis}", "idle")


@dataclass(frozen=True)
class AutoscalerSnapshot:
    """Everything an :class:`Autoscaler` needs to resume in another process."""

    parallelism: int
    counts: tuple[int, ...]
    last_change_at: float | None


class Autoscaler:
    """Algorithm 2's loop: one :meth:`observe` per window, one :meth:`applied` per change.

    ``observe(window)`` pushes the window's ``fail_num`` into a ring buffer of the last
    ``history_windows`` windows (``collections.deque(maxlen=A)``) and returns a
    :class:`Decision`; it changes nothing else. The caller (the autoscale DAG) runs the
    blue-green replacement and, only if it succeeded, calls ``applied(decision)``: the
    parallelism and the cooldown clock change then, and the history is cleared because
    counts measured under the old parallelism do not describe the new topology.
    """

    def __init__(
        self,
        *,
        parallelism: int,
        history_windows: int,
        clock: Clock,
        policy: str = "paper",
        threshold_c: float | None = None,
        config: AdaptiveConfig | None = None,
        snapshot: AutoscalerSnapshot | None = None,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {policy!r}")
        _check_int("history_windows", history_windows, 1)
        if policy == "adaptive" and config is None:
            raise ValueError("policy='adaptive' needs config=AdaptiveConfig(...), got None")
        if policy == "paper" and threshold_c is None and config is None:
            raise ValueError("policy='paper' needs threshold_c, got None")
        self.policy = policy
        self.config = config
        self.threshold_c = (
            _check_number("threshold_c", threshold_c)
            if threshold_c is not None
            else config.threshold_c  # type: ignore[union-attr]
        )
        self._clock = clock
        self._counts: deque[int] = deque(maxlen=history_windows)
        self.parallelism = _check_int("parallelism", parallelism, 1)
        self.last_change_at: float | None = None
        if snapshot is not None:
            self.restore(snapshot)

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(self._counts)

    def observe(self, window: WindowStats | int) -> Decision:
        """Record one closed window and decide; does not change the parallelism."""
        stats = window if isinstance(window, WindowStats) else WindowStats(fail_num=window)
        self._counts.append(stats.fail_num)
        if self.policy == "paper":
            lo = self.config.min_parallelism if self.config else 1
            hi = self.config.max_parallelism if self.config else None
            return paper_decision(
                self._counts,
                self.parallelism,
                self.threshold_c,
                min_parallelism=lo,
                max_parallelism=hi,
            )
        return adaptive_decision(
            self._counts,
            stats,
            self.parallelism,
            self.config,  # type: ignore[arg-type]
            now=self._clock.now(),
            last_change_at=self.last_change_at,
        )

    def applied(self, decision: Decision) -> None:
        """The replacement for ``decision`` succeeded: adopt its parallelism."""
        if decision.old_parallelism != self.parallelism:
            raise ValueError(
                f"decision.old_parallelism={decision.old_parallelism} does not match the "
                f"current parallelism {self.parallelism}"
            )
        if not decision.changes:
            return
        self.parallelism = decision.new_parallelism
        self.last_change_at = self._clock.now()
        self._counts.clear()

    def snapshot(self) -> AutoscalerSnapshot:
        return AutoscalerSnapshot(self.parallelism, tuple(self._counts), self.last_change_at)

    def restore(self, snapshot: AutoscalerSnapshot) -> None:
        _check_int("snapshot.parallelism", snapshot.parallelism, 1)
        for i, x in enumerate(snapshot.counts):
            _check_int(f"snapshot.counts[{i}]", x, 0)
        self.parallelism = snapshot.parallelism
        self._counts.clear()
        self._counts.extend(snapshot.counts)
        self.last_change_at = snapshot.last_change_at
