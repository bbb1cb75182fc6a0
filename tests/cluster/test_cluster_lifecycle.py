"""``flowctl cluster``: every process up and healthy, and ``up`` again changes nothing."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest

from flowctl.services import cluster
from tests.cluster.conftest import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.integration]


def test_every_process_is_up_and_up_again_is_a_no_op(process_cluster: Cluster) -> None:
    layout = process_cluster.layout
    rows = {r.name: r for r in cluster.status(layout)}
    expected = {
        "db", "memcached", "redis", "spark-master", "spark-worker-1",
        "spark-worker-2", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer",
        "airflow-api-server", "airflow-worker-1", "airflow-worker-2",
    }  # fmt: skip
    if layout.broker == "kafka":
        expected |= {"kafka-1", "kafka-2", "kafka-3"}  # the quorum of three
        assert "tansu" not in rows and "s3" not in rows
    else:
        expected.add("tansu")
        if layout.tansu_storage == "s3":
            expected.add("s3")  # Tansu's store: moto, or the external S3 of AWS_ENDPOINT
    assert expected <= set(rows), sorted(rows)
    bad = {name: (r.state, r.detail) for name, r in rows.items() if not r.ok}
    assert not bad, bad
    pids = {name: r.pid for name, r in rows.items()}
    messages = cluster.up(layout)
    assert {r.name: r.pid for r in cluster.status(layout)} == pids
    assert any("already up" in m for m in messages), messages
    assert messages[-1] == cluster.log_durability(layout)  # where the log lives, said last

    url = f"http://127.0.0.1:{layout.spark_master_ui_port}/json/"
    with urllib.request.urlopen(url, timeout=10) as response:
        master = json.loads(response.read())
    alive = [w for w in master["workers"] if w["state"] == "ALIVE"]
    assert len(alive) == 2, master["workers"]
    assert {w["cores"] for w in alive} == {layout.worker_cores}
    print(f"cluster processes: {_rss_mb(pids.values()):.0f} MB resident, idle")


def _rss_mb(pids) -> float:  # type: ignore[no-untyped-def]
    """Resident memory of the processes and their descendants (the report's figure)."""
    from flowctl.services.process import process_tree

    total = 0
    for pid in {p for root in pids if root for p in process_tree(root)}:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += next(
            (int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS")), 0
        )
    return total / 1024
