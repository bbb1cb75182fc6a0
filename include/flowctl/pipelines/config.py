"""Pipeline configuration files (``include/pipelines/<name>.toml``), loaded and validated.

One TOML file per pipeline drives everything built from it: the stream job,
the DAGs, the reconcile job. Loading fails early with an error naming the
file, the field and the value, so a typo never becomes a running topology
with a silently defaulted setting.
"""

from __future__ import annotations

import importlib
import os
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from flowctl.config import PROJECT_ROOT
from flowctl.core.adaptive_scaling import ScalingThresholds
from flowctl.core.health import CODE_ERROR_ACTIONS
from flowctl.core.sink_rules import SinkSpec, parse_sink
from flowctl.core.validation import (
    DEFAULT_COMPRESSION,
    InvalidValue,
    choice,
    compression,
    integer,
    number,
)
from flowctl.core.window import GROWTHS, SLOW_DECREASES
from flowctl.pipelines.health_callback import resolve_callback

#: Where a bare pipeline name is looked up.
PIPELINES_DIR = PROJECT_ROOT / "include" / "pipelines"
#: Names another directory of pipeline configs (experiments, tests); see :func:`pipelines_dir`.
PIPELINES_DIR_ENV = "FLOWCTL_PIPELINES_DIR"

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class PipelineConfigError(ValueError):
    """A pipeline config file is missing or has a bad field; the message names both."""


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
#: ``[topics] on_data_loss``: what a topology does when records past its durable checkpoint
#: are gone from the log (docs/flow-control.md, "Data loss and read errors").
DATA_LOSS_POLICIES = ("fail", "skip")


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
    gap_grace_s: float = 5.0
    #: Seconds between two merges of the contiguous applied rows below the checkpoint.
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

    @property
    def lane_budget_s(self) -> float | None:
        """Seconds of a batch after which a lane starts no new tuple (``None``: no limit)."""
        return self.lane_budget * self.latency_target_s if self.lane_budget > 0 else None

    @property
    def rtt_threshold_s(self) -> float | None:
        """The spout's fixed threshold, or ``None`` for the adaptive estimate."""
        return self.latency_target_s if self.rtt == "fixed" else None


