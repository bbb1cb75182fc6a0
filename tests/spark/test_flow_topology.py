"""The flow-controlled topology end to end: spark-submit, Kafka, memcached, SQLite/PostgreSQL.

Every test runs one topology at a time (two cores for the whole machine) on a pipeline
of its own (a renamed copy of a shipped config), so its topics never meet another
test's on the session's broker, and checks exact results against the plain-Python
reference: nothing lost, nothing counted twice. The driver SIGKILL and memcached
restart faults live in tests/faults/ (with the reconcile check); this file keeps the
database outage for what it shows inside the topology (MRWQ growth, backpressure).
"""

from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path

import pytest
import sqlalchemy as sa

from bench.lib.submit import LocalJob
from flowctl.adapters import kafka_ends, kafka_log
from flowctl.adapters.control_plane import MetricsWindow
from flowctl.config import Settings
from flowctl.core.replay import decode_envelope
from flowctl.pipelines.wordcount import count_words
from tests.spark.flow_harness import (
    Flow,
    counted,
    flow_config,
    lines,
    mrwq_length,
    read_topic,
    rename_database,
    wait_for,
)

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]


def test_counts_exactly_writes_metrics_windows_and_checkpoints_behind_the_flush(
    flow: Flow, tmp_path: Path
) -> None:
    config = flow_config(tmp_path, "flowexact")
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowexact.eden": 3})
    data = lines(6_000, seed=11)
    kafka_log.produce(bootstrap, "flowexact.eden", data)
    expected = dict(count_words(data))
    job = flow.submit(config, "flowexact-blue-1", 4)
    wait_for(
        lambda: counted(flow, "flowexact") == expected,
        timeout_s=180,
        job=job,
        what="exact word counts",
    )
    more = lines(1_500, seed=12)
    kafka_log.produce(bootstrap, "flowexact.eden", more)
    expected = dict(count_words(data + more))
    wait_for(
        lambda: counted(flow, "flowexact") == expected,
        timeout_s=120,
        job=job,
        what="exact word counts after more data",
    )
    total = len(data) + len(more)
    wait_for(
        lambda: sum(w.records for w in flow.plane.metrics_windows("flowexact-blue-1")) >= total,
        timeout_s=30,
        job=job,
        what="metrics windows counting every record",
    )
    flow.stop(job, "flowexact-blue-1")
    assert counted(flow, "flowexact") == expected
    latest = kafka_ends.latest_offsets(bootstrap, "flowexact.eden")
    assert flow.plane.committed_offsets("flowexact", "flowexact.eden") == latest
    windows = flow.plane.metrics_windows("flowexact-blue-1")
    assert sum(w.records for w in windows) >= total
    assert sum(w.failed + w.timed_out + w.dlq for w in windows) == 0
    lanes = [w.lane_list for w in windows if w.acked][-1]
    assert [lane["lane"] for lane in lanes] == [0, 1, 2, 3]
    assert all(lane["window"] >= 1 for lane in lanes)
    assert any(w.latency_p50_ms is not None for w in windows)
    log = job.log()
    assert "flow control: round_robin dispatch" in log
    assert "MRWQ mrwq.flowexact: flushed" in log


