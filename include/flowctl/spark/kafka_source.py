"""``flowctl_kafka``: the source's options and its plain-mode reader.

The source itself (:class:`flowctl.spark.source.FlowctlKafkaDataSource`, what a job
registers) chooses the reader by the ``mode`` option. Roles (PySpark 4.2):

- :class:`FlowctlKafkaStreamReader` (``mode=plain``) runs ``initialOffset``, ``latestOffset``,
  ``partitions`` and ``commit`` in one long-lived planner process on the
  driver side; its state survives across micro-batches. The planning itself
  is delegated to a :class:`~flowctl.spark.lane_planner.LanePlanner` (the
  seam for flow control). ``read`` runs on executors against a pickled
  snapshot, so everything a task needs travels in its :class:`LanePartition`.

Offsets are ``{"topic": name, "offsets": {"<partition>": next_offset}}``.
The first batch starts at the pipeline's durable checkpoint in the control
database (where the last run's sink stopped), not at zero or the log's end;
the checkpoint itself is advanced by the sink's transaction, not by
``commit``.

Options (keys are lower-cased by Spark): ``bootstrap``, ``topic``,
``pipeline``, ``database_url``, ``lanes``, ``max_rows`` (records per
micro-batch; admission control) and ``read_timeout_s`` (a lane read that makes
no progress this long fails the task).

Two modes (option ``mode``):

- ``plain`` (the default of the source, used by the baseline job): the even
  :class:`~flowctl.spark.lane_planner.LanePlanner` over a record budget; ``read``
  yields the records themselves (:data:`SCHEMA`) for the query to process.
- ``flow`` (the stream jobs): the flow-controlled spout of
  :mod:`flowctl.spark.flow`, read by :class:`flowctl.spark.flow.reader.FlowStreamReader`;
  ``read`` runs the pipeline definition in the lanes and yields one status row per
  tuple (:data:`flowctl.spark.flow.lane.STATUS_SCHEMA`).
  Extra options: ``config`` (the pipeline config file), ``memcached``
  (``host:port``), ``topology_id`` and ``standby`` (``true``: admit nothing until
  activated).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from flowctl.core.validation import (
    InvalidValue,
    choice,
    integer_from_text,
    number_from_text,
)
from flowctl.spark.lane_planner import LanePlanner, OffsetRange

if TYPE_CHECKING:
    import pyarrow as pa
    from kafka import KafkaConsumer

    from flowctl.spark.flow.settings import FlowSettings

log = logging.getLogger(__name__)

_N = TypeVar("_N")  # what an option's reader makes of its text

SOURCE_NAME = "flowctl_kafka"

SCHEMA = StructType(
    [
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
        StructField("timestamp", TimestampType(), True),
        StructField("value", BinaryType(), True),
    ]
)


#: Source modes: ``plain`` (even split, records out) and ``flow`` (the spout, statuses out).
MODES = ("plain", "flow")


#: Rows per Arrow batch yielded by ``read``.
ARROW_BATCH_ROWS = 10_000


def arrow_schema() -> pa.Schema:
    """:data:`SCHEMA` as the Arrow schema Spark expects from ``read`` (timestamps in UTC)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(SCHEMA, timezone="UTC")


class SourceOptionError(ValueError):
    """A ``flowctl_kafka`` option is missing or bad; the message names it and its value."""


