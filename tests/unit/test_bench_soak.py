"""The soak benchmark's reading of a driver log, its bucket figures and its exact expectation.

The soak runs for an hour; what it concludes rests on these small pieces, so they are
checked here on known input (the log lines in the formats the planner and the MRWQ
flusher write), and its librdkafka feed against the real broker.
"""

from __future__ import annotations

import datetime as dt
import logging
import secrets
from collections import Counter
from pathlib import Path

import pytest

from bench import soak
from bench.lib.steady_feed import SteadyFeed
from flowctl.adapters import kafka_ends, kafka_log
from flowctl.adapters.mrwq_flush_log import FlushLog
from flowctl.adapters.mrwq_reports import FlushReport
from flowctl.adapters.mrwq_sink import FlushStats
from flowctl.core.clock import FakeClock
from flowctl.core.flusher import FlushResult
from flowctl.pipelines.wordcount import count_values


def test_minute_lines_reads_the_planning_and_the_flush_summaries_with_their_times(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="flowctl.adapters.mrwq_flusher")
    result = FlushResult("length", 0, 0, 1, ("t0",), None, 0)
    FlushLog("ns", FakeClock(0.0)).flushed(
        FlushReport(result, FlushStats(items=1, records=500), 0.0125)
    )
    flush_line = caplog.records[-1].getMessage()
    log = tmp_path / "driver.log"
    log.write_text(
        "2026-11-26 10:00:30,000 INFO flowctl.spark.flow.planner [planner]: flow t-1: planning "
        "per batch over 240 batch(es), ms: p50 3.1, p99 9.25, max 12.0; by phase p50/p99: "
        "log_ends 1.0/2.0, flags 0.5/0.75\n"
        f"2026-11-26 10:01:00,500 INFO flowctl.adapters.mrwq_flusher: {flush_line}\n"
        "2026-11-26 10:01:01,000 INFO something else: planning per batch\n"
    )
    t0 = dt.datetime(2026, 11, 26, 10, 0, 0).timestamp()
    lines = soak.minute_lines(log, t0)
    assert lines["planning"] == [(30.0, 240, 3.1, 9.25)]
    assert lines["log_ends"] == [(30.0, 240, 1.0, 2.0)]  # the phase of the log's ends
    assert lines["flush"] == [(60.5, 1, 12.5, 12.5)]


def test_a_spans_cost_is_the_batch_weighted_median_of_its_minutes() -> None:
    minutes = [(0.0, 10, 5.0, 50.0), (60.0, 300, 2.0, 8.0), (120.0, 290, 3.0, 9.0)]
    cost = soak.cost_of(minutes)
    assert cost == {"p50": 2.0, "tail": 8.0, "tail_max": 50.0, "n": 600}
    assert soak.cost_of([])["p50"] is None
    flush = {"p50": 1.5}
    assert soak.per_batch(cost, flush) == 3.5
    assert soak.per_batch(soak.cost_of([]), flush) is None


def test_the_seconds_past_the_last_whole_bucket_join_it_instead_of_making_an_empty_one() -> None:
    """An hour's load stopped 6 s past its 12th bucket: there are 12 buckets, and the
    minute lines of those 6 s count in the last one (an empty 13th bucket, with no cost,
    was once taken for "the last")."""
    sample = {
        "durable": 0, "backlog": 0, "rss_mb": {}, "db_bytes": 0, "checkpoint_bytes": 0,
        "rows": {},
    }  # fmt: skip
    run = {
        "load_s": 3606.0,
        "samples": [{**sample, "t_s": float(t)} for t in range(0, 3606, 30)],
        "log": {
            "planning": [(float(t), 100, 10.0, 20.0) for t in range(60, 3606, 60)]
            + [(3605.0, 100, 99.0, 99.0)],
            "flush": [(float(t), 100, 5.0, 9.0) for t in range(60, 3606, 60)],
        },
        "windows": [],
    }
    rows = soak.buckets(run, 300.0)
    assert len(rows) == 12
    assert rows[-1]["minutes"] == [55.0, 60.1]
    assert rows[-1]["planning_ms"]["n"] == 700  # minutes 55-60 (six lines) and the tail's
    assert all(b["per_batch_ms"] is not None for b in rows)


