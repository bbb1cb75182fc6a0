"""The ``[scaling]`` and ``[flow]`` sections of a pipeline config: their fields and parsers.

Each section is a frozen dataclass whose defaults are what a pipeline without the
section gets, and a parser that checks every key's type and bounds, the error naming
``<section>.<key>`` and the value. :mod:`flowctl.pipelines.config` reads the file and
the top-level sections and hands these two tables here.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from typing import Any

from flowctl.core.adaptive_scaling import ScalingThresholds
from flowctl.core.health import CODE_ERROR_ACTIONS
from flowctl.core.validation import InvalidValue, choice, integer, number
from flowctl.core.window import GROWTHS, SLOW_DECREASES

#: Scaling policies (SPEC E): the paper's Algorithm 2, or the adaptive policy (**beyond**).
SCALING_POLICIES = ("paper", "adaptive")
#: How a replacement hands over: green admits from blue's frontier while blue finishes
#: (``overlap``), or only once blue is DRAINED (``sequential``).
HANDOVERS = ("overlap", "sequential")


@dataclass(frozen=True, kw_only=True)
class ScalingConfig(ScalingThresholds):
    """The ``[scaling]`` section: how the autoscale DAG decides and how a replacement runs.

    Defaults are what a pipeline without the section gets; every key is described in
    ``include/pipelines/wordcount.toml``. The decision thresholds and their defaults are
    :class:`~flowctl.core.adaptive_scaling.ScalingThresholds`' (defined once, there). The
    bounds (min/max parallelism) live in ``[stream]`` because the stream job enforces
    them too.
    """

    policy: str = "paper"
    history_windows: int = 6
    schedule: str = "* * * * *"
    poke_interval_s: float = 10.0
    sensor_timeout_s: float = 50.0
    ready_timeout_s: float = 180.0
    drain_timeout_s: float = 120.0
    stop_timeout_s: float = 60.0
    handover: str = "overlap"
    handover_lease_s: float = 10.0


#: Source modes: the flow-controlled spout (default) or the plain even split (the baseline).
SOURCE_MODES = ("flow", "plain")
#: How a lane's ack is judged SLOW: against a fixed latency target or an adaptive estimate.
RTT_MODES = ("fixed", "adaptive")
#: Dispatch policies of the spout (see :mod:`flowctl.core.dispatch`).
DISPATCH_POLICIES = ("round_robin", "least_loaded")
#: The Kafka clients a lane may read its ranges with, and the planner the log's exact ends
#: (``[flow] reader``): kafka-python, the platform's own client (the default), or librdkafka
#: through confluent-kafka, the optional extra ``flowctl[librdkafka]`` (docs/flow-control.md,
#: "Lane readers").
KAFKA_PYTHON = "kafka-python"
LIBRDKAFKA = "librdkafka"
LANE_READERS = (KAFKA_PYTHON, LIBRDKAFKA)
#: How to get the librdkafka reader's client, in the error of a config that asks for it
#: where it is missing.
LIBRDKAFKA_INSTALL = "pip install 'flowctl[librdkafka]'"


@dataclass(frozen=True)
class FlowConfig:
    """The ``[flow]`` section: windows, dispatch, replay, delayed persistence, backpressure.

    Defaults are what a pipeline without the section gets; every key is described in
    ``include/pipelines/wordcount.toml``. ``rtt = "fixed"`` is the default because the
    adaptive threshold chases the queueing delay the window itself creates (measured in
    the simulator): with a fixed latency target each lane's window settles near
    ``latency_target_s * lane rate``.
    """

    mode: str = "flow"
    w_min: int = 1
    w_max: int = 256
    #: ``None`` = "auto": each lane starts at its fair share of the batch budget
    #: (see :meth:`PipelineConfig.initial_window`).
    w_init: int | None = None
    rtt: str = "fixed"
    slow_decrease: str = "to_target"
    growth: str = "to_target"
    latency_target_s: float = 2.0
    #: A lane starts no new tuple once its batch has run this many ``latency_target_s``
    #: (0 = no budget): the rest go back unstarted to other lanes.
    lane_budget: float = 1.25
    rtt_min_threshold_s: float = 0.05
    dispatch: str = "round_robin"
    tuple_timeout_s: float = 20.0
    ack_timeout_s: float = 120.0
    linger_s: float = 0.0
    max_attempts: int = 3
    replay_backoff_initial_s: float = 0.25
    replay_backoff_max_s: float = 4.0
    flush_max_length: int = 200
    flush_update_time_s: float = 1.0
    #: Also flush when a micro-batch ends (its results are all in the MRWQ then).
    flush_at_batch_end: bool = True
    #: Flush whatever the lanes queued at every poll of the flusher (beyond Algorithm 3).
    flush_as_queued: bool = False
    #: Seconds between two looks of the flusher at the MRWQ.
    flush_poll_s: float = 0.05
    gap_grace_s: float = 5.0
    #: Seconds between two merges of a partition's contiguous applied rows below the checkpoint.
    coalesce_every_s: float = 10.0
    persist_queue_capacity: int = 2000
    process_queue_capacity: int = 512
    load_factor: float = 0.8
    backpressure_factor: float = 2.0
    admission_rate: float = 500.0
    metrics_window_s: float = 10.0
    #: Seconds a read error of the same partition (the planner's ends read, a lane's
    #: read of a tuple) may persist before the topology fails with it as its cause.
    read_error_timeout_s: float = 60.0
    #: STALLED after this long with a backlog and nothing durable (core/health.py).
    stall_after_s: float = 60.0
    #: A code error (a window's tuples all raising one exception type): ``halt`` stops
    #: admitting and keeps the offsets; ``dead_letter`` treats it as records' failures.
    on_code_error: str = "halt"
    #: The Kafka client the lanes read their ranges with (:data:`LANE_READERS`).
    reader: str = KAFKA_PYTHON

    @property
    def lane_budget_s(self) -> float | None:
        """Seconds of a batch after which a lane starts no new tuple (``None``: no limit)."""
        return self.lane_budget * self.latency_target_s if self.lane_budget > 0 else None

    @property
    def rtt_threshold_s(self) -> float | None:
        """The spout's fixed threshold, or ``None`` for the adaptive estimate."""
        return self.latency_target_s if self.rtt == "fixed" else None