@dataclass(frozen=True)
class SourceOptions:
    """The validated options of one ``flowctl_kafka`` stream."""

    bootstrap: str
    topic: str
    pipeline: str
    database_url: str
    lanes: int
    max_rows: int | None
    read_timeout_s: float
    mode: str = "plain"
    config: str | None = None
    memcached: str | None = None
    topology_id: str | None = None
    standby: bool = False
    slots: int | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Validate Spark's (lower-cased) option map."""
        opts = {k.lower(): v for k, v in options.items()}

        def required(key: str) -> str:
            value = opts.get(key)
            if not value or not str(value).strip():
                raise SourceOptionError(f"{SOURCE_NAME} option {key!r} is required, got {value!r}")
            return str(value)

        # An empty option is the default, as when absent.
        def number(key: str, default: str, read: Callable[[str, str], _N]) -> _N:
            return read(key, opts.get(key) or default)

        def optional(key: str, read: Callable[[str, str], _N]) -> _N | None:
            raw = opts.get(key)
            return read(key, raw) if raw else None

        def positive_integer(key: str, text: str) -> int:
            value = integer_from_text(key, text)
            if value <= 0:
                raise InvalidValue(key, text, "must be > 0")
            return value

        try:
            lanes = number("lanes", "2", positive_integer)
            max_rows = optional("max_rows", positive_integer)
            slots = optional("slots", positive_integer)
            read_timeout_s = number(
                "read_timeout_s", "30", lambda k, t: number_from_text(k, t, lo=0, lo_open=True)
            )
            mode = choice("mode", opts.get("mode") or "plain", MODES)
        except InvalidValue as exc:
            raise SourceOptionError(f"{SOURCE_NAME} option {exc}") from None
        standby = (opts.get("standby") or "false").lower()
        if standby not in ("true", "false"):
            raise SourceOptionError(
                f"{SOURCE_NAME} option standby={opts.get('standby')!r} must be true or false"
            )
        flow = mode == "flow"
        return cls(
            bootstrap=required("bootstrap"),
            topic=required("topic"),
            pipeline=required("pipeline"),
            database_url=required("database_url"),
            lanes=lanes,
            max_rows=max_rows,
            read_timeout_s=read_timeout_s,
            mode=mode,
            config=required("config") if flow else opts.get("config"),
            memcached=required("memcached") if flow else opts.get("memcached"),
            topology_id=required("topology_id") if flow else opts.get("topology_id"),
            standby=standby == "true",
            slots=slots,
        )

    def flow_settings(self) -> FlowSettings:
        """The :class:`flowctl.spark.flow.settings.FlowSettings` of a ``mode=flow`` stream."""
        from flowctl.spark.flow.settings import FlowSettings

        assert self.config and self.memcached and self.topology_id
        return FlowSettings(
            bootstrap=self.bootstrap,
            topic=self.topic,
            pipeline=self.pipeline,
            database_url=self.database_url,
            memcached=self.memcached,
            topology_id=self.topology_id,
            lanes=self.lanes,
            config_path=self.config,
            max_rows=self.max_rows,
            read_timeout_s=self.read_timeout_s,
            standby=self.standby,
            slots=self.slots,
        )


class LanePartition(InputPartition):
    """One lane's share of one micro-batch: the offset ranges it reads."""

    def __init__(self, lane: int, ranges: tuple[OffsetRange, ...]) -> None:
        super().__init__(lane)
        self.lane = lane
        self.ranges = ranges

    def __repr__(self) -> str:
        parts = ", ".join(f"{r.partition}:[{r.start},{r.end})" for r in self.ranges)
        return f"LanePartition(lane={self.lane}, {parts})"


def encode_offsets(topic: str, offsets: Mapping[int, int]) -> dict[str, Any]:
    """Spark's offset dict for ``{partition: next_offset}`` (string keys, sorted)."""
    return {"topic": topic, "offsets": {str(p): int(offsets[p]) for p in sorted(offsets)}}


def decode_offsets(offset: Mapping[str, Any], topic: str) -> dict[int, int]:
    """``{partition: next_offset}`` from Spark's offset dict; refuses another topic's offsets."""
    if offset.get("topic") != topic:
        raise ValueError(
            f"offset {dict(offset)!r} belongs to topic {offset.get('topic')!r}, not {topic!r}"
        )
    return {int(p): int(n) for p, n in offset["offsets"].items()}


