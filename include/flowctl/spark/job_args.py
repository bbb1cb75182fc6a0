"""The stream job's command line: its options, checked, and the default topology id.

:mod:`flowctl.spark.job` re-exports these names (the baseline job and the entry point
import them from there).
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from flowctl.core.validation import (
    InvalidValue,
    argparse_type,
    integer_from_text,
    number_from_text,
    parallelism,
)

COLOURS = ("blue", "green")
#: Seconds between two heartbeats of the driver (written by the control loop).
HEARTBEAT_EVERY_S = 1.0


@dataclass(frozen=True)
class JobArgs:
    """The parsed command line of a stream job."""

    pipeline_config: str
    topology_id: str | None
    colour: str
    parallelism: int | None
    airflow_run_id: str | None
    checkpoint_dir: str | None
    poll_seconds: float
    standby: bool = False
    warm_standby: bool = False


#: ``type=`` of an option that is a count >= 1 (the baseline job shares it).
_positive_int = argparse_type(lambda field, text: integer_from_text(field, text, lo=1))
#: ``type=`` of an option that is a finite number of seconds > 0.
_positive_float = argparse_type(
    lambda field, text: number_from_text(field, text, lo=0, lo_open=True)
)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The job's options; ``prog`` defaults to the script actually run (``stream.py``, ...)."""
    parser = argparse.ArgumentParser(
        prog=prog or os.path.basename(sys.argv[0]) or "stream.py",
        description="Run a flowctl stream topology until a stop signal arrives.",
    )
    parser.add_argument(
        "--pipeline-config",
        default="wordcount",
        help="pipeline name (include/pipelines/<name>.toml) or path to a config file",
    )
    parser.add_argument(
        "--topology-id", help="unique id of this run (default <pipeline>-<colour>-<utc time>)"
    )
    parser.add_argument("--colour", choices=COLOURS, default="blue")
    parser.add_argument(
        "--parallelism", type=_positive_int, help="lanes (default: the config's parallelism)"
    )
    parser.add_argument("--airflow-run-id", help="the Airflow DAG run that started this topology")
    parser.add_argument(
        "--checkpoint-dir",
        help="Spark checkpoint location (default $FLOWCTL_HOME/checkpoints/<topology id>)",
    )
    parser.add_argument(
        "--poll-seconds",
        type=_positive_float,
        default=0.1,
        help=(
            "how often to check control signals and run the control loop (default 0.1: a "
            "signal's delay is part of a replacement's output pause); the heartbeat is "
            f"written at most every {HEARTBEAT_EVERY_S:g} s"
        ),
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="start READY and admit nothing until an activate signal (a blue-green green)",
    )
    parser.add_argument(
        "--warm-standby",
        action="store_true",
        help=(
            "a standby started ahead of any replacement (implies --standby): it may start "
            "beside the ACTIVE topology, and the next replacement of the pipeline takes it "
            "instead of starting a green, with its parallelism given at activation"
        ),
    )
    return parser


def parse_args(argv: Sequence[str] | None = None) -> JobArgs:
    """The command line, checked: argparse's errors (exit 2) name the script and the option."""
    from flowctl.pipelines.config import PipelineConfigError, load_pipeline_config

    parser = build_parser()
    ns = parser.parse_args(argv)
    # --parallelism must be one the DAGs offer (the rule of the stream DAG's form and the
    # replace operator): a power of two within the config's bounds. A config that cannot
    # be loaded is left to the job, which names the file; the power of two holds anyway.
    if ns.parallelism is not None:
        bounds: tuple[int, ...] = ()
        try:
            config = load_pipeline_config(ns.pipeline_config)
            bounds = (config.min_parallelism, config.max_parallelism)
        except PipelineConfigError:
            pass
        where = f"of {config.source}" if bounds else ""
        try:
            parallelism("--parallelism", ns.parallelism, *bounds, where=where)
        except InvalidValue as exc:
            parser.error(str(exc))
    return JobArgs(
        pipeline_config=ns.pipeline_config,
        topology_id=ns.topology_id,
        colour=ns.colour,
        parallelism=ns.parallelism,
        airflow_run_id=ns.airflow_run_id,
        checkpoint_dir=ns.checkpoint_dir,
        poll_seconds=ns.poll_seconds,
        standby=ns.standby or ns.warm_standby,
        warm_standby=ns.warm_standby,
    )


def default_topology_id(pipeline: str, colour: str, now: dt.datetime | None = None) -> str:
    """``<pipeline>-<colour>-<UTC yyyymmddThhmmssffffff>``: unique per start, sortable."""
    now = now or dt.datetime.now(dt.UTC)
    return f"{pipeline}-{colour}-{now.strftime('%Y%m%dT%H%M%S%f')}"
