"""Load text into a pipeline's Eden topic: seeded demo text or a user's file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from flowctl_airflow.hooks.kafka import FlowctlKafkaHook

if TYPE_CHECKING:
    from airflow.sdk import Context

SOURCES = ("synthetic", "file")


class IngestOperator(BaseOperator):
    """Produce lines to ``<pipeline>.eden``; returns the number of records written.

    :param pipeline: pipeline name (its config names the topic). (templated)
    :param source: ``synthetic`` (seeded Zipf text) or ``file``. (templated)
    :param lines: how many synthetic lines. (templated)
    :param seed: seed of the synthetic text; the same seed gives the same text. (templated)
    :param path: the file to load when ``source="file"``: one record per line, the bytes
        as they are. (templated)
    :param skip_empty: with a file, leave out its empty lines (default: each is a record);
        a bool or its text. (templated)
    :param kafka_conn_id: connection of the Kafka cluster.
    """

    template_fields: Sequence[str] = ("pipeline", "source", "lines", "seed", "path", "skip_empty")
    ui_color = "#e8f5e9"

    def __init__(
        self,
        *,
        pipeline: str,
        source: str = "synthetic",
        lines: int | str = 100_000,
        seed: int | str = 7,
        path: str | None = None,
        skip_empty: bool | str = False,
        kafka_conn_id: str = FlowctlKafkaHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.source = source
        self.lines = lines
        self.seed = seed
        self.path = path
        self.skip_empty = skip_empty
        self.kafka_conn_id = kafka_conn_id

    def execute(self, context: Context) -> int:
        from flowctl.ingest import IngestRequest, ingest

        request = IngestRequest.parse(
            pipeline=self.pipeline,
            source=self.source,
            lines=self.lines,
            seed=self.seed,
            path=self.path,
            skip_empty=self.skip_empty,
        )
        bootstrap = FlowctlKafkaHook(self.kafka_conn_id).bootstrap_servers
        result = ingest(request, bootstrap, on_progress=lambda n: self.log.info("produced %d", n))
        self.log.info(
            "ingested %d records into %s in %.1fs (%.0f records/s)",
            result.records,
            result.topic,
            result.seconds,
            result.records_per_s,
        )
        return result.records