# deep: the poison storm of tests/faults covers the DLQ path end to end
@pytest.mark.deep
def test_poison_records_go_to_the_dlq_with_their_error_and_the_stream_goes_on(
    flow: Flow, tmp_path: Path
) -> None:
    config = flow_config(
        tmp_path,
        "flowpoison",
        definition="tests.spark.flow_def_poison",
        tuple_size=20,
        flow={"tuple_timeout_s": 1.0},
    )
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowpoison.eden": 2})
    data = lines(2_000, seed=21)
    poisoned = {137, 1000, 1555}
    broken = {420, 1777}
    sleepy = {888}
    for i in poisoned:
        data[i] = f"POISON pill number {i}"
    for i in broken:
        data[i] = f"BROKEN record number {i}"
    for i in sleepy:
        data[i] = f"SLEEPY record number {i}"
    kafka_log.produce(bootstrap, "flowpoison.eden", data)
    failing = poisoned | broken | sleepy
    good = [line for i, line in enumerate(data) if i not in failing]
    expected = dict(count_words(good))
    job = flow.submit(config, "flowpoison-blue-1", 2)
    wait_for(
        lambda: counted(flow, "flowpoison") == expected,
        timeout_s=180,
        job=job,
        what="every good record counted",
    )
    more = lines(500, seed=22)
    kafka_log.produce(bootstrap, "flowpoison.eden", more)
    expected = dict(count_words(good + more))
    wait_for(
        lambda: counted(flow, "flowpoison") == expected,
        timeout_s=120,
        job=job,
        what="the stream going on after the poison",
    )
    wait_for(
        lambda: len(read_topic(bootstrap, "flowpoison.dlq")) >= len(failing),
        timeout_s=60,
        job=job,
        what="the poison records in the DLQ",
    )
    latest = kafka_ends.latest_offsets(bootstrap, "flowpoison.eden")
    wait_for(
        lambda: flow.plane.committed_offsets("flowpoison", "flowpoison.eden") == latest,
        timeout_s=60,
        job=job,
        what="the durable checkpoint at the log's end",
    )
    wait_for(  # the window of the last dead letter must be closed and written too
        lambda: sum(w.dlq for w in flow.plane.metrics_windows("flowpoison-blue-1")) >= len(failing),
        timeout_s=30,
        job=job,
        what="metrics windows counting every dead letter",
    )
    flow.stop(job, "flowpoison-blue-1")
    dead = {
        e.payload.decode(): e for e in map(decode_envelope, read_topic(bootstrap, "flowpoison.dlq"))
    }
    assert sorted(dead) == sorted(data[i] for i in failing)
    for i in poisoned:  # straight to the DLQ: at most the one attempt of its own replay
        e = dead[data[i]]
        assert (
            e.error.startswith("poison: PoisonRecord") and f"offset {e.offset} is poison" in e.error
        )
        assert e.attempt <= 2
    for i in broken:  # replayed until max_attempts (3), then given up with the error
        e = dead[data[i]]
        assert e.attempt == 3, e
        assert e.error.startswith("gave up after 3 attempt(s): RuntimeError: cannot count"), e.error
    for i in sleepy:  # past its deadline every time: timed out, replayed, given up
        e = dead[data[i]]
        assert e.attempt == 3, e
        assert "TupleTimeout: process exceeded its deadline of 1 s" in e.error, e.error
    assert all(e.topic == "flowpoison.eden" for e in dead.values())

    assert counted(flow, "flowpoison") == expected
    windows = flow.plane.metrics_windows("flowpoison-blue-1")
    assert sum(w.dlq for w in windows) >= len(failing)
    assert sum(w.replayed for w in windows) > 0
    assert sum(w.failed for w in windows) >= len(poisoned | broken)
    assert sum(w.timed_out for w in windows) >= 3  # the sleepy record's three attempts
    assert "PoisonRecord" in job.log()


def test_a_slow_lane_ends_with_a_smaller_window_than_the_others(flow: Flow, tmp_path: Path) -> None:
    config = flow_config(
        tmp_path,
        "flowslow",
        definition="tests.spark.flow_def_slow",
        tuple_size=10,
        flow={"latency_target_s": 0.6, "w_init": 2, "w_max": 16, "metrics_window_s": 1.0},
    )
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowslow.eden": 3})
    data = lines(6_000, seed=31)
    kafka_log.produce(bootstrap, "flowslow.eden", data)
    expected = dict(count_words(data))
    job = flow.submit(config, "flowslow-blue-1", 4)
    wait_for(
        lambda: counted(flow, "flowslow") == expected,
        timeout_s=240,
        job=job,
        what="exact word counts",
    )
    wait_for(
        lambda: sum(w.records for w in flow.plane.metrics_windows("flowslow-blue-1")) >= 6_000,
        timeout_s=30,
        job=job,
        what="metrics windows counting every record",
    )
    flow.stop(job, "flowslow-blue-1")
    rows = [w for w in flow.plane.metrics_windows("flowslow-blue-1") if w.acked]
    windows = {lane["lane"]: lane["window"] for lane in rows[-1].lane_list}
    assert windows[0] < min(windows[1], windows[2]), windows
    assert windows[0] <= 3 and min(windows[1], windows[2]) >= 6, windows
    assert any(lane["state"] == "SLOW" for w in rows for lane in w.lane_list if lane["lane"] == 0)
    assert "SLOW" in job.log()