@dataclass(frozen=True)
class PipelineConfig:
    """A validated pipeline config; see ``include/pipelines/wordcount.toml`` for the fields."""

    name: str
    definition: str
    eden_topic: str
    partitions: int
    parallelism: int
    min_parallelism: int
    max_parallelism: int
    max_records_per_batch: int
    trigger_interval_s: float
    tuple_size: int
    source: Path
    scaling: ScalingConfig = field(default_factory=ScalingConfig)
    flow: FlowConfig = field(default_factory=FlowConfig)
    #: The ``[sink]`` section (``None``: the definition brings ``apply``/``stored``); see
    #: :func:`flowctl.pipelines.sinks.result_store`.
    sink: SinkSpec | None = None
    #: Micro-batches whose offset and commit logs Spark keeps in a topology's checkpoint
    #: (``spark.sql.streaming.minBatchesToRetain``; the job's restart point is the
    #: database's durable checkpoint, so a few suffice).
    spark_batches_to_retain: int = 10
    #: The ``[params]`` section: the pipeline's own settings, handed to its definition
    #: module's ``configure(params)`` (see :meth:`pipeline_definition`).
    params: Mapping[str, Any] = field(default_factory=dict, hash=False)
    #: ``topics.compression``: the codec the platform's producers write to this pipeline's
    #: topics (ingest, the feed, the lanes' replay and DLQ records).
    compression: str = DEFAULT_COMPRESSION
    #: ``[topics] on_data_loss``: ``fail`` (stop the topology, the lost range named) or
    #: ``skip`` (record the lost range, move the checkpoint over it, go on).
    on_data_loss: str = "fail"
    #: ``[stream] on_health_callback``: ``"package.module:function"`` called when a
    #: topology becomes STALLED, HALTED or FAILED (:mod:`flowctl.pipelines.health_callback`).
    on_health_callback: str | None = None

    @property
    def replay_topics(self) -> tuple[str, str]:
        """The two replay queues (SPEC D): ``<name>.replay.a`` and ``<name>.replay.b``."""
        return (f"{self.name}.replay.a", f"{self.name}.replay.b")

    @property
    def dlq_topic(self) -> str:
        """Where records go after their last replay attempt."""
        return f"{self.name}.dlq"

    def initial_window(self, lanes: int) -> int:
        """The window (tuples) each of ``lanes`` lanes starts with.

        An explicit ``flow.w_init`` wins. "auto" gives each lane its fair share of
        the batch budget, ``ceil(max_records_per_batch / tuple_size / lanes)``,
        within ``[w_min, w_max]``: the window grows by one tuple per round (no slow
        start, SPEC A), so a smaller start would keep a topology with few lanes
        under the plain job's batch size for dozens of micro-batches, and a larger
        one is cut by the budget anyway.
        """
        flow = self.flow
        if flow.w_init is not None:
            return flow.w_init
        share = -(-self.max_records_per_batch // (self.tuple_size * max(1, lanes)))
        return min(max(share, flow.w_min), flow.w_max)

    def load_definition(self) -> ModuleType:
        """Import the definition module."""
        return importlib.import_module(self.definition)

    def pipeline_definition(self) -> Any:
        """The definition object this config runs: ``configure(params)`` of the module when
        it has one (its ``[params]`` applied), else its ``DEFINITION``.

        Lanes, the flusher, reconcile and ``flowctl pipeline check`` all ask here, so a
        setting in ``[params]`` (e.g. clickstream's allowed lateness) reaches every place
        that runs the definition; the module's ``DEFINITION`` is what an empty ``[params]``
        gives.
        """
        return definition_of(self.load_definition(), self.params)


_KNOWN = {
    "": {"name", "definition", "topics", "stream", "scaling", "flow", "sink", "params"},
    "topics": {"eden", "partitions", "compression", "on_data_loss"},
    "stream": {
        "parallelism",
        "min_parallelism",
        "max_parallelism",
        "max_records_per_batch",
        "trigger_interval_s",
        "tuple_size",
        "spark_batches_to_retain",
        "on_health_callback",
    },
    "scaling": set(ScalingConfig.__dataclass_fields__),
    "flow": set(FlowConfig.__dataclass_fields__),
}


def pipelines_dir() -> Path:
    """Where bare pipeline names are looked up: ``$FLOWCTL_PIPELINES_DIR`` or include/pipelines."""
    env_dir = os.environ.get(PIPELINES_DIR_ENV)
    return Path(env_dir).expanduser().resolve() if env_dir else PIPELINES_DIR


def resolve_path(name_or_path: str | Path) -> Path:
    """A bare name -> ``<pipelines_dir()>/<name>.toml``; anything else is a path."""
    text = str(name_or_path)
    if _NAME.match(text):
        return pipelines_dir() / f"{text}.toml"
    return Path(text).expanduser().resolve()


def load_pipeline_config(name_or_path: str | Path) -> PipelineConfig:
    """Load and validate a pipeline config by name (``"wordcount"``) or path."""
    try:
        path = resolve_path(name_or_path)
        exists = path.is_file()
    except (ValueError, RuntimeError) as exc:  # a NUL byte, "~nosuchuser/...": no such file
        raise PipelineConfigError(f"pipeline config {name_or_path!r}: {exc}") from None
    if not exists:
        raise PipelineConfigError(f"pipeline config {name_or_path!r}: file {path} does not exist")
    try:
        with path.open("rb") as fh:
            raw = tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise PipelineConfigError(f"pipeline config {path}: not valid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:
        raise PipelineConfigError(
            f"pipeline config {path}: not valid TOML (not UTF-8): {exc}"
        ) from None
    except OSError as exc:  # a file that cannot be read (permissions, a special file)
        raise PipelineConfigError(f"pipeline config {path}: cannot be read: {exc}") from None
    try:
        return _parse(raw, path)
    except InvalidValue as exc:  # every check below names the field and the value
        raise PipelineConfigError(f"{path}: {exc}") from None


def _parse(raw: dict[str, Any], path: Path) -> PipelineConfig:
    fail = InvalidValue
    for section, known in _KNOWN.items():
        table = raw if not section else raw.get(section, {})
        if not isinstance(table, dict):
            raise fail(section, table, "must be a table")
        for key in table:
            if key not in known:
                field = f"{section}.{key}" if section else key
                raise fail(field, table[key], f"is not a known field (known: {sorted(known)})")
    topics: dict[str, Any] = raw.get("topics", {})
    stream: dict[str, Any] = raw.get("stream", {})

    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise fail("name", name, "must be lower-case letters, digits, '_' or '-'")
    if path.stem != name:
        raise fail("name", name, f"must match the file name {path.name!r}")
    definition = raw.get("definition")
    if not isinstance(definition, str) or not definition:
        raise fail("definition", definition, "must be a dotted module name")
    try:
        module = importlib.import_module(definition)
    # A relative name, a NUL byte, a syntax error in a module being written, ...
    except (ImportError, SyntaxError, TypeError, ValueError) as exc:
        raise fail("definition", definition, f"cannot be imported: {exc}") from exc
    params = raw.get("params", {})
    if not isinstance(params, dict):
        raise fail("params", params, "must be a table")
    definition_of(module, params)  # the module checks its params now, not in a running lane

    def count(table: dict[str, Any], section: str, key: str, default: int, lo: int) -> int:
        return integer(f"{section}.{key}", table.get(key, default), lo=lo)

    eden = topics.get("eden", f"{name}.eden")
    if not isinstance(eden, str) or not _TOPIC.match(eden):
        raise fail("topics.eden", eden, "must be a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)")
    partitions = count(topics, "topics", "partitions", 4, 1)
    codec = compression("topics.compression", topics.get("compression", DEFAULT_COMPRESSION))
    on_loss = str(
        choice("topics.on_data_loss", topics.get("on_data_loss", "fail"), DATA_LOSS_POLICIES)
    )
    parallelism = count(stream, "stream", "parallelism", 2, 1)
    min_p = count(stream, "stream", "min_parallelism", 1, 1)
    max_p = count(stream, "stream", "max_parallelism", max(16, parallelism), 1)
    if not min_p <= parallelism <= max_p:
        raise fail(
            "stream.parallelism",
            parallelism,
            f"must lie in [min_parallelism={min_p}, max_parallelism={max_p}]",
        )
    max_rows = count(stream, "stream", "max_records_per_batch", 50_000, 1)
    tuple_size = count(stream, "stream", "tuple_size", 100, 1)
    trigger = number("stream.trigger_interval_s", stream.get("trigger_interval_s", 1.0), lo=0)
    retain = count(stream, "stream", "spark_batches_to_retain", 10, 1)
    callback = stream.get("on_health_callback", "")
    if not isinstance(callback, str):
        raise fail("stream.on_health_callback", callback, 'must be "package.module:function"')
    if callback:
        resolve_callback(callback)  # importable and callable now, not at the first alert
    scaling = _parse_scaling(raw.get("scaling", {}))
    flow = _parse_flow(raw.get("flow", {}))
    sink = parse_sink(raw["sink"]) if "sink" in raw else None  # checks its own keys
    return PipelineConfig(
        name=name,
        definition=definition,
        eden_topic=eden,
        partitions=partitions,
        parallelism=parallelism,
        min_parallelism=min_p,
        max_parallelism=max_p,
        max_records_per_batch=max_rows,
        trigger_interval_s=trigger,
        tuple_size=tuple_size,
        source=path,
        scaling=scaling,
        flow=flow,
        sink=sink,
        spark_batches_to_retain=retain,
        params=params,
        compression=codec,
        on_data_loss=on_loss,
        on_health_callback=callback or None,
    )


def definition_of(module: ModuleType, params: Mapping[str, Any]) -> Any:
    """``module.configure(params)`` if the module has ``configure``, else ``module.DEFINITION``.

    ``configure`` validates its params and raises :class:`InvalidValue` naming
    ``params.<key>``; a module without it takes no params, so a non-empty ``[params]`` is
    refused rather than silently ignored.
    """
    configure = getattr(module, "configure", None)
    if callable(configure):
        return configure(params)
    if params:
        raise InvalidValue(
            "params",
            dict(params),
            f"is not taken by {module.__name__}: it has no configure(params) function",
        )
    return getattr(module, "DEFINITION", None)


def _parse_scaling(table: dict[str, Any]) -> ScalingConfig:
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


def _parse_flow(table: dict[str, Any]) -> FlowConfig:
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
    )
