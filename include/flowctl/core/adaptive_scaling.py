"""The adaptive scaling policy (**beyond** SPEC E): diagnose, size by rates, scale down.

Beside the paper's rule (:func:`flowctl.core.scaling.paper_decision`) this policy asks
*why* tuples fail (poison records or a failing sink must not buy more lanes), sizes the
topology DS2-style from measured rates (arrival rate over one lane's true processing
rate, rounded up to a power of two), scales an idle topology down (the paper never does:
S^2 = 0 when nothing fails), and respects min/max parallelism and a cooldown.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from .scaling import (
    Decision,
    WindowStats,
    check_int,
    check_number,
    clamp,
    direction_of,
    dispersion,
    next_power_of_two,
)

__all__ = ["AdaptiveConfig", "ScalingThresholds", "adaptive_decision", "ds2_target"]


@dataclass(frozen=True)
class ScalingThresholds:
    """The autoscaler's thresholds and their defaults, defined once (validated, names in errors).

    A pipeline's ``[scaling]`` section (``flowctl.pipelines.config.ScalingConfig``), the
    failure-window policy (:class:`flowctl.core.scaling_policy.WindowPolicy`) and
    :class:`AdaptiveConfig` extend this class, so a threshold and its default are one field here.

    ``threshold_c`` is the paper's C (both policies use it). ``target_utilisation`` is
    the DS2 headroom: lanes = arrival / (lane_rate * target).
    ``poison_share``: failures counted as poison when at least this share of them are
    repeat failures. ``cooldown_s`` applies after any applied change, both directions.
    ``scale_down_delay_s``: no scale-down this soon after a scale-up (Kubernetes' HPA
    waits 300 s by default before scaling down, Flink's autoscaler an hour): a load that
    needed more lanes a moment ago may need them again, and one noisy minute must not
    buy a lane and give it back (measured live: 1 -> 2 -> 1 lanes within 92 s).
    """

    threshold_c: float = 4.0
    cooldown_s: float = 120.0
    target_utilisation: float = 0.7
    high_saturation: float = 0.9
    low_saturation: float = 0.3
    low_batch_fraction: float = 0.5
    poison_share: float = 0.5
    scale_down_delay_s: float = 300.0

    def __post_init__(self) -> None:
        check_number("threshold_c", self.threshold_c)
        check_number("cooldown_s", self.cooldown_s)
        check_number("scale_down_delay_s", self.scale_down_delay_s)
        for name in ("target_utilisation", "high_saturation", "poison_share"):
            value = check_number(name, getattr(self, name))
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value!r}")
        for name in ("low_saturation", "low_batch_fraction"):
            if not 0 <= check_number(name, getattr(self, name)) < 1:
                raise ValueError(f"{name} must be in [0, 1), got {getattr(self, name)!r}")
        if self.low_saturation >= self.high_saturation:
            raise ValueError(
                f"low_saturation={self.low_saturation} must be < "
                f"high_saturation={self.high_saturation}"
            )

    def thresholds(self) -> ScalingThresholds:
        """The thresholds alone (of a subclass that adds other settings)."""
        return ScalingThresholds(
            **{f.name: getattr(self, f.name) for f in fields(ScalingThresholds)}
        )


@dataclass(frozen=True, kw_only=True)
class AdaptiveConfig(ScalingThresholds):
    """What the adaptive policy decides with: the thresholds and the parallelism bounds."""

    min_parallelism: int = 1
    max_parallelism: int = 64

    def __post_init__(self) -> None:
        check_int("min_parallelism", self.min_parallelism, 1)
        check_int("max_parallelism", self.max_parallelism, 1)
        if self.max_parallelism < self.min_parallelism:
            raise ValueError(
                f"max_parallelism={self.max_parallelism} < min_parallelism={self.min_parallelism}"
            )
        super().__post_init__()


def ds2_target(arrival_rate: float, lane_rate: float, target_utilisation: float) -> int:
    """Lanes needed so each runs at ``target_utilisation``: a power of two, at least 1."""
    check_number("arrival_rate", arrival_rate)
    if check_number("lane_rate", lane_rate) == 0:
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
    growing: bool  # the backlog grew over the window, beyond one batch's arrivals
    saturated: bool  # lanes' windows nearly full
    overrun: bool  # batches take longer than the trigger
    idle: bool  # lanes nearly empty or batches short

    @classmethod
    def of(cls, window: WindowStats, config: AdaptiveConfig) -> _Signals:
        arrival, lane_rate = window.arrival_rate, window.lane_rate
        batch_s, trigger_s = window.batch_duration_s, window.trigger_s
        sat = window.saturation
        return cls(
            target=(
                ds2_target(arrival, lane_rate, config.target_utilisation)
                if arrival is not None and lane_rate is not None
                else None
            ),
            growing=_growing(window),
            saturated=sat is not None and sat >= config.high_saturation,
            overrun=batch_s is not None and trigger_s is not None and batch_s > trigger_s,
            idle=(sat is not None and sat <= config.low_saturation)
            or (
                batch_s is not None
                and trigger_s is not None
                and batch_s <= config.low_batch_fraction * trigger_s
            ),
        )


def _growing(window: WindowStats) -> bool:
    """The backlog grew over the window and is more than one micro-batch leaves behind.

    The backlog read at a window's end is the input not yet taken by a batch: between two
    batches it swings from about 0 to ``arrival_rate x batch_duration_s`` with where the
    window happens to close, so a topology that keeps up shows a "growth" of a few hundred
    records in half its windows (measured live, bench/autoscale_live.py: deltas of 13-212
    records on backlogs of 93-212 at 800 records/s and 0.27-0.82 s batches each bought a
    lane). A backlog within one batch's arrivals is that swing, not a lag. Without the
    rate or the batch time, any growth counts (as before).
    """
    if window.backlog_delta is None or window.backlog_delta <= 0:
        return False
    if window.backlog is None or window.arrival_rate is None or window.batch_duration_s is None:
        return True
    return window.backlog > window.arrival_rate * window.batch_duration_s


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
    last_up_at: float | None = None,
) -> Decision:
    """The adaptive policy (**beyond**): diagnose, size by rates, respect limits and cooldown.

    ``counts`` is the ring buffer with ``window.fail_num`` as its last element.

    Up when the cause is load and any of: the paper's rule fires; the backlog grows while
    lanes are saturated or batches overrun the trigger; the DS2 target exceeds the current
    parallelism while the backlog grows. The backlog "grows" when it rose over the window
    and exceeds one micro-batch's arrivals (:func:`_growing`). The new parallelism is the
    larger of the doubling and the DS2 target. Down when the backlog is not growing,
    failures are not rising, nothing fails because of the sink or poison, and lanes are
    idle (low saturation or short batches), and the last scale-up (``last_up_at``, when
    its replacement finished) is ``scale_down_delay_s`` old; the target is the DS2 target
    if rates are known, else a halving.
    """
    check_int("parallelism", parallelism, 1)
    _check_counts(counts, window)
    mean, s2 = dispersion(counts)
    c = config.threshold_c
    sig = _Signals.of(window, config)
    since = None if last_change_at is None else now - last_change_at
    figures = _figures(window, len(counts), sig.target, since)

    def decide(new: int, reason: str, cause: str) -> Decision:
        return Decision(
            direction_of(parallelism, new),
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
    wants_up = _reasons_up(window, sig, parallelism, paper_fires=s2 > c, mean=mean, stats=stats)
    if wants_up and cause in ("sink", "poison"):
        return decide(parallelism, f"not scaling up: {evidence}", cause)
    if since is not None and since < config.cooldown_s:
        return decide(
            parallelism,
            f"cooldown: {since:g} s since the last change < {config.cooldown_s:g} s",
            cause,
        )
    if wants_up:
        return _scale_up(parallelism, sig.target, wants_up, config, decide)

    if cause in ("sink", "poison"):
        return decide(parallelism, f"not scaling down while diagnosing: {evidence}", cause)
    if sig.growing:
        return decide(parallelism, f"holding: backlog growing by {window.backlog_delta}", cause)
    if window.fail_num > mean:
        return decide(parallelism, f"holding: failures rising ({stats})", cause)
    if not sig.idle:
        return decide(parallelism, f"holding: lanes busy ({stats})", cause)
    if last_up_at is not None and now - last_up_at < config.scale_down_delay_s:
        return decide(
            parallelism,
            f"holding: lanes idle, but scaled up {now - last_up_at:g} s ago "
            f"< scale_down_delay_s={config.scale_down_delay_s:g}",
            "idle",
        )
    return _scale_down(parallelism, sig.target, config, decide)


def _check_counts(counts: Sequence[int], window: WindowStats) -> None:
    """The ring buffer must end with this window: a stale buffer would misjudge the trend."""
    if not counts or counts[-1] != window.fail_num:
        raise ValueError(
            f"counts must end with the current window's fail_num={window.fail_num}, "
            f"got {list(counts)!r}"
        )


def _reasons_up(
    window: WindowStats,
    sig: _Signals,
    parallelism: int,
    *,
    paper_fires: bool,
    mean: float,
    stats: str,
) -> list[str]:
    """Each load signal that asks for more lanes, as the text the decision's reason joins."""
    wants_up: list[str] = []
    if window.fail_num > mean and paper_fires:  # the paper's rule
        wants_up.append(f"failures rising ({stats})")
    if sig.growing and (sig.saturated or sig.overrun):
        busy = "lanes saturated" if sig.saturated else "batches overrunning the trigger"
        wants_up.append(f"backlog growing by {window.backlog_delta} with {busy}")
    if sig.growing and sig.target is not None and sig.target > parallelism:
        wants_up.append(f"DS2 target {sig.target} > {parallelism}")
    return wants_up


def _scale_up(
    parallelism: int,
    target: int | None,
    wants_up: Sequence[str],
    config: AdaptiveConfig,
    decide: Callable[[int, str, str], Decision],
) -> Decision:
    """Load: the larger of the doubling and the DS2 target, within the bounds."""
    hi = config.max_parallelism
    new = clamp(max(parallelism << 1, target or 0), config.min_parallelism, hi)
    why = "; ".join(wants_up)
    if new <= parallelism:
        return decide(parallelism, f"would scale up ({why}) but at max {hi}", "load")
    return decide(new, f"scale up {parallelism} -> {new}: {why}", "load")


def _scale_down(
    parallelism: int,
    target: int | None,
    config: AdaptiveConfig,
    decide: Callable[[int, str, str], Decision],
) -> Decision:
    """Idle lanes: the DS2 target if the rates are known, else a halving, within the bounds."""
    lo = config.min_parallelism
    wanted = target if target is not None else parallelism >> 1
    new = clamp(min(wanted, parallelism), lo, config.max_parallelism)
    if new >= parallelism:
        if target is not None and target >= parallelism:
            return decide(parallelism, f"holding: DS2 target {target} needs {parallelism}", "none")
        return decide(parallelism, f"lanes idle but at min {lo}", "idle")
    basis = f"DS2 target {target}" if target is not None else "halving"
    return decide(new, f"scale down {parallelism} -> {new}: lanes idle, {basis}", "idle")
