"""Spark's built-in rate source as word-count input: the ceiling "Spark without Kafka".

Issue 13 asks how fast Spark's per-batch machinery alone can feed the word-count
sink (:mod:`flowctl.spark.wordcount_sink`), so the flow job can be compared with
it as well as with the plain job. This module turns the rows of Spark's
``rate-micro-batch`` source into records of the ``flowctl_kafka`` shape the sink
takes (``topic``, ``partition``, ``offset``, ``value``, ``timestamp``):

- ``rate-micro-batch``, not ``rate``: ``rate`` emits ``rowsPerSecond`` per second
  of wall clock and has no admission control, so a sink slower than that rate
  gets ever larger batches and the run measures the backlog, not the ceiling.
  ``rate-micro-batch`` emits exactly ``rowsPerBatch`` rows per micro-batch: the
  same fixed budget the plain job has (``ReadMaxRows``);
- the line of row ``value`` is computed in Spark SQL (on the JVM, no Python per
  row): 16 words drawn uniformly by hash from a fixed vocabulary of 1000
  pseudo-words, cut to 50-100 bytes, the shape of the throughput benchmark's
  lines (``bench/_common.random_lines``). The Python work per record is then
  the sink's counting only, as in the Kafka-fed jobs;
- ``value`` is a dense sequence over the query's life, so ``partition = value mod
  P`` and ``offset = value div P`` give every pseudo-partition consecutive
  offsets across batches, whichever Spark task generated a row: the sink's
  spans and the durable checkpoint (the sum of committed offsets, what the
  benchmarks sample) work exactly as for a Kafka topic.

The records are stored under :func:`rate_topic`, never the pipeline's Eden topic,
so a rate run cannot move a real topic's committed offsets.
"""

from __future__ import annotations

from typing import Any

from flowctl.textgen import vocabulary

#: Distinct words the lines draw from (the throughput benchmark's vocabulary size).
VOCABULARY_SIZE = 1000
#: Words per line before the cut: 16 words of 3-10 letters always exceed 50 bytes.
WORDS_PER_LINE = 16
MIN_BYTES = 50
MAX_BYTES = 100


def rate_topic(eden_topic: str) -> str:
    """The topic name the rate records' offsets are committed under."""
    return f"{eden_topic}.rate"


def as_records(rows: Any, partitions: int, topic: str, seed: int = 1) -> Any:
    """``rows`` (any DataFrame with a dense ``value`` long and a ``timestamp``) as records.

    Deterministic: the same ``value`` always gives the same line, so a replayed
    batch carries the same words.
    """
    from pyspark.sql import functions as F

    words = F.array(*[F.lit(w) for w in vocabulary(VOCABULARY_SIZE, seed)])
    value = F.col("value")

    def pick(i: Any) -> Any:
        index = F.pmod(F.xxhash64(value, i), F.lit(VOCABULARY_SIZE)) + 1
        return F.element_at(words, index.cast("int"))

    size = F.lit(MIN_BYTES) + F.pmod(F.xxhash64(value), F.lit(MAX_BYTES - MIN_BYTES + 1))
    drawn = F.transform(F.sequence(F.lit(0), F.lit(WORDS_PER_LINE - 1)), pick)
    line = F.rtrim(F.substring(F.concat_ws(" ", drawn), F.lit(1), size.cast("int")))
    return rows.select(
        F.lit(topic).alias("topic"),
        F.pmod(value, F.lit(partitions)).cast("int").alias("partition"),
        F.floor(value / F.lit(partitions)).cast("long").alias("offset"),
        F.encode(line, "UTF-8").alias("value"),
        F.col("timestamp"),
    )


def rate_records(spark: Any, rows_per_batch: int, partitions: int, topic: str) -> Any:
    """A streaming DataFrame of ``rows_per_batch`` records per micro-batch over ``partitions``
    Spark tasks, in the sink's record shape (:func:`as_records`)."""
    rows = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", str(rows_per_batch))
        .option("numPartitions", str(partitions))
        .load()
    )
    return as_records(rows, partitions, topic)
