"""A pipeline from ``flowctl pipeline new`` gets its DAGs from the DAG file as it is.

The scaffold writes into a tmp project root whose config directory is the pipelines
directory (``FLOWCTL_PIPELINES_DIR``); a real DagBag parses the real ``dags/pipelines.py``
and must find the new pipeline's five DAGs, no import error, and no invalid-config DAG.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flowctl.cli import main
from tests.scaffold_dirs import ScaffoldRoot, scaffold_root

__all__ = ["scaffold_root"]  # the fixture, imported for this module's tests

pytestmark = pytest.mark.airflow

DAG_FILE = Path(__file__).resolve().parents[2] / "dags" / "pipelines.py"
KINDS = ("ingest", "stream", "autoscale", "rescale", "reconcile")


def test_the_scaffolds_dags_import_in_a_dagbag(scaffold_root: ScaffoldRoot) -> None:
    from airflow.models import DagBag

    assert main(["pipeline", "new", "clicks", "--root", str(scaffold_root.root)]) == 0

    bag = DagBag(dag_folder=str(DAG_FILE))

    assert not bag.import_errors, bag.import_errors
    assert set(bag.dag_ids) == {f"{kind}_clicks" for kind in KINDS}
    stream = bag.get_dag("stream_clicks")
    assert stream is not None and "flowctl" in stream.tags
