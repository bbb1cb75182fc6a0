"""Build every DAG of a pipeline from its config file (``include/pipelines/<name>.toml``).

A new pipeline is one config file (plus its definition module): the DAG file
``dags/pipelines.py`` calls :func:`all_pipeline_dags`, which builds, per
pipeline:

- ``ingest_<name>``: load demo text (seeded Zipf) or a file into ``<name>.eden``;
- ``stream_<name>``: the long-running topology (no schedule; Params
  ``parallelism`` and ``colour``; ``standby``, ``replaces`` and ``topology_id``
  are set by a replacement for its green). Two runs may be active at once:
  blue and green during a replacement. Its task retries
  (:data:`STREAM_TASK_RETRIES`): a retry reattaches to the topology a dead worker
  left running;
- ``autoscale_<name>``: on ``[scaling] schedule``, the failure-window sensor
  decides (SPEC E) and the blue-green replace operator applies the decision;
  one run at a time;
- ``rescale_<name>``: the same replacement by hand (Params ``change``: up,
  down or a parallelism; and ``reason``); both replace DAGs start the next warm
  standby after one that took the pipeline's standby (Param ``start_next_standby``);
- ``reconcile_<name>``: a PySpark batch job recomputing the results from the
  durable Kafka log and comparing them with the database; fails on a mismatch.

A run's conf may hold only its DAG's Params: the first task of each DAG refuses any
other key at once, naming it and the accepted keys (:mod:`.run_conf`).

Each pipeline's DAGs are built on their own: a config that does not load (a
wrong type, an unknown key) costs only its own DAGs. In their place comes one
``invalid_pipeline_<file>`` DAG whose description and docs name the file, the
field and the value (and whose only task fails with that message), so the
mistake is visible in the DAG list while every other pipeline keeps running.

DAG construction is cheap: no connection, broker or database is touched at
parse time. The configs are read from ``include/pipelines/``, or from the
directory named by ``FLOWCTL_PIPELINES_DIR`` (experiments, tests); every task
is given its config file's path, so the DAGs, the sensor, the operators and
the Spark jobs all read the same file.
"""

from __future__ import annotations

import logging
import os
import re
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from airflow.sdk import DAG, BaseOperator, Param
from airflow.sdk.exceptions import AirflowFailException

from flowctl.core.validation import allowed_parallelisms
from flowctl.ingest import INGEST_FIELDS, INGEST_PARAMS
from flowctl_airflow.operators.blue_green import BlueGreenReplaceOperator
from flowctl_airflow.operators.ingest import IngestOperator
from flowctl_airflow.operators.reconcile import FlowctlReconcileOperator
from flowctl_airflow.operators.rescale import RescaleOperator, change_choices, change_labels
from flowctl_airflow.operators.stream import COLOURS, FlowctlStreamOperator
from flowctl_airflow.sensors.failure_window import FailureRateWindowSensor

if TYPE_CHECKING:
    from airflow.sdk import Context

    from flowctl.pipelines.config import PipelineConfig

log = logging.getLogger(__name__)

START = datetime(2026, 1, 1)
OWNER = "flowctl"
#: When ``reconcile_<name>`` runs: hourly; a check, not part of the data path.
RECONCILE_SCHEDULE = "@hourly"
#: Environment variable naming another directory of pipeline configs.
PIPELINES_DIR_ENV = "FLOWCTL_PIPELINES_DIR"
#: Tries after the first of a stream task: a try whose task runner or worker died
#: reattaches to its running topology (docs/operations.md, "A stream task's worker
#: dies"); each such death costs one. The topology keeps running meanwhile.
STREAM_TASK_RETRIES = 3
#: Seconds before a stream task's retry; the topology does not wait for it.
STREAM_TASK_RETRY_DELAY = timedelta(seconds=10)


def _default_args() -> dict[str, object]:
    return {"owner": OWNER, "retries": 0, "retry_delay": timedelta(seconds=30)}


