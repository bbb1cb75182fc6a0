"""Build every DAG of a pipeline from its config file (``include/pipelines/<name>.toml``).

A new pipeline is one config file (plus its definition module): the DAG file
``dags/pipelines.py`` calls :func:`all_pipeline_dags`, which builds, per
pipeline:

- ``ingest_<name>``: load demo text (seeded Zipf) or a file into ``<name>.eden``;
- ``stream_<name>``: the long-running topology (no schedule; Params
  ``parallelism`` and ``colour``). Two runs may be active at once: blue and
  green during a replacement.

DAG construction is cheap: no connection, broker or database is touched at
parse time.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from airflow.sdk import DAG, Param

from flowctl_airflow.operators.ingest import SOURCES, IngestOperator
from flowctl_airflow.operators.stream import COLOURS, FlowctlStreamOperator

if TYPE_CHECKING:
    from flowctl.pipelines.config import PipelineConfig

START = datetime(2026, 1, 1)
OWNER = "flowctl"


def _default_args() -> dict[str, object]:
    return {"owner": OWNER, "retries": 0, "retry_delay": timedelta(seconds=30)}


def powers_of_two(lo: int, hi: int) -> list[int]:
    """The allowed parallelisms: powers of two within ``[lo, hi]``."""
    out, p = [], 1
    while p <= hi:
        if p >= lo:
            out.append(p)
        p <<= 1
    return out


def ingest_dag(config: PipelineConfig) -> DAG:
    with DAG(
        dag_id=f"ingest_{config.name}",
        description=f"Load text into Kafka topic {config.eden_topic}",
        doc_md=(
            f"Loads lines into `{config.eden_topic}`: `source=synthetic` generates "
            "`lines` lines of seeded Zipf text (the same seed gives the same text); "
            "`source=file` loads the text file at `path` (on the worker)."
        ),
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["flowctl", config.name, "ingest"],
        default_args=_default_args(),
        params={
            "source": Param(
                "synthetic", enum=list(SOURCES), description="where the text comes from"
            ),
            "lines": Param(100_000, type="integer", minimum=1, description="synthetic lines"),
            "seed": Param(7, type="integer", description="seed of the synthetic text"),
            "path": Param("", type="string", description="text file for source=file"),
        },
    ) as dag:
        IngestOperator(
            task_id="produce",
            pipeline=config.name,
            source="{{ params.source }}",
            lines="{{ params.lines }}",
            seed="{{ params.seed }}",
            path="{{ params.path }}",
        )
    return dag


def stream_dag(config: PipelineConfig) -> DAG:
    allowed = powers_of_two(config.min_parallelism, config.max_parallelism)
    with DAG(
        dag_id=f"stream_{config.name}",
        description=f"The {config.name} topology: reads {config.eden_topic} until stopped",
        doc_md=(
            "Runs the pipeline's streaming topology until a `stop` signal "
            f"(`flowctl stream stop <topology id>`). Parallelism: one of {allowed}."
        ),
        schedule=None,
        start_date=START,
        catchup=False,
        max_active_runs=2,  # blue and green side by side during a replacement
        tags=["flowctl", config.name, "stream"],
        default_args=_default_args(),
        params={
            "parallelism": Param(
                config.parallelism, type="integer", enum=allowed, description="number of lanes"
            ),
            "colour": Param("blue", enum=list(COLOURS), description="blue-green slot"),
        },
    ) as dag:
        FlowctlStreamOperator(
            task_id="topology",
            pipeline=config.name,
            colour="{{ params.colour }}",
            parallelism="{{ params.parallelism }}",
        )
    return dag


def pipeline_dags(config: PipelineConfig) -> list[DAG]:
    """All DAGs of one pipeline."""
    return [ingest_dag(config), stream_dag(config)]


def all_pipeline_dags(config_dir: Path | None = None) -> list[DAG]:
    """The DAGs of every pipeline config in ``config_dir`` (default include/pipelines)."""
    from flowctl.pipelines.config import PIPELINES_DIR, load_pipeline_config

    directory = config_dir or PIPELINES_DIR
    dags: list[DAG] = []
    for path in sorted(directory.glob("*.toml")):
        dags.extend(pipeline_dags(load_pipeline_config(path)))
    return dags