# deep: tests/faults/test_database_outage.py takes the same database away under a stream
@pytest.mark.deep
def test_a_database_away_for_20_s_backs_off_keeps_processing_into_the_mrwq(
    flowctl_settings: Settings, postgres_url: str, tmp_path: Path
) -> None:
    flow = Flow(flowctl_settings, postgres_url, tmp_path)
    config = flow_config(
        tmp_path, "flowdb", tuple_size=20, flow={"w_max": 6, "persist_queue_capacity": 40}
    )
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowdb.eden": 2})
    data = lines(2_000, seed=61)
    kafka_log.produce(bootstrap, "flowdb.eden", data)
    job = flow.submit(config, "flowdb-blue-1", 2)
    wait_for(
        lambda: counted(flow, "flowdb") == dict(count_words(data)),
        timeout_s=180,
        job=job,
        what="the first data counted",
    )
    url = sa.make_url(postgres_url)
    name = url.database
    assert name
    admin = sa.create_engine(url.set(database="postgres"), isolation_level="AUTOCOMMIT")
    away = f"{name}_away"
    more = lines(5_000, seed=62)
    try:
        rename_database(admin, name, away)
        kafka_log.produce(bootstrap, "flowdb.eden", more)
        peak = 0
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            peak = max(peak, mrwq_length(flow.settings, "flowdb"))
            assert job.process.poll() is None, job.log_tail()
            time.sleep(0.5)
    finally:
        rename_database(admin, away, name)
        admin.dispose()
    assert peak > 0, "nothing was processed into the MRWQ while the database was away"
    expected = dict(count_words(data + more))
    wait_for(
        lambda: counted(flow, "flowdb") == expected,
        timeout_s=180,
        job=job,
        what="exact counts after the database came back",
    )
    latest = kafka_ends.latest_offsets(bootstrap, "flowdb.eden")
    wait_for(
        lambda: flow.plane.committed_offsets("flowdb", "flowdb.eden") == latest,
        timeout_s=60,
        job=job,
        what="the durable checkpoint at the log's end",
    )
    flow.stop(job, "flowdb-blue-1")
    assert counted(flow, "flowdb") == expected
    log = job.log()
    assert re.search(r"MRWQ mrwq\.flowdb: flush \(poll\): attempt \d+ failed", log), job.log_tail()
    # the growing MRWQ (persist stage) pressed the process stage, and the release began
    process = [
        int(n) for n in re.findall(r"backpressure levels \{'source': \d+, 'process': (\d+)", log)
    ]
    assert process and max(process) > 0, process
    levels = [w.backpressure_level for w in flow.plane.metrics_windows("flowdb-blue-1")]
    peak = levels.index(max(levels))
    assert levels[peak] > 0 and min(levels[peak:]) < levels[peak], levels


def planner_windows_after(
    flow: Flow, tid: str, job: LocalJob, since: dt.datetime, *, backlog: int
) -> list[MetricsWindow]:
    """The topology's metrics windows begun after ``since``, once one of them shows
    records waiting, ``backlog`` at most. The planner closes a window only when a trigger
    calls it and reads the log's end then, so such a window proves that triggers ran after
    ``since`` and saw the records a non-admitting topology must leave alone. (A backlog
    above what the windows take is read without the last record batch of each partition:
    it may be short of ``backlog``.)"""

    def begun_after() -> list[MetricsWindow]:
        return [w for w in flow.plane.metrics_windows(tid, since=since) if w.window_start > since]

    wait_for(
        lambda: any(0 < w.backlog <= backlog for w in begun_after()),
        timeout_s=60,
        job=job,
        what=f"a metrics window after {since.isoformat()} with a backlog of {backlog}",
    )
    return begun_after()


