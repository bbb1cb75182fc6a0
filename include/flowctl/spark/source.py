"""``flowctl_kafka``: the Kafka streaming source a job registers with Spark.

:class:`FlowctlKafkaDataSource` holds only options (it is pickled) and chooses the reader
by the ``mode`` option: the plain reader of :mod:`flowctl.spark.kafka_source` or the
flow-controlled :class:`~flowctl.spark.flow.reader.FlowStreamReader`. It lives apart
from both readers so that neither imports the other (no import loop); the options are
documented in :mod:`flowctl.spark.kafka_source`.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from flowctl.spark.flow.lane import STATUS_SCHEMA
from flowctl.spark.flow.reader import FlowStreamReader
from flowctl.spark.kafka_source import (
    SCHEMA,
    SOURCE_NAME,
    FlowctlKafkaStreamReader,
    SourceOptions,
)


class FlowctlKafkaDataSource(DataSource):
    """``spark.readStream.format("flowctl_kafka")``: see the module docstring for options."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> StructType | str:
        if (self.options.get("mode") or "plain") == "flow":
            return STATUS_SCHEMA
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """The plain reader, or in ``mode=flow`` the spout's
        :class:`~flowctl.spark.flow.reader.FlowStreamReader`."""
        options = SourceOptions.parse(self.options)
        if options.mode == "flow":
            return FlowStreamReader(options.flow_settings())
        return FlowctlKafkaStreamReader(options)
