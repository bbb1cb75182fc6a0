"""Load text into a pipeline's Eden topic: seeded demo text or a user's file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from flowctl.ingest import INGEST_FIELDS, INGEST_PARAMS
from flowctl_airflow.hooks.kafka import FlowctlKafkaHook
from flowctl_airflow.run_conf import refuse_unknown_conf

if TYPE_CHECKING:
    from airflow.sdk import Context


class IngestOperator(BaseOperator):
    """Produce lines to ``<pipeline>.eden``; returns the number of records written.

    :param pipeline: pipeline name (its config names the topic). (templated)
    :param kafka_conn_id: connection of the Kafka cluster.

    Every other argument is one of :data:`flowctl.ingest.INGEST_PARAMS` (``source``,
    ``lines``, ``seed``, ``path``, ``skip_empty``, ``compression``), as a value or its text,
    with the default defined there; all are templated and validated by
    :meth:`flowctl.ingest.IngestRequest.parse` when the task runs.
    """

    template_fields: Sequence[str] = ("pipeline", *INGEST_FIELDS)
    ui_color = "#e8f5e9"

    def __init__(
        self,
        *,
        pipeline: str,
        kafka_conn_id: str = FlowctlKafkaHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        request = {p.name: kwargs.pop(p.name, p.default) for p in INGEST_PARAMS}
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.kafka_conn_id = kafka_conn_id
        for name, value in request.items():
            setattr(self, name, value)

    def execute(self, context: Context) -> int:
        from flowctl.ingest import IngestRequest, ingest

        refuse_unknown_conf(context)  # before anything is produced
        request = IngestRequest.parse(
            pipeline=self.pipeline, **{name: getattr(self, name) for name in INGEST_FIELDS}
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