# deep: the rescale e2e runs the same protocol through Airflow, rollback included
@pytest.mark.deep
def test_standby_activate_deactivate_drained_and_reactivate(flow: Flow, tmp_path: Path) -> None:
    """The states of docs/flow-control.md on one topology: a standby topology warms up
    (a batch that processes real records and stores nothing) before READY; READY admits
    nothing; activate processes; deactivate drains (nothing in flight, MRWQ flushed) to
    DRAINED and admits nothing; a second activate (a rollback) resumes exactly where the
    checkpoint is."""
    config = flow_config(tmp_path, "flowsig")
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowsig.eden": 2})
    data = lines(1_500, seed=71)
    kafka_log.produce(bootstrap, "flowsig.eden", data)
    tid = "flowsig-green-1"
    job = flow.submit(config, tid, 2, "--standby", "--colour", "green")
    wait_for(lambda: flow.state(tid) == "READY", timeout_s=120, job=job, what="READY")
    assert "warm-up, 100 record(s) read and processed on 2 lane(s)" in job.log()
    ready_at = dt.datetime.now(dt.UTC)
    # proof that triggers ran: a planner window begun after READY that saw the whole log
    idle = planner_windows_after(flow, tid, job, ready_at, backlog=len(data))
    assert [w.admitted for w in idle] == [0] * len(idle), idle
    assert counted(flow, "flowsig") == {}
    assert flow.plane.committed_offsets("flowsig", "flowsig.eden") == {}
    flow.plane.send_signal(tid, "activate")
    expected = dict(count_words(data))
    wait_for(lambda: counted(flow, "flowsig") == expected, timeout_s=120, job=job, what="counts")
    assert flow.state(tid) == "ACTIVE"
    flow.plane.send_signal(tid, "deactivate")
    wait_for(lambda: flow.state(tid) == "DRAINED", timeout_s=120, job=job, what="DRAINED")
    drained_at = kafka_ends.latest_offsets(bootstrap, "flowsig.eden")
    assert flow.plane.committed_offsets("flowsig", "flowsig.eden") == drained_at
    more = lines(500, seed=72)
    produced_at = dt.datetime.now(dt.UTC)
    kafka_log.produce(bootstrap, "flowsig.eden", more)
    # proof that triggers ran: a planner window begun after the produce that saw the new records
    idle = planner_windows_after(flow, tid, job, produced_at, backlog=len(more))
    assert [w.admitted for w in idle] == [0] * len(idle), idle
    assert counted(flow, "flowsig") == expected
    flow.plane.send_signal(tid, "activate")
    expected = dict(count_words(data + more))
    wait_for(
        lambda: counted(flow, "flowsig") == expected, timeout_s=120, job=job, what="reactivated"
    )
    flow.stop(job, tid)
    assert flow.plane.pending_signals(tid) == []
    log = job.log()
    for step in (
        "STARTING -> READY",
        "READY -> ACTIVE",
        "ACTIVE -> DRAINING",
        "DRAINING -> DRAINED",
        "DRAINED -> ACTIVE",
    ):
        assert step in log, step


# deep: the poison storm of tests/faults runs the same log-ETL pipeline end to end (rows equal
# to the reference, every malformed line in the DLQ once with its error, the checkpoint at
# the log's end) and reconciles it
@pytest.mark.deep
def test_logetl_rows_exact_and_malformed_lines_in_the_dlq(flow: Flow, tmp_path: Path) -> None:
    from flowctl.adapters.db import engine_for
    from flowctl.pipelines.logetl import DEFINITION, parse_line, synthetic_lines

    config = flow_config(tmp_path, "flowlog", shipped="logetl", partitions=2, tuple_size=25)
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowlog.eden": 2})
    data = list(synthetic_lines(2_000, seed=81))
    malformed = []
    for line in data:
        try:
            parse_line(line.encode())
        except Exception:
            malformed.append(line)
    assert malformed, "the generator should mix in malformed lines"
    kafka_log.produce(bootstrap, "flowlog.eden", data)
    expected = DEFINITION.reference(line.encode() for line in data)

    def stored() -> object:
        with engine_for(flow.database_url).connect() as conn:
            return DEFINITION.stored(conn, "flowlog")

    job = flow.submit(config, "flowlog-blue-1", 2)
    wait_for(lambda: stored() == expected, timeout_s=180, job=job, what="exact log_events")
    wait_for(
        lambda: len(read_topic(bootstrap, "flowlog.dlq")) >= len(malformed),
        timeout_s=60,
        job=job,
        what="malformed lines in the DLQ",
    )
    latest = kafka_ends.latest_offsets(bootstrap, "flowlog.eden")
    wait_for(
        lambda: flow.plane.committed_offsets("flowlog", "flowlog.eden") == latest,
        timeout_s=60,
        job=job,
        what="the durable checkpoint at the log's end",
    )
    flow.stop(job, "flowlog-blue-1")
    assert stored() == expected
    dead = [decode_envelope(v) for v in read_topic(bootstrap, "flowlog.dlq")]
    assert sorted(e.payload.decode() for e in dead) == sorted(malformed)
    assert all(e.error.startswith("poison: PoisonRecord") for e in dead)
