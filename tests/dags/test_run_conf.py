"""Refuse what is not understood (issue 47, item 8): a conf key a DAG does not read fails
the run at once, naming the key and listing the accepted ones; the rescale DAG's old keys
are answered with ``change``; a valid conf passes.

The first task of every generated DAG is executed with a context holding the real DAG and
task and a DAG run's conf, as Airflow's task runner gives it: none of these tasks has its
connections here, so any work begun before the check would fail otherwise. Two runs go
through ``dag.test()`` as a whole: refused on the first try, no retry, nothing started.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException

from flowctl.pipelines.config import load_pipeline_config
from flowctl_airflow.run_conf import (
    accepted_values,
    conf_problem,
    refuse_unknown_conf,
)

pytestmark = pytest.mark.airflow

#: Each DAG kind, the task that runs first, and a conf its Params accept.
FIRST_TASKS = {
    "ingest_wordcount": ("produce", {"source": "synthetic", "lines": 10}),
    "stream_wordcount": ("topology", {"parallelism": 2, "colour": "blue"}),
    "autoscale_wordcount": ("decide", {"start_next_standby": False}),
    "rescale_wordcount": ("replace", {"change": "up", "reason": "load"}),
    "reconcile_wordcount": ("reconcile", {"max_differences": 5}),
}
OLD_KEYS_ANSWER = (
    "rescale_wordcount conf: `direction` and `target_parallelism` are no longer read: give "
    "`change` (up, down, or one of [1, 2, 4, 8, 16]); accepted keys: change, reason, "
    "start_next_standby"
)


def _dags() -> dict[str, Any]:
    from flowctl_airflow.dag_factory import pipeline_dags

    return {dag.dag_id: dag for dag in pipeline_dags(load_pipeline_config("wordcount"))}


def _context(dag: Any, task_id: str, conf: dict[str, Any] | None) -> Any:
    """What the task runner passes ``execute``, as far as the check reads it."""
    return {"dag": dag, "task": dag.get_task(task_id), "dag_run": SimpleNamespace(conf=conf)}


def test_every_dag_kind_is_covered() -> None:
    dags = _dags()
    assert set(FIRST_TASKS) == set(dags)
    for dag_id, (task_id, _) in FIRST_TASKS.items():
        assert not dags[dag_id].get_task(task_id).upstream_task_ids, (dag_id, task_id)


@pytest.mark.parametrize("dag_id", sorted(FIRST_TASKS))
def test_an_unknown_key_fails_the_first_task_naming_it_and_the_accepted_keys(
    dag_id: str,
) -> None:
    dag = _dags()[dag_id]
    task_id, good = FIRST_TASKS[dag_id]
    task = dag.get_task(task_id)
    with pytest.raises(AirflowFailException) as refused:
        task.execute(_context(dag, task_id, {**good, "paralelism": 4}))
    message = str(refused.value)
    assert "\n" not in message
    assert message.startswith(f"{dag_id} conf: unknown key `paralelism`; accepted keys: ")
    assert message.endswith(", ".join(dag.params)), message


@pytest.mark.parametrize("dag_id", sorted(FIRST_TASKS))
def test_a_valid_conf_passes_the_check(dag_id: str) -> None:
    dag = _dags()[dag_id]
    task_id, good = FIRST_TASKS[dag_id]
    assert set(good) <= set(dag.params)
    for conf in (good, {}, None):
        refuse_unknown_conf(_context(dag, task_id, conf))  # type: ignore[arg-type]


def test_the_old_rescale_keys_are_answered_with_change() -> None:
    dag = _dags()["rescale_wordcount"]
    task = dag.get_task("replace")
    conf = {"direction": "up", "target_parallelism": 8, "reason": "old form"}
    with pytest.raises(AirflowFailException) as refused:
        task.execute(_context(dag, "replace", conf))
    assert str(refused.value) == OLD_KEYS_ANSWER
    with pytest.raises(AirflowFailException) as refused:
        task.execute(_context(dag, "replace", {"direction": "up", "colour": "x"}))
    assert str(refused.value).startswith(
        "rescale_wordcount conf: `direction` is no longer read: give `change` (up, down, "
        "or one of [1, 2, 4, 8, 16]); unknown key `colour`; accepted keys: "
    )


def test_an_operator_outside_a_run_has_no_conf_to_check() -> None:
    refuse_unknown_conf({})  # type: ignore[typeddict-item]
    refuse_unknown_conf({"dag_run": SimpleNamespace(conf={"x": 1})})  # type: ignore[typeddict-item]


def test_the_message_names_many_keys_on_one_line_and_counts_the_rest() -> None:
    conf = {f"k{i}": i for i in range(13)} | {"bad\nkey": 1, "a": 1}
    message = conf_problem("d", conf, {"a": {}, "b": {}})
    assert message is not None and "\n" not in message
    assert message.startswith("d conf: unknown keys `k0`, `k1`, ")
    assert "`k9` and 4 more; accepted keys: a, b" in message
    assert conf_problem("d", {"a": 1}, {"a": {}}) is None
    assert conf_problem("d", {"x": 1}, {}) == (
        "d conf: unknown key `x`; accepted keys: none (this DAG takes no conf)"
    )


@pytest.mark.parametrize(
    ("enum", "words"),
    [
        ([None, "up", "down", 2, 4], "up, down, or one of [2, 4]"),
        (["blue", "green"], "one of: blue, green"),
        ([1, 2], "one of [1, 2]"),
        (None, ""),
    ],
)
def test_accepted_values_come_from_the_params_enum(enum: list | None, words: str) -> None:
    assert accepted_values({} if enum is None else {"enum": enum}) == words


# -- whole runs: refused on the first try, before anything starts ----------------------------


def _task_instances(run: Any) -> dict[str, Any]:
    return {ti.task_id: ti for ti in run.get_task_instances()}


@pytest.mark.integration
def test_a_stream_run_with_an_unknown_key_fails_at_once_without_retry(
    flowctl_db: str, capfd: pytest.CaptureFixture[str]
) -> None:
    from flowctl.adapters.control_plane import ControlPlane

    run = _dags()["stream_wordcount"].test(run_conf={"parallelism": 4, "paralelism": 8})
    assert str(run.state).endswith("failed")
    assert (  # dag.test() writes the task's log to stdout
        "AirflowFailException: stream_wordcount conf: unknown key `paralelism`; accepted keys: "
        "parallelism, colour, standby, replaces, topology_id\n"
    ) in capfd.readouterr().out
    ti = _task_instances(run)["topology"]
    assert str(ti.state).endswith("failed") and ti.try_number == 1  # retries=3 not used
    plane = ControlPlane(flowctl_db)
    assert [t.topology_id for t in plane.topologies("wordcount")] == ["wc-blue-1"]


@pytest.mark.integration
def test_a_rescale_run_with_the_old_keys_is_created_and_refused(
    flowctl_db: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """Airflow used to refuse it at trigger ("param change: No value passed"), which said
    nothing of the new field: now the run exists and its task answers with ``change``."""
    from flowctl.adapters.replacements import ReplacementLog

    conf = {"direction": "up", "target_parallelism": 8, "reason": "old form"}
    run = _dags()["rescale_wordcount"].test(run_conf=conf)
    assert str(run.state).endswith("failed")
    assert str(_task_instances(run)["replace"].state).endswith("failed")
    assert f"AirflowFailException: {OLD_KEYS_ANSWER}\n" in capfd.readouterr().out
    assert ReplacementLog(flowctl_db).replacements("wordcount") == []
