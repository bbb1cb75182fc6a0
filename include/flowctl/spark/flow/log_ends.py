"""The Kafka log's end offsets, as the planner reads them once per micro-batch.

Exact ends are not free on Tansu (``end_offsets()`` under-reports; see
:func:`flowctl.adapters.kafka_ends.latest_offsets`), and the planner asks for Eden's and
both replay topics' ends before every batch, so :class:`KafkaEnds` keeps one consumer
and what it learnt per partition (``known``): a partition whose bound did not move
costs no fetch (for up to ``kafka_ends.KNOWN_MAX_AGE_S``), and the three topics are read
together (one ListOffsets request, at most one fetch round).

On Tansu an exact end's requests (the ListOffsets request and the fetch) walk the
partition's record batches, so their cost grows with the log
(bench/results/archive/soak_af1b7e3.json: the planning of a stream at 34k records/s grew
from 45 to 223 ms over an hour). Once Eden's reads of exact ends (both requests: what the
planner waits on) take longer than ``DEFER_TAIL_AFTER_MS`` (the median of the last few),
from then on Eden's partitions that are being appended to are planned up to their
``end_offsets()`` (on Tansu the start of their last record batch, the record before the
bound): that batch waits for the next micro-batch, and the exact end is fetched again
once a partition goes quiet (``kafka_ends.latest_offsets_of``, ``defer_tails``). Where
the lanes' own fetches reported a partition's end moving past the last answer (their high
watermark, carried in their feedback), that end is taken instead and the partition is left
out of the ListOffsets request too, which also walks the log: a stream being appended to
then asks the broker nothing for Eden. On such a log the
planner also reads the next batch's ends as soon as it has planned this one, while the
batch runs (``planner_ends.EndsPlanning``), so what the read costs is off the planning's
path; records appended while it runs wait one batch more. Until the reads cost that much
the ends stay exact and are read when the next batch is planned, which a light stream's
latency needs.

The consumer asks the broker to hold a fetch at most ``PLANNER_FETCH_WAIT_MS`` (a short
hold keeps the next batch's requests from queueing behind it). Tansu with S3 storage
answers nothing within so short a hold (it reads the batch from S3 first), so a read
that fetched nothing within ``QUICK_READ_TIMEOUT_S`` switches this reader, for good, to
a consumer with the default hold.
"""

from __future__ import annotations

import functools
import logging
import statistics
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Protocol

from flowctl.pipelines.config_sections import KAFKA_PYTHON, LIBRDKAFKA

if TYPE_CHECKING:
    from flowctl.adapters.kafka_ends import EndsClient, KnownEnds

log = logging.getLogger(__name__)

#: How long a read with the short fetch hold may take before the reader turns patient.
#: A read takes about 5 ms on Tansu in memory and on Apache Kafka.
QUICK_READ_TIMEOUT_S = 1.0

#: Once the median of a topic's last ``DEFER_JUDGED_FETCHES`` reads of exact ends that
#: fetched took longer than this (from the ListOffsets request to the fetch round's end:
#: what the planner waits on), its tails wait a batch (see the module's docstring) for as
#: long as the reader lives: a log on Tansu does not get shorter, and on a broker whose
#: ``end_offsets()`` is the end (Apache Kafka) the wait costs little. A read takes about
#: 5-10 ms on a short log. Judging the fetch round alone let librdkafka's reader, whose
#: fetch round is cheap, wait 30-40 ms a batch on a log whose ListOffsets had grown
#: (bench/README.md, planning). The switch has no way back: with one, the fetches it
#: leaves (of the quiet partitions, while the broker is asked less) cost about half of
#: those of the exact reads, so it turned back and forth every few seconds
#: (bench/README.md, soak).
DEFER_TAIL_AFTER_MS = 25.0

#: How many of a topic's latest reads the switch judges by (their median: one slow
#: read, a pause of the machine, says nothing of the log).
DEFER_JUDGED_FETCHES = 5

#: ``{topic: {partition: end offset}}``
Ends = dict[str, dict[int, int]]


class LogEnds(Protocol):
    """The Kafka log's end offsets, as the planner reads them."""

    def latest_offsets_of(
        self,
        topics: Sequence[str],
        bounds_suffice: Callable[[str, dict[int, int]], bool] | None = None,
        may_defer: Collection[str] = (),
        reported: Mapping[tuple[str, int], int] | None = None,
    ) -> Ends:
        """``may_defer``: topics whose tails may wait a batch when their exact ends are
        costly (never a replay topic: its reader needs its exact end); ``reported``: the
        ends the lanes' fetches saw since the last read, which then stand in for those
        partitions' ListOffsets."""
        ...

    def log_starts_of(self, topic: str) -> dict[int, int]:
        """``{partition: first offset still in the log}`` (one ListOffsets request)."""
        ...

    def costly(self, topics: Collection[str]) -> list[str]:
        """Those of ``topics`` whose exact ends are costly to read (``DEFER_TAIL_AFTER_MS``)."""
        ...

    def close(self) -> None: ...