def parse_scaling(table: dict[str, Any]) -> ScalingConfig:
    """Validate ``[scaling]``: every key typed and bounded, the error naming ``scaling.<key>``."""
    defaults = ScalingConfig()
    fail = InvalidValue

    def value(key: str) -> Any:
        return table.get(key, getattr(defaults, key))

    def share(key: str, *, lo_open: bool = False) -> float:
        return number(f"scaling.{key}", value(key), lo=0, hi=1, lo_open=lo_open)

    def seconds(key: str, *, lo_open: bool = True) -> float:
        return number(f"scaling.{key}", value(key), lo=0, lo_open=lo_open)

    policy = choice("scaling.policy", value("policy"), SCALING_POLICIES)
    windows = integer("scaling.history_windows", value("history_windows"), lo=2)
    schedule = table.get("schedule", defaults.schedule)
    if not isinstance(schedule, str) or not schedule.strip():
        raise fail("scaling.schedule", schedule, "must be a cron expression or preset ('@hourly')")
    low_sat = share("low_saturation")
    high_sat = share("high_saturation", lo_open=True)
    if low_sat >= high_sat:
        raise fail("scaling.low_saturation", low_sat, f"must be < high_saturation={high_sat!r}")
    low_batch = share("low_batch_fraction")
    if low_batch >= 1:
        raise fail("scaling.low_batch_fraction", low_batch, "must be < 1")
    return ScalingConfig(
        policy=policy,
        history_windows=windows,
        threshold_c=seconds("threshold_c", lo_open=False),
        cooldown_s=seconds("cooldown_s", lo_open=False),
        schedule=schedule.strip(),
        poke_interval_s=seconds("poke_interval_s"),
        sensor_timeout_s=seconds("sensor_timeout_s"),
        ready_timeout_s=seconds("ready_timeout_s"),
        drain_timeout_s=seconds("drain_timeout_s"),
        stop_timeout_s=seconds("stop_timeout_s"),
        target_utilisation=share("target_utilisation", lo_open=True),
        high_saturation=high_sat,
        low_saturation=low_sat,
        low_batch_fraction=low_batch,
        poison_share=share("poison_share", lo_open=True),
        scale_down_delay_s=seconds("scale_down_delay_s", lo_open=False),
        handover=choice("scaling.handover", value("handover"), HANDOVERS),
        handover_lease_s=seconds("handover_lease_s"),
    )