def _pipeline_dag(
    config: PipelineConfig,
    kind: str,
    *,
    description: str,
    doc_md: str,
    schedule: str | None = None,
    max_active_runs: int | None = 1,
    params: dict[str, Param] | None = None,
    paused: bool = True,
) -> DAG:
    """``<kind>_<pipeline>``: what every generated DAG shares (start, no catchup, tags).

    ``paused=False``: the DAG is unpaused when Airflow first stores it. For the DAGs
    without a schedule (ingest, stream, rescale) being unpaused starts nothing by
    itself, and a run triggered from the form starts at once: a paused one made the
    UI unpause it first, and a failed unpause left the run queued behind a paused
    DAG while the UI said "triggered". The scheduled DAGs (autoscale, reconcile) act
    on their own, so they start paused: a person turns them on.
    """
    extra: dict[str, object] = (
        {} if max_active_runs is None else {"max_active_runs": max_active_runs}
    )
    return DAG(
        dag_id=f"{kind}_{config.name}",
        description=description,
        doc_md=doc_md,
        schedule=schedule,
        start_date=START,
        catchup=False,
        tags=["flowctl", config.name, kind],
        default_args=_default_args(),
        params=params or {},
        is_paused_upon_creation=paused,
        **extra,
    )


def ingest_dag(config: PipelineConfig) -> DAG:
    with _pipeline_dag(
        config,
        "ingest",
        description=f"Load text into Kafka topic {config.eden_topic}",
        doc_md=(
            f"Loads lines into `{config.eden_topic}`: `source=synthetic` generates "
            "`lines` lines of the pipeline's seeded demo data (the same seed gives the same "
            "lines); `source=file` loads the file at `path` (on the worker), one record per "
            "line, the bytes as they are (`skip_empty` leaves out empty lines). `compression` "
            "picks the record batches' codec (empty: the pipeline's `topics.compression`). "
            "The form can be triggered as it is: synthetic data needs nothing else."
        ),
        max_active_runs=None,
        paused=False,
        params={
            p.name: Param(
                p.default,
                title=p.title,
                description=p.description,
                **({"section": p.section} if p.section else {}),
                **p.schema,
            )
            for p in INGEST_PARAMS
        },
    ) as dag:
        IngestOperator(
            task_id="produce",
            pipeline=config.name,
            # an empty form field (null) renders as '', which the request reads as unset
            **{
                name: f"{{{{ params.{name} if params.{name} is not none else '' }}}}"
                for name in INGEST_FIELDS
            },
        )
    return dag


def stream_dag(config: PipelineConfig) -> DAG:
    allowed = allowed_parallelisms(config.min_parallelism, config.max_parallelism)
    with _pipeline_dag(
        config,
        "stream",
        description=f"The {config.name} topology: reads {config.eden_topic} until stopped",
        doc_md=(
            "Runs the pipeline's streaming topology until a `stop` signal "
            f"(`flowctl stream stop <topology id>`). Parallelism: one of {allowed}."
        ),
        max_active_runs=2,  # blue and green side by side during a replacement
        paused=False,
        params={
            "parallelism": Param(
                config.parallelism,
                type="integer",
                enum=allowed,
                title="Parallelism",
                description="number of lanes",
            ),
            "colour": Param(
                "blue", enum=list(COLOURS), title="Colour", description="blue-green slot"
            ),
            "standby": Param(
                False,
                type="boolean",
                title="Standby",
                description="start READY and admit nothing until activated: a replacement's "
                "green (set by the replace operator), or, without Replaces, a warm standby "
                "the next replacement takes instead of starting green",
            ),
            # Optional text is typed ["null", "string"]: the form does not require it.
            "replaces": Param(
                None,
                type=["null", "string"],
                title="Replaces",
                description="the topology a standby green will replace (set by a replacement)",
            ),
            "topology_id": Param(
                None,
                type=["null", "string"],
                title="Topology id",
                description="id in the control plane (empty: derived from colour and run)",
            ),
        },
    ) as dag:
        FlowctlStreamOperator(
            task_id="topology",
            pipeline=config.name,
            pipeline_config=str(config.source),
            colour="{{ params.colour }}",
            parallelism="{{ params.parallelism }}",
            standby="{{ params.standby }}",
            replaces="{{ params.replaces or '' }}",
            topology_id="{{ params.topology_id or '' }}",
            retries=STREAM_TASK_RETRIES,
            retry_delay=STREAM_TASK_RETRY_DELAY,
        )
    return dag


