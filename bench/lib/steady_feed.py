"""A steady producer that knows exactly which words it sent, however long it runs.

Lines are taken in turn from a fixed pool (cycled), ``rate`` per second, sent as one
chunk a second that ends with every line acknowledged. The words sent are the pool's
counts times the full cycles plus the counts of the partial cycle's lines, so an hour's
exact expectation needs no hour of counting.

Two clients send them (``client``):

- ``librdkafka`` (confluent-kafka, the default where it is installed): one producer kept
  open for the run, the lines dealt round robin over the partitions in large record
  batches (``linger.ms`` and ``batch.size`` as the platform's producer,
  :mod:`flowctl.adapters.kafka_produce`), so the broker's log has the same shape. It
  packs the records in C on its own thread: a feed of 20-30k lines/s then takes little
  of the 2 cores the stream it feeds runs on;
- ``kafka-python`` (:func:`flowctl.adapters.kafka_log.produce`, the platform's own
  producer, one per second): what ingest uses, but it builds every record in Python, on
  the same cores as the stream (a 20-minute soak's feed fell 284 s behind 21,978
  lines/s this way, its stream keeping up with what came).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence

from flowctl.adapters import kafka_log
from flowctl.adapters.kafka_produce import BATCH_BYTES, LINGER_MS
from flowctl.pipelines.wordcount import count_values

LIBRDKAFKA = "librdkafka"
KAFKA_PYTHON = "kafka-python"
CLIENTS = (LIBRDKAFKA, KAFKA_PYTHON)


def default_client() -> str:
    """librdkafka where confluent-kafka is installed (the dev extra), else kafka-python."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return KAFKA_PYTHON
    return LIBRDKAFKA


class RdkafkaSender:
    """One librdkafka producer for the whole feed; each call sends its lines and flushes."""

    def __init__(self, bootstrap: str, topic: str, timeout_s: float = 60.0) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.timeout_s = timeout_s
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": 1,
                "enable.idempotence": False,
                "linger.ms": LINGER_MS,
                "batch.size": BATCH_BYTES,
                "batch.num.messages": 1_000_000,
                "queue.buffering.max.messages": 1_000_000,
                "message.timeout.ms": int(timeout_s * 1000),
            }
        )
        meta = self.producer.list_topics(topic, timeout=timeout_s).topics[topic]
        if meta.error is not None or not meta.partitions:
            raise ValueError(f"topic={topic!r}: no partitions to feed ({meta.error})")
        self.partitions = sorted(meta.partitions)
        self._next = 0
        self._delivered = 0
        self._errors: list[str] = []

    def _done(self, err: object, _msg: object) -> None:
        if err is None:
            self._delivered += 1
        else:
            self._errors.append(str(err))

    def __call__(self, lines: Sequence[bytes]) -> int:
        """Send ``lines`` and wait for every delivery; returns how many were delivered
        (a failed delivery raises naming it: the feed's expectation would be wrong)."""
        self._delivered, self._errors = 0, []
        n = len(self.partitions)
        for line in lines:
            partition = self.partitions[self._next % n]
            self._next += 1
            while True:
                try:
                    self.producer.produce(
                        self.topic, line, partition=partition, on_delivery=self._done
                    )
                    break
                except BufferError:  # the local queue is full: let deliveries drain it
                    self.producer.poll(0.05)
        left = self.producer.flush(self.timeout_s)
        if left or self._errors:
            raise RuntimeError(
                f"feed of {self.topic}: {left} line(s) undelivered after {self.timeout_s} s, "
                f"{len(self._errors)} failed (first: {self._errors[:1]})"
            )
        return self._delivered


def kafka_python_sender(bootstrap: str, topic: str) -> Callable[[Sequence[bytes]], int]:
    """Each call: :func:`flowctl.adapters.kafka_log.produce` of its lines (a producer each)."""

    def send(lines: Sequence[bytes]) -> int:
        return kafka_log.produce(bootstrap, topic, list(lines), progress_every=len(lines))

    return send


class SteadyFeed(threading.Thread):
    """Produce ``rate`` lines/s of ``pool`` into ``topic`` until :meth:`finish`."""

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        pool: Sequence[bytes],
        rate: int,
        client: str = KAFKA_PYTHON,
    ) -> None:
        super().__init__(name=f"feed-{topic}", daemon=True)
        if rate < 1:
            raise ValueError(f"rate={rate!r} must be >= 1 line/s")
        if client not in CLIENTS:
            raise ValueError(f"client={client!r} must be one of {', '.join(CLIENTS)}")
        self.bootstrap = bootstrap
        self.topic = topic
        self.pool = list(pool)
        self.rate = rate
        self.client = client
        self.sent = 0  # lines acknowledged by the broker
        self.behind_s = 0.0  # the most the feed fell behind its schedule
        self.error: BaseException | None = None
        self._halt = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        second = 0
        try:
            send = (
                RdkafkaSender(self.bootstrap, self.topic)
                if self.client == LIBRDKAFKA
                else kafka_python_sender(self.bootstrap, self.topic)
            )
            while not self._halt.is_set():
                lines = [self.pool[(self.sent + i) % len(self.pool)] for i in range(self.rate)]
                self.sent += send(lines)
                second += 1
                late = time.monotonic() - (started + second)
                self.behind_s = max(self.behind_s, late)
                self._halt.wait(max(0.0, -late))
        except BaseException as exc:  # reported by the run, which then stops
            self.error = exc

    def finish(self, timeout_s: float = 60.0) -> int:
        """Stop after the second being sent; the lines acknowledged in all."""
        self._halt.set()
        self.join(timeout_s)
        return self.sent

    def expected_counts(self) -> Counter[str]:
        """The words of every line sent (call after :meth:`finish`)."""
        cycles, rest = divmod(self.sent, len(self.pool))
        whole = count_values(self.pool)
        out: Counter[str] = Counter({w: n * cycles for w, n in whole.items()})
        out.update(count_values(self.pool[:rest]))
        return +out
