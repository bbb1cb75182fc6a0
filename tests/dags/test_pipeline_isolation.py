"""One broken pipeline config costs only its own DAGs, and says why in the DAG list.

A real DagBag parses the real DAG file against a directory holding a good config and
broken ones (a wrong type, an unknown key): the good pipeline keeps its five DAGs, each
broken one becomes an ``invalid_pipeline_<file>`` DAG naming the file, the field and
the value, and the file itself has no import error.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.pipelines.config import PIPELINES_DIR

pytestmark = pytest.mark.airflow

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "pipelines.py"
KINDS = ("ingest", "stream", "autoscale", "rescale", "reconcile")


def _copy(directory: Path, name: str, *edits: tuple[str, str]) -> Path:
    text = (PIPELINES_DIR / "wordcount.toml").read_text()
    text = text.replace('name = "wordcount"', f'name = "{name}"')
    text = text.replace('eden = "wordcount.eden"', f'eden = "{name}.eden"')
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def test_a_broken_config_leaves_every_other_pipeline_and_names_file_field_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.models import DagBag

    _copy(tmp_path, "good")
    wrong_type = _copy(tmp_path, "wrongtype", ("\nparallelism = 2\n", '\nparallelism = "two"\n'))
    unknown = _copy(tmp_path, "unknownkey", ("\nparallelism = 2\n", "\nparalelism = 2\n"))
    monkeypatch.setenv("FLOWCTL_PIPELINES_DIR", str(tmp_path))

    bag = DagBag(dag_folder=str(DAG_FILE))

    assert not bag.import_errors, bag.import_errors
    assert {f"{kind}_good" for kind in KINDS} <= set(bag.dag_ids)
    for name in ("wrongtype", "unknownkey"):
        assert not [d for d in bag.dag_ids if d.endswith(f"_{name}") and "invalid" not in d]
    shown = {
        "invalid_pipeline_wrongtype": (wrong_type, "stream.parallelism", "'two'"),
        "invalid_pipeline_unknownkey": (unknown, "stream.paralelism", "2"),
    }
    for dag_id, (path, field, value) in shown.items():
        dag = bag.get_dag(dag_id)
        assert dag is not None, sorted(bag.dag_ids)
        for text in (dag.description, dag.doc_md, dag.get_task("report").message):
            assert str(path) in text and f"{field}={value}" in text, text
        assert "flowctl" in dag.tags and "invalid-config" in dag.tags


def test_the_invalid_config_dag_fails_with_the_message(tmp_path: Path) -> None:
    from airflow.sdk.exceptions import AirflowFailException

    from flowctl_airflow.dag_factory import all_pipeline_dags

    path = _copy(tmp_path, "bad", ("\nparallelism = 2\n", "\nparallelism = 0\n"))
    (dag,) = all_pipeline_dags(tmp_path)
    with pytest.raises(AirflowFailException, match=r"stream\.parallelism=0 must be an integer"):
        dag.get_task("report").execute(context={})
    assert str(path) in dag.description
