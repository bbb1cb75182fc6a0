"""Executors on the workers import flowctl from the shipped zip, not the driver's checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.lib.submit import job_env, spark_submit
from flowctl.config import PROJECT_ROOT
from tests.cluster.conftest import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.integration]

PROBE = Path(__file__).with_name("ship_probe.py")


def test_executors_import_flowctl_from_the_shipped_zip(
    process_cluster: Cluster, tmp_path: Path
) -> None:
    layout = process_cluster.layout
    out = tmp_path / "where.json"
    env = job_env(
        layout.settings, process_cluster.url, {"SPARK_CONF_DIR": str(layout.spark_conf_dir)}
    )
    job = spark_submit(
        PROBE,
        [str(out)],
        env=env,
        log_path=tmp_path / "probe.log",
        topology_id="ship-probe",
        master=layout.spark_master_url,
    )
    assert job.wait(240) == 0, job.log_tail()
    rows = json.loads(out.read_text())
    worker_dirs = [str(layout.worker_dir(i)) for i in (1, 2)]
    for row in rows:
        # <worker work dir>/<app id>/<executor id>/flowctl.zip/flowctl/__init__.py
        assert "/flowctl.zip/flowctl/" in row["flowctl"], row
        assert any(row["flowctl"].startswith(d) for d in worker_dirs), row
        assert row["definition"].startswith(row["flowctl"].rsplit("/flowctl/", 1)[0]), row
        entries = row["pythonpath"].split(":")
        checkout = (str(PROJECT_ROOT), str(PROJECT_ROOT / "include"))
        assert not set(entries) & set(checkout), row  # pyspark's own zips from the venv only
    used = {d for d in worker_dirs for row in rows if row["flowctl"].startswith(d)}
    assert used == set(worker_dirs), f"executors ran on {used} only"
