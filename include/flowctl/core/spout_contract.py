"""What goes in and out of the spout: its config, the dispatches it emits, the lane reports
it takes (and the outcomes they carry).

Apart from :mod:`flowctl.core.spout` so that the lanes, the channels and the simulator
share the vocabulary without the admission engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from .dispatch import make_policy
from .tuples import TupleRange
from .window import GROWTHS, SLOW_DECREASES


class Outcome(StrEnum):
    """What a lane did with one tuple."""

    ACKED = "acked"  # processed; its result is in the MRWQ
    REPLAYED = "replayed"  # raised: its records went to From (replay) with attempt + 1
    DLQ = "dlq"  # raised: its records went to the dead-letter topic
    TIMED_OUT = "timed_out"  # exceeded its deadline: records went to From (or the DLQ)
    FAILED = "failed"  # no outcome stored at all (read or store failed): dispatch again
    HELD = "held"  # a replayed record not eligible yet (backoff): read it again later
    POISON = "poison"  # every record proven poison (failed alone): all went to the DLQ
    RETURNED = "returned"  # not started: the lane's time budget was spent; dispatch again


#: Outcomes whose records were routed by the lane (the tuple is resolved, not requeued).
ROUTED = frozenset({Outcome.REPLAYED, Outcome.DLQ, Outcome.TIMED_OUT, Outcome.POISON})

#: Outcomes that judge the lane like an ack (window, rate): the tuple was resolved without
#: a sign of load. A record proven poison is a property of the data, not of the lane, so
#: dead-lettering it must not cut the window nor count as a failure for scaling.
NOT_LOAD = frozenset({Outcome.ACKED, Outcome.POISON})


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise ValueError(f"SpoutConfig.{name} must be a number > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class SpoutConfig:
    """How one topology admits and dispatches (the ``[flow]`` section of a pipeline config).

    ``rtt_threshold_s`` is the fixed latency target that classifies an ack SLOW; ``None``
    selects the adaptive RFC 6298 estimate. The fixed target is the default because the
    adaptive threshold chases the queueing delay the window itself creates (the window
    grows, rt grows, the threshold follows, and nothing ever reads SLOW).
    """

    pipeline: str
    lanes: int
    tuple_size: int
    w_min: int = 1
    w_max: int = 32
    w_init: int = 2
    rtt_threshold_s: float | None = 2.0
    rtt_min_threshold_s: float = 0.05
    policy: str = "round_robin"
    tuple_timeout_s: float = 60.0
    linger_s: float = 0.5
    slow_decrease: str = "one"
    growth: str = "one"
    replay_share: float = 0.5

    def __post_init__(self) -> None:
        for name in ("lanes", "tuple_size", "w_min", "w_max", "w_init"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"SpoutConfig.{name} must be an int >= 1, got {value!r}")
        if not self.w_min <= self.w_init <= self.w_max:
            raise ValueError(
                f"SpoutConfig.w_init={self.w_init} must lie in [w_min={self.w_min}, "
                f"w_max={self.w_max}]"
            )
        if self.rtt_threshold_s is not None:
            _positive("rtt_threshold_s", self.rtt_threshold_s)
        _positive("tuple_timeout_s", self.tuple_timeout_s)
        if isinstance(self.linger_s, bool) or not isinstance(self.linger_s, int | float):
            raise ValueError(f"SpoutConfig.linger_s must be a number >= 0, got {self.linger_s!r}")
        if self.linger_s < 0:
            raise ValueError(f"SpoutConfig.linger_s must be a number >= 0, got {self.linger_s!r}")
        if (
            isinstance(self.replay_share, bool)
            or not isinstance(self.replay_share, int | float)
            or not 0 < self.replay_share <= 1
        ):
            raise ValueError(
                f"SpoutConfig.replay_share must be a number in (0, 1], got {self.replay_share!r}"
            )
        make_policy(self.policy)  # a clear error for an unknown name
        for name, allowed in (("slow_decrease", SLOW_DECREASES), ("growth", GROWTHS)):
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"SpoutConfig.{name} must be one of {', '.join(allowed)}, "
                    f"got {getattr(self, name)!r}"
                )


@dataclass(frozen=True)
class Dispatch:
    """One tuple given to one lane: the lane acks ``edge`` to the XOR acker when done.

    ``replay`` marks a record read from the To replay topic (``tuple`` then holds its
    replay-topic coordinates, one record); ``from_topic`` is where the lane sends failures.
    """

    lane: int
    tuple: TupleRange
    edge: int
    replay: bool
    from_topic: str


@dataclass(frozen=True)
class LaneResult:
    """A lane's report on one tuple (one entry of its feedback)."""

    tuple_id: str
    outcome: Outcome
    xor: int = 0
    rt: float | None = None
    records: int = 0
    routed_records: int = 0
    dead_records: int = 0
    latencies: tuple[float, ...] = ()
    not_before: float | None = None
    mrwq_epoch: str | None = None
    mrwq_seq: int | None = None
    error: str = ""
    #: Where the error was raised (the innermost traceback frames), when a lane knows it.
    trace: str = ""


@dataclass
class ReportSummary:
    """What one lane report changed (for logs)."""

    lane: int
    acked: int = 0
    failed: int = 0
    timed_out: int = 0
    requeued: int = 0
    held: int = 0
    poison: int = 0
    returned: int = 0
    stale: int = 0
    errors: list[str] = field(default_factory=list)


#: The spout's counters (``Spout.counters``), totals since it was built.
COUNTERS = (
    "admitted",
    "acked",
    "failed",
    "timed_out",
    "replayed",
    "dlq",
    "records",
    "requeued",
    "held",
    "returned",
    "replay_admitted",
    "gaps_admitted",
    "repeat_failures",
)