class KafkaEnds:
    """:class:`LogEnds` over one lazily created client of the pipeline's ``[flow] reader``:
    kafka-python's consumer (:class:`~flowctl.adapters.kafka_ends.KafkaPythonEnds`) or
    librdkafka's (:class:`~flowctl.adapters.kafka_ends_rdkafka.RdkafkaEnds`), the same
    read either way."""

    def __init__(self, bootstrap: str, reader: str = KAFKA_PYTHON) -> None:
        self.bootstrap = bootstrap
        self.reader = reader
        self._client: EndsClient | None = None
        self._known: KnownEnds = {}
        #: Whether the short fetch hold proved too short for this broker.
        self.patient = False
        #: The topics whose exact-end reads proved costly (see ``DEFER_TAIL_AFTER_MS``).
        self.deferring: set[str] = set()
        #: The latest reads' costs per topic, ms (their median turns the switch).
        self._costs: dict[str, deque[float]] = {}
        #: Whether this client fetched before: its first fetch also opens connections
        #: (75 ms on a new topology's empty log), which says nothing of the log's cost.
        self._fetched_before = False

    def latest_offsets_of(
        self,
        topics: Sequence[str],
        bounds_suffice: Callable[[str, dict[int, int]], bool] | None = None,
        may_defer: Collection[str] = (),
        reported: Mapping[tuple[str, int], int] | None = None,
    ) -> Ends:
        """``{topic: {partition: end}}``, exactly, in one request round for all ``topics``
        (or the lower bounds ``bounds_suffice`` accepts, and the moving tails of the
        ``may_defer`` topics whose reads were costly, from the ends the lanes
        ``reported`` where they saw them move: see ``kafka_ends.latest_offsets_of``)."""
        from flowctl.adapters import kafka_ends, kafka_log

        def read(timeout_s: float = 10.0) -> Ends:
            client = self._open()
            started = time.monotonic()

            def fetched(topics: Collection[str], _fetch_ms: float) -> None:
                # the read's time so far, its ListOffsets request and fetch round
                self._fetched(topics, (time.monotonic() - started) * 1000.0)

            try:
                return kafka_ends.latest_offsets_of(
                    client,
                    topics,
                    known=self._known,
                    bounds_suffice=bounds_suffice,
                    defer_tails=self.costly(may_defer),
                    on_fetch=fetched,
                    reported=reported,
                    timeout_s=timeout_s,
                )
            except kafka_log.KafkaReadTimeout:
                raise  # the fetch hold's switch, below
            except Exception:
                # A failed request can leave a client's metadata and connections stale (a
                # broker killed and started again, a leader moved): kafka-python's kept
                # failing ListOffsets for a minute after a broker of three came back on the
                # cluster. The next read opens a fresh client.
                self.close()
                raise

        if self.patient:
            return read()
        try:
            return read(timeout_s=QUICK_READ_TIMEOUT_S)
        except kafka_log.KafkaReadTimeout as exc:
            log.info(
                "log ends: %s; the broker answers no fetch held %d ms (Tansu on S3?): "
                "reading with the default hold from now on",
                exc,
                kafka_ends.PLANNER_FETCH_WAIT_MS,
            )
            self.close()
            self.patient = True
            return read()

    def costly(self, topics: Collection[str]) -> list[str]:
        """Those of ``topics`` whose exact ends are costly to read (``DEFER_TAIL_AFTER_MS``)."""
        return [t for t in topics if t in self.deferring]

    def _fetched(self, topics: Collection[str], ms: float) -> None:
        """A read that fetched ``topics``' exact ends took ``ms``: turn on :attr:`deferring`
        for a topic whose recent reads were costly."""
        if not self._fetched_before:
            self._fetched_before = True
            return
        for topic in topics:
            if topic in self.deferring:
                continue  # for good: nothing left to judge
            costs = self._costs.setdefault(topic, deque(maxlen=DEFER_JUDGED_FETCHES))
            costs.append(ms)
            if len(costs) < DEFER_JUDGED_FETCHES:
                continue
            if (typical := statistics.median(costs)) > DEFER_TAIL_AFTER_MS:
                self.deferring.add(topic)
                log.info(
                    "log ends: reads of %s's exact ends took %.1f ms (median of the last "
                    "%d): its appended tails wait a batch from now on",
                    topic,
                    typical,
                    DEFER_JUDGED_FETCHES,
                )

    def log_starts_of(self, topic: str) -> dict[int, int]:
        return self._open().starts(topic)

    def _open(self) -> EndsClient:
        from flowctl.adapters import kafka_ends

        if self._client is None:
            hold = None if self.patient else kafka_ends.PLANNER_FETCH_WAIT_MS
            self._client = open_client(self.bootstrap, self.reader, hold)
            log.info(
                "log ends: exact ends read with %s (fetch hold %s)",
                self.reader,
                "the client's default" if hold is None else f"{hold} ms",
            )
        return self._client

    def close(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # closing a broken client must not mask why it was dropped
                log.debug("closing the log ends' client failed", exc_info=True)
        self._known.clear()
        self._fetched_before = False


#: How long one request of the planner's read of the ends may wait for the broker. A
#: broker that does not answer fails the read within it: the planner plans no batch and
#: its health names the read and the broker (STALLED while the outage lasts), where the
#: clients' default (30 s) would leave it blocked, with no cause but its silence.
ENDS_REQUEST_TIMEOUT_S = 5.0


def open_client(bootstrap: str, reader: str, fetch_wait_ms: int | None) -> EndsClient:
    """A client of ``reader`` for the exact-ends read; ``fetch_wait_ms``: how long the
    broker may hold its fetch at the log's end (``None``: the client's default hold)."""
    if reader == LIBRDKAFKA:
        from flowctl.adapters.kafka_ends_rdkafka import RdkafkaEnds

        return RdkafkaEnds(
            bootstrap, fetch_wait_ms=fetch_wait_ms, request_timeout_s=ENDS_REQUEST_TIMEOUT_S
        )
    from flowctl.adapters import kafka_ends, kafka_log

    hold = {} if fetch_wait_ms is None else {"fetch_max_wait_ms": fetch_wait_ms}
    timeout_ms = int(ENDS_REQUEST_TIMEOUT_S * 1000)
    # The constructor bootstraps (30 s by default) before any request: bounded too, so a
    # read while the broker is down fails within ENDS_REQUEST_TIMEOUT_S, client and all.
    return kafka_ends.KafkaPythonEnds(
        kafka_log.new_consumer(
            bootstrap, request_timeout_ms=timeout_ms, bootstrap_timeout_ms=timeout_ms, **hold
        )
    )


class BackgroundEnds:
    """The planner's reads of Eden's and both replay topics' ends, on a thread of their own.

    A read (one round trip for the three topics) waits on the broker while the planner
    collects the lanes' feedback and the durable offsets: the three are independent. The
    thread touches only the ends' consumer and the figures given to :meth:`start`.

    A read asked ``with_starts`` also reads Eden's log starts after the ends (the planner
    asks every ``flowctl.spark.flow.planner.STARTS_EVERY_S``, for its data-loss check):
    they are in :attr:`starts` once the read's future is done (``None``: not read, or
    the read failed: :attr:`starts_error` says why; the ends are returned either way).
    """

    def __init__(self, source: LogEnds, eden: str, replays: Sequence[str]) -> None:
        self.source = source
        self.eden = eden
        self.topics = [eden, *replays]
        self._pool: ThreadPoolExecutor | None = None
        self.starts: dict[int, int] | None = None
        self.starts_error: Exception | None = None

    def start(
        self,
        positions: Mapping[int, int] | None = None,
        most: int = 0,
        *,
        with_starts: bool = False,
        reported: Mapping[int, int] | None = None,
    ) -> Future[Ends]:
        """Start a read. With ``positions`` (Eden's cut, per partition), Eden's
        ``end_offsets()`` are taken as they are while Eden holds at least ``most`` records
        past the cut below them (:func:`enough_below`); the replay topics' ends are always
        exact (their reader swaps To and From once To is read up to its end).
        ``reported``: Eden's ends as the lanes' fetches saw them since the last read
        (``{partition: end}``; used where Eden's exact ends are costly)."""
        check = None
        if positions is not None:
            check = functools.partial(enough_below, self.eden, dict(positions), most)
        seen = {(self.eden, p): n for p, n in (reported or {}).items()}
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="flowctl-log-ends")
        self.starts, self.starts_error = None, None
        return self._pool.submit(self._read, check, with_starts, seen)

    def _read(
        self,
        check: Callable[[str, dict[int, int]], bool] | None,
        with_starts: bool,
        reported: Mapping[tuple[str, int], int],
    ) -> Ends:
        ends = self.source.latest_offsets_of(
            self.topics, check, may_defer=[self.eden], reported=reported
        )
        if with_starts:
            try:
                self.starts = self.source.log_starts_of(self.eden)
            except Exception as exc:  # the planner reports it; the ends still serve
                self.starts_error = exc
        return ends

    def costly(self) -> bool:
        """Whether Eden's exact ends are costly to read (``DEFER_TAIL_AFTER_MS``)."""
        return bool(self.source.costly([self.eden]))

    def read(self, topics: Sequence[str]) -> Ends:
        """Exact ends of ``topics``, read here and now."""
        return self.source.latest_offsets_of(topics)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        self.source.close()


def enough_below(
    eden: str, positions: Mapping[int, int], most: int, topic: str, bounds: Mapping[int, int]
) -> bool:
    """Whether ``topic``'s ``end_offsets()`` serve a batch as well as its exact ends: it is
    Eden, holds at least ``most`` records (all the windows can take) below them past the
    cut ``positions``, and no partition's cut is past its bound (a cut inside the last
    record batch would look like a reset log), so the cut stops before the bounds anyway
    (an exact end costs a fetch on Tansu, a third of the planning under load). Records
    past a bound wait for the next batch, as the rest of the backlog does; nothing is cut
    beyond the log."""
    if topic != eden or any(end < positions.get(p, 0) for p, end in bounds.items()):
        return False
    waiting = sum(end - positions.get(p, 0) for p, end in bounds.items())
    return waiting > 0 and waiting >= most
