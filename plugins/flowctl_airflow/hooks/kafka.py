"""Hook for the Kafka cluster the pipelines read and write.

Follows the apache-kafka provider's convention: the connection's extra holds
``{"bootstrap.servers": "host:port,..."}``; ``host``/``port`` are a fallback.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseHook


class FlowctlKafkaHook(BaseHook):
    """Reads the ``flowctl_kafka`` connection and returns the bootstrap servers.

    :param kafka_conn_id: the Kafka connection.
    """

    conn_name_attr = "kafka_conn_id"
    default_conn_name = "flowctl_kafka"
    conn_type = "kafka"
    hook_name = "flowctl Kafka"

    def __init__(self, kafka_conn_id: str = default_conn_name, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kafka_conn_id = kafka_conn_id

    @cached_property
    def bootstrap_servers(self) -> str:
        conn = self.get_connection(self.kafka_conn_id)
        servers = (conn.extra_dejson or {}).get("bootstrap.servers")
        if servers:
            return str(servers)
        if conn.host:
            return f"{conn.host}:{conn.port or 9092}"
        raise ValueError(
            f"connection {self.kafka_conn_id!r} has no Kafka address: set its extra to "
            '{"bootstrap.servers": "host:9092"} or its host and port'
        )
