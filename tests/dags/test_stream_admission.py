"""A second stream run of a pipeline whose topology is ACTIVE is refused before Spark
starts: one clear failure, no retries, no driver started only to be refused."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from airflow.sdk.exceptions import AirflowFailException

from flowctl.adapters.control_plane import ControlPlane
from flowctl_airflow.operators.stream import FlowctlStreamOperator
from tests.dags.conftest import ACTIVE_BLUE

pytestmark = pytest.mark.integration


def test_a_second_stream_run_is_refused_naming_the_active_topology(flowctl_db: str) -> None:
    op = FlowctlStreamOperator(task_id="stream", pipeline="wordcount")
    context = {"run_id": "manual__second", "ti": SimpleNamespace(try_number=1)}
    with pytest.raises(AirflowFailException) as refused:
        op.submit_job(context)  # type: ignore[arg-type]
    message = str(refused.value)
    assert f"already has the ACTIVE topology {ACTIVE_BLUE!r}" in message
    assert "rescale_wordcount" in message  # what to do instead
    plane = ControlPlane(flowctl_db)
    assert [t.topology_id for t in plane.topologies("wordcount")] == [ACTIVE_BLUE]


@pytest.mark.parametrize(("asked", "given"), [("blue", "green"), ("green", "green")])
def test_a_warm_standby_takes_the_colour_the_active_topology_does_not_hold(
    flowctl_db: str, asked: str, given: str
) -> None:
    """The replacement that takes it then reads blue -> green, never blue -> blue."""
    op = FlowctlStreamOperator(task_id="stream", pipeline="wordcount", colour=asked, standby=True)
    assert op._free_colour(ControlPlane(flowctl_db)) == given
