"""A topology whose micro-batches outlast the heartbeat's liveness limit (5 s).

One run covers: the heartbeat keeps the topology live while batches take longer than the
limit, a stop that arrives mid-batch is seen and the topology stays live until STOPPED
(the stop waits for the batch), the results are exact for what is durable, the applied
rows below the checkpoint are one merged row, and the clean stop deletes the Spark
checkpoint.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from flowctl.adapters import kafka_log
from flowctl.adapters.applied import applied_rows
from flowctl.adapters.control_plane import TERMINAL_STATES
from flowctl.pipelines.wordcount import count_words
from tests.spark.flow_definitions import SLEEPY_TUPLE_S
from tests.spark.flow_harness import Flow, counted, flow_config, lines, wait_for

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.integration]

TUPLES_PER_BATCH = 3


def test_a_topology_stays_live_through_long_batches_and_stops_mid_batch(
    flow: Flow, tmp_path: Path
) -> None:
    assert TUPLES_PER_BATCH * SLEEPY_TUPLE_S > 5.0  # each batch outlasts LIVE_HEARTBEAT_S
    config = flow_config(
        tmp_path,
        "flowlive",
        definition="tests.spark.flow_def_sleepy",
        partitions=1,
        tuple_size=20,
        flow={
            "w_init": TUPLES_PER_BATCH,
            "w_max": TUPLES_PER_BATCH,
            "latency_target_s": 60.0,
            "lane_budget": 0,
            "tuple_timeout_s": 60.0,
            "coalesce_every_s": 0,
        },
    )
    bootstrap = flow.settings.kafka_bootstrap
    kafka_log.ensure_topics(bootstrap, {"flowlive.eden": 1})
    data = lines(400, seed=91)  # 20 tuples: about 7 batches of 9 s
    kafka_log.produce(bootstrap, "flowlive.eden", data)
    tid = "flowlive-blue-1"
    job = flow.submit(config, tid, 1)

    def live() -> bool:
        return tid in {t.topology_id for t in flow.plane.live_topologies()}

    wait_for(lambda: counted(flow, "flowlive") != {}, timeout_s=180, job=job, what="a batch")
    # Live through a whole batch (batches run back to back on the backlog).
    first = counted(flow, "flowlive")
    samples = 0
    while counted(flow, "flowlive") == first or samples < 4:
        assert live(), f"not live {samples} samples into a batch; log:\n{job.log_tail()}"
        samples += 1
        assert samples < 120, "no batch ended within 60 s"
        time.sleep(0.5)
        assert job.alive(), job.log_tail()
    # The next batch has just begun: stop it in its middle and stay live until STOPPED.
    flow.plane.send_signal(tid, "stop")
    while flow.state(tid) not in TERMINAL_STATES:
        assert live(), f"not live while stopping; log:\n{job.log_tail()}"
        assert job.alive(), job.log_tail()
        time.sleep(0.5)
    assert job.wait(timeout_s=120) == 0, job.log_tail()
    assert flow.state(tid) == "STOPPED"
    assert not live()

    rows = applied_rows(flow.database_url, "flowlive")
    applied = [r for r, outcome in rows if outcome == "applied"]
    assert [o for _, o in rows] == ["applied"] * len(rows)
    durable = flow.plane.committed_offsets("flowlive", "flowlive.eden")[0]
    assert 0 < durable < len(data)  # stopped part way
    assert (applied[0].start, applied[0].end) == (0, durable)  # one row below the checkpoint
    offsets = sorted(o for r in applied for o in range(r.start, r.end))
    assert counted(flow, "flowlive") == dict(count_words(data[o] for o in offsets))
    assert not (flow.settings.home / "checkpoints" / tid).exists()
    assert "deleted the Spark checkpoint" in job.log()
