"""Ingest: put text into a pipeline's Eden topic, from the demo generator or a file.

Shared by the ``ingest_<pipeline>`` DAG and ``flowctl ingest``: one request
type validated in one place, so the DAG's Params form and the command line
reject the same bad input with the same message; one definition of its
parameters (:data:`INGEST_PARAMS`), from which the DAG's form and the
operator's arguments are derived.

The synthetic source is the pipeline's own: a definition module may define
``synthetic_lines(count, seed)`` (``logetl`` generates access-log lines,
``wordcount`` Zipf text); a pipeline without one gets Zipf text. The choice
follows the definition, not the pipeline's name, so a renamed copy of a
config ingests the same kind of data. A module whose records need their own
Kafka timestamps (``clickstream`` simulates a feed over time: its lateness is
judged by each record's arrival in the log) defines ``synthetic_records(count,
seed)`` yielding ``(line, timestamp_ms)``, preferred when present.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowctl.core.validation import (
    COMPRESSION_CODECS,
    InvalidValue,
    compression,
    flag_from_text,
    integer_from_text,
)
from flowctl.textgen import file_records, zipf_lines

SOURCES = ("synthetic", "file")
MAX_SYNTHETIC_LINES = 100_000_000


@dataclass(frozen=True)
class IngestParam:
    """One parameter of an ingest: the request's field, the ingest DAG's form entry and the
    operator's argument, all derived from this one definition (:data:`INGEST_PARAMS`).

    ``schema`` is the form entry's JSON schema (``type``, ``enum``, ...); ``section`` groups
    entries in the form.
    """

    name: str
    default: Any
    title: str
    description: str
    schema: dict[str, Any] = field(default_factory=dict)
    section: str | None = None


#: Every parameter of an ingest besides the pipeline, in form order.
INGEST_PARAMS: tuple[IngestParam, ...] = (
    IngestParam(
        "source",
        "synthetic",
        "Source",
        "where the lines come from",
        {
            "type": "string",
            "enum": list(SOURCES),
            "values_display": {"synthetic": "synthetic demo data", "file": "a file"},
        },
    ),
    IngestParam(
        "lines",
        100_000,
        "Lines",
        "how many synthetic lines (source = synthetic)",
        {"type": "integer", "minimum": 1},
        "Synthetic data",
    ),
    IngestParam(
        "seed",
        7,
        "Seed",
        "the same seed gives the same lines (source = synthetic)",
        {"type": "integer"},
        "Synthetic data",
    ),
    IngestParam(
        "path",
        None,
        "Path",
        "the file to load, on the worker (needed only for source = file)",
        {"type": ["null", "string"]},
        "File",
    ),
    IngestParam(
        "skip_empty",
        False,
        "Skip empty lines",
        "leave out empty lines (by default each line is a record)",
        {"type": "boolean"},
        "File",
    ),
    IngestParam(
        "compression",
        None,
        "Compression",
        "the record batches' codec (empty: the pipeline's topics.compression)",
        {
            "type": ["null", "string"],
            "enum": [None, *COMPRESSION_CODECS],
            "values_display": {"null": "the pipeline's (topics.compression)"},
        },
        "Kafka",
    ),
)
#: The parameters' names: the request's fields besides ``pipeline``.
INGEST_FIELDS = tuple(p.name for p in INGEST_PARAMS)
_DEFAULTS = {p.name: p.default for p in INGEST_PARAMS}


@dataclass(frozen=True)
class IngestRequest:
    """What to load: ``source`` is ``synthetic`` (``lines``, ``seed``) or ``file`` (``path``).

    A file is sent as it is, one record per line; ``skip_empty`` leaves out empty lines.
    ``compression``: the codec of the records written (``None``: the pipeline config's
    ``topics.compression``). The fields and their defaults are :data:`INGEST_PARAMS`'.
    """

    pipeline: str
    source: str = _DEFAULTS["source"]
    lines: int = _DEFAULTS["lines"]
    seed: int = _DEFAULTS["seed"]
    path: str | None = _DEFAULTS["path"]
    skip_empty: bool = _DEFAULTS["skip_empty"]
    compression: str | None = _DEFAULTS["compression"]

    @classmethod
    def parse(cls, *, pipeline: str, **raw: Any) -> IngestRequest:
        """Validate raw values (DAG params arrive as strings; ``path`` and ``compression`` read
        an empty text as unset); errors name field and value. The keys are
        :data:`INGEST_FIELDS`, each defaulting to its :data:`INGEST_PARAMS` entry's default."""
        unknown = sorted(set(raw) - set(INGEST_FIELDS))
        if unknown:
            raise ValueError(f"ingest: unknown parameter(s) {unknown} (known: {INGEST_FIELDS})")
        values = {**_DEFAULTS, **raw}
        source = values["source"]
        if source not in SOURCES:
            raise ValueError(f"source={source!r} must be one of {', '.join(SOURCES)}")
        n = integer_from_text("lines", values["lines"])
        if source == "synthetic" and not 1 <= n <= MAX_SYNTHETIC_LINES:
            raise ValueError(f"lines={n} must be between 1 and {MAX_SYNTHETIC_LINES}")
        s = integer_from_text("seed", values["seed"])
        path = values["path"]
        if source == "file":
            if not path:
                raise ValueError(f"path={path!r}: a file is required when source='file'")
            if not Path(path).is_file():
                raise ValueError(f"path={path!r} is not a readable file")
        codec = values["compression"]
        try:
            codec = None if codec in (None, "") else compression("compression", codec)
        except InvalidValue as exc:
            raise ValueError(str(exc)) from None
        return cls(
            pipeline=pipeline,
            source=source,
            lines=n,
            seed=s,
            path=path or None,
            skip_empty=flag_from_text("skip_empty", values["skip_empty"]),
            compression=codec,
        )

    def text(self) -> Iterator[str] | Iterator[bytes] | Iterator[tuple[str, int]]:
        """The records this request loads: synthetic lines (deterministic; with their Kafka
        timestamps if the pipeline's generator sets them), or the file's lines as bytes,
        unchanged (see :func:`flowctl.textgen.file_records`)."""
        if self.source == "file":
            assert self.path is not None
            return file_records(self.path, skip_empty=self.skip_empty)
        return synthetic_generator(self.pipeline)(self.lines, self.seed)