def parse_flow(table: dict[str, Any]) -> FlowConfig:
    """Validate ``[flow]``: every key typed and bounded, the error naming ``flow.<key>``."""
    defaults = FlowConfig()
    fail = InvalidValue

    def value(key: str) -> Any:
        return table.get(key, getattr(defaults, key))

    def one_of(key: str, allowed: tuple[str, ...]) -> str:
        return str(choice(f"flow.{key}", value(key), allowed))

    def count(key: str, lo: int) -> int:
        return integer(f"flow.{key}", value(key), lo=lo)

    def amount(key: str, *, lo: float, hi: float | None = None, lo_open: bool = True) -> float:
        return number(f"flow.{key}", value(key), lo=lo, hi=hi, lo_open=lo_open, hi_open=True)

    def flag(key: str) -> bool:
        if not isinstance(value(key), bool):
            raise fail(f"flow.{key}", value(key), "must be true or false")
        return bool(value(key))

    w_min = count("w_min", 1)
    w_max = count("w_max", 1)
    if w_max < w_min:
        raise fail("flow.w_max", w_max, f"must be >= w_min={w_min}")
    w_init: int | None = None
    if table.get("w_init", "auto") != "auto":
        w_init = table["w_init"]
        if isinstance(w_init, bool) or not isinstance(w_init, int):
            raise fail("flow.w_init", w_init, 'must be "auto" or an integer')
        if not w_min <= w_init <= w_max:
            raise fail("flow.w_init", w_init, f"must lie in [w_min={w_min}, w_max={w_max}]")
    initial = amount("replay_backoff_initial_s", lo=0)
    most = amount("replay_backoff_max_s", lo=0)
    if most < initial:
        raise fail(
            "flow.replay_backoff_max_s", most, f"must be >= replay_backoff_initial_s={initial!r}"
        )
    load_factor = amount("load_factor", lo=0.5, hi=1.0)
    factor = amount("backpressure_factor", lo=1.0)
    return FlowConfig(
        mode=one_of("mode", SOURCE_MODES),
        w_min=w_min,
        w_max=w_max,
        w_init=w_init,
        rtt=one_of("rtt", RTT_MODES),
        slow_decrease=one_of("slow_decrease", SLOW_DECREASES),
        growth=one_of("growth", GROWTHS),
        latency_target_s=amount("latency_target_s", lo=0),
        lane_budget=amount("lane_budget", lo=0, lo_open=False),
        rtt_min_threshold_s=amount("rtt_min_threshold_s", lo=0, lo_open=False),
        dispatch=one_of("dispatch", DISPATCH_POLICIES),
        tuple_timeout_s=amount("tuple_timeout_s", lo=0),
        ack_timeout_s=amount("ack_timeout_s", lo=0),
        linger_s=amount("linger_s", lo=0, lo_open=False),
        max_attempts=count("max_attempts", 1),
        replay_backoff_initial_s=initial,
        replay_backoff_max_s=most,
        flush_max_length=count("flush_max_length", 1),
        flush_update_time_s=amount("flush_update_time_s", lo=0),
        flush_at_batch_end=flag("flush_at_batch_end"),
        flush_as_queued=flag("flush_as_queued"),
        flush_poll_s=amount("flush_poll_s", lo=0),
        gap_grace_s=amount("gap_grace_s", lo=0, lo_open=False),
        coalesce_every_s=amount("coalesce_every_s", lo=0, lo_open=False),
        persist_queue_capacity=count("persist_queue_capacity", 1),
        process_queue_capacity=count("process_queue_capacity", 1),
        load_factor=load_factor,
        backpressure_factor=factor,
        admission_rate=amount("admission_rate", lo=0),
        metrics_window_s=amount("metrics_window_s", lo=0),
        read_error_timeout_s=amount("read_error_timeout_s", lo=0),
        stall_after_s=amount("stall_after_s", lo=0),
        on_code_error=one_of("on_code_error", CODE_ERROR_ACTIONS),
        reader=_reader(one_of("reader", LANE_READERS)),
    )


def _reader(reader: str) -> str:
    """``reader``, once its client is importable here: a config naming librdkafka where
    confluent-kafka is missing fails when it is loaded (``flowctl pipeline check``, the
    stream job's start), not in every lane's read."""
    if reader == LIBRDKAFKA and importlib.util.find_spec("confluent_kafka") is None:
        raise InvalidValue(
            "flow.reader",
            reader,
            f"needs confluent-kafka, which is not installed in {sys.executable}: install "
            f"it with `{LIBRDKAFKA_INSTALL}` (or `pip install confluent-kafka`), or set "
            f'reader = "{KAFKA_PYTHON}"',
        )
    return reader
