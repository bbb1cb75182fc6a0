"""The rescale DAG: bad requests are rejected with the field and the allowed values, by the
Params schema and by the operator itself (a missing change or reason, and the old form's
keys, reach the operator, which names what to give); one replacement per pipeline at a
time; a green that never gets READY is rolled back and recorded.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from flowctl.adapters.control_plane import ControlPlane
from flowctl.adapters.replacements import ReplacementLog
from flowctl.pipelines.config import load_pipeline_config
from flowctl_airflow.operators.blue_green import (
    BlueGreenReplaceOperator,
    ReplacementRefused,
    validate_parallelism,
)
from flowctl_airflow.operators.rescale import (
    RescaleOperator,
    RescaleRequestError,
    resolve_rescale,
)

pytestmark = pytest.mark.airflow

ALLOWED = "[1, 2, 4, 8, 16]"


def _rescale_dag(**scaling):
    from flowctl_airflow.dag_factory import rescale_dag

    config = load_pipeline_config("wordcount")
    return rescale_dag(
        dataclasses.replace(config, scaling=dataclasses.replace(config.scaling, **scaling))
    )


@pytest.fixture(autouse=True)
def _fail_green_runs_left_queued() -> Iterator[None]:
    """A green's DAG run that no scheduler ran stays queued: mark it failed afterwards.

    Otherwise a later test that does run queued stream runs would start these greens.
    """
    yield
    import sqlalchemy as sa
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session
    from airflow.utils.state import DagRunState

    with create_session() as session:
        session.execute(
            sa.update(DagRun)
            .where(DagRun.dag_id == "stream_wordcount", DagRun.state == DagRunState.QUEUED)
            .values(state=DagRunState.FAILED)
        )


# -- the Params form ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("conf", "field", "allowed"),
    [
        ({"change": "sideways", "reason": "r"}, "change", "[None, 'up', 'down', 1, 2, 4, 8, 16]"),
        ({"change": 3, "reason": "r"}, "change", "[None, 'up', 'down', 1, 2, 4, 8, 16]"),
        ({"change": 32, "reason": "r"}, "change", "16]"),
        ({"change": "8", "reason": "r"}, "change", "16]"),  # a number, not its text
        ({"change": "up", "reason": ""}, "reason", "should be non-empty"),
    ],
)
def test_the_params_schema_rejects_bad_input_naming_the_field(
    conf: dict, field: str, allowed: str
) -> None:
    from airflow.sdk.exceptions import ParamValidationError

    params = copy.deepcopy(_rescale_dag().params)
    with pytest.raises(ParamValidationError) as info:
        params.update(conf)
        params.validate()
    assert f"param {field}" in str(info.value)
    assert allowed in str(info.value)


def _rendered(dag, conf: dict) -> dict[str, str]:
    """What the replace task's templates render from ``conf`` (after the schema's check)."""
    params = copy.deepcopy(dag.params)
    params.update(conf)
    resolved = params.validate()  # what Airflow does when the run is triggered
    return {k: "" if resolved[k] is None else str(resolved[k]) for k in ("change", "reason")}


def test_a_missing_reason_passes_the_schema_and_the_operator_asks_for_it() -> None:
    """Null by default, so the untouched form shows no error; the task says what is missing."""
    rendered = _rendered(_rescale_dag(), {"change": "up"})
    op = RescaleOperator(
        task_id="replace", pipeline="wordcount", flowctl_conn_id="no_such_connection", **rendered
    )
    with pytest.raises(RescaleRequestError, match="reason='': a non-empty text saying why"):
        op.execute({})  # type: ignore[arg-type]


def test_a_missing_change_passes_the_schema_and_the_operator_names_it_and_its_values() -> None:
    rendered = _rendered(_rescale_dag(), {"reason": "r"})
    assert rendered["change"] == ""
    op = RescaleOperator(
        task_id="replace", pipeline="wordcount", flowctl_conn_id="no_such_connection", **rendered
    )
    with pytest.raises(RescaleRequestError) as info:
        op.execute({})  # type: ignore[arg-type]
    assert str(info.value) == (
        f"change is missing: give up (double), down (halve) or a number of lanes, one of {ALLOWED}"
    )


def test_the_old_forms_keys_pass_the_schema_and_are_answered_with_change() -> None:
    """Airflow refused them at trigger ("param change: No value passed"), which named no way
    forward: the run is created and its task names the field that replaced them."""
    from airflow.sdk.exceptions import AirflowFailException

    dag = _rescale_dag()
    conf = {"direction": "up", "target_parallelism": 8, "reason": "r"}
    params = copy.deepcopy(dag.params)
    params.update(conf)
    assert params.validate()["change"] is None
    context = {"dag": dag, "task": dag.get_task("replace"), "dag_run": SimpleNamespace(conf=conf)}
    with pytest.raises(AirflowFailException) as info:
        dag.get_task("replace").execute(context)
    assert str(info.value).startswith(
        "rescale_wordcount conf: `direction` and `target_parallelism` are no longer read: "
        f"give `change` (up, down, or one of {ALLOWED}); accepted keys: change, reason"
    )


def test_a_good_request_passes_the_schema() -> None:
    params = copy.deepcopy(_rescale_dag().params)
    params.update({"change": 8, "reason": "load test"})
    assert params.validate()["change"] == 8
    params.update({"change": "down", "reason": "load test over"})
    assert params.validate()["change"] == "down"


@pytest.mark.parametrize(
    ("rendered", "expected"),
    [("up", ("up", None)), ("down", ("down", None)), ("8", (None, 8)), (4, (None, 4))],
)
def test_change_is_a_direction_or_a_target(rendered: object, expected: tuple) -> None:
    from flowctl_airflow.operators.rescale import split_change

    assert split_change(rendered) == expected


@pytest.mark.parametrize("rendered", ["sideways", "", "None", "4.0", True])
def test_a_change_that_is_neither_is_refused_naming_it(rendered: object) -> None:
    from flowctl_airflow.operators.rescale import split_change

    with pytest.raises(RescaleRequestError, match=f"change={rendered!r} is not allowed"):
        split_change(rendered)


def test_change_beside_direction_or_target_is_refused_before_any_side_effect() -> None:
    op = RescaleOperator(
        task_id="replace", pipeline="wordcount", change="up", target_parallelism="8",
        reason="r", flowctl_conn_id="no_such_connection",
    )  # fmt: skip
    with pytest.raises(RescaleRequestError, match="give change='up' alone"):
        op.execute({})  # type: ignore[arg-type]


# -- the operator's own validation ----------------------------------------------------------


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (
            {"direction": "sideways"},
            "direction='sideways' is not allowed; allowed values: up, down",
        ),
        ({"target_parallelism": "3"}, "target_parallelism=3 is not allowed"),
        ({"target_parallelism": "four"}, "target_parallelism='four' is not an integer"),
        ({"direction": "up", "target_parallelism": 4}, "give exactly one of direction"),
        ({}, "give exactly one of direction"),
        ({"direction": "up", "reason": "  "}, "reason='  ': a non-empty text"),
        ({"direction": "up", "reason": None}, "reason=None"),
    ],
)
def test_the_operator_rejects_bad_requests_naming_the_field(request_: dict, message: str) -> None:
    kwargs = {"direction": None, "target_parallelism": None, "reason": "why", **request_}
    with pytest.raises(RescaleRequestError) as info:
        resolve_rescale(**kwargs, current=2, min_parallelism=1, max_parallelism=16)
    assert message in str(info.value)
    if "target_parallelism" in message and "integer" not in message:
        assert ALLOWED in str(info.value)


def test_direction_at_a_bound_names_the_bound() -> None:
    with pytest.raises(RescaleRequestError, match="max_parallelism=16"):
        resolve_rescale(
            direction="up", target_parallelism=None, reason="r", current=16,
            min_parallelism=1, max_parallelism=16,
        )  # fmt: skip
    with pytest.raises(RescaleRequestError, match="min_parallelism=1"):
        resolve_rescale(
            direction="down", target_parallelism="", reason="r", current=1,
            min_parallelism=1, max_parallelism=16,
        )  # fmt: skip


def test_a_target_equal_to_the_current_parallelism_is_refused() -> None:
    with pytest.raises(RescaleRequestError, match="current parallelism: nothing to do"):
        resolve_rescale(
            direction=None, target_parallelism=2, reason="r", current=2,
            min_parallelism=1, max_parallelism=16,
        )  # fmt: skip


def test_good_requests_resolve() -> None:
    bounds = {"min_parallelism": 1, "max_parallelism": 16}
    up = resolve_rescale(direction="up", target_parallelism="", reason=" r ", current=2, **bounds)
    down = resolve_rescale(
        direction="down", target_parallelism=None, reason="r", current=8, **bounds
    )
    target = resolve_rescale(direction="", target_parallelism="8", reason="r", current=2, **bounds)
    assert (up, down, target) == ((4, "r"), (4, "r"), (8, "r"))


def test_validate_parallelism_lists_the_allowed_values() -> None:
    assert validate_parallelism("p", "4", 2, 8) == 4
    with pytest.raises(ValueError, match=r"p=16 is not allowed.*\[2, 4, 8\]"):
        validate_parallelism("p", 16, 2, 8)


# -- against the real control plane ---------------------------------------------------------


def test_a_second_replacement_while_one_runs_is_refused(flowctl_db: str) -> None:
    events = ReplacementLog(flowctl_db)
    first = events.record_replacement(
        "wordcount", "wc-blue-1", "wc-green-2", 2, 4, "load",
        started_at=dt.datetime.now(dt.UTC), outcome="running",
    )  # fmt: skip
    op = RescaleOperator(task_id="replace", pipeline="wordcount", direction="up", reason="again")
    with pytest.raises(ReplacementRefused) as info:
        op.execute({})  # type: ignore[arg-type]
    message = str(info.value)
    assert f"already running (event {first}" in message
    assert "wc-blue-1 -> wc-green-2" in message and "one replacement at a time" in message
    assert [(e.id, e.outcome) for e in events.replacements("wordcount")] == [(first, "running")]
    assert ControlPlane(flowctl_db).pending_signals("wc-blue-1") == []


def test_a_stale_decision_is_refused(flowctl_db: str) -> None:
    from flowctl.core.scaling import paper_decision

    decision = paper_decision([0, 0, 0, 9], 4, 1.0).to_dict()  # taken at 4 lanes, blue runs 2
    op = BlueGreenReplaceOperator(task_id="replace", pipeline="wordcount", decision=decision)
    with pytest.raises(ReplacementRefused, match="stale decision: it was taken at parallelism 4"):
        op.execute({})  # type: ignore[arg-type]
    assert ReplacementLog(flowctl_db).replacements("wordcount") == []


def test_a_green_that_never_gets_ready_is_rolled_back_and_recorded(flowctl_db: str) -> None:
    """The whole rescale DAG runs; green's DAG run is created but nothing executes it."""
    import sqlalchemy as sa
    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    run = _rescale_dag(ready_timeout_s=2.0).test(run_conf={"change": 8, "reason": "capacity test"})
    assert str(run.state).endswith("failed")
    (event,) = ReplacementLog(flowctl_db).replacements("wordcount")
    assert event.outcome == "rolled_back"
    assert (event.old_topology_id, event.old_parallelism, event.new_parallelism) == (
        "wc-blue-1", 2, 8,
    )  # fmt: skip
    assert "not READY within ready_timeout_s=2" in event.error
    assert event.reason == "capacity test" and event.finished_at is not None
    assert event.deactivated_at is None  # blue was never touched
    plane = ControlPlane(flowctl_db)
    assert plane.get_topology("wc-blue-1").state == "ACTIVE"
    assert plane.signals("wc-blue-1") == []
    with create_session() as session:
        green = session.scalars(
            sa.select(DagRun).where(DagRun.run_id == f"replace__{event.new_topology_id}")
        ).one()
        assert green.dag_id == "stream_wordcount"
        assert green.conf == {
            "parallelism": 8,
            "colour": "green",
            "standby": True,
            "replaces": "wc-blue-1",
            "topology_id": event.new_topology_id,
        }
