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
from flowctl.core.sink_rules import SinkSpec, parse_sink
from flowctl.core.validation import (
    DEFAULT_COMPRESSION,
    InvalidValue,
    choice,
    compression,
    integer,
    number,
)
from flowctl.pipelines.config_sections import FlowConfig, ScalingConfig, parse_flow, parse_scaling
from flowctl.pipelines.health_callback import resolve_callback

#: Where a bare pipeline name is looked up.
PIPELINES_DIR = PROJECT_ROOT / "include" / "pipelines"
#: Names another directory of pipeline configs (experiments, tests); see :func:`pipelines_dir`.
PIPELINES_DIR_ENV = "FLOWCTL_PIPELINES_DIR"

_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,62}$")
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")


class PipelineConfigError(ValueError):
    """A pipeline config file is missing or has a bad field; the message names both."""


#: ``[topics] on_data_loss``: what a topology does when records past its durable checkpoint
#: are gone from the log (docs/flow-control.md, "Data loss and read errors").
DATA_LOSS_POLICIES = ("fail", "skip")


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


def known_pipelines() -> list[str]:
    """The bare names :func:`resolve_path` finds: the configs in :func:`pipelines_dir`."""
    return sorted(p.stem for p in pipelines_dir().glob("*.toml") if _NAME.match(p.stem))


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
    _check_known_fields(raw)
    topics: dict[str, Any] = raw.get("topics", {})
    stream: dict[str, Any] = raw.get("stream", {})
    name, definition, params = _definition(raw, path)
    fail = InvalidValue
    eden = topics.get("eden", f"{name}.eden")
    if not isinstance(eden, str) or not _TOPIC.match(eden):
        raise fail("topics.eden", eden, "must be a Kafka topic name ([A-Za-z0-9._-], 1-249 chars)")
    partitions = _count(topics, "topics", "partitions", 4, 1)
    codec = compression("topics.compression", topics.get("compression", DEFAULT_COMPRESSION))
    on_loss = str(
        choice("topics.on_data_loss", topics.get("on_data_loss", "fail"), DATA_LOSS_POLICIES)
    )
    parallelism, min_p, max_p = _parallelism(stream)
    max_rows = _count(stream, "stream", "max_records_per_batch", 50_000, 1)
    tuple_size = _count(stream, "stream", "tuple_size", 100, 1)
    trigger = number("stream.trigger_interval_s", stream.get("trigger_interval_s", 1.0), lo=0)
    retain = _count(stream, "stream", "spark_batches_to_retain", 10, 1)
    callback = stream.get("on_health_callback", "")
    if not isinstance(callback, str):
        raise fail("stream.on_health_callback", callback, 'must be "package.module:function"')
    if callback:
        resolve_callback(callback)  # importable and callable now, not at the first alert
    scaling = parse_scaling(raw.get("scaling", {}))
    flow = parse_flow(raw.get("flow", {}))
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


def _check_known_fields(raw: dict[str, Any]) -> None:
    """Reject a misspelt key before any value is read, so a typo is not a silent default."""
    for section, known in _KNOWN.items():
        table = raw if not section else raw.get(section, {})
        if not isinstance(table, dict):
            raise InvalidValue(section, table, "must be a table")
        for key in table:
            if key not in known:
                field = f"{section}.{key}" if section else key
                raise InvalidValue(
                    field, table[key], f"is not a known field (known: {sorted(known)})"
                )


def _definition(raw: dict[str, Any], path: Path) -> tuple[str, str, dict[str, Any]]:
    """The pipeline's name, its definition module and ``[params]``, the module imported and
    its params checked now rather than in a running lane."""
    fail = InvalidValue
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
    definition_of(module, params)
    return name, definition, params


def _count(table: dict[str, Any], section: str, key: str, default: int, lo: int) -> int:
    return integer(f"{section}.{key}", table.get(key, default), lo=lo)


def _parallelism(stream: dict[str, Any]) -> tuple[int, int, int]:
    """``stream.parallelism`` and its bounds, the parallelism within them."""
    parallelism = _count(stream, "stream", "parallelism", 2, 1)
    min_p = _count(stream, "stream", "min_parallelism", 1, 1)
    max_p = _count(stream, "stream", "max_parallelism", max(16, parallelism), 1)
    if not min_p <= parallelism <= max_p:
        raise InvalidValue(
            "stream.parallelism",
            parallelism,
            f"must lie in [min_parallelism={min_p}, max_parallelism={max_p}]",
        )
    return parallelism, min_p, max_p


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
