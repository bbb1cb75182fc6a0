"""Every DAG file imports cleanly, and every DAG follows the house rules.

One test id per DAG file (a broken file is named in the failure), then rule
tests per DAG: tags, an owner, retries set on purpose, docs for the UI.
Parsing touches no service: no connections or variables are needed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.airflow

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
DAG_FILES = sorted(p for p in DAGS_DIR.glob("*.py") if not p.name.startswith("_"))


def _dagbag(path: Path):
    from airflow.models import DagBag

    return DagBag(dag_folder=str(path))


@pytest.fixture(scope="module")
def dags():
    bag = _dagbag(DAGS_DIR)
    assert not bag.import_errors, bag.import_errors
    return bag.dags


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.name)
def test_dag_file_imports_without_errors(path: Path) -> None:
    bag = _dagbag(path)
    assert not bag.import_errors, f"{path.name}: {bag.import_errors}"
    assert bag.dags, f"{path.name} defines no DAG"


def test_each_pipeline_has_its_dags(dags) -> None:
    from flowctl.pipelines.config import PIPELINES_DIR

    for config in sorted(PIPELINES_DIR.glob("*.toml")):
        for kind in ("ingest", "stream", "autoscale", "rescale", "reconcile"):
            assert f"{kind}_{config.stem}" in dags, f"{kind}_{config.stem} missing for {config}"


def test_every_dag_has_tags(dags) -> None:
    untagged = [dag_id for dag_id, dag in dags.items() if not dag.tags]
    assert not untagged, f"DAGs without tags: {untagged}"
    assert all("flowctl" in dag.tags for dag in dags.values())


def test_every_task_has_an_owner_and_explicit_retries(dags) -> None:
    """Retries are set in the factory's ``default_args`` (0: a failed replacement or
    reconcile is shown to the operator, not run again by itself); only the stream task
    overrides them: its retry reattaches to the topology a dead worker left running."""
    from flowctl_airflow.dag_factory import STREAM_TASK_RETRIES
    from flowctl_airflow.operators.stream import FlowctlStreamOperator

    for dag_id, dag in dags.items():
        assert dag.default_args.get("retries") == 0, f"{dag_id} default_args retries"
        for task in dag.tasks:
            assert task.owner and task.owner != "airflow", f"{dag_id}.{task.task_id} owner"
            stream = isinstance(task, FlowctlStreamOperator)
            wanted = STREAM_TASK_RETRIES if stream else dag.default_args["retries"]
            assert task.retries == wanted, f"{dag_id}.{task.task_id} retries"
            if stream:
                assert task.retries >= 1 and task.durable, f"{dag_id}.{task.task_id}"


def test_every_dag_is_documented(dags) -> None:
    undocumented = [dag_id for dag_id, dag in dags.items() if not dag.doc_md]
    assert not undocumented, f"DAGs without doc_md: {undocumented}"


def test_stream_dag_offers_only_allowed_parallelisms(dags) -> None:
    dag = dags["stream_wordcount"]
    allowed = dag.params.get_param("parallelism").schema["enum"]
    assert allowed and all(p & (p - 1) == 0 for p in allowed)