def test_the_feed_knows_the_words_of_every_line_it_sent() -> None:
    pool = [b"a b", b"b c c", b"d"]
    feed = SteadyFeed("127.0.0.1:9", "t", pool, rate=5)
    feed.sent = 7  # two whole cycles and the first line again
    assert feed.expected_counts() == count_values(pool * 2 + pool[:1])
    assert feed.expected_counts() == Counter({"a": 3, "b": 5, "c": 4, "d": 2})


def test_a_bad_rate_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="rate=0"):
        SteadyFeed("127.0.0.1:9", "t", [b"a"], rate=0)


def test_the_feed_sends_rate_lines_a_second_until_finished(monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.lib import steady_feed

    sent: list[list[bytes]] = []

    def produce(_bootstrap: str, _topic: str, lines: list[bytes], **_: object) -> int:
        sent.append(list(lines))
        return len(lines)

    monkeypatch.setattr(steady_feed.kafka_log, "produce", produce)
    feed = SteadyFeed("127.0.0.1:9", "t", [b"a", b"b", b"c"], rate=2)
    feed.start()
    while not sent:
        feed.join(0.01)
    total = feed.finish(timeout_s=10.0)
    assert not feed.is_alive() and feed.error is None
    assert total == 2 * len(sent)
    assert sent[0] == [b"a", b"b"] and (len(sent) == 1 or sent[1] == [b"c", b"a"])


@pytest.mark.integration
def test_the_librdkafka_feed_sends_rate_lines_a_second_round_robin_and_counts_them(
    kafka_bootstrap: str,
) -> None:
    """The soak's default feeder against the real broker: every line it counts as sent is
    in the log once, dealt evenly over the partitions, in the pool's order."""
    topic = f"feed.{secrets.token_hex(4)}"
    kafka_log.ensure_topics(kafka_bootstrap, {topic: 3})
    pool = [f"line {i}".encode() for i in range(7)]
    feed = SteadyFeed(kafka_bootstrap, topic, pool, rate=300, client="librdkafka")
    feed.start()
    while feed.sent < 600 and feed.error is None:
        feed.join(0.05)
    total = feed.finish(timeout_s=30.0)
    assert feed.error is None and total >= 600 and total % 300 == 0
    ends = kafka_ends.latest_offsets(kafka_bootstrap, topic)
    assert sorted(ends.values()) == [total // 3] * 3  # round robin over the 3 partitions
    consumer = kafka_log.new_consumer(kafka_bootstrap)
    try:
        values = [
            r.value
            for p in sorted(ends)
            for r in kafka_log.read_range(consumer, topic, p, 0, ends[p])
        ]
    finally:
        consumer.close()
    assert Counter(values) == Counter(pool[i % len(pool)] for i in range(total))


def test_an_unknown_feed_client_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="client='rdkafka' must be one of"):
        SteadyFeed("127.0.0.1:9", "t", [b"a"], rate=1, client="rdkafka")


def _rows_run(rows_at: object, load_s: float = 3600.0) -> dict[str, object]:
    """A run whose only figures are its dense ``applied_ranges`` counts."""
    sample = {
        "durable": 0, "backlog": 0, "rss_mb": {}, "db_bytes": 0, "checkpoint_bytes": 0,
        "rows": {"offsets[pipeline]": 4},
    }  # fmt: skip
    times = [t + 0.37 * (t % 7) for t in range(0, int(load_s), 2)]
    return {
        "load_s": load_s,
        "samples": [{**sample, "t_s": float(t)} for t in range(0, int(load_s), 30)],
        "applied_rows": [[t, rows_at(t)] for t in times],  # type: ignore[operator]
        "log": {"planning": [(60.0, 100, 10.0, 20.0)], "flush": [(60.0, 100, 5.0, 9.0)]},
        "windows": [],
        "lost": 0,
        "doubled": 0,
        "broken": None,
    }


def test_a_sawtooth_of_rows_is_bounded_whatever_its_phase_and_a_growing_table_is_not() -> None:
    """The merge every 10 s makes the count a sawtooth: its time average over each half
    of the run is the same; rows that grow with the records processed make the second
    half's larger."""
    sawtooth = _rows_run(lambda t: 100 + 30 * (t % 10))
    run = {**sawtooth, "buckets": soak.buckets(sawtooth, 300.0)}
    bounded = soak.targets(run, None, 300.0)["bookkeeping_bounded"]
    assert bounded["met"], bounded
    assert 0.97 <= bounded["ratio"] <= 1.03
    growing = _rows_run(lambda t: 100 + 30 * (t % 10) + t / 10)
    run = {**growing, "buckets": soak.buckets(growing, 300.0)}
    unbounded = soak.targets(run, None, 300.0)["bookkeeping_bounded"]
    assert not unbounded["met"] and unbounded["ratio"] > 1.1, unbounded


def test_the_rows_sampler_counts_one_pipelines_rows_and_those_above_its_checkpoint(
    tmp_path: Path,
) -> None:
    import time

    import sqlalchemy as sa

    from bench.lib.probe import RowsSampler
    from flowctl.adapters import schema

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    schema.metadata.create_all(engine)
    ranges = schema.applied_ranges
    now = dt.datetime.now(dt.UTC)
    row = {"topic": "t.eden", "partition": 0, "outcome": "applied", "applied_at": now}
    with engine.begin() as conn:
        conn.execute(
            ranges.insert(),
            [{**row, "pipeline": "mine", "start": 10 * i, "end": 10 * i + 10} for i in range(3)]
            + [{**row, "pipeline": "other", "start": 0, "end": 10}],
        )
        conn.execute(
            schema.offsets.insert(),
            {
                "pipeline": "mine",
                "topic": "t.eden",
                "partition": 0,
                "next_offset": 20,
                "updated_at": now,
            },
        )
    sampler = RowsSampler(engine, "mine", time.time()).start()
    while not sampler.samples:
        time.sleep(0.2)
    samples = sampler.stop()
    # [20, 30) is above the checkpoint
    assert samples[0][1:] == [3, 1, {"0": 3}] and sampler.errors == 0
    assert 1.0 <= samples[0][0] <= 3.5


def test_the_anatomy_says_which_rows_a_merge_would_leave(tmp_path: Path) -> None:
    """A merged run, a run not yet merged, a one-record applied row between them, a
    replayed tuple with a replay of its first half nested, and a row above the checkpoint:
    a merge now would leave both runs and the one-record row as one row, the replayed row
    and its nested replay, and the row above the checkpoint; another pipeline's rows are
    not counted."""
    import sqlalchemy as sa

    from bench.lib.probe import applied_anatomy
    from flowctl.adapters import schema

    engine = sa.create_engine(f"sqlite:///{tmp_path / 'rows.db'}")
    schema.metadata.create_all(engine)
    now = dt.datetime.now(dt.UTC)
    base = {"pipeline": "mine", "topic": "t.eden", "partition": 0, "applied_at": now}
    rows = [(0, 10, "applied"), (10, 20, "applied"), (20, 21, "applied"), (21, 30, "applied")]
    rows += [(30, 40, "applied"), (40, 50, "replayed"), (40, 45, "applied"), (50, 60, "applied")]
    with engine.begin() as conn:
        conn.execute(
            schema.applied_ranges.insert(),
            [{**base, "start": s, "end": e, "outcome": w} for s, e, w in rows]
            + [{**base, "pipeline": "other", "start": 0, "end": 10, "outcome": "applied"}],
        )
        checkpoint = {"pipeline": "mine", "topic": "t.eden", "partition": 0, "next_offset": 50}
        conn.execute(schema.offsets.insert(), {**checkpoint, "updated_at": now})
    with engine.connect() as conn:
        anatomy = applied_anatomy(conn, "mine")
    assert anatomy == {
        "t.eden:0": {
            "rows": 8,
            "checkpoint": 50,
            # [0, 40) merges into one, the replayed row and the replay nested in it
            # stay, [50, 60) is above
            "residue": 4,
            "outcomes": {"applied": 7, "replayed": 1},
            "one_record_applied": 1,
            "above_checkpoint": 1,
        }
    }


def test_a_buckets_cpu_is_its_spans_weighted_by_their_seconds() -> None:
    spans = [
        [0.0, 30.0, 0.5, {"broker (Tansu)": 0.1, "driver (JVM)": 0.4}],
        [30.0, 10.0, 0.9, {"broker (Tansu)": 0.5}],
    ]
    busy, shares = soak.cpu_of(spans)
    assert busy == 0.6  # (30 * 0.5 + 10 * 0.9) / 40
    assert shares == {"broker (Tansu)": 0.2, "driver (JVM)": 0.3}
    assert soak.cpu_of([]) == (None, {})
