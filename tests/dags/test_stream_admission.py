"""A second stream run of a pipeline whose topology is ACTIVE is refused before Spark
starts: one clear failure, no retries, no driver started only to be refused."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

from flowctl.adapters.control_plane import ControlPlane
from flowctl_airflow.operators.stream import FlowctlStreamOperator

pytestmark = pytest.mark.integration


@pytest.fixture
def plane(sqlite_url: str, monkeypatch: pytest.MonkeyPatch) -> ControlPlane:
    conn = {"conn_type": "generic", "extra": {"sqlalchemy_url": sqlite_url}}
    monkeypatch.setenv("AIRFLOW_CONN_FLOWCTL_TEST_DB", json.dumps(conn))
    plane = ControlPlane(sqlite_url)
    plane.ensure_schema()
    plane.register_topology("wordcount-blue-1", "wordcount", "blue", 8)
    plane.set_state("wordcount-blue-1", "ACTIVE")
    return plane


def _submit(**kwargs: object) -> FlowctlStreamOperator:
    op = FlowctlStreamOperator(
        task_id="stream", pipeline="wordcount", flowctl_conn_id="flowctl_test_db", **kwargs
    )
    op.submit_job({"run_id": "manual__second", "ti": SimpleNamespace(try_number=1)})  # type: ignore[arg-type]
    return op


def test_a_second_stream_run_is_refused_naming_the_active_topology(plane: ControlPlane) -> None:
    with pytest.raises(AirflowFailException) as refused:
        _submit()
    message = str(refused.value)
    assert "already has the ACTIVE topology 'wordcount-blue-1'" in message
    assert "rescale_wordcount" in message  # what to do instead
    assert [t.topology_id for t in plane.topologies("wordcount")] == ["wordcount-blue-1"]
