"""The Kafka log's exact end offsets: ``end_offsets()`` on Apache Kafka; read where that is
only a bound (the former stand-in, Tansu).

On Apache Kafka (the default, :func:`exact_log_ends`) ``end_offsets()`` is
one ListOffsets request whose answer is exact: at ``read_committed`` it is the last stable
offset, below any open transaction, which is what a plan may cut up to. The read is that
request and nothing else: no fetch, and no high watermark (which lies past an open
transaction) stands in for an end.

On the Tansu broker (``FLOWCTL_BROKER=tansu``) ``end_offsets()`` (ListOffsets)
under-reports: it lies one record into a partition's last record batch.
:func:`latest_offsets` therefore fetches from that bound and trusts the fetch's high
watermark, leaving the fetched batch undecoded; a caller that asks every micro-batch (the
planner) keeps what it learnt per partition (:data:`KnownEnds`) so an unmoved partition
costs no fetch, may accept the bounds where they serve (``bounds_suffice``), and may let a
moving tail wait a batch on a log whose exact ends are costly (``defer_tails``,
``reported``).

The read is made of three requests of one client (:class:`EndsClient`): the partitions,
ListOffsets and a fetch round. This module decides which partitions need which, the same
for every client, and holds the kafka-python client (:class:`KafkaPythonEnds`, the
default); :mod:`flowctl.adapters.kafka_ends_rdkafka` is librdkafka's, which the planner
uses under ``[flow] reader = "librdkafka"`` (its fetch round parses in C what
kafka-python parses in Python). Topics, range reads and the consumers' configuration are
:mod:`flowctl.adapters.kafka_log`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

from kafka import KafkaConsumer, TopicPartition

from flowctl.adapters.kafka_log import (
    KafkaReadTimeout,
    log_starts,
    new_consumer,
    partitions_of,
)

#: How long one poll of :func:`latest_offsets` waits for records: a fetch from a bound that
#: proves to be the end (Apache Kafka) returns none, and the read starts that partition
#: again one record before the bound after one such poll (Tansu answers in about 5 ms).
END_POLL_MS = 20

#: The planner's end-offset reader: poll() sends the next fetch before it returns, and
#: at the log's end the broker holds it for ``fetch_max_wait_ms``; every later request on
#: the connection (the next batch's ListOffsets) waits behind it. At 100 ms that wait was
#: most of the planner's per-batch cost (bench/README.md, latency).
PLANNER_FETCH_WAIT_MS = 10


def exact_log_ends(env: Mapping[str, str] | None = None) -> bool:
    """Whether the broker's ``end_offsets()`` are the log's exact ends (Apache Kafka, any
    Kafka the platform is pointed at) or only bounds (the Tansu stand-in,
    ``FLOWCTL_BROKER=tansu``, whose bound lies one record into a partition's last batch).
    Read from the environment: the Spark driver's planner and the CLI see the
    ``FLOWCTL_BROKER`` the platform's settings hand every process they start."""
    env = os.environ if env is None else env
    return (env.get("FLOWCTL_BROKER") or "kafka") != "tansu"


#: A topic partition, ``(topic, partition)`` (kafka-python's ``TopicPartition`` is one).
Key = tuple[str, int]

#: What :func:`latest_offsets` learnt per partition: ``{(topic, partition): (end_offsets(),
#: exact end, time.monotonic() of the read, whether an exact read found the bound below
#: the end)}`` (the last: the broker's bound falls inside the last record batch, as on
#: Tansu, so the next exact read may fetch from the bound itself; see
#: :func:`latest_offsets`).
KnownEnds = dict[Key, tuple[int, int, float, bool]]

#: How long a ``known`` end is trusted while ``end_offsets()`` stays put. On Tansu with
#: S3 storage ``end_offsets()`` can stay put across an append (it lagged a whole record
#: batch for as long as the log was quiet), so an answer from ``known`` alone would
#: hide that batch until the next append; past this age the end is read again.
KNOWN_MAX_AGE_S = 0.5


class EndsClient(Protocol):
    """One Kafka client's requests, as the exact-ends read uses them."""

    def partitions(self, topic: str) -> list[int]:
        """The topic's partition ids, sorted; ``ValueError`` naming a missing topic."""
        ...

    def bounds(self, keys: Sequence[Key]) -> dict[Key, int]:
        """``end_offsets()`` of ``keys`` (one ListOffsets request): lower bounds on Tansu."""
        ...

    def fetch_ends(
        self, first: Mapping[Key, int], bounds: Mapping[Key, int], timeout_s: float
    ) -> dict[Key, int]:
        """The exact end of every partition of ``first``: one fetch round, each partition
        fetched from its offset in ``first`` (its bound in ``bounds``, or the record
        before), its end the high watermark of a fetch this round parsed. Raises
        :class:`~flowctl.adapters.kafka_log.KafkaReadTimeout` past ``timeout_s``."""
        ...

    def starts(self, topic: str) -> dict[int, int]:
        """``{partition: first offset still in the log}`` (one ListOffsets request)."""
        ...

    def close(self) -> None: ...


class KafkaPythonEnds:
    """:class:`EndsClient` over a kafka-python consumer (which it closes on :meth:`close`).

    Its fetch round leaves the consumer assigned, with one fetch pending: the broker
    holds it for the consumer's ``fetch_max_wait_ms`` (:data:`PLANNER_FETCH_WAIT_MS`
    for the planner's)."""

    def __init__(self, consumer: KafkaConsumer) -> None:
        self.consumer = consumer

    def partitions(self, topic: str) -> list[int]:
        return partitions_of(self.consumer, topic)

    def bounds(self, keys: Sequence[Key]) -> dict[Key, int]:
        answer = self.consumer.end_offsets([TopicPartition(t, p) for t, p in keys])
        return {(tp.topic, tp.partition): int(n or 0) for tp, n in answer.items()}

    def starts(self, topic: str) -> dict[int, int]:
        return log_starts(self.consumer, topic)

    def close(self) -> None:
        self.consumer.close()

    def fetch_ends(
        self, first: Mapping[Key, int], bounds: Mapping[Key, int], timeout_s: float
    ) -> dict[Key, int]:
        """Polls until each partition's fetch returned a record (or moved past its start
        without one: a transaction marker); a record proves the answer is this read's (an
        answer to an earlier fetch may still wait in the consumer). A partition fetched
        from its bound that returns nothing within one poll (the bound was the end after
        all, as on Apache Kafka) starts again one record before."""
        consumer = self.consumer
        start = {TopicPartition(*key): n for key, n in first.items()}
        consumer.assign(list(start))
        for tp, offset in start.items():
            consumer.seek(tp, offset)
        waiting = set(start)
        deadline = time.monotonic() + timeout_s
        while waiting:
            if time.monotonic() > deadline:
                raise KafkaReadTimeout(
                    "latest_offsets: no record fetched from "
                    f"{sorted((tp.topic, tp.partition) for tp in waiting)} within {timeout_s} s"
                )
            fetched = consumer.poll(timeout_ms=END_POLL_MS, max_records=len(start))
            for tp in list(waiting):
                # A fetch was parsed (its highwater is fresh) when it returned a record, or
                # when the position moved past the seek without one: the partition's last
                # record is a transaction marker, which no consumer is handed.
                parsed = tp in fetched or consumer.position(tp) > start[tp]
                if parsed and consumer.highwater(tp) is not None:
                    waiting.discard(tp)
                    # The rest of the fetched batch is left undecoded: the next poll
                    # drops what lies behind a position the fetch did not ask for.
                    consumer.seek(tp, consumer.highwater(tp))
                elif not fetched and start[tp] == bounds[tp]:
                    # A whole poll without a record: there is none at the bound, it is the end.
                    start[tp] -= 1
                    consumer.seek(tp, start[tp])
        return {(tp.topic, tp.partition): int(consumer.highwater(tp)) for tp in start}


def latest_offsets(
    source: str | KafkaConsumer | EndsClient,
    topic: str,
    *,
    timeout_s: float = 10.0,
    known: KnownEnds | None = None,
    known_max_age_s: float = KNOWN_MAX_AGE_S,
) -> dict[int, int]:
    """``{partition: next offset to be written}`` for every partition of ``topic``, exactly.

    ``end_offsets()`` is only a lower bound on Tansu (one record into the last record
    batch), so each non-empty partition is fetched from one record before it and its end
    is the high watermark of a fetch this read parsed (:meth:`EndsClient.fetch_ends`).
    Where an earlier exact read found the bound below the end (Tansu), the fetch starts at
    the bound itself, inside the last batch, and no record of the batch before is decoded
    to be skipped. Raises :class:`KafkaReadTimeout` if that takes longer than
    ``timeout_s``. ``source``: a bootstrap address (a kafka-python consumer is opened and
    closed), a kafka-python consumer (reassigned: its previous assignment is dropped), or
    an :class:`EndsClient` (librdkafka's: :mod:`flowctl.adapters.kafka_ends_rdkafka`).

    ``known`` (kept by a caller that asks every micro-batch) skips that read for
    a partition whose ``end_offsets()`` did not move since a read less than
    ``known_max_age_s`` ago: on Apache Kafka and Tansu in memory the bound moves on
    any append (it is the end, or one record into the last batch); on Tansu with S3
    storage it may lag a batch, which the age limit bounds. Unchanged replay topics
    and idle partitions then cost one ListOffsets request, and a fetch twice a second.
    """
    return latest_offsets_of(
        source,
        [topic],
        timeout_s=timeout_s,
        known=known,
        known_max_age_s=known_max_age_s,
    )[topic]


def latest_offsets_of(
    source: str | KafkaConsumer | EndsClient,
    topics: Sequence[str],
    *,
    timeout_s: float = 10.0,
    known: KnownEnds | None = None,
    known_max_age_s: float = KNOWN_MAX_AGE_S,
    bounds_suffice: Callable[[str, dict[int, int]], bool] | None = None,
    defer_tails: Collection[str] = (),
    on_fetch: Callable[[Collection[str], float], None] | None = None,
    reported: Mapping[Key, int] | None = None,
    exact_bounds: bool | None = None,
) -> dict[str, dict[int, int]]:
    """:func:`latest_offsets` of several topics at once: ``{topic: {partition: end}}``.

    ``exact_bounds`` (default: :func:`exact_log_ends`, True but on Tansu):
    the broker's ``end_offsets()`` are the ends (Apache Kafka): one ListOffsets request
    answers, and every argument below is moot.

    One ListOffsets request and at most one fetch round cover every topic, where a
    read per topic pays a round trip each (the planner reads Eden and both replay
    topics before every micro-batch).

    ``bounds_suffice(topic, bounds)``: given a topic's ``end_offsets()`` (lower bounds,
    exact on Apache Kafka), whether the caller can do with them; for a topic where it
    says so they are returned and none of its records is fetched (a planner with more
    records waiting than it can admit needs no exact end). Bounds and deferred answers
    never stop inside a record batch: where an exact read found the bound below the end
    (Tansu), they are the record before the bound, never below the last answer.

    ``defer_tails``: topics whose partitions are answered with their ``end_offsets()``
    while those moved since the last read (and are at or past its answer): a partition
    being appended to then costs no fetch, and its last record batch waits for the next
    read; once the bound stops moving, the next read fetches the exact end. The caller
    asks for it where an exact end costs more than a batch's delay (a long log on Tansu,
    whose fetch walks the partition's batches). ``on_fetch(topics, ms)`` is told how long
    each fetch round took and which topics it read.

    ``reported``: ``{(topic, partition): end}`` that other consumers' fetches reported
    since the last read (the lanes': :func:`highwater`). A ``defer_tails`` partition whose
    reported end moved past the last read's answer is answered with it and left out of
    the ListOffsets request, which walks a long log on Tansu as a fetch does: a stream
    being appended to then asks the broker nothing for Eden, whatever the log's length.
    """
    if isinstance(source, str):
        client: EndsClient = KafkaPythonEnds(new_consumer(source))
    elif isinstance(source, KafkaConsumer):
        client = KafkaPythonEnds(source)
    else:
        client = source
    try:
        if exact_log_ends() if exact_bounds is None else exact_bounds:
            return _bounds_of(client, topics)
        return _latest_offsets(
            client,
            topics,
            timeout_s,
            {} if known is None else known,
            known_max_age_s,
            bounds_suffice,
            defer_tails,
            on_fetch,
            {} if reported is None else reported,
        )
    finally:
        if isinstance(source, str):
            client.close()


def _bounds_of(client: EndsClient, topics: Sequence[str]) -> dict[str, dict[int, int]]:
    """Every partition's ``end_offsets()``, in one ListOffsets request."""
    bounds = client.bounds([(t, p) for t in topics for p in client.partitions(t)])
    out: dict[str, dict[int, int]] = {t: {} for t in topics}
    for (topic, partition), end in sorted(bounds.items()):
        out[topic][partition] = end
    return out


def _latest_offsets(
    client: EndsClient,
    topics: Sequence[str],
    timeout_s: float,
    known: KnownEnds,
    max_age_s: float,
    bounds_suffice: Callable[[str, dict[int, int]], bool] | None,
    defer_tails: Collection[str],
    on_fetch: Callable[[Collection[str], float], None] | None,
    reported: Mapping[Key, int],
) -> dict[str, dict[int, int]]:
    tps = [(t, p) for t in topics for p in client.partitions(t)]
    deferred: dict[Key, int] = {}
    for tp in tps:  # the lanes saw these grow: their bound needs no ListOffsets
        seen_end = reported.get(tp)
        if seen_end is not None and tp[0] in defer_tails and _moved(known.get(tp), seen_end):
            deferred[tp] = seen_end
    asked = [tp for tp in tps if tp not in deferred]
    ends: dict[Key, int] = dict(deferred)
    if asked:
        ends.update(client.bounds(asked))
    result = {tp: 0 for tp in tps if not ends.get(tp)}
    # What a plan may stop at without a read: never inside a record batch (see _batch_end).
    usable = {tp: _batch_end(known.get(tp), n) for tp, n in ends.items() if tp not in deferred}
    if bounds_suffice is not None:
        for topic in topics:
            bounds = {p: usable.get((t, p)) or 0 for t, p in tps if t == topic}
            if bounds_suffice(topic, bounds):
                result.update({(topic, p): n for p, n in bounds.items()})
    now = time.monotonic()
    for tp in tps:
        seen = known.get(tp)
        fresh = seen is not None and seen[0] == ends.get(tp) and now - seen[2] < max_age_s
        if tp in deferred:
            result[tp] = deferred[tp]
        elif ends.get(tp) and seen is not None and fresh:
            result[tp] = seen[1]  # exact, and at or past an accepted bound
        elif tp[0] in defer_tails and tp not in result and _moved(seen, ends.get(tp)):
            result[tp] = deferred[tp] = usable[tp]  # the last batch waits a read
    pending = [tp for tp in tps if ends.get(tp) and tp not in result]
    if pending:
        started = time.monotonic()
        # Where the bound is known to stop inside the last batch, the fetch starts
        # there (that batch is read, not the one before); elsewhere one record before.
        first = {tp: ends[tp] - (0 if _at_bound(known.get(tp)) else 1) for tp in pending}
        exact = client.fetch_ends(first, {tp: ends[tp] for tp in pending}, timeout_s)
        for tp in pending:
            result[tp] = exact[tp]
            known[tp] = (ends[tp], result[tp], now, result[tp] > ends[tp])
        if on_fetch is not None:
            on_fetch({tp[0] for tp in pending}, (time.monotonic() - started) * 1000.0)
    for tp, answer in deferred.items():
        # Remembered as a bound that moved, not an exact end: a read that finds it unmoved
        # fetches the exact end (the age limit never lets it stand in for one).
        known[tp] = (ends[tp], answer, float("-inf"), _at_bound(known.get(tp)))
    out: dict[str, dict[int, int]] = {t: {} for t in topics}
    for topic, partition in sorted(result):
        out[topic][partition] = result[(topic, partition)]
    return out


def _at_bound(seen: tuple[int, int, float, bool] | None) -> bool:
    """Whether an exact read of the partition found its bound below its end."""
    return seen is not None and seen[3]


def _batch_end(seen: tuple[int, int, float, bool] | None, bound: int) -> int:
    """Where a plan that takes ``end_offsets()`` without a read may stop: the bound itself,
    or, where an exact read found the bound below the end (Tansu's bound is one record
    into the last record batch), the record before it, the start of that batch, but never
    below the last answer. A plan cut at the bound would make the batch's first record a
    tuple of its own, once per producer batch per partition: a lane task, a claim and a
    row for one record each time."""
    if not _at_bound(seen) or bound <= 0:
        return bound
    assert seen is not None
    return max(bound - 1, min(seen[1], bound))


def _moved(seen: tuple[int, int, float, bool] | None, bound: int | None) -> bool:
    """Whether a partition's ``end_offsets()`` moved past what the last read answered (so
    taking it loses nothing the last read gave, and the log is being appended to)."""
    return seen is not None and bound is not None and bound > seen[0] and bound >= seen[1]


def highwater(consumer: KafkaConsumer, topic: str, partition: int) -> int | None:
    """The log end the consumer's last fetch of ``topic``/``partition`` reported (the
    fetch response's high watermark: exact, also on Tansu, and free where a ListOffsets
    request walks a long log), or ``None`` when it fetched none since it was assigned it.
    A lane reports it after its reads, so the planner needs no ListOffsets for a
    partition being appended to (``reported`` in :func:`latest_offsets_of`)."""
    end = consumer.highwater(TopicPartition(topic, partition))
    return None if end is None else int(end)