def synthetic_generator(
    pipeline: str,
) -> Callable[[int, int], Iterator[str]] | Callable[[int, int], Iterator[tuple[str, int]]]:
    """``(count, seed) -> lines`` (or ``(line, timestamp_ms)`` pairs) of the pipeline's demo
    data (see the module docstring)."""
    from flowctl.pipelines.config import load_pipeline_config

    definition = load_pipeline_config(pipeline).load_definition()
    timed = getattr(definition, "synthetic_records", None)
    if callable(timed):
        return timed
    generate = getattr(definition, "synthetic_lines", None)
    if generate is None:
        return lambda count, seed: zipf_lines(count, seed=seed)
    if not callable(generate):
        raise TypeError(
            f"{definition.__name__}.synthetic_lines={generate!r} must be a function (count, seed)"
        )
    return generate


@dataclass(frozen=True)
class IngestResult:
    topic: str
    records: int
    seconds: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


def ingest(
    request: IngestRequest,
    bootstrap: str,
    *,
    on_progress: Callable[[int], None] | None = None,
    progress_every: int = 10_000,
) -> IngestResult:
    """Create the pipeline's topics if needed and produce the request's lines to Eden, with
    the request's codec or else the pipeline's ``topics.compression``."""
    from flowctl.adapters import kafka_log
    from flowctl.pipelines.config import load_pipeline_config

    config = load_pipeline_config(request.pipeline)
    kafka_log.ensure_topics(bootstrap, {config.eden_topic: config.partitions})
    started = time.monotonic()
    count = kafka_log.produce(
        bootstrap,
        config.eden_topic,
        request.text(),
        on_progress=on_progress,
        progress_every=progress_every,
        compression=request.compression or config.compression,
    )
    return IngestResult(config.eden_topic, count, time.monotonic() - started)
