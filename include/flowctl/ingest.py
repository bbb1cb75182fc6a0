"""Ingest: put text into a pipeline's Eden topic, from the demo generator or a file.

Shared by the ``ingest_<pipeline>`` DAG and ``flowctl ingest``: one request
type validated in one place, so the DAG's Params form and the command line
reject the same bad input with the same message.

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
from dataclasses import dataclass
from pathlib import Path

from flowctl.core.validation import flag_from_text, integer_from_text
from flowctl.textgen import file_records, zipf_lines

SOURCES = ("synthetic", "file")
MAX_SYNTHETIC_LINES = 100_000_000


@dataclass(frozen=True)
class IngestRequest:
    """What to load: ``source`` is ``synthetic`` (``lines``, ``seed``) or ``file`` (``path``).

    A file is sent as it is, one record per line; ``skip_empty`` leaves out empty lines.
    """

    pipeline: str
    source: str = "synthetic"
    lines: int = 100_000
    seed: int = 7
    path: str | None = None
    skip_empty: bool = False

    @classmethod
    def parse(
        cls,
        *,
        pipeline: str,
        source: str = "synthetic",
        lines: int | str = 100_000,
        seed: int | str = 7,
        path: str | None = None,
        skip_empty: bool | str = False,
    ) -> IngestRequest:
        """Validate raw values (DAG params arrive as strings); errors name field and value."""
        if source not in SOURCES:
            raise ValueError(f"source={source!r} must be one of {', '.join(SOURCES)}")
        n = integer_from_text("lines", lines)
        if source == "synthetic" and not 1 <= n <= MAX_SYNTHETIC_LINES:
            raise ValueError(f"lines={n} must be between 1 and {MAX_SYNTHETIC_LINES}")
        s = integer_from_text("seed", seed)
        if source == "file":
            if not path:
                raise ValueError(f"path={path!r}: a file is required when source='file'")
            if not Path(path).is_file():
                raise ValueError(f"path={path!r} is not a readable file")
        return cls(
            pipeline=pipeline,
            source=source,
            lines=n,
            seed=s,
            path=path or None,
            skip_empty=flag_from_text("skip_empty", skip_empty),
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
    """Create the pipeline's topics if needed and produce the request's lines to Eden."""
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
    )
    return IngestResult(config.eden_topic, count, time.monotonic() - started)
