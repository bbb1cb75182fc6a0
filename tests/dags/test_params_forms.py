"""The trigger forms read like forms: optional fields are optional, no "null" option, and a
request the form cannot refuse fails before any side effect, in the user's words.

The UI's rules (Airflow 3.3's flexible form): a field is required unless its ``type``
allows ``null``; a dropdown (``enum``) labels each value with ``values_display[str(value)]``
(``"null"`` for None) or shows the value itself.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from flowctl.pipelines.config import load_pipeline_config

pytestmark = pytest.mark.airflow


def _dags() -> dict[str, Any]:
    from flowctl_airflow.dag_factory import pipeline_dags

    return {dag.dag_id: dag for dag in pipeline_dags(load_pipeline_config("wordcount"))}


def _required_in_form(schema: dict[str, Any]) -> bool:
    kinds = schema.get("type")
    return bool(kinds) and "null" not in (kinds if isinstance(kinds, list) else [kinds])


@pytest.mark.parametrize("dag_id", ["ingest_wordcount", "stream_wordcount"])
def test_the_untouched_form_can_be_triggered(dag_id: str) -> None:
    params = copy.deepcopy(_dags()[dag_id].params)
    for name in params:
        param = params.get_param(name)
        if _required_in_form(param.schema):
            assert param.value not in (None, ""), f"{dag_id}: {name} is required but empty"
    assert params.validate()  # the defaults pass the schema


def test_no_form_shows_this_field_is_required_before_a_field_is_touched() -> None:
    """The UI marks a required field (:func:`_required_in_form`) whose value is null as
    "This field is required" as soon as the form opens, and keeps Trigger disabled: no
    field may be both. The rescale form's change and reason are null until chosen (the
    task names a missing one, with its allowed values)."""
    for dag_id, dag in _dags().items():
        for name in dag.params:
            param = dag.params.get_param(name)
            assert not (_required_in_form(param.schema) and param.value is None), (dag_id, name)
    rescale = copy.deepcopy(_dags()["rescale_wordcount"].params)
    assert rescale.validate() == {"change": None, "reason": None, "start_next_standby": True}
    labels = rescale.get_param("change").schema["values_display"]
    assert labels["null"] == "(choose: up, down or a number of lanes)"


def test_ingest_from_a_file_needs_only_the_file() -> None:
    params = copy.deepcopy(_dags()["ingest_wordcount"].params)
    params.update({"source": "file", "path": "/data/in.txt"})
    resolved = params.validate()
    assert (resolved["path"], resolved["skip_empty"]) == ("/data/in.txt", False)


def test_no_dropdown_shows_null_as_an_option() -> None:
    for dag_id, dag in _dags().items():
        for name in dag.params:
            schema = dag.params.get_param(name).schema
            if None in schema.get("enum", []):
                label = schema.get("values_display", {}).get("null", "null")
                assert label not in ("null", "None", ""), (dag_id, name, label)


def test_every_rescale_choice_has_a_label_and_reaches_the_ui() -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    served = DagSerialization.from_dict(DagSerialization.to_dict(_dags()["rescale_wordcount"]))
    param = served.params.get_param("change")
    labels = param.schema["values_display"]
    # the UI looks a value's label up by its text, "null" for None (the untouched field's)
    assert {"null" if v is None else str(v) for v in param.schema["enum"]} == set(labels)
    assert param.schema["title"] and param.description
    assert (labels["up"], labels["down"], labels["4"]) == ("up (double)", "down (halve)", "4 lanes")
    # One field: no two fields of the form can contradict each other.
    assert "direction" not in served.params and "target_parallelism" not in served.params


def test_both_fields_fail_before_any_side_effect_naming_both_as_the_form_held_them() -> None:
    from flowctl_airflow.operators.rescale import RescaleOperator, RescaleRequestError

    task = RescaleOperator(
        task_id="replace",
        pipeline="wordcount",
        direction="up",  # rendered from {{ params.direction or '' }}
        target_parallelism="8",  # rendered from {{ params.target_parallelism or '' }}
        reason="more lanes",
        flowctl_conn_id="no_such_connection",  # reaching the database would fail otherwise
    )
    with pytest.raises(RescaleRequestError) as info:
        task.execute(context={})  # type: ignore[arg-type]
    message = str(info.value)
    assert "direction='up'" in message and "target_parallelism=8" in message, message
    assert "'8'" not in message and "[1, 2, 4, 8, 16]" in message, message


@pytest.mark.parametrize(
    ("rendered", "message"),
    [
        ({"direction": "", "target_parallelism": "3"}, "target_parallelism=3 is not allowed"),
        ({"direction": "sideways", "target_parallelism": ""}, "direction='sideways'"),
        ({"direction": "", "target_parallelism": ""}, "change is missing: give up (double)"),
    ],
)
def test_a_request_the_form_cannot_refuse_names_field_value_and_allowed_values(
    rendered: dict[str, str], message: str
) -> None:
    from flowctl_airflow.operators.rescale import RescaleOperator, RescaleRequestError

    task = RescaleOperator(
        task_id="replace", pipeline="wordcount", reason="r",
        flowctl_conn_id="no_such_connection", **rendered,
    )  # fmt: skip
    with pytest.raises(RescaleRequestError, match=r"allowed|one of \[1, 2, 4, 8, 16\]") as info:
        task.execute(context={})  # type: ignore[arg-type]
    assert message in str(info.value)


def test_every_form_field_of_every_dag_has_a_title_and_a_description() -> None:
    for dag_id, dag in _dags().items():
        for name in dag.params:
            param = dag.params.get_param(name)
            assert param.schema.get("title"), (dag_id, name)
            assert param.description, (dag_id, name)


def test_the_ingest_form_and_operator_come_from_one_definition_and_pass_compression() -> None:
    """INGEST_PARAMS is the one spelling of the ingest parameters: the form's entries, the
    operator's templated fields, and a chosen codec reaching the request (an untouched
    form's null: the pipeline's topics.compression)."""
    from flowctl.ingest import INGEST_FIELDS, INGEST_PARAMS, IngestRequest

    dag = _dags()["ingest_wordcount"]
    assert list(dag.params) == list(INGEST_FIELDS)
    for p in INGEST_PARAMS:
        assert dag.params.get_param(p.name).value == p.default, p.name
    (task,) = dag.tasks
    assert tuple(task.template_fields) == ("pipeline", *INGEST_FIELDS)
    for form, wanted in ((None, None), ("zstd", "zstd")):
        params = copy.deepcopy(dag.params)
        params.update({"compression": form})
        resolved = params.validate()
        # what the operator's template renders: the value, or '' for a null
        rendered = {k: "" if v is None else str(v) for k, v in resolved.items()}
        request = IngestRequest.parse(pipeline="wordcount", **rendered)
        assert request.compression == wanted
    params = copy.deepcopy(dag.params)
    with pytest.raises(ValueError, match="'brotli' is not one of"):
        params.update({"compression": "brotli"})


def test_the_dags_triggered_by_hand_are_unpaused_at_creation_the_scheduled_ones_not() -> None:
    """A form's unpause once raced its trigger and left the run queued behind a paused DAG:
    the DAGs without a schedule are stored unpaused; autoscale and reconcile act on their
    schedule, so a person turns them on."""
    from airflow.serialization.serialized_objects import DagSerialization

    for dag_id, dag in _dags().items():
        served = DagSerialization.from_dict(DagSerialization.to_dict(dag))
        kind = dag_id.split("_", 1)[0]
        expected = kind not in ("ingest", "stream", "rescale")
        assert served.is_paused_upon_creation is expected, dag_id