def _next_standby_param() -> Param:
    """The replace DAGs' opt-out of starting the next warm standby after taking one."""
    return Param(
        True,
        type="boolean",
        title="Start the next standby",
        description="when the replacement took a warm standby as green, start the next one "
        "(a stream run with Standby on) once blue is stopped, so the pipeline keeps one; "
        "nothing is started when green was started cold or a standby exists already",
    )


def autoscale_dag(config: PipelineConfig) -> DAG:
    s = config.scaling
    with _pipeline_dag(
        config,
        "autoscale",
        description=f"Rescale {config.name} from its failure-rate windows ({s.policy} policy)",
        doc_md=(
            f"Every run, `decide` reads the last {s.history_windows} metrics windows of the "
            f"ACTIVE `{config.name}` topology, computes E(M) and the weighted S^2 of their "
            f"failure counts and applies the `{s.policy}` policy (C={s.threshold_c:g}, "
            f"parallelism {config.min_parallelism}..{config.max_parallelism}, cooldown "
            f"{s.cooldown_s:g} s after a replacement). With no decision within "
            f"{s.sensor_timeout_s:g} s the run is skipped; with one, `replace` runs the "
            "blue-green replacement (docs/flow-control.md). Settings: `[scaling]` of "
            f"`{config.source.name}`. If it took a warm standby as green it starts the next "
            "one (`start_next_standby`, on by default)."
        ),
        schedule=s.schedule,
        params={"start_next_standby": _next_standby_param()},
    ) as dag:
        decide = FailureRateWindowSensor(
            task_id="decide",
            pipeline=config.name,
            pipeline_config=str(config.source),
            policy=s.policy,
            history_windows=s.history_windows,
            threshold_c=s.threshold_c,
            cooldown_s=s.cooldown_s,
            poke_interval=s.poke_interval_s,
            timeout=s.sensor_timeout_s,
            soft_fail=True,
            mode="reschedule",
        )
        replace = BlueGreenReplaceOperator(
            task_id="replace",
            pipeline=config.name,
            pipeline_config=str(config.source),
            decision=decide.output,
            blue_topology_id="{{ ti.xcom_pull(task_ids='decide', key='topology_id') }}",
            ready_timeout_s=s.ready_timeout_s,
            drain_timeout_s=s.drain_timeout_s,
            handover=s.handover,
            stop_timeout_s=s.stop_timeout_s,
            start_next_standby="{{ params.start_next_standby }}",
        )
        decide >> replace
    return dag


def rescale_dag(config: PipelineConfig) -> DAG:
    lo, hi = config.min_parallelism, config.max_parallelism
    allowed = allowed_parallelisms(lo, hi)
    with _pipeline_dag(
        config,
        "rescale",
        description=f"Replace the {config.name} topology blue-green with another parallelism",
        doc_md=(
            "Choose the `change`: `up` doubles, `down` halves the ACTIVE topology's lanes, "
            f"or a number of lanes (one of {allowed}); and give a `reason` (stored with the "
            "replacement event). The replacement is blue-green (docs/flow-control.md); "
            "it is refused while another replacement of the pipeline runs. If it took the "
            "pipeline's warm standby as green, it starts the next one once blue is stopped "
            "(`start_next_standby`)."
        ),
        paused=False,
        params={
            # One field, so no two fields can contradict each other: the form offers only
            # the allowed values (enum), the REST API and the CLI are refused anything else.
            # change and reason default to null (a type with "null"): the form shows no
            # "This field is required" before they are touched, and a conf without them (the
            # old form's direction/target_parallelism) reaches the operator, which names the
            # field and its values (Airflow refused it at trigger with "No value passed").
            "change": Param(
                None,
                type=["null", "string", "integer"],
                enum=[None, *change_choices(lo, hi)],
                values_display=change_labels(lo, hi),
                title="Change",
                description="up doubles, down halves the ACTIVE topology's lanes; a number "
                f"sets them (one of {allowed}); required",
            ),
            "reason": Param(
                None,
                type=["null", "string"],
                minLength=1,
                title="Reason",
                description="why (required; kept with the replacement event)",
            ),
            "start_next_standby": _next_standby_param(),
        },
    ) as dag:
        RescaleOperator(
            task_id="replace",
            pipeline=config.name,
            pipeline_config=str(config.source),
            change="{{ params.change if params.change is not none else '' }}",
            reason="{{ params.reason if params.reason is not none else '' }}",
            ready_timeout_s=config.scaling.ready_timeout_s,
            drain_timeout_s=config.scaling.drain_timeout_s,
            handover=config.scaling.handover,
            stop_timeout_s=config.scaling.stop_timeout_s,
            start_next_standby="{{ params.start_next_standby }}",
        )
    return dag


