"""FailureRateWindowSensor inside Airflow: the real ``autoscale_wordcount`` DAG.

The decision rules are checked without Airflow (tests/unit/test_window_evaluation.py,
tests/unit/test_scaling_policy.py); here the sensor runs with ``dag.test()``, poking and
deferred: a decision ends it with the decision as XCom, no decision skips it.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from flowctl.pipelines.config import load_pipeline_config
from tests.unit.test_window_evaluation import _topology

pytestmark = pytest.mark.integration


# -- the sensor inside Airflow --------------------------------------------------------------


def _autoscale_dag(deferrable: bool):
    """The real autoscale DAG with a short sensor timeout (the schedule's 50 s is too long)."""
    from flowctl_airflow.dag_factory import autoscale_dag

    config = load_pipeline_config("wordcount")
    short = dataclasses.replace(
        config.scaling, poke_interval_s=0.5, sensor_timeout_s=3.0, history_windows=4,
        threshold_c=1.0,
    )  # fmt: skip
    dag = autoscale_dag(dataclasses.replace(config, scaling=short))
    dag.get_task("decide").deferrable = deferrable
    return dag


def _xcom(run, task_id: str, key: str = "return_value") -> Any:
    import sqlalchemy as sa
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        row = session.scalars(
            sa.select(XComModel).where(
                XComModel.run_id == run.run_id,
                XComModel.task_id == task_id,
                XComModel.key == key,
            )
        ).first()
        return None if row is None else XComModel.deserialize_value(row)


@pytest.fixture
def flowctl_db(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    conn = {"conn_type": "generic", "extra": {"sqlalchemy_url": sqlite_url}}
    monkeypatch.setenv("AIRFLOW_CONN_FLOWCTL_DB", json.dumps(conn))
    return sqlite_url


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferred"])
def test_sensor_succeeds_with_the_decision_as_xcom(flowctl_db: str, deferrable: bool) -> None:
    tid = _topology(flowctl_db, [0, 0, 0, 9])
    run = _autoscale_dag(deferrable).test(mark_success_pattern="replace")
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states["decide"].endswith("success"), states
    decision = _xcom(run, "decide")
    assert decision["direction"] == "up" and decision["new_parallelism"] == 4
    assert decision["policy"] == "paper" and decision["s2"] > decision["threshold_c"]
    assert _xcom(run, "decide", "topology_id") == tid


@pytest.mark.airflow
@pytest.mark.parametrize("deferrable", [False, True], ids=["poke", "deferred"])
def test_sensor_skips_the_run_when_nothing_is_decided(flowctl_db: str, deferrable: bool) -> None:
    _topology(flowctl_db, [2, 2, 2, 2])
    run = _autoscale_dag(deferrable).test()
    states = {ti.task_id: str(ti.state) for ti in run.get_task_instances()}
    assert states["decide"].endswith("skipped"), states
    assert states["replace"].endswith("skipped"), states