class FlowctlKafkaStreamReader(DataSourceStreamReader):
    """Plans micro-batches over a Kafka topic in lanes and reads them exactly (plain mode)."""

    def __init__(self, options: SourceOptions, planner: LanePlanner | None = None) -> None:
        self.options = options
        self.planner = planner or LanePlanner(options.lanes)
        self._consumer: KafkaConsumer | None = None  # the planner's, created lazily
        self._planning_error: BaseException | None = None
        self._latest: dict[str, Any] | None = None

    def __getstate__(self) -> dict[str, object]:
        # Tasks get a pickled snapshot; a live KafkaConsumer cannot travel.
        state = self.__dict__.copy()
        state["_consumer"] = None
        state["_planning_error"] = None
        return state

    def _planner_consumer(self) -> KafkaConsumer:
        from flowctl.adapters import kafka_log

        if self._consumer is None:
            self._consumer = kafka_log.new_consumer(self.options.bootstrap)
        return self._consumer

    def initialOffset(self) -> dict[str, Any]:
        """The pipeline's durable checkpoint; partitions never processed start at 0."""
        from flowctl.adapters import kafka_log
        from flowctl.adapters.control_plane import ControlPlane

        try:
            committed = ControlPlane(self.options.database_url).committed_offsets(
                self.options.pipeline, self.options.topic
            )
            parts = kafka_log.partitions_of(self._planner_consumer(), self.options.topic)
            start = {p: committed.get(p, 0) for p in parts}
            log.info("%s: starting at the durable checkpoint %s", self.options.topic, start)
            return encode_offsets(self.options.topic, start)
        except Exception:
            log.exception("%s: initialOffset failed", SOURCE_NAME)
            raise

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_rows)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        """Admit the next batch: up to the log's end, or ``limit.max_rows`` records."""
        from flowctl.adapters import kafka_ends

        if self._planning_error is not None:
            # partitions() failing can stall a query silently; fail it loudly here instead.
            error, self._planning_error = self._planning_error, None
            raise RuntimeError(f"{SOURCE_NAME}: planning the previous batch failed: {error}")
        try:
            begin = decode_offsets(start, self.options.topic)
            latest = kafka_ends.latest_offsets(self._planner_consumer(), self.options.topic)
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
            self._latest = encode_offsets(self.options.topic, latest)
            end = self.planner.admit(begin, latest, max_rows)
            return encode_offsets(self.options.topic, end)
        except Exception:
            log.exception("%s: latestOffset failed (start=%s)", SOURCE_NAME, start)
            self._drop_consumer()
            raise

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The log's end as last seen (shown in Spark's progress; ahead of the batch's end)."""
        return self._latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """One :class:`LanePartition` per non-empty lane."""
        try:
            plans = self.planner.assign(
                self.options.topic,
                decode_offsets(start, self.options.topic),
                decode_offsets(end, self.options.topic),
            )
            return [LanePartition(plan.lane, plan.ranges) for plan in plans]
        except Exception as exc:
            log.exception("%s: partitions failed (start=%s, end=%s)", SOURCE_NAME, start, end)
            self._planning_error = exc
            raise

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """Exactly the records of the lane's ranges, as Arrow batches (runs on executors).

        Yielding ``pyarrow.RecordBatch`` rather than tuples skips Spark's
        per-row conversion, the largest cost of a Python source.
        """
        import pyarrow as pa

        from flowctl.adapters import kafka_log

        if not isinstance(partition, LanePartition):
            raise TypeError(f"partition={partition!r} is not a LanePartition")
        schema = arrow_schema()
        consumer = kafka_log.cached_consumer(self.options.bootstrap)
        columns: tuple[list[object], ...] = ([], [], [], [], [])

        def flush() -> pa.RecordBatch:
            batch = pa.RecordBatch.from_arrays(
                [
                    pa.array(col, type=field.type)
                    for col, field in zip(columns, schema, strict=True)
                ],
                schema=schema,
            )
            for col in columns:
                col.clear()
            return batch

        topics, partitions, offsets, stamps, values = columns
        try:
            for r in partition.ranges:
                for record in kafka_log.read_range(
                    consumer,
                    r.topic,
                    r.partition,
                    r.start,
                    r.end,
                    timeout_s=self.options.read_timeout_s,
                ):
                    ts = record.timestamp
                    topics.append(record.topic)
                    partitions.append(record.partition)
                    offsets.append(record.offset)
                    stamps.append(None if ts is None or ts < 0 else ts * 1000)  # ms -> us
                    values.append(record.value)
                    if len(offsets) >= ARROW_BATCH_ROWS:
                        yield flush()
            if offsets:
                yield flush()
        except Exception:
            # A consumer that failed mid-read is in doubt: the next task gets a fresh one.
            kafka_log.drop_cached_consumer(self.options.bootstrap)
            raise

    def commit(self, end: dict[str, Any]) -> None:
        # The durable checkpoint moves in the sink's transaction; Spark's commit is informative.
        log.debug("%s: Spark committed %s", SOURCE_NAME, end)

    def _drop_consumer(self) -> None:
        from flowctl.adapters import kafka_log

        kafka_log.close_quietly(self._consumer)
        self._consumer = None

    def stop(self) -> None:
        self._drop_consumer()