def reconcile_dag(config: PipelineConfig) -> DAG:
    with _pipeline_dag(
        config,
        "reconcile",
        description=f"Check {config.name}'s stored results against its durable Kafka log",
        doc_md=(
            "A PySpark batch job reads the pipeline's Kafka log up to the durable checkpoint, "
            "computes the definition's reference and compares it with what the database "
            "stores; the task fails with the first differing keys on any mismatch. Only "
            "durable input counts (a running stream causes no false alarm); dead-lettered "
            "records and records waiting in a replay topic are excluded and reported."
        ),
        schedule=RECONCILE_SCHEDULE,
        params={
            "max_differences": Param(
                20,
                type="integer",
                minimum=1,
                title="Max differences",
                description="differing keys to report",
            ),
        },
    ) as dag:
        FlowctlReconcileOperator(
            task_id="reconcile",
            pipeline=config.name,
            pipeline_config=str(config.source),
            max_differences="{{ params.max_differences }}",
        )
    return dag


def pipeline_dags(config: PipelineConfig) -> list[DAG]:
    """All DAGs of one pipeline."""
    return [
        ingest_dag(config),
        stream_dag(config),
        autoscale_dag(config),
        rescale_dag(config),
        reconcile_dag(config),
    ]


class InvalidPipelineConfigOperator(BaseOperator):
    """Fails with the reason a pipeline's config does not load (the invalid-config DAG's task).

    :param message: the config error, naming the file, the field and the value.
    """

    ui_color = "#ffd6d6"

    def __init__(self, *, message: str, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.message = message

    def execute(self, context: Context) -> None:
        raise AirflowFailException(self.message)


def invalid_pipeline_dag(path: Path, error: BaseException) -> DAG:
    """``invalid_pipeline_<file>``: what a config that does not load shows in the DAG list."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", path.stem) or "config"
    message = f"{type(error).__name__}: {error}"
    if str(path) not in message:
        message = f"{path}: {message}"
    with DAG(
        dag_id=f"invalid_pipeline_{stem}",
        description=f"INVALID pipeline config (its DAGs are not built): {message}"[:1000],
        doc_md=(
            f"The pipeline config `{path}` does not load, so none of its DAGs exist. "
            f"Every other pipeline's DAGs are unaffected.\n\n```\n{message}\n```\n\n"
            "Fix the file; the DAG processor rebuilds the pipeline's DAGs on its next parse."
        ),
        schedule=None,
        start_date=START,
        catchup=False,
        tags=["flowctl", "invalid-config"],
        default_args=_default_args(),
    ) as dag:
        InvalidPipelineConfigOperator(task_id="report", message=message)
    return dag


def all_pipeline_dags(config_dir: Path | None = None) -> list[DAG]:
    """The DAGs of every pipeline config in ``config_dir``, each pipeline on its own.

    Default: ``$FLOWCTL_PIPELINES_DIR`` if set, else ``include/pipelines``. A config that
    does not load (or whose DAGs cannot be built) gives its :func:`invalid_pipeline_dag`
    and an error in the DAG processor's log instead; the other pipelines are unaffected.
    """
    from flowctl.pipelines.config import PIPELINES_DIR, load_pipeline_config

    env_dir = os.environ.get(PIPELINES_DIR_ENV)
    directory = config_dir or (Path(env_dir) if env_dir else PIPELINES_DIR)
    dags: list[DAG] = []
    for path in sorted(directory.glob("*.toml")):
        try:
            built = pipeline_dags(load_pipeline_config(path))
        except Exception as exc:  # one broken pipeline must not take the others down
            log.error("pipeline config %s: its DAGs are not built: %s", path, exc)
            built = [invalid_pipeline_dag(path, exc)]
        dags.extend(built)
    return dags
